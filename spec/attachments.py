"""Attachments: the pure rules both implementations share (SEMANTICS.md §18).

CouchDB's ``couch_att`` and ``couch_doc:merge_stubs``, without storage: what an
``_attachments`` member may hold (:func:`validate_attachments`), how a new
revision's attachments follow from it and from the previous revision's
(:func:`resolve`), the digest CouchDB gives bytes (:func:`digest_of`), what a
revision id digests of them (:func:`rev_digests`), how a read renders them
(:func:`render`), which ones ``atts_since`` sends whole (:func:`since_position`)
and how bytes are cut into chunk terms (:func:`chunked`). Storage is each
side's own: chunk terms in the engine (FORMAT.md "Attachments"), bytes in memory
and in the log in the reference.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

from settee.spec.errors import BadRequest
from settee.spec.revs import MAX_REV_POS, check_rev, is_valid_rev, rev_pos
from settee.spec.revtree import path_to_root
from settee.spec.spool import Spooled, spool_file
from settee.spec.values import (
    describe,
    is_a,
    is_dict,
    is_sequence,
    plain_bytes,
    plain_dict,
    plain_items,
    plain_str,
)

__all__ = [
    "CHUNK_SIZE",
    "DEFAULT_CONTENT_TYPE",
    "Inline",
    "MissingStub",
    "Stored",
    "Stub",
    "as_bytes",
    "attachment_answer",
    "check_atts_since",
    "chunked",
    "digest_of",
    "length_of",
    "pieces",
    "render",
    "resolve",
    "rev_digests",
    "since_position",
    "validate_attachment_name",
    "validate_attachments",
]

DEFAULT_CONTENT_TYPE = "application/octet-stream"
#: The most bytes one chunk term holds (FORMAT.md "Attachments").
CHUNK_SIZE = 65_536


class MissingStub(BadRequest):
    """A stub names an attachment the previous revision does not have (HTTP 412)."""

    error = "missing_stub"


@dataclass(frozen=True, slots=True)
class Inline:
    """New bytes for attachment ``name``; ``revpos`` as the sender gave it, if any.
    ``data`` is the bytes, or a ``Spooled`` file of them when they came as a stream."""

    name: str
    content_type: str
    data: bytes | Spooled
    revpos: int | None = None


@dataclass(frozen=True, slots=True)
class Stub:
    """Keep attachment ``name`` of the previous revision (``revpos``: must match)."""

    name: str
    revpos: int | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    """An attachment as a revision holds it; ``where`` is the store's own (chunk
    pointers in the engine, the bytes in the reference) and takes no part in
    comparisons."""

    name: str
    content_type: str
    length: int
    digest: str
    revpos: int
    where: Any = None

    def same_as(self, other: Stored) -> bool:
        return (self.name, self.content_type, self.length, self.digest, self.revpos) == (
            other.name,
            other.content_type,
            other.length,
            other.digest,
            other.revpos,
        )


def digest_of(data: bytes | Spooled) -> str:
    """CouchDB's attachment digest: ``"md5-"`` and the base64 of the md5 (a
    ``Spooled`` counted it as it was written).

    post: __return__.startswith("md5-") and len(__return__) == 28
    """
    if isinstance(data, Spooled):
        return data.digest
    return "md5-" + base64.b64encode(hashlib.md5(data).digest()).decode("ascii")


def length_of(data: bytes | Spooled) -> int:
    """How many bytes ``data`` holds."""
    return data.length if isinstance(data, Spooled) else len(data)


def pieces(data: bytes | Spooled) -> Iterator[bytes]:
    """``data`` as chunk terms' payloads, read one at a time (``chunked``'s pieces)."""
    if isinstance(data, Spooled):
        yielded = False
        for piece in data.chunks(CHUNK_SIZE):
            yielded = True
            yield piece
        if not yielded:
            yield b""
    else:
        yield from chunked(data)


def as_bytes(data: bytes | Spooled) -> bytes:
    """All of ``data`` in memory (the reference model keeps attachments so)."""
    return data.read() if isinstance(data, Spooled) else data


def validate_attachment_name(name: object) -> str:
    """``name`` as a plain str if CouchDB accepts it, else BadRequest."""
    if not is_a(name, str) or not plain_str(name):
        raise BadRequest(f"attachment name {describe(name)} is not a non-empty str")
    text = plain_str(name)
    if text.startswith("_"):
        raise BadRequest(f"Attachment name '{text}' starts with prohibited character '_'")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("Attachment name is not UTF-8 encoded") from None
    return text


def validate_attachments(value: object) -> tuple[Inline | Stub, ...]:
    """The attachments a document's ``_attachments`` member describes, in its order."""
    # Not a dict by __class__ only; is_dict first (docs.validate_docid says why).
    if not (is_dict(value) and isinstance(value, dict)):
        raise BadRequest(
            f"_attachments must be a dict of name -> attachment, not {describe(value)}"
        )
    found: dict[str, Inline | Stub] = {}
    # A dict subclass is read as its storage (SEMANTICS.md §15.1), not through
    # overrides that may lie about it (found in review: an items() of triples); and
    # read once, up front: a file's read below runs the caller's code, which may
    # change the dict (walking it then was a raw RuntimeError).
    for raw_name, att in plain_dict(value).items():
        name = validate_attachment_name(raw_name)
        if not is_dict(att):
            raise BadRequest(f"attachment {name!r} must be a dict, not {describe(att)}")
        # Two keys may read as one name (a str subclass hashes as it likes): the later
        # wins, in the earlier's place, as for any key of a document.
        found[name] = _one(name, plain_dict(att))
    return tuple(found.values())


def _one(name: str, att: dict[Any, Any]) -> Inline | Stub:
    revpos = att.get("revpos")
    if revpos is not None and (type(revpos) is not int or not 1 <= revpos <= MAX_REV_POS):
        # Positions fit a signed 64-bit integer, as revisions' do (found in review:
        # 2**64 failed in the shard writer, a raw OverflowError in the reference).
        raise BadRequest(
            f"attachment {name!r}: revpos {describe(revpos)} is not an int from 1 to {MAX_REV_POS}"
        )
    if att.get("stub") is True:
        return Stub(name, revpos)
    if att.get("follows") is True:
        raise BadRequest(
            f"attachment {name!r} says follows: its bytes come in a multipart request body, "
            "which only settee serve reads; give them inline as base64 data"
        )
    content_type = att.get("content_type", DEFAULT_CONTENT_TYPE)
    if not is_a(content_type, str):
        raise BadRequest(f"attachment {name!r}: content_type {describe(content_type)} is not a str")
    if not _header_safe(plain_str(content_type)):
        # It is sent back as a Content-Type header, which cannot hold these.
        raise BadRequest(
            f"attachment {name!r}: content_type holds a control character or is not UTF-8"
        )
    data = att.get("data")
    if issubclass(type(data), bytes | bytearray | memoryview):
        # The embedded API may hand the bytes themselves (no base64 round trip).
        return Inline(name, plain_str(content_type), _bytes_of(name, data), revpos)
    # Not a subclass: it could lie. Its type, not isinstance, which may ask for __class__.
    if type(data) is Spooled:
        spooled = cast(Spooled, data)
        if spooled.closed:
            raise BadRequest(f"attachment {name!r}: its spooled data was closed")
        return Inline(name, plain_str(content_type), spooled, revpos)
    if not is_a(data, str) and _has_read(name, data):
        # A binary file: spooled now, so the caller may close or change it after.
        return Inline(name, plain_str(content_type), spool_file(data), revpos)
    if not is_a(data, str):
        raise BadRequest(
            f"attachment {name!r} has no data: give base64 data (or bytes, or a binary "
            "file), or stub: true to keep the previous revision's"
        )
    try:
        # The str's own content: a subclass's encode() may say anything (found in review).
        # Erlang's base64:decode skips whitespace, so CouchDB takes line-wrapped
        # base64 (Python's base64.encodebytes, MIME tools); any other stray byte is
        # refused.
        text = plain_str(data).translate(_BASE64_WHITESPACE)
        if len(text) % 4 or text.endswith("==="):
            # Python's decoder takes a stray '=' after whole groups ('YWJj='); Erlang's,
            # and so couch_att:inline_from_json, refuses it (attachments_test.exs).
            raise ValueError("not whole groups of four")
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        # couch_att:inline_from_json's words exactly, so a client comparing CouchDB's
        # reason finds it.
        raise BadRequest(f"Invalid attachment data for {name}") from None
    return Inline(name, plain_str(content_type), raw, revpos)


def _has_read(name: str, data: Any) -> bool:
    """Whether ``data`` has a ``read`` method. Looking it up runs the caller's code (a
    lazy proxy's ``__getattr__``, a property): if that fails, it is BadRequest, as a
    ``read`` that fails is."""
    try:
        return callable(getattr(data, "read", None))
    except Exception as exc:
        raise BadRequest(
            f"attachment {name!r}: looking up read on {describe(data)} failed: {describe(exc)}"
        ) from None


#: What base64 data may hold between its characters: space, tab, CR, LF.
_BASE64_WHITESPACE = dict.fromkeys(map(ord, " \t\r\n"))


def _header_safe(text: str) -> bool:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def resolve(
    doc_id: str,
    attachments: Sequence[Inline | Stub],
    previous: Sequence[Stored] | None,
    position: int,
    *,
    new_edits: bool,
) -> list[Stored | Inline]:
    """A new revision's attachments: stubs replaced by the previous revision's
    records (``MissingStub`` if absent or at another revpos), inline ones given
    their revpos. ``position`` is the new revision's; ``previous`` is None when
    the document has no previous revision to take stubs from."""
    on_disk = {att.name: att for att in previous or ()}
    resolved: list[Stored | Inline] = []
    for att in attachments:
        if isinstance(att, Stub):
            # No previous revision is an empty one: couch_db merges a new document's
            # stubs against #doc{} (prep_and_validate_updates), never nil, so the
            # reason names the stub.
            kept = on_disk.get(att.name)
            if kept is None or (att.revpos is not None and att.revpos != kept.revpos):
                raise MissingStub(f"Invalid attachment stub in {doc_id} for {att.name}")
            resolved.append(kept)
        else:
            revpos = position if new_edits or att.revpos is None else att.revpos
            resolved.append(Inline(att.name, att.content_type, att.data, revpos))
    return resolved


def rev_digests(attachments: Iterable[Stored | Inline]) -> list[list[str]]:
    """What a revision id digests of its attachments: ``[name, content type,
    digest]`` each, in the document's order (``couch_db:new_revid``)."""
    return [
        [att.name, att.content_type, att.digest if isinstance(att, Stored) else digest_of(att.data)]
        for att in attachments
    ]


def since_position(tree: dict[str, Any], rev: str, atts_since: Iterable[str]) -> int:
    """``atts_since`` for the revision ``rev`` of ``tree``: the position of the newest
    revision on ``rev``'s own path (``rev`` itself, then its ancestors down to the
    stemmed root) that ``atts_since`` names, 0 when it names none; attachments at or
    below it are sent as stubs. Revisions on other branches, descendants of ``rev``
    and ones the tree does not hold count for nothing (``couch_db``'s
    ``find_ancestor_rev_pos``: the sender holds those attachments only if it holds
    an ancestor of what it asks for). A ``rev`` the tree no longer holds (stemmed
    or compacted away since it was read) names nothing: 0.
    """
    if rev not in tree:
        return 0
    named = {since for since in atts_since if is_valid_rev(since)}
    for ancestor in path_to_root(tree, rev):
        if ancestor in named:
            return rev_pos(ancestor)
    return 0


def render(stored: Stored, data: bytes | None) -> dict[str, Any]:
    """An attachment as a read returns it: a stub, or with ``data`` (base64)."""
    out: dict[str, Any] = {
        "content_type": stored.content_type,
        "revpos": stored.revpos,
        "digest": stored.digest,
    }
    if data is None:
        out["length"] = stored.length
        out["stub"] = True
    else:
        out["data"] = base64.b64encode(data).decode("ascii")
    return out


def chunked(data: bytes) -> list[bytes]:
    """``data`` cut into chunk terms' payloads (one empty chunk for no bytes).

    post: b"".join(__return__) == data
    post: all(1 <= len(c) <= CHUNK_SIZE for c in __return__) or data == b""
    """
    if not data:
        return [b""]
    return [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]


def attachment_answer(stored: Stored, data: bytes) -> dict[str, Any]:
    """What ``attachment(id, name, rev)`` returns."""
    return {
        "content_type": stored.content_type,
        "revpos": stored.revpos,
        "digest": stored.digest,
        "length": stored.length,
        "data": data,
    }


def _bytes_of(name: str, data: Any) -> bytes:
    """A copy of bytes-like attachment ``data``, read from its storage; BadRequest when
    it cannot be read (a released memoryview: a raw ValueError, found in review)."""
    try:
        return plain_bytes(data)
    except ValueError as exc:
        raise BadRequest(f"attachment {name!r}: its data cannot be read ({exc})") from None


def check_atts_since(value: object) -> list[str] | None:
    """``atts_since`` as a list of revisions (None: not given); BadRequest otherwise."""
    if value is None:
        return None
    if not is_sequence(value):
        raise BadRequest(f"atts_since must be a list of revisions, not {describe(value)}")
    return [check_rev(rev) for rev in plain_items(value)]

"""Validation and normalisation of incoming documents, and the doc shape readers return.

Both implementations call :func:`validate_doc` before touching storage, so
they accept, reject and store exactly the same documents. The rules follow
``couch_doc:from_json_obj/1`` (``transfer_fields``) and
``couch_doc:validate_docid/1``:

* the document is a dict with an ``_id`` that is a non-empty str (or none at
  all, when the caller asks for a generated one: ``_bulk_docs``); ids that
  start with ``_`` are refused except ``_design/<name>`` (``_local/`` docs are
  out of scope), ``"_design/"`` alone is refused as in CouchDB, and ids must
  be encodable as UTF-8 (no lone surrogates);
* ``_``-fields: ``_id``, ``_rev``, ``_deleted`` (a bool), ``_revisions``
  (``{"start": int, "ids": [hash, ...]}``) are read; ``_conflicts``,
  ``_deleted_conflicts``, ``_revs_info`` and ``_local_seq`` are dropped, as
  CouchDB ignores them on input (they appear on output, so a read-modify-write
  round trip works); ``_access`` and the replicator's ``_replication_*``
  fields (``BODY_FIELDS``) are body members, as CouchDB keeps them in every
  database; anything else starting with ``_`` is refused, ``_attachments`` too;
* values must be JSON values msgpack can hold: dict with str keys, list or
  tuple (stored as list), str, int in [-2**63, 2**64), float except NaN and
  ±inf (JSON has no spelling for them; CouchDB's encoder refuses them), bool,
  None. bytes, sets and other objects are refused;
* every value a caller passes may be hostile (``str`` subclasses, 5,000-digit
  ints, nesting 100,000 deep): the body (the doc minus its ``_``-fields) is
  rebuilt in one iterative pass from exact builtins (``spec/values.py``), so
  what is stored, hashed and returned never depends on a caller's class; its
  msgpack size must not exceed ``max_document_size`` (CouchDB measures the
  JSON body; settee measures what it stores).

With ``new_edits=False`` the document must name its revision: ``_rev``, or
``_revisions`` (CouchDB accepts ``_revisions`` alone), and ``revisions`` is
the full path newest first. With ``new_edits=True`` ``revisions`` is the
parent path the caller named (``()`` for a new document); only its first
element matters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from settee.spec.attachments import Inline, Stub, validate_attachments
from settee.spec.config import DEFAULTS
from settee.spec.docids import new_docid
from settee.spec.errors import BadRequest
from settee.spec.format import encode_payload
from settee.spec.revs import MAX_HASH_LENGTH, MAX_REV_POS, check_rev, format_rev, is_valid_hash
from settee.spec.values import (
    describe,
    is_a,
    is_dict,
    is_int,
    is_sequence,
    plain_dict,
    plain_int,
    plain_items,
    plain_str,
)

__all__ = [
    "IGNORED_FIELDS",
    "READ_FIELDS",
    "ValidDoc",
    "normalise_body",
    "render_doc",
    "validate_doc",
    "validate_docid",
]

READ_FIELDS = frozenset({"_id", "_rev", "_deleted", "_revisions", "_attachments"})
IGNORED_FIELDS = frozenset({"_conflicts", "_deleted_conflicts", "_revs_info", "_local_seq"})
#: ``_``-fields CouchDB keeps as ordinary body members (couch_doc:transfer_fields):
#: the replicator's state fields and ``_access``, in every database.
BODY_FIELDS = frozenset(
    {
        "_access",
        "_replication_id",
        "_replication_state",
        "_replication_state_reason",
        "_replication_state_time",
        "_replication_stats",
    }
)
_MAX_DEPTH = 500  # msgpack's packer refuses deeper nesting (its limit is 511)
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


@dataclass(frozen=True, slots=True)
class ValidDoc:
    """A validated document, split into the parts storage needs.

    ``revisions`` is newest first: the path to store (``new_edits=False``)
    or the named parent and its claimed ancestors (``new_edits=True``; empty
    when no ``_rev`` was given). ``rev`` is ``revisions[0]`` or None.
    """

    id: str
    rev: str | None
    deleted: bool
    revisions: tuple[str, ...]
    body: dict[str, Any]
    #: ``body`` as msgpack bytes (what the engine stores), kept so it is packed once.
    encoded: bytes = field(default=b"", repr=False, compare=False)
    #: ``_attachments`` in document order (SEMANTICS.md §18): new bytes or stubs.
    attachments: tuple[Inline | Stub, ...] = ()


def validate_docid(docid: object) -> str:
    """``docid`` as a plain ``str`` if it is an acceptable document id, else BadRequest.

    raises: BadRequest
    post: __return__ == docid
    """
    if is_a(docid, str):
        docid = plain_str(docid)  # before any comparison: a subclass's __eq__ may lie
    # is_a refuses what only claims to be a str, and goes first: isinstance asks any
    # other object for its __class__, which may raise (a dead weakref.proxy). isinstance
    # then only narrows the type.
    if not (is_a(docid, str) and isinstance(docid, str)) or docid == "":
        raise BadRequest(
            f"document id {describe(docid)} is not a non-empty str: pass a str like 'doc-1'"
        )
    if docid.startswith("_") and (not docid.startswith("_design/") or docid == "_design/"):
        raise BadRequest(
            f"document id {describe(docid)} starts with '_': only '_design/<name>' ids may; "
            "rename the document"
        )
    _check_text(docid, "document id")
    return docid


def _check_text(text: str, where: str) -> None:
    if text.isascii():  # no allocation; nearly every id and value
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where} is not valid UTF-8 (lone surrogate): fix the text") from None


def _where(path: tuple[Any, ...]) -> str:
    """``doc['x'][0]`` for the path ``('x', 0)``; long paths are cut in the middle."""
    parts = [f"[{describe(step)}]" for step in path]
    if len(parts) > 8:
        parts = [*parts[:4], "...", *parts[-3:]]
    return "doc" + "".join(parts)


def _plain_scalar(value: Any, path: tuple[Any, ...], key: Any) -> Any:
    """A non-container value as an exact builtin, or BadRequest naming ``path + (key,)``.

    The exact builtins come first and build no message: a body's every value passes here.
    """
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_text(value, _where((*path, key)))
        return value
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise _too_big(value, (*path, key))
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _not_a_number(value, (*path, key))
        return value
    if value is None or value is True or value is False:
        return value
    return _plain_subclass_scalar(value, (*path, key))


def _too_big(number: int, path: tuple[Any, ...]) -> BadRequest:
    return BadRequest(
        f"{_where(path)} = {describe(number)} does not fit in 64 bits: store it as a str"
    )


def _not_a_number(real: float, path: tuple[Any, ...]) -> BadRequest:
    return BadRequest(f"{_where(path)} = {real} is not a JSON number: store null or a str")


def _plain_subclass_scalar(value: Any, path: tuple[Any, ...]) -> Any:
    """``_plain_scalar`` for subclasses of str/int/float, and the refusal of the rest."""
    if is_a(value, str):
        text = plain_str(value)
        _check_text(text, _where(path))
        return text
    if is_a(value, int):
        number = plain_int(value)
        if not _INT_MIN <= number <= _INT_MAX:
            raise _too_big(number, path)
        return number
    if is_a(value, float):
        real = float.__float__(value)
        if not math.isfinite(real):
            raise _not_a_number(real, path)
        return real
    raise BadRequest(
        f"{_where(path)} is a {type(value).__name__}, which JSON cannot hold: use dict, list, "
        "str, int, float, bool or None (e.g. base64-encode bytes, list a set)"
    )


def _plain_key(key: Any, path: tuple[Any, ...]) -> str:
    if type(key) is not str:
        if not is_a(key, str):
            raise BadRequest(
                f"{_where(path)} has key {describe(key)}: JSON object keys must be str"
            )
        key = plain_str(key)
    if not key.isascii():
        _check_text(key, f"{_where(path)} key")
    return key


def _plain_body(body: dict[str, Any], max_document_size: int) -> dict[str, Any]:
    """A fresh copy of ``body`` built only of exact builtins (tuples become lists,
    subclasses become their base), or BadRequest naming the first bad value.

    Iterative, so a value nested 100,000 deep is refused, not a RecursionError.
    A container met twice (shared references) first has the body's expanded size
    bounded (``_expanded_values``): nine nested ``[x] * 10`` are a few hundred
    objects describing 10**9 values, which the copy would expand (found in review).
    """
    out: dict[str, Any] = {}
    # (source container, target container, depth of its values, path to it)
    stack: list[tuple[Any, Any, int, tuple[Any, ...]]] = [(body, out, 1, ())]
    seen: set[int] | None = set()  # ids of the containers met; None once bounded
    while stack:
        source, target, depth, path = stack.pop()
        is_map = is_dict(source)
        # One read of the container's storage, at one instant: a subclass's __len__,
        # __iter__ or items() may lie or raise (a lying __len__ let values past the
        # depth limit through), and another thread may change it while it is walked
        # (a raw IndexError or RuntimeError, or None for items it dropped).
        items: Any
        if is_map:
            # plain_dict, inline for the common case: every dict of a body comes here.
            exact = type(source) is dict
            items = (dict.copy(source) if exact else plain_dict(source)).items()
        else:
            items = source if type(source) is tuple else plain_items(source)
            target.extend([None] * len(items))
        if depth > _MAX_DEPTH and items:
            raise BadRequest(
                f"{_where(path[:8])}... nests deeper than {_MAX_DEPTH} levels: flatten the document"
            )
        if seen is not None:
            if id(source) in seen:
                _bound_expanded_size(body, max_document_size)
                seen = None
            else:
                seen.add(id(source))
        for key, value in items if is_map else enumerate(items):
            if is_map and (type(key) is not str or not key.isascii()):
                key = _plain_key(key, path)
            # The exact builtins a JSON body is made of, checked inline: a Python
            # call per value was half of validating a document. Anything else
            # takes the general checks below, which decide exactly as before.
            kind = type(value)
            if (
                (kind is str and value.isascii())
                or (kind is int and _INT_MIN <= value <= _INT_MAX)
                or (kind is float and math.isfinite(value))
                or value is None
                or value is True
                or value is False
            ):
                target[key] = value
                continue
            if is_dict(value):
                child: Any = {}
                stack.append((value, child, depth + 1, (*path, key)))
            elif is_sequence(value):
                child = []  # filled when its items are read, above
                stack.append((value, child, depth + 1, (*path, key)))
            else:
                child = _plain_scalar(value, path, key)
            target[key] = child
    return out


def _bound_expanded_size(body: dict[str, Any], max_document_size: int) -> None:
    """BadRequest when ``body``, its shared containers counted at every place they
    appear, holds more values than ``max_document_size`` bytes could encode (each
    takes at least one). Linear in the distinct containers (each is summed once).
    A container inside itself is refused too: no JSON holds it."""
    sizes: dict[int, int | None] = {}  # id -> values below it; None while being summed
    # (container, its values once read: None on the first visit, which reads them)
    stack: list[tuple[Any, list[Any] | None]] = [(body, None)]
    while stack:
        node, values = stack.pop()
        if values is None:
            if id(node) in sizes:
                continue
            sizes[id(node)] = None
            values = _values_of(node)
            stack.append((node, values))
            stack.extend((v, None) for v in _containers(values) if id(v) not in sizes)
            continue
        below = [sizes.get(id(c)) for c in _containers(values)]
        if any(size is None for size in below):
            raise BadRequest("document body holds a list or dict inside itself: JSON cannot")
        size = len(values) + sum(below)  # type: ignore[arg-type]  # none is None
        sizes[id(node)] = min(size, max_document_size + 1)
    if (sizes[id(body)] or 0) > max_document_size:
        raise BadRequest(
            f"document body holds more than max_document_size={max_document_size} values "
            "once its shared lists and dicts are counted at every place they appear"
        )


def _containers(values: list[Any]) -> list[Any]:
    return [v for v in values if is_dict(v) or is_sequence(v)]


def _values_of(container: Any) -> list[Any]:
    """A dict's values or a list's or tuple's items, read from its storage."""
    if is_dict(container):
        return list(plain_dict(container).values())
    return plain_items(container)


def normalise_body(body: dict[str, Any], max_document_size: int) -> dict[str, Any]:
    """A fresh copy of ``body`` as it will be stored and returned (tuples become
    lists, str/int/float subclasses become plain), or BadRequest.

    raises: BadRequest
    """
    return _normalise(body, max_document_size)[0]


def _normalise(body: dict[str, Any], max_document_size: int) -> tuple[dict[str, Any], bytes]:
    """The normalised body and its msgpack bytes. The copy is exactly what
    unpacking the bytes gives back, so no unpack round trip is needed. The bytes
    are packed from the copy, never from the caller's objects: another thread may
    change those between a check and a pack (a check-only pass without the copy
    stored unchecked bytes and NaN that way)."""
    normal = _plain_body(body, max_document_size)
    packed = encode_payload(normal)
    if len(packed) > max_document_size:
        raise BadRequest(
            f"document body is {len(packed)} bytes, above max_document_size="
            f"{max_document_size}: split it or open the database with a larger limit"
        )
    return normal, packed


def _revisions_path(value: Any) -> tuple[str, ...]:
    if not is_dict(value):
        raise BadRequest('_revisions must be {"start": N, "ids": [hash, ...]} with nothing else')
    # One walk of the storage: a subclass's __iter__ and items() may disagree.
    fields = {_key_text(k): v for k, v in plain_dict(value).items()}
    if set(fields) != {"start", "ids"}:
        raise BadRequest('_revisions must be {"start": N, "ids": [hash, ...]} with nothing else')
    start, ids = fields["start"], fields["ids"]
    if not is_int(start):
        raise BadRequest(
            f"_revisions.start {describe(start)} is not an int: use the newest position"
        )
    start = plain_int(start)
    if not is_sequence(ids):
        raise BadRequest("_revisions.ids must be a non-empty list of hashes, newest first")
    # One read of its storage: a subclass's __len__ may claim fewer ids than its walk
    # gives (the checks below then passed, and positions 0 and below were stored).
    ids = plain_items(ids)
    if not ids:
        raise BadRequest("_revisions.ids must be a non-empty list of hashes, newest first")
    if start < len(ids):
        raise BadRequest(
            f"_revisions.start {describe(start)} is below the {len(ids)} ids given: "
            "positions start at 1"
        )
    if start > MAX_REV_POS:
        raise BadRequest(
            f"_revisions.start {describe(start)} is above {MAX_REV_POS}: revision positions "
            "must fit a signed 64-bit integer"
        )
    path = []
    for i, hash_ in enumerate(ids):
        hash_ = plain_str(hash_) if is_a(hash_, str) else hash_
        if not is_a(hash_, str) or not is_valid_hash(hash_):
            raise BadRequest(
                f"_revisions.ids[{i}] {describe(hash_)} is not a revision hash: 32 lowercase "
                f"hex digits, or up to {MAX_HASH_LENGTH} printable ASCII characters but "
                "'\"' and '\\' (not 32)"
            )
        # Positions fall by one per id, so a hash repeated in ids (CouchDB takes
        # ["a", "a"]) still names distinct revisions: no duplicate to refuse.
        path.append(format_rev(start - i, hash_))
    return tuple(path)


def _key_text(key: Any) -> Any:
    return plain_str(key) if is_a(key, str) else key


def _split_fields(doc: dict[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(special fields, body)`` of ``doc``, keys made plain; BadRequest for a
    non-str key or an unknown ``_``-field."""
    special: dict[str, Any] = {}
    body: dict[str, Any] = {}
    # A subclass's storage, not its overrides, read at one instant (another thread
    # may change the dict while it is walked: a raw RuntimeError).
    for key, value in plain_dict(doc).items():
        if type(key) is not str:
            if not is_a(key, str):
                raise BadRequest(
                    f"document key {describe(key)} is not a str: JSON object keys must be str"
                )
            key = plain_str(key)
        if not key.startswith("_") or key in BODY_FIELDS:
            body[key] = value
        elif key in READ_FIELDS:
            special[key] = value
        elif key not in IGNORED_FIELDS:
            raise BadRequest(
                f"unknown special field {describe(key)}: fields starting with '_' are reserved "
                f"({', '.join(sorted(READ_FIELDS))}); rename it without the underscore"
            )
    return special, body


def validate_doc(
    doc: object,
    *,
    new_edits: bool,
    max_document_size: int = DEFAULTS["max_document_size"],
    generate_id: bool = False,
) -> ValidDoc:
    """Check ``doc`` and split it into id, rev, deleted flag, revision path
    and normalised body; BadRequest (naming the fix) if it is unacceptable.

    ``generate_id``: a document without ``_id`` gets a new one
    (``spec.docids.new_docid``), as CouchDB's ``_bulk_docs`` does; otherwise
    ``_id`` is required.

    raises: BadRequest
    """
    # A dict by its type, not by __class__ only; is_dict first, as in validate_docid.
    if not (is_dict(doc) and isinstance(doc, dict)):
        raise BadRequest(f"a document must be a dict, not {type(doc).__name__}")
    special, body = _split_fields(doc)
    if "_id" not in special and generate_id:
        docid = new_docid()
    else:
        docid = validate_docid(special.get("_id"))
    deleted = special.get("_deleted", False)
    if type(deleted) is not bool:
        raise BadRequest(f"_deleted must be True or False, not {describe(deleted)}")
    revisions: tuple[str, ...] = ()
    if "_revisions" in special:
        revisions = _revisions_path(special["_revisions"])
    if "_rev" in special:
        rev = check_rev(special["_rev"])
        if revisions and revisions[0] != rev:
            raise BadRequest(
                f"_rev {describe(rev)} disagrees with _revisions (newest "
                f"{describe(revisions[0])}): make _revisions start at _rev"
            )
        revisions = revisions or (rev,)
    if not new_edits and not revisions:
        raise BadRequest(
            f"document {describe(docid)} has no _rev: with new_edits=False every document must "
            "name its revision (_rev, and _revisions for its history)"
        )
    normal, packed = _normalise(body, max_document_size)
    attachments = ()
    if "_attachments" in special:
        attachments = validate_attachments(special["_attachments"])
    return ValidDoc(
        id=docid,
        rev=revisions[0] if revisions else None,
        deleted=deleted,
        revisions=revisions,
        body=normal,
        encoded=packed,
        attachments=attachments,
    )


def render_doc(
    docid: str,
    rev: str,
    deleted: bool,
    body: dict[str, Any],
    *,
    revisions: dict[str, Any] | None = None,
    conflicts: list[str] | None = None,
    attachments: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The document a read returns, in CouchDB's field order: ``_id``,
    ``_rev``, body fields, ``_deleted`` (tombstones only), ``_revisions`` (if
    given), ``_conflicts`` (if given and non-empty), ``_attachments`` (if any).
    Only the top level is new: pass a body the caller may own (e.g. a deep copy
    of the stored one).
    """
    out: dict[str, Any] = {"_id": docid, "_rev": rev}
    out.update(body)
    if deleted:
        out["_deleted"] = True
    if revisions is not None:
        out["_revisions"] = revisions
    if conflicts:
        out["_conflicts"] = list(conflicts)
    if attachments:
        out["_attachments"] = attachments
    return out

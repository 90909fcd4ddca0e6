"""Revision strings: ``"N-<hash>"`` parsing and deterministic generation.

A revision string names one node of a document's revision tree. ``N`` is the
node's position (its depth from the original root, starting at 1) and
``<hash>`` tells siblings apart. settee computes new hashes with
:func:`new_rev`, the md5 of a msgpack encoding of what CouchDB's
``couch_db:new_revid/1`` digests (deleted flag, parent position, parent hash,
body), so the engine and the reference produce the same ids for the same
history.

Accepted syntax (stricter than CouchDB, on purpose):

* ``N`` is ASCII digits without a leading zero and ``N >= 1``; CouchDB would
  also read ``"01-a"`` as ``1-a`` and print it back differently, so one
  revision would have two spellings.
* ``<hash>`` is 32 lowercase hex digits (what settee and CouchDB generate), or
  any other string of up to ``MAX_HASH_LENGTH`` printable ASCII characters
  but ``"`` and ``\\``, the empty string too: replicators send such free-form
  revisions (PouchDB's own tests write ``3-totally_fake_rev`` and ``1-``), and
  CouchDB stores them as they are. CouchDB reads a 32-character hash as hex
  (16 raw bytes), so a 32-character hash that is not lowercase hex is refused:
  ``"1-ABC..."`` would be ``"1-abc..."`` there, one revision with two
  spellings, and a non-hex one is refused by CouchDB too. ``"`` and ``\\``
  would need escaping in an HTTP ``ETag``.
* A revision a caller names (``_rev``, ``_revisions``, ``rev=``, ``revs_diff``)
  has ``N <= MAX_REV_POS`` (``2**63 - 1``, :func:`check_rev`): every store,
  wire format and client settee talks to can carry it, and a longer digit
  string is never parsed (``int()`` of 5,000 digits raises ``ValueError``).
  Edits may still grow a tree past it — a child of a revision at
  ``MAX_REV_POS``, and a recreation on top of that child if it is a
  tombstone — so stored positions reach at most ``MAX_REV_POS + 2``; those
  revisions are read (as winners, leaves, ``_revisions``) but cannot be named.
  :func:`parse_rev` therefore accepts positions up to ``MAX_STORED_POS``
  (``2**64 - 1``, what msgpack carries into :func:`new_rev`'s digest).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

import msgpack

from settee.spec.errors import BadRequest
from settee.spec.values import describe, is_a, plain_str

__all__ = [
    "HASH_CHARS",
    "MAX_HASH_LENGTH",
    "MAX_REV_POS",
    "MAX_STORED_POS",
    "check_rev",
    "child_rev",
    "format_rev",
    "is_valid_hash",
    "is_valid_rev",
    "new_rev",
    "new_rev_encoded",
    "parse_rev",
    "rev_pos",
]

#: The characters of a free-form hash: printable ASCII but space, '"' and '\\'.
HASH_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"\\')
_HEX = "0123456789abcdef"
#: The longest hash a revision may have (settee's own are 32 characters).
MAX_HASH_LENGTH = 255
_DIGITS = "0123456789"
#: The largest revision position a caller may name (a signed 64-bit integer).
MAX_REV_POS = 2**63 - 1
#: The largest position a stored revision string may have (an unsigned 64-bit integer).
MAX_STORED_POS = 2**64 - 1
_MAX_POS_DIGITS = len(str(MAX_STORED_POS))
# ASCII only: [0-9] in a str pattern is the literal range, unlike \d or str.isdigit().
_FREE = r"[!#-\[\]-~]"  # HASH_CHARS as a regex class
_HASH = rf"[0-9a-f]{{32}}|{_FREE}{{0,31}}|{_FREE}{{33,{MAX_HASH_LENGTH}}}"
_REV = re.compile(rf"([1-9][0-9]{{0,{_MAX_POS_DIGITS - 1}}})-({_HASH})")


def is_valid_rev(rev: object) -> bool:
    """True when ``rev`` is a well-formed revision string.

    post: __return__ == (isinstance(rev, str) and rev.count("-") >= 1 and _ok_parts(rev))
    """
    return _match(rev) is not None


def is_valid_hash(hash_: str) -> bool:
    """True when ``hash_`` may follow ``N-`` in a revision (see the module doc)."""
    if len(hash_) == 32:
        return all(c in _HEX for c in hash_)
    return len(hash_) <= MAX_HASH_LENGTH and all(c in HASH_CHARS for c in hash_)


def _ok_parts(rev: str) -> bool:
    """The rule :func:`_match` implements, written out (CrossHair checks they agree)."""
    pos, _, hash_ = rev.partition("-")
    if not pos or pos[0] == "0" or len(pos) > _MAX_POS_DIGITS:
        return False
    return all(c in _DIGITS for c in pos) and is_valid_hash(hash_) and int(pos) <= MAX_STORED_POS


def _match(rev: object) -> re.Match[str] | None:
    # Revisions are parsed on every read (winner order), so this is one C regex match;
    # int() only runs on the few strings long enough to exceed MAX_STORED_POS.
    if not is_a(rev, str):
        return None
    match = _REV.fullmatch(rev if type(rev) is str else plain_str(rev))
    if match is None or (len(match[1]) == _MAX_POS_DIGITS and int(match[1]) > MAX_STORED_POS):
        return None
    return match


def parse_rev(rev: object) -> tuple[int, str]:
    """Split ``"N-hash"`` into ``(N, "hash")``; BadRequest if malformed (or
    ``N > MAX_STORED_POS``). Caller input goes through :func:`check_rev`.

    raises: BadRequest
    post: __return__[0] >= 1
    post: format_rev(__return__[0], __return__[1]) == rev
    """
    match = _match(rev)
    if match is None:
        raise BadRequest(
            f"invalid revision {describe(rev)}: use the form 'N-hash' with N >= 1 "
            "(no leading zero) and a hash of 32 lowercase hex digits or of up to "
            f"{MAX_HASH_LENGTH} other printable ASCII characters but '\"' and '\\' "
            "(not 32), e.g. '1-967a00dff5e02add41819138abb3284d'"
        )
    return int(match[1]), match[2]


def check_rev(rev: object) -> str:
    """``rev`` as a plain str if a caller may name it: well formed and
    ``N <= MAX_REV_POS``; else BadRequest.

    raises: BadRequest
    post: __return__ == rev
    post: parse_rev(__return__)[0] <= MAX_REV_POS
    """
    pos, _ = parse_rev(rev)
    if pos > MAX_REV_POS:
        raise BadRequest(
            f"revision position {pos} is above {MAX_REV_POS} (2**63 - 1): settee does not "
            "accept revision positions that do not fit a signed 64-bit integer"
        )
    assert isinstance(rev, str)  # parse_rev checked the type
    return plain_str(rev)


def format_rev(pos: int, hash_: str) -> str:
    """The revision string for position ``pos`` and ``hash_``.

    pre: 1 <= pos <= MAX_STORED_POS
    pre: is_valid_hash(hash_)
    post: parse_rev(__return__) == (pos, hash_)
    """
    return f"{pos}-{hash_}"


def rev_pos(rev: str) -> int:
    """The position ``N`` of a revision string.

    raises: BadRequest
    post: __return__ >= 1
    """
    return parse_rev(rev)[0]


def child_rev(parent: str | None, hash_: str) -> str:
    """The revision with hash ``hash_`` one position below ``parent``.

    pre: parent is None or is_valid_rev(parent)
    pre: parent is None or rev_pos(parent) < MAX_STORED_POS
    pre: is_valid_hash(hash_)
    post: is_valid_rev(__return__)
    post: rev_pos(__return__) == (1 if parent is None else rev_pos(parent) + 1)
    post: parse_rev(__return__)[1] == hash_
    """
    return format_rev(1 if parent is None else rev_pos(parent) + 1, hash_)


def new_rev(
    parent: str | None,
    deleted: bool,
    body: dict[str, Any],
    attachments: Sequence[Sequence[str]] = (),
) -> str:
    """The deterministic id of a new revision below ``parent`` (None for a root).

    ``attachments``: ``[name, content type, digest]`` of each attachment the
    revision holds (``settee.spec.attachments.rev_digests``), digested as
    ``couch_db:new_revid`` does; a revision without any digests exactly what it
    did before attachments existed, so no stored revision id changes.

    ``body`` must already be normalised (see ``settee.spec.docs``): dict key
    order is part of the digest, as in CouchDB, where it is part of the JSON.
    A document's first revision digests parent position 0 and parent hash
    ``""`` (CouchDB uses ``0`` for both).

    pre: parent is None or is_valid_rev(parent)
    pre: parent is None or rev_pos(parent) < MAX_STORED_POS
    post: rev_pos(__return__) == (1 if parent is None else rev_pos(parent) + 1)
    post: len(parse_rev(__return__)[1]) == 32
    post: __return__ == new_rev(parent, deleted, body)
    """
    # crosshair: off
    # msgpack is a C extension that cannot pack CrossHair's symbolic values;
    # child_rev carries the checked part, tests/test_spec.py checks these
    # postconditions with Hypothesis.
    return new_rev_encoded(parent, deleted, msgpack.packb(body, use_bin_type=True), attachments)


def new_rev_encoded(
    parent: str | None,
    deleted: bool,
    encoded_body: bytes,
    attachments: Sequence[Sequence[str]] = (),
) -> str:
    """``new_rev`` of the body whose msgpack bytes are ``encoded_body``: the digest
    is taken over ``[deleted, parent position, parent hash, body(, attachments)]``
    packed, and msgpack packs an array as its header and then each element's own
    bytes, so the body's bytes are spliced in rather than packed again (an engine
    has them already: what it stores).

    pre: parent is None or is_valid_rev(parent)
    pre: parent is None or rev_pos(parent) < MAX_STORED_POS
    """
    # crosshair: off
    # msgpack, as above; tests/test_spec.py checks it against packing the whole array.
    if parent is None:
        # A first revision's head fields are one of two constants.
        head = _ROOT_HEADS[bool(deleted)]
    else:
        parent_pos, parent_hash = parse_rev(parent)
        # The three head fields packed as one fixarray of 3, its header byte swapped
        # for the digested array's: one packb per revision, not one per field.
        head = msgpack.packb([bool(deleted), parent_pos, parent_hash], use_bin_type=True)
    digest = hashlib.md5(_ARRAY_HEADERS[bool(attachments)] + head[1:])
    digest.update(encoded_body)
    if attachments:
        digest.update(msgpack.packb([list(att) for att in attachments], use_bin_type=True))
    return child_rev(parent, digest.hexdigest())


# msgpack fixarray headers of the digested array: 4 elements, or 5 with attachments.
_ARRAY_HEADERS = {False: b"\x94", True: b"\x95"}
# [deleted, 0, ""] packed, by deleted: the head of every first revision.
_ROOT_HEADS = {d: msgpack.packb([d, 0, ""], use_bin_type=True) for d in (False, True)}

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
* ``<hash>`` is one or more of ``[0-9a-z]``. CouchDB stores a 32-hex hash as 16
  raw bytes, so ``"1-ABC..."`` and ``"1-abc..."`` would be one revision there;
  forbidding upper case keeps "same string" and "same revision" identical.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack

from settee.spec.errors import BadRequest

__all__ = [
    "HASH_CHARS",
    "child_rev",
    "format_rev",
    "is_valid_rev",
    "new_rev",
    "parse_rev",
    "rev_pos",
]

HASH_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"
_DIGITS = "0123456789"


def is_valid_rev(rev: object) -> bool:
    """True when ``rev`` is a well-formed revision string.

    post: __return__ == (isinstance(rev, str) and rev.count("-") >= 1 and _ok_parts(rev))
    """
    if not isinstance(rev, str):
        return False
    return rev.count("-") >= 1 and _ok_parts(rev)


def _ok_parts(rev: str) -> bool:
    pos, _, hash_ = rev.partition("-")
    if not pos or not hash_ or pos[0] == "0":
        return False
    return all(c in _DIGITS for c in pos) and all(c in HASH_CHARS for c in hash_)


def parse_rev(rev: object) -> tuple[int, str]:
    """Split ``"N-hash"`` into ``(N, "hash")``; BadRequest if malformed.

    raises: BadRequest
    post: __return__[0] >= 1
    post: format_rev(__return__[0], __return__[1]) == rev
    """
    if not is_valid_rev(rev):
        raise BadRequest(
            f"invalid revision {rev!r}: use the form 'N-hash' with N >= 1 (no leading zero) "
            "and a hash of lowercase letters and digits, e.g. '1-967a00dff5e02add41819138abb3284d'"
        )
    assert isinstance(rev, str)  # is_valid_rev checked the type
    pos, _, hash_ = rev.partition("-")
    return int(pos), hash_


def format_rev(pos: int, hash_: str) -> str:
    """The revision string for position ``pos`` and ``hash_``.

    pre: pos >= 1
    pre: len(hash_) >= 1 and all(c in HASH_CHARS for c in hash_)
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
    pre: len(hash_) >= 1 and all(c in HASH_CHARS for c in hash_)
    post: is_valid_rev(__return__)
    post: rev_pos(__return__) == (1 if parent is None else rev_pos(parent) + 1)
    post: parse_rev(__return__)[1] == hash_
    """
    return format_rev(1 if parent is None else rev_pos(parent) + 1, hash_)


def new_rev(parent: str | None, deleted: bool, body: dict[str, Any]) -> str:
    """The deterministic id of a new revision below ``parent`` (None for a root).

    ``body`` must already be normalised (see ``settee.spec.docs``): dict key
    order is part of the digest, as in CouchDB, where it is part of the JSON.
    A document's first revision digests parent position 0 and parent hash
    ``""`` (CouchDB uses ``0`` for both).

    pre: parent is None or is_valid_rev(parent)
    post: rev_pos(__return__) == (1 if parent is None else rev_pos(parent) + 1)
    post: len(parse_rev(__return__)[1]) == 32
    post: __return__ == new_rev(parent, deleted, body)
    """
    # crosshair: off
    # msgpack is a C extension that cannot pack CrossHair's symbolic values;
    # child_rev carries the checked part, tests/test_spec.py checks these
    # postconditions with Hypothesis.
    if parent is None:
        parent_pos, parent_hash = 0, ""
    else:
        parent_pos, parent_hash = parse_rev(parent)
    payload = msgpack.packb([bool(deleted), parent_pos, parent_hash, body], use_bin_type=True)
    return child_rev(parent, hashlib.md5(payload).hexdigest())

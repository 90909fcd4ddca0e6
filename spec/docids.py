"""Ids for documents that arrive without ``_id`` (CouchDB's ``POST /db`` and ``_bulk_docs``).

CouchDB's default ``uuids/algorithm`` is ``sequential`` (``couch_uuids``): a
random 26-hex-digit prefix and a 6-hex-digit suffix that grows by a random
step, with a fresh prefix when the suffix would overflow. Ids made close in
time therefore sort close together, so a burst of new documents touches few
B+tree leaves, while ids from two processes still never collide in practice.

The proof needs the engine and the reference to invent the *same* ids for
the same call: :func:`deterministic_docids` makes the ids invented by the
current thread (context) within its block a pure function of a seed.
"""

from __future__ import annotations

import contextvars
import hashlib
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["deterministic_docids", "new_docid"]

_SUFFIX_LIMIT = 0xFFF000
_lock = threading.Lock()
_prefix = secrets.token_hex(13)
_suffix = secrets.randbelow(0xFFF)
_seeded: contextvars.ContextVar[Iterator[str] | None] = contextvars.ContextVar(
    "settee_seeded_docids", default=None
)


def new_docid() -> str:
    """A new 32-hex-digit document id (CouchDB's sequential uuid algorithm)."""
    seeded = _seeded.get()
    if seeded is not None:
        return next(seeded)
    global _prefix, _suffix
    with _lock:
        _suffix += 1 + secrets.randbelow(0xFFE)
        if _suffix >= _SUFFIX_LIMIT:
            _prefix, _suffix = secrets.token_hex(13), secrets.randbelow(0xFFF)
        return f"{_prefix}{_suffix:06x}"


def _seeded_ids(seed: str) -> Iterator[str]:
    n = 0
    while True:
        yield hashlib.md5(f"{seed}/{n}".encode()).hexdigest()
        n += 1


@contextmanager
def deterministic_docids(seed: str) -> Iterator[None]:
    """Within the block, ids invented on this thread are ``md5(f"{seed}/{n}")``
    for n = 0, 1, ...: two implementations given the same call in two such
    blocks with one seed invent the same ids."""
    token = _seeded.set(_seeded_ids(seed))
    try:
        yield
    finally:
        _seeded.reset(token)

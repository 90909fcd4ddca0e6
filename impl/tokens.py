"""Opaque ``changes`` tokens: one update seq per shard.

A token looks like CouchDB's clustered seqs, ``"<sum>-<base64 payload>"``:
the sum makes tokens roughly comparable by eye, the payload carries the exact
vector. Callers must treat tokens as opaque; the facade only promises that
resuming from any token it returned never misses a later change.
"""

from __future__ import annotations

import base64
import binascii
import re

import msgpack

from settee.spec.errors import BadRequest
from settee.spec.values import describe

__all__ = ["decode_token", "encode_token"]

#: A token as encode_token spells it: a count of ASCII digits, a dash, the URL-safe
#: base64 payload (its padding optional). CouchDB splits ``^([0-9]+-)`` off the front
#: and decodes the rest whole, so any other spelling names no position.
_TOKEN = re.compile(r"[0-9]+-([A-Za-z0-9_-]*={0,2})")


def encode_token(seqs: list[int]) -> str:
    """The token for a vector of per-shard seqs."""
    payload = base64.urlsafe_b64encode(msgpack.packb(seqs)).rstrip(b"=").decode("ascii")
    return f"{sum(seqs)}-{payload}"


def decode_token(
    token: object, shards: int, current: list[int], *, may_lag: bool = False
) -> list[int]:
    """The per-shard seqs a ``since`` value names.

    ``0`` (or ``"0"``) is the beginning and ``"now"`` is ``current``; anything
    else must be a token this database returned, so no position may be past
    ``current``'s (SEMANTICS.md §9), unless the handle ``may_lag`` behind the
    database (a readonly one): then a position past it counts as ``current``'s.
    ``token`` is already plain (``spec.arguments.check_since``): an exact ``int``
    or ``str``.
    """
    if token == 0 or token == "0":
        return [0] * shards
    if token == "now":
        return list(current)
    match = _TOKEN.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise _bad(token)
    payload = match[1]
    try:
        # validate: the lenient decoder skips characters outside the alphabet, so a
        # misspelt token read as the one it misspells.
        raw = base64.b64decode(payload + "=" * (-len(payload) % 4), b"-_", validate=True)
        seqs = msgpack.unpackb(raw)
    except (ValueError, binascii.Error, msgpack.UnpackException, RecursionError):
        # A caller's garbage can make msgpack raise any of these (deep nesting too).
        raise _bad(token) from None
    if not _is_seq_vector(seqs, shards):
        raise _bad(token)
    if may_lag:
        # A readonly handle can be behind the writer (SEMANTICS.md §1): a token of
        # the writer's may name changes it has not seen yet. Resuming from where it
        # is skips nothing (it may repeat a change), as skipping ahead would.
        return [min(seq, now) for seq, now in zip(seqs, current, strict=True)]
    if any(seq > now for seq, now in zip(seqs, current, strict=True)):
        # Not a token of this database: another's, or a copy's that was written to
        # after it was copied. Resuming from it would skip this database's next writes.
        raise BadRequest(
            f"since value {describe(token)} names changes this database has not made: "
            "it is a token of another database (or of a copy written to since); pass 0, "
            "'now', or a token this database returned"
        )
    return seqs


def _is_seq_vector(seqs: object, shards: int) -> bool:
    return (
        isinstance(seqs, list)
        and len(seqs) == shards
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seqs)
    )


def _bad(token: object) -> BadRequest:
    return BadRequest(
        f"invalid since value {describe(token)}: pass 0, 'now', or a seq/last_seq/update_seq token "
        "returned by this database"
    )

"""Every settee error class, in one place.

The engine (``settee``) and the reference (``settee.reference``) raise exactly
these classes, so a test can compare implementations by error class. Each
class inherits a builtin where that helps callers who do not know settee.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequest",
    "Conflict",
    "CorruptionError",
    "NotFound",
    "SetteeError",
]


class SetteeError(Exception):
    """Base class of every error settee raises on purpose.

    Also raised directly for lifecycle misuse, such as calling a method on a
    closed database or opening a database another process holds.
    """

    error = "unknown_error"

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else ""


class Conflict(SetteeError):
    """A write named a revision that is not a current leaf of the document
    (or named none for a document that already exists)."""

    error = "conflict"

    def __init__(self, reason: str = "Document update conflict.") -> None:
        super().__init__(reason)


class NotFound(SetteeError, KeyError):
    """The document or revision does not exist.

    ``reason`` is ``"missing"`` (never existed, or the revision is unknown)
    or ``"deleted"`` (the winning revision is a tombstone), as in CouchDB.
    """

    error = "not_found"

    def __init__(self, reason: str = "missing") -> None:
        super().__init__(reason)

    def __str__(self) -> str:  # KeyError would quote the message
        return self.reason


class BadRequest(SetteeError, ValueError):
    """The caller passed something settee cannot accept: not a dict, an
    ``_id`` that is not a non-empty str, an unknown ``_``-field, a value
    msgpack cannot hold, a malformed revision, or a bad option. Nothing was
    written."""

    error = "bad_request"


class CorruptionError(SetteeError):
    """Stored bytes failed a checksum or framing check.

    Carries the file path and byte offset where the damage was found; the
    damaged bytes are never decoded or returned as data.
    """

    error = "corruption"

    def __init__(self, path: str, offset: int, detail: str) -> None:
        super().__init__(f"{path}:{offset}: {detail}")
        self.path = path
        self.offset = offset
        self.detail = detail

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its three fields: settee verify's worker processes send it back
        # (pickling it by its message alone broke the pool: found by mutation testing).
        return (type(self), (self.path, self.offset, self.detail))

"""Side JSON files that carry their own checksum.

The server's side files (settings, ``_local`` documents, ``_security``, purge
records) are JSON, replaced whole by ``local.write_json_durably``, so a crash
never tears one; but a flipped bit that keeps a file valid JSON (a digit of
``revs_limit``, a letter of a name) was served as if written (found by the fault
sweep). A file written here is ``{"crc32c": N, "value": V}``: ``N`` is the
CRC-32C of ``V`` encoded as ``encode`` encodes it, which reading it back
re-encodes to the same bytes (JSON numbers, strings and member order survive a
decode and encode unchanged), so any change to ``V`` or ``N`` is a
``CorruptionError`` naming the file. ``unwrap`` still reads a file of an earlier
release, which holds the bare value (the caller checks its shape, as before):
one with either member but not both is a damaged envelope, as no bare value
stored here had a ``crc32c`` or ``value`` member.
"""

from __future__ import annotations

import json
from typing import Any

import crc32c

from settee.spec.errors import CorruptionError

__all__ = ["unwrap", "wrap"]

_MEMBERS = {"crc32c", "value"}


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def wrap(value: Any) -> dict[str, Any]:
    """What to store for ``value``: it with its checksum."""
    return {"crc32c": crc32c.crc32c(encode(value)), "value": value}


def unwrap(path: str, stored: Any) -> Any:
    """The value a file at ``path`` holds (``stored``, as parsed): checked when it
    carries a checksum, as found when it is an earlier release's bare value."""
    if not (isinstance(stored, dict) and set(stored) & _MEMBERS):
        return stored
    if set(stored) != _MEMBERS:
        # A member's name flipped: no value this server stored as bare has either
        # name (found sweeping bits: "brc32c" read as a _security object).
        raise CorruptionError(path, 0, f"members {sorted(stored)}: restore or remove it")
    crc = stored["crc32c"]
    if type(crc) is not int or crc != crc32c.crc32c(encode(stored["value"])):
        raise CorruptionError(path, 0, "checksum mismatch: restore or remove it")
    return stored["value"]

"""Every option ``settee.open`` and ``settee.reference.open`` accept, in one table.

Options merge key by key over the defaults: an absent key means "the
default", an explicit ``None`` means "let the library decide", which for
every option here is also its default. An unknown option or a bad value is a
BadRequest that names the option and the fix, raised before anything opens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from settee.spec.errors import BadRequest
from settee.spec.values import describe, is_a, is_int, plain_int, plain_str

__all__ = ["DEFAULTS", "OPTIONS", "Option", "validate_options"]


def _positive_int(value: Any) -> bool:
    # bool is an int subclass; True shards is a typo, not a count.
    return is_int(value) and plain_int(value) >= 1


def _int_in(low: int, high: int) -> Callable[[Any], bool]:
    return lambda value: is_int(value) and low <= plain_int(value) <= high


def _plain(value: Any) -> Any:
    """An accepted value as an exact builtin (``IntEnum`` and ``str`` subclasses become plain)."""
    if is_a(value, bool):
        return value
    if is_a(value, int):
        return plain_int(value)
    if is_a(value, str):
        return plain_str(value)
    return value


@dataclass(frozen=True, slots=True)
class Option:
    """One option: its default, a check, and what a good value looks like."""

    default: Any
    check: Callable[[Any], bool]
    expects: str
    doc: str


OPTIONS: dict[str, Option] = {
    "shards": Option(
        4,
        _int_in(1, 1024),
        "an int from 1 to 1024",
        "number of shard files (mem3 hash ranges); fixed when the database is created",
    ),
    "fsync": Option(
        True,
        lambda v: type(v) is bool,
        "True or False",
        "fsync data and headers before acknowledging a write",
    ),
    "read_mode": Option(
        "parallel",
        lambda v: is_a(v, str) and plain_str(v) in ("parallel", "serialized"),
        "'parallel' or 'serialized'",
        "'parallel': lock-free pread readers; 'serialized': one lock per shard (CouchDB < 3.5)",
    ),
    "revs_limit": Option(
        1000,
        _positive_int,
        "an int >= 1",
        "revisions kept per branch of a revision tree (CouchDB _revs_limit)",
    ),
    "max_document_size": Option(
        64 * 1024 * 1024,
        _positive_int,
        "an int >= 1 (bytes)",
        "largest accepted document body, measured as its msgpack encoding",
    ),
    "strict": Option(
        False,
        lambda v: type(v) is bool,
        "True or False",
        "after every commit, check what it changed (trees, by_id/by_seq agreement, counts) "
        "and fail the write on any inconsistency; the proof runs with it on",
    ),
    "node_size": Option(
        4096,
        _int_in(128, 4096),
        "an int from 128 to 4096 (bytes)",
        "largest encoded B+tree node a commit writes (CouchDB's btree_chunk_size); small "
        "values make tiny databases split and merge nodes, which the proof relies on",
    ),
    "cache_bytes": Option(
        192 * 1024 * 1024,
        _int_in(0, 1 << 40),
        "an int from 0 to 2**40 (bytes)",
        "B+tree nodes kept decoded in memory, counted by their encoded size and split "
        "evenly between the shards; decoded nodes take about 3x that in RAM. A database "
        "whose trees fit reads every node from memory; 0 reads every node from the file",
    ),
    "body_cache_bytes": Option(
        128 * 1024 * 1024,
        _int_in(0, 1 << 40),
        "an int from 0 to 2**40 (bytes)",
        "document bodies kept in memory as their checked msgpack bytes, split evenly "
        "between the shards, each charged its size plus 200 bytes; a read of a cached "
        "body skips the file (not the decode); 0 reads every body from the file",
    ),
    "readonly": Option(
        False,
        lambda v: type(v) is bool,
        "True or False",
        "True: read a database another process (or another handle) writes: no lock, no "
        "writer, nothing created; every write raises SetteeError; each call sees the "
        "newest commit the writer has made durable",
    ),
    "create": Option(
        True,
        lambda v: type(v) is bool,
        "True or False",
        "create the database if the path holds none; False: SetteeError instead",
    ),
}

DEFAULTS: dict[str, Any] = {name: option.default for name, option in OPTIONS.items()}


def validate_options(**options: Any) -> dict[str, Any]:
    """The complete configuration: ``options`` merged key by key over DEFAULTS.

    post: set(__return__) == set(OPTIONS)
    raises: BadRequest
    """
    unknown = sorted(set(options) - set(OPTIONS), key=str)
    if unknown:
        raise BadRequest(
            f"unknown option {describe(unknown[0])}: settee accepts only "
            f"{', '.join(sorted(OPTIONS))}"
        )
    config = dict(DEFAULTS)
    for name, value in options.items():
        if value is None:
            continue  # explicit None: the library decides, i.e. the default
        option = OPTIONS[name]
        if not option.check(value):
            raise BadRequest(
                f"bad value {describe(value)} for option {name!r}: use {option.expects}"
            )
        config[name] = _plain(value)
    return config

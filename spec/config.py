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

__all__ = ["DEFAULTS", "OPTIONS", "Option", "validate_options"]


def _positive_int(value: Any) -> bool:
    # bool is an int subclass; True shards is a typo, not a count.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


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
        lambda v: _positive_int(v) and v <= 1024,
        "an int from 1 to 1024",
        "number of shard files (mem3 hash ranges); fixed when the database is created",
    ),
    "fsync": Option(
        True,
        lambda v: isinstance(v, bool),
        "True or False",
        "fsync data and headers before acknowledging a write",
    ),
    "read_mode": Option(
        "parallel",
        lambda v: v in ("parallel", "serialized"),
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
}

DEFAULTS: dict[str, Any] = {name: option.default for name, option in OPTIONS.items()}


def validate_options(**options: Any) -> dict[str, Any]:
    """The complete configuration: ``options`` merged key by key over DEFAULTS.

    post: set(__return__) == set(OPTIONS)
    raises: BadRequest
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BadRequest(
            f"unknown option {unknown[0]!r}: settee accepts only {', '.join(sorted(OPTIONS))}"
        )
    config = dict(DEFAULTS)
    for name, value in options.items():
        if value is None:
            continue  # explicit None: the library decides, i.e. the default
        option = OPTIONS[name]
        if not option.check(value):
            raise BadRequest(f"bad value {value!r} for option {name!r}: use {option.expects}")
        config[name] = value
    return config

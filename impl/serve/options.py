"""The server's options: defaults, and the key-by-key merge that CouchDB issue #1409 teaches.

CouchDB's ``[chttpd] server_options`` is one string: a user who wrote
``[{backlog, 128}, {max, 8192}]`` silently replaced the default
``[{recbuf, undefined}]`` and MochiWeb then pinned every socket's receive
buffer to 8 KiB, which also turns off Linux's receive-window autotuning.
Here every option is its own key: ``merge_options`` starts from ``DEFAULTS``
and replaces only the keys the caller gave, so setting ``backlog`` or
``max_connections`` can never touch the buffer policy. As everywhere in
settee (DESIGN.md "config"), an absent key means the default and an explicit
``None`` means "let the OS (or the library) decide".
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from settee.spec.errors import BadRequest

__all__ = [
    "DB_OPTIONS",
    "DEFAULTS",
    "db_options",
    "descriptor_warning",
    "merge_options",
    "request_limit",
]

#: Every server option and its default. ``recbuf``/``sndbuf`` default to None:
#: settee never calls ``setsockopt(SO_RCVBUF/SO_SNDBUF)`` unless asked, so the
#: kernel keeps autotuning the TCP windows.
DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        # sockets
        "backlog": 128,  # listen() queue; None: the library's default
        "max_connections": None,  # open connections at once; None: no limit
        "recbuf": None,  # SO_RCVBUF bytes; None: never set (kernel autotuning)
        "sndbuf": None,  # SO_SNDBUF bytes; None: never set (kernel autotuning)
        # requests
        # body bytes (CouchDB max_http_request_size); None: twice max_document_size plus
        # 1 MiB (a document's JSON is larger than its msgpack), so one request cannot
        # make the server buffer gigabytes before it refuses them
        "max_request_size": None,
        # URL bytes (CouchDB [httpd] max_uri_length): the engine takes ids of any length,
        # and a document must be reachable at /{db}/{id}, so far above the usual 8 KiB.
        "max_url_length": 1024**2,
        "threads": 16,  # worker threads for engine calls (never on the event loop)
        "changes_timeout": 60_000,  # ms a longpoll/continuous feed waits at most
        # ms a connection may stay open without sending a whole request: before its
        # first request, with half-sent headers, or idle between requests (aiohttp's
        # keep-alive default is an hour)
        "idle_timeout": 60_000,
        # Databases open at once (CouchDB's [couchdb] max_dbs_open, 500 there): each
        # holds 10 file descriptors (2 per shard, its lock, HEADS) and 4 writer
        # threads, a view index 4 more and a thread. Many systems' soft descriptor
        # limit is 1024 (ulimit -n), which 100 databases would all but use up before
        # any socket or index; 50 take half. Idle ones close first (registry.py).
        "max_dbs_open": 50,
        # databases (passed to settee.open; shards only when a database is created)
        "shards": 4,
        "fsync": True,
        "read_mode": "parallel",
        "revs_limit": 1000,
        "max_document_size": 64 * 1024 * 1024,
    }
)

_POSITIVE_INTS = ("backlog", "max_connections", "recbuf", "sndbuf", "max_request_size")
_POSITIVE_INTS_REQUIRED = (
    "threads",
    "changes_timeout",
    "max_url_length",
    "idle_timeout",
    "max_dbs_open",
)
#: Options whose value settee.open validates itself.
DB_OPTIONS = ("shards", "fsync", "read_mode", "revs_limit", "max_document_size")


def merge_options(**given: Any) -> dict[str, Any]:
    """``DEFAULTS`` with exactly the given keys replaced; BadRequest names a bad key.

    An explicit ``None`` for a socket option means the OS or library decides;
    for the others it means the default.
    """
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise BadRequest(
            f"unknown server option(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}"
        )
    merged = dict(DEFAULTS)
    for key, value in given.items():
        if value is None and key not in _POSITIVE_INTS:
            continue
        merged[key] = value
    for key in _POSITIVE_INTS + _POSITIVE_INTS_REQUIRED:
        value = merged[key]
        if value is None and key in _POSITIVE_INTS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest(f"server option {key} must be a positive int, not {value!r}")
    return merged


#: Descriptors the process holds besides databases and connections (the listening
#: socket, the event loop's, stdio, the V8 isolate's): a margin, not a count.
_PROCESS_DESCRIPTORS = 32


def descriptor_warning(options: Mapping[str, Any], soft_limit: int) -> str | None:
    """What to tell the user when ``max_dbs_open`` databases (two descriptors per
    shard, the lock and HEADS each; view indexes come on top) and
    ``max_connections`` connections could need more file descriptors than the
    process may open (``soft_limit``, RLIMIT_NOFILE): past it, opening one more
    database or accepting one more connection fails. None when they fit."""
    per_db = 2 * options["shards"] + 2
    connections = options["max_connections"] or 0
    needed = options["max_dbs_open"] * per_db + connections + _PROCESS_DESCRIPTORS
    if needed <= soft_limit:
        return None
    fits = max(1, (soft_limit - connections - _PROCESS_DESCRIPTORS) // per_db)
    return (
        f"max_dbs_open={options['max_dbs_open']} databases of {options['shards']} shards "
        f"may hold {needed} file descriptors, above this process's limit of {soft_limit} "
        f"(ulimit -n): raise the limit or pass --max-dbs-open {fits}"
    )


def request_limit(options: Mapping[str, Any]) -> int:
    """The largest request body accepted, in bytes (413 past it, while streaming)."""
    given = options["max_request_size"]
    return int(given) if given is not None else 2 * options["max_document_size"] + (1 << 20)


def db_options(options: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """The ``settee.open`` keywords for one database; ``shards`` only at creation,
    since reopening with another explicit shard count is an error."""
    out = {key: options[key] for key in DB_OPTIONS}
    if not creating:
        del out["shards"]
    return out

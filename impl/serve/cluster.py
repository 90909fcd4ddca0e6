"""What CouchDB's cluster endpoints answer for settee serve: one node, whose
databases are never partitioned.

``GET /_membership`` lists the node; ``GET /{db}/_shards`` and
``GET /{db}/_shards/{docid}`` name each shard's mem3 hash range
(``settee.spec.routing``, the ranges the engine routes documents by) and the node
holding it; ``POST /{db}/_sync_shards`` has no other copy to sync (202, as
mem3_httpd answers once it has started). Partitioned databases are not served:
``PUT /{db}?partitioned=true`` and every ``/{db}/_partition/...`` request get
the answers CouchDB gives where the feature is off or the database is not
partitioned (chttpd_db:parse_partitioned_opt, handle_partition_req).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from settee.serve.protocol import HTTPError, method_not_allowed, reply, require_method, respond
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.routing import shard_of, shard_ranges

__all__ = [
    "NODE",
    "check_partitioned_param",
    "handle_membership",
    "handle_partition",
    "handle_shards",
    "handle_sync_shards",
]

#: The node name of a CouchDB that was never given one (vm.args' default).
NODE = "nonode@nohost"


async def handle_membership(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """``GET /_membership`` (mem3_httpd:handle_membership_req)."""
    require_method(request, "GET")
    return respond(reply(200, {"all_nodes": [NODE], "cluster_nodes": [NODE]}))


def _hex_range(begin: int, end: int) -> str:
    """mem3_util:range_to_hex: ``00000000-7fffffff``."""
    return f"{begin:08x}-{end:08x}"


async def handle_shards(
    state: State, request: web.BaseRequest, entry: DbEntry, rest: list[str]
) -> web.StreamResponse:
    """``GET /{db}/_shards`` (every range) and ``GET /{db}/_shards/{docid}`` (the
    range holding ``docid``; the id needs no document)."""
    if len(rest) > 2:
        raise HTTPError(404, "not_found", "missing")
    require_method(request, "GET")
    ranges = shard_ranges(len(entry.db.shards))
    if len(rest) == 1:
        return respond(reply(200, {"shards": {_hex_range(*r): [NODE] for r in ranges}}))
    begin, end = ranges[shard_of(rest[1], len(ranges))]
    return respond(reply(200, {"range": _hex_range(begin, end), "nodes": [NODE]}))


async def handle_sync_shards(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}/_sync_shards``: one node keeps one copy of each shard."""
    require_method(request, "POST")
    return respond(reply(202, {"ok": True}))


def check_partitioned_param(query: Mapping[str, str]) -> None:
    """``PUT /{db}``'s ``partitioned``: ``false`` (or none) creates the database;
    ``true`` is refused as CouchDB refuses it with the feature off, rather than
    creating a database that would not keep documents by partition."""
    value = query.get("partitioned")
    if value is None or value == "false":
        return
    if value == "true":
        raise HTTPError(400, "bad_request", "Partitioned feature is not enabled.")
    raise HTTPError(400, "bad_request", "Invalid `partitioned` parameter")


def _not_partitioned() -> HTTPError:
    return HTTPError(400, "bad_request", "database is not partitioned")


async def handle_partition(
    state: State, request: web.BaseRequest, entry: DbEntry, rest: list[str]
) -> web.StreamResponse:
    """``/{db}/_partition/...`` on a database that is not partitioned, clause by
    clause as chttpd_db:handle_partition_req takes the path."""
    if len(rest) == 1:
        raise HTTPError(400, "bad_request", "invalid_partition_req")
    if len(rest) > 2:
        raise _not_partitioned()
    partition = rest[1]
    if request.method == "GET":
        _check_partition(partition)
        raise _not_partitioned()
    if request.method == "POST" and partition.startswith("_"):
        raise _illegal_partition("Partition must not start with an underscore")
    raise method_not_allowed("GET")


def _check_partition(partition: str) -> None:
    """couch_partition:validate_partition (the path is valid UTF-8 already)."""
    if not partition:
        raise _illegal_partition("Partition must not be empty")
    if partition.startswith("_"):
        raise _illegal_partition("Partition must not start with an underscore")
    if ":" in partition:
        raise _illegal_partition("Partition must not contain a colon")


def _illegal_partition(reason: str) -> HTTPError:
    return HTTPError(400, "illegal_partition", reason)

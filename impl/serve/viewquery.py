"""``GET|POST /{db}/_design/{ddoc}/_view/{view}``: querying a view index
(``settee.serve.viewindex``) as CouchDB's ``couch_mrview`` answers.

Rows come in key order (CouchDB's collation, ties by document id); ``key``,
``keys``, ``startkey``/``endkey`` (and ``start_key``/``end_key``),
``startkey_docid``/``endkey_docid``, ``inclusive_end``, ``descending``,
``skip``, ``limit``, ``include_docs`` (with ``conflicts``), ``update_seq``,
``update`` (``true``, ``false``, ``lazy``; ``stale=ok|update_after``). Parameters
apply in order (``key=1&endkey=3`` is 1..3); a POST's JSON body may hold any of
them, the query string overriding it; CouchDB's validate_args and check_range
refusals are its 400 query_parse_error answers. A view with a reduce answers reduced
rows unless ``reduce=false``: the builtins ``_count``, ``_sum``, ``_stats``,
``_approx_count_distinct``, ``_first``, ``_last``, ``_top_N``, ``_bottom_N``
(``reducers.py``) or a JavaScript ``reduce(keys, values, rereduce)``,
over everything (one row) or per key (``group=true``) or per key prefix
(``group_level=N``). Reduction reads every row of the range: settee stores no
intermediate reductions yet.
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

import settee
from settee.serve import mango, revs
from settee.serve.design import ViewFunctions, views_lib
from settee.serve.encoding import with_encoding_info
from settee.serve.js import FunctionError, Thrown
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    invalid_query_json,
    method_not_allowed,
    out_of_space,
    parse_json,
    reply,
    require_json_content,
    respond,
)
from settee.serve.reducers import first_of, last_of, ranked, stats_of, sum_of
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewindex import MapOptions, Mapper, ViewIndex, collation_key, signature
from settee.spec.collation import collate_json, collate_raw
from settee.tokens import encode_token

__all__ = [
    "STALENESS",
    "handle_temp_view",
    "handle_view",
    "handle_view_cleanup",
    "handle_view_queries",
    "live_signatures",
    "open_view",
    "parse_boolean",
    "parse_multi_query",
    "parse_pos_int",
    "parse_staleness",
    "queries_of",
    "query_view",
    "retryable",
    "update_index",
    "view_signatures",
]

_UNSET = object()


@dataclass(frozen=True)
class ViewQuery:
    """A view query's parameters as couch_mrview_http parses them (``validated``
    checks them against the view, as couch_mrview_util:validate_args)."""

    keys: list[Any] | None
    start: Any  # _UNSET or a key
    end: Any
    start_docid: str | None
    end_docid: str | None
    inclusive_end: bool
    descending: bool
    skip: int
    limit: int | None
    include_docs: bool
    reduce: bool | None  # None: the view's default
    group: bool | None  # None: not given
    level: int | None  # group_level as given (None: not given)
    update: str
    update_seq: bool = False
    conflicts: bool | None = None  # None: not given
    attachments: bool = False  # with include_docs: attachment data inline, not stubs
    att_encoding_info: bool = False  # with include_docs: settee.serve.encoding
    # Resolved by ``validated``: None: no grouping; -1: group=true (exact keys); N: a prefix.
    group_level: int | None = None
    # Set by ``validated`` from the view's options: its keys' order is Erlang's term order.
    raw_collation: bool = False

    @property
    def key_of(self) -> Callable[[Any], str]:
        """The sort key of the view's keys (``MapOptions.key_of``)."""
        return collation_key(raw=self.raw_collation)


_DEFAULTS: dict[str, Any] = {
    "keys": None,
    "start": _UNSET,
    "end": _UNSET,
    "start_docid": None,
    "end_docid": None,
    "inclusive_end": True,
    "descending": False,
    "skip": 0,
    "limit": None,
    "include_docs": False,
    "reduce": None,
    "group": None,
    "level": None,
    "update": "true",
    "update_seq": False,
    "conflicts": None,
    "attachments": False,
    "att_encoding_info": False,
}

#: Parameters parse_boolean reads, and the ViewQuery field each sets (None: parsed, unused).
_BOOLEANS = {
    "reduce": "reduce",
    "descending": "descending",
    "group": "group",
    "inclusive_end": "inclusive_end",
    "include_docs": "include_docs",
    "update_seq": "update_seq",
    "conflicts": "conflicts",
    "attachments": "attachments",
    "att_encoding_info": "att_encoding_info",
    "sorted": None,
}
_INTS = {"limit": "limit", "skip": "skip", "group_level": "level"}
_DOCIDS = {
    "startkey_docid": "start_docid",
    "start_key_doc_id": "start_docid",
    "endkey_docid": "end_docid",
    "end_key_doc_id": "end_docid",
}
_KEYS = {"startkey": "start", "start_key": "start", "endkey": "end", "end_key": "end"}


def _parse_error(reason: str) -> HTTPError:
    return HTTPError(400, "query_parse_error", reason)


def _shown(value: Any) -> str:
    """A parameter's value in a message, as Erlang's ``~p`` shows it (JSON-escaped:
    no lone surrogate reaches the answer)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _decoded(name: str, value: Any, decoded: bool) -> Any:
    if decoded or not isinstance(value, str):
        return value
    try:
        return parse_json(value)  # no NaN, Infinity or 1e999: keys must collate
    except json.JSONDecodeError:
        raise invalid_query_json(name, value) from None
    except (ValueError, RecursionError):
        raise _parse_error(f"Invalid JSON in {name}={value!r}: quote strings") from None


def parse_boolean(value: Any) -> bool:
    """couch_mrview_http:parse_boolean: true/false, or their text in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _parse_error(f"Invalid boolean parameter: {_shown(value)}")


def parse_pos_int(value: Any, decoded: bool = False) -> int:
    """couch_mrview_http:parse_pos_int: an integer >= 0, or its decimal text in a
    query string (``decoded`` False): a JSON body's string is an Erlang binary,
    which list_to_integer refuses, shown as ``<<"1">>``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif decoded and isinstance(value, str):
        raise _parse_error(f"Invalid value for integer: <<{_shown(value)}>>")
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value):
        try:
            number = int(value)
        except ValueError:  # more digits than int() converts
            raise _parse_error(f"Invalid value for integer: {_shown(value)}") from None
    else:
        raise _parse_error(f"Invalid value for integer: {_shown(value)}")
    if number < 0:
        raise _parse_error(f"Invalid value for positive integer: {_shown(value)}")
    return number


#: The parameters that say how fresh an index must be (parse_staleness).
STALENESS = ("stale", "stable", "update")


def parse_staleness(name: str, value: Any) -> str | None:
    """``stale``, ``stable`` or ``update`` as couch_mrview_http:parse_param reads
    them: the ``update`` they ask for ("true", "false" or "lazy"; None for
    ``stable``, which a single node has no use for), or query_parse_error."""
    if name == "stale":
        if value not in ("ok", "update_after"):
            raise _parse_error("Invalid value for `stale`.")
        return "false" if value == "ok" else "lazy"
    if name == "stable":
        if value is not True and value is not False and value not in ("true", "false"):
            raise _parse_error("Invalid value for `stable`.")
        return None
    update = str(value).lower() if isinstance(value, bool) else value
    if update not in ("true", "false", "lazy"):
        raise _parse_error("Invalid value for `update`.")
    return str(update)


def _docid(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # couch_util:to_binary
    raise _parse_error(f"`{name}` must be a string.")


def _apply(args: dict[str, Any], name: str, value: Any, decoded: bool) -> None:
    """One parameter over ``args``, as couch_mrview_http:parse_param: in order, so
    a later parameter overrides an earlier one (``key`` then ``endkey``)."""
    if name == "key":
        args["start"] = args["end"] = _decoded(name, value, decoded)
    elif name in _KEYS:
        args[_KEYS[name]] = _decoded(name, value, decoded)
    elif name == "keys":
        keys = _decoded(name, value, decoded)
        if not isinstance(keys, list):
            raise _parse_error("`keys` must be an array of strings.")
        if len(keys) == 1:
            args["start"] = args["end"] = keys[0]
        else:
            args["keys"] = keys
    elif name in _DOCIDS:
        args[_DOCIDS[name]] = _docid(name, value)
    elif name in _INTS:
        args[_INTS[name]] = parse_pos_int(value, decoded)
    elif name in _BOOLEANS:
        field = _BOOLEANS[name]
        parsed = parse_boolean(value)
        if field is not None:
            args[field] = parsed
    elif name in STALENESS:
        update = parse_staleness(name, value)
        if update is not None:
            args["update"] = update
    # Anything else CouchDB keeps as an "extra" and ignores.


def parse_view_query(query: Mapping[str, Any], body: Mapping[str, Any] | None = None) -> ViewQuery:
    """A view query from its query string (in its order) and, for a POST, its JSON
    body (``body`` None: a GET): couch_mrview_http:parse_body_and_query parses
    the body's members first, then the query string over them."""
    args = dict(_DEFAULTS)
    if body is not None:
        keys = body.get("keys")
        if "keys" in body and not isinstance(keys, list):
            raise HTTPError(400, "bad_request", "`keys` member must be an array.")
        if body.get("queries") is not None:
            raise HTTPError(
                400,
                "bad_request",
                "The `queries` parameter is no longer supported at this endpoint",
            )
        args["keys"] = keys
        for name, value in body.items():
            _apply(args, name, value, decoded=True)
        if isinstance(args["keys"], list) and len(args["keys"]) == 1:
            args["keys"] = None  # treat_single_keys_as_key
    else:
        first = query.get("keys")
        keys = None if first is None else _decoded("keys", first, False)
        if not (isinstance(keys, list) and len(keys) == 1):
            args["keys"] = keys
    for name, value in query.items():
        _apply(args, name, value, decoded=False)
    return ViewQuery(**args)


def parse_multi_query(query: Mapping[str, Any], item: Mapping[str, Any]) -> ViewQuery:
    """One query of a ``queries`` list: its members over the query string's
    parameters (chttpd_view:multi_query_view parses the query string first, as
    every query's defaults, then each query decoded over it)."""
    args = dict(_DEFAULTS)
    for name, value in query.items():
        _apply(args, name, value, decoded=False)
    for name, value in item.items():
        _apply(args, name, value, decoded=True)
    return ViewQuery(**args)


def _same_term(a: Any, b: Any) -> bool:
    """Erlang's ``K = K`` match: the same JSON, 1 and 1.0 differ, as do member orders."""
    return json.dumps(a) == json.dumps(b)


def validated(functions: ViewFunctions, q: ViewQuery) -> ViewQuery:
    """``q`` checked against its view (couch_mrview_util:validate_args, then
    check_range), in CouchDB's order, with its grouping and collation resolved."""
    q = replace(q, raw_collation=functions.mapper.options.raw_collation)
    # determine_group_level
    if q.group is False and q.level:
        raise _parse_error("Can't specify group=false and group_level>0 at the same time")
    level = -1 if q.group is True and q.level is None else (q.level or None)
    if q.reduce is True and functions.reduce is None:
        raise _parse_error("Reduce is invalid for map-only views.")
    reducing = functions.reduce is not None and q.reduce is not False
    if reducing and level != -1 and isinstance(q.keys, list):
        raise _parse_error("Multi-key fetches for reduce views must use `group=true`")
    if q.keys and (q.start is not _UNSET or q.end is not _UNSET):
        single = len(q.keys) == 1 and q.start is not _UNSET and q.end is not _UNSET
        if not (single and _same_term(q.keys[0], q.start) and _same_term(q.start, q.end)):
            raise _parse_error("`keys` is incompatible with `key`, `start_key` and `end_key`")
    if not reducing and level is not None:
        raise _parse_error("Invalid use of grouping on a map view.")
    if reducing and q.include_docs:
        raise _parse_error("`include_docs` is invalid for reduce")
    if reducing and q.conflicts is not None:
        raise _parse_error("`conflicts` is invalid for reduce views.")
    _check_range(q)
    return replace(q, group_level=level)


def _id_bytes(doc_id: str | None, default: bytes) -> bytes:
    return default if doc_id is None else doc_id.encode("utf-8", "surrogatepass")


def _check_range(q: ViewQuery) -> None:
    """couch_mrview_util:check_range: a start after the end (in the query's
    direction) matches nothing, and CouchDB says so rather than answer no rows."""
    if q.start is _UNSET or q.end is _UNSET or _same_term(q.start, q.end):
        return
    low, high = b"", b"\xff"  # the default doc ids: below and above every id
    start_id = _id_bytes(q.start_docid, high if q.descending else low)
    end_id = _id_bytes(q.end_docid, low if q.descending else high)
    order = (collate_raw if q.raw_collation else collate_json)(q.start, q.end)
    less = order < 0 or (order == 0 and start_id < end_id)
    if not q.descending and not less:
        raise _parse_error(
            "No rows can match your key range, reverse your start_key and end_key "
            "or set descending=true"
        )
    if q.descending and less:
        raise _parse_error(
            "No rows can match your key range, reverse your start_key and end_key "
            "or set descending=false"
        )


def open_view(
    entry: DbEntry, index_for: Any, ddoc: str, view: str
) -> tuple[ViewFunctions, ViewIndex]:
    """A view's functions and its index (opened, not updated)."""
    functions = entry.design.view(entry.db, ddoc, view)
    options = functions.mapper.options
    signed = signature(functions.map_source, functions.language, options, functions.lib)
    index: ViewIndex = index_for(entry, signed)
    return functions, index


#: One update at a time per index, waited for on the event loop (see ``update_index``).
_UPDATING: weakref.WeakKeyDictionary[ViewIndex, asyncio.Lock] = weakref.WeakKeyDictionary()


async def update_index(state: State, entry: DbEntry, index: ViewIndex, mapper: Mapper) -> None:
    """Bring ``index`` up to date on a worker. Requests that need the same index
    wait for its update here, on the event loop, rather than each blocking a
    worker thread on the index's lock: found by an adversarial client, sixteen
    queries of one slow-to-build view took every worker and stalled every other
    database for seconds."""
    lock = _UPDATING.setdefault(index, asyncio.Lock())
    async with lock:
        await state.run(retryable, _update, entry, index, mapper)


def _update(entry: DbEntry, index: ViewIndex, mapper: Mapper) -> None:
    index.update(entry.db, mapper)


def query_view(
    entry: DbEntry, functions: ViewFunctions, index: ViewIndex, q: ViewQuery
) -> dict[str, Any]:
    """A view query's answer from its index as it stands (``update_index`` first)."""
    q = validated(functions, q)
    reducing = functions.reduce is not None and q.reduce is not False
    rows = _rows(index, q)
    if reducing:
        result: dict[str, Any] = {"rows": _window(_reduce(functions, rows, q), q)}
    else:
        result = _map_result(entry.db, index, rows, q)
    if q.update_seq:  # after total_rows and offset, before rows, as couch_mrview_http sends it
        # The index's seq, not the database's: with stale=ok it is behind
        # (view_update_seq_test.exs), and it names what the rows reflect.
        seq = index.checkpoint()["since"]
        if seq == 0:  # an index never updated: the token of no change, as the db's are
            seq = encode_token([0] * entry.db.config["shards"])
        result = {
            **{k: v for k, v in result.items() if k != "rows"},
            "update_seq": seq,
            "rows": result["rows"],
        }
    if q.update == "lazy":
        index.update(entry.db, functions.mapper)
    return result


def _rows(index: ViewIndex, q: ViewQuery) -> list[dict[str, Any]]:
    if q.keys is not None:
        found = []
        # couch_mrview_util:key_opts: each key is a range of its own, narrowed by
        # start_key_docid/end_key_docid (view_multi_key_design_test.exs); an end
        # without a doc id is above every row of the key, so inclusive_end has
        # nothing to leave out then.
        inclusive = q.inclusive_end or q.end_docid is None
        for key in reversed(q.keys) if q.descending else q.keys:
            found += index.rows(
                (key, q.start_docid),
                (key, q.end_docid),
                descending=q.descending,
                inclusive_end=inclusive,
                key_of=q.key_of,
            )
        return found
    start = None if q.start is _UNSET else (q.start, q.start_docid)
    end = None if q.end is _UNSET else (q.end, q.end_docid)
    return list(
        index.rows(
            start, end, descending=q.descending, inclusive_end=q.inclusive_end, key_of=q.key_of
        )
    )


def _window(rows: list[Any], q: ViewQuery) -> list[Any]:
    stop = None if q.limit is None else q.skip + q.limit
    return rows[q.skip : stop]


def _map_result(
    db: settee.Database, index: ViewIndex, rows: list[dict[str, Any]], q: ViewQuery
) -> dict[str, Any]:
    total, _docs = index.counts()
    out = []
    for row in _window(rows, q):
        item: dict[str, Any] = {"id": row["d"], "key": row["k"], "value": row["v"]}
        if q.include_docs:
            item["doc"] = _linked_doc(db, row, q.attachments)
        out.append(item)
    if q.include_docs and q.att_encoding_info:
        for item in out:
            if item["doc"]:
                item["doc"] = with_encoding_info(db, item["doc"])
    if q.include_docs and q.conflicts:
        # The doc's own id: a linked doc ({"_id"} in the value) is not the row's.
        revs.add_conflicts(db, [r["doc"] for r in out if r["doc"]])
    offset = _offset(index, rows, q, total)
    return {"total_rows": total, "offset": offset, "rows": out}


def _offset(index: ViewIndex, rows: list[dict[str, Any]], q: ViewQuery, total: int) -> int:
    """Rows before the first one returned, in the direction of the query."""
    if q.keys is not None or q.start is _UNSET:
        return min(total, q.skip)
    before = index.rows_before((q.start, q.start_docid), descending=q.descending, key_of=q.key_of)
    return min(total, before + q.skip)


def _linked_doc(db: settee.Database, row: dict[str, Any], attachments: bool) -> Any:
    """``include_docs``: the emitting document, or the one ``{"_id"}`` in the value
    names, at the ``"_rev"`` the value names if any (couch_mrview_util's docid_rev:
    the id defaults to the emitting document's, the revision applies either way)."""
    value = row["v"]
    linked = value if isinstance(value, dict) else {}
    target = linked["_id"] if isinstance(linked.get("_id"), str) else row["d"]
    rev = linked.get("_rev")
    try:
        return db.get(target, rev=rev if isinstance(rev, str) else None, attachments=attachments)
    except (settee.NotFound, settee.BadRequest):
        return None


# -- reduce ----------------------------------------------------------------------------------


def _group_key(key: Any, level: int | None) -> Any:
    if level is None:
        return None
    if level == -1 or not isinstance(key, list):
        return key
    return key[:level]


def _reduce(functions: ViewFunctions, rows: list[dict[str, Any]], q: ViewQuery) -> list[Any]:
    groups: list[tuple[Any, list[dict[str, Any]]]] = []
    for row in rows:
        key = _group_key(row["k"], q.group_level)
        if groups and collate_json(groups[-1][0], key) == 0:
            groups[-1][1].append(row)
        else:
            groups.append((key, [row]))
    if q.group_level is None and not groups:
        return []
    return [_reduced_row(key, _reduce_rows(functions, members)) for key, members in groups]


def _reduced_row(key: Any, value: Any) -> dict[str, Any]:
    if isinstance(value, _Overflow):  # fabric_view_row:transform's error row: key null
        return {"key": None, "error": "reduce_overflow_error", "reason": value.reason}
    return {"key": key, "value": value}


@dataclass(frozen=True, slots=True)
class _Overflow:
    """A JavaScript reduction that did not shrink its input enough (``_check_shrinks``)."""

    reason: str


#: couchjs's reduce_limit defaults (query_server_config): an output longer than
#: this many characters must be under half its input's length.
_REDUCE_LIMIT_THRESHOLD = 5000
_REDUCE_LIMIT_RATIO = 2.0


def _check_shrinks(keys: list[Any], values: list[Any], reduction: Any) -> Any:
    """``reduction``, or an ``_Overflow`` when couchjs's views.js would throw
    reduce_overflow_error for it (reduce_limit=true, CouchDB's default): a reduce
    that returns its input, or more, grows a view's index without bound."""
    output = len(_compact_json([reduction]))
    given = len(_compact_json([[k, v] for k, v in zip(keys, values, strict=True)]))
    if output > _REDUCE_LIMIT_THRESHOLD and output * _REDUCE_LIMIT_RATIO > given:
        return _Overflow(
            f"Reduce output must shrink more rapidly: input size: {given} output size: {output}"
        )
    return reduction


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _reduce_rows(functions: ViewFunctions, rows: list[dict[str, Any]]) -> Any:
    values = [row["v"] for row in rows]
    builtin = functions.reduce or ""
    # couch_query_servers:builtin_reduce matches each builtin by prefix ("_sum_x" is
    # _sum), as couch_mrview:validate accepted it when the design document was saved.
    if builtin.startswith("_count"):
        return len(values)
    if builtin.startswith("_sum"):
        return sum_of(values)
    if builtin.startswith("_stats"):
        return stats_of(values)
    if builtin.startswith(("_top_", "_bottom_")):
        return ranked(builtin, values)
    if builtin.startswith(("_first", "_last")):
        triples = [(row["k"], row["d"], row["v"]) for row in rows]
        return first_of(triples) if builtin.startswith("_first") else last_of(triples)
    if builtin.startswith("_approx_count_distinct"):
        distinct: list[Any] = []
        for row in rows:
            if not any(collate_json(row["k"], seen) == 0 for seen in distinct):
                distinct.append(row["k"])
        return len(distinct)
    if functions.reducer is None:
        raise HTTPError(400, "query_parse_error", f"unknown builtin reduce function {builtin!r}")
    keys = [[row["k"], row["d"]] for row in rows]
    try:
        reduced = functions.reducer(keys, values, False)
    except (FunctionError, Thrown):
        return None  # views.js runReduce: handleViewError logs it, the reduction is null
    return _check_shrinks(keys, values, reduced)


async def handle_view(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, view: str
) -> web.StreamResponse:
    body: dict[str, Any] | None = None
    if request.method == "POST":
        require_json_content(request.headers)  # chttpd:validate_ctype
        raw = await state.read_body(request)
        body = await state.run(decode_object, raw) if raw else {}
    elif request.method not in ("GET", "HEAD"):
        raise method_not_allowed("GET,HEAD,POST")
    q = parse_view_query(request.query, body)
    found = await state.run(retryable, open_view, entry, state.registry.view_index, ddoc, view)
    functions, index = found
    validated(functions, q)  # before any index update, as CouchDB's get_view_index_pid
    if q.update == "true":
        await update_index(state, entry, index, functions.mapper)
    result = await state.run(retryable, query_view, entry, functions, index, q)
    return respond(reply(200, result))


async def handle_view_queries(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, view: str
) -> web.StreamResponse:
    """``POST /{db}/_design/{ddoc}/_view/{view}/queries``: ``{"queries": [...]}``
    answered ``{"results": [...]}``, one view answer each (views.rst), every
    query checked against the view before any runs (chttpd_view:multi_query_view)."""
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)  # chttpd:validate_ctype
    body = await state.run(decode_object, await state.read_body(request))
    queries = [parse_multi_query(request.query, item) for item in queries_of(body)]
    found = await state.run(retryable, open_view, entry, state.registry.view_index, ddoc, view)
    functions, index = found
    for q in queries:
        validated(functions, q)
    if any(q.update == "true" for q in queries):
        await update_index(state, entry, index, functions.mapper)
    results = await state.run(retryable, _query_all, entry, functions, index, queries)
    return respond(reply(200, {"results": results}))


def queries_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A multi-query body's ``queries`` (couch_mrview_util:get_view_queries, and
    chttpd's answer when it is missing), each a JSON object."""
    if "queries" not in body:
        raise HTTPError(400, "bad_request", "POST body must include `queries` parameter.")
    queries = body["queries"]
    if not isinstance(queries, list):
        raise HTTPError(400, "bad_request", "`queries` member must be an array.")
    if not all(isinstance(item, dict) for item in queries):  # a 500 in CouchDB
        raise HTTPError(400, "bad_request", "Each query must be a JSON object.")
    return queries


def _query_all(
    entry: DbEntry, functions: ViewFunctions, index: ViewIndex, queries: list[ViewQuery]
) -> list[dict[str, Any]]:
    return [query_view(entry, functions, index, q) for q in queries]


async def handle_temp_view(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``/{db}/_temp_view``, any method: 410, as chttpd_view:handle_temp_view_req
    answers since CouchDB 2.0 removed temporary views."""
    raise HTTPError(410, "gone", "Temporary views are not supported in CouchDB")


def retryable(fn: Any, entry: DbEntry, *args: Any) -> Any:
    """``fn(entry, *args)``, with an index closed under it (``_view_cleanup`` removed
    it) answered 503: the client may simply retry. The database itself closing is
    the router's to answer (404 when it was deleted)."""
    try:
        return fn(entry, *args)
    except settee.SetteeError as exc:
        if type(exc) is not settee.SetteeError or entry.db._closed or out_of_space(exc):
            raise  # not found, conflict, bad request, corruption, a full disk: their own
        raise HTTPError(
            503, "service_unavailable", f"an index closed while this query ran; retry ({exc})"
        ) from exc


def live_signatures(db: settee.Database) -> set[str]:
    """The index signatures the design documents define now: each JavaScript
    view's map (as ``run_view`` signs it) and each Mango index."""
    live = {index.view_signature() for index in mango.list_indexes(db) if index.ddoc is not None}
    rows = db.all_docs(startkey="_design/", endkey="_design0", include_docs=True)["rows"]
    for ddoc in (row["doc"] for row in rows if "doc" in row):
        live |= view_signatures(ddoc)
    return live


def view_signatures(ddoc: Mapping[str, Any]) -> set[str]:
    """The index signature of each JavaScript view of design document ``ddoc``, as
    ``open_view`` signs its map function (``design.DesignFunctions.view``)."""
    views = ddoc.get("views")
    language = str(ddoc.get("language", "javascript"))
    lib = views_lib(ddoc)
    return {
        signature(view["map"], language, MapOptions.of(ddoc, view), lib)
        for view in (views.values() if isinstance(views, dict) else [])
        if isinstance(view, dict) and isinstance(view.get("map"), str)
    }


def _view_cleanup(state: State, entry: DbEntry) -> list[str]:
    return state.registry.cleanup_views(entry, live_signatures(entry.db))


async def handle_view_cleanup(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}/_view_cleanup``: remove the view and Mango indexes no design
    document defines any more (202, as CouchDB)."""
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)
    await state.run(_view_cleanup, state, entry)
    return respond(reply(202, {"ok": True}))

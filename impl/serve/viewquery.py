"""``GET|POST /{db}/_design/{ddoc}/_view/{view}``: querying a view index
(``settee.serve.viewindex``) as CouchDB's ``couch_mrview`` answers.

Rows come in key order (CouchDB's collation, ties by document id); ``key``,
``keys``, ``startkey``/``endkey`` (and ``start_key``/``end_key``),
``startkey_docid``/``endkey_docid``, ``inclusive_end``, ``descending``,
``skip``, ``limit``, ``include_docs``, ``update`` (``true``, ``false``,
``lazy``; ``stale=ok|update_after``). A view with a reduce answers reduced
rows unless ``reduce=false``: the builtins ``_count``, ``_sum``, ``_stats``,
``_approx_count_distinct`` or a JavaScript ``reduce(keys, values, rereduce)``,
over everything (one row) or per key (``group=true``) or per key prefix
(``group_level=N``). Reduction reads every row of the range: settee stores no
intermediate reductions yet.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

import settee
from settee.serve import mango
from settee.serve.design import ViewFunctions
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    method_not_allowed,
    parse_json,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewindex import Mapper, ViewIndex, signature
from settee.spec.collation import collate_json

__all__ = [
    "handle_view",
    "handle_view_cleanup",
    "live_signatures",
    "open_view",
    "query_view",
    "retryable",
    "update_index",
]

_UNSET = object()


@dataclass(frozen=True)
class ViewQuery:
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
    group_level: int | None  # None: no grouping; -1: group=true (exact keys)
    update: str


def _json(params: Mapping[str, Any], *names: str, from_body: bool = False) -> Any:
    for name in names:
        if name in params:
            value = params[name]
            if from_body or not isinstance(value, str):
                return value
            try:
                return parse_json(value)  # no NaN, Infinity or 1e999: keys must collate
            except (ValueError, RecursionError):
                raise HTTPError(
                    400, "query_parse_error", f"Invalid JSON in {name}={value!r}: quote strings"
                ) from None
    return _UNSET


def _bool(params: Mapping[str, Any], name: str, default: bool | None) -> bool | None:
    value = params.get(name)
    if value is None:
        return default
    if value in (True, "true"):
        return True
    if value in (False, "false"):
        return False
    raise HTTPError(400, "query_parse_error", f"Invalid boolean parameter {name}={value!r}")


def _count(params: Mapping[str, Any], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        number = int(value) if not isinstance(value, bool) else -1
    except (TypeError, ValueError):
        number = -1
    if number < 0:
        raise HTTPError(
            400, "query_parse_error", f"Invalid value for {name}: {value!r}, expected an int >= 0"
        )
    return number


def parse_view_query(query: Mapping[str, str], body: Mapping[str, Any]) -> ViewQuery:
    params: dict[str, Any] = {**query}
    keys = body.get("keys", _UNSET) if body else _UNSET
    if keys is _UNSET:
        keys = _json(params, "keys")
    if keys is not _UNSET and not isinstance(keys, list):
        raise HTTPError(400, "query_parse_error", "`keys` must be an array of keys")
    key = _json(params, "key")
    start = _json(params, "startkey", "start_key")
    end = _json(params, "endkey", "end_key")
    if key is not _UNSET:
        start = end = key
    group = _bool(params, "group", False)
    level = _count(params, "group_level")
    stale = params.get("stale")
    update = {"ok": "false", "update_after": "lazy"}.get(str(stale), params.get("update", "true"))
    if update not in ("true", "false", "lazy"):
        raise HTTPError(400, "query_parse_error", "update must be true, false or lazy")
    return ViewQuery(
        keys=keys if isinstance(keys, list) else None,
        start=start,
        end=end,
        start_docid=params.get("startkey_docid", params.get("start_key_doc_id")),
        end_docid=params.get("endkey_docid", params.get("end_key_doc_id")),
        inclusive_end=bool(_bool(params, "inclusive_end", True)),
        descending=bool(_bool(params, "descending", False)),
        skip=_count(params, "skip") or 0,
        limit=_count(params, "limit"),
        include_docs=bool(_bool(params, "include_docs", False)),
        reduce=_bool(params, "reduce", None),
        # group_level=0 is CouchDB's default: one reduction over everything.
        group_level=level if level else (-1 if group else None),
        update=str(update),
    )


def open_view(
    entry: DbEntry, index_for: Any, ddoc: str, view: str
) -> tuple[ViewFunctions, ViewIndex]:
    """A view's functions and its index (opened, not updated)."""
    functions = entry.design.view(entry.db, ddoc, view)
    index: ViewIndex = index_for(entry, signature(functions.map_source, functions.language))
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
    reducing = functions.reduce is not None and q.reduce is not False
    if q.reduce is True and functions.reduce is None:
        raise HTTPError(400, "query_parse_error", "Reduce is invalid for map-only views.")
    if reducing and q.include_docs:
        raise HTTPError(400, "query_parse_error", "`include_docs` is invalid for reduce")
    if not reducing and q.group_level is not None:
        raise HTTPError(400, "query_parse_error", "Invalid use of grouping on a map view.")
    rows = _rows(index, q)
    if reducing:
        result: dict[str, Any] = {"rows": _window(_reduce(functions, rows, q), q)}
    else:
        result = _map_result(entry.db, index, rows, q)
    if q.update == "lazy":
        index.update(entry.db, functions.mapper)
    return result


def _rows(index: ViewIndex, q: ViewQuery) -> list[dict[str, Any]]:
    if q.keys is not None:
        found = []
        for key in reversed(q.keys) if q.descending else q.keys:
            found += index.rows(
                (key, None), (key, None), descending=q.descending, inclusive_end=True
            )
        return found
    start = None if q.start is _UNSET else (q.start, q.start_docid)
    end = None if q.end is _UNSET else (q.end, q.end_docid)
    return list(index.rows(start, end, descending=q.descending, inclusive_end=q.inclusive_end))


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
            item["doc"] = _linked_doc(db, row)
        out.append(item)
    offset = _offset(index, rows, q, total)
    return {"total_rows": total, "offset": offset, "rows": out}


def _offset(index: ViewIndex, rows: list[dict[str, Any]], q: ViewQuery, total: int) -> int:
    """Rows before the first one returned, in the direction of the query."""
    if q.keys is not None or q.start is _UNSET:
        return min(total, q.skip)
    before = index.rows_before((q.start, q.start_docid), descending=q.descending)
    return min(total, before + q.skip)


def _linked_doc(db: settee.Database, row: dict[str, Any]) -> Any:
    """``include_docs``: the emitting document, or the one ``{"_id"}`` in the value names."""
    value = row["v"]
    target = (
        value["_id"] if isinstance(value, dict) and isinstance(value.get("_id"), str) else row["d"]
    )
    rev = value.get("_rev") if isinstance(value, dict) and target != row["d"] else None
    try:
        return db.get(target, rev=rev if isinstance(rev, str) else None)
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
    return [{"key": key, "value": _reduce_rows(functions, members)} for key, members in groups]


def _reduce_rows(functions: ViewFunctions, rows: list[dict[str, Any]]) -> Any:
    values = [row["v"] for row in rows]
    builtin = functions.reduce
    if builtin == "_count":
        return len(values)
    if builtin == "_sum":
        return _sum(values)
    if builtin == "_stats":
        return _stats(values)
    if builtin == "_approx_count_distinct":
        distinct: list[Any] = []
        for row in rows:
            if not any(collate_json(row["k"], seen) == 0 for seen in distinct):
                distinct.append(row["k"])
        return len(distinct)
    if functions.reducer is None:
        raise HTTPError(400, "query_parse_error", f"unknown builtin reduce function {builtin!r}")
    keys = [[row["k"], row["d"]] for row in rows]
    return functions.reducer(keys, values, False)


def _sum(values: list[Any]) -> Any:
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return _finite_sum(values, "_sum")
    if all(isinstance(v, list) for v in values):
        width = max((len(v) for v in values), default=0)
        return [_sum([v[i] for v in values if i < len(v)]) for i in range(width)]
    raise HTTPError(
        400, "builtin_reduce_error", "The _sum function requires that map values be numbers"
    )


def _stats(values: list[Any]) -> dict[str, Any]:
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise HTTPError(
            400, "builtin_reduce_error", "The _stats function requires that map values be numbers"
        )
    return {
        "sum": _finite_sum(values, "_stats"),
        "count": len(values),
        "min": min(values) if values else 0,
        "max": max(values) if values else 0,
        "sumsqr": _finite_sum([v * v for v in values], "_stats"),
    }


def _finite_sum(values: list[Any], builtin: str) -> Any:
    """``sum(values)``, or builtin_reduce_error when floats overflow to infinity
    (JSON has no infinity: the answer was a 500, found in review)."""
    try:
        total = sum(values)
    except OverflowError:  # an int past a float's range met a float
        total = math.inf
    if isinstance(total, float) and not math.isfinite(total):
        raise HTTPError(
            400, "builtin_reduce_error", f"The {builtin} function overflowed: the sum is not finite"
        )
    return total


async def handle_view(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, view: str
) -> web.StreamResponse:
    body: dict[str, Any] = {}
    if request.method == "POST":
        raw = await state.read_body(request)
        if raw:
            body = await state.run(decode_object, raw)
    elif request.method not in ("GET", "HEAD"):
        raise method_not_allowed("GET,HEAD,POST")
    q = parse_view_query(request.query, body)
    found = await state.run(retryable, open_view, entry, state.registry.view_index, ddoc, view)
    functions, index = found
    if q.update == "true":
        await update_index(state, entry, index, functions.mapper)
    result = await state.run(retryable, query_view, entry, functions, index, q)
    return respond(reply(200, result))


def retryable(fn: Any, entry: DbEntry, *args: Any) -> Any:
    """``fn(entry, *args)``, with an index closed under it (``_view_cleanup`` removed
    it) answered 503: the client may simply retry. The database itself closing is
    the router's to answer (404 when it was deleted)."""
    try:
        return fn(entry, *args)
    except settee.SetteeError as exc:
        if type(exc) is not settee.SetteeError or entry.db._closed:
            raise  # not found, conflict, bad request, corruption: answers of their own
        raise HTTPError(
            503, "service_unavailable", f"an index closed while this query ran; retry ({exc})"
        ) from exc


def live_signatures(db: settee.Database) -> set[str]:
    """The index signatures the design documents define now: each JavaScript
    view's map (as ``run_view`` signs it) and each Mango index."""
    live = {index.view_signature() for index in mango.list_indexes(db) if index.ddoc is not None}
    rows = db.all_docs(startkey="_design/", endkey="_design0", include_docs=True)["rows"]
    for ddoc in (row["doc"] for row in rows if "doc" in row):
        views = ddoc.get("views")
        language = str(ddoc.get("language", "javascript"))
        for view in views.values() if isinstance(views, dict) else []:
            if isinstance(view, dict) and isinstance(view.get("map"), str):
                live.add(signature(view["map"], language))
    return live


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

"""``_all_docs``, ``_design_docs`` and ``_local_docs``, each with its ``/queries``
(many queries in one request): their parameters as couch_mrview_http reads them
(``decoded_query``, ``all_docs_query``, which ``_all_dbs`` reads too), and the
documents' attachments inline for ``attachments=true`` (``with_attachment_data``,
which ``_changes`` uses too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    query_bool,
    query_int,
    query_json,
    reply,
    require_json_content,
    require_method,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewquery import queries_of
from settee.spec.arguments import check_all_docs
from settee.spec.keys import in_range

__all__ = [
    "AllDocsQuery",
    "all_docs_query",
    "decoded_query",
    "handle_all_docs",
    "handle_all_docs_queries",
    "handle_design_docs",
    "handle_local_docs",
    "with_attachment_data",
]


@dataclass(frozen=True, slots=True)
class AllDocsQuery:
    """An ``_all_docs`` request's parameters, from one or more sources applied in
    order (see ``all_docs_query``); values unchecked (``Database.all_docs`` checks)."""

    start: Any = None
    end: Any = None
    keys: Any = None
    include_docs: Any = False
    limit: Any = None
    skip: Any = 0
    descending: Any = False
    inclusive_end: Any = True
    conflicts: Any = False
    update_seq: Any = False
    attachments: Any = False


_FLAGS = ("include_docs", "descending", "inclusive_end", "conflicts", "update_seq", "attachments")
_COUNTS = ("limit", "skip")
_JSON_PARAMS = ("key", "keys", "startkey", "start_key", "endkey", "end_key")


def decoded_query(query: Mapping[str, str]) -> dict[str, Any]:
    """The ``_all_docs`` parameters of a query string as JSON values, in their order."""
    out: dict[str, Any] = {}
    for name in query:
        if name in _FLAGS:
            out[name] = query_bool(query, name)
        elif name in _COUNTS:
            out[name] = query_int(query, name)
        elif name in _JSON_PARAMS:
            out[name] = query_json(query, name)
    if "keys" in out and not isinstance(out["keys"], list):
        raise HTTPError(400, "bad_request", "`keys` parameter must be an array.")
    return out


def all_docs_query(*sources: Mapping[str, Any]) -> AllDocsQuery:
    """The parameters of ``sources`` (decoded JSON), each over the ones before, in
    order, as couch_mrview_http:parse_params folds them: ``key`` sets both bounds
    and a later ``endkey`` moves one of them again."""
    merged: dict[str, Any] = {}
    start = end = None
    for source in sources:
        for name, value in source.items():
            merged[name] = value
            if name == "key":
                start = end = value
            elif name in ("startkey", "start_key"):
                start = value
            elif name in ("endkey", "end_key"):
                end = value
    known = {f: merged[f] for f in (*_FLAGS, *_COUNTS, "keys") if f in merged}
    return AllDocsQuery(start=start, end=end, **known)


async def _all_docs_request(state: State, request: web.BaseRequest) -> AllDocsQuery:
    """A GET's query string, or a POST's JSON body with the query string over it:
    couch_mrview_http:parse_body_and_query parses the query string last, so it
    wins when both give a parameter (all_docs_test.exs, "POST edge case with
    colliding parameters - query takes precedence")."""
    if request.method != "POST":
        require_method(request, "GET,HEAD,POST")
        return all_docs_query(decoded_query(request.query))
    require_json_content(request.headers)
    body = await state.run(decode_object, await state.read_body(request))
    if "keys" in body and not isinstance(body["keys"], list):  # chttpd_db's POST clause
        raise HTTPError(400, "bad_request", "`keys` body member must be an array.")
    return all_docs_query(body, decoded_query(request.query))


def _all_docs_result(db: settee.Database, q: AllDocsQuery) -> dict[str, Any]:
    result = db.all_docs(
        startkey=q.start,
        endkey=q.end,
        keys=q.keys,
        include_docs=q.include_docs,
        limit=q.limit,
        skip=q.skip,
        descending=q.descending,
        inclusive_end=q.inclusive_end,
    )
    if q.include_docs is True:
        docs = [row for row in result["rows"] if row.get("doc")]
        if q.attachments is True:
            for row in docs:
                row["doc"] = with_attachment_data(db, row["doc"])
        if q.conflicts is True:
            revs.add_conflicts(db, [row["doc"] for row in docs])
    if q.update_seq is True:
        result["update_seq"] = db.info()["update_seq"]
    return result


def with_attachment_data(db: settee.Database, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (read with stubs) with its attachments' data inline: ``attachments=true``
    beside ``include_docs`` on ``_all_docs``, views and ``_changes`` (couch_mrview_http
    puts ``attachments`` in the doc_options; changes_test.exs COUCHDB-1923)."""
    if not doc.get("_attachments"):
        return doc
    try:
        return db.get(doc["_id"], rev=doc["_rev"], attachments=True)
    except settee.NotFound:  # gone since the row was read: its stubs stand
        return doc


def _all_docs(db: settee.Database, q: AllDocsQuery) -> Any:
    return reply(200, _all_docs_result(db, q))


async def handle_all_docs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    q = await _all_docs_request(state, request)
    return respond(await state.run(_all_docs, entry.db, q))


#: The id range that holds every design document ("_design/" and "_design0"
#: themselves are not valid ids, so inclusive bounds take in nothing else).
_DESIGN_RANGE = ("_design/", "_design0")


def _is_design(key: Any) -> bool:
    return isinstance(key, str) and key.startswith(_DESIGN_RANGE[0])


def _design_docs_result(db: settee.Database, q: AllDocsQuery) -> dict[str, Any]:
    """``_all_docs`` within the design documents (CouchDB 2.1+ ``_design_docs``):
    the caller's bounds narrowed to that range, ``keys`` outside it left out
    (fabric_view_all_docs:filter_keys_by_namespace, after skip and limit as
    there), ``total_rows`` the number of design documents (as documented),
    ``offset`` counted from the first one."""
    lo, hi = _DESIGN_RANGE
    first, last = (hi, lo) if q.descending is True else (lo, hi)

    def earlier(a: str, b: str) -> bool:  # a comes before b in this scan's order
        return a > b if q.descending is True else a < b

    if isinstance(q.keys, list):
        result = _all_docs_result(db, q)
        result["rows"] = [row for row in result["rows"] if _is_design(row.get("key"))]
    else:
        start, end, inclusive_end = q.start, q.end, q.inclusive_end
        if start is None or (isinstance(start, str) and earlier(start, first)):
            start = first
        if end is None or (isinstance(end, str) and earlier(last, end)):
            end, inclusive_end = last, True
        narrowed = replace(q, start=start, end=end, inclusive_end=inclusive_end)
        result = _all_docs_result(db, narrowed)
    result["total_rows"] = len(db.all_docs(startkey=lo, endkey=hi)["rows"])
    if result.get("offset") is not None:
        before = db.all_docs(startkey=first, limit=0, descending=q.descending is True)["offset"]
        result["offset"] = max(0, result["offset"] - before)
    return result


def _design_docs(db: settee.Database, q: AllDocsQuery) -> Any:
    return reply(200, _design_docs_result(db, q))


async def handle_design_docs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    q = await _all_docs_request(state, request)
    return respond(await state.run(_design_docs, entry.db, q))


def _local_docs_result(entry: DbEntry, q: AllDocsQuery) -> dict[str, Any]:
    """``_local_docs``: the local documents as ``_all_docs`` rows (their bodies with
    ``include_docs``), the arguments checked as ``_all_docs`` checks them, ``keys``
    outside ``_local/`` left out (filter_keys_by_namespace); ``total_rows`` and
    ``offset`` null, as CouchDB 3."""
    args = check_all_docs(
        q.start, q.end, q.keys, q.include_docs, q.limit, q.skip, q.descending, q.inclusive_end
    )
    docs = entry.local.all()
    if args.keys is not None:
        by_id = {doc["_id"]: doc for doc in docs}
        keys = list(reversed(args.keys)) if args.descending else args.keys
        rows = [_local_row(by_id.get(k), k, args.include_docs) for k in keys]
    else:
        if args.descending:
            docs.reverse()
        rows = [
            _local_row(doc, doc["_id"], args.include_docs)
            for doc in docs
            if in_range(doc["_id"], args.startkey, args.endkey, args.descending, args.inclusive_end)
        ]
    stop = None if args.limit is None else args.skip + args.limit
    rows = [row for row in rows[args.skip : stop] if row["key"].startswith("_local/")]
    return {"total_rows": None, "offset": None, "rows": rows}


def _local_docs(entry: DbEntry, q: AllDocsQuery) -> Any:
    return reply(200, _local_docs_result(entry, q))


def _local_row(doc: dict[str, Any] | None, key: str, include_docs: bool) -> dict[str, Any]:
    if doc is None:
        return {"key": key, "error": "not_found"}
    row: dict[str, Any] = {"id": doc["_id"], "key": doc["_id"], "value": {"rev": doc["_rev"]}}
    if include_docs:
        row["doc"] = doc
    return row


async def handle_local_docs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    q = await _all_docs_request(state, request)
    return respond(await state.run(_local_docs, entry, q))


def _multi_all_docs(entry: DbEntry, namespace: str, query: Mapping[str, str], raw: bytes) -> Any:
    """``{"queries": [...]}``: each query's parameters over the query string's
    (chttpd_db:multi_all_docs_view parses each with the query string's as its
    defaults), all checked before any runs, one result each."""
    defaults = decoded_query(query)
    items = queries_of(decode_object(raw))
    parsed = [all_docs_query(defaults, _single_key_as_key(item)) for item in items]
    for q in parsed:  # all checked before any runs (fabric_util:validate_all_docs_args)
        check_all_docs(
            q.start, q.end, q.keys, q.include_docs, q.limit, q.skip, q.descending, q.inclusive_end
        )
    if namespace == "_local_docs":
        return reply(200, {"results": [_local_docs_result(entry, q) for q in parsed]})
    run = _design_docs_result if namespace == "_design_docs" else _all_docs_result
    return reply(200, {"results": [run(entry.db, q) for q in parsed]})


def _single_key_as_key(item: dict[str, Any]) -> dict[str, Any]:
    """A query's ``"keys": [k]`` as ``"key": k``, in its place: couch_mrview_http:
    parse_param reads a one-key list so, and in a multi-query no ``keys`` argument
    comes from elsewhere to keep the keys form (so a missing id gets no row)."""
    keys = item.get("keys")
    if not (isinstance(keys, list) and len(keys) == 1):
        return item
    return {("key" if k == "keys" else k): (keys[0] if k == "keys" else v) for k, v in item.items()}


async def handle_all_docs_queries(
    state: State, request: web.BaseRequest, entry: DbEntry, namespace: str
) -> web.StreamResponse:
    """``POST /{db}/_all_docs/queries`` (and ``_design_docs``, ``_local_docs``): many
    queries in one request (bulk-api.rst). chttpd_db reads the body without
    checking its Content-Type here."""
    require_method(request, "POST")
    raw = await state.read_body(request)
    return respond(await state.run(_multi_all_docs, entry, namespace, request.query, raw))

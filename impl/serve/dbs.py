"""Server and database endpoints: ``/``, ``/_all_dbs``, ``/_dbs_info``, ``/_uuids``,
``/_up``, ``PUT|GET|DELETE /{db}``, ``_all_docs``, ``_design_docs`` and
``_local_docs`` (each with its ``/queries``), ``_bulk_docs``, ``_bulk_get``,
``_revs_diff``, ``_revs_limit``, ``_compact`` and ``_ensure_full_commit``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

import settee
from settee.docinfo import DocInfo
from settee.serve import mime, revs
from settee.serve.docs import (
    check_doc,
    docid_problem,
    handle_post_doc,
    new_doc_id,
    revisions_win,
    validate_writes,
)
from settee.serve.protocol import (
    HTTPError,
    decode_json,
    decode_object,
    etag_of,
    method_not_allowed,
    query_bool,
    query_int,
    query_json,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewquery import queries_of
from settee.spec.arguments import check_all_docs
from settee.spec.attachments import since_position
from settee.spec.format import FORMAT_VERSION
from settee.spec.keys import in_range

__all__ = [
    "MAX_DBS_INFO_KEYS",
    "AllDocsQuery",
    "all_docs_query",
    "check_security",
    "decoded_query",
    "handle_active_tasks",
    "handle_all_dbs",
    "handle_all_docs",
    "handle_all_docs_queries",
    "handle_bulk_docs",
    "handle_bulk_get",
    "handle_compact",
    "handle_compact_views",
    "handle_db",
    "handle_dbs_info",
    "handle_design_docs",
    "handle_ensure_full_commit",
    "handle_local_docs",
    "handle_missing_revs",
    "handle_open_db",
    "handle_revs_diff",
    "handle_revs_limit",
    "handle_root",
    "handle_security",
    "handle_session",
    "handle_uuids",
    "with_attachment_data",
]

log = logging.getLogger("settee.serve")

#: The CouchDB API version whose behaviour settee serve follows.
COUCHDB_VERSION = "3.5.0"
_MAX_UUIDS = 1000


def _only(request: web.BaseRequest, allowed: str) -> None:
    methods = allowed.split(",")
    if request.method not in methods and not (request.method == "HEAD" and "GET" in methods):
        raise method_not_allowed(allowed)


async def handle_root(state: State, request: web.BaseRequest) -> web.StreamResponse:
    _only(request, "GET,HEAD")
    return respond(
        reply(
            200,
            {
                "couchdb": "Welcome",
                "version": COUCHDB_VERSION,
                "uuid": state.uuid,
                "features": [],
                "vendor": {"name": "settee", "version": settee.__version__},
            },
        )
    )


async def handle_up(state: State, request: web.BaseRequest) -> web.StreamResponse:
    _only(request, "GET")
    return respond(reply(200, {"status": "ok"}))


async def handle_all_dbs(state: State, request: web.BaseRequest) -> web.StreamResponse:
    _only(request, "GET")
    names = await state.run(_listed_names, state, request.query)
    return respond(reply(200, names))


def _listed_names(state: State, query: Mapping[str, str]) -> list[str]:
    """The database names ``_all_dbs`` lists: chttpd_misc:handle_all_dbs_info_req
    reads them as ``_all_docs`` of the shards database, so its range parameters
    apply (``startkey``/``start_key``, ``endkey``/``end_key``, ``key``,
    ``inclusive_end``, ``descending``, ``skip``, ``limit``)."""
    q = all_docs_query(decoded_query(query))
    names = state.registry.names()
    if q.descending is True:
        names.reverse()
    sign = -1 if q.descending is True else 1
    names = [
        n
        for n in names
        if (q.start is None or sign * _cmp(n, q.start) >= 0)
        and (q.end is None or sign * _cmp(n, q.end) < (1 if q.inclusive_end is True else 0))
    ]
    skip = q.skip or 0
    return names[skip:] if q.limit is None else names[skip : skip + q.limit]


def _cmp(name: str, key: Any) -> int:
    """``name`` against a JSON key in CouchDB's collation, as far as names need it:
    null, booleans and numbers sort before every string, arrays and objects after."""
    if isinstance(key, str):
        return (name > key) - (name < key)
    return -1 if isinstance(key, list | dict) else 1


#: chttpd_misc's ``max_db_number_for_dbs_info_req`` default.
MAX_DBS_INFO_KEYS = 100


async def handle_dbs_info(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """``GET /_dbs_info``: every listed database's info (the ``_all_dbs`` parameters
    apply); ``POST`` ``{"keys": [...]}``: the info of each named database or a
    not_found entry (chttpd_misc:handle_dbs_info_req; server/common.rst)."""
    _only(request, "GET,POST")
    if request.method == "POST":
        require_json_content(request.headers)
        body = await state.run(decode_object, await state.read_body(request))
        names = _dbs_info_keys(body)
    else:
        names = await state.run(_listed_names, state, request.query)
    answers = [await _db_info_entry(state, name) for name in names]
    if request.method != "POST":  # a database deleted since it was listed is left out
        answers = [a for a in answers if "info" in a]
    return respond(reply(200, answers))


def _dbs_info_keys(body: dict[str, Any]) -> list[Any]:
    keys = body.get("keys")
    if "keys" not in body:
        raise HTTPError(400, "bad_request", "`keys` member must exist.")
    if not isinstance(keys, list):
        raise HTTPError(400, "bad_request", "`keys` member must be an array.")
    if len(keys) > MAX_DBS_INFO_KEYS:
        raise HTTPError(400, "bad_request", "too_many_keys")
    return keys


async def _db_info_entry(state: State, name: Any) -> dict[str, Any]:
    """``{"key", "info"}``, or ``{"key", "error": "not_found"}`` for whatever
    fabric:get_db_info fails on (a missing database, a bad name, not a string)."""
    try:
        if not isinstance(name, str):
            raise HTTPError(404, "not_found", "not a database name")
        entry = await state.entry(name)
        info = await state.run(_db_info, entry)
    except (HTTPError, settee.SetteeError):
        return {"key": name, "error": "not_found"}
    return {"key": name, "info": info}


async def handle_uuids(state: State, request: web.BaseRequest) -> web.StreamResponse:
    _only(request, "GET")
    count = query_int(request.query, "count", 1) or 0
    if count > _MAX_UUIDS:
        raise HTTPError(400, "bad_request", "count parameter too large")
    uuids = [uuid.uuid4().hex for _ in range(count)]
    # couch_httpd_misc_handlers:handle_uuids_req's cache-busting headers (a past
    # Expires on purpose) and an ETag of the answer.
    headers = {
        "Cache-Control": "no-cache",
        "Pragma": "no-cache",
        "Expires": "Mon, 01 Jan 1990 00:00:00 GMT",
        "ETag": etag_of("".join(uuids)),
    }
    return respond(reply(200, {"uuids": uuids}, headers))


# -- /{db} ------------------------------------------------------------------------------------


def _db_info(entry: DbEntry) -> dict[str, Any]:
    info = entry.db.info()
    return {
        "db_name": entry.name,
        "update_seq": info["update_seq"],
        "sizes": {
            "file": info["sizes"]["file"],
            "external": info["sizes"]["active"],
            "active": info["sizes"]["active"],
        },
        "purge_seq": 0,
        "doc_del_count": info["doc_del_count"],
        "doc_count": info["doc_count"],
        "disk_format_version": FORMAT_VERSION,
        "compact_running": entry.compactions > 0,
        "cluster": {"q": len(entry.db.shards), "n": 1, "w": 1, "r": 1},
        "instance_start_time": "0",
        "props": {},
    }


async def handle_db(state: State, request: web.BaseRequest, name: str) -> web.StreamResponse:
    """``PUT /{db}`` (``?q=`` shards) and ``DELETE /{db}``; the other methods are
    ``handle_open_db``'s."""
    method = request.method
    if method == "PUT":
        shards = request.query.get("q")
        # ASCII digits only: str.isdigit() also says yes to "²", which int() refuses.
        if shards is not None and not (shards.isascii() and shards.isdigit() and len(shards) < 5):
            raise HTTPError(400, "bad_request", "The `q` value should be a positive integer.")
        if shards is not None and not 1 <= int(shards) <= 1024:
            raise HTTPError(400, "bad_request", "The `q` value should be from 1 to 1024.")
        copies = request.query.get("n")  # one node keeps one copy, but n is checked
        digits = copies is not None and copies.isascii() and copies.isdigit() and len(copies) < 5
        if copies is not None and not (digits and int(copies)):
            raise HTTPError(400, "bad_request", "The `n` value should be a positive integer.")
        await state.run(state.registry.create, name, int(shards) if shards else None)
        location = str(request.url.with_query(None))
        return respond(reply(201, {"ok": True}, {"Location": location}))
    if method == "DELETE":
        if "rev" in request.query:
            raise HTTPError(
                400,
                "bad_request",
                "You tried to DELETE a database with a ?=rev parameter. "
                "Did you mean to DELETE a document instead?",
            )
        await state.run(state.registry.delete, name)
        return respond(reply(200, {"ok": True}))
    return await handle_open_db(state, request, await state.entry(name))


async def handle_open_db(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET /{db}`` and ``POST /{db}`` (a new document) on the open ``entry``."""
    method = request.method
    if method in ("GET", "HEAD"):
        return respond(reply(200, await state.run(_db_info, entry)))
    if method == "POST":
        return await handle_post_doc(state, request, entry)
    raise method_not_allowed("DELETE,GET,HEAD,POST,PUT")


# -- _all_docs --------------------------------------------------------------------------------


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
        _only(request, "GET,HEAD,POST")
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
    _only(request, "POST")
    raw = await state.read_body(request)
    return respond(await state.run(_multi_all_docs, entry, namespace, request.query, raw))


# -- _bulk_docs, _bulk_get, _revs_diff ----------------------------------------------------------


def _bulk_docs(state: State, entry: DbEntry, raw: bytes) -> Any:
    payload = decode_object(raw)
    docs = payload.get("docs")
    if docs is None:
        raise HTTPError(400, "bad_request", "POST body must include `docs` parameter.")
    if not isinstance(docs, list):
        raise HTTPError(400, "bad_request", "`docs` parameter must be an array.")
    new_edits = payload.get("new_edits", True)
    if not isinstance(new_edits, bool):
        raise HTTPError(400, "bad_request", "`new_edits` parameter must be a boolean.")
    for doc in docs:  # every one before any is stored (couch_db:doc_from_json_obj_validate)
        check_doc(doc)
    # _local/ documents are stored last: a request refused (a 400 for another
    # document) must have stored none of them (found in review).
    local_docs = {i: doc for i, doc in enumerate(docs) if _is_local(doc)}
    docs = [doc for i, doc in enumerate(docs) if i not in local_docs]
    prepared = []
    for doc in docs:
        if "_id" not in doc:  # only when absent: check_doc refused "" and null
            doc = {**doc, "_id": new_doc_id()}
        doc = revisions_win(doc)
        if not new_edits and "_rev" not in doc and "_revisions" not in doc:
            raise HTTPError(
                400,
                "bad_request",
                "When `new_edits: false`, the document needs `_rev` or `_revisions` specified",
            )
        prepared.append(doc)
    if new_edits and payload.get("all_or_nothing") is True:
        return reply(417, _not_atomic(_with_local(local_docs, prepared, new_edits=True)))
    verdicts = validate_writes(entry, prepared)
    accepted = [doc for doc, refusal in zip(prepared, verdicts, strict=True) if refusal is None]
    results = entry.db.bulk_docs(accepted, new_edits=new_edits) if accepted else []
    if accepted:
        state.notify(entry)
    if len(accepted) < len(prepared):
        results = _with_refusals(prepared, verdicts, results, new_edits)
    local = {i: _bulk_local(entry, doc) for i, doc in local_docs.items()}
    if local:
        results = _with_local(local, results, new_edits)
    return reply(201, results)


def _not_atomic(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The 417 rows of ``"all_or_nothing": true``: CouchDB 3 refuses every document
    and writes none (fabric_doc_update:validate_atomic_update; bulk_docs_test.exs)."""
    return [
        {
            "id": doc["_id"],
            "rev": _given_rev(doc),
            "error": "not_implemented",
            "reason": "all_or_nothing is not supported",
        }
        for doc in docs
    ]


def _given_rev(doc: dict[str, Any]) -> str:
    """The revision a document in a write names, as couch_doc:rev_to_str shows its
    ``revs``: ``_revisions``' newest, else ``_rev``, else ``0-`` (a new document)."""
    revisions = doc.get("_revisions")
    if isinstance(revisions, dict) and isinstance(revisions.get("ids"), list) and revisions["ids"]:
        return f"{revisions.get('start')}-{revisions['ids'][0]}"
    rev = doc.get("_rev")
    return rev if isinstance(rev, str) else "0-"


def _is_local(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("_id", "")).startswith("_local/")


def _bulk_local(entry: DbEntry, doc: dict[str, Any]) -> dict[str, Any]:
    """A ``_local/`` document inside ``_bulk_docs``: stored as ``PUT /db/_local/id``
    stores it (CouchDB accepts them here), its answer row or error row."""
    doc_id = str(doc["_id"])
    try:
        if doc_id == "_local/":
            raise HTTPError(400, "bad_request", "Invalid _local document id.")
        rev = entry.local.put(doc_id, doc, doc.get("_rev"))
    except (HTTPError, settee.SetteeError) as exc:
        return {"id": doc_id, "error": exc.error, "reason": exc.reason}
    return {"ok": True, "id": doc_id, "rev": rev}


def _with_local(
    local: dict[int, dict[str, Any]], results: list[dict[str, Any]], new_edits: bool
) -> list[dict[str, Any]]:
    """The answer rows with the ``_local/`` documents' rows in their places."""
    if not new_edits:
        return [row for row in local.values() if "error" in row] + results
    others = iter(results)
    total = len(local) + len(results)
    return [local[i] if i in local else next(others) for i in range(total)]


def _with_refusals(
    docs: list[dict[str, Any]],
    verdicts: list[HTTPError | None],
    results: list[dict[str, Any]],
    new_edits: bool,
) -> list[dict[str, Any]]:
    """The answer rows in request order, a refused document's row in its place (with
    ``new_edits=false`` only failures have rows, so refusals come first, each with
    the revision it carried: couch_db:prep_and_validate_replicated_updates tags its
    errors {Id, Rev}, which chttpd_db:update_doc_result_to_json/1 shows)."""
    refused = [(doc, v) for doc, v in zip(docs, verdicts, strict=True) if v is not None]
    if not new_edits:
        return [
            {"id": doc["_id"], "rev": _given_rev(doc), "error": v.error, "reason": v.reason}
            for doc, v in refused
        ] + results
    refusals = iter({"id": doc["_id"], "error": v.error, "reason": v.reason} for doc, v in refused)
    written = iter(results)
    return [next(refusals) if v is not None else next(written) for v in verdicts]


async def handle_bulk_docs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    _only(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_bulk_docs, state, entry, raw))


def _bulk_get_one(
    db: settee.Database, item: Any, query: Mapping[str, str], *, stubs: bool = False
) -> dict[str, Any]:
    """One ``docs`` item's answer; ``stubs``: every attachment as a stub (the
    multipart answer sends the bytes as parts instead)."""
    if not isinstance(item, dict):
        return _bulk_error(None, None, "bad_request", "document must be a JSON object")
    doc_id, rev = item.get("id"), item.get("rev")
    if "id" not in item:
        return _bulk_error(None, None, "bad_request", "document id missed")
    problem = docid_problem(doc_id)  # chttpd_db:bulk_get_parse_doc_id
    if problem is not None:
        return _bulk_error(doc_id, None, "illegal_docid", problem)
    if rev is not None and revs.parse_rev_list([rev]) is None:
        return _bulk_error(doc_id, rev, "bad_request", "Invalid rev format")
    refusal = _atts_since_error(doc_id, item)
    if refusal is not None:
        return refusal
    since = item.get("atts_since") or None  # [] names no revision: stubs, as when absent
    try:
        results = revs.open_revs(
            db,
            doc_id,
            None if rev is None else [rev],
            latest=query_bool(query, "latest"),
            revisions=query_bool(query, "revs"),
            attachments=not stubs and query_bool(query, "attachments"),
            atts_since=None if stubs else since,
        )
    except settee.BadRequest as exc:
        return _bulk_error(doc_id, rev, "bad_request", str(exc))
    if not results:
        return _bulk_error(doc_id, "undefined" if rev is None else rev, "not_found", "missing")
    docs = [
        r if "ok" in r else _bulk_error(doc_id, r["missing"], "not_found", "missing")["docs"][0]
        for r in results
    ]
    return {"id": doc_id, "docs": docs}


def _atts_since_error(doc_id: Any, item: dict[str, Any]) -> dict[str, Any] | None:
    """chttpd_db:parse_field's refusal of an item's ``atts_since``, if any: not a
    list, or a list holding a bad rev; the row's ``rev`` is the bad value itself."""
    if "atts_since" not in item:
        return None
    since = item["atts_since"]
    if not isinstance(since, list):
        return _bulk_error(doc_id, since, "bad_request", "att_since value must be array of revs.")
    for rev in since:
        if revs.parse_rev_list([rev]) is None:
            return _bulk_error(doc_id, rev, "bad_request", "Invalid rev format")
    return None


def _bulk_error(doc_id: Any, rev: Any, error: str, reason: str) -> dict[str, Any]:
    body = {"id": doc_id, "rev": rev, "error": error, "reason": reason}
    return {"id": doc_id, "docs": [{"error": body}]}


def _bulk_get_items(raw: bytes, query: Mapping[str, str]) -> list[Any]:
    for name in ("open_revs", "new_edits", "w", "rev", "atts_since"):
        if name in query:
            raise HTTPError(400, "bad_request", f'"{name}" query parameter is not acceptable')
    payload = decode_object(raw)
    docs = payload.get("docs")
    if not isinstance(docs, list):
        raise HTTPError(400, "bad_request", "Missing JSON list of 'docs'.")
    return docs


def _bulk_get(db: settee.Database, raw: bytes, query: Mapping[str, str]) -> Any:
    items = _bulk_get_items(raw, query)
    return reply(200, {"results": [_bulk_get_one(db, item, query) for item in items]})


def _bulk_get_related(db: settee.Database, raw: bytes, query: Mapping[str, str]) -> list[Any]:
    """``_bulk_get``'s answers for a multipart response: each revision as a
    ``mime.Related`` (its attachments above the item's ``atts_since`` following),
    each error as its JSON body."""
    out: list[Any] = []
    for item in _bulk_get_items(raw, query):
        answer = _bulk_get_one(db, item, query, stubs=True)
        since = item.get("atts_since") if isinstance(item, dict) else None
        found = since and any("ok" in entry for entry in answer["docs"])
        info = revs.doc_info(db, item["id"]) if found else None
        for entry in answer["docs"]:
            if "ok" in entry:
                out.append(mime.related(entry["ok"], _since_position(info, entry["ok"], since)))
            else:
                out.append(entry["error"])
    return out


def _since_position(info: DocInfo | None, doc: dict[str, Any], since: Any) -> int:
    """``atts_since``'s position for the revision ``doc`` is (0: none named)."""
    return 0 if info is None else since_position(info.tree, doc["_rev"], since)


async def _send_bulk_get(
    state: State, request: web.BaseRequest, db: settee.Database, answers: list[Any], mixed: bool
) -> web.StreamResponse:
    outer, inner = mime.new_boundary(), mime.new_boundary()
    kind = "multipart/mixed" if mixed else "multipart/related"
    headers = {"Content-Type": f'{kind}; boundary="{outer.decode()}"'}
    response = web.StreamResponse(status=200, headers=headers)
    await response.prepare(request)
    for answer in answers:
        await response.write(b"\r\n--" + outer)
        if isinstance(answer, mime.Related) and answer.followers:
            head = (
                b"\r\nX-Doc-Id: "
                + mime.header_value(answer.doc_id)
                + b"\r\nX-Rev-Id: "
                + mime.header_value(answer.rev)
                + f"\r\nContent-Type: {answer.content_type(inner)}\r\n\r\n".encode()
            )
            await response.write(head)
            await mime.write_related(state, response, db, answer, inner)
        elif isinstance(answer, mime.Related):
            await response.write(b"\r\nContent-Type: application/json\r\n\r\n" + answer.json)
        else:
            await response.write(b'\r\nContent-Type: application/json; error="true"\r\n\r\n')
            await response.write(reply(200, answer).body)
    if answers:
        await response.write(b"\r\n--" + outer + b"--\r\n")
    await response.write_eof()
    return response


async def handle_bulk_get(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    _only(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    accept = request.headers.get("Accept")
    if mime.wants_multipart(accept, ("multipart/mixed", "multipart/related"), unless_json=True):
        answers = await state.run(_bulk_get_related, entry.db, raw, request.query)
        mixed = mime.wants_multipart(accept, ("multipart/mixed",), unless_json=True)
        return await _send_bulk_get(state, request, entry.db, answers, mixed)
    return respond(await state.run(_bulk_get, entry.db, raw, request.query))


def _revs_diff(db: settee.Database, raw: bytes) -> Any:
    return reply(200, db.revs_diff(decode_object(raw)))


async def handle_revs_diff(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    _only(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_revs_diff, entry.db, raw))


def _missing_revs(db: settee.Database, raw: bytes) -> Any:
    missing = {doc_id: e["missing"] for doc_id, e in db.revs_diff(decode_object(raw)).items()}
    return reply(200, {"missing_revs": missing})


async def handle_missing_revs(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}/_missing_revs``: ``_revs_diff`` without ``possible_ancestors``
    (chttpd_db), the form replicators before CouchDB 1.1 asked."""
    _only(request, "POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    return respond(await state.run(_missing_revs, entry.db, raw))


async def handle_revs_limit(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET`` the database's ``revs_limit``; ``PUT`` a positive integer to change it."""
    _only(request, "GET,PUT")
    if request.method != "PUT":
        return respond(reply(200, entry.db.config["revs_limit"]))
    limit = await state.run(decode_json, await state.read_body(request))
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise HTTPError(400, "bad_request", "The revs_limit must be a positive integer.")
    await state.run(state.registry.set_revs_limit, entry.name, limit)
    return respond(reply(200, {"ok": True}))


async def handle_security(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET`` the database's security object (CouchDB 3's admin-only default until
    one is stored); ``PUT`` one with ``admins``/``members`` of ``names``/``roles``.
    Stored and returned, not enforced: settee serve has no users (every request is
    an admin's)."""
    _only(request, "GET,PUT")
    if request.method != "PUT":
        return respond(reply(200, await state.run(entry.local.security)))
    value = await state.run(decode_object, await state.read_body(request))
    check_security(value)
    await state.run(entry.local.set_security, value)
    return respond(reply(200, {"ok": True}))


def check_security(value: dict[str, Any]) -> None:
    """couch_db:validate_security_object, answering 400 where CouchDB throws."""
    members = value.get("members", value.get("readers", {}))
    for group in (value.get("admins", {}), members):
        if not isinstance(group, dict):
            raise HTTPError(400, "bad_request", "admins or members must be a JSON list of strings")
        for key in ("names", "roles"):
            items = group.get(key, [])
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise HTTPError(400, "bad_request", f"{key} must be a JSON list of strings")


async def handle_session(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """No users, so every request is an admin's (CouchDB's admin party): ``GET`` says
    so, ``DELETE`` logs out of nothing, and a login cannot succeed (401, as CouchDB
    answers a name it does not know)."""
    _only(request, "GET,POST,DELETE")
    if request.method == "POST":
        raise HTTPError(401, "unauthorized", "Name or password is incorrect.")
    if request.method == "DELETE":
        return respond(reply(200, {"ok": True}))
    session = {
        "ok": True,
        "userCtx": {"name": None, "roles": ["_admin"]},
        "info": {"authentication_handlers": ["default"]},
    }
    return respond(reply(200, session))


async def handle_active_tasks(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """No replications or indexers run inside settee serve; compactions are quick
    and reported by ``compact_running`` in the database's info."""
    _only(request, "GET")
    return respond(reply(200, []))


# -- maintenance --------------------------------------------------------------------------------


async def handle_compact(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """202 at once, as CouchDB; the compaction runs on a worker (``compact_running``)."""
    _only(request, "POST")
    require_json_content(request.headers)
    entry.compactions += 1
    future = state.loop.run_in_executor(state.pool, entry.db.compact)
    state.background.add(future)

    def done(f: Any) -> None:
        entry.compactions -= 1
        state.background.discard(f)
        if not f.cancelled() and f.exception() is not None:
            log.error("compaction of %s failed: %r", entry.name, f.exception())

    future.add_done_callback(done)
    return respond(reply(202, {"ok": True}))


async def handle_compact_views(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str
) -> web.StreamResponse:
    """``POST /{db}/_compact/{ddoc}``: 202, or 404 when the design document is
    missing (chttpd_db:handle_compact_req). settee's view indexes are rebuilt
    from the database, not appended to, so there is nothing more to do."""
    _only(request, "POST")
    require_json_content(request.headers)
    await state.run(entry.db.get, "_design/" + ddoc)  # NotFound: 404 missing
    return respond(reply(202, {"ok": True}))


async def handle_ensure_full_commit(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """Every acknowledged write is already durable (fsync before acknowledging)."""
    _only(request, "POST")
    require_json_content(request.headers)
    return respond(reply(201, {"ok": True, "instance_start_time": "0"}))

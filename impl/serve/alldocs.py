"""``_all_docs``, ``_design_docs`` and ``_local_docs``, each with its ``/queries``
(many queries in one request): their parameters as couch_mrview_http reads them
(``decoded_query``, ``all_docs_query``, which ``_all_dbs`` reads too), and the
documents' attachments inline for ``attachments=true`` (``with_attachment_data``,
which ``_changes`` uses too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.encoding import with_encoding_info
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    query_json,
    reply,
    require_json_content,
    require_method,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewquery import (
    STALENESS,
    parse_boolean,
    parse_pos_int,
    parse_staleness,
    queries_of,
)
from settee.spec.arguments import check_all_docs
from settee.spec.keys import in_range

__all__ = [
    "AllDocsQuery",
    "Params",
    "all_docs_query",
    "all_docs_result",
    "bounded",
    "checked",
    "decoded_query",
    "handle_all_docs",
    "handle_all_docs_queries",
    "handle_design_docs",
    "handle_local_docs",
    "query_keys",
    "with_attachment_data",
]


@dataclass(frozen=True, slots=True)
class AllDocsQuery:
    """An ``_all_docs`` request's parameters, from one or more sources applied in
    order (see ``all_docs_query``); values unchecked (``checked`` and then
    ``Database.all_docs`` check them). ``start``/``end`` are the keys given;
    ``start_docid``/``end_docid`` stand in for them when absent (``bounded``)."""

    start: Any = None
    end: Any = None
    keys: Any = None
    start_docid: Any = None
    end_docid: Any = None
    group: Any = None
    group_level: Any = None
    reduce: Any = None
    include_docs: Any = False
    limit: Any = None
    skip: Any = 0
    descending: Any = False
    inclusive_end: Any = True
    conflicts: Any = False
    update_seq: Any = False
    attachments: Any = False
    att_encoding_info: Any = False


#: Parameters as a source gives them, in its order (a query string may repeat one).
Params = Sequence[tuple[str, Any]]

_FLAGS = (
    "include_docs",
    "descending",
    "inclusive_end",
    "conflicts",
    "update_seq",
    "attachments",
    "att_encoding_info",
    "group",
    "reduce",
)
_COUNTS = ("limit", "skip", "group_level")
#: Parameters couch_mrview_http:parse_param checks that ``_all_docs`` has no use for:
#: every document is read at once from the database itself (no index to be stale).
_CHECKED = (*STALENESS, "sorted")
_JSON_PARAMS = ("key", "keys", "startkey", "start_key", "endkey", "end_key")
#: couch_mrview_http:parse_param's doc id bounds (raw strings, not JSON) and the
#: AllDocsQuery field each sets.
_DOCIDS = {
    "startkey_docid": "start_docid",
    "start_key_doc_id": "start_docid",
    "endkey_docid": "end_docid",
    "end_key_doc_id": "end_docid",
}


def decoded_query(query: Mapping[str, str]) -> list[tuple[str, Any]]:
    """The ``_all_docs`` parameters of a query string as JSON values, in their
    order, repeats included (parse_params folds over every one)."""
    out: list[tuple[str, Any]] = []
    for name, text in query.items():
        if name in _JSON_PARAMS:
            out.append((name, query_json({name: text}, name)))
        elif name in _FLAGS or name in _COUNTS or name in _CHECKED or name in _DOCIDS:
            out.append((name, text))  # parsed by _apply, as parse_param parses either source
    return out


def query_keys(query: Mapping[str, str]) -> Any:
    """The query string's ``keys`` as chttpd_db's GET clause reads it first
    (``qs_json_value``, the first one): None, or the list every ``keys``-style
    request starts from."""
    keys = query_json(query, "keys")
    if "keys" in query and not isinstance(keys, list):
        raise HTTPError(400, "bad_request", "`keys` parameter must be an array.")
    return keys


def all_docs_query(
    *sources: Params | Mapping[str, Any], base: AllDocsQuery = AllDocsQuery()
) -> AllDocsQuery:
    """The parameters of ``sources`` (decoded JSON) over ``base``, each over the
    ones before, in order, as couch_mrview_http:parse_params folds them: ``key``
    sets both bounds and a later ``endkey`` moves one of them again."""
    q = base
    for source in sources:
        decoded = isinstance(source, Mapping)  # a JSON body, not a query string's pairs
        pairs = source.items() if isinstance(source, Mapping) else source
        for name, value in pairs:
            q = _apply(q, name, value, decoded)
    return q


def _apply(q: AllDocsQuery, name: str, value: Any, decoded: bool) -> AllDocsQuery:
    """One parameter over ``q`` (couch_mrview_http:parse_param). A one-key
    ``keys`` sets both bounds and leaves ``keys`` as it was: the request's own
    ``keys`` list (chttpd_db passes it in) still answers, any other bound is then
    refused (``checked``)."""
    if name == "key" or (name == "keys" and isinstance(value, list) and len(value) == 1):
        key = value[0] if name == "keys" else value
        return replace(q, start=key, end=key)
    if name in _FLAGS:
        return replace(q, **{name: parse_boolean(value)})
    if name in _COUNTS:
        return replace(q, **{name: parse_pos_int(value, decoded)})
    if name in _CHECKED:  # read and refused as a view's are, then of no use here
        _ = parse_staleness(name, value) if name in STALENESS else parse_boolean(value)
        return q
    if name == "keys":
        return replace(q, keys=value)
    if name in ("startkey", "start_key"):
        return replace(q, start=value)
    if name in ("endkey", "end_key"):
        return replace(q, end=value)
    if name in _DOCIDS:  # couch_util:to_binary: a string as it is, else its text
        return replace(q, **{_DOCIDS[name]: value if isinstance(value, str) else json.dumps(value)})
    return q


def _query_parse_error(reason: str) -> HTTPError:
    return HTTPError(400, "query_parse_error", reason)


def checked(q: AllDocsQuery) -> AllDocsQuery:
    """``q`` refused as couch_mrview_util:validate_args refuses a map view's
    arguments (validate_all_docs_args), in its order, with its reasons; then
    ``bounded``. The rest (counts, flags, ids) ``Database.all_docs`` checks."""
    group_level = _group_level(q)
    if q.reduce is not None and not isinstance(q.reduce, bool):
        raise _query_parse_error("Invalid `reduce` value.")
    if q.reduce is True:
        raise _query_parse_error("Reduce is invalid for map-only views.")
    if q.keys is not None and not isinstance(q.keys, list):
        raise _query_parse_error("`keys` must be an array of strings.")
    if not _keys_fit_bounds(q):
        raise _query_parse_error("`keys` is incompatible with `key`, `start_key` and `end_key`")
    if group_level != 0:
        raise _query_parse_error("Invalid use of grouping on a map view.")
    return bounded(q)


def _group_level(q: AllDocsQuery) -> Any:
    """couch_mrview_util:determine_group_level: ``"exact"`` for ``group=true``
    alone, else ``group_level`` (0 when neither is given)."""
    if q.group is False and isinstance(q.group_level, int) and q.group_level > 0:
        raise _query_parse_error("Can't specify group=false and group_level>0 at the same time")
    if q.group_level is None:
        return "exact" if q.group is True else 0
    return q.group_level


def _keys_fit_bounds(q: AllDocsQuery) -> bool:
    """validate_args: ``keys`` takes no bounds but the ones its only key set."""
    if not q.keys:
        return True
    if len(q.keys) == 1 and q.start == q.end == q.keys[0]:
        return True
    return q.start is None and q.end is None


def bounded(q: AllDocsQuery) -> AllDocsQuery:
    """``startkey_docid``/``endkey_docid`` as the bounds where no key bound is
    given: an all_docs key is its id (couch_mrview_util:ad_skey_opts and
    ad_ekey_opts take ``start_key_docid`` when ``start_key`` is undefined)."""
    start = q.start if q.start is not None else q.start_docid
    end = q.end if q.end is not None else q.end_docid
    return replace(q, start=start, end=end)


async def _all_docs_request(state: State, request: web.BaseRequest) -> AllDocsQuery:
    """A GET's query string, or a POST's JSON body with the query string over it:
    couch_mrview_http:parse_body_and_query parses the query string last, so it
    wins when both give a parameter (all_docs_test.exs, "POST edge case with
    colliding parameters - query takes precedence"). Either starts from the
    request's ``keys`` (chttpd_db's GET and POST clauses)."""
    if request.method != "POST":
        require_method(request, "GET,HEAD,POST")
        base = AllDocsQuery(keys=query_keys(request.query))
        return checked(all_docs_query(decoded_query(request.query), base=base))
    require_json_content(request.headers)
    body = await state.run(decode_object, await state.read_body(request))
    if "keys" in body and not isinstance(body["keys"], list):  # chttpd_db's POST clause
        raise HTTPError(400, "bad_request", "`keys` body member must be an array.")
    base = AllDocsQuery(keys=body.get("keys"))
    return checked(all_docs_query(body, decoded_query(request.query), base=base))


def all_docs_result(db: settee.Database, q: AllDocsQuery) -> dict[str, Any]:
    if isinstance(q.keys, list) and not all(isinstance(key, str) for key in q.keys):
        result = _by_any_keys(db, q)
    else:
        result = _by_range_or_ids(db, q)
    if q.include_docs is True:
        docs = [row for row in result["rows"] if row.get("doc")]
        if q.attachments is True:
            for row in docs:
                row["doc"] = with_attachment_data(db, row["doc"])
        if q.att_encoding_info is True:
            for row in docs:
                row["doc"] = with_encoding_info(db, row["doc"])
        if q.conflicts is True:
            revs.add_conflicts(db, [row["doc"] for row in docs])
    if q.update_seq is True:
        # fabric_view_all_docs:go answers keys with "update_seq": null.
        keyed = isinstance(q.keys, list)
        result["update_seq"] = None if keyed else db.info()["update_seq"]
    return result


def _by_any_keys(db: settee.Database, q: AllDocsQuery) -> dict[str, Any]:
    """``keys`` that are not all ids: fabric_view_all_docs:go takes the keys after
    ``skip`` and ``limit`` and answers a not_found row for each no document has,
    a number among them too (all_docs_test.exs, "POST with keys and limit");
    ``Database.all_docs`` takes only ids, so the others get their rows here."""
    ids = [key for key in q.keys if isinstance(key, str)]
    args = check_all_docs(
        None, None, ids, q.include_docs, q.limit, q.skip, q.descending, q.inclusive_end
    )
    keys = list(reversed(q.keys)) if args.descending else list(q.keys)
    stop = None if args.limit is None else args.skip + args.limit
    keys = keys[args.skip : stop]
    result = db.all_docs(
        keys=[k for k in keys if isinstance(k, str)], include_docs=args.include_docs
    )
    found = iter(result["rows"])
    result["rows"] = [
        next(found) if isinstance(k, str) else {"key": k, "error": "not_found"} for k in keys
    ]
    return result


def _by_range_or_ids(db: settee.Database, q: AllDocsQuery) -> dict[str, Any]:
    return db.all_docs(
        startkey=q.start,
        endkey=q.end,
        keys=q.keys,
        include_docs=q.include_docs,
        limit=q.limit,
        skip=q.skip,
        descending=q.descending,
        inclusive_end=q.inclusive_end,
    )


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
    return reply(200, all_docs_result(db, q))


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
    ``offset`` that of ``_all_docs`` at the narrowed start: couch_db:fold_design_docs
    folds the whole by_id tree from there, so the documents counted before it are
    every document before it (ids below ``_design/``, or above ``_design0``
    descending), and a range past the last design document counts them all."""
    lo, hi = _DESIGN_RANGE
    first, last = (hi, lo) if q.descending is True else (lo, hi)

    def earlier(a: str, b: str) -> bool:  # a comes before b in this scan's order
        return a > b if q.descending is True else a < b

    if isinstance(q.keys, list):
        result = all_docs_result(db, q)
        result["rows"] = [row for row in result["rows"] if _is_design(row.get("key"))]
    else:
        start, end, inclusive_end = q.start, q.end, q.inclusive_end
        if start is None or (isinstance(start, str) and earlier(start, first)):
            start = first
        if end is None or (isinstance(end, str) and earlier(last, end)):
            end, inclusive_end = last, True
        narrowed = replace(q, start=start, end=end, inclusive_end=inclusive_end)
        result = all_docs_result(db, narrowed)
    result["total_rows"] = len(db.all_docs(startkey=lo, endkey=hi)["rows"])
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
    keyed = isinstance(q.keys, list)  # then each key is its own range (all_docs_key_opts)
    ids = [k for k in q.keys if isinstance(k, str)] if keyed else q.keys
    start, end = (None, None) if keyed else (q.start, q.end)
    args = check_all_docs(
        start, end, ids, q.include_docs, q.limit, q.skip, q.descending, q.inclusive_end
    )
    docs = entry.local.all()
    if isinstance(q.keys, list):
        by_id = {doc["_id"]: doc for doc in docs}
        keys = list(reversed(q.keys)) if args.descending else q.keys
        rows = [
            _local_row(by_id.get(k) if isinstance(k, str) else None, k, args.include_docs)
            for k in keys
        ]
    else:
        if args.descending:
            docs.reverse()
        rows = [
            _local_row(doc, doc["_id"], args.include_docs)
            for doc in docs
            if in_range(doc["_id"], args.startkey, args.endkey, args.descending, args.inclusive_end)
        ]
    stop = None if args.limit is None else args.skip + args.limit
    rows = [row for row in rows[args.skip : stop] if _is_local(row["key"])]
    return {"total_rows": None, "offset": None, "rows": rows}


def _local_docs(entry: DbEntry, q: AllDocsQuery) -> Any:
    return reply(200, _local_docs_result(entry, q))


def _is_local(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("_local/")


def _local_row(doc: dict[str, Any] | None, key: Any, include_docs: bool) -> dict[str, Any]:
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
    defaults, but for ``keys``, ``group`` and ``group_level``, which parse_params
    sets afresh), all checked before any runs, one result each."""
    defaults = replace(
        all_docs_query(decoded_query(query)), keys=None, group=None, group_level=None
    )
    items = queries_of(decode_object(raw))
    parsed = [checked(all_docs_query(item, base=defaults)) for item in items]
    for q in parsed:  # all checked before any runs (fabric_util:validate_all_docs_args)
        keyed = isinstance(q.keys, list)
        ids = [k for k in q.keys if isinstance(k, str)] if keyed else q.keys
        start, end = (None, None) if keyed else (q.start, q.end)
        check_all_docs(
            start, end, ids, q.include_docs, q.limit, q.skip, q.descending, q.inclusive_end
        )
    if namespace == "_local_docs":
        return reply(200, {"results": [_local_docs_result(entry, q) for q in parsed]})
    run = _design_docs_result if namespace == "_design_docs" else all_docs_result
    return reply(200, {"results": [run(entry.db, q) for q in parsed]})


async def handle_all_docs_queries(
    state: State, request: web.BaseRequest, entry: DbEntry, namespace: str
) -> web.StreamResponse:
    """``POST /{db}/_all_docs/queries`` (and ``_design_docs``, ``_local_docs``): many
    queries in one request (bulk-api.rst). chttpd_db reads the body without
    checking its Content-Type here."""
    require_method(request, "POST")
    raw = await state.read_body(request)
    return respond(await state.run(_multi_all_docs, entry, namespace, request.query, raw))

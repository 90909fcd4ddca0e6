"""Show and list functions (CouchDB 3 still serves them, deprecated):

* ``/{db}/_design/{ddoc}/_show/{name}[/{docid}]``: ``shows.{name}`` called with the
  stored document (``null`` without an id, or when none is stored: missing or
  deleted) and the request object, as couch_mrview_show:handle_doc_show_req;
* ``/{db}/_design/{ddoc}/_list/{name}[/{ddoc2}]/{view}``: ``lists.{name}`` called
  with the view query's head (``total_rows``, ``offset``, ``update_seq`` when
  the query has them) and the request object, reading the rows with
  ``getRow()`` (handle_view_list).

Both run as CouchDB's render.js runs them (``js.py``): ``start``, ``send``,
``provides``/``registerType`` with the answer's type negotiated by
``?format=`` or ``Accept``, a string answer as the body, and the design
document as ``this``. The answer is sent as an update function's is
(``updates.external_response``). A show carries CouchDB's ETag (the design
document's and the document's revisions, ``Accept``, the user), which a function
cannot set, and ``If-None-Match`` with it is 304. A list is rendered whole
before it is sent (CouchDB streams each row's chunks), so its status and
headers are those of the last ``start()`` before the first chunk of data, as
CouchDB's; it has no ETag. A list may read ``_all_docs`` as its view.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from settee.serve.alldocs import (
    AllDocsQuery,
    all_docs_query,
    all_docs_result,
    checked,
    decoded_query,
    query_keys,
)
from settee.serve.dbs import db_info
from settee.serve.design import request_object
from settee.serve.js import JsFunction
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    etag_matches,
    etag_of,
    require_json_content,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.updates import (
    external_response,
    render_error,
    run_design_function,
    stored_doc,
)
from settee.serve.viewquery import (
    open_view,
    parse_view_query,
    query_view,
    retryable,
    update_index,
    validated,
)
from settee.spec.docids import new_docid

__all__ = ["handle_list", "handle_show"]

Rendered = tuple[int, CIMultiDict[str], bytes]


async def handle_show(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, parts: list[str]
) -> web.StreamResponse:
    """``parts``: the path after ``_show/`` (the function's name, then the doc id,
    which may hold slashes)."""
    if not parts or not parts[0]:
        raise HTTPError(404, "show_error", "Invalid path.")
    doc_id = "/".join(parts[1:]) or None
    req = await _request_object(state, request, entry, doc_id, await state.read_body(request))
    status, headers, body = await state.run(
        _show, entry, ddoc, parts[0], doc_id, req, request.headers
    )
    return web.Response(status=status, headers=headers, body=body)


def _show(
    entry: DbEntry,
    ddoc: str,
    name: str,
    doc_id: str | None,
    req: dict[str, Any],
    headers: Mapping[str, str],
) -> Rendered:
    function, design = entry.design.named_function(entry.db, ddoc, "shows", name)
    doc = stored_doc(entry, doc_id)
    # chttpd:make_etag of what the answer depends on (show_etag's parts).
    parts = [design.get("_rev"), doc and doc.get("_rev"), headers.get("Accept")]
    etag = etag_of(json.dumps(parts, ensure_ascii=False))
    if etag_matches(headers, etag):
        return 304, CIMultiDict({"ETag": etag}), b""
    response = _rendered(function, "show", [doc, req], design)
    if not isinstance(response, dict):
        raise render_error("undefined response from show function")
    return external_response(response, 200, {"ETag": etag})


async def handle_list(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, parts: list[str]
) -> web.StreamResponse:
    """``parts``: the path after ``_list/``: the list's name, then the view's name,
    or the name of the design document holding the view and the view's."""
    if len(parts) not in (2, 3):
        raise HTTPError(404, "list_error", "Bad path.")
    name, view = parts[0], parts[-1]
    view_ddoc = parts[1] if len(parts) == 3 else ddoc
    body: dict[str, Any] | None = None
    raw = await state.read_body(request)
    if request.method == "POST":
        require_json_content(request.headers)
        given = await state.run(decode_object, raw)
        body = {"keys": given["keys"]} if "keys" in given else {}  # handle_view_list_req
    elif request.method not in ("GET", "HEAD", "OPTIONS"):
        raise HTTPError(405, "method_not_allowed", "Only GET,POST,HEAD allowed")
    if view == "_all_docs":
        keys = (body or {}).get("keys", query_keys(request.query))
        base = AllDocsQuery(keys=keys)
        listed = checked(all_docs_query(decoded_query(request.query), base=base))
        result = await state.run(all_docs_result, entry.db, listed)
    else:
        result = await _view_result(state, entry, request, view_ddoc, view, body)
    req = await _request_object(state, request, entry, None, raw)
    status, headers, out = await state.run(_list, entry, ddoc, name, result, req)
    return web.Response(status=status, headers=headers, body=out)


async def _view_result(
    state: State,
    entry: DbEntry,
    request: web.BaseRequest,
    ddoc: str,
    view: str,
    body: dict[str, Any] | None,
) -> dict[str, Any]:
    """The view query's answer, as ``GET`` (or ``POST`` with ``keys``) of the view
    gives it."""
    q = parse_view_query(request.query, body)
    found = await state.run(retryable, open_view, entry, state.registry.view_index, ddoc, view)
    functions, index = found
    validated(functions, q)
    if q.update == "true":
        await update_index(state, entry, index, functions.mapper)
    result: dict[str, Any] = await state.run(retryable, query_view, entry, functions, index, q)
    return result


def _list(
    entry: DbEntry, ddoc: str, name: str, result: dict[str, Any], req: dict[str, Any]
) -> Rendered:
    function, design = entry.design.named_function(entry.db, ddoc, "lists", name)
    head = {key: result[key] for key in ("total_rows", "offset", "update_seq") if key in result}
    out = _rendered(function, "list", [head, req], design, result["rows"])
    start = out.get("start") or {}
    if not isinstance(start, dict):
        raise render_error("start() takes an object")
    response = {key: start[key] for key in ("code", "headers") if key in start}
    return external_response({**response, "body": out.get("body", "")}, 200, {})


async def _request_object(
    state: State, request: web.BaseRequest, entry: DbEntry, doc_id: str | None, raw: bytes
) -> dict[str, Any]:
    """CouchDB's request object for a show or list function (chttpd_external:
    json_req_obj): the body as text, ``"undefined"`` for a GET without one (what
    mochiweb's recv_body gives), the database's info, a fresh uuid."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPError(400, "bad_request", "the request body is not UTF-8") from None
    if not raw and request.method in ("GET", "HEAD", "OPTIONS"):
        text = "undefined"
    req = request_object(request, entry.name, body=text, doc_id=doc_id)
    req["uuid"] = new_docid()
    req["info"] = await state.run(db_info, entry)
    req["secObj"] = await state.run(entry.local.security)
    return req


def _rendered(
    function: JsFunction, kind: str, args: list[Any], design: dict[str, Any], rows: Any = None
) -> Any:
    """The function's answer; what it throws as render.js renderError passes it on."""
    return run_design_function(lambda: function.render(kind, args, design, rows))

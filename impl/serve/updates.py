"""Update functions: ``POST|PUT|... /{db}/_design/{ddoc}/_update/{name}[/{docid}]``.

As ``couch_mrview_show:send_doc_update_response``: the design document's
``updates.{name}`` is called with the stored document (``null`` without a
document id or when none is stored) and CouchDB's request object, and returns
``[doc, response]``. A ``doc`` that is not ``null`` is written as a ``PUT``
would write it (CouchDB's checks, ``validate_doc_update``), and the answer is
201 with ``X-Couch-Update-NewRev`` and ``X-Couch-Id``; otherwise 200. The
``response`` is a string (an HTML body) or CouchDB's response object (``code``,
``json``, ``body``, ``base64``, ``headers``), whose ``code`` wins; a body that is
not JSON goes with CouchDB's ``Content-Security-Policy: sandbox``. GET is refused
(update functions change documents). Where CouchDB answers a function that
throws, or returns no response, with a 500 ``render_error``, settee answers 400,
and a response object that cannot be sent as it is (an unknown member, a header
that is not one line, a status that is not final) is 400
``external_response_error``: the request named a broken function, and retrying
cannot help.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web
from multidict import CIMultiDict

import settee
from settee.serve.dbs import db_info
from settee.serve.design import request_object
from settee.serve.docchecks import check_doc
from settee.serve.docs import write_doc
from settee.serve.js import Thrown
from settee.serve.protocol import HTTPError
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.docids import new_docid

__all__ = [
    "external_response",
    "handle_update",
    "render_error",
    "run_design_function",
    "stored_doc",
    "thrown_error",
]

T = TypeVar("T")

#: The response object's members (chttpd_external:parse_external_response).
_RESPONSE_KEYS = frozenset({"code", "json", "body", "base64", "headers", "stop"})


async def handle_update(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, parts: list[str]
) -> web.StreamResponse:
    """``parts``: the path after ``_update/`` (the function's name, then the doc id;
    the router has dropped a trailing slash, as chttpd does)."""
    if not parts or not parts[0]:
        raise HTTPError(404, "update_error", "Invalid path.")
    if request.method in ("GET", "HEAD"):
        raise HTTPError(405, "method_not_allowed", "Update functions do not allow GET")
    raw = await state.read_body(request)
    doc_id = "/".join(parts[1:]) or None
    req = request_object(request, entry.name, body=_text(raw), doc_id=doc_id)
    req["uuid"] = new_docid()
    req["info"] = await state.run(db_info, entry)  # json_req_obj's get_db_info
    req["secObj"] = await state.run(entry.local.security)
    status, headers, body = await state.run(_update, state, entry, ddoc, parts[0], doc_id, req)
    return web.Response(status=status, headers=headers, body=body)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise HTTPError(400, "bad_request", "the request body is not UTF-8") from None


def _update(
    state: State, entry: DbEntry, ddoc: str, name: str, doc_id: str | None, req: dict[str, Any]
) -> tuple[int, CIMultiDict[str], bytes]:
    function = entry.design.update_function(entry.db, ddoc, name)
    stored = stored_doc(entry, doc_id)
    result = run_design_function(lambda: function(stored, req))
    # render.js runUpdate: result[0] and result[1], whatever else the array holds.
    if not isinstance(result, list):
        raise render_error("undefined response from update function")
    doc = result[0] if result else None
    response = result[1] if len(result) > 1 else None
    if isinstance(response, str):
        response = {"body": response}
    if not isinstance(response, dict):
        raise render_error("undefined response from update function")
    added: dict[str, str] = {}
    status = 200
    if isinstance(doc, dict):  # couch_mrview_show writes an object; anything else, nothing
        check_doc(doc)
        if "_id" not in doc:
            raise HTTPError(400, "illegal_docid", "Document id must not be empty")
        status, written = _write(state, entry, doc)
        added["X-Couch-Update-NewRev"] = written["rev"]
        added["X-Couch-Id"] = urllib.parse.quote(written["id"], safe="")
    return external_response(response, status, added)


def stored_doc(entry: DbEntry, doc_id: str | None) -> dict[str, Any] | None:
    """The document as couch_httpd_db:couch_doc_open gives it, with its conflicts (a
    ``_local/`` one from the local documents, as CouchDB opens those too); None
    without an id, or when none is stored (missing or deleted)."""
    if doc_id is None:
        return None
    try:
        if doc_id.startswith("_local/"):
            return entry.local.get(doc_id)
        return entry.db.get(doc_id, conflicts=True)
    except settee.NotFound:
        return None


def _write(state: State, entry: DbEntry, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Write the function's document as couch_db:update_doc does: a ``_local/`` one
    among the local documents (found probing: it was a 400 naming the engine's
    rule for ids), any other as a PUT of it would."""
    doc_id = doc["_id"]
    if isinstance(doc_id, str) and doc_id.startswith("_local/"):
        return 201, {"id": doc_id, "rev": entry.local.put(doc_id, doc, doc.get("_rev"))}
    return write_doc(state, entry, doc)


def external_response(
    response: dict[str, Any], status: int, added: dict[str, str]
) -> tuple[int, CIMultiDict[str], bytes]:
    """chttpd_external:send_external_response of the function's response object, with
    CouchDB's Content-Security-Policy on top of a body that is not JSON (a function's
    own policy can only narrow it). What would break the answer on the wire is
    refused: a header that is not one line of a token and text, the framing headers
    the server sets itself, a status that is not a final one."""
    unknown = sorted(set(response) - _RESPONSE_KEYS)
    if unknown:
        raise _external_error(f"Invalid data from external server: {unknown[0]}")
    code = response.get("code", status)
    if type(code) is not int or not 200 <= code <= 599:
        raise _external_error(f"code {code!r} is not a final HTTP status (200-599)")
    content_type, body = _body(response)
    headers: CIMultiDict[str] = CIMultiDict()
    if content_type != "application/json":
        headers["Content-Security-Policy"] = "sandbox"
    for name, value in _given_headers(response.get("headers", {})):
        headers.add(name, value)
    for name, value in added.items():
        headers[name] = value
    if "Content-Type" not in headers:
        headers["Content-Type"] = content_type
    return code, headers, b"" if code in (204, 304) else body


#: A header name (RFC 9110 5.6.2 token) and a value of visible text on one line.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
#: Headers the server sets for the answer's framing and connection.
_SERVERS_OWN = frozenset({"content-length", "transfer-encoding", "connection"})


def _given_headers(given: Any) -> list[tuple[str, str]]:
    if not isinstance(given, dict):
        raise _external_error("headers must be an object")
    out = []
    for name, value in given.items():
        if not _TOKEN.fullmatch(name) or name.lower() in _SERVERS_OWN:
            raise _external_error(f"header {name!r} cannot be set by a function")
        if isinstance(value, bool) or value is None or isinstance(value, int | float):
            value = json.dumps(value)  # couch_util:to_list of a number or an atom
        if not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise _external_error(f"header {name!r} has a value that is not one line of text")
        out.append((name, value))
    return out


def _body(response: dict[str, Any]) -> tuple[str, bytes]:
    if "json" in response:
        return "application/json", json.dumps(response["json"]).encode() + b"\n"
    if "base64" in response:
        try:
            data = base64.b64decode(str(response["base64"]), validate=True)
        except binascii.Error:
            raise _external_error("base64 is not base64") from None
        return "application/binary", data
    text = response.get("body", "")
    if not isinstance(text, str):
        raise _external_error("body must be a string")
    return "text/html; charset=utf-8", text.encode("utf-8", "surrogatepass")


def run_design_function(call: Callable[[], T]) -> T:
    """``call()`` of an update, show or list function, what it throws passed on as
    render.js renderError passes it (``thrown_error``); an ``Error`` thrown, or a
    time or memory limit, is a render error."""
    try:
        return call()
    except Thrown as thrown:
        raise thrown_error(thrown.value) from None
    except HTTPError as exc:
        if exc.error != "os_process_error":
            raise
        raise render_error(f"function raised error: {exc.reason}") from None


def thrown_error(value: Any) -> HTTPError:
    """What render.js renderError passes on: a thrown ``{error, reason}`` or
    ``["error", error, reason]`` is that error (403 ``forbidden``, 401, 404, 406
    ``not_acceptable`` as chttpd:error_info answers them, else 400); anything
    else a render error."""
    error = reason = None
    if isinstance(value, dict) and value.get("error") and value.get("reason"):
        error, reason = value["error"], value["reason"]
    elif isinstance(value, list) and len(value) >= 3 and value[0] in ("error", "fatal"):
        error, reason = value[1], value[2]
    if error is None:
        return render_error(f"function raised error: {json.dumps(value)}")
    error = error if isinstance(error, str) else json.dumps(error)
    reason = reason if isinstance(reason, str) else json.dumps(reason)
    return HTTPError(_THROWN_STATUS.get(error, 400), error, reason)


#: The statuses chttpd:error_info gives the errors functions throw.
_THROWN_STATUS = {"forbidden": 403, "unauthorized": 401, "not_found": 404, "not_acceptable": 406}


def render_error(reason: str) -> HTTPError:
    return HTTPError(400, "render_error", reason)


def _external_error(reason: str) -> HTTPError:
    return HTTPError(400, "external_response_error", reason)

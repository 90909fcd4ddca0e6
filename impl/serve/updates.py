"""Update functions: ``POST|PUT|... /{db}/_design/{ddoc}/_update/{name}[/{docid}]``.

As ``couch_mrview_show:send_doc_update_response``: the design document's
``updates.{name}`` is called with the stored document (``null`` without a
document id or when none is stored) and CouchDB's request object, and returns
``[doc, response]``. A ``doc`` that is not ``null`` is written as a ``PUT``
would write it (CouchDB's checks, ``validate_doc_update``), and the answer is
201 with ``X-Couch-Update-NewRev`` and ``X-Couch-Id``; otherwise 200. The
``response`` is a string (an HTML body) or CouchDB's response object (``code``,
``json``, ``body``, ``base64``, ``headers``), whose ``code`` wins. GET is refused
(update functions change documents). Where CouchDB answers a function that
throws, or returns something else, with a 500 ``render_error``, settee answers
400: the request named a broken function, and retrying cannot help.
"""

from __future__ import annotations

import base64
import binascii
import json
import urllib.parse
from typing import Any

from aiohttp import web

import settee
from settee.serve.design import request_object
from settee.serve.docchecks import check_doc
from settee.serve.docs import write_doc
from settee.serve.js import Thrown
from settee.serve.protocol import HTTPError
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.docids import new_docid

__all__ = ["handle_update"]

#: The response object's members (chttpd_external:parse_external_response).
_RESPONSE_KEYS = frozenset({"code", "json", "body", "base64", "headers", "stop"})


async def handle_update(
    state: State, request: web.BaseRequest, entry: DbEntry, ddoc: str, parts: list[str]
) -> web.StreamResponse:
    """``parts``: the path after ``_update/`` (the function's name, then the doc id)."""
    if parts and parts[-1] == "":
        parts = parts[:-1]  # a trailing slash, as chttpd drops it
    if not parts or not parts[0]:
        raise HTTPError(404, "update_error", "Invalid path.")
    if request.method in ("GET", "HEAD"):
        raise HTTPError(405, "method_not_allowed", "Update functions do not allow GET")
    raw = await state.read_body(request)
    doc_id = "/".join(parts[1:]) or None
    req = request_object(request, entry.name, body=_text(raw), doc_id=doc_id)
    req["uuid"] = new_docid()
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
) -> tuple[int, dict[str, str], bytes]:
    function = entry.design.update_function(entry.db, ddoc, name)
    stored = _stored(entry.db, doc_id)
    try:
        result = function(stored, req)
    except Thrown as thrown:
        raise _thrown(thrown.value) from None
    except HTTPError as exc:
        if exc.error != "os_process_error":  # an Error thrown, a time or memory limit
            raise
        raise _render_error(f"function raised error: {exc.reason}") from None
    if not (isinstance(result, list) and len(result) == 2):
        raise _render_error("the update function did not return [doc, response]")
    doc, response = result
    if isinstance(response, str):
        response = {"body": response}
    if not isinstance(response, dict):
        raise _render_error("undefined response from update function")
    headers: dict[str, str] = {}
    status = 200
    if doc is not None:
        check_doc(doc)
        if "_id" not in doc:
            raise HTTPError(400, "illegal_docid", "Document id must not be empty")
        status, written = write_doc(state, entry, doc)
        headers["X-Couch-Update-NewRev"] = written["rev"]
        headers["X-Couch-Id"] = urllib.parse.quote(written["id"], safe="")
    return _response(response, status, headers)


def _stored(db: settee.Database, doc_id: str | None) -> dict[str, Any] | None:
    """The document as couch_httpd_db:couch_doc_open gives it, with its conflicts;
    None without an id, or when none is stored (missing or deleted)."""
    if doc_id is None:
        return None
    try:
        return db.get(doc_id, conflicts=True)
    except settee.NotFound:
        return None


def _response(
    response: dict[str, Any], status: int, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    """chttpd_external:send_external_response of the function's response object."""
    unknown = sorted(set(response) - _RESPONSE_KEYS)
    if unknown:
        raise _external_error(f"Invalid data from external server: {unknown[0]}")
    code = response.get("code", status)
    if type(code) is not int or not 100 <= code <= 599:
        raise _external_error(f"code {code!r} is not an HTTP status")
    given = response.get("headers", {})
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise _external_error("headers must be an object of strings")
    content_type, body = _body(response)
    headers = {**given, **headers}
    if not any(name.lower() == "content-type" for name in headers):
        headers["Content-Type"] = content_type
    return code, headers, body


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


def _thrown(value: Any) -> HTTPError:
    """A thrown ``{error, reason}`` is the answer it names (render.js renderError
    throws it on); anything else a render error."""
    if isinstance(value, dict) and {"error", "reason"} <= set(value):
        error, reason = str(value["error"]), str(value["reason"])
        status = {"forbidden": 403, "unauthorized": 401, "not_found": 404}.get(error, 400)
        return HTTPError(status, error, reason)
    if isinstance(value, dict) and len(value) == 1 and set(value) & {"forbidden", "unauthorized"}:
        [(error, reason)] = value.items()
        return HTTPError(403 if error == "forbidden" else 401, error, str(reason))
    return _render_error(f"function raised error: {json.dumps(value)}")


def _render_error(reason: str) -> HTTPError:
    return HTTPError(400, "render_error", reason)


def _external_error(reason: str) -> HTTPError:
    return HTTPError(400, "external_response_error", reason)

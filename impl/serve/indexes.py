"""``/{db}/_index``: json indexes listed, created and deleted (mango_httpd).

``GET`` lists ``_all_docs`` and every json index, ``skip`` and ``limit`` applied
to the list; ``POST`` creates one (``settee.serve.mango``: the definition checked
and stored in a query design document); ``DELETE {ddoc}/json/{name}`` removes one
and ``POST _bulk_delete`` the one index of each design document it names. Paths
and methods answer as mango_httpd:handle_index_req's clauses do.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from aiohttp import web

import settee
from settee.serve import mango
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    method_not_allowed,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.validation import validated_write

__all__ = ["handle_index"]


def _invalid(error: str, reason: str) -> HTTPError:
    return HTTPError(400, error, reason)


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def _list_param(query: str, name: str) -> int | None:
    """mango_httpd:parse_index_param: an integer (its last value), else CouchDB's
    ``invalid_list_index_params`` (a 500 there, a 400 here). The query string is
    split at ``&`` and ``;`` both, as mochiweb_util:parse_qs splits it."""
    values = [
        urllib.parse.unquote_plus(pair.partition("=")[2])
        for pair in re.split("[&;]", query)
        if urllib.parse.unquote_plus(pair.partition("=")[0]) == name
    ]
    if not values:
        return None
    text = values[-1]
    if not (text.isascii() and text.lstrip("+-").isdigit() and len(text) < 20):
        raise _invalid_list_params()
    return int(text)


def _invalid_list_params() -> HTTPError:
    return _invalid("invalid_list_index_params", "Index parameter ranges: limit > 1, skip > 0")


def _listed(db: settee.Database, query: str) -> dict[str, Any]:
    """``GET /{db}/_index``: every index, ``skip`` and ``limit`` applied to the list
    (mango_httpd:handle_index_req; a limit below 1 or a negative skip is refused)."""
    listed = [index.listed() for index in mango.list_indexes(db)]
    limit = _list_param(query, "limit")
    skip = _list_param(query, "skip")
    if (limit is not None and limit < 1) or (skip is not None and skip < 0):
        raise _invalid_list_params()
    start = min(skip or 0, len(listed))
    end = len(listed) if limit is None else start + limit
    return {"total_rows": len(listed), "indexes": listed[start:end]}


def _index_answer(
    entry: DbEntry, method: str, rest: list[str], body: Any, query: str = ""
) -> tuple[int, Any]:
    db = entry.db

    def write(doc: dict[str, Any]) -> Any:
        return validated_write(entry, doc)

    if not rest and method in ("GET", "HEAD"):  # chttpd answers every HEAD as its GET
        return 200, _listed(db, query)
    if not rest and method == "POST":
        if not isinstance(body, dict):
            raise _invalid("bad_request", "Request body must be a JSON object")
        index = mango.parse_index_request(body)
        result = mango.create_index(db, index, write)
        return 200, {"result": result, "id": index.ddoc, "name": index.name}
    if not rest:
        raise method_not_allowed("GET,POST")
    if rest == ["_bulk_delete"]:  # mango_httpd matches this path before {ddoc}/json/{name}
        if method != "POST":
            raise method_not_allowed("POST")
        return 200, _bulk_delete(db, _bulk_delete_ids(body), write)
    if len(rest) == 4 and rest[0] == "_design":
        rest = ["_design/" + rest[1], *rest[2:]]
    if len(rest) == 3:
        # {ddoc}/{type}/{name} (mango_httpd): other methods are 405, and an index of
        # another type is not found.
        if method != "DELETE":
            raise method_not_allowed("DELETE")
        if rest[1] != "json":
            raise HTTPError(404, "not_found", "missing")
        mango.delete_index(db, rest[0], rest[2], write)
        return 200, {"ok": True}
    raise HTTPError(404, "not_found", "missing")


def _bulk_delete_ids(body: Any) -> list[str]:
    """``docids`` (and ``w``, which one node has no use for) checked as
    mango_opts:validate_bulk_delete checks them, in its order; a docid that is no
    string (CouchDB takes ``null`` and lists, then fails on them) is refused."""
    if not isinstance(body, dict):
        raise _invalid("bad_request", "Request body must be a JSON object")
    if "docids" not in body:
        raise _invalid("missing_required_key", "Missing required key: docids")
    ids = body["docids"]
    if not isinstance(ids, list):
        raise _invalid(
            "invalid_bulk_docs",
            f"Bulk Delete requires an array of non-null docids. Docids: {_show(ids)}",
        )
    for ddoc in ids:
        if not _index_name(ddoc):
            raise _invalid("invalid_index_name", f"Invalid index name: {_show(ddoc)}")
    w = body.get("w", 2)
    if isinstance(w, bool) or not isinstance(w, int) or w < 1:
        raise _invalid("invalid_pos_integer", f"{_show(w)} is not an integer greater than zero")
    for key in body:
        if key not in ("docids", "w"):
            raise _invalid("invalid_key", f"Invalid key {key} for this request.")
    return ids


def _index_name(value: Any) -> bool:
    """mango_opts:validate_use_index's string forms: ``ddoc``, ``_design/ddoc``,
    each with an optional ``/name``."""
    if not isinstance(value, str):
        return False
    parts = value.split("/")
    return len(parts) <= 2 or (len(parts) == 3 and parts[0] == "_design")


def _bulk_delete(db: settee.Database, ids: list[str], write: Any) -> dict[str, Any]:
    """``POST /{db}/_index/_bulk_delete``: the one index of each design document
    removed (mango_httpd:handle_index_req, mango_idx:delete). Each id answers
    ``{"id", "ok": true}`` in ``success`` or ``{"id", "error"}`` in ``fail``; both
    lists come out last id first, as mango_httpd's fold prepends them."""
    success: list[dict[str, Any]] = []
    fail: list[dict[str, Any]] = []
    indexes = mango.list_indexes(db)
    for given in ids:
        ddoc = given if given.startswith("_design/") else "_design/" + given
        found = [index for index in indexes if index.ddoc == ddoc]
        if len(found) > 1:  # mango_idx:delete matches [Idx] only: CouchDB fails with 500
            raise HTTPError(500, "unknown_error", f"{ddoc} holds more than one index")
        if not found:
            fail.insert(0, {"id": ddoc, "error": "not_found"})
            continue
        try:
            mango.delete_index(db, ddoc, found[0].name, write)
        except HTTPError as exc:
            fail.insert(0, {"id": ddoc, "error": exc.error})
        except settee.Conflict:
            fail.insert(0, {"id": ddoc, "error": "conflict"})
        else:
            success.insert(0, {"id": ddoc, "ok": True})
        indexes = mango.list_indexes(db)  # a docid given twice finds its index gone
    return {"success": success, "fail": fail}


async def handle_index(
    state: State, request: web.BaseRequest, entry: DbEntry, rest: list[str]
) -> web.StreamResponse:
    """``GET|POST /{db}/_index``, ``POST /{db}/_index/_bulk_delete`` and
    ``DELETE /{db}/_index/{ddoc}/json/{name}``."""
    body = None
    if request.method == "POST" and rest in ([], ["_bulk_delete"]):
        require_json_content(request.headers)
        body = await state.run(decode_object, await state.read_body(request))
    status, answer = await state.run(
        _index_answer, entry, request.method, rest, body, request.rel_url.raw_query_string
    )
    if request.method != "GET":
        state.notify(entry)
    return respond(reply(status, answer))

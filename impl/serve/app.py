"""The request router: the raw URL path to a handler, and errors to CouchDB bodies.

Routing uses the *raw* path, split on ``/`` before percent-decoding, because a
CouchDB document id may hold a slash (sent as ``%2F``) and a database name
too: ``/a%2Fb/c%2Fd`` is document ``c/d`` in database ``a/b``.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError
from yarl import URL

import settee
from settee.serve import (
    alldocs,
    attachments,
    bulk,
    changes,
    cluster,
    dbs,
    dbupdates,
    ddocinfo,
    docs,
    explain,
    find,
    indexes,
    node,
    purge,
    render,
    repdocs,
    replicate,
    updates,
    viewquery,
)
from settee.serve.lease import Lease
from settee.serve.protocol import HTTPError, error_reply, request_url, respond
from settee.serve.registry import DbEntry, db_missing
from settee.serve.state import State

__all__ = ["CouchRequest", "dispatch"]

log = logging.getLogger("settee.serve")

_SERVER_ROUTES = {
    "": dbs.handle_root,
    "_all_dbs": dbs.handle_all_dbs,
    "_dbs_info": dbs.handle_dbs_info,
    "_uuids": dbs.handle_uuids,
    "_up": dbs.handle_up,
    "_session": dbs.handle_session,
    "_active_tasks": dbs.handle_active_tasks,
    "_membership": cluster.handle_membership,
    "_db_updates": dbupdates.handle_db_updates,
    "_replicate": replicate.handle_replicate,
}

#: CouchDB's server endpoints settee serve does not have (README, "Not served yet"),
#: and what to say: their names taken as databases answered "Database does not exist."
_SERVER_NOT_SERVED = {
    "_reshard": "(a database's shard count is fixed when it is created)",
    "_utils": "(no Fauxton)",
    "_config": "(CouchDB 3 serves it at /_node/_local/_config, as settee serve does)",
    "_stats": "(CouchDB 3 serves it at /_node/_local/_stats, which settee serve does not yet)",
}

_DB_ROUTES = {
    "_all_docs": alldocs.handle_all_docs,
    "_design_docs": alldocs.handle_design_docs,
    "_local_docs": alldocs.handle_local_docs,
    "_bulk_docs": bulk.handle_bulk_docs,
    "_bulk_get": bulk.handle_bulk_get,
    "_revs_diff": bulk.handle_revs_diff,
    "_missing_revs": bulk.handle_missing_revs,
    "_revs_limit": dbs.handle_revs_limit,
    "_security": dbs.handle_security,
    "_compact": dbs.handle_compact,
    "_ensure_full_commit": dbs.handle_ensure_full_commit,
    "_find": find.handle_find,
    "_explain": explain.handle_explain,
    "_view_cleanup": viewquery.handle_view_cleanup,
    "_temp_view": viewquery.handle_temp_view,
    "_sync_shards": cluster.handle_sync_shards,
    "_purge": purge.handle_purge,
    "_purged_infos": purge.handle_purged_infos,
    "_purged_infos_limit": purge.handle_purged_infos_limit,
}

#: CouchDB's database endpoints settee serve does not have (README, "Not served
#: yet"): a clear answer, where their names taken as document ids answered
#: "missing", 405 or illegal_docid.
_NOT_SERVED = frozenset({"_auto_purge", "_time_seq"})

#: What chttpd:nonce/1 takes from a client's X-Couch-Request-ID: at most 36 of these.
_REQUEST_ID = re.compile(r"[0-9A-Za-z_-]{1,36}")


class CouchRequest(web.BaseRequest):
    """A request whose every response, streamed or not, carries the headers chttpd
    sends with each: ``Server``, ``Cache-Control`` (unless the handler set one),
    ``X-Couch-Request-ID`` (the client's, when chttpd:nonce/1 would keep it, else
    ten random hex digits) and ``X-CouchDB-Body-Time`` (chttpd:timing/0; settee
    does not time body reads, so it is "0", CouchDB's value for no body)."""

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        # aiohttp calls this after a response's own headers are set, before any is
        # sent: the one place a streamed answer (attachments, feeds) passes too.
        response.headers.setdefault("Cache-Control", "must-revalidate")
        response.headers["Server"] = "settee"  # over aiohttp's own, set just before
        response.headers["X-Couch-Request-ID"] = _request_id(self.headers)
        response.headers.setdefault("X-CouchDB-Body-Time", "0")
        if response.status == 304:
            # mochiweb sends its empty body's length (basics_test.exs: "A document
            # read with etag works" reads Content-Length "0"); aiohttp sends none.
            response.headers["Content-Length"] = "0"


def _request_id(headers: Mapping[str, str]) -> str:
    given = headers.get("X-Couch-Request-ID", "")
    return given if _REQUEST_ID.fullmatch(given) else secrets.token_hex(5)


#: chttpd_db's multi_all_docs_view endpoints: ``/{db}/{namespace}/queries``.
_ALL_DOCS_QUERIES = ("_all_docs", "_design_docs", "_local_docs")


async def dispatch(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """Answer one request; every failure becomes CouchDB's JSON error response."""
    try:
        response = await _route(state, request)
    except Exception as exc:  # every error a client can cause has a CouchDB body
        if isinstance(exc, RequestPayloadError):
            # A body aiohttp could not decode (Content-Encoding: gzip over bytes that
            # are not gzip, found in review): the client's fault, a 400 not a 500.
            exc = HTTPError(400, "bad_request", f"the request body cannot be read: {exc}")
        if isinstance(exc, ConnectionError):
            # The client went away (or was cut off for not reading): nobody to answer.
            log.info("%s %s: connection lost: %s", request.method, request.rel_url, exc)
        elif not isinstance(exc, HTTPError) and not hasattr(exc, "reason"):
            log.exception("%s %s failed", request.method, request.rel_url)
        response = respond(error_reply(exc))
        if isinstance(exc, HTTPError) and exc.headers.get("Connection") == "close":
            # Answer, then close: no keep-alive, and the body counts as ended, so
            # aiohttp does not linger reading a body that stopped arriving.
            response.force_close()
            request.content.feed_eof()
    return response  # CouchRequest adds the common headers as it is sent


def _last_value_wins(request: web.BaseRequest) -> web.BaseRequest:
    """The request with each query parameter given once, at its last value: CouchDB
    folds over the query string, so ``?limit=1&limit=2`` means 2 (views.rst: "the
    last argument wins"), where aiohttp's ``query.get`` gives the first."""
    query = request.query
    if len(query) == len(set(query)):
        return request
    last: dict[str, str] = {}
    for name, value in query.items():
        last.pop(name, None)  # keep the order of last appearance (key=, then endkey=)
        last[name] = value
    return request.clone(rel_url=request.rel_url.with_query(last))


#: The methods ``X-HTTP-Method-Override`` may name (chttpd:handle_request_int).
_OVERRIDABLE = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT", "COPY"})


def _method_override(request: web.BaseRequest) -> web.BaseRequest:
    """A POST with ``X-HTTP-Method-Override`` is the method it names, as chttpd lets
    "broken HTTP clients fake a full method vocabulary" (method_override_test.exs);
    the header is ignored on any other method. HEAD is served as GET (chttpd
    aliases it; the client sent a POST and reads a body)."""
    override = request.headers.get("X-HTTP-Method-Override")
    if request.method != "POST" or override not in _OVERRIDABLE:
        return request
    return request.clone(method="GET" if override == "HEAD" else override)


async def _route(state: State, request: web.BaseRequest) -> web.StreamResponse:
    if request.method == "CONNECT":
        # aiohttp reads a CONNECT target as an authority (host:port); mochiweb routes
        # it by its path like any other method's, so chttpd answers it there.
        request = request.clone(rel_url=URL(request.raw_path, encoded=True))
    request = _method_override(_last_value_wins(request))
    raw = request.rel_url.raw_path
    try:
        # chttpd:unquote with CouchDB's default decode_plus_to_space = true: a "+" in
        # the path is a space (a database, document or attachment named with a "+"
        # is sent as %2B, as clients' encodeURIComponent does).
        # Empty segments dropped, as chttpd's string:tokens(Path, "/") drops them:
        # "//db//doc/" is "/db/doc" (found probing: "//db" was 404, "/db//doc" 400).
        parts = [unquote_plus(p, errors="strict") for p in raw.split("/")[1:] if p]
    except UnicodeDecodeError:
        # CouchDB refuses it too; replacing the bytes would let two raw ids collide.
        raise HTTPError(400, "bad_request", "the URL path is not valid UTF-8") from None
    first = parts[0] if parts else ""
    if len(parts) <= 1 and first in _SERVER_ROUTES:
        return await _SERVER_ROUTES[first](state, request)
    if first == "_node":
        return await node.handle_node(state, request, parts[1:])
    if first == "_scheduler" and parts[1:2] == ["docs"]:
        return await repdocs.handle_scheduler_docs(state, request, parts[1:])
    if first == "_scheduler":
        return await replicate.handle_scheduler(state, request, parts[1:])
    if first in _SERVER_NOT_SERVED:
        raise HTTPError(
            404, "not_found", f"settee serve does not serve /{first} {_SERVER_NOT_SERVED[first]}"
        )
    # Any other first segment names a database, as chttpd_db:handle_request takes
    # it: creating one checks the name (system databases such as _users included),
    # every other request on a name no database has is 404.
    rest = parts[1:]
    if not rest and request.method in ("PUT", "DELETE"):
        return await dbs.handle_db(state, request, first)
    # The lease keeps the database open until the handler returns, which for a
    # streamed answer is after its last byte: idle databases close to make room
    # for others (registry.py), never one a request is using.
    async with state.lease(first) as lease:
        entry = lease.entry
        try:
            if not rest:  # GET, HEAD, POST /{db}: they use the open database, as below
                return await dbs.handle_open_db(state, request, entry)
            return await _route_in_db(state, request, lease, rest)
        except settee.SetteeError as exc:
            # A plain SetteeError is what a closed database raises (the subclasses are
            # answers: not found, conflict, bad request, corruption).
            closed = _closed_under(state, entry)
            if type(exc) is settee.SetteeError and closed is not None:
                raise closed from exc
            raise


def _design_redirect(request: web.BaseRequest) -> web.StreamResponse:
    """chttpd_db's answer to a read of ``/db/_design%2Fname...``: 301 to the path
    with the first ``_design%2F`` (any case) made ``_design/`` and the query kept.
    chttpd splits the raw path at every ``_design%2F`` and joins the pieces after
    the first with nothing between, dropping any later one: so does this. A write
    under such a path is not redirected."""
    head, *tail = re.split("_design%2F", request.rel_url.raw_path, flags=re.IGNORECASE)
    location = request_url(request, head + "_design/" + "".join(tail))
    query = request.rel_url.raw_query_string
    if location is not None and query:
        location += "?" + query
    headers = {} if location is None else {"Location": location}
    return web.Response(status=301, headers=headers)


def _closed_under(state: State, entry: DbEntry) -> HTTPError | None:
    """What a request answers when its database was closed while it ran: by a
    DELETE (404, as if it had come after) or a shutdown (503, retry); None when
    the database it used is still the open one. Its lease kept it from being
    closed to make room (registry.py), and an entry's ``db`` is never replaced."""
    if state.registry.stopping:
        return HTTPError(503, "service_unavailable", "the server is stopping")
    if state.registry.cached(entry.name) is not entry:
        return db_missing()
    return None


async def _route_in_db(
    state: State, request: web.BaseRequest, lease: Lease, rest: list[str]
) -> web.StreamResponse:
    entry = lease.entry
    head = rest[0]
    if rest == ["_changes"]:
        # The one handler given the lease itself: a live feed hands it back while it
        # waits, so thousands of idle feeds hold no database open.
        return await changes.handle_changes(state, request, lease)
    if len(rest) == 1 and head in _DB_ROUTES:
        return await _DB_ROUTES[head](state, request, entry)
    if head == "_local" or head.startswith("_local/"):
        name = "/".join(rest[1:]) if head == "_local" else head[len("_local/") :]
        if head == "_local" and len(rest) > 2:
            raise HTTPError(400, "bad_request", "_local documents do not accept attachments.")
        return await docs.handle_local(state, request, entry, name)
    if len(rest) == 2 and rest[1] == "queries" and head in _ALL_DOCS_QUERIES:
        return await alldocs.handle_all_docs_queries(state, request, entry, head)
    if head == "_compact" and len(rest) == 2:
        return await dbs.handle_compact_views(state, request, entry, rest[1])
    if head == "_index":
        return await indexes.handle_index(state, request, entry, rest[1:])
    if head in _NOT_SERVED:
        raise HTTPError(404, "not_found", f"settee serve does not serve {head} yet")
    if head == "_shards":
        return await cluster.handle_shards(state, request, entry, rest)
    if head == "_partition":
        return await cluster.handle_partition(state, request, entry, rest)
    if head == "_design" and len(rest) == 2:
        return await docs.handle_doc(state, request, entry, "_design/" + rest[1])
    if head.startswith("_design/") and request.method in ("GET", "HEAD"):
        return _design_redirect(request)
    design = head.startswith("_design/") or (head == "_design" and len(rest) > 1)
    if request.method in ("GET", "HEAD") and head.startswith("_") and not design:
        # chttpd_db opens any id it is asked for: one no write accepts is missing.
        raise settee.NotFound("missing")
    if len(rest) == 1:
        return await docs.handle_doc(state, request, entry, head)
    if head == "_design" and len(rest) == 5 and rest[2] == "_view" and rest[4] == "queries":
        return await viewquery.handle_view_queries(state, request, entry, rest[1], rest[3])
    if head == "_design" and len(rest) == 4 and rest[2] == "_view":
        return await viewquery.handle_view(state, request, entry, rest[1], rest[3])
    if head == "_design" and len(rest) > 2 and not rest[2].startswith("_"):
        ddoc = "_design/" + rest[1]
        return await attachments.handle_attachment(state, request, entry, ddoc, "/".join(rest[2:]))
    if head == "_design" and len(rest) > 2 and rest[2] == "_update":
        return await updates.handle_update(state, request, entry, rest[1], rest[3:])
    if head == "_design" and len(rest) > 2 and rest[2] == "_show":
        return await render.handle_show(state, request, entry, rest[1], rest[3:])
    if head == "_design" and len(rest) > 2 and rest[2] == "_list":
        return await render.handle_list(state, request, entry, rest[1], rest[3:])
    if head == "_design" and len(rest) == 3 and rest[2] == "_info":
        return await ddocinfo.handle_ddoc_info(state, request, entry, rest[1])
    if head == "_design" and len(rest) > 2:
        raise HTTPError(404, "not_found", f"settee serve does not serve {rest[2]} yet")
    # Any other id with a path is an attachment (chttpd_db:db_req's last clause): a
    # write under an id no write accepts is illegal_docid, a read of it missing.
    return await attachments.handle_attachment(state, request, entry, head, "/".join(rest[1:]))

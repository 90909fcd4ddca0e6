"""``POST /{db}/_purge``: remove leaf revisions for good (chttpd_db's ``_purge``).

The engine does the purge (``Database.purge``, SEMANTICS.md §19) and answers
CouchDB's ``{"purge_seq": null, "purged": {id: [revs]}}``, 201. What the server
adds is the view indexes: a document left with some leaves gets a new update
seq, so an index sees it as a change, but a document purged whole leaves no
change at all, and its rows would stay in every index. CouchDB keeps purge
records that indexes replay; settee serve removes those rows from each of the
database's view and Mango indexes right after the purge
(``Registry.forget_in_views``, ``ViewIndex.forget``), guarded by a marker so
that a crash or an error in between drops the indexes instead, to be built
again by their next query (``Registry.purging``).

Each purge request is recorded, one record per document with the revisions
asked for (purged or not), as couch_db:purge_docs keeps them: ``GET
/{db}/_purged_infos`` lists the newest ``_purged_infos_limit`` (``GET``/``PUT``,
default 1000) and the database's ``purge_seq`` counts them all. CouchDB writes a
record in the purge's own commit; here the request is written down before the
purge and recorded after it, and one a crash (or an error) left in between is run
again and recorded before the database's next request, or the next purge
(``Registry.purge``): a purge and its record are never one without the other.
``_auto_purge`` is not served. A request is refused as chttpd_db refuses it, past
CouchDB's default ``[purge]`` limits too (100 documents, 1000 revisions).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from settee.serve import revs
from settee.serve.protocol import (
    HTTPError,
    decode_json,
    decode_object,
    method_not_allowed,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.arguments import check_purge

__all__ = ["handle_purge", "handle_purged_infos", "handle_purged_infos_limit"]


async def handle_purge(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``POST /{db}/_purge`` with ``{id: [rev, ...]}``."""
    if request.method != "POST":
        raise method_not_allowed("POST")
    require_json_content(request.headers)
    raw = await state.read_body(request)
    answer = await state.run(_purge, state, entry, raw)
    if any(answer["purged"].values()):
        state.notify(entry)  # changes feeds: a partly purged document moved
    return respond(reply(201, answer))


#: CouchDB's ``[purge]`` defaults: documents, and revisions in all, in one request.
MAX_DOCUMENT_ID_NUMBER = 100
MAX_REVISIONS_NUMBER = 1000


def _purge(state: State, entry: DbEntry, raw: bytes) -> dict[str, Any]:
    # Checked before the marker: a refused request then leaves the indexes alone.
    body = decode_object(raw)
    _check_as_couchdb(body)
    request = check_purge(body)
    return state.registry.purge(entry, request)


def _check_as_couchdb(body: dict[str, Any]) -> None:
    """chttpd_db's own refusals, with its reasons, before settee's checks: each
    value read by couch_doc:parse_revs ("Invalid list of revisions", "Invalid rev
    format"), then the ``[purge]`` limits on documents and revisions."""
    wanted = sum(len(revs.request_revs(value)) for value in body.values())
    if len(body) > MAX_DOCUMENT_ID_NUMBER:
        raise HTTPError(400, "bad_request", "Exceeded maximum number of documents.")
    if wanted > MAX_REVISIONS_NUMBER:
        raise HTTPError(400, "bad_request", "Exceeded maximum number of revisions.")


async def handle_purged_infos(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET /{db}/_purged_infos``: ``{"purged_infos": [{"id", "revs"}, ...]}``."""
    if request.method not in ("GET", "HEAD"):
        raise method_not_allowed("GET")
    stored = await state.run(entry.local.purged_infos)
    return respond(reply(200, {"purged_infos": stored["infos"]}))


async def handle_purged_infos_limit(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    """``GET`` how many purge records the database keeps; ``PUT`` a positive integer."""
    if request.method in ("GET", "HEAD"):
        return respond(reply(200, await state.run(state.registry.purged_infos_limit, entry)))
    if request.method != "PUT":
        raise method_not_allowed("GET,PUT")
    limit = await state.run(decode_json, await state.read_body(request))
    if type(limit) is not int or limit < 1:
        raise HTTPError(400, "bad_request", "`purged_infos_limit` must be positive integer")
    await state.run(state.registry.set_purged_infos_limit, entry, limit)
    return respond(reply(200, {"ok": True}))

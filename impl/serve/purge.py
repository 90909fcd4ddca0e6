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

``_purged_infos``, ``_purged_infos_limit`` and ``_auto_purge`` are not served:
no purge records are kept.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from settee.serve.protocol import (
    decode_object,
    method_not_allowed,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec.arguments import check_purge

__all__ = ["handle_purge"]


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


def _purge(state: State, entry: DbEntry, raw: bytes) -> dict[str, Any]:
    # Checked before the marker: a refused request then leaves the indexes alone.
    request = check_purge(decode_object(raw))
    with state.registry.purging(entry):
        answer = entry.db.purge(request)
        touched = [doc_id for doc_id, revs in answer["purged"].items() if revs]
        if touched:
            state.registry.forget_in_views(entry, touched)
    return answer

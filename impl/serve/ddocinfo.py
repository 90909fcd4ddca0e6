"""``GET /{db}/_design/{ddoc}/_info``: the state of a design document's view indexes.

CouchDB answers ``{"name": ddoc, "view_index": {...}}`` (api/ddoc/common.rst) for
the view group the design document defines. settee keeps one index per map
function (``viewindex.py``), so the group's figures are its views' together: the
sizes added up, ``update_seq`` the oldest checkpoint among them (what the slowest
view has seen), ``updates_pending`` the source changes after it. As
``couch_mrview:get_info`` does, asking opens (creates) the indexes without
updating them. The signature is the md5 of the views' own signatures: it changes
exactly when a view's map function or the language does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aiohttp import web

import settee
from settee.serve.protocol import reply, require_method, respond
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.serve.viewindex import ViewIndex
from settee.serve.viewquery import retryable, view_signatures

__all__ = ["handle_ddoc_info"]

#: Changes read per call while counting what an index has not seen.
_PAGE = 10_000


async def handle_ddoc_info(
    state: State, request: web.BaseRequest, entry: DbEntry, name: str
) -> web.StreamResponse:
    require_method(request, "GET")
    # An index a purge or _view_cleanup closes while this reads it is a 503 to retry,
    # as for a view query (retryable), not a 500.
    return respond(reply(200, await state.run(retryable, _ddoc_info, entry, state, name)))


def _ddoc_info(entry: DbEntry, state: State, name: str) -> dict[str, Any]:
    ddoc = entry.db.get("_design/" + name)  # NotFound: 404 missing or deleted
    language = ddoc.get("language", "javascript")
    language = language if isinstance(language, str) else "javascript"
    signatures = sorted(view_signatures(ddoc))
    indexes = [state.registry.view_index(entry, sig) for sig in signatures]
    # Changes not yet indexed, counted once per checkpoint (views often share one).
    pending = {
        since: _pending(entry.db, since) for since in {i.checkpoint()["since"] for i in indexes}
    }
    oldest = max(pending, key=pending.__getitem__, default=None)
    group = json.dumps([language, signatures]).encode()
    return {
        "name": name,
        "view_index": {
            # The collators the keys were ordered by (couch_mrview_util records ICU's
            # version): settee's own, as /_node/_local/_versions names it.
            "collator_versions": [settee.__version__],
            "compact_running": any(index.compactions for index in indexes),
            "language": language,
            "purge_seq": 0,
            "signature": hashlib.md5(group, usedforsecurity=False).hexdigest(),
            "sizes": _sizes(indexes),
            "update_seq": 0 if oldest is None else _seq_number(oldest),
            "updater_running": any(index.updating() for index in indexes),
            "updates_pending": {
                "minimum": min(pending.values(), default=0),
                "preferred": max(pending.values(), default=0),
                "total": max(pending.values(), default=0),
            },
            "waiting_clients": 0,
            "waiting_commit": False,
        },
    }


def _seq_number(token: Any) -> int:
    """The number a changes token begins with (``"6-..."``: the sum of its shards'
    seqs), an integer as CouchDB's fabric_group_info sums them; 0 before any."""
    head = str(token).partition("-")[0]
    return int(head) if head.isascii() and head.isdigit() and len(head) < 20 else 0


def _pending(db: settee.Database, since: Any) -> int:
    """How many of ``db``'s changes come after ``since`` (a document counted once)."""
    count = 0
    while True:
        page = db.changes(since=since, limit=_PAGE)
        count += len(page["results"])
        if len(page["results"]) < _PAGE:
            return count
        since = page["last_seq"]


def _sizes(indexes: list[ViewIndex]) -> dict[str, int]:
    file = active = 0
    for index in indexes:
        sizes = index.db.info()["sizes"]
        file += sizes["file"]
        active += sizes["active"]
    return {"active": active, "external": active, "file": file}

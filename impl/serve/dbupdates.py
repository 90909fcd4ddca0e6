"""``GET /_db_updates``: which databases were created, updated or deleted, as
CouchDB's global_changes application keeps it for one node.

CouchDB does not keep a log of its own for this: each event is a document
``"<type>:<db name>"`` of the ``_global_changes`` database, written again (a new
revision, empty body) whenever the event happens again, and ``/_db_updates`` is
that database's ``_changes`` feed with each row shown as ``{"db_name", "type",
"seq"}`` (global_changes_listener, global_changes_server, global_changes_httpd).
So the feed lists each database's latest event of each type once, in the order
they were last written, survives a restart, and resumes from any ``since`` its
rows gave, exactly as a ``_changes`` feed does (it is one: changes.py serves it).

Events are collected as they happen (``DbEvents.record``, from any thread) and
written together every ``MAX_WRITE_DELAY`` seconds by one background task
(``flush_events``), as global_changes_server batches them every
``max_write_delay``: a busy database costs one small write per interval, not one
per document. Like CouchDB, events are written only while a database named
``_global_changes`` exists (``PUT /_global_changes`` creates it; CouchDB's setup
does the same) and dropped otherwise, and ``/_db_updates`` is 404 without it.
An event is durable once its interval's write is: events of the last interval
before a crash can be lost, which CouchDB's README says of its own ("designed
without the guarantee that a DB event will be persisted").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from settee.serve import changes
from settee.serve.dbevents import GLOBAL_CHANGES
from settee.serve.protocol import HTTPError, method_not_allowed, parse_integer
from settee.serve.registry import DbEntry
from settee.serve.state import State

__all__ = ["MAX_WRITE_DELAY", "events_only", "flush_events", "handle_db_updates"]

log = logging.getLogger("settee.serve")

#: Seconds between writes of the collected events (global_changes max_write_delay).
MAX_WRITE_DELAY = 0.5
_FEEDS = ("normal", "longpoll", "continuous", "eventsource")


async def flush_events(state: State) -> None:
    """Write the collected events every ``MAX_WRITE_DELAY`` seconds until the server
    stops, then once more (a clean stop loses none)."""
    while True:
        try:
            await asyncio.wait_for(state.stopping.wait(), MAX_WRITE_DELAY)
        except TimeoutError:
            await _write_pending(state)
            continue
        await _write_pending(state)
        return


async def _write_pending(state: State) -> None:
    ids = state.db_events.take()
    if not ids:
        return
    try:
        async with state.lease(GLOBAL_CHANGES) as lease:
            await state.run(_write_events, lease.entry, ids)
            state.notify(lease.entry)
    except HTTPError:
        pass  # no _global_changes database (or none can open now): dropped, as CouchDB
    except Exception:  # a damaged or closing _global_changes: the next interval tries again
        log.warning("settee serve: /_db_updates events not written", exc_info=True)


def _write_events(entry: DbEntry, ids: list[str]) -> None:
    """A new revision of each event's document, its body empty: after its current
    winner if it has one (global_changes_server:get_docs_locally)."""
    db = entry.db
    docs: list[dict[str, Any]] = []
    for row in db.all_docs(keys=ids)["rows"]:
        value = row.get("value")
        docs.append({"_id": row["key"], "_rev": value["rev"]} if value else {"_id": row["key"]})
    # A conflict (someone wrote the document meanwhile) leaves that event for its next
    # occurrence, as CouchDB's fabric:update_docs of a stale revision does.
    db.bulk_docs(docs)


def _as_event(row: dict[str, Any]) -> dict[str, Any] | None:
    """global_changes_httpd:default_transform_change: a row of ``_global_changes``
    as an event, or None for a document whose id is not ``"<type>:<db name>"``."""
    event, colon, name = row["id"].partition(":")
    if not colon:
        return None
    return {"db_name": name, "type": event, "seq": row["seq"]}


def events_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The feed's rows, each as its event (see ``_as_event``)."""
    return [event for event in map(_as_event, rows) if event is not None]


def _query(query: Any, max_timeout_ms: int) -> changes.ChangesQuery:
    """global_changes_httpd:parse_global_changes_query: feed, since, limit,
    descending, heartbeat and timeout; every other parameter is ignored."""
    feed = query.get("feed", "normal")
    if feed not in _FEEDS:
        raise HTTPError(
            400, "bad_request", "Supported `feed` types: normal, continuous, longpoll, eventsource"
        )
    heartbeat = None
    beat = query.get("heartbeat")
    if beat == "true":
        heartbeat = 60_000
    elif beat is not None and beat != "false":
        heartbeat = _non_negative(beat)
    timeout = query.get("timeout")
    timeout_ms = max_timeout_ms if timeout is None else _non_negative(timeout)
    limit = query.get("limit")
    return changes.ChangesQuery(
        feed=feed,
        since=changes.unpacked_since(query.get("since", "0")),
        limit=None if limit is None else _non_negative(limit),
        include_docs=False,
        conflicts=False,
        attachments=False,
        all_leaves=False,
        filter=None,
        heartbeat=None if heartbeat is None else min(heartbeat, max_timeout_ms) / 1000,
        timeout=min(timeout_ms, max_timeout_ms) / 1000,
        descending=feed == "normal" and query.get("descending") == "true",
        rows=events_only,
    )


def _non_negative(value: str) -> int:
    """global_changes_httpd:to_non_neg_int: 400 ``invalid_integer`` otherwise. Parsed
    as every integer parameter is (``parse_integer``): ``int()`` of more than 4,300
    digits raised, a 500 (found probing ``limit`` with 5,000 nines)."""
    number = parse_integer(value)
    if number is None or number < 0:
        raise HTTPError(400, "bad_request", "invalid_integer")
    return number


async def handle_db_updates(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """``GET /_db_updates``: the ``_changes`` feed of ``_global_changes`` as events
    (every request is an admin's: settee serve has no users)."""
    if request.method != "GET":
        raise method_not_allowed("GET")
    q = _query(request.query, state.options["changes_timeout"])
    async with state.lease(GLOBAL_CHANGES) as lease:
        return await changes.serve_feed(state, request, lease, q)

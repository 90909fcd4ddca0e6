"""``GET|POST /{db}/_changes``: ``feed=normal|longpoll|continuous``, ``since``,
``limit``, ``include_docs`` (with ``conflicts``), ``style=all_docs``, ``filter=_doc_ids``,
``heartbeat``, ``timeout``.

Waiting for new commits costs no polling: every write goes through this
server (the engine's ``LOCK`` lets one process open a database), so each
handler that wrote bumps the database's ``Notifier`` once the write is
durable, and waiting feeds wake up. Timeouts follow couch_changes: without a
heartbeat a feed stops after ``min(timeout, changes_timeout)`` ms; with one it
sends a newline every ``min(heartbeat, changes_timeout)`` ms and never times out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

import settee
from settee.serve import revs
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    encode_json,
    method_not_allowed,
    query_bool,
    query_int,
    query_json,
    reply,
    require_json_content,
    respond,
)
from settee.serve.registry import DbEntry
from settee.serve.state import State
from settee.spec import revtree

__all__ = ["handle_changes"]

_FEEDS = {
    "normal": "normal",
    "longpoll": "longpoll",
    "continuous": "continuous",
    "live": "continuous",
}


@dataclasses.dataclass(frozen=True, slots=True)
class ChangesQuery:
    feed: str
    since: Any
    limit: int | None
    include_docs: bool
    conflicts: bool  # with include_docs: each doc's _conflicts, as GET ?conflicts=true
    all_leaves: bool
    doc_ids: frozenset[str] | None
    heartbeat: float | None  # seconds
    timeout: float  # seconds


def _parse(query: Mapping[str, str], body: Mapping[str, Any], max_timeout_ms: int) -> ChangesQuery:
    feed = _FEEDS.get(query.get("feed", "normal"))
    if feed is None:
        raise HTTPError(
            400, "bad_request", "Supported `feed` types: normal, continuous, live, longpoll"
        )
    style = query.get("style", "main_only")
    if style not in ("main_only", "all_docs"):
        raise HTTPError(400, "bad_request", "style must be main_only or all_docs")
    doc_ids = None
    filter_name = query.get("filter")
    if filter_name == "_doc_ids":
        ids = body.get("doc_ids", query_json(query, "doc_ids"))
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise HTTPError(
                400, "bad_request", "`doc_ids` filter parameter is not a list of doc ids."
            )
        doc_ids = frozenset(ids)
    elif filter_name is not None:
        raise HTTPError(400, "bad_request", "settee supports only filter=_doc_ids")
    heartbeat = None
    if "heartbeat" in query:
        beat = 60_000 if query["heartbeat"] == "true" else query_int(query, "heartbeat")
        if not beat:
            raise HTTPError(
                400,
                "bad_request",
                "The heartbeat value should be a positive integer (ms).",
            )
        heartbeat = min(beat, max_timeout_ms) / 1000
    timeout = min(query_int(query, "timeout", max_timeout_ms) or 0, max_timeout_ms) / 1000
    return ChangesQuery(
        feed=feed,
        since=query.get("since", "0"),
        limit=query_int(query, "limit"),
        include_docs=query_bool(query, "include_docs"),
        conflicts=query_bool(query, "conflicts"),
        all_leaves=style == "all_docs",
        doc_ids=doc_ids,
        heartbeat=heartbeat,
        timeout=timeout,
    )


def read_changes(db: settee.Database, q: ChangesQuery, since: Any) -> dict[str, Any]:
    """One page of changes after ``since``, filtered and styled as ``q`` asks."""
    if q.doc_ids is None:
        result = db.changes(since=since, limit=q.limit, include_docs=q.include_docs)
    else:
        result = db.changes(since=since, include_docs=q.include_docs)
        rows = [row for row in result["results"] if row["id"] in q.doc_ids]
        if q.limit is not None and len(rows) > q.limit:
            rows = rows[: q.limit]
            result["last_seq"] = rows[-1]["seq"] if rows else since
        result["results"] = rows
    with_conflicts = q.conflicts and q.include_docs
    if (q.all_leaves or with_conflicts) and result["results"]:
        infos = revs.doc_infos(db, [row["id"] for row in result["results"]])
        for row in result["results"]:
            info = infos.get(row["id"])
            if info is None:
                continue
            if q.all_leaves:
                row["changes"] = [{"rev": rev} for rev in revtree.leaves(info.tree)]
            doc = row.get("doc")
            conflicts = revtree.conflicts(info.tree) if with_conflicts and doc else []
            if conflicts and doc.get("_rev") == info.winner:
                doc["_conflicts"] = conflicts
    return result


async def handle_changes(
    state: State, request: web.BaseRequest, entry: DbEntry
) -> web.StreamResponse:
    body: dict[str, Any] = {}
    if request.method == "POST":
        require_json_content(request.headers)
        raw = await state.read_body(request)
        if raw:
            body = await state.run(decode_object, raw)
    elif request.method not in ("GET", "HEAD"):
        raise method_not_allowed("GET,HEAD,POST")
    q = _parse(request.query, body, state.options["changes_timeout"])
    if q.feed == "normal":
        return respond(await state.run(_page, entry.db, q, q.since))
    since = q.since
    if since == "now":
        since = (await state.run(entry.db.info))["update_seq"]
    if q.feed == "longpoll":
        return await _longpoll(state, request, entry, q, since)
    return await _continuous(state, request, entry, q, since)


def _page(db: settee.Database, q: ChangesQuery, since: Any) -> Any:
    return reply(200, read_changes(db, q, since))


async def _wait(state: State, event: asyncio.Event, seconds: float | None) -> bool:
    """True when ``event`` fired; False after ``seconds`` or when the server stops."""
    stopping = asyncio.ensure_future(state.stopping.wait())
    fired = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait(
            {stopping, fired}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopping.cancel()
        fired.cancel()
    return fired in done and not state.stopping.is_set()


async def _longpoll(
    state: State, request: web.BaseRequest, entry: DbEntry, q: ChangesQuery, since: Any
) -> web.StreamResponse:
    deadline = None if q.heartbeat is not None else time.monotonic() + q.timeout
    stream: web.StreamResponse | None = None
    while True:
        event = entry.notifier.waiter()
        result = await state.run(read_changes, entry.db, q, since)
        remaining = None if deadline is None else deadline - time.monotonic()
        if (
            result["results"]
            or state.stopping.is_set()
            or (remaining is not None and remaining <= 0)
        ):
            break
        if await _wait(state, event, q.heartbeat if deadline is None else remaining):
            continue
        if q.heartbeat is not None and not state.stopping.is_set():
            if stream is None:
                stream = await _start_stream(request)
            await stream.write(b"\n")
    payload = await state.run(encode_json, result)
    if stream is None:
        return web.Response(status=200, body=payload, headers={"Content-Type": "application/json"})
    await stream.write(payload)
    await stream.write_eof()
    return stream


async def _start_stream(request: web.BaseRequest) -> web.StreamResponse:
    stream = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    stream.enable_chunked_encoding()
    await stream.prepare(request)
    return stream


async def _continuous(
    state: State, request: web.BaseRequest, entry: DbEntry, q: ChangesQuery, since: Any
) -> web.StreamResponse:
    """One JSON row per line as changes arrive, then ``{"last_seq"}`` at the timeout."""
    stream = await _start_stream(request)
    sent = 0
    deadline = None if q.heartbeat is not None else time.monotonic() + q.timeout
    while not state.stopping.is_set():
        event = entry.notifier.waiter()
        page = q if q.limit is None else _with_limit(q, q.limit - sent)
        result = await state.run(read_changes, entry.db, page, since)
        since = result["last_seq"]
        if result["results"]:
            lines = b"".join(encode_json(row) for row in result["results"])
            await stream.write(lines)
            sent += len(result["results"])
        if q.limit is not None and sent >= q.limit:
            break
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        if not await _wait(state, event, q.heartbeat if deadline is None else remaining):
            if q.heartbeat is None:
                break
            await stream.write(b"\n")
    await stream.write(encode_json({"last_seq": since, "pending": 0}))
    await stream.write_eof()
    return stream


def _with_limit(q: ChangesQuery, limit: int) -> ChangesQuery:
    return dataclasses.replace(q, limit=max(limit, 0))

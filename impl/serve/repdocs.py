"""The ``_replicator`` databases: a document written there starts the replication
it describes, deleting it stops that replication, and ``/_scheduler/docs`` tells
each document's state (CouchDB 3.5's couch_replicator_doc_processor,
replicator.rst).

What a ``_replicator`` database is and what it may hold: registry.is_replicator_db,
repspec.replicator_doc_refusal (a document that describes no replication is 403).
One ``Processor`` per server reads the changes of every such database, in the
event loop (one task; the jobs run on threads of their own, replicate.py):

- a new or changed document is parsed and its replication started, as its
  ``/_replicate`` body would be; a document that cannot be parsed, or that asks
  for a replication another document already runs, is marked ``failed`` in the
  document (``_replication_state``, ``_replication_state_reason``) and never
  retried until it changes;
- a one-shot replication that ends is marked ``completed`` in its document, with
  its ``_replication_stats``; a document found ``completed`` or ``failed`` is not
  run again (after a restart too);
- a job that fails (the source missing, the target refusing) is ``crashing``
  and started again after a wait that doubles, from ``FIRST_RETRY`` to
  ``MAX_RETRY`` seconds; a filter whose code cannot be read is ``error``, retried
  the same way;
- deleting the document, or its database, stops the job.

As CouchDB 3 (``[replicator] update_docs = false``), no other state is written
back: ``triggered`` and ``error`` fields found in a document are removed first.
A continuous job runs until its document or database goes or the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

import settee
from settee.serve.cluster import NODE
from settee.serve.notifier import REPLICATOR_WAKE
from settee.serve.protocol import HTTPError, query_int, reply, require_method, respond
from settee.serve.registry import DbEntry, is_replicator_db
from settee.serve.replicate import (
    INFO_FIELDS,
    Job,
    filter_replication_id,
    in_thread,
    iso8601,
    start_doc_job,
    stop_job,
    task,
)
from settee.serve.repspec import (
    Spec,
    parse_spec,
    replication_fields,
    replication_id,
    user_filter,
    without_password,
)
from settee.serve.state import State

__all__ = ["FIRST_RETRY", "MAX_RETRY", "Processor", "handle_scheduler_docs", "watch"]

log = logging.getLogger("settee.serve.repdocs")

#: Seconds before a crashed job, or a filter that could not be read, is tried again;
#: doubled after each failure in a row, up to ``MAX_RETRY``.
FIRST_RETRY = 5.0
MAX_RETRY = 600.0
#: Seconds between looks for ``_replicator`` databases that came or went without a
#: write this server saw (a write or a PUT/DELETE through it wakes the processor).
RESCAN = 10.0
#: replicator.rst's states, as ``?states=`` names them.
STATES = ("initializing", "error", "running", "pending", "crashing", "completed", "failed")
_STATE_FIELDS = (
    "_replication_state",
    "_replication_state_time",
    "_replication_state_reason",
    "_replication_id",
    "_replication_stats",
)


@dataclass(eq=False)
class RepDoc:
    """What the processor knows of one ``_replicator`` document it runs."""

    db: str
    doc_id: str
    #: The document's replication fields, to tell an edit that changes nothing.
    fields: dict[str, Any]
    spec: Spec
    state: str = "initializing"
    rep_id: str | None = None
    info: Any = None
    error_count: int = 0
    start_time: float = field(default_factory=time.time)
    last_updated: float = field(default_factory=time.time)
    job: Job | None = None
    retry_at: float | None = None  # monotonic time of the next start, when waiting

    def as_json(self) -> dict[str, Any]:
        """couch_replicator_doc_processor:ejson_doc (a scheduled job's with its summary)."""
        shown: dict[str, Any] = {
            "doc_id": self.doc_id,
            "database": self.db,
            "id": self.rep_id,
            "node": NODE,
            "state": self.state,
            "info": self.info,
            "error_count": self.error_count,
            "last_updated": iso8601(self.last_updated),
            "start_time": iso8601(self.start_time),
        }
        if self.job is not None or self.state == "crashing":
            assert self.spec.source is not None and self.spec.target is not None
            shown |= {
                "source": self.spec.source.uri,
                "target": self.spec.target.uri,
                "source_proxy": None,
                "target_proxy": None,
            }
        if self.job is not None:
            listed = task(self.job)
            shown["info"] = {name: listed[name] for name in INFO_FIELDS}
        return shown


class Processor:
    """Turns the ``_replicator`` databases' documents into replication jobs. Its
    state is the event loop's alone; a job's end comes back through
    ``call_soon_threadsafe``."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.docs: dict[tuple[str, str], RepDoc] = {}
        #: Per database: (its incarnation, the last change read).
        self.seqs: dict[str, tuple[str, Any]] = {}
        self.lock = asyncio.Lock()  # one pass over the databases at a time
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the passes -------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow every ``_replicator`` database until the server stops."""
        state = self.state
        while not state.stopping.is_set():
            woken = state.notifier.waiter(REPLICATOR_WAKE)
            try:
                await self.catch_up()
            except Exception:  # a damaged database must not stop the others' replications
                log.exception("settee serve: the _replicator databases were not read")
            waits = [
                asyncio.ensure_future(woken.wait()),
                asyncio.ensure_future(state.stopping.wait()),
            ]
            try:
                await asyncio.wait(waits, timeout=self._next_wait(), return_when="FIRST_COMPLETED")
            finally:
                for waiting in waits:
                    waiting.cancel()
        for rep in list(self.docs.values()):
            self._stop(rep)

    def _next_wait(self) -> float:
        due = [r.retry_at for r in self.docs.values() if r.retry_at is not None]
        if not due:
            return RESCAN
        return max(0.0, min(RESCAN, min(due) - time.monotonic()))

    async def catch_up(self) -> None:
        """Read what every ``_replicator`` database changed since the last pass, forget
        the databases that are gone, and start the jobs whose wait is over."""
        async with self.lock:
            names = [
                n for n in await self.state.run(self.state.registry.names) if is_replicator_db(n)
            ]
            for gone in set(self.seqs) - set(names):
                self._forget_db(gone)
            for name in names:
                await self._read_db(name)
            now = time.monotonic()
            for rep in list(self.docs.values()):
                if rep.retry_at is not None and rep.retry_at <= now:
                    await self._start(rep)

    async def _read_db(self, name: str) -> None:
        incarnation, since = self.seqs.get(name, (None, 0))
        try:
            async with self.state.lease(name) as lease:
                if lease.entry.incarnation != incarnation:
                    self._forget_db(name)  # deleted and created again: every document anew
                    since = 0
                read = await self.state.run(_changed_docs, lease.entry.db, since)
                self.seqs[name] = (lease.entry.incarnation, read[0])
        except HTTPError:
            self._forget_db(name)  # deleted meanwhile
            return
        for doc_id, doc in read[1]:
            try:
                await self._process(name, doc_id, doc)
            except Exception:
                log.exception(
                    "settee serve: replication document %s/%s not processed", name, doc_id
                )

    # -- one document -----------------------------------------------------------------------

    async def _process(self, db: str, doc_id: str, doc: dict[str, Any] | None) -> None:
        """couch_replicator_doc_processor:process_change."""
        key = (db, doc_id)
        if doc is None:
            self._drop(key)
            return
        marked = doc.get("_replication_state")
        if marked == "completed":
            self._drop(key)
            return
        if marked == "failed":
            return  # terminal until the document changes (a failed parse stays failed)
        if marked is not None:
            # "triggered" or "error": states older replicators wrote; CouchDB 3 removes them.
            await self._update_doc(db, doc_id, dict.fromkeys(_STATE_FIELDS))
        fields = replication_fields(doc)
        running = self.docs.get(key)
        if running is not None and running.fields == fields:
            return  # an edit of what the replicator ignores (its own state fields)
        self._drop(key)
        try:
            spec = parse_spec(fields)
        except HTTPError as exc:
            await self._mark_failed(db, doc_id, exc.reason)
            return
        rep = self.docs[key] = RepDoc(db, doc_id, fields, spec)
        await self._start(rep)

    async def _start(self, rep: RepDoc) -> None:
        """Start ``rep``'s job (couch_replicator_doc_processor_worker:maybe_start_replication)."""
        rep.retry_at = None
        try:
            if user_filter(rep.spec) is None:
                base, ext = replication_id(rep.spec, self.state.uuid, None)
            else:  # the filter's code is read from the source, which may be this server
                base, ext = await in_thread(filter_replication_id, rep.spec, self.state.uuid)
        except HTTPError as exc:
            self._failed_attempt(rep, "error", exc.reason)
            return
        if self.docs.get((rep.db, rep.doc_id)) is not rep:
            return  # the document changed or went while its filter was read
        rep.rep_id = base + ext
        other = next(
            (o for o in self.docs.values() if o is not rep and o.rep_id == rep.rep_id and o.job),
            None,
        )
        if other is not None:
            await self._mark_failed(rep.db, rep.doc_id, _duplicate(rep, (other.db, other.doc_id)))
            return
        try:
            job, new = start_doc_job(self.state, rep.spec, (base, ext), (rep.db, rep.doc_id))
        except HTTPError as exc:  # MAX_JOBS are running: tried again later
            self._failed_attempt(rep, "crashing", exc.reason)
            return
        if not new and job.doc != (rep.db, rep.doc_id):  # POST /_replicate runs it
            await self._mark_failed(rep.db, rep.doc_id, _duplicate(rep, job.doc))
            return
        rep.job, rep.state, rep.info = job, "running", None
        rep.last_updated = time.time()
        loop = asyncio.get_running_loop()

        def ended(_: object) -> None:  # on the job's thread
            # A job that outlives the server (stopped with it) has nobody to tell.
            with contextlib.suppress(RuntimeError):  # "Event loop is closed"
                loop.call_soon_threadsafe(self._ended_soon, rep, job)

        job.result.add_done_callback(ended)

    def _ended_soon(self, rep: RepDoc, job: Job) -> None:
        ending = asyncio.ensure_future(self._ended(rep, job))
        self._tasks.add(ending)
        ending.add_done_callback(self._tasks.discard)

    async def _ended(self, rep: RepDoc, job: Job) -> None:
        """A job ended: a one-shot's success is written to its document, a failure
        waits its turn to be tried again; a job stopped on purpose is forgotten."""
        failure = job.result.exception()
        if rep.job is not job or self.docs.get((rep.db, rep.doc_id)) is not rep:
            return  # stopped: its document changed or went
        rep.job = None
        if self.state.stopping.is_set():
            return
        if failure is not None:
            reason = failure.reason if isinstance(failure, HTTPError) else str(failure)
            self._failed_attempt(rep, "crashing", reason)
            self.state.notifier.bump(REPLICATOR_WAKE)  # the loop waits for the new retry time
            return
        if rep.spec.continuous:
            return
        listed = task(job)
        stats = {
            name: listed[name] for name in INFO_FIELDS if name not in ("source_seq", "through_seq")
        }
        stats["start_time"] = iso8601(rep.start_time)
        async with self.lock:
            self.docs.pop((rep.db, rep.doc_id), None)
            await self._update_doc(
                rep.db,
                rep.doc_id,
                {
                    "_replication_state": "completed",
                    "_replication_state_reason": None,
                    "_replication_stats": stats,
                },
            )

    def _failed_attempt(self, rep: RepDoc, state: str, reason: str) -> None:
        rep.state, rep.info = state, {"error": reason}
        rep.error_count += 1
        rep.last_updated = time.time()
        wait = min(MAX_RETRY, FIRST_RETRY * 2 ** (rep.error_count - 1))
        rep.retry_at = time.monotonic() + wait

    async def _mark_failed(self, db: str, doc_id: str, reason: str) -> None:
        """couch_replicator_docs:update_failed: terminal until the document changes."""
        self.docs.pop((db, doc_id), None)
        log.warning("settee serve: replication document %s/%s failed: %s", db, doc_id, reason)
        await self._update_doc(
            db,
            doc_id,
            {
                "_replication_state": "failed",
                "_replication_stats": None,
                "_replication_state_reason": reason,
            },
        )

    def _drop(self, key: tuple[str, str]) -> None:
        rep = self.docs.pop(key, None)
        if rep is not None:
            self._stop(rep)

    def _forget_db(self, name: str) -> None:
        self.seqs.pop(name, None)
        for key in [k for k in self.docs if k[0] == name]:
            self._drop(key)

    def _stop(self, rep: RepDoc) -> None:
        if rep.job is not None:
            stop_job(self.state, rep.job)
            rep.job = None

    async def _update_doc(self, db: str, doc_id: str, fields: dict[str, Any]) -> None:
        """couch_replicator_docs:update_rep_doc: the fields set (None: removed) on the
        document's current revision, ``_replication_state_time`` when the state
        changes; nothing written when nothing changes or the document is gone."""
        try:
            async with self.state.lease(db) as lease:
                written = await self.state.run(_update_fields, lease.entry.db, doc_id, fields)
                if written:
                    self.state.notify(lease.entry)
        except HTTPError:
            pass  # the database went meanwhile

    # -- what /_scheduler/docs shows --------------------------------------------------------

    def doc_json(self, db: str, doc: dict[str, Any]) -> dict[str, Any] | None:
        """A document's row of ``/_scheduler/docs``: from the document when it is
        ``completed`` or ``failed`` (couch_replicator:info_from_doc), else from the
        job; None for a document the processor has not taken (CouchDB skips it)."""
        marked = doc.get("_replication_state")
        if marked in ("completed", "failed"):
            return _info_from_doc(db, doc)
        rep = self.docs.get((db, doc["_id"]))
        return None if rep is None else rep.as_json()


def _changed_docs(
    db: settee.Database, since: Any
) -> tuple[Any, list[tuple[str, dict[str, Any] | None]]]:
    """``(last seq, [(id, document or None when deleted)])`` of the documents (not
    design documents) changed since ``since``."""
    feed = db.changes(since=since)
    changed: list[tuple[str, dict[str, Any] | None]] = []
    for row in feed["results"]:
        doc_id = row["id"]
        if doc_id.startswith("_design/"):
            continue
        doc = None
        if not row.get("deleted"):
            with contextlib.suppress(settee.NotFound):
                doc = db.get(doc_id)
        changed.append((doc_id, doc))
    return feed["last_seq"], changed


def _update_fields(db: settee.Database, doc_id: str, fields: dict[str, Any]) -> bool:
    for _attempt in range(10):
        try:
            doc = db.get(doc_id)
        except settee.NotFound:
            return False
        updated = dict(doc)
        for name, value in fields.items():
            if value is None:
                updated.pop(name, None)
            elif name == "_replication_state" and doc.get(name) != value:
                updated[name] = value
                updated["_replication_state_time"] = iso8601(time.time())
            else:
                updated[name] = value
        if updated == doc:
            return False
        try:
            db.put(updated)
            return True
        except settee.Conflict:
            continue  # written meanwhile: again on the new revision
    return False


def _duplicate(rep: RepDoc, started_by: tuple[str, str] | None) -> str:
    """couch_replicator_doc_processor_worker's reason for a replication already running."""
    said = f"Replication `{rep.rep_id}` specified by document `{rep.doc_id}` already started"
    if started_by is None:
        return said
    db, doc_id = started_by
    return f"{said}, triggered by document `{doc_id}` from db `{db}`"


def _info_from_doc(db: str, doc: dict[str, Any]) -> dict[str, Any]:
    """couch_replicator:info_from_doc: a ``completed`` or ``failed`` document's row."""
    marked = doc.get("_replication_state")
    info: dict[str, Any] | None
    if marked == "completed":
        stats = doc.get("_replication_stats")
        info = dict(stats) if isinstance(stats, dict) else {}
        start_time = info.pop("start_time", None)
        error_count = 0
    else:
        reason = doc.get("_replication_state_reason")
        info = None if reason is None else {"error": reason}
        start_time = doc.get("_replication_state_time")
        error_count = 1
    return {
        "doc_id": doc["_id"],
        "database": db,
        "id": None,
        "source": _shown_endpoint(doc.get("source")),
        "target": _shown_endpoint(doc.get("target")),
        "state": marked,
        "error_count": error_count,
        "info": info,
        "start_time": start_time,
        "last_updated": doc.get("_replication_state_time"),
    }


def _shown_endpoint(value: Any) -> Any:
    """couch_replicator:strip_url_creds: the URL without its password."""
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str):
        return None
    try:
        return without_password(url)
    except ValueError:
        return None


# -- the server's processor and its endpoint ---------------------------------------------------

_PROCESSORS: weakref.WeakKeyDictionary[State, Processor] = weakref.WeakKeyDictionary()


def processor(state: State) -> Processor:
    """The server's processor (made on first use; event-loop side)."""
    found = _PROCESSORS.get(state)
    if found is None:
        found = _PROCESSORS[state] = Processor(state)
    return found


async def watch(state: State) -> None:
    """The server's background task: follow the ``_replicator`` databases until it stops."""
    await processor(state).run()


async def handle_scheduler_docs(
    state: State, request: web.BaseRequest, parts: list[str]
) -> web.StreamResponse:
    """``GET /_scheduler/docs[/{db}[/{docid}]]`` (couch_replicator_httpd): the
    replication documents' states; ``{db}`` may be sent with its "/" unescaped."""
    require_method(request, "GET")
    db, doc_id = _docs_path(parts)
    states = _states(request.query.get("states"))
    found = processor(state)
    await found.catch_up()  # what was written before this request is taken
    try:
        async with state.lease(db) as lease:
            if doc_id is not None:
                return respond(reply(200, await _one_doc(state, found, lease.entry, doc_id)))
            result = await state.run(lease.entry.db.all_docs, include_docs=True)
    except settee.NotFound:
        raise HTTPError(404, "not_found", "missing") from None
    rows = [found.doc_json(db, row["doc"]) for row in result["rows"]]
    shown = [r for r in rows if r is not None and (not states or r["state"] in states)]
    skip = min(query_int(request.query, "skip", 0) or 0, len(shown))
    limit = query_int(request.query, "limit", len(shown))
    limit = len(shown) if limit is None else limit
    page = {"total_rows": len(shown), "offset": skip, "docs": shown[skip : skip + limit]}
    return respond(reply(200, page))


async def _one_doc(state: State, found: Processor, entry: DbEntry, doc_id: str) -> dict[str, Any]:
    rep = found.docs.get((entry.name, doc_id))
    if rep is not None:
        return rep.as_json()
    doc = await state.run(entry.db.get, doc_id)
    shown = found.doc_json(entry.name, doc)
    if shown is not None:
        return shown
    # couch_replicator:info_from_doc for a document in no terminal state: nulls.
    return _info_from_doc(entry.name, doc) | {
        "state": None,
        "info": None,
        "error_count": 0,
        "start_time": None,
    }


def _docs_path(parts: list[str]) -> tuple[str, str | None]:
    """``(replicator database, document id or None)`` of the path after ``docs``, as
    couch_replicator_httpd takes it (parse_unquoted_docs_path for an unescaped "/")."""
    rest = parts[1:]
    if not rest:
        return "_replicator", None
    if len(rest) <= 2 and is_replicator_db(rest[0]):
        return rest[0], rest[1] if len(rest) == 2 else None
    if "_replicator" in rest and len(rest) >= 2:
        at = rest.index("_replicator")
        before, after = rest[:at], rest[at + 1 :]
        db = "/".join([*before, "_replicator"])
        if len(after) <= 1:
            return db, after[0] if after else None
    raise HTTPError(400, "bad_request", "Invalid path")


def _states(text: str | None) -> set[str]:
    """``?states=`` (couch_replicator_httpd_util:parse_replication_state_filter)."""
    if text is None:
        return set()
    asked = {s.lower() for s in text.split(",") if s}
    unknown = asked - set(STATES)
    if unknown:
        reason = f"Unknown states {sorted(unknown)}. Choose from: [{','.join(STATES)}]"
        raise HTTPError(400, "query_parse_error", reason)
    return asked

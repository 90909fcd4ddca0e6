"""``POST /_replicate``: one-shot and continuous replications, and their cancelling.

CouchDB 3.5's couch_replicator_httpd answers: a one-shot replication is run to
its end and answered with its checkpoint (``ok``, ``session_id``,
``source_last_seq``, ``replication_id_version``, ``history``; ``no_changes: true``
when there was nothing to do); a continuous one is answered 202 ``{"ok": true,
"_local_id": id}`` at once and runs until a request with ``cancel: true`` names it
(by the same body, or by ``replication_id``), which is answered 200 with the same
``_local_id`` once the job has checkpointed and ended (as CouchDB's remove_job
waits), or 404 ``{"error": "not found"}`` when no such job runs. At most
``MAX_JOBS`` run at once.
Running jobs are listed by ``/_active_tasks`` (``active_tasks``) and
``/_scheduler/jobs`` (``handle_scheduler``).

Each job runs on a thread of its own, never the server's worker pool: its
requests may go to this very server, whose handlers need that pool. A one-shot
request waits at most ``ONE_SHOT_LIMIT`` seconds; every request the job makes
has the ``connection_timeout`` (30 s by default).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from aiohttp import web

from settee.httpclient import Client
from settee.serve.cluster import NODE
from settee.serve.protocol import (
    HTTPError,
    decode_object,
    query_int,
    reply,
    require_json_content,
    require_method,
    respond,
)
from settee.serve.repjob import Replication
from settee.serve.repspec import Spec, parse_spec, quote_id, replication_id, user_filter
from settee.serve.state import State
from settee.spec.errors import SetteeError

__all__ = [
    "INFO_FIELDS",
    "MAX_JOBS",
    "ONE_SHOT_LIMIT",
    "Job",
    "active_tasks",
    "filter_replication_id",
    "handle_replicate",
    "handle_scheduler",
    "in_thread",
    "iso8601",
    "start_doc_job",
    "stop_job",
    "task",
]

log = logging.getLogger("settee.serve.replicate")

#: Seconds a one-shot ``/_replicate`` request waits for its replication; past them
#: the job is stopped (it checkpoints what it did) and the answer is an error.
ONE_SHOT_LIMIT = 3600.0
#: Seconds a cancel waits for its job's last checkpoint before it answers anyway.
CANCEL_WAIT = 10.0
#: The most jobs that run at once (CouchDB's ``[replicator] max_jobs`` default).
MAX_JOBS = 500

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Job:
    """A running replication: its work, the flag that stops it, its result."""

    id: str
    replication: Replication
    stop: threading.Event
    result: concurrent.futures.Future[dict[str, Any]]
    #: ``(database, doc_id)`` of the ``_replicator`` document that started it (repdocs.py).
    doc: tuple[str, str] | None = None


class Jobs:
    """The replications running in one server, by job id (``_local_id``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, Job] = {}

    def start_or_join(self, job_id: str, make: Callable[[], Job]) -> tuple[Job, bool]:
        """The job running as ``job_id``, else a new one (True) for the caller to start:
        an identical request joins the running replication, as CouchDB's does."""
        with self._lock:
            running = self._running.get(job_id)
            if running is not None:
                return running, False
            if len(self._running) >= MAX_JOBS:
                # A thread each: refused, where CouchDB's scheduler would queue it.
                reason = f"{MAX_JOBS} replications are running (MAX_JOBS); retry later"
                raise HTTPError(503, "service_unavailable", reason)
            job = self._running[job_id] = make()
            return job, True

    def pop(self, job_id: str) -> Job | None:
        with self._lock:
            return self._running.pop(job_id, None)

    def discard(self, job: Job) -> None:
        with self._lock:
            if self._running.get(job.id) is job:
                del self._running[job.id]

    def all(self) -> list[Job]:
        with self._lock:
            return list(self._running.values())


#: Each server's jobs; a server that is gone takes its entry with it.
_JOBS: weakref.WeakKeyDictionary[State, Jobs] = weakref.WeakKeyDictionary()
_JOBS_LOCK = threading.Lock()


def _jobs(state: State) -> Jobs:
    with _JOBS_LOCK:
        return _JOBS.setdefault(state, Jobs())


def active_tasks(state: State) -> list[dict[str, Any]]:
    """The running replications as ``/_active_tasks`` lists them."""
    return [task(job) for job in _jobs(state).all()]


def task(job: Job) -> dict[str, Any]:
    """A job as ``_active_tasks`` lists it (couch_replicator_scheduler_job's task)."""
    rep = job.replication
    database, doc_id = job.doc or (None, None)
    with rep.lock:
        stats = asdict(rep.stats)
        return {
            "type": "replication",
            "replication_id": rep.base + rep.ext,
            "source": rep.source_ep.uri,
            "target": rep.target_ep.uri,
            "continuous": rep.spec.continuous,
            "user": None,
            "database": database,
            "doc_id": doc_id,
            "revisions_checked": stats["missing_checked"],
            "missing_revisions_found": stats["missing_found"],
            "docs_read": stats["docs_read"],
            "docs_written": stats["docs_written"],
            "doc_write_failures": stats["doc_write_failures"],
            "bulk_get_docs": stats["bulk_get_docs"],
            "bulk_get_attempts": stats["bulk_get_attempts"],
            "changes_pending": None,
            "checkpointed_source_seq": rep.committed_seq,
            "source_seq": rep.source_seq,
            "through_seq": rep.through_seq,
            "checkpoint_interval": int(rep.spec.checkpoint_interval * 1000),
            "started_on": rep.started_on,
            "updated_on": rep.updated_on,
        }


async def handle_scheduler(
    state: State, request: web.BaseRequest, parts: list[str]
) -> web.StreamResponse:
    """``GET /_scheduler/jobs[/{id}]`` (couch_replicator_httpd:handle_scheduler_req):
    the running jobs by id, ``skip`` and ``limit`` (100) applied."""
    require_method(request, "GET")
    if parts == ["jobs"]:
        jobs = sorted((_job_json(job) for job in _jobs(state).all()), key=lambda j: j["id"])
        skip = min(query_int(request.query, "skip", 0) or 0, len(jobs))
        limit = query_int(request.query, "limit", 100) or 0
        page = {"total_rows": len(jobs), "offset": skip, "jobs": jobs[skip : skip + limit]}
        return respond(reply(200, page))
    if len(parts) == 2 and parts[0] == "jobs":
        found = [job for job in _jobs(state).all() if job.id == parts[1].replace(" ", "+")]
        if not found:
            raise HTTPError(404, "not_found", "missing")
        return respond(reply(200, _job_json(found[0])))
    what = "/".join(["/_scheduler", *parts])
    raise HTTPError(404, "not_found", f"settee serve does not serve {what}")


#: The counters a job's ``info`` shows (couch_replicator_scheduler_job:rep_stats and
#: the seqs), in ``/_scheduler/jobs`` and ``/_scheduler/docs``.
INFO_FIELDS = (
    "revisions_checked",
    "missing_revisions_found",
    "docs_read",
    "docs_written",
    "changes_pending",
    "doc_write_failures",
    "bulk_get_docs",
    "bulk_get_attempts",
    "checkpointed_source_seq",
    "source_seq",
    "through_seq",
)


def _job_json(job: Job) -> dict[str, Any]:
    """couch_replicator_scheduler:job_ejson."""
    listed = task(job)
    started = iso8601(listed["started_on"])
    return {
        "id": job.id,
        "pid": None,
        "source": listed["source"],
        "target": listed["target"],
        "database": listed["database"],
        "user": None,
        "doc_id": listed["doc_id"],
        "info": {name: listed[name] for name in INFO_FIELDS},
        "history": [{"timestamp": started, "type": t} for t in ("started", "added")],
        "node": NODE,
        "start_time": started,
    }


def iso8601(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


async def handle_replicate(state: State, request: web.BaseRequest) -> web.StreamResponse:
    """``POST /_replicate`` (couch_replicator_httpd:handle_req)."""
    require_method(request, "POST")
    require_json_content(request.headers)
    spec = parse_spec(decode_object(await state.read_body(request)))
    if spec.cancel and spec.job_id is not None:
        return await _cancel(state, spec.job_id)
    if user_filter(spec) is None:
        base, ext = replication_id(spec, state.uuid, None)
    else:  # the filter's code is read from the source, which may be this server
        base, ext = await in_thread(filter_replication_id, spec, state.uuid)
    job_id = base + ext
    if spec.cancel:
        return await _cancel(state, job_id)
    job, new = _jobs(state).start_or_join(job_id, lambda: _new_job(state, spec, (base, ext)))
    if new:
        _start(state, job)
    if spec.continuous:
        return respond(reply(202, {"ok": True, "_local_id": job_id}))
    return respond(reply(200, await _outcome(job)))


async def _cancel(state: State, job_id: str) -> web.StreamResponse:
    job = _jobs(state).pop(job_id)
    if job is None:
        return respond(reply(404, {"error": "not found"}))
    # The job sees the flag between requests, checkpoints what it did and ends; the
    # answer waits for that (as CouchDB's remove_job does), so a replication started
    # next does not race this one's last checkpoint. Bounded: a job stuck in a slow
    # request is left to end on its own.
    job.stop.set()
    job.replication.stop()
    ended = asyncio.shield(asyncio.wrap_future(job.result))
    with contextlib.suppress(Exception):
        await asyncio.wait_for(ended, CANCEL_WAIT)
    return respond(reply(200, {"ok": True, "_local_id": job_id}))


async def _outcome(job: Job) -> dict[str, Any]:
    # Shielded: a client that goes away does not stop the replication it asked for.
    waiting = asyncio.shield(asyncio.wrap_future(job.result))
    try:
        return await asyncio.wait_for(waiting, ONE_SHOT_LIMIT)
    except TimeoutError:
        job.stop.set()
        reason = f"the replication took longer than {ONE_SHOT_LIMIT:g} s and was stopped"
        raise HTTPError(500, "timeout", reason) from None


def start_doc_job(
    state: State, spec: Spec, rep_id: tuple[str, str], doc: tuple[str, str]
) -> tuple[Job, bool]:
    """The replication the ``_replicator`` document ``doc`` asks for: started (True),
    or the job already running under its id (False: a duplicate, unless it is
    ``doc``'s own). 503 HTTPError past ``MAX_JOBS``."""
    job, new = _jobs(state).start_or_join(
        "".join(rep_id), lambda: _new_job(state, spec, rep_id, doc)
    )
    if new:
        _start(state, job)
    return job, new


def stop_job(state: State, job: Job) -> None:
    """Stop ``job`` without waiting for it: it checkpoints what it did and ends."""
    _jobs(state).discard(job)
    job.stop.set()
    job.replication.stop()


def _new_job(
    state: State, spec: Spec, rep_id: tuple[str, str], doc: tuple[str, str] | None = None
) -> Job:
    stop = threading.Event()

    def should_stop() -> bool:
        return stop.is_set() or state.stopping.is_set()

    result: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
    # Running from the start, so a waiter that is cancelled cannot cancel the result.
    result.set_running_or_notify_cancel()
    return Job("".join(rep_id), Replication(spec, rep_id, should_stop), stop, result, doc)


def _start(state: State, job: Job) -> None:
    jobs = _jobs(state)

    def run() -> None:
        try:
            job.result.set_result(job.replication.run())
        except HTTPError as exc:
            if job.replication.spec.continuous:  # nobody waits for its answer: say it here
                log.warning("continuous replication %s stopped: %s", job.id, exc)
            job.result.set_exception(exc)
        except Exception as exc:  # a job's failure is its answer, never the server's
            log.exception("replication %s failed", job.id)
            job.result.set_exception(HTTPError(500, "replication_failed", f"{exc}"))
        finally:
            jobs.discard(job)

    thread = threading.Thread(target=run, name=f"settee-replicate-{job.id[:8]}", daemon=True)
    thread.start()


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a thread of its own (it may request this server)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="settee-replicate-id", daemon=True).start()
    return await asyncio.wrap_future(future)


def filter_replication_id(spec: Spec, server_uuid: str) -> tuple[str, str]:
    """The job's id; for a ``ddoc/name`` filter, after reading its code from the source."""
    named = user_filter(spec)
    code = None if named is None else _filter_code(spec, *named)
    return replication_id(spec, server_uuid, code)


def _filter_code(spec: Spec, ddoc_id: str, name: str) -> str:
    """The filter's source, trimmed (couch_replicator_filters:fetch); 404 ``not_found``
    saying why it could not be read, as CouchDB answers a filter_fetch_error."""
    assert spec.source is not None  # a cancel by id names no filter
    where = spec.source.uri
    client = Client(spec.source.server, timeout=spec.timeout)
    try:
        status, ddoc = client.request("GET", "/" + quote_id(ddoc_id))
    except SetteeError as exc:
        reason = f"Could not open source database `{where}`: {exc}"
        raise HTTPError(404, "not_found", reason) from None
    finally:
        client.close()
    no_doc = isinstance(ddoc, dict) and ddoc.get("reason") in ("missing", "deleted")
    if status == 404 and not no_doc:
        raise HTTPError(404, "not_found", f"Could not open source database `{where}`")
    if status != 200 or not isinstance(ddoc, dict):
        reason = f"Couldn't open document `{ddoc_id}` from source database `{where}`"
        raise HTTPError(404, "not_found", reason)
    code = ddoc.get("filters", {}).get(name) if isinstance(ddoc.get("filters"), dict) else None
    if not isinstance(code, str):
        reason = f"Couldn't parse filter code from document {ddoc_id} on `{where}`"
        raise HTTPError(404, "not_found", reason)
    return code.strip()

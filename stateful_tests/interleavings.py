"""One scheduled run, and one real-threads run, of a concurrent scenario.

:func:`run_scheduled` opens the engine on a :class:`~scheduler.SchedulerFileSystem`
over ``settee.io.MemoryFileSystem`` (an engine whose factory refuses ``fs=``
is opened plainly and scheduled at call and write-step granularity only),
applies the setup, runs the clients under the scheduler with ``choose``
picking each step, and checks the history: linearizable against the
reference, no read saw half a batch, every call after a ``close()`` refused
saying so, and every call returned (a run that stops with a call that never
can fails with the schedule and the stacks). :func:`run_threads` does the
same with free-running OS threads on real files. ``FIXED_SCHEDULES`` are
races random schedules seldom reach, each run under a ``choose`` that steers
straight into it (``fixed_schedules``; the stress campaign runs them first).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from settee.io import MemoryFileSystem
from settee.proof.stateful.engines import load_factory, scratch_dir, takes_settee_options
from settee.proof.stateful.history import (
    Recorder,
    Scenario,
    check_closed,
    check_history,
    check_mvcc,
    clients_for,
    group_ids,
    run_setup,
)
from settee.proof.stateful.reader_process import ReaderProcess
from settee.proof.stateful.scheduler import Scheduler, SchedulerFileSystem, ScheduleStuck
from settee.spec.errors import BadRequest
from settee.spec.revs import new_rev

__all__ = [
    "ADMIT_THEN_CLOSE",
    "CHANGES_ACROSS_A_WRITE",
    "FIXED_SCHEDULES",
    "GET_ACROSS_A_COMPACTION",
    "PURGE_AND_WRITE_IN_ONE_GROUP",
    "READ_THEN_CLOSE",
    "READ_THEN_CLOSE_UNCACHED",
    "REVS_DIFF_ACROSS_WRITES",
    "STRESS_TIMEOUT",
    "WRITES_ACROSS_A_READ",
    "RunResult",
    "compaction_keeps_concurrent_purges",
    "engine_purges",
    "fixed_schedules",
    "follower_behind_a_stale_heads",
    "follower_follows_compactions",
    "follower_read_across_writes",
    "hold_admitted_write",
    "hold_read_at_pin",
    "hold_read_at_pread",
    "hold_writer_at_dequeue",
    "run_scheduled",
    "run_threads",
]

#: Seconds a real-threads run may take before its unfinished calls count as hung.
STRESS_TIMEOUT = 30.0


@dataclass(slots=True)
class RunResult:
    """What one run did and what was wrong with it (``problems`` empty: fine)."""

    scenario: Scenario
    recorder: Recorder
    schedule: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    explored: int = 0

    @property
    def operations(self) -> int:
        return len(self.recorder.records)

    def report(self) -> str:
        return (
            "\n".join(self.problems)
            + f"\nscenario:\n{self.scenario.describe()}"
            + f"\nhistory:\n{self.recorder.text()}"
            + (f"\nschedule ({len(self.schedule)} steps): {self.schedule}" if self.schedule else "")
        )


#: Client 0 puts while client 1 closes the database: with ``hold_admitted_write``,
#: the put is admitted, then close() runs as far as it can, then the put goes on.
ADMIT_THEN_CLOSE = Scenario(
    {"shards": 1, "read_mode": "parallel"},
    ((("put", "a", {"v": 1}, True),), (("close",),)),
    0,
)


def hold_admitted_write(labels: list[str]) -> int:
    """A ``choose``: run client 0 until it is admitted and parked at "enqueue", then
    anything else before it (never deferring), so the put is enqueued as late as
    the engine lets it be."""
    return next((i for i, label in enumerate(labels) if label != "client-0@enqueue"), 0)


#: Client 0 reads a document's body while client 1 closes the database: with
#: ``hold_read_at_pread``, the read is parked at its pread while close() runs.
READ_THEN_CLOSE = Scenario(
    {"shards": 1, "read_mode": "parallel"},
    ((("get", "a"),), (("close",),)),
    0,
)


#: ``READ_THEN_CLOSE`` with no node or body cache: the get's reads all go to the file,
#: so it is parked at a pread while close() runs (with the caches, the document the
#: setup wrote is read from memory, and no pread is ever reached). A close() that
#: closes the descriptor under it (``mutants:close_under_reads``) fails the read
#: with EBADF instead of "closed".
READ_THEN_CLOSE_UNCACHED = Scenario(
    {"shards": 1, "read_mode": "parallel", "cache_bytes": 0, "body_cache_bytes": 0},
    ((("get", "a"),), (("close",),)),
    0,
)


def hold_read_at_pread(labels: list[str]) -> int:
    """A ``choose``: run client 0 until it is parked at a ``pread``, then anything else
    before it (never deferring), so close() runs while the read is in flight."""
    reading = [i for i, label in enumerate(labels) if label.startswith("client-0@")]
    if reading and "@pread" not in labels[reading[0]]:
        return reading[0]
    return next((i for i, label in enumerate(labels) if not label.startswith("client-0@")), 0)


#: Client 0 writes "b" (shard 0 of 2), then "a" (shard 1), each after the other
#: was acknowledged; client 1 lists every document. With ``hold_read_at_pin`` the
#: listing has pinned shard 0 when both writes run: it must not show the second
#: write without the first (``settee.cut``).
WRITES_ACROSS_A_READ = Scenario(
    {"shards": 2, "read_mode": "parallel"},
    ((("put", "b", {"v": 1}, True), ("put", "a", {"v": 1}, True)), (("all_docs",),)),
    0,
)


def hold_read_at_pin(labels: list[str]) -> int:
    """A ``choose``: run client 1 until it is parked between two shards' snapshots
    ("pin"), then anything else before it (never deferring), so every write runs
    while the read has pinned its first shard."""
    reading = [i for i, label in enumerate(labels) if label.startswith("client-1@")]
    if reading and not labels[reading[0]].endswith("@pin"):
        return reading[0]
    return next((i for i, label in enumerate(labels) if not label.startswith("client-1@")), 0)


#: Client 0 purges "a" whole, then reads it; client 1 writes "a" anew (no ``_rev``).
#: With ``hold_writer_at_dequeue`` both requests are queued when the writer takes its
#: group: the purge and the write are decided in one group commit, in that order, and
#: both must be acknowledged and the write stand (``mutants:purge_then_write_in_one_group``
#: left the id among the group's purged, and strict mode refused the commit).
PURGE_AND_WRITE_IN_ONE_GROUP = Scenario(
    {"shards": 1, "read_mode": "parallel"},
    ((("purge", "a"), ("get", "a")), (("put", "a", {"v": 1}, False),)),
    0,
)


def hold_writer_at_dequeue(labels: list[str]) -> int:
    """A ``choose``: run the clients, the lowest first, and release a writer parked at
    "dequeue" (its wait for a request returned) only when nothing else is parked, so
    every request the clients make by then lands in its group."""
    return next((i for i, label in enumerate(labels) if not label.endswith("@dequeue")), 0)


#: Client 0 lists the changes, then resumes from the answer's ``last_seq`` (a client's
#: second ``changes`` does, ``history.Client``); client 1 updates "a". With
#: ``hold_read_at_pread`` (no cache: the listing reads its nodes from the file) the
#: update lands while the first listing, its snapshot pinned, is parked at a pread: the
#: listing does not show it, so its token must be before it and the resumed listing
#: show it (``mutants:changes_last_seq_from_current`` took the token from the shard's
#: newest snapshot and skipped it).
CHANGES_ACROSS_A_WRITE = Scenario(
    {"shards": 1, "read_mode": "parallel", "cache_bytes": 0, "body_cache_bytes": 0},
    ((("changes",), ("changes",)), (("put", "a", {"v": 1}, True),)),
    0,
)

#: Client 0 reads "b" at a named revision (past ``get``'s fast path); client 1 compacts.
#: With ``hold_read_at_pread`` (no cache) the compaction swaps the shard's file while the
#: read, its snapshot pinned, is parked at its first pread: the body must still come
#: from the pinned file ("b" sits at another position in the compacted one;
#: ``mutants:get_body_from_current_snapshot`` read it from there).
GET_ACROSS_A_COMPACTION = Scenario(
    {"shards": 1, "read_mode": "parallel", "cache_bytes": 0, "body_cache_bytes": 0},
    ((("get_rev", "b"),), (("compact",),)),
    0,
)

#: The revision that updating a document of ``SETUP`` ({"v": 0}) to {"v": 1} makes.
_SECOND_REV = new_rev(new_rev(None, False, {"v": 0}), False, {"v": 1})

#: Client 0 asks ``revs_diff`` about "b" (shard 0 of 2), then "a" (shard 1), for the
#: revision client 1's updates of each make; client 1 updates "b", then "a", each after
#: the other was acknowledged. With ``hold_read_at_pread`` (no cache) both updates land
#: while the revs_diff, its snapshots pinned, is parked at its first pread: it must answer
#: for one instant, never knowing "a"'s new revision without "b"'s
#: (``mutants:revs_diff_per_id_snapshot`` looked each id up in its shard's newest
#: snapshot; no random history asked revs_diff then, and the stress campaign's random
#: runs, which now do, catch it only when a write happens to land between two reads).
REVS_DIFF_ACROSS_WRITES = Scenario(
    {"shards": 2, "read_mode": "parallel", "cache_bytes": 0, "body_cache_bytes": 0},
    (
        (("revs_diff", (("b", (_SECOND_REV,)), ("a", (_SECOND_REV,)))),),
        (("put", "b", {"v": 1}, True), ("put", "a", {"v": 1}, True)),
    ),
    0,
)

#: The fixed schedules the stress campaign runs before its random runs (each costs a
#: few milliseconds): races the random schedules draw too seldom. name -> (scenario,
#: choose).
FIXED_SCHEDULES: dict[str, tuple[Scenario, Callable[[list[str]], int]]] = {
    "purge and write in one group": (PURGE_AND_WRITE_IN_ONE_GROUP, hold_writer_at_dequeue),
    "changes across a write": (CHANGES_ACROSS_A_WRITE, hold_read_at_pread),
    "get across a compaction": (GET_ACROSS_A_COMPACTION, hold_read_at_pread),
    "revs_diff across writes": (REVS_DIFF_ACROSS_WRITES, hold_read_at_pread),
}


def fixed_schedules(spec: str) -> list[str]:
    """The problems of each of ``FIXED_SCHEDULES`` run on engine ``spec`` (the first
    schedule's that has any). An engine without ``purge`` skips the schedules with one."""
    purges = None
    for name, (scenario, choose) in FIXED_SCHEDULES.items():
        if any(op[0] == "purge" for program in scenario.programs for op in program):
            purges = engine_purges(spec) if purges is None else purges
            if not purges:
                continue
        result = run_scheduled(spec, scenario, choose, stall=5.0)
        if result.problems:
            return [f"the fixed schedule {name!r}: {result.report()}"]
    return []


def engine_purges(spec: str) -> bool:
    """Whether engine ``spec`` has ``purge`` (SEMANTICS.md §19; one written before it
    may not)."""
    tmp = scratch_dir("settee-has-purge-")
    db = load_factory(spec)(f"{tmp}/db", shards=1)
    try:
        return callable(getattr(db, "purge", None))
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _open_scheduled(
    spec: str, scheduler: Scheduler, options: dict[str, Any]
) -> tuple[Any, str | None]:
    """The engine on the scheduler's file system, or (an engine without a pluggable
    io layer) in a scratch folder; and that folder, for the caller to remove."""
    factory = load_factory(spec)
    fs = SchedulerFileSystem(MemoryFileSystem(), scheduler)
    with scheduler.adopt_new_threads():
        try:
            return factory("/scheduled/db", fs=fs, **options), None
        except (BadRequest, TypeError):
            tmp = scratch_dir("settee-sched-")
            return factory(tmp + "/db", **options), tmp


def _options(spec: str, scenario: Scenario) -> dict[str, Any]:
    """The scenario's options for engine ``spec``: with strict mode for engines that
    take settee's own options (settee and its mutants), without the body cache's
    size for the others."""
    if takes_settee_options(spec):
        return {**scenario.options, "strict": True}
    return {k: v for k, v in scenario.options.items() if k != "body_cache_bytes"}


def run_scheduled(
    spec: str, scenario: Scenario, choose: Callable[[list[str]], int], *, stall: float = 10.0
) -> RunResult:
    """Run ``scenario`` on engine ``spec`` under the scheduler; check the history."""
    scheduler = Scheduler(choose, stall=stall)
    db, tmp = _open_scheduled(spec, scheduler, {**_options(spec, scenario), "fsync": True})
    recorder = Recorder()
    result = RunResult(scenario, recorder, scheduler.schedule)
    try:
        seen = run_setup(db)
        scheduler.watch(db)
        clients = clients_for(scenario, recorder, seen)
        threads = []
        for client in clients:
            client.before_call = scheduler.point
            body = scheduler.controlled(f"client-{client.index}", lambda c=client: c.run(db))
            # Daemon: a client stuck for good must not keep the test process alive.
            threads.append(
                threading.Thread(target=body, name=f"client-{client.index}", daemon=True)
            )
        scheduler.run(threads)
    except ScheduleStuck as exc:
        result.problems.append(str(exc))
    finally:
        scheduler.release_all()
        _close(db, stall if result.problems else None)
        if tmp is not None:  # left behind, one per run, in /dev/shm (found in review)
            shutil.rmtree(tmp, ignore_errors=True)
    _check(result)
    return result


def _close(db: Any, timeout: float | None) -> None:
    """Close ``db``; after a stuck run, give up after ``timeout`` seconds (the engine
    may be wedged, and the failure is already recorded)."""
    if timeout is None:
        db.close()
        return
    closer = threading.Thread(target=db.close, name="closer", daemon=True)
    closer.start()
    closer.join(timeout)


@contextlib.contextmanager
def small_compaction_steps() -> Iterator[None]:
    """Compaction in steps of two documents, catching up outside the writer while a
    single change is left (settee.compaction's COPY_CHUNK and FINAL_CATCH_UP): a
    history's few writes then race every phase of it, the loop outside the writer
    included, which at the real sizes needs a thousand changes during one copy
    (found by mutation testing: a catch-up that recorded the shard's newest seq
    instead of its snapshot's lost acknowledged writes, and no campaign saw it).
    Engines that do not use settee's compaction are unaffected."""
    from settee import compaction

    saved = compaction.COPY_CHUNK, compaction.FINAL_CATCH_UP
    compaction.COPY_CHUNK, compaction.FINAL_CATCH_UP = 2, 1
    try:
        yield
    finally:
        compaction.COPY_CHUNK, compaction.FINAL_CATCH_UP = saved


def run_threads(spec: str, scenario: Scenario) -> RunResult:
    """Run ``scenario`` with real, unscheduled threads on real files; check the history."""
    with small_compaction_steps():
        return _run_threads(spec, scenario)


def _run_threads(spec: str, scenario: Scenario) -> RunResult:
    tmp = scratch_dir("settee-stress-")
    db = load_factory(spec)(f"{tmp}/db", **_options(spec, scenario))
    recorder = Recorder()
    result = RunResult(scenario, recorder)
    follower = None
    early, heads = _watch_heads(db, f"{tmp}/db")
    try:
        seen = run_setup(db)
        clients = clients_for(scenario, recorder, seen)
        if scenario.reader:
            # The last client reads through a readonly handle (settee.follower): it
            # must see what the writer's own readers see, on the same clock.
            if scenario.reader_scans:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{tmp}/db/HEADS")
            follower = _follower(spec, db, f"{tmp}/db", scenario.reader_process)
            if follower is None:
                clients.pop()
            else:
                # Reads take microseconds and commits milliseconds: spaced out, the
                # reader's calls fall between the writers' acknowledgements.
                clients[-1].before_call = _pause
                _dawdle_between_shards(follower)
        if scenario.batches:
            clients[len(scenario.programs)].before_call = _pause_before_a_batch
        # A read over several shards lingers between them, so commits land inside
        # it as they would on a loaded machine (a cut that is not one shows).
        _dawdle_between_shards(db)
        barrier = threading.Barrier(len(clients))

        def body(client: Any) -> None:
            barrier.wait()
            reader = follower is not None and client.index == len(clients) - 1
            client.run(follower if reader else db)

        threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in clients]
        for t in threads:
            t.start()
        deadline = time.monotonic() + STRESS_TIMEOUT
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            result.problems.append(
                f"a call never returned: threads {stuck} did not finish within "
                f"{STRESS_TIMEOUT} s\n{recorder.text()}"
            )
            return result
    finally:
        if follower is not None:
            follower.close()
        _close(db, STRESS_TIMEOUT if result.problems else None)
        if heads is not None:
            heads.close()  # found in review: one descriptor leaked per run
        shutil.rmtree(tmp, ignore_errors=True)
    result.problems.extend(early[:1])
    _check(result)
    return result


#: The writer's steps between a commit's header write and its publication, where
#: HEADS must still name the commit before it.
_UNPUBLISHED_STEPS = ("before_header_write", "before_header_fsync", "after_header_fsync")


def _watch_heads(db: Any, path: str) -> tuple[list[str], Any]:
    """Check, at each of the writer's steps before a commit is published, that HEADS
    names no commit past the shard's published one: readonly handles (in any process)
    follow HEADS, and a commit it names before its header fsync returned is one a
    crash can still take away after they read it (found by mutation testing: an
    engine publishing HEADS before the fsync passed every campaign; the crash
    campaign's simulated disk has no HEADS file). The list returned fills with what
    is found (with the HEADS reader to close after the run); empty, and nothing
    watched, for engines not built on settee's shards."""
    import settee
    from settee.heads import HeadsFile

    inner = getattr(db, "inner", db)
    found: list[str] = []
    if not isinstance(inner, settee.Database):
        return found, None
    heads = HeadsFile(path, writer=False)
    for shard in inner.shards:
        shard.step_hook = _heads_check(shard, heads, found, shard.step_hook)
    return found, heads


def _heads_check(
    shard: Any, heads: Any, found: list[str], previous: Callable[[str], None] | None
) -> Callable[[str], None]:
    def hook(name: str) -> None:
        if previous is not None:
            previous(name)
        if name in _UNPUBLISHED_STEPS:
            slot = heads.read(shard.identity.index)
            published = shard.snapshot.seq
            if slot is not None and slot.seq > published:
                found.append(
                    f"HEADS names seq {slot.seq} of shard {shard.identity.index} at the "
                    f"writer's step {name!r}, before that commit is published (the "
                    f"shard's is {published}): a readonly handle could read a commit "
                    "a crash may still lose"
                )

    return hook


def _pause(_step: str) -> None:
    time.sleep(READER_PAUSE)


#: Seconds the readonly reader of a stress run waits before each call.
READER_PAUSE = 0.002


def _pause_before_a_batch(_step: str) -> None:
    time.sleep(GROUP_PAUSE)


#: Seconds the group writer of a stress run waits before each batch. Its batches took
#: the first 3 ms of a run while the reads, each shard lingering ``READER_PAUSE``,
#: take 10 to 30 ms: only the first reads met a batch. Spaced out, batches land
#: inside later reads too (found when random histories began to ask ``revs_diff``:
#: ``mutants:revs_diff_per_id_snapshot``, which reads each id at its own instant, was
#: caught in none of 225 runs with the batches back to back, 3 with 2 ms before each,
#: 5 with 4 ms, 19 with 8 ms, and no more with 12 or 16 ms).
GROUP_PAUSE = 0.008


def _dawdle_between_shards(db: Any) -> None:
    """Make each shard of ``db`` wait ``READER_PAUSE`` before handing out a snapshot
    (engines with ``shards`` whose snapshots come from ``current``/``current_at``,
    whatever reads them): a read over several shards then lingers between them,
    and commits land inside it, as on a loaded machine. A read that pins its
    shards one after another, not at one instant, shows."""
    for shard in getattr(db, "shards", None) or ():
        for name in ("current", "current_at"):
            take = getattr(shard, name, None)
            if callable(take):
                setattr(shard, name, _after_pause(take))


def _after_pause(take: Callable[..., Any]) -> Callable[..., Any]:
    def paused(*args: Any) -> Any:
        time.sleep(READER_PAUSE)
        return take(*args)

    return paused


def _follower(spec: str, db: Any, path: str, other_process: bool) -> Any:
    """A readonly handle on ``db``'s directory, here or in another process
    (``ReaderProcess``): the engine's own ``open_follower`` (a mutant's), else
    ``settee.open(path, readonly=True)`` when ``db`` is settee's engine (or wraps
    it); None for engines without one (the reference)."""
    import settee

    opener = getattr(db, "open_follower", None)
    if opener is None and not isinstance(getattr(db, "inner", db), settee.Database):
        return None
    if other_process:
        return ReaderProcess(spec, path)
    return settee.open(path, readonly=True) if opener is None else opener(path)


#: Compactions racing the writer in ``compaction_keeps_concurrent_writes``: the writes
#: that land inside a catch-up pass depend on thread switches, and with two the
#: mutant ``catch_up_newest_seq`` went unseen one run in five.
COMPACTIONS = 6


def compaction_keeps_concurrent_writes(spec: str, docs: int = 400) -> list[str]:
    """The problems of compactions racing a writer: every write acknowledged while
    they ran must be listed by ``all_docs`` and ``changes`` after them, and after a
    reopen. In ``small_compaction_steps`` the copy takes hundreds of steps, so the
    writer lands changes in every phase of it, the catch-up loop outside the writer
    included (which a history's few writes seldom reach)."""
    tmp = scratch_dir("settee-compact-")
    factory = load_factory(spec)
    db = factory(f"{tmp}/db", shards=1)
    acked: list[str] = []
    stop = threading.Event()
    failed: list[BaseException] = []

    def write() -> None:
        # At most 2,000 writes: a catch-up outside the writer runs while a single
        # change is left, so a writer never stopping could outpace it for ever.
        try:
            for n in range(2000):
                if stop.is_set():
                    break
                acked.append(db.put({"_id": f"w{n:06d}"})["id"])
        except BaseException as exc:  # reported below, never lost with the thread
            failed.append(exc)

    try:
        db.bulk_docs([{"_id": f"pre{n:05d}"} for n in range(docs)])
        _compact_beside(db, write, stop, COMPACTIONS)
        if failed:
            return [f"a write during compaction raised {failed[0]!r}"]
        problems = _missing_writes(db, acked, "after compaction")
        db.close()
        db = factory(f"{tmp}/db", shards=1)
        return problems + _missing_writes(db, acked, "after compaction and a reopen")
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def compaction_keeps_concurrent_purges(spec: str, docs: int = 200) -> list[str]:
    """The problems of compactions racing purges (SEMANTICS §19: "a compaction running
    meanwhile keeps nothing purged"): every document a purge acknowledged while they
    ran must be gone from ``all_docs`` and ``changes`` after them, and after a reopen.
    The copy takes a hundred steps (``small_compaction_steps``), so purges land after
    its snapshot was pinned, and only the catch-up's drop of ids purged meanwhile keeps
    them out (``mutants:compact_keeps_purged`` left it out and passed every other
    check: no fixed check purged during a compaction, and the scheduled ones seldom
    reach a copy of more than two documents). Empty for engines without ``purge``."""
    tmp = scratch_dir("settee-compact-purge-")
    factory = load_factory(spec)
    db = factory(f"{tmp}/db", shards=1)
    if not callable(getattr(db, "purge", None)):
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)
        return []
    purged: list[str] = []
    stop = threading.Event()
    failed: list[BaseException] = []
    try:
        revs = {
            r["id"]: r["rev"] for r in db.bulk_docs([{"_id": f"p{n:04d}"} for n in range(docs)])
        }

        def purge() -> None:
            try:
                for doc_id, rev in revs.items():
                    if stop.is_set():
                        break
                    if db.purge({doc_id: [rev]})["purged"][doc_id] == [rev]:
                        purged.append(doc_id)
            except BaseException as exc:  # reported below, never lost with the thread
                failed.append(exc)

        _compact_beside(db, purge, stop, 3)
        if failed:
            return [f"a purge during compaction raised {failed[0]!r}"]
        problems = _purged_back(db, purged, "after compaction")
        db.close()
        db = factory(f"{tmp}/db", shards=1)
        return problems + _purged_back(db, purged, "after compaction and a reopen")
    finally:
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _compact_beside(
    db: Any, work: Callable[[], None], stop: threading.Event, compactions: int
) -> None:
    """``compactions`` compactions in ``small_compaction_steps`` while ``work`` runs
    on a thread of its own; ``stop`` is set, and the thread joined, when they end."""
    with small_compaction_steps():
        worker = threading.Thread(target=work)
        worker.start()
        try:
            for _ in range(compactions):
                db.compact()
        finally:
            stop.set()
            worker.join()


def _purged_back(db: Any, purged: list[str], when: str) -> list[str]:
    gone = set(purged)
    listed = [row["id"] for row in db.all_docs()["rows"] if row["id"] in gone]
    changed = [row["id"] for row in db.changes()["results"] if row["id"] in gone]
    return [
        f"{when}: {what} lists {len(back)} of the {len(purged)} documents purged while "
        f"compacting, e.g. {back[:3]}"
        for what, back in (("all_docs", listed), ("changes", changed))
        if back
    ]


def _missing_writes(db: Any, acked: list[str], when: str) -> list[str]:
    listed = {row["id"] for row in db.all_docs()["rows"]}
    changes = [row["id"] for row in db.changes()["results"]]
    changed = set(changes)
    problems = []
    if len(changes) != len(changed):
        twice = sorted({doc_id for doc_id in changes if changes.count(doc_id) > 1})
        problems.append(f"{when}: changes lists documents twice, e.g. {twice[:3]}")
    for what, seen in (("all_docs", listed), ("changes", changed)):
        lost = [doc_id for doc_id in acked if doc_id not in seen]
        if lost:
            problems.append(
                f"{when}: {what} lacks {len(lost)} of the {len(acked)} writes acknowledged "
                f"while compacting, e.g. {lost[:3]}"
            )
    return problems


def follower_read_across_writes(spec: str, *, compact: bool = False) -> list[str]:
    """The problems of one readonly read over two shards with two writes inside it.

    The writer's client writes "b" (shard 0 of 2), then "a" (shard 1), each after
    the other was acknowledged (with ``compact``, compacting the database in
    between, so shard 1's file is swapped under the read), while the readonly
    handle's listing sits between its two shards (its ``cut.step_hook``, as the
    scheduler's "pin"). A listing that shows "a" written but not "b" saw no
    single instant: the stress run's readonly reader found this only now and
    then (``mutants:fractured_follower``). Empty for engines without a readonly
    handle with a cut.
    """
    tmp = scratch_dir("settee-pin-")
    db = load_factory(spec)(f"{tmp}/db", shards=2)
    follower = None
    try:
        revs = {doc_id: db.put({"_id": doc_id, "v": 0})["rev"] for doc_id in ("b", "a")}
        follower = _follower(spec, db, f"{tmp}/db", False)
        cut = getattr(follower, "cut", None)
        if cut is None or not hasattr(cut, "step_hook"):
            return []
        # A commit the handle has not loaded yet: the read must load shard 1's.
        revs["a"] = db.put({"_id": "a", "_rev": revs["a"], "v": 1})["rev"]
        written: list[str] = []

        def write_both(_step: str) -> None:
            if not written:
                for doc_id in ("b", "a"):
                    written.append(db.put({"_id": doc_id, "_rev": revs[doc_id], "v": 2})["rev"])
                    if compact and doc_id == "b":
                        db.compact()

        cut.step_hook = write_both
        rows = follower.all_docs()["rows"]
        seen = {row["id"]: row["value"]["rev"] for row in rows}
        if not written:
            return ["the readonly listing never paused between its shards"]
        if seen.get("a") == written[1] and seen.get("b") != written[0]:
            return [
                "not linearizable: the readonly listing shows the write of 'a' but not the "
                f"write of 'b' acknowledged before it: {rows}"
            ]
        return []
    finally:
        if follower is not None:
            follower.close()
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def follower_follows_compactions(spec: str) -> list[str]:
    """The problems of readonly handles reading through two compactions: after each,
    and after every document was edited to a body of the same size in between, they
    must answer ``get`` and ``all_docs(include_docs=True)`` as the writer does. One
    handle follows HEADS; the other opens after HEADS was deleted, so it finds
    commits by scanning the shard files (FORMAT.md "HEADS"). Then the same on a
    simulated file system (``settee.io.MemoryFileSystem``), where every handle scans.

    Positions are per file and two compactions of the same documents lay out their
    nodes and bodies alike, so a cache a handle kept across the file swap answers
    with the old revision (``mutants:follower_node_cache_across_files`` and
    ``follower_body_cache_across_files`` passed every other check: the readonly
    reads of the stress runs seldom came after a compaction and never after two);
    a scanning handle that looks for new commits in the file it has open, not the
    one now at the path (``follower_scans_its_open_file``), stays behind for good.
    So did every readonly handle on a file system other than the OS's: it told a
    swapped file apart by its inode only, and found none (found in review).
    Empty for engines without a readonly handle."""
    import settee

    tmp = scratch_dir("settee-follow-")
    try:
        db = load_factory(spec)(f"{tmp}/db", shards=2)
        problems = _follow_compactions(
            db, lambda: _follower(spec, db, f"{tmp}/db", False), f"{tmp}/db/HEADS"
        )
        if problems or not isinstance(getattr(db, "inner", db), settee.Database):
            return problems  # a mutant's own readonly handle opens real files only
        fs = MemoryFileSystem()
        db = load_factory(spec)("/db", shards=2, fs=fs)
        opened = lambda: settee.open("/db", readonly=True, fs=fs)  # noqa: E731
        return [f"on a simulated file system: {p}" for p in _follow_compactions(db, opened)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _follow_compactions(
    db: Any, open_follower: Callable[[], Any], heads: str | None = None
) -> list[str]:
    """``follower_follows_compactions`` on ``db``, closed after: its readonly handles
    come from ``open_follower``; the second opens after ``heads`` was deleted."""
    followers: list[Any] = []
    problems: list[str] = []
    try:
        ids = "abcdefgh"
        revs = {
            i: db.put({"_id": i, "v": 0, "pad": "x" * (40 * n)})["rev"] for n, i in enumerate(ids)
        }
        follower = open_follower()
        if follower is None:
            return []
        followers.append(follower)
        if heads is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(heads)  # deleting it loses nothing (FORMAT.md "HEADS")
            followers.append(open_follower())
        hows = ("following HEADS", "scanning") if heads is not None else ("scanning",)

        def compare(when: str) -> None:
            for name, read in (
                ("get", lambda h: [h.get(i) for i in ids]),
                ("all_docs", lambda h: h.all_docs(include_docs=True)["rows"]),
            ):
                want = read(db)
                for how, handle in zip(hows, followers, strict=True):
                    got = read(handle)
                    if got != want:
                        first = next((w, g) for w, g in zip(want, got, strict=False) if w != g)
                        problems.append(
                            f"{when}: the readonly handle {how}: its {name} differs from the "
                            f"writer's, first at {first[1]} (the writer: {first[0]})"
                        )

        compare("before compacting")
        for version in (1, 2):
            db.compact()
            compare(f"after compaction {version}")
            for n, i in enumerate(ids):
                doc = {"_id": i, "_rev": revs[i], "v": version, "pad": "x" * (40 * n)}
                revs[i] = db.put(doc)["rev"]
            compare(f"after the edits following compaction {version}")
        return problems[:3]
    finally:
        for follower in followers:
            follower.close()
        db.close()


def follower_behind_a_stale_heads(spec: str) -> list[str]:
    """The problems of a readonly handle opened, while no writer runs, on a database
    whose HEADS names older commits than its shard files hold (a machine crash lost
    HEADS' unsynced slots; here an older copy of HEADS is put back after the writer
    closed): it must show the newest commits (SEMANTICS §1, README "Caveats"). A
    handle that trusted HEADS here (``mutants:follower_trusts_stale_heads``) passed
    every check: no campaign reopened a database with HEADS behind. Empty for engines
    without a readonly handle or a HEADS file."""
    tmp = scratch_dir("settee-stale-heads-")
    path = f"{tmp}/db"
    db = load_factory(spec)(path, shards=2)
    follower = None
    try:
        revs = {i: db.put({"_id": i, "v": 0})["rev"] for i in "abcd"}
        if not os.path.exists(f"{path}/HEADS"):
            return []
        with open(f"{path}/HEADS", "rb") as heads:
            older = heads.read()
        for i in "ac":
            db.put({"_id": i, "_rev": revs[i], "v": 1})
        db.put({"_id": "e", "v": 1})
        want = db.all_docs(include_docs=True)
        db.close()
        with open(f"{path}/HEADS", "r+b") as heads:
            heads.write(older)
        follower = _follower(spec, db, path, False)
        if follower is None:
            return []
        got = follower.all_docs(include_docs=True)
        if got != want:
            return [
                "a readonly handle opened with no writer running and HEADS behind the shard "
                f"files shows {got['rows']}, the files hold {want['rows']}"
            ]
        return []
    finally:
        if follower is not None:
            follower.close()
        db.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _check(result: RunResult) -> None:
    crashes = [
        r
        for r in result.recorder.records
        if r.output and r.output[0] == "error" and r.output[1][0] == "!"
    ]
    if any(r.ret is None for r in result.recorder.records):
        result.problems.append("a call never returned")
    result.problems += [f"client {r.client} {r.input!r} crashed: {r.output}" for r in crashes]
    result.problems += check_mvcc(result.recorder, group_ids(result.scenario.options["shards"]))
    result.problems += check_closed(result.recorder)
    verdict = check_history(result.recorder, result.scenario)
    result.explored = verdict.explored
    if verdict.ok is False:
        result.problems.append(f"not linearizable: {verdict.detail}")
    elif verdict.ok is None:
        result.problems.append(f"linearizability undecided: {verdict.detail}")

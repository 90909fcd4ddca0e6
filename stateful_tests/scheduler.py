"""Deterministic interleavings: one controlled thread runs at a time.

Controlled threads are the clients (started here) and every thread the
engine starts while the database opens (its shard writers). Each of them
*parks* at every scheduling point:

* every io-layer data call (``pread``, ``append``, ``pwrite``, ``fsync``,
  ``truncate``), through :class:`SchedulerFileSystem`, a
  ``settee.io.FileSystemWrapper``;
* every named step (``settee.shard.STEPS``: "admit" and "enqueue" on the
  caller, "dequeue" ... "publish" on the writer, "compact_*" on the
  compacting caller) through each shard's ``step_hook``;
* between two shards' snapshots of a read over several shards ("pin", the
  database's ``cut.step_hook``, ``settee.cut``);
* the start of each client call (``close`` and ``compact`` are calls too).

The scheduler waits until the system is *settled* — every controlled thread
parked, finished, or blocked — then asks ``choose`` which parked thread to
release (Hypothesis draws it), and whether to *defer* it instead (it then
waits until no other thread is parked; ``DEFER_ODDS``), and repeats. So one
run is one schedule, reproducible from the choices alone, and shrinking
moves towards "release the first parked thread".

Almost: a released thread that wakes a blocked one (a ``put`` on a writer's
queue, a lock released to a closer) runs on beside it until both park or
block, and which of them gets further first is the OS's choice. So the
engine's writer parks ("dequeue") right where its wait for a request
returns, before it takes the rest of its group, and a thread waiting for the
scheduler's own lock (on its way to park) counts as running. Measured under
load (two CPU hogs on two cores, each seeded scenario run twice with the
same choices): two schedules in 1 of 700 scenarios, down from about 1 in
100. When it happens Hypothesis reports ``FlakyStrategyDefinition``: after a
failure, ``settee verify`` keeps the first failing run's report; before any,
``campaigns.run_interleavings`` starts the campaign again.

Blocked is known exactly, not guessed from time: a profile hook on the
controlled threads notes when one enters a C call that can block
(``lock.acquire``, ``SimpleQueue.get``, ...) and on which object; the thread
is blocked while that object is unavailable (a locked lock, an empty queue).
When every thread is parked or blocked, nothing can change that. Locks
taken by ``with`` are invisible to the hook: so the engine takes a lock that
a thread may wait on while its holder is parked (a shard's submit and
compaction locks) with ``acquire()``, and only ``read_mode="parallel"`` is
scheduled (serialized mode holds its shard lock across io calls; the stress
run covers it). A thread that has exited (a writer after ``close()``) counts
as finished.

Nothing here may hang a test: a run that does not settle within ``stall``
seconds fails with the schedule so far and every thread's stack, after
releasing everyone. So does a run where no thread is parked but a client is
still blocked: nothing can ever wake it, so "a call never returned" (a
deadlock, or a request left in a queue no writer will read) is known at
once, not after a timeout.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from settee.io import FileSystem, FileSystemWrapper

__all__ = ["STEP_OPS", "ScheduleStuck", "Scheduler", "SchedulerFileSystem"]

T = TypeVar("T")

#: io-layer calls that are scheduling points.
STEP_OPS = frozenset({"pread", "append", "pwrite", "fsync", "truncate"})

#: After picking a thread the scheduler asks ``choose`` once more, among this many
#: answers of which only the last *defers* the thread: it then stays parked until
#: no other thread is (PCT's priority change points). Uniform choices rarely starve
#: a thread for long, and a thread delayed across a whole ``close()`` is how a
#: request lands after the writer stopped.
DEFER_ODDS = 3
#: The odds for a read parked between two shards' snapshots ("pin"): even, since a
#: read held there while whole writes run is how a read that is not one instant
#: shows, and it has one such point per shard where a write has a dozen.
PIN_DEFER_ODDS = 2


class ScheduleStuck(AssertionError):
    """The controlled threads stopped making progress (a deadlock or a stall)."""


@dataclass(slots=True)
class _Thread:
    name: str
    thread: threading.Thread
    parked_at: str | None = None
    go: bool = False
    finished: bool = False
    blocking_on: Any = None

    def done(self) -> bool:
        return self.finished or not self.thread.is_alive()


class Scheduler:
    """Runs controlled threads one step at a time; see the module docstring."""

    def __init__(self, choose: Callable[[list[str]], int], *, stall: float = 10.0) -> None:
        self.choose = choose
        self.stall = stall
        self.active = False
        self.schedule: list[str] = []
        self._cond = threading.Condition()
        # Held while the controller checks: a thread waiting on it is about to park.
        self._own_lock = self._cond._lock  # type: ignore[attr-defined]
        self._threads: dict[int, _Thread] = {}
        self._failure: str | None = None
        self._deferred: set[str] = set()

    # -- controlled threads ---------------------------------------------------------------------

    def adopt_new_threads(self) -> Any:
        """A context manager: threads started inside it (the engine's writers) are controlled."""
        scheduler = self

        class _Adopt:
            def __enter__(self) -> None:
                threading.setprofile(scheduler._first_event)

            def __exit__(self, *exc: object) -> None:
                threading.setprofile(None)  # type: ignore[arg-type]

        return _Adopt()

    def _first_event(self, frame: Any, event: str, arg: Any) -> None:
        self._register(threading.current_thread().name)

    def _register(self, name: str) -> None:
        state = _Thread(name, threading.current_thread())
        with self._cond:
            self._threads[threading.get_ident()] = state

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "c_call":
                if getattr(arg, "__name__", "") in _BLOCKING:
                    state.blocking_on = getattr(arg, "__self__", None)
            elif event in ("c_return", "c_exception"):
                state.blocking_on = None

        sys.setprofile(profile)

    def controlled(self, name: str, body: Callable[[], None]) -> Callable[[], None]:
        """``body`` wrapped to run as a controlled thread called ``name``."""

        def run() -> None:
            self._register(name)
            try:
                body()
            finally:
                sys.setprofile(None)
                with self._cond:
                    self._threads[threading.get_ident()].finished = True
                    self._cond.notify_all()

        return run

    def point(self, label: str) -> None:
        """A scheduling point: park until released (no-op for other threads)."""
        if not self.active:
            return
        state = self._threads.get(threading.get_ident())
        if state is None or state.done():
            return
        with self._cond:
            state.parked_at, state.go = label, False
            self._cond.notify_all()
            while not state.go and self.active:
                self._cond.wait(self.stall * 2)

    # -- the controlling thread ---------------------------------------------------------------

    def run(self, clients: list[threading.Thread]) -> None:
        """Release one parked thread at a time until every client finished."""
        self.active = True
        for t in clients:
            t.start()
        try:
            while True:
                parked = self._settle()
                if not parked:
                    if all(not t.is_alive() for t in clients):
                        return
                    stuck = [t.name for t in clients if t.is_alive()]
                    self._fail(
                        f"a call never returned: {stuck} blocked, and every other controlled "
                        "thread is blocked or finished (a deadlock, or a request nobody "
                        "will answer)"
                    )
                chosen = self._pick(parked)
                if chosen is None:
                    continue
                with self._cond:
                    chosen.parked_at, chosen.go = None, True
                    self._cond.notify_all()
        finally:
            self.release_all()
            self._wind_down(clients)

    def _wind_down(self, clients: list[threading.Thread]) -> None:
        """Let the released clients finish, but wait no longer once every thread still
        alive is blocked: nothing will wake it (a mutant's request nobody answers, left
        behind when a run fails or Hypothesis stops it mid-schedule; joining each for
        ``stall`` seconds cost 10 s per such run)."""
        deadline = time.monotonic() + self.stall
        while any(t.is_alive() for t in clients) and time.monotonic() < deadline:
            with self._cond:
                if self._settled():
                    return
            time.sleep(0.0005)

    def _pick(self, parked: list[_Thread]) -> _Thread | None:
        """The parked thread to release, or None after deferring one (see ``DEFER_ODDS``)."""
        offered = [s for s in parked if s.name not in self._deferred] or parked
        labels = [f"{s.name}@{s.parked_at}" for s in offered]
        chosen = offered[self.choose(labels)]
        label = f"{chosen.name}@{chosen.parked_at}"
        if len(offered) > 1:
            odds = PIN_DEFER_ODDS if label.endswith("@pin") else DEFER_ODDS
            question = [f"run {label}"] * (odds - 1) + [f"defer {label}"]
            if self.choose(question) == odds - 1:
                self._deferred.add(chosen.name)
                self.schedule.append(f"defer {label}")
                return None
        self._deferred.discard(chosen.name)
        self.schedule.append(label)
        return chosen

    def release_all(self) -> None:
        """Stop scheduling; every parked thread runs freely from now on."""
        with self._cond:
            self.active = False
            for state in self._threads.values():
                state.parked_at, state.go = None, True
            self._cond.notify_all()

    def _settle(self) -> list[_Thread]:
        """Wait until settled; the parked threads in a canonical order."""
        with self._cond:
            waited = 0.0
            while not self._settled():
                self._cond.wait(0.0005)
                waited += 0.0005
                if waited > self.stall:
                    self._fail(f"no progress for {self.stall} s")
            parked = [s for s in self._threads.values() if s.parked_at is not None]
        return sorted(parked, key=lambda s: (s.name, s.parked_at))

    def _settled(self) -> bool:
        for state in self._threads.values():
            if state.parked_at is not None or state.done():
                continue
            if state.blocking_on is self._own_lock or not _unavailable(state.blocking_on):
                return False  # running, or entering ``point`` to park (this lock is ours)
        return True

    def _fail(self, why: str) -> None:
        frames = sys._current_frames()
        stacks = []
        for ident, state in self._threads.items():
            if ident in frames and not state.done():
                stack = "".join(traceback.format_stack(frames[ident], limit=8))
                where = f"parked at {state.parked_at}" if state.parked_at else "not parked"
                stacks.append(f"--- {state.name} ({where}):\n{stack}")
        raise ScheduleStuck(
            f"{why}\nschedule so far ({len(self.schedule)} steps): {self.schedule}\n"
            + "\n".join(stacks)
        )

    def watch(self, db: Any) -> None:
        """Make every shard's write steps scheduling points (engines with ``shards``),
        and the gaps between the shards a read pins (engines with a ``cut``)."""
        for shard in getattr(db, "shards", ()) or ():
            if hasattr(shard, "step_hook"):
                shard.step_hook = self.point
        cut = getattr(db, "cut", None)
        if hasattr(cut, "step_hook"):
            cut.step_hook = self.point


_BLOCKING = frozenset({"acquire", "__enter__", "get", "wait", "join", "acquire_lock"})


def _unavailable(obj: Any) -> bool:
    """Whether a thread blocked in a C call on ``obj`` must wait for another thread."""
    if obj is None:
        return False
    locked = getattr(obj, "locked", None)
    if callable(locked):
        return bool(locked())
    is_done = getattr(obj, "is_done", None)  # a thread's handle, in join() (3.13+)
    if callable(is_done):
        return not is_done()
    if type(obj).__name__ == "RLock":  # no locked() before 3.14; its repr says
        return repr(obj).startswith("<locked")
    empty = getattr(obj, "empty", None)
    if callable(empty):
        return bool(empty())
    return False


class SchedulerFileSystem(FileSystemWrapper):
    """Every data call of the io layer is a scheduling point of ``scheduler``."""

    def __init__(self, inner: FileSystem, scheduler: Scheduler) -> None:
        super().__init__(inner)
        self.scheduler = scheduler

    def intercept(self, op: str, path: str, call: Callable[[], T]) -> T:
        if op in STEP_OPS:
            self.scheduler.point(f"{op} {os.path.basename(path)}")
        return call()

"""Crash campaigns: many crash points of many workloads, with a summary.

``run_campaign`` is the entry point ``settee verify`` calls::

    from settee.proof.crash.campaign import run_campaign
    summary = run_campaign(settee.Database, budget=60.0, seed=1, progress=print)
    print(summary.report()); exit(1 if summary.failures else 0)

Each failure names its seed, its crash step (with the op and the engine step it
belonged to) and the crash state; ``replay(failure)`` checks exactly that
crash point again on the recorded trace.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from settee.proof.crash.checker import (
    EngineFactory,
    Oracle,
    Recording,
    check_point,
    default_factory,
    make_workload,
    record,
)
from settee.proof.crash.known_bugs import known_bug
from settee.proof.crash.simfs import KINDS, CrashState, Image, SimFS

__all__ = [
    "Failure",
    "Summary",
    "check_recording",
    "crash_points",
    "replay",
    "run_campaign",
]

Progress = Callable[[str], None]


@dataclass(slots=True)
class Failure:
    """One crash state after which recovery broke a promise."""

    seed: int
    step: int
    state: CrashState
    problems: list[str]
    op: str
    recording: Recording | None = field(default=None, repr=False)

    def describe(self) -> str:
        w = self.recording.workload if self.recording else None
        shape = f" ops={w.size} shards={w.shards}" if w else ""
        head = (
            f"crash at step {self.step} ({self.op}) into {self.state.describe()}, "
            f"workload seed={self.seed}{shape}"
        )
        return head + "".join(f"\n  - {p}" for p in self.problems)


@dataclass(slots=True)
class Summary:
    """What a campaign checked and what failed."""

    states_checked: int = 0
    #: Crash states whose image (and acknowledged set) equalled one already checked.
    duplicates: int = 0
    workloads: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def report(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.by_kind.items()))
        lines = [
            f"crash states checked: {self.states_checked} ({kinds}); "
            f"{self.duplicates} duplicate images skipped; {self.workloads} workloads; "
            f"{len(self.failures)} failures"
        ]
        lines += [f.describe() for f in self.failures[:10]]
        return "\n".join(lines)


def crash_points(
    rec: Recording,
    *,
    kinds: Iterable[str] = KINDS,
    samples: int = 3,
    rng: random.Random,
    steps: Iterable[int] | None = None,
) -> Iterator[tuple[int, CrashState, Image]]:
    """(step, state, image) for every step (or the given ones) crossed with every kind."""
    wanted = set(range(len(rec.ops) + 1)) if steps is None else set(steps)
    kinds = list(kinds)
    disk = SimFS.replay(rec.base, [], strict_mkdir=rec.strict_mkdir)
    for step in range(max(wanted, default=-1) + 1):
        if step:
            disk.advance(rec.ops[step - 1])
        if step not in wanted:
            continue
        for kind in kinds:
            for state in disk.crash_states(kind, rng, samples=samples):
                yield step, state, disk.image(state)


def _op_name(rec: Recording, step: int) -> str:
    return rec.ops[step].describe() if step < len(rec.ops) else "after the last op"


def check_recording(
    rec: Recording,
    summary: Summary,
    *,
    factory: EngineFactory = default_factory,
    kinds: Iterable[str] = KINDS,
    samples: int = 3,
    seed: int = 0,
    steps: Iterable[int] | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
    max_failures: int | None = None,
) -> None:
    """Check every crash point of ``rec`` (or ``steps``), adding to ``summary``.

    Stops at ``deadline`` (a ``time.monotonic()`` value) or once ``summary`` holds
    ``max_failures`` failures.
    """
    summary.workloads += 1
    oracle = Oracle(rec)
    if oracle.problems:
        summary.failures.append(
            Failure(
                rec.workload.seed,
                len(rec.ops),
                CrashState("drop"),
                oracle.problems,
                "the run itself (no crash)",
                rec,
            )
        )
    rng = random.Random(seed)
    seen: set[tuple[str, tuple[int, ...]]] = set()
    for step, state, image in crash_points(rec, kinds=kinds, samples=samples, rng=rng, steps=steps):
        if deadline is not None and time.monotonic() > deadline:
            return
        if max_failures is not None and len(summary.failures) >= max_failures:
            return
        key = (image.digest(), tuple(oracle.need(step)))
        if key in seen:
            summary.duplicates += 1
            continue
        seen.add(key)
        problems = check_point(
            oracle, step, state, image=image, factory=factory, second_seed=rng.getrandbits(32)
        )
        summary.states_checked += 1
        summary.by_kind[state.kind] += 1
        if problems:
            failure = Failure(rec.workload.seed, step, state, problems, _op_name(rec, step), rec)
            summary.failures.append(failure)
            if progress is not None:
                progress(failure.describe())


def replay(failure: Failure, factory: EngineFactory = default_factory) -> list[str]:
    """Check the failure's crash point again on its recorded trace; [] once fixed."""
    assert failure.recording is not None, "a failure from check_recording carries its recording"
    return check_point(Oracle(failure.recording), failure.step, failure.state, factory=factory)


#: Failures a campaign collects from its failing workload before it stops.
MAX_FAILURES = 10


def _unknown_failures(summary: Summary) -> bool:
    """Whether a failure is not a known bug (known_bugs.py: those are counted, and the
    campaign goes on checking everything else)."""
    return any(known_bug(f.state.kind, f.problems) is None for f in summary.failures)


def run_campaign(
    engine_factory: EngineFactory = default_factory,
    budget: float = 60.0,
    seed: int = 0,
    progress: Progress | None = None,
    *,
    ops: int = 30,
    shards: int = 2,
    clients: int = 3,
    options: dict[str, Any] | None = None,
) -> Summary:
    """Record seeded workloads and check every crash point of each until ``budget`` seconds
    pass, or until a workload fails other than by a known bug (up to ``MAX_FAILURES``
    of its crash points are kept).

    ``engine_factory(path, fs=..., **options)`` opens a database (``settee.Database``).
    Workload ``i`` uses seed ``seed + i``; a failure carries that seed, its step and state.
    """
    summary = Summary()
    deadline = time.monotonic() + budget
    index = 0
    # A failing workload ends the campaign: its failures are what is reported (the
    # first, shrunk by nothing but its seed and step), and an engine that loses writes
    # at one crash point usually does at hundreds more (a replay spent its whole
    # budget finding them).
    while time.monotonic() < deadline and not _unknown_failures(summary):
        workload = make_workload(seed + index, ops=ops, clients=clients, shards=shards)
        # A new directory is durable only once the directory holding it is synced
        # (strict_mkdir): found by mutation testing, a creation that never synced it
        # passed every campaign, as only one fixed test recorded that way.
        rec = record(workload, factory=engine_factory, options=options, strict_mkdir=True)
        check_recording(
            rec,
            summary,
            factory=engine_factory,
            seed=seed + index,
            deadline=deadline,
            progress=progress,
            max_failures=MAX_FAILURES,
        )
        index += 1
        if progress is not None:
            progress(
                f"workload seed={workload.seed}: {len(rec.ops)} io steps; "
                f"{summary.states_checked} crash states checked, {len(summary.failures)} failures"
            )
    return summary

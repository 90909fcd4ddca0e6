"""Measuring: time-bounded samples, client threads, A/B pairs, statistics, progress.

Every number in a report comes from here. A *sample* runs a workload for a
fixed wall-clock time and divides the units it completed (operations, rows,
bytes) by the time it took. A *pair* measures side A and side B in the same
process, alternating which goes first (A B, B A, A B, ...) so that drift in
the machine's state (page cache, other processes, CPU frequency) falls on both
sides alike; it reports each side's median and spread and the ratio of medians.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = [
    "Outcome",
    "PairResult",
    "Progress",
    "Side",
    "measure_group",
    "percentiles",
    "run_clients",
    "run_for",
    "summarize",
]

#: A measurement: runs once, returns the metric value and optional extras
#: (latency samples, writer throughput, ...) of that one run.
Measure = Callable[[], "Outcome"]


@dataclass(slots=True)
class Outcome:
    """What one sample of one side measured."""

    value: float
    latencies_ms: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Side:
    """One side of a pair (or one member of a group measured round-robin)."""

    label: str
    measure: Measure


@dataclass(slots=True)
class PairResult:
    """The samples of every side of one group, keyed by label."""

    samples: dict[str, list[float]]
    latencies_ms: dict[str, list[float]]
    extra: dict[str, dict[str, list[float]]]


def summarize(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and spread ((max - min) / median, in percent) of samples."""
    med = statistics.median(samples)
    lo, hi = min(samples), max(samples)
    spread = 100.0 * (hi - lo) / med if med else 0.0
    return {
        "median": med,
        "min": lo,
        "max": hi,
        "spread_pct": round(spread, 1),
        "samples": list(samples),
    }


def percentiles(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/p99.9/max of latencies (nearest-rank), in milliseconds."""
    if not latencies_ms:
        return {}
    ordered = sorted(latencies_ms)
    n = len(ordered)

    def rank(q: float) -> float:
        return ordered[min(n - 1, max(0, math.ceil(q * n) - 1))]

    return {
        "p50": rank(0.50),
        "p90": rank(0.90),
        "p99": rank(0.99),
        "p99.9": rank(0.999),
        "max": ordered[-1],
        "count": n,
    }


def run_for(step: Callable[[], int], seconds: float) -> float:
    """Call ``step`` (which returns the units it completed) until ``seconds`` have
    passed, at least once; return units per second over the exact elapsed time."""
    units = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        units += step()
        now = time.perf_counter()
        if now >= deadline:
            return units / (now - start)


def run_clients(
    clients: int,
    step: Callable[[int], int],
    seconds: float,
    *,
    record_latency: bool = False,
    background: Callable[[threading.Event], None] | None = None,
) -> Outcome:
    """Run ``clients`` threads, each calling ``step(client_index)`` until ``seconds``
    have passed; return the total units per second of all clients.

    ``background``, when given, runs in one more thread (a writer, say) from before
    the clients start until they stop; it receives an Event set when it must stop,
    and its wall time is not counted. Latencies are per ``step`` call.
    """
    counts = [0] * clients
    lats: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    stop_bg = threading.Event()
    start_gate = threading.Barrier(clients + 1)
    bounds: dict[str, float] = {}

    def client(index: int) -> None:
        try:
            start_gate.wait()
            deadline = bounds["deadline"]
            mine = lats[index]
            units = 0
            clock = time.perf_counter
            while True:
                t0 = clock()
                units += step(index)
                t1 = clock()
                if record_latency:
                    mine.append((t1 - t0) * 1000.0)
                if t1 >= deadline:
                    break
            counts[index] = units
        except BaseException as exc:  # reported in the caller's thread below
            errors.append(exc)

    bg_thread = None
    if background is not None:
        bg_thread = threading.Thread(target=_guarded(background, stop_bg, errors), daemon=True)
        bg_thread.start()
        time.sleep(min(0.05, seconds / 4))  # let the writer get going first
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    bounds["deadline"] = time.perf_counter() + seconds
    start = time.perf_counter()
    start_gate.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    stop_bg.set()
    if bg_thread is not None:
        bg_thread.join()
    if errors:
        raise errors[0]
    return Outcome(sum(counts) / elapsed, [x for per in lats for x in per])


def _guarded(
    fn: Callable[[threading.Event], None], stop: threading.Event, errors: list[BaseException]
) -> Callable[[], None]:
    def run() -> None:
        try:
            fn(stop)
        except BaseException as exc:  # surfaced by run_clients
            errors.append(exc)

    return run


def measure_group(sides: Sequence[Side], repeats: int, tick: Callable[[], None]) -> PairResult:
    """Measure every side ``repeats`` times, round-robin, rotating the starting side
    each round (A B, B A, ... for a pair) so no side always runs first."""
    samples: dict[str, list[float]] = {s.label: [] for s in sides}
    lats: dict[str, list[float]] = {s.label: [] for s in sides}
    extra: dict[str, dict[str, list[float]]] = {s.label: {} for s in sides}
    for r in range(repeats):
        shift = r % len(sides)
        order = [*sides[shift:], *sides[:shift]]
        for side in order:
            outcome = side.measure()
            samples[side.label].append(outcome.value)
            lats[side.label].extend(outcome.latencies_ms)
            for key, value in outcome.extra.items():
                extra[side.label].setdefault(key, []).append(value)
            tick()
    return PairResult(samples, lats, extra)


class Progress:
    """A one-line progress bar on stderr, written by hand (no dependency).

    On a terminal it redraws one line; elsewhere (CI logs, pipes) it prints a
    line per scenario group so a log stays short. ``total`` is in ticks (one
    tick per measured sample); a wrong estimate only makes the bar clamp.
    """

    WIDTH = 28

    def __init__(self, total: int, *, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.done = 0
        self.label = ""
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()

    def stage(self, label: str) -> None:
        self.label = label
        if self.enabled and not self.tty:
            frac = min(1.0, self.done / self.total)
            print(f"[{frac:4.0%}] {self._elapsed()} {label}", file=self.stream, flush=True)
        self._draw()

    def tick(self, n: int = 1) -> None:
        self.done += n
        self._draw()

    def _elapsed(self) -> str:
        secs = int(time.perf_counter() - self.start)
        return f"{secs // 60:d}:{secs % 60:02d}"

    def _draw(self) -> None:
        if not (self.enabled and self.tty):
            return
        frac = min(1.0, self.done / self.total)
        filled = int(frac * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"\r[{bar}] {frac:4.0%} {self._elapsed()} {self.label}"[:119]
        self.stream.write(line.ljust(119))
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

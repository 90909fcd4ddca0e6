"""The run's configuration (sizes per mode) and the collector of its results.

``Run.pair`` is how a scenario reports: it measures two sides alternately,
summarises them, computes the ratio, checks a target if the pair has one and,
when a target is missed, profiles side A's hot path with cProfile so the
report can say why.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.harness import PairResult, Progress, Side, measure_group, percentiles, summarize

__all__ = ["MODES", "Config", "Run", "Target"]


@dataclass(frozen=True, slots=True)
class Config:
    """Sizes of one run; ``MODES`` holds the three presets."""

    mode: str
    docs: int  # preloaded documents of the read/write scenarios
    seconds: float  # wall time of one sample
    mixed_seconds: float  # one sample of the batched-writes scenarios
    repeats: int  # samples per side
    read_clients: tuple[int, ...]
    mixed_readers: tuple[int, ...]
    latency_clients: tuple[int, ...]
    seed_workloads: tuple[str, ...]
    seed_clients: tuple[int, ...]
    seed_shards: tuple[int, ...]
    sweep_clients: int  # clients of the shard sweep
    peer_shards: int  # shards of the settee store compared with the peers
    large_mb: tuple[float, ...]
    reopen_docs: int
    scaling: tuple[int, ...]
    conflicts: int = 2000  # conflicting leaves of one document (bench/conflicts.py)
    write_batch: int = 1000
    write_rate: int = 4000  # docs/s the batch writer aims at in the mixed scenarios
    seed_batch: int = 100
    latency_fsync_ms: float = 2.0
    latency_read_ms: float = 0.2


_ALL_SEED = ("insert", "get", "multiget", "multiget_docs", "range", "range_docs")

MODES: dict[str, Config] = {
    "smoke": Config(
        mode="smoke",
        docs=400,
        seconds=0.02,
        mixed_seconds=0.08,
        repeats=2,
        read_clients=(1, 2),
        mixed_readers=(2,),
        latency_clients=(2,),
        seed_workloads=_ALL_SEED,
        seed_clients=(1, 2),
        seed_shards=(1, 2),
        sweep_clients=2,
        peer_shards=2,
        large_mb=(0.25,),
        reopen_docs=1000,
        scaling=(500, 1000),
        conflicts=100,
        write_batch=100,
        write_rate=2000,
        seed_batch=20,
    ),
    "quick": Config(
        mode="quick",
        docs=5000,
        seconds=0.15,
        mixed_seconds=0.6,
        repeats=3,
        read_clients=(1, 4, 16),
        mixed_readers=(4,),
        latency_clients=(1, 16),
        seed_workloads=_ALL_SEED,
        seed_clients=(1, 4),
        seed_shards=(1, 4),
        sweep_clients=4,
        peer_shards=4,
        large_mb=(1, 10),
        reopen_docs=100_000,
        scaling=(10_000, 100_000),
        conflicts=500,
    ),
    "full": Config(
        mode="full",
        docs=20_000,
        seconds=0.4,
        mixed_seconds=1.0,
        repeats=5,
        read_clients=(1, 2, 4, 8, 16),
        mixed_readers=(1, 4),
        latency_clients=(1, 4, 16),
        seed_workloads=_ALL_SEED,
        seed_clients=(1, 2, 4, 8),
        seed_shards=(1, 2, 4, 8),
        sweep_clients=4,
        peer_shards=4,
        large_mb=(1, 10, 40),
        reopen_docs=100_000,
        scaling=(10_000, 100_000, 300_000, 1_000_000),
    ),
}


@dataclass(frozen=True, slots=True)
class Target:
    """What the issue asks of a pair: ``min_ratio`` (A/B at least ``value``),
    ``max_ratio`` (A/B at most ``value``), ``not_slower`` (A not worse than B
    beyond the noise of the samples), ``a_below`` (A's median under ``value``,
    in the pair's unit) or ``p999_below`` (A's p99.9 latency under ``value`` ms)."""

    kind: str
    value: float = 1.0
    source: str = ""


@dataclass
class Run:
    """Everything one ``settee bench`` run measured, plus where it works."""

    config: Config
    workdir: str
    progress: Progress
    pairs: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def tick(self) -> None:
        self.progress.tick()

    def path(self, name: str) -> str:
        """A fresh, empty path under the work directory."""
        path = os.path.join(self.workdir, name)
        if os.path.exists(path):
            shutil.rmtree(path)
        return path

    def skip(self, scenario: str, reason: str) -> None:
        self.skipped.append({"id": scenario, "reason": reason})

    def pair(
        self,
        pair_id: str,
        *,
        group: str,
        title: str,
        unit: str,
        a: Side,
        b: Side,
        meaning: str,
        higher_is_better: bool = True,
        params: dict[str, Any] | None = None,
        target: Target | None = None,
        profile: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Measure ``a`` and ``b`` alternately and record the pair."""
        result = measure_group([a, b], self.config.repeats, self.tick)
        return self.record(
            pair_id,
            result,
            a.label,
            b.label,
            group=group,
            title=title,
            unit=unit,
            meaning=meaning,
            higher_is_better=higher_is_better,
            params=params,
            target=target,
            profile=profile,
        )

    def record(
        self,
        pair_id: str,
        result: PairResult,
        a: str,
        b: str,
        *,
        group: str,
        title: str,
        unit: str,
        meaning: str,
        higher_is_better: bool = True,
        params: dict[str, Any] | None = None,
        target: Target | None = None,
        profile: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Record sides ``a`` and ``b`` of an already measured group as one pair."""
        sides = {label: _side(label, result) for label in (a, b)}
        ratio = sides[a]["median"] / sides[b]["median"] if sides[b]["median"] else float("inf")
        noise = sides[a]["min"] <= sides[b]["max"] and sides[b]["min"] <= sides[a]["max"]
        entry: dict[str, Any] = {
            "id": pair_id,
            "group": group,
            "title": title,
            "unit": unit,
            "higher_is_better": higher_is_better,
            "params": params or {},
            "a": sides[a],
            "b": sides[b],
            "ratio": ratio,
            "within_noise": noise,
            "verdict": verdict(ratio, noise, higher_is_better),
            "meaning": meaning,
            "target": None,
            "profile": None,
        }
        if target is not None:
            met = _target_met(target, ratio, noise, higher_is_better, sides[a])
            entry["target"] = {**asdict(target), "met": met}
            if not met and profile is not None:
                entry["profile"] = profile_text(profile)
        self.pairs.append(entry)
        return entry

    def measure(self, sides: Sequence[Side]) -> PairResult:
        """Measure several sides round-robin (for peers compared pair by pair)."""
        return measure_group(sides, self.config.repeats, self.tick)


def _side(label: str, result: PairResult) -> dict[str, Any]:
    side = {"label": label, **summarize(result.samples[label])}
    lats = result.latencies_ms[label]
    if lats:
        side["latency_ms"] = percentiles(lats)
    extra = result.extra[label]
    if extra:
        side["extra"] = {key: summarize(values)["median"] for key, values in extra.items()}
    return side


def verdict(ratio: float, within_noise: bool, higher_is_better: bool) -> str:
    """Words for a ratio: which side wins and by how much, or that samples overlap."""
    if within_noise:
        return "within noise"
    better = ratio > 1 if higher_is_better else ratio < 1
    factor = ratio if higher_is_better else (1 / ratio if ratio else float("inf"))
    if better:
        return f"A {factor:.2f}× better" if factor >= 2 else f"A +{(factor - 1) * 100:.0f}%"
    inverse = 1 / factor if factor else float("inf")
    return f"B {inverse:.2f}× better" if inverse >= 2 else f"A −{(1 - factor) * 100:.0f}%"


def _target_met(
    target: Target, ratio: float, noise: bool, higher_is_better: bool, a: dict[str, Any]
) -> bool:
    if target.kind == "min_ratio":
        return ratio >= target.value if higher_is_better else ratio <= 1 / target.value
    if target.kind == "max_ratio":
        return ratio <= target.value
    if target.kind == "not_slower":
        return noise or (ratio >= 1 if higher_is_better else ratio <= 1)
    if target.kind == "a_below":
        return a["median"] < target.value
    if target.kind == "p999_below":
        return a.get("latency_ms", {}).get("p99.9", float("inf")) < target.value
    raise ValueError(f"unknown target kind {target.kind!r}")


def profile_text(fn: Callable[[], None], top: int = 14) -> str:
    """cProfile of one call of ``fn`` in this thread: the top functions by own time."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    # Drop pstats' preamble up to the column header line.
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:])


def new_workdir(base: str | None) -> str:
    """A temporary directory for the databases of one run (removed by the runner),
    inside ``base`` (``--workdir``), which is made when it does not exist yet (it
    was a raw FileNotFoundError, as ``--out`` never was)."""
    if base is not None:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix="settee-bench-", dir=base)

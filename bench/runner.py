"""``settee bench``: run the benchmark scenarios and write the report.

Modes: the default full run (under 15 minutes on a 2-core machine),
``--quick`` (under 2 minutes, a subset of client counts and sizes) and
``--smoke`` (every scenario at minimal sizes, seconds; for the test suite, its
numbers mean nothing). Outputs go to ``--out`` (default ``bench/results``):
``latest.json``, ``latest.md``, ``performance.md`` and PNG plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import os
import platform
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import settee
from bench import bursts, conflicts, disk, processes, readmode, report, scaling, seed
from bench.harness import Progress
from bench.latencyfs import DEFAULT_FSYNC_MS, DEFAULT_READ_MS
from bench.suite import MODES, Config, Run, new_workdir

__all__ = ["GROUPS", "main"]

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")

#: Scenario groups in run order: name -> (runner, ticks for the progress bar).
GROUPS: dict[str, tuple[Callable[[Run], None], Callable[[Config], int]]] = {
    "readmode": (readmode.run_readmode, lambda c: readmode.count_pairs(c) * 2 * c.repeats),
    "peers": (seed.run_peers, seed.peer_ticks),
    "shards": (seed.run_shard_sweep, seed.sweep_ticks),
    "large": (disk.run_large, disk.large_ticks),
    "scaling": (scaling.run_scaling, scaling.scaling_ticks),
    "bursts": (bursts.run_bursts, bursts.burst_ticks),
    "conflicts": (conflicts.run_conflicts, conflicts.conflict_ticks),
    "processes": (processes.run_processes, processes.process_ticks),
}


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Measure settee: parallel preads vs serialized file access, the seed "
        "workloads against sqlite3/LMDB/the reference, large documents against the raw "
        "disk, reopen time and scaling. Writes latest.json, latest.md and PNG plots.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a subset, under 2 minutes")
    size.add_argument(
        "--smoke", action="store_true", help="every scenario at minimal size (harness test)"
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help="output directory (%(default)s)")
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated scenario groups to run, of: {', '.join(GROUPS)}",
    )
    parser.add_argument("--workdir", default=None, help="where the databases go (default: TMPDIR)")
    parser.add_argument("--repeats", type=int, default=None, help="samples per side")
    parser.add_argument("--seconds", type=float, default=None, help="wall time of one sample")
    parser.add_argument(
        "--latency-fsync-ms",
        type=float,
        default=DEFAULT_FSYNC_MS,
        help="latency file system: delay per fsync (%(default)s ms)",
    )
    parser.add_argument(
        "--latency-read-ms",
        type=float,
        default=DEFAULT_READ_MS,
        help="latency file system: delay per pread (%(default)s ms)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _config(args: argparse.Namespace) -> Config:
    cfg = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    changes: dict[str, Any] = {
        "latency_fsync_ms": args.latency_fsync_ms,
        "latency_read_ms": args.latency_read_ms,
    }
    if args.repeats is not None:
        if args.repeats < 1:
            raise SystemExit("--repeats must be at least 1")
        changes["repeats"] = args.repeats
    if args.seconds is not None:
        if args.seconds <= 0:
            raise SystemExit("--seconds must be positive")
        changes["seconds"] = args.seconds
    return dataclasses.replace(cfg, **changes)


def _groups(only: str) -> list[str]:
    if not only:
        return list(GROUPS)
    chosen = [g.strip() for g in only.split(",") if g.strip()]
    unknown = sorted(set(chosen) - set(GROUPS))
    if unknown:
        raise SystemExit(f"--only: unknown group(s) {unknown}; choose from {list(GROUPS)}")
    return [g for g in GROUPS if g in chosen]


def _plots_available() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}); pip install -e '.[bench]'"
    return None


def main(argv: Sequence[str] | None = None, prog: str = "settee bench") -> int:
    """Run the benchmarks; return the exit status (0 even when a target is missed:
    the report says so; 2 for bad arguments or a missing plotting library)."""
    raw = list(sys.argv[1:] if argv is None else argv)
    args = _parser(prog).parse_args(raw)
    cfg = _config(args)
    groups = _groups(args.only)
    plots = not args.no_plots
    no_plots_reason = _plots_available() if plots else None
    if no_plots_reason and not args.smoke:
        print(f"{prog}: {no_plots_reason} (or pass --no-plots)", file=sys.stderr)
        return 2
    workdir = new_workdir(args.workdir)
    total = sum(GROUPS[g][1](cfg) for g in groups)
    progress = Progress(total, enabled=not args.no_progress)
    run = Run(cfg, workdir, progress)
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        for name in groups:
            gc.collect()
            GROUPS[name][0](run)
    finally:
        progress.close()
        shutil.rmtree(workdir, ignore_errors=True)
    if no_plots_reason:
        run.skip("plots", no_plots_reason)
    doc = _document(run, raw, prog, started, time.perf_counter() - t0, load_start, groups)
    written = report.write_all(doc, args.out, plots=plots and not no_plots_reason)
    print(report.performance_section(doc))
    print("wrote " + ", ".join(written))
    return 0


def _document(
    run: Run,
    argv: list[str],
    prog: str,
    started: datetime.datetime,
    duration: float,
    load_start: float,
    groups: list[str],
) -> dict[str, Any]:
    return {
        "schema": report.SCHEMA,
        "mode": run.config.mode,
        "command": " ".join([prog, *argv]),
        "started": started.isoformat(timespec="seconds"),
        "duration_s": round(duration, 1),
        "groups": groups,
        "machine": _machine(run.workdir, load_start),
        "config": dataclasses.asdict(run.config),
        "pairs": run.pairs,
        "curves": run.curves,
        "skipped": run.skipped,
        "notes": run.notes,
        "plots": [],
    }


def _machine(workdir: str, load_start: float) -> dict[str, Any]:
    try:
        import lmdb

        lmdb_version: str | None = lmdb.__version__
    except ImportError:
        lmdb_version = None
    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_gib": _mem_gib(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "settee": settee.__version__,
        "sqlite": sqlite3.sqlite_version,
        "lmdb": lmdb_version,
        "workdir_fs": _mount_of(os.path.dirname(workdir)),
        "loadavg_start": round(load_start, 2),
        "loadavg_end": round(os.getloadavg()[0], 2),
    }


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def _mount_of(path: str) -> str:
    """``path`` and the device and file system type it lives on (from /proc/mounts)."""
    real = os.path.realpath(path)
    best = ("", "?", "?")
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                device, mount, fstype = line.split()[:3]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best[0]):
                    best = (mount, device, fstype)
    except OSError:
        return real
    return f"{real} on {best[1]} ({best[2]})"

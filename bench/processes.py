"""Readers in other processes: what ``readonly=True`` buys on a multi-core machine.

Client threads of one process share one GIL, so settee's Python read path uses
one core however many threads read. A database opened ``readonly=True`` in
another process reads the same files beside the writer (``settee.follower``),
so readers scale with processes. The pair: 2 reader processes vs 1, each doing
random ``get``s for a sample's wall time, while this process's writer commits
``write_batch``-doc ``bulk_docs`` (fsync on) paced at ``write_rate`` docs/s.
Unit: total reads/s of the reader processes. Target (issue 16): 2 processes at
least 1.6x one.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import settee
from bench.harness import Outcome, Side
from bench.stores import load_settee, make_doc
from bench.suite import Config, Run, Target

__all__ = ["process_ticks", "run_processes"]

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def process_ticks(cfg: Config) -> int:
    """Samples this group takes, for the progress bar."""
    return 2 * cfg.repeats


def _readers(path: str, count: int, docs: int, seconds: float) -> Outcome:
    """Start ``count`` reader processes, release them together, sum their reads/s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_ROOT, os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.procreader", path, str(docs), str(seconds), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdin is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a reader process did not start (see its stderr)")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for proc in procs if proc.stdout]
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(60)
    return Outcome(sum(a["reads"] / a["seconds"] for a in answers))


def _paced_writer(db: settee.Database, cfg: Config, stop: threading.Event) -> None:
    ids = itertools.count()
    interval = cfg.write_batch / cfg.write_rate
    while not stop.is_set():
        started = time.perf_counter()
        db.bulk_docs([make_doc(f"w{next(ids):010d}", 0) for _ in range(cfg.write_batch)])
        stop.wait(max(0.0, interval - (time.perf_counter() - started)))


def run_processes(run: Run) -> None:
    cfg = run.config
    path = run.path("processes")
    run.progress.stage(f"reader processes (loading {cfg.docs:,} docs)")
    db = settee.open(path, fsync=True)
    stop = threading.Event()
    writer = threading.Thread(target=_paced_writer, args=(db, cfg, stop), daemon=True)
    try:
        load_settee(db, 0, cfg.docs)
        writer.start()
        run.progress.stage("reader processes: 2 vs 1, writer committing")
        seconds = cfg.mixed_seconds
        run.pair(
            "processes.get",
            group="processes",
            title=f"random gets from reader processes (readonly=True) while "
            f"{cfg.write_batch}-doc batches commit at {cfg.write_rate:,} docs/s",
            unit="reads/s",
            a=Side("2 processes", lambda: _readers(path, 2, cfg.docs, seconds)),
            b=Side("1 process", lambda: _readers(path, 1, cfg.docs, seconds)),
            meaning="reads/s of 2 reader processes ÷ 1: 2 would be perfect scaling",
            params={"docs": cfg.docs, "cpus": os.cpu_count(), "write_rate": cfg.write_rate},
            target=Target("min_ratio", 1.6, "issue 16: 2 reader processes ≥ 1.6x one"),
        )
    finally:
        stop.set()
        if writer.is_alive():
            writer.join(60)
        db.close()
        shutil.rmtree(path, ignore_errors=True)

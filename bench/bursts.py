"""Read latency during and right after write bursts: does a reader ever stall?

One writer thread inserts ``write_batch`` new documents in one ``bulk_docs``
(fsync on), pauses ``BURST_PAUSE_S``, and repeats; one reader thread does
random single-document gets the whole time and records each get's latency.
So a sample holds reads that overlap a burst's commit and reads in the quiet
just after it, where a collector pass over caches that the burst churned
would stall them. The pair is settee vs sqlite3 on the same documents; the
target is settee's p99.9 (issue 16: at most 50 ms).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import threading
from collections.abc import Callable

from bench.harness import Outcome, Side, run_clients
from bench.stores import DocStore, SetteeStore, SqliteStore, doc_id, make_doc
from bench.suite import Config, Run, Target

__all__ = ["BURST_PAUSE_S", "P999_LIMIT_MS", "burst_ticks", "run_bursts"]

#: Quiet time between two bursts: long enough for "right after" to be measured.
BURST_PAUSE_S = 0.15
#: Issue 16's bound on the p99.9 read latency around write bursts.
P999_LIMIT_MS = 50.0


def burst_ticks(cfg: Config) -> int:
    """Samples this group takes, for the progress bar."""
    return 2 * cfg.repeats


def _burst_writer(store: DocStore, batch: int, prefix: str) -> Callable[[threading.Event], None]:
    ids = itertools.count()

    def write(stop: threading.Event) -> None:
        while not stop.is_set():
            store.insert([make_doc(f"{prefix}{next(ids):010d}", n) for n in range(batch)])
            stop.wait(BURST_PAUSE_S)

    return write


def _side(store: DocStore, cfg: Config, docs: int) -> Side:
    rng = random.Random(7)
    writer = _burst_writer(store, cfg.write_batch, f"burst-{store.name}-")

    def read(_: int) -> int:
        return store.get(doc_id(rng.randrange(docs)))

    def measure() -> Outcome:
        return run_clients(1, read, cfg.mixed_seconds, record_latency=True, background=writer)

    return Side(store.name, measure)


def run_bursts(run: Run) -> None:
    cfg = run.config
    docs = max(cfg.docs, cfg.reopen_docs)
    run.progress.stage(f"read latency around write bursts (loading {docs:,} docs)")
    settee_path = run.path("bursts-settee")
    sqlite_dir = run.path("bursts-sqlite3")
    os.makedirs(sqlite_dir)
    stores: list[DocStore] = [
        SetteeStore.engine(settee_path, shards=cfg.peer_shards, fsync=True),
        SqliteStore(os.path.join(sqlite_dir, "docs.sqlite3")),
    ]
    try:
        for store in stores:
            for lo in range(0, docs, 5000):
                store.insert([make_doc(doc_id(n), n) for n in range(lo, min(docs, lo + 5000))])
        run.progress.stage("read latency around write bursts")
        result = run.measure([_side(store, cfg, docs) for store in stores])
        run.record(
            "bursts.get",
            result,
            "settee",
            "sqlite3",
            group="bursts",
            title=f"random gets while {cfg.write_batch}-doc bursts commit every "
            f"{BURST_PAUSE_S} s ({docs:,} docs)",
            unit="reads/s",
            meaning="settee ÷ sqlite3 reads/s; the target is settee's p99.9 get latency",
            params={"docs": docs, "burst": cfg.write_batch, "pause_s": BURST_PAUSE_S},
            target=Target("p999_below", P999_LIMIT_MS, "issue 16: p99.9 read latency ≤ 50 ms"),
        )
    finally:
        for store in stores:
            store.close()
        shutil.rmtree(settee_path, ignore_errors=True)
        shutil.rmtree(sqlite_dir, ignore_errors=True)

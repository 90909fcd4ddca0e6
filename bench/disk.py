"""Large documents against the disk's own speed, reopen time, and scaling.

* Large documents: ``put`` and ``get`` of 1, 10, 40 MB documents (one string
  field of random base64 text) in MB/s, paired with raw ``os.write`` +
  ``os.fsync`` and ``os.pread`` of the same bytes in a file beside
  the database: the physical limit. Reads on both sides come from the page
  cache (the bytes were just written), so the get pair measures settee's
  overhead over a memory copy, not the device.
* Scaling: one database (default 4 shards, fsync on) is grown to each size in
  ``Config.scaling``; at each size the cost of inserting 1000-doc batches and
  of random reads is measured. The pair compares the largest size with the
  smallest (per-op time; near 1 means flat).
* Reopen: when the growing database holds ``Config.reopen_docs`` documents it
  is closed and reopened (open, then the first random ``get``), alternating
  with reopening a sqlite3 file holding the same rows.
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import sqlite3
import statistics
import time
from typing import Any

import settee
from bench.harness import Outcome, PairResult, Side, run_for
from bench.stores import SqliteStore, doc_id, load_settee, make_doc
from bench.suite import Config, Run, Target

__all__ = ["large_ticks", "run_large", "run_scaling", "scaling_ticks"]

#: Wall time the scaling load may take per mode before it stops growing the database.
LOAD_BUDGET_S = {"smoke": 30.0, "quick": 40.0, "full": 280.0}


def large_ticks(cfg: Config) -> int:
    return len(cfg.large_mb) * 2 * 2 * cfg.repeats


def scaling_ticks(cfg: Config) -> int:
    return 2 * cfg.repeats + len(cfg.scaling) * 2


# -- large documents ----------------------------------------------------------------------------


def run_large(run: Run) -> None:
    cfg = run.config
    run.progress.stage("large documents vs raw os.write/os.pread")
    db_path = run.path("large-settee")
    raw_path = run.path("large-raw.bin")
    db = settee.open(db_path, shards=1, fsync=True)
    fd = os.open(raw_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for mb in cfg.large_mb:
            _large_pairs(run, db, fd, mb)
    finally:
        db.close()
        os.close(fd)
        shutil.rmtree(db_path, ignore_errors=True)
        os.remove(raw_path)


def _large_pairs(run: Run, db: Any, fd: int, mb: float) -> None:
    size = int(mb * 1_000_000)
    # Documents are JSON values, so the body is a str: random bytes in base64.
    text = base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]
    payload = text.encode()
    seconds = run.config.seconds
    counter = iter(range(1 << 30))
    state: dict[str, Any] = {}

    def settee_put() -> int:
        doc_id_ = f"big-{mb}-{next(counter)}"
        db.put({"_id": doc_id_, "blob": text})
        state["id"] = doc_id_
        return size

    def raw_write() -> int:
        offset = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        state["offset"] = offset
        return size

    def settee_get() -> int:
        return len(db.get(state["id"])["blob"])

    def raw_read() -> int:
        return len(os.pread(fd, size, state["offset"]))

    label = f"{mb:g} MB"
    params = {"mb": mb, "bytes": size}
    run.pair(
        f"large.put.{mb:g}MB",
        group="large",
        title=f"put of a {label} document (fsync on)",
        unit="MB/s",
        a=Side("settee put", lambda: Outcome(run_for(settee_put, seconds) / 1e6)),
        b=Side("os.write+fsync", lambda: Outcome(run_for(raw_write, seconds) / 1e6)),
        meaning="settee ÷ raw write MB/s: the fraction of the disk's write speed settee reaches",
        params=params,
    )
    run.pair(
        f"large.get.{mb:g}MB",
        group="large",
        title=f"get of a {label} document",
        unit="MB/s",
        a=Side("settee get", lambda: Outcome(run_for(settee_get, seconds) / 1e6)),
        b=Side("os.pread", lambda: Outcome(run_for(raw_read, seconds) / 1e6)),
        meaning="settee ÷ raw pread MB/s: the fraction of a bare pread's speed settee reaches",
        params=params,
    )


# -- scaling and reopen ---------------------------------------------------------------------------


def run_scaling(run: Run) -> None:
    cfg = run.config
    path = run.path("scaling")
    checkpoints = sorted({*cfg.scaling, cfg.reopen_docs})
    budget = LOAD_BUDGET_S.get(cfg.mode, 60.0)
    started = time.perf_counter()
    curve: list[dict[str, Any]] = []
    samples: dict[int, dict[str, list[float]]] = {}
    db = settee.open(path, fsync=True)
    loaded = 0
    try:
        for target in checkpoints:
            run.progress.stage(f"scaling: growing to {target:,} documents")
            chunk = min(5 * cfg.write_batch, target // 2)
            spent = time.perf_counter() - started
            rate = loaded / spent if loaded and spent else None
            if rate and (target - loaded) / rate > budget - spent:
                run.notes.append(
                    f"scaling stopped at {loaded:,} documents: loading to {target:,} at "
                    f"{rate:,.0f} docs/s would pass the {budget:.0f} s load budget of "
                    f"--{cfg.mode}"
                )
                break
            load_settee(db, loaded, target - chunk)
            insert_us = _timed_batches(db, target - chunk, target, cfg.write_batch)
            loaded = target
            if target == cfg.reopen_docs:
                db.close()
                db = _reopen_pair(run, path, target)
            if target in cfg.scaling:
                point, per = _read_costs(run, db, target, insert_us)
                curve.append(point)
                samples[target] = per
    finally:
        db.close()
        shutil.rmtree(path, ignore_errors=True)
    run.curves["scaling"] = curve
    if len(samples) >= 2:
        _scaling_pairs(run, samples)
    else:
        run.skip("scaling.*", "fewer than two sizes were reached")


def _timed_batches(db: Any, start: int, stop: int, batch: int) -> list[float]:
    """Insert ``start`` .. ``stop - 1`` in batches; µs per document of each batch."""
    costs = []
    for lo in range(start, stop, batch):
        hi = min(stop, lo + batch)
        docs = [make_doc(doc_id(n), n) for n in range(lo, hi)]
        t0 = time.perf_counter()
        db.bulk_docs(docs)
        costs.append((time.perf_counter() - t0) * 1e6 / (hi - lo))
    return costs


def _read_costs(
    run: Run, db: Any, n: int, insert_us: list[float]
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    cfg = run.config
    rng = random.Random(n)
    per: dict[str, list[float]] = {"insert": insert_us, "get": [], "range_docs": []}
    # Warm the node cache first (the database may just have been reopened), so
    # every size is measured in the same steady state.
    run_for(lambda: _one(db.get(doc_id(rng.randrange(n)))), cfg.seconds)
    for _ in range(cfg.repeats):
        rate = run_for(lambda: _one(db.get(doc_id(rng.randrange(n)))), cfg.seconds)
        per["get"].append(1e6 / rate)
    run.tick()
    for _ in range(cfg.repeats):
        rate = run_for(
            lambda: len(
                db.all_docs(startkey=doc_id(rng.randrange(n - 100)), limit=100, include_docs=True)[
                    "rows"
                ]
            ),
            cfg.seconds,
        )
        per["range_docs"].append(1e6 / rate)
    run.tick()
    point = {"docs": n, **{f"{k}_us": statistics.median(v) for k, v in per.items()}}
    return point, per


def _scaling_pairs(run: Run, samples: dict[int, dict[str, list[float]]]) -> None:
    small, large = min(samples), max(samples)
    titles = {
        "insert": "insert cost per doc (1000-doc batches, fsync on)",
        "get": "random get cost",
        "range_docs": "range get cost per row (100-row include_docs calls)",
    }
    for op, title in titles.items():
        a, b = f"{large:,} docs", f"{small:,} docs"
        result = PairResult(
            samples={a: samples[large][op], b: samples[small][op]},
            latencies_ms={a: [], b: []},
            extra={a: {}, b: {}},
        )
        run.record(
            f"scaling.{op}",
            result,
            a,
            b,
            group="scaling",
            title=title,
            unit="µs/op",
            higher_is_better=False,
            meaning=f"cost at {large:,} ÷ cost at {small:,} docs: 1 is flat, 2 is twice as slow",
            params={"op": op, "small": small, "large": large},
        )


def _reopen_pair(run: Run, path: str, docs: int) -> Any:
    """Alternate reopening settee and a sqlite3 file of the same rows; leave settee open."""
    run.progress.stage(f"reopen of a {docs:,}-document database vs sqlite3")
    sq_dir = run.path("reopen-sqlite3")
    os.makedirs(sq_dir)
    sq_path = os.path.join(sq_dir, "docs.sqlite3")
    store = SqliteStore(sq_path)
    for lo in range(0, docs, 10_000):
        store.insert([make_doc(doc_id(n), n) for n in range(lo, min(docs, lo + 10_000))])
    store.close()
    rng = random.Random(docs)

    def settee_open() -> Outcome:
        t0 = time.perf_counter()
        db = settee.open(path)
        opened = time.perf_counter() - t0
        db.get(doc_id(rng.randrange(docs)))
        first = time.perf_counter() - t0
        db.close()
        return Outcome(opened, extra={"open_and_first_get_s": first})

    def sqlite_open() -> Outcome:
        t0 = time.perf_counter()
        conn = sqlite3.connect(sq_path)
        conn.execute("PRAGMA journal_mode=WAL")
        opened = time.perf_counter() - t0
        conn.execute("SELECT body FROM docs WHERE id = ?", (doc_id(rng.randrange(docs)),))
        first = time.perf_counter() - t0
        conn.close()
        return Outcome(opened, extra={"open_and_first_get_s": first})

    run.pair(
        "reopen",
        group="reopen",
        title=f"reopen of a {docs:,}-document database",
        unit="s",
        higher_is_better=False,
        a=Side("settee", settee_open),
        b=Side("sqlite3", sqlite_open),
        meaning="settee ÷ sqlite3 open time: below 1 means settee opens faster",
        params={"docs": docs, "shards": 4},
        target=Target("a_below", 1.0, "engine issue: open in under 1 s"),
    )
    shutil.rmtree(sq_dir, ignore_errors=True)
    return settee.open(path)


def _one(_: object) -> int:
    return 1

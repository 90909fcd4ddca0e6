"""Scaling: per-operation cost at every database size, measured interleaved.

One database per size in ``Config.scaling`` (default shards, fsync on) is
loaded first and all of them stay open; then each operation is measured on
every size round-robin (``Run.measure``), so a busy moment of the machine
falls on all sizes alike instead of on whichever size happened to be measured
then. The operations, each in µs:

* ``get`` — one random document (per call);
* ``multiget`` — ``all_docs(keys=<100 random ids>)`` (per call);
* ``range_docs`` — ``all_docs(startkey=<random>, limit=100, include_docs=True)``
  (per row);
* ``insert`` — ``bulk_docs`` of ``write_batch`` new documents, fsync on (per doc).

Before the round-robins every database, the peers' too, has each of its
documents read once: what is measured is the steady state, every node a read
needs cached, not how far a warm-up got.

Each pair is the largest size against the smallest: 1 is flat. Issue 16 asks
get and multiget to grow by at most ×1.3. The database of ``reopen_docs``
documents is also the one the reopen pair (``bench.disk.reopen_pair``) times.

The peers (sqlite3, and LMDB when installed) are loaded at the smallest and the
largest size too, and their get and multiget are measured in the same
round-robin as settee's sizes: ``scaling.get.sqlite3`` and so on say how much a
store in C grows on the same data and machine (the memory hierarchy's share of
the growth), without a target of their own.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable
from typing import Any

import settee
from bench.disk import reopen_pair
from bench.harness import Outcome, Side, run_for
from bench.stores import (
    DocStore,
    LmdbStore,
    SqliteStore,
    doc_id,
    lmdb_available,
    load_settee,
    make_doc,
)
from bench.suite import Config, Run, Target

__all__ = ["LOAD_BUDGET_S", "OPS", "run_scaling", "scaling_ticks"]

#: Wall time loading the databases may take per mode; larger sizes are skipped past it.
LOAD_BUDGET_S = {"smoke": 30.0, "quick": 40.0, "full": 280.0}

#: op -> (title, the most its cost may grow from the smallest to the largest size).
OPS: dict[str, tuple[str, float | None]] = {
    "get": ("random get, µs per call", 1.3),
    "multiget": ("100-key multiget (keys=), µs per call", 1.3),
    "range_docs": ("100-row range get with include_docs, µs per row", None),
    "insert": ("insert in 1000-doc batches (fsync on), µs per doc", None),
}
#: The ops whose growth the peers are measured for too (those issue 16 bounds).
PEER_OPS = ("get", "multiget")
_MULTIGET_KEYS = 100
_RANGE_ROWS = 100


def scaling_ticks(cfg: Config) -> int:
    """Samples this group takes, for the progress bar (reopen included)."""
    samples = len(OPS) * len(cfg.scaling) + len(PEER_OPS) * 2 * len(_peer_kinds())
    return samples * cfg.repeats + 2 * cfg.repeats


def run_scaling(run: Run) -> None:
    cfg = run.config
    dbs = _load_all(run)
    peers: dict[tuple[str, int], DocStore] = {}
    try:
        if len(dbs) < 2:
            run.skip("scaling.*", "fewer than two sizes were loaded")
            return
        small, large = min(dbs), max(dbs)
        peers = _load_peers(run, (small, large))
        run.progress.stage(f"scaling: reading every document of {len(dbs)} sizes once")
        for n, db in dbs.items():
            # Every node a read needs is then cached (as bench.scaleprobe does): the
            # growth measured is the steady state's, not how far a warm-up got. A
            # warm-up of cfg.seconds read about 40% of the leaves at 1M documents.
            for i in range(n):
                db.get(doc_id(i))
        medians: dict[int, dict[str, float]] = {n: {"docs": n} for n in dbs}
        for op, (title, limit) in OPS.items():
            run.progress.stage(f"scaling: {op} at {len(dbs)} sizes, interleaved")
            sides = [Side(_label(n), _measure(op, db, n, cfg)) for n, db in dbs.items()]
            if op in PEER_OPS:
                sides += [
                    Side(_label(n, name), _measure_peer(op, store, n, cfg))
                    for (name, n), store in peers.items()
                ]
            result = run.measure(sides)
            for n in dbs:
                medians[n][f"{op}_us"] = statistics.median(result.samples[_label(n)])
            meaning = (
                f"cost at {large:,} ÷ cost at {small:,} docs: 1 is flat, 2 is twice "
                "as slow (sizes measured round-robin in one run)"
            )
            params = {"op": op, "small": small, "large": large, "sizes": list(dbs)}
            run.record(
                f"scaling.{op}",
                result,
                _label(large),
                _label(small),
                group="scaling",
                title=title,
                unit="µs/op",
                higher_is_better=False,
                meaning=meaning,
                params={**params, "store": "settee"},
                target=None
                if limit is None
                else Target("max_ratio", limit, f"issue 16: {op} grows at most ×{limit}"),
            )
            for name in sorted({name for name, _ in peers}) if op in PEER_OPS else ():
                run.record(
                    f"scaling.{op}.{name}",
                    result,
                    _label(large, name),
                    _label(small, name),
                    group="scaling",
                    title=f"{title}, {name} (the same sizes, for comparison)",
                    unit="µs/op",
                    higher_is_better=False,
                    meaning=meaning,
                    params={**params, "store": name},
                )
        run.curves["scaling"] = [medians[n] for n in sorted(dbs)]
    finally:
        for db in dbs.values():
            db.close()
        for store in peers.values():
            store.close()
        for n in dbs:
            shutil.rmtree(os.path.join(run.workdir, f"scaling-{n}"), ignore_errors=True)
        for name, n in peers:
            shutil.rmtree(os.path.join(run.workdir, f"scaling-{name}-{n}"), ignore_errors=True)


def _peer_kinds() -> list[type[SqliteStore] | type[LmdbStore]]:
    return [SqliteStore] if lmdb_available() else [SqliteStore, LmdbStore]


def _load_peers(run: Run, sizes: tuple[int, int]) -> dict[tuple[str, int], DocStore]:
    """Each peer store filled with the same documents at each of ``sizes``."""
    peers: dict[tuple[str, int], DocStore] = {}
    for kind in _peer_kinds():
        for n in sizes:
            run.progress.stage(f"scaling: loading {n:,} documents into {kind.name}")
            base = run.path(f"scaling-{kind.name}-{n}")
            os.makedirs(base)
            store = kind(os.path.join(base, "db"))
            for lo in range(0, n, 10_000):
                store.insert([make_doc(doc_id(i), i) for i in range(lo, min(n, lo + 10_000))])
            for i in range(n):  # warmed as settee's databases are
                store.get(doc_id(i))
            peers[(kind.name, n)] = store
    return peers


def _measure_peer(op: str, store: DocStore, n: int, cfg: Config) -> Callable[[], Outcome]:
    """``_measure`` for a peer: the same random ids, through the seed workloads' calls."""
    rng = random.Random(n)

    def step() -> int:
        if op == "get":
            return store.get(doc_id(rng.randrange(n)))
        store.multiget([doc_id(rng.randrange(n)) for _ in range(_MULTIGET_KEYS)], False)
        return 1

    return _per_unit(step, cfg)


def _label(n: int, store: str = "settee") -> str:
    return f"{n:,} docs" if store == "settee" else f"{store} {n:,} docs"


def _load_all(run: Run) -> dict[int, Any]:
    """Open and fill one database per size, smallest first, within the load budget."""
    cfg = run.config
    budget = LOAD_BUDGET_S.get(cfg.mode, 60.0)
    started = time.perf_counter()
    loaded = 0
    dbs: dict[int, Any] = {}
    for n in sorted(set(cfg.scaling) | {cfg.reopen_docs}):
        spent = time.perf_counter() - started
        if loaded and n * spent / loaded > budget - spent:
            run.notes.append(
                f"scaling skipped {n:,} documents and above: loading at "
                f"{loaded / spent:,.0f} docs/s would pass the {budget:.0f} s load budget of "
                f"--{cfg.mode}"
            )
            break
        run.progress.stage(f"scaling: loading {n:,} documents")
        path = run.path(f"scaling-{n}")
        db = settee.open(path, fsync=True)
        load_settee(db, 0, n)
        loaded += n
        if n == cfg.reopen_docs:
            db.close()
            db = reopen_pair(run, path, n)
        if n in cfg.scaling:
            dbs[n] = db
        else:
            db.close()
            shutil.rmtree(path, ignore_errors=True)
    return dbs


def _get(db: Any, n: int, rng: random.Random) -> int:
    db.get(doc_id(rng.randrange(n)))
    return 1


def _measure(op: str, db: Any, n: int, cfg: Config) -> Callable[[], Outcome]:
    """One sample of ``op``: µs per unit its step returns, over ``cfg.seconds``."""
    return _per_unit(_step(op, db, n, cfg), cfg)


def _per_unit(step: Callable[[], int], cfg: Config) -> Callable[[], Outcome]:
    """A sample of ``step``: µs per unit it returns, over ``cfg.seconds``."""
    return lambda: Outcome(1e6 / run_for(step, cfg.seconds))


def _step(op: str, db: Any, n: int, cfg: Config) -> Callable[[], int]:
    rng = random.Random(n)
    if op == "get":
        return lambda: _get(db, n, rng)
    if op == "multiget":

        def multiget() -> int:
            keys = [doc_id(rng.randrange(n)) for _ in range(_MULTIGET_KEYS)]
            db.all_docs(keys=keys)
            return 1

        return multiget
    if op == "range_docs":

        def range_docs() -> int:
            start = doc_id(rng.randrange(max(1, n - _RANGE_ROWS)))
            return len(db.all_docs(startkey=start, limit=_RANGE_ROWS, include_docs=True)["rows"])

        return range_docs
    ids = itertools.count(n)  # new ids after the preloaded ones, never reused

    def insert() -> int:
        batch = [make_doc(doc_id(next(ids)), 0) for _ in range(cfg.write_batch)]
        db.bulk_docs(batch)
        return len(batch)

    return insert

"""The seed workloads: a CouchDB user's Python client, and the peers beside settee.

Workloads (each client thread repeats one call; the unit is documents/s):

* ``get`` — one random document by id, body decoded (the unit every other
  store's point read is measured in too);
* ``insert`` — ``bulk_docs`` of 100 new documents, fsync on (seed: ~6,000/s
  single-threaded against CouchDB, 90,000/s with 40 clients on 40 cores);
* ``multiget`` / ``multiget_docs`` — ``all_docs(keys=<100 random ids>)``
  without / with ``include_docs`` (seed: ~1,500/s, 14,000/s with 40 clients);
* ``range`` / ``range_docs`` — ``all_docs(startkey=<random id>, limit=100)``
  without / with ``include_docs`` (seed: 30,000/s with 40 clients).

The peers (sqlite3, LMDB, the reference store) load the same documents and
run the same calls, round-robin with settee in one group per workload and
client count; each settee ÷ peer ratio is one pair. The shard sweep runs the
same workloads on settee with 1, 2, 4, 8 shards (ratio: N shards ÷ 1 shard).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from collections.abc import Callable
from typing import Any

from bench.harness import Side, run_clients
from bench.stores import (
    DocStore,
    LmdbStore,
    SetteeStore,
    SqliteStore,
    doc_id,
    lmdb_available,
    load_settee,
    make_doc,
)
from bench.suite import Config, Run

__all__ = ["WORKLOADS", "peer_ticks", "run_peers", "run_shard_sweep", "sweep_ticks"]

#: workload -> (title, seed number quoted in the report)
WORKLOADS: dict[str, tuple[str, str]] = {
    "get": ("random single-doc get", "no seed number: the point read every store has"),
    "multiget": ("100-key multiget (keys=)", "seed: ~3,000/s (2x include_docs)"),
    "multiget_docs": ("100-key multiget include_docs", "seed: ~1,500/s; 14,000/s @40 clients"),
    "range": ("100-key range get (startkey+limit)", "seed: ~3,000/s (2x include_docs)"),
    "range_docs": ("100-key range get include_docs", "seed: ~1,500/s; 30,000/s @40 clients"),
    "insert": ("100-doc batch inserts (fsync on)", "seed: ~6,000/s; 90,000/s @40 clients"),
}

_PEERS = ("sqlite3", "lmdb", "reference")


def _ordered(cfg: Config) -> list[str]:
    # Inserts grow each store differently, so every read workload runs before them.
    return sorted(cfg.seed_workloads, key=lambda w: w == "insert")


def peer_ticks(cfg: Config) -> int:
    """Samples the peer comparison takes, for the progress bar."""
    stores = len(_PEERS) + 1
    return len(cfg.seed_workloads) * len(cfg.seed_clients) * stores * cfg.repeats


def sweep_ticks(cfg: Config) -> int:
    """Samples the shard sweep takes, for the progress bar."""
    if len(cfg.seed_shards) < 2:
        return 0
    return len(cfg.seed_workloads) * len(cfg.seed_shards) * cfg.repeats


class _Workload:
    """Builds the per-client step of a workload for any store."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._ids = itertools.count()

    def step(self, name: str, store: DocStore, clients: int) -> Callable[[int], int]:
        n, batch = self.cfg.docs, self.cfg.seed_batch
        rngs = [random.Random(1000 + i) for i in range(clients)]
        if name == "insert":
            prefix = f"i-{store.name}-"

            def insert(i: int) -> int:
                store.insert([make_doc(f"{prefix}{next(self._ids):010d}", j) for j in range(batch)])
                return batch

            return insert
        if name == "get":

            def get(i: int) -> int:
                return store.get(doc_id(rngs[i].randrange(n)))

            return get
        include = name.endswith("_docs")
        if name.startswith("multiget"):

            def multiget(i: int) -> int:
                keys = [doc_id(rngs[i].randrange(n)) for _ in range(batch)]
                return store.multiget(keys, include)

            return multiget

        def rangeget(i: int) -> int:
            return store.rangeget(doc_id(rngs[i].randrange(max(1, n - batch))), batch, include)

        return rangeget

    def side(self, name: str, store: DocStore, clients: int, label: str | None = None) -> Side:
        step = self.step(name, store, clients)
        seconds = self.cfg.seconds
        return Side(label or store.name, lambda: run_clients(clients, step, seconds))


def _open_peers(run: Run) -> dict[str, DocStore]:
    cfg = run.config
    stores: dict[str, DocStore] = {}
    path = run.path("peer-settee")
    stores["settee"] = SetteeStore.engine(path, shards=cfg.peer_shards, fsync=True)
    path = run.path("peer-sqlite3")
    os.makedirs(path)
    stores["sqlite3"] = SqliteStore(os.path.join(path, "docs.sqlite3"))
    reason = lmdb_available()
    if reason is None:
        stores["lmdb"] = LmdbStore(run.path("peer-lmdb"))
    else:
        run.skip("peers.*.lmdb", reason)
    stores["reference"] = SetteeStore.reference(run.path("peer-reference"))
    for store in stores.values():
        _load(store, cfg.docs)
    return stores


def _load(store: DocStore, docs: int) -> None:
    if isinstance(store, SetteeStore):
        load_settee(store.db, 0, docs)
        return
    for lo in range(0, docs, 5000):
        store.insert([make_doc(doc_id(n), n) for n in range(lo, min(docs, lo + 5000))])


def run_peers(run: Run) -> None:
    cfg = run.config
    run.progress.stage("seed workloads: settee vs sqlite3, lmdb, reference (loading)")
    stores = _open_peers(run)
    work = _Workload(cfg)
    try:
        for name in _ordered(cfg):
            title, seed = WORKLOADS[name]
            for clients in cfg.seed_clients:
                run.progress.stage(f"seed workloads: {name}, {clients} clients")
                sides = [work.side(name, store, clients) for store in stores.values()]
                result = run.measure(sides)
                for peer in _PEERS:
                    if peer not in stores:
                        continue
                    run.record(
                        f"peers.{name}.c{clients}.{peer}",
                        result,
                        "settee",
                        peer,
                        group=f"peers.{peer}",
                        title=f"{title}, {clients} clients",
                        unit="docs/s",
                        meaning=f"settee ÷ {peer} docs/s: above 1 means settee is faster",
                        params={
                            "workload": name,
                            "clients": clients,
                            "settee_shards": cfg.peer_shards,
                            "docs": cfg.docs,
                            "seed": seed,
                        },
                    )
    finally:
        for store in stores.values():
            store.close()
        for name in ("settee", "sqlite3", "lmdb", "reference"):
            shutil.rmtree(os.path.join(run.workdir, f"peer-{name}"), ignore_errors=True)


def run_shard_sweep(run: Run) -> None:
    cfg = run.config
    if len(cfg.seed_shards) < 2:
        return
    run.progress.stage("seed workloads: shard sweep (loading)")
    stores: dict[int, Any] = {}
    try:
        for shards in cfg.seed_shards:
            store = SetteeStore.engine(run.path(f"sweep-{shards}"), shards=shards, fsync=True)
            store.name = f"shards={shards}"
            _load(store, cfg.docs)
            stores[shards] = store
        work = _Workload(cfg)
        base = cfg.seed_shards[0]
        clients = cfg.sweep_clients
        for name in _ordered(cfg):
            run.progress.stage(f"seed workloads: shard sweep, {name}")
            sides = [work.side(name, s, clients) for s in stores.values()]
            result = run.measure(sides)
            for shards in cfg.seed_shards[1:]:
                run.record(
                    f"shards.{name}.s{shards}",
                    result,
                    f"shards={shards}",
                    f"shards={base}",
                    group="shards",
                    title=f"{WORKLOADS[name][0]}, {clients} clients",
                    unit="docs/s",
                    meaning=f"shards={shards} ÷ shards={base} docs/s: above 1 means "
                    "more shards are faster",
                    params={"workload": name, "clients": clients, "shards": shards},
                )
    finally:
        for shards, store in stores.items():
            store.close()
            shutil.rmtree(os.path.join(run.workdir, f"sweep-{shards}"), ignore_errors=True)

"""Quick per-call costs of the seed workloads, settee vs sqlite3, for profiling work.

``python -m bench.micro [N] [workload ...]`` loads N documents (default 20,000)
into settee (4 shards, fsync on) and into sqlite3 (WAL, synchronous=FULL),
reads every document once through each store (the caches warm, as ``settee
bench`` warms them), then times each workload on one thread in five rounds of
0.4 s loops (1 s for inserts), the two stores alternating and each round starting with the other
one, and prints each store's median µs per call and sqlite3 ÷ settee time
(settee's share of sqlite3's speed). Medians, as ``settee bench`` measures its
peer ratios, not best loops: settee's loops vary more than sqlite3's from one to
the next, so a best-of-three ratio read several points above the full run's
median one. Seconds, not minutes: for trying a change, not for the README (which
takes its numbers from ``settee bench``). Workloads: get, multiget, multiget_docs,
range, range_docs, insert. ``--no-fsync`` opens both without syncing (settee
``fsync=False``, sqlite3 ``synchronous=OFF``): the insert ratio is then CPU
against CPU, and the difference from a synced run is what the syncs cost.
``--body-cache=BYTES`` opens settee with that ``body_cache_bytes`` (0: none; a
budget far below the bodies' size shows what misses cost when reads are spread
over more bodies than fit). ``--doc-bytes=N`` makes each document about N bytes
of msgpack (default about 220, the seed workloads'; issue 16 first measured
documents of about 1 KB, ``--doc-bytes=1000``).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from bench.stores import (
    DocStore,
    SetteeStore,
    SqliteStore,
    doc_id,
    filler,
    load_settee,
    make_doc,
)

__all__ = ["main"]

_WORKLOADS = ("get", "multiget", "multiget_docs", "range", "range_docs", "insert")
_ROUNDS = 5


def _per_call_us(step: Callable[[], object], seconds: float) -> float:
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


def _step(
    name: str, store: DocStore, docs: int, rng: random.Random, next_id: list[int], text: str
) -> Callable[[], object]:
    if name == "get":
        return lambda: store.get(doc_id(rng.randrange(docs)))
    if name.startswith("multiget"):
        docs_too = name.endswith("_docs")
        return lambda: store.multiget([doc_id(rng.randrange(docs)) for _ in range(100)], docs_too)
    if name.startswith("range"):
        docs_too = name.endswith("_docs")
        return lambda: store.rangeget(doc_id(rng.randrange(docs - 100)), 100, docs_too)

    def insert() -> None:
        first = next_id[0]
        next_id[0] += 100
        store.insert([make_doc(doc_id(n), n, text) for n in range(first, first + 100)])

    return insert


def main(argv: list[str]) -> int:
    sync = "--no-fsync" not in argv
    cache = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--body-cache=")]
    sizes = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--doc-bytes=")]
    text = filler(sizes[-1] if sizes else 0)
    argv = [
        a for a in argv if a != "--no-fsync" and not a.startswith(("--body-cache=", "--doc-bytes="))
    ]
    docs = int(argv[0]) if argv and argv[0].isdigit() else 20_000
    wanted = [w for w in argv if not w.isdigit()] or list(_WORKLOADS)
    work = tempfile.mkdtemp(prefix="settee-micro-")
    try:
        ours = SetteeStore.engine(
            os.path.join(work, "settee"),
            shards=4,
            fsync=sync,
            body_cache_bytes=cache[-1] if cache else None,
        )
        theirs = SqliteStore(os.path.join(work, "docs.sqlite3"), fsync=sync)
        load_settee(ours.db, 0, docs, text=text)
        for lo in range(0, docs, 5000):
            theirs.insert([make_doc(doc_id(n), n, text) for n in range(lo, min(docs, lo + 5000))])
        # Every document read once by each store, as ``settee bench`` warms its
        # databases: without it the first rounds at 100,000 documents timed reads of
        # nodes and bodies no read had cached yet (range_docs x0.40 cold, x0.5 warm).
        for store in (ours, theirs):
            for n in range(docs):
                store.get(doc_id(n))
        # Each store's next new id, kept across loops: a loop that inserted ids an
        # earlier one stored timed settee's conflict answers (twice as fast), not inserts.
        next_ids = {ours.name: [docs], theirs.name: [docs]}
        for name in wanted:
            seconds = 1.0 if name == "insert" else 0.4
            loops: dict[str, list[float]] = {ours.name: [], theirs.name: []}
            for round_ in range(_ROUNDS):
                order = (ours, theirs) if round_ % 2 == 0 else (theirs, ours)
                for store in order:
                    step = _step(
                        name, store, docs, random.Random(round_), next_ids[store.name], text
                    )
                    loops[store.name].append(_per_call_us(step, seconds))
            a, b = statistics.median(loops[ours.name]), statistics.median(loops[theirs.name])
            print(
                f"{name:14s} settee {a:9.1f} µs  sqlite3 {b:9.1f} µs  settee/sqlite3 {b / a:5.2f}"
            )
        ours.close()
        theirs.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Where a point read's cost grows with the database: ``python -m bench.scaleprobe [N ...]``.

For each N (default 10,000, 100,000 and 1,000,000) it loads N documents of
``bench.stores.make_doc`` (4 shards, fsync off, as ``settee bench``'s scaling
scenario minus the fsyncs), reads every id once so each node a read needs sits
in the node cache, then times 100,000 random reads four ways, each best of
three:

* ``get``: ``Database.get``, the whole call;
* ``descent``: ``by_id`` lookups alone (the B+tree part of a get);
* ``body``: ``ShardFile.read_body`` of each winner's body alone (a body-cache
  hit, or a ``pread`` with its checks; the decode either way);
* ``other``: ``get`` minus the two (arguments, routing, rendering).

It also counts the nodes the timed descents read from the file (node cache
misses per descent), the share of the timed bodies in the body cache, and
prints the trees' encoded size against ``cache_bytes`` (a get reads only
by_id): with no node read from the file, growth in ``descent`` is the cost of
walking more decoded nodes in memory (CPU cache and TLB misses), not of the node
cache. ``--body-cache=BYTES`` opens the database with that ``body_cache_bytes``
(a budget that holds every body shows what the misses cost). Issue 16 bounds
the growth of ``get`` from 10k to 1M documents at ×1.3; this shows which part
grows.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import settee
from bench.stores import doc_id, load_settee
from bench.treesize import tree_bytes
from settee.docinfo import WINNER_BODY
from settee.spec.routing import shard_of

__all__ = ["main"]

_READS = 100_000


def _best_us(run: Callable[[], object], count: int) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best / count * 1e6


def probe(docs: int, body_cache_bytes: int | None = None) -> dict[str, float]:
    """µs per read of ``get``, of its ``by_id`` descent and of its body read; the
    share of those bodies cached; the trees' size in MB."""
    work = tempfile.mkdtemp(prefix="settee-scaleprobe-")
    try:
        path = os.path.join(work, "db")
        with settee.open(path, shards=4, fsync=False, body_cache_bytes=body_cache_bytes) as db:
            load_settee(db, 0, docs, batch=10_000)
            for n in range(docs):  # every node a read needs is now cached
                db.get(doc_id(n))
            rng = random.Random(1)
            ids = [doc_id(rng.randrange(docs)) for _ in range(_READS)]
            snaps = [shard.current() for shard in db.shards]
            trees = [snap.by_id for snap in snaps]
            pairs = [(trees[shard_of(i, len(trees))], i) for i in ids]
            bodies = [_winner_body(snaps[shard_of(i, len(snaps))], i) for i in ids]
            get = _best_us(lambda: [db.get(i) for i in ids], len(ids))
            file_reads = _count_node_reads(trees)
            descent = _best_us(lambda: [tree.get(i) for tree, i in pairs], len(ids))
            node_reads = file_reads[0] / (3 * len(ids))  # before tree_bytes reads them all
            cached = sum(_in_body_cache(file, pos) for file, pos, _ in bodies) / len(bodies)
            body = _best_us(lambda: [f.read_body(pos, size) for f, pos, size in bodies], len(ids))
            by_id, by_seq = tree_bytes(db)
            cache = db.config["cache_bytes"]
        return {
            "get": get,
            "descent": descent,
            "body": body,
            "other": get - descent - body,
            "cached": cached,
            "node_reads": node_reads,
            "by_id_mb": by_id / 1e6,
            "trees_mb": (by_id + by_seq) / 1e6,
            "cache_mb": cache / 1e6,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _winner_body(snap: Any, doc: str) -> tuple[Any, int, int]:
    """``(file, position, size)`` of ``doc``'s winning body, as a get reads it."""
    pos, size = snap.by_id.get(doc)[WINNER_BODY][:2]
    return snap.file, pos, size


def _in_body_cache(file: Any, pos: int) -> bool:
    cache = file.body_cache
    return cache is not None and pos in cache._entries


def _count_node_reads(trees: list[Any]) -> list[int]:
    """A counter of the nodes ``trees`` read from their files from now on (node cache
    misses): each store's ``read_node`` is wrapped on the instance."""
    count = [0]
    for store in {id(tree.store): tree.store for tree in trees}.values():
        honest = store.read_node

        def counted(pos: int, honest: Callable[[int], Any] = honest) -> Any:
            count[0] += 1
            return honest(pos)

        store.read_node = counted
    return count


def main(argv: list[str]) -> int:
    budgets = [int(a.split("=", 1)[1]) for a in argv if a.startswith("--body-cache=")]
    sizes = [int(a) for a in argv if not a.startswith("--")] or [10_000, 100_000, 1_000_000]
    first: dict[str, float] | None = None
    for docs in sizes:
        got = probe(docs, budgets[-1] if budgets else None)
        first = first or got
        growth = " ".join(
            f"{k} x{got[k] / first[k]:.2f}"
            for k in ("get", "descent", "body", "other")
            if first[k] > 0
        )
        print(
            f"{docs:>9,} docs: get {got['get']:6.2f} µs = descent {got['descent']:5.2f}"
            f" + body {got['body']:5.2f} + other {got['other']:5.2f}; node reads from the"
            f" file per descent {got['node_reads']:.3f}; bodies cached {got['cached']:.0%};"
            f" trees {got['trees_mb']:.0f} MB (by_id {got['by_id_mb']:.0f} MB) of a"
            f" {got['cache_mb']:.0f} MB cache; vs first size: {growth}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

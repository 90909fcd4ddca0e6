"""How many bytes the B+trees of N benchmark documents take: what ``cache_bytes`` must hold.

``python -m bench.treesize 100000`` loads N documents of ``bench.stores.make_doc``
(default shards, fsync off) into a temporary database, reads every node of both
trees (so all of them sit in the node cache) and prints their encoded size, which
is what the node cache counts against ``cache_bytes``, and how long one full
garbage collection takes with all of them cached (format 3 keeps decoded nodes
out of the collector's reach, so this stays in milliseconds).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
import time

import settee
from bench.stores import load_settee

__all__ = ["tree_bytes"]


def tree_bytes(db: settee.Database) -> tuple[int, int]:
    """``(by_id bytes, by_seq bytes)``: encoded size of every node of every shard's trees."""
    sizes = [0, 0]
    for shard in db.shards:
        snap = shard.current()
        for index, tree in enumerate((snap.by_id, snap.by_seq)):
            root = tree.root
            stack = [] if root is None else [root[0]]
            while stack:
                pos = stack.pop()
                is_kp, _keys, entries = tree.node(pos)
                sizes[index] += tree.store.read_node(pos)[1]
                if is_kp:
                    stack.extend(e[1] for e in entries)
    return sizes[0], sizes[1]


def main(argv: list[str]) -> int:
    docs = int(argv[0]) if argv else 100_000
    work = tempfile.mkdtemp(prefix="settee-treesize-")
    try:
        with settee.open(os.path.join(work, "db"), fsync=False) as db:
            load_settee(db, 0, docs, batch=10_000)
            by_id, by_seq = tree_bytes(db)
            started = time.perf_counter()
            gc.collect()
            pause = time.perf_counter() - started
        print(
            f"{docs:,} documents: by_id {by_id / 1e6:.1f} MB, by_seq {by_seq / 1e6:.1f} MB encoded"
        )
        print(f"one full garbage collection with every node cached: {pause * 1e3:.1f} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Scale: a database far larger than what the engine keeps in memory.

Issue "The engine", done-when: 100,000 1-KB documents written in batches of 100
with fsync on 4 shards, then reopened. Opening must not read or hold every key:
we count the pread calls and bytes opening performs through the io layer, and
trace the memory Python allocates while opening and answering lookups. The
wall-clock open time is reported by ``settee bench`` rather than asserted here.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from typing import Any

import pytest

import settee
from settee.io import CountingFileSystem, OsFileSystem

DOCS = 100_000
BATCH = 100


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: Any) -> str:
    path = str(tmp_path_factory.mktemp("scale") / "db")
    filler = "x" * 1000
    with settee.open(path, shards=4, fsync=True) as db:
        for start in range(0, DOCS, BATCH):
            db.bulk_docs(
                [{"_id": f"doc{i:07d}", "pad": filler} for i in range(start, start + BATCH)]
            )
    return path


def test_reopen_reads_only_headers_and_roots_and_holds_no_key_set(big_db: str) -> None:
    fs = CountingFileSystem(OsFileSystem())
    tracemalloc.start()
    started = time.perf_counter()
    db = settee.Database(big_db, fs=fs)
    opened = time.perf_counter() - started
    open_preads = fs.counts["pread"]
    rng = random.Random(7)
    for i in rng.sample(range(DOCS), 200):
        assert db.get(f"doc{i:07d}")["pad"][0] == "x"
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    info = db.info()
    db.close()
    print(f"open {opened * 1000:.1f} ms, {open_preads} preads, peak {peak / 1e6:.1f} MB")
    assert info["doc_count"] == DOCS
    # Opening scans back to each shard's newest header and reads its two roots (each must
    # hold its own tree's keys, Snapshot.of_header): a handful of preads, not one per node.
    assert open_preads <= 4 * (4 + 2)
    # 100 MB of documents and ~3 MB of ids on disk; opening plus 200 lookups stays far below.
    assert peak < 8_000_000, peak


def test_point_lookup_reads_at_most_depth_plus_one_nodes(big_db: str) -> None:
    fs = CountingFileSystem(OsFileSystem())
    with settee.Database(big_db, fs=fs) as db:
        shard = db.shards[settee.spec.routing.shard_of("doc0054321", 4)]
        depth = shard.snapshot.by_id.depth()
        fs.reset()
        doc = db.get("doc0054321")
        assert doc["_id"] == "doc0054321"
        # depth nodes of by_id, then the body term
        assert fs.counts["pread"] <= depth + 1, (fs.counts["pread"], depth)

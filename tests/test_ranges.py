"""``_all_docs`` ranges over shards that hold very unequal shares of a range.

The engine merges a range by reading about each shard's share of ``skip +
limit`` rows and reading more when that proves too few (``views._first_live``).
The equivalence machine's eight ids never make one shard hold most of a
range, so that second read is checked here, on a store whose shards hold 200,
120, 6 and 0 of the ids, with tombstones scattered and a run of them many
leaves long, and leaves of a few entries: every range answers exactly as the
reference's (rows, ``offset``, ``total_rows``), documents included.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import settee
import settee.reference
from settee.spec.routing import shard_of

SHARDS = 4
# How many ids each shard holds: one shard most of every range, one none.
SHARE = {0: 200, 1: 120, 2: 6, 3: 0}


def _ids() -> list[str]:
    wanted = dict(SHARE)
    ids = []
    n = 0
    while any(wanted.values()):
        doc_id = f"k{n:05d}"
        index = shard_of(doc_id, SHARDS)
        if wanted[index]:
            wanted[index] -= 1
            ids.append(doc_id)
        n += 1
    return ids


IDS = _ids()
# Every 7th id deleted, and a run of 80 ids (more than a leaf of this size) all deleted.
DELETED = {doc_id for n, doc_id in enumerate(IDS) if n % 7 == 3 or 100 <= n < 180}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: Any) -> Iterator[tuple[Any, Any]]:
    root = tmp_path_factory.mktemp("ranges")
    engine = settee.open(str(root / "engine"), shards=SHARDS, fsync=False)
    reference = settee.reference.open(str(root / "reference"), fsync=False)
    docs = [_replicated(n, doc_id) for n, doc_id in enumerate(IDS)]
    for db in (engine, reference):
        db.bulk_docs(docs, new_edits=False)
        db.bulk_docs(
            [
                {"_id": d["_id"], "_rev": d["_rev"], "_deleted": True}
                for d in docs
                if d["_id"] in DELETED
            ]
        )
    yield engine, reference
    engine.close()
    reference.close()


def _replicated(n: int, doc_id: str) -> dict[str, Any]:
    """A document with a history of 1 to 30 revisions, as a replicator stores it.
    Long histories make by_id entries long and leaves short (a few entries each),
    so a range crosses many leaves of every shard, as in a large database."""
    depth = 1 + n * 7 % 30
    hashes = [f"{n:08x}{k:08x}".ljust(32, "0") for k in range(depth)]
    return {
        "_id": doc_id,
        "_rev": f"{depth}-{hashes[0]}",
        "_revisions": {"start": depth, "ids": hashes},
        "n": n,
    }


BOUNDS = st.none() | st.sampled_from(IDS) | st.sampled_from(["", "k", "k00150x", "l"])


@given(
    startkey=BOUNDS,
    endkey=BOUNDS,
    limit=st.none() | st.integers(0, 5) | st.integers(0, 300),
    skip=st.integers(0, 5) | st.integers(0, 300),
    descending=st.booleans(),
    inclusive_end=st.booleans(),
    include_docs=st.booleans(),
)
def test_skewed_ranges_answer_as_the_reference(stores: tuple[Any, Any], **query: Any) -> None:
    engine, reference = stores
    assert engine.all_docs(**query) == reference.all_docs(**query)


def test_the_store_is_as_skewed_as_intended(stores: tuple[Any, Any]) -> None:
    engine, _ = stores
    live = [len([i for i in IDS if shard_of(i, SHARDS) == s and i not in DELETED]) for s in SHARE]
    assert live[0] > 100 and live[1] > 60 and live[3] == 0
    assert engine.all_docs(limit=0)["total_rows"] == len(IDS) - len(DELETED)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("startkey", [None, IDS[len(IDS) // 3]])
def test_every_limit_answers_as_the_reference(
    stores: tuple[Any, Any], startkey: str | None, descending: bool
) -> None:
    """Whether a first read was enough turns on how many rows are asked for, so
    every count up to well past a shard's first share is tried, not a sample."""
    engine, reference = stores
    for skip in (0, 3, 17):
        for limit in range(0, 130):
            query = {"startkey": startkey, "limit": limit, "skip": skip, "descending": descending}
            assert engine.all_docs(**query) == reference.all_docs(**query), query

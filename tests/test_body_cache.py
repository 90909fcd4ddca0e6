"""The body cache (``body_cache_bytes``): reads it serves skip the file, and nothing
else about a read changes — every answer is a new object, exact, within budget,
and a closed database still refuses."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import settee
from settee.cache import BODY_ENTRY_OVERHEAD, BodyCache, ClockCache, body_cache
from settee.file import ShardFile
from settee.io import FileSystemWrapper, MemoryFileSystem
from settee.spec.errors import SetteeError
from settee.spec.format import decode_payload, encode_payload


class CountingFileSystem(FileSystemWrapper):
    """Counts the preads of every file it opens."""

    def __init__(self) -> None:
        super().__init__(MemoryFileSystem())
        self.preads = 0

    def open(self, path: str, *, create: bool) -> Any:
        handle = super().open(path, create=create)
        inner = handle.pread

        def pread(offset: int, size: int) -> bytes:
            self.preads += 1
            return inner(offset, size)

        handle.pread = pread  # type: ignore[method-assign]  # a per-handle spy
        return handle


def _doc(n: int) -> dict[str, Any]:
    return {"_id": f"doc{n:04d}", "n": n, "tags": ["a", {"deep": [n]}], "text": "x" * (n % 300)}


def _open(tmp_path: Any, fs: Any = None, **options: Any) -> Any:
    return settee.Database(str(tmp_path / "db"), fs=fs, shards=1, fsync=False, **options)


@pytest.mark.parametrize("budget", [None, 0])
def test_a_cached_body_is_read_without_the_file(tmp_path: Any, budget: int | None) -> None:
    fs = CountingFileSystem()
    with _open(tmp_path, fs, body_cache_bytes=budget) as db:
        db.put(_doc(1))
        db.get("doc0001")  # admits the body (and the nodes of its path)
        before = fs.preads
        assert db.get("doc0001")["n"] == 1
        assert db.all_docs(keys=["doc0001"], include_docs=True)["rows"][0]["doc"]["n"] == 1
        # The default cache serves both reads; with none, each reads the body again.
        assert fs.preads - before == (0 if budget is None else 2)


def test_every_read_of_a_cached_body_is_a_new_object(tmp_path: Any) -> None:
    with _open(tmp_path) as db:
        db.put(_doc(7))
        first = db.get("doc0007")
        first["tags"][1]["deep"].append("changed")
        first["n"] = -1
        row = db.all_docs(include_docs=True)["rows"][0]
        row["doc"]["tags"].clear()
        again = db.get("doc0007")
        expected = {**_doc(7), "_rev": again["_rev"]}
        assert again == expected
        assert db.all_docs(include_docs=True)["rows"][0]["doc"] == expected


def test_a_small_cache_stays_within_budget_and_every_read_is_exact(tmp_path: Any) -> None:
    budget = 6_000  # a dozen bodies: nearly every read admits one and evicts another
    with _open(tmp_path, body_cache_bytes=budget) as db:
        docs = [_doc(n) for n in range(300)]
        revs = {r["id"]: r["rev"] for r in db.bulk_docs(docs)}
        cache = db.shards[0].snapshot.file.body_cache
        assert isinstance(cache, BodyCache) and cache.capacity_bytes == budget
        rng = random.Random(5)
        for _ in range(3):
            for n in rng.sample(range(300), 300):
                assert db.get(f"doc{n:04d}") == {**_doc(n), "_rev": revs[f"doc{n:04d}"]}
            start = rng.randrange(250)
            rows = db.all_docs(startkey=f"doc{start:04d}", limit=40, include_docs=True)["rows"]
            assert [r["doc"]["n"] for r in rows] == list(range(start, min(300, start + 40)))
            assert 0 < cache.bytes <= budget
            assert len(cache) >= 2
        # What each entry is charged: its payload's length and the entry's overhead.
        held = [cache._entries[pos] for pos in cache._entries]
        assert cache.bytes == sum(len(payload) + BODY_ENTRY_OVERHEAD for payload, _ in held)


def test_a_closed_file_refuses_reads_its_cache_could_answer(tmp_path: Any) -> None:
    fs = MemoryFileSystem()
    with _open(tmp_path, fs) as db:
        db.put(_doc(3))
        info = db.shards[0].snapshot.doc_info("doc0003")
        file = db.shards[0].snapshot.file
        pointer = (info.winner_body[0], info.winner_body[1])
        assert file.read_sized([pointer])[0]["n"] == 3
        assert file.body_cache.get(pointer[0]) is not None
        file.refuse_reads()
        with pytest.raises(SetteeError, match="closed"):
            file.read_sized([pointer])
        with pytest.raises(SetteeError, match="closed"):
            file.read_body(*pointer)  # a plain get's one-body path
        with pytest.raises(SetteeError, match="closed"):
            file.cached_bodies([pointer[0]])  # a range's path
    with pytest.raises(SetteeError):
        db.get("doc0003")


@pytest.mark.parametrize(
    "read",
    [
        lambda db: db.get("doc0004"),
        lambda db: db.all_docs(keys=["doc0004", "doc0005"], include_docs=True),
        lambda db: db.all_docs(include_docs=True),
    ],
    ids=["get", "multiget", "range"],
)
def test_a_hit_marks_its_body_referenced(tmp_path: Any, read: Callable[[Any], Any]) -> None:
    """Every read served from the cache marks what it used (CLOCK's reference bit),
    so eviction gives it another lap: a hit that did not would leave a body read
    over and over as the first to go."""
    with _open(tmp_path) as db:
        db.bulk_docs([_doc(4), _doc(5)])
        db.all_docs(include_docs=True)  # admits both bodies
        cache = db.shards[0].snapshot.file.body_cache
        pos = db.shards[0].snapshot.doc_info("doc0004").winner_body[0]
        assert cache._entries.get(pos) is not None
        cache._referenced.clear()
        read(db)
        assert pos in cache._referenced


def test_compaction_reads_the_new_file_through_a_new_cache(tmp_path: Any) -> None:
    with _open(tmp_path) as db:
        revs = {r["id"]: r["rev"] for r in db.bulk_docs([_doc(n) for n in range(50)])}
        assert all(db.get(i)["_rev"] == revs[i] for i in revs)
        old = db.shards[0].snapshot.file
        db.compact()
        new = db.shards[0].snapshot.file
        assert new is not old and new.body_cache is not old.body_cache
        assert new.body_cache is not None and len(new.body_cache) == 0
        assert all(db.get(i) == {**_doc(int(i[3:])), "_rev": revs[i]} for i in revs)
        assert len(new.body_cache) == 50


def test_a_readonly_handle_caches_bodies_too(tmp_path: Any) -> None:
    path = str(tmp_path / "db")
    with settee.open(path, shards=1, fsync=False) as db:
        db.put(_doc(2))
        with settee.open(path, readonly=True) as reader:
            assert reader.get("doc0002")["n"] == 2
            (shard,) = reader.shards
            cache = shard.current().file.body_cache
            assert cache is not None and len(cache) == 1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda doc: doc.pop("n"),
        lambda doc: doc["tags"].append(1),
        lambda doc: doc.update(extra=True),
    ],
)
def test_changing_a_returned_row_changes_no_later_answer(
    tmp_path: Any, mutate: Callable[[dict[str, Any]], Any]
) -> None:
    with _open(tmp_path) as db:
        db.bulk_docs([_doc(n) for n in range(20)])
        first = db.all_docs(startkey="doc0005", limit=5, include_docs=True)
        for row in first["rows"]:
            mutate(row["doc"])
        again = db.all_docs(startkey="doc0005", limit=5, include_docs=True)
        assert [r["doc"]["n"] for r in again["rows"]] == [5, 6, 7, 8, 9]
        assert all(r["doc"]["tags"] == ["a", {"deep": [r["doc"]["n"]]}] for r in again["rows"])
        assert not any("extra" in r["doc"] for r in again["rows"])


def test_shard_file_without_a_cache_reads_as_before(tmp_path: Any) -> None:
    fs = MemoryFileSystem()
    file = ShardFile.open(fs, "/shard", create=True)
    batch = file.new_batch()
    pos = batch.add({"a": 1})
    file.write_batch(batch)
    size = len(b"\x81\xa1a\x01")
    assert file.body_cache is None
    assert file.read_sized([(pos, size), (pos, size + 5)]) == [{"a": 1}, {"a": 1}]
    file.body_cache = BodyCache(1 << 20)
    # A pointer whose size disagrees with the cached payload reads the file, as before.
    assert file.read_sized([(pos, size), (pos, size + 5), (pos, size)]) == [{"a": 1}] * 3
    assert len(file.body_cache) == 1
    file.close()


def test_no_body_cache_at_zero_bytes_and_no_negative_capacity() -> None:
    """``body_cache_bytes=0`` means no cache object at all, so a read pays no probe
    (a cache of capacity 0 admitted one body in eight only to evict it); a negative
    capacity is a caller's bug, refused where it is made."""
    assert body_cache(0) is None
    assert isinstance(body_cache(1), BodyCache)
    for make in (ClockCache, BodyCache):
        with pytest.raises(ValueError, match=">= 0 bytes"):
            make(-1)


def test_a_full_cache_admits_one_miss_in_eight() -> None:
    """Reads spread over more bodies than fit made every miss pay an insert and an
    eviction (a get 28% slower than with no cache): once full, one in
    ``ADMIT_WHEN_FULL`` misses gets in; until then, every one."""
    cache = BodyCache(10 * (100 + BODY_ENTRY_OVERHEAD))
    charge = 100 + BODY_ENTRY_OVERHEAD
    for pos in range(10):
        cache.admit({pos: (b"x" * 100, charge)}, charge)
    assert len(cache) == 10 and sorted(cache._entries) == list(range(10))
    for pos in range(10, 10 + 8 * 5):
        cache.admit({pos: (b"y" * 100, charge)}, charge)
    newcomers = [pos for pos in cache._entries if pos >= 10]
    assert len(newcomers) == 5 and len(cache) == 10
    assert cache.bytes <= cache.capacity_bytes


@pytest.mark.parametrize("cached", [False, True])
def test_a_term_with_non_str_map_keys_reads_as_decode_payload_does(cached: bool) -> None:
    """The fast path decodes with msgpack's strict defaults (bodies have str keys);
    a term whose maps have other keys (a writer bug the crc cannot see) is left to
    the general path, and reads the same, alone or in a batch, cached or not."""
    fs = MemoryFileSystem()
    file = ShardFile.open(fs, "/shard", create=True)
    if cached:
        file.body_cache = BodyCache(1 << 20)
    batch = file.new_batch()
    odd = {"a": {1: "one", "b": [2]}}
    plain = {"a": 1}
    pointers = [(batch.add(term), len(encode_payload(term))) for term in (odd, plain, odd)]
    file.write_batch(batch)
    for _ in range(2):  # the second round is answered by the cache where there is one
        assert file.read_sized(pointers) == [odd, plain, odd]
        assert file.read_sized(pointers[:1]) == [decode_payload(encode_payload(odd))]
    file.close()


def test_ranges_over_documents_with_attachments_are_served_by_the_cache(tmp_path: Any) -> None:
    """A document with attachments has a three-field body entry; its body pointer is
    still ``(pos, size)``, so a range with docs reads it through the fast path and the
    cache (a size taken from the wrong field read the file every time, with the same
    answer: found by mutation testing)."""
    fs = CountingFileSystem()
    stub = {"a.txt": {"content_type": "text/plain", "data": "aGk="}}
    with _open(tmp_path, fs) as db:
        db.bulk_docs([{**_doc(n), "_attachments": stub} for n in range(5)])
        first = db.all_docs(include_docs=True)["rows"]
        before = fs.preads
        again = db.all_docs(include_docs=True)["rows"]
        assert fs.preads == before
    assert again == first and all(row["doc"]["_attachments"]["a.txt"]["stub"] for row in again)

"""Flip bits and overwrite sectors of a real database: never wrong data.

A database is written on the OS file system (one client, so the order of
commits is the order of calls), then each damage case copies it, damages one
shard file and reopens it. Which documents a damaged term can affect is learned
by tracing the preads of each document's reads on the clean copy.

Most terms fit in the first pread of a read (``settee.file.READ_AHEAD``); the
database also holds bodies of 10-40 KiB and a B+tree leaf over 8 KiB (a document
with a long revision path), and every live one of those long terms is damaged in
its length, its crc, and its payload and block markers in each of its two preads.
"""

from __future__ import annotations

import itertools
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import settee
from crash_tests.checker import Oracle, Recording, Workload, make_workload, record, shard_view
from crash_tests.corruption import (
    Term,
    TracingFileSystem,
    copy_damaged,
    is_corruption,
    long_term_offsets,
    open_quietly,
    read_pieces,
    run_with_watchdog,
    terms,
)
from settee.file import READ_AHEAD
from settee.layout import shard_path
from settee.spec.errors import CorruptionError
from settee.spec.format import BLOCK_SIZE
from settee.spec.routing import shard_of

SHARDS = 2
SECTOR = 512
#: Bodies longer than READ_AHEAD, written on every shard: their reads take two preads.
LONG_BODIES = (10_500, 24_000, 40_000)
#: Revisions in one document's path on every shard: its by_id value, and so the leaf
#: node holding it, outgrows READ_AHEAD too.
LONG_PATH = 150


@dataclass
class CleanDB:
    path: str
    rec: Recording
    oracle: Oracle
    ids: list[str]
    files: list[str]
    terms: list[list[Term]]
    expected: dict[str, dict[str, Any]]
    aggregates: Any
    #: doc id -> {(shard, term index)} its reads touch.
    deps: dict[str, set[tuple[int, int]]]


def _aggregates(db: Any) -> Any:
    return (db.all_docs(include_docs=True), db.changes(include_docs=True), db.info()["doc_count"])


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> CleanDB:
    return build_clean(str(tmp_path_factory.mktemp("corruption") / "db"))


def build_clean(path: str) -> CleanDB:
    """Write the corruption suite's database at ``path`` and learn its layout."""
    workload = _with_long_terms(make_workload(99, ops=40, clients=1, shards=SHARDS, compactions=0))

    def on_disk(_path: str, fs: Any, **options: Any) -> Any:
        return settee.Database(path, **options)  # the real OS file system, not the SimFS

    rec = record(workload, factory=on_disk)
    oracle = Oracle(rec)
    assert not oracle.problems, oracle.problems
    ids = sorted({i for shard_ids in oracle.ids for i in shard_ids})
    files = [shard_path(path, s) for s in range(SHARDS)]
    file_terms = [terms(Path(f).read_bytes()) for f in files]
    with open_quietly(path) as db:
        expected = {i: read_pieces(db, i) for i in ids}
        aggregates = _aggregates(db)
    assert not any(is_corruption(p) for pieces in expected.values() for p in pieces.values())
    deps = {i: _trace_deps(path, i, files, file_terms) for i in ids}
    kinds = {t.kind for ts in file_terms for t in ts}
    assert kinds == {"header", "node", "body"}, kinds
    live_long = {file_terms[s][k].kind for s, k in _live_long_terms(file_terms, deps)}
    assert live_long == {"node", "body"}, f"no live term longer than READ_AHEAD: {live_long}"
    return CleanDB(path, rec, oracle, ids, files, file_terms, expected, aggregates, deps)


def _with_long_terms(workload: Workload) -> Workload:
    """``workload`` (one client) with, for every shard, the LONG_BODIES and a LONG_PATH
    replication spread between its calls."""
    rng = random.Random(workload.seed)
    names = (f"long{n}" for n in itertools.count())
    extra: list[tuple[Any, ...]] = []
    for s in range(SHARDS):
        ids = (i for i in names if shard_of(i, SHARDS) == s)
        for size in LONG_BODIES:
            extra.append(("put", next(ids), {"big": rng.randbytes(size // 2).hex()}, "auto"))
        path = tuple(f"{rng.getrandbits(128):032x}" for _ in range(LONG_PATH))
        extra.append(("replicate", next(ids), path, False, {"deep": s}, False))
    (plan,) = workload.clients
    # One long call after every few others, so later commits rewrite the trees around them.
    gap = -(-len(plan) // len(extra))
    merged: list[tuple[Any, ...]] = []
    for i, op in enumerate(plan):
        merged.append(op)
        if i % gap == gap - 1 and extra:
            merged.append(extra.pop(0))
    merged += extra
    return Workload(workload.seed, workload.shards, (tuple(merged),), workload.ids)


def _live_long_terms(file_terms: list[list[Term]], deps: Any) -> set[tuple[int, int]]:
    """(shard, term index) of every frame longer than READ_AHEAD that some read uses."""
    return {
        (s, k)
        for used in deps.values()
        for s, k in used
        if file_terms[s][k].kind != "header"
        and file_terms[s][k].end - file_terms[s][k].start > READ_AHEAD
    }


def _trace_deps(path: str, doc_id: str, files: list[str], file_terms: list[list[Term]]) -> Any:
    fs = TracingFileSystem()
    with settee.Database(path, fs=fs) as db:
        fs.preads.clear()
        read_pieces(db, doc_id)
    deps = set()
    for name, offset in fs.preads:
        s = files.index(name)
        deps.update((s, k) for k, t in enumerate(file_terms[s]) if t.start <= offset < t.end)
    return deps


def _check_damage(clean: CleanDB, tmp: Path, shard: int, lo: int, hi: int, damage: Any) -> None:
    """Damage bytes [lo, hi) of ``shard``'s file with ``damage`` and check every read."""
    dst = str(tmp)
    copy_damaged(clean.path, dst, os.path.basename(clean.files[shard]), damage)
    hit = {k for k, t in enumerate(clean.terms[shard]) if t.start < hi and lo < t.end}
    headers = [k for k, t in enumerate(clean.terms[shard]) if t.kind == "header"]
    fallback = headers[-1] in hit
    run_with_watchdog(lambda: _check_reads(clean, dst, shard, hit, fallback))


def _check_reads(clean: CleanDB, path: str, shard: int, hit: set[int], fallback: bool) -> None:
    with open_quietly(path) as db:
        for doc_id in clean.ids:
            pieces = read_pieces(db, doc_id)
            expected = clean.expected[doc_id]
            in_shard = shard_of(doc_id, SHARDS) == shard
            if in_shard and fallback:
                bad = [p for p in pieces.values() if isinstance(p, list) and p[0] == "raised"]
                assert all(is_corruption(p) for p in bad), (doc_id, bad)
                continue
            affected = in_shard and any((shard, k) in clean.deps[doc_id] for k in hit)
            for name, piece in pieces.items():
                if affected and is_corruption(piece):
                    continue
                assert piece == expected.get(name), (doc_id, name, piece, expected.get(name))
            if affected:
                assert any(is_corruption(p) for p in pieces.values()), (doc_id, "read damage")
        if fallback:
            # The shard fell back to an older header: it must hold an older commit exactly.
            try:
                view = shard_view(db, clean.oracle.ids[shard])
            except CorruptionError:
                return
            assert view in clean.oracle.views[shard], "fallback state is no earlier commit"
            return
        try:
            got = _aggregates(db)
        except CorruptionError:
            return
        assert got == clean.aggregates


def _flip_cases(clean: CleanDB, rng: random.Random) -> list[tuple[int, int, str]]:
    """(shard, byte offset, what): one random byte of every term, some padding, and the
    ``long_term_offsets`` of every live term longer than READ_AHEAD."""
    cases = []
    long = _live_long_terms(clean.terms, clean.deps)
    for s, file_terms in enumerate(clean.terms):
        for k, t in enumerate(file_terms):
            cases.append((s, rng.randrange(t.start, t.end), t.kind))
            if (s, k) in long:
                cases += [(s, o, f"long {t.kind}: {what}") for o, what in long_term_offsets(t, rng)]
        size = os.path.getsize(clean.files[s])
        covered = {o for t in file_terms for o in range(t.start, t.end)}
        free = [o for o in range(size) if o not in covered]
        cases += [(s, o, "padding") for o in rng.sample(free, min(10, len(free)))]
    return cases


def check_bit_flips(clean: CleanDB, tmp_path: Path, seed: int = 1) -> int:
    """Flip one random bit in every term (and some padding); the number of cases."""
    rng = random.Random(seed)
    cases = _flip_cases(clean, rng)
    for n, (shard, offset, kind) in enumerate(cases):
        bit = 1 << rng.randrange(8)

        def flip(data: bytearray, offset: int = offset, bit: int = bit) -> None:
            data[offset] ^= bit

        try:
            _check_damage(clean, tmp_path / f"flip{n}", shard, offset, offset + 1, flip)
        except AssertionError as exc:
            raise AssertionError(f"bit {bit:#x} of byte {offset} ({kind}), shard {shard}") from exc
    kinds = {kind for _, _, kind in cases}
    wanted = {"header", "node", "body", "padding", "long node: length", "long node: crc"}
    wanted |= {
        f"long body: {what}, {which} pread"
        for what in ("payload", "block marker")
        for which in ("first", "second")
    }
    assert wanted <= kinds, sorted(wanted - kinds)
    return len(cases)


def test_single_bit_flips_in_every_term(
    clean: CleanDB, tmp_path: Path, record_property: Any
) -> None:
    count = check_bit_flips(clean, tmp_path)
    record_property("corruptions", count)
    print(f"{count} single-bit flips checked")


def test_sector_overwrites(clean: CleanDB, tmp_path: Path, record_property: Any) -> None:
    rng = random.Random(2)
    count = 0
    for shard, name in enumerate(clean.files):
        size = os.path.getsize(name)
        sectors = list(range(0, size, SECTOR))
        for lo in rng.sample(sectors, min(25, len(sectors))):
            hi = min(lo + SECTOR, size)
            noise = rng.randbytes(hi - lo)

            def overwrite(data: bytearray, lo: int = lo, hi: int = hi, noise: bytes = noise):
                data[lo:hi] = noise

            try:
                _check_damage(clean, tmp_path / f"sector{count}", shard, lo, hi, overwrite)
            except AssertionError as exc:
                raise AssertionError(f"sector at {lo}, shard {shard}") from exc
            count += 1
    record_property("corruptions", count)
    print(f"{count} sector overwrites checked")


def test_newest_header_damaged_falls_back(clean: CleanDB, tmp_path: Path) -> None:
    """FORMAT.md bad_crc_in_header: the previous commit is opened, exactly."""
    for shard in range(SHARDS):
        header = [t for t in clean.terms[shard] if t.kind == "header"][-1]
        offset = header.start + 12  # inside the version/length fields

        def flip(data: bytearray, offset: int = offset) -> None:
            data[offset] ^= 0x10

        _check_damage(clean, tmp_path / f"h{shard}", shard, offset, offset + 1, flip)
        with open_quietly(str(tmp_path / f"h{shard}")) as db:
            view = shard_view(db, clean.oracle.ids[shard])
        prefixes = clean.oracle.views[shard][view]
        assert max(prefixes) < len(clean.rec.queues[shard]), "the newest commit survived"


def test_truncation_in_last_blocks(clean: CleanDB, tmp_path: Path, record_property: Any) -> None:
    """Cut a shard file at offsets of its last 8 KiB: it opens at an earlier commit."""
    count = 0
    for shard, name in enumerate(clean.files):
        size = os.path.getsize(name)
        offsets = range(max(0, size - 2 * BLOCK_SIZE), size)
        edges = {o for o in offsets if o % BLOCK_SIZE in (0, 1, BLOCK_SIZE - 1)}
        for cut in sorted(edges | set(offsets[::97])):

            def truncate(data: bytearray, cut: int = cut) -> None:
                del data[cut:]

            dst = tmp_path / f"cut{shard}-{cut}"
            copy_damaged(clean.path, str(dst), os.path.basename(name), truncate)
            with open_quietly(str(dst)) as db:
                ids = clean.oracle.ids[shard]
                view = run_with_watchdog(lambda db=db, ids=ids: shard_view(db, ids))
            assert view in clean.oracle.views[shard], f"cut at {cut}: no earlier commit"
            count += 1
    record_property("truncations", count)


@pytest.mark.slow
def test_truncation_at_every_offset_of_last_8k(clean: CleanDB, tmp_path: Path) -> None:
    for shard, name in enumerate(clean.files):
        size = os.path.getsize(name)
        for cut in range(max(0, size - 2 * BLOCK_SIZE), size):

            def truncate(data: bytearray, cut: int = cut) -> None:
                del data[cut:]

            dst = tmp_path / f"cut{shard}-{cut}"
            copy_damaged(clean.path, str(dst), os.path.basename(name), truncate)
            with open_quietly(str(dst)) as db:
                view = shard_view(db, clean.oracle.ids[shard])
            assert view in clean.oracle.views[shard], f"cut at {cut}: no earlier commit"

"""Damage durable bytes of a real database and check what reads do.

``terms`` maps a shard file into its headers and frames (bodies and tree nodes)
with the engine's one commit walker; ``long_term_offsets`` names the bytes of a
term longer than ``settee.file.READ_AHEAD`` (which a read fetches with two
preads) worth damaging: its length and crc, its payload and its block markers
in each pread. ``build_clean`` writes the corruption suite's database and learns
which terms each document's reads touch; ``check_damage`` copies it, damages one
file, opens it on the real OS file system and checks the promise of FORMAT.md: a
read either returns exactly what was written or raises ``CorruptionError``; reads
that do not touch the damaged bytes are unaffected; when the newest header of a
shard is damaged, the shard falls back to an older commit. ``check_bit_flips`` is
the bit-flip campaign ``settee verify`` runs and ``test_corruption.py`` tests.
Every check runs under a watchdog, so a hang fails instead of blocking the suite.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import random
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import settee
from settee.check import check_database
from settee.file import READ_AHEAD, ShardFile
from settee.heads import HEADS_NAME
from settee.io import FileSystemWrapper, MemoryFileSystem, OsFileSystem
from settee.layout import shard_path
from settee.proof.crash.checker import (
    Oracle,
    Recording,
    Workload,
    make_workload,
    record,
    shard_view,
)
from settee.spec.errors import CorruptionError
from settee.spec.format import (
    BLOCK_SIZE,
    FRAME_SIZE,
    laid_out_size,
)
from settee.spec.routing import shard_of
from settee.walker import Commit, walk

__all__ = [
    "SHARDS",
    "CleanDB",
    "Term",
    "TracingFileSystem",
    "build_clean",
    "check_bit_flips",
    "check_damage",
    "copy_damaged",
    "is_corruption",
    "long_term_offsets",
    "open_quietly",
    "read_pieces",
    "run_with_watchdog",
    "terms",
]

WATCHDOG_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Term:
    """A stored item: ``kind`` is ``header``, ``node``, ``body`` or ``chunk`` (attachment
    bytes); bytes ``[start, end)``."""

    kind: str
    start: int
    end: int


def terms(data: bytes) -> list[Term]:
    """Every header and frame of a clean shard file, in file order, as the one commit
    walker (``settee.walker``, the same that open and ``settee check`` use) finds them."""
    fs = MemoryFileSystem()
    fs.set_contents("/shard", bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a kept tail is not a term
        file = ShardFile.open(fs, "/shard", create=False)
    out: list[Term] = []
    try:
        for item in walk(file):
            assert isinstance(item, Commit), f"the clean file is damaged: {item}"
            for frame in item.frames:
                obj = file.read_term(frame.pos)
                is_node = isinstance(obj, list) and len(obj) == 2 and obj[0] in ("kv", "kp")
                kind = "node" if is_node else "chunk" if isinstance(obj, bytes) else "body"
                out.append(Term(kind, frame.pos, frame.end))
            out.append(Term("header", item.offset, item.end))
    finally:
        file.close()
    return out


def _physical(start: int, k: int) -> int:
    """File offset of logical byte ``k`` of a frame laid out from ``start``."""
    return start + laid_out_size(start, k + 1) - 1


def long_term_offsets(term: Term, rng: random.Random) -> list[tuple[int, str]]:
    """(file offset, what it is) of bytes to damage in a frame longer than ``READ_AHEAD``:
    one in its length field, one in its crc, and a payload byte and a block marker in
    each of the two preads ``ShardFile.read_term`` makes (the second only where the frame
    has one there)."""
    assert term.kind != "header" and term.end - term.start > READ_AHEAD, term
    split = term.start + READ_AHEAD
    out = [
        (_physical(term.start, rng.randrange(0, 4)), "length"),
        (_physical(term.start, rng.randrange(4, FRAME_SIZE)), "crc"),
    ]
    payload_start = _physical(term.start, FRAME_SIZE)
    for lo, hi, which in ((payload_start, split, "first"), (split, term.end, "second")):
        payload = [o for o in range(lo, hi) if o % BLOCK_SIZE]
        markers = [o for o in range(lo, hi) if not o % BLOCK_SIZE]
        out.append((rng.choice(payload), f"payload, {which} pread"))
        if markers:
            out.append((rng.choice(markers), f"block marker, {which} pread"))
    return out


class TracingFileSystem(FileSystemWrapper):
    """Remembers the offset of every pread, per file: which terms a read touched."""

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.preads: list[tuple[str, int]] = []

    def open(self, path: str, *, create: bool) -> Any:
        handle = super().open(path, create=create)
        inner_pread = handle.pread

        def pread(offset: int, size: int) -> bytes:
            self.preads.append((path, offset))
            return inner_pread(offset, size)

        handle.pread = pread  # type: ignore[method-assign]  # a per-handle spy
        return handle


def read_pieces(db: Any, doc_id: str) -> dict[str, Any]:
    """Every read of one document, each as its result or the name of its exception."""
    out: dict[str, Any] = {}

    def attempt(name: str, fn: Callable[[], Any]) -> Any:
        try:
            out[name] = fn()
        except settee.NotFound as exc:
            out[name] = ["not_found", exc.reason]
        except Exception as exc:
            out[name] = ["raised", type(exc).__name__, str(exc)]
        return out[name]

    attempt("get", lambda: db.get(doc_id, revs=True, conflicts=True, attachments=True))
    # The same document through a key lookup (all_docs keys=: its own descent,
    # BTree.get_many). Found by mutation testing: an engine answering a damaged
    # leaf's keys row "not_found" passed while get and the range reads were checked.
    attempt("keys", lambda: db.all_docs(keys=[doc_id], include_docs=True)["rows"])
    diff = attempt("leaves", lambda: db.revs_diff({doc_id: ["999999-f"]}))
    if isinstance(diff, dict):
        for rev in diff.get(doc_id, {}).get("possible_ancestors", []):
            attempt(
                f"rev {rev}", lambda rev=rev: db.get(doc_id, rev=rev, revs=True, attachments=True)
            )
    return out


def run_with_watchdog(fn: Callable[[], Any], seconds: float = WATCHDOG_SECONDS) -> Any:
    """``fn()``, or an AssertionError if it runs longer than ``seconds`` (a hang)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"hang: the check ran longer than {seconds} s") from None
    finally:
        pool.shutdown(wait=False)


def copy_damaged(src: str, dst: str, name: str, damage: Callable[[bytearray], None]) -> None:
    """Copy database directory ``src`` to ``dst`` and apply ``damage`` to file ``name``."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("LOCK"))
    path = os.path.join(dst, name)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    damage(data)
    with open(path, "wb") as f:
        f.write(data)


def open_quietly(path: str, factory: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``factory(path, **options)`` (settee's engine by default), warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return (factory or settee.Database)(path, **options)


def is_corruption(piece: Any) -> bool:
    return isinstance(piece, list) and piece[:2] == ["raised", CorruptionError.__name__]


# -- the corruption suite's database and its bit-flip campaign --------------------------------

#: Shards of the corruption suite's database.
SHARDS = 2
#: Bodies longer than READ_AHEAD, written on every shard: their reads take two preads.
LONG_BODIES = (10_500, 24_000, 40_000)
#: Revisions in one document's path on every shard: its by_id value, and so the leaf
#: node holding it, outgrows READ_AHEAD too.
LONG_PATH = 150


@dataclass
class CleanDB:
    """The corruption suite's database at ``path``: its recording and oracle, every
    term of each shard file, and what every read of each document returned and touched."""

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
    #: The engine under test, ``factory(path, fs=None, **options)``: it writes the
    #: database and reads every damaged copy (a crc bug of its own must show).
    factory: Callable[..., Any] = settee.Database


def _aggregates(db: Any) -> Any:
    return (db.all_docs(include_docs=True), db.changes(include_docs=True), db.info()["doc_count"])


def build_clean(path: str, factory: Callable[..., Any] = settee.Database) -> CleanDB:
    """Write the corruption suite's database at ``path`` with the engine ``factory``
    (one writing settee's format) and learn its layout."""
    workload = _with_long_terms(make_workload(99, ops=40, clients=1, shards=SHARDS, compactions=0))

    def on_disk(_path: str, fs: Any, **options: Any) -> Any:
        return factory(path, **options)  # the real OS file system, not the SimFS

    rec = record(workload, factory=on_disk)
    oracle = Oracle(rec)
    assert not oracle.problems, oracle.problems
    ids = sorted({i for shard_ids in oracle.ids for i in shard_ids})
    files = [shard_path(path, s) for s in range(SHARDS)]
    file_terms = [terms(Path(f).read_bytes()) for f in files]
    with open_quietly(path, factory) as db:
        expected = {i: read_pieces(db, i) for i in ids}
        aggregates = _aggregates(db)
    assert not any(is_corruption(p) for pieces in expected.values() for p in pieces.values())
    deps = {i: _trace_deps(path, i, files, file_terms, factory) for i in ids}
    kinds = {t.kind for ts in file_terms for t in ts}
    assert kinds == {"header", "node", "body", "chunk"}, kinds
    live_long = {file_terms[s][k].kind for s, k in _live_long_terms(file_terms, deps)}
    assert live_long >= {"node", "body"}, f"no live term longer than READ_AHEAD: {live_long}"
    return CleanDB(path, rec, oracle, ids, files, file_terms, expected, aggregates, deps, factory)


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


def _trace_deps(
    path: str,
    doc_id: str,
    files: list[str],
    file_terms: list[list[Term]],
    factory: Callable[..., Any],
) -> Any:
    fs = TracingFileSystem()
    with factory(path, fs=fs) as db:
        fs.preads.clear()
        read_pieces(db, doc_id)
    deps = set()
    for name, offset in fs.preads:
        s = files.index(name)
        deps.update((s, k) for k, t in enumerate(file_terms[s]) if t.start <= offset < t.end)
    return deps


def check_damage(clean: CleanDB, tmp: Path, shard: int, lo: int, hi: int, damage: Any) -> None:
    """Damage bytes [lo, hi) of ``shard``'s file with ``damage`` and check every read."""
    dst = str(tmp)
    copy_damaged(clean.path, dst, os.path.basename(clean.files[shard]), damage)
    hit = {k for k, t in enumerate(clean.terms[shard]) if t.start < hi and lo < t.end}
    headers = [k for k, t in enumerate(clean.terms[shard]) if t.kind == "header"]
    fallback = headers[-1] in hit
    if fallback and os.path.exists(os.path.join(dst, HEADS_NAME)):
        # HEADS names the newest commit as durable: losing it to damage is never
        # silent (found in review: it passed for a torn tail, and check said OK).
        # Checked before the reads open a writer, which republishes HEADS.
        problems = list(check_database(dst))
        damaged = os.path.join(dst, os.path.basename(clean.files[shard]))
        assert any(p.startswith(damaged) for p in problems), (
            "a durable commit's damaged header went unreported",
            problems,
        )
    try:
        run_with_watchdog(lambda: _check_reads(clean, dst, shard, hit, fallback))
    except AssertionError:
        raise
    except Exception as exc:
        # Opening and reading a damaged copy answers every read (a fallback to an
        # older header, or CorruptionError per read): an error out of open, or any
        # other, is the engine's failure to report, not the campaign's crash (found
        # by mutation testing: an engine that skipped the header crc crashed verify).
        raise AssertionError(
            f"bytes [{lo}, {hi}) of shard {shard} damaged ({damage!r}): "
            f"opening or reading the copy raised {exc!r}"
        ) from exc


def _check_reads(clean: CleanDB, path: str, shard: int, hit: set[int], fallback: bool) -> None:
    with open_quietly(path, clean.factory) as db:
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
            check_damage(clean, tmp_path / f"flip{n}", shard, offset, offset + 1, flip)
        except AssertionError as exc:
            raise AssertionError(f"bit {bit:#x} of byte {offset} ({kind}), shard {shard}") from exc
    kinds = {kind for _, _, kind in cases}
    wanted = {"header", "node", "body", "chunk", "padding", "long node: length", "long node: crc"}
    wanted |= {
        f"long body: {what}, {which} pread"
        for what in ("payload", "block marker")
        for which in ("first", "second")
    }
    assert wanted <= kinds, sorted(wanted - kinds)
    return len(cases)

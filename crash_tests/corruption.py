"""Damage durable bytes of a real database and check what reads do.

``terms`` maps a shard file into its headers and frames (bodies and tree nodes)
with the engine's one commit walker; ``long_term_offsets`` names the bytes of a
term longer than ``settee.file.READ_AHEAD`` (which a read fetches with two
preads) worth damaging: its length and crc, its payload and its block markers
in each pread. ``Damage.check`` copies a database directory,
damages one file, opens it on the real OS file system and checks the promise of
FORMAT.md: a read either returns exactly what was written or raises
``CorruptionError``; reads that do not touch the damaged bytes are unaffected;
when the newest header of a shard is damaged, the shard falls back to an
older commit. Every check runs under a watchdog, so a hang fails instead of
blocking the suite.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import settee
from settee.file import READ_AHEAD, ShardFile
from settee.io import FileSystemWrapper, MemoryFileSystem, OsFileSystem
from settee.spec.errors import CorruptionError
from settee.spec.format import (
    BLOCK_SIZE,
    FRAME_SIZE,
    laid_out_size,
)
from settee.walker import Commit, walk

__all__ = [
    "Term",
    "TracingFileSystem",
    "long_term_offsets",
    "read_pieces",
    "run_with_watchdog",
    "terms",
]

WATCHDOG_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Term:
    """A stored item: ``kind`` is ``header``, ``node`` or ``body``; bytes ``[start, end)``."""

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
                out.append(Term("node" if is_node else "body", frame.pos, frame.end))
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

    attempt("get", lambda: db.get(doc_id, revs=True, conflicts=True))
    diff = attempt("leaves", lambda: db.revs_diff({doc_id: ["999999-f"]}))
    if isinstance(diff, dict):
        for rev in diff.get(doc_id, {}).get("possible_ancestors", []):
            attempt(f"rev {rev}", lambda rev=rev: db.get(doc_id, rev=rev, revs=True))
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


def open_quietly(path: str, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return settee.open(path, **options)


def is_corruption(piece: Any) -> bool:
    return isinstance(piece, list) and piece[:2] == ["raised", CorruptionError.__name__]

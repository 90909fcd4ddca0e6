"""Flip bits and overwrite sectors of a real database: never wrong data.

A database is written on the OS file system (one client, so the order of
commits is the order of calls), then each damage case copies it, damages one
shard file and reopens it. Which documents a damaged term can affect is learned
by tracing the preads of each document's reads on the clean copy
(``corruption.build_clean``).

Most terms fit in the first pread of a read (``settee.file.READ_AHEAD``); the
database also holds bodies of 10-40 KiB and a B+tree leaf over 8 KiB (a document
with a long revision path), and every live one of those long terms is damaged in
its length, its crc, and its payload and block markers in each of its two preads.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest

from settee.check import check_database
from settee.heads import HEADS_NAME
from settee.proof.crash.checker import shard_view
from settee.proof.crash.corruption import (
    SHARDS,
    CleanDB,
    build_clean,
    check_bit_flips,
    check_damage,
    copy_damaged,
    open_quietly,
    run_with_watchdog,
)
from settee.spec.format import BLOCK_SIZE

SECTOR = 512


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory, crash_factory: Any) -> CleanDB:
    """The database, written and read by the engine under test (``--settee-engine``)."""
    return build_clean(str(tmp_path_factory.mktemp("corruption") / "db"), crash_factory)


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
                check_damage(clean, tmp_path / f"sector{count}", shard, lo, hi, overwrite)
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

        check_damage(clean, tmp_path / f"h{shard}", shard, offset, offset + 1, flip)
        with open_quietly(str(tmp_path / f"h{shard}"), clean.factory) as db:
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
            if os.path.exists(dst / HEADS_NAME):
                # Every cut here reaches the newest commit, which HEADS names as
                # durable: losing it is never silent (found in review: check said OK).
                # Checked before a writer opens the copy and republishes HEADS.
                cut_file = str(dst / os.path.basename(name))
                problems = list(check_database(str(dst)))
                assert any(p.startswith(cut_file) for p in problems), (cut, problems)
            with open_quietly(str(dst), clean.factory) as db:
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
            with open_quietly(str(dst), clean.factory) as db:
                view = shard_view(db, clean.oracle.ids[shard])
            assert view in clean.oracle.views[shard], f"cut at {cut}: no earlier commit"

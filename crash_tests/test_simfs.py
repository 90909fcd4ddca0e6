"""The simulated file system keeps its durability promises, and no more."""

from __future__ import annotations

import random

import pytest

from settee.proof.crash.simfs import KINDS, SECTOR_SIZE, CrashState, Image, SimFS, SimulatedCrash


def _fs_with_file(data: bytes = b"durable") -> tuple[SimFS, object]:
    fs = SimFS()
    fs.makedirs("/d")
    handle = fs.open("/d/f", create=True)
    handle.append(data)
    handle.fsync()
    fs.fsync_dir("/d")
    return fs, handle


def test_fsync_makes_data_durable_and_drop_loses_the_rest() -> None:
    fs, handle = _fs_with_file()
    handle.append(b"+unsynced")
    assert handle.pread(0, 100) == b"durable+unsynced"  # the page cache
    assert fs.image().files == {"/d/f": b"durable"}
    handle.fsync()
    assert fs.image().files == {"/d/f": b"durable+unsynced"}


def test_new_file_needs_fsync_dir() -> None:
    fs, _ = _fs_with_file()
    new = fs.open("/d/g", create=True)
    new.append(b"x")
    new.fsync()
    assert "/d/g" not in fs.image().files
    assert fs.image(CrashState("prefix", keep=1)).files["/d/g"] == b"x"
    fs.fsync_dir("/d")
    assert fs.image().files["/d/g"] == b"x"


def test_rename_and_remove_are_undone_until_fsync_dir() -> None:
    fs, _ = _fs_with_file(b"old")
    tmp = fs.open("/d/tmp", create=True)
    tmp.append(b"new")
    tmp.fsync()
    fs.rename("/d/tmp", "/d/f")
    assert fs.open("/d/f", create=False).pread(0, 10) == b"new"
    for kind in ("drop", "undo_dirs"):
        assert fs.image(CrashState(kind)).files == {"/d/f": b"old"}
    assert fs.image(CrashState("prefix", keep=2)).files == {"/d/f": b"new"}
    fs.fsync_dir("/d")
    assert fs.image().files == {"/d/f": b"new"}
    fs.remove("/d/f")
    assert fs.image().files == {"/d/f": b"new"}
    fs.fsync_dir("/d")
    assert fs.image().files == {}


def test_prefix_and_torn_keep_writes_in_issue_order() -> None:
    fs, handle = _fs_with_file(b"")
    handle.append(b"aaaa")
    handle.append(b"bbbb")
    assert fs.image(CrashState("prefix", keep=1)).files["/d/f"] == b"aaaa"
    assert fs.image(CrashState("torn_byte", keep=1, cut=3)).files["/d/f"] == b"aaaabbb"
    cuts = {s.cut for s in fs.crash_states("torn_byte", random.Random(0), samples=3)}
    assert {1, 3} <= cuts


def test_torn_sector_cuts_on_sector_boundaries() -> None:
    fs, handle = _fs_with_file(b"h" * 100)
    handle.append(bytes(range(256)) * 8)
    states = fs.crash_states("torn_sector", random.Random(0), samples=10)
    assert states
    for state in states:
        size = len(fs.image(state).files["/d/f"])
        assert size % SECTOR_SIZE == 0 and 100 < size < 100 + 2048


def test_pages_and_garble_never_touch_durable_bytes() -> None:
    fs, handle = _fs_with_file(b"D" * 5000)
    handle.append(b"N" * 20000)
    seen_pages, seen_garble = set(), set()
    for seed in range(40):
        pages = fs.image(CrashState("pages", seed=seed)).files["/d/f"]
        garble = fs.image(CrashState("garble", seed=seed)).files["/d/f"]
        assert pages[:5000] == garble[:5000] == b"D" * 5000
        assert set(pages[5000:]) <= {ord("N"), 0}
        seen_pages.add(pages)
        seen_garble.add(garble)
        assert len(garble) == 25000
    assert len(seen_pages) > 10 and len(seen_garble) > 10


def test_crash_states_replay_exactly() -> None:
    fs, handle = _fs_with_file()
    handle.append(b"z" * 9000)
    for kind in KINDS:
        a = fs.crash_states(kind, random.Random(7), samples=3)
        b = fs.crash_states(kind, random.Random(7), samples=3)
        assert a == b
        assert [fs.image(s).digest() for s in a] == [fs.image(s).digest() for s in b]


def test_replay_rebuilds_every_prefix() -> None:
    fs, handle = _fs_with_file()
    handle.append(b"more")
    again = SimFS.replay(Image({}), fs.trace)
    assert again.image(CrashState("prefix", keep=9)) == fs.image(CrashState("prefix", keep=9))
    assert again.open("/d/f", create=False).pread(0, 100) == b"durablemore"


def test_crash_at_raises_from_that_op_on() -> None:
    fs = SimFS(crash_at=3)
    fs.makedirs("/d")
    handle = fs.open("/d/f", create=True)
    handle.append(b"a")
    with pytest.raises(SimulatedCrash):
        handle.fsync()
    for call in (lambda: handle.pread(0, 1), lambda: fs.exists("/d"), lambda: handle.append(b"")):
        with pytest.raises(SimulatedCrash):
            call()
    assert not issubclass(SimulatedCrash, Exception)
    handle.close()  # closing after a crash must not fail


def test_directory_lost_with_its_entry_in_strict_mode() -> None:
    fs = SimFS(strict_mkdir=True)
    fs.makedirs("/d")
    handle = fs.open("/d/f", create=True)
    handle.append(b"x")
    handle.fsync()
    fs.fsync_dir("/d")
    assert fs.image().files == {}
    fs.fsync_dir("/")
    assert fs.image().files == {"/d/f": b"x"}

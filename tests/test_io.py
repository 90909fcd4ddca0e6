"""impl/io.py: every FileSystem behaves alike; OsFileSystem specifics; counting wrapper."""

from __future__ import annotations

import errno
import gc
import os
import stat
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import settee.io
from settee.io import (
    CountingFileSystem,
    FileSystem,
    FileSystemWrapper,
    MemoryFileSystem,
    OsFileSystem,
)


@pytest.fixture(params=["os", "memory", "counting"])
def fs_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FileSystem, str]]:
    """Each file system with a root directory to work in (TinyDB's storage fixture)."""
    if request.param == "memory":
        fs: FileSystem = MemoryFileSystem()
        root = "/mem/root"
        fs.makedirs(root)
    else:
        fs = OsFileSystem() if request.param == "os" else CountingFileSystem(OsFileSystem())
        root = str(tmp_path)
    yield fs, root


def test_append_returns_offset_and_pread_reads_it(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    handle = fs.open(f"{root}/f", create=True)
    assert handle.path == f"{root}/f"
    assert handle.size() == 0
    assert handle.append(b"hello") == 0
    assert handle.append(b" world") == 5
    assert handle.size() == 11
    assert handle.pread(0, 11) == b"hello world"
    assert handle.pread(6, 100) == b"world"  # short at end of file
    assert handle.pread(11, 10) == b""
    handle.fsync()
    handle.close()


def test_pwrite_truncate_and_reopen(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    handle = fs.open(f"{root}/f", create=True)
    handle.append(b"abcdef")
    handle.pwrite(2, b"XY")
    handle.truncate(4)
    assert handle.append(b"!") == 4
    handle.close()
    handle = fs.open(f"{root}/f", create=False)
    assert handle.pread(0, 100) == b"abXY!"
    assert handle.append(b"?") == 5  # appends continue at the reopened end
    handle.close()


def test_open_missing_without_create_raises(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    with pytest.raises(FileNotFoundError):
        fs.open(f"{root}/missing", create=False)
    assert not fs.exists(f"{root}/missing")


def test_remove_or_rename_missing_raises(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    with pytest.raises(FileNotFoundError):
        fs.remove(f"{root}/missing")
    with pytest.raises(FileNotFoundError):
        fs.rename(f"{root}/missing", f"{root}/other")


def test_rename_remove_listdir_exists_makedirs(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.makedirs(f"{root}/sub/dir")
    fs.makedirs(f"{root}/sub/dir")  # no error when it exists
    assert fs.exists(f"{root}/sub/dir")
    for name in ("b", "a"):
        fs.open(f"{root}/sub/{name}", create=True).close()
    assert fs.listdir(f"{root}/sub") == ["a", "b", "dir"]
    handle = fs.open(f"{root}/sub/a", create=False)
    handle.append(b"payload")
    handle.close()
    fs.rename(f"{root}/sub/a", f"{root}/sub/b")  # replaces b
    fs.fsync_dir(f"{root}/sub")
    assert fs.listdir(f"{root}/sub") == ["b", "dir"]
    assert fs.open(f"{root}/sub/b", create=False).pread(0, 100) == b"payload"
    fs.remove(f"{root}/sub/b")
    assert not fs.exists(f"{root}/sub/b")
    assert fs.listdir(f"{root}/sub") == ["dir"]


def test_os_readers_use_a_dup_descriptor(tmp_path: Path) -> None:
    handle = OsFileSystem().open(str(tmp_path / "f"), create=True)
    handle.append(b"0123456789")
    read_fd = handle.read_fd  # type: ignore[attr-defined]
    assert read_fd != handle._fd  # type: ignore[attr-defined]
    assert os.path.samestat(os.fstat(read_fd), os.fstat(handle._fd))  # type: ignore[attr-defined]
    # pread leaves the shared file position alone, which is what makes sharing safe.
    before = os.lseek(read_fd, 0, os.SEEK_CUR)
    assert handle.pread(3, 4) == b"3456"
    assert os.lseek(read_fd, 0, os.SEEK_CUR) == before
    handle.close()
    with pytest.raises(OSError):
        os.fstat(read_fd)


def test_os_fsync_dir_and_open_on_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync_dir fsyncs the directory itself: a new file or a rename is durable only
    then. No crash test sees the OS's (the crash campaigns run on the simulated
    file system), so a fsync_dir that only opened and closed the directory passed
    every test (found by mutation testing)."""
    fs = OsFileSystem()
    synced: list[bool] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    fs.fsync_dir(str(tmp_path))
    assert synced == [True]
    with pytest.raises(OSError):
        fs.fsync_dir(str(tmp_path / "missing"))


def test_os_handle_fsync_syncs_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle's fsync reaches the OS for that very file: the crash campaigns run on
    the simulated file system, so an fsync that did nothing (or synced another
    descriptor) on the real one passed every other test (found by mutation testing)."""
    handle = OsFileSystem().open(str(tmp_path / "f"), create=True)
    handle.append(b"durable")
    synced: list[tuple[int, int]] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_dev, info.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    handle.fsync()
    info = os.stat(tmp_path / "f")
    assert synced == [(info.st_dev, info.st_ino)]
    handle.close()


def test_os_concurrent_preads_share_one_descriptor(tmp_path: Path) -> None:
    handle = OsFileSystem().open(str(tmp_path / "f"), create=True)
    handle.append(bytes(range(256)) * 64)
    errors: list[str] = []

    def reader(seed: int) -> None:
        for i in range(2000):
            off = (seed * 7919 + i * 104729) % (256 * 64 - 16)
            if handle.pread(off, 16) != bytes((off + k) % 256 for k in range(16)):
                errors.append(f"offset {off}")

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handle.close()
    assert errors == []


def test_counting_file_system_counts_each_operation() -> None:
    fs = CountingFileSystem(MemoryFileSystem())
    handle = fs.open("/x", create=True)
    handle.append(b"abc")
    handle.pread(0, 2)
    handle.pread(1, 5)
    handle.fsync()
    assert fs.counts["open"] == 1 and fs.counts["append"] == 1 and fs.counts["fsync"] == 1
    assert fs.counts["pread"] == 2 and fs.bytes_read == 4
    fs.reset()
    assert fs.counts["pread"] == 0 and fs.bytes_read == 0


def test_wrapper_intercepts_every_call_once() -> None:
    seen: list[tuple[str, str]] = []

    class Recording(FileSystemWrapper):
        def intercept(self, op, path, call):  # type: ignore[no-untyped-def]
            seen.append((op, path))
            return call()

    fs = Recording(MemoryFileSystem())
    fs.makedirs("/d")
    handle = fs.open("/d/f", create=True)
    handle.append(b"x")
    handle.pwrite(0, b"y")
    handle.pread(0, 1)
    handle.size()
    handle.truncate(1)
    handle.fsync()
    handle.close()
    fs.fsync_dir("/d")
    fs.listdir("/d")
    fs.exists("/d/f")
    fs.rename("/d/f", "/d/g")
    fs.remove("/d/g")
    ops = [op for op, _ in seen]
    assert sorted(ops) == sorted(
        [
            "makedirs",
            "open",
            "append",
            "pwrite",
            "pread",
            "size",
            "truncate",
            "fsync",
            "close",
            "fsync_dir",
            "listdir",
            "exists",
            "rename",
            "remove",
        ]
    )


def test_memory_file_system_set_contents_is_seen_by_open_handles() -> None:
    fs = MemoryFileSystem()
    handle = fs.open("/f", create=True)
    handle.append(b"abc")
    fs.set_contents("/f", b"xy")
    assert handle.pread(0, 10) == b"xy" and handle.size() == 2
    assert fs.contents("/f") == b"xy"


@pytest.mark.parametrize("failing", ["dup", "fstat"])
def test_a_file_that_fails_to_open_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """EMFILE on the readers' dup, or an error from fstat, fails the open and closes
    whatever it opened: nobody holds the handle to close it later."""
    opened: list[int] = []
    real_open, real_dup = os.open, os.dup
    monkeypatch.setattr(os, "open", lambda *a: opened.append(real_open(*a)) or opened[-1])
    monkeypatch.setattr(os, "dup", lambda fd: opened.append(real_dup(fd)) or opened[-1])

    def refuse(*_args: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, failing, refuse)
    with pytest.raises(OSError):
        OsFileSystem().open(str(tmp_path / "f"), create=True)
    monkeypatch.undo()
    assert opened
    for fd in opened:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_pwrite_inside_the_file_keeps_where_appends_go(fs_root: tuple[FileSystem, str]) -> None:
    """A write before the end does not move it back (mutant I1: the next append
    overwrote the bytes after the pwrite)."""
    fs, root = fs_root
    handle = fs.open(f"{root}/f", create=True)
    handle.append(b"abcdef")
    handle.pwrite(2, b"XY")
    assert handle.append(b"!") == 6
    assert handle.pread(0, 100) == b"abXYef!"
    handle.close()


def test_os_size_sees_bytes_another_handle_appended(tmp_path: Path) -> None:
    """``size`` asks the file, not this handle's own end: a readonly reader learns of
    a writer's commits (in this process or another) by the file growing (mutant I3)."""
    fs = OsFileSystem()
    writer = fs.open(str(tmp_path / "f"), create=True)
    reader = fs.open(str(tmp_path / "f"), create=False)
    try:
        writer.append(b"x" * 100)
        assert reader.size() == 100
    finally:
        writer.close()
        reader.close()


def test_os_exists_names_a_dangling_symlink(tmp_path: Path) -> None:
    """The entry counts, not its target (mutant I4): a dangling settee.meta link (a
    backup's, not mounted) was taken for a missing file and replaced."""
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "no-such-file")
    assert OsFileSystem().exists(str(link))


def test_os_open_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    """A FIFO is no file to read a database from: open says what it is instead of
    handing out a descriptor whose reads wait for a writer forever (mutant I5)."""
    fifo = tmp_path / "shard-000.settee"
    os.mkfifo(fifo)
    with pytest.raises(OSError) as caught:
        OsFileSystem().open(str(fifo), create=False)
    assert caught.value.errno == errno.EINVAL and "FIFO" in str(caught.value)


def test_os_close_twice_never_closes_a_reused_descriptor(tmp_path: Path) -> None:
    """A second close must not reach the OS: the numbers may by then belong to another
    file of this process (mutant I6 closed them again)."""
    fs = OsFileSystem()
    handle = fs.open(str(tmp_path / "a"), create=True)
    handle.close()
    other = fs.open(str(tmp_path / "b"), create=True)  # likely reuses the numbers
    try:
        handle.close()
        other.append(b"still open")
        assert other.pread(0, 100) == b"still open"
    finally:
        other.close()


def _holes_supported(path: Path) -> bool:
    """Whether the file system under ``path`` reports holes (SEEK_HOLE before the end)."""
    probe = path / "probe"
    with open(probe, "wb") as f:
        f.write(b"x")
        f.truncate(1 << 24)
    fd = os.open(probe, os.O_RDONLY)
    try:
        return hasattr(os, "SEEK_HOLE") and os.lseek(fd, 0, os.SEEK_HOLE) < (1 << 24)
    finally:
        os.close(fd)
        probe.unlink()


def test_os_data_end_is_where_the_last_data_region_ends(tmp_path: Path) -> None:
    """Holes read as zeros: data_end skips a hole at the end, never data after an
    inner hole, and never answers past the size asked about."""
    if not _holes_supported(tmp_path):
        pytest.skip("this file system does not report holes")
    fs = OsFileSystem()
    path = str(tmp_path / "f")
    handle = fs.open(path, create=True)
    try:
        handle.append(b"a" * 5000)
        handle.truncate(1 << 30)  # a hole of almost 1 GiB at the end
        assert 5000 <= handle.data_end(1 << 30) < (1 << 20)
        handle.pwrite(1 << 29, b"b" * 100)  # data after an inner hole
        end = handle.data_end(1 << 30)
        assert (1 << 29) + 100 <= end < (1 << 30)
        assert handle.data_end(4096) == 4096  # inside the first region: the size asked
        assert handle.pread(end, 1 << 20) == bytes(min(1 << 20, (1 << 30) - end))
    finally:
        handle.close()


def test_data_end_defaults_to_the_size_asked_about() -> None:
    """A file system that cannot tell holes apart (memory, simulations) says every
    byte may be data, so a scan reads them all, as before."""
    handle = MemoryFileSystem().open("/f", create=True)
    handle.append(b"\0" * 10000)
    assert handle.data_end(10000) == 10000


def test_a_memory_handle_closed_by_a_finalizer_inside_open_does_not_deadlock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine closes a retired ShardFile's handle from a ``weakref.finalize``,
    which runs whenever the collector frees the file: inside any call, on the thread
    that allocated. When that was ``MemoryFileSystem.open`` (which holds the file
    system's lock while it makes the new file) the close waited for that lock, its
    own thread's, for ever (settee verify's interleavings found it: a compaction's
    open stalled). Here the collector runs at that allocation, on purpose."""
    fs = MemoryFileSystem()
    retired = fs.open("/old", create=True)

    class File:
        pass

    garbage = File()
    garbage.cycle = garbage  # type: ignore[attr-defined]  # freed by the collector only
    weakref.finalize(garbage, retired.close)
    del garbage
    made = settee.io._MemoryFile.__init__

    def collecting(self: Any) -> None:
        gc.collect()
        made(self)

    monkeypatch.setattr(settee.io._MemoryFile, "__init__", collecting)
    opened = threading.Event()
    opening = threading.Thread(target=lambda: (fs.open("/new", create=True), opened.set()))
    opening.daemon = True  # stuck for ever when the close waits for open's own lock
    opening.start()
    assert opened.wait(10), "open() never returned: the finalizer's close waited for it"
    with pytest.raises(OSError):
        retired.pread(0, 1)  # closed by the finalizer

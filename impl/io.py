"""The io layer: every byte settee reads or writes passes through ``FileSystem``.

The interface is deliberately narrow so that test file systems can stand in for
the OS: a simulated crash file system (drops or tears unsynced writes), a
scheduler file system (interleaves threads at each call) and a latency file
system (slow block storage). ``FileSystemWrapper`` makes the last two a few
lines each: it forwards every call through one ``intercept`` hook.

Threading contract, which every implementation must keep:

* ``FileHandle.pread`` and ``FileHandle.size`` may be called from any number of
  threads at once, concurrently with one writer, without any lock held by the
  caller. They never move a shared file position.
* ``append``, ``pwrite``, ``truncate``, ``fsync`` and ``close`` are called by one
  writer thread at a time (the shard's writer).
* ``close`` must not race with reads; the caller stops its readers first.
* ``data_end`` may be called like ``pread``. It asks the OS where the file's
  data ends, which moves the position of the descriptor readers share; no
  operation uses that position (every read is a ``pread``, every write a
  ``pwrite``).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable
from typing import TypeVar

from settee.spec.arguments import make_directories

__all__ = [
    "OPS",
    "CountingFileSystem",
    "FileHandle",
    "FileSystem",
    "FileSystemWrapper",
    "MemoryFileSystem",
    "OsFileSystem",
    "on_os_files",
    "open_regular",
]

T = TypeVar("T")

#: Names of every operation, as ``FileSystemWrapper.intercept`` receives them.
OPS = (
    "open",
    "rename",
    "remove",
    "listdir",
    "fsync_dir",
    "exists",
    "makedirs",
    "pread",
    "append",
    "pwrite",
    "fsync",
    "truncate",
    "size",
    "close",
)


class FileHandle(ABC):
    """One open file, readable and writable. ``path`` is the path it was opened with."""

    path: str

    @abstractmethod
    def pread(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset``; shorter only when the file ends first.

        Thread-safe and lock-free: concurrent readers and one writer may call at once.
        """

    @abstractmethod
    def append(self, data: bytes) -> int:
        """Write ``data`` at the end of the file as one write; return the offset it starts at."""

    @abstractmethod
    def pwrite(self, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` (extending the file if needed)."""

    @abstractmethod
    def fsync(self) -> None:
        """Make every byte written so far durable."""

    @abstractmethod
    def truncate(self, size: int) -> None:
        """Cut (or zero-extend) the file to ``size`` bytes."""

    @abstractmethod
    def size(self) -> int:
        """Current length of the file in bytes. Thread-safe like ``pread``."""

    @abstractmethod
    def close(self) -> None:
        """Release the handle; no call may follow, and no read may be in flight."""

    def file_identity(self) -> Hashable | None:
        """What tells this handle's file apart from any other file of its file system,
        as ``FileSystem.file_identity`` tells the one at a path (a file replaced by
        ``rename`` has another). By default None: it cannot be told."""
        return None

    def data_end(self, size: int) -> int:
        """Where the bytes of the file's first ``size`` that may not be zero end: a
        hole (a file extended by ``truncate``) reads as zeros, so nothing past this
        can be a header. By default ``size``: every byte may be data."""
        return size


class FileSystem(ABC):
    """Opens files and changes directory entries. Paths are plain ``str``."""

    @abstractmethod
    def open(self, path: str, *, create: bool) -> FileHandle:
        """Open ``path`` for reading and writing; create it (empty) if missing and ``create``.

        Raises ``FileNotFoundError`` when the file is missing and ``create`` is false.
        Creating a file does not make its directory entry durable: call ``fsync_dir``.
        """

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically replace ``dst`` with ``src`` (durable only after ``fsync_dir``)."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Delete the file ``path``."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of directory ``path``, sorted."""

    @abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make creations, renames and removals inside directory ``path`` durable."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` names an existing file or directory."""

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents; no error if it exists."""

    def file_behind(self, path: str) -> str:
        """The path of the file ``path`` names when it is a symbolic link, else
        ``path``: a file replaced by ``rename`` is replaced there, so the link stays.
        By default ``path`` (no links)."""
        return path

    def file_identity(self, path: str) -> Hashable | None:
        """What tells the file at ``path`` apart from any other, as its handles'
        ``file_identity`` does: how a readonly handle sees that a compaction renamed
        a new file over the one it reads. By default None: it cannot be told, and a
        readonly handle then keeps reading the file it opened (README, Caveats).
        Raises ``FileNotFoundError`` when no file is at ``path``."""
        return None


# -- the real thing -----------------------------------------------------------------------------


#: Data regions ``OsFileHandle.data_end`` follows before it gives up on a file
#: punched full of holes and answers its size (the scan then reads every byte).
_MAX_DATA_REGIONS = 4096


class OsFileHandle(FileHandle):
    """A file opened with ``os.open``; readers share one ``dup()``'d descriptor.

    ``os.pread`` ignores the file position, so one descriptor serves every reader
    thread with no lock (CouchDB 3.5 dups one descriptor per file for its readers
    in the same way). Readers get their own descriptor so that they never hold
    the writer's; ``seek`` + ``read`` is never used because it is not thread-safe.
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd
        opened = [fd]
        try:
            self.read_fd = os.dup(fd)
            opened.append(self.read_fd)
            # Only the writer thread appends, so tracking the end here needs no lock.
            self._end = os.fstat(fd).st_size
        except OSError:
            for each in opened:  # the caller never sees this handle: nobody else would close it
                os.close(each)
            raise
        self._open_fds: tuple[int, ...] = (self.read_fd, fd)

    def pread(self, offset: int, size: int) -> bytes:
        return os.pread(self.read_fd, size, offset)

    def file_identity(self) -> Hashable:
        st = os.fstat(self.read_fd)
        return (st.st_dev, st.st_ino)

    def append(self, data: bytes) -> int:
        start = self._end
        self._write_all(start, data)
        return start

    def pwrite(self, offset: int, data: bytes) -> None:
        self._write_all(offset, data)

    def _write_all(self, offset: int, data: bytes) -> None:
        view = memoryview(data)
        # One call in practice; the loop only covers short writes (signals, huge data).
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written
        self._end = max(self._end, offset)

    def fsync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._end = size

    def size(self) -> int:
        return os.fstat(self.read_fd).st_size

    def data_end(self, size: int) -> int:
        """The end of the file's last data region (``SEEK_DATA``/``SEEK_HOLE``), at
        most ``size``. Opening scans back from the end for the newest header: a
        shard file extended by a terabyte-long hole was a scan of a terabyte of
        zeros (20 GiB took 72 s), an open that never seemed to end (found by the
        damaged-directory hunt). ``size`` where the OS cannot tell holes apart."""
        seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
        if seek_data is None or seek_hole is None:
            return size
        end = pos = 0
        try:
            for _ in range(_MAX_DATA_REGIONS):
                start = os.lseek(self.read_fd, pos, seek_data)
                if start >= size:
                    break
                end = pos = os.lseek(self.read_fd, start, seek_hole)
                if pos >= size:
                    return size
            else:
                return size
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no data at or after ``pos``
                return size
        return min(end, size)

    def close(self) -> None:
        """Close both descriptors; idempotent. A second close must never reach the OS:
        by then the numbers may belong to another file of this process."""
        fds, self._open_fds = self._open_fds, ()
        for fd in fds:
            os.close(fd)


def open_regular(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags, mode)`` for a regular file, never blocking: a FIFO in a
    database directory made opening wait forever for a writer that never comes
    (found in review). The open is non-blocking, and anything but a regular file
    (FIFO, device, socket) is closed again and refused with an ``OSError`` saying
    what it is."""
    fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise OSError(
                errno.EINVAL, f"not a regular file but a {_KINDS.get(kind, 'special file')}", path
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


_KINDS = {
    stat.S_IFIFO: "FIFO",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
    stat.S_IFDIR: "directory",
}


class OsFileSystem(FileSystem):
    """The operating system's file system."""

    def open(self, path: str, *, create: bool) -> FileHandle:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        return OsFileHandle(path, open_regular(path, flags))

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def file_behind(self, path: str) -> str:
        return os.path.realpath(path) if os.path.islink(path) else path

    def file_identity(self, path: str) -> Hashable:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)

    def remove(self, path: str) -> None:
        os.remove(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def fsync_dir(self, path: str) -> None:
        # A directory entry (new file, rename) is only durable once the directory is fsynced.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def exists(self, path: str) -> bool:
        # The entry, not its target: a dangling symlink settee.meta (a backup's, not
        # mounted) was taken for a missing one, rebuilt, and renamed over the link.
        return os.path.lexists(path)

    def makedirs(self, path: str) -> None:
        make_directories(path)  # os.makedirs recurses per missing parent


def on_os_files(fs: FileSystem) -> bool:
    """Whether ``fs`` is the OS's file system, or wraps it (a ``FileSystemWrapper``
    passes paths through unchanged): its paths are then real paths, which the
    directory's writer lock and HEADS need. A wrapped one that took neither let two
    writers open one directory at once (found in review)."""
    while isinstance(fs, FileSystemWrapper):
        fs = fs.inner
    return isinstance(fs, OsFileSystem)


# -- in memory ----------------------------------------------------------------------------------


class _MemoryFile:
    #: Numbers each file made, as an inode number does: ``id()`` could be reused.
    _made = itertools.count()

    def __init__(self) -> None:
        self.data = bytearray()
        self.number = next(_MemoryFile._made)


class MemoryFileHandle(FileHandle):
    """A handle on a ``MemoryFileSystem`` file; fsync is a no-op (nothing can crash).

    Like a descriptor, a closed handle fails every call with ``EBADF``: a read that
    races with ``close()`` must show up in the proof as it would on a real file
    (where it could even read another file that reused the descriptor number).
    """

    def __init__(self, path: str, file: _MemoryFile, lock: threading.RLock) -> None:
        self.path = path
        self._file = file
        self._lock = lock
        self._closed = False

    def _buffer(self) -> bytearray:
        """The file's bytes; call with ``self._lock`` held."""
        if self._closed:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF), self.path)
        return self._file.data

    def pread(self, offset: int, size: int) -> bytes:
        # The lock only guards a bytearray copy (a resize could race with it); never I/O.
        with self._lock:
            return bytes(self._buffer()[offset : offset + size])

    def append(self, data: bytes) -> int:
        with self._lock:
            buf = self._buffer()
            start = len(buf)
            buf += data
            return start

    def pwrite(self, offset: int, data: bytes) -> None:
        with self._lock:
            buf = self._buffer()
            if offset > len(buf):
                buf += bytes(offset - len(buf))
            buf[offset : offset + len(data)] = data

    def fsync(self) -> None:
        with self._lock:
            self._buffer()

    def truncate(self, size: int) -> None:
        with self._lock:
            buf = self._buffer()
            if size <= len(buf):
                del buf[size:]
            else:
                buf += bytes(size - len(buf))

    def size(self) -> int:
        with self._lock:
            return len(self._buffer())

    def file_identity(self) -> Hashable:
        return self._file.number

    def close(self) -> None:
        with self._lock:
            self._buffer()  # closing twice is EBADF too
            self._closed = True


class MemoryFileSystem(FileSystem):
    """Files as bytearrays in a dict: fast, for tests that open thousands of damaged files.

    Directories are implicit: every parent of a file is a directory, and so is every
    path given to ``makedirs``. ``contents``/``set_contents`` let tests damage files.
    """

    def __init__(self) -> None:
        self._files: dict[str, _MemoryFile] = {}
        self._dirs: set[str] = set()
        # Re-entrant: a finalizer may run inside any call of this file system, on the
        # same thread, when the collector runs during an allocation there. With a
        # plain Lock, a retired ShardFile's finalizer closing its handle waited for
        # itself forever (found by settee verify's interleavings: a compaction's open
        # stalled). The engine's finalizers now only queue the close (settee.retired);
        # the re-entrant lock still guards against any other.
        self._lock = threading.RLock()

    def contents(self, path: str) -> bytes:
        """A copy of the bytes of file ``path``."""
        with self._lock:
            return bytes(self._files[path].data)

    def set_contents(self, path: str, data: bytes) -> None:
        """Replace the bytes of file ``path`` (creating it); open handles see the change."""
        with self._lock:
            self._files.setdefault(path, _MemoryFile()).data[:] = data

    def open(self, path: str, *, create: bool) -> FileHandle:
        with self._lock:
            if path not in self._files:
                if not create:
                    raise FileNotFoundError(path)
                self._files[path] = _MemoryFile()
            return MemoryFileHandle(path, self._files[path], self._lock)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            if src not in self._files:
                raise FileNotFoundError(src)
            self._files[dst] = self._files.pop(src)

    def file_identity(self, path: str) -> Hashable:
        with self._lock:
            if path not in self._files:
                raise FileNotFoundError(path)
            return self._files[path].number

    def remove(self, path: str) -> None:
        with self._lock:
            if self._files.pop(path, None) is None:
                raise FileNotFoundError(path)

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        with self._lock:
            paths = [*self._files, *self._dirs]
        return sorted({p[len(prefix) :].split("/")[0] for p in paths if p.startswith(prefix)})

    def fsync_dir(self, path: str) -> None:
        pass

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        prefix = path + "/"
        with self._lock:
            paths = [*self._files, *self._dirs]
        return any(p == path or p.startswith(prefix) for p in paths)

    def makedirs(self, path: str) -> None:
        with self._lock:
            self._dirs.add(path.rstrip("/"))


# -- wrappers -----------------------------------------------------------------------------------


class FileSystemWrapper(FileSystem):
    """Forwards every call to ``inner`` through ``intercept(op, path, call)``.

    Subclasses override ``intercept`` to count, delay or schedule calls: it must
    run ``call()`` (once) and return its result. ``op`` is one of ``OPS``.
    """

    def __init__(self, inner: FileSystem) -> None:
        self.inner = inner

    def intercept(self, op: str, path: str, call: Callable[[], T]) -> T:
        return call()

    def open(self, path: str, *, create: bool) -> FileHandle:
        handle = self.intercept("open", path, lambda: self.inner.open(path, create=create))
        return _WrappedHandle(self, handle)

    def rename(self, src: str, dst: str) -> None:
        self.intercept("rename", src, lambda: self.inner.rename(src, dst))

    def remove(self, path: str) -> None:
        self.intercept("remove", path, lambda: self.inner.remove(path))

    def listdir(self, path: str) -> list[str]:
        return self.intercept("listdir", path, lambda: self.inner.listdir(path))

    def fsync_dir(self, path: str) -> None:
        self.intercept("fsync_dir", path, lambda: self.inner.fsync_dir(path))

    def exists(self, path: str) -> bool:
        return self.intercept("exists", path, lambda: self.inner.exists(path))

    def file_behind(self, path: str) -> str:
        return self.inner.file_behind(path)

    def file_identity(self, path: str) -> Hashable | None:
        return self.inner.file_identity(path)

    def makedirs(self, path: str) -> None:
        self.intercept("makedirs", path, lambda: self.inner.makedirs(path))


class _WrappedHandle(FileHandle):
    """The handle a ``FileSystemWrapper`` returns: each call goes through ``intercept``."""

    def __init__(self, fs: FileSystemWrapper, inner: FileHandle) -> None:
        self.path = inner.path
        self.inner = inner
        self._fs = fs

    def pread(self, offset: int, size: int) -> bytes:
        return self._fs.intercept("pread", self.path, lambda: self.inner.pread(offset, size))

    def append(self, data: bytes) -> int:
        return self._fs.intercept("append", self.path, lambda: self.inner.append(data))

    def pwrite(self, offset: int, data: bytes) -> None:
        self._fs.intercept("pwrite", self.path, lambda: self.inner.pwrite(offset, data))

    def fsync(self) -> None:
        self._fs.intercept("fsync", self.path, self.inner.fsync)

    def truncate(self, size: int) -> None:
        self._fs.intercept("truncate", self.path, lambda: self.inner.truncate(size))

    def size(self) -> int:
        return self._fs.intercept("size", self.path, self.inner.size)

    def file_identity(self) -> Hashable | None:
        return self.inner.file_identity()

    def data_end(self, size: int) -> int:
        return self.inner.data_end(size)  # a hint the OS gives, never a fault to inject

    def close(self) -> None:
        self._fs.intercept("close", self.path, self.inner.close)


class CountingFileSystem(FileSystemWrapper):
    """Counts calls per operation: ``counts["pread"]`` is the number of preads so far.

    ``bytes_read`` totals the bytes preads returned. ``reset()`` zeroes everything.
    """

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self.counts: Counter[str] = Counter()
        self.bytes_read = 0
        # Counter updates are read-modify-write; the lock guards only that, never the I/O.
        # Re-entrant: the collector may run a finalizer that closes a handle (and so
        # counts a close) while this thread updates a count (see MemoryFileSystem).
        self._count_lock = threading.RLock()

    def intercept(self, op: str, path: str, call: Callable[[], T]) -> T:
        result = call()
        with self._count_lock:
            self.counts[op] += 1
            if op == "pread":
                self.bytes_read += len(result)  # type: ignore[arg-type]  # pread returns bytes
        return result

    def reset(self) -> None:
        with self._count_lock:
            self.counts.clear()
            self.bytes_read = 0

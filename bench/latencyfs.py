"""A latency file system: the OS file system behind a slow block device.

It stands for a network-attached volume (EBS, cloud block storage): every
``fsync`` (and directory fsync) waits ``fsync_ms`` and every ``pread`` waits
``read_ms`` before it runs. settee keeps decoded B+tree nodes in its own
cache, so a ``pread`` that reaches the file system is a read of data settee
does not hold: the model is a device with no page cache in front of it (as
with ``O_DIRECT``). The waits are ``time.sleep``, which releases the GIL as a
real blocking system call would.

In ``read_mode="serialized"`` the engine wraps this file system in its
per-shard lock, so a wait happens while the lock is held, exactly as a slow
read or fsync held CouchDB's ``couch_file`` process before 3.5.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from settee.io import FileSystem, FileSystemWrapper, OsFileSystem

__all__ = ["DEFAULT_FSYNC_MS", "DEFAULT_READ_MS", "LatencyFileSystem"]

T = TypeVar("T")

DEFAULT_FSYNC_MS = 2.0
DEFAULT_READ_MS = 0.2


class LatencyFileSystem(FileSystemWrapper):
    """Adds ``fsync_ms`` to every fsync and ``read_ms`` to every pread of ``inner``."""

    def __init__(
        self,
        inner: FileSystem | None = None,
        *,
        fsync_ms: float = DEFAULT_FSYNC_MS,
        read_ms: float = DEFAULT_READ_MS,
    ) -> None:
        super().__init__(inner if inner is not None else OsFileSystem())
        if fsync_ms < 0 or read_ms < 0:
            raise ValueError("latencies must be >= 0 milliseconds")
        self.fsync_s = fsync_ms / 1000.0
        self.read_s = read_ms / 1000.0
        self._lock = threading.Lock()
        #: How many waits of each kind were added (for the report).
        self.fsyncs = 0
        self.preads = 0

    def intercept(self, op: str, path: str, call: Callable[[], T]) -> T:
        if op in ("fsync", "fsync_dir"):
            self._wait(self.fsync_s)
            with self._lock:
                self.fsyncs += 1
        elif op == "pread":
            self._wait(self.read_s)
            with self._lock:
                self.preads += 1
        return call()

    @staticmethod
    def _wait(seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

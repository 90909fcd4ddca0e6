"""Handles of retired shard files: queued by the collector, closed at a safe point.

A compaction retires a shard file while readers may still hold snapshots of it, so
its handle must stay open until the last ``ShardFile`` object goes, which only a
``weakref.finalize`` notices. But the collector runs finalizers inside whatever call
allocated on that thread: inside a ``FileSystem.open`` that holds the file system's
lock, inside a wrapper's intercepted operation. A handle's ``close()`` there may wait
for that same lock, held by its own thread, for ever (``settee verify`` found one:
a compaction's open stalled while the collector closed an old file). So the finalizer
only queues the handle, which takes no lock and does no I/O, and the owner closes
what is queued where it holds nothing of a file system's: its writer between commits,
a readonly handle at each read, and ``close()``. A handle retired after its owner
closed is closed at once: no safe point comes later.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import deque
from typing import Any

from settee.io import FileHandle

__all__ = ["RetiredHandles", "close_handle"]


class RetiredHandles:
    """The handles of one shard's files that no snapshot refers to any more."""

    def __init__(self) -> None:
        # deque.append and popleft are atomic: the finalizer may run on any thread.
        self._queued: deque[FileHandle] = deque()
        self._owner_closed = False

    def close_when_unused(self, file: Any, handle: FileHandle) -> weakref.finalize:
        """Queue ``handle`` when ``file`` is collected. Calling the returned finalizer
        queues it at once (``close_queued`` then closes it)."""
        return weakref.finalize(file, self._retire, handle)

    def _retire(self, handle: FileHandle) -> None:
        self._queued.append(handle)
        if self._owner_closed:  # no safe point comes later (checked after the append,
            self.close_queued()  # so a close() draining at that instant misses nothing)

    def close_queued(self) -> None:
        """Close every queued handle. Call only where this thread holds no lock a
        handle's close may take (no file system call is under way on it). Called at
        every readonly read: an empty queue costs one truth test."""
        while self._queued:
            try:
                handle = self._queued.popleft()
            except IndexError:  # another thread took the last one
                return
            close_handle(handle)

    def owner_closed(self) -> None:
        """The owner closed: close what is queued, and from now on close at once."""
        self._owner_closed = True
        self.close_queued()


def close_handle(handle: FileHandle) -> None:
    with contextlib.suppress(OSError):  # closing: nothing left to protect
        handle.close()

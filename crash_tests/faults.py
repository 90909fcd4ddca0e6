"""File systems that fail or stall on purpose, around settee's io layer.

``FailingFileSystem`` fails the n-th operation with an errno (once, or from then
on); ``BlockingFsync`` holds one fsync until the test lets it go. The io-error
tests, the read-durability checks and the durability mutants' meta-test use them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from settee.io import FileSystemWrapper

__all__ = ["FAILABLE", "BlockingFsync", "FailingFileSystem"]

#: Seconds a held fsync waits for its release before the test counts as deadlocked.
WAIT = 10.0

#: Operations that can fail with an errno on a real disk (close and size never do here).
FAILABLE = ("open", "pread", "append", "pwrite", "fsync", "truncate", "rename", "fsync_dir")


class FailingFileSystem(FileSystemWrapper):
    """Fails the ``fail_at``-th failable operation (counting from 0) with ``code``;
    with ``persistent`` every later failable operation fails too."""

    def __init__(
        self,
        inner: Any,
        fail_at: int,
        code: int,
        persistent: bool,
        only: tuple[str, ...] = FAILABLE,
    ) -> None:
        super().__init__(inner)
        self.fail_at, self.code, self.persistent, self.only = fail_at, code, persistent, only
        self.count = 0
        self.failed: list[str] = []

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        if op in self.only:
            n, self.count = self.count, self.count + 1
            if n == self.fail_at or (self.persistent and n > self.fail_at):
                self.failed.append(op)
                raise OSError(self.code, os.strerror(self.code), path)
        return call()


class BlockingFsync(FileSystemWrapper):
    """Holds the ``nth`` shard-file fsync after ``arm`` until ``release`` is set."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.nth: int | None = None
        self.count = 0
        self.blocked = threading.Event()
        self.release = threading.Event()

    def arm(self, nth: int) -> None:
        self.nth, self.count = nth, 0

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        if op == "fsync" and path.endswith(".settee") and self.nth is not None:
            n, self.count = self.count, self.count + 1
            if n == self.nth:
                self.blocked.set()
                assert self.release.wait(WAIT), "test deadlock: the fsync was never released"
        return call()

"""Durability mutants: engines that break one io rule, as engine factories.

Each factory is ``(path, fs=None, **options) -> db`` (settee's engine on a
wrapped io layer), so ``crash_tests.mutants:NAME`` is an engine spec for
``settee verify --engine ... --only crash`` and for the crash suite's
meta-test (test_mutants.py), which shows each one is caught.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import settee
from settee.io import FileSystemWrapper, OsFileSystem
from settee.spec import format as fmt

__all__ = ["IO_MUTANTS", "tracking"]

Factory = Callable[..., Any]


class _Mutant(FileSystemWrapper):
    """Remembers whether the last append to each file was a header."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.last_was_header: dict[str, bool] = {}
        self.held: dict[str, tuple[int, bytes]] = {}

    def is_header(self, data: bytes) -> bool:
        return fmt.MAGIC in data[: fmt.BLOCK_SIZE + len(fmt.MAGIC) + 1]


class _SkipHeaderFsync(_Mutant):
    """(i) acknowledge before the header is durable: its fsync never happens."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "fsync" and ".settee" in path and self.last_was_header.get(path):
            return None
        return call()


class _SkipDataFsync(_Mutant):
    """(ii) the header may reach the disk before the data it points to."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        if op == "fsync" and ".settee" in path and self.last_was_header.get(path) is False:
            return None
        return call()


class _SkipFsyncDir(_Mutant):
    """(iii) new files and renames never made durable."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        return None if op == "fsync_dir" else call()


class _HeaderBeforeData(_Mutant):
    """(vi) the header is written and synced first, the data after it."""

    def intercept(self, op: str, path: str, call: Any) -> Any:
        return call()


def tracking(cls: type[_Mutant]) -> Factory:
    """An engine factory whose io layer is wrapped by the mutant ``cls``."""

    def factory(path: str, fs: Any = None, **options: Any) -> Any:
        mutant = cls(fs if fs is not None else OsFileSystem())
        original_open = mutant.open

        def open_(p: str, *, create: bool) -> Any:
            handle = original_open(p, create=create)
            inner_append = handle.append
            inner_fsync = handle.fsync

            def append(data: bytes) -> int:
                mutant.last_was_header[p] = mutant.is_header(data)
                if cls is _HeaderBeforeData and p.endswith(".settee"):
                    return _reorder_append(mutant, handle, p, data, inner_append)
                return inner_append(data)

            def fsync() -> None:
                if cls is _HeaderBeforeData and p in mutant.held and not mutant.last_was_header[p]:
                    return  # the data fsync: nothing written yet
                inner_fsync()
                if cls is _HeaderBeforeData and p in mutant.held:
                    offset, data = mutant.held.pop(p)
                    handle.inner.pwrite(offset, data)

            handle.append = append
            handle.fsync = fsync
            return handle

        mutant.open = open_  # type: ignore[method-assign]
        return settee.Database(path, fs=mutant, **options)

    return factory


def _reorder_append(mutant: _Mutant, handle: Any, path: str, data: bytes, append: Any) -> int:
    if not mutant.is_header(data):
        offset = handle.inner.size()
        mutant.held[path] = (offset, data)  # written after the header's fsync
        return offset
    if path in mutant.held:
        offset, held = mutant.held[path]
        handle.inner.pwrite(offset + len(held), data)
        return offset + len(held)
    return append(data)


IO_MUTANTS = {
    "ack_before_header_fsync": _SkipHeaderFsync,
    "no_data_fsync_before_header": _SkipDataFsync,
    "no_fsync_dir": _SkipFsyncDir,
    "header_before_data": _HeaderBeforeData,
}

globals().update({name: tracking(cls) for name, cls in IO_MUTANTS.items()})

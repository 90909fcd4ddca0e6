"""Proof that the suite bites: broken engines must be caught (issue 6, item 6).

Each mutant breaks one durability or integrity rule from outside the engine
(an io wrapper, or a patched decoder); the test runs the crash checker (and,
for checksum mutants, the bit-flip suite) and reports which check caught it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import settee
import settee.file
from crash_tests.campaign import Summary, check_recording
from crash_tests.checker import make_workload, record
from crash_tests.test_corruption import build_clean, check_bit_flips
from crash_tests.test_crash import _known
from settee.io import FileSystemWrapper
from settee.spec import format as fmt

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


def _tracking(cls: type[_Mutant]) -> Factory:
    def factory(path: str, fs: Any, **options: Any) -> Any:
        mutant = cls(fs)
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


def _no_crc_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """(iv) trust a header without checking its crc."""

    def decode_header(logical: bytes, *, path: str = "", offset: int = 0) -> tuple[int, bytes]:
        _, version, _, _ = fmt.HEADER.unpack_from(logical)
        return version, logical[fmt.HEADER_SIZE :]

    monkeypatch.setattr(settee.file, "decode_header", decode_header)


def _no_crc_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """(v) return a term without checking its crc."""

    def decode_frame(frame: bytes, *, path: str = "", offset: int = 0) -> bytes:
        return frame[fmt.FRAME_SIZE :]

    monkeypatch.setattr(settee.file, "decode_frame", decode_frame)


IO_MUTANTS = {
    "ack_before_header_fsync": _SkipHeaderFsync,
    "no_data_fsync_before_header": _SkipDataFsync,
    "no_fsync_dir": _SkipFsyncDir,
    "header_before_data": _HeaderBeforeData,
}
DECODER_MUTANTS = {"header_crc_unchecked": _no_crc_header, "body_crc_unchecked": _no_crc_body}


def _crash_suite(factory: Factory) -> list[str]:
    """What the crash checker says about ``factory`` (known engine bugs left out)."""
    workload = make_workload(20_240_601, ops=30, clients=3, shards=2, compactions=1)
    try:
        rec = record(workload, factory=factory)
        summary = Summary()
        check_recording(rec, summary, factory=factory, samples=4, max_failures=5)
    except Exception as exc:  # the engine blew up: caught as well
        return [f"crash checker: {type(exc).__name__}: {exc}"]
    return [
        f"crash checker: {f.describe()}"
        for f in summary.failures
        if not _known(f.state.kind, f.problems)
    ]


@pytest.mark.parametrize("name", sorted(IO_MUTANTS))
def test_crash_suite_catches_io_mutant(name: str) -> None:
    caught = _crash_suite(_tracking(IO_MUTANTS[name]))
    assert caught, f"mutant {name} survived the crash checker"
    print(f"mutant {name} caught by {caught[0]}")


@pytest.mark.parametrize("name", sorted(DECODER_MUTANTS))
def test_suite_catches_checksum_mutant(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    DECODER_MUTANTS[name](monkeypatch)
    caught = _crash_suite(lambda path, fs, **o: settee.Database(path, fs=fs, **o))
    try:
        check_bit_flips(build_clean(str(tmp_path / "db")), tmp_path)
    except Exception as exc:
        caught.append(f"bit flips: {type(exc).__name__}: {exc}")
    assert caught, f"mutant {name} survived the crash checker and the bit flips"
    print(f"mutant {name} caught by", *caught[:2], sep="\n  ")

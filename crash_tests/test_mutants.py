"""Proof that the suite bites: broken engines must be caught (issue 6, item 6).

Each mutant breaks one durability or integrity rule from outside the engine
(an io wrapper, a patched decoder, or a writer step moved); the test runs the
crash checker (and, for checksum mutants, the bit-flip suite; for the early
publication, the reader tests) and reports which check caught it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import settee
import settee.file
import settee.walker
from settee.proof.crash.campaign import Summary, _op_name, check_recording
from settee.proof.crash.checker import make_workload, record
from settee.proof.crash.corruption import build_clean, check_bit_flips
from settee.proof.crash.fsync_loss import check_fsync_failures
from settee.proof.crash.known_bugs import known_bug
from settee.proof.crash.mutants import ENGINE_MUTANTS, MUTANTS
from settee.proof.crash.read_durability import (
    check_reads_after_failed_fsync,
    check_reads_while_fsync_blocked,
)
from settee.proof.stateful.watchdog import CALL_TIMEOUT_ENV
from settee.spec import format as fmt

Factory = Callable[..., Any]


def _no_crc_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """(iv) trust a header without checking its crc."""

    def decode_header(logical: bytes, *, path: str = "", offset: int = 0) -> tuple[int, bytes]:
        _, version, _, _ = fmt.HEADER.unpack_from(logical)
        return version, logical[fmt.HEADER_SIZE :]

    monkeypatch.setattr(settee.walker, "decode_header", decode_header)


def _no_crc_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """(v) return a term without checking its crc."""

    def decode_frame(frame: bytes, *, path: str = "", offset: int = 0) -> bytes:
        return frame[fmt.FRAME_SIZE :]

    monkeypatch.setattr(settee.file, "decode_frame", decode_frame)


DECODER_MUTANTS = {"header_crc_unchecked": _no_crc_header, "body_crc_unchecked": _no_crc_body}


def _crash_suite(factory: Factory, max_failures: int = 5) -> list[str]:
    """What the crash checker says about ``factory`` (known engine bugs left out)."""
    workload = make_workload(20_240_601, ops=30, clients=3, shards=2, compactions=1)
    try:
        rec = record(workload, factory=factory)
        summary = Summary()
        check_recording(rec, summary, factory=factory, samples=4, max_failures=max_failures)
    except Exception as exc:  # the engine blew up: caught as well
        return [f"crash checker: {type(exc).__name__}: {exc}"]
    return [
        f"crash checker: {f.describe()}"
        for f in summary.failures
        if not known_bug(f.state.kind, f.problems)
    ]


#: Mutants that only one check of the crash checker can catch: name -> what it reports.
CAUGHT_BY = {
    # Nothing acknowledged is lost, so only the read oracle sees the fault.
    "publish_before_header_fsync": "a revision a read returned was lost",
    # The watchdog (settee.proof.stateful.watchdog) ends the reopen that never returns.
    "spin_on_torn_tail": "reopen raised Hung: no engine call returned within 2 s",
    # A torn tail after an acknowledged commit: recovery opened at the commit before it.
    "older_header_after_torn_tail": "recovered the state after",
    # Nothing acknowledged is lost either: the append-only check sees the cut bytes.
    "truncate_torn_tail": "reopening changed",
}
#: Mutants that hang a crash state's check: each costs the (shortened) call timeout,
#: so one is enough. 2 s: a healthy check takes milliseconds, but a loaded CI machine
#: once stretched a 0.5 s budget.
HANGING = {"spin_on_torn_tail"}


#: Mutants the crash checker cannot see (nothing is crashed to show them): name -> the
#: test below that catches them.
NOT_CRASHES = {
    "chunk_crc_unchecked": "test_bit_flips_catch_chunks_read_without_their_crc",
    "keys_corruption_as_not_found": "test_bit_flips_catch_a_damaged_leaf_read_as_absent_keys",
    # The crash checker's disk never fails an fsync.
    "fsync_retried": "test_failed_fsyncs_catch_a_retried_fsync",
}
#: Mutants only a crash inside a compaction shows: the whole checker reaches the
#: compaction's steps after 15 to 30 s; the test below crashes at them alone.
COMPACTION_ONLY = {
    "compact_target_unsynced": "test_crash_after_the_compaction_rename",
    "compact_rename_dir_unsynced": "test_crash_after_the_compaction_catches_an_unsynced_rename",
}


@pytest.mark.parametrize("name", sorted(set(MUTANTS) - set(NOT_CRASHES) - set(COMPACTION_ONLY)))
def test_crash_suite_catches_durability_mutant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in HANGING:
        monkeypatch.setenv(CALL_TIMEOUT_ENV, "2")
    caught = _crash_suite(MUTANTS[name], max_failures=1 if name in HANGING else 5)
    assert caught, f"mutant {name} survived the crash checker"
    assert any(CAUGHT_BY.get(name, "") in c for c in caught), caught
    print(f"mutant {name} caught by {caught[0]}")


def test_reader_tests_catch_publication_before_header_fsync() -> None:
    factory = ENGINE_MUTANTS["publish_before_header_fsync"]
    with pytest.raises(AssertionError, match="while its header fsync was under way"):
        check_reads_while_fsync_blocked("header", factory)
    with pytest.raises(AssertionError, match="whose header fsync failed"):
        check_reads_after_failed_fsync("header", factory)


@pytest.mark.parametrize("name", sorted(DECODER_MUTANTS))
def test_suite_catches_checksum_mutant(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    DECODER_MUTANTS[name](monkeypatch)
    caught = []
    # The bit flips first: they are what a checksum exists for, and cost a third
    # of the crash checker, which runs only when they miss.
    try:
        check_bit_flips(build_clean(str(tmp_path / "db")), tmp_path)
    except Exception as exc:
        caught.append(f"bit flips: {type(exc).__name__}: {exc}")
    if not caught:
        caught = _crash_suite(lambda path, fs, **o: settee.Database(path, fs=fs, **o))
    assert caught, f"mutant {name} survived the bit flips and the crash checker"
    print(f"mutant {name} caught by", *caught[:2], sep="\n  ")


class _RefusesToCompact(settee.Database):
    """A compact() that gives up: no data is lost, the file never shrinks."""

    def compact(self) -> None:
        raise settee.SetteeError("compaction is busy; try again later")


def test_crash_suite_catches_a_refusal_before_any_crash() -> None:
    """Before the crash every call of a workload is valid and the file system is
    healthy: an engine that refuses one is caught, not read as "nothing to hold"
    (the recorder took every SetteeError for a crash's, found by mutation testing)."""
    # The recording alone reports it: no crash state needs checking.
    workload = make_workload(20_240_601, ops=30, clients=3, shards=2, compactions=1)
    rec = record(workload, factory=lambda path, fs, **o: _RefusesToCompact(path, fs=fs, **o))
    assert any("compact raised SetteeError" in p for p in rec.unexpected), rec.unexpected


def test_bit_flips_catch_chunks_read_without_their_crc(tmp_path: Path) -> None:
    """An engine that skips the crc of one kind of term only (attachment chunks,
    ``chunk_crc_unchecked``) fails the bit-flip campaign, which has the engine under
    test write its database and read every damaged copy back."""
    factory = MUTANTS["chunk_crc_unchecked"]
    with pytest.raises(AssertionError, match=r"\(chunk\)"):
        check_bit_flips(build_clean(str(tmp_path / "db"), factory), tmp_path)


def test_bit_flips_catch_a_damaged_leaf_read_as_absent_keys(tmp_path: Path) -> None:
    """An engine whose ``all_docs(keys=...)`` answers ``not_found`` for the keys of a
    damaged by_id leaf (``keys_corruption_as_not_found``) fails the bit-flip campaign,
    which reads every document through a key lookup too (found by mutation testing:
    the campaign read by get and by ranges only, and this mutant passed it)."""
    factory = MUTANTS["keys_corruption_as_not_found"]
    with pytest.raises(AssertionError, match=r"\(node\)"):
        check_bit_flips(build_clean(str(tmp_path / "db"), factory), tmp_path)


def test_failed_fsyncs_catch_a_retried_fsync() -> None:
    """An engine that answers a failed fsync by trying again, and acknowledges the
    commit when the retry succeeds (``fsync_retried``), loses that commit: Linux
    marked its pages clean after the error (SimFS's ``fail_fsync_at``). The check
    fails each fsync of a workload in turn and crashes (found by mutation testing:
    no campaign failed an fsync on a disk that can crash)."""
    problems = check_fsync_failures(MUTANTS["fsync_retried"])
    assert any("was acknowledged, and a crash lost it" in p for p in problems), problems


def test_crash_after_the_compaction_rename_catches_an_unsynced_target() -> None:
    """A compaction that renames its target over the shard file before syncing it
    (``compact_target_unsynced``): a crash just after the rename leaves the name on
    disk and the bytes it names lost, and the reopen fails. The crash checker finds it
    at those steps; they alone are checked here."""
    factory = MUTANTS["compact_target_unsynced"]
    workload = make_workload(20_240_601, ops=30, clients=3, shards=2, compactions=1)
    rec = record(workload, factory=factory)
    renames = [
        step + 1  # crash_points' step N crashes after op N - 1
        for step in range(len(rec.ops))
        if _op_name(rec, step).startswith("rename") and ".compact ->" in _op_name(rec, step)
    ]
    assert renames, "the workload's compaction renamed nothing"
    summary = Summary()
    check_recording(rec, summary, factory=factory, samples=4, steps=renames)
    assert any("reopen raised CorruptionError" in str(f.describe()) for f in summary.failures), [
        f.describe() for f in summary.failures
    ]


def test_crash_after_the_compaction_catches_an_unsynced_rename() -> None:
    """A compaction whose rename over the shard file is never made durable
    (``compact_rename_dir_unsynced``: the directory fsync after it is skipped): a
    crash after later writes were acknowledged can undo the rename, and the old file
    comes back without them. The whole checker reaches those steps after 15 s; the
    steps after the rename alone are checked here."""
    factory = MUTANTS["compact_rename_dir_unsynced"]
    workload = make_workload(20_240_601, ops=30, clients=3, shards=2, compactions=1)
    rec = record(workload, factory=factory)
    renames = [
        step
        for step in range(len(rec.ops))
        if _op_name(rec, step).startswith("rename") and ".compact ->" in _op_name(rec, step)
    ]
    assert renames, "the workload's compaction renamed nothing"
    steps = list(range(renames[-1] + 2, len(rec.ops) + 1))
    summary = Summary()
    check_recording(rec, summary, factory=factory, samples=4, steps=steps, max_failures=1)
    assert summary.failures, f"no crash at steps {steps[0]}..{steps[-1]} was caught"
    print(summary.failures[0].describe())

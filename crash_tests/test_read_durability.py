"""Readers see durable commits only: a commit under way is invisible until its header fsync.

The writer is stopped inside each fsync of a commit in turn while another thread
reads, and one fsync fails outright (the checks are in ``read_durability.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from settee.proof.crash.fsync_loss import check_fsync_failures, fsync_count
from settee.proof.crash.read_durability import (
    FSYNCS,
    check_reads_after_failed_fsync,
    check_reads_while_fsync_blocked,
)

Factory = Callable[..., Any]


@pytest.mark.parametrize("fsync", FSYNCS)
def test_readers_never_see_a_commit_before_its_header_fsync(
    fsync: str, crash_factory: Factory
) -> None:
    check_reads_while_fsync_blocked(fsync, crash_factory)


def test_failed_header_fsync_leaves_reads_at_the_previous_commit(crash_factory: Factory) -> None:
    check_reads_after_failed_fsync("header", crash_factory)


def test_failed_data_fsync_leaves_reads_at_the_previous_commit(crash_factory: Factory) -> None:
    check_reads_after_failed_fsync("data", crash_factory)


def test_a_failed_fsync_loses_nothing_acknowledged(crash_factory: Factory) -> None:
    """Each file fsync of a workload fails in turn the way Linux's does (the writes
    it covered are never written back), then the disk crashes: every revision the
    engine acknowledged is still there, and the database opens and reads
    (``fsync_loss``; its meta-test is ``test_failed_fsyncs_catch_a_retried_fsync``)."""
    assert fsync_count(crash_factory) > 10  # creation, commits, a compaction
    assert check_fsync_failures(crash_factory) == []

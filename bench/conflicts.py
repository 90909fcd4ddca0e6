"""Replicated conflicts: does writing many conflicting revisions of one document
stay linear?

A replicator (``new_edits=false``) may bring thousands of conflicting leaves of
one document in one ``_bulk_docs``. settee once copied the revision tree and
recomputed its winner for each of them, so 2,000 took 16 s and 20,000 would have
taken hours, stalling the shard's writes meanwhile; the proof cannot see that
(the answers were right), and a timed unit test is not allowed, so this group is
where such a regression shows. Each sample writes ``conflicts`` revisions
(``1-<hash>``, all leaves of one document) into a fresh database in one call and
reports revisions per second:

- ``conflicts.reference``: settee vs the reference model (the serialised design,
  which re-derives the tree for each revision: quadratic by design); the target
  is settee not slower than it;
- ``conflicts.growth``: settee at ``conflicts`` revisions vs at a tenth of them;
  the target is at least half the rate, where a quadratic path gives a tenth.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import settee
import settee.reference
from bench.harness import Outcome, Side
from bench.suite import Config, Run, Target

__all__ = ["conflict_ticks", "run_conflicts"]


def conflict_ticks(cfg: Config) -> int:
    """Samples this group takes, for the progress bar."""
    return 2 * 2 * cfg.repeats


def _revisions(count: int) -> list[dict[str, Any]]:
    return [{"_id": "bomb", "_rev": f"1-{i:032x}"} for i in range(count)]


def _side(label: str, opener: Any, run: Run, count: int) -> Side:
    docs = _revisions(count)

    def measure() -> Outcome:
        path = run.path(f"conflicts-{label.replace(' ', '-')}")
        db = opener(path, fsync=False)
        try:
            start = time.perf_counter()
            db.bulk_docs(docs, new_edits=False)
            seconds = time.perf_counter() - start
        finally:
            db.close()
            shutil.rmtree(path, ignore_errors=True)
        return Outcome(count / seconds)

    return Side(label, measure)


def run_conflicts(run: Run) -> None:
    count = run.config.conflicts
    run.progress.stage(f"replicated conflicts ({count:,} leaves of one document)")
    params = {"conflicts": count}
    run.pair(
        "conflicts.reference",
        group="conflicts",
        title=f"{count:,} conflicting revisions of one document in one new_edits=false call",
        unit="revisions/s",
        a=_side("settee", settee.open, run, count),
        b=_side("reference", settee.reference.open, run, count),
        meaning="settee ÷ reference revisions/s (the reference re-derives the tree per revision)",
        params=params,
        target=Target("not_slower", source="a conflict bomb must not stall a shard"),
    )
    small = max(1, count // 10)
    run.pair(
        "conflicts.growth",
        group="conflicts",
        title=f"settee: {count:,} conflicting revisions vs {small:,}",
        unit="revisions/s",
        a=_side(f"{count} leaves", settee.open, run, count),
        b=_side(f"{small} leaves", settee.open, run, small),
        meaning="revisions/s at ten times the leaves ÷ revisions/s at a tenth (1 is linear)",
        params={"conflicts": count, "small": small},
        target=Target("min_ratio", 0.5, "linear in the leaves: a quadratic path gives 0.1"),
    )

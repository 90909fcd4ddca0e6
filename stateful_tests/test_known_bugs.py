"""Minimal reproductions of disagreements the machines found, one per bug.

While a bug is open its test is a strict xfail and ``known_bugs.STEER_AROUND``
keeps the machines away from it (so they can find others meanwhile); once
fixed, the xfail marker and the steering entry go and the test stays as a
regression test named after what broke.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import settee
import settee.reference
from settee.proof.stateful.history import Scenario
from settee.proof.stateful.interleavings import run_scheduled

KNOWN_LEAF_PATH = [
    {"_id": "a", "_rev": "2-b", "v": 1},
    {"_id": "a", "_revisions": {"start": 2, "ids": ["b", "a"]}, "v": 2},
]


@pytest.mark.parametrize("open_db", [settee.reference.open, settee.open], ids=["ref", "engine"])
def test_replicated_known_revision_is_ignored(tmp_path: Path, open_db: Any) -> None:
    """couch_db:prep_and_validate_replicated_updates ignores a new_edits=False doc
    whose revision the tree already holds: no ancestors merged, body kept. (The
    machines first reported the reference's skip as a bug; CouchDB's source
    sides with the reference, and the engine was fixed to match.)"""
    with open_db(str(tmp_path / "db")) as db:
        db.bulk_docs(KNOWN_LEAF_PATH[:1], new_edits=False)
        db.bulk_docs(KNOWN_LEAF_PATH[1:], new_edits=False)
        assert db.get("a", revs=True)["_revisions"] == {"start": 2, "ids": ["b"]}
        assert db.revs_diff({"a": ["1-a"]}) == {"a": {"missing": ["1-a"]}}
        assert db.changes()["results"][0]["changes"] == [{"rev": "2-b"}]


def test_engine_replicated_known_leaf_keeps_its_body(tmp_path: Path) -> None:
    """Regression: the engine stored the re-sent body over the existing leaf."""
    with settee.open(str(tmp_path / "engine"), shards=1) as db:
        db.bulk_docs(KNOWN_LEAF_PATH[:1], new_edits=False)
        db.bulk_docs(KNOWN_LEAF_PATH[1:], new_edits=False)
        assert db.get("a")["v"] == 1


def test_engine_concurrent_deletes_are_linearizable() -> None:
    """Regression: delete checked existence on a snapshot, then the writer refused
    the stale rev with Conflict; the writer now decides existence too."""
    scenario = Scenario(
        {"shards": 1, "read_mode": "parallel"},
        ((("real_delete", "a"),), (("real_delete", "a"),)),
        0,
    )

    def hold_first_delete(labels: list[str]) -> int:
        """Let client 0 pass its existence check, then run client 1 to the end."""
        return next((i for i, lab in enumerate(labels) if lab != "client-0@enqueue"), 0)

    result = run_scheduled("settee:open", scenario, hold_first_delete)
    assert not result.problems, result.report()


def test_changes_resumes_only_from_tokens_both_sides_recorded() -> None:
    """Regression: the machine drew the since-token index from the engine's book alone;
    after a sharded engine's page covered other rows than the reference's, the books
    differed in length and the reference's lookup raised IndexError."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample

    from settee.proof.stateful.equivalence import EquivalenceMachine
    from settee.proof.stateful.observe import ChangesBook

    machine = EquivalenceMachine()
    try:
        machine.book_eng, machine.book_ref = ChangesBook(4), ChangesBook(4)
        for n in range(9):
            machine.book_eng.add(f"{n}-engine", frozenset())
            machine.book_ref.add(n, frozenset())
        machine.book_eng.add("9-engine", frozenset())
        with pytest.raises(NoSuchExample):
            find(machine.since_indexes(), lambda index: index >= len(machine.book_ref.tokens))
    finally:
        machine.teardown()


def raw_error_engine(path: str, **options: Any) -> Any:
    """An engine factory that fails on open with a raw Python error."""
    raise ValueError("a raw error")


class _Scripted:
    """A stand-in for Hypothesis's ``data``: each draw answers by its label."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def draw(self, strategy: Any, label: str = "") -> Any:
        return self.answers[label]


def test_open_report_survives_a_5000_digit_option() -> None:
    """Regression: the machine's report of a raw error on open formatted the options
    with str(), which raises ValueError for an int of 5,000 digits, hiding the finding."""
    from settee.proof.stateful.equivalence import equivalence_machine

    machine = equivalence_machine(f"{__name__}:raw_error_engine")()
    try:
        data = _Scripted({"option": "revs_limit", "revs_limit": "int of 5000 digits"})
        with pytest.raises(AssertionError, match=r"raised a raw error.*ValueError"):
            machine._hostile_open(data)
    finally:
        machine.teardown()

"""The seventh mutation round's gate, file side: each slip of ``mutants_round7.py``
that escaped every test fails the check added for it, and settee passes that check.

Two of the checks are tests of the repository's ``tests/test_damaged_dirs.py`` (settee's
own format, not the proof's), loaded by path: the gate skips them where the proof is
installed without the repository.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

import settee
from settee.proof.crash.campaign import run_campaign
from settee.proof.crash.mutants_round7 import ENGINE_SLIPS, SLIPS

_DAMAGED_DIRS = Path(__file__).resolve().parents[1] / "tests" / "test_damaged_dirs.py"

#: Escaped slips -> (test of tests/test_damaged_dirs.py, its parameters) added to catch them.
DAMAGE_CHECKS: dict[str, tuple[str, dict[str, Any]]] = {
    "check_bodies_unread": (
        "test_check_reads_every_leaf_body_a_document_names",
        {"where": "a node"},
    ),
    "read_found_two_blocks": (
        "test_a_headerless_last_shard_of_more_than_one_block_is_refused",
        {"blocks": 2},
    ),
}

#: Slips found to change nothing (no test can fail): name -> why.
EQUIVALENT = {
    # A second headerless file always breaks the other test beside it: every shard
    # before the first headerless one must be there, and the second one is after it.
    "adopt_two_headerless": "the prefix test refuses two headerless files on its own",
    # Only a handle that opened without a slot knows no generation of its file; a slot
    # looked for in the wrong file counts only with the slot's seq (_load_slot), and a
    # compacted copy's commit of a seq holds what the old file's commit of it held.
    "follower_unknown_generation_kept": "a header found counts only with its seq",
    # The first snapshot is built from the slot's header either way; every later slot
    # is adopted, and a scan opens the file afresh. No read looks at file.header.
    "follower_heads_header_not_adopted": "the snapshot is made from the slot's header",
}


def _damaged_dirs() -> Any:
    if not _DAMAGED_DIRS.exists():
        pytest.skip("the repository's tests/ is not here (an installed proof)")
    spec = importlib.util.spec_from_file_location("_r7_damaged_dirs", _DAMAGED_DIRS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(DAMAGE_CHECKS))
def test_seventh_round_slip_fails_its_damage_check(name: str, tmp_path: Path) -> None:
    test_name, params = DAMAGE_CHECKS[name]
    test = getattr(_damaged_dirs(), test_name)
    with SLIPS[name].applied(), pytest.raises((AssertionError, pytest.fail.Exception)):
        test(tmp_path=tmp_path / "slipped", **params)
    test(tmp_path=tmp_path / "good", **params)


def test_crash_campaign_catches_a_creation_that_never_syncs_its_parent() -> None:
    """The campaign records its workloads with ``strict_mkdir``: a database directory
    whose entry never reached the disk loses every write in it. Before, only
    ``test_crash.py::test_database_directory_entry_is_made_durable`` recorded so, and
    ``settee verify --only crash`` passed the slip."""
    factory = ENGINE_SLIPS["create_parent_unsynced"]
    summary = run_campaign(factory, budget=5.0, seed=0, ops=4, clients=1, shards=1)
    assert summary.failures, summary.report()
    good = run_campaign(
        lambda path, fs=None, **options: settee.Database(path, fs=fs, **options),
        budget=0.5,
        seed=0,
        ops=4,
        clients=1,
        shards=1,
    )
    assert not good.failures, good.report()


def test_every_slip_is_caught_or_has_a_check() -> None:
    """Each slip is named by ``CAUGHT`` (in ``mutants_round7.py``), a check above, or
    ``EQUIVALENT``."""
    from settee.proof.crash.mutants_round7 import CAUGHT

    named = set(CAUGHT) | set(DAMAGE_CHECKS) | set(EQUIVALENT)
    every = set(SLIPS) | set(ENGINE_SLIPS)
    assert named == every, sorted(named ^ every)

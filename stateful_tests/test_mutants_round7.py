"""The seventh mutation round's gate: each mutant that escaped the proof as it stood
fails the check added for it (``stateful_tests/mutants/round7.py`` says which escaped
and what caught the others), and settee passes that check.

Each check is one fixed test of the semantic suites, run once against the mutant at
two shards, the way ``test_mutants.py``'s semantic gates run theirs: well under a
second each.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from settee.proof.plugin import EngineParam, Opener
from settee.proof.stateful.mutants.round7 import ROUND7, ROUND7_CAUGHT

#: Each escape -> the test (``module::name[param]``) added to catch it.
ROUND7_CHECKS = {
    "list_floats_unchecked": "test_hostile_input::test_a_bad_value_is_refused_wherever_it_sits",
    "float_subclass_infinity_passes": (
        "test_hostile_input::test_a_bad_value_is_refused_wherever_it_sits"
    ),
    "keys_subclasses_kept": "test_hostile_input::test_every_str_argument_is_read_as_its_text[_Sub]",
    "bounds_not_plain": "test_hostile_input::test_every_str_argument_is_read_as_its_text[Lying]",
    "since_not_plain": "test_hostile_input::test_every_str_argument_is_read_as_its_text[Lying]",
    "purge_ids_not_plain": "test_hostile_input::test_every_str_argument_is_read_as_its_text[_Sub]",
    "revs_diff_revs_not_plain": (
        "test_hostile_input::test_every_str_argument_is_read_as_its_text[_Sub]"
    ),
    "get_rev_not_plain": "test_hostile_input::test_every_str_argument_is_read_as_its_text[_Sub]",
    "attachment_name_not_plain": (
        "test_hostile_input::test_every_str_argument_is_read_as_its_text[Lying]"
    ),
    "revisions_ids_not_plain": (
        "test_hostile_input::test_every_str_in_a_document_is_read_as_its_text"
    ),
    "field_names_not_plain": "test_hostile_input::test_every_str_in_a_document_is_read_as_its_text",
    "get_fast_path_falsy_flags": (
        "test_hostile_input::"
        "test_each_flag_of_get_is_checked_with_every_other_option_at_its_default[revs]"
    ),
}


def test_every_seventh_round_mutant_is_caught_or_has_a_check() -> None:
    assert set(ROUND7_CHECKS) | set(ROUND7_CAUGHT) == set(ROUND7)
    # Only purge_ids_not_plain is both: the machine caught it, not certainly.
    assert set(ROUND7_CHECKS) & set(ROUND7_CAUGHT) == {"purge_ids_not_plain"}


def _fails(spec: str, check: str, tmp_path: Path) -> BaseException | None:
    """Run ``check`` (``module::test[param]``, a module of ``settee.proof``) on ``spec``
    at two shards, its fixtures built the plugin's way: what it raised, or None."""
    where, _, name = check.partition("::")
    name, _, param = name.partition("[")
    module = importlib.import_module(f"settee.proof.{where}")
    test = getattr(module, name)
    wanted = test.__code__.co_varnames[: test.__code__.co_argcount]
    args: dict[str, Any] = {}
    if param:
        # The one parameter each of these tests takes besides its fixture: a class
        # of the module by name, or a str.
        [extra] = [a for a in wanted if a not in ("engine", "opener")]
        args[extra] = getattr(module, param.rstrip("]"), param.rstrip("]"))
    opener = Opener(
        EngineParam(spec, {"shards": 2, "read_mode": "parallel", "strict": True}), tmp_path
    )
    try:
        if "engine" in wanted:
            args["engine"] = opener.open()
        if "opener" in wanted:
            args["opener"] = opener
        test(**args)
    except (Exception, pytest.fail.Exception) as exc:  # pytest.raises fails with the latter
        return exc
    finally:
        opener.close_all()
    return None


@pytest.mark.parametrize("name", sorted(ROUND7_CHECKS))
def test_seventh_round_mutant_fails_its_check(name: str, tmp_path: Path) -> None:
    (tmp_path / "mutant").mkdir()
    (tmp_path / "good").mkdir()
    check = ROUND7_CHECKS[name]
    caught = _fails(f"settee.proof.stateful.mutants:{name}", check, tmp_path / "mutant")
    assert caught is not None, f"{check} passed on mutant {name} ({ROUND7[name][1]})"
    assert _fails("settee:open", check, tmp_path / "good") is None

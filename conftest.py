"""The checkout's own pytest settings (the proof's fixtures and profiles are the installed
plugin's, ``settee.proof.plugin``).

Temporary directories go to memory: unless ``TMPDIR`` or ``--basetemp`` says where, pytest's
``tmp_path`` (and ``tempfile``, and every subprocess a test starts) uses ``/dev/shm`` when
it is a writable folder with room to spare (``ROOM``: pytest keeps the last three runs'
folders there; a container's default 64 MB ``/dev/shm`` is left alone) and not mounted
``noexec``, as the state machines' scratch directories already do
(``settee.proof.stateful.engines.scratch_dir``). Every database a test opens fsyncs on
creation and on each commit; on this disk the semantic suite spent half its wall time
waiting for them (``impl/proof/test_semantics.py`` alone: 32.5 s in /tmp, 14.8 s in
/dev/shm, the same 1,837 tests). The engine still makes every one of those calls: only the
wait for the disk is gone, and what a crash may lose is the crash suite's subject, checked
on its simulated file system (``crash_tests/simfs.py``), never on the real one.

The longest tests run first (``HEAVY_FIRST``): xdist hands tests out in collection order,
so one of them collected last (CrossHair's, ``tests/`` sorts after the proof) could run
alone on one worker for half a minute after the other had finished everything else.

``collected_modules``: the name and file of every module loaded once collection has
finished, when this run collected what a bare ``pytest --collect-only`` in the checkout
collects, so that a test of what collection imports reads it here instead of collecting
the whole suite again in a subprocess (``tests/test_installed.py``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

SHM = "/dev/shm"
#: The free space /dev/shm must have for the run's temporary folders to go there.
ROOM = 2 * 2**30


def _memory_folder() -> str | None:
    if not (os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK)):
        return None
    stat = os.statvfs(SHM)
    if stat.f_flag & getattr(os, "ST_NOEXEC", 0) or stat.f_bavail * stat.f_frsize < ROOM:
        return None
    return SHM


def pytest_configure(config: pytest.Config) -> None:
    # xdist's workers inherit the environment, so they (and their subprocesses) agree.
    if config.option.basetemp or os.environ.get("TMPDIR"):
        return
    folder = _memory_folder()
    if folder is not None:
        os.environ["TMPDIR"] = folder
        tempfile.tempdir = None  # gettempdir() computes it again, from TMPDIR


#: Node id prefixes of the tests that take 8 s or more on this machine (``pytest -n auto
#: --durations=30``), longest first. Only the order changes: a test not listed runs as before.
HEAVY_FIRST = (
    "tests/test_spec_crosshair.py::test_spec_contracts_hold[revtree.py]",
    "tests/test_http_engine.py::test_the_installed_suites_pass_over_http[test_semantics]",
    "stateful_tests/test_equivalence.py::test_engine_matches_reference",
    "crash_tests/test_crash.py::test_every_step_of_small_workload[torn_byte-20240601]",
    "tests/test_http_engine.py::test_equivalence_machine_passes_over_http",
    "tests/test_spec_crosshair.py::test_spec_contracts_hold[revs.py]",
    "tests/test_cli.py::test_check_pinpoints_every_flipped_bit_in_committed_data",
    "tests/test_verify.py::test_verify_reports_a_call_that_never_returns_and_replays_it",
    "tests/test_btree.py::TestStrKeyMachine",
    "crash_tests/test_crash.py::test_live_crash_stops_every_thread",
    "crash_tests/test_crash.py::test_random_workloads_crash_points_and_states",
    "tests/test_http_engine.py::test_the_installed_suites_pass_over_http[test_hostile_input]",
    "tests/test_verify.py::test_verify_fails_on_a_mutant_and_its_replay_reproduces",
    "tests/test_verify.py::test_verify_passes_on_the_engine_and_counts_every_campaign",
)


def _heaviness(item: pytest.Item) -> int:
    """Where ``item`` goes: its place in ``HEAVY_FIRST``, or after all of them."""
    for rank, prefix in enumerate(HEAVY_FIRST):
        if item.nodeid.startswith(prefix):
            return rank
    return len(HEAVY_FIRST)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_heaviness)  # stable: the rest keep their order


#: ``{module name: file}`` of every loaded module once this run's collection finished.
_MODULES_AFTER_COLLECTION = pytest.StashKey[dict[str, str]]()


def pytest_collection_finish(session: pytest.Session) -> None:
    modules = list(sys.modules.items())
    files = {name: getattr(module, "__file__", None) or "" for name, module in modules}
    session.config.stash[_MODULES_AFTER_COLLECTION] = files


def _collected_everything(config: pytest.Config) -> bool:
    """Whether this run imported what a bare ``pytest --collect-only`` in the checkout
    imports: the ``testpaths`` (named or by default; xdist's workers get them named),
    from this checkout, nothing ignored, no last-failed narrowing."""
    root = Path(__file__).resolve().parent
    here = config.invocation_params.dir
    named = {Path(here, arg.split("::")[0]).resolve() for arg in config.args}
    testpaths = {(root / path).resolve() for path in config.getini("testpaths")}
    narrowed = (config.getoption(name, None) for name in ("ignore", "ignore_glob", "lf"))
    return config.rootpath == root and named == testpaths and not any(narrowed)


@pytest.fixture
def collected_modules(request: pytest.FixtureRequest) -> dict[str, str] | None:
    """``{module name: file}`` after this run's collection, or None when this run
    collected less than the whole checkout (then collect again to know)."""
    if not _collected_everything(request.config):
        return None
    return request.config.stash.get(_MODULES_AFTER_COLLECTION, None)

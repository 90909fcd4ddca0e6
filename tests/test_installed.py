"""The proof as a wheel installs it: no source checkout anywhere (issue 14).

A wheel is built from a copy of this tree and installed with ``--target`` into a
temporary folder. Each check runs this environment's Python with ``-P`` (neither
the script's nor the current folder on sys.path) and ``PYTHONPATH`` naming only
that folder, from an empty directory: settee, settee.proof and the ``pytest11``
entry point come from the wheel (they shadow the editable install, whose finder
comes after the path), the dependencies from this environment, and
``stateful_tests``, ``crash_tests`` and ``bench`` cannot be found.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The checkout's source folders (its .venv is no part of the checkout's code).
SOURCES = tuple(
    f"{ROOT / folder}{os.sep}"
    for folder in ("impl", "spec", "reference", "stateful_tests", "crash_tests", "bench", "tests")
)
#: What a copy of the tree leaves out: repository state, environments, build output.
UNBUILT = shutil.ignore_patterns(
    ".git", ".venv", ".*cache", ".hypothesis", "build", "dist", "*.egg-info", "__pycache__",
    "node_modules", "results",
)  # fmt: skip
#: Semantic and scheduling tests that take a second: enough to show the suites run.
FAST = (
    "test_stale_rev_conflicts_and_changes_nothing"
    " or test_write_admitted_just_before_close_is_resolved"
    " or test_database_directory_entry_is_made_durable"
)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the wheel is installed into; built once per run (xdist workers share
    it through a lock in the run's common temporary folder)."""
    shared = tmp_path_factory.getbasetemp().parent / "settee-wheel"
    shared.mkdir(exist_ok=True)
    target = shared / "site"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "settee").is_dir():
            _build_and_install(shared, target)
    return target


def _build_and_install(work: Path, target: Path) -> None:
    # A copy: building in the checkout would leave build/ behind, whose stale files a
    # later wheel could pick up.
    src = work / "src"
    for old in (src, work / "dist", target):
        shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(ROOT, src, ignore=UNBUILT)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(work / "dist"), str(src)], check=True)
    (wheel,) = (work / "dist").glob("settee-*.whl")
    install = [*pip, "install", "--no-deps", "--no-compile", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True)


def _run(
    site: Path, cwd: Path, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -P ARGS`` in ``cwd`` with only ``site`` added to the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SETTEE_"))}
    env["PYTHONPATH"] = str(site)
    cmd = [sys.executable, "-P", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _output(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-4000:] + run.stderr[-4000:]


def test_the_wheel_holds_the_proof_and_its_plugin(site: Path) -> None:
    proof = site / "settee" / "proof"
    for part in ("plugin.py", "test_semantics.py", "stateful/equivalence.py"):
        assert (proof / part).is_file(), part
    assert (proof / "stateful" / "mutants" / "__init__.py").is_file()
    assert (proof / "crash" / "kill_writer.py").is_file()  # test_kill runs it as a script
    assert (site / "settee" / "spec" / "SEMANTICS.md").is_file()
    assert {p.name for p in site.iterdir()} >= {"settee", "bin"}
    assert not {"tests", "bench", "stateful_tests", "crash_tests"} & {
        p.name for p in site.iterdir()
    }
    (info,) = site.glob("settee-*.dist-info")
    entry_points = (info / "entry_points.txt").read_text()
    assert "[pytest11]\nsettee = settee.proof.plugin" in entry_points


IMPORT_ALL = """
import importlib, importlib.util, pkgutil, sys
import settee.proof
names = [m.name for m in pkgutil.walk_packages(settee.proof.__path__, "settee.proof.")]
for name in names:
    importlib.import_module(name)
for top in ("stateful_tests", "crash_tests", "bench", "impl"):
    assert importlib.util.find_spec(top) is None, top
files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
from_checkout = sorted(f for f in files if f.startswith({sources!r}))
assert not from_checkout, from_checkout
assert settee.__file__.startswith({site!r}), settee.__file__
print(len(names), "modules")
"""


def test_every_proof_module_imports_without_the_checkout(site: Path, tmp_path: Path) -> None:
    script = IMPORT_ALL.format(sources=SOURCES, site=str(site))
    run = _run(site, tmp_path, "-c", script)
    assert run.returncode == 0, _output(run)
    assert int(run.stdout.split()[0]) > 30, run.stdout


def test_settee_verify_runs_from_an_empty_folder(site: Path, tmp_path: Path) -> None:
    run = _run(site, tmp_path, "-m", "settee", "verify", "--examples", "2", "--only", "equivalence")
    assert run.returncode == 0, _output(run)
    assert "settee verify passed" in run.stdout


def test_settee_bench_says_it_needs_a_checkout(site: Path, tmp_path: Path) -> None:
    run = _run(site, tmp_path, "-m", "settee", "bench", "--quick")
    assert run.returncode == 2, _output(run)
    assert "needs a source checkout" in run.stderr


def _pytest(site: Path, cwd: Path, engine: str, *args: str) -> subprocess.CompletedProcess[str]:
    pyargs = ["-m", "pytest", "--pyargs", "settee.proof", "--settee-engine", engine]
    return _run(site, cwd, *pyargs, "-p", "no:cacheprovider", "-q", *args)


def test_pytest_pyargs_collects_the_semantic_suite_machines_and_crash_suite(
    site: Path, tmp_path: Path
) -> None:
    run = _pytest(site, tmp_path, "settee:open", "--collect-only")
    assert run.returncode == 0, _output(run)
    for node in (
        "test_semantics.py::test_stale_rev_conflicts_and_changes_nothing[settee:open[shards=4,",
        "stateful/test_equivalence.py::test_engine_matches_reference[settee:open]",
        "crash/test_crash.py::test_database_directory_entry_is_made_durable",
    ):
        assert node in run.stdout, node
    assert "test_campaign_long" not in run.stdout  # slow campaigns stay out without -m


def test_pytest_pyargs_passes_on_settee_and_fails_on_a_mutant(site: Path, tmp_path: Path) -> None:
    passed = _pytest(site, tmp_path, "settee:open", "-k", FAST)
    assert passed.returncode == 0, _output(passed)
    assert " passed" in passed.stdout
    mutant = "settee.proof.stateful.mutants:lost_update"
    failed = _pytest(site, tmp_path, mutant, "-k", FAST)
    assert failed.returncode == 1, _output(failed)
    assert f"test_stale_rev_conflicts_and_changes_nothing[{mutant}[" in failed.stdout


def test_pytest_pyargs_from_an_editable_install_finds_the_mapped_folders(tmp_path: Path) -> None:
    """Editable, settee.proof.stateful and .crash live in stateful_tests/ and crash_tests/,
    outside impl/proof/: the plugin names them, so the same command runs everything."""
    cmd = [sys.executable, "-P", "-m", "pytest", "--pyargs", "settee.proof", "--collect-only"]
    cmd += ["-q", "-p", "no:cacheprovider"]
    run = subprocess.run(cmd, cwd=tmp_path, text=True, capture_output=True, timeout=120)
    assert run.returncode == 0, _output(run)
    for test in ("test_semantics.py::", "test_engine_matches_reference[", "test_crash.py::"):
        assert test in run.stdout, test


def test_pytest_pyargs_fails_a_semantic_test_whose_call_never_returns(tmp_path: Path) -> None:
    """Without pytest-timeout (``-p no:timeout``) a delete that waits forever for its
    answer fails its test with Hung after three call timeouts, instead of hanging."""
    engine = "settee.proof.stateful.mutants:unanswered_delete"
    cmd = [sys.executable, "-P", "-m", "pytest", "--pyargs", "settee.proof", "-q"]
    cmd += ["-p", "no:cacheprovider", "-p", "no:timeout", "--settee-engine", engine]
    cmd += ["-k", "test_delete_leaves_a_tombstone and unanswered_delete and parallel"]
    env = {**os.environ, "SETTEE_CALL_TIMEOUT": "0.3"}
    run = subprocess.run(cmd, cwd=tmp_path, text=True, capture_output=True, timeout=120, env=env)
    assert run.returncode == 1, _output(run)
    assert "Hung: no engine call returned within 0.9 s" in run.stdout, _output(run)
    assert "3 failed" in run.stdout, _output(run)  # shards 1, 2 and 4


ONCE = """
import json, sys, pytest

class Once:
    def pytest_collection_finish(self, session):
        modules = list(sys.modules.items())
        files = {name: getattr(module, "__file__", None) or "" for name, module in modules}
        print("MODULES", json.dumps(files))

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], plugins=[Once()]))
"""


def _modules_after_a_bare_collection() -> dict[str, str]:
    """``{module name: file}`` once ``pytest --collect-only`` in the checkout collected."""
    run = subprocess.run(
        [sys.executable, "-c", ONCE], cwd=ROOT, text=True, capture_output=True, timeout=120
    )
    assert run.returncode == 0, _output(run)
    (line,) = (line for line in run.stdout.splitlines() if line.startswith("MODULES "))
    files: dict[str, str] = json.loads(line.removeprefix("MODULES "))
    return files


def test_the_checkout_imports_each_proof_module_once(
    collected_modules: dict[str, str] | None,
) -> None:
    """pytest collects stateful_tests/ and crash_tests/ by path; with importlib import
    mode their modules are still loaded once, under their settee.proof names (package
    __init__ files, which hold no state, are left out).

    A run that collected the whole checkout (the gate) has loaded exactly what a bare
    ``pytest --collect-only`` loads, and conftest.py kept the list at the end of its
    collection; any other run collects the checkout again in a subprocess."""
    files = collected_modules or _modules_after_a_bare_collection()
    names = collections.defaultdict(set)
    for name, path in files.items():
        if path.startswith(SOURCES) and not path.endswith("__init__.py"):
            names[path].add(name)
    twice = {path: sorted(found) for path, found in names.items() if len(found) > 1}
    assert not twice, twice
    assert len(names) > 50, sorted(names)  # the proof and the engine

"""settee's pytest plugin: the proof against any engine, from any folder.

Registered as the ``pytest11`` entry point ``settee``, so pytest loads it in every
environment where settee is installed::

    pytest --pyargs settee.proof --settee-engine mypkg.store:open

runs the semantic suite (``settee.proof.test_semantics``, ``test_hostile_input``), the
state machines (``settee.proof.stateful``) and the crash suite (``settee.proof.crash``;
its engine tests run where the factory accepts ``fs=``, and are skipped otherwise).

What it adds:

* the Hypothesis profiles ``ci``, ``verify`` and ``long`` (``budget.register_profiles``),
  picked by ``--hypothesis-profile NAME`` or ``SETTEE_HYPOTHESIS_PROFILE``; the proof's
  default, ``ci``, is loaded only when the command line names the proof (``--pyargs
  settee.proof...`` or a path inside it), so other sessions keep their own settings;
* ``--settee-engine MODULE:CALLABLE`` (repeatable; ``SETTEE_ENGINE``, comma separated, is
  its environment twin): the engines under test, ``settee:open`` by default;
* the fixtures ``engine_param`` (each implementation: the reference, then each engine over
  shards 1, 2, 4 x both read modes when its factory takes ``shards``; with
  ``--settee-grid one`` each engine once, over 4 shards when its factory takes
  ``shards``, and no reference: what ``settee verify``'s semantics campaign runs),
  ``opener``,
  ``engine``, ``reopen`` (the semantic suite), ``engine_spec`` (the machines: each engine)
  and ``crash_factory`` (the crash suite: the first engine that is not the reference);
  at teardown ``settee check`` must find nothing wrong in any database settee's own
  engine left on disk; a test whose engine never returns fails with ``Hung`` after three
  call timeouts (``settee.proof.stateful.watchdog``);
* the proof's ``slow`` campaigns are deselected unless ``-m`` chooses markers;
  ``--settee-first N`` keeps the first N tests collected (a smoke run);
* one summary line of what the proof checked (steps, histories, crash states, ...).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from settee.engines import load_factory
from settee.proof.stateful import watchdog
from settee.proof.stateful.budget import PROFILE_ENV, register_profiles
from settee.proof.stateful.engines import (
    DEFAULT_ENGINE,
    REFERENCE,
    accepts_option,
    engine_specs,
)

__all__ = ["EngineParam", "Opener", "engine_params", "proof_dirs"]

# Registered on import, before Hypothesis's own plugin reads --hypothesis-profile.
register_profiles()

SHARDS = (1, 2, 4)
READ_MODES = ("parallel", "serialized")
GRIDS = ("full", "one")
#: The packages of the proof; in an editable install the mapped ones live outside
#: settee/proof/ (in stateful_tests/ and crash_tests/).
PACKAGES = ("settee.proof", "settee.proof.stateful", "settee.proof.crash")
#: What the proof's tests record with ``record_property``, summed for the summary line.
COUNTS = (
    "steps",
    "histories",
    "interleavings",
    "crash_states",
    "corruptions",
    "truncations",
    "kills",
)


def proof_dirs() -> dict[str, Path]:
    """Each package of the proof -> its folder, wherever it is installed."""
    dirs = {}
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        # Installed with this module, and mapped to one folder each (pyproject.toml).
        assert spec is not None and spec.submodule_search_locations, name
        (folder,) = spec.submodule_search_locations
        dirs[name] = Path(folder).resolve()
    return dirs


def _in_proof(path: Path, dirs: dict[str, Path]) -> bool:
    return any(path.resolve().is_relative_to(d) for d in dirs.values())


# -- options, profiles, collection ----------------------------------------------------------

#: proof_dirs(), computed once per session.
_DIRS = pytest.StashKey[dict[str, Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("settee", "settee's proof")
    group.addoption(
        "--settee-engine",
        action="append",
        default=[],
        metavar="MODULE:CALLABLE",
        help="engine factory the proof tests instead of settee:open (repeatable; "
        "env SETTEE_ENGINE, comma separated)",
    )
    group.addoption(
        "--settee-grid",
        choices=GRIDS,
        default="full",
        help="full: the reference, then each engine over shards 1, 2, 4 x both read "
        "modes; one: each engine once (4 shards when it takes shards), no reference",
    )
    group.addoption(
        "--settee-first",
        type=int,
        default=None,
        metavar="N",
        help="run only the first N tests collected (a smoke run)",
    )


def _choose_profile(config: pytest.Config, default: str | None) -> None:
    """Load ``SETTEE_HYPOTHESIS_PROFILE`` if set, else ``default`` unless
    ``--hypothesis-profile`` chose one (Hypothesis's plugin has loaded it then)."""
    name = os.environ.get(PROFILE_ENV)
    if not name and not config.getoption("hypothesis_profile", default=None):
        name = default
    if name:
        settings.load_profile(name)


def _names_the_proof(config: pytest.Config) -> bool:
    """Whether the command line asks for the proof: a settee.proof package with --pyargs,
    or a path inside one of its folders."""
    for arg in config.args:
        target = arg.split("::")[0]
        if config.option.pyargs and (
            target == "settee.proof" or target.startswith("settee.proof.")
        ):
            return True
        if _in_proof(Path(config.invocation_params.dir, target), config.stash[_DIRS]):
            return True
    return False


@pytest.hookimpl(trylast=True)  # after Hypothesis's plugin, so the environment variable wins
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long campaigns, excluded from the default run")
    config.stash[_DIRS] = proof_dirs()
    _choose_profile(config, default="ci" if _names_the_proof(config) else None)
    config.pluginmanager.register(_Checked(config), "settee-proof-checked")
    if config.option.pyargs and "settee.proof" in config.args:
        # An editable install maps the subpackages to folders outside settee/proof/, where
        # collecting settee.proof would not find them: name them too.
        dirs = config.stash[_DIRS]
        for name, folder in dirs.items():
            if not folder.is_relative_to(dirs["settee.proof"]) and name not in config.args:
                config.args.append(name)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the proof's ``slow`` campaigns unless ``-m`` says which markers run,
    then all but the first ``--settee-first`` tests."""
    if not config.option.markexpr:
        dirs = config.stash[_DIRS]
        slow = [i for i in items if i.get_closest_marker("slow") and _in_proof(i.path, dirs)]
        if slow:
            config.hook.pytest_deselected(items=slow)
            left_out = set(map(id, slow))
            items[:] = [i for i in items if id(i) not in left_out]
    first = config.getoption("settee_first", default=None)
    if first is not None and len(items) > max(first, 0):
        keep = max(first, 0)
        config.hook.pytest_deselected(items=items[keep:])
        del items[keep:]


# -- the engines under test -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineParam:
    """One implementation under test: a factory spec plus the options it is
    opened with. ``skip_reason`` is set when the factory cannot be loaded."""

    spec: str
    options: dict[str, Any] = field(default_factory=dict)
    skip_reason: str | None = None

    @property
    def id(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.spec}[{extra}]" if extra else self.spec

    def factory(self) -> Callable[..., Any]:
        return load_factory(self.spec)


def engine_params(specs: list[str], grid: str = "full") -> list[EngineParam]:
    """The reference plus each engine spec over the shards x read_mode grid; with
    ``grid="one"`` each engine spec once, over the most shards when it takes them."""
    if grid == "one":
        return [_one_param(spec) for spec in specs]
    params = []
    try:
        load_factory(REFERENCE)
        params.append(EngineParam(REFERENCE))
    except LookupError as exc:  # reported as a skip so the engine can still be tested
        params.append(EngineParam(REFERENCE, skip_reason=str(exc)))
    for spec in specs:
        try:
            factory: Callable[..., Any] | None = load_factory(spec)
            reason = None
        except LookupError as exc:
            factory, reason = None, str(exc)
        if factory is not None and not accepts_option(factory, "shards"):
            params.append(EngineParam(spec))
            continue
        for shards in SHARDS:
            for mode in READ_MODES:
                opts: dict[str, Any] = {"shards": shards, "read_mode": mode}
                if spec == DEFAULT_ENGINE:
                    # Strict mode: every commit checks what it changed (impl/strict.py).
                    opts["strict"] = True
                params.append(EngineParam(spec, opts, reason))
    return params


def _one_param(spec: str) -> EngineParam:
    try:
        factory = load_factory(spec)
    except LookupError as exc:
        return EngineParam(spec, skip_reason=str(exc))
    return EngineParam(spec, {"shards": max(SHARDS)} if accepts_option(factory, "shards") else {})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_param" in metafunc.fixturenames:
        params = []
        grid = metafunc.config.getoption("settee_grid", default="full")
        for p in engine_params(engine_specs(metafunc.config), grid):
            marks = [pytest.mark.skip(reason=p.skip_reason)] if p.skip_reason else []
            params.append(pytest.param(p, id=p.id, marks=marks))
        metafunc.parametrize("engine_param", params)
    if "engine_spec" in metafunc.fixturenames:
        specs = engine_specs(metafunc.config)
        metafunc.parametrize("engine_spec", specs, ids=specs)


class Opener:
    """Opens databases of one implementation and closes them all at teardown.

    Tests that need other options (``revs_limit=5``) or a second database ask
    for ``opener`` directly; ``engine`` and ``reopen`` are built on it.
    """

    def __init__(self, param: EngineParam, tmp_path: Path) -> None:
        self.param = param
        self.path = str(tmp_path / "db")
        self._factory = param.factory()
        self._opened: list[Any] = []
        self._opened_all: list[Any] = []
        self._options: dict[int, tuple[str, dict[str, Any]]] = {}

    def open(self, path: str | None = None, **options: Any) -> Any:
        """Open ``path`` (default: this test's path) with the parameter's
        options plus ``options``."""
        path = self.path if path is None else path
        merged = {**self.param.options, **options}
        db = self._factory(path, **merged)
        self._opened.append(db)
        self._opened_all.append(db)
        self._options[id(db)] = (path, dict(options))
        return db

    def reopen(self, db: Any, **options: Any) -> Any:
        """Close ``db`` and open the same path with the same options
        (``options`` override them), as a restart would."""
        path, previous = self._options[id(db)]
        db.close()
        return self.open(path, **{**previous, **options})

    def close_all(self) -> None:
        errors = []
        for db in reversed(self._opened):
            try:
                db.close()
            except Exception as exc:  # close every database even if one fails
                errors.append(exc)
        self._opened.clear()
        if errors:
            raise errors[0]

    def check_files(self) -> None:
        """The shared checker finds nothing wrong in any database the engine left on
        disk (only settee's own engine has files it can read)."""
        from settee.check import check_database
        from settee.database import Database

        opened = self._opened_all
        paths = {self._options[id(db)][0] for db in opened if isinstance(db, Database)}
        for path in sorted(paths):
            problems = list(check_database(path))
            assert not problems, f"settee check found problems in {path}: {problems}"


@pytest.fixture
def opener(engine_param: EngineParam, tmp_path: Path) -> Iterator[Opener]:
    """An :class:`Opener` for the implementation under test."""
    op = Opener(engine_param, tmp_path)
    # A semantic test takes well under a second: one whose engine never returns (or
    # never closes) fails with Hung after three call timeouts instead of hanging the
    # session, with or without pytest-timeout.
    with watchdog.watching(3 * watchdog.call_timeout()):
        yield op
        op.close_all()
    op.check_files()


@pytest.fixture
def engine(opener: Opener) -> Any:
    """An open, empty database of the implementation under test on tmp_path;
    closed at teardown."""
    return opener.open()


@pytest.fixture
def reopen(opener: Opener) -> Callable[..., Any]:
    """``reopen(db, **options) -> db2``: close ``db`` and reopen its path with
    the same options, for persistence cases."""
    return opener.reopen


@pytest.fixture(scope="session")
def crash_factory(pytestconfig: pytest.Config) -> Callable[..., Any]:
    """The engine the crash suite tests, called as ``factory(path, fs=..., **options)``:
    the first ``--settee-engine``/``SETTEE_ENGINE`` spec that is not the reference, else
    ``settee.Database``. An engine that does not accept ``fs=`` (settee's io layer)
    cannot be crashed by the simulated file system: its crash tests are skipped."""
    from settee.proof.crash.checker import default_factory

    chosen = [s for s in engine_specs(pytestconfig) if s != REFERENCE]
    if not chosen or chosen[0] == DEFAULT_ENGINE:
        return default_factory
    factory = load_factory(chosen[0])
    if not accepts_option(factory, "fs"):
        pytest.skip(f"{chosen[0]} does not accept fs= (settee's io layer): no crash tests")
    return factory


# -- what the proof checked -----------------------------------------------------------------


class _Checked:
    """Sums what the proof's tests recorded (xdist workers send their user properties
    with each report) and prints it after the run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.totals: dict[str, int] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" or not report.user_properties:
            return
        if not _in_proof(self.config.rootpath / report.location[0], self.config.stash[_DIRS]):
            return
        for name, value in report.user_properties:
            if name in COUNTS and isinstance(value, int):
                self.totals[name] = self.totals.get(name, 0) + value

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.totals:
            parts = ", ".join(f"{k.replace('_', ' ')} checked: {n}" for k, n in self.totals.items())
            terminalreporter.write_line(f"settee proof: {parts}")

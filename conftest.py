"""Shared pytest configuration for tests/, stateful_tests/ and crash_tests/.

Hypothesis profiles and the ``engine`` fixture live here so every test folder shares them.

Hypothesis profiles (chosen with ``SETTEE_HYPOTHESIS_PROFILE``, default ``ci``):

* ``ci`` — fast enough for every push, derandomized (the same examples on every run,
  so a red CI is reproducible and a green one is not luck); failures print a
  reproducer blob.
* ``verify`` — the long campaign (2000 examples per test).

The ``engine`` fixture runs one semantic suite against every implementation
(TinyDB's ``db`` fixture over its storages; ZODB's storage mixins). An
implementation is a factory named ``"MODULE:CALLABLE"`` that is called as
``CALLABLE(path, **options)`` and returns an open database:

* ``settee.reference:open`` always;
* ``settee:open`` with ``shards`` 1, 2, 4 and ``read_mode`` ``parallel`` and
  ``serialized``, in strict mode (every commit checks what it changed).

``--engine MODULE:CALLABLE`` (repeatable) or ``SETTEE_ENGINE`` (comma
separated) replaces ``settee:open`` as the engine under test. A replacement
whose signature accepts ``shards`` (or ``**kwargs``) runs over the same
shards x read_mode grid; otherwise it is called with no extra options.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from settee.engines import load_factory

__all__ = ["EngineParam", "Opener"]

settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "verify",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# "long" is the name the proof issues use for the verify campaign's profile.
settings.register_profile("long", settings.get_profile("verify"))
settings.load_profile(os.environ.get("SETTEE_HYPOTHESIS_PROFILE", "ci"))


REFERENCE = "settee.reference:open"
DEFAULT_ENGINE = "settee:open"
SHARDS = (1, 2, 4)
READ_MODES = ("parallel", "serialized")


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


def _accepts_shards(factory: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: assume the full API
        return True
    return any(p.name == "shards" or p.kind is p.VAR_KEYWORD for p in params)


def engine_params(engine_specs: list[str]) -> list[EngineParam]:
    """The reference plus each engine spec over the shards x read_mode grid."""
    params = []
    try:
        load_factory(REFERENCE)
        params.append(EngineParam(REFERENCE))
    except LookupError as exc:  # reported as a skip so the engine can still be tested
        params.append(EngineParam(REFERENCE, skip_reason=str(exc)))
    for spec in engine_specs:
        try:
            factory: Callable[..., Any] | None = load_factory(spec)
            reason = None
        except LookupError as exc:
            factory, reason = None, str(exc)
        if factory is not None and not _accepts_shards(factory):
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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine",
        action="append",
        default=[],
        metavar="MODULE:CALLABLE",
        help="engine factory to test instead of settee:open (repeatable; "
        "env SETTEE_ENGINE, comma separated)",
    )


def _engine_specs(config: pytest.Config) -> list[str]:
    specs = list(config.getoption("--engine"))
    env = os.environ.get("SETTEE_ENGINE", "")
    specs += [s.strip() for s in env.split(",") if s.strip()]
    return specs or [DEFAULT_ENGINE]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "engine_param" not in metafunc.fixturenames:
        return
    params = []
    for p in engine_params(_engine_specs(metafunc.config)):
        marks = [pytest.mark.skip(reason=p.skip_reason)] if p.skip_reason else []
        params.append(pytest.param(p, id=p.id, marks=marks))
    metafunc.parametrize("engine_param", params)


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


@pytest.fixture
def opener(engine_param: EngineParam, tmp_path: Path) -> Iterator[Opener]:
    """An :class:`Opener` for the implementation under test."""
    op = Opener(engine_param, tmp_path)
    yield op
    op.close_all()
    check_files(op)


def check_files(op: Opener) -> None:
    """Teardown: the shared checker finds nothing wrong in any database the
    engine left on disk (only settee's own engine has files it can read)."""
    from settee.check import check_database
    from settee.database import Database

    paths = {op._options[id(db)][0] for db in op._opened_all if isinstance(db, Database)}
    for path in sorted(paths):
        problems = list(check_database(path))
        assert not problems, f"settee check found problems in {path}: {problems}"


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

"""``settee verify``: run the whole proof against an engine for a time budget.

Campaigns (each in its own process, ``--jobs`` at a time):

* ``equivalence`` — the Hypothesis state machine: engine and reference driven
  with the same calls, every answer compared (``settee.proof.stateful.equivalence``);
* ``interleavings`` — concurrent clients scheduled one io step at a time,
  each history checked for linearizability against the reference;
* ``stress`` — real threads, seeded, histories checked the same way;
* ``crash`` — crash at every io step into every crash-state kind, reopen,
  compare with the reference after a prefix of each shard's commits; and, in its
  first batch, fail each fsync of a small workload in turn as Linux fails one
  (the writes it covered are lost), crash, and find every acknowledged revision
  (``settee.proof.crash.fsync_loss``);
* ``corruption`` — single bit flips in every stored term of a real database:
  every affected read raises CorruptionError, unaffected reads are exact;
* ``semantics`` — the semantic suite (``settee.proof.test_semantics``, one fixed test
  per rule CouchDB documents, and ``test_hostile_input``) against the engine over 4
  shards, once: the rules a random machine may take long to draw (a recreation's
  tie-break, an edit of a deleted losing leaf) are asked for by name.

Campaigns repeat in short seeded batches until their share of ``--minutes``
runs out (or once with ``--examples N``). A failure stops its campaign, prints
the shrunk reproducer and saves it (JSON) for ``settee verify --replay FILE``.
The campaigns are the installed proof (``settee.proof.stateful``,
``settee.proof.crash``), so verify runs wherever settee is installed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import multiprocessing
import os
import queue
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait as wait_for_processes
from typing import Any, TextIO

from settee.engines import load_factory
from settee.spec.errors import SetteeError

__all__ = ["CAMPAIGNS", "CampaignResult", "add_parser", "run_verify"]

CAMPAIGNS = ("equivalence", "interleavings", "stress", "crash", "corruption", "semantics")
#: Hypothesis examples per batch: short enough that the time budget is kept.
BATCH_EXAMPLES = {"equivalence": 25, "interleavings": 40}
#: Seconds a failure may always spend shrinking, even when the budget is spent: the
#: smallest reproducer found by then is reported (so --minutes ends within this margin).
SHRINK_FLOOR = 10.0


@dataclass(slots=True)
class CampaignResult:
    """One campaign's totals; a failure carries its reproducer and replay token."""

    name: str
    engine: str
    batches: int = 0
    examples: int = 0
    operations: int = 0
    interleavings: int = 0
    histories: int = 0
    crash_states: int = 0
    corruptions: int = 0
    tests: int = 0
    failures: int = 0
    seconds: float = 0.0
    skipped: str = ""
    reproducer: str = ""
    replay: dict[str, Any] = field(default_factory=dict)


# -- one batch of each campaign (runs in a worker process) --------------------------------------


def _stateful_batch(result: CampaignResult, seed: int, examples: int | None) -> None:
    from settee.proof.stateful import campaigns

    if result.name == "stress":
        # The fixed compaction check (a second) in one batch of ten: it took most of
        # each batch's time from the random histories (found in review).
        summary = campaigns.run_stress(
            result.engine,
            runs=examples or 4,
            seed=seed,
            compaction_check=result.batches % 10 == 0,
        )
    else:
        run = getattr(campaigns, f"run_{result.name}")
        count = examples or BATCH_EXAMPLES[result.name]
        summary = run(result.engine, max_examples=count, seed=seed)
    result.examples += summary.examples
    result.operations += summary.steps
    result.histories += summary.histories
    result.interleavings += summary.interleaving_steps
    if summary.failures:
        result.failures += summary.failures
        result.reproducer = _without_shrink_warning(summary.reproducer)
        result.replay = {"kind": "stateful", "token": summary.replay}


#: Hypothesis's warning when shrinking stops at MAX_SHRINKING_SECONDS, which
#: ``_shrinking_bounded_by`` lowers: it would say five minutes and ask for a bug report.
_SHRINK_WARNING = re.compile(
    r"WARNING: Hypothesis has spent more than five minutes.*?\n\nPLEASE REPORT THIS[^\n]*\n",
    re.DOTALL,
)


def _without_shrink_warning(reproducer: str) -> str:
    return _SHRINK_WARNING.sub("(shrinking stopped at its time limit)\n", reproducer)


@contextlib.contextmanager
def _shrinking_bounded_by(seconds: float) -> Iterator[None]:
    """Make Hypothesis stop shrinking after ``seconds`` (it reports the smallest failing
    example found so far). Hypothesis has no public setting for this; its engine reads
    the module constant MAX_SHRINKING_SECONDS (default 300 s) each time it shrinks."""
    from hypothesis.internal.conjecture import engine

    previous = engine.MAX_SHRINKING_SECONDS
    engine.MAX_SHRINKING_SECONDS = int(seconds) + 1
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = previous


def _crash_batch(result: CampaignResult, seed: int, budget: float) -> None:
    from settee.proof.crash.campaign import run_campaign

    if result.batches == 0:
        _fsync_failures(result, seed)
        if result.failures:
            return
    summary = run_campaign(load_factory(result.engine), budget=budget, seed=seed)
    result.crash_states += summary.states_checked
    if summary.failures:
        failure = summary.failures[0]
        result.failures += len(summary.failures)
        result.reproducer = failure.describe() + "\n" + "\n".join(failure.problems)
        result.replay = {"kind": "crash", "seed": failure.seed, "step": failure.step}


def _fsync_failures(result: CampaignResult, seed: int) -> None:
    """Every fsync of a small workload failing in turn, then a crash (fsyncgate)."""
    from settee.proof.crash.fsync_loss import check_fsync_failures

    problems = check_fsync_failures(load_factory(result.engine))
    if problems:
        result.failures += 1
        result.reproducer = "failed fsyncs, then a crash:\n" + "\n".join(problems[:20])
        result.replay = {"kind": "fsync", "seed": seed}


def _corruption_batch(result: CampaignResult, seed: int) -> None:
    from pathlib import Path

    from settee.proof.crash.corruption import build_clean, check_bit_flips

    with tempfile.TemporaryDirectory(prefix="settee-verify-") as tmp:
        # The engine under test writes the database and reads every damaged copy.
        clean = build_clean(os.path.join(tmp, "clean"), load_factory(result.engine))
        try:
            result.corruptions += check_bit_flips(clean, Path(tmp), seed=seed)
        except Exception as exc:  # the engine's error: reported, never a crashed pool
            result.failures += 1
            result.reproducer = f"bit flips with seed={seed}: {exc}"
            result.replay = {"kind": "corruption", "seed": seed}


#: The semantic suites the ``semantics`` campaign runs.
SEMANTIC_SUITES = ("settee.proof.test_semantics", "settee.proof.test_hostile_input")


def _semantic_batch(result: CampaignResult, examples: int | None, test: str = "") -> None:
    """Run the semantic suites against the engine, once (the first ``examples`` tests
    only, when given; only the test function ``test`` of them, when given: a replay),
    stopping at the first failure, which becomes the reproducer."""
    import pytest

    outcomes = _Outcomes(test)
    args = [
        # No configuration from the folder it runs in: another project's pytest.ini
        # could add options or stop test_*.py files from being collected.
        *("-c", os.devnull, "-vv", "-x", "--tb=short", "-p", "no:cacheprovider"),
        *("--import-mode=importlib", "--settee-grid=one", f"--settee-engine={result.engine}"),
        *([f"--settee-first={examples}"] if examples is not None else []),
        "--pyargs",
        *SEMANTIC_SUITES,
    ]
    code = pytest.main(args, plugins=[outcomes])
    result.tests += outcomes.passed
    if outcomes.failed is not None:
        report = outcomes.failed
        result.failures += 1
        where = report.nodeid.lstrip(":")  # the suite's path relative to the rootdir: none
        result.reproducer = f"{where} failed:\n{report.longreprtext[-6000:]}"
        name = report.nodeid.split("::")[-1].split("[")[0]
        result.replay = {"kind": "semantics", "test": name}
    elif code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        result.failures += 1
        result.reproducer = f"the semantic suite did not run: pytest exited {code!r}"


class _Outcomes:
    """A pytest plugin counting the tests that passed and keeping the first failure;
    with ``test``, it keeps only the tests of that function."""

    def __init__(self, test: str = "") -> None:
        self.test = test
        self.passed = 0
        self.failed: Any = None

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        if self.test:
            items[:] = [i for i in items if getattr(i, "originalname", i.name) == self.test]

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed and self.failed is None:
            self.failed = report
        elif report.when == "call" and report.passed:
            self.passed += 1


def _unsupported(name: str, engine: str) -> str:
    """Why campaign ``name`` cannot run on ``engine`` ('' if it can)."""
    if name in ("corruption", "crash"):
        from settee.proof.stateful.engines import accepts_option

        if not accepts_option(load_factory(engine), "fs"):
            # The corruption campaign damages settee's own files, the crash one
            # its simulated disk: both need an engine built on settee's io layer.
            return "needs an engine built on settee's io layer (a factory accepting fs=); skipped"
    return ""


def run_one(
    name: str,
    engine: str,
    seed: int,
    budget: float,
    examples: int | None,
    progress: Any,
    shrink_floor: float = SHRINK_FLOOR,
) -> CampaignResult:
    """Run campaign ``name`` until ``budget`` seconds pass (or once, with ``examples``)."""
    result = CampaignResult(name, engine)
    if why := _unsupported(name, engine):
        result.skipped = why
        return result
    started = time.monotonic()
    deadline = started + budget
    with contextlib.redirect_stdout(io.StringIO()):
        while not result.failures:
            batch_seed = seed * 1000 + result.batches
            if name == "crash":
                left = 5.0 if examples is not None else deadline - time.monotonic()
                _crash_batch(result, batch_seed, max(5.0, min(60.0, left)))
            elif name == "corruption":
                _corruption_batch(result, batch_seed)
            elif name == "semantics":
                _semantic_batch(result, examples)
            else:
                left = 60.0 if examples is not None else deadline - time.monotonic()
                with _shrinking_bounded_by(max(shrink_floor, left)):
                    _stateful_batch(result, batch_seed, examples)
            result.batches += 1
            result.seconds = time.monotonic() - started
            progress.put((name, _progress_line(result)))
            if examples is not None or name == "semantics" or time.monotonic() >= deadline:
                break  # the semantic suite is fixed: once is all it asks
    return result


def _progress_line(r: CampaignResult) -> str:
    counts = [
        f"{r.batches} batches",
        f"{r.operations} ops" if r.operations else "",
        f"{r.histories} histories" if r.histories else "",
        f"{r.crash_states} crash states" if r.crash_states else "",
        f"{r.corruptions} corruptions" if r.corruptions else "",
        f"{r.tests} tests" if r.tests else "",
        f"{r.failures} FAILED" if r.failures else "",
    ]
    return f"{r.name:13} {', '.join(c for c in counts if c)} ({r.seconds:.0f} s)"


# -- the command --------------------------------------------------------------------------------


def run_verify(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run every campaign; print live progress and a summary (to ``out``, by default
    the ``sys.stdout`` of the moment); 1 on any failure."""
    out = sys.stdout if out is None else out
    if args.call_timeout is not None:
        # The campaigns' processes are spawned from here and inherit the environment.
        from settee.proof.stateful.watchdog import CALL_TIMEOUT_ENV

        os.environ[CALL_TIMEOUT_ENV] = repr(args.call_timeout)
    if args.replay:
        return _replay(args.replay, out)
    if args.seed is None:
        # Fresh per run: with a fixed default, every run without --seed drew the same
        # examples (found by mutation testing: a mutant missed once was missed always).
        args.seed = random.SystemRandom().randrange(1 << 20)
    names = [c for c in CAMPAIGNS if not args.only or c in args.only.split(",")]
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(names)))
    rounds = -(-len(names) // jobs)
    budget = args.minutes * 60 / rounds
    share = f"{args.examples} examples each" if args.examples else f"{budget:.0f} s each"
    out.write(
        f"settee verify: engine {args.engine}, {len(names)} campaigns on {jobs} processes, "
        f"{share}, seed {args.seed}\n"
    )
    results = _run_all(names, args, jobs, budget, out)
    _print_summary(results, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "engine": args.engine,
                    "seed": args.seed,
                    "campaigns": [asdict(r) for r in results],
                },
                f,
                indent=2,
            )
    failed = [r for r in results if r.failures]
    for r in failed:
        path = os.path.abspath(f"settee-verify-{r.name}-failure.json")
        with open(path, "w") as f:
            json.dump(asdict(r), f, indent=2)
        again = f"replay: settee verify --replay {path}" if r.replay else f"saved in {path}"
        out.write(f"\n== {r.name} failed ==\n{r.reproducer}\n{again}\n")
    return 1 if failed else 0


def _run_all(
    names: list[str], args: argparse.Namespace, jobs: int, budget: float, out: TextIO
) -> list[CampaignResult]:
    context = multiprocessing.get_context("spawn")
    # A campaign's own watchdogs turn a hung call into a failure; this one ends a run
    # that still does not finish (a hang in C code, a signal the engine swallows).
    rounds = -(-len(names) // jobs)
    overdue = None if args.examples else time.monotonic() + rounds * budget + OVERDUE_GRACE
    with context.Manager() as manager:
        progress = manager.Queue()
        pool = ProcessPoolExecutor(jobs, mp_context=context)
        futures: dict[str, Future[CampaignResult]] = {
            name: pool.submit(
                run_one,
                name,
                args.engine,
                args.seed,
                budget,
                args.examples,
                progress,
                args.shrink_seconds,
            )
            for name in names
        }
        try:
            while not all(f.done() for f in futures.values()):
                if overdue is not None and time.monotonic() > overdue:
                    break
                with contextlib.suppress(queue.Empty):
                    _name, line = progress.get(timeout=0.5)
                    out.write(f"  {line}\n")
                    out.flush()
        finally:
            # Noted before the kill: the pool marks a killed campaign's future done (a
            # broken pool), which would read as a process that died by itself.
            unfinished = {name for name, f in futures.items() if not f.done()}
            _stop(pool, kill=bool(unfinished))
        return [
            _result_of(name, args.engine, futures[name], budget, name in unfinished)
            for name in names
        ]


#: Seconds past its budget a time-boxed run may take before its unfinished campaigns
#: are stopped and reported: shrinking a failure (``SHRINK_FLOOR``), hung calls the
#: watchdog ends (each costs ``--call-timeout``), the last batch's overrun.
OVERDUE_GRACE = 600.0


#: Seconds the campaigns' processes get to exit once their campaigns have ended.
EXIT_GRACE = 10.0


def _stop(pool: ProcessPoolExecutor, *, kill: bool) -> None:
    """Shut ``pool`` down; with ``kill``, end its processes first (a campaign that never
    finishes would keep ``shutdown`` waiting forever). A process that has not exited
    ``EXIT_GRACE`` seconds after its campaigns ended is ended too: an engine may leave
    a thread that never stops, or a finalizer that blocks at exit (an interleaving's
    deadlock left one: settee verify then printed nothing and never returned)."""
    # The executor has no public way to end a process; they are multiprocessing.Process.
    processes = list(getattr(pool, "_processes", {}).values())
    if kill:
        for process in processes:
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    # Their sentinels, not join(): the executor's own thread waits for them too.
    running = {process.sentinel: process for process in processes}
    deadline = time.monotonic() + EXIT_GRACE
    while running and (left := deadline - time.monotonic()) > 0:
        for sentinel in wait_for_processes(list(running), timeout=left):
            running.pop(sentinel)  # type: ignore[call-overload]  # the keys are ints
    for process in running.values():
        process.kill()


def _result_of(
    name: str, engine: str, future: Future[CampaignResult], budget: float, overdue: bool
) -> CampaignResult:
    """The campaign's result, or a failure saying why it has none: it never finished
    (``overdue``: stopped), or its process died (the engine ended it, or crashed the
    interpreter)."""
    if not overdue and future.done() and future.exception() is None:
        return future.result()
    result = CampaignResult(name, engine, failures=1)
    if overdue or future.cancelled():
        result.reproducer = (
            f"{name} did not finish within {budget:.0f} s and {OVERDUE_GRACE:.0f} s of grace: "
            "a call that neither returned nor could be interrupted (a hang in C code, or "
            "an engine that swallows the watchdog's Hung); its process was stopped"
        )
    else:
        result.reproducer = (
            f"{name}'s process ended without a result ({future.exception()!r}): the "
            "engine ended the process (os._exit, a crash in C code, the kernel's OOM "
            "killer), or another campaign's process did and took the pool down"
        )
    return result


def _print_summary(results: list[CampaignResult], out: TextIO) -> None:
    header = (
        "campaign",
        "ops",
        "interleavings",
        "histories",
        "crash states",
        "corruptions",
        "tests",
        "failures",
        "time",
    )
    rows = [
        (
            r.name,
            str(r.operations),
            str(r.interleavings),
            str(r.histories),
            str(r.crash_states),
            str(r.corruptions),
            str(r.tests),
            "skipped" if r.skipped else str(r.failures),
            f"{r.seconds:.0f} s",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    out.write("\n")
    for row in [header, *rows]:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + "\n")
    for r in results:
        if r.skipped:
            out.write(f"{r.name}: {r.skipped}\n")
    verdict = "FAILED" if any(r.failures for r in results) else "passed"
    out.write(f"\nsettee verify {verdict}\n")


def _saved_failure(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The failure file ``path`` and its replay, or SetteeError saying why it cannot
    be replayed."""
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as exc:
        raise SetteeError(f"{path}: not a settee verify failure file: {exc}") from exc
    if not isinstance(saved, dict):
        raise SetteeError(f"{path}: not a settee verify failure file (not a JSON object)")
    replay = saved.get("replay")
    kind = replay.get("kind") if isinstance(replay, dict) else None
    needs = {
        "stateful": "token",
        "crash": "seed",
        "fsync": "seed",
        "corruption": "seed",
        "semantics": "test",
    }.get(str(kind))
    value = replay.get(needs) if needs and isinstance(replay, dict) else None
    named = all(isinstance(saved.get(key), str) for key in ("name", "engine"))
    if value in (None, "") or not named:
        raise SetteeError(
            f"{path}: this failure cannot be replayed (no {needs or 'replay'} saved); "
            "its reproducer is in the file. An interleavings failure saved without a "
            "token is one Hypothesis could not run again with the same choices"
        )
    if needs == "token":
        problem = _token_problem(value)
    elif needs == "test":
        problem = _test_problem(value)
    else:
        problem = _seed_problem(value)
    if not problem:
        token_engine = value.split("|")[1] if needs == "token" else saved["engine"]
        problem = _engine_problem(saved["engine"]) or _engine_problem(token_engine)
    if problem:
        raise SetteeError(f"{path}: this failure cannot be replayed: {problem}")
    return saved, replay  # type: ignore[return-value]  # checked above


#: The machines a stateful token names (campaigns.replay).
_MACHINES = ("equivalence", "interleavings", "stress")


def _token_problem(token: Any) -> str:
    """Why a stateful replay token is unusable ('' if it is usable). A token holds
    the choices that drove the generators of the settee version that saved it,
    and only the Hypothesis version that saved it can read them (checked here;
    settee's own version is not recorded, so another one may replay another run)."""
    import hypothesis

    parts = token.split("|") if isinstance(token, str) else []
    if len(parts) != 4 or parts[0] not in _MACHINES or not all(parts):
        return f"its token {token!r} is not MACHINE|ENGINE|VERSION|CHOICES ({', '.join(_MACHINES)})"
    machine, _engine, version, choices = parts
    if machine == "stress":
        # The seed and the run (-1, -2: the fixed checks that come first).
        if not (_INTEGER.fullmatch(version) and _INTEGER.fullmatch(choices)):
            return f"a stress token names a seed and a run, two numbers, not {token!r}"
    elif version != hypothesis.__version__:
        return (
            f"it was saved by Hypothesis {version}, this is {hypothesis.__version__}; "
            "replay it with the version that saved it"
        )
    else:
        try:
            base64.b64decode(choices, validate=True)
        except ValueError:
            return f"its choices {choices[:40]!r} are not base64"
    return ""


#: A number as a token writes it (short: ``int()`` refuses 4,300 digits).
_INTEGER = re.compile(r"-?[0-9]{1,30}", re.ASCII)


def _engine_problem(spec: str) -> str:
    """Why engine ``spec`` cannot run here ('' if it loads)."""
    try:
        load_factory(spec)
    except LookupError as exc:
        return f"its engine cannot be loaded here: {exc}"
    return ""


def _test_problem(test: Any) -> str:
    """Why a semantics replay's test name is unusable ('' if it is usable)."""
    if isinstance(test, str) and re.fullmatch(r"test_\w{1,200}", test, re.ASCII):
        return ""
    return f"its test {test!r} is not the name of a test function"


def _seed_problem(seed: Any) -> str:
    """Why a crash or corruption seed is unusable ('' if it is usable): any int
    ``--seed`` can lead to."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        return ""
    return f"its seed {seed!r} is not a number"


def _replay(path: str, out: TextIO) -> int:
    saved, replay = _saved_failure(path)
    out.write(f"replaying {saved['name']} against {saved['engine']}: {replay}\n")
    if replay["kind"] == "stateful":
        from settee.proof.stateful import campaigns

        summary = campaigns.replay(replay["token"])
        out.write(summary.text() + "\n")
        return 1 if summary.failures else 0
    result = CampaignResult(saved["name"], saved["engine"])
    if replay["kind"] == "crash":
        _crash_batch(result, replay["seed"], budget=15.0)  # its workload comes first
    elif replay["kind"] == "fsync":
        _fsync_failures(result, replay["seed"])
    elif replay["kind"] == "semantics":
        with contextlib.redirect_stdout(io.StringIO()):
            _semantic_batch(result, None, test=replay["test"])
    else:
        _corruption_batch(result, replay["seed"])
    out.write((result.reproducer or "did not reproduce") + "\n")
    return 1 if result.failures else 0


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"not a positive number of seconds: {text!r}")
    return seconds


def add_parser(sub: Any) -> None:
    verify = sub.add_parser(
        "verify",
        help="run the proof (engine vs reference, interleavings, crashes, corruption)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    verify.add_argument("--engine", default="settee:open", help="MODULE:CALLABLE under test")
    verify.add_argument("--minutes", type=float, default=2.0, help="time budget (default 2)")
    verify.add_argument(
        "--examples",
        type=int,
        default=None,
        help="one batch of N examples instead of a time budget",
    )
    verify.add_argument("--jobs", type=int, default=None, help="processes (default: all cores)")
    verify.add_argument(
        "--seed",
        type=int,
        default=None,
        help="makes a run repeatable (default: a fresh one, printed, so that each run "
        "explores further)",
    )
    verify.add_argument(
        "--only", default="", help=f"comma-separated subset of {','.join(CAMPAIGNS)}"
    )
    verify.add_argument(
        "--call-timeout",
        type=_positive_seconds,
        default=None,
        help="seconds an engine call may run before the equivalence machine reports it "
        "as hung, with the steps that led to it, and a crash state's whole check "
        "(default 20; SETTEE_CALL_TIMEOUT)",
    )
    verify.add_argument(
        "--shrink-seconds",
        type=_positive_seconds,
        default=SHRINK_FLOOR,
        help="seconds a failure found once the budget is spent may still shrink; the "
        "smallest reproducer by then is reported (default 10; a hung call costs "
        "--call-timeout per attempt)",
    )
    verify.add_argument("--json", default="", help="write a machine-readable summary here")
    verify.add_argument("--replay", default="", help="re-run a saved failure file")
    verify.set_defaults(func=run_verify)

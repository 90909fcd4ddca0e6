"""The public entry points of the proof, for ``settee verify`` and for tests.

Every function runs one campaign against an engine spec (``"MODULE:CALLABLE"``)
and returns a :class:`Summary`: what it ran, and on failure the shrunk
reproducer Hypothesis printed plus a ``replay`` string that
:func:`replay` runs again::

    from settee.proof.stateful.campaigns import run_equivalence, run_interleavings
    s = run_equivalence("settee:open", max_examples=500, seed=1)
    print(s.text())
    if s.failures:
        replay(s.replay)            # the same failing example, deterministically

``run_mutants`` runs the machines against every mutant of ``mutants.py``
and reports which machine caught each and after how many steps.
"""

from __future__ import annotations

import random
import re
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import Phase, given, reproduce_failure, settings
from hypothesis import seed as use_seed
from hypothesis import strategies as st
from hypothesis.errors import FlakyStrategyDefinition
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from settee.proof.stateful import equivalence
from settee.proof.stateful.budget import PHASES, equivalence_settings, interleaving_settings
from settee.proof.stateful.history import (
    Scenario,
    purging_scenario,
    random_scenario,
    scenarios,
)
from settee.proof.stateful.interleavings import (
    compaction_keeps_concurrent_purges,
    compaction_keeps_concurrent_writes,
    engine_purges,
    fixed_schedules,
    follower_behind_a_stale_heads,
    follower_follows_compactions,
    follower_read_across_writes,
    run_scheduled,
    run_threads,
)

__all__ = [
    "MutantResult",
    "Summary",
    "interleaving_test",
    "replay",
    "run_equivalence",
    "run_interleavings",
    "run_mutants",
    "run_stress",
]

_BLOB = re.compile(r"@reproduce_failure\('([^']+)', b'([^']+)'\)")


@dataclass(slots=True)
class Summary:
    """One campaign's counts; ``failures`` > 0 comes with ``reproducer`` and ``replay``."""

    machine: str
    engine: str
    examples: int = 0
    steps: int = 0
    histories: int = 0
    interleaving_steps: int = 0
    failures: int = 0
    reproducer: str = ""
    replay: str = ""
    seconds: float = 0.0

    def text(self) -> str:
        head = (
            f"{self.machine} vs {self.engine}: {self.examples} examples, {self.steps} operations, "
            f"{self.histories} histories checked, {self.interleaving_steps} scheduled steps, "
            f"{self.failures} failures in {self.seconds:.1f} s"
        )
        if self.failures:
            head += f"\n{self.reproducer}\nreplay: {self.replay}"
        return head


def _capture(summary: Summary, body: Callable[[], None]) -> None:
    """Run ``body`` (a Hypothesis test); on failure fill in the reproducer."""
    lines: list[str] = []
    started = time.monotonic()
    try:
        with with_reporter(lines.append):
            body()
    except Exception as exc:
        summary.failures += 1
        notes = list(getattr(exc, "__notes__", []))
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                notes += [str(sub), *getattr(sub, "__notes__", [])]
        text = "\n".join([*lines, f"{type(exc).__name__}: {exc}", *notes])
        summary.reproducer = text
        found = _BLOB.search(text)
        if found:
            summary.replay = f"{summary.machine}|{summary.engine}|{found[1]}|{found[2]}"
    finally:
        summary.seconds = time.monotonic() - started


def _base(max_examples: int | None, shrink: bool, maker: Callable[[int | None], settings]) -> Any:
    phases = PHASES if shrink else [Phase.explicit, Phase.generate]
    return settings(maker(max_examples), phases=phases, database=None)


def run_equivalence(
    engine: str = "settee:open",
    max_examples: int | None = None,
    seed: int | None = None,
    *,
    shrink: bool = True,
) -> Summary:
    """The sequential machine (engine vs reference)."""
    summary = Summary("equivalence", engine)
    machine = equivalence.equivalence_machine(engine)
    if seed is not None:
        machine = use_seed(seed)(machine)
    before = Counter(equivalence.STATS)
    chosen = _base(max_examples, shrink, equivalence_settings)
    _capture(summary, lambda: run_state_machine_as_test(machine, settings=chosen))
    delta = Counter(equivalence.STATS)
    delta.subtract(before)
    summary.examples = delta.pop("examples", 0)
    summary.steps = sum(delta.values())
    return summary


def interleaving_test(
    engine: str, stats: Counter[str], failed: list[str] | None = None
) -> Callable[..., None]:
    """The Hypothesis test body of the scheduled interleavings (not yet decorated);
    the report of the first run that fails is appended to ``failed``."""

    def run(scenario: Scenario, data: Any) -> None:
        def choose(labels: list[str]) -> int:
            return data.draw(st.integers(0, len(labels) - 1)) if len(labels) > 1 else 0

        try:
            result = run_scheduled(engine, scenario, choose)
        except FlakyStrategyDefinition:
            raise  # the harness drew differently (scheduler.py), not a failed run
        except Exception:
            # Kept like a failed history: should Hypothesis not get the same draws on
            # its second run (FlakyStrategyDefinition), this is what happened.
            if failed is not None and not failed:
                failed.append(f"{scenario}\n{traceback.format_exc()}")
            raise
        stats["examples"] += 1
        stats["histories"] += 1
        stats["steps"] += result.operations
        stats["interleaving_steps"] += len(result.schedule)
        if result.problems and failed is not None and not failed:
            failed.append(result.report())
        assert not result.problems, result.report()

    return run


def run_interleavings(
    engine: str = "settee:open",
    max_examples: int | None = None,
    seed: int | None = None,
    *,
    shrink: bool = True,
) -> Summary:
    """Scheduled interleavings of concurrent clients, each history checked.

    Should Hypothesis stop because two runs of one choice prefix drew differently
    while no run had failed (a woken thread raced the released one, scheduler.py),
    the campaign starts again, up to ``FLAKY_RESTARTS`` times, with the same seed:
    that is the harness's nondeterminism, not a finding, and a campaign cut short
    by it would check less than its budget (it once let a mutant escape the CI run:
    the rare race came at example 33, the mutant's catch is at 47)."""
    summary = Summary("interleavings", engine)
    stats: Counter[str] = Counter()
    started = time.monotonic()
    for _attempt in range(1 + FLAKY_RESTARTS):
        failed: list[str] = []
        summary.failures, summary.reproducer, summary.replay = 0, "", ""
        body = interleaving_test(engine, stats, failed)
        test = given(scenario=scenarios(), data=st.data())(body)
        test = _base(max_examples, shrink, interleaving_settings)(test)
        if seed is not None:
            test = use_seed(seed)(test)
        _capture(summary, test)
        if not (summary.failures and not failed and _FLAKY in summary.reproducer):
            break
        # No run failed, so there is nothing to report; the counts of the runs
        # checked so far stay in ``stats``.
        summary.failures, summary.reproducer, summary.replay = 0, "", ""
    if summary.failures and failed and (not summary.replay or _FLAKY in summary.reproducer):
        # Hypothesis could not run the failing example again (its schedule drew
        # other choices, or it ran into the race on the way): the first failing
        # run's report is what is known to have failed.
        summary.reproducer += f"\nthe first failing run, as it happened:\n{failed[0]}"
    _fill(summary, stats)
    summary.seconds = time.monotonic() - started
    return summary


#: Hypothesis' words for draws that differ between two runs of one choice prefix
#: (FlakyStrategyDefinition; a FlakyFailure around it when raised inside a run).
_FLAKY = "Inconsistent data generation"
#: How often ``run_interleavings`` starts again after such a report with no failed run.
FLAKY_RESTARTS = 2


def run_stress(
    engine: str = "settee:open",
    runs: int = 25,
    seed: int | None = 0,
    read_modes: tuple[str, ...] = ("parallel", "serialized"),
    *,
    compaction_check: bool = True,
) -> Summary:
    """Real OS threads, seeded scenarios, each history checked (no Hypothesis);
    first the fixed checks (``compaction_check``: compactions racing a writer)."""
    summary = Summary("stress", engine)
    rng = random.Random(seed)
    started = time.monotonic()
    # First the fixed schedules real threads seldom hit: writes inside a readonly
    # read over two shards, with and without a compaction swap between them; a
    # readonly handle reading through two compactions; one opened behind a stale
    # HEADS; the scheduled races of ``FIXED_SCHEDULES`` (run -1 in a replay token);
    # then compactions racing a writer, and racing purges (run -2).
    fixed: list[tuple[int, Callable[[], list[str]]]] = [
        (-1, lambda: follower_read_across_writes(engine, compact=False)),
        (-1, lambda: follower_read_across_writes(engine, compact=True)),
        (-1, lambda: follower_follows_compactions(engine)),
        (-1, lambda: follower_behind_a_stale_heads(engine)),
        (-1, lambda: fixed_schedules(engine)),
    ]
    if compaction_check:
        fixed.append((-2, lambda: compaction_keeps_concurrent_writes(engine)))
        fixed.append((-2, lambda: compaction_keeps_concurrent_purges(engine)))
    for run, check in fixed:
        problems = check()
        summary.examples += 1
        if problems:
            summary.failures += 1
            summary.reproducer = "\n".join(problems)
            summary.replay = f"stress|{engine}|{seed}|{run}"
            summary.seconds = time.monotonic() - started
            return summary
    # Purges racing the rest, drawn apart so that ``rng`` draws the scenarios it
    # always drew (the mutant catches of tests/test_mutants.py depend on them).
    purges = runs >= PURGE_EVERY and engine_purges(engine)
    purge_rng = random.Random(f"purges-{seed}") if purges else None
    for n in range(runs):
        drawn = [random_scenario(rng, read_mode=read_modes[n % len(read_modes)])]
        if purge_rng is not None and n % PURGE_EVERY == PURGE_EVERY - 1:
            drawn.append(purging_scenario(purge_rng))
        for scenario in drawn:
            result = run_threads(engine, scenario)
            summary.examples += 1
            summary.histories += 1
            summary.steps += result.operations
            if result.problems:
                summary.failures += 1
                summary.reproducer = result.report()
                summary.replay = f"stress|{engine}|{seed}|{n}"
                summary.seconds = time.monotonic() - started
                return summary
    summary.seconds = time.monotonic() - started
    return summary


#: The stress campaign adds a scenario with purges after every this many runs.
PURGE_EVERY = 4


def _fill(summary: Summary, stats: Counter[str]) -> None:
    summary.examples = stats["examples"]
    summary.histories = stats["histories"]
    summary.steps = stats["steps"]
    summary.interleaving_steps = stats["interleaving_steps"]


def replay(token: str) -> Summary:
    """Run a failure's ``replay`` string again (the shrunk example, deterministically)."""
    machine, engine, version, blob = token.split("|")
    if machine == "stress":
        return run_stress(engine, runs=int(blob) + 1, seed=int(version))
    summary = Summary(machine, engine)
    pin = reproduce_failure(version, blob.encode())
    if machine == "equivalence":
        cls = pin(equivalence.equivalence_machine(engine))
        chosen = equivalence_settings()
        _capture(summary, lambda: run_state_machine_as_test(cls, settings=chosen))
    else:
        stats: Counter[str] = Counter()
        test = given(scenario=scenarios(), data=st.data())(interleaving_test(engine, stats))
        test = pin(settings(interleaving_settings(), database=None)(test))
        _capture(summary, test)
        _fill(summary, stats)
    return summary


# -- mutants -----------------------------------------------------------------------------------


@dataclass(slots=True)
class MutantResult:
    """Which machine caught a mutant (``caught_by`` empty: it escaped) and how fast."""

    name: str
    description: str
    caught_by: str = ""
    steps: int = 0
    seconds: float = 0.0
    summaries: list[Summary] = field(default_factory=list)

    def text(self) -> str:
        verdict = f"caught by {self.caught_by}" if self.caught_by else "ESCAPED"
        return (
            f"{self.name:22} {verdict:28} after {self.steps:5} operations, "
            f"{self.seconds:5.1f} s  ({self.description})"
        )


def run_mutants(
    names: list[str] | None = None, max_examples: int = 100, seed: int = 0
) -> list[MutantResult]:
    """Each mutant against the machines in turn (equivalence, interleavings,
    stress) until one catches it; no shrinking, so a catch costs little."""
    from settee.proof.stateful.mutants import MUTANTS

    results = []
    for name in names or list(MUTANTS):
        spec = f"settee.proof.stateful.mutants:{name}"
        result = MutantResult(name, MUTANTS[name][1])
        campaigns: list[Callable[[], Summary]] = [
            lambda spec=spec: run_equivalence(spec, max_examples, seed, shrink=False),
            lambda spec=spec: run_interleavings(spec, max_examples, seed, shrink=False),
            lambda spec=spec: run_stress(spec, runs=max_examples // 4, seed=seed),
        ]
        for campaign in campaigns:
            summary = campaign()
            result.summaries.append(summary)
            result.steps += summary.steps
            result.seconds += summary.seconds
            if summary.failures:
                result.caught_by = summary.machine
                break
        results.append(result)
    return results

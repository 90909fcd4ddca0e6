"""``settee verify``: the proof as one command, its summary, its failures and replays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest


def _verify(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "settee", "verify", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=400,
    )


def test_verify_passes_on_the_engine_and_counts_every_campaign(tmp_path: Path) -> None:
    report = tmp_path / "summary.json"
    run = _verify(tmp_path, "--examples", "3", "--jobs", "2", "--seed", "7", "--json", str(report))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "settee verify passed" in run.stdout
    campaigns = {c["name"]: c for c in json.loads(report.read_text())["campaigns"]}
    assert set(campaigns) == {
        *("equivalence", "interleavings", "stress", "crash", "corruption", "semantics")
    }
    assert campaigns["equivalence"]["operations"] > 0
    assert campaigns["interleavings"]["histories"] > 0
    assert campaigns["stress"]["histories"] > 0
    assert campaigns["crash"]["crash_states"] > 0
    assert campaigns["corruption"]["corruptions"] > 0
    assert campaigns["semantics"]["tests"] == 3  # --examples: the first three tests
    assert all(c["failures"] == 0 for c in campaigns.values())


def test_verify_runs_the_semantic_suite_and_replays_its_failure(tmp_path: Path) -> None:
    """A mutant only the semantic suite's fixed tests catch in seconds (a deleted leaf
    listed as a conflict) fails ``settee verify``: it ran the machines and campaigns
    but not the suite, so a slip the machine is slow to draw passed the main job
    (found in the fifth mutation round). Its replay runs the failing test again."""
    engine = "settee.proof.stateful.mutants:conflicts_with_deleted"
    run = _verify(tmp_path, "--engine", engine, "--only", "semantics", "--examples", "60")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "test_live_leaf_beats_longer_deleted_branch" in run.stdout
    assert "_conflicts" in run.stdout  # the assertion's diff is the reproducer
    saved = tmp_path / "settee-verify-semantics-failure.json"
    assert json.loads(saved.read_text())["replay"] == {
        "kind": "semantics",
        "test": "test_live_leaf_beats_longer_deleted_branch",
    }
    again = _verify(tmp_path, "--replay", str(saved))
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "test_live_leaf_beats_longer_deleted_branch" in again.stdout


@pytest.mark.parametrize("mutant", ["lost_update", "no_tombstone"])
def test_verify_fails_on_a_mutant_and_its_replay_reproduces(tmp_path: Path, mutant: str) -> None:
    engine = f"settee.proof.stateful.mutants:{mutant}"
    # Seed 3: both mutants caught within seconds (seed 0 took lost_update 21 s once the
    # machine drew losing leaves and kept attachments more often).
    run = _verify(
        tmp_path, "--engine", engine, "--only", "equivalence", "--examples", "300", "--seed", "3"
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "settee verify FAILED" in run.stdout
    saved = tmp_path / "settee-verify-equivalence-failure.json"
    assert saved.exists() and "--replay" in run.stdout
    assert json.loads(saved.read_text())["engine"] == engine
    again = _verify(tmp_path, "--replay", str(saved))
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "!=" in again.stdout  # the diff between engine and reference, again


def test_verify_reports_a_call_that_never_returns_and_replays_it(tmp_path: Path) -> None:
    """A range that loops forever (the mutation round's V31 hung the proof itself) is a
    failure with its steps, within the call timeout plus the shrinking floor, and its
    replay hangs the same way and says so.

    Each run of a hanging example spins for the whole call timeout, and there are about
    eight (seed 0: the first, the variants Hypothesis draws from it after a failure,
    the shrinker's replay, the final run, the replay command's), so the timeout is 1 s:
    every other call of these short runs takes milliseconds. At 2 s the test took 20 s
    where it now takes 13 s."""
    engine = "settee.proof.stateful.mutants:endless_range"
    run = _verify(
        tmp_path, "--engine", engine, "--only", "equivalence", "--minutes", "0.05",
        "--seed", "0", "--call-timeout", "1", "--shrink-seconds", "1",
    )  # fmt: skip
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Hung: no engine call returned within 1 s; the last call started was all_docs" in (
        run.stdout
    ), run.stdout[-3000:]
    assert "state.all_docs_range(" in run.stdout and "five minutes" not in run.stdout
    saved = tmp_path / "settee-verify-equivalence-failure.json"
    again = _verify(tmp_path, "--replay", str(saved), "--call-timeout", "1")
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "no engine call returned within 1 s" in again.stdout, again.stdout[-3000:]


#: Engines the proof's own watchdogs cannot end: one that kills its process, one that
#: swallows every exception while it waits forever.
_UNRULY = """
import os, time
import settee

def dies(path, **options):
    db = settee.open(path, **options)
    db.put = lambda *a, **k: os._exit(3)
    return db

def swallows(path, **options):
    db = settee.open(path, **options)

    def put(*a, **k):
        while True:
            try:
                time.sleep(0.05)
            except BaseException:
                pass

    db.put = put
    return db
"""


@pytest.mark.parametrize(
    ("engine", "says"),
    [
        ("dies", "equivalence's process ended without a result"),
        ("swallows", "equivalence did not finish within 2 s and 4 s of grace"),
    ],
)
def test_verify_reports_a_campaign_its_watchdogs_cannot_end(
    engine: str,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A failure, not a traceback or a verify that never ends: the campaign's process
    died (the pool broke), or it ran past its budget and a grace and was stopped."""
    from settee import verify
    from settee.cli import main
    from settee.proof.stateful.watchdog import CALL_TIMEOUT_ENV

    (tmp_path / "unruly.py").write_text(_UNRULY)
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned campaigns import it too
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(verify, "OVERDUE_GRACE", 4.0)
    monkeypatch.setenv(CALL_TIMEOUT_ENV, "0.5")  # restored after: verify sets it for good
    argv = ["verify", "--engine", f"unruly:{engine}", "--only", "equivalence", "--seed", "0"]
    code = main([*argv, "--minutes", str(2 / 60), "--call-timeout", "0.5"])
    out = capsys.readouterr().out
    assert code == 1 and "settee verify FAILED" in out, out[-2000:]
    assert says in out, out[-2000:]
    assert "saved in" in out and "replay:" not in out


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_verify_refuses_a_call_timeout_that_is_not_a_positive_number(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from settee.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["verify", "--call-timeout", bad])
    assert exited.value.code == 2
    assert "not a positive number of seconds" in capsys.readouterr().err


def test_verify_crash_campaign_fails_on_a_durability_mutant(tmp_path: Path) -> None:
    """An engine that acknowledges before its header is durable loses writes in a crash."""
    engine = "settee.proof.crash.mutants:ack_before_header_fsync"
    run = _verify(tmp_path, "--engine", engine, "--only", "crash", "--examples", "1", "--seed", "0")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    saved = tmp_path / "settee-verify-crash-failure.json"
    reproducer = json.loads(saved.read_text())["reproducer"]
    # The failed-fsync check comes first and finds it too: the unsynced header is lost.
    assert "was acknowledged, and a crash lost it" in reproducer or "acked" in reproducer
    again = _verify(tmp_path, "--replay", str(saved))
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]


@pytest.mark.parametrize(
    "saved",
    [
        None,  # no such file
        "not json",
        json.dumps({"name": "interleavings"}),  # no replay
        json.dumps(
            {
                "name": "interleavings",
                "engine": "settee:open",
                "replay": {"kind": "stateful", "token": ""},
            }
        ),
        json.dumps({"name": "crash", "engine": "settee:open", "replay": {"kind": "crash"}}),
        json.dumps(["a", "list"]),
        *(
            json.dumps(
                {
                    "name": "interleavings",
                    "engine": "settee:open",
                    "replay": {"kind": "stateful", "token": token},
                }
            )
            for token in (
                "garbage",
                5,
                "stress|settee:open|x|1",
                "stress|settee:open|1",
                "equivalence|settee:open|0.0.1|AXicY2BgAAAABQAB",
                "stress|settee:open|\u00b2|0",
                "stress|nosuch:engine|0|1",
                f"interleavings|settee:open|{hypothesis.__version__}|!!!notbase64",
            )
        ),
        *(
            json.dumps(
                {"name": "crash", "engine": "settee:open", "replay": {"kind": kind, "seed": seed}}
            )
            for kind, seed in (("crash", "abc"), ("corruption", 1.5), ("crash", True))
        ),
    ],
    ids=[
        "missing",
        "garbage",
        "no-replay",
        "empty-token",
        "no-seed",
        "list",
        "token-garbage",
        "token-number",
        "stress-token-not-numbers",
        "token-three-parts",
        "token-other-hypothesis",
        "stress-token-not-ascii-digits",
        "token-engine-not-loadable",
        "token-choices-not-base64",
        "seed-text",
        "seed-float",
        "seed-bool",
    ],
)
def test_a_replay_file_that_cannot_be_replayed_is_a_clear_error(
    tmp_path: Path, saved: str | None
) -> None:
    """A failure Hypothesis could not replay is saved without a token (verify found
    one such flaky interleaving); replaying it, or a damaged file, says so."""
    path = tmp_path / "failure.json"
    if saved is not None:
        path.write_text(saved)
    run = _verify(tmp_path, "--replay", str(path))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert "settee verify: SetteeError:" in run.stderr and str(path) in run.stderr, run.stderr


@pytest.mark.parametrize(
    "replay",
    [
        {"kind": "stateful", "token": "stress|settee:open|-1000|-1"},  # --seed -1, fixed check
        {"kind": "stateful", "token": f"interleavings|settee:open|{hypothesis.__version__}|AA=="},
        {"kind": "crash", "seed": -995, "step": 3},
        {"kind": "corruption", "seed": 2**70},
        {"kind": "fsync", "seed": 7},
        {"kind": "semantics", "test": "test_put_creates_first_revision"},
    ],
)
def test_every_replay_verify_can_save_is_accepted(
    tmp_path: Path, replay: dict[str, object]
) -> None:
    """What the campaigns save, for any ``--seed``, passes the replay checks."""
    from settee.verify import _saved_failure

    path = tmp_path / "failure.json"
    path.write_text(json.dumps({"name": "x", "engine": "settee:open", "replay": replay}))
    assert _saved_failure(str(path))[1] == replay


def test_the_crash_campaign_fails_each_fsync_of_a_workload_first() -> None:
    """The crash campaign's first batch fails every fsync of a small workload in turn
    (SimFS's fail_fsync_at) and crashes: an engine that retries a failed fsync and
    acknowledges the commit (fsyncgate, ``fsync_retried``) fails it, with a replay.
    No crash state ever failed an fsync, so it passed settee verify (found by
    mutation testing)."""
    from settee.verify import CampaignResult, _crash_batch

    result = CampaignResult("crash", "settee.proof.crash.mutants:fsync_retried")
    _crash_batch(result, seed=5, budget=5.0)
    assert result.failures == 1 and result.replay == {"kind": "fsync", "seed": 5}
    assert "was acknowledged, and a crash lost it" in result.reproducer


def test_the_corruption_campaign_runs_on_any_engine_built_on_settees_io() -> None:
    """Found by mutation testing the proof: the corruption campaign wrote and read its
    database with settee's own engine whatever ``--engine`` named, so an engine whose
    reads skip the crc passed ``settee verify``. It now builds and reads with the
    engine under test, when that engine takes ``fs=`` (settee's io layer)."""
    from settee.verify import _unsupported

    assert _unsupported("corruption", "settee:Database") == ""
    assert _unsupported("corruption", "settee.http:open") != ""  # no fs=: skipped


def test_verify_passes_on_the_reference_and_skips_what_needs_settees_io(tmp_path: Path) -> None:
    """README: any factory can be checked. On the reference the crash campaign opened
    it with ``fs=`` (its ``**options`` refuse it: BadRequest ended the run) and the
    stress campaign called None for a readonly reader it cannot open (found in
    review); both are engines' answers the proof must take."""
    report = tmp_path / "summary.json"
    args = ("--engine", "settee.reference:open", "--examples", "4", "--seed", "1")
    run = _verify(tmp_path, *args, "--jobs", "2", "--json", str(report))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    campaigns = {c["name"]: c for c in json.loads(report.read_text())["campaigns"]}
    assert campaigns["stress"]["histories"] > 0 and campaigns["equivalence"]["operations"] > 0
    assert all(c["failures"] == 0 for c in campaigns.values())
    assert "skipped" in run.stdout


def test_verify_ends_when_a_campaign_process_cannot_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign's process that cannot exit once its campaigns ended (an engine left a
    thread that never stops, or an interleaving's deadlock a finalizer that blocks at
    exit) is ended after EXIT_GRACE: settee verify waited for it for ever, printing
    nothing, after its interleavings campaign had found a deadlock."""
    import functools
    import multiprocessing
    import multiprocessing.connection
    import time
    from concurrent.futures import ProcessPoolExecutor

    from settee import verify
    from settee.proof.stateful.mutants.lifecycle import leaves_a_thread

    monkeypatch.setattr(verify, "EXIT_GRACE", 1.0)
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    opened = pool.submit(functools.partial(leaves_a_thread, str(tmp_path / "db")))
    assert opened.exception(timeout=60) is not None  # a Database does not pickle back
    (process,) = pool._processes.values()  # type: ignore[attr-defined]
    started = time.monotonic()
    verify._stop(pool, kill=False)
    assert time.monotonic() - started < 30
    # Its sentinel, not is_alive(): the executor's own thread may reap it first, and a
    # second waitpid then reads as a process still running.
    assert multiprocessing.connection.wait([process.sentinel], timeout=10), "still running"

"""The watchdog turns a call that never returns into a ``Hung`` failure (watchdog.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from settee.proof.stateful import watchdog
from settee.proof.stateful.observe import outcome
from settee.proof.stateful.watchdog import Hung


def test_a_blocked_wait_in_the_main_thread_is_interrupted() -> None:
    """The caller of a write nobody answers sits in a lock wait: the signal ends it."""
    assert threading.current_thread() is threading.main_thread()
    started = time.monotonic()
    hung = pytest.raises(Hung, match=r"within 0\.3 s; the last call started was put")
    with hung, watchdog.watching(0.3):
        watchdog.beat("put")
        threading.Event().wait()
    assert time.monotonic() - started < 5


def test_a_spinning_loop_in_another_thread_is_interrupted() -> None:
    caught: list[BaseException] = []

    def spin() -> None:
        try:
            with watchdog.watching(0.3):
                while True:
                    pass
        except Hung as exc:
            caught.append(exc)

    t = threading.Thread(target=spin)
    t.start()
    t.join(10)
    assert not t.is_alive() and len(caught) == 1
    assert "no engine call returned within 0.3 s" in str(caught[0])


#: Run in a process of its own: on CPython 3.11 an asynchronous-exception flag left up
#: makes a profiled call spin at its first instruction for ever (found when
#: test_bench's cProfile ran after a watchdog had fired in the same xdist worker), so
#: the timeout is the failure. The profile runs once the watchdog has interrupted the
#: thread (still armed, when it never returns) and again after the last disarm.
_PROFILE_AFTER_A_HANG = """
import cProfile, sys, threading, time
from settee.proof.stateful import watchdog
from settee.proof.stateful.watchdog import Hung

def spin():
    while True:
        pass

def interrupted(hang):
    try:
        with watchdog.watching(0.2):
            hang()
    except Hung:
        print("interrupted")

def work():
    return sum(i for i in range(1000))

def profiled():
    cProfile.Profile().runcall(work)

hang = spin if sys.argv[1] == "spins" else threading.Event().wait
t = threading.Thread(target=interrupted, args=(hang,), daemon=True)
t.start()
while not watchdog.fired():
    time.sleep(0.01)
if hang is spin:
    t.join()
profiled()
watchdog.disarm()  # gives up on a thread blocked for ever; a no-op after one that returned
profiled()
print("profiled")
"""


@pytest.mark.parametrize("hang", ["spins", "blocks"])
def test_a_profiler_still_runs_after_the_watchdog_interrupted_another_thread(hang: str) -> None:
    """A thread that spins takes its Hung and disarms; one blocked in C for ever never
    takes it. Neither may leave the interpreter's pending-exception flag up, which
    only a thread taking its own exception lowers (watchdog.py, _post)."""
    command = [sys.executable, "-c", _PROFILE_AFTER_A_HANG, hang]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("a profiled call spun for ever after the watchdog fired")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == ("interrupted\nprofiled\n" if hang == "spins" else "profiled\n")


def test_lowering_the_flag_keeps_the_exception_of_a_thread_that_wakes_later() -> None:
    """_post lowers the interpreter's flag as soon as it has posted: a thread blocked
    in C then must still take its Hung when it runs bytecode again (it raises the
    flag again as it takes the GIL back), not spin on without it."""
    inside, release = threading.Event(), threading.Event()
    caught: list[BaseException] = []

    def wakes_later() -> None:
        try:
            inside.set()
            release.wait()  # the Hung lands as it returns (its Python code), or below
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                pass
        except Hung as exc:
            caught.append(exc)

    t = threading.Thread(target=wakes_later, daemon=True)
    t.start()
    inside.wait()
    time.sleep(0.05)  # into its wait
    watchdog._post(t.ident or 0, Hung)
    release.set()
    t.join(10)
    assert len(caught) == 1


def test_beats_keep_it_quiet_and_a_disarmed_watchdog_never_fires() -> None:
    with watchdog.watching(0.3):
        for _ in range(20):  # 1 s of calls, none longer than 0.05 s
            watchdog.beat("get")
            time.sleep(0.05)
    time.sleep(0.6)  # twice the time, disarmed
    assert not watchdog.fired()


def test_nested_levels_watch_with_the_innermost_time() -> None:
    with watchdog.watching(60):
        with pytest.raises(Hung, match=r"within 0\.2 s"), watchdog.watching(0.2):
            threading.Event().wait()
        time.sleep(0.4)  # the outer level's 60 s started again


def test_a_signal_landing_as_a_block_ends_never_leaves_the_watchdog_armed() -> None:
    """Blocks ending right at their deadline: the watchdog's signal lands anywhere,
    in the block, in its exit, in disarm. Each Hung must come from inside a block,
    with every level ended after it; none may reach the code after the last block
    (found in review: a signal inside contextlib's exit left the level armed, firing
    Hung into whatever ran next, every quarter second)."""
    seconds = 0.005
    hangs = 0
    for i in range(400):
        try:
            with watchdog.watching(seconds):
                end = time.monotonic() + seconds * (1.0 + (i % 40) * 0.01)
                while time.monotonic() < end:
                    pass
        except Hung:
            hangs += 1
        assert not watchdog._state.levels, f"iteration {i}: a level outlived its block"
    time.sleep(1.2)  # past a re-fire: nothing armed, nothing raised
    assert hangs > 0  # the deadlines were met often enough to race


def test_outcome_lets_a_hang_through_instead_of_answering_with_it() -> None:
    """A Hung raised inside a call is a failure, never recorded as the engine's answer."""

    def hangs() -> None:
        raise Hung("no engine call returned within 1 s")

    with pytest.raises(Hung):
        outcome(hangs)
    assert outcome(lambda: 1 / 0) == ("error", "!ZeroDivisionError", "")


@pytest.mark.parametrize("raw", ["", "0", "-2", "nan", "inf", "later"])
def test_the_timeout_falls_back_to_the_default_for_what_is_not_a_positive_number(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(watchdog.CALL_TIMEOUT_ENV, raw)
    assert watchdog.call_timeout() == watchdog.DEFAULT_SECONDS
    monkeypatch.setenv(watchdog.CALL_TIMEOUT_ENV, "2.5")
    assert watchdog.call_timeout() == 2.5

"""The watchdog turns a call that never returns into a ``Hung`` failure (watchdog.py)."""

from __future__ import annotations

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

"""A call that never returns is a failure with a reproducer, not a proof that hangs.

An engine that loops forever (a range merge that never decides it has enough
rows) or waits for an answer nobody will send (a write its writer dropped)
would stall the sequential machine for good: Hypothesis never sees the example
end, so it cannot report or shrink it. While armed (:func:`arm` ...
:func:`disarm`, or :func:`watching`), the watchdog expects :func:`beat` at
least every ``seconds``; the machine beats at every engine call. When none
comes in time it raises :class:`Hung` in the armed thread, in the middle of
whatever that thread is doing, and again every ``seconds / 4`` (at least one)
while the thread stays stuck, in case the engine swallowed it.

How it gets there: in the main thread, by a ``SIGUSR1`` sent to that thread,
whose handler raises — a signal also ends a blocking wait (``lock.acquire``,
``Future.result``), which is where a caller waiting for a dropped write sits.
In any other thread, by ``PyThreadState_SetAsyncExc``, which only lands when
that thread next runs Python bytecode (a spinning loop, not a blocked wait).

``Hung`` is an ``AssertionError``, so Hypothesis counts it as a failure and
prints the steps that led to it; :func:`settee.proof.stateful.observe.outcome`
lets it through instead of recording it as the engine's answer. The timeout is
``SETTEE_CALL_TIMEOUT`` seconds (``settee verify --call-timeout``), default
``DEFAULT_SECONDS``: thousands of times a step of the machine on a loaded
machine, so only a call that does not return reaches it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "CALL_TIMEOUT_ENV",
    "DEFAULT_SECONDS",
    "Hung",
    "arm",
    "beat",
    "call_timeout",
    "disarm",
    "watching",
]

CALL_TIMEOUT_ENV = "SETTEE_CALL_TIMEOUT"
DEFAULT_SECONDS = 20.0


class Hung(AssertionError):
    """No engine call returned within the watchdog's time."""

    def __str__(self) -> str:
        # Raised asynchronously as a bare class (no arguments): the message is the
        # watchdog's, kept from when it fired.
        return super().__str__() or _state.message


def call_timeout() -> float:
    """Seconds a call may take: ``SETTEE_CALL_TIMEOUT`` when it is a positive number."""
    raw = os.environ.get(CALL_TIMEOUT_ENV, "")
    try:
        seconds = float(raw)
    except ValueError:
        return DEFAULT_SECONDS
    return seconds if 0 < seconds < float("inf") else DEFAULT_SECONDS


class _State:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        #: Seconds of each armed level, innermost last; empty when disarmed.
        self.levels: list[float] = []
        self.target = 0  # ident of the armed thread
        self.deadline = 0.0
        self.what = ""
        self.fired = False
        self.message = ""


_state = _State()


def arm(seconds: float | None = None) -> None:
    """Start watching the calling thread (nested arms keep the outer one's thread)."""
    seconds = call_timeout() if seconds is None else seconds
    with _state.cond:
        if not _state.levels:
            _state.target = threading.get_ident()
            _state.fired = False
            _install_handler()
        _state.levels.append(seconds)
        _state.deadline = time.monotonic() + seconds
        _state.what = ""
        if _state.thread is None:
            _state.thread = threading.Thread(target=_watch, name="settee-watchdog", daemon=True)
            _state.thread.start()
        _state.cond.notify()


def disarm() -> None:
    """Undo the innermost :func:`arm`; the outer level, if any, starts its time afresh."""
    with _state.cond:
        if _state.levels:
            _state.levels.pop()
        if _state.levels:
            _state.deadline = time.monotonic() + _state.levels[-1]
        _state.cond.notify()


@contextmanager
def watching(seconds: float | None = None) -> Iterator[None]:
    """:func:`arm` for the ``with`` block."""
    arm(seconds)
    try:
        yield
    finally:
        disarm()


def beat(what: str = "") -> None:
    """Progress: the armed thread's time starts again; ``what`` names the call starting
    (kept for the failure's message). Cheap: no lock, no wake-up."""
    levels = _state.levels
    if levels:
        _state.deadline = time.monotonic() + levels[-1]
        _state.what = what


def fired() -> bool:
    """Whether the watchdog raised :class:`Hung` since the outermost :func:`arm`."""
    return _state.fired


def _watch() -> None:
    state = _state
    with state.cond:
        while True:
            if not state.levels:
                state.cond.wait()
                continue
            left = state.deadline - time.monotonic()
            if left > 0:
                state.cond.wait(left)
                continue
            seconds = state.levels[-1]
            last = f"; the last call started was {state.what}" if state.what else ""
            state.message = f"no engine call returned within {seconds:g} s{last}"
            state.fired = True
            _interrupt(state.target)
            state.deadline = time.monotonic() + max(1.0, seconds / 4)


def _interrupt(ident: int) -> None:
    if ident == threading.main_thread().ident and _handler_installed():
        signal.pthread_kill(ident, signal.SIGUSR1)
    else:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Hung))


def _on_signal(signum: int, frame: object) -> None:
    # A signal sent just before a disarm lands after it: ignore it then.
    if _state.levels and _state.fired:
        raise Hung(_state.message)


def _handler_installed() -> bool:
    return signal.getsignal(signal.SIGUSR1) is _on_signal


def _install_handler() -> None:
    """Take SIGUSR1 for the watchdog, once, from the main thread, unless someone else
    handles it already (then the slower asynchronous exception is used). Never given
    back: a signal in flight at a disarm must not meet the default action (exit)."""
    if threading.current_thread() is not threading.main_thread() or _handler_installed():
        return
    if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGUSR1, _on_signal)

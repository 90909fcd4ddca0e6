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

How it gets there: in the main thread, by a signal (``SIGNAL``: a real-time one
where the platform has them, else ``SIGUSR1``) sent to that thread,
whose handler raises — a signal also ends a blocking wait (``lock.acquire``,
``Future.result``), which is where a caller waiting for a dropped write sits.
In any other thread, by ``PyThreadState_SetAsyncExc``, which only lands when
that thread next runs Python bytecode (a spinning loop, not a blocked wait).
Before 3.13 that call also raises a flag of the whole interpreter, lowered only
when a thread takes its own exception: a thread blocked for ever never does, and
a cancel (``NULL``) raises it with nothing to take. Left up, it costs every
thread a detour in the eval loop, and on 3.11 a profiled or traced call spins at
its first instruction for ever; so each post is followed by one to a thread of
the watchdog's own, which takes it and so lowers the flag (:func:`_post`).

``Hung`` is an ``AssertionError``, so Hypothesis counts it as a failure and
prints the steps that led to it; :func:`settee.proof.stateful.observe.outcome`
lets it through instead of recording it as the engine's answer. The timeout is
``SETTEE_CALL_TIMEOUT`` seconds (``settee verify --call-timeout``), default
``DEFAULT_SECONDS``: thousands of times a step of the machine on a loaded
machine, so only a call that does not return reaches it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import sys
import threading
import time
from types import FrameType

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
#: The signal that interrupts the main thread: a real-time signal nobody else is
#: likely to use (SIGUSR1 is faulthandler's and many servers' favourite), where
#: the platform has them.
SIGNAL: int = signal.SIGRTMIN + 3 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR1


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
        #: Bumped by every arm and disarm: a signal sent for an earlier generation is
        #: stale by the time it lands (the call it was for has returned).
        self.generation = 0
        self.fired_generation = -1
        #: Whether a Hung was posted as an asynchronous exception since the outermost
        #: arm: the last disarm cancels it, in case it was never delivered.
        self.posted = False


_state = _State()


def arm(seconds: float | None = None) -> int:
    """Start watching the calling thread; return the level to give :func:`disarm`.
    Levels nest (the innermost's time applies); one thread is watched at a time,
    the outermost level's."""
    seconds = call_timeout() if seconds is None else seconds
    _build_unicode_table()
    with _state.cond:
        if not _state.levels:
            _state.target = threading.get_ident()
            _state.fired = False
            _install_handler()
        level = len(_state.levels)
        _state.levels.append(seconds)
        _state.generation += 1
        _state.deadline = time.monotonic() + seconds
        _state.what = ""
        if _state.thread is None:
            _state.thread = threading.Thread(target=_watch, name="settee-watchdog", daemon=True)
            _state.thread.start()
        _state.cond.notify()
    return level


@functools.cache
def _build_unicode_table() -> None:
    """Hypothesis builds its table of Unicode categories at a process's first text
    draw, unless a ``.hypothesis`` folder in the working directory holds it: half a
    second idle, more under load, between two engine calls. With a short call
    timeout (``settee verify --call-timeout 1``) that gap was taken for a hang, and
    the replay, with the table built, found none. Built once, before any watch."""
    with contextlib.suppress(Exception):  # Hypothesis's own cache: best effort, as it is
        from hypothesis.internal.charmap import charmap

        charmap()


def disarm(level: int | None = None) -> None:
    """End ``level`` (by default the innermost) and every level inside it; the level
    around it, if any, starts its time afresh. Safe to repeat."""
    while True:
        try:
            _disarm(level)
            return
        except Hung:
            # An asynchronous Hung (another thread than the main one) queued before
            # this disarm ran: ending the levels is idempotent, so end them again.
            continue


def _disarm(level: int | None) -> None:
    with _state.cond:
        levels = _state.levels
        keep = max(0, len(levels) - 1) if level is None else level
        if keep < len(levels):
            del levels[keep:]
            _state.generation += 1
        if not levels and _state.posted:
            # Cancel an asynchronous Hung not delivered yet. Outside the branch above:
            # a Hung landing before this line makes disarm run again, levels gone.
            _post(_state.target, None)
            _state.posted = False
        if levels:
            _state.deadline = time.monotonic() + levels[-1]
        _state.cond.notify()


class watching:  # a context manager, named as the function it replaced
    """:func:`arm` for the ``with`` block. A class, not ``contextlib.contextmanager``:
    a signal landing in contextlib's ``__exit__``, before it resumed the generator's
    ``finally``, left the level armed (found in review); this ``__exit__`` is the
    module's own code, where a signal is never raised."""

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = seconds
        self.level = -1

    def __enter__(self) -> None:
        self.level = arm(self.seconds)

    def __exit__(self, *exc: object) -> None:
        disarm(self.level)


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
            state.fired_generation = state.generation
            _interrupt(state.target)
            state.deadline = time.monotonic() + max(1.0, seconds / 4)


def _interrupt(ident: int) -> None:
    if ident == threading.main_thread().ident and _handler_installed():
        signal.pthread_kill(ident, SIGNAL)
    else:
        _state.posted = True
        _post(ident, Hung)


#: Until 3.13 the flag saying "a thread has an asynchronous exception" is the
#: interpreter's (measured: 3.11 and 3.12 keep it up after a cancel, 3.13 does not).
_SHARED_FLAG = sys.version_info < (3, 13)


class _Lowered(BaseException):
    """Posted to, and taken by, the watchdog's own short-lived thread (:func:`_post`)."""


def _post(ident: int, exc: type[BaseException] | None) -> None:
    """Queue ``exc`` for thread ``ident`` (``None`` cancels one not delivered yet) and
    leave the interpreter's flag down. Lowering it does not lose ``ident``'s
    exception: a thread taking the GIL back raises the flag again when it has one
    waiting, and the target cannot run while the lowering thread holds the GIL."""
    _set_async_exc(ident, exc)
    if not _SHARED_FLAG:
        return
    lowering = threading.Thread(target=_take_own, name="settee-watchdog-flag", daemon=True)
    with contextlib.suppress(RuntimeError):  # no new threads at interpreter shutdown
        lowering.start()
        lowering.join()


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> None:
    arg = None if exc is None else ctypes.py_object(exc)
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), arg)


def _take_own() -> None:
    """Post :class:`_Lowered` to this thread and take it: taking one's own asynchronous
    exception is what lowers the flag (and recomputes the eval breaker)."""
    try:
        _set_async_exc(threading.get_ident(), _Lowered)
        # It lands at the next check of the eval breaker, the call's return; the
        # loop (bounded, should that ever change) gives it more checks.
        for _ in range(1_000_000):
            pass
    except _Lowered:
        return


def _on_signal(signum: int, frame: FrameType | None) -> None:
    # Raise only into the call it was sent for: not when a disarm or arm came since
    # (the signal was in flight), nor inside this module's own code (a Hung raised in
    # disarm would leave its level armed, to fire into whatever runs next); a thread
    # still stuck is signalled again a moment later.
    state = _state
    if not state.levels or state.fired_generation != state.generation:
        return
    if _in_watchdog(frame):
        return
    raise Hung(state.message)


def _in_watchdog(frame: FrameType | None) -> bool:
    """Whether ``frame`` or one of its callers (the lock a disarm waits for is the
    threading module's) is this module's code."""
    for _ in range(_FRAMES_SEEN):
        if frame is None:
            return False
        if frame.f_code.co_filename == __file__:
            return True
        frame = frame.f_back
    return False


#: Frames walked up from where a signal landed: arm/disarm -> Condition -> its lock.
_FRAMES_SEEN = 6


def _handler_installed() -> bool:
    return signal.getsignal(SIGNAL) is _on_signal


def _install_handler() -> None:
    """Take ``SIGNAL`` for the watchdog, once, from the main thread, unless someone else
    handles it already (then the slower asynchronous exception is used). Never given
    back: a signal in flight at a disarm must not meet the default action (exit)."""
    if threading.current_thread() is not threading.main_thread() or _handler_installed():
        return
    if signal.getsignal(SIGNAL) in (signal.SIG_DFL, None):
        signal.signal(SIGNAL, _on_signal)

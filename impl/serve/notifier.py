"""Wakes the ``_changes`` feeds waiting on a database, by the database's name.

A live feed holds no database open while it waits (changes.py gives its lease
back, as couch_changes closes its db and waits for couch_event's ``updated``):
the database may be closed to make room for others and opened again before the
next write. So feeds wait on the name, not on an open handle, and a write to
the reopened database still wakes them. Event-loop side only: writers on worker
threads call ``bump`` through ``loop.call_soon_threadsafe`` (``State.notify``).
"""

from __future__ import annotations

import asyncio

__all__ = ["REPLICATOR_WAKE", "Notifier"]

#: Bumped after a write to any ``_replicator`` database, and when one is created or
#: deleted: what repdocs.py's processor waits on. No database has this name (a name
#: starts with a letter or "_").
REPLICATOR_WAKE = " replicator"


class Notifier:
    """One event per database name that feeds wait on; none kept for a name no
    feed waits on, so the server's thousands of quiet databases cost nothing."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def waiter(self, name: str) -> asyncio.Event:
        """An event set by the next ``bump(name)``: take it *before* reading the
        changes, so a write that lands in between still wakes the reader."""
        event = self._events.get(name)
        if event is None:
            event = self._events[name] = asyncio.Event()
        return event

    def bump(self, name: str) -> None:
        """Wake every feed waiting on ``name`` (a write, or its deletion)."""
        event = self._events.pop(name, None)
        if event is not None:
            event.set()

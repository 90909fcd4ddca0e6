"""The database events ``/_db_updates`` lists, collected as they happen until
dbupdates.py writes them to the ``_global_changes`` database (its docstring says
how CouchDB keeps them). Apart from it so that ``State`` can hold the collector
without importing the feed."""

from __future__ import annotations

import threading

__all__ = ["GLOBAL_CHANGES", "DbEvents"]

#: global_changes_util:get_dbname's default.
GLOBAL_CHANGES = "_global_changes"


class DbEvents:
    """The events not yet written: a set of ``"<type>:<db name>"`` ids, so an event
    repeated within one interval is written once (global_changes_server's set)."""

    def __init__(self) -> None:
        self._pending: set[str] = set()
        self._lock = threading.Lock()

    def record(self, event: str, name: str) -> None:
        """Note that database ``name`` was ``event`` ("created", "updated" or
        "deleted"); the ``_global_changes`` database's own writes are not events."""
        if name != GLOBAL_CHANGES:
            with self._lock:
                self._pending.add(f"{event}:{name}")

    def take(self) -> list[str]:
        """The pending event ids, sorted, leaving none pending."""
        with self._lock:
            taken, self._pending = self._pending, set()
        return sorted(taken)

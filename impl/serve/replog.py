"""The replication log: the ``_local/<replication id>`` document both sides keep.

Its shape is CouchDB's (couch_replicator_scheduler_job): ``session_id``,
``source_last_seq``, ``replication_id_version`` and ``history``, newest entry
first and at most 50, each entry a session's times, seqs and counters (a
replication by ``doc_ids`` repeats its counters at the top, as CouchDB 0.11 and
1.0 answered). A run starts where the two sides' logs agree
(``compare_logs``) and counts on from that entry's counters (``Stats``), so the
counters of a replication add up across its runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from email.utils import formatdate
from typing import Any

from settee.serve.repspec import REP_ID_VERSION

__all__ = ["HISTORY_LIMIT", "Session", "Stats", "checkpoint_body", "compare_logs"]

#: How many history entries a checkpoint keeps (couch_replicator_scheduler_job).
HISTORY_LIMIT = 50


@dataclass(slots=True)
class Stats:
    """couch_replicator_stats, as the history and ``_active_tasks`` name them."""

    missing_checked: int = 0
    missing_found: int = 0
    docs_read: int = 0
    docs_written: int = 0
    doc_write_failures: int = 0
    bulk_get_docs: int = 0
    bulk_get_attempts: int = 0

    @classmethod
    def from_history(cls, entry: Any) -> Stats:
        """The counters of a history entry, so a run goes on counting from them."""
        fields = entry if isinstance(entry, dict) else {}
        values = {name: fields.get(name, 0) for name in asdict(cls())}
        return cls(**{k: v if isinstance(v, int) else 0 for k, v in values.items()})


@dataclass(frozen=True, slots=True)
class Session:
    """One run of a replication: what its history entry says of where it began."""

    session_id: str
    start_time: str
    start_seq: Any
    #: The older entries the run keeps (from ``compare_logs``), newest first.
    history: list[Any]


def checkpoint_body(
    session: Session, seq: Any, stats: dict[str, int], *, by_doc_ids: bool
) -> dict[str, Any]:
    """The log recording that the target holds the source up to ``seq``. Within a
    session each checkpoint replaces the session's own entry, as CouchDB's does."""
    end_time = formatdate(usegmt=True)
    entry = {
        "session_id": session.session_id,
        "start_time": session.start_time,
        "end_time": end_time,
        "start_last_seq": session.start_seq,
        "end_last_seq": seq,
        "recorded_seq": seq,
        **stats,
    }
    body: dict[str, Any] = {
        "session_id": session.session_id,
        "source_last_seq": seq,
        "replication_id_version": REP_ID_VERSION,
    }
    if by_doc_ids:
        body["start_time"], body["end_time"] = session.start_time, end_time
        for name in ("docs_read", "docs_written", "doc_write_failures"):
            body[name] = stats[name]
    body["history"] = [entry, *session.history][:HISTORY_LIMIT]
    return body


def compare_logs(source: dict[str, Any], target: dict[str, Any]) -> tuple[Any, list[Any]]:
    """Where to start and the history to keep (compare_replication_logs): the source's
    record when both sides hold the same session, else the newest session both
    histories know, else the beginning."""
    if source.get("session_id") == target.get("session_id"):
        history = source.get("history", [])
        return source.get("source_last_seq", 0), history if isinstance(history, list) else []
    return _common_history(_entries(source), _entries(target))


def _entries(log_doc: dict[str, Any]) -> list[dict[str, Any]]:
    history = log_doc.get("history", [])
    return [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []


def _common_history(
    source: list[dict[str, Any]], target: list[dict[str, Any]]
) -> tuple[Any, list[Any]]:
    """compare_rep_history: the first entry of either side whose session the other
    side's history holds; the entries older than it are the history kept."""
    while source and target:
        s, t = source[0], target[0]
        if any(e.get("session_id") == s.get("session_id") for e in target):
            return s.get("recorded_seq", 0), source[1:]
        if any(e.get("session_id") == t.get("session_id") for e in source[1:]):
            return t.get("recorded_seq", 0), target[1:]
        source, target = source[1:], target[1:]
    return 0, []

"""One replication, run over HTTP as CouchDB's replicator runs it.

Every step is a request any CouchDB-compatible server answers (protocol.rst):
the source's ``_changes`` (``style=all_docs``, from the checkpoint or
``since_seq``), ``_revs_diff`` on the target, the missing revisions read with
``_bulk_get`` (documents without attachments) or ``open_revs`` (``revs``,
``latest``, ``attachments`` with ``atts_since`` the target's possible ancestors),
written with ``_bulk_docs`` ``new_edits: false``, and a checkpoint in
``_local/<replication id>`` on both sides holding CouchDB's ``history``.

Counters follow couch_replicator_worker: ``missing_checked`` counts the
revisions the changes listed, ``missing_found`` those the target lacked,
``docs_read`` the revisions fetched, ``docs_written``/``doc_write_failures`` what
the target took or refused (a validate_doc_update refusal is a failure of that
document, not of the replication). They start from the newest history entry of
a checkpoint both sides agree on, so they add up across runs.

A ``Replication`` runs on its caller's thread (never the server's worker pool:
its requests may be to this same server). Each request has a timeout; a
failure is an ``HTTPError`` with CouchDB's error name.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, urlencode

from settee.httpclient import Client
from settee.serve.abortable import AbortableClient
from settee.serve.protocol import HTTPError
from settee.serve.replog import Session, Stats, checkpoint_body, compare_logs
from settee.serve.repspec import Endpoint, Spec, quote_id
from settee.spec.errors import SetteeError

__all__ = ["Replication"]

log = logging.getLogger("settee.serve.replicate")

#: Bytes of JSON gathered before a ``_bulk_docs`` is sent (the worker's DOC_BUFFER_BYTE_SIZE).
_BATCH_BYTES = 512 * 1024
#: Seconds before a request that could not reach its server is sent again (then doubled).
_FIRST_RETRY_WAIT = 0.25
#: Statuses of a ``_bulk_docs`` refused for what it holds: split it, down to one document.
_SPLIT_STATUSES = frozenset({400, 413, 415})


class Replication:
    """The state of one replication job; ``run`` does the work."""

    def __init__(
        self,
        spec: Spec,
        rep_id: tuple[str, str],
        should_stop: Callable[[], bool],
    ) -> None:
        assert spec.source is not None and spec.target is not None  # not a cancel by id
        self.spec = spec
        self.base, self.ext = rep_id
        self.should_stop = should_stop
        self.source_ep: Endpoint = spec.source
        self.target_ep: Endpoint = spec.target
        self.source = AbortableClient(spec.source.server, timeout=spec.timeout)
        self.target = AbortableClient(spec.target.server, timeout=spec.timeout)
        self.session_id = uuid.uuid4().hex
        self.stats = Stats()
        self.lock = threading.Lock()  # the counters and seqs, read by _active_tasks
        self.started_on = int(time.time())
        self.updated_on = self.started_on
        self.start_seq: Any = 0
        self.through_seq: Any = 0
        self.committed_seq: Any = 0
        self.source_seq: Any = 0
        self.seen_changes = False
        self.history: list[Any] = []
        self.checkpoint_body: dict[str, Any] | None = None
        self.start_time = formatdate(usegmt=True)
        self._logs: dict[str, dict[str, Any]] = {}
        self._last_checkpoint = time.monotonic()

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Replicate until the source has no more changes (one-shot) or until
        ``should_stop`` (continuous); CouchDB's result body, ``ok`` first."""
        try:
            self._open()
            try:
                self._follow_changes()
            except HTTPError:
                if not self.should_stop():
                    raise  # else a request cut short by ``stop``: the batch is left undone
            return self._finish()
        finally:
            self.source.close()
            self.target.close()

    def stop(self) -> None:
        """Cut short the source's request in flight (a longpoll waits seconds), once
        ``should_stop`` says so: the job then checkpoints what it finished and ends."""
        self.source.abort()

    def _follow_changes(self) -> None:
        for rows in self._change_batches():
            if self.should_stop():
                break  # read before a cancel: left for the next run, as CouchDB's
            if rows:
                self._replicate_batch(rows)
            self._maybe_checkpoint()

    def _open(self) -> None:
        info = _open_db(self.source, self.source_ep, create=False, params=())
        create = self.spec.create_target
        _open_db(self.target, self.target_ep, create=create, params=self.spec.create_target_params)
        self.source_seq = info.get("update_seq", 0)
        source_log = self._read_log(self.source, "source")
        target_log = self._read_log(self.target, "target")
        start, self.history = compare_logs(source_log, target_log)
        self.stats = Stats.from_history(self.history[0] if self.history else None)
        self.start_seq = start if self.spec.since_seq is None else self.spec.since_seq
        self.through_seq = self.committed_seq = self.start_seq

    def _finish(self) -> dict[str, Any]:
        if not self.seen_changes:
            # Nothing read: CouchDB answers the checkpoint as it found it.
            found = {k: v for k, v in self._logs["source"].items() if k not in ("_id", "_rev")}
            return {"ok": True, "no_changes": True, **found}
        self._checkpoint()
        if not self.spec.use_checkpoints:
            return {"ok": True, "use_checkpoints": False}
        assert self.checkpoint_body is not None  # _checkpoint wrote one: changes were seen
        return {"ok": True, **self.checkpoint_body}

    # -- reading changes -------------------------------------------------------------------------

    def _change_batches(self) -> Iterator[list[dict[str, Any]]]:
        """The source's changes since the start, a batch at a time. One-shot: until a
        batch comes back short. Continuous: longpoll (an empty batch when it times
        out, so checkpoints stay due), until told to stop."""
        since = self.start_seq
        while not self.should_stop():
            body = self._read_changes(since)
            yield [r for r in body.get("results", []) if _replicable(r)]
            if "last_seq" in body:
                since = body["last_seq"]
            if not self.spec.continuous and len(body.get("results", [])) < self.spec.batch_size:
                return

    def _read_changes(self, since: Any) -> dict[str, Any]:
        query: list[tuple[str, str]] = [
            ("feed", "longpoll" if self.spec.continuous else "normal"),
            ("style", "main_only" if self.spec.winning_revs_only else "all_docs"),
            ("since", _seq_text(since)),
            ("limit", str(self.spec.batch_size)),
        ]
        if self.spec.continuous:
            # Well inside the request timeout (a cancel cuts it short: ``stop``).
            query.append(("timeout", str(int(min(10.0, self.spec.timeout / 3) * 1000))))
        method, body = "GET", None
        if self.spec.doc_ids is not None:
            method, body = "POST", {"doc_ids": list(self.spec.doc_ids)}
            query.append(("filter", "_doc_ids"))
        elif self.spec.selector is not None:
            method, body = "POST", {"selector": self.spec.selector}
            query.append(("filter", "_selector"))
        elif self.spec.filter is not None:
            query.append(("filter", self.spec.filter))
            taken = {name for name, _ in query}
            query += [(k, v) for k, v in self.spec.query_params if k not in taken]
        status, reply = self._request(self.source, method, "/_changes?" + urlencode(query), body)
        if 400 <= status < 500:
            # The feed refused what the request asked for (a filter it does not know,
            # a view that is not there): the client's to fix, so its 4xx, not a 500.
            detail = _error(reply)
            reason = f"{self.source_ep.uri}_changes: {detail['reason']}"
            raise HTTPError(status, str(detail["error"]), reason)
        if status != 200 or not isinstance(reply, dict):
            raise _failed("changes_req_failed", self.source_ep, status, reply)
        return reply

    # -- one batch -------------------------------------------------------------------------------

    def _replicate_batch(self, rows: list[dict[str, Any]]) -> None:
        revs = {row["id"]: [c["rev"] for c in row["changes"] if "rev" in c] for row in rows}
        missing = self._revs_diff(revs)
        with self.lock:
            self.stats.missing_checked += sum(len(r) for r in revs.values())
            self.stats.missing_found += sum(len(m) for m, _ in missing.values())
        docs = self._fetch(missing)
        self._write(docs, missing)
        with self.lock:
            self.seen_changes = True
            self.through_seq = rows[-1]["seq"]
            self.updated_on = int(time.time())

    def _revs_diff(self, revs: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
        """For each document, the revisions the target lacks and its possible ancestors."""
        status, reply = self._request(self.target, "POST", "/_revs_diff", revs)
        if status != 200 or not isinstance(reply, dict):
            raise _failed("revs_diff_failed", self.target_ep, status, reply)
        missing = {}
        for doc_id, found in reply.items():
            if isinstance(found, dict) and found.get("missing"):
                ancestors = found.get("possible_ancestors", [])
                missing[doc_id] = (list(found["missing"]), list(ancestors))
        return missing

    def _fetch(self, missing: dict[str, tuple[list[str], list[str]]]) -> list[dict[str, Any]]:
        """The missing revisions from the source, as ``_bulk_docs`` takes them."""
        plain = [i for i in missing if not i.startswith("_design/")]
        docs = self._bulk_get(plain, missing) if self.spec.use_bulk_get and plain else []
        got = {(d["_id"], d["_rev"]) for d in docs}
        for doc_id, (revs, ancestors) in missing.items():
            wanted = [rev for rev in revs if (doc_id, rev) not in got]
            if wanted:
                docs += self._open_revs(doc_id, wanted, ancestors)
        with self.lock:
            self.stats.docs_read += len(docs)
        return docs

    def _bulk_get(
        self, ids: list[str], missing: dict[str, tuple[list[str], list[str]]]
    ) -> list[dict[str, Any]]:
        """What ``_bulk_get`` gives of the plain documents (those with attachments are
        read again with theirs, as the worker does); none if the source has no
        ``_bulk_get``: every revision is then read with ``open_revs``."""
        asked = [{"id": i, "rev": rev} for i in ids for rev in missing[i][0]]
        path = "/_bulk_get?revs=true&latest=true&attachments=false"
        status, reply = self._request(self.source, "POST", path, {"docs": asked})
        results = reply.get("results") if status == 200 and isinstance(reply, dict) else None
        items = [
            item.get("ok") if isinstance(item, dict) else None
            for result in (results if isinstance(results, list) else [])
            for item in (result.get("docs", []) if isinstance(result, dict) else [])
        ]
        docs = [d for d in items if isinstance(d, dict) and "_id" in d and "_rev" in d]
        docs = [d for d in docs if not d.get("_attachments")]
        with self.lock:
            self.stats.bulk_get_attempts += len(asked)
            self.stats.bulk_get_docs += len(docs)
        return docs

    def _open_revs(
        self, doc_id: str, revs: list[str], ancestors: list[str]
    ) -> list[dict[str, Any]]:
        query = f"open_revs={_json_param(revs)}&revs=true&latest=true&attachments=true"
        if ancestors:
            query += f"&atts_since={_json_param(ancestors)}"
        status, reply = self._request(self.source, "GET", f"/{quote_id(doc_id)}?{query}")
        if status == 404:
            return []  # gone since the changes named it (deleted database, purge): nothing to copy
        if status != 200 or not isinstance(reply, list):
            raise _failed("open_revs_failed", self.source_ep, status, reply)
        found = [item.get("ok") for item in reply if isinstance(item, dict)]
        return [d for d in found if isinstance(d, dict) and "_id" in d and "_rev" in d]

    # -- writing ---------------------------------------------------------------------------------

    def _write(self, docs: list[dict[str, Any]], missing: dict[str, Any]) -> None:
        """Plain documents in batches of about 512 KiB; a document with attachments
        alone, so one whose stubs the target cannot satisfy is read again whole."""
        batch: list[dict[str, Any]] = []
        size = 0
        for doc in docs:
            if doc.get("_attachments"):
                self._write_with_attachments(doc, bool(missing.get(doc["_id"], ((), ()))[1]))
                continue
            batch.append(doc)
            size += len(json.dumps(doc))
            if size > _BATCH_BYTES:
                self._bulk_docs(batch)
                batch, size = [], 0
        if batch:
            self._bulk_docs(batch)

    def _write_with_attachments(self, doc: dict[str, Any], had_ancestors: bool) -> None:
        errors = self._bulk_docs([doc], count=False)
        if errors and errors[0].get("error") == "missing_stub" and had_ancestors:
            # The target lost the attachment a stub names (compaction, purge): send them all.
            fresh = self._open_revs(doc["_id"], [doc["_rev"]], [])
            errors = self._bulk_docs(fresh, count=False) if fresh else errors
        with self.lock:
            self.stats.docs_written += 1 - len(errors[:1])
            self.stats.doc_write_failures += len(errors[:1])
        for error in errors:
            _log_refusal(self.target_ep, error)

    def _bulk_docs(self, docs: list[dict[str, Any]], count: bool = True) -> list[dict[str, Any]]:
        """Write ``docs`` as they are (``new_edits: false``); the per-document errors.
        A request refused whole for what it holds is split until each document
        stands alone, so one bad document fails alone."""
        body = {"docs": docs, "new_edits": False}
        status, reply = self._request(self.target, "POST", "/_bulk_docs", body)
        if status in (200, 201, 202) and isinstance(reply, list):
            errors = [r for r in reply if isinstance(r, dict) and "error" in r]
        elif status in _SPLIT_STATUSES and len(docs) > 1:
            half = len(docs) // 2
            return self._bulk_docs(docs[:half], count) + self._bulk_docs(docs[half:], count)
        elif status in _SPLIT_STATUSES:
            errors = [{"id": docs[0].get("_id"), "rev": docs[0].get("_rev"), **_error(reply)}]
        else:
            raise _failed("bulk_docs_failed", self.target_ep, status, reply)
        if count:
            with self.lock:
                self.stats.docs_written += len(docs) - len(errors)
                self.stats.doc_write_failures += len(errors)
            for error in errors:
                _log_refusal(self.target_ep, error)
        return errors

    # -- checkpoints -----------------------------------------------------------------------------

    def _read_log(self, client: Client, side: str) -> dict[str, Any]:
        status, reply = self._request(client, "GET", f"/_local/{quote(self.base, safe='')}")
        log_doc = reply if status == 200 and isinstance(reply, dict) else {}
        if status not in (200, 404):
            endpoint = self.source_ep if side == "source" else self.target_ep
            raise _failed("checkpoint_read_failed", endpoint, status, reply)
        self._logs[side] = log_doc
        return log_doc

    def _maybe_checkpoint(self) -> None:
        due = time.monotonic() - self._last_checkpoint >= self.spec.checkpoint_interval
        if due:
            self._checkpoint()

    def _checkpoint(self) -> None:
        """Record how far the target holds the source, on both sides (scheduler_job's
        do_checkpoint): the newest entry first, the history kept to 50 entries."""
        self._last_checkpoint = time.monotonic()
        if not self.spec.use_checkpoints or self.through_seq == self.committed_seq:
            return
        for client, endpoint in ((self.source, self.source_ep), (self.target, self.target_ep)):
            status, reply = self._request(client, "POST", "/_ensure_full_commit", {})
            if status >= 300:
                raise _failed("checkpoint_commit_failure", endpoint, status, reply)
        body = self._checkpoint_body(self.through_seq)
        for client, side in ((self.source, "source"), (self.target, "target")):
            self._logs[side] = self._write_log(client, side, body)
        with self.lock:
            self.committed_seq = self.through_seq
            self.checkpoint_body = body

    def _checkpoint_body(self, seq: Any) -> dict[str, Any]:
        with self.lock:
            stats = asdict(self.stats)
        session = Session(self.session_id, self.start_time, self.start_seq, self.history)
        return checkpoint_body(session, seq, stats, by_doc_ids=self.spec.doc_ids is not None)

    def _write_log(self, client: Client, side: str, body: dict[str, Any]) -> dict[str, Any]:
        endpoint = self.source_ep if side == "source" else self.target_ep
        path = f"/_local/{quote(self.base, safe='')}"
        old = self._logs.get(side, {})
        doc = {**body, **({"_rev": old["_rev"]} if "_rev" in old else {})}
        status, reply = self._request(client, "PUT", path, doc)
        if status == 409:
            # Written by a request whose answer was lost? Then it holds this body.
            status, reply = self._request(client, "GET", path)
            if status == 200 and {k: v for k, v in reply.items() if k[0] != "_"} == body:
                return dict(reply)
            raise HTTPError(500, "checkpoint_commit_failure", f"conflict on {endpoint.uri}")
        if status not in (200, 201) or not isinstance(reply, dict):
            raise _failed("checkpoint_commit_failure", endpoint, status, reply)
        return {**body, "_rev": reply.get("rev")}

    # -- requests --------------------------------------------------------------------------------

    def _request(self, client: Client, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``client.request``, tried again after a failure to reach the server (a
        restart, a dropped connection) ``retries_per_request`` times, waiting
        0.25 s, then twice as long each time (couch_replicator_httpc). Every
        request the replicator sends may be sent twice: revisions written with
        ``new_edits: false`` are idempotent, and a checkpoint's conflict is checked."""
        wait = _FIRST_RETRY_WAIT
        for attempt in itertools.count():
            try:
                return client.request(method, path, body)
            except ValueError as exc:  # a request http.client refuses: no retry mends it
                failure = str(exc)
                break
            except SetteeError as exc:
                failure = str(exc)
                if attempt >= self.spec.retries or self.should_stop():
                    break
            time.sleep(wait)
            wait *= 2
        endpoint = self.source_ep if client is self.source else self.target_ep
        raise HTTPError(500, "http_request_failed", f"{endpoint.uri}: {failure}")


# -- helpers --------------------------------------------------------------------------------------


def _open_db(
    client: Client, endpoint: Endpoint, *, create: bool, params: tuple[tuple[str, Any], ...]
) -> dict[str, Any]:
    """The database's info, creating it first if asked (couch_replicator_api_wrap:db_open)."""
    try:
        if create:
            query = urlencode([(k, _param_text(v)) for k, v in params])
            status, _ = client.request("PUT", "?" + query if query else "")
            _refused(status, endpoint)
        status, info = client.request("GET", "/")
    except (SetteeError, ValueError) as exc:  # ValueError: a header http.client refuses
        raise HTTPError(404, "db_not_found", f"could not open {endpoint.uri}: {exc}") from None
    _refused(status, endpoint)
    # A server root, or anything else that is not a database, has neither field.
    if (
        status == 200
        and isinstance(info, dict)
        and {"update_seq", "instance_start_time"} <= set(info)
    ):
        return info
    raise HTTPError(404, "db_not_found", f"could not open {endpoint.uri}")


def _refused(status: int, endpoint: Endpoint) -> None:
    if status == 401:
        reason = f"unauthorized to access or create database {endpoint.uri}"
        raise HTTPError(401, "unauthorized", reason)
    if status == 403:
        raise HTTPError(403, "forbidden", f"forbidden to access or create database {endpoint.uri}")


def _replicable(row: Any) -> bool:
    # CouchDB skips an empty id (an old bug let one in); a row without revisions has nothing.
    if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not row["id"]:
        return False
    if "seq" not in row:
        return False
    changes = row.get("changes")
    return isinstance(changes, list) and bool(changes) and all(isinstance(c, dict) for c in changes)


def _seq_text(seq: Any) -> str:
    """A seq as ``since=`` takes it (couch_replicator_utils:seq_encode)."""
    if isinstance(seq, str):
        return seq
    if isinstance(seq, int) and not isinstance(seq, bool):
        return str(seq)
    return json.dumps(seq, separators=(",", ":"))


def _param_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _json_param(value: Any) -> str:
    return quote(json.dumps(value, separators=(",", ":")), safe="")


def _error(reply: Any) -> dict[str, Any]:
    if isinstance(reply, dict):
        return {"error": reply.get("error", "unknown_error"), "reason": reply.get("reason", "")}
    return {"error": "unknown_error", "reason": str(reply)}


def _failed(error: str, endpoint: Endpoint, status: int, reply: Any) -> HTTPError:
    detail = _error(reply)
    reason = f"{endpoint.uri} answered {status} {detail['error']}: {detail['reason']}"
    return HTTPError(500, error, reason)


def _log_refusal(endpoint: Endpoint, error: dict[str, Any]) -> None:
    log.warning(
        "replicator: %s refused document %r revision %r: %s: %s",
        endpoint.uri,
        error.get("id"),
        error.get("rev"),
        error.get("error"),
        error.get("reason"),
    )

"""``settee.http``: settee's API spoken over CouchDB's HTTP API, so the proof can check
any CouchDB-compatible server (``settee serve``, CouchDB, pouchdb-server)::

    SETTEE_HTTP_URL=http://user:pass@127.0.0.1:5984 \\
        settee verify --engine settee.http:open --only equivalence

``open(path, **options)`` is an engine factory like ``settee.open``; the server is
``SETTEE_HTTP_URL`` (default ``http://127.0.0.1:5984``), read at each ``open``.
Requests, connections and error replies are ``settee.httpclient``'s (standard
library only): 409 is ``Conflict``, 404 ``NotFound`` with the server's reason,
400/413/414/415/431 ``BadRequest``, anything else ``SetteeError``. URLs, the
documents sent and the answers' shapes are ``settee.httpwire``'s.

One database per path
    The server database is named after the absolute path (``settee-`` and 16 hex
    digits of its sha256: lowercase, starts with a letter, as CouchDB requires),
    so closing and opening a path again reaches the same data. ``create=True``
    (the default) creates it (``PUT /db``; ``412`` means it exists: a reopen) and
    makes ``path`` a directory holding ``settee-http.json``, which names the
    server database; ``create=False`` raises ``SetteeError`` when the server has
    no such database and creates nothing, as ``settee.open`` does for a path
    without a database.

    Databases this process created are scratch databases, deleted by the adapter
    (``DELETE /db``): ``open`` deletes those whose path has been removed and that
    no open ``Database`` uses (the proof removes each run's directory, so a long
    campaign keeps only the databases it still uses); ``cleanup()`` and, at
    interpreter exit, ``atexit`` delete the rest; ``Database.destroy()`` deletes
    its database at once. A database this process did not create is only ever
    deleted by ``destroy()``.

Options
    Validated exactly as the engine validates them (``spec/config.py``), so a bad
    option is the same ``BadRequest``. ``shards`` is sent as CouchDB's ``q`` when
    the database is created (``q`` is fixed at creation; a reopen does not check
    it). An explicit ``revs_limit`` is set with ``PUT /db/_revs_limit`` at every
    open, as settee applies it per session; a server that refuses it fails the
    open. ``max_document_size`` is checked here, measured as the engine measures
    it. ``fsync``, ``read_mode``, ``strict`` and ``node_size`` mean nothing over
    HTTP and are ignored; ``fs`` (settee's io layer) is an unknown option, so the
    campaigns that need it skip this engine (``open.accepted_options``).

Arguments
    Every argument goes through the spec checks the engine runs first
    (``spec/docs.py``, ``spec/arguments.py``), so what the engine refuses is
    refused here with the same error, before any request: values JSON cannot
    carry (NaN, bytes, non-str keys, nesting beyond 500 levels), hostile ``str``
    and ``int`` subclasses, ids no document URL names (empty, ``_local/``). The
    server sees only plain, valid JSON: the proof compares what it does with
    valid calls, not its own input validation (where CouchDB is laxer than
    settee on purpose: SEMANTICS.md's **[differs]** marks). The document sent is
    the validated one: ``_rev`` (the edited leaf; with ``new_edits=False`` also
    the ``_revisions`` path), ``_deleted`` when true, the normalised body.
    Documents without ``_id`` get it here, from settee's own generator
    (CouchDB's ``sequential`` algorithm, ``spec/docids.py``), so the proof's
    seeded ids are the reference's. Counts above ``2**63 - 1`` mean what
    ``2**63 - 1`` means and are sent as it; a ``since`` int too long to spell is
    no token and is refused.

Answers
    Mapped to the engine's shapes without hiding a difference: ``info`` and
    ``changes`` keep the fields settee's API has (dropping CouchDB's
    ``pending``, ``db_name``, ...; a missing one is a ``SetteeError`` naming it);
    every other answer is the server's JSON with only its member order made the
    engine's (``_id``, ``_rev``, body, ``_deleted``, ``_revisions``,
    ``_conflicts``; ``id``, ``key``, ``value``, ``doc``), which JSON leaves open.
    ``compact`` returns once ``compact_running`` is false: done, as the engine's.
"""

from __future__ import annotations

import atexit
import base64
import builtins
import contextlib
import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from settee import httpwire
from settee.httpclient import Client, Server, encode_json, error_for
from settee.spec.arguments import (
    check_all_docs,
    check_bool,
    check_count,
    check_optional_rev,
    check_path,
    check_purge,
    check_revs_diff,
    check_since,
    make_directories,
    validate_docid,
)
from settee.spec.attachments import check_atts_since, chunked, validate_attachment_name
from settee.spec.config import OPTIONS, validate_options
from settee.spec.docs import ValidDoc, validate_doc
from settee.spec.errors import BadRequest, NotFound, SetteeError
from settee.spec.values import describe, is_sequence, plain_items

__all__ = ["DEFAULT_URL", "MARKER", "URL_ENV", "Database", "cleanup", "database_name", "open"]

URL_ENV = "SETTEE_HTTP_URL"
DEFAULT_URL = "http://127.0.0.1:5984"
#: The file ``open`` writes into ``path``: which server database holds the data.
MARKER = "settee-http.json"
#: Seconds ``compact`` waits for the server to finish compacting.
COMPACT_TIMEOUT = 300.0


def open(path: str, **options: Any) -> Database:
    """Open the server database named after ``path`` (see the module docstring)."""
    path = check_path(path, optional=False)
    config = validate_options(**options)
    explicit = {name for name, value in options.items() if value is not None}
    _SCRATCH.sweep()
    server = Server.from_url(os.environ.get(URL_ENV) or DEFAULT_URL)
    return Database(path, server, config, explicit=explicit)


# The proof decides from a factory's options whether a campaign can run on it (the crash
# campaign needs fs=); a signature of **options alone would claim every option.
open.accepted_options = frozenset(OPTIONS)  # type: ignore[attr-defined]


def database_name(path: str) -> str:
    """The server database for ``path``: ``settee-`` and 16 hex digits of its hash."""
    digest = hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()
    return f"settee-{digest[:16]}"


def cleanup() -> None:
    """Delete every server database this process created (``atexit`` calls it too)."""
    _SCRATCH.delete_all()


# -- the database -------------------------------------------------------------------------------


class Database:
    """One server database, with settee's API. Thread-safe; also a context manager."""

    def __init__(
        self, path: str, server: Server, config: dict[str, Any], *, explicit: set[str]
    ) -> None:
        self.path = os.path.abspath(path)
        self.name = database_name(path)
        self.config = config
        self.server = server
        self._client = Client(server)
        self._base = "/" + self.name
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self._attach(explicit)
        except BaseException:
            self._client.close()
            raise

    def __repr__(self) -> str:
        return f"<settee.http.Database {self.name} at {self.server.url} for {self.path}>"

    # -- lifecycle ----------------------------------------------------------------------------

    def _attach(self, explicit: set[str]) -> None:
        """Create (or find) the server database, then apply this session's options."""
        if self.config["create"] and not self.config["readonly"]:
            self._mark_path()
            q = f"?q={self.config['shards']}" if "shards" in explicit else ""
            status, body = self._client.request("PUT", self._base + q)
            if status in (201, 202):
                _SCRATCH.created(self.server, self.name, self.path)
            elif status != 412:  # 412 file_exists: a reopen
                raise error_for(status, body, f"creating database {self.name}")
        else:
            status, body = self._client.request("GET", self._base)
            if status == 404:
                raise SetteeError(
                    f"{self.path}: the server {self.server.url} has no database {self.name}; "
                    "check the path (create=False)"
                )
            self._check(status, body, "GET", self._base)
        if "revs_limit" in explicit and not self.config["readonly"]:
            self._set_revs_limit(httpwire.count(self.config["revs_limit"]))
        _SCRATCH.opened(self.name)

    def _set_revs_limit(self, limit: int | None) -> None:
        try:
            self._call("PUT", "/_revs_limit", limit)
        except SetteeError as exc:
            # Not the caller's mistake (the option was valid): the server lacks the feature.
            raise SetteeError(
                f"{self.server.url} cannot set revs_limit={limit} on {self.name}: {exc}"
            ) from exc

    def _mark_path(self) -> None:
        """``path`` becomes a directory naming its server database, as the engine makes it
        a directory holding the database (and its removal lets ``open`` delete it)."""
        marker = {"server": self.server.url, "database": self.name}
        try:
            make_directories(self.path)  # os.makedirs recurses per missing parent
            with builtins.open(os.path.join(self.path, MARKER), "w", encoding="utf-8") as f:
                json.dump(marker, f)
        except OSError as exc:
            raise SetteeError(f"{self.path}: cannot open the database: {exc}") from exc

    def close(self) -> None:
        """Close the connections; later calls raise SetteeError. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._client.close()
        _SCRATCH.closed(self.name)

    def destroy(self) -> None:
        """Close, then delete the server database (also one this process did not
        create) and the marker: the data is gone."""
        self.close()
        _SCRATCH.delete(self.server, self.name)
        with contextlib.suppress(OSError):
            os.remove(os.path.join(self.path, MARKER))
            os.rmdir(self.path)

    def __enter__(self) -> Database:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SetteeError("database is closed; open it again with settee.http.open(path)")

    def _check_writable(self) -> None:
        """SEMANTICS.md §1: a ``readonly=True`` handle refuses every write before
        looking at its arguments (it created nothing on open either)."""
        self._check_open()
        if self.config["readonly"]:
            raise SetteeError(
                f"{self.path}: the database was opened with readonly=True; open it "
                "without readonly to write"
            )

    # -- requests -----------------------------------------------------------------------------

    def _call(self, method: str, tail: str, body: Any = None) -> Any:
        """The JSON answer to ``method`` on this database's ``tail``; errors mapped."""
        path = self._base + tail
        status, answer = self._client.request(method, path, body)
        self._check(status, answer, method, path)
        return answer

    @staticmethod
    def _check(status: int, answer: Any, method: str, path: str) -> None:
        if status >= 300:
            raise error_for(status, answer, f"{method} {path}")

    # -- writes -------------------------------------------------------------------------------

    def put(self, doc: Any) -> dict[str, Any]:
        """``PUT /db/{id}``; raises Conflict, BadRequest."""
        self._check_writable()
        valid = self._validate(doc, new_edits=True)
        body = httpwire.wire_doc(valid, new_edits=True, with_id=False)
        answer = self._call("PUT", httpwire.doc_path(valid.id), body)
        return httpwire.result(answer)

    def delete(self, docid: Any, rev: Any) -> dict[str, Any]:
        """``DELETE /db/{id}?rev=``; raises NotFound, Conflict, BadRequest."""
        self._check_writable()
        docid = validate_docid(docid)
        rev = check_optional_rev(rev)
        query = "" if rev is None else "?rev=" + quote(rev, safe="")
        return httpwire.result(self._call("DELETE", httpwire.doc_path(docid) + query))

    def bulk_docs(self, docs: Any, new_edits: Any = True) -> list[dict[str, Any]]:
        """``POST /db/_bulk_docs``; one result per doc (only errors with new_edits=False)."""
        self._check_writable()
        # Judged and read as the engine does (``is_sequence``, ``plain_items``): an
        # object claiming list through __class__, or a list whose __iter__ raises,
        # was a raw TypeError or RuntimeError here (found by settee verify).
        if not is_sequence(docs):
            raise BadRequest(f"docs must be a list of documents, not {type(docs).__name__}")
        check_bool("new_edits", new_edits)
        valid = [
            self._validate(doc, new_edits=new_edits, generate_id=True) for doc in plain_items(docs)
        ]
        wire = [httpwire.wire_doc(v, new_edits=new_edits, with_id=True) for v in valid]
        body = {"docs": wire, "new_edits": new_edits}
        answer = self._call("POST", "/_bulk_docs", body)
        return [httpwire.result(entry) for entry in httpwire.array(answer, "_bulk_docs")]

    def _validate(self, doc: Any, *, new_edits: bool, generate_id: bool = False) -> ValidDoc:
        return validate_doc(
            doc,
            new_edits=new_edits,
            max_document_size=self.config["max_document_size"],
            generate_id=generate_id,
        )

    # -- reads --------------------------------------------------------------------------------

    def get(
        self,
        docid: Any,
        rev: Any = None,
        revs: Any = False,
        conflicts: Any = False,
        attachments: Any = False,
        atts_since: Any = None,
    ) -> dict[str, Any]:
        """``GET /db/{id}?rev=&revs=&conflicts=&attachments=&atts_since=``; raises NotFound."""
        self._check_open()
        docid = validate_docid(docid)
        params = {
            "rev": check_optional_rev(rev),
            "revs": check_bool("revs", revs) or None,
            "conflicts": check_bool("conflicts", conflicts) or None,
            "attachments": check_bool("attachments", attachments) or None,
            "atts_since": check_atts_since(atts_since),
        }
        return httpwire.doc(self._call("GET", httpwire.doc_path(docid) + httpwire.query(params)))

    def attachment_chunks(
        self, docid: Any, name: Any, rev: Any = None
    ) -> tuple[dict[str, Any], Iterator[bytes]]:
        """``attachment`` without ``data``, and the bytes in 64 KiB chunks."""
        found = self.attachment(docid, name, rev)
        data = found.pop("data")
        return found, iter(chunked(data))

    def attachment(self, docid: Any, name: Any, rev: Any = None) -> dict[str, Any]:
        """The attachment from ``GET /db/{id}?attachments=true`` (its record and bytes
        in one JSON answer); raises NotFound."""
        name = validate_attachment_name(name)
        found = self.get(docid, rev=rev, attachments=True).get("_attachments", {}).get(name)
        if found is None:
            raise NotFound("missing")
        data = base64.b64decode(found["data"])
        return {
            "content_type": found["content_type"],
            "revpos": found["revpos"],
            "digest": found["digest"],
            "length": len(data),
            "data": data,
        }

    def all_docs(
        self,
        startkey: Any = None,
        endkey: Any = None,
        keys: Any = None,
        include_docs: Any = False,
        limit: Any = None,
        skip: Any = 0,
        descending: Any = False,
        inclusive_end: Any = True,
    ) -> dict[str, Any]:
        """``GET /db/_all_docs`` (``POST`` with ``{"keys"}``), JSON-encoded bounds."""
        self._check_open()
        q = check_all_docs(
            startkey, endkey, keys, include_docs, limit, skip, descending, inclusive_end
        )
        params: dict[str, Any] = {
            "include_docs": q.include_docs or None,
            "limit": httpwire.count(q.limit),
            "skip": httpwire.count(q.skip) or None,
            "descending": q.descending or None,
        }
        if q.keys is not None:
            # With keys, the bounds and inclusive_end play no part (SEMANTICS.md §8.2).
            answer = self._call("POST", "/_all_docs" + httpwire.query(params), {"keys": q.keys})
        else:
            params["startkey"] = None if q.startkey is None else encode_json(q.startkey).decode()
            params["endkey"] = None if q.endkey is None else encode_json(q.endkey).decode()
            params["inclusive_end"] = None if q.inclusive_end else False
            answer = self._call("GET", "/_all_docs" + httpwire.query(params))
        if isinstance(answer, dict) and isinstance(answer.get("rows"), list):
            answer = {**answer, "rows": [httpwire.row(row) for row in answer["rows"]]}
        return httpwire.ordered(answer, ("total_rows", "offset", "rows"))

    def changes(
        self, since: Any = 0, limit: Any = None, include_docs: Any = False
    ) -> dict[str, Any]:
        """``GET /db/_changes?since=&limit=&include_docs=``; tokens are the server's."""
        self._check_open()
        since = check_since(since)
        params = {
            "since": httpwire.since_text(since),
            "limit": httpwire.count(check_count("limit", limit, optional=True)),
            "include_docs": check_bool("include_docs", include_docs) or None,
        }
        answer = self._call("GET", "/_changes" + httpwire.query(params))
        rows = httpwire.array(httpwire.field(answer, "results", "_changes"), "_changes results")
        return {
            "results": [httpwire.change(row) for row in rows],
            "last_seq": httpwire.field(answer, "last_seq", "_changes"),
        }

    def revs_diff(self, revs: Any) -> dict[str, Any]:
        """``POST /db/_revs_diff``."""
        self._check_open()
        answer = self._call("POST", "/_revs_diff", check_revs_diff(revs))
        if not isinstance(answer, dict):
            raise SetteeError(f"_revs_diff answered {describe(answer)}, not an object")
        return {
            k: httpwire.ordered(v, ("missing", "possible_ancestors")) for k, v in answer.items()
        }

    def purge(self, revs: Any) -> dict[str, Any]:
        """``POST /db/_purge``."""
        self._check_writable()
        answer = self._call("POST", "/_purge", check_purge(revs))
        purged = httpwire.field(answer, "purged", "_purge")
        if not isinstance(purged, dict):
            raise SetteeError(f"_purge answered purged {describe(purged)}, not an object")
        return {"purge_seq": httpwire.field(answer, "purge_seq", "_purge"), "purged": purged}

    def info(self) -> dict[str, Any]:
        """``GET /db``: counts, the update seq token and sizes (the server's own)."""
        self._check_open()
        answer = self._call("GET", "")
        return {
            "doc_count": httpwire.field(answer, "doc_count", "GET /db"),
            "doc_del_count": httpwire.field(answer, "doc_del_count", "GET /db"),
            "update_seq": httpwire.field(answer, "update_seq", "GET /db"),
            "sizes": httpwire.sizes(answer),
        }

    def compact(self) -> None:
        """``POST /db/_compact``, then wait until the server says it is done."""
        self._check_writable()
        self._call("POST", "/_compact", {})
        deadline = time.monotonic() + COMPACT_TIMEOUT
        pause = 0.002
        while self._compacting():
            if time.monotonic() > deadline:
                raise SetteeError(
                    f"{self.name}: compaction still running after {COMPACT_TIMEOUT} s"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _compacting(self) -> bool:
        answer = self._call("GET", "")
        return isinstance(answer, dict) and bool(answer.get("compact_running"))


# -- the databases this process created ---------------------------------------------------------


class _Scratch:
    """The server databases this process created, so the adapter can delete them: when
    their path is gone and no ``Database`` has them open (``sweep``), or all at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._created: dict[str, tuple[Server, str]] = {}
        self._open: Counter[str] = Counter()
        self._exit_hook = False

    def created(self, server: Server, name: str, path: str) -> None:
        with self._lock:
            self._created[name] = (server, path)
            if not self._exit_hook:
                atexit.register(self.delete_all)
                self._exit_hook = True

    def opened(self, name: str) -> None:
        with self._lock:
            self._open[name] += 1

    def closed(self, name: str) -> None:
        with self._lock:
            self._open[name] -= 1
            if self._open[name] <= 0:
                del self._open[name]

    def sweep(self) -> None:
        """Delete the created databases whose path was removed and that nobody has open."""
        with self._lock:
            gone = [
                (name, server)
                for name, (server, path) in self._created.items()
                if name not in self._open and not os.path.exists(path)
            ]
        for name, server in gone:
            self.delete(server, name)

    def delete_all(self) -> None:
        with self._lock:
            everything = [(name, server) for name, (server, _) in self._created.items()]
        for name, server in everything:
            self.delete(server, name)

    def delete(self, server: Server, name: str) -> None:
        """``DELETE /db``; a server that is gone already has nothing to delete."""
        with self._lock:
            self._created.pop(name, None)
        with contextlib.suppress(SetteeError):
            client = Client(server, timeout=10.0)
            try:
                client.request("DELETE", "/" + name)
            finally:
                client.close()


_SCRATCH = _Scratch()

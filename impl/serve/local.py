"""``_local/{id}`` documents: per-database, durable, never replicated.

The engine has no local documents (SEMANTICS.md: ``_local/`` ids are refused),
so the server keeps them beside the database, one JSON file per document in
``<dir>/_local/<database>/`` (named by a hash of the id, which may hold any
character). They never show in ``_changes`` or ``_all_docs``, which is the
point: replicators store their checkpoints here. Revisions follow CouchDB 3's
local documents, which are never checked for conflicts (couch_db:before_docs_update
sets them apart; couch_db_updater:increment_local_doc_revs numbers them): a
write naming ``0-N`` stores ``0-N+1`` whatever is stored, one naming none
stores ``0-1``, and a deletion answers ``0-0``. A change rewrites that
document's file alone, by write-temp, fsync, rename, fsync-directory, so an
acknowledged checkpoint survives a crash and a torn file never appears.

Earlier releases kept all of a database's local documents in one file,
``<dir>/_local/<database>.json``, rewritten whole by every change. Such a file
is split into per-document files the first time the database's local documents
are used, then renamed to ``<database>.json.migrated`` (kept, never read).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from typing import Any

from settee.serve import checked
from settee.serve.opening import DAMAGE_ERRNOS
from settee.serve.protocol import HTTPError, encode_json, etag_of
from settee.spec.config import DEFAULTS
from settee.spec.docs import normalise_body
from settee.spec.errors import CorruptionError, NotFound, SetteeError

__all__ = ["LocalDocs", "couch_rev", "local_etag", "local_rev", "write_json_durably"]

#: What couch_doc:transfer_fields takes out of a body: a local document stores its
#: body alone, so its attachments and the read-only members are dropped too.
_META = (
    "_id",
    "_rev",
    "_deleted",
    "_revisions",
    "_attachments",
    "_conflicts",
    "_deleted_conflicts",
    "_revs_info",
    "_local_seq",
)


def _invalid_rev() -> HTTPError:
    return HTTPError(400, "bad_request", "Invalid rev format")


def couch_rev(value: Any) -> str:
    """``value`` if couch_doc:parse_rev reads it (digits, ``-``, and a hash that is
    hexadecimal when it has 32 characters and the position is not 0), else 400
    "Invalid rev format". A local document's rev is read this way, not by
    settee's stricter rules, so ``0-5`` passes."""
    pos, dash, hash_ = value.partition("-") if isinstance(value, str) else ("", "", "")
    if not (dash and pos.isascii() and pos.isdigit()):
        raise _invalid_rev()
    # Not int(pos): a 5,000-digit position is a ValueError past Python's limit.
    if pos.strip("0") and len(hash_) == 32 and not _is_hex(hash_):
        raise _invalid_rev()  # binary:decode_hex fails
    return value


def _is_hex(text: str) -> bool:
    return text.isascii() and all(c in "0123456789abcdefABCDEF" for c in text)


#: The most digits a local revision's number may have: CouchDB's integers are
#: unbounded, but a stored number must read back (``int()`` and ``json`` refuse
#: past 4,300 digits: a 5,000-digit one was a 500), and N+1 must fit too.
_LOCAL_REV_DIGITS = 4000


def local_rev(value: Any) -> int:
    """The number N of a local revision ``0-N`` (ASCII digits: ``isdigit()`` took
    other scripts' digits); anything else is "Invalid rev format", as
    couch_db_updater answers a rev whose position is not 0 or whose hash is not
    an integer. Past 19 digits too, as CouchDB takes them (a 20-digit rev was 400)."""
    couch_rev(value)
    digits = value[2:] if value.startswith("0-") else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= _LOCAL_REV_DIGITS:
        return int(digits)
    raise _invalid_rev()


def local_etag(doc: dict[str, Any]) -> str:
    """The ETag of a local document as read: of its rev and body, as
    couch_httpd:doc_etag makes one for ``_local/`` ids, since two writes without
    ``_rev`` both store ``0-1`` and the rev alone would not tell them apart."""
    return etag_of(encode_json(doc).decode("utf-8", "surrogatepass"))


def write_json_durably(path: str, value: Any, *, fsync: bool) -> None:
    """Replace the file ``path`` with ``value`` as JSON: write a temporary file, fsync,
    rename over, fsync the directory, so a crash leaves the old file or the new one.
    A path that cannot be written (a directory, or a file where its folder should
    be) is a SetteeError naming it, not a raw OSError (found in review: a 500 with
    a traceback)."""
    try:
        _write_json(path, value, fsync=fsync)
    except OSError as exc:
        if exc.errno in DAMAGE_ERRNOS:
            # A directory or a symlink loop in the file's place: damage (410), not
            # the server's error (found by the fault sweep: PUT _security was a 500).
            raise CorruptionError(path, 0, f"cannot be written ({exc.strerror})") from None
        raise SetteeError(f"{path}: cannot be written ({exc}): fix or remove it") from None


def _write_json(path: str, value: Any, *, fsync: bool) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # our own half-written file, never the only copy of anything
        raise
    # The rename must not reach disk before the new file's bytes do: fsync first.
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(os.path.dirname(path))


class LocalDocs:
    """The local documents of one database. Thread-safe; blocking (call off the loop)."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        #: The one-file store of earlier releases; migrated on first use.
        self.legacy = path
        self.path = path[: -len(".json")] if path.endswith(".json") else path + ".d"
        self._fsync = fsync
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, Any] | None] = {}  # id -> entry; None: absent
        self._migrated = False
        #: Set by ``destroy``: the database was deleted, and a request still holding
        #: it must not write into the directory the next one of that name reads.
        self._destroyed = False

    @staticmethod
    def read_json(path: str) -> Any:
        """The JSON a side file holds (FileNotFoundError passes); a file that does
        not parse, or cannot be read (a directory, a symlink loop), is a
        CorruptionError naming it (found in review: a raw JSONDecodeError or
        OSError, a 500 with a traceback on every request)."""
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise CorruptionError(
                path, 0, f"cannot be read ({exc}): restore or remove it"
            ) from None
        except (ValueError, RecursionError) as exc:
            raise CorruptionError(path, 0, f"not JSON ({exc}): restore or remove it") from None

    def _read(self, path: str) -> Any:
        """A side file's value, its checksum checked (``checked.unwrap``; an earlier
        release's bare file reads as it is)."""
        return checked.unwrap(path, self.read_json(path))

    def _write(self, path: str, value: Any) -> None:
        """Replace a side file with ``value`` and its checksum (``checked.wrap``): a
        flipped bit that keeps the JSON valid was served as written (found by the
        fault sweep: a ``_local`` checkpoint's seq 5 read back as 4)."""
        write_json_durably(path, checked.wrap(value), fsync=self._fsync)

    def _file(self, doc_id: str) -> str:
        digest = hashlib.sha256(doc_id.encode("utf-8", "surrogatepass")).hexdigest()
        return os.path.join(self.path, digest[:40] + ".json")

    def _entry(self, doc_id: str) -> dict[str, Any] | None:
        """``{"id", "rev", "body"}`` of ``doc_id``, or None; call with the lock held."""
        self._migrate()
        if doc_id in self._cache:
            return self._cache[doc_id]
        try:
            entry: dict[str, Any] | None = _checked(
                self._file(doc_id), self._read(self._file(doc_id))
            )
        except FileNotFoundError:
            entry = None
        if entry is not None and entry["id"] != doc_id:
            entry = None  # a hash collision: not this document (never seen in practice)
        self._cache[doc_id] = entry
        return entry

    def _migrate(self) -> None:
        """Split an earlier release's one-file store into per-document files."""
        if self._migrated:
            return
        try:
            stored = self.read_json(self.legacy)
        except FileNotFoundError:
            self._migrated = True
            return
        docs = stored.get("docs") if isinstance(stored, dict) else None
        if not isinstance(docs, dict):
            raise CorruptionError(self.legacy, 0, 'no "docs" object: restore or remove it')
        entries = [
            _checked(self.legacy, {"id": i, **old} if isinstance(old, dict) else old)
            for i, old in docs.items()
        ]
        for entry in entries:
            self._write(self._file(entry["id"]), entry)
        # Only once every document has its own file; a crash before this repeats the
        # split, which nothing can have changed in between (writes wait for it).
        os.replace(self.legacy, self.legacy + ".migrated")
        self._migrated = True

    def get(self, doc_id: str) -> dict[str, Any]:
        with self._lock:
            entry = self._entry(doc_id)
        if entry is None:
            raise NotFound("missing")
        return {"_id": doc_id, "_rev": f"0-{entry['rev']}", **entry["body"]}

    def put(self, doc_id: str, doc: dict[str, Any], rev: str | None) -> str:
        """Store ``doc`` (a ``_deleted`` one removes it); the new rev, ``0-0`` on
        delete. No conflict is possible: ``rev`` only numbers the new revision
        (couch_db_updater:increment_local_doc_revs)."""
        return str(self.write(doc_id, doc, rev)["_rev"])

    def write(self, doc_id: str, doc: dict[str, Any], rev: str | None) -> dict[str, Any]:
        """``put``, answering the document as ``get`` reads it now (``_id`` and
        ``_rev`` ``0-0`` alone for a deletion)."""
        deleted = doc.get("_deleted", False)
        if not isinstance(deleted, bool):
            # couch_doc:transfer_fields takes only a boolean _deleted.
            raise HTTPError(400, "doc_validation", "Bad special document member: _deleted")
        given = 0
        if rev is not None and deleted:
            couch_rev(rev)  # a deletion is numbered 0-0 before its rev is read as a number
        elif rev is not None:
            given = local_rev(rev)
        try:
            doc_id.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: it could not be stored as JSON
            raise HTTPError(400, "illegal_docid", "Document id must be valid UTF-8") from None
        # The same rules as a document's body: what is stored must encode (no lone
        # surrogates) and read back as it was (no ints past 64 bits, no NaN).
        body = normalise_body(
            {k: v for k, v in doc.items() if k not in _META}, DEFAULTS["max_document_size"]
        )
        with self._lock:
            self._check_not_destroyed()
            entry = self._entry(doc_id)
            if deleted:
                if entry is not None:
                    self._remove(doc_id)
                return {"_id": doc_id, "_rev": "0-0"}
            entry = {"id": doc_id, "rev": given + 1, "body": body}
            self._write(self._file(doc_id), entry)
            self._cache[doc_id] = entry
        return {"_id": doc_id, "_rev": f"0-{given + 1}", **body}

    def _remove(self, doc_id: str) -> None:
        os.remove(self._file(doc_id))
        self._cache[doc_id] = None
        if self._fsync:
            _fsync_dir(self.path)

    def all(self) -> list[dict[str, Any]]:
        """Every local document, in id order (``_local_docs``)."""
        with self._lock:
            self._migrate()
            try:
                names = sorted(os.listdir(self.path))
            except FileNotFoundError:
                return []
            except OSError as exc:  # not a directory, a symlink loop
                raise CorruptionError(self.path, 0, f"cannot be listed ({exc})") from None
            docs = []
            for name in names:
                if len(name) != 45 or not name.endswith(".json"):
                    continue  # _security.json, the purge records, temporary files
                path = os.path.join(self.path, name)
                try:
                    # A file that does not parse is damage, as a get of it says: never
                    # torn (write_json_durably renames it whole), so not skipped.
                    entry = _checked(path, self._read(path))
                except FileNotFoundError:
                    continue  # removed meanwhile
                docs.append({"_id": entry["id"], "_rev": f"0-{entry['rev']}", **entry["body"]})
        return sorted(docs, key=lambda doc: doc["_id"])

    def security(self) -> dict[str, Any]:
        """The stored ``_security`` object, or CouchDB 3's admin-only default."""
        with self._lock:
            try:
                value = self._read(self._security_file())
            except FileNotFoundError:
                return {"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}}
        if not isinstance(value, dict):
            raise CorruptionError(
                self._security_file(), 0, "not a JSON object: restore or remove it"
            )
        return value

    def set_security(self, value: dict[str, Any]) -> None:
        body = normalise_body(value, DEFAULTS["max_document_size"])
        with self._lock:
            self._check_not_destroyed()
            self._write(self._security_file(), body)

    def _check_not_destroyed(self) -> None:
        """404 once ``destroy`` ran (registry.db_missing's answer, as if the write had
        come after the delete). Found probing: a write racing ``DELETE /db`` made the
        directory again, and the database next created under the name listed it."""
        if self._destroyed:
            raise HTTPError(404, "not_found", "Database does not exist.")

    def _security_file(self) -> str:
        # Beside the documents' files, which are named by 40 hex digits: no clash.
        return os.path.join(self.path, "_security.json")

    def purged_infos(self) -> dict[str, Any]:
        """``{"purge_seq": n, "infos": [{"id", "revs"}, ...]}``: how many purge
        requests were recorded in all, and the newest of them, oldest first."""
        with self._lock:
            return self._purged_infos()

    def begin_purge(self, requests: dict[str, list[str]]) -> None:
        """Write down, durably, the purge about to run, before it runs: a crash (or a
        failure) before ``record_purges`` leaves it for ``pending_purge``, and the
        purge is run again and recorded (purging is idempotent), so a purge and its
        record are never one without the other, as in CouchDB's single commit."""
        with self._lock:
            self._check_not_destroyed()
            target = self._purged_infos()["purge_seq"] + len(requests)
            pending = {"purge_seq": target, "requests": requests}
            self._write(self._pending_purge_file(), pending)

    def pending_purge(self) -> dict[str, list[str]] | None:
        """The requests of a purge ``begin_purge`` wrote down and ``record_purges``
        has not recorded yet (a crash or a failure between them), or None."""
        with self._lock:
            pending = self._pending_purge()
        return None if pending is None else pending["requests"]

    def record_purges(self, requests: dict[str, list[str]], limit: int) -> None:
        """Record a purge's requests, one per document as couch_db:purge_docs keeps
        them (the revisions asked for, purged or not), keeping the newest ``limit``;
        then forget the pending purge. Recorded once: a crash after the record and
        before the pending purge is removed leaves ``purge_seq`` at its target."""
        with self._lock:
            self._check_not_destroyed()  # else its records reach the next one of the name
            stored = self._purged_infos()
            pending = self._pending_purge()
            if pending is None or stored["purge_seq"] < pending["purge_seq"]:
                infos = stored["infos"] + [{"id": i, "revs": r} for i, r in requests.items()]
                seq = stored["purge_seq"] + len(requests)
                value = {"purge_seq": seq, "infos": infos[-limit:]}
                self._write(self._purged_infos_file(), value)
            if pending is not None:
                os.remove(self._pending_purge_file())
                if self._fsync:
                    _fsync_dir(self.path)

    def _pending_purge(self) -> dict[str, Any] | None:
        path = self._pending_purge_file()
        try:
            pending = self._read(path)
        except FileNotFoundError:
            return None
        if not _is_pending_purge(pending):
            raise CorruptionError(path, 0, "not a pending purge: restore or remove it")
        return pending

    def _pending_purge_file(self) -> str:
        return os.path.join(self.path, "_purge_pending.json")

    def _purged_infos(self) -> dict[str, Any]:
        path = self._purged_infos_file()
        try:
            stored = self._read(path)
        except FileNotFoundError:
            return {"purge_seq": 0, "infos": []}
        if not _is_purged_infos(stored):
            raise CorruptionError(path, 0, "not a record of purges: restore or remove it")
        return stored

    def _purged_infos_file(self) -> str:
        return os.path.join(self.path, "_purged_infos.json")

    def destroy(self) -> None:
        """Forget every local document (the database is being deleted)."""
        with self._lock:
            self._destroyed = True
            self._cache.clear()
            self._migrated = True
            shutil.rmtree(self.path, ignore_errors=True)
            for path in (self.legacy, self.legacy + ".tmp", self.legacy + ".migrated"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)


def _checked(path: str, entry: Any) -> dict[str, Any]:
    """``entry`` if it is a local document's record, ``{"id": str, "rev": int, "body":
    object}``, as ``write`` stores it; else a CorruptionError naming ``path``. The
    files carry no checksum, but a flipped bit in a member's name keeps them valid
    JSON, and a raw KeyError was a 500 with a traceback (found in review)."""
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("id"), str)
        and type(entry.get("rev")) is int
        and isinstance(entry.get("body"), dict)
    ):
        raise CorruptionError(path, 0, "not a local document's record: restore or remove it")
    return entry


def _is_purged_infos(value: Any) -> bool:
    """Whether ``value`` is what ``record_purges`` stores."""
    if not (isinstance(value, dict) and set(value) == {"purge_seq", "infos"}):
        return False
    infos = value["infos"]
    return (
        type(value["purge_seq"]) is int
        and isinstance(infos, list)
        and value["purge_seq"] >= len(infos)
        and all(
            isinstance(info, dict)
            and set(info) == {"id", "revs"}
            and isinstance(info["id"], str)
            and isinstance(info["revs"], list)
            and all(isinstance(rev, str) for rev in info["revs"])
            for info in infos
        )
    )


def _is_pending_purge(value: Any) -> bool:
    """Whether ``value`` is what ``begin_purge`` stores."""
    if not (isinstance(value, dict) and set(value) == {"purge_seq", "requests"}):
        return False
    requests = value["requests"]
    return (
        type(value["purge_seq"]) is int
        and isinstance(requests, dict)
        and value["purge_seq"] >= len(requests)
        and all(
            isinstance(revs, list) and all(isinstance(rev, str) for rev in revs)
            for revs in requests.values()
        )
    )


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

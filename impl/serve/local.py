"""``_local/{id}`` documents: per-database, durable, never replicated.

The engine has no local documents (SEMANTICS.md: ``_local/`` ids are refused),
so the server keeps them beside the database in one JSON file,
``<dir>/_local/<database>.json``. They never show in ``_changes`` or
``_all_docs``, which is the point: replicators store their checkpoints here.
Revisions follow CouchDB's local documents, ``0-1``, ``0-2``, ...: an update
must name the current revision (none for a new document), else 409.
Every change rewrites the file by write-temp, fsync, rename, fsync-directory,
so an acknowledged checkpoint survives a crash and a torn file never appears.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any

from settee.serve.protocol import HTTPError
from settee.spec.config import DEFAULTS
from settee.spec.docs import normalise_body
from settee.spec.errors import Conflict, NotFound

__all__ = ["LocalDocs", "local_rev", "write_json_durably"]

_META = ("_id", "_rev", "_deleted", "_revisions")


def local_rev(value: Any) -> int:
    """The number N of a local revision ``0-N``; 400 for anything else."""
    if isinstance(value, str) and value.startswith("0-") and value[2:].isdigit():
        return int(value[2:])
    raise HTTPError(400, "bad_request", f"Invalid rev format {value!r} for a _local document")


def write_json_durably(path: str, value: Any, *, fsync: bool) -> None:
    """Replace the file ``path`` with ``value`` as JSON: write a temporary file, fsync,
    rename over, fsync the directory, so a crash leaves the old file or the new one."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    # The rename must not reach disk before the new file's bytes do: fsync first.
    os.replace(tmp, path)
    if fsync:
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LocalDocs:
    """The local documents of one database. Thread-safe; blocking (call off the loop)."""

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.path = path
        self._fsync = fsync
        self._lock = threading.Lock()
        self._docs: dict[str, dict[str, Any]] | None = None

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._docs is None:
            try:
                with open(self.path, encoding="utf-8") as f:
                    self._docs = json.load(f)["docs"]
            except FileNotFoundError:
                self._docs = {}
        return self._docs

    def get(self, doc_id: str) -> dict[str, Any]:
        with self._lock:
            entry = self._load().get(doc_id)
        if entry is None:
            raise NotFound("missing")
        return {"_id": doc_id, "_rev": f"0-{entry['rev']}", **entry["body"]}

    def put(self, doc_id: str, doc: dict[str, Any], rev: str | None) -> str:
        """Store ``doc`` (a ``_deleted`` one removes it); the new rev, ``0-0`` on delete."""
        given = 0 if rev is None else local_rev(rev)
        # The same rules as a document's body: what is stored must encode (no lone
        # surrogates) and read back as it was (no ints past 64 bits, no NaN).
        body = normalise_body(
            {k: v for k, v in doc.items() if k not in _META}, DEFAULTS["max_document_size"]
        )
        with self._lock:
            docs = dict(self._load())
            current = docs[doc_id]["rev"] if doc_id in docs else 0
            if given != current:
                raise Conflict()
            if doc.get("_deleted") is True:
                if doc_id not in docs:
                    raise NotFound("missing")
                del docs[doc_id]
                new = "0-0"
            else:
                docs[doc_id] = {"rev": current + 1, "body": body}
                new = f"0-{current + 1}"
            self._save(docs)
            self._docs = docs
        return new

    def _save(self, docs: dict[str, Any]) -> None:
        write_json_durably(self.path, {"docs": docs}, fsync=self._fsync)

    def destroy(self) -> None:
        """Forget every local document (the database is being deleted)."""
        with self._lock:
            self._docs = {}
            for path in (self.path, self.path + ".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

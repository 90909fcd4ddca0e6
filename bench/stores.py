"""The stores a benchmark drives, behind one small interface, and the test data.

``DocStore`` is what the seed workloads need: batch insert, multiget by keys
and range get by start key, each optionally returning the documents. settee
and the reference speak settee's API; sqlite3 and LMDB are adapted to the
same calls with the layout the issue fixes (id primary key, msgpack body):

* sqlite3 (stdlib): WAL journal, ``synchronous=FULL`` (fsync at every commit,
  as settee with ``fsync=True``), one table ``docs(id TEXT PRIMARY KEY, body
  BLOB) WITHOUT ROWID``, one connection per client thread;
* LMDB (``py-lmdb``): ``sync=True, metasync=True``, key = id, value = body.

The peers keep no revisions: a settee row carries a revision id and settee
checks every write for conflicts, so it does more work per document.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any, Protocol

import msgpack

import settee
import settee.reference

__all__ = [
    "DocStore",
    "LmdbStore",
    "SetteeStore",
    "SqliteStore",
    "doc_id",
    "lmdb_available",
    "load_settee",
    "make_doc",
]

_TEXT = "settee benchmark filler text: " * 4


def doc_id(n: int) -> str:
    """The id of the ``n``-th preloaded document (ids sort in ``n`` order)."""
    return f"doc{n:09d}"


def make_doc(doc_id: str, n: int, text: str = _TEXT) -> dict[str, Any]:
    """A document of about 200 bytes of msgpack, like a small user record (more
    with a longer ``text``: ``filler``)."""
    return {
        "_id": doc_id,
        "n": n,
        "name": f"user {n}",
        "email": f"user{n}@example.com",
        "tags": ["alpha", "beta", "gamma"],
        "score": n * 0.5,
        "text": text,
    }


def filler(doc_bytes: int) -> str:
    """The ``text`` that makes ``make_doc``'s documents about ``doc_bytes`` bytes of
    msgpack (at least the default's)."""
    return _TEXT + "x" * max(0, doc_bytes - 222)


def load_settee(db: Any, start: int, stop: int, *, batch: int = 5000, text: str = _TEXT) -> None:
    """Insert documents ``start`` .. ``stop - 1`` in batches of ``batch``."""
    for lo in range(start, stop, batch):
        hi = min(stop, lo + batch)
        db.bulk_docs([make_doc(doc_id(n), n, text) for n in range(lo, hi)])


def lmdb_available() -> str | None:
    """None when ``lmdb`` imports, else why not."""
    try:
        import lmdb  # noqa: F401
    except ImportError as exc:
        return f"lmdb is not installed ({exc}); pip install -e '.[bench]'"
    return None


class DocStore(Protocol):
    """What the seed workloads call; every method is safe from many threads."""

    name: str

    def insert(self, docs: list[dict[str, Any]]) -> None: ...
    def get(self, doc_id: str) -> int: ...
    def multiget(self, ids: list[str], include_docs: bool) -> int: ...
    def rangeget(self, start: str, limit: int, include_docs: bool) -> int: ...
    def close(self) -> None: ...


class SetteeStore:
    """settee (engine or reference): inserts are ``bulk_docs``, reads ``all_docs``."""

    def __init__(self, name: str, db: Any) -> None:
        self.name = name
        self.db = db

    def insert(self, docs: list[dict[str, Any]]) -> None:
        self.db.bulk_docs(docs)

    def get(self, doc_id: str) -> int:
        self.db.get(doc_id)
        return 1

    def multiget(self, ids: list[str], include_docs: bool) -> int:
        return len(self.db.all_docs(keys=ids, include_docs=include_docs)["rows"])

    def rangeget(self, start: str, limit: int, include_docs: bool) -> int:
        rows = self.db.all_docs(startkey=start, limit=limit, include_docs=include_docs)["rows"]
        return len(rows)

    def close(self) -> None:
        self.db.close()

    @classmethod
    def engine(cls, path: str, **options: Any) -> SetteeStore:
        return cls("settee", settee.open(path, **options))

    @classmethod
    def reference(cls, path: str) -> SetteeStore:
        return cls("reference", settee.reference.open(path, fsync=True))


class SqliteStore:
    """sqlite3 in WAL mode with ``synchronous=FULL`` (``OFF`` with ``fsync=False``,
    for comparing CPU alone); a connection per thread."""

    name = "sqlite3"

    def __init__(self, path: str, *, fsync: bool = True) -> None:
        self.path = path
        self._synchronous = "FULL" if fsync else "OFF"
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        conn = self._conn()
        conn.execute(
            "CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, body BLOB) WITHOUT ROWID"
        )
        conn.commit()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # The timeout makes concurrent writers queue on sqlite's lock instead of failing.
            conn = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def insert(self, docs: list[dict[str, Any]]) -> None:
        conn = self._conn()
        rows = [(d["_id"], msgpack.packb({k: v for k, v in d.items() if k != "_id"})) for d in docs]
        with conn:  # one transaction, committed (and fsynced) on exit
            conn.executemany("INSERT OR REPLACE INTO docs (id, body) VALUES (?, ?)", rows)

    def get(self, doc_id: str) -> int:
        row = self._conn().execute("SELECT body FROM docs WHERE id = ?", (doc_id,)).fetchone()
        msgpack.unpackb(row[0])
        return 1

    def multiget(self, ids: list[str], include_docs: bool) -> int:
        marks = ",".join("?" * len(ids))
        cols = "id, body" if include_docs else "id"
        rows = self._conn().execute(f"SELECT {cols} FROM docs WHERE id IN ({marks})", ids)
        return _count_rows(rows, include_docs)

    def rangeget(self, start: str, limit: int, include_docs: bool) -> int:
        cols = "id, body" if include_docs else "id"
        rows = self._conn().execute(
            f"SELECT {cols} FROM docs WHERE id >= ? ORDER BY id LIMIT ?", (start, limit)
        )
        return _count_rows(rows, include_docs)

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def _count_rows(rows: Any, include_docs: bool) -> int:
    if not include_docs:
        return len(rows.fetchall())
    # Decoding the body is part of "include_docs" for every store.
    return len([msgpack.unpackb(body) for _id, body in rows])


class LmdbStore:
    """LMDB with durable commits (``sync=True``); one write transaction per batch."""

    name = "lmdb"

    def __init__(self, path: str) -> None:
        import lmdb

        os.makedirs(path, exist_ok=True)
        # map_size only reserves address space; the file grows as data arrives.
        self.env = lmdb.open(
            path, map_size=1 << 36, sync=True, metasync=True, max_readers=256, lock=True
        )

    def insert(self, docs: list[dict[str, Any]]) -> None:
        items = [
            (d["_id"].encode(), msgpack.packb({k: v for k, v in d.items() if k != "_id"}))
            for d in docs
        ]
        with self.env.begin(write=True) as txn:
            for key, value in items:
                txn.put(key, value)

    def get(self, doc_id: str) -> int:
        with self.env.begin(buffers=True) as txn:
            msgpack.unpackb(txn.get(doc_id.encode()))
        return 1

    def multiget(self, ids: list[str], include_docs: bool) -> int:
        found = 0
        with self.env.begin(buffers=True) as txn:
            for key in ids:
                value = txn.get(key.encode())
                if value is not None:
                    found += 1
                    if include_docs:
                        msgpack.unpackb(value)
        return found

    def rangeget(self, start: str, limit: int, include_docs: bool) -> int:
        found = 0
        with self.env.begin(buffers=True) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(start.encode()):
                return 0
            for _key, value in cursor:
                if include_docs:
                    msgpack.unpackb(value)
                found += 1
                if found >= limit:
                    break
        return found

    def close(self) -> None:
        self.env.close()

"""The databases under the server's directory: one settee database per CouchDB database.

```
<dir>/
  <name>/             a settee database (``/`` in a name is stored as ``%2F``)
  _local/<name>.json  its _local documents (local.py)
  _settings/<name>.json  its settings the engine does not store (``revs_limit``)
```

CouchDB database names start with a lowercase letter or are one of its system
databases (``_users``, ``_replicator``, ...), so ``_local``, ``_settings`` and
``_views`` never clash with one. Databases are opened on first use and stay open until the
server stops or the database is deleted. Every method blocks (file I/O,
fsync): the app calls them on its worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import settee
from settee.layout import META_NAME
from settee.serve.design import DesignFunctions
from settee.serve.local import LocalDocs, write_json_durably
from settee.serve.options import db_options
from settee.serve.protocol import HTTPError
from settee.serve.viewindex import ViewIndex
from settee.spec.errors import CorruptionError

__all__ = ["DbEntry", "Notifier", "Registry", "check_db_name", "is_db_name"]

# couch_db:validate_dbname: a lowercase letter, then lowercase letters, digits, _$()+-/
# Matched whole (fullmatch): with ``match``, ``$`` also matches before a final
# newline, and "a\n" became a database directory.
_DB_NAME = re.compile(r"[a-z][a-z0-9_$()+/-]*")
_MAX_NAME = 238


#: couch_db.hrl's SYSTEM_DATABASES: names a database may have outside the rule.
_SYSTEM_DBS = frozenset({"_dbs", "_global_changes", "_metadata", "_nodes", "_replicator", "_users"})


def is_db_name(name: str) -> bool:
    """couch_db:validate_dbname: the rule, or a system database's name, alone or
    after a prefix the rule accepts (``_users``, ``accounts/_replicator``)."""
    if len(name) > _MAX_NAME:
        return False
    if _DB_NAME.fullmatch(name):
        return True
    prefix, slash, base = name.rpartition("/")
    return base in _SYSTEM_DBS and (not slash or _DB_NAME.fullmatch(prefix) is not None)


def check_db_name(name: str) -> None:
    """400 illegal_database_name unless a database may be created as ``name``."""
    if not is_db_name(name):
        raise HTTPError(
            400,
            "illegal_database_name",
            f"Name: '{name}'. Only lowercase characters (a-z), digits (0-9), and any of the "
            "characters _, $, (, ), +, -, and / are allowed. Must begin with a letter.",
        )


def _dir_name(name: str) -> str:
    return name.replace("/", "%2F")


def db_missing() -> HTTPError:
    return HTTPError(404, "not_found", "Database does not exist.")


class Notifier:
    """Wakes the ``_changes`` feeds waiting on one database. Event-loop side only:
    writers on worker threads call ``bump`` through ``loop.call_soon_threadsafe``."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    def waiter(self) -> asyncio.Event:
        """An event set by the next ``bump``: take it *before* reading the changes,
        so a write that lands in between still wakes the reader."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def bump(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()


@dataclass(eq=False)
class DbEntry:
    """One open database and what the server keeps beside it."""

    name: str
    db: settee.Database
    local: LocalDocs
    notifier: Notifier = field(default_factory=Notifier)
    compactions: int = 0
    design: DesignFunctions = field(default_factory=DesignFunctions)
    #: View indexes opened so far, by signature (``viewindex``).
    views: dict[str, ViewIndex] = field(default_factory=dict)

    def close_views(self) -> None:
        for index in self.views.values():
            index.close()
        self.views.clear()


#: A shard file's name (settee.layout's): its presence means a database is there.
_SHARD_FILE = re.compile(r"shard-[0-9]{3,}\.settee")


class Registry:
    """Creates, opens, lists and deletes the databases under ``root``."""

    def __init__(self, root: str, options: Mapping[str, Any]) -> None:
        self.root = os.path.abspath(root)
        self.options = dict(options)
        self._lock = threading.Lock()
        self._open: dict[str, DbEntry] = {}
        self._closed = False
        os.makedirs(self.root, exist_ok=True)

    def _path(self, name: str) -> str:
        return os.path.join(self.root, _dir_name(name))

    def _local(self, name: str) -> LocalDocs:
        path = os.path.join(self.root, "_local", _dir_name(name) + ".json")
        return LocalDocs(path, fsync=self.options["fsync"])

    def _exists(self, name: str) -> bool:
        """A database is there when its directory holds its metadata or any shard
        file: the engine rebuilds a lost settee.meta from the shards' headers (found
        in review: with settee.meta deleted the database answered 404, and PUT /db
        "created" it over its documents and dropped its stored settings)."""
        path = self._path(name)
        if os.path.exists(os.path.join(path, META_NAME)):
            return True
        try:
            return any(_SHARD_FILE.fullmatch(entry) for entry in os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def cached(self, name: str) -> DbEntry | None:
        """The open entry, without blocking (safe on the event loop)."""
        return self._open.get(name)

    def get(self, name: str) -> DbEntry:
        """The open database ``name``; 404 when it does not exist (or cannot: only
        creating a database checks its name, as fabric does)."""
        if not is_db_name(name):
            raise db_missing()
        entry = self._open.get(name)
        if entry is not None:
            return entry
        with self._lock:
            return self._opened(name)

    def _opened(self, name: str) -> DbEntry:
        """The entry of ``name``, opening it first if needed (holding the lock)."""
        self._check_running()
        entry = self._open.get(name)
        if entry is None:
            if not self._exists(name):
                raise db_missing()
            db = settee.open(self._path(name), **self._reopen_options(name))
            entry = self._open[name] = DbEntry(name, db, self._local(name))
        return entry

    def _settings_path(self, name: str) -> str:
        return os.path.join(self.root, "_settings", _dir_name(name) + ".json")

    def _reopen_options(self, name: str) -> dict[str, Any]:
        """``settee.open`` options for an existing database: the server's, with the
        database's stored ``revs_limit``."""
        opts = db_options(self.options, creating=False)
        path = self._settings_path(name)
        try:
            with open(path, encoding="utf-8") as f:
                opts["revs_limit"] = json.load(f)["revs_limit"]
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as exc:
            # Found in review: a raw KeyError or JSONDecodeError, a 500 with a
            # traceback on every request to the database.
            raise CorruptionError(
                path, 0, f"unreadable settings ({exc!r}): restore or remove it"
            ) from None
        return opts

    def set_revs_limit(self, name: str, limit: int) -> None:
        """CouchDB's ``PUT /{db}/_revs_limit``. The engine takes ``revs_limit`` per
        session, so it is stored beside the database (for its next open) and set on
        the open handle, which the requests running meanwhile go on using."""
        if not is_db_name(name):
            raise db_missing()
        with self._lock:
            entry = self._opened(name)
            write_json_durably(
                self._settings_path(name), {"revs_limit": limit}, fsync=self.options["fsync"]
            )
            if entry.db.config["revs_limit"] != limit:
                entry.db._set_revs_limit(limit)

    def create(self, name: str, shards: int | None = None) -> None:
        """Create ``name``; 412 ``file_exists`` when it already exists."""
        check_db_name(name)
        with self._lock:
            self._check_running()
            if name in self._open or self._exists(name):
                raise HTTPError(
                    412,
                    "file_exists",
                    "The database could not be created, the file already exists.",
                )
            self._forget_settings(name)
            opts = db_options(self.options, creating=True)
            if shards is not None:
                opts["shards"] = shards
            db = settee.open(self._path(name), **opts)
            self._open[name] = DbEntry(name, db, self._local(name))

    def delete(self, name: str) -> None:
        """Close and remove ``name`` with its local documents; 404 if missing (a name
        no database can have is missing too: chttpd answers DELETE /Abc so)."""
        if not is_db_name(name):
            raise db_missing()
        with self._lock:
            self._check_running()
            entry = self._open.pop(name, None)
            if entry is None and not self._exists(name):
                raise db_missing()
            if entry is not None:
                entry.db.close()
                entry.close_views()
            shutil.rmtree(self._views_dir(name), ignore_errors=True)
            # The metadata file goes first: a crash mid-removal leaves no half database
            # that would open (layout.py treats a directory without it as never created).
            meta = os.path.join(self._path(name), META_NAME)
            if os.path.exists(meta):
                os.remove(meta)
            shutil.rmtree(self._path(name), ignore_errors=True)
            (entry.local if entry is not None else self._local(name)).destroy()
            self._forget_settings(name)

    def _forget_settings(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._settings_path(name))

    def names(self) -> list[str]:
        """Every database, sorted."""
        found = []
        for entry in os.listdir(self.root):
            name = entry.replace("%2F", "/")
            # The server's own folders (_local, _settings, _views) are no such name.
            if is_db_name(name) and self._exists(name):
                found.append(name)
        return sorted(found)

    def close(self) -> None:
        """Close every open database (server shutdown). Idempotent."""
        with self._lock:
            self._closed = True
            entries, self._open = list(self._open.values()), {}
        for entry in entries:
            entry.db.close()
            entry.close_views()

    @property
    def stopping(self) -> bool:
        return self._closed

    def view_index(self, entry: DbEntry, signature: str) -> ViewIndex:
        """The index of a map function over ``entry``'s database, opened (or
        created) under ``<dir>/_views/<database>/<signature>``."""
        with self._lock:
            self._check_running()
            if self._open.get(entry.name) is not entry:
                raise db_missing()  # deleted while the request ran: leave no index open
            index = entry.views.get(signature)
            if index is None:
                path = os.path.join(self._views_dir(entry.name), signature)
                index = entry.views[signature] = ViewIndex(path, fsync=self.options["fsync"])
            return index

    def cleanup_views(self, entry: DbEntry, live: set[str]) -> list[str]:
        """CouchDB's ``_view_cleanup``: remove the index of every signature not in
        ``live`` (those no design document defines any more); the removed ones."""
        with self._lock:
            self._check_running()
            if self._open.get(entry.name) is not entry:
                raise db_missing()
            folder = self._views_dir(entry.name)
            try:
                found = set(os.listdir(folder))
            except FileNotFoundError:
                found = set()
            stale = sorted((found | set(entry.views)) - live)
            for signature in stale:
                index = entry.views.pop(signature, None)
                if index is not None:
                    index.close()
                shutil.rmtree(os.path.join(folder, signature), ignore_errors=True)
            return stale

    def _views_dir(self, name: str) -> str:
        return os.path.join(self.root, "_views", _dir_name(name))

    def _check_running(self) -> None:
        if self._closed:
            raise HTTPError(503, "service_unavailable", "the server is stopping")

"""The databases under the server's directory: one settee database per CouchDB database.

```
<dir>/
  <name>/             a settee database (``/`` in a name is stored as ``%2F``)
  _local/<name>.json  its _local documents (local.py)
  _settings/<name>.json  its settings the engine does not store (``revs_limit``,
                         ``purged_infos_limit``), with their checksum (checked.py)
```

CouchDB database names start with a lowercase letter or are one of its system
databases (``_users``, ``_replicator``, ...), so ``_local``, ``_settings`` and
``_views`` never clash with one.

Databases are opened on first use and kept open in least-recently-used order,
at most ``max_dbs_open`` of them (CouchDB's ``[couchdb] max_dbs_open``): each
holds 10 file descriptors and 4 writer threads, plus its view indexes, so a
server of database-per-user applications would otherwise run out of both. A
request *leases* its database (``acquire`` … ``release``; ``lease.Lease`` on
the app's side) for as long as it uses the entry, streamed answers included,
and a background compaction ``retain``s one until it ends. Opening one more
database first closes the least recently used ones that no request leases;
one in use is never closed (a DELETE and shutdown are the exceptions, as
before). When every open database is leased the open fails with 503
``all_dbs_active``, as couch_server refuses it rather than go past the bound
(CouchDB answers 500 ``{"error": "error", "reason": "all_dbs_active"}``
through its catch-all; 503 says what it is: retry). A closed database is
simply opened again on its next use; a live ``_changes`` feed holds no lease
while it waits (notifier.py). View indexes close with their database, so the
bound holds them too (CouchDB counts them apart).

``acquire`` may block (opening, and closing idle databases, is file I/O): the
app calls it on a worker thread, and ``try_acquire``/``release`` (never
blocking) on the event loop. Every other method blocks too (file I/O, fsync).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import settee
from settee.layout import META_NAME
from settee.serve import checked
from settee.serve.design import DesignFunctions
from settee.serve.local import LocalDocs, write_json_durably
from settee.serve.lru import LeasedLru
from settee.serve.opening import open_database
from settee.serve.options import db_options
from settee.serve.protocol import HTTPError, damaged
from settee.serve.viewindex import ViewIndex
from settee.spec.config import validate_options
from settee.spec.errors import BadRequest, CorruptionError

__all__ = [
    "DbEntry",
    "Registry",
    "all_dbs_active",
    "check_db_name",
    "db_missing",
    "is_db_name",
    "is_replicator_db",
]

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


def is_replicator_db(name: str) -> bool:
    """Whether documents written to database ``name`` start replications: the
    ``_replicator`` database and any whose name ends ``/_replicator``
    (replicator.rst, "Additional Replicator Databases")."""
    return name == "_replicator" or name.endswith("/_replicator")


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


#: The file beside a database's view indexes while a purge may have made them stale.
PURGE_MARKER = ".purging"
#: couch_db's default purge_infos_limit: the purge requests a database keeps a record of.
PURGED_INFOS_LIMIT = 1000


def _check_purged_infos_limit(value: Any) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"purged_infos_limit {value!r} is not a positive integer")


#: The settings a database's settings file may hold, each with its check.
_SETTINGS = {
    "revs_limit": lambda value: validate_options(revs_limit=value),  # settee.open's rule
    "purged_infos_limit": _check_purged_infos_limit,
}


def db_missing() -> HTTPError:
    return HTTPError(404, "not_found", "Database does not exist.")


@dataclass(eq=False)
class DbEntry:
    """One open database and what the server keeps beside it."""

    name: str
    db: settee.Database
    local: LocalDocs
    compactions: int = 0
    design: DesignFunctions = field(default_factory=DesignFunctions)
    #: View indexes opened so far, by signature (``viewindex``).
    views: dict[str, ViewIndex] = field(default_factory=dict)
    #: Held through a purge: its pending record (``LocalDocs.begin_purge``) is one file.
    purge_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def incarnation(self) -> str:
        """The database's uuid: the same across closing and reopening it, another
        once it is deleted and created again under the same name."""
        return self.db.shards[0].identity.db_uuid

    @property
    def failed(self) -> bool:
        """Whether a shard of the database refuses writes until it is reopened (a
        write or fsync failed: a full disk, a failing device)."""
        return any(shard.failed for shard in self.db.shards)

    def close(self) -> None:
        """Close the database and its view indexes (writers finish their queues)."""
        self.db.close()
        self.close_views()

    def close_views(self) -> None:
        for index in self.views.values():
            index.close()
        self.views.clear()


def all_dbs_active(limit: int) -> HTTPError:
    """couch_server's refusal when ``max_dbs_open`` databases are open and in use."""
    return HTTPError(
        503,
        "all_dbs_active",
        f"all {limit} open databases are in use by requests (max_dbs_open); retry, "
        "or raise --max-dbs-open",
    )


#: A shard file's name (settee.layout's): its presence means a database is there.
_SHARD_FILE = re.compile(r"shard-[0-9]{3,}\.settee")


class Registry:
    """Creates, opens, lists and deletes the databases under ``root``; keeps at most
    ``options["max_dbs_open"]`` open, closing the least recently used idle ones."""

    def __init__(self, root: str, options: Mapping[str, Any]) -> None:
        self.root = os.path.abspath(root)
        self.options = dict(options)
        #: Held while a database opens, closes or is removed, so one directory is
        #: never open twice: an evicted database is closed before it can reopen.
        self._lock = threading.Lock()
        #: Purges running now, by database name (``purging``).
        self._purges: dict[str, int] = {}
        #: Databases a purge failed on: their marker stays (a later purge that
        #: succeeds must not remove it) until ``view_index`` drops their indexes.
        self._stale_views: set[str] = set()
        #: Serialises the purge markers' writes: each goes through one temporary file
        #: name, so two at once broke each other's rename (a 500).
        self._marker_lock = threading.Lock()
        self._open: LeasedLru[DbEntry] = LeasedLru()
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
        except OSError:
            # Something is there that cannot be listed (a symlink loop): opening it says
            # what (was a raw OSError, a 500 with a traceback, on every request).
            return True

    def cached(self, name: str) -> DbEntry | None:
        """The open entry, neither leased nor counted as a use (safe on the event loop)."""
        return self._open.peek(name)

    def leases(self) -> dict[str, int]:
        """Each open database and how many leases it has, least recently used first."""
        return self._open.leased()

    def try_acquire(self, name: str) -> DbEntry | None:
        """``name``'s entry with a lease on it, when it is open; None otherwise.
        Never blocks: the event loop calls it before handing ``acquire`` to a worker,
        which also reopens a database whose writes failed (None for one here)."""
        entry = self._open.lease(name) if is_db_name(name) else None
        if entry is not None and entry.failed:
            self._open.release(name, entry)
            return None
        return entry

    def acquire(self, name: str) -> DbEntry:
        """``name``'s entry with a lease on it, opening the database first if needed;
        404 when it does not exist (or cannot: only creating a database checks its
        name, as fabric does), 503 ``all_dbs_active`` when it is closed and every
        open database is in use. Pair each call with ``release``."""
        if not is_db_name(name):
            raise db_missing()
        entry = self.try_acquire(name)
        if entry is not None:
            return entry
        with self._lock:
            self._check_running()
            entry = self._open.lease(name)  # another request may have opened it meanwhile
            if entry is not None and entry.failed:
                entry = self._reopened(name, entry)
            if entry is None:
                if not self._exists(name):
                    raise db_missing()
                self._make_room()
                db = open_database(self._path(name), **self._reopen_options(name))
                entry = DbEntry(name, db, self._local(name))
                try:
                    self._finish_interrupted_purge(entry)
                except BaseException:
                    entry.close()
                    raise
                self._open.add(name, entry, leased=True)
            return entry

    def _reopened(self, name: str, entry: DbEntry) -> DbEntry | None:
        """``entry``, which the caller leases and whose writes failed, closed to be
        opened again (None) when no other request uses it: a shard that failed a
        write refuses every later one until its database is reopened, from its last
        durable commit (a full disk that has room again, say). One still in use is
        served as it is, to be reopened by a later request. Call with the lock held."""
        self._open.release(name, entry)
        if not self._open.pop_idle(name, entry):
            return self._open.lease(name)
        entry.close()
        return None

    def release(self, entry: DbEntry) -> None:
        """Give back a lease from ``acquire``/``try_acquire``/``retain``; the entry
        stays open, the first to close when room is needed. Never blocks."""
        self._open.release(entry.name, entry)

    def retain(self, entry: DbEntry) -> bool:
        """One more lease on ``entry``, which the caller leases, for work that
        outlives its request (a compaction); False when it was deleted meanwhile."""
        return self._open.retain(entry.name, entry)

    def _make_room(self) -> None:
        """Close the least recently used idle databases until one more fits under
        ``max_dbs_open`` (couch_server:maybe_close_lru_db); 503 ``all_dbs_active``
        when every open one is leased: couch_server refuses the open rather than
        go past the bound, which is what keeps descriptors and threads bounded."""
        limit = self.options["max_dbs_open"]
        for entry in self._open.evict_idle(keep=limit - 1):
            entry.close()
        if len(self._open) >= limit:
            raise all_dbs_active(limit)

    def _settings_path(self, name: str) -> str:
        return os.path.join(self.root, "_settings", _dir_name(name) + ".json")

    def _reopen_options(self, name: str) -> dict[str, Any]:
        """``settee.open`` options for an existing database: the server's, with the
        database's stored ``revs_limit``."""
        opts = db_options(self.options, creating=False)
        stored = self._settings(name)
        if "revs_limit" in stored:
            opts["revs_limit"] = stored["revs_limit"]
        return opts

    def _settings(self, name: str) -> dict[str, Any]:
        """The settings stored for ``name`` (``{}`` when none), each checked. Found in
        review: a raw KeyError or JSONDecodeError, and a directory or symlink loop in
        the file's place a raw OSError, each a 500 with a traceback on every request
        to the database; a stored value settee.open refuses was a 400 blaming the
        client for what the disk holds. An unknown member is damage too (a flipped
        bit in a name would otherwise drop the setting silently); so is a file whose
        checksum fails (``checked``: a flipped digit kept it valid JSON)."""
        path = self._settings_path(name)
        try:
            stored = checked.unwrap(path, LocalDocs.read_json(path))
        except FileNotFoundError:
            return {}
        try:
            if not isinstance(stored, dict) or not set(stored) <= set(_SETTINGS):
                raise ValueError(f"members {sorted(stored)} (known: {sorted(_SETTINGS)})")
            for key, value in stored.items():
                _SETTINGS[key](value)
        except (ValueError, TypeError, BadRequest) as exc:
            raise CorruptionError(
                path, 0, f"unreadable settings ({exc!r}): restore or remove it"
            ) from None
        return stored

    def _store_setting(self, entry: DbEntry, key: str, value: int) -> None:
        """Store ``key`` among ``entry``'s settings, durably; call with the lock held."""
        self._check_running()
        if self._open.peek(entry.name) is not entry:
            raise db_missing()  # deleted while the request ran
        stored = {**self._settings(entry.name), key: value}
        path = self._settings_path(entry.name)
        write_json_durably(path, checked.wrap(stored), fsync=self.options["fsync"])

    def set_revs_limit(self, entry: DbEntry, limit: int) -> None:
        """CouchDB's ``PUT /{db}/_revs_limit`` on the caller's leased ``entry``. The
        engine takes ``revs_limit`` per session, so it is stored beside the database
        (for its next open) and set on the open handle, which the requests running
        meanwhile go on using."""
        with self._lock:
            self._store_setting(entry, "revs_limit", limit)
            if entry.db.config["revs_limit"] != limit:
                entry.db._set_revs_limit(limit)

    def purged_infos_limit(self, entry: DbEntry) -> int:
        """How many purge requests ``entry``'s database keeps a record of
        (``_purged_infos_limit``; CouchDB's default 1000)."""
        with self._lock:
            return self._purged_infos_limit(entry.name)

    def _purged_infos_limit(self, name: str) -> int:
        return int(self._settings(name).get("purged_infos_limit", PURGED_INFOS_LIMIT))

    def set_purged_infos_limit(self, entry: DbEntry, limit: int) -> None:
        """CouchDB's ``PUT /{db}/_purged_infos_limit``: stored beside the database."""
        with self._lock:
            self._store_setting(entry, "purged_infos_limit", limit)

    def create(self, name: str, shards: int | None = None) -> None:
        """Create ``name``; 412 ``file_exists`` when it already exists."""
        check_db_name(name)
        with self._lock:
            self._check_running()
            if self._open.peek(name) is not None or self._exists(name):
                raise HTTPError(
                    412,
                    "file_exists",
                    "The database could not be created, the file already exists.",
                )
            self._make_room()  # couch_server makes room before a create too
            self._forget_leftovers(name)
            opts = db_options(self.options, creating=True)
            if shards is not None:
                opts["shards"] = shards
            db = self._create_db(self._path(name), opts)
            self._open.add(name, DbEntry(name, db, self._local(name)), leased=False)

    @staticmethod
    def _create_db(path: str, opts: dict[str, Any]) -> settee.Database:
        """``settee.open`` creating the database at ``path``. A creation that fails
        (a full disk) removes what it made, when the directory was not there before
        it: its shard files would otherwise make the name exist (``_exists``), a
        database the client was told was not created (found with a full disk: every
        later PUT was 412)."""
        existed = os.path.lexists(path)
        try:
            return settee.open(path, **opts)
        except BaseException:
            if not existed:
                shutil.rmtree(path, ignore_errors=True)
            raise

    def delete(self, name: str) -> None:
        """Close and remove ``name`` with its local documents; 404 if missing (a name
        no database can have is missing too: chttpd answers DELETE /Abc so)."""
        if not is_db_name(name):
            raise db_missing()
        with self._lock:
            self._check_running()
            # Leased or not: requests still using it then answer 404 (app.py).
            entry = self._open.pop(name)
            if entry is None and not self._exists(name):
                raise db_missing()
            if entry is not None:
                entry.close()
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
        path = self._settings_path(name)
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if os.path.lexists(path):
                raise damaged(f"{path}: cannot be removed ({exc}): remove it") from None
            # No file there (_settings is a file, or a symlink loop): nothing to forget.

    def _forget_leftovers(self, name: str) -> None:
        """Remove what a DELETE of ``name`` that did not finish (a crash after the
        database's directory went) left beside it, before a database is made under
        the name: found by the fault sweep, the new database served the old one's
        ``_local`` documents (a replicator's checkpoint of another database) and
        reused its view indexes (every query 400)."""
        shutil.rmtree(self._views_dir(name), ignore_errors=True)
        self._local(name).destroy()
        self._forget_settings(name)

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
            entries = self._open.pop_all()
        for entry in entries:
            entry.close()

    @property
    def stopping(self) -> bool:
        return self._closed

    def view_index(self, entry: DbEntry, signature: str) -> ViewIndex:
        """The index of a map function over ``entry``'s database, opened (or
        created) under ``<dir>/_views/<database>/<signature>``."""
        with self._lock:
            self._check_running()
            if self._open.peek(entry.name) is not entry:
                raise db_missing()  # deleted while the request ran: leave no index open
            marker = os.path.join(self._views_dir(entry.name), PURGE_MARKER)
            if not self._purges.get(entry.name) and os.path.lexists(marker):
                # A purge did not finish removing what it made stale from the indexes
                # (a crash, an error): they go now, before any is read. A marker that
                # cannot be removed (a directory in its place) is damage: left alone,
                # it had every query drop and rebuild every index.
                if not os.path.isfile(marker):
                    raise damaged(f"{marker}: not a file: remove it")
                self._drop_views(entry, set())
                self._stale_views.discard(entry.name)
                try:
                    os.remove(marker)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    raise damaged(f"{marker}: cannot be removed ({exc}): remove it") from None
            index = entry.views.get(signature)
            if index is not None and index.failed:
                # Its writes failed (a full disk): reopened from its last durable commit,
                # as a database is (``_reopened``); a query using it meanwhile retries.
                del entry.views[signature]
                index.close()
                index = None
            if index is None:
                path = os.path.join(self._views_dir(entry.name), signature)
                index = entry.views[signature] = ViewIndex(path, fsync=self.options["fsync"])
            return index

    def cleanup_views(self, entry: DbEntry, live: set[str]) -> list[str]:
        """CouchDB's ``_view_cleanup``: remove the index of every signature not in
        ``live`` (those no design document defines any more); the removed ones."""
        with self._lock:
            self._check_running()
            if self._open.peek(entry.name) is not entry:
                raise db_missing()
            return self._drop_views(entry, live)

    def _drop_views(self, entry: DbEntry, live: set[str]) -> list[str]:
        folder = self._views_dir(entry.name)
        found = {name for name in _listdir(folder) if not name.startswith(".")}
        stale = sorted((found | set(entry.views)) - live)
        for signature in stale:
            index = entry.views.pop(signature, None)
            if index is not None:
                index.close()
            shutil.rmtree(os.path.join(folder, signature), ignore_errors=True)
        return stale

    @contextlib.contextmanager
    def purging(self, entry: DbEntry) -> Iterator[None]:
        """Around a purge of ``entry``'s database: a marker beside its view indexes,
        durable before the purge and removed after it, says they may be stale. A
        document purged whole leaves no change an index could see, so the purge
        handler removes its rows from each (``forget_in_views``); if it cannot (a
        crash, an error), the next index opened drops them all first
        (``view_index``), to be built again."""
        name = entry.name
        marker = os.path.join(self._views_dir(name), PURGE_MARKER)
        with self._lock:
            self._purges[name] = self._purges.get(name, 0) + 1
        finished = False
        try:
            _listdir(os.path.dirname(marker))  # a file in the folder's place is damage (410)
            with self._marker_lock:
                write_json_durably(marker, {}, fsync=self.options["fsync"])
            yield
            finished = True
        finally:
            with self._lock:
                if not finished:
                    self._stale_views.add(name)  # kept until view_index drops them
                self._purges[name] -= 1
                if not self._purges[name]:
                    del self._purges[name]
                    if name not in self._stale_views:
                        with contextlib.suppress(OSError):
                            os.remove(marker)

    def purge(self, entry: DbEntry, request: dict[str, list[str]]) -> dict[str, Any]:
        """Purge ``request`` (checked) from ``entry``'s database and record it: the
        request is written down first (``LocalDocs.begin_purge``), so a purge an
        error or a crash left unrecorded is run again and recorded, by the next
        purge or the database's next open (``_finish_interrupted_purge``)."""
        # Damaged records or settings are found before the purge, not after it.
        limit = self.purged_infos_limit(entry)
        with entry.purge_lock:
            left = entry.local.pending_purge()
            if left is not None:
                self._purge_recorded(entry, left, limit)
            entry.local.begin_purge(request)
            return self._purge_recorded(entry, request, limit)

    def _purge_recorded(
        self, entry: DbEntry, request: dict[str, list[str]], limit: int
    ) -> dict[str, Any]:
        with self.purging(entry):
            answer = entry.db.purge(request)
            entry.local.record_purges(request, limit)
            touched = [doc_id for doc_id, revs in answer["purged"].items() if revs]
            if touched:
                self.forget_in_views(entry, touched)
        return answer

    def _finish_interrupted_purge(self, entry: DbEntry) -> None:
        """Run again and record a purge a crash interrupted (``purge``), before the
        database just opened serves a request: a write in between could make a
        purged leaf an inner revision, which a purge then leaves alone. Its view
        indexes are dropped, to be built again (the marker, as ``purging`` leaves
        it after a failure), since forgetting rows opens them (``view_index``,
        which takes the lock the caller holds)."""
        request = entry.local.pending_purge()
        if request is None:
            return
        marker = os.path.join(self._views_dir(entry.name), PURGE_MARKER)
        with self._marker_lock:
            write_json_durably(marker, {}, fsync=self.options["fsync"])
        entry.db.purge(request)
        entry.local.record_purges(request, self._purged_infos_limit(entry.name))

    def forget_in_views(self, entry: DbEntry, ids: list[str]) -> None:
        """Remove from every view and Mango index of ``entry``'s database the rows of
        the documents of ``ids`` it no longer holds (``ViewIndex.forget``), opening
        the indexes not open now."""
        with self._lock:
            found = _listdir(self._views_dir(entry.name))
            signatures = sorted({n for n in found if not n.startswith(".")} | set(entry.views))
        for signature in signatures:
            self.view_index(entry, signature).forget(entry.db, ids)

    def _views_dir(self, name: str) -> str:
        return os.path.join(self.root, "_views", _dir_name(name))

    def _check_running(self) -> None:
        if self._closed:
            raise HTTPError(503, "service_unavailable", "the server is stopping")


def _listdir(folder: str) -> list[str]:
    """The entries of a database's view folder (none when it is missing); one that
    cannot be listed (a file, a symlink loop in its place) is damage, 410 naming it
    (was a raw OSError, a 500 with a traceback)."""
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise damaged(f"{folder}: cannot be listed ({exc}): remove it") from None

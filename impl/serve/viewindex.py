"""View indexes: a design document's map function, kept incrementally in a
settee database of its own (``<dir>/_views/<database>/<signature>``).

The index database holds three kinds of documents, told apart by the first
character of their ids (so each kind is one ``_all_docs`` range):

* ``r`` + ``sort_key(key)`` + ``code_point_key(doc id)`` + emit number: one row
  of the view, body ``{"k": key, "v": value, "d": doc id}``. ``sort_key``
  (``settee.spec.collation``) turns CouchDB's collation into code point order,
  so the engine's id order *is* the view's order and a key range is an id range
  (``raw_sort_key`` for a view whose options ask for the raw collation);
* ``b`` + doc id: the rows a source document emitted, ``{"rows": [[id, rev]]}``,
  so an update or a deletion removes exactly them;
* ``c``: the checkpoint, ``{"since": token, "rows": n, "docs": n, "db": uuid}`` —
  the source's changes seq the index has seen, counts for ``total_rows``/``offset``,
  and the source database's uuid (an index whose checkpoint names another
  database, or changes its database never made, starts over: ``_reset``).

An update reads the source's ``_changes`` after the checkpoint a page at a
time, runs the map function on each changed document (as CouchDB gives it to
map functions: with ``_conflicts``; design documents and deletions emit
nothing; a document the function throws on emits nothing, as couchjs logs
and skips it) and commits each page's row changes, back-index and checkpoint
in one ``bulk_docs`` on the index's single shard: one atomic commit, so a
crash leaves the index at a checkpoint it matches. The signature is a hash of
the map function and language: views with the same map share an index, and
editing the function starts a new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import settee
from settee.serve import revs
from settee.serve.js import Thrown
from settee.serve.opening import DAMAGE_ERRNOS, open_database
from settee.serve.protocol import HTTPError, damaged
from settee.spec.collation import code_point_key, raw_sort_key, sort_key
from settee.spec.config import DEFAULTS
from settee.spec.docs import normalise_body

__all__ = ["ViewIndex", "collation_key", "prefix_bound", "signature"]

#: The most bytes of rows one document may emit (the engine's document limit).
ROW_LIMIT = DEFAULTS["max_document_size"]
#: The most characters of JSON one document's emitted keys may take. A row's id
#: holds its key's collation key, several times the key's length, and the
#: document's back-index row lists every row id: a 5 MB key made that row pass
#: ROW_LIMIT, failing every later update of the index, so every query using it
#: (found in review). A document over it emits nothing, as when its map throws.
KEY_CHARS_LIMIT = ROW_LIMIT // 64
#: Source changes read (and rows committed) per update step.
UPDATE_PAGE = 200
_LAST = "\U0010ffff"  # above every character a sort key holds


#: Bumped when the index's layout changes, so an older index is not reused.
INDEX_LAYOUT = 2


class Mapper(Protocol):
    """A map function: a JavaScript one (``JsFunction``) or a Mango index's."""

    def emitted(self, doc: dict[str, Any]) -> list[tuple[Any, Any]]: ...


@dataclass(frozen=True)
class MapOptions:
    """The options that change what a view's index holds, as couch_mrview reads
    them: the design document's ``include_design`` maps design documents too and
    its ``local_seq`` gives each document its ``_local_seq`` (design_options_test.exs);
    the view's own ``"collation": "raw"`` orders its keys by Erlang's term order
    (``spec.collation.collate_raw``; view_collation_raw_test.exs), any other value
    by the default view collation."""

    include_design: bool = False
    local_seq: bool = False
    raw_collation: bool = False

    @classmethod
    def of(cls, ddoc: Mapping[str, Any], view: Any = None) -> MapOptions:
        """The options of ``ddoc``'s view ``view`` (its definition: ``{"map": ...}``)."""
        options = ddoc.get("options")
        if not isinstance(options, dict):
            options = {}
        view_options = view.get("options") if isinstance(view, dict) else None
        raw = isinstance(view_options, dict) and view_options.get("collation") == "raw"
        return cls(options.get("include_design") is True, options.get("local_seq") is True, raw)

    @property
    def key_of(self) -> Callable[[Any], str]:
        """The sort key of the view's keys in its collation."""
        return collation_key(raw=self.raw_collation)


def collation_key(*, raw: bool) -> Callable[[Any], str]:
    """The sort key of a view's keys: the raw collation's, or the default one's."""
    return raw_sort_key if raw else sort_key


@dataclass(frozen=True)
class ViewMapper:
    """A view's map function with its design document's ``MapOptions``."""

    function: Mapper
    options: MapOptions = MapOptions()

    def emitted(self, doc: dict[str, Any]) -> list[tuple[Any, Any]]:
        return self.function.emitted(doc)


def signature(
    map_source: str, language: str, options: MapOptions = MapOptions(), lib: Any = None
) -> str:
    """The index of a map function: another source, language, set of options or
    ``views.lib`` (the modules it may ``require``) is another index (couch_mrview's
    signature counts the design options and the lib too). A view without options or
    lib keeps the signature it had before they counted."""
    signed: list[Any] = [INDEX_LAYOUT, language, map_source]
    if options.include_design or options.local_seq:
        signed.append([options.include_design, options.local_seq])
    if options.raw_collation:
        signed.append("raw")  # couch_mrview keys a view by its map *and* its options
    if lib:
        signed.append(["lib", lib])
    return hashlib.sha256(json.dumps(signed).encode()).hexdigest()[:32]


def row_id(key: Any, doc_id: str, n: int, key_of: Callable[[Any], str] = sort_key) -> str:
    # Rows with equal keys go by raw document id, as CouchDB's less_json_ids.
    return "r" + key_of(key) + code_point_key(doc_id) + f"{n:08d}"


class _NoMap:
    """``forget``'s mapper: a document it is asked about is gone, so it emits nothing
    (one written anew meanwhile too: its change is indexed by the next update)."""

    def emitted(self, doc: dict[str, Any]) -> list[tuple[Any, Any]]:
        return []


_NO_MAP = _NoMap()


class ViewIndex:
    """One map function's index over one database. Thread-safe: updates take a
    lock, reads use the index database's snapshots."""

    def __init__(self, path: str, fsync: bool) -> None:
        self.path = path
        self._fsync = fsync
        self.db = self._open()
        self._lock = threading.Lock()
        #: Compactions of this index running now (``compact_running`` in ``_info``).
        self.compactions = 0

    def _open(self) -> settee.Database:
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        except OSError as exc:
            if exc.errno not in DAMAGE_ERRNOS:
                raise  # a full disk, a permission: not damage
            # A file or a symlink loop where the folder should be: a raw OSError was a 500.
            raise damaged(f"{os.path.dirname(self.path)}: cannot be made ({exc})") from None
        # Damaged, it is refused (410) like a database; removing its folder rebuilds it.
        return open_database(
            self.path,
            what=f"view index (remove {self.path} to rebuild it)",
            shards=1,
            fsync=self._fsync,
        )

    @property
    def failed(self) -> bool:
        """Whether its database refuses writes until reopened (a write failed)."""
        return any(shard.failed for shard in self.db.shards)

    def close(self) -> None:
        self.db.close()

    def updating(self) -> bool:
        """Whether an update is running now (``_info``'s ``updater_running``)."""
        return self._lock.locked()

    # -- updating -------------------------------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        try:
            return self.db.get("c")
        except settee.NotFound:
            return {"_id": "c", "since": 0, "rows": 0, "docs": 0}

    def update(self, source: settee.Database, mapper: Mapper) -> None:
        """Bring the index up to the source's current changes."""
        source_uuid = source.shards[0].identity.db_uuid
        with self._lock:
            while True:
                state = self.checkpoint()
                if state.get("db", source_uuid) != source_uuid:
                    self._reset()  # an index of another database of this name
                    continue
                state["db"] = source_uuid
                try:
                    page = source.changes(since=state["since"], limit=UPDATE_PAGE)
                except settee.BadRequest:
                    self._reset()  # the checkpoint names changes the database never made
                    continue
                if page["results"]:
                    self._apply(source, mapper, state, page)
                if len(page["results"]) < UPDATE_PAGE:
                    if not page["results"] and page["last_seq"] != state["since"]:
                        self._write([], {**state, "since": page["last_seq"]})
                    return

    def _reset(self) -> None:
        """Start the index over, empty. Its checkpoint names another database (one
        deleted, whose index a crash mid-DELETE left, and made again under the same
        name) or changes this one never made (restored from an older copy): found by
        the fault sweep, such an index answered 400 on every query, or kept the
        other database's rows. CouchDB resets an index that is ahead of its database
        too. A query reading the old one meanwhile answers 503 (retry)."""
        self.db.close()
        shutil.rmtree(self.path)
        self.db = self._open()

    def forget(self, source: settee.Database, ids: list[str]) -> None:
        """Remove the rows of the documents of ``ids`` that ``source`` no longer holds
        (a purge removed them whole, which leaves no change an update could read).
        Under the update lock, so no update commits rows of them afterwards: one
        that read them before the purge has committed by then, and a later one
        reads changes from after the purge. A document written anew after the check
        is a change past the checkpoint, which the next update indexes."""
        with self._lock:
            rows = source.all_docs(keys=ids)["rows"] if ids else []
            gone = [row["key"] for row in rows if "error" in row]
            if not gone:
                return
            state = self.checkpoint()
            page = {"results": [{"id": doc_id} for doc_id in gone], "last_seq": state["since"]}
            self._apply(source, _NO_MAP, state, page)

    def _apply(
        self, source: settee.Database, mapper: Mapper, state: dict[str, Any], page: Any
    ) -> None:
        ids = [row["id"] for row in page["results"]]
        backs = self.db.all_docs(keys=["b" + i for i in ids], include_docs=True)["rows"]
        old = {i: (r.get("doc") or {}).get("rows", []) for i, r in zip(ids, backs, strict=True)}
        emitted = {i: self._emitted(source, mapper, i) for i in ids}
        # Every id this page writes, at its current revision, tombstones included: a row
        # (or back-index) that comes back is written on top of its tombstone, never as a
        # new root that could collide with a revision it had before.
        touched = [rid for i in ids for rid in {r for r, _ in old[i]} | emitted[i].keys()]
        current = self._current_revs(touched + ["b" + i for i in ids])
        writes: list[dict[str, Any]] = []
        rows, docs = state["rows"], state["docs"]
        for doc_id in ids:
            previous = {rid for rid, _rev in old[doc_id]}
            for rid in previous - emitted[doc_id].keys():
                writes.append(_successor(rid, current[rid], {}, deleted=True))
            kept = []
            for rid, body in emitted[doc_id].items():
                row = _successor(rid, current.get(rid), body)
                writes.append(row)
                kept.append([rid, row["_rev"]])
            rows += len(emitted[doc_id]) - len(previous)
            back = current.get("b" + doc_id)
            if kept:
                writes.append(_successor("b" + doc_id, back, {"rows": kept}))
                docs += 0 if old[doc_id] else 1
            elif old[doc_id]:
                writes.append(_successor("b" + doc_id, back, {}, deleted=True))
                docs -= 1
        self._write(writes, {**state, "since": page["last_seq"], "rows": rows, "docs": docs})

    def _current_revs(self, ids: list[str]) -> dict[str, str]:
        """The current winning revision of each id the index holds (deleted or not)."""
        unique = list(dict.fromkeys(ids))
        rows = self.db.all_docs(keys=unique)["rows"] if unique else []
        return {r["id"]: r["value"]["rev"] for r in rows if "value" in r}

    def _write(self, writes: list[dict[str, Any]], state: dict[str, Any]) -> None:
        """One commit: every row change of a page and the checkpoint after it. The
        index chooses its own revisions (``new_edits=False``), so a row's next
        revision is known before it is written and the back-index can name it."""
        body = {k: v for k, v in state.items() if not k.startswith("_")}
        checkpoint = _successor("c", state.get("_rev"), body)
        failed = self.db.bulk_docs([*writes, checkpoint], new_edits=False)
        if failed:
            raise HTTPError(400, "index_error", f"view index update failed: {failed[:3]}")

    def _emitted(
        self, source: settee.Database, mapper: Mapper, doc_id: str
    ) -> dict[str, dict[str, Any]]:
        options = mapper.options if isinstance(mapper, ViewMapper) else MapOptions()
        if doc_id.startswith("_design/") and not options.include_design:
            return {}
        doc = _mapped_doc(source, doc_id, options)
        if doc is None:
            return {}  # deleted (or gone meanwhile): no rows
        try:
            pairs = mapper.emitted(doc)
            # A row the index cannot store (a lone surrogate, an integer past 64 bits)
            # would fail every later update: the document emits nothing, as when its
            # map throws (found by an adversarial client).
            rows = normalise_body({"rows": [[key, value] for key, value in pairs]}, ROW_LIMIT)
            if sum(len(json.dumps(key)) for key, _ in rows["rows"]) > KEY_CHARS_LIMIT:
                return {}
        except (HTTPError, Thrown, settee.BadRequest, ValueError):
            # couchjs logs a map error, an Error or any thrown value, and skips the
            # document (main.js handleViewError).
            return {}
        return {
            row_id(key, doc_id, n, options.key_of): {"k": key, "v": value, "d": doc_id}
            for n, (key, value) in enumerate(rows["rows"])
        }

    # -- reading ----------------------------------------------------------------------------

    def rows(
        self,
        start: tuple[Any, str | None] | str | None,
        end: tuple[Any, str | None] | str | None,
        *,
        descending: bool,
        inclusive_end: bool,
        key_of: Callable[[Any], str] = sort_key,
    ) -> Iterator[dict[str, Any]]:
        """The rows between ``(key, doc id or None)`` bounds (or ids from
        :func:`prefix_bound`), in view order; ``key_of``: the view's sort key
        (``MapOptions.key_of``)."""
        lo = "r" if not descending else "r" + _LAST
        if isinstance(start, str):
            lo = start
        elif start is not None:
            lo = _bound(start, key_of, upper=descending)
        hi = ("r" + _LAST) if not descending else "r"
        if isinstance(end, str):
            hi = end
        elif end is not None:
            hi = _bound(end, key_of, upper=inclusive_end != descending)
        # Exclusive ends are ids no row has (a bare key prefix or key + _LAST). A page
        # at a time, so a reader that stops early (a limit) reads no further.
        skip = 0
        while True:
            page = self.db.all_docs(
                startkey=lo,
                endkey=hi,
                descending=descending,
                include_docs=True,
                limit=UPDATE_PAGE,
                skip=skip,
            )["rows"]
            for row in page:
                if row["id"].startswith("r"):
                    yield row["doc"]
            if len(page) < UPDATE_PAGE:
                return
            lo, skip = page[-1]["id"], 1  # the next page starts after this one's last id

    def counts(self) -> tuple[int, int]:
        """(rows, documents with rows): ``total_rows`` and the offset correction."""
        state = self.checkpoint()
        return state["rows"], state["docs"]

    def rows_before(
        self,
        start: tuple[Any, str | None],
        *,
        descending: bool,
        key_of: Callable[[Any], str] = sort_key,
    ) -> int:
        """How many rows come before ``start`` in the query's direction, from the
        index database's own offset (stored reductions), not by reading them: its
        back-index (``b``) and checkpoint (``c``) ids sort before every row."""
        at = _bound(start, key_of, upper=descending)
        offset = self.db.all_docs(startkey=at, limit=0, descending=descending)["offset"]
        if descending:
            return int(offset)  # nothing but rows sorts after a row id
        state = self.checkpoint()
        others = state["docs"] + (1 if "_rev" in state else 0)
        return int(offset) - others


def _successor(
    doc_id: str, previous: str | None, body: dict[str, Any], *, deleted: bool = False
) -> dict[str, Any]:
    """The index document's next revision, on top of ``previous`` (None: a new root):
    position one more, hash of its content."""
    pos, parent = (0, None) if previous is None else previous.split("-", 1)
    digest = hashlib.md5(json.dumps([doc_id, body, deleted, previous]).encode()).hexdigest()
    ids = [digest] if parent is None else [digest, parent]
    doc = {"_id": doc_id, **body, "_revisions": {"start": int(pos) + 1, "ids": ids}}
    if deleted:
        doc["_deleted"] = True
    doc["_rev"] = f"{int(pos) + 1}-{digest}"
    return doc


def prefix_bound(prefix: list[Any], *, above: bool) -> str:
    """The id below every row whose key is ``prefix`` or starts with its members
    or, with ``above``, above all of them (CouchDB's end key ``[..., MAX]``)."""
    text = "r" + sort_key(prefix)
    # A list's sort key ends with the byte that closes it: without it, the text is
    # a prefix of the key of every longer list that starts with the same members.
    return text[:-1] + _LAST if above else text


def _bound(bound: tuple[Any, str | None], key_of: Callable[[Any], str], *, upper: bool) -> str:
    """The id at a range end: below every row of the key (``upper`` False) or
    above every row of it (True), narrowed to one document when its id is given."""
    key, doc_id = bound
    text = "r" + key_of(key)
    if doc_id is not None:
        text += code_point_key(doc_id)
    return text + _LAST if upper else text


def _mapped_doc(source: settee.Database, doc_id: str, options: MapOptions) -> Any:
    """The document a map function sees: its winner with ``_conflicts``, and with
    ``local_seq`` its ``_local_seq`` (read until the two name one revision, as a
    GET with ``local_seq=true`` reads them); None when it is deleted."""
    for _ in range(3):
        try:
            doc = source.get(doc_id, conflicts=True)
        except settee.NotFound:
            return None
        if not options.local_seq:
            return doc
        info = revs.doc_info(source, doc_id)
        if info is not None and info.winner == doc["_rev"]:
            return {**doc, "_local_seq": info.seq}
    return doc  # written again and again meanwhile: the next update maps it anew

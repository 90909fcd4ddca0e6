"""The database facade: ``settee.open(path, ...)`` and the public API of DESIGN.md.

A database is ``shards`` shard files. Each call validates its arguments first
(nothing is written for bad input), routes documents with the spec's routing
function, and fans reads out over the shards' published snapshots. Writes go
to each shard's writer; a ``bulk_docs`` call submits to every shard it touches
before waiting, so the shards commit in parallel.
"""

from __future__ import annotations

import threading
import warnings
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from settee import views
from settee.compaction import compact_shard
from settee.cut import FollowerCut, WriterCut
from settee.docinfo import DocInfo
from settee.follower import FollowerShard, readonly_error, warn_if_lost
from settee.heads import HeadsFile
from settee.io import FileSystem, OsFileSystem, on_os_files
from settee.layout import (
    acquire_lock,
    mark_locked,
    open_layout,
    read_layout,
    release_lock,
    shard_path,
    writer_running,
)
from settee.shard import Shard, ShardIdentity
from settee.snapshot import Snapshot
from settee.spec import revtree
from settee.spec.arguments import (
    check_all_docs,
    check_bool,
    check_count,
    check_optional_rev,
    check_path,
    check_purge,
    check_revs_diff,
    check_since,
    validate_docid,
)
from settee.spec.attachments import (
    MissingStub,
    Stored,
    attachment_answer,
    check_atts_since,
    since_position,
    validate_attachment_name,
)
from settee.spec.config import validate_options
from settee.spec.docs import ValidDoc, render_doc, validate_doc
from settee.spec.errors import BadRequest, Conflict, NotFound, SetteeError
from settee.spec.routing import shard_of
from settee.spec.values import describe, is_sequence, plain_items
from settee.tokens import encode_token

__all__ = ["Database", "open"]


def open(path: str, **options: Any) -> Database:
    """Open the database at ``path``, creating it if missing (see SEMANTICS.md §1)."""
    return Database(path, **options)


class Database:
    """An open settee database. Thread-safe; also a context manager."""

    def __init__(self, path: str, *, fs: FileSystem | None = None, **options: Any) -> None:
        path = check_path(path, optional=False)
        self.config = validate_options(**options)
        if fs is not None and not isinstance(fs, FileSystem):
            # The engine's own option (tests plug in simulated file systems): a path
            # given here was a raw AttributeError (found in review).
            raise BadRequest(
                f"fs must be a settee.io.FileSystem (or None for the OS's), not {describe(fs)}"
            )
        self.path = path
        self.fs = fs if fs is not None else OsFileSystem()
        self._closed = False
        self._close_lock = threading.Lock()
        try:
            self._open(path, options)
        except OSError as exc:
            raise SetteeError(f"{path}: cannot open the database: {_why(exc)}") from exc

    def _open(self, path: str, options: dict[str, Any]) -> None:
        self._heads: HeadsFile | None = None
        #: Pins every shard at one instant for reads over several (settee.cut).
        self.cut: WriterCut | FollowerCut = WriterCut()
        if self.config["readonly"]:
            self._open_readonly(path)
            return
        # Lock before reading or creating anything, so two processes can never
        # both create the same database or open it for writing at once.
        if not self.config["create"] and not self.fs.exists(path):
            raise SetteeError(f"{path} does not exist: check the path (create=False)")
        self.fs.makedirs(path)
        self._lock_fd = acquire_lock(self.fs, path)
        try:
            layout = open_layout(
                self.fs,
                path,
                self.config["shards"],
                shards_explicit=options.get("shards") is not None,
                create=self.config["create"],
            )
            mark_locked(self.fs, path)
            self.shards = self._open_shards(layout.uuid, layout.shards)
        except BaseException:
            release_lock(self._lock_fd)
            raise
        if on_os_files(self.fs):  # other processes read HEADS (settee.heads)
            self._attach_heads(path)

    def _attach_heads(self, path: str) -> None:
        try:
            self._heads = HeadsFile(path, writer=True)
        except SetteeError as exc:  # a hint only: readonly readers then scan the files
            warnings.warn(f"{exc}; readonly readers will scan the shard files", stacklevel=4)
            return
        try:
            for shard in self.shards:
                warn_if_lost(shard.snapshot.file, self._heads.read(shard.identity.index))
                shard.attach_heads(self._heads)
        except BaseException:
            self.close()
            raise

    def _open_readonly(self, path: str) -> None:
        """Follow a database another handle writes: no lock, nothing created or repaired."""
        self._lock_fd = None
        if not self.fs.exists(path):
            raise SetteeError(f"{path} does not exist: check the path (readonly=True)")
        layout = read_layout(self.fs, path)
        no_writer = False
        if on_os_files(self.fs):
            self._heads = HeadsFile(path, writer=False)
            no_writer = writer_running(path) is False
        shards: list[Any] = []
        try:
            for index in range(layout.shards):
                shards.append(
                    FollowerShard(
                        self.fs,
                        shard_path(path, index),
                        ShardIdentity(layout.uuid, index, layout.shards),
                        heads=self._heads,
                        cache_bytes=self.config["cache_bytes"] // layout.shards,
                        body_cache_bytes=self.config["body_cache_bytes"] // layout.shards,
                        node_size=self.config["node_size"],
                        no_writer=no_writer,
                    )
                )
        except BaseException:
            for shard in shards:
                shard.close()
            if self._heads is not None:
                self._heads.close()
            raise
        self.shards = shards
        self.cut = FollowerCut(self._heads)

    def _open_shards(self, db_uuid: str, count: int) -> list[Shard]:
        shards: list[Shard] = []
        try:
            for index in range(count):
                # An unfinished compaction's <shard>.compact is left alone: the
                # shard file is intact, and the next compaction replaces it.
                shards.append(
                    Shard(
                        self.fs,
                        shard_path(self.path, index),
                        ShardIdentity(db_uuid, index, count),
                        fsync=self.config["fsync"],
                        serialized=self.config["read_mode"] == "serialized",
                        revs_limit=self.config["revs_limit"],
                        cache_bytes=self.config["cache_bytes"] // count,
                        body_cache_bytes=self.config["body_cache_bytes"] // count,
                        strict=self.config["strict"],
                        node_size=self.config["node_size"],
                        cut=self.cut,
                    )
                )
        except BaseException:
            for shard in shards:
                shard.close()
            raise
        return shards

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Finish queued writes and release the files and the lock. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            for shard in self.shards:
                shard.close()
        finally:
            if self._heads is not None:
                self._heads.close()
            release_lock(self._lock_fd)

    def __enter__(self) -> Database:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SetteeError("database is closed; open it again with settee.open(path)")

    def _check_writable(self) -> None:
        self._check_open()
        if self.config["readonly"]:
            raise readonly_error(self.path)

    def _snapshots(self) -> list[Snapshot]:
        """Every shard's current snapshot, all as of one instant (settee.cut); raises
        SetteeError once closed. What every read over several shards reads."""
        shards = self.shards
        if len(shards) == 1:
            return [shards[0].current()]
        return self.cut.snapshots(shards)  # type: ignore[arg-type]  # the cut's own kind

    def _shard(self, doc_id: str) -> Shard:
        return self.shards[shard_of(doc_id, len(self.shards))]

    # -- writes -------------------------------------------------------------------------------

    def put(self, doc: Any) -> dict[str, Any]:
        """Create or update one document; raises Conflict, BadRequest."""
        self._check_writable()
        valid = self._validate(doc, new_edits=True)
        [result] = self._write([valid], new_edits=True)
        if isinstance(result, BaseException):
            raise result
        return {"ok": True, "id": valid.id, "rev": result}

    def delete(self, docid: Any, rev: Any) -> dict[str, Any]:
        """Leave a tombstone on top of ``rev``; raises NotFound, Conflict, BadRequest."""
        self._check_writable()
        docid = validate_docid(docid)
        rev = check_optional_rev(rev)
        tombstone = {"_id": docid, "_deleted": True} | ({"_rev": rev} if rev else {})
        valid = self._validate(tombstone, new_edits=True)
        [result] = self._write([valid], new_edits=True, deleting=True)
        if isinstance(result, BaseException):
            raise result
        return {"ok": True, "id": docid, "rev": result}

    def bulk_docs(self, docs: Any, new_edits: Any = True) -> list[dict[str, Any]]:
        """Write many documents; one result per doc (only errors with new_edits=False)."""
        self._check_writable()
        if not is_sequence(docs):
            raise BadRequest(f"docs must be a list of documents, not {type(docs).__name__}")
        check_bool("new_edits", new_edits)
        valid = [
            self._validate(doc, new_edits=new_edits, generate_id=True) for doc in plain_items(docs)
        ]
        results = self._write(valid, new_edits=new_edits)
        out = []
        for doc, result in zip(valid, results, strict=True):
            if isinstance(result, Conflict | MissingStub):
                out.append({"id": doc.id, "error": result.error, "reason": result.reason})
            elif isinstance(result, BaseException):
                raise result
            elif new_edits:
                out.append({"ok": True, "id": doc.id, "rev": result})
        return out

    def purge(self, revs: Any) -> dict[str, Any]:
        """Remove leaf revisions for good (SEMANTICS.md §19): ``{id: [rev, ...]}`` ->
        ``{"purge_seq": None, "purged": {id: [revs purged]}}``."""
        self._check_writable()
        checked = check_purge(revs)
        by_shard: dict[int, dict[str, list[str]]] = defaultdict(dict)
        for doc_id, asked in checked.items():
            by_shard[shard_of(doc_id, len(self.shards))][doc_id] = asked
        futures = [self.shards[s].submit_purge(asked) for s, asked in by_shard.items()]
        purged: dict[str, list[str]] = {}
        for future in futures:
            purged.update(future.result())
        return {"purge_seq": None, "purged": {doc_id: purged[doc_id] for doc_id in checked}}

    def _validate(self, doc: Any, *, new_edits: bool, generate_id: bool = False) -> ValidDoc:
        return validate_doc(
            doc,
            new_edits=new_edits,
            max_document_size=self.config["max_document_size"],
            generate_id=generate_id,
        )

    def _write(self, docs: list[ValidDoc], *, new_edits: bool, deleting: bool = False) -> list[Any]:
        """Submit to every shard first, then wait: the shards commit in parallel."""
        by_shard: dict[int, list[int]] = defaultdict(list)
        for i, doc in enumerate(docs):
            by_shard[shard_of(doc.id, len(self.shards))].append(i)
        futures = [
            (
                indexes,
                self.shards[s].submit(
                    [docs[i] for i in indexes], new_edits=new_edits, deleting=deleting
                ),
            )
            for s, indexes in by_shard.items()
        ]
        results: list[Any] = [None] * len(docs)
        for indexes, future in futures:
            for i, result in zip(indexes, future.result(), strict=True):
                results[i] = result
        return results

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
        """The winning (or the given) revision of a document; raises NotFound.
        ``attachments``/``atts_since``: which attachments come with their data
        instead of as stubs (SEMANTICS.md §18)."""
        self._check_open()
        docid = validate_docid(docid)
        if (
            rev is None
            and revs is False
            and conflicts is False
            and attachments is False
            and atts_since is None
        ):
            # The common call: every option at its default (nothing to check), the
            # winner read from its by_id value's clear fields. A third of a get was
            # the option checks and a DocInfo no answer used.
            doc = self._shard(docid).current().live_winner_doc(docid)
            if doc is not None:
                return doc
        rev = check_optional_rev(rev)
        check_bool("revs", revs)
        check_bool("conflicts", conflicts)
        check_bool("attachments", attachments)
        since = check_atts_since(atts_since)
        snap, info, wanted = self._revision(docid, rev)
        # A plain get of a live winner with a stored body was answered above.
        body = snap.body(info, wanted) if wanted in info.tree else None
        if body is None:
            raise NotFound("missing")
        # atts_since narrows attachments=True too (chttpd_db), and implies it alone.
        data_above = 0 if attachments else None
        if since is not None:
            data_above = since_position(info.tree, wanted, since)
        return render_doc(
            docid,
            wanted,
            info.tree[wanted][1],
            body,
            revisions=(
                revtree.revisions(info.tree, wanted, self.config["revs_limit"]) if revs else None
            ),
            conflicts=revtree.conflicts(info.tree) if conflicts and rev is None else None,
            attachments=snap.rendered_attachments(info, wanted, data_above),
        )

    def _revision(self, doc_id: str, rev: str | None) -> tuple[Snapshot, DocInfo, str]:
        """The snapshot, info and revision a read names: ``rev``, else the winner;
        NotFound for a missing document or (without ``rev``) a deleted one."""
        snap = self._shard(doc_id).current()
        info = snap.doc_info(doc_id)
        if info is None:
            raise NotFound("missing")
        if rev is None and info.deleted:
            raise NotFound("deleted")
        return snap, info, info.winner if rev is None else rev

    def _attachment(self, doc_id: Any, name: Any, rev: Any) -> tuple[Snapshot, Stored]:
        """The snapshot and record of the attachment a read names (arguments checked)."""
        self._check_open()
        doc_id = validate_docid(doc_id)
        name = validate_attachment_name(name)
        snap, info, wanted = self._revision(doc_id, check_optional_rev(rev))
        return snap, _named(info, wanted, name)

    def attachment(self, docid: Any, name: Any, rev: Any = None) -> dict[str, Any]:
        """One attachment of the winning (or the given) revision, its bytes included;
        raises NotFound (SEMANTICS.md §18)."""
        snap, att = self._attachment(docid, name, rev)
        return attachment_answer(att, snap.attachment_data(att))

    def attachment_chunks(
        self, docid: Any, name: Any, rev: Any = None
    ) -> tuple[dict[str, Any], Iterator[bytes]]:
        """``attachment`` without ``data``, and the bytes as an iterator of chunks of
        at most 64 KiB, each read (and crc-checked) when it is asked for: an
        attachment is never in memory whole. NotFound as ``attachment``."""
        snap, att = self._attachment(docid, name, rev)
        meta = attachment_answer(att, b"")
        del meta["data"]
        # The generator holds the snapshot, which keeps its file open while it is
        # referenced, so a compaction that swaps the shard's file meanwhile does not
        # cut the stream (a test does exactly that); closing the database does.
        return meta, snap.attachment_chunks(att)

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
        """CouchDB's ``_all_docs``: rows in raw code-point id order (SEMANTICS.md §8)."""
        self._check_open()
        query = check_all_docs(
            startkey, endkey, keys, include_docs, limit, skip, descending, inclusive_end
        )
        snaps = self._snapshots()
        return views.all_docs(snaps, query)

    def changes(
        self, since: Any = 0, limit: Any = None, include_docs: Any = False
    ) -> dict[str, Any]:
        """Each changed document once, at its latest change (SEMANTICS.md §9)."""
        self._check_open()
        since = check_since(since)
        limit = check_count("limit", limit, optional=True)
        check_bool("include_docs", include_docs)
        snaps = self._snapshots()
        may_lag = bool(self.config["readonly"])  # behind its writer at times (§1)
        return views.changes(snaps, since, limit, include_docs, may_lag=may_lag)

    def revs_diff(self, revs: Any) -> dict[str, Any]:
        """Which of the given revisions this database lacks (SEMANTICS.md §10)."""
        self._check_open()
        checked = check_revs_diff(revs)
        out: dict[str, Any] = {}
        snaps = self._snapshots() if checked else []
        for doc_id, named in checked.items():
            info = snaps[shard_of(doc_id, len(snaps))].doc_info(doc_id)
            entry = views.revs_diff_entry(info.tree if info else None, named)
            if entry is not None:
                out[doc_id] = entry
        return out

    def info(self) -> dict[str, Any]:
        """Counts, the current update seq token and sizes."""
        self._check_open()
        snaps = self._snapshots()
        counts = [snap.counts() for snap in snaps]
        return {
            "doc_count": sum(c[0] for c in counts),
            "doc_del_count": sum(c[1] for c in counts),
            "update_seq": encode_token([snap.seq for snap in snaps]),
            "sizes": {
                "file": sum(snap.file.size() for snap in snaps),
                "active": sum(c[2] for c in counts),
            },
        }

    def _set_revs_limit(self, limit: int) -> None:
        """settee serve's ``PUT /{db}/_revs_limit``: writes and compactions from now on
        stem to ``limit``, while the requests using this handle go on (reopening it
        made them fail). Not stored: the server keeps it beside the database."""
        self._check_writable()
        self.config = validate_options(**{**self.config, "revs_limit": limit})
        for shard in self.shards:
            shard.set_revs_limit(limit)

    def compact(self) -> None:
        """Rewrite every shard file with only live data; readers and writers go on."""
        self._check_writable()
        for shard in self.shards:
            compact_shard(shard, revs_limit=self.config["revs_limit"])


def _named(info: DocInfo, rev: str, name: str) -> Stored:
    """Attachment ``name`` of revision ``rev``; NotFound when it has none by that name."""
    for att in info.attachments(rev) if rev in info.tree else []:
        if att.name == name:
            return att
    raise NotFound("missing")


def _why(exc: OSError) -> str:
    """``exc`` as a reason a person can act on: "File exists" meant that the path
    names a file, not a directory (found by the real-file fault hunt)."""
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return f"{exc}: the path (or a folder above it) is a file, not a database directory"
    return str(exc)

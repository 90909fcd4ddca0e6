"""One shard: its file, its published snapshot and its single writer thread.

Writes are requests on a queue. The writer thread drains whatever is queued
and group-commits it in the order CouchDB's ``couch_db_updater`` and
``couch_file:write_header`` use:

1. decide every edit against the latest state (so conflicts are decided by
   the writer, never by racing callers), append bodies and tree nodes in one
   write;
2. fsync, so the data a header points to is durable before the header;
3. append the header, fsync, so the commit is durable;
4. publish the new immutable snapshot, then acknowledge every caller.

Readers never wait for any of this: they read the published snapshot with
``pread``. In ``read_mode="serialized"`` one lock per shard wraps every file
operation and is held by the writer from step 1 to step 3, emulating the
single ``couch_file`` process CouchDB used before 3.5.
"""

from __future__ import annotations

import contextlib
import queue
import secrets
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from settee.btree import MAX_NODE_BYTES, NodeCache
from settee.cache import body_cache
from settee.cut import WriterCut
from settee.docinfo import (
    DocInfo,
    Working,
    apply_edit,
    apply_replicated,
    attachments_of,
    stored_size,
)
from settee.file import ShardFile
from settee.heads import HeadsFile, Slot
from settee.io import FileSystem, FileSystemWrapper
from settee.retired import RetiredHandles
from settee.snapshot import Snapshot
from settee.spec import revtree
from settee.spec.attachments import Inline, MissingStub, Stored, pieces
from settee.spec.docs import ValidDoc
from settee.spec.errors import Conflict, CorruptionError, NotFound, SetteeError
from settee.spec.format import ShardHeader, as_root, encode_payload
from settee.strict import require_consistent_commit

__all__ = ["STEPS", "Shard", "ShardIdentity", "check_identity", "shard_header"]

#: Group-commit bounds: one commit takes at most this many documents or body bytes,
#: so one huge burst cannot delay every acknowledgement behind it indefinitely.
MAX_COMMIT_DOCS = 2000
MAX_COMMIT_BYTES = 64 * 1024 * 1024

#: Every named step of a write, in order, reported to ``Shard.step_hook`` (when set)
#: on the thread that takes the step: crash tests name the step they crash at,
#: the interleaving scheduler pauses threads there. "admit" (before the caller
#: takes the submit lock) and "enqueue" (inside the queue's ``put``, wherever that
#: call sits) run on the caller's thread, the commit steps on the shard's writer,
#: the "compact_*" steps on the thread calling ``compact``.
STEPS = (
    "admit",
    "enqueue",
    "dequeue",
    "before_data_write",
    "before_data_fsync",
    "before_header_write",
    "before_header_fsync",
    "after_header_fsync",
    "publish",
    "compact_start",
    "compact_swap",
)


@dataclass(frozen=True, slots=True)
class ShardIdentity:
    """What every header of a shard file repeats, checked on open."""

    db_uuid: str
    index: int
    shards: int


def check_identity(
    file: ShardFile, expected: ShardIdentity, header: ShardHeader | None = None
) -> None:
    """SetteeError unless ``header`` (by default ``file``'s) belongs to the shard
    ``expected`` names."""
    header = file.header if header is None else header
    assert header is not None  # invariant: only called for a file that has a header
    found = (header.db, header.shard, header.shards)
    if found != (expected.db_uuid, expected.index, expected.shards):
        raise SetteeError(
            f"{file.path}: belongs to database {found[0]} shard {found[1]} of {found[2]}, "
            f"expected {expected.db_uuid} shard {expected.index} of {expected.shards}; "
            "shard files cannot be moved between databases"
        )


def shard_header(
    identity: ShardIdentity, by_id: Sequence[Any] | None, by_seq: Sequence[Any] | None, seq: int
) -> ShardHeader:
    """The header of a commit of ``identity``'s shard with these tree roots and seq;
    ``ShardFile.write_header`` fills in where its data starts and the previous header."""
    return ShardHeader(
        identity.db_uuid, identity.index, identity.shards, seq, as_root(by_id), as_root(by_seq)
    )


class SerializedFileSystem(FileSystemWrapper):
    """Routes every file operation of one shard through one lock (pre-3.5 CouchDB)."""

    def __init__(self, inner: FileSystem, lock: threading.RLock) -> None:
        super().__init__(inner)
        self.lock = lock

    def intercept(self, op: str, path: str, call: Callable[[], Any]) -> Any:
        with self.lock:
            return call()


@dataclass(slots=True)
class _Write:
    docs: list[ValidDoc]
    #: Each doc's body as stored (encoded by the caller's thread, not the writer's).
    encoded: list[bytes]
    new_edits: bool
    future: Future[list[Any]]
    #: A ``delete`` call: the writer answers NotFound for missing/deleted docs.
    deleting: bool = False
    #: A ``purge`` call (``docs`` empty): ``{id: [rev, ...]}``, answered with
    #: ``{id: [revs purged]}`` (``_Group.purge``).
    purge: dict[str, list[str]] | None = None

    @property
    def weight(self) -> int:
        return sum(map(len, self.encoded))


@dataclass(slots=True)
class _Call:
    """Run ``fn`` on the writer thread between commits (compaction's final swap)."""

    fn: Callable[[], Any]
    future: Future[Any]


_STOP = object()


class _Requests:
    """The writer's queue. ``put`` is the step "enqueue" itself, so a scheduler can
    pause a caller exactly where its request becomes the writer's, whichever
    lock does or does not surround the call."""

    def __init__(self, step: Callable[[str], None]) -> None:
        self._step = step
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, item: Any) -> None:
        if item is not _STOP:  # close() puts it holding the submit lock: nothing to interleave
            self._step("enqueue")
        self._items.put(item)

    def get(self) -> Any:
        return self._items.get()

    def get_nowait(self) -> Any:
        return self._items.get_nowait()


class _NothingWritten(Exception):
    """A commit failed before any of its bytes reached the file: the shard is unchanged."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class Shard:
    """A shard of a database. Thread-safe: any thread may read or submit writes."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        identity: ShardIdentity,
        *,
        fsync: bool,
        serialized: bool,
        revs_limit: int,
        cache_bytes: int,
        body_cache_bytes: int = 0,
        strict: bool = False,
        node_size: int = MAX_NODE_BYTES,
        cut: WriterCut | None = None,
    ) -> None:
        self.path = path
        #: Orders this shard's publications with the other shards' (settee.cut).
        self._cut = WriterCut() if cut is None else cut
        self.identity = identity
        #: Where readers in other processes learn of durable commits (settee.heads;
        #: see attach_heads), and the generation of the file at the path: random per
        #: open, +1 per swap.
        self._heads: HeadsFile | None = None
        self._generation = secrets.randbits(32)
        self._lock = threading.RLock()
        self.fs: FileSystem = SerializedFileSystem(fs, self._lock) if serialized else fs
        self._serialized = serialized
        self._fsync = fsync
        self._revs_limit = revs_limit
        self._cache_bytes = cache_bytes
        self._body_cache_bytes = body_cache_bytes
        #: Check what every commit changed, and fail the write on any inconsistency.
        self.strict = strict
        #: Largest encoded B+tree node this session writes (the ``node_size`` option).
        self.node_size = node_size
        self.step_hook: Callable[[str], None] | None = None
        self._retired = RetiredHandles()
        self.snapshot = self._open_snapshot(ShardFile.open(self.fs, path, create=False))
        self._queue = _Requests(self._step)
        self._submit_lock = threading.Lock()
        self.compaction_lock = threading.Lock()
        #: Ids purged whole while a compaction runs (None when none does); see
        #: start_purge_log.
        self._purged_whole: list[str] | None = None
        self._purge_lock = threading.Lock()
        self._closed = False
        self._failure: BaseException | None = None
        self._writer = threading.Thread(
            target=self._run, name=f"settee-writer-{identity.index}", daemon=True
        )
        self._writer.start()

    # -- opening ----------------------------------------------------------------------------

    def _open_snapshot(self, file: ShardFile) -> Snapshot:
        """The snapshot of ``file``'s newest header. The database's metadata says the
        shard exists, and creation made its first header durable before that, so a
        file without a valid header lost its contents: refuse it, never start over."""
        try:
            if file.header is None:
                raise CorruptionError(
                    file.path,
                    0,
                    f"no valid shard header in {file.size()} bytes (the file is empty, "
                    "truncated or overwritten); settee.meta says this shard exists, so its "
                    "documents are gone from this file: restore it from a backup",
                )
            self._check_identity(file)
            return self._snapshot_of(file)
        except BaseException:
            file.close()
            raise

    def _snapshot_of(self, file: ShardFile) -> Snapshot:
        header = file.header
        assert header is not None  # invariant: _open_snapshot gave every file a header
        cache = NodeCache(self._cache_bytes)
        file.body_cache = body_cache(self._body_cache_bytes)
        # The OS descriptor must outlive every snapshot that reads this file (a
        # compaction retires it while old readers still hold snapshots), so it is
        # closed after the last reference to the ShardFile goes (settee.retired), or
        # by close().
        self._close_file = self._retired.close_when_unused(file, file.handle)
        return Snapshot.of_header(file, header, cache, self.node_size)

    def _check_identity(self, file: ShardFile) -> None:
        check_identity(file, self.identity)

    def shard_header(
        self, by_id: Sequence[Any] | None, by_seq: Sequence[Any] | None, seq: int
    ) -> ShardHeader:
        """The header of a commit of this shard (FORMAT.md "Shard header payload")."""
        return shard_header(self.identity, by_id, by_seq, seq)

    def _write_header(self, file: ShardFile, by_id: Any, by_seq: Any, seq: int) -> None:
        file.write_header(self.shard_header(by_id, by_seq, seq))
        file.sync()

    # -- reading ------------------------------------------------------------------------------

    def current(self) -> Snapshot:
        """The snapshot to read. Never waits for the writer: in serialized mode the
        file operations themselves queue on the shard lock, as reads queued on
        the ``couch_file`` process before CouchDB 3.5. A plain call, not a context:
        a read holds nothing to release (the file counts its reads in flight)."""
        if self._closed:
            raise SetteeError("database is closed; open it again with settee.open(path)")
        return self.snapshot

    # -- writing ------------------------------------------------------------------------------

    def submit(
        self, docs: list[ValidDoc], *, new_edits: bool, deleting: bool = False
    ) -> Future[list[Any]]:
        """Queue an update; the future resolves, after the commit is durable, to one
        result per doc: the new rev, None (nothing new to store) or an exception."""
        future: Future[list[Any]] = Future()
        encoded = [doc.encoded or encode_payload(doc.body) for doc in docs]
        self._enqueue(_Write(docs, encoded, new_edits, future, deleting))
        return future

    def submit_purge(self, revs: dict[str, list[str]]) -> Future[dict[str, list[str]]]:
        """Queue a purge of these documents' leaf revisions; the future resolves, after
        the commit is durable, to ``{id: [revs purged]}`` (SEMANTICS.md §19)."""
        future: Future[Any] = Future()
        self._enqueue(_Write([], [], True, future, purge=revs))
        return future

    # -- purges while a compaction copies --------------------------------------------------

    def start_purge_log(self) -> None:
        """From now on note the ids each commit purges whole (compaction calls it before
        pinning its snapshot): a copy catches up on changes through by_seq, where a
        document purged whole leaves no row, so it would live on in the copy."""
        with self._purge_lock:
            self._purged_whole = []

    def take_purged(self) -> list[str]:
        """The ids purged whole by commits published since the last call (each after
        its commit was published: a snapshot read afterwards lacks them)."""
        with self._purge_lock:
            taken = list(self._purged_whole or ())
            if self._purged_whole is not None:
                self._purged_whole.clear()
        return taken

    def stop_purge_log(self) -> None:
        with self._purge_lock:
            self._purged_whole = None

    def _note_purged(self, ids: set[str]) -> None:
        with self._purge_lock:
            if self._purged_whole is not None:
                self._purged_whole.extend(sorted(ids))

    def set_revs_limit(self, limit: int) -> None:
        """Stem the writes committed from now on to ``limit`` (between two commits)."""
        self.call_in_writer(lambda: setattr(self, "_revs_limit", limit))

    def call_in_writer(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the writer thread, between commits, and return its result."""
        future: Future[Any] = Future()
        self._enqueue(_Call(fn, future))
        return future.result()

    def _enqueue(self, item: Any) -> None:
        # Admission and the put are one critical section: a request admitted before
        # close() must be in the queue before _STOP, or no writer would ever answer it.
        self._step("admit")
        # acquire() rather than ``with`` (here and in close): a waiting thread is then
        # in a C call the interleaving scheduler can see, not invisibly blocked.
        self._submit_lock.acquire()
        try:
            if self._closed:
                raise SetteeError("database is closed; open it again with settee.open(path)")
            if self._failure is not None:
                raise self._refusal()
            self._queue.put(item)
        finally:
            self._submit_lock.release()

    @property
    def failed(self) -> bool:
        """Whether the shard refuses writes until the database is reopened (an I/O
        error after bytes were written, a strict-mode finding, a stopped writer)."""
        return self._failure is not None

    def _refusal(self) -> SetteeError:
        error = SetteeError(
            f"{self.path}: an earlier write failed ({self._failure!r}); nothing after it was "
            "acknowledged; close and reopen the database to recover from the last durable commit"
        )
        error.__cause__ = self._failure  # what failed: a full disk, a failing device
        return error

    def close(self) -> None:
        """Finish every queued write, stop the writer, close the file. Idempotent."""
        self._submit_lock.acquire()
        try:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        finally:
            self._submit_lock.release()
        self._writer.join()
        # Mark the file closed before its descriptors go, so a snapshot still held
        # by a reader fails cleanly instead of reading a reused descriptor number.
        self.snapshot.file.refuse_reads()
        self._close_file()
        self._retired.owner_closed()

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        try:
            while not stopping:
                writes, control = self._take_group()
                self._retired.close_queued()  # between commits: no file system call under way
                if writes:
                    self._commit_group(writes)
                if control is _STOP:
                    stopping = True
                elif control is not None:
                    _run_call(control)
        finally:
            self._fail_queued()

    def _take_group(self) -> tuple[list[_Write], Any]:
        """Block for one request, then take what else is queued, up to a control
        request (which runs after the writes before it) or the commit bounds."""
        writes: list[_Write] = []
        docs = weight = 0
        item = self._queue.get()
        # The step right where the wait returns, before the rest of the group is
        # taken: a scheduler then decides what else is queued by then, not the race
        # between this thread, woken, and the thread that woke it.
        self._step("dequeue")
        while True:
            if not isinstance(item, _Write):
                return writes, item
            writes.append(item)
            docs += len(item.docs) or len(item.purge or ())
            weight += item.weight
            if docs >= MAX_COMMIT_DOCS or weight >= MAX_COMMIT_BYTES:
                return writes, None
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return writes, None

    def _fail_queued(self) -> None:
        """The writer is stopping: answer what is queued, and refuse what comes later."""
        self._submit_lock.acquire()
        try:
            if not self._closed and self._failure is None:
                # The writer died without close(): a request admitted now would wait forever.
                self._failure = SetteeError("the shard's writer thread stopped")
            closed = self._closed
        finally:
            self._submit_lock.release()
        if closed:
            error = SetteeError("database is closed; the write was not applied")
        else:
            error = self._refusal()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Write | _Call):
                item.future.set_exception(error)

    def _commit_group(self, writes: list[_Write]) -> None:
        try:
            self._commit_writes(writes)
        except BaseException as exc:
            # Not an error of one request (a crash, an interrupt): the writer stops, and
            # every caller it holds must hear of it, or they would wait forever.
            self._failure = exc
            error = _write_failed(self.path, exc)
            for w in writes:
                if not w.future.done():
                    w.future.set_exception(error)
            raise

    def _commit_writes(self, writes: list[_Write]) -> None:
        """Decide, commit and acknowledge ``writes``. A failure caused by one request
        (an edit the validation let through, a value that cannot be encoded) fails that
        request only; the shard refuses later writes only when the file itself may now
        be in an unknown state (a write or fsync failed, strict mode found damage)."""
        if self._failure is not None:
            # After a failed write or fsync the file's state is unknown (the page
            # cache cannot be trusted after an fsync error): commit nothing more.
            for w in writes:
                w.future.set_exception(self._refusal())
            return
        writes, results, group = self._decide(writes)
        if group.changed:
            try:
                before = self.snapshot
                start = before.file.size()
                after = self._commit(group)
                if self.strict:
                    require_consistent_commit(before, after, group.pending, start, group.removed)
                self._publish(after)
                self._cut.publish(self, after)
                if group.removed:
                    self._note_purged(group.removed)
                self._step("publish")
            except _NothingWritten as exc:
                self._retry_alone(writes, exc.cause)
                return
            except BaseException as exc:  # every caller must hear of it, or it would wait
                self._failure = exc
                error = exc if isinstance(exc, SetteeError) else _write_failed(self.path, exc)
                for w in writes:
                    w.future.set_exception(error)
                return
        for w, result in zip(writes, results, strict=True):
            w.future.set_result(result)

    def _decide(self, writes: list[_Write]) -> tuple[list[_Write], list[Any], _Group]:
        """Decide every edit of ``writes`` against the latest state. A request whose
        edits raise is failed alone and the group decided again without it."""
        while True:
            group = self._new_group()
            results: list[Any] = []  # per request: its docs' results, or a purge's answer
            for i, w in enumerate(writes):
                try:
                    if w.purge is not None:
                        results.append(group.purge(w.purge))
                    else:
                        results.append(group.apply(w.docs, w.encoded, w.new_edits, w.deleting))
                except Exception as exc:
                    w.future.set_exception(_write_refused(self.path, exc))
                    writes = writes[:i] + writes[i + 1 :]
                    break
            else:
                return writes, results, group

    def _new_group(self) -> _Group:
        """The group that decides a batch of requests against the latest state (a
        broken engine of the proof overrides it to decide another way)."""
        return _Group(self.snapshot, self._revs_limit)

    def _retry_alone(self, writes: list[_Write], cause: BaseException) -> None:
        """Nothing of a failed group reached the file: commit each request on its own,
        so the one that cannot be committed fails alone."""
        if len(writes) == 1:
            writes[0].future.set_exception(_write_refused(self.path, cause))
            return
        for w in writes:
            self._commit_writes([w])

    def _commit(self, group: _Group) -> Snapshot:
        snap = self.snapshot
        file = snap.file
        with self._lock if self._serialized else contextlib.nullcontext():
            batch = file.new_batch()
            try:
                by_id, by_seq = group.write_trees(batch)
            except OSError:
                # An early append of the batch (file.SPILL_BYTES) failed: where the
                # file ends is unknown, so this is a write failure like any other.
                raise
            except Exception as exc:
                # Nothing is committed: the shard is unchanged. Terms the batch had
                # appended early are whole frames no header refers to; the next
                # commit's data begins after them.
                raise _NothingWritten(exc) from exc
            self._step("before_data_write")
            file.write_batch(batch)
            if self._fsync:
                # The header must not reach disk before the data it points to.
                self._step("before_data_fsync")
                file.sync()
            self._step("before_header_write")
            file.write_header(self.shard_header(by_id.root, by_seq.root, group.seq))
            if self._fsync:
                self._step("before_header_fsync")
                file.sync()
            self._step("after_header_fsync")
        return Snapshot(file, by_id, by_seq, group.seq)

    def attach_heads(self, heads: HeadsFile) -> None:
        """Publish this shard's commits in ``heads`` from now on, starting with the
        current one. The database attaches it once every shard has opened: opening a
        damaged directory must change nothing in it."""
        self.call_in_writer(lambda: self._attach(heads))

    def _attach(self, heads: HeadsFile) -> None:
        self._heads = heads
        self._publish(self.snapshot)

    def _publish(self, snap: Snapshot) -> None:
        """Tell readers in other processes that ``snap``'s commit is durable: called
        after its header fsync, before this process's readers or writers see it."""
        offset = snap.file.header_offset
        if self._heads is not None and offset is not None:
            self._heads.publish(self.identity.index, Slot(self._generation, offset, snap.seq))

    def _step(self, name: str) -> None:
        if self.step_hook is not None:
            self.step_hook(name)

    # -- compaction support -------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """Refuse every later write until the database is reopened."""
        self._failure = exc

    def swap_file(self, file: ShardFile) -> None:
        """Make ``file`` (a finished compaction target already renamed over this
        shard's path) the shard's file. Runs on the writer thread."""
        self._cut.publish(self, self._snapshot_of(file))
        self._generation = (self._generation + 1) % (1 << 32)
        self._publish(self.snapshot)


class _Group:
    """The state of one group commit while the writer decides its edits."""

    def __init__(self, base: Snapshot, revs_limit: int) -> None:
        self.base = base
        self.revs_limit = revs_limit
        self.seq = base.seq
        self.pending: dict[str, DocInfo] = {}
        self.stale_seqs: list[int] = []
        self.bodies: dict[tuple[str, str], bytes] = {}
        #: Ids whose every leaf a purge of this group removed: gone from by_id.
        self.removed: set[str] = set()

    @property
    def changed(self) -> bool:
        return bool(self.pending or self.removed)

    def apply(
        self, docs: list[ValidDoc], encoded: list[bytes], new_edits: bool, deleting: bool
    ) -> list[Any]:
        """Apply one call's edits; each is judged against the state before the call too."""
        if not new_edits:
            return self._replicate(docs, encoded)
        before: dict[str, DocInfo | None] = {}
        return [self._apply_one(d, e, before, deleting) for d, e in zip(docs, encoded, strict=True)]

    def _current(self, doc_id: str) -> DocInfo | None:
        if doc_id in self.pending:
            return self.pending[doc_id]
        if doc_id in self.removed:
            return None
        return self.base.doc_info(doc_id)

    def purge(self, revs: dict[str, list[str]]) -> dict[str, list[str]]:
        """Remove the named leaf revisions (``revtree.purge``): a document left with no
        leaf is gone, one left with some gets a new seq, as an edit would (CouchDB's
        couch_db_updater:apply_purge_reqs). ``{id: [revs purged]}``."""
        answer: dict[str, list[str]] = {}
        for doc_id, asked in revs.items():
            info = self._current(doc_id)
            tree, purged = revtree.purge(info.tree, asked) if info is not None else ({}, [])
            answer[doc_id] = purged
            if info is None or not purged:
                continue
            if doc_id not in self.pending:
                self.stale_seqs.append(info.seq)  # its by_seq row goes, as an edit's does
            if tree:
                self.seq += 1
                bodies = {r: p for r, p in info.bodies.items() if r in tree}
                self.pending[doc_id] = _info_of(doc_id, tree, bodies, self.seq)
            else:
                self.pending.pop(doc_id, None)
                self.removed.add(doc_id)
        if self.removed and self.seq == self.base.seq:
            # Every commit has a seq of its own (readonly handles and HEADS tell commits
            # apart by it), so a purge that only removed documents still moves it, as
            # couch_bt_engine:purge_docs bumps update_seq "so indexers see" the purge.
            self.seq += 1
        return answer

    def _apply_one(
        self,
        doc: ValidDoc,
        encoded: bytes,
        before: dict[str, DocInfo | None],
        deleting: bool,
    ) -> Any:
        """One interactive edit of a call (a replicated call is ``_replicate``'s)."""
        try:
            info = self._current(doc.id)
            first = before.setdefault(doc.id, info)
            edit = apply_edit(
                info,
                doc,
                revs_limit=self.revs_limit,
                before=first,
                deleting=deleting,
                encoded=encoded,
            )
        except (Conflict, NotFound, CorruptionError, MissingStub) as exc:
            return exc
        if info is not None and doc.id not in self.pending:
            self.stale_seqs.append(info.seq)  # by_seq keeps one row per doc: its latest
        self.removed.discard(doc.id)  # purged whole earlier in this group, written anew
        self.seq += 1
        self.bodies[(doc.id, edit.rev)] = encoded
        self.pending[doc.id] = _next_info(
            doc.id, info, edit.tree, edit.rev, self.seq, len(encoded), edit.attachments
        )
        return edit.rev

    def _replicate(self, docs: list[ValidDoc], encoded: list[bytes]) -> list[Any]:
        """A replicated call (``new_edits=False``): its edits in order, as
        ``_apply_one`` makes them, but each document's tree and bodies edited in place
        (``docinfo.Working``) and its DocInfo made once, after the call's last edit."""
        working: dict[str, Working] = {}
        results = [
            self._replicate_one(doc, e, working) for doc, e in zip(docs, encoded, strict=True)
        ]
        for doc_id, work in working.items():
            if work.seq is not None:
                self.pending[doc_id] = _info_of(doc_id, work.tree, work.bodies, work.seq)
        return results

    def _replicate_one(self, doc: ValidDoc, encoded: bytes, working: dict[str, Working]) -> Any:
        try:
            work = working.get(doc.id)
            if work is None:
                info = self._current(doc.id)
                work = working[doc.id] = Working.of(info, stale=doc.id not in self.pending)
            rev, atts = apply_replicated(work, doc, revs_limit=self.revs_limit)
        except (Conflict, NotFound, CorruptionError, MissingStub) as exc:
            return exc
        if rev is None:
            return None
        if work.seq is None and work.stale_seq is not None:
            self.stale_seqs.append(work.stale_seq)  # by_seq keeps one row per doc: its latest
        self.removed.discard(doc.id)  # purged whole earlier in this group, written anew
        self.seq += 1
        work.seq = self.seq
        self.bodies[(doc.id, rev)] = encoded
        work.bodies[rev] = [None, len(encoded), atts] if atts else [None, len(encoded)]
        return rev

    def write_trees(self, batch: Any) -> tuple[Any, Any]:
        """Append bodies, then the rewritten tree paths; return the new trees."""
        infos = []
        chunks = _ChunkWriter(batch)
        for doc_id in sorted(self.pending):
            info = self.pending[doc_id]
            bodies = dict(info.bodies)
            for rev, placeholder in info.bodies.items():
                if placeholder[0] is None:
                    pos = batch.add_encoded(self.bodies[(doc_id, rev)])
                    bodies[rev] = [pos, placeholder[1], *chunks.records(placeholder)]
            infos.append(
                DocInfo(doc_id, info.seq, info.deleted, info.tree, bodies, info.active, info.winner)
            )
        by_id = self.base.by_id.modify(
            batch, [(i.id, i.to_value()) for i in infos], sorted(self.removed)
        )
        seq_rows = [(i.seq, i.by_seq_row()) for i in infos]
        by_seq = self.base.by_seq.modify(batch, seq_rows, self.stale_seqs)
        return by_id, by_seq


def _next_info(
    doc_id: str,
    old: DocInfo | None,
    tree: dict[str, list[Any]],
    rev: str,
    seq: int,
    size: int,
    attachments: list[Stored | Inline],
) -> DocInfo:
    """The DocInfo after an edit; the new body's position is filled in at write time
    (a ``None`` placeholder, with the attachments still as objects), bodies of
    revisions that stemming dropped are forgotten."""
    bodies = {r: p for r, p in (old.bodies if old else {}).items() if r in tree}
    bodies[rev] = [None, size, attachments] if attachments else [None, size]
    return _info_of(doc_id, tree, bodies, seq)


def _info_of(
    doc_id: str, tree: dict[str, list[Any]], bodies: dict[str, list[Any]], seq: int
) -> DocInfo:
    """The DocInfo of ``tree`` with these stored ``bodies`` at ``seq``: its winner,
    and its active size (the bodies of its leaves)."""
    if len(tree) == 1:
        # A document's first revision (every insert): its own winner and only leaf.
        ((winner, (_, deleted)),) = tree.items()
        entry = bodies.get(winner)
        active = 0 if entry is None else stored_size(entry)
        return DocInfo(doc_id, seq, deleted, tree, bodies, active, winner)
    winner = revtree.winner(tree)
    leaves = set(revtree.leaves(tree))
    active = sum(stored_size(p) for r, p in bodies.items() if r in leaves)
    return DocInfo(doc_id, seq, tree[winner][1], tree, bodies, active, winner)


class _ChunkWriter:
    """Appends new attachment bytes as chunk terms once per commit, however many
    revisions of the commit carry them (a stub of a revision of the same commit
    shares its chunks), and turns placeholders into stored records."""

    def __init__(self, batch: Any) -> None:
        self._batch = batch
        self._written: dict[int, list[list[int]]] = {}

    def records(self, placeholder: list[Any]) -> list[list[list[Any]]]:
        """``[records]`` for a placeholder with attachments, ``[]`` without."""
        if len(placeholder) < 3:
            return []
        return [[self._record(att) for att in attachments_of(placeholder)]]

    def _record(self, att: Stored) -> list[Any]:
        where = att.where
        if isinstance(where, Inline):
            where = self._chunks(where)
        return [att.name, att.content_type, att.length, att.digest, att.revpos, where]

    def _chunks(self, att: Inline) -> list[list[int]]:
        key = id(att)
        if key not in self._written:
            # One piece in memory at a time: the batch spills to the file as it grows.
            written = []
            for piece in pieces(att.data):
                payload = encode_payload(piece)
                written.append([self._batch.add_encoded(payload), len(payload)])
            self._written[key] = written
        return self._written[key]


def _write_failed(path: str, exc: BaseException) -> SetteeError:
    error = SetteeError(
        f"{path}: write failed ({exc!r}); it was not acknowledged and the shard refuses "
        "further writes until the database is reopened"
    )
    error.__cause__ = exc
    return error


def _write_refused(path: str, exc: BaseException) -> SetteeError:
    if isinstance(exc, CorruptionError):
        # Damage the write had to read (a tree node) is still damage: a CorruptionError
        # naming the bytes, which serve answers 410 (a plain SetteeError was a 500).
        error: SetteeError = CorruptionError(
            exc.path,
            exc.offset,
            f"{exc.detail}; this write needed those bytes and was not stored (the shard "
            "goes on accepting other writes): restore the file from a backup",
        )
    else:
        error = SetteeError(
            f"{path}: the writer could not apply this write ({exc!r}); nothing of it was "
            "stored and the shard goes on accepting other writes"
        )
    error.__cause__ = exc
    return error


def _run_call(call: _Call) -> None:
    try:
        call.future.set_result(call.fn())
    except BaseException as exc:
        call.future.set_exception(exc)

"""An immutable, committed view of one shard: MVCC for readers.

The writer publishes a new ``Snapshot`` after every durable commit by
assigning one attribute; a reader takes that reference once and performs its
whole read on it, with ``pread`` on a descriptor nobody locks. Because shard
files are append-only and nodes are never rewritten, every position a
snapshot names stays valid for as long as its file is open, whatever the
writer does meanwhile. This is the property CouchDB 3.5's parallel preads
rest on.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from settee.btree import MAX_NODE_BYTES, BTree, NodeCache, Tally
from settee.docinfo import (
    ACTIVE,
    DELETED,
    WINNER,
    WINNER_BODY,
    DocInfo,
    Summary,
    attachments_of,
    body_pointers,
    require_well_formed,
    summaries,
)
from settee.file import ShardFile
from settee.spec.attachments import Stored, render
from settee.spec.docs import render_doc
from settee.spec.errors import CorruptionError
from settee.spec.format import ShardHeader

__all__ = ["DELETED_DOCS", "LIVE_DOCS", "Snapshot", "by_id_tree", "by_seq_tree"]

# by_id reduction: [live docs, deleted docs, active body bytes] (FORMAT.md "Reductions").
LIVE_DOCS = 0
DELETED_DOCS = 1


def _reduce_by_id(kvs: Sequence[Sequence[Any]]) -> tuple[int, int, int]:
    values = [kv[1] for kv in kvs]
    deleted = sum(1 for v in values if v[DELETED])
    return (len(values) - deleted, deleted, sum(v[ACTIVE] for v in values))


def _rereduce_by_id(reds: Sequence[Sequence[int]]) -> tuple[int, int, int]:
    if not reds:
        return (0, 0, 0)
    live, deleted, active = zip(*reds, strict=True)
    return (sum(live), sum(deleted), sum(active))


def _difference_by_id(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int]:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2])


def _live_docs(reduction: Sequence[int]) -> int:
    return reduction[LIVE_DOCS]


def _live_in_leaf(entries: Sequence[Sequence[Any]], before: int, reduction: Sequence[int]) -> int:
    if reduction[DELETED_DOCS] == 0:  # the stored reduction says: no tombstones here
        return before
    return sum([1 for _, v in entries[:before] if not v[DELETED]])


def _rows(reduction: int) -> int:
    return reduction  # a by_seq reduction is its row count


def _rows_in_leaf(entries: Sequence[Sequence[Any]], before: int, reduction: int) -> int:
    return before


def _reduce_by_seq(kvs: list[list[Any]]) -> int:
    return len(kvs)


def _rereduce_by_seq(reds: list[int]) -> int:
    return sum(reds)


def by_id_tree(
    file: ShardFile,
    root: Any,
    cache: NodeCache,
    node_bytes: int = MAX_NODE_BYTES,
    *,
    checked: bool = True,
) -> BTree:
    """The ``by_id`` tree (doc id -> DocInfo value) rooted at ``root``. Every leaf it
    reads from the file has its values checked (``docinfo.require_well_formed``):
    readers index them unchecked. ``checked=False`` reads them as they are, for
    ``settee check``, which reports each malformed value by its document."""
    return BTree(
        file,
        root,
        reduce=_reduce_by_id,
        rereduce=_rereduce_by_id,
        difference=_difference_by_id,
        cache=cache,
        node_bytes=node_bytes,
        check_leaf=require_well_formed if checked else None,
        key_type=str,
    )


def by_seq_tree(
    file: ShardFile, root: Any, cache: NodeCache, node_bytes: int = MAX_NODE_BYTES
) -> BTree:
    """The ``by_seq`` tree (seq -> [doc id, winning rev, deleted]) rooted at ``root``."""
    return BTree(
        file,
        root,
        reduce=_reduce_by_seq,
        rereduce=_rereduce_by_seq,
        difference=operator.sub,
        cache=cache,
        node_bytes=node_bytes,
        key_type=int,
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One committed state of a shard; never changes after publication."""

    file: ShardFile
    by_id: BTree
    by_seq: BTree
    seq: int

    @classmethod
    def of_header(
        cls, file: ShardFile, header: ShardHeader, cache: NodeCache, node_bytes: int
    ) -> Snapshot:
        """The snapshot ``header`` (a commit of ``file``) describes, its trees' nodes
        cached in ``cache``. Each root must hold its own tree's keys: a header read
        from the file is checked here, once, rather than on every cached node read."""
        snapshot = cls(
            file,
            by_id_tree(file, header.by_id, cache, node_bytes),
            by_seq_tree(file, header.by_seq, cache, node_bytes),
            header.seq,
        )
        snapshot.by_id.check_root_keys()
        snapshot.by_seq.check_root_keys()
        return snapshot

    # -- documents ------------------------------------------------------------

    def doc_info(self, doc_id: str) -> DocInfo | None:
        value = self.by_id.get(doc_id)
        return None if value is None else DocInfo.from_value(doc_id, value)

    def live_winner_doc(self, doc_id: str) -> dict[str, Any] | None:
        """The winning revision of a live document whose body is stored, as a plain
        ``Database.get`` answers it, from its by_id value's clear fields (no
        ``DocInfo``, no revision blob); None for anything else (missing, deleted,
        no body stored), which the general path answers."""
        value = self.by_id.get(doc_id)
        if value is None:
            return None
        # The by_id tree checked the value's fields when it read its leaf.
        entry = value[WINNER_BODY]
        if value[DELETED] or entry is None:
            return None
        return self.winner_doc((doc_id, value[WINNER], False, entry))

    def doc_infos(self, doc_ids: list[str]) -> dict[str, DocInfo]:
        """DocInfos of the ids that exist (``BTree.get_many``)."""
        values = self.by_id.get_many(doc_ids)
        return {
            doc_id: DocInfo.from_value(doc_id, value)
            for doc_id, value in zip(doc_ids, values, strict=True)
            if value is not None
        }

    def body(self, info: DocInfo, rev: str) -> dict[str, Any] | None:
        """The stored body of ``rev``, or None when it is not stored."""
        pointer = info.bodies.get(rev)
        if pointer is None:
            return None
        return self._as_body(pointer[0], self.file.read_term(pointer[0], pointer[1]))

    def _as_body(self, pos: int, term: Any) -> dict[str, Any]:
        """``term``, read at ``pos`` as a document body; CorruptionError unless a map."""
        if not isinstance(term, dict):
            raise CorruptionError(self.file.path, pos, "document body is not a map")
        return term

    def winner_doc(self, summary: Summary) -> dict[str, Any]:
        """``fill_docs`` for one document (a plain ``Database.get``): its one body
        through ``ShardFile.read_body``, whose inline cache hit skips the lists a
        batch read builds (they were a tenth of a get)."""
        entry = summary[3]
        body = None if entry is None else self.file.read_body(entry[0], entry[1])
        row: dict[str, Any] = {}
        self._fill_doc(row, summary, body)
        return row["doc"]  # type: ignore[no-any-return]

    def fill_docs(self, rows: Sequence[dict[str, Any]], summaries: Sequence[Summary]) -> None:
        """Set each row's ``doc`` to the winning revision its summary names, as
        ``_all_docs`` rows and a plain ``Database.get`` render it: its body (empty
        when not stored) and attachment stubs. Everything comes from the by_id
        value's clear fields (their types checked when the by_id tree read their
        leaf, ``docinfo.require_well_formed``), trusted as
        FORMAT.md "by_id" says (``settee check`` and strict mode recompute them);
        the revision blob is not decoded. The bodies are read in one ``read_sized``
        call."""
        try:  # every body cached: by position alone, as ``entry_docs``
            read = self.file.cached_bodies([e[0] for _, _, _, e in summaries])
        except TypeError:  # a body not stored
            read = None
        if read is None:
            pointers = [(e[0], e[1]) for _, _, _, e in summaries if e is not None]
            read = self.file.read_sized(pointers)
        if len(read) == len(rows):  # every row has a body: no row to skip in the loop
            every = zip(rows, summaries, read, strict=True)
            for row, (doc_id, winner, deleted, entry), body in every:
                if not deleted and type(body) is dict and len(entry) == 2:
                    # render_doc's answer for a live document without attachments, inline.
                    row["doc"] = {"_id": doc_id, "_rev": winner, **body}
                else:
                    self._fill_doc(row, (doc_id, winner, deleted, entry), body)
            return
        bodies = iter(read)
        for row, summary in zip(rows, summaries, strict=True):
            self._fill_doc(row, summary, None if summary[3] is None else next(bodies))

    def entry_docs(
        self, entries: Sequence[tuple[str, Sequence[Any]]], docs: dict[str, Any]
    ) -> None:
        """Set ``docs[id]`` to the winning document of each ``(id, stored by_id value)``
        entry (a range's rows), as ``fill_docs`` renders them, without a summary per
        row: one pass reads the bodies (from the body cache by position, else by
        ``body_pointers``), one renders. The summaries' loop and tuples were a tenth
        of a range with docs, and their tuples work for the cyclic collector."""
        # A checked leaf's winner bodies are [int pos, int size, ...]: a range whose
        # bodies are all cached reads them by position alone (one list, not a
        # helper's second one: this is every range with docs).
        try:
            read = self.file.cached_bodies([v[WINNER_BODY][0] for _, v in entries])
        except TypeError:  # a body not stored: only a value this process wrote can be so
            read = None
        if read is None:
            pointers = body_pointers(entries)
            if None in pointers:  # a row without a stored body: the general path
                rows: list[dict[str, Any]] = [{} for _ in entries]
                self.fill_docs(rows, summaries(entries))
                docs.update((k, row["doc"]) for (k, _), row in zip(entries, rows, strict=True))
                return
            read = self.file.read_sized(pointers)  # type: ignore[arg-type]  # no None: checked
        for (doc_id, value), body in zip(entries, read, strict=True):
            entry = value[WINNER_BODY]
            if not value[DELETED] and type(body) is dict and len(entry) == 2:
                # render_doc's answer for a live document without attachments, inline.
                docs[doc_id] = {"_id": doc_id, "_rev": value[WINNER], **body}
            else:
                row: dict[str, Any] = {}
                self._fill_doc(row, (doc_id, value[WINNER], value[DELETED], entry), body)
                docs[doc_id] = row["doc"]

    def _fill_doc(self, row: dict[str, Any], summary: Summary, body: Any) -> None:
        """``fill_docs`` for one row whose body (None when not stored) was read."""
        doc_id, winner, deleted, entry = summary
        if entry is None:
            row["doc"] = render_doc(doc_id, winner, deleted, {})
            return
        if type(body) is not dict:
            raise CorruptionError(self.file.path, entry[0], "document body is not a map")
        if not deleted and len(entry) == 2:
            # render_doc's answer for a live document without attachments, inline:
            # the call was a tenth of this loop.
            row["doc"] = {"_id": doc_id, "_rev": winner, **body}
            return
        stubs = None
        if len(entry) > 2:  # FORMAT.md "by_id": a third field lists attachments
            stubs = {att.name: render(att, None) for att in attachments_of(entry)} or None
        row["doc"] = render_doc(doc_id, winner, deleted, body, attachments=stubs)

    def read_chunk(self, att: Stored, index: int) -> bytes:
        """Chunk ``index`` of a stored attachment, its crc checked."""
        pos, size = att.where[index]
        chunk = self.file.read_term(pos, size)
        if not isinstance(chunk, bytes):
            raise CorruptionError(self.file.path, pos, "attachment chunk is not bytes")
        return chunk

    def attachment_chunks(self, att: Stored) -> Iterator[bytes]:
        """The chunks of a stored attachment, each read (crc checked) when asked
        for; after the last, the total is checked against the record's length."""
        read = 0
        for index in range(len(att.where)):
            chunk = self.read_chunk(att, index)
            read += len(chunk)
            yield chunk
        if read != att.length:
            where = att.where[0][0] if att.where else 0
            raise CorruptionError(
                self.file.path,
                where,
                f"attachment {att.name!r} holds {read} bytes, its record says {att.length}",
            )

    def attachment_data(self, att: Stored) -> bytes:
        """All the bytes of a stored attachment (``attachment_chunks`` joined)."""
        return b"".join(list(self.attachment_chunks(att)))

    def rendered_attachments(
        self, info: DocInfo, rev: str, data_above: int | None = None
    ) -> dict[str, Any] | None:
        """``_attachments`` of a read: stubs, or (``data_above`` not None) the data of
        those whose revpos is above it; None when the revision holds none."""
        found = info.attachments(rev)
        if not found:
            return None
        return {
            att.name: render(
                att,
                self.attachment_data(att)
                if data_above is not None and att.revpos > data_above
                else None,
            )
            for att in found
        }

    # -- ranges -----------------------------------------------------------------

    def fold_docs(
        self, start: str | None, end: str | None, *, descending: bool, inclusive_end: bool
    ) -> Iterator[DocInfo]:
        """DocInfos in id order (CouchDB's range convention), tombstones included."""
        for key, value in self.by_id.fold(
            start, end, descending=descending, inclusive_end=inclusive_end
        ):
            yield DocInfo.from_value(key, value)

    def live_tally(self) -> Tally:
        """A ``Tally`` for ``by_id.fold_chunks``: after its first chunk, what
        ``live_before`` of the fold's start answers, counted on the fold's own way
        down (a fold that raised TypeError, IndexError or KeyError met a malformed
        reduction: ``malformed_reduction``)."""
        return Tally(_live_docs, _live_in_leaf)

    def live_before(self, key: str, *, descending: bool) -> int:
        """Live documents that sort before ``key`` in fold order: the offset
        contribution of this shard, in O(log n) from stored reductions
        (``BTree.count_before``); every range read pays this."""
        try:
            live = self.by_id.count_before(
                key, inclusive=descending, count=_live_docs, count_leaf=_live_in_leaf
            )
        except (TypeError, IndexError, KeyError):  # crc held: a writer bug
            raise self.malformed_reduction("by_id") from None
        return self.counts()[LIVE_DOCS] - live if descending else live

    def counts(self) -> list[int]:
        """[live docs, deleted docs, active body bytes]."""
        red = self.by_id.full_reduce()
        if red is None:
            return [0, 0, 0]
        if not isinstance(red, tuple | list) or len(red) != 3:
            raise self.malformed_reduction("by_id")
        return list(red)

    def malformed_reduction(self, tree: str) -> CorruptionError:
        return CorruptionError(self.file.path, 0, f"a {tree} reduction is malformed")

    def changes_after(self, since: int) -> int:
        """How many documents changed after ``since`` (by_seq rows past it), in
        O(log n) from stored reductions: ``_changes``'s ``pending``."""
        try:
            before = self.by_seq.count_before(
                since, inclusive=True, count=_rows, count_leaf=_rows_in_leaf
            )
            return (self.by_seq.full_reduce() or 0) - before  # type: ignore[no-any-return]
        except TypeError:  # crc held: a writer bug
            raise self.malformed_reduction("by_seq") from None

    def changes(self, since: int) -> Iterator[tuple[int, str, str, bool]]:
        """``(seq, id, winning rev, deleted)`` for every doc changed after ``since``."""
        for seq, (doc_id, rev, deleted) in self.by_seq.fold(since + 1, None):
            yield seq, doc_id, rev, deleted

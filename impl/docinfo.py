"""A document's stored summary and the edit rules the shard writer applies.

A ``DocInfo`` is the value of a document in a shard's ``by_id`` tree (CouchDB's
``#full_doc_info{}``): the revision tree, where each revision's body lives in
the file, the document's latest update seq and whether its winner is a
tombstone. Applying an edit is pure: it takes the current ``DocInfo`` (or
``None``) and a validated document and returns the new ``DocInfo`` or raises
``Conflict``. The writer then stores the body and commits; readers only decode.

This module is deliberately independent of ``settee.reference``: the proof
compares two implementations of the same rules, so they must not share code
beyond the pure spec functions (revision ids, tree merge, winner, stemming).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from settee.spec import revtree
from settee.spec.attachments import Inline, Stored, digest_of, length_of, resolve, rev_digests
from settee.spec.docs import ValidDoc
from settee.spec.errors import Conflict, CorruptionError, NotFound
from settee.spec.format import decode_payload, encode_payload
from settee.spec.revs import new_rev_encoded, rev_pos

__all__ = [
    "ACTIVE",
    "DELETED",
    "WINNER",
    "WINNER_BODY",
    "DocInfo",
    "Edit",
    "Summary",
    "apply_edit",
    "attachments_of",
    "first_malformed",
    "require_well_formed",
    "stored_size",
    "summaries",
    "well_formed_value",
]

# Fields of a stored by_id value (FORMAT.md "by_id"): seq, deleted, winner, active,
# the revisions blob, the winner's bodies entry. Readers that need no revision
# tree index the value directly.
_SEQ, DELETED, WINNER, ACTIVE, _REVS, WINNER_BODY = range(6)

#: What a read of a winning document needs from its by_id value: (id, winner,
#: deleted, the winner's bodies entry or None).
Summary = tuple[str, str, bool, Any]


def well_formed_value(value: Any) -> bool:
    """Whether a stored by_id value has FORMAT.md's six fields, each of its type."""
    return first_malformed(((None, value),)) < 0


def first_malformed(entries: Sequence[tuple[Any, Any]]) -> int:
    """The index of the first ``(key, stored by_id value)`` whose value is not
    ``well_formed_value``, or -1.

    The by_id tree checks every leaf it reads from the file with this
    (``BTree(check_leaf=require_well_formed)``), once per read of the leaf (about 5 µs for a
    4 KiB leaf, which costs 13 µs to read and decode); a leaf holding a
    malformed value is CorruptionError for every read that needs the leaf, as
    a leaf whose crc fails is (a malformed value behind a good crc is a writer
    bug). Readers then index the fields without checking them again: checked
    on every read, they were 8% of a cached 100-key multiget's instructions
    and 5% of a 100-row range with docs. Values a leaf holds because this
    process's writer put them there are its own ``DocInfo.to_value()``s, of
    this shape.
    """
    for index, (_, value) in enumerate(entries):
        if (type(value) is not tuple and type(value) is not list) or len(value) != 6:
            return index  # not an array of six (msgpack decodes arrays as either)
        seq, deleted, winner, active, revs, entry = value
        if not (
            type(seq) is int
            and type(deleted) is bool
            and type(winner) is str
            and type(active) is int
            and type(revs) is bytes
            # [pos, size(, attachments)]: every leaf keeps its body (strict mode and
            # settee check hold writers to it), so the winner's is stored; a nil one
            # sent get through the revision blob and a range to an empty document.
            and type(entry) is tuple
            and 2 <= len(entry) <= 3
            # Its position and size, which reads use as a cache key and a length.
            and type(entry[0]) is int
            and type(entry[1]) is int
        ):
            return index
    return -1


def require_well_formed(
    entries: Sequence[tuple[str, Any]], path: str = "<by_id value>", pos: int = 0
) -> None:
    """CorruptionError naming the first ``(id, stored by_id value)`` whose value is
    not ``well_formed_value``, at ``path`` and ``pos`` when the leaf's are known."""
    index = first_malformed(entries)
    if index >= 0:
        raise malformed_value(*entries[index], path, pos)


def summaries(entries: Sequence[tuple[str, Sequence[Any]]]) -> list[Summary]:
    """The ``Summary`` of each ``(id, stored by_id value)``, values as the by_id tree
    reads them (``well_formed_value``). One call per batch: a call per row was
    a tenth of a range read."""
    return [(doc_id, v[WINNER], v[DELETED], v[WINNER_BODY]) for doc_id, v in entries]


def body_pointers(entries: Sequence[tuple[str, Sequence[Any]]]) -> list[tuple[int, int] | None]:
    """The winner's body pointer ``(pos, size)`` of each ``(id, stored by_id value)``,
    None where no body is stored; values as the by_id tree reads them
    (``well_formed_value``)."""
    return [None if (e := v[WINNER_BODY]) is None else (e[0], e[1]) for _, v in entries]


def summary_fields(doc_id: str, value: Sequence[Any]) -> tuple[Any, ...]:
    """The six fields of a stored by_id value; CorruptionError unless
    ``well_formed_value``."""
    if not well_formed_value(value):
        raise malformed_value(doc_id, value)
    return tuple(value)


def malformed_value(
    doc_id: str, value: Any, path: str = "<by_id value>", pos: int = 0
) -> CorruptionError:
    """The error for a by_id value whose fields are not what FORMAT.md says; a value
    alone does not know its file (the node that held it passed its crc check)."""
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return CorruptionError(path, pos, f"by_id value of {doc_id!r} is malformed: {shown}")


class DocInfo:
    """Everything ``by_id`` keeps about one document.

    ``tree`` maps rev -> [parent rev or None, deleted]; ``bodies`` maps rev ->
    ``[file position of its body term, encoded size]`` (only revisions whose body
    is stored: ancestors received through ``new_edits=False`` and non-leaf
    revisions after compaction have none);
    ``active`` is the encoded size of the leaf bodies, summed into
    ``info()["sizes"]["active"]``; ``winner`` is the winning revision.

    Stored flat (FORMAT.md "by_id"): ``seq, deleted, winner, active`` in the
    clear, the tree and bodies as one msgpack blob, decoded only when read, and
    the winner's ``bodies`` entry in the clear again (``winner_body``). A range
    row needs no more than the clear fields, a read of the winning document
    no more than those and its body's frame, and a decoded leaf holds
    only atoms and bytes, which the cyclic collector stops tracking, so a large
    node cache costs a full collection nothing (a map per document cost ~0.2 s).

    Read-only by convention, not enforced: every read builds one per row, and a
    frozen dataclass's ``__init__`` (``object.__setattr__`` per field) cost more
    than the rest of a range row. Nothing assigns to an info after building it.
    """

    __slots__ = (
        "_bodies",
        "_revs",
        "_tree",
        "_winner_body",
        "active",
        "deleted",
        "id",
        "seq",
        "winner",
    )

    def __init__(
        self,
        id: str,
        seq: int,
        deleted: bool,
        tree: dict[str, list[Any]],
        bodies: dict[str, list[int]],
        active: int,
        winner: str | None = None,
    ) -> None:
        """``winner``: the tree's winning revision when the caller already knows it."""
        self.id = id
        self.seq = seq
        self.deleted = deleted
        self._tree: dict[str, list[Any]] | None = tree
        self._bodies: dict[str, list[int]] | None = bodies
        self.active = active
        if winner is None:
            winner = next(iter(tree)) if len(tree) == 1 else revtree.winner(tree)
        self.winner = winner
        self._revs: bytes | None = None
        self._winner_body: Any = bodies.get(winner)

    def __repr__(self) -> str:
        return f"DocInfo({self.id!r}, seq={self.seq}, deleted={self.deleted}, tree={self.tree!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DocInfo):
            return NotImplemented
        return (
            self.id,
            self.seq,
            self.deleted,
            self.winner,
            self.active,
            self.tree,
            self.bodies,
            _frozen(self.winner_body),
        ) == (
            other.id,
            other.seq,
            other.deleted,
            other.winner,
            other.active,
            other.tree,
            other.bodies,
            _frozen(other.winner_body),
        )

    __hash__ = None  # type: ignore[assignment]  # mutable members: not hashable

    @property
    def tree(self) -> dict[str, list[Any]]:
        if self._tree is None:
            self._unpack_revs()
        return self._tree  # type: ignore[return-value]  # set by _unpack_revs

    @property
    def bodies(self) -> dict[str, list[int]]:
        if self._bodies is None:
            self._unpack_revs()
        return self._bodies  # type: ignore[return-value]  # set by _unpack_revs

    def attachments(self, rev: str) -> list[Stored]:
        """The attachments revision ``rev`` holds (none when its body is not kept)."""
        entry = self.bodies.get(rev)
        return [] if entry is None else attachments_of(entry)

    @property
    def winner_body(self) -> Sequence[Any] | None:
        """The winner's ``bodies`` entry (None when its body is not stored), as the
        by_id value keeps it in the clear: trusted on read like ``winner`` and
        ``deleted``, recomputed by ``problems``."""
        return self._winner_body  # type: ignore[no-any-return]

    def _unpack_revs(self) -> None:
        self._tree, self._bodies = self._decode_revs()

    def _decode_revs(self) -> tuple[dict[str, list[Any]], dict[str, list[int]]]:
        assert self._revs is not None  # an info is built with a tree or a blob
        try:
            tree, bodies = decode_payload(self._revs)
        except Exception as exc:  # crc held: a writer bug or a crc collision
            raise _bad_revs(self.id, f"undecodable ({exc})") from exc
        if not isinstance(tree, dict) or not isinstance(bodies, dict):
            raise _bad_revs(self.id, "not two maps")
        return tree, bodies

    def to_value(self) -> tuple[Any, ...]:
        """The msgpack-able ``by_id`` value (FORMAT.md "by_id")."""
        revs = self._revs
        if revs is None:
            revs = encode_payload([self._tree, self._bodies])
        return (self.seq, self.deleted, self.winner, self.active, revs, _frozen(self._winner_body))

    def by_seq_row(self) -> tuple[str, str, bool]:
        """The document's row in ``by_seq`` (FORMAT.md "by_seq"), at key ``seq``."""
        return (self.id, self.winner, self.deleted)

    @classmethod
    def from_value(cls, doc_id: str, value: Sequence[Any]) -> DocInfo:
        """The info a stored value describes; the tree and bodies stay encoded
        until asked for. CorruptionError when the value is not 6 fields of
        their types (``summary_fields``)."""
        seq, deleted, winner, active, revs, winner_body = summary_fields(doc_id, value)
        info = cls.__new__(cls)
        info.id = doc_id
        info.seq = seq
        info.deleted = deleted
        info.winner = winner
        info.active = active
        info._revs = revs
        info._tree = info._bodies = None
        info._winner_body = winner_body
        return info

    def problems(self) -> list[str]:
        """How the stored summary disagrees with the revision tree it summarises
        (``settee check`` and strict mode trust nothing a reader trusts)."""
        tree = self.tree
        found = []
        if not tree or not revtree.is_valid_tree(tree):
            return ["malformed revision tree"]
        if self.winner != revtree.winner(tree):
            found.append(f"stored winner {self.winner!r}, not the tree's {revtree.winner(tree)!r}")
        elif self.deleted != tree[self.winner][1]:
            found.append("deleted flag that disagrees with its winner")
        if encode_payload(self.winner_body) != encode_payload(self.bodies.get(self.winner)):
            found.append(f"winner body entry {self.winner_body!r}, not its bodies' entry")
        leaves = revtree.leaves(tree)
        active = sum(stored_size(self.bodies[r]) for r in leaves if r in self.bodies)
        if self.active != active:
            found.append(f"active size {self.active}, not its leaf bodies' {active}")
        return found


def stored_size(entry: Sequence[Any]) -> int:
    """What one stored revision adds to ``active``: its body's encoded size and
    its attachments' lengths (SEMANTICS.md §18)."""
    if len(entry) < 3:
        return int(entry[1])
    return int(entry[1]) + sum(_length(att) for att in entry[2])


def _length(att: Any) -> int:
    if isinstance(att, Inline):
        return length_of(att.data)
    if isinstance(att, Stored):
        return att.length
    return int(att[2])  # a stored record: FORMAT.md "Attachments"


def attachments_of(entry: Sequence[Any]) -> list[Stored]:
    """The attachments a ``bodies`` entry records, as ``Stored`` (``where``: the
    chunk pointers; for a revision not yet written, the ``Inline`` it came from)."""
    if len(entry) < 3:
        return []
    found = []
    try:
        for att in entry[2]:
            if isinstance(att, Stored):
                found.append(att)
            elif isinstance(att, Inline):
                assert att.revpos is not None  # resolve() gave it one
                length = length_of(att.data)
                found.append(
                    Stored(att.name, att.content_type, length, digest_of(att.data), att.revpos, att)
                )
            else:
                name, content_type, length, digest, revpos, chunks = att
                found.append(Stored(name, content_type, length, digest, revpos, chunks))
    except (TypeError, ValueError):  # crc held: a writer bug
        shown = repr(entry)[:200]
        what = f"attachment records are malformed: {shown}"
        raise CorruptionError("<by_id value>", 0, what) from None
    return found


def _frozen(value: Any) -> Any:
    """``value`` with every list a tuple, as a node read from the file holds it: a
    node the writer caches must be immutable and untracked by the collector too."""
    if type(value) is list:
        return tuple([_frozen(v) for v in value])
    return value


def _bad_revs(doc_id: str, what: str) -> CorruptionError:
    # The info does not know its file; the node that held it passed its crc check.
    return CorruptionError("<by_id value>", 0, f"revisions of {doc_id!r} are {what}")


@dataclass(frozen=True, slots=True)
class Edit:
    """An accepted interactive edit: the revision to store a body for, the tree
    after it and the new revision's attachments (stubs resolved, SEMANTICS.md §18)."""

    rev: str
    tree: dict[str, list[Any]]
    attachments: list[Stored | Inline] = field(default_factory=list)


def apply_edit(
    info: DocInfo | None,
    doc: ValidDoc,
    *,
    revs_limit: int,
    before: DocInfo | None,
    encoded: bytes,
    deleting: bool = False,
) -> Edit:
    """Decide one interactive edit (``new_edits=True``) as CouchDB does; raise
    ``Conflict`` when it must be refused. A replicated edit is ``apply_replicated``'s.

    ``info`` is the document's state now, ``before`` its state when the call
    carrying the edit began (they differ when an earlier entry of the same
    ``bulk_docs`` call changed the document). CouchDB checks an interactive
    edit twice: against the state before the call
    (``couch_db:prep_and_validate_updates``) and, in order, against the state
    the earlier entries left (``couch_db_updater:merge_rev_tree``).
    ``encoded``: the body's bytes as the writer stores them; the revision id is
    digested from them, so the body is not packed a second time.
    """
    tree = dict(info.tree) if info is not None else {}
    if deleting:
        _check_exists(info)
    _check_against_call_start(before, doc)
    parent = _parent_for_merge(info, doc)
    position = 1 if parent is None else rev_pos(parent) + 1
    atts = resolve(doc.id, doc.attachments, _named_atts(info, doc), position, new_edits=True)
    rev = new_rev_encoded(parent, doc.deleted, encoded, rev_digests(atts))
    if rev in tree:
        # The id the edit digests to is one the tree holds already (a revision
        # replicated in with that id): merged as a path, as the reference does,
        # not overwritten (which turned a live replicated root into this edit's
        # tombstone; found by mutation testing's equivalence runs).
        tree, _ = revtree.merge_path(tree, [rev] if parent is None else [rev, parent], doc.deleted)
    else:
        tree[rev] = [parent, doc.deleted]
    if revs_limit and len(tree) > revs_limit:
        # A tree of at most revs_limit revisions is its own stem (spec.revtree.stem's
        # contract): nearly every edit, whose tree a stem call would only copy.
        tree = revtree.stem(tree, revs_limit)
    return Edit(rev, tree, atts)


@dataclass(slots=True)
class Working:
    """A document's revision tree and stored bodies while a replicated call
    (``new_edits=False``) of a group commit edits them in place: private copies,
    made once per document per call, so that each of the call's paths for the
    document costs what the path costs, not what the tree does (``apply_edit``
    copies the tree, and the writer recomputes the winner and sizes, per edit:
    2,000 conflicting revisions of one document took 16 s)."""

    tree: dict[str, list[Any]]
    bodies: dict[str, list[Any]]
    #: ``revtree.height(tree)``, kept as edits go: stemming is skipped while it is
    #: at most revs_limit (the stem would be the tree itself).
    height: int
    #: The seq of the document's by_seq row before the group, when it had one.
    stale_seq: int | None
    #: The seq of the call's last edit of the document; None while none changed it.
    seq: int | None = None

    @classmethod
    def of(cls, info: DocInfo | None, *, stale: bool) -> Working:
        """Private copies of ``info``'s tree and bodies; ``stale``: whether its by_seq
        row is the group's to remove when the document changes."""
        if info is None:
            return cls({}, {}, 0, None)
        tree = {rev: [parent, deleted] for rev, (parent, deleted) in info.tree.items()}
        return cls(tree, dict(info.bodies), revtree.height(tree), info.seq if stale else None)


def apply_replicated(
    work: Working, doc: ValidDoc, *, revs_limit: int
) -> tuple[str | None, list[Stored | Inline]]:
    """``apply_edit``'s ``new_edits=False`` edit, made in ``work``: the revision to
    store a body for (None when the tree holds it already: nothing changes) and
    its attachments. Refusals (a missing stub) raise before anything changes."""
    leaf = doc.revisions[0]
    if leaf in work.tree:
        # couch_db:prep_and_validate_replicated_updates: a revision the tree
        # already holds is ignored but counts as a success; its body and the
        # tree stay as they are (the sender's ancestors are not merged either).
        return None, []
    path = list(doc.revisions)
    atts = resolve(
        doc.id, doc.attachments, _ancestor_atts(work.bodies, doc), rev_pos(leaf), new_edits=False
    )
    known = [i for i, rev in enumerate(path) if rev in work.tree]
    # A known root given a parent joins two parts of the tree: measured again. Else
    # the new revisions hang, as one chain, above the first known one (or alone).
    joins = any(work.tree[path[i]][0] is None for i in known if i + 1 < len(path))
    revtree.merge_path_into(work.tree, path, doc.deleted)
    if joins:
        work.height = revtree.height(work.tree)
    else:
        above = _depth(work.tree, path[known[0]]) if known else 0
        work.height = max(work.height, (known[0] if known else len(path)) + above)
    if revs_limit and len(work.tree) > revs_limit and work.height > revs_limit:
        work.tree = revtree.stem(work.tree, revs_limit)
        work.height = revtree.height(work.tree)
        work.bodies = {rev: p for rev, p in work.bodies.items() if rev in work.tree}
    return leaf, atts


def _depth(tree: dict[str, list[Any]], rev: str) -> int:
    """The revisions from ``rev`` up to its root, both counted."""
    depth = 0
    current: str | None = rev
    while current is not None:
        depth += 1
        current = tree[current][0]
    return depth


def _named_atts(info: DocInfo | None, doc: ValidDoc) -> list[Stored] | None:
    """Where an interactive edit's stubs come from: the revision ``_rev`` names."""
    if info is None or doc.rev is None or doc.rev not in info.bodies:
        return None
    return attachments_of(info.bodies[doc.rev])


def _ancestor_atts(bodies: dict[str, list[Any]], doc: ValidDoc) -> list[Stored] | None:
    """Where a replicated edit's stubs come from: the newest ancestor on the sent
    path whose body is kept (``couch_db:make_first_doc_on_disk``)."""
    for rev in doc.revisions[1:]:
        if rev in bodies:
            return attachments_of(bodies[rev])
    return None


def _check_exists(info: DocInfo | None) -> None:
    """``delete`` answers NotFound for a missing or already deleted document, as
    CouchDB's DELETE handler does; the writer decides it, so that the answer
    belongs to the same state as the edit (two racing deletes: one succeeds,
    the other finds the tombstone)."""
    if info is None:
        raise NotFound("missing")
    if info.deleted:
        raise NotFound("deleted")


def _check_against_call_start(before: DocInfo | None, doc: ValidDoc) -> None:
    """``prep_and_validate_update``: a named ``_rev`` must be a leaf before the
    call; no ``_rev`` creates a missing document or recreates a deleted one."""
    if doc.rev is not None:
        if before is None or not revtree.is_leaf(before.tree, doc.rev):
            raise Conflict()
    elif before is not None and not (before.deleted and not doc.deleted):
        raise Conflict()


def _parent_for_merge(info: DocInfo | None, doc: ValidDoc) -> str | None:
    """``merge_rev_tree``: the revision the edit extends in the current tree.

    A deleted document accepts only a recreation: no ``_rev``, not itself a
    tombstone, stored on top of the winning tombstone; naming any revision
    conflicts. Otherwise the edit must extend a current leaf (a losing
    branch's leaf too: that is how conflicts are resolved); a second create
    of an existing document would start a new branch, which conflicts.
    """
    if info is None:
        if doc.rev is not None:
            raise Conflict()
        return None
    if info.deleted:
        if doc.rev is not None or doc.deleted:
            raise Conflict()
        return info.winner
    if doc.rev is None or not revtree.is_leaf(info.tree, doc.rev):
        raise Conflict()
    return doc.rev

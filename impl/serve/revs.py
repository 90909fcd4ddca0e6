"""Revision reads the public API does not offer: ``open_revs``, ``revs_info``,
``deleted_conflicts``, the leaves for ``_changes?style=all_docs`` and its ``pending``.

This is the one module of the server that reads engine internals, read-only:
a document's ``DocInfo`` (its rev tree and which bodies are stored) from the
published snapshot of the shard that holds it, ``db.shards[i].snapshot``,
exactly as ``Database.get`` does. Bodies are still read through the public
``db.get(id, rev=...)``. Nothing here writes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import settee
from settee.docinfo import DocInfo
from settee.serve.protocol import HTTPError
from settee.spec import revtree
from settee.spec.docs import validate_docid
from settee.spec.errors import BadRequest, NotFound
from settee.spec.revs import check_rev, is_valid_rev, parse_rev
from settee.spec.routing import shard_of
from settee.tokens import decode_token

__all__ = [
    "add_conflicts",
    "changes_pending",
    "deleted_conflicts",
    "doc_info",
    "doc_infos",
    "open_revs",
    "request_rev",
    "request_revs",
    "revs_info",
]

#: couch_doc:parse_rev's one reason for every revision it cannot read.
INVALID_REV = "Invalid rev format"


def request_rev(value: Any) -> str:
    """A revision a request names (``?rev=``, ``If-Match``, ``_rev``, ``open_revs``
    items), or 400 ``bad_request`` "Invalid rev format", couch_doc:parse_rev's
    answer. settee's own stricter rules (no leading zero, N >= 1, see
    spec/revs.py) refuse a few revs CouchDB reads; those get the same answer."""
    try:
        return check_rev(value)
    except BadRequest:
        raise HTTPError(400, "bad_request", INVALID_REV) from None


def request_revs(value: Any) -> list[str]:
    """A JSON list of revisions (``open_revs``, ``atts_since``), as
    couch_doc:parse_revs reads it: a non-list is "Invalid list of revisions"."""
    if not isinstance(value, list):
        raise HTTPError(400, "bad_request", "Invalid list of revisions")
    return [request_rev(rev) for rev in value]


def doc_info(db: settee.Database, doc_id: str) -> DocInfo | None:
    """The document's stored summary from its shard's current snapshot."""
    validate_docid(doc_id)
    shard = db.shards[shard_of(doc_id, len(db.shards))]
    return shard.current().doc_info(doc_id)


def changes_pending(db: settee.Database, last_seq: Any) -> int:
    """``_changes``'s ``pending``: changes after ``last_seq`` (a token this database
    returned), counted from each shard's current snapshot."""
    snaps = db._snapshots()
    position = decode_token(last_seq, len(snaps), [snap.seq for snap in snaps])
    return sum(snap.changes_after(seq) for snap, seq in zip(snaps, position, strict=True))


def doc_infos(db: settee.Database, doc_ids: list[str]) -> dict[str, DocInfo]:
    """Summaries of many documents, one sorted lookup per shard."""
    by_shard: dict[int, list[str]] = defaultdict(list)
    for doc_id in doc_ids:
        by_shard[shard_of(doc_id, len(db.shards))].append(doc_id)
    snaps = db._snapshots() if len(by_shard) > 1 else None
    found: dict[str, DocInfo] = {}
    for index, ids in by_shard.items():
        snap = db.shards[index].current() if snaps is None else snaps[index]
        found.update(snap.doc_infos(ids))
    return found


def _descendant_leaves(tree: dict[str, list[Any]], rev: str) -> list[str]:
    return [leaf for leaf in revtree.leaves(tree) if rev in revtree.path_to_root(tree, leaf)]


def latest_leaf(db: settee.Database, doc_id: str, rev: str) -> str:
    """``?rev=R&latest=true``: the leaf descending from ``R`` (the winning one when
    the branch forks), ``R`` itself when it is a leaf or unknown (then a 404)."""
    info = doc_info(db, doc_id)
    if info is None or rev not in info.tree:
        return rev
    leaves = _descendant_leaves(info.tree, rev)
    return leaves[0] if leaves else rev


def open_revs(
    db: settee.Database,
    doc_id: str,
    revs: list[str] | None,
    *,
    latest: bool = False,
    revisions: bool = False,
    attachments: bool = False,
    atts_since: list[str] | None = None,
) -> list[dict[str, Any]]:
    """CouchDB's ``open_revs``: ``revs=None`` means ``all`` (every leaf, tombstones
    included). Each entry is ``{"ok": doc}`` or ``{"missing": rev}``, each rev once;
    with ``latest`` a non-leaf rev is replaced by the leaves that descend from it.
    The order is CouchDB's, not the request's: fabric_doc_open_revs sorts its
    replies, so found documents come first, then missing revs, each by
    ``(position, hash)`` ascending (the winner is not first)."""
    info = doc_info(db, doc_id)
    tree = info.tree if info is not None else {}
    if revs is None:
        wanted = revtree.leaves(tree) if tree else []
    else:
        wanted = []
        for rev in revs:
            if latest and rev in tree and not revtree.is_leaf(tree, rev):
                wanted.extend(r for r in _descendant_leaves(tree, rev) if r not in wanted)
            elif rev not in wanted:
                wanted.append(rev)
    found: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    for rev in sorted(wanted, key=parse_rev):
        try:
            doc = db.get(
                doc_id, rev=rev, revs=revisions, attachments=attachments, atts_since=atts_since
            )
            found.append({"ok": doc})
        except NotFound:
            missing.append({"missing": rev})
    return found + missing


def revs_info(db: settee.Database, doc_id: str, rev: str) -> list[dict[str, str]]:
    """``_revs_info``: ``rev`` and its ancestors, each ``available``, ``deleted`` or
    ``missing`` (body not stored: compacted away or received as an ancestor)."""
    info = doc_info(db, doc_id)
    if info is None or rev not in info.tree:
        return []
    out = []
    for r in revtree.path_to_root(info.tree, rev):
        if info.tree[r][1]:
            status = "deleted"
        elif r in info.bodies:
            status = "available"
        else:
            status = "missing"
        out.append({"rev": r, "status": status})
    return out


def deleted_conflicts(db: settee.Database, doc_id: str) -> list[str]:
    info = doc_info(db, doc_id)
    return revtree.deleted_conflicts(info.tree) if info is not None else []


def parse_rev_list(value: Any) -> list[str] | None:
    """A JSON list of well-formed revs, else None."""
    if isinstance(value, list) and all(isinstance(r, str) and is_valid_rev(r) for r in value):
        return value
    return None


def add_conflicts(db: settee.Database, docs: list[dict[str, Any]]) -> None:
    """Give each of ``docs`` (winners, as read) its ``_conflicts`` when it has any:
    ``conflicts=true`` with ``include_docs`` (``_all_docs``, views, ``_find``)."""
    infos = doc_infos(db, [doc["_id"] for doc in docs])
    for doc in docs:
        info = infos.get(doc["_id"])
        # Only the winner carries them: a document read at another revision (a view
        # row's linked {"_id", "_rev"}) comes through open_doc_revs, which adds none.
        if info is None or doc.get("_rev") != info.winner:
            continue
        conflicts = revtree.conflicts(info.tree)
        if conflicts:
            doc["_conflicts"] = conflicts

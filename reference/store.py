"""The reference store: settee's public API as plainly as it can be written.

The model
---------
A database is a dict ``id -> _Doc`` plus a counter ``update_seq``. A
``_Doc`` holds the document's revision tree (``settee.spec.revtree``), the
bodies of the revisions whose body is still kept, and ``seq``: the value of
``update_seq`` at the document's latest change. Everything else is derived on
demand:

* ``get`` reads the tree and a body; ``all_docs`` sorts the ids of live
  documents; ``changes`` sorts documents by ``seq``, so each appears once, at
  its latest change; ``info`` counts.
* A write computes a new tree with the spec functions (``merge_path``,
  ``stem``), stores the new body, drops bodies of revisions the tree no
  longer holds, bumps ``update_seq`` and sets the document's ``seq``.
* ``compact`` drops the bodies of non-leaf revisions and stems every tree.
* ``purge`` cuts leaves out of a tree (``revtree.purge``) and bumps the
  document's seq, or removes the document when no leaf is left.

Every public method takes one ``threading.Lock`` for its whole duration, so
any concurrent history is equivalent to the serial order in which the lock
was taken. Results are deep copies; stored bodies come from
``validate_doc``'s msgpack round trip, so callers never share objects with
the store.

Persistence (``path`` given): ``path`` is a directory holding one append-only
file, ``reference.log``, of msgpack records ``[id, seq, tree, new_bodies]``,
one per document a call changed (holding every body the call added to it),
each call's records written with one ``write``. Opening replays the records in
order (a record replaces the document's tree and seq, adds its bodies, forgets
bodies the tree no longer holds; an empty tree, which ``purge`` writes, removes
the document); a leaf revision left without its body is a ``CorruptionError``.
``compact`` rewrites the log to one record per document (temp file, fsync,
rename, fsync directory), then, when a purge moved ``update_seq`` past every
document's seq, a removal record of the id ``""`` that carries it. An
incomplete last record (a torn write) is copied aside and cut off with a
warning; bytes that do not decode are a ``CorruptionError``.

The semantics follow spec/SEMANTICS.md and CouchDB 3.x; the interactive
update rule is CouchDB's two-step one (``couch_db:prep_and_validate_updates``
against the state before the call, then ``couch_db_updater:merge_rev_tree``
against the state so far), see :meth:`ReferenceDB._parent_for`.
"""

from __future__ import annotations

import builtins
import os
import stat
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from settee.spec import revtree
from settee.spec.arguments import (
    check_bool,
    check_count,
    check_key,
    check_keys,
    check_optional_rev,
    check_path,
    check_purge,
    check_revs_diff,
    check_since,
    make_directories,
)
from settee.spec.attachments import (
    Inline,
    MissingStub,
    Stored,
    as_bytes,
    attachment_answer,
    check_atts_since,
    chunked,
    digest_of,
    length_of,
    render,
    resolve,
    rev_digests,
    since_position,
    validate_attachment_name,
)
from settee.spec.config import OPTIONS, validate_options
from settee.spec.docs import ValidDoc, render_doc, validate_doc, validate_docid
from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError
from settee.spec.keys import before_start, in_range, sort_ids
from settee.spec.revs import new_rev, parse_rev
from settee.spec.values import describe, is_sequence, plain_items

__all__ = ["LOG_NAME", "ReferenceDB", "open"]


def _stored(att: Stored | Inline) -> Stored:
    """The record a revision keeps: a stub's as it was, new bytes digested."""
    if isinstance(att, Stored):
        return att
    assert att.revpos is not None  # resolve() gives every new attachment its revpos
    return Stored(
        att.name,
        att.content_type,
        length_of(att.data),
        digest_of(att.data),
        att.revpos,
        as_bytes(att.data),
    )


LOG_NAME = "reference.log"
_CONFLICT = "Document update conflict."


@dataclass
class _Doc:
    """One document: its rev tree, the bodies still kept (and each kept revision's
    attachments, their bytes in ``Stored.where``), its latest seq."""

    tree: revtree.RevTree
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    atts: dict[str, list[Stored]] = field(default_factory=dict)
    seq: int = 0

    def forget_unkept(self) -> None:
        """Drop bodies and attachments of revisions no longer kept."""
        self.bodies = {r: b for r, b in self.bodies.items() if r in self.tree}
        self.atts = {r: a for r, a in self.atts.items() if r in self.bodies}


def open(path: str | None = None, **options: Any) -> ReferenceDB:
    """Open (creating if needed) the reference database at directory ``path``,
    or a memory-only one when ``path`` is None."""
    return ReferenceDB(check_path(path, optional=True), validate_options(**options))


# The options open takes (settee's, not the io layer's ``fs``): the proof asks this of
# a factory that takes ``**options`` before running a campaign that needs ``fs``.
open.accepted_options = frozenset(OPTIONS)  # type: ignore[attr-defined]


def _check_record(docid: Any, seq: Any, tree: Any, bodies: Any, more: list[Any]) -> None:
    """A log record's fields are of their types (ValueError otherwise): a well-formed
    msgpack record of the wrong shape made open or later reads raise raw errors."""
    if type(docid) is not str or type(seq) is not int or seq < 0:
        raise ValueError(f"id {describe(docid)} or seq {describe(seq)} of the wrong type")
    if not isinstance(tree, dict) or not revtree.is_valid_tree(tree):
        raise ValueError(f"revision tree {describe(tree)} is malformed")
    # A record may carry the body of a revision its own stemming dropped (forgotten
    # once loaded), so bodies are not checked against the tree.
    if not isinstance(bodies, dict) or any(
        type(rev) is not str or not isinstance(b, dict) for rev, b in bodies.items()
    ):
        raise ValueError(f"bodies {describe(bodies)} are not a map of revisions to bodies")
    if more and not isinstance(more[0], dict):
        raise ValueError(f"attachments {describe(more[0])} are not a map")


class ReferenceDB:
    """The serialised model database; see the module docstring."""

    def __init__(self, path: str | None, config: dict[str, Any]) -> None:
        # Reentrant: validating a document runs the caller's code (a list subclass's
        # __iter__, an attachment file's read), which may call this database again; a
        # plain Lock deadlocked there while the engine, which validates outside its
        # locks, answered (found in review).
        self._lock = threading.RLock()
        self._config = config
        self._docs: dict[str, _Doc] = {}
        self._seq = 0
        self._closed = False
        self._log_path: str | None = None
        self._log: Any = None
        readonly = config["readonly"]
        if path is not None:
            try:
                self._open_log(path, readonly=readonly, create=config["create"])
            except OSError as exc:  # a name too long, a file in the way, no permission
                raise SetteeError(f"cannot open the database at {path}: {exc}") from exc

    def _open_log(self, path: str, *, readonly: bool, create: bool) -> None:
        exists = os.path.exists(os.path.join(path, LOG_NAME))
        if (readonly or not create) and not exists:
            raise SetteeError(f"{path} holds no settee database (no {LOG_NAME}); check the path")
        if not readonly:
            make_directories(path)  # os.makedirs recurses per missing parent
        self._log_path = os.path.join(path, LOG_NAME)
        self._replay(readonly=readonly)
        if not readonly:
            self._log = builtins.open(self._log_path, "ab")  # noqa: SIM115 (held until close)

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ReferenceDB:
        with self._lock:
            self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database; later calls (except close) raise SetteeError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._log is not None:
                self._log.close()
                self._log = None

    def _check_open(self) -> None:
        if self._closed:
            raise SetteeError("database is closed: open it again to use it")

    def _check_writable(self) -> None:
        self._check_open()
        if self._config["readonly"]:
            raise SetteeError("the database was opened with readonly=True: writes are refused")

    # ------------------------------------------------------------------ writes

    def put(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Store one document; Conflict if its _rev is not a current leaf."""
        with self._lock:
            self._check_writable()
            vdoc = self._validate(doc, new_edits=True)
            self._check_writable()  # the caller's code the validation ran may have closed it
            (result,) = self._update_interactive([vdoc])
            if result.get("error") == "missing_stub":
                raise MissingStub(result["reason"])
            if "error" in result:
                raise Conflict(result["reason"])
            return result

    def delete(self, docid: str, rev: str | None) -> dict[str, Any]:
        """Write a tombstone below leaf ``rev`` (chttpd_db DELETE semantics)."""
        with self._lock:
            self._check_writable()
            docid = validate_docid(docid)
            rev = check_optional_rev(rev)
            entry = self._docs.get(docid)
            if entry is None:
                raise NotFound("missing")
            if revtree.is_deleted(entry.tree):
                raise NotFound("deleted")
            revisions = () if rev is None else (rev,)
            vdoc = ValidDoc(id=docid, rev=rev, deleted=True, revisions=revisions, body={})
            (result,) = self._update_interactive([vdoc])
            if "error" in result:
                raise Conflict(result["reason"])
            return result

    def bulk_docs(self, docs: list[dict[str, Any]], new_edits: bool = True) -> list[dict[str, Any]]:
        """Validate every doc, then apply them in order (see SEMANTICS.md §7)."""
        with self._lock:
            self._check_writable()
            if not is_sequence(docs):
                raise BadRequest(f"docs must be a list of documents, not {type(docs).__name__}")
            check_bool("new_edits", new_edits)
            vdocs = [
                self._validate(doc, new_edits=new_edits, generate_id=True)
                for doc in plain_items(docs)
            ]
            self._check_writable()  # the caller's code the validation ran may have closed it
            if new_edits:
                return self._update_interactive(vdocs)
            # CouchDB omits successes with new_edits=false: only missing stubs are errors.
            return self._update_replicated(vdocs)

    def purge(self, revs: dict[str, list[str]]) -> dict[str, Any]:
        """Remove leaf revisions for good (SEMANTICS.md §19)."""
        with self._lock:
            self._check_writable()
            checked = check_purge(revs)
            self._check_writable()  # a lying dict's code may have closed it
            purged: dict[str, list[str]] = {}
            changed: list[tuple[str, dict[str, Any]]] = []
            seq_before = self._seq
            for docid, asked in checked.items():
                entry = self._docs.get(docid)
                tree, purged[docid] = revtree.purge(entry.tree, asked) if entry else ({}, [])
                if entry is None or not purged[docid]:
                    continue
                if tree:
                    entry.tree = tree
                    entry.forget_unkept()
                    self._seq += 1
                    entry.seq = self._seq
                else:
                    del self._docs[docid]
                changed.append((docid, {}))
            if changed and self._seq == seq_before:  # only removals: no seq taken
                self._seq += 1  # update_seq moves with every purge, as the engine's
            self._append(changed)
            return {"purge_seq": None, "purged": purged}

    def _validate(self, doc: object, *, new_edits: bool, generate_id: bool = False) -> ValidDoc:
        limit = self._config["max_document_size"]
        return validate_doc(
            doc, new_edits=new_edits, max_document_size=limit, generate_id=generate_id
        )

    @staticmethod
    def _parent_for(
        before: revtree.RevTree | None, now: revtree.RevTree | None, vdoc: ValidDoc
    ) -> tuple[bool, str | None]:
        """``(ok, parent)`` for an interactive edit, CouchDB's two checks:

        1. against the tree before the call (``prep_and_validate_update``):
           a named _rev must be a leaf; without _rev the doc must be missing
           or deleted;
        2. against the tree as earlier entries of the call left it
           (``merge_rev_tree``): a deleted doc only accepts a recreation (no
           _rev, not a tombstone), whose parent is the winning tombstone; a
           live doc needs the named _rev to still be a leaf; a missing doc
           takes a new root.
        """
        if before is None:
            if vdoc.rev is not None:
                return False, None
        elif vdoc.rev is None:
            if not revtree.is_deleted(before):
                return False, None
        elif not revtree.is_leaf(before, vdoc.rev):
            return False, None
        if now is None:
            return True, None
        if revtree.is_deleted(now):
            if vdoc.rev is None and not vdoc.deleted:
                return True, revtree.winner(now)
            return False, None
        if vdoc.rev is not None and revtree.is_leaf(now, vdoc.rev):
            return True, vdoc.rev
        return False, None

    def _update_interactive(self, vdocs: list[ValidDoc]) -> list[dict[str, Any]]:
        before = {vdoc.id: self._tree_of(vdoc.id) for vdoc in vdocs}
        results: list[dict[str, Any]] = []
        changed: list[tuple[str, dict[str, Any]]] = []
        for vdoc in vdocs:
            ok, parent = self._parent_for(before[vdoc.id], self._tree_of(vdoc.id), vdoc)
            if not ok:
                results.append({"id": vdoc.id, "error": "conflict", "reason": _CONFLICT})
                continue
            position = 1 if parent is None else parse_rev(parent)[0] + 1
            try:
                atts = resolve(
                    vdoc.id, vdoc.attachments, self._stubs_from(vdoc), position, new_edits=True
                )
            except MissingStub as exc:
                results.append({"id": vdoc.id, "error": "missing_stub", "reason": exc.reason})
                continue
            rev = new_rev(parent, vdoc.deleted, vdoc.body, rev_digests(atts))
            path = [rev] if parent is None else [rev, parent]
            changed.append(self._apply(vdoc, path, atts))
            results.append({"ok": True, "id": vdoc.id, "rev": rev})
        self._append(changed)
        return results

    def _stubs_from(self, vdoc: ValidDoc) -> list[Stored] | None:
        """The attachments an interactive edit's stubs refer to: those of the
        revision ``_rev`` names; None when it names none (or one without a body)."""
        entry = self._docs.get(vdoc.id)
        if entry is None or vdoc.rev is None or vdoc.rev not in entry.bodies:
            return None
        return list(entry.atts.get(vdoc.rev, []))

    def _update_replicated(self, vdocs: list[ValidDoc]) -> list[dict[str, Any]]:
        changed = []
        errors = []
        for vdoc in vdocs:
            tree = self._tree_of(vdoc.id)
            # couch_db:prep_and_validate_replicated_updates ignores a doc whose
            # revision the tree already holds (leaf or not).
            if tree is not None and vdoc.revisions[0] in tree:
                continue
            position = parse_rev(vdoc.revisions[0])[0]
            previous = self._ancestor_atts(vdoc)
            try:
                atts = resolve(vdoc.id, vdoc.attachments, previous, position, new_edits=False)
            except MissingStub as exc:
                errors.append({"id": vdoc.id, "error": "missing_stub", "reason": exc.reason})
                continue
            changed.append(self._apply(vdoc, list(vdoc.revisions), atts))
        self._append(changed)
        return errors

    def _ancestor_atts(self, vdoc: ValidDoc) -> list[Stored] | None:
        entry = self._docs.get(vdoc.id)
        for rev in vdoc.revisions[1:]:
            if entry is not None and rev in entry.bodies:
                return list(entry.atts.get(rev, []))
        return None

    def _tree_of(self, docid: str) -> revtree.RevTree | None:
        entry = self._docs.get(docid)
        return None if entry is None else entry.tree

    def _apply(
        self, vdoc: ValidDoc, path: list[str], atts: list[Stored | Inline]
    ) -> tuple[str, dict[str, Any]]:
        """Merge ``path`` (its newest rev carrying ``vdoc``'s body and ``atts``),
        stem, bump the sequence; return the log record's new bodies."""
        entry = self._docs.setdefault(vdoc.id, _Doc(tree={}))
        tree, _added = revtree.merge_path(entry.tree, path, vdoc.deleted)
        entry.tree = revtree.stem(tree, self._config["revs_limit"])
        entry.bodies[path[0]] = vdoc.body
        entry.atts[path[0]] = [_stored(att) for att in atts]
        entry.forget_unkept()
        self._seq += 1
        entry.seq = self._seq
        return vdoc.id, {path[0]: vdoc.body}

    # ------------------------------------------------------------------ reads

    def get(
        self,
        docid: str,
        rev: str | None = None,
        revs: bool = False,
        conflicts: bool = False,
        attachments: bool = False,
        atts_since: list[str] | None = None,
    ) -> dict[str, Any]:
        """The winning revision (or ``rev``) of a document."""
        with self._lock:
            self._check_open()
            docid = validate_docid(docid)
            rev = check_optional_rev(rev)
            check_bool("revs", revs)
            check_bool("conflicts", conflicts)
            check_bool("attachments", attachments)
            since = check_atts_since(atts_since)
            # CouchDB's open_revs path (GET ?rev=) adds no _conflicts.
            asked = rev
            entry, rev = self._revision(docid, rev)
            found = revtree.conflicts(entry.tree) if conflicts and asked is None else None
            if rev not in entry.bodies:
                raise NotFound("missing")
            # Data for every attachment above atts_since's position (all: 0), or none.
            above = None if not attachments and since is None else 0
            if since is not None:
                above = since_position(entry.tree, rev, since)
            return self._render(docid, entry, rev, revs=revs, conflicts=found, data_above=above)

    def _render(
        self,
        docid: str,
        entry: _Doc,
        rev: str,
        *,
        revs: bool = False,
        conflicts: list[str] | None = None,
        data_above: int | None = None,
    ) -> dict[str, Any]:
        atts = {
            att.name: render(
                att, att.where if data_above is not None and att.revpos > data_above else None
            )
            for att in entry.atts.get(rev, [])
        }
        return render_doc(
            docid,
            rev,
            entry.tree[rev][1],
            _copy(entry.bodies[rev]),
            revisions=revtree.revisions(entry.tree, rev, self._config["revs_limit"])
            if revs
            else None,
            conflicts=conflicts,
            attachments=atts or None,
        )

    def attachment_chunks(
        self, docid: str, name: str, rev: str | None = None
    ) -> tuple[dict[str, Any], Iterator[bytes]]:
        """``attachment`` without ``data``, and the bytes as chunks of at most 64 KiB."""
        found = self.attachment(docid, name, rev)
        data = found.pop("data")
        return found, iter(chunked(data))

    def _revision(self, docid: str, rev: str | None) -> tuple[_Doc, str]:
        """The document and the revision a read names: ``rev``, else the winner;
        NotFound for a missing document or (without ``rev``) a deleted one."""
        entry = self._docs.get(docid)
        if entry is None:
            raise NotFound("missing")
        if rev is None:
            rev = revtree.winner(entry.tree)
            if entry.tree[rev][1]:
                raise NotFound("deleted")
        return entry, rev

    def attachment(self, docid: str, name: str, rev: str | None = None) -> dict[str, Any]:
        """One attachment of the winning revision (or ``rev``), its bytes included."""
        with self._lock:
            self._check_open()
            docid = validate_docid(docid)
            name = validate_attachment_name(name)
            entry, rev = self._revision(docid, check_optional_rev(rev))
            for att in entry.atts.get(rev, []) if rev in entry.bodies else []:
                if att.name == name:
                    return attachment_answer(att, att.where)
            raise NotFound("missing")

    def all_docs(
        self,
        startkey: str | None = None,
        endkey: str | None = None,
        keys: list[str] | None = None,
        include_docs: bool = False,
        limit: int | None = None,
        skip: int = 0,
        descending: bool = False,
        inclusive_end: bool = True,
    ) -> dict[str, Any]:
        """CouchDB's ``_all_docs`` (SEMANTICS.md §8)."""
        with self._lock:
            self._check_open()
            startkey = check_key("startkey", startkey)
            endkey = check_key("endkey", endkey)
            for name, flag in (
                ("include_docs", include_docs),
                ("descending", descending),
                ("inclusive_end", inclusive_end),
            ):
                check_bool(name, flag)
            limit = check_count("limit", limit, optional=True)
            skip = check_count("skip", skip, optional=False) or 0
            keys = check_keys(keys)
            as_key = keys is not None and len(keys) == 1 and startkey == endkey == keys[0]
            if keys and (startkey is not None or endkey is not None) and not as_key:
                raise BadRequest("keys is incompatible with startkey and endkey: pass one")
            live = [i for i, e in self._docs.items() if not revtree.is_deleted(e.tree)]
            total = len(live)
            if keys is not None:
                asked = list(reversed(keys)) if descending else list(keys)
                window = asked[skip:] if limit is None else asked[skip : skip + limit]
                rows = [self._key_row(key, include_docs) for key in window]
                return {"total_rows": total, "offset": None, "rows": rows}
            ordered = sort_ids(live, descending)
            hits = [i for i in ordered if in_range(i, startkey, endkey, descending, inclusive_end)]
            before = sum(1 for i in live if before_start(i, startkey, descending))
            window = hits[skip:] if limit is None else hits[skip : skip + limit]
            rows = [self._live_row(i, include_docs) for i in window]
            return {"total_rows": total, "offset": min(total, before + skip), "rows": rows}

    def _live_row(self, docid: str, include_docs: bool) -> dict[str, Any]:
        entry = self._docs[docid]
        rev = revtree.winner(entry.tree)
        row: dict[str, Any] = {"id": docid, "key": docid, "value": {"rev": rev}}
        if include_docs:
            row["doc"] = self._render(docid, entry, rev)
        return row

    def _key_row(self, key: str, include_docs: bool) -> dict[str, Any]:
        entry = self._docs.get(key)
        if entry is None:
            return {"key": key, "error": "not_found"}
        if not revtree.is_deleted(entry.tree):
            return self._live_row(key, include_docs)
        rev = revtree.winner(entry.tree)
        row: dict[str, Any] = {"id": key, "key": key, "value": {"rev": rev, "deleted": True}}
        if include_docs:
            row["doc"] = None
        return row

    def changes(
        self, since: int | str = 0, limit: int | None = None, include_docs: bool = False
    ) -> dict[str, Any]:
        """Each document once, at its latest change after ``since``."""
        with self._lock:
            self._check_open()
            since = check_since(since)
            if since == "now":
                since = self._seq
            elif since == "0":
                since = 0
            if isinstance(since, int) and since > self._seq and self._config["readonly"]:
                # A snapshot of the log at open, so behind its writer once that writes:
                # a position past its own is read as its own (SEMANTICS.md §9).
                since = self._seq
            if not isinstance(since, int) or not 0 <= since <= self._seq:
                raise BadRequest(
                    f"since={describe(since)} is not a sequence this database returned: "
                    "use 0, 'now', a 'seq' or 'last_seq' from changes(), or info()['update_seq']"
                )
            limit = check_count("limit", limit, optional=True)
            check_bool("include_docs", include_docs)
            pending = sorted((e.seq, i) for i, e in self._docs.items() if e.seq > since)
            cut = limit is not None and len(pending) > limit
            if cut:
                # CouchDB 3.5 answers limit=0 with no rows and last_seq = since
                # (apache/couchdb #6088), so the token never skips a change.
                pending = pending[:limit]
            results = [self._change_row(docid, seq, include_docs) for seq, docid in pending]
            last_seq = (pending[-1][0] if pending else since) if cut else self._seq
            return {"results": results, "last_seq": last_seq}

    def _change_row(self, docid: str, seq: int, include_docs: bool) -> dict[str, Any]:
        entry = self._docs[docid]
        rev = revtree.winner(entry.tree)
        row: dict[str, Any] = {"seq": seq, "id": docid, "changes": [{"rev": rev}]}
        if entry.tree[rev][1]:
            row["deleted"] = True
        if include_docs:
            row["doc"] = self._render(docid, entry, rev)
        return row

    def revs_diff(self, revs: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
        """Which of the given revisions the database lacks (SEMANTICS.md §10)."""
        with self._lock:
            self._check_open()
            result: dict[str, dict[str, list[str]]] = {}
            for docid, asked in check_revs_diff(revs).items():
                known = self._tree_of(docid)
                tree = known or {}
                missing = list(dict.fromkeys(r for r in asked if r not in tree))
                if not missing:
                    continue
                if known is not None:  # a known id's are sorted by (position, hash)
                    missing.sort(key=parse_rev)
                result[docid] = {"missing": missing}
                top = max(parse_rev(r)[0] for r in missing)
                ancestors = [r for r in revtree.leaves(tree) if parse_rev(r)[0] < top]
                if ancestors:
                    result[docid]["possible_ancestors"] = ancestors
            return result

    def info(self) -> dict[str, Any]:
        """Counts, the current sequence token and (model-specific) sizes."""
        with self._lock:
            self._check_open()
            deleted = sum(1 for e in self._docs.values() if revtree.is_deleted(e.tree))
            active = sum(
                len(msgpack.packb(body, use_bin_type=True))
                for e in self._docs.values()
                for body in e.bodies.values()
            )
            file_size = 0 if self._log_path is None else os.path.getsize(self._log_path)
            return {
                "doc_count": len(self._docs) - deleted,
                "doc_del_count": deleted,
                "update_seq": self._seq,
                "sizes": {"file": file_size, "active": active},
            }

    def compact(self) -> None:
        """Drop bodies of non-leaf revisions and stem every tree."""
        with self._lock:
            self._check_writable()
            for entry in self._docs.values():
                entry.tree = revtree.stem(entry.tree, self._config["revs_limit"])
                leaves = set(revtree.leaves(entry.tree))
                entry.bodies = {r: b for r, b in entry.bodies.items() if r in leaves}
                entry.forget_unkept()
            if self._log_path is not None:
                self._rewrite_log()

    # ------------------------------------------------------------------ the log

    def _record(self, docid: str, new_bodies: dict[str, Any]) -> bytes:
        entry = self._docs.get(docid)
        if entry is None:  # purged whole: an empty tree says so
            return msgpack.packb([docid, self._seq, {}, {}], use_bin_type=True)
        atts = {
            rev: [[a.name, a.content_type, a.length, a.digest, a.revpos, a.where] for a in found]
            for rev, found in entry.atts.items()
            if rev in new_bodies and found
        }
        record = [docid, entry.seq, entry.tree, new_bodies] + ([atts] if atts else [])
        return msgpack.packb(record, use_bin_type=True)

    def _append(self, changed: list[tuple[str, dict[str, Any]]]) -> None:
        if self._log is None or not changed:
            return
        # One record per document per call, holding every body the call added to it:
        # a record carries the tree after the call, so a record per edit named leaves
        # whose bodies only a later record of the call brought, and a torn write
        # between them left a leaf without its body.
        merged: dict[str, dict[str, Any]] = {}
        for docid, bodies in changed:
            merged.setdefault(docid, {}).update(bodies)
        # One write per call, so a crash leaves whole calls plus at most one torn record.
        self._log.write(b"".join(self._record(docid, bodies) for docid, bodies in merged.items()))
        self._log.flush()
        if self._config["fsync"]:
            os.fsync(self._log.fileno())

    def _replay(self, *, readonly: bool) -> None:
        assert self._log_path is not None  # only called for persistent databases
        if not os.path.exists(self._log_path):
            return
        kind = stat.S_IFMT(os.stat(self._log_path).st_mode)
        if kind != stat.S_IFREG:
            # A FIFO (or a link to /dev/zero) would block or never end the read below.
            raise SetteeError(f"{self._log_path} is not a regular file: restore the database")
        with builtins.open(self._log_path, "rb") as f:
            data = f.read()
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
        unpacker.feed(data)
        good = 0
        last_record: dict[str, int] = {}  # id -> offset of its last record
        while True:
            try:
                record = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except Exception as exc:  # msgpack raises several classes for bad bytes
                raise CorruptionError(self._log_path, good, f"undecodable record: {exc}") from exc
            last_record[self._load(record, good)] = good
            good = unpacker.tell()
        self._check_leaf_bodies(last_record)
        if good < len(data):
            if readonly:  # creates nothing, changes nothing: the tail is ignored
                warnings.warn(
                    f"{self._log_path}: ignoring an incomplete last record of "
                    f"{len(data) - good} bytes at offset {good} (readonly: left in place)",
                    stacklevel=4,
                )
            else:
                self._set_aside_tail(data, good)

    def _check_leaf_bodies(self, last_record: dict[str, int]) -> None:
        """CorruptionError unless every leaf revision has its body: only compaction
        drops bodies, of non-leaves. Checked once the log is read, not per record:
        a call that edits a document twice writes a record per edit, each with the
        tree after the call, so the first named a leaf whose body the next brought
        (logs written before ``_append`` merged them)."""
        assert self._log_path is not None
        for docid, offset in last_record.items():
            entry = self._docs.get(docid)
            if entry is None:  # purged whole
                continue
            for leaf in revtree.leaves(entry.tree):
                if leaf not in entry.bodies:
                    raise CorruptionError(
                        self._log_path,
                        offset,
                        f"malformed record: leaf revision {describe(leaf)} of "
                        f"{describe(docid)} has no body",
                    )

    def _load(self, record: Any, offset: int) -> str:
        """Apply one log record; return its document's id."""
        try:
            docid, seq, tree, new_bodies, *more = record
            _check_record(docid, seq, tree, new_bodies, more)
            entry = self._docs.setdefault(docid, _Doc(tree={}))
            entry.tree = tree
            entry.bodies.update(new_bodies)
            for rev in new_bodies:
                entry.atts[rev] = [
                    Stored(*fields) for fields in (more[0] if more else {}).get(rev, [])
                ]
            entry.forget_unkept()
        except (TypeError, ValueError, AttributeError) as exc:
            assert self._log_path is not None
            raise CorruptionError(self._log_path, offset, f"malformed record: {exc}") from exc
        entry.seq = seq
        self._seq = max(self._seq, seq)
        if not tree:  # a purge removed every revision: the document is gone
            del self._docs[docid]
        return docid  # type: ignore[no-any-return]  # _check_record: a str

    def _set_aside_tail(self, data: bytes, good: int) -> None:
        assert self._log_path is not None
        aside = f"{self._log_path}.torn-{good}"
        with builtins.open(aside, "wb") as f:
            f.write(data[good:])
        warnings.warn(
            f"{self._log_path}: dropped an incomplete last record of {len(data) - good} bytes "
            f"at offset {good} (copy kept in {aside})",
            stacklevel=4,
        )
        with builtins.open(self._log_path, "r+b") as f:
            f.truncate(good)

    def _rewrite_log(self) -> None:
        assert self._log_path is not None and self._log is not None
        tmp = self._log_path + ".compact"
        by_seq = sorted(self._docs, key=lambda i: self._docs[i].seq)
        records = [self._record(i, self._docs[i].bodies) for i in by_seq]
        if self._seq > (self._docs[by_seq[-1]].seq if by_seq else 0):
            # A purge moved update_seq past every document's seq: a removal record of
            # the id "" (no document's) carries it, or a reopen would go back to the
            # newest document's seq and refuse tokens this database gave.
            records.append(self._record("", {}))
        with builtins.open(tmp, "wb") as f:
            f.write(b"".join(records))
            f.flush()
            os.fsync(f.fileno())
        self._log.close()
        # The new log must be durable before it replaces the old one.
        os.replace(tmp, self._log_path)
        dir_fd = os.open(os.path.dirname(self._log_path), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._log = builtins.open(self._log_path, "ab")  # noqa: SIM115 (held until close)


def _copy(body: dict[str, Any]) -> dict[str, Any]:
    """A copy the caller may change: through msgpack, as the engine's bodies come from
    the file. copy.deepcopy recursed once per level and raised RecursionError on a
    body nested 500 levels deep, which put accepts (found by the semantic suite)."""
    return msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)  # type: ignore[no-any-return]

"""Fifth mutation round: CouchDB slips that escaped the whole proof.

Each is one plausible slip in the engine's edit, stemming or changes code, found by
running a round of candidates against the semantic suite and the equivalence
machine: these six passed both, and each now fails the semantic test named for it
in ``stateful_tests/test_mutants.py`` (``ESCAPES_SEMANTIC``). Built like
``internals.py``: the engine's own source with one slip made in it (``slipped``),
swapped in for the calls that reach it.
"""

from __future__ import annotations

from typing import Any

from settee import docinfo
from settee import shard as shard_module
from settee.docinfo import apply_edit, apply_replicated
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.internals import _Swapping, slipped

__all__ = ["ESCAPES"]


class EditOfDeletedLeafConflicts(_Swapping):
    """An edit (put or delete) naming a deleted losing leaf of a live document
    conflicts: the leaf test of ``_parent_for_merge`` also asks for a live leaf."""

    calls = ("put", "bulk_docs", "delete")
    swaps = ((docinfo, "_parent_for_merge", "parent"),)
    parent = staticmethod(
        slipped(
            docinfo._parent_for_merge,
            "if doc.rev is None or not revtree.is_leaf(info.tree, doc.rev):",
            "if doc.rev is None or not revtree.is_leaf(info.tree, doc.rev)"
            " or info.tree[doc.rev][1]:",
        )
    )


class RecreateOnFirstTombstone(_Swapping):
    """A recreation extends the first tombstone of the highest position met in the
    tree, not the winning one (ties not broken by hash)."""

    calls = ("put", "bulk_docs")
    swaps = ((docinfo, "_parent_for_merge", "parent"),)
    parent = staticmethod(
        slipped(
            docinfo._parent_for_merge,
            "return info.winner",
            "return max((r for r in info.tree if revtree.is_leaf(info.tree, r)), key=rev_pos)",
        )
    )


class ReplicatedStemByPathLength(_Swapping):
    """A replicated write stems the tree only when the path it sends is longer than
    ``revs_limit`` (the height test of ``apply_replicated`` made of the path's length):
    short paths that lengthen a branch never stem it."""

    calls = ("bulk_docs",)
    swaps = ((shard_module, "apply_replicated", "replicated"),)
    replicated = staticmethod(
        slipped(apply_replicated, "and work.height > revs_limit:", "and len(path) > revs_limit:")
    )


class ChangesSinceZeroStringIsNow(Wrapper):
    """``changes(since="0")`` (CouchDB's HTTP spelling of 0) is read as ``"now"``."""

    def changes(self, since: Any = 0, limit: Any = None, include_docs: Any = False) -> Any:
        if type(since) is str and since == "0":
            since = "now"
        return self.inner.changes(since, limit, include_docs)


class RecreateAttRevposOne(_Swapping):
    """A document recreated over a tombstone gives its inline attachments revpos 1, as
    CouchDB does (SEMANTICS.md §18 differs: the new revision's position)."""

    calls = ("put", "bulk_docs")
    swaps = ((shard_module, "apply_edit", "edit"),)
    edit = staticmethod(
        slipped(
            apply_edit,
            "position = 1 if parent is None else rev_pos(parent) + 1",
            "position = 1 if parent is None or (info is not None and info.deleted) "
            "else rev_pos(parent) + 1",
        )
    )


class ReplicatedRevposZero(_Swapping):
    """A replicated inline attachment sent without revpos gets 0, as CouchDB gives it
    (SEMANTICS.md §18 differs: the revision's position)."""

    calls = ("bulk_docs",)
    swaps = ((shard_module, "apply_replicated", "replicated"),)
    replicated = staticmethod(
        slipped(apply_replicated, "rev_pos(leaf), new_edits=False", "0, new_edits=False")
    )


#: name -> (class, what it breaks).
ESCAPES: dict[str, tuple[type, str]] = {
    "edit_of_deleted_leaf_conflicts": (
        EditOfDeletedLeafConflicts,
        "an edit of a deleted losing leaf conflicts",
    ),
    "recreate_on_first_tombstone": (RecreateOnFirstTombstone, "recreation ignores the tie-break"),
    "replicated_stem_by_path_length": (
        ReplicatedStemByPathLength,
        "short replicated paths never stem",
    ),
    "changes_since_zero_string_is_now": (ChangesSinceZeroStringIsNow, 'since="0" read as now'),
    "recreate_att_revpos_one": (RecreateAttRevposOne, "a recreation's attachments get revpos 1"),
    "replicated_revpos_zero": (ReplicatedRevposZero, "replicated attachments get revpos 0"),
}

"""Sixth mutation round: slips that escaped the whole proof, in the areas the earlier
rounds covered thinly (revs_diff, purge, attachments' ``atts_since`` and stubs,
replicated merges and stemming, ``changes(include_docs)``, ``keys=`` lookups).

Twenty-four candidates, each one slip in the engine's own source (``slipped``), were
run against ``settee verify --only semantics``, then those that passed against one
minute of ``--only equivalence,interleavings,stress``. These three passed both; each
now fails the check named for it in ``stateful_tests/test_mutants.py``
(``ROUND6_SEMANTIC``, ``ROUND6_SCHEDULED``). The twenty-one caught as the proof stood,
and by what:

* the semantic suite: ``possible_ancestors`` without deleted leaves, or below the
  lowest missing revision; a purge reporting an ancestor it was named, keeping the
  ancestors no leaf is left on, listing its leaves in winner order or a leaf named
  twice twice; ``changes(include_docs)`` docs of tombstones without ``_deleted``, or
  without their stubs; ``last_seq`` past the list when ``limit`` cut it exactly;
  ``atts_since`` counting revisions of other branches, or honoured only with
  ``attachments=True``; ``_revisions`` of the winner for ``get(rev=R)``; replicated
  stubs from the oldest stored ancestor; replicated revpos ignored; a stub's revpos
  unchecked; a merge going on past a revision of another parent; compaction not
  stemming; ``attachment(rev=R)`` of the winner;
* the equivalence machine (within 35 s): a known root never re-attached to the parent
  a replicated path names, ``keys=`` documents without their stubs, a replicated
  call's later entry of an id losing the earlier one, ``revs_diff`` listing a missing
  revision given twice twice, ``all_docs(keys=..., limit=0)`` answering every key.
"""

from __future__ import annotations

from typing import Any

from settee import database, docinfo
from settee import shard as shard_module
from settee.database import Database
from settee.proof.stateful.mutants import Wrapper
from settee.proof.stateful.mutants.internals import _Swapping, slipped
from settee.spec import attachments

__all__ = ["ROUND6"]


class AttsSinceOldestOnPath(_Swapping):
    """``atts_since`` takes the oldest revision it names on the path read, not the
    newest: the walk of ``since_position`` starts from the root."""

    calls = ("get",)
    swaps = ((database, "since_position", "since"),)  # imported there by name
    since = staticmethod(
        slipped(
            attachments.since_position,
            "for ancestor in path_to_root(tree, rev):",
            "for ancestor in reversed(path_to_root(tree, rev)):",
        )
    )


class ReplicatedHeightOneShort(_Swapping):
    """A replicated path hanging new revisions above a known one counts the branch's
    height one short (``apply_replicated``), so the write that takes the branch one
    past ``revs_limit`` is not stemmed; the next write stems it."""

    calls = ("bulk_docs",)
    swaps = ((shard_module, "apply_replicated", "replicated"),)  # imported there by name
    replicated = staticmethod(
        slipped(
            docinfo.apply_replicated,
            "above = _depth(work.tree, path[known[0]]) if known else 0",
            "above = _depth(work.tree, path[known[0]]) - 1 if known else 0",
        )
    )


_revs_diff_per_id = slipped(
    Database.revs_diff,
    "info = snaps[shard_of(doc_id, len(snaps))].doc_info(doc_id)",
    "info = self._shard(doc_id).current().doc_info(doc_id)",
)


class RevsDiffPerIdSnapshot(Wrapper):
    """``revs_diff`` looks each id up in its shard's newest snapshot, not in the
    snapshots pinned for the call: ids of two shards are read at two instants."""

    def revs_diff(self, *args: Any, **kwargs: Any) -> Any:
        return _revs_diff_per_id(self.inner, *args, **kwargs)


#: name -> (class, what it breaks).
ROUND6: dict[str, tuple[type, str]] = {
    "atts_since_oldest_on_path": (AttsSinceOldestOnPath, "atts_since takes the oldest named"),
    "replicated_height_one_short": (
        ReplicatedHeightOneShort,
        "a replicated branch is stemmed a write late",
    ),
    "revs_diff_per_id_snapshot": (RevsDiffPerIdSnapshot, "revs_diff reads ids at two instants"),
}

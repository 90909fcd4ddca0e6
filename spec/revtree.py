"""Revision trees as plain dicts, and the CouchDB rules that read and grow them.

A tree maps every known revision of one document to ``[parent, deleted]``:
``parent`` is the revision it was derived from (``None`` for a root: the
document's first revision, or the oldest one kept after stemming) and
``deleted`` says whether that revision is a tombstone (it only matters for
leaves). Positions always grow by one from parent to child. Every function
here is pure: it never mutates the tree it is given, and returns fresh dicts.

This is ``couch_key_tree`` flattened. The flat form cannot hold the same
revision twice under two different parents (CouchDB's nested form can, when
a replicator sends such paths); :func:`merge_path` keeps the parent it saw
first, which only differs from CouchDB for hand-made revision ids.

Winner order (``couch_doc:to_doc_info/1``): leaves sorted by
``(not deleted, position, hash)``, largest first. The winner is the first:
the live leaf with the highest position, ties broken by the larger hash
(equivalently, the larger rev string); when every leaf is a tombstone, the
tombstone chosen the same way.
"""

from __future__ import annotations

import itertools

from settee.spec.revs import is_valid_rev, parse_rev

__all__ = [
    "RevTree",
    "conflicts",
    "deleted_conflicts",
    "height",
    "is_deleted",
    "is_leaf",
    "is_valid_path",
    "is_valid_tree",
    "leaves",
    "merge_path",
    "merge_path_into",
    "path_to_root",
    "purge",
    "revisions",
    "stem",
    "winner",
]

RevTree = dict[str, list]
"""rev -> [parent rev | None, deleted: bool]"""


def is_valid_tree(tree: RevTree) -> bool:
    """True when ``tree`` has the shape every function here relies on.

    Every key is a valid rev; every value is ``[parent, deleted]`` with
    ``deleted`` a bool and ``parent`` either None or a key of the tree whose
    position is one less.
    """
    for rev, node in tree.items():
        if not is_valid_rev(rev) or not isinstance(node, list) or len(node) != 2:
            return False
        parent, deleted = node
        if not isinstance(deleted, bool):
            return False
        if parent is not None and (
            parent not in tree or parse_rev(parent)[0] + 1 != parse_rev(rev)[0]
        ):
            return False
    return True


def is_valid_path(path: list[str]) -> bool:
    """True when ``path`` is a non-empty list of revs, newest first, whose
    positions drop by exactly one at each step and which repeats no rev."""
    if not path or not all(is_valid_rev(rev) for rev in path):
        return False
    positions = [parse_rev(rev)[0] for rev in path]
    steps_ok = all(a == b + 1 for a, b in itertools.pairwise(positions))
    return steps_ok and len(set(path)) == len(path)


def _child_count(tree: RevTree) -> dict[str, int]:
    counts = dict.fromkeys(tree, 0)
    for parent, _deleted in tree.values():
        if parent is not None:
            counts[parent] += 1
    return counts


def is_leaf(tree: RevTree, rev: str) -> bool:
    """True when ``rev`` is in the tree and no revision has it as parent.

    pre: is_valid_tree(tree)
    post: __return__ == (rev in leaves(tree))
    """
    return rev in tree and all(parent != rev for parent, _deleted in tree.values())


def _winner_key(tree: RevTree, rev: str) -> tuple[bool, int, str]:
    # A tree's revisions were checked when they were written (is_valid_tree), so
    # reads split them without parse_rev's validation: this runs on every read.
    pos, _, hash_ = rev.partition("-")
    return (not tree[rev][1], int(pos), hash_)


def leaves(tree: RevTree) -> list[str]:
    """Every leaf, in winner order (winner first).

    pre: is_valid_tree(tree)
    post: len(__return__) == len(set(__return__))
    post: all(r in tree for r in __return__)
    post: (len(__return__) > 0) == (len(tree) > 0)
    """
    if len(tree) == 1:  # most documents: one revision, its own leaf
        return list(tree)
    counts = _child_count(tree)
    found = [rev for rev, n in counts.items() if n == 0]
    return sorted(found, key=lambda rev: _winner_key(tree, rev), reverse=True)


def winner(tree: RevTree) -> str:
    """The winning revision: the live leaf with the highest position, ties to
    the larger rev string; if every leaf is deleted, the tombstone chosen the
    same way.

    pre: is_valid_tree(tree) and len(tree) > 0
    post: is_leaf(tree, __return__)
    post: not tree[__return__][1] or all(tree[r][1] for r in leaves(tree))
    """
    if len(tree) == 1:
        return next(iter(tree))
    counts = _child_count(tree)
    found = (rev for rev, n in counts.items() if n == 0)
    return max(found, key=lambda rev: _winner_key(tree, rev))


def is_deleted(tree: RevTree) -> bool:
    """True when the document is deleted: its winner (so every leaf) is a
    tombstone.

    pre: is_valid_tree(tree) and len(tree) > 0
    post: __return__ == all(tree[r][1] for r in leaves(tree))
    """
    return tree[winner(tree)][1]


def conflicts(tree: RevTree) -> list[str]:
    """Live leaves other than the winner, in winner order (``_conflicts``).

    pre: is_valid_tree(tree) and len(tree) > 0
    post: all(not tree[r][1] and is_leaf(tree, r) for r in __return__)
    post: winner(tree) not in __return__
    """
    win = winner(tree)
    return [rev for rev in leaves(tree) if rev != win and not tree[rev][1]]


def deleted_conflicts(tree: RevTree) -> list[str]:
    """Deleted leaves other than the winner, in winner order
    (``_deleted_conflicts``).

    pre: is_valid_tree(tree) and len(tree) > 0
    post: all(tree[r][1] and is_leaf(tree, r) for r in __return__)
    post: winner(tree) not in __return__
    """
    win = winner(tree)
    return [rev for rev in leaves(tree) if rev != win and tree[rev][1]]


def path_to_root(tree: RevTree, rev: str) -> list[str]:
    """``rev`` and its ancestors, newest first, up to the (possibly stemmed)
    root.

    pre: is_valid_tree(tree) and rev in tree
    post: __return__[0] == rev
    post: tree[__return__[-1]][0] is None
    post: is_valid_path(__return__)
    """
    path = [rev]
    parent = tree[rev][0]
    while parent is not None:
        path.append(parent)
        parent = tree[parent][0]
    return path


def revisions(tree: RevTree, rev: str, limit: int | None = None) -> dict[str, object]:
    """The ``_revisions`` value of ``rev``: ``{"start": pos, "ids": hashes}``,
    hashes newest first, as far back as the tree remembers and at most ``limit``
    of them (a read cuts the path to the database's revs_limit, as CouchDB's
    couch_db:make_doc does, so a lowered limit shows before stemming catches up).

    pre: is_valid_tree(tree) and rev in tree
    pre: limit is None or limit >= 1
    post: __return__["start"] == parse_rev(rev)[0]
    post: len(__return__["ids"]) == min(len(path_to_root(tree, rev)), limit or len(tree))
    """
    path = path_to_root(tree, rev)[:limit]
    return {"start": parse_rev(rev)[0], "ids": [parse_rev(r)[1] for r in path]}


def merge_path(tree: RevTree, path: list[str], leaf_deleted: bool) -> tuple[RevTree, bool]:
    """Merge one revision path (newest first) into ``tree``.

    Revisions the tree lacks are added, each with the next older path entry
    as parent; ``path[0]`` gets ``leaf_deleted``, older new entries are
    ancestors whose deleted flag never matters. A known *root* whose parent
    the path names is re-attached to it: the path restores history stemming
    dropped, as CouchDB's merge does. A known revision whose parent differs
    from the path's stops the merge (the tree's ancestry wins). Returns
    ``(new_tree, changed)``.

    pre: is_valid_tree(tree) and is_valid_path(path)
    post: all(r in __return__[0] for r in path)
    post: all(r in __return__[0] for r in tree)
    post: all(tree[r][0] is None or __return__[0][r][0] == tree[r][0] for r in tree)
    post: all(__return__[0][r][1] == tree[r][1] for r in tree)
    post: __return__[1] == (__return__[0] != tree)
    post: is_valid_tree(__return__[0])
    """
    new = {rev: [parent, deleted] for rev, (parent, deleted) in tree.items()}
    return new, merge_path_into(new, path, leaf_deleted)


def merge_path_into(tree: RevTree, path: list[str], leaf_deleted: bool) -> bool:
    """``merge_path`` in place: ``tree`` (whose entries the caller owns) becomes the
    merged tree; returns whether it changed. The engine's writer merges the many
    paths of one document in a replicated batch so, each in time proportional to
    the path rather than to the tree (found: 2,000 conflicting revisions of one
    document in one ``_bulk_docs`` took 16 s, each copying the tree)."""
    changed = False
    for i, rev in enumerate(path):
        parent = path[i + 1] if i + 1 < len(path) else None
        entry = tree.get(rev)
        if entry is None:
            tree[rev] = [parent, bool(leaf_deleted) if i == 0 else False]
            changed = True
        elif entry[0] is None:
            if parent is not None:
                entry[0] = parent
                changed = True
        elif entry[0] != parent:
            break
    return changed


def height(tree: RevTree) -> int:
    """The number of revisions on the tree's longest root-to-leaf path (0 when
    empty): ``stem(tree, limit)`` is ``tree`` itself when it is at most ``limit``
    (tests/test_spec.py checks both against ``path_to_root``)."""
    depth: dict[str, int] = {}
    for rev in tree:
        chain = []
        current: str | None = rev
        while current is not None and current not in depth:
            chain.append(current)
            current = tree[current][0]
        known = 0 if current is None else depth[current]
        for seen in reversed(chain):
            known += 1
            depth[seen] = known
    return max(depth.values(), default=0)


def stem(tree: RevTree, limit: int) -> RevTree:
    """Keep only revisions fewer than ``limit`` steps above some leaf; a kept
    revision whose parent was dropped becomes a root. This is CouchDB 3.x's
    ``couch_key_tree:stem`` (a revision stays attached to a kept parent), so
    in a branched tree a leaf's path can be longer than ``limit`` when its
    upper part is kept for a nearer leaf.

    pre: is_valid_tree(tree) and limit >= 1
    post: is_valid_tree(__return__)
    post: set(leaves(__return__)) == set(leaves(tree))
    post: all(any(r in path_to_root(tree, x)[:limit] for x in leaves(tree)) for r in __return__)
    post: all(r in __return__ for r in leaves(tree) for r in path_to_root(tree, r)[:limit])
    post: len(tree) > limit or __return__ == tree
    """
    keep: set[str] = set()
    for leaf in leaves(tree):
        rev: str | None = leaf
        for _ in range(limit):
            if rev is None:
                break
            keep.add(rev)
            rev = tree[rev][0]
    return {
        rev: [parent if parent in keep else None, deleted]
        for rev, (parent, deleted) in tree.items()
        if rev in keep
    }


def purge(tree: RevTree, revs: list[str]) -> tuple[RevTree, list[str]]:
    """Remove the leaves of ``revs`` and every revision no remaining leaf descends
    from: CouchDB's ``couch_key_tree:remove_leafs``. A revision of ``revs`` that is
    not a leaf of ``tree`` (an ancestor, or unknown) is ignored. Returns ``(new_tree,
    purged)``, ``purged`` the leaves removed, in the order ``revs`` first names them;
    an empty ``new_tree`` means every leaf was purged (the document is gone).

    pre: is_valid_tree(tree)
    post: is_valid_tree(__return__[0])
    post: set(leaves(__return__[0])) == set(leaves(tree)) - set(__return__[1])
    post: all(r in revs and is_leaf(tree, r) for r in __return__[1])
    post: len(__return__[1]) == len(set(__return__[1]))
    post: all(__return__[0][r] == tree[r] for r in __return__[0])
    post: __return__[1] or __return__[0] == tree
    """
    leaf_set = set(leaves(tree))
    purged = [rev for rev in dict.fromkeys(revs) if rev in leaf_set]
    if not purged:
        return {rev: [parent, deleted] for rev, (parent, deleted) in tree.items()}, []
    keep: set[str] = set()
    for leaf in leaf_set.difference(purged):
        keep.update(path_to_root(tree, leaf))
    new = {rev: [parent, deleted] for rev, (parent, deleted) in tree.items() if rev in keep}
    return new, purged

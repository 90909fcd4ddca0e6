"""The one B+tree checker: walks every node of a tree and reports problems.

Used by the btree tests as a state-machine invariant and by ``settee check``.
It reads straight from the store (never the node cache), so it sees what is
on disk, and it recomputes every reduction with the tree's own functions.
Problems come out as ``"path:pos: what"`` strings; an empty result means the
tree is sound.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

from settee.btree import KP_NODE, KV_NODE, BTree
from settee.spec.errors import SetteeError

__all__ = ["MAX_CHECK_DEPTH", "check_tree"]

# Far beyond any real tree (a 4 KiB fan-out of even 2 reaches 2**64 keys); a
# deeper walk means a pointer loop or garbage.
MAX_CHECK_DEPTH = 64


@dataclass(slots=True)
class _Walk:
    tree: BTree
    path: str
    problems: list[str] = field(default_factory=list)
    leaf_depths: set[int] = field(default_factory=set)
    key_type: type | None = None
    last_key: Any = None  # largest key seen so far, across nodes (in-order walk)
    #: Only nodes at or after this position are read (strict mode: one commit's nodes).
    since: int = 0
    #: (depth, is leaf) of each older child a partial walk skipped.
    skipped: list[tuple[int, bool]] = field(default_factory=list)

    def problem(self, pos: Any, what: str) -> None:
        self.problems.append(f"{self.path}:{pos}: {what}")


def _same(a: Any, b: Any) -> bool:
    # Stored reductions went through msgpack (tuples became lists), so compare
    # encodings when plain equality says no.
    if a == b:
        return True
    try:
        return bool(msgpack.packb(a) == msgpack.packb(b))
    except (TypeError, ValueError):
        return False


def check_tree(tree: BTree, *, since: int = 0) -> Iterator[str]:
    """Yield every problem found in ``tree`` as ``"path:pos: what"``.

    Checks: node shape, key type, strict key order inside and across nodes,
    each kp ``last_key`` equals its child's largest key, encoded node size
    within ``tree.node_bytes`` (a leaf of one entry or an inner node of two
    may exceed it), all leaves at one depth, child positions below their parent's
    (append-only), and every stored reduction equal to a recount.

    ``since``: check only the nodes at positions ``>= since`` — what one commit
    wrote, when it started at file offset ``since`` (strict mode). Older children
    are trusted for their contents (an earlier check saw them) but still checked
    for their place: key order against their neighbours, and their level.
    """
    walk = _Walk(tree, str(getattr(tree.store, "path", "<memory>")), since=since)
    root = tree.root
    if root is not None and root[0] >= since:
        red = _check_node(walk, root[0], None, 1, "root")
        if red is not None and not _same(red[1], root[1]):
            walk.problem(root[0], f"root reduction {root[1]!r} != recomputed {red[1]!r}")
        _check_levels(walk, root[0])
    yield from walk.problems


def _check_levels(walk: _Walk, root: int) -> None:
    if len(walk.leaf_depths) > 1:
        walk.problem(root, f"leaves at different depths {sorted(walk.leaf_depths)}")
    if len(walk.leaf_depths) != 1:
        return
    [leaf_depth] = walk.leaf_depths
    for depth, is_leaf in walk.skipped:
        if is_leaf != (depth == leaf_depth):
            kind = "leaf" if is_leaf else "inner node"
            walk.problem(
                root, f"an older {kind} hangs at depth {depth}, leaves are at {leaf_depth}"
            )


def _read(walk: _Walk, pos: Any, where: str) -> tuple[str, list[Any]] | None:
    if type(pos) is not int:
        walk.problem(pos, f"{where}: node pointer is not an int")
        return None
    try:
        raw = walk.tree.store.read_node(pos)[0]
    except SetteeError as exc:
        walk.problem(pos, f"{where}: unreadable node: {exc}")
        return None
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        walk.problem(pos, f"{where}: term is not a [kind, entries] node")
        return None
    kind, entries = raw
    if kind not in (KV_NODE, KP_NODE) or not isinstance(entries, list | tuple):
        walk.problem(pos, f"{where}: bad node kind {kind!r} or entry list")
        return None
    if not entries:
        walk.problem(pos, f"{where}: empty node")
        return None
    width = 2 if kind == KV_NODE else 3
    if any(not isinstance(e, list | tuple) or len(e) != width for e in entries):
        walk.problem(pos, f"{where}: {kind} entries must be {width}-element lists")
        return None
    size = len(msgpack.packb(raw))
    oversize_ok = len(entries) <= (2 if kind == KP_NODE else 1)
    if size > walk.tree.node_bytes and not oversize_ok:
        walk.problem(pos, f"{where}: node is {size} bytes > {walk.tree.node_bytes}")
    return kind, list(entries)


def _check_keys(walk: _Walk, pos: int, where: str, entries: list[Any]) -> bool:
    for e in entries:
        key = e[0]
        if walk.key_type is None and type(key) in (str, int):
            walk.key_type = type(key)
        if type(key) is not walk.key_type:
            walk.problem(pos, f"{where}: key {key!r} is not {walk.key_type}")
            return False
        if walk.last_key is not None and not walk.last_key < key:
            walk.problem(pos, f"{where}: key {key!r} not above previous key {walk.last_key!r}")
            return False
        walk.last_key = key
    return True


def _check_node(walk: _Walk, pos: Any, parent: int | None, depth: int, where: str) -> Any:
    """Check the subtree at ``pos``; return ``(max_key, reduction)`` or None."""
    if depth > MAX_CHECK_DEPTH:
        walk.problem(pos, f"{where}: deeper than {MAX_CHECK_DEPTH} levels")
        return None
    if parent is not None and type(pos) is int and pos >= parent:
        # Children are appended before their parent; anything else is a loop or garbage.
        walk.problem(pos, f"{where}: child position not below parent {parent}")
        return None
    node = _read(walk, pos, where)
    if node is None:
        return None
    kind, entries = node
    if kind == KV_NODE:
        walk.leaf_depths.add(depth)
        if not _check_keys(walk, pos, where, entries):
            return None
        red = _recount(walk, pos, where, walk.tree.reduce_fun, entries)
        return None if red is _UNCOUNTABLE else (entries[-1][0], red)
    reds: list[Any] | None = []
    for i, (key, child, stored) in enumerate(entries):
        if type(child) is int and child < walk.since:
            sub = _skip_older(walk, child, key, stored, depth + 1, f"{where}/{i}")
        else:
            sub = _check_node(walk, child, pos, depth + 1, f"{where}/{i}")
        if sub is None:
            reds = None  # keep checking siblings, but no recount is possible
            continue
        child_max, red = sub
        if child_max != key:
            walk.problem(pos, f"{where}/{i}: kp key {key!r} != child max key {child_max!r}")
        if not _same(stored, red):
            walk.problem(pos, f"{where}/{i}: stored reduction {stored!r} != recomputed {red!r}")
        if reds is not None:
            reds.append(red)
    if reds is None:
        return None
    red = _recount(walk, pos, where, walk.tree.rereduce_fun, reds)
    return None if red is _UNCOUNTABLE else (entries[-1][0], red)


#: What ``_recount`` returns for values the tree's functions cannot reduce.
_UNCOUNTABLE = object()


def _recount(walk: _Walk, pos: int, where: str, fun: Any, items: list[Any]) -> Any:
    """``fun(items)``, the tree's reduce or rereduce, or ``_UNCOUNTABLE`` with a
    problem when the stored values are not of the shape it sums: settee check
    reads by_id leaves unchecked to name each malformed document, and a value
    without a summable ``active`` field made the check die with a raw IndexError
    or TypeError (found probing crc-valid headers whose roots were swapped)."""
    try:
        return fun(items)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        walk.problem(pos, f"{where}: values that cannot be reduced ({exc})")
        return _UNCOUNTABLE


def _skip_older(walk: _Walk, pos: int, key: Any, stored: Any, depth: int, where: str) -> Any:
    """An older child of a node being checked: trust its subtree, check its place."""
    try:
        is_kp, keys, _entries = walk.tree.node(pos)
    except SetteeError as exc:
        walk.problem(pos, f"{where}: unreadable node: {exc}")
        return None
    if not keys or keys[-1] != key:
        walk.problem(pos, f"{where}: kp key {key!r} != older child's max key")
        return None
    ordered = walk.last_key is None or type(keys[0]) is not type(walk.last_key)
    if not ordered and not walk.last_key < keys[0]:
        walk.problem(
            pos, f"{where}: older child starts at {keys[0]!r}, at or below {walk.last_key!r}"
        )
    walk.last_key = key
    walk.skipped.append((depth, not is_kp))
    return key, stored

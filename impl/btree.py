"""Append-only copy-on-write B+tree, after CouchDB's ``couch_btree``.

A tree is an immutable value: a root pointer into a node store plus the
caller's reduce functions. ``modify`` applies a sorted batch of inserts and
removes in one pass down the tree, appends every rewritten node to a batch
(children before parents) and returns a new ``BTree``; subtrees the batch does
not touch keep their positions, so old roots stay readable (MVCC for free).

Nodes, as stored (msgpack):

* leaf: ``["kv", [[key, value], ...]]``
* inner: ``["kp", [[last_key, child_pos, child_reduction], ...]]`` where
  ``last_key`` is the largest key in the child's subtree.

Nodes are read with arrays as tuples (``NodeStore.read_node``) and the writer
builds its entries as tuples too, so a cached node is immutable all the way
down and, holding only tuples and atoms, untracked by the cyclic collector: a
cache of a million entries costs a full collection nothing.

Entries are sorted by key, strictly ascending. A node's encoded size stays at
or under ``node_bytes`` unless it is a leaf of a single entry (an oversized
entry sits alone) or an inner node of two entries (inner nodes keep a fan-out
of at least 2, so that huge keys cannot make a tree grow without bound). Like
CouchDB we never merge under-full nodes on removal; a child that becomes empty
is dropped, and compaction rebuilds. A node that overflows splits into nodes of
equal size, as couch_btree's chunkify does, except the last node of its level:
it leaves the nodes before it ``FILL_FACTOR`` full, since keys that only grow
(by_seq's, growing ids) never come back to them.

A root is ``[pos, reduction]`` (or ``None`` for the empty tree); it is what
shard headers store.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, Protocol

import msgpack

from settee.cache import ClockCache
from settee.spec.errors import CorruptionError, SetteeError
from settee.spec.format import as_root

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "KP_NODE",
    "KV_NODE",
    "MAX_NODE_BYTES",
    "BTree",
    "CheckLeaf",
    "Difference",
    "Entry",
    "Key",
    "Node",
    "NodeCache",
    "NodeStore",
    "Tally",
    "TermBatch",
    "decode_node",
]

KV_NODE = "kv"
KP_NODE = "kp"
# Upper bound on a node's msgpack-encoded size: one 4 KiB block, like CouchDB's
# default btree_chunk_size. Not a format constant: readers never depend on it.
MAX_NODE_BYTES = 4096
#: Default node cache of one store, in encoded bytes (see ``NodeCache``).
DEFAULT_CACHE_BYTES = 4 << 20
#: Payloads of written nodes a cache keeps for splicing: a commit rewrites a path per
#: tree (by_id and by_seq, 3-4 levels each at a million documents), twice that for a
#: commit that reaches two subtrees; more rarely pay.
RECENT_PAYLOADS = 32
#: Old entries after the unchanged prefix a splice re-encodes at most (to measure the
#: bytes it drops); past that, encoding the node whole costs no more.
SPLICE_MAX_TAIL = 8
# fixarray(2) + fixstr "kv"/"kp" + the largest (array32) header of the entry list.
_NODE_OVERHEAD = 1 + 3 + 5

Key = str | int
# Decoded node as kept in the cache: (is_kp, keys, entries), all tuples. The
# separate key tuple lets bisect run in C without a key function.
Entry = tuple[Any, ...]
Node = tuple[bool, Sequence[Any], Sequence[Entry]]
# What leaf iteration yields: a leaf's keys, its entries, and a start/stop index.
_Leaf = tuple[Sequence[Any], Sequence[Entry], int, Any]


class Tally:
    """What ``fold_chunks`` counts on its way down to ``start``, for a caller that
    needs both the rows from ``start`` and how many come before it in fold order
    (``_all_docs``: its rows and its ``offset``): ``count(reduction)`` of every
    subtree wholly before ``start`` plus ``count_leaf(entries, i, reduction)`` of
    the leaf it falls in, as ``count_before`` counts (descending: the entries above
    ``start``). ``value`` is None until the fold has produced its first chunk; a
    separate ``count_before`` walked the same nodes again, a tenth of a range read.
    """

    __slots__ = ("count", "count_leaf", "value")

    def __init__(
        self, count: Callable[[Any], int], count_leaf: Callable[[Sequence[Entry], int, Any], int]
    ) -> None:
        self.count = count
        self.count_leaf = count_leaf
        self.value: int | None = None


Reduce = Callable[[Sequence[Sequence[Any]]], Any]
Rereduce = Callable[[list[Any]], Any]
Difference = Callable[[Any, Any], Any]
#: Raises CorruptionError for a leaf's entries read at (path, pos) that readers cannot use.
CheckLeaf = Callable[[Sequence[Entry], str, int], None]

#: A reduction ``_Modify`` has not derived (reductions may be any value, None too).
_UNKNOWN: Any = object()

_REMOVE = object()
# A node's encoding up to its entry list's array header: fixarray(2) + the kind.
_NODE_PREFIX = {kind: b"\x92" + msgpack.packb(kind) for kind in (KV_NODE, KP_NODE)}


class NodeStore(Protocol):
    """Where nodes live: ``ShardFile`` fits, so does a list in tests."""

    def read_node(self, pos: int) -> tuple[Any, int]:
        """The node term at ``pos`` (arrays decoded as tuples) and its encoded size."""
        ...


class TermBatch(Protocol):
    """Terms to append in one write; ``add`` returns the term's future position."""

    def add(self, obj: Any) -> int: ...


def decode_node(
    raw: Any,
    path: str,
    pos: int,
    check_leaf: CheckLeaf | None = None,
    key_type: type | None = None,
) -> Node:
    """Turn a stored node term into ``(is_kp, keys, entries)``.

    Raises CorruptionError when the term is not a node: a checksummed frame can
    still hold the wrong thing if a pointer is wrong. The entries' shapes are
    checked here, once per node read, so that no walk meets a short entry (a raw
    IndexError) or a child at or after its parent: children are appended before
    their parent (FORMAT.md), and a pointer that is not below its node is a loop
    a descent would never leave. ``check_leaf(entries, path, pos)``, when given,
    raises CorruptionError for a leaf whose values its readers could not index
    unchecked. ``key_type``, when given, is the type of every key of the tree: a
    node of another tree (a by_id node where by_seq's root points) would otherwise
    meet the descent's comparisons as a raw TypeError.
    """
    try:
        kind, entries = raw
        keys = tuple([e[0] for e in entries])
    except (TypeError, ValueError, IndexError, KeyError):
        raise CorruptionError(path, pos, "term is not a btree node") from None
    if key_type is not None and any(type(k) is not key_type for k in keys):
        what = f"a key is not {key_type.__name__}: the node is not one of this tree's"
        raise CorruptionError(path, pos, what)
    if kind == KV_NODE:
        if any(len(e) != 2 for e in entries):
            raise CorruptionError(path, pos, "a leaf entry is not [key, value]")
        if check_leaf is not None:
            check_leaf(entries, path, pos)
        return False, keys, entries
    if kind == KP_NODE:
        for e in entries:
            if len(e) != 3 or type(e[1]) is not int or not 0 < e[1] < pos:
                what = f"inner entry {e!r} is not [last_key, child position below {pos}, reduction]"
                raise CorruptionError(path, pos, what)
        return True, keys, entries
    raise CorruptionError(path, pos, f"unknown btree node kind {kind!r}")


class NodeCache(ClockCache):
    """Decoded nodes keyed by position, bounded in bytes, shared by readers
    (``ClockCache``: lock-free hits, CLOCK eviction).

    A node costs what it occupies in the file (its encoded size); decoded, as
    tuples of atoms, it takes about three times that in memory. One cache
    serves one store only (positions are per file).
    """

    def __init__(self, capacity_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        super().__init__(capacity_bytes)
        self._totals: dict[int, tuple[Callable[[Any], int], list[int]]] = {}
        #: Encoded payloads of the nodes the last few commits wrote (oldest first), so
        #: the next commit can rewrite them by splicing instead of encoding every entry
        #: again (``_Modify.spliced``); read by the writer alone, without the lock.
        self.payloads: dict[int, bytes] = {}

    def put_written(self, items: dict[int, tuple[Node, bytes]]) -> None:
        """Admit nodes a commit wrote, ``(node, payload)`` by position, each charged its
        payload's size. The payloads are kept apart from the capacity, the newest
        ``RECENT_PAYLOADS``."""
        with self._lock:
            payloads = self.payloads
            for pos, (node, payload) in items.items():
                self._add(pos, node, len(payload))
                payloads[pos] = payload
            while len(payloads) > RECENT_PAYLOADS:
                del payloads[next(iter(payloads))]
            self._evict()

    def _evicted(self, pos: int) -> None:
        self._totals.pop(pos, None)

    def running_totals(
        self, pos: int, entries: Sequence[Entry], count: Callable[[Any], int]
    ) -> list[int]:
        """``[0, c0, c0 + c1, ...]`` where ``ci`` is ``count`` of the reduction of the
        inner node at ``pos``'s entry ``i``; computed once per node, kept while the
        node stays cached (a node at a position never changes).
        Only inner nodes are summed, a few hundredths of the tree. A count other
        than the one kept (another caller's measure) is computed afresh.
        """
        kept = self._totals.get(pos)
        if kept is not None and kept[0] is count:
            return kept[1]
        totals = list(accumulate([count(e[2]) for e in entries], initial=0))
        if len(self._totals) > len(self._entries):
            self._totals.clear()  # kept for nodes evicted meanwhile (no lock here)
        self._totals[pos] = (count, totals)
        return totals

    def clear(self) -> None:
        """Forget everything (e.g. after the file was replaced by compaction)."""
        super().clear()
        self._totals.clear()
        with self._lock:
            self.payloads.clear()


def _check_root(root: Any) -> list[Any] | None:
    if root is None:
        return None
    if not isinstance(root, list | tuple) or len(root) != 2 or type(root[0]) is not int:
        raise ValueError(f"a btree root is [pos, reduction] or None, got {root!r}")
    # A header decodes the reduction with lists; nodes hold it as tuples.
    pos, reduction = as_root(root)  # type: ignore[misc]  # not None: checked above
    return [pos, reduction]


class BTree:
    """An immutable B+tree snapshot; ``modify`` returns a new one.

    ``reduce(kvs)`` maps a list of ``[key, value]`` pairs to a reduction and
    ``rereduce(reductions)`` combines reductions; both must be deterministic
    and msgpack-able (they are stored in inner nodes). ``difference(a, b)``,
    when given, undoes a rereduce: ``difference(rereduce([x, y]), y) == x``
    (reductions that are sums). ``modify`` then derives a rewritten inner
    node's reduction from its old one and the children it replaced instead of
    rereducing every child (at ~150 children, a tenth of a by_id modify of 25
    keys). A stored reduction that is wrong then stays wrong in the rewritten
    node (a full rereduce healed one below it); ``settee check`` and strict mode
    recompute every reduction. Values returned by
    reads are shared with the node cache. Give values and reductions in the
    form a node read decodes them to (tuples, not lists, all the way down): a
    read may return the object given to ``modify`` or the one decoded from the
    store.
    """

    __slots__ = (
        "_cache",
        "_check_leaf",
        "_difference",
        "_key_type",
        "_path",
        "_pending",
        "_reduce",
        "_rereduce",
        "_root",
        "_store",
        "node_bytes",
    )

    def __init__(
        self,
        store: NodeStore,
        root: Any,
        *,
        reduce: Reduce,
        rereduce: Rereduce,
        difference: Difference | None = None,
        cache: NodeCache | None = None,
        node_bytes: int = MAX_NODE_BYTES,
        check_leaf: CheckLeaf | None = None,
        key_type: type | None = None,
    ) -> None:
        if node_bytes <= _NODE_OVERHEAD:
            raise ValueError(f"node_bytes must exceed {_NODE_OVERHEAD}, got {node_bytes}")
        self._store = store
        self._root = _check_root(root)
        self._reduce = reduce
        self._rereduce = rereduce
        self._difference = difference
        self._cache = NodeCache() if cache is None else cache
        # Nodes this tree's modify wrote (with their payloads), kept until the tree is
        # first read; see node().
        self._pending: dict[int, tuple[Node, bytes]] | None = None
        self._path = str(getattr(store, "path", "<memory>"))
        self.node_bytes = node_bytes
        # Checks every leaf read from the store (decode_node), so that readers index
        # stored values without checking each one on every read. Leaves this
        # process's modify wrote are not checked: their values are the caller's.
        self._check_leaf = check_leaf
        # The type of every key (decode_node checks each node read from the store).
        self._key_type = key_type

    # -- accessors -----------------------------------------------------------

    @property
    def root(self) -> list[Any] | None:
        """``[pos, reduction]`` or None; what a header stores to reopen the tree."""
        return None if self._root is None else list(self._root)

    @property
    def store(self) -> NodeStore:
        """The node store this tree reads from."""
        return self._store

    @property
    def cache(self) -> NodeCache:
        """The node cache (shared with trees derived by ``modify``)."""
        return self._cache

    @property
    def reduce_fun(self) -> Reduce:
        """The caller's reduce over ``[key, value]`` lists."""
        return self._reduce

    @property
    def rereduce_fun(self) -> Rereduce:
        """The caller's rereduce over child reductions."""
        return self._rereduce

    def _derive(self, root: list[Any] | None, pending: dict[int, tuple[Node, bytes]]) -> BTree:
        tree = BTree(
            self._store,
            root,
            reduce=self._reduce,
            rereduce=self._rereduce,
            difference=self._difference,
            cache=self._cache,
            node_bytes=self.node_bytes,
            check_leaf=self._check_leaf,
            key_type=self._key_type,
        )
        tree._pending = pending or None
        return tree

    def check_root_keys(self) -> None:
        """CorruptionError when the root node's keys are not this tree's type: the
        root names a node of another tree (a writer bug or a crafted header; found
        with real-file faults: by_seq rooted at by_id's root). ``decode_node`` checks
        each node a tree decodes, but the root may be in the shared cache, decoded
        by the other tree. A read that fails (damage, an I/O error) is left to the
        reads that need the node: this runs where a failure must not land, such as
        a compaction's switch to its new file (found by the I/O-error campaign)."""
        if self._root is None or self._key_type is None:
            return
        pos = self._root[0]
        cached = self._cache._entries.get(pos)
        try:
            # Not put in the cache: a read's first use of the root reads it as usual,
            # so what a read depends on stays visible to a tracer of its preads.
            keys = (cached[0] if cached is not None else self._read_uncached(pos))[1]
        except (SetteeError, OSError):
            return
        if keys and type(keys[0]) is not self._key_type:
            what = f"a key is not {self._key_type.__name__}: the node is not one of this tree's"
            raise CorruptionError(self._path, self._root[0], what)

    def _read_uncached(self, pos: int) -> Node:
        raw, _size = self._store.read_node(pos)
        return decode_node(raw, self._path, pos)

    def node(self, pos: int) -> Node:
        """The decoded node at ``pos`` (through the cache)."""
        pending = self._pending
        if pending is not None:
            # Reading this tree means its batch was written (a tree whose batch is
            # dropped must be dropped too), so the nodes it wrote may now enter the
            # shared cache: the next batch usually touches the same paths. They stay
            # out until then because a dropped batch's positions get reused.
            self._pending = None
            self._cache.put_written(pending)
        cache = self._cache
        # ClockCache.get, inline (its two C calls): every descent and walk comes here.
        cached = cache._entries.get(pos)
        if cached is not None:
            cache._referenced.add(pos)
            return cached[0]  # type: ignore[no-any-return]
        raw, size = self._store.read_node(pos)
        node = decode_node(raw, self._path, pos, self._check_leaf, self._key_type)
        cache.put(pos, node, size)
        return node

    def depth(self) -> int:
        """Levels from root to leaf (0 for the empty tree)."""
        if self._root is None:
            return 0
        depth, pos = 1, self._root[0]
        while True:
            is_kp, _, entries = self.node(pos)
            if not is_kp:
                return depth
            depth, pos = depth + 1, entries[0][1]

    # -- point reads -----------------------------------------------------------

    def get(self, key: Key) -> Any:
        """The value stored under ``key``, or None. Reads at most depth nodes."""
        return self.get_many((key,))[0]

    def get_many(self, wanted: Sequence[Key]) -> list[Any]:
        """``get`` of each key, in the order given: one descent per key, nodes read
        at most once per level (a 100-key multiget's keys share few nodes below
        the root; ``lookup``'s shared descent measured slower for them).

        The cache hit is inlined (``NodeCache.get``'s two C calls): a point read
        visits depth nodes, nearly always cached, and the two Python calls per
        level cost more than the bisect and the dict lookups together; so is the
        loop over the keys (a call per key was a tenth of a multiget)."""
        if self._root is None:
            return [None] * len(wanted)
        if self._pending is not None:
            self.node(self._root[0])  # admits the written batch to the cache
        cache = self._cache
        nodes = cache._entries
        refer = cache._referenced.add
        root = self._root[0]
        found: list[Any] = []
        for key in wanted:
            pos = root
            while True:
                cached = nodes.get(pos)
                if cached is None:
                    is_kp, keys, entries = self.node(pos)
                else:
                    refer(pos)
                    is_kp, keys, entries = cached[0]
                i = bisect_left(keys, key)
                if i == len(keys):
                    found.append(None)
                    break
                if not is_kp:
                    found.append(entries[i][1] if keys[i] == key else None)
                    break
                pos = entries[i][1]
        return found

    def lookup(self, keys: Iterable[Key]) -> list[Any]:
        """Values for ``keys`` (None where absent), in the order given.

        Sorted input is cheapest; each node on the union of paths is read once.
        """
        wanted = list(keys)
        found: dict[Key, Any] = {}
        if self._root is not None and wanted:
            ordered = sorted(set(wanted))
            self._lookup(self._root[0], ordered, 0, len(ordered), found)
        return [found.get(k) for k in wanted]

    def _lookup(self, pos: int, sk: list[Key], lo: int, hi: int, found: dict[Key, Any]) -> None:
        is_kp, keys, entries = self.node(pos)
        n = len(keys)
        if is_kp:
            c = 0
            while lo < hi:
                c = bisect_left(keys, sk[lo], c)
                if c == n:
                    return
                j = bisect_right(sk, keys[c], lo, hi)
                self._lookup(entries[c][1], sk, lo, j, found)
                lo, c = j, c + 1
            return
        p = 0
        for i in range(lo, hi):
            p = bisect_left(keys, sk[i], p)
            if p < n and keys[p] == sk[i]:
                found[sk[i]] = entries[p][1]

    # -- range reads -----------------------------------------------------------

    def fold(
        self,
        start: Key | None = None,
        end: Key | None = None,
        *,
        descending: bool = False,
        inclusive_end: bool = True,
    ) -> Iterator[tuple[Key, Any]]:
        """Iterate ``(key, value)`` pairs lazily, in CouchDB's convention.

        Ascending: ``start <= key <= end`` (``< end`` without inclusive_end).
        Descending: from ``start`` DOWN to ``end``, i.e. ``start >= key >= end``
        (``> end`` without inclusive_end). None means unbounded.
        """
        for chunk, _ in self.fold_chunks(
            start, end, descending=descending, inclusive_end=inclusive_end
        ):
            for e in chunk:
                yield e[0], e[1]

    def fold_chunks(
        self,
        start: Key | None = None,
        end: Key | None = None,
        *,
        descending: bool = False,
        inclusive_end: bool = True,
        tally: Tally | None = None,
    ) -> Iterator[tuple[Sequence[Entry], Any]]:
        """``fold``'s entries a leaf at a time: lists of ``[key, value]`` in fold
        order, each a new list (the entries themselves are shared with the cache),
        each with its whole leaf's stored reduction. A caller that filters or counts
        rows does it per list, not per generator step, and can skip a leaf's
        entries when the reduction says none of them would pass its filter.
        ``tally``, if given, counts what comes before ``start`` (``Tally``).
        """
        if self._root is None:
            if tally is not None:
                tally.value = 0
            return iter(())
        if descending:
            return self._chunks_rev(start, end, inclusive_end, tally)
        return self._chunks_fwd(start, end, inclusive_end, tally)

    def _chunks_fwd(
        self, start: Key | None, end: Key | None, incl: bool, tally: Tally | None
    ) -> Iterator[tuple[Sequence[Entry], Any]]:
        assert self._root is not None  # fold_chunks() handles the empty tree
        for keys, entries, i, red in self._leaves_fwd(self._root, start, end, tally):
            if end is None:
                yield entries[i:], red
                continue
            stop = bisect_right(keys, end) if incl else bisect_left(keys, end)
            yield entries[i:stop], red
            if stop < len(keys):
                return

    def _leaves_fwd(
        self, root: Any, start: Key | None, end: Key | None, tally: Tally | None = None
    ) -> Iterator[_Leaf]:
        """The leaves from the one ``start`` falls in onwards, each with the index of
        its first entry at or after ``start`` and its stored reduction; walked with
        an explicit path rather than nested generators, whose every step cost a
        frame per level. ``tally`` counts on the way down, as ``count_before``."""
        path: list[list[Any]] = []  # [keys, entries, child being walked] per inner node
        pos, red = root
        total = 0
        while True:
            is_kp, keys, entries = self.node(pos)
            i = 0 if start is None else bisect_left(keys, start)
            if tally is not None:
                if not is_kp:
                    tally.value, tally = total + tally.count_leaf(entries, i, red), None
                elif i < len(entries):
                    total += self._cache.running_totals(pos, entries, tally.count)[i]
                else:
                    tally.value = total + self._cache.running_totals(pos, entries, tally.count)[i]
                    tally = None
            if not is_kp:
                yield keys, entries, i, red
            elif i < len(entries):
                path.append([keys, entries, i])
                _, pos, red = entries[i]
                continue
            start = None  # later subtrees only hold keys above it
            while path:
                step = path[-1]
                keys, entries, c = step
                if end is not None and keys[c] >= end:
                    return  # the child just walked reached `end`
                if c + 1 < len(entries):
                    step[2] = c + 1
                    _, pos, red = entries[c + 1]
                    break
                path.pop()
            else:
                return

    def _chunks_rev(
        self, start: Key | None, end: Key | None, incl: bool, tally: Tally | None
    ) -> Iterator[tuple[Sequence[Entry], Any]]:
        assert self._root is not None  # fold_chunks() handles the empty tree
        for keys, entries, hi, red in self._leaves_rev(self._root, start, end, incl, tally):
            lo = 0
            if end is not None:
                lo = bisect_left(keys, end) if incl else bisect_right(keys, end)
            yield entries[lo:hi][::-1], red
            if lo > 0:
                return

    def _leaves_rev(
        self,
        root: Any,
        start: Key | None,
        end: Key | None,
        incl: bool,
        tally: Tally | None = None,
    ) -> Iterator[_Leaf]:
        """``_leaves_fwd`` backwards: each leaf with the index just past its last
        entry at or before ``start``, and its stored reduction. ``tally`` counts the
        entries above ``start`` on the way down."""
        path: list[list[Any]] = []  # [keys, entries, child being walked] per inner node
        pos, red = root
        total = 0
        while True:
            is_kp, keys, entries = self.node(pos)
            if not is_kp:
                hi = len(keys) if start is None else bisect_right(keys, start)
                if tally is not None:
                    count_leaf = tally.count_leaf
                    above = count_leaf(entries, len(entries), red) - count_leaf(entries, hi, red)
                    tally.value, tally = total + above, None
                yield keys, entries, hi, red
            else:
                top = len(keys) - 1
                if start is not None:
                    top = min(bisect_left(keys, start), top)
                if tally is not None:
                    # The children after ``top`` hold only keys above ``start``.
                    totals = self._cache.running_totals(pos, entries, tally.count)
                    total += totals[-1] - totals[top + 1]
                    if top < 0:
                        tally.value, tally = total, None
                if top >= 0:
                    path.append([keys, entries, top])
                    _, pos, red = entries[top]
                    continue
            start = None  # later (lower) subtrees only hold keys below it
            while path:
                step = path[-1]
                keys, entries, c = step
                # Child c-1 holds keys <= keys[c-1]; stop once none of them can be in range.
                if (
                    c > 0
                    and end is not None
                    and (keys[c - 1] < end or (not incl and keys[c - 1] == end))
                ):
                    return
                if c > 0:
                    step[2] = c - 1
                    _, pos, red = entries[c - 1]
                    break
                path.pop()
            else:
                return

    # -- reductions ----------------------------------------------------------

    def full_reduce(self) -> Any:
        """The reduction of the whole tree, read from the root pointer."""
        if self._root is None:
            return self._reduce([])
        return self._root[1]

    def reduce_lt(self, key: Key) -> Any:
        """The reduction of all entries with a key below ``key``; O(depth) reads."""
        return self._reduce_upto(key, inclusive=False)

    def reduce_le(self, key: Key) -> Any:
        """The reduction of all entries with a key at or below ``key``; O(depth) reads."""
        return self._reduce_upto(key, inclusive=True)

    def _reduce_upto(self, key: Key, *, inclusive: bool) -> Any:
        if self._root is None:
            return self._reduce([])
        reds, leaf = self.split_reductions(key, inclusive=inclusive)
        if not reds:
            return self._reduce(leaf)
        reds.append(self._reduce(leaf))
        return self._rereduce(reds)

    def split_reductions(self, key: Key, *, inclusive: bool) -> tuple[list[Any], Sequence[Entry]]:
        """What the entries below ``key`` (at or below, if ``inclusive``) reduce from:
        the stored reductions of the subtrees wholly before it, and the entries of
        the one leaf it falls in."""
        reds: list[Any] = []
        leaf: Sequence[Entry] = []
        if self._root is None:
            return reds, leaf
        pos = self._root[0]
        while True:
            is_kp, keys, entries = self.node(pos)
            i = bisect_right(keys, key) if inclusive else bisect_left(keys, key)
            if not is_kp:
                return reds, entries[:i]
            reds.extend([e[2] for e in entries[:i]])
            if i == len(entries):
                return reds, leaf
            pos = entries[i][1]

    def count_before(
        self,
        key: Key,
        *,
        inclusive: bool,
        count: Callable[[Any], int],
        count_leaf: Callable[[Sequence[Entry], int, Any], int],
    ) -> int:
        """A count of the entries below ``key`` (at or below, if ``inclusive``) from
        stored reductions, in O(depth): ``count(reduction)`` summed over the subtrees
        wholly before it, plus ``count_leaf(entries, i, reduction)`` of the leaf it
        falls in (its entries, how many of them come before, its stored reduction).

        Each inner node's running totals of ``count`` are computed once
        (``NodeCache.running_totals``): summing a few hundred entries a level on every
        call was a fifth of a 100-row ``_all_docs``, which needs this for its offset.
        """
        if self._root is None:
            return 0
        totals = self._cache.running_totals
        find = bisect_right if inclusive else bisect_left
        total = 0
        pos, red = self._root
        while True:
            is_kp, keys, entries = self.node(pos)
            i = find(keys, key)
            if not is_kp:
                return total + count_leaf(entries, i, red)
            total += totals(pos, entries, count)[i]
            if i == len(entries):
                return total
            _, pos, red = entries[i]

    # -- writes ----------------------------------------------------------------

    def modify(
        self, batch: TermBatch, inserts: Iterable[tuple[Key, Any]], removes: Iterable[Key]
    ) -> BTree:
        """Apply inserts and removes in one pass; return the new tree.

        Rewritten nodes go into ``batch``, children before parents; the caller
        writes it. If the batch is not written (or modify raises), drop the
        returned tree unread: reading it is the promise that its batch is in the
        store, and lets the nodes it wrote into the shared cache.

        A key both inserted and removed ends up inserted (CouchDB applies
        removes first), and the last insert of a key wins. Removing an absent
        key is a no-op; a batch that changes nothing returns ``self`` and adds
        nothing. Raises TypeError for keys that are not all str or all int.
        """
        ops: dict[Key, Any] = dict.fromkeys(removes, _REMOVE)
        ops.update(inserts)
        if not ops:
            return self
        keys = sorted(ops)  # TypeError here means str and int keys were mixed
        _check_key_types(keys)
        change = _Modify(self, batch, keys, ops)
        root = change.run()
        if root is self._root:
            return self
        pending = {pos: (node, change.payloads[pos]) for pos, node in change.written.items()}
        return self._derive(root, pending)


def _check_key_types(sorted_keys: list[Any]) -> None:
    # Sorting already rejected str/int mixes; bool sorts like int but msgpack
    # stores it differently, and other types have no defined on-disk order.
    first, last = sorted_keys[0], sorted_keys[-1]
    kind = type(first)
    if kind not in (str, int) or type(last) is not kind:
        raise TypeError(f"btree keys must be all str or all int, got {first!r} .. {last!r}")
    if kind is int and any(type(k) is not int for k in sorted_keys):
        raise TypeError("btree int keys must be plain int (not bool or int subclasses)")


class _Modify:
    """State of one modify pass: sorted action keys, their ops, the batch."""

    def __init__(self, tree: BTree, batch: TermBatch, keys: list[Key], ops: dict[Key, Any]) -> None:
        self.tree = tree
        self.batch = batch
        self.keys = keys
        self.ops = ops
        self.limit = tree.node_bytes - _NODE_OVERHEAD
        # One Packer per pass: Packer objects are not thread-safe, and writers of
        # different shards run concurrently. Options match spec.format.encode_payload.
        self.pack = msgpack.Packer(use_bin_type=True)
        # Nodes added to the batch in this pass (the store cannot read them yet), and
        # their payloads.
        self.written: dict[int, Node] = {}
        self.payloads: dict[int, bytes] = {}
        # Payloads of nodes earlier commits wrote, to splice (NodeCache.payloads).
        self.recent = tree.cache.payloads

    def node(self, pos: int) -> Node:
        node = self.written.get(pos)
        return self.tree.node(pos) if node is None else node

    def run(self) -> list[Any] | None:
        root = self.tree._root
        old: _Old | None = None
        if root is None:
            leaf = self.modify_kv([], [], 0, len(self.keys))
            is_kp, entries, red = False, leaf[0] if leaf else [], _UNKNOWN
        else:
            node = self.node(root[0])
            changed = self.changed_entries(node, 0, len(self.keys), root[1], rightmost=True)
            if changed is None:
                return root
            is_kp, (entries, red, same) = node[0], changed
            old = (root[0], node, same)
        if not entries:
            return None
        if is_kp and len(entries) == 1:
            return self.collapse(entries[0])
        kps = self.write(is_kp, entries, red, rightmost=True, old=old)
        while len(kps) > 1:
            kps = self.write(True, kps, rightmost=True)
        return [kps[0][1], kps[0][2]]

    def collapse(self, kp: Entry) -> list[Any]:
        """Drop root levels that have a single child (after removals)."""
        pos, red = kp[1], kp[2]
        while True:
            is_kp, _, entries = self.node(pos)
            if not is_kp or len(entries) != 1:
                return [pos, red]
            pos, red = entries[0][1], entries[0][2]

    def modify_node(
        self, pos: int, lo: int, hi: int, red: Any, rightmost: bool
    ) -> list[Entry] | None:
        """New kp entries replacing the subtree at ``pos`` (whose reduction its parent
        stores as ``red``; ``rightmost``: the last node of its level); None if
        unchanged."""
        node = self.node(pos)
        changed = self.changed_entries(node, lo, hi, red, rightmost)
        if changed is None:
            return None
        new, red, same = changed
        if not new:
            return []
        return self.write(node[0], new, red, rightmost=rightmost, old=(pos, node, same))

    def changed_entries(
        self, node: Node, lo: int, hi: int, red: Any, rightmost: bool
    ) -> tuple[list[Entry], Any, int] | None:
        """``node``'s entries after the actions ``lo:hi``, their reduction when it is
        derived (``modify_kp``), else ``_UNKNOWN``, and how many of its first entries
        are unchanged; None if nothing changed."""
        is_kp, keys, entries = node
        if is_kp:
            return self.modify_kp(keys, entries, lo, hi, red, rightmost)
        leaf = self.modify_kv(keys, entries, lo, hi)
        return None if leaf is None else (leaf[0], _UNKNOWN, leaf[1])

    def modify_kp(
        self,
        keys: Sequence[Any],
        entries: Sequence[Entry],
        lo: int,
        hi: int,
        red: Any,
        rightmost: bool,
    ) -> tuple[list[Entry], Any, int] | None:
        """The node's new entries, their reduction (``_UNKNOWN`` unless the tree has a
        ``difference``: then the old ``red`` with the replaced children's reductions
        taken out and their replacements' put in) and how many of its first entries
        are unchanged; None if unchanged."""
        acts, last = self.keys, len(keys) - 1
        out: list[Entry] = []
        copied = 0  # entries[copied:c] are untouched children still to copy
        c = 0
        replaced: list[Any] = []  # reductions of the children rewritten
        added: list[Any] = []  # and of the entries that replace them
        first = 0  # the first child rewritten: entries before it are kept as they are
        while lo < hi:
            c = min(bisect_left(keys, acts[lo], c), last)
            # Keys above the last child's last_key also go to the last child.
            mid = hi if c == last else bisect_right(acts, keys[c], lo, hi)
            child = entries[c]
            new = self.modify_node(child[1], lo, mid, child[2], rightmost and c == last)
            if new is not None:
                if not replaced:
                    first = c
                out.extend(entries[copied:c])
                out.extend(new)
                copied = c + 1
                replaced.append(child[2])
                added.extend([e[2] for e in new])
            lo, c = mid, c + 1
        if not replaced:
            return None
        out.extend(entries[copied:])
        difference = self.tree._difference
        if difference is None or red is _UNKNOWN:
            return out, _UNKNOWN, first
        rereduce = self.tree._rereduce
        return out, difference(rereduce([red, *added]), rereduce(replaced)), first

    def modify_kv(
        self, keys: Sequence[Any], entries: Sequence[Entry], lo: int, hi: int
    ) -> tuple[list[Entry], int] | None:
        """The leaf's entries after the actions ``lo:hi`` and how many of its first
        entries are unchanged; None if unchanged."""
        acts, ops, n = self.keys, self.ops, len(keys)
        out: list[Entry] = []
        copied = 0
        same = -1
        for i in range(lo, hi):
            key = acts[i]
            p = bisect_left(keys, key, copied)
            present = p < n and keys[p] == key
            value = ops[key]
            if value is _REMOVE and not present:
                continue
            out.extend(entries[copied:p])
            copied = p + 1 if present else p
            if value is not _REMOVE:
                out.append((key, value))
            if same < 0:
                same = p
        if same < 0:
            return None
        out.extend(entries[copied:])
        return out, same

    def write(
        self,
        is_kp: bool,
        entries: list[Entry],
        red: Any = _UNKNOWN,
        *,
        rightmost: bool = False,
        old: _Old | None = None,
    ) -> list[Entry]:
        """Append ``entries`` as one or more nodes; return their kp entries. ``red``:
        the reduction of all of ``entries`` when the caller knows it (used when they
        fit in one node).

        A split of the last node of its level (``rightmost``) fills each node but
        the last as far as it goes, where others split into nodes of equal size:
        keys written in order (by_seq always, by_id for ids that grow) only ever
        reach that last node, so an even split left every node behind it half
        full for good, twice the nodes a range walks and the cache holds.

        Nothing is encoded twice: a node that fits is encoded whole and that
        payload is what the batch stores; when a split is needed, each entry is
        encoded once and the node payloads are their concatenations (msgpack
        composes), so the sizes that drive the split cost no extra encoding.
        ``old``, the node these entries replace, lets a node that changed only near
        its end reuse that node's payload (``spliced``).
        """
        kind = KP_NODE if is_kp else KV_NODE
        pack = self.pack
        whole = None if old is None else self.spliced(kind, entries, old)
        if whole is None:
            whole = pack.pack([kind, entries])
        if len(whole) <= self.tree.node_bytes:
            return [self.append(is_kp, kind, entries, whole, red, old)]
        parts = [pack.pack(e) for e in entries]
        bounds = _chunk_bounds(
            [len(p) for p in parts], self.limit, 2 if is_kp else 1, fill=rightmost
        )
        prefix = _NODE_PREFIX[kind]
        return [
            self.append(
                is_kp,
                kind,
                entries[lo:hi],
                prefix + pack.pack_array_header(hi - lo) + b"".join(parts[lo:hi]),
            )
            for lo, hi in bounds
        ]

    def spliced(self, kind: str, entries: list[Entry], old: _Old) -> bytes | None:
        """``[kind, entries]`` encoded from the payload of ``old``, the node they
        replace, when a recent commit wrote it and they differ from its entries only
        after its first ``same`` (msgpack composes: an array is its header and its
        items' encodings, one after another); None otherwise.

        The rightmost path of a tree (by_seq's always, by_id's for ids that grow)
        is rewritten by every commit with one entry changed or added at its end: an
        inner node of 300 entries cost 25 µs to encode whole, a commit's largest
        single cost after its bodies.
        """
        pos, node, same = old
        payload = self.recent.get(pos)
        if payload is None or same == 0:
            return None
        was = node[2]
        if len(was) - same > SPLICE_MAX_TAIL:
            return None
        pack = self.pack
        start = len(_NODE_PREFIX[kind]) + _array_header_size(len(was))
        end = len(payload) - _items_size(pack, was[same:])
        return b"".join(
            (
                _NODE_PREFIX[kind],
                pack.pack_array_header(len(entries)),
                memoryview(payload)[start:end],
                _items(pack, entries[same:]),
            )
        )

    def append(
        self,
        is_kp: bool,
        kind: str,
        chunk: Sequence[Entry],
        payload: bytes,
        red: Any = _UNKNOWN,
        old: _Old | None = None,
    ) -> Entry:
        """Add one node to the batch; return its kp entry ``[last_key, pos, reduction]``
        (``red`` when known, else computed from ``chunk``). ``old``: the node ``chunk``
        replaces whole, whose keys before its first changed entry it shares."""
        add_encoded = getattr(self.batch, "add_encoded", None)
        pos = self.batch.add([kind, chunk]) if add_encoded is None else add_encoded(payload)
        if red is _UNKNOWN:
            tree = self.tree
            red = tree.rereduce_fun([e[2] for e in chunk]) if is_kp else tree.reduce_fun(chunk)
        if old is None:
            keys = tuple([e[0] for e in chunk])
        else:
            same = old[2]
            keys = tuple(old[1][1][:same]) + tuple([e[0] for e in chunk[same:]])
        self.written[pos] = (is_kp, keys, tuple(chunk))
        self.payloads[pos] = payload
        return (chunk[-1][0], pos, red)


#: A node being rewritten: its position, the node, and how many of its first entries
#: the rewrite keeps unchanged.
_Old = tuple[int, Node, int]


def _array_header_size(items: int) -> int:
    """Bytes of msgpack's header of an array of ``items`` (fixarray, array16, array32)."""
    return 1 if items < 16 else 3 if items < 1 << 16 else 5


def _items(pack: msgpack.Packer, items: Sequence[Any]) -> memoryview:
    """The encodings of ``items``, one after another (an array's without its header)."""
    return memoryview(pack.pack(list(items)))[_array_header_size(len(items)) :]


def _items_size(pack: msgpack.Packer, items: Sequence[Any]) -> int:
    return len(_items(pack, items)) if items else 0


#: How full ``_chunk_bounds`` fills the nodes it leaves behind when the last node of a
#: level splits: the room left takes a few updates that grow a value before the node
#: splits again (PostgreSQL's B-tree fillfactor leaves 10% on its rightmost splits).
FILL_FACTOR = 0.9


def _chunk_bounds(
    sizes: list[int], limit: int, min_fanout: int, *, fill: bool = False
) -> list[tuple[int, int]]:
    """Split entries of encoded ``sizes`` into ``(lo, hi)`` runs of balanced size.

    Like couch_btree's chunkify, the run count is the fewest that fit and runs
    aim at equal sizes, so a split leaves no sliver behind; with ``fill``, each
    run but the last takes ``FILL_FACTOR`` of ``limit`` (the last may be a
    sliver: the keys that come next are appended to it). A run exceeds ``limit``
    only when its first ``min_fanout`` entries alone do: inner nodes pass 2, so
    even huge keys halve the entries per level and building the root terminates,
    while a leaf's oversized entry sits alone.
    """
    total = sum(sizes)
    if total <= limit:
        return [(0, len(sizes))]
    target = limit * FILL_FACTOR if fill else total / -(-total // limit)
    bounds, first, size = [], 0, 0
    for i, s in enumerate(sizes):
        # Close the run when this entry would cross the hard limit, or when most
        # of it lies past the target.
        if i - first >= min_fanout and (size + s > limit or size + s / 2 > target):
            bounds.append((first, i))
            first, size = i, 0
        size += s
    if not fill and bounds and size + sum(sizes[bounds[-1][0] : first]) <= limit:
        first = bounds.pop()[0]  # the tail fits into the run before it
    bounds.append((first, len(sizes)))
    return bounds

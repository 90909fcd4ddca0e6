"""Examples and properties of the pure spec functions (settee.spec.*).

CrossHair checks the same functions' docstring contracts symbolically
(tests/test_spec_crosshair.py); these tests pin CouchDB examples and check,
with Hypothesis, the contracts CrossHair cannot reach (msgpack, md5, str order).
"""

from __future__ import annotations

import enum
import hashlib
import math
import zlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from settee.spec import config, docs, keys, revs, revtree, routing
from settee.spec.errors import BadRequest

HEX = "0123456789abcdef"
hashes = st.text(alphabet=revs.HASH_CHARS, min_size=1, max_size=8)
rev_strings = st.builds(revs.format_rev, st.integers(1, 10**6), hashes)


# --------------------------------------------------------------------------- revs


@pytest.mark.parametrize(
    "rev",
    [
        *("1-a", "12-967a00dff5e02add41819138abb3284d", "3-z9", "3-totally_fake_rev", "1-"),
        *("1-ABC", "1-a-b", "2-" + "~" * 255, "1-" + "G" * 31),
    ],
)
def test_parse_rev_accepts(rev: str) -> None:
    pos, hash_ = revs.parse_rev(rev)
    assert revs.format_rev(pos, hash_) == rev


@pytest.mark.parametrize(
    "rev",
    [
        *("abc", "0-abc", "01-abc", "-abc", "x-abc", "1-a b", '1-a"b', "1-a\\b", "1-é", 1, None),
        *("1-" + "A" * 32, "1-" + "g" * 32, "1-" + "a" * 256, "1-\n"),
    ],
)
def test_parse_rev_rejects(rev: object) -> None:
    with pytest.raises(BadRequest, match="N-hash"):
        revs.parse_rev(rev)


@given(st.integers(1, 10**9), hashes)
def test_format_parse_round_trip(pos: int, hash_: str) -> None:
    assert revs.parse_rev(revs.format_rev(pos, hash_)) == (pos, hash_)


bodies = st.dictionaries(
    st.text(max_size=5), st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none()), max_size=3
)


@given(st.one_of(st.none(), rev_strings), st.booleans(), bodies)
def test_new_rev_contract(parent: str | None, deleted: bool, body: dict) -> None:
    """new_rev's docstring postconditions (CrossHair cannot see through msgpack)."""
    rev = revs.new_rev(parent, deleted, body)
    pos, hash_ = revs.parse_rev(rev)
    assert pos == (1 if parent is None else revs.rev_pos(parent) + 1)
    assert len(hash_) == 32 and set(hash_) <= set(HEX)
    assert rev == revs.new_rev(parent, deleted, dict(body))


def test_new_rev_digests_every_input() -> None:
    base = revs.new_rev("1-a", False, {"x": 1})
    assert revs.new_rev("1-b", False, {"x": 1}) != base
    assert revs.new_rev("1-a", True, {"x": 1}) != base
    assert revs.new_rev("1-a", False, {"x": 2}) != base
    assert revs.new_rev(None, False, {}) == revs.new_rev(None, False, {})


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**65),
        st.floats(),
        st.text(max_size=4),
        st.sampled_from(["\ud800", "é", "_x"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=12,
)


@given(
    st.one_of(st.none(), rev_strings),
    st.booleans(),
    st.dictionaries(st.text(max_size=3), json_values, max_size=4),
    st.lists(st.lists(st.text(max_size=3), min_size=3, max_size=3), max_size=2),
)
def test_new_rev_encoded_is_the_digest_of_the_whole_array(
    parent: str | None, deleted: bool, body: dict, atts: list[list[str]]
) -> None:
    """Splicing the body's bytes digests exactly what packing the whole array did,
    so no stored revision id changes."""
    try:
        encoded = msgpack.packb(body, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return  # not a storable body (a float NaN packs; 2**65 does not)
    pos, hash_ = (0, "") if parent is None else revs.parse_rev(parent)
    whole = [deleted, pos, hash_, body] + ([atts] if atts else [])
    want = hashlib.md5(msgpack.packb(whole, use_bin_type=True)).hexdigest()
    got = revs.new_rev_encoded(parent, deleted, encoded, atts)
    assert revs.parse_rev(got) == (pos + 1, want)
    assert got == revs.new_rev(parent, deleted, body, atts)


def test_new_rev_of_a_known_document_is_unchanged() -> None:
    # Computed by the implementation before new_rev_encoded existed.
    assert revs.new_rev("1-" + "a" * 32, False, {"x": [1, "é"]}) == (
        "2-78d9a9b43831a1362b2bb412f8dfef00"
    )


# --------------------------------------------------------------------------- routing


def mem3_ranges(n: int) -> list[tuple[int, int]]:
    """mem3_util:make_key_ranges, re-derived from its loop (not from routing.py)."""
    top, inc, start, out = 2**32, 2**32 // n, 0, []
    while start <= top - 1:
        end = top - 1 if start + 2 * inc > top else start + inc - 1
        out.append((start, end))
        start = end + 1
    return out


@pytest.mark.parametrize("n", range(1, 9))
def test_shard_ranges_match_mem3(n: int) -> None:
    assert routing.shard_ranges(n) == mem3_ranges(n)


@given(st.text(), st.integers(1, 1024))
def test_shard_of_picks_the_range_holding_the_hash(docid: str, n: int) -> None:
    h = zlib.crc32(docid.encode("utf-8"))
    index = routing.shard_of(docid, n)
    assert 0 <= index < n
    begin, end = routing.shard_ranges(n)[index]
    assert begin <= h <= end


@given(st.lists(st.text()), st.integers(1, 1024))
def test_shards_of_is_shard_of_of_each_id(docids: list[str], n: int) -> None:
    assert routing.shards_of(docids, n) == [routing.shard_of(d, n) for d in docids]


def test_shards_of_agrees_with_shard_of_at_range_boundaries() -> None:
    """shards_of inlines shard_of's division for speed: over enough ids that some
    hash lands within a few thousand of a range's edge for any shard count (a width
    off by one moves ``i`` hashes at the i-th edge), both pick the same shard."""
    ids = [f"doc-{i}" for i in range(100_000)]
    for n in (3, 7, 1000, 1024):
        expected = [routing.shard_of(d, n) for d in ids]
        assert routing.shards_of(ids, n) == expected, n


def test_shard_of_known_values() -> None:
    # crc32("a") = 0xe8b7be43 lies in the last quarter of the ring.
    assert routing.shard_of("a", 4) == 3
    assert routing.shard_of("a", 1) == 0


# --------------------------------------------------------------------------- keys


@given(st.text(), st.text())
def test_collate_is_python_str_order(a: str, b: str) -> None:
    assert keys.collate(a, b) == (a > b) - (a < b)


def test_raw_code_point_order() -> None:
    assert keys.sort_ids(["é", "a", "Z", "😀", "ﬀ"], False) == ["Z", "a", "é", "ﬀ", "😀"]


@pytest.mark.parametrize(
    ("key", "start", "end", "desc", "incl", "expected"),
    [
        ("b", "a", "c", False, True, True),
        ("c", "a", "c", False, True, True),
        ("c", "a", "c", False, False, False),
        ("a", "a", "c", False, False, True),
        ("b", "c", "a", True, True, True),
        ("a", "c", "a", True, False, False),
        ("d", "c", "a", True, True, False),
        ("b", "c", "a", False, True, False),  # reversed bounds: empty, not an error
        ("x", None, None, True, False, True),
    ],
)
def test_in_range_examples(
    key: str, start: str | None, end: str | None, desc: bool, incl: bool, expected: bool
) -> None:
    assert keys.in_range(key, start, end, desc, incl) is expected


# --------------------------------------------------------------------------- revtree


def chain(*revs_newest_first: str, deleted: bool = False) -> revtree.RevTree:
    tree, _ = revtree.merge_path({}, list(revs_newest_first), deleted)
    return tree


def test_winner_highest_position_then_larger_hash() -> None:
    """couch_doc:to_doc_info sorts leaves by {not deleted, {pos, rev}} descending."""
    tree, _ = revtree.merge_path(chain("2-b", "1-a"), ["2-c", "1-a"], False)
    assert revtree.winner(tree) == "2-c"
    assert revtree.conflicts(tree) == ["2-b"]
    tree, _ = revtree.merge_path(tree, ["3-a", "2-b"], False)
    assert revtree.winner(tree) == "3-a" and revtree.conflicts(tree) == ["2-c"]


def test_live_leaf_beats_longer_deleted_branch() -> None:
    tree, _ = revtree.merge_path(chain("2-a", "1-a"), ["5-f", "4-f", "3-f", "2-f", "1-a"], True)
    assert revtree.winner(tree) == "2-a"
    assert revtree.conflicts(tree) == [] and revtree.deleted_conflicts(tree) == ["5-f"]
    assert not revtree.is_deleted(tree)


def test_all_leaves_deleted_winner_is_highest_tombstone() -> None:
    tree, _ = revtree.merge_path(chain("2-a", "1-a", deleted=True), ["3-b", "2-b", "1-a"], True)
    assert revtree.winner(tree) == "3-b" and revtree.is_deleted(tree)
    assert revtree.leaves(tree) == ["3-b", "2-a"]


def test_merge_divergent_path_creates_conflict() -> None:
    tree, added = revtree.merge_path(chain("3-c", "2-b", "1-a"), ["3-x", "2-x", "1-a"], False)
    assert added and set(revtree.leaves(tree)) == {"3-c", "3-x"}
    assert revtree.conflicts(tree) == ["3-c"]


def test_merge_existing_path_is_a_no_op() -> None:
    tree = chain("3-c", "2-b", "1-a")
    for path in (["3-c", "2-b", "1-a"], ["2-b", "1-a"], ["3-c"], ["1-a"]):
        assert revtree.merge_path(tree, path, True) == (tree, False)


def test_merge_reattaches_a_stemmed_root() -> None:
    tree = revtree.stem(chain("4-d", "3-c", "2-b", "1-a"), 2)
    assert tree == {"4-d": ["3-c", False], "3-c": [None, False]}
    merged, added = revtree.merge_path(tree, ["4-d", "3-c", "2-b"], False)
    assert added and merged["3-c"] == ["2-b", False] and merged["2-b"] == [None, False]


def test_merge_gives_the_deleted_flag_to_the_leaf_alone() -> None:
    """A replicated tombstone's path: its older revisions are ancestors, live as far
    as the tree knows (serve's _revs_info says "missing" for them, not "deleted").
    No engine call reads an ancestor's flag, so the proof cannot see it (found by
    mutation testing: a merge_path flagging the whole path passed every test)."""
    tree, _ = revtree.merge_path(chain("1-a"), ["3-c", "2-b", "1-a"], True)
    assert tree == {"1-a": [None, False], "2-b": ["1-a", False], "3-c": ["2-b", True]}


def test_merge_does_not_mutate_its_input() -> None:
    tree = chain("2-b", "1-a")
    snapshot = {r: list(v) for r, v in tree.items()}
    revtree.merge_path(tree, ["3-c", "2-b"], True)
    revtree.stem(tree, 1)
    assert tree == snapshot


def test_stem_keeps_branches_attached_like_couchdb_3() -> None:
    """couch_key_tree:stem (3.x): 2-a is kept for leaf 3-b, so 3-a stays its
    child and leaf 4-a's path has 3 revs with limit 2."""
    tree, _ = revtree.merge_path(chain("4-a", "3-a", "2-a", "1-a"), ["3-b", "2-a"], False)
    stemmed = revtree.stem(tree, 2)
    assert stemmed == {
        "4-a": ["3-a", False],
        "3-a": ["2-a", False],
        "3-b": ["2-a", False],
        "2-a": [None, False],
    }


def test_stem_keeps_limit_revs_per_leaf() -> None:
    tree, _ = revtree.merge_path(chain("4-d", "3-c", "2-b", "1-a"), ["2-x", "1-a"], False)
    stemmed = revtree.stem(tree, 2)
    # 1-a is within 2 of leaf 2-x, so it stays (as parent of both branches' roots).
    assert stemmed == {
        "4-d": ["3-c", False],
        "3-c": [None, False],
        "2-x": ["1-a", False],
        "1-a": [None, False],
    }
    assert revtree.revisions(stemmed, "4-d") == {"start": 4, "ids": ["d", "c"]}
    assert revtree.stem(tree, 1) == {"4-d": [None, False], "2-x": [None, False]}


@st.composite
def trees(draw: st.DrawFn) -> revtree.RevTree:
    """Trees grown the way a database grows them: merging random paths."""
    tree: revtree.RevTree = {}
    for _ in range(draw(st.integers(1, 6))):
        top = draw(st.integers(1, 6))
        length = draw(st.integers(1, top))
        path = [f"{p}-{draw(st.sampled_from('abc'))}" for p in range(top, top - length, -1)]
        tree, _ = revtree.merge_path(tree, path, draw(st.booleans()))
    return tree


@given(trees(), st.integers(1, 4))
def test_tree_properties(tree: revtree.RevTree, limit: int) -> None:
    assert revtree.is_valid_tree(tree)
    win = revtree.winner(tree)
    leaves = revtree.leaves(tree)
    assert leaves[0] == win and all(revtree.is_leaf(tree, r) for r in leaves)
    assert set(revtree.conflicts(tree)) | set(revtree.deleted_conflicts(tree)) == set(leaves) - {
        win
    }
    stemmed = revtree.stem(tree, limit)
    assert revtree.is_valid_tree(stemmed) and set(revtree.leaves(stemmed)) == set(leaves)
    near = {r for leaf in leaves for r in revtree.path_to_root(tree, leaf)[:limit]}
    assert set(stemmed) == near  # kept: exactly the revs within limit of a leaf
    assert all(stemmed[r][0] in (tree[r][0], None) for r in stemmed)
    assert revtree.stem(stemmed, limit) == stemmed
    # A tree of at most `limit` revisions is its own stem: apply_edit skips the call
    # for it (CrossHair, on stem's contract, did not find a mutant breaking this).
    assert len(tree) > limit or stemmed == tree
    for leaf in leaves:
        assert revtree.merge_path(tree, revtree.path_to_root(tree, leaf), True) == (tree, False)


@given(trees(), st.integers(1, 4))
def test_height_is_the_longest_leaf_path_and_bounds_what_stem_keeps(
    tree: revtree.RevTree, limit: int
) -> None:
    """The writer skips stemming a replicated batch's tree while its height is at
    most revs_limit: the stem is then the tree itself."""
    longest = max(len(revtree.path_to_root(tree, leaf)) for leaf in revtree.leaves(tree))
    assert revtree.height(tree) == longest
    assert revtree.height(tree) > limit or revtree.stem(tree, limit) == tree


@given(trees(), st.integers(1, 6), st.integers(1, 6), st.data())
def test_merge_path_into_is_merge_path_in_place(
    tree: revtree.RevTree, top: int, length: int, data: st.DataObject
) -> None:
    length = min(length, top)
    path = [f"{p}-{data.draw(st.sampled_from('abc'))}" for p in range(top, top - length, -1)]
    deleted = data.draw(st.booleans())
    merged, changed = revtree.merge_path(tree, path, deleted)
    in_place = {rev: list(entry) for rev, entry in tree.items()}
    assert revtree.merge_path_into(in_place, path, deleted) == changed
    assert in_place == merged


@given(trees(), st.lists(st.sampled_from([f"{p}-{h}" for p in range(1, 7) for h in "abc"])))
def test_purge_removes_the_leaves_named_and_what_only_they_needed(
    tree: revtree.RevTree, revs: list[str]
) -> None:
    """couch_key_tree:remove_leafs: what is kept is exactly the paths of the leaves
    not purged; revisions that are not leaves are ignored. CrossHair checks the
    contract too, but does not reach a tree whose leaf ``revs`` names within its
    budget (a purge that kept its leaves passed it), so the tree is drawn here."""
    left, purged = revtree.purge(tree, revs)
    leaves = revtree.leaves(tree)
    assert purged == [r for r in dict.fromkeys(revs) if r in leaves]
    kept = {r for leaf in leaves if leaf not in purged for r in revtree.path_to_root(tree, leaf)}
    assert left == {r: tree[r] for r in kept}
    assert revtree.is_valid_tree(left) and set(revtree.leaves(left)) == set(leaves) - set(purged)


def test_purge_examples() -> None:
    tree, _ = revtree.merge_path(chain("3-c", "2-b", "1-a"), ["3-x", "2-b", "1-a"], False)
    assert revtree.purge(tree, ["3-x", "2-b", "9-z"]) == (chain("3-c", "2-b", "1-a"), ["3-x"])
    assert revtree.purge(tree, ["3-c", "3-x"]) == ({}, ["3-c", "3-x"])
    assert revtree.purge(tree, ["1-a"]) == (tree, [])


# --------------------------------------------------------------------------- docs


def test_validate_doc_splits_and_normalises() -> None:
    doc = {"_id": "a", "_rev": "1-a", "t": (1, 2), "_conflicts": ["1-b"], "n": {"x": None}}
    valid = docs.validate_doc(doc, new_edits=True)
    assert valid == docs.ValidDoc("a", "1-a", False, ("1-a",), {"t": [1, 2], "n": {"x": None}})
    assert valid.body["n"] is not doc["n"]


def test_validate_doc_revisions_path() -> None:
    doc = {"_id": "a", "_rev": "3-c", "_revisions": {"start": 3, "ids": ["c", "b", "a"]}}
    assert docs.validate_doc(doc, new_edits=False).revisions == ("3-c", "2-b", "1-a")
    del doc["_rev"]  # CouchDB accepts _revisions alone
    assert docs.validate_doc(doc, new_edits=False).rev == "3-c"
    # A hash may repeat: positions tell the revisions apart (couch_doc:parse_revs).
    same = {"_id": "a", "_revisions": {"start": 3, "ids": ["c", "c", "c"]}}
    assert docs.validate_doc(same, new_edits=False).revisions == ("3-c", "2-c", "1-c")


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ([], "must be a dict"),
        ({}, "non-empty str"),
        ({"_id": ""}, "non-empty str"),
        ({"_id": 1}, "non-empty str"),
        ({"_id": "_x"}, "starts with '_'"),
        ({"_id": "_design/"}, "starts with '_'"),
        ({"_id": "_local/x"}, "starts with '_'"),
        ({"_id": "a\ud800"}, "UTF-8"),
        ({"_id": "a", "_attachments": []}, "_attachments must be a dict"),
        ({"_id": "a", "_foo": 1}, "unknown special field"),
        ({"_id": "a", "_deleted": 1}, "_deleted"),
        ({"_id": "a", "_rev": "1"}, "N-hash"),
        ({"_id": "a", "_rev": "2-b", "_revisions": {"start": 3, "ids": ["c"]}}, "disagrees"),
        ({"_id": "a", "_revisions": {"start": 1, "ids": ["a", "b"]}}, "below"),
        ({"_id": "a", "_revisions": {"start": 2, "ids": []}}, "non-empty"),
        ({"_id": "a", "_revisions": {"start": 2, "ids": ["A" * 32]}}, "hash"),
        ({"_id": "a", "_revisions": {"start": 2, "ids": ["a b"]}}, "hash"),
        ({"_id": "a", "x": b"raw"}, "bytes"),
        ({"_id": "a", "x": {1, 2}}, "set"),
        ({"_id": "a", "x": {1: 2}}, "keys must be str"),
        ({"_id": "a", "x": math.nan}, "JSON number"),
        ({"_id": "a", "x": math.inf}, "JSON number"),
        ({"_id": "a", "x": 2**64}, "64 bits"),
        ({"_id": "a", "x": "\udc00"}, "UTF-8"),
        ({"_id": "a", 3: 1}, "not a str"),
    ],
)
def test_validate_doc_rejects(doc: object, match: str) -> None:
    with pytest.raises(BadRequest, match=match):
        docs.validate_doc(doc, new_edits=True)


def test_validate_doc_new_edits_false_needs_a_rev() -> None:
    with pytest.raises(BadRequest, match="new_edits=False"):
        docs.validate_doc({"_id": "a"}, new_edits=False)


def test_validate_doc_size_limit() -> None:
    docs.validate_doc({"_id": "a", "x": "y" * 10}, new_edits=True, max_document_size=100)
    with pytest.raises(BadRequest, match="max_document_size"):
        docs.validate_doc({"_id": "a", "x": "y" * 100}, new_edits=True, max_document_size=100)


def test_design_ids_are_accepted() -> None:
    assert docs.validate_docid("_design/x") == "_design/x"


def test_render_doc_field_order() -> None:
    out = docs.render_doc("a", "2-b", True, {"x": 1}, revisions={"start": 2, "ids": ["b"]})
    assert list(out) == ["_id", "_rev", "x", "_deleted", "_revisions"]
    assert "_conflicts" not in docs.render_doc("a", "1-a", False, {}, conflicts=[])


# --------------------------------------------------------------------------- config


def test_validate_options_merges_key_by_key() -> None:
    assert config.validate_options() == config.DEFAULTS
    merged = config.validate_options(shards=2, fsync=None)
    assert merged == {**config.DEFAULTS, "shards": 2}


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"shard": 2}, "shard"),
        ({"shards": 0}, "shards"),
        ({"shards": True}, "shards"),
        ({"fsync": 1}, "fsync"),
        ({"read_mode": "fast"}, "read_mode"),
        ({"revs_limit": 0}, "revs_limit"),
        ({"max_document_size": -1}, "max_document_size"),
    ],
)
def test_validate_options_rejects(options: dict, name: str) -> None:
    with pytest.raises(BadRequest, match=name):
        config.validate_options(**options)


def test_option_defaults_are_the_documented_ones() -> None:
    """SEMANTICS.md §1's signature of settee.open."""
    assert config.DEFAULTS == {
        "shards": 4,
        "fsync": True,
        "read_mode": "parallel",
        "revs_limit": 1000,
        "max_document_size": 64 * 1024 * 1024,
        "strict": False,
        "node_size": 4096,
        "cache_bytes": 192 * 1024 * 1024,
        "body_cache_bytes": 128 * 1024 * 1024,
        "readonly": False,
        "create": True,
    }


@pytest.mark.parametrize(
    "options",
    [
        {"shards": 1024},
        {"shards": 1},
        {"node_size": 128},
        {"node_size": 4096},
        {"cache_bytes": 0},
        {"cache_bytes": 2**40},
        {"body_cache_bytes": 0},
        {"revs_limit": 1},
        {"max_document_size": 1},
    ],
)
def test_validate_options_accepts_the_bounds_of_each_range(options: dict) -> None:
    """SEMANTICS.md §1's ranges are inclusive."""
    assert config.validate_options(**options) == {**config.DEFAULTS, **options}


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"shards": 1025}, "shards"),
        ({"node_size": 127}, "node_size"),
        ({"node_size": 4097}, "node_size"),
        ({"cache_bytes": -1}, "cache_bytes"),
        ({"cache_bytes": 2**40 + 1}, "cache_bytes"),
        ({"body_cache_bytes": -1}, "body_cache_bytes"),
        ({"strict": 1}, "strict"),
        ({"readonly": 0}, "readonly"),
        ({"create": "yes"}, "create"),
    ],
)
def test_validate_options_refuses_past_the_bounds(options: dict, name: str) -> None:
    with pytest.raises(BadRequest, match=name):
        config.validate_options(**options)


def test_accepted_values_are_stored_plain() -> None:
    """SEMANTICS.md §1: an IntEnum member is stored as its int, a str subclass as its
    str, and a bool stays a bool."""

    class Count(enum.IntEnum):
        TWO = 2

    class Mode(str):
        pass

    merged = config.validate_options(shards=Count.TWO, read_mode=Mode("serialized"), fsync=False)
    assert type(merged["shards"]) is int and merged["shards"] == 2
    assert type(merged["read_mode"]) is str and merged["read_mode"] == "serialized"
    assert merged["fsync"] is False


def test_replicator_and_access_fields_are_body_members() -> None:
    """CouchDB's transfer_fields keeps these in the body of any database's documents."""
    fields = {f: i for i, f in enumerate(sorted(docs.BODY_FIELDS))}
    valid = docs.validate_doc({"_id": "a", "x": 1, **fields}, new_edits=True)
    assert valid.body == {"x": 1, **fields}
    rendered = docs.render_doc("a", "1-a", False, valid.body)
    assert list(rendered) == ["_id", "_rev", "x", *fields]


def test_leaf_order_compares_positions_as_numbers() -> None:
    """couch_doc:to_doc_info sorts leaves descending by {not deleted, {Pos, RevId}},
    Pos an integer: 11 > 10 > 9 although "9" > "11" > "10" as text. _conflicts and
    _deleted_conflicts keep that order (§3). (Found by mutation testing: _winner_key kept the
    position a str; conflicts sorted by rev string; deleted_conflicts
    sorted by rev string.)"""
    branches = {
        h: [f"{n}-{h}" for n in range(top, 1, -1)] + ["1-a"]
        for top, h in ((11, "x"), (10, "y"), (9, "z"))
    }
    tree = chain(*branches["x"])
    for h in ("y", "z"):
        tree, _ = revtree.merge_path(tree, branches[h], False)
    assert revtree.winner(tree) == "11-x"
    assert revtree.leaves(tree) == ["11-x", "10-y", "9-z"]
    assert revtree.conflicts(tree) == ["10-y", "9-z"]
    # the same leaves, the two losers deleted
    dead = chain(*branches["x"])
    for h in ("y", "z"):
        dead, _ = revtree.merge_path(dead, branches[h], True)
    assert revtree.winner(dead) == "11-x" and revtree.conflicts(dead) == []
    assert revtree.deleted_conflicts(dead) == ["10-y", "9-z"]
    # every leaf deleted: the tombstone at 11 still wins
    gone, _ = revtree.merge_path(dead, ["12-x", "11-x"], True)
    assert revtree.winner(gone) == "12-x" and revtree.is_deleted(gone)


def test_deleted_conflicts_in_winner_order() -> None:
    """_deleted_conflicts lists deleted losing leaves highest {pos, hash} first, as
    couch_doc:to_json_obj reads them from the sorted #doc_info.revs. (Found by mutation testing.)"""
    tree = chain("4-w", "3-a", "2-a", "1-a")
    tree, _ = revtree.merge_path(tree, ["3-b", "2-b", "1-a"], True)
    tree, _ = revtree.merge_path(tree, ["2-c", "1-a"], True)
    tree, _ = revtree.merge_path(tree, ["3-d", "2-d", "1-a"], True)
    assert revtree.deleted_conflicts(tree) == ["3-d", "3-b", "2-c"]


def test_body_fields_are_couchdbs_list() -> None:
    """couch_doc:transfer_fields keeps exactly these `_`-fields in the body; the
    existing test_replicator_and_access_fields_are_body_members derives its list
    from BODY_FIELDS itself, so a name dropped from the set passed it (found by
    mutation testing: such a name was refused in every document)."""
    from settee.proof.test_semantics import COUCHDB_BODY_FIELDS

    assert frozenset(COUCHDB_BODY_FIELDS) == docs.BODY_FIELDS
    for name in COUCHDB_BODY_FIELDS:
        valid = docs.validate_doc({"_id": "a", name: 1}, new_edits=True)
        assert valid.body == {name: 1}

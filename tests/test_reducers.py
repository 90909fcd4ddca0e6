"""The ``_sum`` and ``_stats`` builtins (settee.serve.reducers) as couch_query_servers
computes them, and a rereduce of any split agreeing with one reduce."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve.protocol import HTTPError
from settee.serve.reducers import SUM_ERROR, first_of, last_of, rank_of, ranked, stats_of, sum_of

_INTS = st.integers(-(10**6), 10**6)
_ARRAYS = st.lists(_INTS, max_size=4)
_OBJECTS = st.recursive(
    st.dictionaries(st.sampled_from("abc"), _INTS, max_size=3),
    lambda inner: st.dictionaries(st.sampled_from("abc"), inner, min_size=1, max_size=3),
    max_leaves=6,
)


def _objects_of_one_shape() -> st.SearchStrategy[list[Any]]:
    """Objects whose keys mean the same kind of value in each: a key holding a number
    in one and an object in another is a mix CouchDB refuses."""
    return _OBJECTS.flatmap(lambda shape: st.lists(_like(shape), min_size=1, max_size=6))


def _like(shape: Any) -> st.SearchStrategy[Any]:
    if isinstance(shape, dict):
        parts = {key: _like(value) for key, value in shape.items()}
        return st.fixed_dictionaries({}, optional=parts)
    return _INTS


def _splits(values: list[Any]) -> st.SearchStrategy[list[list[Any]]]:
    cuts = st.sets(st.integers(1, max(1, len(values) - 1)), max_size=3)
    return cuts.map(lambda at: [values[a:b] for a, b in _pairs(sorted(at), len(values))])


def _pairs(cuts: list[int], end: int) -> list[tuple[int, int]]:
    bounds = [0, *(c for c in cuts if 0 < c < end), end]
    return list(itertools.pairwise(bounds))


@given(st.one_of(st.lists(_INTS, min_size=1), st.lists(_ARRAYS, min_size=1)), st.data())
def test_a_sum_of_numbers_or_arrays_equals_the_sum_of_any_split(values: Any, data: Any) -> None:
    parts = data.draw(_splits(values))
    assert sum_of(values) == sum_of([sum_of(part) for part in parts])


@given(_objects_of_one_shape(), st.data())
def test_a_sum_of_objects_equals_the_sum_of_any_split(values: list[Any], data: Any) -> None:
    parts = data.draw(_splits(values))
    whole = sum_of(values)
    assert "error" not in whole
    assert whole == sum_of([sum_of(part) for part in parts])


@given(st.lists(st.one_of(_INTS, st.builds(stats_of, st.lists(_INTS, min_size=1)))), st.data())
def test_stats_of_numbers_and_their_stats_equal_the_stats_of_any_split(
    values: list[Any], data: Any
) -> None:
    parts = [p for p in data.draw(_splits(values)) if p]
    assert stats_of(values) == stats_of([stats_of(part) for part in parts] or [])


def test_sum_adds_objects_key_by_key_and_keeps_keys_of_one() -> None:
    values = [{"a": 1, "n": {"x": 2}}, {"a": 3, "b": [1, 2], "n": {"x": 1, "y": 5}}]
    assert sum_of(values) == {"a": 4, "b": [1, 2], "n": {"x": 3, "y": 5}}


def test_sum_of_objects_keeps_the_keys_only_the_running_total_has() -> None:
    """sum_objects merges both sorted property lists: a key the later object lacks
    keeps its total, at any depth."""
    values = [{"a": 1, "b": 2, "n": {"x": 1, "y": 2}}, {"a": 3, "n": {"x": 1}}]
    assert sum_of(values) == {"a": 4, "b": 2, "n": {"x": 2, "y": 2}}


def test_numbers_adding_up_to_a_float_zero_do_not_let_an_object_start_the_sum() -> None:
    """Only builtin_sum_rows' initial accumulator, the integer 0 (Erlang's ``case Acc
    of 0``, which 0.0 does not match), lets an object start a sum: numbers that add
    up to 0.0 before an object are a mix of numbers and objects."""
    error = {"error": "builtin_reduce_error", "reason": SUM_ERROR, "caused_by": {"a": 1}}
    assert sum_of([0.5, -0.5, {"a": 1}]) == error
    assert sum_of([1, -1, {"a": 1}]) == {"a": 1}  # the integer 0 is the empty total


def test_sum_adds_a_number_to_an_array_as_its_first_member() -> None:
    assert sum_of([[1, 2], 10]) == [11, 2]
    assert sum_of([10, [1, 2]]) == [11, 2]


@pytest.mark.parametrize(
    ("values", "cause"),
    [
        (["a"], "a"),
        ([1, None], None),
        ([[1, "x"], [2, 3]], ["x"]),  # sum_arrays names the running total's rest
        ([[2, 3], [1, "x"]], [3]),  # also when the member it cannot add is the value's
        ([{"a": 1}, [1]], [1]),
        ([{"a": "s"}, {"a": 1}], 1),  # nested: sum_values(1, "s") names the 1
        ([True], True),
    ],
)
def test_what_sum_cannot_add_is_an_error_object_not_a_failed_query(
    values: list[Any], cause: Any
) -> None:
    """builtin_sum_rows catches the throw: the reduction is the error object."""
    error = {"error": "builtin_reduce_error", "reason": SUM_ERROR, "caused_by": cause}
    assert sum_of(values) == error


def test_an_error_object_among_the_values_is_the_sum() -> None:
    """A rereduce of a failed reduction fails the same way, whatever follows."""
    failed = sum_of(["x"])
    assert sum_of([1, failed, 2]) == failed
    assert sum_of([{"a": 1}, failed]) == failed


def test_stats_of_no_values_is_all_zeros() -> None:
    """builtin_stats(_, []) is {0, 0, 0, 0, 0}."""
    assert stats_of([]) == {"sum": 0, "count": 0, "min": 0, "max": 0, "sumsqr": 0}


def test_stats_of_arrays_are_per_position() -> None:
    assert stats_of([[1, 10], [3, 20]]) == [
        {"sum": 4, "count": 2, "min": 1, "max": 3, "sumsqr": 10},
        {"sum": 30, "count": 2, "min": 10, "max": 20, "sumsqr": 500},
    ]


def test_stats_takes_pre_aggregated_objects_and_ignores_their_other_keys() -> None:
    pre = {"sum": 10, "count": 4, "min": 1, "max": 4, "sumsqr": 30, "note": "x"}
    assert stats_of([pre, 5]) == {"sum": 15, "count": 5, "min": 1, "max": 5, "sumsqr": 55}


@pytest.mark.parametrize(
    "values",
    [["a"], [1, [1]], [[1], [1, 2]], [{"sum": 1}], [1e200, 1e200], [10**400, 1.5]],
)
def test_what_stats_cannot_combine_is_a_400(values: list[Any]) -> None:
    with pytest.raises(HTTPError) as raised:
        stats_of(values)
    assert raised.value.status == 400 and raised.value.error == "builtin_reduce_error"


@pytest.mark.parametrize(
    "values",
    [
        [1e308, 1e308],
        [[1e308], [1e308]],
        [10**400, 1.5],
        [{"a": 1e308}, {"a": 1e308}],
        [{"n": {"a": [1e308]}}, {"n": {"a": [1e308]}}],
    ],
)
def test_a_sum_past_the_largest_float_is_a_400(values: list[Any]) -> None:
    with pytest.raises(HTTPError) as raised:
        sum_of(values)
    assert raised.value.status == 400


def test_top_and_bottom_are_the_n_extreme_distinct_values_in_collation_order() -> None:
    """couch_query_servers:builtin_rank_n (CouchDB 3.5): lists:umerge keeps one of
    the values that collate equal (the first met), largest (or smallest) first, in
    CouchDB's collation (null < booleans < numbers < strings < arrays < objects)."""
    values = [3, "b", None, 1.0, 3.0, [1], "a", {"k": 1}, 1, False]
    assert ranked("_top_4", values) == [{"k": 1}, [1], "b", "a"]
    assert ranked("_bottom_4", values) == [None, False, 1.0, 3]
    assert ranked("_top_100", [2, 2, 1]) == [2, 1]
    assert ranked("_bottom_1", []) == []


def test_first_and_last_are_the_values_of_the_extreme_key_then_doc_id() -> None:
    """builtin_first_last compares (key, doc id) with less_json_ids, whatever order
    the rows come in (a descending query reads them backwards)."""
    rows = [(["a", 2], "d1", "y"), (["a", 1], "d9", "x"), (["a", 1], "d2", "w"), ("z", "d0", "v")]
    assert (first_of(rows), last_of(rows)) == ("v", "y")  # a string key sorts before arrays
    assert first_of(rows[:3]) == "w"  # equal keys: d2 before d9


@pytest.mark.parametrize(
    ("builtin", "refusal"),
    [
        ("_top_1", None),
        ("_bottom_100", None),
        ("_top_+5", None),  # binary_to_integer reads a sign
        ("_top_007", None),
        ("_top_0", "rank value must be between 1 and 100"),
        ("_bottom_101", "rank value must be between 1 and 100"),
        ("_top_-1", "rank value must be between 1 and 100"),
        ("_top_x", "invalid rank reducer"),
        ("_top_", "invalid rank reducer"),
        ("_bottom_1.5", "invalid rank reducer"),
        ("_top_²", "invalid rank reducer"),  # a unicode digit int() would take
        ("_top_1_0", "invalid rank reducer"),  # an underscore int() would take
    ],
)
def test_rank_of_is_couch_mrviews_check(builtin: str, refusal: str | None) -> None:
    assert rank_of(builtin) == refusal

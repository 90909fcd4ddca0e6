"""Mango as CouchDB 3.5 plans and answers it, each check against its source
(apache/couchdb ``src/mango/src``) or the Mango integration test (``src/mango/test``)
that fixes it: which index ``_find`` uses (mango_idx_view:is_usable,
mango_cursor_view:choose_best_index), the range it reads (mango_idx_view:range,
start_key, end_key), ``use_index`` and ``allow_fallback`` (mango_cursor:create),
warnings (mango_cursor:maybe_add_warning), covering indexes and execution
statistics, and ``_explain``'s fields (mango_cursor:explain).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db


def ok(client: Client, method: str, path: str, body: Any = None) -> Any:
    resp = client(method, path, body)
    assert resp.status in (200, 201), resp.raw
    return resp.json


def refused(client: Client, path: str, body: Any) -> tuple[int, str, str]:
    resp = client("POST", path, body)
    return resp.status, resp.json["error"], resp.json["reason"]


def index(client: Client, db: str, fields: list[Any], ddoc: str, **more: Any) -> None:
    body = {"index": {"fields": fields, **more}, "ddoc": ddoc, "name": ddoc}
    assert ok(client, "POST", f"{db}/_index", body)["result"] == "created"


def explain(client: Client, db: str, selector: dict[str, Any], **opts: Any) -> Any:
    return ok(client, "POST", f"{db}/_explain", {"selector": selector, **opts})


def find(client: Client, db: str, selector: dict[str, Any], **opts: Any) -> Any:
    return ok(client, "POST", f"{db}/_find", {"selector": selector, **opts})


def save(client: Client, db: str, docs: list[dict[str, Any]]) -> None:
    rows = ok(client, "POST", f"{db}/_bulk_docs", {"docs": docs})
    assert all(row.get("ok") for row in rows), rows


PEOPLE = [
    {"_id": "a1", "name": "Eddie", "age": 12, "user_id": 1, "location": "AND"},
    {"_id": "a2", "name": "Jimi", "age": 10, "user_id": 0, "location": "AUS"},
    {"_id": "b1", "name": "Harry", "age": 6, "user_id": 1, "location": "CAN"},
    {"_id": "b2", "name": "Eddie", "number": 7, "location": "DEN"},
]


def test_the_index_whose_columns_the_selector_ranges_over_wins(client: Client, db: str) -> None:
    """choose_best_index: first the fewest selector ranges left out of the index's
    leading columns, then the fewest columns, then the design document's name
    (12-use-correct-index-test.py test_choose_index_with_two and _most_accurate)."""
    save(client, db, PEOPLE)
    index(client, db, ["name", "age", "user_id"], "aaa")
    index(client, db, ["name", "age"], "bbb")
    index(client, db, ["name"], "zzz")
    both = explain(client, db, {"name": "Eddie", "age": {"$gte": 12}})
    assert both["index"]["ddoc"] == "_design/bbb"
    assert (both["mrargs"]["start_key"], both["mrargs"]["end_key"]) == (
        ["Eddie", 12],
        ["Eddie", "<MAX>"],
    )
    assert explain(client, db, {"name": "Eddie"})["index"]["ddoc"] == "_design/zzz"
    # The first column held constant lets the second serve the sort (can_use_sort).
    sorted_ = find(client, db, {"name": "Eddie", "age": {"$gt": 0}}, sort=["age"])
    assert [d["_id"] for d in sorted_["docs"]] == ["a1"] and "warning" not in sorted_


def test_explain_shows_the_range_the_scan_reads(client: Client, db: str) -> None:
    """mango_idx_view:start_key/end_key (an end key always closes with <MAX>),
    swapped for a descending sort; _all_docs ranges over ids (?MAX_STR shown as
    <MAX>); 25-beginswith-test.py and 03-operator-test.py test_range_id_eq."""
    save(client, db, PEOPLE)
    index(client, db, ["location"], "loc")
    index(client, db, ["name", "location"], "nameloc")
    begins = explain(client, db, {"location": {"$beginsWith": "A"}})["mrargs"]
    assert (begins["start_key"], begins["end_key"]) == (["A"], ["A\uffff", "<MAX>"])
    down = explain(client, db, {"location": {"$beginsWith": "A"}}, sort=[{"location": "desc"}])
    assert (down["mrargs"]["start_key"], down["mrargs"]["end_key"]) == (["A\uffff", "<MAX>"], ["A"])
    assert down["mrargs"]["direction"] == "rev"
    both = explain(client, db, {"name": "Eddie", "location": {"$beginsWith": "A"}})["mrargs"]
    assert both["end_key"] == ["Eddie", "A\uffff", "<MAX>"]
    one = explain(client, db, {"_id": "a2"})
    assert one["index"]["type"] == "special"
    assert (one["mrargs"]["start_key"], one["mrargs"]["end_key"]) == ("a2", "a2")
    scan = explain(client, db, {"foo": {"$beginsWith": "a"}})["mrargs"]
    assert (scan["start_key"], scan["end_key"]) == (None, "<MAX>")
    assert (
        find(client, db, {"name": "Eddie", "location": {"$beginsWith": "A"}})["docs"][0]["_id"]
        == "a1"
    )


def test_explain_fields_are_couchdbs(client: Client, db: str) -> None:
    """mango_cursor:explain: the normalised selector, every option, ``fields`` as
    ``[]`` for all fields, selector_hints; mrargs as find.rst shows them."""
    answer = explain(client, db, {"age": {"$gt": 0}, "name": "x"})
    assert answer["selector"] == {"$and": [{"age": {"$gt": 0}}, {"name": {"$eq": "x"}}]}
    assert answer["fields"] == [] and answer["opts"]["fields"] == []
    assert answer["opts"] == {
        "use_index": [],
        "bookmark": "nil",
        "limit": 25,
        "skip": 0,
        "sort": {},
        "fields": [],
        "partition": "",
        "r": 1,
        "conflicts": False,
        "stale": False,
        "update": True,
        "stable": False,
        "execution_stats": False,
        "allow_fallback": True,
    }
    assert answer["selector_hints"] == [
        {"type": "json", "indexable_fields": ["age", "name"], "unindexable_fields": []}
    ]
    assert answer["mrargs"]["conflicts"] == "undefined" and answer["mrargs"]["stable"] is False
    named = explain(client, db, {"a": 1}, use_index="_design/x/y")["opts"]["use_index"]
    assert named == ["x", "y"]
    # No index can serve the sort: _explain still answers, with no index and no mrargs.
    none = explain(client, db, {"age": 23}, sort=["company"])
    assert none["index"] is None and "mrargs" not in none


def test_or_requires_a_field_when_each_branch_does(client: Client, db: str) -> None:
    """mango_selector:has_required_fields sees through $or (05-index-selection-test.py
    test_with_or); an empty range answers nothing without scanning, and with no
    bookmark (mango_cursor_view:execute on [empty])."""
    save(client, db, PEOPLE)
    index(client, db, ["name"], "names")
    either = {"$or": [{"name": "Eddie"}, {"name": "Jimi"}]}
    assert explain(client, db, either)["index"]["ddoc"] == "_design/names"
    assert len(find(client, db, either)["docs"]) == 3
    assert explain(client, db, {"$or": [{"name": "Eddie"}, {"age": 1}]})["index"]["name"] == (
        "_all_docs"
    )
    never = {"$and": [{"name": {"$gt": "b"}}, {"name": {"$lt": "a"}}]}
    assert find(client, db, never, execution_stats=True) == {"docs": []}
    assert explain(client, db, never)["mrargs"]["start_key"] is None


def test_use_index_forms_fallback_and_warnings(client: Client, db: str) -> None:
    """mango_opts:validate_use_index (string and list forms, invalid_index_name),
    mango_cursor:create (allow_fallback: false) and invalid_index_warning."""
    save(client, db, PEOPLE)
    index(client, db, ["name"], "names")
    by_name = find(client, db, {"name": "Jimi"}, use_index="names/names")
    assert [d["_id"] for d in by_name["docs"]] == ["a2"] and "warning" not in by_name
    wrong = find(client, db, {"age": 10}, use_index=["names", "names"])
    assert wrong["warning"].split("\n")[:2] == [
        "_design/names, names was not used because it is not a valid index for this query.",
        "No matching index found, create an index to optimize query time.",
    ]
    status, error, _ = refused(client, f"{db}/_find", {"selector": {}, "use_index": "a/b/c/d"})
    assert (status, error) == (400, "invalid_index_name")
    strict = {"selector": {"age": 10}, "allow_fallback": False}
    assert refused(client, f"{db}/_find", strict) == (
        400,
        "invalid_index",
        "You must specify an index with the `use_index` parameter.",
    )
    assert refused(client, f"{db}/_find", {**strict, "use_index": "names"}) == (
        400,
        "invalid_index",
        "_design/names specified by `use_index` could not be found or it is not suitable.",
    )
    # Two usable indexes and no use_index: allow_fallback does not matter.
    assert find(client, db, {"name": "Jimi"}, allow_fallback=False)["docs"][0]["_id"] == "a2"


def test_covering_index_quorum_reads_and_scan_warning(client: Client, db: str) -> None:
    """mango_idx_view:covers (22-covering-index-test.py), quorum reads for r > 1 and
    index_scan_warning past 10 documents examined per result
    (15-execution-stats-test.py)."""
    save(client, db, [{"_id": f"d{i:02d}", "age": i} for i in range(12)])
    index(client, db, ["age"], "ages")
    covered = find(client, db, {"age": {"$lt": 3}}, fields=["_id", "age"], execution_stats=True)
    assert covered["docs"] == [
        {"_id": "d00", "age": 0},
        {"_id": "d01", "age": 1},
        {"_id": "d02", "age": 2},
    ]
    stats = covered["execution_stats"]
    # The end key [3, <MAX>] holds the row [3] too: it is read, and fails $lt.
    assert (stats["total_keys_examined"], stats["total_docs_examined"]) == (4, 0)
    plan = explain(client, db, {"age": {"$lt": 3}}, fields=["_id", "age"])
    assert plan["covering"] is True and plan["mrargs"]["include_docs"] is False
    quorum = find(client, db, {"age": {"$lt": 3}}, r=2, execution_stats=True)["execution_stats"]
    assert (quorum["total_docs_examined"], quorum["total_quorum_docs_examined"]) == (0, 4)
    scanned = find(client, db, {"other": 1}, execution_stats=True)
    assert scanned["execution_stats"]["total_docs_examined"] == 13  # with _design/ages
    assert scanned["warning"].split("\n") == [
        "No matching index found, create an index to optimize query time.",
        "The number of documents examined is high in proportion to the number of results "
        "returned. Consider adding a more specific index to improve this.",
    ]
    # The _all_docs scan reads only the ids the selector's _id range allows (its end
    # inclusive: d05 is read, and fails $lt).
    ranged = find(client, db, {"_id": {"$gte": "d03", "$lt": "d05"}}, execution_stats=True)
    assert [d["_id"] for d in ranged["docs"]] == ["d03", "d04"]
    assert ranged["execution_stats"]["total_keys_examined"] == 3


@pytest.mark.parametrize(
    ("selector", "error"),
    [
        ({"_id": {"$beginsWith": True}}, "invalid_operator"),
        ({"a": {"$regex": 1}}, "invalid_operator"),
        ({"a": {"$regex": "("}}, "bad_arg"),
    ],
)
def test_operator_arguments_of_the_wrong_type(
    client: Client, db: str, selector: Any, error: str
) -> None:
    """mango_selector:norm_ops matches $beginsWith and $regex only with a string:
    any other argument falls through to ``invalid_operator``
    (25-beginswith-test.py test_invalid_operand)."""
    status, found, _ = refused(client, f"{db}/_find", {"selector": selector})
    assert (status, found) == (400, error)


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"index": {"fields": ["a"]}, "type": "text"}, 503, "required index service unavailable"),
        ({"index": {}, "type": "nouveau"}, 503, "required index service unavailable"),
        ({"index": {"fields": ["a"]}, "type": "geo"}, 400, "invalid_index"),
        ({"index": {"fields": ["a"]}, "type": 1.5}, 400, "invalid_string"),
        ({"index": {"fields": ["a"]}, "name": ""}, 400, "invalid_empty_string"),
        ({"index": {"fields": ["a"]}, "ddoc": True}, 400, "invalid_string"),
        ({"index": {"fields": ["a"]}, "w": 0}, 400, "invalid_pos_integer"),
        ({"index": {"fields": ["a"]}, "colour": 1}, 400, "invalid_key"),
        ({"index": {"fields": ["a"], "selector": {"a": 1}}}, 400, "invalid_key"),
        ({"index": {"fields": ["a"]}, "partial_filter_selector": {}}, 400, "invalid_key"),
        ({"index": {"fields": ["a"]}, "ddoc": "_design/"}, 400, "illegal_docid"),
        ({"index": "a"}, 400, "invalid_index"),
        ({"index": {}}, 400, "missing_required_key"),
        ({"index": {"fields": "a"}}, 400, "invalid_sort_json"),
        ({"index": {"fields": [{"a": 2}]}}, 400, "invalid_sort_field"),
        ({"index": {"fields": [{"a": "asc"}, {"b": "desc"}]}}, 400, "unsupported_mixed_sort"),
        ({"index": {"fields": ["a"], "partial_filter_selector": []}}, 400, "invalid_selector_json"),
    ],
)
def test_index_creation_refusals(
    client: Client, db: str, body: dict[str, Any], status: int, error: str
) -> None:
    """mango_opts:validate_idx_create (each option, then unknown keys), mango_idx:new
    (a text index without the search service is 503) and mango_idx_view:validate_new
    (the definition's own keys; 01-index-crud-test.py, 06-basic-text-test.py
    TextIndexCheckTests, 16-index-selectors-test.py)."""
    assert refused(client, f"{db}/_index", body)[:2] == (status, error)


def test_index_list_pages_and_paths(client: Client, db: str) -> None:
    """mango_httpd:handle_index_req: ``limit``/``skip`` over the list (the query
    string split at ``;`` too, as mochiweb does), and its path clauses: three
    parts (or four after ``_design``) are an index to DELETE, anything else 404."""
    for name in ("i1", "i2", "i3"):
        index(client, db, [name], name)
    names = [i["name"] for i in ok(client, "GET", f"{db}/_index?limit=2;skip=1")["indexes"]]
    assert names == ["i1", "i2"]
    assert ok(client, "GET", f"{db}/_index?skip=9")["indexes"] == []
    assert ok(client, "GET", f"{db}/_index?skip=3")["total_rows"] == 4
    for bad in ("limit=0", "skip=-1", "limit=x"):
        resp = client("GET", f"{db}/_index?{bad}")
        assert (resp.status, resp.json["error"]) == (400, "invalid_list_index_params")
    for path in ("a", "a/b", "a/b/c/d", "a/b/c/d/e"):
        assert client("GET", f"{db}/_index/{path}").status == 404
    wrong_method = client("GET", f"{db}/_index/i1/json/i1")
    assert (wrong_method.status, wrong_method.headers["Allow"]) == (405, "DELETE")
    other_type = client("DELETE", f"{db}/_index/i1/text/i1")
    assert (other_type.status, other_type.json) == (
        404,
        {"error": "not_found", "reason": "missing"},
    )
    assert ok(client, "DELETE", f"{db}/_index/_design/i1/json/i1") == {"ok": True}
    assert ok(client, "GET", f"{db}/_index")["total_rows"] == 3


def test_find_matches_conflicts_when_it_asks_for_them(client: Client, db: str) -> None:
    """With ``conflicts: true`` the documents are read with their conflicts before
    the selector is matched (mrargs conflicts; 19-find-conflicts.py)."""
    save(client, db, [{"_id": "doc", "a": 2}])
    other = {"_id": "doc", "_rev": "1-23202479633c2b380f79507a776743d5", "a": 1}
    assert client("POST", f"{db}/_bulk_docs", {"docs": [other], "new_edits": False}).status == 201
    index(client, db, ["_conflicts"], "conflicted")
    selector = {"_conflicts": {"$exists": True}}
    found = find(client, db, selector, conflicts=True)["docs"]
    assert [d["_conflicts"] for d in found] == [["1-23202479633c2b380f79507a776743d5"]]
    assert find(client, db, selector)["docs"] == []


def test_explain_ranks_the_other_index_candidates(client: Client, db: str) -> None:
    """mango_cursor:extract_candidate_indexes (23-explain-indexes-test.py): every
    index but the chosen one, with whether it was usable, its first reason and its
    ranking; design documents in descending order, _all_docs last."""
    save(client, db, PEOPLE)
    index(client, db, ["age"], "age")
    index(client, db, ["company", "manager"], "company_and_manager")
    index(client, db, ["age", "name"], "age_name")
    answer = explain(client, db, {"age": 23, "name": "x"}, fields=["_id", "age"])
    assert answer["index"]["name"] == "age_name"

    def analysis(usable: bool, reason: str, ranking: int, covering: Any) -> dict[str, Any]:
        return {
            "usable": usable,
            "reasons": [{"name": reason}],
            "ranking": ranking,
            "covering": covering,
        }

    assert [(c["index"]["name"], c["analysis"]) for c in answer["index_candidates"]] == [
        ("company_and_manager", analysis(False, "field_mismatch", 3, False)),
        ("age", analysis(True, "less_overlap", 1, True)),
        ("_all_docs", analysis(True, "unfavored_type", 2, None)),
    ]
    none = explain(client, db, {"name": "x"}, sort=["company"])
    assert none["index"] is None
    # Each index's first reason only: company_and_manager sorts right but needs
    # manager; the others need age (and _all_docs an _id range) first.
    assert [
        (c["index"]["name"], c["analysis"]["reasons"], c["analysis"]["ranking"])
        for c in none["index_candidates"]
    ] == [
        (name, [{"name": "field_mismatch"}], 1)
        for name in ("company_and_manager", "age_name", "age", "_all_docs")
    ]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"selector": {}, "partition": 1}, "illegal_partition"),
        ({"selector": {}, "partition": "_a"}, "illegal_partition"),
        ({"selector": {}, "partition": "a:b"}, "illegal_partition"),
        ({"selector": {}, "partition": "a"}, "query_parse_error"),
        ({"selector": {}, "stale": "yes"}, "invalid_ok_or_false_value"),
        ({"selector": {}, "stable": 1}, "invalid_boolean"),
        ({"selector": {}, "bookmark": 1}, "invalid_bookmark"),
        ({"selector": {}, "sort": [{"a": "up"}]}, "invalid_sort_field"),
        # Options are checked before unknown keys (mango_opts:validate).
        ({"selector": {}, "colour": 1, "limit": -1}, "invalid_non_neg_integer"),
    ],
)
def test_find_option_refusals(client: Client, db: str, body: dict[str, Any], error: str) -> None:
    """mango_opts:validate_find, couch_partition:validate_partition, and a
    partitioned query on a database without partitions
    (couch_mrview_util:validate_all_docs_args); mango_sort:sort_field."""
    assert refused(client, f"{db}/_find", body)[:2] == (400, error)
    assert find(client, db, {}, partition="", stale="ok", stable=True)["docs"] == []


def test_an_index_goes_only_into_a_query_design_document(client: Client, db: str) -> None:
    """mango_util:load_ddoc checks an existing design document's language
    (check_lang: invalid_ddoc_lang); a deleted one is written anew."""
    ok(client, "PUT", f"{db}/_design/js", {"language": "javascript", "views": {}})
    body = {"index": {"fields": ["a"]}, "ddoc": "js", "name": "a"}
    assert refused(client, f"{db}/_index", body)[:2] == (400, "invalid_ddoc_lang")
    rev = ok(client, "GET", f"{db}/_design/js")["_rev"]
    ok(client, "DELETE", f"{db}/_design/js?rev={rev}")
    assert ok(client, "POST", f"{db}/_index", body)["result"] == "created"


def test_deleting_the_last_index_keeps_a_design_document_with_more(client: Client, db: str) -> None:
    """mango_idx:delete deletes the design document only when its body is just
    ``{"language": "query"}`` once the view is gone."""
    index(client, db, ["a"], "plain")
    ok(client, "PUT", f"{db}/_design/more", {"language": "query", "note": 1})
    index(client, db, ["a"], "more")
    ok(client, "DELETE", f"{db}/_index/plain/json/plain")
    assert client("GET", f"{db}/_design/plain").status == 404
    ok(client, "DELETE", f"{db}/_index/more/json/more")
    kept = ok(client, "GET", f"{db}/_design/more")
    assert {k: v for k, v in kept.items() if not k.startswith("_")} == {
        "language": "query",
        "note": 1,
    }


def test_an_index_keeps_the_direction_its_fields_were_given(client: Client, db: str) -> None:
    """mango_idx_view stores the validated sort (mango_sort:new) as the view's map
    fields (make_view) and lists them with mango_sort:to_json: ``{"f": "desc"}``
    stays desc."""
    index(client, db, [{"a": "desc"}, {"b": "desc"}], "down")
    listed = ok(client, "GET", f"{db}/_index")["indexes"][1]
    assert listed["def"] == {"fields": [{"a": "desc"}, {"b": "desc"}]}
    stored = ok(client, "GET", f"{db}/_design/down")["views"]["down"]["map"]["fields"]
    assert stored == {"a": "desc", "b": "desc"}
    again = {"index": {"fields": [{"a": "desc"}, {"b": "desc"}]}, "ddoc": "down", "name": "down"}
    assert ok(client, "POST", f"{db}/_index", again)["result"] == "exists"


def test_execution_stats_count_what_couchdbs_coordinator_receives(client: Client, db: str) -> None:
    """mango_cursor_view: the shard rolls what it examined into each match it sends;
    the coordinator stops at the first match past the limit (counted, not returned),
    counts to the end when none comes, and drops a matching design document of
    _all_docs with its counts (15-execution-stats-test.py "with limit": 4 keys for a
    limit of 3)."""
    save(client, db, [{"_id": f"d{i}", "n": i, "k": i} for i in range(6)])
    index(client, db, ["n"], "byn")

    def stats(selector: dict[str, Any], **opts: Any) -> tuple[int, int, int]:
        answer = find(client, db, selector, execution_stats=True, **opts)
        got = answer["execution_stats"]
        return got["total_keys_examined"], got["total_docs_examined"], len(answer["docs"])

    assert stats({"n": {"$gte": 0}}, limit=3) == (4, 4, 3)
    assert stats({"n": {"$gte": 0}, "x": {"$exists": False}}, limit=3, skip=1) == (5, 5, 3)
    assert stats({"n": {"$lte": 2}}, limit=3) == (3, 3, 3)  # the range ends at [2, <MAX>]
    assert stats({"n": {"$gte": 4}}, limit=9) == (2, 2, 2)
    # _all_docs: _design/byn fails this selector (counted) ...
    assert stats({"_id": {"$gt": None}, "k": {"$gte": 0}}) == (7, 7, 6)
    # ... and matches this one, so its counts are dropped with it.
    assert stats({"_id": {"$gt": None}}) == (6, 6, 6)

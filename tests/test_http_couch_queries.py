"""Query endpoints as CouchDB 3.x answers them, each checked against its source:
the query string over a POST body (couch_mrview_http:parse_body_and_query), the
multi-query endpoints (chttpd_db:multi_all_docs_view, chttpd_view:multi_query_view),
namespaces (fabric_view_all_docs:filter_keys_by_namespace), empty Mango operators
(mango_cursor:maybe_noop_range), ``all_or_nothing`` and replicated refusals in
``_bulk_docs``, ``_all_dbs`` ranges and ``_dbs_info`` (chttpd_misc), ``_bulk_get``'s
``atts_since`` (chttpd_db:parse_field), ``attachments=true`` beside ``include_docs``
and ``_temp_view`` (chttpd_view:handle_temp_view_req).
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client, Resp, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db


def ok(resp: Resp, status: int = 200) -> Any:
    assert resp.status == status, resp.raw
    return resp.json


def save(client: Client, db: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = ok(client("POST", f"{db}/_bulk_docs", {"docs": docs}), 201)
    assert all(row.get("ok") for row in rows), rows
    return list(rows)


def q(value: Any) -> str:
    return urllib.parse.quote(json.dumps(value))


def ids(answer: dict[str, Any]) -> list[str]:
    return [row["id"] for row in answer["rows"]]


# -- 1. the query string over the body -------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["_all_docs", "_design_docs", "_local_docs"])
def test_the_query_string_wins_over_the_body(client: Client, db: str, endpoint: str) -> None:
    prefix = {"_all_docs": "", "_design_docs": "_design/", "_local_docs": "_local/"}[endpoint]
    for name in "abcd":
        assert client("PUT", f"{db}/{prefix}{name}", {}).status == 201
    # all_docs_test.exs / design_docs_query_test.exs: "POST edge case with colliding
    # parameters - query takes precedence".
    body = {"limit": 1, "descending": False}
    answer = ok(client("POST", f"{db}/{endpoint}?limit=3&descending=true", body))
    assert ids(answer) == [f"{prefix}d", f"{prefix}c", f"{prefix}b"]
    body = {"startkey": f"{prefix}a", "endkey": f"{prefix}b"}
    answer = ok(client("POST", f"{db}/{endpoint}?endkey={q(prefix + 'c')}", body))
    assert ids(answer) == [f"{prefix}a", f"{prefix}b", f"{prefix}c"]


def test_query_string_parameters_apply_after_the_body_in_order(client: Client, db: str) -> None:
    save(client, db, [{"_id": name} for name in "abcd"])
    # parse_body_and_query folds the body, then the query string: a body key sets
    # both bounds, a later startkey moves one.
    answer = ok(client("POST", f"{db}/_all_docs?startkey={q('b')}", {"key": "c"}))
    assert ids(answer) == ["b", "c"]
    keys = ok(client("POST", f"{db}/_all_docs?keys={q(['c', 'd'])}", {"keys": ["a", "b"]}))
    assert [row["key"] for row in keys["rows"]] == ["c", "d"]
    # A one-key keys sets start_key = end_key and leaves the body's two keys as
    # they were (parse_param "keys"): validate_args refuses the pair.
    refused = client("POST", f"{db}/_all_docs?keys={q(['d'])}", {"keys": ["a", "b"]})
    assert (refused.status, refused.json["error"]) == (400, "query_parse_error")


def test_post_all_docs_keys_must_be_an_array(client: Client, db: str) -> None:
    for endpoint in ("_all_docs", "_design_docs", "_local_docs"):
        for keys in (1, None, {"a": 1}):
            answer = client("POST", f"{db}/{endpoint}", {"keys": keys})
            assert (answer.status, answer.json) == (
                400,
                {"error": "bad_request", "reason": "`keys` body member must be an array."},
            )
    got = client("GET", f"{db}/_all_docs?keys=1")
    assert got.json["reason"] == "`keys` parameter must be an array."


# -- 2. multi-query endpoints ----------------------------------------------------------------------


def test_all_docs_queries_answer_one_result_per_query(client: Client, db: str) -> None:
    save(client, db, [{"_id": name, "v": name} for name in "abcde"])
    save(client, db, [{"_id": "_design/x"}])
    assert client("PUT", f"{db}/_local/l", {}).status == 201
    queries = [
        {"keys": ["b", "d"]},
        {"limit": 2, "skip": 1},
        {"startkey": "d", "include_docs": True},
    ]
    results = ok(client("POST", f"{db}/_all_docs/queries", {"queries": queries}))["results"]
    assert [ids(r) for r in results] == [["b", "d"], ["a", "b"], ["d", "e"]]
    assert results[2]["rows"][0]["doc"]["v"] == "d"
    assert all(set(r) == {"total_rows", "offset", "rows"} for r in results)
    # The query string gives every query its defaults; a query's own members win.
    over = client("POST", f"{db}/_all_docs/queries?limit=1", {"queries": [{}, {"limit": 2}]})
    assert [len(r["rows"]) for r in ok(over)["results"]] == [1, 2]
    design = ok(client("POST", f"{db}/_design_docs/queries", {"queries": [{}, {"keys": ["a"]}]}))
    assert [ids(r) for r in design["results"]] == [["_design/x"], []]
    local = ok(client("POST", f"{db}/_local_docs/queries", {"queries": [{"limit": 5}]}))
    assert [ids(r) for r in local["results"]] == [["_local/l"]]


def test_multi_query_refusals(client: Client, db: str) -> None:
    for path in ("_all_docs/queries", "_design_docs/queries", "_local_docs/queries"):
        answer = client("GET", f"{db}/{path}")
        assert (answer.status, answer.json["error"]) == (405, "method_not_allowed"), path
        missing = client("POST", f"{db}/{path}", {"keys": []})
        assert (missing.status, missing.json) == (
            400,
            {"error": "bad_request", "reason": "POST body must include `queries` parameter."},
        )
        wrong = client("POST", f"{db}/{path}", {"queries": 1})
        assert (wrong.status, wrong.json["reason"]) == (400, "`queries` member must be an array.")
    bad_second = client("POST", f"{db}/_all_docs/queries", {"queries": [{}, {"limit": -1}]})
    assert bad_second.status == 400


VIEWS = {
    "m": {"map": "function(doc) { if (doc.k !== undefined) emit(doc.k, doc.k); }"},
    "r": {"map": "function(doc) { if (doc.k !== undefined) emit(doc.k, 1); }", "reduce": "_count"},
}


def _with_views(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    save(client, db, [{"_id": f"d{k}", "k": k} for k in range(5)])
    save(client, db, [{"_id": "_design/d", "views": VIEWS}])


def test_view_queries_answer_one_result_per_query(client: Client, db: str) -> None:
    _with_views(client, db)
    queries = [{"keys": [3, 1]}, {"startkey": 2, "limit": 2}, {"key": 4, "include_docs": True}]
    answer = ok(client("POST", f"{db}/_design/d/_view/m/queries", {"queries": queries}))
    results = answer["results"]
    assert [[row["key"] for row in r["rows"]] for r in results] == [[3, 1], [2, 3], [4]]
    assert results[1]["offset"] == 2 and results[0]["total_rows"] == 5
    assert results[2]["rows"][0]["doc"]["_id"] == "d4"
    reduced = ok(
        client("POST", f"{db}/_design/d/_view/r/queries", {"queries": [{}, {"reduce": False}]})
    )["results"]
    assert reduced[0] == {"rows": [{"key": None, "value": 5}]}
    assert len(reduced[1]["rows"]) == 5
    # Each query is checked against the view before any runs (validate_args).
    bad = client("POST", f"{db}/_design/d/_view/r/queries", {"queries": [{"include_docs": True}]})
    assert (bad.status, bad.json["reason"]) == (400, "`include_docs` is invalid for reduce")
    assert client("GET", f"{db}/_design/d/_view/m/queries").status == 405
    missing = client("POST", f"{db}/_design/d/_view/m/queries", {})
    assert missing.json["reason"] == "POST body must include `queries` parameter."


# -- 3. keys outside the namespace -----------------------------------------------------------------


def test_design_and_local_docs_leave_out_keys_outside_their_namespace(
    client: Client, db: str
) -> None:
    save(client, db, [{"_id": "a"}, {"_id": "_design/x"}])
    assert client("PUT", f"{db}/_local/l", {}).status == 201
    keys = ["a", "_design/x", "_design/nope", "_local/l", "_local/nope"]
    design = ok(client("POST", f"{db}/_design_docs", {"keys": keys}))["rows"]
    assert [row["key"] for row in design] == ["_design/x", "_design/nope"]
    assert design[1] == {"key": "_design/nope", "error": "not_found"}
    local = ok(client("POST", f"{db}/_local_docs", {"keys": keys}))["rows"]
    assert [row["key"] for row in local] == ["_local/l", "_local/nope"]
    # The filter runs after skip and limit, as in fabric_view_all_docs.
    cut = ok(client("POST", f"{db}/_design_docs", {"keys": keys, "limit": 2}))["rows"]
    assert [row["key"] for row in cut] == ["_design/x"]


# -- 4. empty $or / $and ---------------------------------------------------------------------------


@pytest.mark.parametrize("indexed", [False, True])
def test_find_with_an_empty_or_or_and_finds_nothing(client: Client, db: str, indexed: bool) -> None:
    save(client, db, [{"_id": f"u{i}", "age": 20 + i, "company": "c"} for i in range(4)])
    if indexed:
        index = {"index": {"fields": ["age"]}, "name": "age"}
        assert client("POST", f"{db}/_index", index).status == 200

    def found(selector: dict[str, Any]) -> list[str]:
        answer = ok(client("POST", f"{db}/_find", {"selector": selector}))
        return [doc["_id"] for doc in answer["docs"]]

    # src/mango/test/21-empty-selector-tests.py
    assert found({"$or": []}) == []
    assert found({"$and": []}) == []
    assert found({"$nor": []}) == []  # normalised to {"$and": []}
    assert found({"age": 22, "$or": []}) == ["u2"]
    assert found({"age": 22, "$and": []}) == ["u2"]
    assert found({"age": 22, "company": {"$in": []}}) == []
    assert found({"age": 22, "company": {"$all": []}}) == []
    assert found({"age": {"$gt": 0}, "company": {"$nin": []}}) == ["u0", "u1", "u2", "u3"]


# -- 5, 6. _bulk_docs: all_or_nothing, replicated refusals -----------------------------------------


def test_bulk_docs_all_or_nothing_is_417_and_writes_nothing(client: Client, db: str) -> None:
    rev = save(client, db, [{"_id": "old"}])[0]["rev"]
    docs = [{"_id": "new"}, {"_id": "old", "_rev": rev}, {"_id": "_local/l"}]
    answer = client("POST", f"{db}/_bulk_docs", {"docs": docs, "all_or_nothing": True})
    reason = {"error": "not_implemented", "reason": "all_or_nothing is not supported"}
    assert answer.status == 417
    assert answer.json == [
        {"id": "new", "rev": "0-", **reason},
        {"id": "old", "rev": rev, **reason},
        {"id": "_local/l", "rev": "0-", **reason},
    ]
    assert client("GET", f"{db}/new").status == 404
    assert client("GET", f"{db}/_local/l").status == 404
    assert client("GET", f"{db}/old").json["_rev"] == rev
    # Only with new_edits (chttpd_db passes it to fabric in that clause alone).
    replicated = {"_id": "r", "_rev": "1-" + "a" * 32}
    body = {"docs": [replicated], "all_or_nothing": True, "new_edits": False}
    assert client("POST", f"{db}/_bulk_docs", body).status == 201


VDU = "function(newDoc) { if (newDoc.bad) throw({forbidden: 'no bad docs'}); }"


def test_replicated_refusals_carry_the_revision(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    save(client, db, [{"_id": "_design/v", "validate_doc_update": VDU}])
    by_rev = {"_id": "a", "bad": 1, "_rev": "1-" + "a" * 32}
    by_revisions = {"_id": "b", "bad": 1, "_revisions": {"start": 3, "ids": ["c" * 32, "b" * 32]}}
    fine = {"_id": "c", "_rev": "1-" + "d" * 32}
    body = {"docs": [by_rev, fine, by_revisions], "new_edits": False}
    rows = ok(client("POST", f"{db}/_bulk_docs", body), 201)
    refused = {"error": "forbidden", "reason": "no bad docs"}
    assert rows == [
        {"id": "a", "rev": "1-" + "a" * 32, **refused},
        {"id": "b", "rev": "3-" + "c" * 32, **refused},
    ]
    # Interactive refusals name no revision (update_doc_result_to_json/2).
    rows = ok(client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "x", "bad": 1}]}), 201)
    assert rows == [{"id": "x", **refused}]


# -- 8, 9. _all_dbs ranges, _dbs_info --------------------------------------------------------------


@pytest.fixture(scope="module")
def names(server: Any) -> list[str]:
    """Databases of this module's server, under a prefix no other test uses."""
    client = Client(server.port)
    made = [f"zz-{c}" for c in "abcd"]
    for name in made:
        assert client("PUT", f"/{name}").status == 201
    return made


def test_all_dbs_honours_range_parameters(client: Client, names: list[str]) -> None:
    def listed(query: str) -> list[str]:
        return [n for n in ok(client("GET", f"/_all_dbs?{query}")) if n.startswith("zz-")]

    assert listed(f"start_key={q('zz-b')}&end_key={q('zz-c')}") == ["zz-b", "zz-c"]
    assert listed(f"startkey={q('zz-b')}&endkey={q('zz-c')}") == ["zz-b", "zz-c"]
    assert listed(f"key={q('zz-c')}") == ["zz-c"]
    assert listed(f"start_key={q('zz-b')}&end_key={q('zz-d')}&inclusive_end=false") == [
        "zz-b",
        "zz-c",
    ]
    assert listed(f"descending=true&start_key={q('zz-c')}&end_key={q('zz-a')}") == [
        "zz-c",
        "zz-b",
        "zz-a",
    ]
    assert listed(f"descending=true&end_key={q('zz-b')}&inclusive_end=false") == ["zz-d", "zz-c"]
    # Parameters apply in order: key, then a later end_key.
    assert listed(f"key={q('zz-b')}&end_key={q('zz-c')}") == ["zz-b", "zz-c"]


def test_dbs_info_post_answers_each_key(client: Client, names: list[str]) -> None:
    answer = ok(client("POST", "/_dbs_info", {"keys": ["zz-a", "zz-nope", 1]}))
    assert [entry["key"] for entry in answer] == ["zz-a", "zz-nope", 1]
    assert answer[0]["info"] == ok(client("GET", "/zz-a"))
    assert answer[1] == {"key": "zz-nope", "error": "not_found"}
    assert answer[2] == {"key": 1, "error": "not_found"}
    missing = client("POST", "/_dbs_info", {})
    assert (missing.status, missing.json) == (
        400,
        {"error": "bad_request", "reason": "`keys` member must exist."},
    )
    many = client("POST", "/_dbs_info", {"keys": [f"d{i}" for i in range(101)]})
    assert (many.status, many.json) == (400, {"error": "bad_request", "reason": "too_many_keys"})
    assert client("POST", "/_dbs_info", {"keys": ["zz-a"] * 100}).status == 200
    assert client("DELETE", "/_dbs_info").status == 405


def test_dbs_info_get_lists_every_database_with_all_dbs_parameters(
    client: Client, names: list[str]
) -> None:
    answer = ok(client("GET", f"/_dbs_info?start_key={q('zz-b')}&end_key={q('zz-c')}"))
    assert [entry["key"] for entry in answer] == ["zz-b", "zz-c"]
    assert answer[0]["info"]["db_name"] == "zz-b"
    every = ok(client("GET", "/_dbs_info"))
    assert [entry["key"] for entry in every] == ok(client("GET", "/_all_dbs"))


# -- 10. _bulk_get atts_since ----------------------------------------------------------------------


def _with_attachment(client: Client, db: str, doc_id: str = "a") -> str:
    data = base64.b64encode(b"hello").decode()
    doc = {"_id": doc_id, "_attachments": {"f.txt": {"content_type": "text/plain", "data": data}}}
    return str(save(client, db, [doc])[0]["rev"])


def test_bulk_get_atts_since(client: Client, db: str) -> None:
    rev = _with_attachment(client, db)
    empty = ok(client("POST", f"{db}/_bulk_get", {"docs": [{"id": "a", "atts_since": []}]}))
    att = empty["results"][0]["docs"][0]["ok"]["_attachments"]["f.txt"]
    assert att["stub"] is True and "data" not in att
    for bad in ("1-abc", 1, None, {"a": 1}):
        item = {"id": "a", "rev": rev, "atts_since": bad}
        answer = ok(client("POST", f"{db}/_bulk_get", {"docs": [item]}))
        assert answer["results"][0] == {
            "id": "a",
            "docs": [
                {
                    "error": {
                        "id": "a",
                        "rev": bad,
                        "error": "bad_request",
                        "reason": "att_since value must be array of revs.",
                    }
                }
            ],
        }
    item = {"id": "a", "atts_since": [rev, "nonsense"]}
    error = ok(client("POST", f"{db}/_bulk_get", {"docs": [item]}))["results"][0]["docs"][0]
    assert error["error"]["rev"] == "nonsense"
    assert error["error"]["reason"] == "Invalid rev format"


# -- 11. attachments=true beside include_docs ------------------------------------------------------


def test_attachments_true_inlines_data_in_included_docs(client: Client, db: str) -> None:
    _with_attachment(client, db)
    hello = base64.b64encode(b"hello").decode()

    def attachment(doc: dict[str, Any]) -> dict[str, Any]:
        return dict(doc["_attachments"]["f.txt"])

    # changes_test.exs COUCHDB-1923
    stubbed = ok(client("GET", f"{db}/_changes?include_docs=true"))["results"][0]["doc"]
    assert attachment(stubbed)["stub"] is True
    inline = ok(client("GET", f"{db}/_changes?include_docs=true&attachments=true"))
    att = attachment(inline["results"][0]["doc"])
    assert att["data"] == hello and "stub" not in att
    rows = ok(client("GET", f"{db}/_all_docs?include_docs=true&attachments=true"))["rows"]
    assert attachment(rows[0]["doc"])["data"] == hello
    body = {"keys": ["a"], "include_docs": True, "attachments": True}
    rows = ok(client("POST", f"{db}/_all_docs", body))["rows"]
    assert attachment(rows[0]["doc"])["data"] == hello
    assert "stub" in attachment(
        ok(client("GET", f"{db}/_all_docs?include_docs=true"))["rows"][0]["doc"]
    )


def test_attachments_true_inlines_data_in_view_docs(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    _with_attachment(client, db)
    view = {"map": "function(doc) { emit(doc._id, null); }"}
    save(client, db, [{"_id": "_design/d", "views": {"all": view}}])
    path = f"{db}/_design/d/_view/all?include_docs=true&key={q('a')}"
    assert ok(client("GET", path))["rows"][0]["doc"]["_attachments"]["f.txt"]["stub"] is True
    inline = ok(client("GET", path + "&attachments=true"))["rows"][0]["doc"]
    assert inline["_attachments"]["f.txt"]["data"] == base64.b64encode(b"hello").decode()


# -- 12. _temp_view --------------------------------------------------------------------------------


def test_temp_view_is_gone(client: Client, db: str) -> None:
    for method in ("POST", "GET"):
        answer = client(method, f"{db}/_temp_view", {"map": "function(doc) { emit(null); }"})
        assert (answer.status, answer.json) == (
            410,
            {"error": "gone", "reason": "Temporary views are not supported in CouchDB"},
        )


# -- 8. _all_docs arguments as a map view's (couch_mrview_util:validate_args) ----------------------


def _refusal(client: Client, method: str, path: str, body: Any = None) -> tuple[int, str, str]:
    answer = client(method, path, body)
    return answer.status, answer.json["error"], answer.json["reason"]


@pytest.mark.parametrize("endpoint", ["_all_docs", "_design_docs", "_local_docs"])
def test_all_docs_refuses_grouping_and_reduce(client: Client, db: str, endpoint: str) -> None:
    grouping = (400, "query_parse_error", "Invalid use of grouping on a map view.")
    for query in ("group=true", "group_level=1", "group=false&group_level=2&group=true"):
        assert _refusal(client, "GET", f"{db}/{endpoint}?{query}") == grouping
    assert _refusal(client, "POST", f"{db}/{endpoint}", {"group": True}) == grouping
    reduce = (400, "query_parse_error", "Reduce is invalid for map-only views.")
    assert _refusal(client, "GET", f"{db}/{endpoint}?reduce=true") == reduce
    assert _refusal(client, "POST", f"{db}/{endpoint}", {"reduce": True}) == reduce
    both = (
        400,
        "query_parse_error",
        "Can't specify group=false and group_level>0 at the same time",
    )
    assert _refusal(client, "GET", f"{db}/{endpoint}?group=false&group_level=1") == both
    # determine_group_level: no grouping asked for is level 0, which a map view takes.
    for query in ("group=false", "group_level=0", "reduce=false", "group=true&group_level=0"):
        ok(client("GET", f"{db}/{endpoint}?{query}"))


def test_all_docs_keys_with_other_bounds_is_a_query_parse_error(client: Client, db: str) -> None:
    save(client, db, [{"_id": name} for name in "abcd"])
    refused = (
        400,
        "query_parse_error",
        "`keys` is incompatible with `key`, `start_key` and `end_key`",
    )
    for query in (
        f"keys={q(['a', 'b'])}&key={q('a')}",
        f"keys={q(['a'])}&endkey={q('c')}",
        f"startkey={q('a')}&keys={q(['a', 'b'])}",
    ):
        assert _refusal(client, "GET", f"{db}/_all_docs?{query}") == refused
    body = {"keys": ["a", "b"], "start_key": "a"}
    assert _refusal(client, "POST", f"{db}/_all_docs", body) == refused
    # In order: a one-key keys after endkey sets both bounds to its key, and the
    # request's keys list answers (a missing id as a not_found row).
    answer = ok(client("GET", f"{db}/_all_docs?endkey={q('c')}&keys={q(['a'])}"))
    assert answer["rows"] == [{"id": "a", "key": "a", "value": answer["rows"][0]["value"]}]
    missing = ok(client("GET", f"{db}/_all_docs?key={q('x')}&keys={q(['z'])}"))
    assert missing["rows"] == [{"key": "z", "error": "not_found"}]


def test_all_docs_parameters_apply_in_order(client: Client, db: str) -> None:
    save(client, db, [{"_id": name} for name in "abcd"])
    assert ids(ok(client("GET", f"{db}/_all_docs?key={q('a')}&endkey={q('b')}"))) == ["a", "b"]
    assert ids(ok(client("GET", f"{db}/_all_docs?endkey={q('b')}&key={q('c')}"))) == ["c"]
    # A repeated parameter: the last one stands (parse_params folds over each).
    answer = ok(client("GET", f"{db}/_all_docs?startkey={q('a')}&startkey={q('c')}"))
    assert ids(answer) == ["c", "d"]


def test_all_docs_doc_id_bounds_stand_in_for_absent_keys(client: Client, db: str) -> None:
    save(client, db, [{"_id": name} for name in "abcd"])

    def listed(query: str) -> list[str]:
        return ids(ok(client("GET", f"{db}/_all_docs?{query}")))

    # couch_mrview_util:ad_skey_opts / ad_ekey_opts: the doc id when no key is given.
    assert listed("startkey_docid=b") == ["b", "c", "d"]
    assert listed("start_key_doc_id=b&endkey_docid=c") == ["b", "c"]
    assert listed("endkey_docid=b&inclusive_end=false") == ["a"]
    assert listed("startkey_docid=c&descending=true") == ["c", "b", "a"]
    # A key bound wins over the doc id one.
    assert listed(f"startkey={q('c')}&startkey_docid=a") == ["c", "d"]
    answer = ok(client("POST", f"{db}/_all_docs", {"startkey_docid": "c"}))
    assert ids(answer) == ["c", "d"]


def test_all_docs_keys_that_are_no_ids_answer_not_found_rows(client: Client, db: str) -> None:
    save(client, db, [{"_id": str(n)} for n in range(4)])
    # all_docs_test.exs, "POST with keys and limit".
    answer = ok(client("POST", f"{db}/_all_docs", {"keys": [1, 2], "limit": 1}))
    assert answer["rows"] == [{"key": 1, "error": "not_found"}]
    mixed = ok(client("POST", f"{db}/_all_docs", {"keys": ["1", {"a": 1}, "2"], "skip": 1}))
    assert [row.get("id", row.get("error")) for row in mixed["rows"]] == ["not_found", "2"]
    # fabric_view_all_docs:go drops `skip` keys, then keeps `limit` of the rest.
    window = ok(
        client("POST", f"{db}/_all_docs", {"keys": [1, "1", "2", "3"], "skip": 1, "limit": 2})
    )
    assert [row.get("id") for row in window["rows"]] == ["1", "2"]
    backwards = ok(client("POST", f"{db}/_all_docs", {"keys": [1, "2"], "descending": True}))
    assert [row["key"] for row in backwards["rows"]] == ["2", 1]
    for endpoint in ("_design_docs", "_local_docs"):  # outside their namespace: left out
        assert ok(client("POST", f"{db}/{endpoint}", {"keys": [1]}))["rows"] == []


def test_all_docs_update_seq_is_null_with_keys(client: Client, db: str) -> None:
    save(client, db, [{"_id": "a"}])
    # fabric_view_all_docs:go: the keys clause's meta carries {update_seq, null}.
    answer = ok(client("GET", f"{db}/_all_docs?keys={q(['a'])}&update_seq=true"))
    assert "update_seq" in answer and answer["update_seq"] is None
    posted = ok(client("POST", f"{db}/_all_docs?update_seq=true", {"keys": ["a", "b"]}))
    assert posted["update_seq"] is None
    assert isinstance(ok(client("GET", f"{db}/_all_docs?update_seq=true"))["update_seq"], str)


# -- 9. _changes' _selector fields (couch_changes:get_selector_and_fields) -------------------------


def test_changes_selector_fields_cut_each_doc(client: Client, db: str) -> None:
    save(client, db, [{"_id": "a", "x": 1, "y": {"z": 2, "w": 3}}, {"_id": "b", "x": 0}])
    body = {"selector": {"x": 1}, "fields": ["_id", "y.z"]}
    answer = ok(client("POST", f"{db}/_changes?filter=_selector&include_docs=true", body))
    assert [row["doc"] for row in answer["results"]] == [{"_id": "a", "y": {"z": 2}}]
    # Without include_docs there is no doc to cut; an empty list keeps all fields.
    bare = ok(client("POST", f"{db}/_changes?filter=_selector", body))
    assert [("doc" in row, row["id"]) for row in bare["results"]] == [(False, "a")]
    whole = ok(
        client("POST", f"{db}/_changes?filter=_selector&include_docs=true", {**body, "fields": []})
    )
    assert whole["results"][0]["doc"]["x"] == 1


def test_changes_selector_fields_must_be_an_array(client: Client, db: str) -> None:
    for fields in ("_id", {"a": 1}, 1):
        body = {"selector": {"x": 1}, "fields": fields}
        assert _refusal(client, "POST", f"{db}/_changes?filter=_selector", body) == (
            400,
            "bad_request",
            "Selector error: fields must be JSON array",
        )
    body = {"selector": {"x": 1}, "fields": [1]}
    status, error, _ = _refusal(client, "POST", f"{db}/_changes?filter=_selector", body)
    assert (status, error) == (400, "bad_request")


# -- 10. POST /{db}/_index/_bulk_delete (mango_httpd:handle_index_req) ---------------------------


def test_index_bulk_delete(client: Client, db: str) -> None:
    for ddoc in ("one", "two"):
        index = {"index": {"fields": [ddoc]}, "ddoc": ddoc, "name": ddoc}
        ok(client("POST", f"{db}/_index", index))
    body = {"docids": ["one", "_design/two", "three"], "w": 3}
    answer = ok(client("POST", f"{db}/_index/_bulk_delete", body))
    # The fold prepends each entry: the lists come out last id first.
    assert answer == {
        "success": [{"id": "_design/two", "ok": True}, {"id": "_design/one", "ok": True}],
        "fail": [{"id": "_design/three", "error": "not_found"}],
    }
    assert [i["ddoc"] for i in ok(client("GET", f"{db}/_index"))["indexes"]] == [None]
    assert client("GET", f"{db}/_design/one").status == 404
    for method in ("GET", "DELETE", "PUT"):
        assert client(method, f"{db}/_index/_bulk_delete").status == 405


def test_index_bulk_delete_refusals(client: Client, db: str) -> None:
    path = f"{db}/_index/_bulk_delete"
    assert _refusal(client, "POST", path, {}) == (
        400,
        "missing_required_key",
        "Missing required key: docids",
    )
    assert _refusal(client, "POST", path, {"docids": "x"})[:2] == (400, "invalid_bulk_docs")
    assert _refusal(client, "POST", path, {"docids": ["a/b/c"]})[:2] == (400, "invalid_index_name")
    assert _refusal(client, "POST", path, {"docids": [], "w": 0})[:2] == (
        400,
        "invalid_pos_integer",
    )
    assert _refusal(client, "POST", path, {"docids": [], "r": 1}) == (
        400,
        "invalid_key",
        "Invalid key r for this request.",
    )


# -- 11. /_uuids' count (couch_httpd_misc_handlers:handle_uuids_req) -------------------------------


def test_uuids_count_must_be_a_positive_integer(client: Client) -> None:
    for count in ("-1", "abc", "1.5", ""):
        assert _refusal(client, "GET", f"/_uuids?count={count}") == (
            400,
            "bad_request",
            "count must be a positive integer",
        )
    assert _refusal(client, "GET", "/_uuids?count=1001") == (
        400,
        "bad_request",
        "count parameter too large",
    )
    assert ok(client("GET", "/_uuids?count=0")) == {"uuids": []}


def test_design_docs_offset_counts_every_document_before_the_start(client: Client, db: str) -> None:
    """couch_mrview:all_docs_fold folds the whole by_id tree for _design_docs (with
    couch_db:set_design_doc_keys narrowing the range), so its offset counts every
    document before the start, design or not, and a range past the last design
    document (nothing to show) answers the whole tree's count; total_rows is the
    number of design documents."""
    for doc_id in ("A", "B", "doc0", "doc1", "doc2", "_design/a", "_design/b"):
        assert client("PUT", f"{db}/{doc_id}", {}).status == 201
    expected = {
        "": (2, ["_design/a", "_design/b"]),  # A and B sort before "_"
        'startkey="_design/b"': (3, ["_design/b"]),
        'key="zzz"': (7, []),
        'startkey="zzz"': (7, []),
        'startkey="a"&descending=true': (3, ["_design/b", "_design/a"]),  # doc0..doc2
        "descending=true&limit=1": (3, ["_design/b"]),
    }
    for query, (offset, ids) in expected.items():
        answer = ok(client("GET", f"{db}/_design_docs?{query}"))
        assert answer["total_rows"] == 2, query
        assert (answer["offset"], [r["id"] for r in answer["rows"]]) == (offset, ids), query


def test_design_options_include_design_and_local_seq(client: Client, db: str) -> None:
    """design_options_test.exs: a design document's ``options.include_design`` maps
    design documents too (not by default, nor with false), ``local_seq`` gives
    every mapped document its ``_local_seq``; each is another index."""

    def ddoc(doc_id: str, options: dict[str, Any]) -> None:
        views = {
            "data": {"map": "function(doc) { emit(null, doc._id); }"},
            "with_seq": {"map": "function(doc) { emit(doc._local_seq, null); }"},
        }
        put(client, db, doc_id, {"options": options, "views": views})

    ddoc("_design/fu", {"include_design": True})
    ddoc("_design/bingo", {"include_design": False})
    ddoc("_design/bango", {})
    rows = client("GET", f"{db}/_design/fu/_view/data").json["rows"]
    assert [row["value"] for row in rows] == ["_design/bango", "_design/bingo", "_design/fu"]
    assert client("GET", f"{db}/_design/bingo/_view/data").json["rows"] == []
    assert client("GET", f"{db}/_design/bango/_view/data").json["rows"] == []
    ddoc("_design/seq", {"include_design": True, "local_seq": True})
    put(client, db, "plain", {})
    rows = client("GET", f"{db}/_design/seq/_view/with_seq").json["rows"]
    seqs = {row["id"]: row["key"] for row in rows}
    assert len(seqs) == 5 and all(isinstance(seq, int) and seq > 0 for seq in seqs.values())
    assert seqs["plain"] == client("GET", f"{db}/plain?local_seq=true").json["_local_seq"]
    # Without local_seq nothing has one: every key is null.
    rows = client("GET", f"{db}/_design/fu/_view/with_seq").json["rows"]
    assert {row["key"] for row in rows} == {None}

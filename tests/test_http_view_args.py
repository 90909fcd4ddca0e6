"""View query parameters as CouchDB 3.x parses and checks them
(couch_mrview_http:parse_params and parse_body_and_query,
couch_mrview_util:validate_args and check_range, chttpd_view:handle_view_req):
every parameter in a POST body, the query string over it, parameters applied in
order, CouchDB's 400 query_parse_error answers, update_seq and conflicts.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve import start_server


@dataclass
class Resp:
    status: int
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class Client:
    """A bare HTTP/1.1 client (stdlib), as tests/test_http.py's."""

    def __init__(self, port: int) -> None:
        self.port = port

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Resp:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Resp(resp.status, resp.read())
        finally:
            conn.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    handle = start_server(str(tmp_path_factory.mktemp("serve")), "127.0.0.1", 0, fsync=False)
    yield handle
    handle.stop()


@pytest.fixture
def client(server: Any) -> Client:
    return Client(server.port)


VIEWS = {
    "m": {"map": "function(doc) { if (doc.k !== undefined) emit(doc.k, doc.k * 10); }"},
    "r": {"map": "function(doc) { if (doc.k !== undefined) emit(doc.k, 1); }", "reduce": "_count"},
}


@pytest.fixture
def db(client: Client, request: pytest.FixtureRequest) -> str:
    """A fresh database named after the test, holding d0..d4 (k = 0..4) and _design/d."""
    name = "t" + request.node.name.lower()[:60]
    name = "".join(c if c.isalnum() or c in "_-" else "-" for c in name)
    assert client("PUT", f"/{name}").status == 201
    docs = [{"_id": f"d{k}", "k": k} for k in range(5)]
    docs.append({"_id": "_design/d", "views": VIEWS})
    assert client("POST", f"/{name}/_bulk_docs", {"docs": docs}).status == 201
    return f"/{name}"


def view(client: Client, db: str, name: str, query: str = "", body: Any = None) -> Resp:
    return client("GET" if body is None else "POST", f"{db}/_design/d/_view/{name}{query}", body)


def ok(resp: Resp) -> Any:
    assert resp.status == 200, resp.raw
    return resp.json


def ids(resp: Resp) -> list[str]:
    return [row["id"] for row in ok(resp)["rows"]]


def parse_error(resp: Resp) -> str:
    assert resp.status == 400, resp.raw
    assert resp.json["error"] == "query_parse_error", resp.json
    return str(resp.json["reason"])


def test_post_body_members_are_view_parameters(client: Client, db: str) -> None:
    body = {"limit": 1, "descending": True, "startkey": 3, "include_docs": True}
    rows = ok(view(client, db, "m", body=body))["rows"]
    assert [(r["id"], r["doc"]["k"]) for r in rows] == [("d3", 3)]
    assert ids(view(client, db, "m", body={"key": 2, "skip": 0})) == ["d2"]
    exclusive = {"start_key": 1, "end_key": 3, "inclusive_end": False}
    assert ids(view(client, db, "m", body=exclusive)) == ["d1", "d2"]
    assert ok(view(client, db, "r", body={"group": True, "startkey": 3}))["rows"] == [
        {"key": 3, "value": 1},
        {"key": 4, "value": 1},
    ]
    assert ok(view(client, db, "r", body={"reduce": False, "endkey": 0}))["rows"] == [
        {"id": "d0", "key": 0, "value": 1}
    ]
    bad = view(client, db, "m", body={"limit": "x"})
    # A body's string is an Erlang binary: parse_int's list_to_integer refuses even
    # "1", and ~p shows it as one.
    assert parse_error(bad) == 'Invalid value for integer: <<"x">>'
    assert parse_error(view(client, db, "m", body={"skip": "1"})) == (
        'Invalid value for integer: <<"1">>'
    )


def test_the_query_string_overrides_the_body(client: Client, db: str) -> None:
    answer = view(client, db, "m", "?limit=2", body={"limit": 1, "descending": True})
    assert ids(answer) == ["d4", "d3"]
    answer = view(client, db, "m", "?descending=false&startkey=1", {"descending": True, "key": 4})
    # The body's key=4 set both ends; the query string's startkey=1 replaced the start only.
    assert ids(answer) == ["d1", "d2", "d3", "d4"]


def test_post_without_json_content_type_is_415(client: Client, db: str) -> None:
    for ctype in ("text/plain", "application/x-www-form-urlencoded"):
        r = client("POST", f"{db}/_design/d/_view/m", {"keys": [1]}, {"Content-Type": ctype})
        assert r.status == 415, r.raw
        assert r.json["error"] == "bad_content_type"
    charset = {"Content-Type": "application/json; charset=utf-8"}
    assert client("POST", f"{db}/_design/d/_view/m", {"keys": [1, 2]}, charset).status == 200


def test_post_body_keys_and_queries_as_couchdb(client: Client, db: str) -> None:
    null_keys = view(client, db, "m", body={"keys": None})
    assert (null_keys.status, null_keys.json["error"]) == (400, "bad_request")
    assert null_keys.json["reason"] == "`keys` member must be an array."
    queries = view(client, db, "m", body={"queries": [{}]})
    assert (queries.status, queries.json["error"]) == (400, "bad_request")


def test_multi_key_fetches_on_a_reduce_view_need_group_true(client: Client, db: str) -> None:
    message = "Multi-key fetches for reduce views must use `group=true`"
    assert parse_error(view(client, db, "r", body={"keys": [1, 2]})) == message
    assert parse_error(view(client, db, "r", "?keys=[1,2]")) == message
    assert parse_error(view(client, db, "r", "?keys=[1,2]&group_level=1")) == message
    assert parse_error(view(client, db, "r", "?keys=[]")) == message
    grouped = ok(view(client, db, "r", "?group=true", body={"keys": [2, 1]}))["rows"]
    assert grouped == [{"key": 2, "value": 1}, {"key": 1, "value": 1}]
    assert ids(view(client, db, "r", "?reduce=false", body={"keys": [2, 1]})) == ["d2", "d1"]
    # One key is key=K (treat_single_keys_as_key): a reduction over that key.
    assert ok(view(client, db, "r", body={"keys": [3]}))["rows"] == [{"key": None, "value": 1}]


def test_a_start_key_past_the_end_key_is_a_400(client: Client, db: str) -> None:
    ascending = parse_error(view(client, db, "m", "?startkey=3&endkey=1"))
    assert ascending == (
        "No rows can match your key range, reverse your start_key and end_key "
        "or set descending=true"
    )
    descending = parse_error(view(client, db, "m", "?startkey=1&endkey=3&descending=true"))
    assert descending.endswith("or set descending=false")
    assert parse_error(view(client, db, "r", body={"start_key": "b", "end_key": "a"}))
    assert ids(view(client, db, "m", "?startkey=3&endkey=1&descending=TRUE")) == ["d3", "d2", "d1"]
    assert ids(view(client, db, "m", "?startkey=2&endkey=2")) == ["d2"]
    # Equal keys: the doc ids decide (check_range compares {key, docid}).
    docids = "?startkey=2&endkey=2.0&startkey_docid=d9&endkey_docid=d0"
    assert parse_error(view(client, db, "m", docids)).startswith("No rows can match")


def test_keys_with_key_startkey_or_endkey_is_a_400(client: Client, db: str) -> None:
    message = "`keys` is incompatible with `key`, `start_key` and `end_key`"
    assert parse_error(view(client, db, "m", "?key=1", body={"keys": [1, 2]})) == message
    assert parse_error(view(client, db, "m", "?keys=[1,2]&startkey=0")) == message
    assert parse_error(view(client, db, "m", body={"keys": [1, 2], "end_key": 3})) == message
    assert ok(view(client, db, "m", "?keys=[]&startkey=0"))["rows"] == []


def test_stale_stable_and_update_values_are_checked(client: Client, db: str) -> None:
    assert parse_error(view(client, db, "m", "?stale=bogus")) == "Invalid value for `stale`."
    assert parse_error(view(client, db, "m", "?stable=maybe")) == "Invalid value for `stable`."
    assert parse_error(view(client, db, "m", "?update=maybe")) == "Invalid value for `update`."
    assert parse_error(view(client, db, "m", body={"stable": 1})) == "Invalid value for `stable`."
    assert len(ids(view(client, db, "m"))) == 5  # built, so stale=ok has rows to read
    for query in ("?stale=ok", "?stale=update_after", "?stable=true", "?update=lazy"):
        assert ids(view(client, db, "m", query + "&limit=1")) == ["d0"], query
    assert ids(view(client, db, "m", "?limit=1", body={"stable": False, "update": True})) == ["d0"]


def test_group_false_with_a_group_level_is_a_400(client: Client, db: str) -> None:
    message = "Can't specify group=false and group_level>0 at the same time"
    assert parse_error(view(client, db, "r", "?group=false&group_level=1")) == message
    assert parse_error(view(client, db, "r", body={"group": False, "group_level": 2})) == message
    assert ok(view(client, db, "r", "?group=false&group_level=0"))["rows"] == [
        {"key": None, "value": 5}
    ]
    reason = parse_error(view(client, db, "r", "?conflicts=true"))
    assert reason == "`conflicts` is invalid for reduce views."


def test_a_later_parameter_overrides_an_earlier_one(client: Client, db: str) -> None:
    assert ids(view(client, db, "m", "?key=1&endkey=3")) == ["d1", "d2", "d3"]
    assert ids(view(client, db, "m", "?endkey=3&key=1")) == ["d1"]
    assert ids(view(client, db, "m", "?startkey=0&key=2&startkey=1")) == ["d1", "d2"]
    assert ids(view(client, db, "m", "?limit=1&limit=3")) == ["d0", "d1", "d2"]
    assert ids(view(client, db, "m", "?descending=true&descending=false&limit=1")) == ["d0"]


def test_update_seq_is_the_indexs(client: Client, db: str) -> None:
    """An up-to-date index's update_seq is the database's; a stale=ok read of one a
    write has overtaken names the index's own, older seq (view_update_seq_test.exs)."""
    seq = ok(client("GET", db))["update_seq"]
    answer = ok(view(client, db, "m", "?update_seq=true&limit=1"))
    assert list(answer) == ["total_rows", "offset", "update_seq", "rows"]
    assert answer["update_seq"] == seq
    reduced = ok(view(client, db, "r", body={"update_seq": True}))
    assert reduced == {"update_seq": seq, "rows": [{"key": None, "value": 5}]}
    assert "update_seq" not in ok(view(client, db, "m", "?update_seq=false"))
    assert client("PUT", f"{db}/d5", {"k": 5}).status == 201
    newer = ok(client("GET", db))["update_seq"]
    stale = ok(view(client, db, "m", "?update_seq=true&stale=ok"))
    assert (stale["update_seq"], stale["total_rows"]) == (seq, 5)
    fresh = ok(view(client, db, "m", "?update_seq=true"))
    assert (fresh["update_seq"], fresh["total_rows"]) == (newer, 6)


def test_conflicts_with_include_docs_as_all_docs(client: Client, db: str) -> None:
    rev1 = ok(client("GET", f"{db}/d1"))["_rev"]
    branches = [
        {"_id": "d1", "k": 1, "_revisions": {"start": 2, "ids": [side * 32, rev1.split("-")[1]]}}
        for side in ("a", "b")
    ]
    made = client("POST", f"{db}/_bulk_docs", {"docs": branches, "new_edits": False})
    assert made.status == 201
    answer = ok(view(client, db, "m", "?key=1&include_docs=true&conflicts=true"))
    assert answer["rows"][0]["doc"]["_conflicts"] == ["2-" + "a" * 32]
    assert answer["rows"][0]["doc"]["_rev"] == "2-" + "b" * 32
    body = {"keys": [1, 2], "include_docs": True, "conflicts": True}
    docs = [r["doc"] for r in ok(view(client, db, "m", body=body))["rows"]]
    assert docs[0]["_conflicts"] == ["2-" + "a" * 32] and "_conflicts" not in docs[1]
    plain = ok(view(client, db, "m", "?key=1&include_docs=true"))["rows"][0]["doc"]
    assert "_conflicts" not in plain


def test_booleans_are_case_insensitive(client: Client, db: str) -> None:
    assert ids(view(client, db, "m", "?descending=TRUE&limit=1")) == ["d4"]
    assert ids(view(client, db, "m", "?descending=False&limit=1")) == ["d0"]
    assert ids(view(client, db, "r", "?reduce=FALSE&limit=1")) == ["d0"]
    rows = ok(view(client, db, "m", "?include_docs=True&key=2"))["rows"]
    assert rows[0]["doc"]["_id"] == "d2"
    assert ok(view(client, db, "r", "?group=tRuE&limit=1"))["rows"] == [{"key": 0, "value": 1}]
    assert ids(view(client, db, "m", "?inclusive_end=FALSE&startkey=0&endkey=2")) == ["d0", "d1"]
    reason = parse_error(view(client, db, "m", "?descending=yes"))
    assert reason == 'Invalid boolean parameter: "yes"'


def test_a_linked_doc_at_another_revision_has_no_conflicts(client: Client, db: str) -> None:
    """A row's {"_id", "_rev"} link opens that revision, its own document's too
    (couch_mrview_util's docid_rev; settee took the winner then), through
    open_doc_revs, which adds no meta fields: only the winner carries _conflicts
    (found in review: a losing revision listed itself)."""
    rev1 = ok(client("GET", f"{db}/d1"))["_rev"]
    branches = [
        {"_id": "d1", "k": 1, "_revisions": {"start": 2, "ids": [side * 32, rev1.split("-")[1]]}}
        for side in ("a", "b")
    ]
    assert client("POST", f"{db}/_bulk_docs", {"docs": branches, "new_edits": False}).status == 201
    loser = "2-" + "a" * 32
    link = "function(doc) { if (doc._id === 'd1') emit(0, {_id: 'd1', _rev: 'REV'}); }"
    link = link.replace("REV", loser)
    ddoc = {"_id": "_design/link", "views": {"l": {"map": link}}}
    assert client("POST", f"{db}/_bulk_docs", {"docs": [ddoc]}).status == 201
    rows = ok(client("GET", f"{db}/_design/link/_view/l?include_docs=true&conflicts=true"))["rows"]
    docs = [row["doc"] for row in rows]
    assert [d["_rev"] for d in docs] == [loser] and "_conflicts" not in docs[0]


def test_a_javascript_reduce_that_does_not_shrink_is_an_error_row(client: Client, db: str) -> None:
    """couchjs's views.js (reduce_limit=true, CouchDB's default): an output over 5000
    characters and over half its input throws reduce_overflow_error, which the view
    answers as a row with a null key (view_errors_test.exs "reduce overflow error");
    a reduce that shrinks, or stays small, is answered as before."""
    pytest.importorskip("py_mini_racer")
    big = "function (k, v) { var c = []; for (var i=0; i<1000; i++) c.push('wazzap'); return c; }"
    small = "function (keys, values) { return values.length; }"
    ddoc = {
        "views": {
            "big": {"map": "function (doc) { emit(doc.k, doc.k); }", "reduce": big},
            "small": {"map": "function (doc) { emit(doc.k, doc.k); }", "reduce": small},
        }
    }
    assert client("PUT", f"{db}/_design/js", ddoc).status == 201
    rows = ok(client("GET", f"{db}/_design/js/_view/big"))["rows"]
    assert rows[0]["key"] is None and rows[0]["error"] == "reduce_overflow_error"
    assert rows[0]["reason"].startswith("Reduce output must shrink more rapidly")
    grouped = ok(client("GET", f"{db}/_design/js/_view/big?group=true"))["rows"]
    assert [row["error"] for row in grouped] == ["reduce_overflow_error"] * 5
    assert ok(client("GET", f"{db}/_design/js/_view/small"))["rows"] == [{"key": None, "value": 5}]


def test_a_never_built_index_names_the_token_of_no_change(client: Client, db: str) -> None:
    """A stale read of an index no query has built yet says update_seq as a seq
    token, as every other seq the server sends, which _changes takes as since
    (it was the integer 0, found in review)."""
    views = {"v": {"map": "function(doc) { emit(doc.k, null); }"}}
    assert client("PUT", f"{db}/_design/e", {"views": views}).status == 201
    answer = ok(client("GET", f"{db}/_design/e/_view/v?update_seq=true&stale=ok"))
    assert isinstance(answer["update_seq"], str) and answer["rows"] == []
    changes = ok(client("GET", f"{db}/_changes?since={answer['update_seq']}"))
    assert len(changes["results"]) == 7  # d0..d4, _design/d and _design/e


def test_keys_with_descending_come_in_reverse_order(client: Client, db: str) -> None:
    """fabric_view_map:go reverses ``keys`` for ``descending=true``: rows come by the
    keys read from the end, as the query's direction says."""
    assert ids(view(client, db, "m", "?descending=true", body={"keys": [1, 3]})) == ["d3", "d1"]
    assert ids(view(client, db, "m", "?descending=false", body={"keys": [1, 3]})) == ["d1", "d3"]


def test_offset_counts_skipped_rows_after_the_start_key(client: Client, db: str) -> None:
    """fabric_view_map's meta: ``offset`` is the rows before the start key plus
    ``skip``, capped at ``total_rows``."""
    answer = ok(view(client, db, "m", "?startkey=1&skip=2"))
    assert (answer["offset"], [r["id"] for r in answer["rows"]]) == (3, ["d3", "d4"])
    assert ok(view(client, db, "m", "?startkey=3&descending=true&skip=1"))["offset"] == 2
    assert ok(view(client, db, "m", "?startkey=4&skip=9"))["offset"] == 5


def test_approx_count_distinct_counts_each_key_once(client: Client, db: str) -> None:
    """couch_query_servers' ``_approx_count_distinct``: distinct keys (a HyperLogLog,
    exact for a handful), not rows."""
    pairs = {"map": "function(doc) { emit(doc.k % 2, null); }", "reduce": "_approx_count_distinct"}
    ddoc = {"views": {"p": pairs}}
    assert client("PUT", f"{db}/_design/acd", ddoc).status == 201
    answer = ok(client("GET", f"{db}/_design/acd/_view/p"))
    assert answer["rows"] == [{"key": None, "value": 2}]


def test_stale_ok_never_updates_and_update_after_updates_after_answering(
    client: Client, db: str
) -> None:
    """views.rst: ``stale=ok`` answers from the index as it is and leaves it so;
    ``stale=update_after`` answers the same, then brings the index up to date."""
    assert len(ids(view(client, db, "m"))) == 5  # built
    assert client("PUT", f"{db}/d9", {"k": 9}).status == 201
    assert len(ids(view(client, db, "m", "?stale=ok"))) == 5
    assert len(ids(view(client, db, "m", "?stale=ok"))) == 5
    assert len(ids(view(client, db, "m", "?stale=update_after"))) == 5
    assert len(ids(view(client, db, "m", "?stale=ok"))) == 6


def test_conflicts_without_include_docs_is_ignored_on_a_map_view(client: Client, db: str) -> None:
    """validate_args refuses ``conflicts`` only on a reduce view; without
    ``include_docs`` a map view has no documents to add them to."""
    answer = ok(view(client, db, "m", "?conflicts=true&key=1"))
    assert answer["rows"] == [{"id": "d1", "key": 1, "value": 10}]


def test_a_linked_doc_is_the_one_its_id_names(client: Client, db: str) -> None:
    """views.rst "Linked documents": with ``include_docs`` a value ``{"_id": X}``
    brings document X, not the emitting one."""
    link = "function(doc) { if (doc.k > 2) emit(doc.k, {_id: 'd0'}); }"
    ddoc = {"_id": "_design/link", "views": {"l": {"map": link}}}
    assert client("POST", f"{db}/_bulk_docs", {"docs": [ddoc]}).status == 201
    rows = ok(client("GET", f"{db}/_design/link/_view/l?include_docs=true"))["rows"]
    assert [(r["id"], r["doc"]["_id"]) for r in rows] == [("d3", "d0"), ("d4", "d0")]


def test_sum_of_arrays_adds_them_position_by_position(client: Client, db: str) -> None:
    """couch_query_servers:sum_arrays: the longer array's extra members are kept."""
    emit = "function(doc) { emit(null, doc.k % 2 ? [doc.k, 1] : [doc.k]); }"
    ddoc = {"views": {"s": {"map": emit, "reduce": "_sum"}}}
    assert client("PUT", f"{db}/_design/sums", ddoc).status == 201
    answer = ok(client("GET", f"{db}/_design/sums/_view/s"))
    assert answer["rows"] == [{"key": None, "value": [10, 2]}]


def test_sum_adds_objects_and_answers_what_it_cannot_add_as_the_row_value(
    client: Client, db: str
) -> None:
    """couch_query_servers:builtin_sum_rows: objects add key by key; a value that
    cannot be added makes that group's value an error object, and the query is a
    200 (CouchDB 3 catches the throw), the other groups unharmed."""
    emit = "function(doc) { emit(doc.k % 2, doc.k == 3 ? 'three' : {n: doc.k, m: {x: 1}}); }"
    ddoc = {"views": {"s": {"map": emit, "reduce": "_sum"}}}
    assert client("PUT", f"{db}/_design/objsums", ddoc).status == 201
    rows = ok(client("GET", f"{db}/_design/objsums/_view/s?group=true"))["rows"]
    assert rows[0] == {"key": 0, "value": {"m": {"x": 3}, "n": 6}}  # d0, d2 and d4
    assert rows[1]["key"] == 1  # d1's object, then d3's string
    assert rows[1]["value"]["error"] == "builtin_reduce_error"
    assert rows[1]["value"]["caused_by"] == "three"


def test_stats_of_arrays_and_of_pre_aggregated_objects(client: Client, db: str) -> None:
    """ddocs.rst: _stats combines pre-aggregated objects with numbers, and arrays
    of them position by position."""
    pre = "{sum: doc.k, count: 1, min: doc.k, max: doc.k, sumsqr: doc.k * doc.k}"
    views = {
        "arrays": {"map": "function(doc) { emit(null, [doc.k, 1]); }", "reduce": "_stats"},
        "mixed": {
            "map": f"function(doc) {{ emit(null, doc.k % 2 ? doc.k : {pre}); }}",
            "reduce": "_stats",
        },
    }
    assert client("PUT", f"{db}/_design/stats2", {"views": views}).status == 201
    arrays = ok(client("GET", f"{db}/_design/stats2/_view/arrays"))["rows"][0]["value"]
    assert arrays == [
        {"sum": 10, "count": 5, "min": 0, "max": 4, "sumsqr": 30},
        {"sum": 5, "count": 5, "min": 1, "max": 1, "sumsqr": 5},
    ]
    mixed = ok(client("GET", f"{db}/_design/stats2/_view/mixed"))["rows"][0]["value"]
    assert mixed == {"sum": 10, "count": 5, "min": 0, "max": 4, "sumsqr": 30}


def test_builtin_reduces_are_matched_by_prefix(client: Client, db: str) -> None:
    """couch_query_servers:builtin_reduce takes ``_sum_x`` as _sum and ``_count2`` as
    _count (couch_mrview:validate accepts them so when the design document is saved);
    the query answered 400 unknown builtin."""
    emit = "function(doc) { emit(null, doc.k); }"
    views = {"s": {"map": emit, "reduce": "_sum_x"}, "c": {"map": emit, "reduce": "_count2"}}
    assert client("PUT", f"{db}/_design/prefixed", {"views": views}).status == 201
    summed = ok(client("GET", f"{db}/_design/prefixed/_view/s"))["rows"]
    counted = ok(client("GET", f"{db}/_design/prefixed/_view/c"))["rows"]
    assert (summed, counted) == ([{"key": None, "value": 10}], [{"key": None, "value": 5}])


def test_couchdb_3_5_builtins_first_last_top_and_bottom(client: Client, db: str) -> None:
    """ddocs.rst (new in 3.5): for ``[a,1]: x, [a,2]: y`` with group_level=1, _first is
    x and _last y, a descending query too; _top_N and _bottom_N the N largest and
    smallest values; an N outside 1..100 is refused when the design document is
    saved, as couch_mrview:validate refuses it."""
    emit = "function(doc) { emit(['a', doc.k], 'v' + doc.k); }"
    views = {
        name: {"map": emit, "reduce": name} for name in ("_first", "_last", "_top_2", "_bottom_2")
    }
    assert client("PUT", f"{db}/_design/ranks", {"views": views}).status == 201
    expected = {"_first": "v0", "_last": "v4", "_top_2": ["v4", "v3"], "_bottom_2": ["v0", "v1"]}
    for name, value in expected.items():
        for query in ("?group_level=1", "?group_level=1&descending=true"):
            rows = ok(client("GET", f"{db}/_design/ranks/_view/{name}{query}"))["rows"]
            assert rows == [{"key": ["a"], "value": value}], (name, query)
    for bad, reason in (
        ("_top_0", "rank value must be between 1 and 100"),
        ("_bottom_x", "invalid rank reducer"),
    ):
        ddoc = {"views": {"v": {"map": emit, "reduce": bad}}}
        r = client("PUT", f"{db}/_design/bad", ddoc)
        assert (r.status, r.json) == (400, {"error": "invalid_design_doc", "reason": reason})


@pytest.mark.parametrize(
    ("view", "kind"),
    [
        ({"map": "function(doc) }{"}, "map"),
        ({"map": "function(doc) { emit(null); }", "reduce": "function(k, v, r) }{}"}, "reduce"),
        ({"map": "42"}, "map"),  # not a function
    ],
)
def test_uncompilable_view_is_refused_on_save(
    client: Client, db: str, view: dict[str, str], kind: str
) -> None:
    """couch_mrview_ddoc_validation_tests: couch_mrview:validate compiles each view's
    map and JavaScript reduce when the design document is saved, and refuses it with
    400 compilation_error (it was stored, and every query of the view failed)."""
    r = client("PUT", f"{db}/_design/broken", {"views": {"foo": view}})
    assert (r.status, r.json["error"]) == (400, "compilation_error"), r.raw
    assert r.json["reason"].startswith(f"Compilation of the {kind} function in the 'foo' view")
    assert client("GET", f"{db}/_design/broken").status == 404
    bulk = client(
        "POST", f"{db}/_bulk_docs", {"docs": [{"_id": "_design/b2", "views": {"foo": view}}]}
    )
    assert bulk.json[0]["error"] == "compilation_error"


def test_a_map_ending_in_a_semicolon_or_comment_compiles(client: Client, db: str) -> None:
    """couchjs runs a function's source as a script whose last statement is the
    function (rewrite_fun.js), so ``function (doc) {...};`` is a map function: PouchDB's
    own suite saves one (test.changes.js, "accepts _design as filter property")."""
    views = {
        "semi": {"map": "function (doc) { emit(doc._id, null) };"},
        "comment": {"map": "function (doc) { emit(doc._id, null) } // the ids\n"},
    }
    assert client("PUT", f"{db}/_design/lenient", {"views": views}).status == 201
    for name in views:
        rows = ok(client("GET", f"{db}/_design/lenient/_view/{name}"))["rows"]
        assert [row["key"] for row in rows] == [f"d{k}" for k in range(5)], name

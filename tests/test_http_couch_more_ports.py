"""More of CouchDB 3.5's Elixir tests, ported: ETags, document ids, ``_local_docs``,
recreated documents, view collation and ``include_docs``, large documents, purge
and ``_bulk_docs``.

Each section names the ``test/elixir/test/*`` file it comes from and each test
the test it ports (same requests, same assertions); every assertion is CouchDB's,
none needed adapting to a difference README lists. Where the JavaScript test the
Elixir one ports asserts more (recreate_doc.js, large_docs.js, the part of
view_include_docs.js a cluster could not run), that is checked too and said so.
A ``setup_all`` shared database is a module-scoped fixture here, as in
``tests/test_http_couch_view_ports.py``. None of these files needs a feature
settee serve leaves out (authentication, partitions, clustering, search).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")
pytest.importorskip("py_mini_racer", reason="map functions need settee[js]")

from tests import test_http
from tests.test_http import Client, put
from tests.test_http_couch_view_ports import bulk_save, make_docs, ok, qs, query, view
from tests.test_selector import ORDERED

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

ATT64 = "VGhpcyBpcyBhIGJhc2U2NCBlbmNvZGVkIHRleHQ="


def create_doc(client: Client, db: str, body: dict[str, Any]) -> Any:
    """couch/dbtest.ex create_doc: a POST to the database, 201 or 202 and ``ok``."""
    resp = client("POST", db, body)
    assert resp.status in (201, 202), resp.raw
    assert resp.json["ok"]
    return resp.json


def replicate(client: Client, server: Any, source: str, target: str) -> Any:
    """couch/dbtest.ex replicate: ``POST /_replicate`` between two of the server's
    databases, named by their absolute URLs."""
    base = f"http://127.0.0.1:{server.port}"
    return ok(client("POST", "/_replicate", {"source": base + source, "target": base + target}))


def compact(client: Client, db: str) -> None:
    """couch/dbtest.ex compact: 202, then wait until ``compact_running`` is false."""
    ok(client("POST", f"{db}/_compact"), 202)
    deadline = time.monotonic() + 10
    while ok(client("GET", db))["compact_running"]:
        assert time.monotonic() < deadline, "compaction still running after 10 s"
        time.sleep(0.02)


def shared_db(server: Any, name: str) -> tuple[Client, str]:
    """A database for a module-scoped fixture (an Elixir ``setup_all``)."""
    c = Client(server.port)
    ok(c("PUT", f"/{name}"), 201)
    return c, f"/{name}"


# -- etags_head_test.exs -------------------------------------------------------------------------


def test_etag_header_on_creation(client: Client, db: str) -> None:
    resp = client("PUT", f"{db}/1", {})
    assert resp.status == 201
    assert "ETag" in resp.headers


def test_etag_header_on_retrieval(client: Client, db: str) -> None:
    etag = client("PUT", f"{db}/1", {}).headers["ETag"]
    assert client("GET", f"{db}/1").headers["ETag"] == etag
    assert client("HEAD", f"{db}/1", headers={"If-None-Match": "s"}).headers["ETag"] == etag


def test_etag_header_on_head(client: Client, db: str) -> None:
    etag = client("PUT", f"{db}/1", {}).headers["ETag"]
    assert client("HEAD", f"{db}/1", headers={"If-None-Match": "s"}).headers["ETag"] == etag


def test_etags_head(client: Client, db: str) -> None:
    resp = client("PUT", f"{db}/1", {})
    assert resp.status == 201
    etag = resp.headers["ETag"]
    assert client("GET", f"{db}/1").headers["ETag"] == etag
    assert client("HEAD", f"{db}/1", headers={"If-None-Match": "s"}).headers["ETag"] == etag
    # replace a doc: If-Match stands in for the body's _rev
    resp = client("PUT", f"{db}/1", {}, headers={"If-Match": etag})
    assert resp.status == 201
    previous_etag, etag = etag, resp.headers["ETag"]
    # fail to replace a doc
    assert client("PUT", f"{db}/1", {}).status == 409
    # verify get w/Etag
    assert client("GET", f"{db}/1", headers={"If-None-Match": previous_etag}).status == 200
    assert client("GET", f"{db}/1", headers={"If-None-Match": etag}).status == 304
    assert client("GET", f"{db}/1", headers={"If-None-Match": f"W/{etag}"}).status == 304
    # fail to delete a doc
    assert client("DELETE", f"{db}/1", headers={"If-Match": previous_etag}).status == 409
    assert client("DELETE", f"{db}/1", headers={"If-Match": etag}).status == 200


# -- invalid_docids_test.exs ---------------------------------------------------------------------


def test_local_prefixed_ids_are_illegal(client: Client, db: str) -> None:
    for path in ("_local", "_local/", "_local%2F", "_local/foo/bar"):
        resp = client("PUT", f"{db}/{path}", {})
        assert resp.status == 400
        assert resp.json["error"] == "bad_request"


def test_using_a_non_string_id_is_forbidden(client: Client, db: str) -> None:
    resp = client("POST", db, {"_id": 1})
    assert resp.status == 400
    assert resp.json["error"] == "illegal_docid"
    assert resp.json["reason"] == "Document id must be a string"


@pytest.mark.parametrize("path", ["_other", "_tmp_view"])  # "absent _id", "accidental POST"
def test_a_put_to_an_unreserved_underscore_id_is_forbidden(
    client: Client, db: str, path: str
) -> None:
    resp = client("PUT", f"{db}/{path}", {})
    assert resp.status == 400
    assert resp.json["error"] == "illegal_docid"


def test_invalid_underscore_prefix(client: Client, db: str) -> None:
    resp = client("POST", db, {"_id": "_invalid"})
    assert resp.status == 400
    assert resp.json["error"] == "illegal_docid"
    assert resp.json["reason"] == "Only reserved document ids may start with underscore."


def test_explicit_bulk_docs_policy(client: Client, db: str) -> None:
    docs = [{"_id": "_design/foo"}, {"_id": "_local/bar"}]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status in (201, 202)
    for doc in docs:
        assert client("GET", f"{db}/{doc['_id']}").json["_id"] == doc["_id"]
    invalid = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "_invalid"}]})
    assert invalid.status == 400
    assert invalid.json["error"] == "illegal_docid"


# -- local_docs_test.exs -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_docs(server: Any) -> str:
    c, name = shared_db(server, "local_docs")
    ok(c("PUT", f"{name}/_local/foo", {"_id": "foo", "bar": "baz"}), 201)
    ok(c("PUT", f"{name}/_local/foo2", {"_id": "foo", "bar": "baz2"}), 201)
    return name


def test_local_docs_get_with_no_parameters(client: Client, local_docs: str) -> None:
    assert len(ok(client("GET", f"{local_docs}/_local_docs"))["rows"]) == 2


def test_local_docs_get_with_multiple_keys(client: Client, local_docs: str) -> None:
    keys = qs({"keys": '["_local/foo", "_local/foo2"]'})
    url = f"{local_docs}/_local_docs{keys}"
    assert len(ok(client("GET", url))["rows"]) == 2


def test_local_docs_post_with_empty_body(client: Client, local_docs: str) -> None:
    assert len(ok(client("POST", f"{local_docs}/_local_docs", {}))["rows"]) == 2


def test_local_docs_post_with_keys_and_limit(client: Client, local_docs: str) -> None:
    body = {"keys": ["_local/foo", "_local/foo2"], "limit": 1}
    assert len(ok(client("POST", f"{local_docs}/_local_docs", body))["rows"]) == 1


def test_local_docs_post_with_query_parameter_and_json_body(
    client: Client, local_docs: str
) -> None:
    body = {"keys": ["_local/foo", "_local/foo2"]}
    assert len(ok(client("POST", f"{local_docs}/_local_docs?limit=1", body))["rows"]) == 1


def test_local_docs_post_colliding_parameters_query_takes_precedence(
    client: Client, local_docs: str
) -> None:
    body = {"keys": ["_local/foo", "_local/foo2"], "limit": 2}
    assert ok(client("POST", f"{local_docs}/_local_docs?limit=0", body))["rows"] == []


# -- recreate_doc_test.exs -----------------------------------------------------------------------


def _created_and_deleted(client: Client, db: str, doc: dict[str, Any]) -> str:
    first_rev = create_doc(client, db, doc)["rev"]
    assert client("DELETE", f"{db}/foo?rev={first_rev}").status == 200
    return str(first_rev)


def test_recreate_document(client: Client, db: str) -> None:
    _created_and_deleted(client, db, {"_id": "foo", "a": "bar", "b": 42})
    for _ in range(10):
        create_doc(client, db, {"_id": "foo"})
        updated = {**client("GET", f"{db}/foo").json, "a": "baz"}
        resp = client("PUT", f"{db}/foo", updated)
        assert resp.status == 201
        assert client("DELETE", f"{db}/foo?rev={resp.json['rev']}").status == 200


# "COUCHDB-292 - recreate a deleted document": the deleted revision as the prev;
# "Recreate a deleted document with non-exsistant rev": random ones.
@pytest.mark.parametrize(
    "stale", [None, ("1-asfafasdf", "1-aasasfasdf")], ids=["couchdb-292", "non-existent"]
)
def test_recreate_a_deleted_document_with_an_old_rev_conflicts(
    client: Client, db: str, stale: tuple[str, str] | None
) -> None:
    doc = {"_id": "foo", "a": "bar", "b": 42}
    first_rev = _created_and_deleted(client, db, doc)
    rev, bin_rev = stale or (first_rev, first_rev)
    assert client("PUT", f"{db}/foo", {**doc, "_rev": rev}).status == 409
    # same as before, but with binary
    att = {"foo.txt": {"content_type": "text/plain", "data": ATT64}}
    bin_att_doc = {"_id": "foo", "_rev": bin_rev, "_attachments": att}
    assert client("PUT", f"{db}/foo", bin_att_doc).status == 409


# The Elixir test reinserts the first revision; recreate_doc.js, which it ports, the second.
@pytest.mark.parametrize("reinserted", [0, 1])
def test_couchdb_1265_changes_after_reinserting_an_old_rev(
    client: Client, db: str, reinserted: int
) -> None:
    revs = [{"_id": "a", "count": 0}]
    revs[0]["_rev"] = create_doc(client, db, revs[0])["rev"]
    while len(revs) < 3:
        doc = {"_id": "a", "_rev": revs[-1]["_rev"], "count": len(revs)}
        revs.append({**doc, "_rev": create_doc(client, db, doc)["rev"]})
    assert client("PUT", f"{db}/a?new_edits=false", revs[reinserted]).status == 201
    assert client("PUT", f"{db}/a", revs[-1]).status == 201
    resp = client("GET", f"{db}/_changes")
    assert resp.status == 200
    assert len(resp.json["results"]) == 1


# -- view_collation_test.exs ---------------------------------------------------------------------

# view_collation_test.exs's @values are the collation sequence that
# tests/test_selector.py checks the collator against: nulls, booleans, numbers,
# strings ("a" < "A" < "aa"), arrays, then objects member by member.
COLLATION_VALUES = ORDERED


@pytest.fixture(scope="module")
def collation(server: Any) -> str:
    c, name = shared_db(server, "view_collation")
    docs = [{"_id": str(i), "foo": v} for i, v in enumerate(COLLATION_VALUES, start=1)]
    bulk_save(c, name, docs)
    map_doc = {"views": {"foo": {"map": "function(doc) { emit(doc.foo, null); }"}}}
    assert c("PUT", f"{name}/_design/foo", map_doc).json["ok"]
    return f"{name}/_design/foo/_view/foo"


def _keys(client: Client, url: str, params: dict[str, Any] | None = None) -> list[Any]:
    return [row["key"] for row in client("GET", url + qs(params)).json["rows"]]


def test_ascending_collation_order(client: Client, collation: str) -> None:
    assert _keys(client, collation) == COLLATION_VALUES


def test_descending_collation_order(client: Client, collation: str) -> None:
    assert _keys(client, collation, {"descending": "true"}) == COLLATION_VALUES[::-1]


def test_key_query_option(client: Client, collation: str) -> None:
    for value in COLLATION_VALUES:
        assert _keys(client, collation, {"key": json.dumps(value)}) == [value]


def test_inclusive_end_true(client: Client, collation: str) -> None:
    params: dict[str, Any] = {"endkey": json.dumps("b"), "inclusive_end": True}
    assert _keys(client, collation, params)[-1] == "b"
    assert _keys(client, collation, {**params, "descending": True})[-1] == "b"


def test_inclusive_end_false(client: Client, collation: str) -> None:
    params: dict[str, Any] = {"endkey": json.dumps("b"), "inclusive_end": False}
    assert _keys(client, collation, params)[-1] == "aa"
    assert _keys(client, collation, {**params, "descending": True})[-1] == "B"
    params = {"endkey": json.dumps("b"), "endkey_docid": 11, "inclusive_end": False}
    assert _keys(client, collation, params)[-1] == "aa"
    assert _keys(client, collation, {**params, "endkey_docid": 12})[-1] == "b"


# -- view_include_docs_test.exs ------------------------------------------------------------------

INCLUDE_DOCS_DDOC = {
    "_id": "_design/test",
    "language": "javascript",
    "views": {
        "all_docs": {"map": "function(doc) { emit(doc.integer, doc.string) }"},
        "with_prev": {
            "map": "function(doc){if(doc.prev) emit(doc._id,{'_rev':doc.prev}); "
            "else emit(doc._id,{'_rev':doc._rev});}"
        },
        "with_id": {
            "map": "function(doc) {if(doc.link_id) { var value = {'_id':doc.link_id}; "
            "if (doc.link_rev) {value._rev = doc.link_rev}; emit(doc._id, value);}};"
        },
        "summate": {
            "map": "function (doc) { if (typeof doc.integer === 'number') "
            "{emit(doc.integer, doc.integer)};}",
            "reduce": "function (keys, values) { return sum(values); };",
        },
    },
}


def _with_include_docs_ddoc(client: Client, db: str) -> str:
    bulk_save(client, db, make_docs(range(100)))
    create_doc(client, db, INCLUDE_DOCS_DDOC)
    return db


@pytest.fixture(scope="module")
def include_docs(server: Any) -> str:
    return _with_include_docs_ddoc(*shared_db(server, "view_include_docs"))


def _all_docs_post(client: Client, db: str, keys: list[str]) -> list[Any]:
    return list(ok(client("POST", f"{db}/_all_docs?include_docs=true", {"keys": keys}))["rows"])


def test_include_docs_in_view(client: Client, include_docs: str) -> None:
    rows = ok(view(client, include_docs, "test/all_docs", {"include_docs": True, "limit": 2}))
    rows = rows["rows"]
    assert len(rows) == 2
    assert rows[0]["id"] == "0" and rows[0]["doc"]["_id"] == "0"
    assert rows[1]["id"] == "1" and rows[1]["doc"]["_id"] == "1"
    rows = ok(view(client, include_docs, "test/all_docs", {"include_docs": True}, [29, 74]))
    rows = rows["rows"]
    assert len(rows) == 2
    assert rows[0]["doc"]["_id"] == "29"
    assert rows[1]["doc"]["integer"] == 74


def test_include_docs_in_all_docs(client: Client, include_docs: str) -> None:
    params = {"limit": 2, "skip": 1, "include_docs": True}
    rows = ok(client("GET", f"{include_docs}/_all_docs{qs(params)}"))["rows"]
    assert len(rows) == 2
    assert rows[0]["doc"]["integer"] == 1
    assert rows[1]["doc"]["integer"] == 10
    rows = _all_docs_post(client, include_docs, ["not_a_doc"])
    assert len(rows) == 1
    assert "doc" not in rows[0]
    rows = _all_docs_post(client, include_docs, ["1", "foo"])
    assert len(rows) == 2
    assert rows[0]["doc"]["integer"] == 1
    assert "doc" not in rows[1]
    params = {"limit": 0, "include_docs": True}
    assert ok(client("GET", f"{include_docs}/_all_docs{qs(params)}"))["rows"] == []


def test_include_docs_no_reduce_support(client: Client, include_docs: str) -> None:
    resp = client("GET", f"{include_docs}/_design/test/_view/summate?include_docs=true")
    assert resp.status == 400
    assert resp.json["error"] == "query_parse_error"


def test_include_docs_reduce_support_when_reduce_false(client: Client, include_docs: str) -> None:
    params = {"reduce": False, "include_docs": True}
    url = f"{include_docs}/_design/test/_view/summate{qs(params)}"
    assert len(ok(client("GET", url))["rows"]) == 100


def test_not_an_error_with_include_docs_false_and_reduce_true(
    client: Client, include_docs: str
) -> None:
    params = {"reduce": True, "include_docs": False}
    rows = ok(client("GET", f"{include_docs}/_design/test/_view/summate{qs(params)}"))["rows"]
    assert len(rows) == 1
    assert rows[0]["value"] == 4950


def test_link_to_another_doc_from_a_value(client: Client, db: str) -> None:
    _with_include_docs_ddoc(client, db)
    create_doc(client, db, {"_id": "link-to-10", "link_id": "10"})
    rows = ok(view(client, db, "test/with_id", {"key": '"link-to-10"'}))["rows"]
    assert len(rows) == 1
    assert rows[0]["key"] == "link-to-10"
    assert rows[0]["value"]["_id"] == "10"
    params = {"key": '"link-to-10"', "include_docs": True}
    rows = ok(view(client, db, "test/with_id", params))["rows"]
    assert len(rows) == 1
    assert rows[0]["value"]["_id"] == "10"
    assert rows[0]["doc"]["_id"] == "10"


def test_emitted_rev_controls_things(client: Client, db: str) -> None:
    _with_include_docs_ddoc(client, db)
    doc_before = _all_docs_post(client, db, ["0"])[0]["doc"]
    resp = client("GET", f"{db}/0")
    assert resp.status == 200
    saved_rev = put(client, db, "0", {**resp.json, "integer": 100, "prev": resp.json["_rev"]})
    resp = client("GET", f"{db}/0")
    assert resp.status == 200
    doc_after = resp.json
    assert doc_after["_rev"] == saved_rev
    assert doc_after["_rev"] != doc_after["prev"]
    assert doc_after["integer"] == 100
    row0 = ok(view(client, db, "test/with_prev", {"include_docs": True}, ["0"]))["rows"][0]["doc"]
    assert row0["_id"] == "0"
    assert row0["_rev"] == doc_before["_rev"]
    assert "prev" not in row0
    assert row0["integer"] == 0
    # view_include_docs.js goes on, commented out there as a cluster cannot compact:
    # once compaction drops the emitted revision's body, its row's doc is null.
    compact(client, db)
    rows = ok(view(client, db, "test/with_prev", {"include_docs": True}, ["0", "23"]))["rows"]
    assert len(rows) == 2
    assert rows[0]["key"] == rows[0]["id"] == "0"
    assert rows[0]["doc"] is None
    assert rows[1]["doc"]["integer"] == 23


def test_include_docs_with_conflicts_couchdb_549(client: Client, db: str, server: Any) -> None:
    db_a, db_b = db, f"{db}-b"
    ok(client("PUT", db_b), 201)
    ddoc = {
        "_id": "_design/mydesign",
        "language": "javascript",
        "views": {"myview": {"map": " function(doc) {\n  emit(doc.value, 1);\n}\n"}},
    }
    create_doc(client, db_a, ddoc)
    create_doc(client, db_a, {"_id": "foo", "value": 1, "str": "1"})
    create_doc(client, db_b, {"_id": "foo", "value": 1, "str": "666"})
    create_doc(client, db_a, {"_id": "bar", "value": 2, "str": "2"})
    replicate(client, server, db_a, db_b)
    doc1b = ok(client("GET", f"{db_b}/foo?conflicts=true"))
    assert len(doc1b["_conflicts"]) == 1
    conflict_rev = doc1b["_conflicts"][0]
    assert "_conflicts" not in ok(client("GET", f"{db_b}/bar?conflicts=true"))
    params = {"include_docs": True, "conflicts": True}
    rows = ok(view(client, db_b, "mydesign/myview", params))["rows"]
    assert len(rows) == 2
    assert rows[0]["doc"]["_conflicts"] == [conflict_rev]
    assert "_conflicts" not in rows[1]["doc"]
    ok(client("DELETE", db_b))


# -- large_docs_text.exs -------------------------------------------------------------------------


def test_large_docs(client: Client, db: str) -> None:
    # 1024 copies as large_docs.js has them (11 KiB, bodies past one 4 KiB block);
    # the Elixir port cut it to 10.
    long_text = "0123456789\n" * 1024
    for doc_id in "0123":
        assert ok(client("POST", db, {"_id": doc_id, "longtest": long_text}), 201)["ok"]
    rows = query(client, db, "function(doc) { emit(null, doc.longtest); }")["rows"]
    assert len(rows) == 4
    assert all(row["value"] == long_text for row in rows)


# -- purge_test.exs ------------------------------------------------------------------------------
# tests/test_http_purge.py checks the purge itself in depth; this is the Elixir file as written.


def _open(client: Client, db: str, path: str, expect: int = 200) -> Any:
    resp = client("GET", f"{db}/{path}")
    assert resp.status == expect, resp.raw
    return resp.json


def _all_docs_twice(client: Client, db: str, num_docs: int, single: int, offset: int = 0) -> None:
    rows = _open(client, db, "_design/test/_view/all_docs_twice")["rows"]
    for x in range(num_docs - offset + 1):
        assert rows[2 * x]["key"] == x + offset + 1
        assert rows[2 * x + 1]["key"] == x + offset + 1
    assert _open(client, db, "_design/test/_view/single_doc")["total_rows"] == single


def _purge(client: Client, db: str, body: dict[str, list[str]]) -> Any:
    return ok(client("POST", f"{db}/_purge", body), 201)


def test_purge_documents(client: Client, db: str) -> None:
    design_doc = {
        "_id": "_design/test",
        "language": "javascript",
        "views": {
            "all_docs_twice": {
                "map": "function(doc) { emit(doc.integer, null); emit(doc.integer, null) }"
            },
            "single_doc": {"map": 'function(doc) { if (doc._id == "1") { emit(1, null) }}'},
        },
    }
    create_doc(client, db, design_doc)
    num_docs = 10
    bulk_save(client, db, make_docs(range(1, num_docs + 2)))
    _all_docs_twice(client, db, num_docs, 1)
    info = ok(client("GET", db))
    doc1, doc2 = _open(client, db, "1"), _open(client, db, "2")
    result = _purge(client, db, {"1": [doc1["_rev"]], "2": [doc2["_rev"]]})
    assert result["purged"]["1"][0] == doc1["_rev"]
    assert result["purged"]["2"][0] == doc2["_rev"]
    _open(client, db, "1", 404)
    _open(client, db, "2", 404)
    purged_info = ok(client("GET", db))
    assert purged_info["purge_seq"] != info["purge_seq"]
    _all_docs_twice(client, db, num_docs, 0, 2)
    # purge sequences are preserved after compaction (COUCHDB-1021)
    compact(client, db)
    assert ok(client("GET", db))["purge_seq"] == purged_info["purge_seq"]
    # purge documents twice in a row without loading views (causes full view rebuilds)
    doc3, doc4 = _open(client, db, "3"), _open(client, db, "4")
    _purge(client, db, {"3": [doc3["_rev"]]})
    _purge(client, db, {"4": [doc4["_rev"]]})
    _all_docs_twice(client, db, num_docs, 0, 4)


def test_purge_couchdb_1065(client: Client, db: str, server: Any) -> None:
    db_a, db_b = db, f"{db}-b"
    ok(client("PUT", db_b), 201)
    rev_a = create_doc(client, db_a, {"_id": "test", "a": 1})["rev"]
    rev_b = create_doc(client, db_b, {"_id": "test", "a": 2})["rev"]
    replicate(client, server, db_a, db_b)
    _open(client, db_b, f"test?rev={rev_a}", 200)
    _open(client, db_b, f"test?rev={rev_b}", 200)
    _purge(client, db_b, {"test": [rev_a]})
    _open(client, db_b, f"test?rev={rev_a}", 404)
    _purge(client, db_b, {"test": [rev_b]})
    _open(client, db_b, f"test?rev={rev_b}", 404)
    _purge(client, db_b, {"test": [rev_a, rev_b]})
    ok(client("DELETE", db_b))


# -- bulk_docs_test.exs --------------------------------------------------------------------------
# The engine's side of these is impl/proof/test_semantics.py's (through the settee.http
# adapter, which turns answers into exceptions); these check the answers on the wire.

DOC_RANGE = range(1, 6)


def _bulk_post(client: Client, db: str, docs: list[dict[str, Any]]) -> list[Any]:
    resp = client("POST", f"{db}/_bulk_docs", {"docs": docs})
    assert resp.status in (201, 202) and len(resp.json) == len(docs), resp.raw
    return list(resp.json)


def _revs_start_with(rows: list[Any], prefix: str) -> bool:
    return all(row["rev"].startswith(prefix) for row in rows)


def _with_revs(docs: list[dict[str, Any]], rows: list[Any]) -> list[dict[str, Any]]:
    return [{**doc, "_rev": row["rev"]} for doc, row in zip(docs, rows, strict=True)]


def test_bulk_docs_create_update_and_delete_many_docs_per_request(client: Client, db: str) -> None:
    docs = make_docs(DOC_RANGE)
    rows = _bulk_post(client, db, docs)
    assert _revs_start_with(rows, "1-")
    docs = [{**doc, "string": doc["string"] + ".00"} for doc in _with_revs(docs, rows)]
    rows = _bulk_post(client, db, docs)
    assert _revs_start_with(rows, "2-")
    docs = _with_revs(docs, rows)
    assert all(client("GET", f"{db}/{d['_id']}").json["string"].endswith(".00") for d in docs)
    rows = _bulk_post(client, db, [{**doc, "_deleted": True} for doc in docs])
    assert _revs_start_with(rows, "3-")
    for doc in docs:
        resp = client("GET", f"{db}/{doc['_id']}")
        assert resp.status == 404
        assert resp.json == {"error": "not_found", "reason": "deleted"}


def test_bulk_docs_can_detect_conflicts(client: Client, db: str) -> None:
    docs = make_docs(DOC_RANGE)
    rows = _bulk_post(client, db, docs)
    assert _revs_start_with(rows, "1-")
    docs = _with_revs(docs, rows)
    # Update just the first doc to create a conflict in subsequent bulk update
    assert client("PUT", f"{db}/{docs[0]['_id']}", docs[0]).status in (201, 202)
    rows = _bulk_post(client, db, [{**doc, "_deleted": True} for doc in docs])
    assert rows[0]["id"] == "1" and rows[0]["error"] == "conflict"
    assert "rev" not in rows[0]
    assert _revs_start_with(rows[1:], "2-")


def test_bulk_docs_supplies_id_if_not_provided_in_doc(client: Client, db: str) -> None:
    (row,) = _bulk_post(client, db, [{"foo": "bar"}])
    assert row["id"]
    assert row["rev"]


# "raises error for `all_or_nothing` option": tests/test_http_couch_queries.py's
# test_bulk_docs_all_or_nothing_is_417_and_writes_nothing asserts the same 417 rows, whole.


def test_bulk_docs_raises_conflict_error_for_combined_update_and_delete(
    client: Client, db: str
) -> None:
    doc = {"_id": "id", "val": "val"}
    doc["_rev"] = ok(client("PUT", f"{db}/id", doc), 201)["rev"]
    body = _bulk_post(client, db, [{**doc, "val": "newval"}, {**doc, "_deleted": True}])
    assert sum(row.get("error") == "conflict" for row in body) == 1
    assert sum(bool(row.get("rev")) for row in body) == 1


def test_bulk_docs_raises_error_for_bad_parameters(client: Client, db: str) -> None:
    # "missing `docs` parameter", "invalid `docs` parameter", "invalid `new_edits` parameter"
    for body, reason in [
        ({"doc": [{"foo": "bar"}]}, "POST body must include `docs` parameter."),
        ({"docs": "foo"}, "`docs` parameter must be an array."),
        ({"docs": [], "new_edits": 0}, "`new_edits` parameter must be a boolean."),
    ]:
        resp = client("POST", f"{db}/_bulk_docs", body)
        assert (resp.status, resp.json) == (400, {"error": "bad_request", "reason": reason})


def test_bulk_docs_emits_conflict_error_for_duplicate_doc_ids(client: Client, db: str) -> None:
    docs = [{"_id": "0", "a": 0}, {"_id": "1", "a": 1}, {"_id": "1", "a": 2}, {"_id": "3", "a": 3}]
    rows = _bulk_post(client, db, docs)
    assert rows[1]["id"] == "1"
    assert rows[1]["ok"]
    assert rows[2]["error"] == "conflict"

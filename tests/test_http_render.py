"""Show and list functions (``_design/{ddoc}/_show/...``, ``_design/{ddoc}/_list/...``),
as CouchDB's show_documents_test.exs and list_views_test.exs exercise them."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")
pytest.importorskip("py_mini_racer", reason="show and list functions need settee[js]")

from tests import test_http
from tests.test_http import Client, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()

SHOWS = {
    "hello": """function(doc, req) {
        if (doc) return "Hello World";
        return req.id ? "New World" : "Empty World";
    }""",
    "just-name": """function(doc, req) {
        if (doc) return {body: "Just " + doc.name};
        return {body: "No such doc", code: 404};
    }""",
    "req-info": "function(doc, req) { return {json: req}; }",
    "show-deleted": "function(doc, req) { return doc ? doc._id : 'No doc ' + req.id; }",
    "render-error": "function(doc, req) { return noSuchVariable; }",
    "empty": "function(doc, req) { return ''; }",
    "fail": "function(doc, req) { return doc._id; }",
    "no-set-etag": """function(doc, req) {
        return {headers: {"Etag": "skipped"}, body: "something"};
    }""",
    "list-api": """function(doc, req) {
        start({"X-Couch-Test-Header": "Yeah"});
        send("Hey");
    }""",
    "list-api-provides-and-return": """function(doc, req) {
        provides("text", function() { send("4, "); send("5, "); send("6, "); return "7!"; });
        send("1, ");
        send("2, ");
        return "3, ";
    }""",
    "list-api-mix-with-header": """function(doc, req) {
        start({"X-Couch-Test-Header": "Yeah"});
        send("Hey ");
        return {headers: {"X-Couch-Test-Header-Awesome": "Oh Yeah!"}, body: "Dude"};
    }""",
    "accept-switch": """function(doc, req) {
        if (req.headers["Accept"].match(/image/)) {
          return {base64: "PNG_DATA", headers: {"Content-Type": "image/png", "Vary": "Accept"}};
        }
        return {body: "accepting text requests",
                headers: {"Content-Type": "text/html", "Vary": "Accept"}};
    }""".replace("PNG_DATA", _PNG),
    "provides": """function(doc, req) {
        registerType("foo", "application/foo", "application/x-foo");
        provides("html", function() { return "Ha ha, you said \\"" + doc.word + "\\"."; });
        provides("foo", function() { return "foofoo"; });
    }""",
    "this-ddoc": "function(doc, req) { return this._id + ' ' + this.templates.greeting; }",
    "secObj": "function(doc, req) { return {json: req.secObj}; }",
}

LISTS = {
    "basicBasic": """function(head, req) {
        send("head");
        var row;
        while (row = getRow()) send(row.key);
        return "tail";
    }""",
    "basicJSON": """function(head, req) {
        start({"headers": {"Content-Type": "application/json"}});
        send('{"head":' + toJSON(head) + ', "req":' + toJSON(req) + ', "rows":[');
        var row, sep = "";
        while (row = getRow()) { send(sep + toJSON(row)); sep = ", "; }
        return "]}";
    }""",
    "simpleForm": """function(head, req) {
        send("<ul>");
        var row, n = 0, prevKey, firstKey = null;
        while (row = getRow()) {
          n += 1;
          if (!firstKey) firstKey = row.key;
          prevKey = row.key;
          send("\\n<li>Key: " + row.key + " Value: " + row.value + " LineNo: " + n + "</li>");
        }
        return "</ul><p>FirstKey: " + firstKey + " LastKey: " + prevKey + "</p>";
    }""",
    "acceptSwitch": """function(head, req) {
        provides("html", function() {
          send("HTML <ul>");
          var row;
          while (row = getRow()) send("\\n<li>Key: " + row.key + " Value: " + row.value);
          return "</ul>";
        });
    }""",
    "stopIter": """function(req) {
        send("head");
        var row, n = 0;
        while (row = getRow()) { if (n > 2) break; send(" " + n); n += 1; }
        return " tail";
    }""",
    "tooManyGetRows": """function() {
        send("head");
        var row;
        while (row = getRow()) send(row.key);
        getRow(); getRow(); getRow();
        row = getRow();
        return "after row: " + toJSON(row);
    }""",
    "emptyList": "function() { return ' '; }",
    "rowError": """function(head, req) {
        send("head");
        var row = getRow();
        send(fooBarBam);
        return "tail";
    }""",
    "docReference": """function(head, req) {
        send("head");
        var row = getRow();
        send(row.doc.integer);
        return "tail";
    }""",
    "setHeaderAfterGotRow": """function(head, req) {
        getRow();
        start({code: 400, headers: {"X-My-Header": "MyHeader"}});
        send("bad request");
    }""",
    "headerAfterData": """function(head, req) {
        send("data first");
        getRow();
        getRow();
        start({code: 400, headers: {"X-My-Header": "MyHeader"}});
        send(" then a head");
    }""",
    "allDocs": """function(head, req) {
        start({headers: {"Content-Type": "application/json"}});
        var rows = [], row;
        while (row = getRow()) rows.push(row);
        head.rows = rows;
        return toJSON(head);
    }""",
}

VIEWS = {
    "basicView": {"map": "function(doc) { emit(doc.integer, doc.string); }"},
    "withReduce": {
        "map": "function(doc) { emit(doc.integer, doc.string); }",
        "reduce": "function(keys, values, rereduce) {"
        " return rereduce ? sum(values) : values.length; }",
    },
}


@pytest.fixture
def shows(client: Client, db: str) -> str:
    put(client, db, "_design/template", {"shows": SHOWS, "templates": {"greeting": "hi"}})
    put(client, db, "test-doc-id", {"word": "plankton", "name": "Rusty"})
    return db


@pytest.fixture
def lists(client: Client, db: str) -> str:
    put(client, db, "_design/lists", {"views": VIEWS, "lists": LISTS})
    docs = [{"_id": str(i), "integer": i, "string": str(i)} for i in range(10)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    return db


def _show(client: Client, db: str, tail: str, **headers: str) -> Any:
    return client("GET", f"{db}/_design/template/_show/{tail}", headers=headers)


def _list(client: Client, db: str, tail: str, **headers: str) -> Any:
    return client("GET", f"{db}/_design/lists/_list/{tail}", headers=headers)


# -- show functions ------------------------------------------------------------------------------


def test_show_answers_with_and_without_a_document(client: Client, shows: str) -> None:
    r = _show(client, shows, "hello/test-doc-id")
    assert (r.status, r.raw) == (200, b"Hello World")
    assert "charset=utf-8" in r.headers["Content-Type"]
    assert _show(client, shows, "hello").raw == b"Empty World"
    assert _show(client, shows, "hello/nonExistingDoc").raw == b"New World"
    assert _show(client, shows, "empty").raw == b""
    assert _show(client, shows, "just-name/test-doc-id").raw == b"Just Rusty"
    missing = _show(client, shows, "just-name/missingdoc")
    assert (missing.status, missing.raw) == (404, b"No such doc")


def test_show_errors(client: Client, shows: str) -> None:
    r = client("GET", f"{shows}/_design/template/_show/")
    assert (r.status, r.json["reason"]) == (404, "Invalid path."), r.raw
    r = _show(client, shows, "fail/nonExistingDoc")  # throws on a null doc with an id: 404
    assert (r.status, r.json["error"]) == (404, "not_found"), r.raw
    r = _show(client, shows, "fail")  # without an id, a render error
    assert (r.status, r.json["error"]) == (400, "render_error"), r.raw
    r = _show(client, shows, "render-error/test-doc-id")
    assert (r.status, r.json["error"]) == (400, "render_error"), r.raw
    assert "noSuchVariable" in r.json["reason"]
    r = client("GET", f"{shows}/_design/missingddoc/_show/just-name/test-doc-id")
    assert (r.status, r.json["error"]) == (404, "not_found"), r.raw
    r = _show(client, shows, "nope/test-doc-id")
    assert (r.status, r.json["reason"]) == (
        404,
        "missing shows function nope on design doc _design/template",
    ), r.raw


def test_show_gets_couchdbs_request_object_and_the_design_document_as_this(
    client: Client, shows: str
) -> None:
    r = client(
        "GET",
        f"{shows}/_design/template/_show/req-info/test-doc-id?foo=bar",
        headers={"Accept": "text/html;text/plain;*/*", "X-Foo": "bar"},
    )
    req = r.json
    assert req["headers"]["X-Foo"] == "bar" and req["query"] == {"foo": "bar"}
    assert req["method"] == "GET" and req["path"][5] == "test-doc-id"
    assert req["info"]["db_name"] == shows[1:] and req["id"] == "test-doc-id"
    assert req["info"]["doc_count"] == 2 and req["body"] == "undefined"  # get_db_info, recv_body
    assert len(req["uuid"]) == 32
    assert _show(client, shows, "this-ddoc").raw == b"_design/template hi"
    assert client("PUT", f"{shows}/_security", {"foo": True}).status == 200
    assert _show(client, shows, "secObj").json["foo"] is True


def test_show_of_an_id_with_slashes_and_of_a_deleted_document(client: Client, shows: str) -> None:
    put(client, shows, "a/b/c", {"a": 1})
    put(client, shows, "_design/slash", {"shows": {"withSlash": "function(d) {return {json: d}}"}})
    r = client("GET", f"{shows}/_design/slash/_show/withSlash/a/b/c")
    assert (r.status, r.json["_id"]) == (200, "a/b/c"), r.raw
    rev = put(client, shows, "testdoc", {"foo": 1})
    assert _show(client, shows, "show-deleted/testdoc").raw == b"testdoc"
    assert client("DELETE", f"{shows}/testdoc?rev={rev}").status == 200
    assert _show(client, shows, "show-deleted/testdoc").raw == b"No doc testdoc"


def test_show_etags_follow_the_document_and_cannot_be_set(client: Client, shows: str) -> None:
    rev = put(client, shows, "test-doc-id2", {"word": "plankton", "name": "Rusty"})
    etag = _show(client, shows, "just-name/test-doc-id2").headers["ETag"]
    again = _show(client, shows, "just-name/test-doc-id2", **{"If-None-Match": etag})
    assert (again.status, again.raw) == (304, b"")
    put(client, shows, "test-doc-id2", {"_rev": rev, "name": "Crusty"})
    changed = _show(client, shows, "just-name/test-doc-id2", **{"If-None-Match": etag})
    assert (changed.status, changed.raw) == (200, b"Just Crusty")
    assert _show(client, shows, "no-set-etag/test-doc-id").headers["ETag"] != "skipped"


def test_show_content_negotiation(client: Client, shows: str) -> None:
    html = _show(client, shows, "accept-switch/test-doc-id", Accept="text/html;text/plain;*/*")
    assert "text/html" in html.headers["Content-Type"] and html.headers["Vary"] == "Accept"
    png = _show(client, shows, "accept-switch/test-doc-id", Accept="image/png;*/*")
    assert png.headers["Content-Type"] == "image/png" and png.raw.startswith(b"\x89PNG")
    assert png.headers["ETag"] != html.headers["ETag"]  # the Accept header is in it
    r = _show(client, shows, "provides/test-doc-id", Accept="text/html,application/atom+xml; q=0.9")
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.raw == b'Ha ha, you said "plankton".'
    r = _show(client, shows, "provides/test-doc-id", Accept="application/x-foo")
    assert (r.headers["Content-Type"], r.raw) == ("application/x-foo", b"foofoo")
    r = _show(client, shows, "provides/test-doc-id", Accept="text/monkeys")
    assert (r.status, r.json["error"]) == (406, "not_acceptable"), r.raw


def test_show_keeps_the_list_api_order(client: Client, shows: str) -> None:
    r = _show(client, shows, "list-api/foo")
    assert (r.raw, r.headers["X-Couch-Test-Header"]) == (b"Hey", "Yeah")
    r = _show(client, shows, "list-api-provides-and-return/foo?format=text")
    assert r.raw == b"1, 2, 3, 4, 5, 6, 7!"
    r = _show(client, shows, "list-api-mix-with-header/foo")
    assert r.raw == b"Hey Dude" and r.headers["X-Couch-Test-Header"] == "Yeah"
    assert r.headers["X-Couch-Test-Header-Awesome"] == "Oh Yeah!"


# -- list functions ------------------------------------------------------------------------------


def test_list_of_a_view(client: Client, lists: str) -> None:
    r = _list(client, lists, "basicBasic/basicView")
    assert (r.status, r.raw) == (200, b"head0123456789tail")
    r = client("OPTIONS", f"{lists}/_design/lists/_list/basicBasic/basicView")
    assert (r.status, r.raw) == (200, b"head0123456789tail")
    out = _list(client, lists, "basicJSON/basicView?update_seq=true").json
    assert out["head"]["total_rows"] == 10 and out["head"]["offset"] == 0
    assert "update_seq" in out["head"]
    assert out["rows"][0] == {"id": "0", "key": 0, "value": "0"} and len(out["rows"]) == 10
    req = out["req"]
    assert req["path"] == [lists[1:], "_design", "lists", "_list", "basicJSON", "basicView"]
    assert req["raw_path"] == f"{lists}/_design/lists/_list/basicJSON/basicView?update_seq=true"
    assert req["method"] == "GET" and req["info"]["db_name"] == lists[1:]


def test_list_query_parameters_and_keys(client: Client, lists: str) -> None:
    r = _list(client, lists, "simpleForm/basicView?startkey=3&endkey=8")
    assert b"Key: 1" not in r.raw and b"FirstKey: 3 LastKey: 8" in r.raw
    assert b"</ul>" in _list(client, lists, "simpleForm/basicView?startkey=30").raw
    posted = client(
        "POST", f"{lists}/_design/lists/_list/simpleForm/basicView", {"keys": [2, 4, 5, 7]}
    )
    got = _list(client, lists, "simpleForm/basicView?keys=[2,4,5,7]")
    for r in (posted, got):
        assert r.status == 200 and b"Key: 1" not in r.raw
        assert b"FirstKey: 2 LastKey: 7" in r.raw
    r = client(
        "POST",
        f"{lists}/_design/lists/_list/simpleForm/withReduce?group=false",
        {"keys": [2, 4, 5, 7]},
    )
    assert (r.status, r.json["error"]) == (400, "query_parse_error"), r.raw
    assert b"blam" in _list(client, lists, "basicJSON/basicView?foo=blam").raw
    assert b"head0tail" in _list(client, lists, "docReference/basicView?include_docs=true").raw


def test_list_of_a_reduce_view(client: Client, lists: str) -> None:
    assert b"LastKey: undefined" in _list(client, lists, "simpleForm/withReduce?startkey=30").raw
    assert b"Key: 1" in _list(client, lists, "simpleForm/withReduce?reduce=false").raw
    assert b"Key: 1" in _list(client, lists, "simpleForm/withReduce?group=true").raw
    assert _list(client, lists, "emptyList/withReduce?group=true").raw == b" "
    assert _list(client, lists, "stopIter/withReduce?group=true").raw == b"head 0 1 2 tail"


def test_list_rows_read_past_the_end_and_stopped_early(client: Client, lists: str) -> None:
    assert _list(client, lists, "emptyList/basicView").raw == b" "
    assert _list(client, lists, "stopIter/basicView").raw == b"head 0 1 2 tail"
    assert _list(client, lists, "tooManyGetRows/basicView").raw.endswith(b"9after row: null")
    r = _list(client, lists, "rowError/basicView")
    assert r.status == 400 and b"ReferenceError" in r.raw


def test_list_content_negotiation_and_its_head(client: Client, lists: str) -> None:
    r = _list(client, lists, "acceptSwitch/basicView", Accept="text/html")
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.raw.startswith(b"HTML <ul>") and b"Value" in r.raw
    r = _list(client, lists, "setHeaderAfterGotRow/basicView")
    assert (r.status, r.headers["X-My-Header"], r.raw) == (400, "MyHeader", b"bad request")
    # A head after the first data is too late: CouchDB has sent the answer's head.
    r = _list(client, lists, "headerAfterData/basicView")
    assert (r.status, r.raw) == (200, b"data first then a head")
    assert "X-My-Header" not in r.headers


def test_list_of_a_view_in_another_design_document_and_of_all_docs(
    client: Client, lists: str
) -> None:
    views = {"basicView": {"map": "function(doc) { emit(-doc.integer, doc.string); }"}}
    put(client, lists, "_design/views", {"views": views})
    r = _list(client, lists, "simpleForm/views/basicView?startkey=-3")
    assert r.status == 200 and b"Key: -4" not in r.raw
    assert b"FirstKey: -3 LastKey: 0" in r.raw
    listed = _list(client, lists, "allDocs/_all_docs").json
    assert listed == client("GET", f"{lists}/_all_docs").json


def test_list_path_and_method_errors(client: Client, lists: str) -> None:
    r = _list(client, lists, "basicBasic")
    assert (r.status, r.json["error"]) == (404, "list_error"), r.raw
    r = client("PUT", f"{lists}/_design/lists/_list/basicBasic/basicView", {})
    assert r.status == 405, r.raw
    r = _list(client, lists, "nope/basicView")
    assert r.status == 404 and "missing lists function nope" in r.json["reason"], r.raw
    r = _list(client, lists, "basicBasic/nope")
    assert r.status == 404, r.raw
    assert json.loads(_list(client, lists, "basicJSON/basicView").raw)["rows"]


#: design_docs_test.exs's modules: paths from the root, "." and ".." relative to
#: the requiring module, a circular pair, and a lib a map function requires.
_MODULES = {
    "stringzone": "exports.string = 'plankton';",
    "commonjs": {
        "whynot": "exports.test = require('../stringzone');"
        " exports.foo = require('whatever/stringzone');",
        "upper": "exports.testing = require('./whynot').test.string.toUpperCase()"
        " + module.id + require('./whynot').foo.string;",
        "circular_one": "require('./circular_two'); exports.name = 'One';",
        "circular_two": "require('./circular_one'); exports.name = 'Two';",
    },
    "idtest4": {
        "a": {
            "b": "module.exports = require('../a/./c/d').id;",
            "c": {"d": "module.exports = require('./e');", "e": "exports.id = module.id;"},
        }
    },
}


def test_design_functions_require_commonjs_modules(client: Client, db: str) -> None:
    """design_docs_test.exs ("commonjs require", "circular commonjs dependencies",
    "module id values are as expected", "commonjs in map functions"): couchjs gives
    every design function a ``require`` over its design document (a map function
    over ``views.lib``); settee answered ReferenceError."""
    shows = {
        "requirey": "function() { return require('whatever/commonjs/upper').testing; }",
        "circular": "function() { return require('whatever/commonjs/circular_one').name; }",
        "idtest4": "function() { return require('whatever/idtest4/a/b'); }",
        "nopath": "function() { return require('whatever/nope'); }",
    }
    views = {
        "lib": {"foo": {"boom": "exports.boom = 'ok';"}},
        "commonjs": {"map": "function(doc) { emit(null, require('views/lib/foo/boom').boom); }"},
    }
    ddoc = {"whatever": _MODULES, "shows": shows, "views": views}
    put(client, db, "_design/test", ddoc)
    put(client, db, "doc", {})
    for name, body in [
        ("requirey", b"PLANKTONwhatever/commonjs/upperplankton"),
        ("circular", b"One"),
        ("idtest4", b"whatever/idtest4/a/c/e"),
    ]:
        r = client("GET", f"{db}/_design/test/_show/{name}")
        assert (r.status, r.raw) == (200, body), name
    r = client("GET", f"{db}/_design/test/_show/nopath")
    assert r.json["error"] == "invalid_require_path", r.raw
    rows = client("GET", f"{db}/_design/test/_view/commonjs").json["rows"]
    assert [row["value"] for row in rows] == ["ok"]
    # "that we get correct design doc info back": the collators of the index's keys.
    versions = client("GET", f"{db}/_design/test/_info").json["view_index"]["collator_versions"]
    assert len(versions) == 1 and isinstance(versions[0], str)

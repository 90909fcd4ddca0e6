"""Update functions (``_design/{ddoc}/_update/{name}[/{docid}]``), as CouchDB's
update_documents_test.exs exercises them, with settee's 400 where CouchDB answers
a broken function with a 500."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")
pytest.importorskip("py_mini_racer", reason="update functions need settee[js]")

from tests import test_http
from tests.test_http import Client, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

UPDATES = {
    "hello": """function(doc, req) {
        if (!doc) {
          if (req.id) return [{_id: req.id, reqs: [req]}, "<p>New World</p>"];
          return [null, "<p>Empty World</p>"];
        }
        doc.world = "hello";
        doc.edited_by = req.userCtx;
        return [doc, "<p>hello doc</p>"];
    }""",
    "in-place": """function(doc, req) {
        doc[req.query.field] = req.query.value;
        return [doc, "set " + req.query.field + " to " + req.query.value];
    }""",
    "form-update": """function(doc, req) {
        for (var field in req.form) doc[field] = req.form[field];
        return [doc, "updated doc from form"];
    }""",
    "bump-counter": """function(doc, req) {
        if (!doc.counter) doc.counter = 0;
        doc.counter += 1;
        return [doc, "<h1>bumped it!</h1>"];
    }""",
    "error": "function(doc, req) { superFail.badCrash; }",
    "get-uuid": "function(doc, req) { return [null, req.uuid]; }",
    "code-n-bump": """function(doc, req) {
        doc.counter = (doc.counter || 0) + 1;
        return [doc, {code: 302, body: "<h1>bumped it!</h1>"}];
    }""",
    "resp-code": "function(doc, req) { return [null, {code: 302}]; }",
    "resp-code-and-json": """function(doc, req) {
        return [{_id: req.uuid}, {code: 302, json: {ok: true}}];
    }""",
    "binary": """function(doc, req) {
        return [doc, {headers: {"Content-Type": "application/octet-stream"},
                      base64: "aGVsbG8gd29ybGQh"}];
    }""",
    "empty": "function(doc, req) { return [{}, 'oops']; }",
    "echo": "function(doc, req) { return [null, {json: {body: req.body, method: req.method}}]; }",
    "no-response": "function(doc, req) { return [null, 42]; }",
    "forbid": "function(doc, req) { throw(['error', 'forbidden', 'not you']); }",
    "forbid-object": "function(doc, req) { throw({forbidden: 'not you'}); }",
    "not-found": "function(doc, req) { throw(['error', 'not_found', 'no such thing']); }",
    "unauthorized": "function(doc, req) { throw({error: 'unauthorized', reason: 'who?'}); }",
    "number-doc": "function(doc, req) { return [5, 'no doc', 'ignored']; }",
    "headers": """function(doc, req) {
        return [null, {body: "<b>" + req.query.q + "</b>",
                       headers: {"X-Count": 3, "X-Flag": true}}];
    }""",
    "bad-header": "function(doc, req) { return [null, {headers: JSON.parse(req.body)}]; }",
    "bad-code": "function(doc, req) { return [null, {code: JSON.parse(req.body)}]; }",
}


@pytest.fixture
def ddoc(client: Client, db: str) -> str:
    put(client, db, "_design/update", {"language": "javascript", "updates": UPDATES})
    return f"{db}/_design/update/_update"


def test_an_update_changes_the_stored_document_and_says_which_revision(
    client: Client, db: str, ddoc: str
) -> None:
    put(client, db, "d", {"word": "plankton"})
    r = client("PUT", f"{ddoc}/hello/d")
    assert (r.status, r.raw) == (201, b"<p>hello doc</p>")
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.headers["X-Couch-Id"] == "d"
    stored = client("GET", f"{db}/d").json
    assert stored["world"] == "hello" and stored["_rev"] == r.headers["X-Couch-Update-NewRev"]
    assert stored["edited_by"] == {"db": db[1:], "name": None, "roles": ["_admin"]}
    empty = client("PUT", f"{ddoc}/hello")
    assert (empty.status, empty.raw) == (200, b"<p>Empty World</p>")
    assert "X-Couch-Update-NewRev" not in empty.headers


def test_an_update_creates_a_missing_document_and_sees_the_request(
    client: Client, db: str, ddoc: str
) -> None:
    r = client("POST", f"{ddoc}/hello/new?x=1", raw=b"payload", headers={"Content-Type": "t/p"})
    assert (r.status, r.raw) == (201, b"<p>New World</p>")
    [req] = client("GET", f"{db}/new").json["reqs"]
    assert req["id"] == "new" and req["method"] == "POST" and req["body"] == "payload"
    assert req["query"] == {"x": "1"} and req["headers"]["Content-Type"] == "t/p"
    assert req["path"][-3:] == ["_update", "hello", "new"]
    assert re.fullmatch(r"[0-9a-f]{32}", req["uuid"])
    assert req["secObj"] == client("GET", f"{db}/_security").json
    assert req["userCtx"]["roles"] == ["_admin"] and req["info"]["db_name"] == db[1:]
    # json_req_obj's info is get_db_info's answer, as GET /{db} gives it.
    assert req["info"]["doc_count"] >= 1 and "update_seq" in req["info"]


def test_query_and_form_fields_reach_the_function(client: Client, db: str, ddoc: str) -> None:
    put(client, db, "d", {"word": "plankton"})
    r = client("PUT", f"{ddoc}/in-place/d?field=title&value=test")
    assert (r.status, r.raw) == (201, b"set title to test")
    assert client("GET", f"{db}/d").json["title"] == "test"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = client("PUT", f"{ddoc}/form-update/d", raw=b"formfoo=bar&formbar=foo", headers=form)
    assert (r.status, r.raw) == (201, b"updated doc from form")
    stored = client("GET", f"{db}/d").json
    assert (stored["formfoo"], stored["formbar"]) == ("bar", "foo")


def test_counters_bump_and_ids_may_hold_slashes(client: Client, db: str, ddoc: str) -> None:
    put(client, db, "d", {"word": "plankton"})
    for expected in (1, 2):
        r = client("PUT", f"{ddoc}/bump-counter/d")
        assert (r.status, r.raw) == (201, b"<h1>bumped it!</h1>")
        stored = client("GET", f"{db}/d").json
        assert stored["counter"] == expected
        assert stored["_rev"] == r.headers["X-Couch-Update-NewRev"]
    put(client, db, "with/slash", {"counter": 1})
    r = client("PUT", f"{ddoc}/bump-counter/with/slash")
    assert (r.status, r.headers.get("X-Couch-Id")) == (201, "with%2Fslash"), r.raw
    assert client("GET", f"{db}/with%2Fslash").json["counter"] == 2


def test_the_response_object_sets_code_json_headers_and_bytes(
    client: Client, db: str, ddoc: str
) -> None:
    put(client, db, "d", {"counter": 0})
    r = client("PUT", f"{ddoc}/code-n-bump/d")
    assert (r.status, r.raw) == (302, b"<h1>bumped it!</h1>")
    assert client("GET", f"{db}/d").json["counter"] == 1  # a code of its own still saves
    assert client("PUT", f"{ddoc}/resp-code/").status == 302
    r = client("PUT", f"{ddoc}/resp-code-and-json/")
    assert (r.status, r.json) == (302, {"ok": True})
    assert r.headers["Content-Type"] == "application/json"
    assert client("GET", f"{db}/{r.headers['X-Couch-Id']}").status == 200
    r = client("PUT", f"{ddoc}/binary/d", raw=b"rubbish")
    assert (r.status, r.raw) == (201, base64.b64decode("aGVsbG8gd29ybGQh"))
    assert r.headers["Content-Type"] == "application/octet-stream"
    uuid = client("PUT", f"{ddoc}/get-uuid/")
    assert uuid.status == 200 and re.fullmatch(rb"[0-9a-f]{32}", uuid.raw)
    echo = client("DELETE", f"{ddoc}/echo", raw=b"\xc3\xa9")
    assert echo.json == {"body": "é", "method": "DELETE"}  # any method but GET


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("POST", "", 404, "update_error"),  # no function named: "Invalid path."
        ("GET", "hello", 405, "method_not_allowed"),
        ("PUT", "nope", 404, "not_found"),
        ("PUT", "error", 400, "render_error"),  # CouchDB: 500
        ("PUT", "no-response", 400, "render_error"),
        ("PUT", "empty/foo", 400, "illegal_docid"),
        ("PUT", "forbid", 403, "forbidden"),  # render.js passes ["error", ...] on
        ("PUT", "forbid-object", 400, "render_error"),  # not an {error, reason}
        # couch_os_process throws {error, {not_found, Reason}}: chttpd's 404, and 401
        # for unauthorized (a mutation round's survivor answered 400).
        ("PUT", "not-found", 404, "not_found"),
        ("PUT", "unauthorized", 401, "unauthorized"),
    ],
    ids=[
        "noname",
        "get",
        "nope",
        "error",
        "noresp",
        "emptyid",
        "forbid",
        "forbidobj",
        "notfound",
        "unauthorized",
    ],
)
def test_refusals_write_nothing(
    client: Client, db: str, ddoc: str, method: str, path: str, status: int, error: str
) -> None:
    before = client("GET", db).json["update_seq"]
    r = client(method, f"{ddoc}/{path}")
    assert (r.status, r.json["error"]) == (status, error), r.raw
    if path == "empty/foo":
        assert r.json["reason"] == "Document id must not be empty"
    if path == "nope":
        assert r.json["reason"] == "missing updates function nope on design doc _design/update"
    assert client("GET", db).json["update_seq"] == before


def test_an_update_meets_validate_doc_update_and_conflicts_like_a_put(
    client: Client, db: str, ddoc: str
) -> None:
    put(client, db, "_design/v", {"validate_doc_update": _REFUSE_COUNTERS_PAST_ONE})
    put(client, db, "d", {"word": "plankton"})
    assert client("PUT", f"{ddoc}/bump-counter/d").status == 201
    r = client("PUT", f"{ddoc}/bump-counter/d")
    assert (r.status, r.json) == (403, {"error": "forbidden", "reason": "one is enough"})
    assert client("GET", f"{db}/d").json["counter"] == 1
    stale: Any = {"_id": "d", "_rev": "1-" + "0" * 32}
    put(client, db, "_design/stale", {"updates": {"s": _returns(stale)}})
    r = client("PUT", f"{db}/_design/stale/_update/s/d")
    assert r.status == 409 and r.json["error"] == "conflict"


_REFUSE_COUNTERS_PAST_ONE = """function(doc, old) {
    if (doc.counter > 1) throw({forbidden: "one is enough"});
}"""


def _returns(doc: Any) -> str:
    return f"function(doc, req) {{ return [{json.dumps(doc)}, 'ok']; }}"


def test_html_goes_sandboxed_and_header_values_become_text(client: Client, ddoc: str) -> None:
    """chttpd_external puts Content-Security-Policy: sandbox on top of every answer
    that is not JSON (a function's HTML would run on the server's origin); header
    values that are numbers or atoms are sent as their text (couch_util:to_list);
    a doc that is not an object is not written, and more than [doc, response] is
    ignored (render.js reads result[0] and result[1])."""
    r = client("PUT", f"{ddoc}/headers?q=%3Cscript%3E")
    assert (r.status, r.raw) == (200, b"<b><script></b>")
    assert r.headers["Content-Security-Policy"] == "sandbox"
    assert (r.headers["X-Count"], r.headers["X-Flag"]) == ("3", "true")
    r = client("PUT", f"{ddoc}/number-doc")
    assert (r.status, r.raw) == (200, b"no doc") and "X-Couch-Id" not in r.headers
    json_answer = client("PUT", f"{ddoc}/resp-code-and-json/")
    assert "Content-Security-Policy" not in json_answer.headers


@pytest.mark.parametrize(
    ("ddoc_path", "body"),
    [
        ("bad-header", {"X-A": "a\r\nSet-Cookie: e=1"}),
        ("bad-header", {"Bad Name": "x"}),
        ("bad-header", {"X:Y": "x"}),
        ("bad-header", {"Content-Length": "1000"}),
        ("bad-header", {"Transfer-Encoding": "chunked"}),
        ("bad-header", {"X-A": {"nested": 1}}),
        ("bad-code", 100),
        ("bad-code", 101),
        ("bad-code", 1000),
        ("bad-code", "200"),
    ],
    ids=["crlf", "space", "colon", "length", "chunked", "object", "100", "101", "1000", "str"],
)
def test_wire_breakers_are_refused(client: Client, ddoc: str, ddoc_path: str, body: Any) -> None:
    """Found in review: a header with a line break cut the connection, a bad name or
    a Content-Length the body does not have hung the client, a 1xx code was sent as
    an interim answer. Each is a 400 external_response_error, the connection fine."""
    r = client("POST", f"{ddoc}/{ddoc_path}", raw=json.dumps(body).encode(), timeout=10)
    assert (r.status, r.json["error"]) == (400, "external_response_error"), r.raw
    assert client("PUT", f"{ddoc}/get-uuid").status == 200


def test_an_update_function_sees_the_documents_conflicts(client: Client, db: str) -> None:
    """couch_mrview_show:maybe_open_doc opens the document with ``[conflicts]``."""
    _winner, loser = test_http.make_conflict(client, db, "c")
    seen = "function(doc, req) { return [null, {json: doc._conflicts || null}]; }"
    put(client, db, "_design/u", {"updates": {"seen": seen}})
    r = client("PUT", f"{db}/_design/u/_update/seen/c")
    assert (r.status, r.json) == (200, [loser])


def test_an_update_reads_and_writes_local_documents(client: Client, db: str, ddoc: str) -> None:
    """Found probing: an update function on a ``_local/`` id, or answering one, was a
    400 with the engine's "only '_design/<name>' ids may" where CouchDB reads and
    writes the local document (couch_httpd_db:couch_doc_open, couch_db:update_doc)."""
    assert client("PUT", f"{db}/_local/c", {"counter": 5}).status == 201
    r = client("PUT", f"{ddoc}/bump-counter/_local/c")
    assert (r.status, r.headers.get("X-Couch-Update-NewRev")) == (201, "0-2"), r.raw
    r = client("PUT", f"{ddoc}/bump-counter/_local%2Fc")
    assert (r.status, r.headers.get("X-Couch-Id")) == (201, "_local%2Fc"), r.raw
    stored = client("GET", f"{db}/_local/c").json
    assert (stored["counter"], stored["_rev"]) == (7, "0-3")
    r = client("PUT", f"{ddoc}/hello/_local/new")  # a missing one is created
    assert r.status == 201 and client("GET", f"{db}/_local/new").status == 200, r.raw
    rows = client("GET", f"{db}/_all_docs").json["rows"]
    assert not [row for row in rows if "_local" in row["id"]]  # never an ordinary document

"""CouchDB 3.5's Elixir tests for documents, attachments and the server, ported.

Each test names the ``test/elixir/test/*.exs`` file and test it comes from;
what settee answers differently on purpose (README's HTTP section) is said
beside the assertion. Data sizes are scaled down so the module stays fast.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import threading
import time
import urllib.parse
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client, Resp, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

TEXT = "This is a base64 encoded text"
TEXT64 = base64.b64encode(TEXT.encode()).decode()


def ok(resp: Resp, status: int = 200) -> Any:
    assert resp.status == status, resp.raw
    return resp.json


def q(value: Any) -> str:
    return urllib.parse.quote(json.dumps(value))


# -- attachment_names_test.exs -------------------------------------------------------------------


def test_attachment_names(client: Client, db: str) -> None:
    good = {
        "_id": "good_doc",
        "_attachments": {"Kолян.txt": {"content_type": "application/octet-stream", "data": TEXT64}},
    }
    ok(client("POST", db, good), 201)
    got = client("GET", f"{db}/good_doc/{urllib.parse.quote('Kолян.txt')}")
    assert (got.status, got.raw) == (200, TEXT.encode())
    assert got.headers["Content-Type"] == "application/octet-stream"
    # The base64 md5 of the bytes, quoted (couch_httpd_db:db_attachment_req).
    assert got.headers["ETag"] == '"aEI7pOYCRBLTRQvvqYrrJQ=="'
    bin_doc = {
        "_id": "bin_doc",
        "_attachments": {"footxt": {"content_type": "text/plain", "data": TEXT64}},
    }
    ok(client("POST", db, bin_doc), 201)
    data = "JHAPDO*AU£PN ){(3u[d 93DQ9¡€])}    ææøo'∂ƒæ≤çæππ•¥∫¶®#†π¶®¥π€ª®˙π8np"
    headers = {"Content-Type": "text/plain;charset=utf-8"}
    ok(client("PUT", f"{db}/bin_doc3/attachmenttxt", raw=data.encode(), headers=headers), 201)
    assert client("GET", f"{db}/bin_doc3/attachmenttxt").raw == data.encode()
    ok(client("POST", f"{db}/_bulk_docs", {"docs": [bin_doc]}), 201)
    underscored = {
        "_id": "bin_doc2",
        "_attachments": {"_foo.txt": {"content_type": "text/plain", "data": TEXT64}},
    }
    reason = "Attachment name '_foo.txt' starts with prohibited character '_'"
    for method, path in (("PUT", f"{db}/bin_doc2"), ("POST", db)):
        refused = client(method, path, underscored)
        assert (refused.status, refused.json["reason"]) == (400, reason)
    assert client("GET", f"{db}/bin_doc2/_foo.txt").status == 404


# -- attachment_paths_test.exs -------------------------------------------------------------------

BAZ = "We like percent two F."


@pytest.mark.parametrize("doc_id", ["bin_doc", "_design/bin_doc"])
def test_attachment_paths(client: Client, db: str, doc_id: str) -> None:
    # The test's database has a slash in its name, sent as %2F.
    slashed = f"{db}%2Fwith_slashes"
    ok(client("PUT", slashed), 201)
    body = {
        "_id": doc_id,
        "_attachments": {
            "foo/bar.txt": {"content_type": "text/plain", "data": TEXT64},
            "foo%2Fbaz.txt": {
                "content_type": "text/plain",
                "data": base64.b64encode(BAZ.encode()).decode(),
            },
        },
    }
    rev = ok(client("POST", slashed, body), 201)["rev"]
    base = f"{slashed}/{doc_id}"
    for name in ("foo/bar.txt", "foo%2Fbar.txt"):
        got = client("GET", f"{base}/{name}")
        assert (got.status, got.raw) == (200, TEXT.encode())
        assert got.headers["Content-Type"] == "text/plain"
    assert client("GET", f"{base}/foo/baz.txt").status == 404
    got = client("GET", f"{base}/foo%252Fbaz.txt")
    assert (got.status, got.raw) == (200, BAZ.encode())
    headers = {"Content-Type": "text/plain;charset=utf-8"}
    no_rev = client("PUT", f"{base}/foo/attachment.txt", raw=b"Just some text", headers=headers)
    assert no_rev.status == 409
    text = b"This is no base64 encoded text"
    ok(client("PUT", f"{base}/foo/bar2.txt?rev={rev}", raw=text, headers=headers), 201)
    atts = ok(client("GET", base))["_attachments"]
    assert {"foo/bar.txt", "foo%2Fbaz.txt", "foo/bar2.txt"} <= set(atts)
    assert atts["foo/bar2.txt"]["content_type"] == "text/plain;charset=utf-8"
    assert atts["foo/bar2.txt"]["length"] == 30
    ok(client("DELETE", slashed))


# -- compact_test.exs ----------------------------------------------------------------------------

PLAIN = "This is plain text" * 100


def test_compaction_reduces_size_of_deleted_docs(client: Client, db: str) -> None:
    docs = [{"_id": str(i), "integer": i, "string": str(i)} for i in range(20)]
    rows = ok(client("POST", f"{db}/_bulk_docs", {"docs": docs}), 201)
    att = {
        "foo.txt": {"content_type": "text/plain", "data": base64.b64encode(PLAIN.encode()).decode()}
    }
    ok(client("PUT", f"{db}/att_doc1", {"_attachments": att}), 201)
    rev2 = ok(client("PUT", f"{db}/att_doc2", {"_attachments": att}), 201)["rev"]
    info = ok(client("GET", db))
    orig_active, orig_file = info["sizes"]["active"], info["sizes"]["file"]
    start_time = info["instance_start_time"]
    assert isinstance(orig_active, int) and isinstance(orig_file, int)
    assert orig_active < orig_file
    gone = [
        {"_id": d["_id"], "_rev": r["rev"], "_deleted": True}
        for d, r in zip(docs, rows, strict=True)
    ]
    gone.append({"_id": "att_doc2", "_rev": rev2, "_deleted": True})
    ok(client("POST", f"{db}/_bulk_docs", {"docs": gone}), 201)
    assert ok(client("POST", f"{db}/_ensure_full_commit"), 201)["ok"] is True
    # compact.js reads "data_size", a field CouchDB 3 no longer answers (the
    # elixir assertion compares nil); sizes.file is what grows with the deletions.
    deleted_file = ok(client("GET", db))["sizes"]["file"]
    assert deleted_file > orig_file
    assert ok(client("POST", f"{db}/_compact"), 202) == {"ok": True}
    deadline = time.monotonic() + 10
    while ok(client("GET", db))["compact_running"] and time.monotonic() < deadline:
        time.sleep(0.02)
    info = ok(client("GET", db))
    assert info["compact_running"] is False
    assert info["instance_start_time"] == start_time
    assert info["doc_count"] == 1
    got = client("GET", f"{db}/att_doc1/foo.txt")
    assert (got.status, got.raw) == (200, PLAIN.encode())
    assert got.headers["Content-Type"] == "text/plain"
    deleted = client("GET", f"{db}/att_doc2/foo.txt")
    assert (deleted.status, deleted.json) == (404, {"error": "not_found", "reason": "deleted"})
    final_active, final_file = info["sizes"]["active"], info["sizes"]["file"]
    assert isinstance(final_active, int) and isinstance(final_file, int)
    assert final_active < final_file
    assert final_file < deleted_file


# -- config_test.exs -----------------------------------------------------------------------------


def test_config_standard_options_are_present(client: Client) -> None:
    config = ok(client("GET", "/_node/_local/_config"))
    assert config["couchdb"]["database_dir"]
    assert config["chttpd"]["port"]
    assert "config_whitelist" not in config["chttpd"]
    section = ok(client("GET", "/_node/_local/_config/couchdb"))
    assert section["database_dir"] == config["couchdb"]["database_dir"]
    assert ok(client("GET", "/_node/_local/_config/chttpd/port")) == config["chttpd"]["port"]


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_config_is_read_only(client: Client, method: str) -> None:
    # A deliberate difference (README): the options are set at start, so every
    # write config_test.exs makes (test/foo, admins, the whitelist, the
    # blacklisted sections) is 405, and nothing changes.
    url = "/_node/_local/_config/test/foo"
    refused = client(method, url, "bar", headers={"X-Couch-Persist": "false"})
    assert refused.status == 405 and refused.json["error"] == "method_not_allowed"
    assert client("GET", url).status == 404
    assert client("GET", "/_node/_local/_config/query_servers/wohali").status == 404


def test_config_reload(client: Client) -> None:
    # config_test.exs "Reload config": POST _reload is 200 (chttpd_node).
    assert ok(client("POST", "/_node/_local/_config/_reload")) == {"ok": True}
    refused = client("GET", "/_node/_local/_config/_reload")
    assert (refused.status, refused.headers["Allow"]) == (405, "POST")


# -- conflicts_test.exs --------------------------------------------------------------------------


def test_multiple_updates_with_same_rev_conflict(client: Client, db: str) -> None:
    rev = put(client, db, "doc-1", {"a": 1, "b": 1})
    put(client, db, "doc-1", {"_rev": rev, "a": 1, "b": 1})
    stale = client("PUT", f"{db}/doc-1", {"_rev": rev, "a": 2, "b": 2})
    assert (stale.status, stale.json) == (409, test_http.CONFLICT)
    assert len(ok(client("GET", f"{db}/_changes"))["results"]) == 1
    no_rev = client("PUT", f"{db}/doc-1", {"a": 2, "b": 2})
    assert (no_rev.status, no_rev.json) == (409, test_http.CONFLICT)


def test_mismatched_revs_are_bad_requests(client: Client, db: str) -> None:
    rev = put(client, db, "doc-1", {"a": 1})
    body = {"_id": "doc-1", "_rev": rev, "a": 1}
    refused = client("PUT", f"{db}/doc-1?rev=1-foobar", body)
    reason = "Document rev from request body and query string have different values"
    assert (refused.status, refused.json) == (400, {"error": "bad_request", "reason": reason})
    refused = client("PUT", f"{db}/foobar", body, headers={"If-Match": "1-foobar"})
    reason = "Document rev and etag have different values"
    assert (refused.status, refused.json) == (400, {"error": "bad_request", "reason": reason})


def test_new_edits_false_bulk_of_existing_revs_couchdb_1178(client: Client, db: str) -> None:
    put(client, db, "_design/couchdb-1178", {"validate_doc_update": "function(){}"})
    # conflicts_test.exs writes the revision ids CouchDB computes (md5 of an
    # Erlang term); settee's hash msgpack (README, "revision ids differ"), so
    # the test takes the ids the server answers.
    r1 = put(client, db, "doc", {"val": "r0"})
    r2 = put(client, db, "doc", {"val": "r1", "_rev": r1})
    r3 = put(client, db, "doc", {"val": "r2", "_rev": r2})
    assert len({r1, r2, r3}) == 3 and r3.startswith("3-")
    expected = {
        "_id": "doc",
        "_rev": r3,
        "_revisions": {"ids": [r.split("-")[1] for r in (r3, r2, r1)], "start": 3},
        "val": "r2",
    }
    assert ok(client("GET", f"{db}/doc?revs=true")) == expected
    docs = [
        {"_id": "doc", "val": "r3", "_rev": r3},
        {"_id": "doc", "val": "r2", "_rev": r2},
        {"_id": "doc", "val": "r1", "_rev": r1},
    ]
    assert ok(client("POST", f"{db}/_bulk_docs", {"docs": docs, "new_edits": False}), 201) == []
    assert ok(client("GET", f"{db}/doc?revs=true")) == expected


# -- copy_doc_test.exs ---------------------------------------------------------------------------


def test_copy_doc(client: Client, db: str) -> None:
    ok(client("POST", db, {"_id": "doc_to_be_copied", "v": 1}), 201)
    copied = client(
        "COPY", f"{db}/doc_to_be_copied", headers={"Destination": "doc_that_was_copied"}
    )
    assert copied.status == 201 and copied.json["ok"] is True
    assert ok(client("GET", f"{db}/doc_that_was_copied"))["v"] == 1
    ok(client("POST", db, {"_id": "doc_to_be_copied2", "v": 1}), 201)
    rev = ok(client("POST", db, {"_id": "doc_to_be_overwritten", "v": 2}), 201)["rev"]
    source = f"{db}/doc_to_be_copied2"
    assert client("COPY", source, headers={"Destination": "doc_to_be_overwritten"}).status == 409
    refused = client("COPY", source)
    assert (refused.status, refused.json["reason"]) == (
        400,
        "Destination header is mandatory for COPY.",
    )
    absolute = f"http://localhost:5984{db}/doc_to_be_written"
    refused = client("COPY", source, headers={"Destination": absolute})
    assert (refused.status, refused.json["reason"]) == (400, "Destination URL must be relative.")
    refused = client("COPY", source, headers={"Destination": f"_invalid_doc_id?rev={rev}"})
    reason = "Only reserved document ids may start with underscore."
    assert (refused.status, refused.json["reason"]) == (400, reason)
    done = client("COPY", source, headers={"Destination": f"doc_to_be_overwritten?rev={rev}"})
    assert done.status == 201
    now = ok(client("GET", f"{db}/doc_to_be_overwritten"))
    assert now["_rev"] != rev and now["v"] == 1


# -- design_paths_test.exs -----------------------------------------------------------------------


@pytest.mark.parametrize("slashes", [False, True])
def test_design_doc_paths(client: Client, db: str, slashes: bool) -> None:
    if slashes:
        db = f"{db}%2Fwith_slashes"
        ok(client("PUT", db), 201)
    for name in ("test", "test2"):
        ddoc = {"_id": f"_design/{name}", "views": {"testing": {"map": "function(){emit(1,1)}"}}}
        ok(client("POST", db, ddoc), 201)
        assert ok(client("GET", f"{db}/_design/{name}"))["_id"] == f"_design/{name}"
        # An escaped slash is a redirect to the unescaped path (chttpd_db:db_req's
        # "_design%2F" clause); the test follows it.
        moved = client("GET", f"{db}/_design%2F{name}")
        assert moved.status == 301
        location = urllib.parse.urlsplit(moved.headers["Location"]).path
        assert ok(client("GET", location))["_id"] == f"_design/{name}"
        assert ok(client("GET", f"{db}/_design/{name}/_view/testing"))["rows"] == []


# -- jsonp_test.exs ------------------------------------------------------------------------------


def test_jsonp_callbacks_are_ignored_by_default(client: Client, db: str) -> None:
    # chttpd's allow_jsonp is false by default; settee serves no way to turn it
    # on (its options are set at start and it has none for this), so a callback
    # is ignored and the answer stays JSON, for documents, views and _changes.
    put(
        client,
        db,
        "_design/test",
        {"views": {"all_docs": {"map": "function(doc) {if(doc.a) emit(null, doc.a);}"}}},
    )
    put(client, db, "0", {"a": 0, "b": 0})
    put(client, db, "1", {"a": 1, "b": 1})
    for path in ("0", "_design/test/_view/all_docs", "_changes"):
        got = client("GET", f"{db}/{path}?callback=jsonp_no_chunk")
        assert got.status == 200
        assert got.headers["Content-Type"].split(";")[0] == "application/json"
        assert not got.raw.startswith(b"/* CouchDB */")
        json.loads(got.raw)
    assert ok(client("GET", f"{db}/_design/test/_view/all_docs?callback=x"))["total_rows"] == 1


# -- utf8_test.exs -------------------------------------------------------------------------------

TEXTS = [
    "1. Ascii: hello",
    "2. Russian: На берегу пустынных волн",
    "3. Math: ∮ E⋅da = Q,  n → ∞, ∑ f(i) = ∏ g(i),",
    "4. Geek: STARGΛ̊TE SG-1",
    "5. Braille: ⡌⠁⠧⠑ ⠼⠁⠒  ⡍⠜⠇⠑⠹⠰⠎ ⡣⠕⠌",
    "6. null \u0000 byte",
]


def test_utf8_support(client: Client, db: str) -> None:
    for index, text in enumerate(TEXTS):
        ok(client("POST", f"{db}?w=3", {"_id": str(index), "text": text}), 201)
    for index, text in enumerate(TEXTS):
        got = ok(client("GET", f"{db}/{index}"))
        assert got["text"] == text
    ddoc = {"views": {"view": {"map": "function(doc) { emit(null, doc.text) }"}}}
    ok(client("PUT", f"{db}/_design/temp_utf8_support?w=3", ddoc), 201)
    rows = ok(client("GET", f"{db}/_design/temp_utf8_support/_view/view"))["rows"]
    assert [row["value"] for row in rows] == TEXTS


# -- uuids_test.exs ------------------------------------------------------------------------------


def test_uuids_cache_busting_headers(client: Client) -> None:
    got = client("GET", "/_uuids")
    assert got.status == 200
    assert "no-cache" in got.headers["Cache-Control"]
    assert got.headers["Pragma"] == "no-cache"
    assert len(got.headers["ETag"]) > 0


def test_uuids_single_and_many(client: Client) -> None:
    [one] = ok(client("GET", "/_uuids"))["uuids"]
    [two] = ok(client("GET", "/_uuids?count=1"))["uuids"]
    assert one != two
    many = ok(client("GET", "/_uuids?count=1000"))["uuids"]
    assert len(set(many)) == len(many) == 1000
    assert client("POST", "/_uuids?count=1000").status == 405
    assert client("GET", "/_uuids?count=1001").status == 400


def test_uuids_are_sequential_by_default(client: Client) -> None:
    # CouchDB's default [uuids] algorithm is "sequential" (couch_uuids, which
    # uuids_test.exs sets; settee serves no other, nor utc_random or utc_id): a
    # 26-hex-digit prefix and a 6-hex-digit suffix that grows, with a new prefix
    # when the suffix nears 0xfff000, so 1000 uuids are one or two ascending runs.
    uuids = ok(client("GET", "/_uuids?count=1000"))["uuids"]
    assert all(re.fullmatch("[0-9a-f]{32}", u) for u in uuids)
    runs: list[list[str]] = []
    for u in uuids:
        if runs and runs[-1][-1][:26] == u[:26]:
            assert runs[-1][-1] < u
            runs[-1].append(u)
        else:
            runs.append([u])
    assert len(runs) <= 2 and len(set(uuids)) == 1000


# -- changes_async_test.exs ----------------------------------------------------------------------


def _changes_lines(raw: bytes) -> list[Any]:
    return [json.loads(line) for line in raw.split(b"\n") if line.strip()]


def _events(raw: bytes) -> list[Any]:
    return [json.loads(m) for m in re.findall(rb"^data: (.*)$", raw, re.M) if m.strip()]


def _check_empty(client: Client, db: str) -> None:
    empty = ok(client("GET", f"{db}/_changes"))
    assert empty["results"] == [] and empty["last_seq"].startswith("0")


def _started_feed(
    port: int, path: str, body: Any
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A ``_changes`` request sent (POST with ``body``, else GET), its 200 headers read."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = None if body is None else json.dumps(body)
    conn.request(
        "POST" if body else "GET", path, body=data, headers={"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


class Feed:
    """A live ``_changes`` request: its headers read (the feed has started), its
    body read later, line by line or whole, on a thread."""

    def __init__(self, port: int, path: str, body: Any = None) -> None:
        # changes_async_test.exs's wait_for_headers: every feed answers its 200
        # before it waits for a change.
        self.conn, self.resp = _started_feed(port, path, body)
        self.raw = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            self.raw = self.resp.read()

    def pending(self, wait: float) -> bool:
        self.thread.join(wait)
        return self.thread.is_alive()

    def body(self) -> bytes:
        self.thread.join(10)
        assert not self.thread.is_alive(), "the feed did not end"
        self.conn.close()
        return self.raw


class Lines:
    """A continuous or eventsource feed read line by line until the test has seen enough."""

    def __init__(self, port: int, path: str, body: Any = None) -> None:
        self.conn, self.resp = _started_feed(port, path, body)
        self.lines: list[bytes] = []

    def until(self, done: Any) -> list[bytes]:
        """Lines read until ``done(lines)``; the feed is closed then."""
        try:
            while not done(self.lines):
                line = self.resp.readline()
                assert line, f"the feed ended after {self.lines}"
                self.lines.append(line)
        finally:
            self.conn.close()
        return self.lines


def _ids_seen(lines: list[bytes]) -> list[str]:
    rows = [
        json.loads(line)
        for line in lines
        if line.strip() and not line.startswith((b"id:", b"event:"))
    ]
    rows = [row if not isinstance(row, str) else {} for row in rows]
    return [row["id"] for row in rows if "id" in row]


def _event_ids(lines: list[bytes]) -> list[str]:
    return [row["id"] for row in _events(b"".join(lines))]


@pytest.mark.parametrize("feed", ["live", "continuous"])
def test_continuous_changes(client: Client, db: str, server: Any, feed: str) -> None:
    _check_empty(client, db)
    rev = ok(client("POST", db, {"_id": "foo", "a": 1}), 201)["rev"]
    assert ok(client("GET", f"{db}/_changes"))["last_seq"].startswith("1")
    lines = _changes_lines(client("GET", f"{db}/_changes?feed={feed}&timeout=100").raw)
    assert lines[0]["changes"][0]["rev"] == rev
    assert lines[1]["last_seq"].startswith("1")
    feed_ = Lines(server.port, f"{db}/_changes?feed={feed}&timeout=5000")
    ok(client("POST", db, {"_id": "bar", "bar": 1}), 201)
    assert _ids_seen(feed_.until(lambda lines: len(lines) == 2)) == ["foo", "bar"]


def test_longpoll_changes(client: Client, db: str, server: Any) -> None:
    _check_empty(client, db)
    ok(client("POST", db, {"_id": "foo"}), 201)
    first = ok(client("GET", f"{db}/_changes?feed=longpoll"))
    assert len(first["results"]) == 1 and first["last_seq"].startswith("1-")
    feed = Feed(server.port, f"{db}/_changes?feed=longpoll&since={first['last_seq']}")
    ok(client("POST", db, {"_id": "bar", "bar": 1}), 201)
    second = json.loads(feed.body())
    assert len(second["results"]) == 1 and second["last_seq"].startswith("2-")
    feed = Feed(server.port, f"{db}/_changes?feed=longpoll&since=now")
    ok(client("POST", db, {"_id": "barzzzz", "bar": 1}), 201)
    third = json.loads(feed.body())
    assert [row["id"] for row in third["results"]] == ["barzzzz"]
    assert third["last_seq"].startswith("3-")


@pytest.mark.parametrize("limit", [1, 2])
def test_eventsource_changes_with_a_limit(client: Client, db: str, server: Any, limit: int) -> None:
    _check_empty(client, db)
    ok(client("POST", db, {"_id": "foo"}), 201)
    feed = Feed(server.port, f"{db}/_changes?feed=eventsource&timeout=5000&limit={limit}")
    assert feed.resp.headers["Content-Type"].startswith("text/event-stream")
    if limit == 2:
        ok(client("POST", db, {"_id": "bar", "bar": 1}), 201)
    # The feed ends at its limit: at once for 1 (the write after it is not
    # waited for), at the write for 2.
    assert [row["id"] for row in _events(feed.body())] == ["foo", "bar"][:limit]


def test_eventsource_changes(client: Client, db: str, server: Any) -> None:
    _check_empty(client, db)
    ok(client("POST", db, {"_id": "foo"}), 201)
    feed = Lines(server.port, f"{db}/_changes?feed=eventsource&timeout=5000")
    assert feed.resp.headers["Content-Type"].startswith("text/event-stream")
    ok(client("POST", db, {"_id": "bar", "bar": 1}), 201)
    assert _event_ids(feed.until(lambda seen: len(_event_ids(seen)) == 2)) == ["foo", "bar"]


def test_eventsource_limit_over_waits_for_the_timeout(client: Client, db: str) -> None:
    ok(client("POST", db, {"_id": "foo"}), 201)
    started = time.monotonic()
    answer = client("GET", f"{db}/_changes?feed=eventsource&timeout=300&limit=2")
    assert time.monotonic() - started > 0.25
    assert [row["id"] for row in _events(answer.raw)] == ["foo"]


def test_eventsource_no_junk_in_response(client: Client, db: str) -> None:
    ok(client("POST", db, {"_id": "foo"}), 201)
    ok(client("POST", db, {"_id": "bar"}), 201)
    raw = client("GET", f"{db}/_changes?feed=eventsource&timeout=50").raw.decode()
    fields = {line.split(":")[0] for line in raw.split("\n")}
    assert fields <= {"", "data", "id", "event"}
    assert "data" in fields and "id" in fields


def test_eventsource_heartbeat(server: Any, db: str) -> None:
    # With a heartbeat the feed runs until the client leaves (couch_changes:
    # get_changes_timeout ignores timeout then); read three beats and close.
    feed = Lines(server.port, f"{db}/_changes?feed=eventsource&heartbeat=10")
    lines = feed.until(lambda seen: seen.count(b"event: heartbeat\n") == 3)
    assert set(lines) <= {b"event: heartbeat\n", b"data: \n", b"\n"}


def _filters(client: Client, db: str) -> None:
    ddoc = {"filters": {"bop": "function(doc, req) { return (doc.bop);}"}}
    put(client, db, "_design/changes_filter", ddoc)


def test_longpoll_filtered_changes(client: Client, db: str, server: Any) -> None:
    _filters(client, db)
    ok(client("POST", db, {"bop": "foom"}), 201)
    ok(client("POST", db, {"bop": False}), 201)
    url = f"{db}/_changes?feed=longpoll&filter=changes_filter/bop"
    first = ok(client("GET", url))
    assert len(first["results"]) == 1 and first["last_seq"].startswith("3-")
    feed = Feed(server.port, f"{url}&since={first['last_seq']}")
    ok(client("POST", db, {"_id": "falsy", "bop": ""}), 201)
    # A change the filter refuses does not end a longpoll.
    assert feed.pending(0.2)
    ok(client("POST", db, {"_id": "bingo", "bop": "bingo"}), 201)
    second = json.loads(feed.body())
    assert [row["id"] for row in second["results"]] == ["bingo"]
    assert second["last_seq"].startswith("5-")


def test_continuous_filtered_changes(client: Client, db: str, server: Any) -> None:
    _filters(client, db)
    ok(client("POST", db, {"bop": False}), 201)
    ok(client("POST", db, {"_id": "bingo", "bop": "bingo"}), 201)
    feed = Lines(
        server.port, f"{db}/_changes?feed=continuous&filter=changes_filter/bop&timeout=5000"
    )
    ok(client("POST", db, {"_id": "rusty", "bop": "plankton"}), 201)
    # Nothing but the two documents the filter passes, the last one last.
    assert _ids_seen(feed.until(lambda lines: "rusty" in _ids_seen(lines))) == ["bingo", "rusty"]


def test_continuous_filtered_changes_with_doc_ids(client: Client, db: str, server: Any) -> None:
    ok(client("POST", db, {"_id": "doc1", "value": 1}), 201)
    ok(client("POST", db, {"_id": "doc2", "value": 2}), 201)
    body = {"doc_ids": ["doc1", "doc3", "doc4"]}
    feed = Lines(server.port, f"{db}/_changes?feed=continuous&timeout=5000&filter=_doc_ids", body)
    ok(client("POST", db, {"_id": "doc2", "_rev": client("GET", f"{db}/doc2").json["_rev"]}), 201)
    ok(client("POST", db, {"_id": "doc3", "value": 3}), 201)
    assert _ids_seen(feed.until(lambda lines: "doc3" in _ids_seen(lines))) == ["doc1", "doc3"]


def test_last_event_id_is_a_since_couchdb_1852(client: Client, db: str) -> None:
    for _ in range(4):
        ok(client("POST", db, {"bop": "foom"}), 201)
    results = ok(client("GET", f"{db}/_changes"))["results"]
    assert len(results) == 4
    headers = {"Accept": "text/event-stream", "Last-Event-ID": results[1]["seq"]}
    answer = client("GET", f"{db}/_changes?feed=eventsource&timeout=100&since=0", headers=headers)
    assert len(_events(answer.raw)) == 2

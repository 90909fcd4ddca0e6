"""settee serve speaks CouchDB: endpoints, status codes, error bodies, headers.

Each test uses its own database on one server per module (bound to a free
loopback port); the expected bodies and codes are CouchDB 3.x's (chttpd_db).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

import settee
from settee.serve import start_server

CONFLICT = {"error": "conflict", "reason": "Document update conflict."}
MISSING = {"error": "not_found", "reason": "missing"}
DELETED = {"error": "not_found", "reason": "deleted"}
NO_DB = {"error": "not_found", "reason": "Database does not exist."}


@dataclass
class Resp:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


class Client:
    """A bare HTTP/1.1 client (stdlib), so the tests see exactly what went over the wire."""

    def __init__(self, port: int) -> None:
        self.port = port

    def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        timeout: float = 30,
    ) -> Resp:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            data = raw if raw is not None else None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Resp(resp.status, dict(resp.getheaders()), resp.read())
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


@pytest.fixture
def db(client: Client, request: pytest.FixtureRequest) -> str:
    """A fresh database named after the test; its URL path."""
    name = "t" + request.node.name.lower().replace("[", "-").replace("]", "")[:60]
    name = "".join(c if c.isalnum() or c in "_-" else "-" for c in name)
    assert client("PUT", f"/{name}").status == 201
    return f"/{name}"


def put(client: Client, db: str, doc_id: str, body: dict[str, Any]) -> str:
    r = client("PUT", f"{db}/{urllib.parse.quote(doc_id, safe='')}", body)
    assert r.status == 201, r.raw
    return str(r.json["rev"])


# -- server endpoints ----------------------------------------------------------------------------


def test_root_uuids_up_and_all_dbs(client: Client, db: str) -> None:
    root = client("GET", "/")
    assert root.status == 200
    assert root.json["couchdb"] == "Welcome" and root.json["vendor"]["name"] == "settee"
    assert root.headers["Content-Type"].startswith("application/json")
    assert client("GET", "/_up").json == {"status": "ok", "seeds": {}}  # mem3_seeds:get_status
    uuids = client("GET", "/_uuids?count=5").json["uuids"]
    assert len(uuids) == 5 and len(set(uuids)) == 5 and all(len(u) == 32 for u in uuids)
    assert client("GET", "/_uuids?count=1001").status == 400
    assert db[1:] in client("GET", "/_all_dbs").json


def test_database_lifecycle_codes(client: Client) -> None:
    assert client("GET", "/lifecycle").json == NO_DB
    created = client("PUT", "/lifecycle")
    assert (created.status, created.json) == (201, {"ok": True})
    again = client("PUT", "/lifecycle")
    assert again.status == 412
    assert again.json == {
        "error": "file_exists",
        "reason": "The database could not be created, the file already exists.",
    }
    info = client("GET", "/lifecycle").json
    assert info["db_name"] == "lifecycle" and info["doc_count"] == 0
    assert info["cluster"]["q"] == 4
    assert client("HEAD", "/lifecycle").status == 200
    bad = client("PUT", "/Bad-Name")
    assert bad.status == 400 and bad.json["error"] == "illegal_database_name"
    assert client("DELETE", "/lifecycle").json == {"ok": True}
    gone = client("DELETE", "/lifecycle")
    assert (gone.status, gone.json) == (404, NO_DB)
    assert client("GET", "/lifecycle/doc").status == 404
    assert client("PUT", "/withshards?q=2").status == 201
    assert client("GET", "/withshards").json["cluster"]["q"] == 2


def test_method_not_allowed_is_405_with_allow(client: Client, db: str) -> None:
    r = client("PUT", f"{db}/_bulk_docs", {"docs": []})
    assert r.status == 405
    assert r.json == {"error": "method_not_allowed", "reason": "Only POST allowed"}
    assert r.headers["Allow"] == "POST"


# -- documents -------------------------------------------------------------------------------------


def test_document_crud_codes_bodies_and_etags(client: Client, db: str) -> None:
    created = client("PUT", f"{db}/a", {"x": 1})
    assert created.status == 201
    rev1 = created.json["rev"]
    assert created.json == {"ok": True, "id": "a", "rev": rev1}
    assert created.headers["ETag"] == f'"{rev1}"'
    assert created.headers["Location"].endswith(f"{db}/a")

    got = client("GET", f"{db}/a")
    assert (got.status, got.json) == (200, {"_id": "a", "_rev": rev1, "x": 1})
    assert got.headers["ETag"] == f'"{rev1}"'
    assert client("GET", f"{db}/a", headers={"If-None-Match": f'"{rev1}"'}).status == 304
    head = client("HEAD", f"{db}/a")
    assert head.status == 200 and head.raw == b"" and head.headers["ETag"] == f'"{rev1}"'

    conflict = client("PUT", f"{db}/a", {"x": 2})
    assert (conflict.status, conflict.json) == (409, CONFLICT)
    rev2 = client("PUT", f"{db}/a?rev={rev1}", {"x": 2}).json["rev"]
    assert rev2.startswith("2-")
    rev3 = client("PUT", f"{db}/a", {"x": 3}, headers={"If-Match": f'"{rev2}"'}).json["rev"]
    mismatch = client("PUT", f"{db}/a?rev={rev1}", {"_rev": rev3, "x": 4})
    assert mismatch.status == 400 and mismatch.json["error"] == "bad_request"
    assert client("PUT", f"{db}/a?rev={rev1}", {"x": 4}).json == CONFLICT

    assert client("DELETE", f"{db}/a").json == CONFLICT  # no rev
    deleted = client("DELETE", f"{db}/a?rev={rev3}")
    assert deleted.status == 200
    assert deleted.json["ok"] is True and deleted.json["rev"].startswith("4-")
    assert deleted.headers["ETag"] == f'"{deleted.json["rev"]}"'
    assert (client("GET", f"{db}/a").status, client("GET", f"{db}/a").json) == (404, DELETED)
    tomb = client("GET", f"{db}/a?rev={deleted.json['rev']}").json
    assert tomb == {"_id": "a", "_rev": deleted.json["rev"], "_deleted": True}
    assert client("GET", f"{db}/nope").json == MISSING
    assert client("DELETE", f"{db}/nope?rev={rev1}").json == MISSING
    assert client("GET", f"{db}/a?rev={rev1}").json["x"] == 1  # old revision, not compacted


def test_post_invents_ids_and_needs_json_content_type(client: Client, db: str) -> None:
    r = client("POST", db, {"x": 1})
    assert r.status == 201 and r.json["ok"] is True and len(r.json["id"]) == 32
    assert r.headers["Location"].endswith(f"{db}/{r.json['id']}")
    named = client("POST", db, {"_id": "named", "x": 1})
    assert named.json["id"] == "named"
    assert client("POST", db, {"_id": "named"}).json == CONFLICT
    wrong = client("POST", db, {"x": 1}, headers={"Content-Type": "text/plain"})
    assert wrong.status == 415
    assert wrong.json == {
        "error": "bad_content_type",
        "reason": "Content-Type must be application/json",
    }
    for endpoint in ("_bulk_docs", "_all_docs", "_revs_diff", "_bulk_get", "_compact"):
        r = client("POST", f"{db}/{endpoint}", {}, headers={"Content-Type": "text/plain"})
        assert r.status == 415, endpoint
    # couch_httpd:validate_ctype compares the type before any ";" exactly, as written.
    for ctype in ("Application/JSON", "application/json ; charset=utf-8"):
        r = client("POST", db, {"x": 1}, headers={"Content-Type": ctype})
        assert r.status == 415, ctype
    charset = client(
        "POST", db, {"x": 1}, headers={"Content-Type": "application/json;charset=utf-8"}
    )
    assert charset.status == 201


def test_invalid_documents_are_400_with_couchdb_error_names(client: Client, db: str) -> None:
    bad_json = client("PUT", f"{db}/a", raw=b"{not json")
    assert bad_json.status == 400 and bad_json.json == {
        "error": "bad_request",
        "reason": "invalid UTF-8 JSON",
    }
    assert client("PUT", f"{db}/a", [1, 2]).status == 400
    deep = client("PUT", f"{db}/a", raw=b'{"v": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert deep.status == 400 and deep.json["reason"] == "the JSON body nests too deeply"
    special = client("PUT", f"{db}/a", {"_foo": 1})
    assert special.status == 400 and special.json["error"] == "doc_validation"
    bad_att = client("PUT", f"{db}/a", {"_attachments": {"_x": {"data": ""}}})
    assert (bad_att.status, bad_att.json["error"]) == (400, "bad_request")
    underscore = client("PUT", f"{db}/_nope", {"x": 1})
    assert underscore.status == 400 and underscore.json["error"] == "illegal_docid"
    assert client("PUT", f"{db}/a", {"x": float("inf")}).status == 400  # not JSON
    too_big = client("PUT", f"{db}/a", {"x": 2**70})
    assert too_big.status == 400 and too_big.json["error"] == "bad_request"
    assert client("GET", f"{db}/a").status == 404  # nothing was written


def test_slashes_in_ids_design_docs_and_trailing_slash(client: Client, db: str) -> None:
    rev = put(client, db, "a/b", {"x": 1})
    assert client("GET", f"{db}/a%2Fb").json["_rev"] == rev
    ddoc = client("PUT", f"{db}/_design/app", {"views": {}})
    assert ddoc.status == 201 and ddoc.json["id"] == "_design/app"
    # chttpd_db redirects a read of an encoded slash after _design (query kept);
    # a write there is an ordinary one.
    moved = client("GET", f"{db}/_design%2fapp?revs=true", headers={"Host": "h:5984"})
    assert (moved.status, moved.raw) == (301, b"")
    assert moved.headers["Location"] == f"http://h:5984{db}/_design/app?revs=true"
    assert client("HEAD", f"{db}/_design%2Fapp/att").status == 301
    # It splits the raw path at every _design%2F and joins what follows the first
    # with nothing between: a later one is dropped, not decoded.
    twice = client("GET", f"{db}/_design%2Fa%2F_design%2Fb", headers={"Host": "h:5984"})
    assert twice.headers["Location"] == f"http://h:5984{db}/_design/a%2Fb"
    assert client("GET", f"{db}/_design/app").json["_id"] == "_design/app"
    again = client("PUT", f"{db}/_design%2Fapp", {"views": {}, "_rev": ddoc.json["rev"]})
    assert again.status == 201 and again.json["id"] == "_design/app"
    assert client("GET", f"{db}/").json["doc_count"] == 2
    ids = [row["id"] for row in client("GET", f"{db}/_all_docs").json["rows"]]
    assert ids == ["_design/app", "a/b"]


def make_conflict(client: Client, db: str, doc_id: str) -> tuple[str, str]:
    """Two live leaves for ``doc_id`` through new_edits=false; returns (winner, loser)."""
    rev1 = put(client, db, doc_id, {"v": 0})
    h1 = rev1.split("-")[1]
    branches = [
        {"_id": doc_id, "v": side, "_revisions": {"start": 2, "ids": [f"{side}" * 32, h1]}}
        for side in ("a", "b")
    ]
    r = client("POST", f"{db}/_bulk_docs", {"docs": branches, "new_edits": False})
    assert (r.status, r.json) == (201, [])
    return "2-" + "b" * 32, "2-" + "a" * 32


def test_conflicts_revs_revs_info_open_revs_and_latest(client: Client, db: str) -> None:
    winner, loser = make_conflict(client, db, "c")
    doc = client("GET", f"{db}/c?conflicts=true&revs=true").json
    assert doc["_rev"] == winner and doc["_conflicts"] == [loser]
    assert doc["_revisions"]["start"] == 2 and len(doc["_revisions"]["ids"]) == 2
    info = client("GET", f"{db}/c?revs_info=true").json["_revs_info"]
    assert [i["status"] for i in info] == ["available", "available"]
    accept = {"Accept": "application/json"}
    every = client("GET", f"{db}/c?open_revs=all&revs=true", headers=accept).json
    assert sorted(r["ok"]["_rev"] for r in every) == sorted([winner, loser])
    assert all("_revisions" in r["ok"] for r in every)
    ask = urllib.parse.quote(json.dumps([loser, "9-" + "f" * 32]))
    some = client("GET", f"{db}/c?open_revs={ask}", headers=accept).json
    assert some == [{"ok": {"_id": "c", "_rev": loser, "v": "a"}}, {"missing": "9-" + "f" * 32}]
    root = client("GET", f"{db}/c?revs_info=true").json["_revs_info"][-1]["rev"]
    latest = client(
        "GET",
        f"{db}/c?latest=true&open_revs={urllib.parse.quote(json.dumps([root]))}",
        headers=accept,
    ).json
    assert sorted(r["ok"]["_rev"] for r in latest) == sorted([winner, loser])
    multipart = client("GET", f"{db}/c?open_revs=all", headers={"Accept": "multipart/mixed"})
    assert multipart.headers["Content-Type"].startswith("multipart/mixed")
    assert multipart.raw.count(b"Content-Type: application/json") == 2
    assert client("GET", f"{db}/zzz?open_revs=all", headers=accept).json == MISSING
    # resolve the conflict by deleting the loser
    client("DELETE", f"{db}/c?rev={loser}")
    doc = client("GET", f"{db}/c?conflicts=true&deleted_conflicts=true").json
    assert "_conflicts" not in doc and doc["_deleted_conflicts"][0].startswith("3-")


# -- bulk endpoints --------------------------------------------------------------------------------


def test_bulk_docs_results_in_order(client: Client, db: str) -> None:
    rev = put(client, db, "old", {"v": 1})
    docs = [{"_id": "n1"}, {"_id": "old", "v": 2}, {"_id": "old", "_rev": rev, "v": 3}, {"v": 4}]
    r = client("POST", f"{db}/_bulk_docs", {"docs": docs})
    assert r.status == 201
    results = r.json
    assert results[0]["ok"] and results[0]["id"] == "n1"
    assert results[1] == {"id": "old", **CONFLICT}
    assert results[2]["ok"] and results[2]["rev"].startswith("2-")
    assert results[3]["ok"] and len(results[3]["id"]) == 32
    missing = client("POST", f"{db}/_bulk_docs", {"documents": []})
    assert missing.json == {
        "error": "bad_request",
        "reason": "POST body must include `docs` parameter.",
    }
    bad_flag = client("POST", f"{db}/_bulk_docs", {"docs": [], "new_edits": "no"})
    assert bad_flag.status == 400
    no_rev = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "x"}], "new_edits": False})
    assert no_rev.status == 400
    invalid = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "ok"}, {"_id": 5}]})
    assert invalid.status == 400
    assert client("GET", f"{db}/ok").status == 404  # the whole call was rejected


def test_bulk_get_refuses_query_parameters_that_belong_in_the_body(client: Client, db: str) -> None:
    """chttpd_db:validate_query_param: these name what each ``docs`` item says."""
    for name in ("open_revs", "new_edits", "w", "rev", "atts_since"):
        r = client("POST", f"{db}/_bulk_get?{name}=x", {"docs": []})
        reason = f'"{name}" query parameter is not acceptable'
        assert (r.status, r.json) == (400, {"error": "bad_request", "reason": reason})


def test_bulk_get_shapes(client: Client, db: str) -> None:
    winner, loser = make_conflict(client, db, "c")
    put(client, db, "d", {"v": 1})
    request = {
        "docs": [
            {"id": "d"},
            {"id": "c", "rev": loser},
            {"id": "c"},
            {"id": "nope"},
            {"id": "d", "rev": "7-" + "e" * 32},
        ]
    }
    r = client("POST", f"{db}/_bulk_get?revs=true", request)
    assert r.status == 200
    results = r.json["results"]
    assert [x["id"] for x in results] == ["d", "c", "c", "nope", "d"]
    assert results[0]["docs"][0]["ok"]["v"] == 1 and "_revisions" in results[0]["docs"][0]["ok"]
    assert results[1]["docs"] == [
        {
            "ok": {
                "_id": "c",
                "_rev": loser,
                "v": "a",
                "_revisions": {
                    "start": 2,
                    "ids": ["a" * 32, results[1]["docs"][0]["ok"]["_revisions"]["ids"][1]],
                },
            }
        }
    ]
    assert sorted(d["ok"]["_rev"] for d in results[2]["docs"]) == sorted([winner, loser])
    assert results[3]["docs"] == [
        {"error": {"id": "nope", "rev": "undefined", "error": "not_found", "reason": "missing"}}
    ]
    assert results[4]["docs"][0]["error"]["rev"] == "7-" + "e" * 32
    assert client("POST", f"{db}/_bulk_get", {"nodocs": 1}).status == 400


def test_revs_diff(client: Client, db: str) -> None:
    rev = put(client, db, "a", {"v": 1})
    r = client("POST", f"{db}/_revs_diff", {"a": [rev, "2-" + "c" * 32], "b": ["1-" + "d" * 32]})
    assert r.status == 200
    assert r.json == {
        "a": {"missing": ["2-" + "c" * 32], "possible_ancestors": [rev]},
        "b": {"missing": ["1-" + "d" * 32]},
    }
    assert client("POST", f"{db}/_revs_diff", {"a": ["not-a-rev"]}).status == 400


def test_all_docs_get_and_post(client: Client, db: str) -> None:
    for i in range(6):
        put(client, db, f"k{i}", {"i": i})
    rev = client("GET", f"{db}/k5").json["_rev"]
    client("DELETE", f"{db}/k5?rev={rev}")
    page = client("GET", f'{db}/_all_docs?startkey="k1"&endkey="k3"&include_docs=true').json
    assert page["total_rows"] == 5 and page["offset"] == 1
    assert [row["id"] for row in page["rows"]] == ["k1", "k2", "k3"]
    assert page["rows"][0]["doc"]["i"] == 1
    desc = client("GET", f"{db}/_all_docs?descending=true&limit=2&skip=1").json
    assert [row["id"] for row in desc["rows"]] == ["k3", "k2"]
    excl = client("GET", f'{db}/_all_docs?endkey="k2"&inclusive_end=false').json
    assert [row["id"] for row in excl["rows"]] == ["k0", "k1"]
    assert [r["id"] for r in client("GET", f'{db}/_all_docs?key="k4"').json["rows"]] == ["k4"]
    keyed = client("POST", f"{db}/_all_docs?include_docs=true", {"keys": ["k2", "zz", "k5"]}).json
    assert keyed["rows"][0]["doc"]["i"] == 2
    assert keyed["rows"][1] == {"key": "zz", "error": "not_found"}
    assert keyed["rows"][2]["value"]["deleted"] is True and keyed["rows"][2]["doc"] is None
    keys_qs = urllib.parse.quote(json.dumps(["k0"]))
    assert len(client("GET", f"{db}/_all_docs?keys={keys_qs}").json["rows"]) == 1
    bad = client("GET", f"{db}/_all_docs?startkey=k1")  # not JSON: chttpd's invalid_json
    assert bad.status == 400 and bad.json["error"] == "bad_request"
    assert bad.json["reason"].startswith("invalid UTF-8 JSON")
    for where in (
        "_all_docs?startkey=foo",
        "_all_docs?keys=garbage",
        "_changes?filter=_doc_ids&doc_ids=x",
    ):
        bad = client("POST" if "changes" not in where else "GET", f"{db}/{where}", {})
        assert (bad.status, bad.json["error"]) == (400, "bad_request"), where
    assert client("GET", f"{db}/_all_docs?limit=-1").status == 400
    assert client("GET", f"{db}/_all_docs?descending=maybe").status == 400
    assert "update_seq" in client("GET", f"{db}/_all_docs?update_seq=true").json
    _winner, loser = make_conflict(client, db, "c")
    rows = client("GET", f'{db}/_all_docs?key="c"&include_docs=true&conflicts=true').json["rows"]
    assert rows[0]["doc"]["_conflicts"] == [loser]


# -- changes ---------------------------------------------------------------------------------------


def test_changes_normal_feed(client: Client, db: str) -> None:
    revs = {i: put(client, db, f"d{i}", {"i": i}) for i in range(4)}
    client("DELETE", f"{db}/d0?rev={revs[0]}")
    feed = client("GET", f"{db}/_changes").json
    assert sorted(r["id"] for r in feed["results"]) == ["d0", "d1", "d2", "d3"]
    assert next(r for r in feed["results"] if r["id"] == "d0")["deleted"] is True
    assert client("GET", f"{db}/_changes?since={feed['last_seq']}").json["results"] == []
    first = client("GET", f"{db}/_changes?limit=2&include_docs=true").json
    assert len(first["results"]) == 2 and all("doc" in r for r in first["results"])
    rest = client("GET", f"{db}/_changes?since={first['last_seq']}").json["results"]
    assert len(rest) == 2
    assert client("GET", f"{db}/_changes?since=now").json["results"] == []
    bad = client("GET", f"{db}/_changes?since=garbage")
    assert bad.status == 400 and bad.json["error"] == "bad_request"
    assert client("GET", f"{db}/_changes?feed=sometimes").status == 400
    only = client("POST", f"{db}/_changes?filter=_doc_ids", {"doc_ids": ["d2", "zz"]}).json
    assert [r["id"] for r in only["results"]] == ["d2"]
    winner, loser = make_conflict(client, db, "c")
    styled = client("GET", f"{db}/_changes?style=all_docs&since={feed['last_seq']}").json
    [row] = [r for r in styled["results"] if r["id"] == "c"]
    assert row["changes"] == [{"rev": winner}, {"rev": loser}]


def test_changes_with_docs_and_conflicts_lists_them_as_get_does(client: Client, db: str) -> None:
    """Issue 15 (PouchDB's conflicts tests): ?include_docs=true&conflicts=true gives
    each doc its _conflicts, exactly as GET /db/doc?conflicts=true; without
    conflicts=true, or on a doc without conflicts, there is none."""
    put(client, db, "plain", {"v": 1})
    winner, loser = make_conflict(client, db, "c")
    rows = client("GET", f"{db}/_changes?include_docs=true&conflicts=true").json["results"]
    docs = {r["id"]: r["doc"] for r in rows}
    direct = client("GET", f"{db}/c?conflicts=true").json
    assert docs["c"] == direct and docs["c"]["_conflicts"] == [loser]
    assert docs["c"]["_rev"] == winner and "_conflicts" not in docs["plain"]
    plain = client("GET", f"{db}/_changes?include_docs=true").json["results"]
    assert all("_conflicts" not in r["doc"] for r in plain)


def test_longpoll_waits_for_a_write_and_times_out(client: Client, db: str) -> None:
    since = client("GET", db).json["update_seq"]
    t0 = time.monotonic()
    empty = client("GET", f"{db}/_changes?feed=longpoll&since={since}&timeout=200").json
    assert empty["results"] == [] and 0.15 < time.monotonic() - t0 < 5

    box: dict[str, Any] = {}

    def poll() -> None:
        box["r"] = client("GET", f"{db}/_changes?feed=longpoll&since=now&timeout=20000")

    waiter = threading.Thread(target=poll)
    t0 = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    assert "r" not in box  # still waiting
    put(client, db, "woke", {"x": 1})
    waiter.join(10)
    assert box["r"].status == 200 and time.monotonic() - t0 < 5
    assert [r["id"] for r in box["r"].json["results"]] == ["woke"]


def test_longpoll_heartbeat_sends_newlines(client: Client, server: Any, db: str) -> None:
    box: dict[str, Any] = {}

    def poll() -> None:
        box["r"] = client("GET", f"{db}/_changes?feed=longpoll&since=now&heartbeat=100&timeout=50")

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)  # with a heartbeat the feed outlives its timeout: only a write ends it
    put(client, db, "late", {"x": 1})
    waiter.join(10)
    raw = box["r"].raw
    assert raw.startswith(b"\n\n")  # at least two heartbeats before the answer
    assert [r["id"] for r in json.loads(raw)["results"]] == ["late"]


def test_continuous_feed(client: Client, db: str) -> None:
    put(client, db, "a", {"x": 1})
    r = client("GET", f"{db}/_changes?feed=continuous&timeout=200")
    lines = [json.loads(line) for line in r.raw.splitlines() if line.strip()]
    assert lines[0]["id"] == "a" and "last_seq" in lines[-1]
    limited = client("GET", f"{db}/_changes?feed=continuous&limit=1&timeout=10000")
    assert len([line for line in limited.raw.splitlines() if line.strip()]) == 2


# -- _local, compaction, durability ----------------------------------------------------------------


def test_local_docs_are_separate_and_versioned(client: Client, db: str) -> None:
    first = client("PUT", f"{db}/_local/cp", {"seq": 1})
    assert (first.status, first.json) == (201, {"ok": True, "id": "_local/cp", "rev": "0-1"})
    # CouchDB 3 checks no local revision: without _rev the write is 0-1 again.
    assert client("PUT", f"{db}/_local/cp", {"seq": 2}).json["rev"] == "0-1"
    assert client("PUT", f"{db}/_local/cp", {"_rev": "0-1", "seq": 2}).json["rev"] == "0-2"
    assert client("GET", f"{db}/_local/cp").json == {"_id": "_local/cp", "_rev": "0-2", "seq": 2}
    assert client("GET", f"{db}/_local%2Fcp").json["seq"] == 2
    assert client("GET", f"{db}/_local/other").json == MISSING
    assert client("GET", f"{db}/_changes").json["results"] == []
    assert client("GET", f"{db}/_all_docs").json["rows"] == []
    assert client("GET", db).json["doc_count"] == 0
    assert client("DELETE", f"{db}/_local/cp?rev=0-2").json["ok"] is True
    assert client("GET", f"{db}/_local/cp").status == 404
    # couch_db_updater numbers the next revision N+1 for any integer N: past 64 bits too.
    big = client("PUT", f"{db}/_local/big", {"_rev": "0-18446744073709551616"})
    assert big.json["rev"] == "0-18446744073709551617"
    assert client("GET", f"{db}/_local/big").json["_rev"] == "0-18446744073709551617"
    assert client("PUT", f"{db}/_local/big", {"_rev": "0-" + "9" * 5000}).status == 400


def test_compact_and_ensure_full_commit(client: Client, db: str) -> None:
    rev = put(client, db, "a", {"v": 1})
    client("PUT", f"{db}/a?rev={rev}", {"v": 2})
    compact = client("POST", f"{db}/_compact")
    assert (compact.status, compact.json) == (202, {"ok": True})
    for _ in range(100):
        if not client("GET", db).json["compact_running"]:
            break
        time.sleep(0.05)
    assert client("GET", f"{db}/a").json["v"] == 2
    assert client("GET", f"{db}/a?rev={rev}").json == MISSING  # non-leaf body compacted away
    full = client("POST", f"{db}/_ensure_full_commit")
    assert full.status == 201 and full.json["ok"] is True


def test_revs_limit_get_put_and_stemming(client: Client, db: str) -> None:
    """CouchDB's /{db}/_revs_limit: a positive integer, applied to later writes."""
    assert client("GET", f"{db}/_revs_limit").json == 1000
    assert client("PUT", f"{db}/_revs_limit", 3).json == {"ok": True}
    assert client("GET", f"{db}/_revs_limit").json == 3
    rev = put(client, db, "a", {"v": 0})
    for v in range(1, 5):
        rev = client("PUT", f"{db}/a?rev={rev}", {"v": v}).json["rev"]
    revisions = client("GET", f"{db}/a?revs=true").json["_revisions"]
    assert revisions["start"] == 5 and len(revisions["ids"]) == 3
    for bad in (0, -1, "3", True, 2.5, None):
        r = client("PUT", f"{db}/_revs_limit", bad)
        assert (r.status, r.json["error"]) == (400, "bad_request"), bad
    assert client("POST", f"{db}/_revs_limit", 3).status == 405


def test_a_lowered_revs_limit_shows_in_revisions_before_and_after_compaction(
    client: Client, db: str
) -> None:
    """rev_stemming_test.exs, "revs limit is kept after compaction": a document
    edited 6 times under the default limit reads with 5 ids as soon as the limit
    is 5 (couch_db:make_doc cuts the path it reads), and after a compaction."""
    rev = put(client, db, "bar", {"count": 0})
    for count in range(1, 6):
        rev = client("PUT", f"{db}/bar?rev={rev}", {"count": count}).json["rev"]
    assert len(client("GET", f"{db}/bar?revs=true").json["_revisions"]["ids"]) == 6
    assert client("PUT", f"{db}/_revs_limit", 5).json == {"ok": True}
    assert len(client("GET", f"{db}/bar?revs=true").json["_revisions"]["ids"]) == 5
    assert client("POST", f"{db}/_compact").status == 202
    for _ in range(100):
        if not client("GET", db).json["compact_running"]:
            break
        time.sleep(0.05)
    again = client("GET", f"{db}/bar?revs=true", headers={"If-None-Match": "pommes"})
    assert len(again.json["_revisions"]["ids"]) == 5


def test_long_document_ids_are_reachable(client: Client, db: str) -> None:
    """The engine takes ids of any length; the URL limit (max_url_length, CouchDB's
    max_uri_length) is far above aiohttp's 8 KiB default so they stay addressable."""
    doc_id = "z" * 100_000
    path = f"{db}/{doc_id}"
    created = client("PUT", path, {"v": 1})
    # No 100 KB Location header: Python's http.client refuses lines above 64 KiB.
    assert created.status == 201 and "Location" not in created.headers
    assert client("GET", path).json["v"] == 1
    too_long = client("GET", f"{db}/{'z' * (2 * 1024**2)}")
    assert too_long.status == 400


def test_restart_keeps_revs_limit(tmp_path: Path) -> None:
    with start_server(str(tmp_path), "127.0.0.1", 0) as first:
        c = Client(first.port)
        c("PUT", "/limited")
        c("PUT", "/limited/_revs_limit", 2)
    with start_server(str(tmp_path), "127.0.0.1", 0) as second:
        c = Client(second.port)
        assert c("GET", "/limited/_revs_limit").json == 2
        c("DELETE", "/limited")
        c("PUT", "/limited")
        assert c("GET", "/limited/_revs_limit").json == 1000  # a new database starts afresh


def test_restart_keeps_documents_and_local_docs(tmp_path: Path) -> None:
    with start_server(str(tmp_path), "127.0.0.1", 0) as first:
        c = Client(first.port)
        c("PUT", "/keep")
        rev = put(c, "/keep", "a", {"v": 1})
        c("PUT", "/keep/_local/cp", {"seq": "x"})
    with start_server(str(tmp_path), "127.0.0.1", 0) as second:
        c = Client(second.port)
        assert c("GET", "/_all_dbs").json == ["keep"]
        assert c("GET", "/keep/a").json == {"_id": "a", "_rev": rev, "v": 1}
        assert c("GET", "/keep/_local/cp").json["seq"] == "x"
        assert c("GET", "/").json["uuid"] == Client(second.port)("GET", "/").json["uuid"]


def test_engine_calls_never_block_the_event_loop(
    client: Client, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_put = settee.Database.put

    def slow_put(self: settee.Database, doc: Any) -> dict[str, Any]:
        time.sleep(1.0)
        return real_put(self, doc)

    monkeypatch.setattr(settee.Database, "put", slow_put)
    writer = threading.Thread(target=lambda: client("PUT", f"{db}/slow", {"x": 1}))
    writer.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    assert client("GET", "/").status == 200
    assert client("GET", db).status == 200
    assert time.monotonic() - t0 < 0.5  # answered while the slow put still runs
    writer.join()
    assert client("GET", f"{db}/slow").status == 200


def test_a_local_write_rewrites_only_its_own_file(tmp_path: Path) -> None:
    """Issue 15: every _local write rewrote one file holding all of a database's
    local documents; replication checkpoints made that O(all checkpoints) per write."""
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as h:
        c = Client(h.port)
        assert c("PUT", "/loc").status == 201
        for i in range(30):
            assert c("PUT", f"/loc/_local/c{i}", {"seq": i}).status == 201
        folder = tmp_path / "_local" / "loc"
        before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}
        assert len(before) == 30
        assert c("PUT", "/loc/_local/c7", {"seq": 70, "_rev": "0-1"}).status == 201
        after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.iterdir()}
        changed = [name for name in before if before[name] != after[name]]
        assert len(changed) == 1 and set(after) == set(before)
        assert c("GET", "/loc/_local/c7").json == {"_id": "_local/c7", "_rev": "0-2", "seq": 70}
        assert c("DELETE", "/loc/_local/c3?rev=0-1").status == 200
        assert len(list(folder.iterdir())) == 29


def test_local_documents_of_the_one_file_format_are_migrated(tmp_path: Path) -> None:
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as h:
        assert Client(h.port)("PUT", "/old").status == 201
    legacy = tmp_path / "_local" / "old.json"
    legacy.parent.mkdir(exist_ok=True)
    docs = {
        "_local/cp": {"rev": 4, "body": {"last_seq": "12-x"}},
        "_local/a/b": {"rev": 1, "body": {}},
    }
    legacy.write_text(json.dumps({"docs": docs}), encoding="utf-8")
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as h:
        c = Client(h.port)
        assert c("GET", "/old/_local/cp").json == {
            "_id": "_local/cp",
            "_rev": "0-4",
            "last_seq": "12-x",
        }
        assert c("GET", "/old/_local/a%2Fb").json["_rev"] == "0-1"
        assert c("PUT", "/old/_local/cp", {"last_seq": "13-y", "_rev": "0-4"}).json["rev"] == "0-5"
    assert not legacy.exists() and (tmp_path / "_local" / "old.json.migrated").exists()
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as h:
        assert Client(h.port)("GET", "/old/_local/cp").json["_rev"] == "0-5"


# -- Mango: _find and _changes filters -----------------------------------------------------------


def _people(client: Client, db: str) -> None:
    docs = [
        {"_id": f"p{i:02d}", "age": 20 + i, "name": name, "tags": tags}
        for i, (name, tags) in enumerate(
            [("ann", ["a"]), ("Bob", ["b", "x"]), ("cid", []), ("dee", ["x"]), ("Eve", ["a", "x"])]
        )
    ]
    docs.append({"_id": "_design/app", "filters": {"f": "function(doc, req) { return true; }"}})
    r = client("POST", f"{db}/_bulk_docs", {"docs": docs})
    assert r.status == 201 and all("ok" in row for row in r.json)


def test_find_selects_skips_limits_projects_and_pages(client: Client, db: str) -> None:
    _people(client, db)
    query = {"selector": {"age": {"$gte": 21}, "tags": {"$elemMatch": {"$eq": "x"}}}}
    r = client("POST", f"{db}/_find", {**query, "fields": ["_id", "name"]})
    assert r.status == 200, r.raw
    assert r.json["docs"] == [
        {"_id": "p01", "name": "Bob"},
        {"_id": "p03", "name": "dee"},
        {"_id": "p04", "name": "Eve"},
    ]
    assert r.json["warning"].startswith("No matching index found")
    first = client("POST", f"{db}/_find", {**query, "limit": 2, "skip": 0}).json
    assert [d["_id"] for d in first["docs"]] == ["p01", "p03"]
    assert all(d["_rev"].startswith("1-") for d in first["docs"])
    rest = client("POST", f"{db}/_find", {**query, "bookmark": first["bookmark"]}).json
    assert [d["_id"] for d in rest["docs"]] == ["p04"]
    # _all_docs serves a sort on _id only for a selector that narrows _id
    # (mango_idx_special:is_usable; every mango test that sorts on _id adds one).
    by_id = {"selector": {**query["selector"], "_id": {"$gt": None}}, "sort": [{"_id": "desc"}]}
    backwards = client("POST", f"{db}/_find", {**by_id, "skip": 1})
    assert [d["_id"] for d in backwards.json["docs"]] == ["p03", "p01"]
    unsorted = client("POST", f"{db}/_find", {**query, "sort": [{"_id": "desc"}]})
    assert (unsorted.status, unsorted.json["error"]) == (400, "no_usable_index")
    # Design documents are never results, even of a selector that matches everything.
    everything = client("POST", f"{db}/_find", {"selector": {}, "limit": 100}).json["docs"]
    assert [d["_id"] for d in everything] == [f"p{i:02d}" for i in range(5)]
    stats = client("POST", f"{db}/_find", {"selector": {"name": "ann"}, "execution_stats": True})
    # The design document is read and counted, then dropped (mango_cursor_view
    # handle_all_docs_message; 15-execution-stats-test.py counts 25 for 15 users
    # and 10 index design documents).
    assert stats.json["execution_stats"]["total_docs_examined"] == 6
    assert stats.json["execution_stats"]["results_returned"] == 1


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "missing_required_key"),
        ({"selector": []}, "invalid_selector_json"),
        ({"selector": {"a": {"$bogus": 1}}}, "invalid_operator"),
        ({"selector": {"a": {"$in": 5}}}, "bad_arg"),
        ({"selector": {"$gt": 1}}, "invalid_selector"),
        ({"selector": {"a..b": 1}}, "invalid_field_name"),
        ({"selector": {}, "limit": -1}, "invalid_non_neg_integer"),
        ({"selector": {}, "limit": 2**63}, None),
        ({"selector": {}, "sort": ["age"]}, "no_usable_index"),
        ({"selector": {}, "sort": [{"_id": "asc"}, {"a": "desc"}]}, "unsupported_mixed_sort"),
        ({"selector": {}, "bookmark": "%%%"}, "invalid_bookmark"),
        ({"selector": {}, "fields": "a"}, "invalid_fields"),
        ({"selector": {}, "colour": 1}, "invalid_key"),
    ],
)
def test_find_refuses_what_couchdb_refuses(client: Client, db: str, body: Any, error: Any) -> None:
    r = client("POST", f"{db}/_find", body)
    if error is None:
        assert r.status == 200, r.raw
    else:
        assert (r.status, r.json["error"]) == (400, error), r.raw


def test_changes_selector_and_design_filters(client: Client, db: str) -> None:
    _people(client, db)
    body = {"selector": {"name": {"$regex": "^[A-Z]"}}}
    r = client("POST", f"{db}/_changes?filter=_selector", body)
    assert r.status == 200, r.raw
    assert sorted(row["id"] for row in r.json["results"]) == ["p01", "p04"]
    assert all("doc" not in row for row in r.json["results"])
    limited = client("POST", f"{db}/_changes?filter=_selector&limit=1&include_docs=true", body)
    [row] = limited.json["results"]
    assert row["doc"]["name"] in ("Bob", "Eve") and limited.json["last_seq"] == row["seq"]
    more = client("POST", f"{db}/_changes?filter=_selector&since={row['seq']}", body).json
    assert {row["id"]} | {r["id"] for r in more["results"]} == {"p01", "p04"}
    assert client("GET", f"{db}/_changes?filter=_selector").status == 400
    bad = client("POST", f"{db}/_changes?filter=_selector", {"selector": {"a": {"$x": 1}}})
    assert (bad.status, bad.json["error"]) == (400, "bad_request")
    design = client("GET", f"{db}/_changes?filter=_design").json["results"]
    assert [row["id"] for row in design] == ["_design/app"]


@pytest.mark.parametrize(
    ("query", "status", "reason"),
    [
        ("filter=nope/f", 404, "missing"),
        ("filter=app/nope", 404, "missing json key: nope"),
        ("filter=app/f", 200, None),
        ("filter=_view", 400, "`view` filter parameter is not provided."),
        ("filter=_view&view=app/v", 404, "missing json key: views"),
        ("filter=_bogus", 400, "unknown builtin filter name"),
        ("filter=a/b/c", 400, "`filter` must be of the form `designname/filtername`"),
    ],
)
def test_changes_design_filters_answer_as_couchdb(
    client: Client, db: str, query: str, status: int, reason: str | None
) -> None:
    _people(client, db)
    r = client("GET", f"{db}/_changes?{query}")
    assert r.status == status, r.raw
    if reason is not None:
        assert r.json["reason"] == reason


# -- database-level endpoints replicators and admin tools call ------------------------------------


def test_security_is_stored_validated_and_removed_with_the_database(
    client: Client, db: str
) -> None:
    admin_only = {"members": {"roles": ["_admin"]}, "admins": {"roles": ["_admin"]}}
    assert client("GET", f"{db}/_security").json == admin_only  # CouchDB 3's default
    sec = {"admins": {"names": ["ann"], "roles": []}, "members": {"names": [], "roles": ["r"]}}
    assert client("PUT", f"{db}/_security", sec).json == {"ok": True}
    assert client("GET", f"{db}/_security").json == sec
    for bad, reason in [
        ({"admins": {"names": "ann"}}, "names must be a JSON list of strings"),
        ({"members": {"roles": [1]}}, "roles must be a JSON list of strings"),
        ({"admins": []}, "admins or members must be a JSON list of strings"),
    ]:
        r = client("PUT", f"{db}/_security", bad)
        assert (r.status, r.json["reason"]) == (400, reason)
    assert client("PUT", f"{db}/_security", raw=b"[]").status == 400
    assert client("GET", f"{db}/_security").json == sec  # refusals changed nothing
    assert client("DELETE", db).status == 200
    assert client("PUT", db).status == 201
    assert client("GET", f"{db}/_security").json == admin_only


def test_session_and_active_tasks_answer_as_an_admin_party(client: Client) -> None:
    session = client("GET", "/_session").json
    assert session["ok"] is True and session["userCtx"] == {"name": None, "roles": ["_admin"]}
    login = client("POST", "/_session", {"name": "a", "password": "b"})
    assert (login.status, login.json["error"]) == (401, "unauthorized")
    assert client("DELETE", "/_session").json == {"ok": True}
    assert client("GET", "/_active_tasks").json == []


def test_changes_reports_pending_past_its_last_seq(client: Client, db: str) -> None:
    for i in range(5):
        put(client, db, f"d{i}", {"i": i})
    page = client("GET", f"{db}/_changes?limit=2").json
    assert page["pending"] == 3
    rest = client("GET", f"{db}/_changes?since={page['last_seq']}").json
    assert (len(rest["results"]), rest["pending"]) == (3, 0)
    put(client, db, "d0", {"i": 0, "_rev": client("GET", f"{db}/d0").json["_rev"]})
    assert client("GET", f"{db}/_changes?since={rest['last_seq']}&limit=0").json["pending"] == 1
    lines = client("GET", f"{db}/_changes?feed=continuous&limit=2&timeout=1").raw.splitlines()
    assert json.loads(lines[-1])["pending"] == 3  # d0 moved: 5 docs, 2 sent


def test_get_rev_with_latest_follows_the_branch_to_its_leaf(client: Client, db: str) -> None:
    """?rev=R&latest=true answers the leaf of R's own branch, as PouchDB's suite
    expects (test.get.js 5857): a loser's rev its own leaf, an unknown rev 404."""
    first = put(client, db, "d", {"v": 1})
    second = put(client, db, "d", {"v": 2, "_rev": first})
    assert client("GET", f"{db}/d?rev={first}&latest=true").json["_rev"] == second
    assert client("GET", f"{db}/d?rev={second}&latest=true").json["_rev"] == second
    assert client("GET", f"{db}/d?rev={first}").json["_rev"] == first
    winner, loser = make_conflict(client, db, "c")
    root = client("GET", f"{db}/c?revs=true").json["_revisions"]
    rev1 = f"1-{root['ids'][-1]}"
    assert client("GET", f"{db}/c?rev={rev1}&latest=true").json["_rev"] == winner
    assert client("GET", f"{db}/c?rev={loser}&latest=true").json["_rev"] == loser
    assert client("GET", f"{db}/c?rev=9-{'f' * 32}&latest=true").status == 404


# -- design-document JavaScript (mini-racer) -------------------------------------------------------

VDU = """function(newDoc, oldDoc, userCtx, secObj) {
  if (newDoc.bad) throw({forbidden: 'no bad docs'});
  if (newDoc.who && userCtx.roles.indexOf('_admin') < 0) throw({unauthorized: 'admins only'});
  if (newDoc._deleted && oldDoc && oldDoc.keep) throw({forbidden: 'kept ' + oldDoc._rev});
  if (newDoc.sec && !secObj.admins) throw({forbidden: 'no secObj'});
}"""


def test_validate_doc_update_refuses_writes_from_every_endpoint(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    put(client, db, "_design/v", {"validate_doc_update": VDU})
    bad = client("PUT", f"{db}/b", {"bad": True})
    assert (bad.status, bad.json) == (403, {"error": "forbidden", "reason": "no bad docs"})
    assert client("POST", db, {"bad": 1}).status == 403
    assert client("PUT", f"{db}/w", {"who": 1, "sec": 1}).status == 201  # admin, secObj given
    kept = put(client, db, "k", {"keep": True})
    gone = client("DELETE", f"{db}/k?rev={kept}")
    assert (gone.status, gone.json["reason"]) == (403, f"kept {kept}")
    rows = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "ok1"}, {"_id": "no", "bad": 1}]})
    assert rows.status == 201
    assert rows.json[0]["ok"] is True and rows.json[0]["id"] == "ok1"
    assert rows.json[1] == {"id": "no", "error": "forbidden", "reason": "no bad docs"}
    replicated = {"_id": "r", "bad": 1, "_revisions": {"start": 1, "ids": ["a" * 32]}}
    rows = client("POST", f"{db}/_bulk_docs", {"docs": [replicated], "new_edits": False})
    # update_doc_result_to_json({{Id, Rev}, Error}): replicated refusals carry the rev.
    refused = {"id": "r", "rev": "1-" + "a" * 32, "error": "forbidden", "reason": "no bad docs"}
    assert rows.json == [refused]
    assert client("GET", f"{db}/r").status == 404 and client("GET", f"{db}/no").status == 404
    # The design document itself is not validated by its own function.
    assert client("PUT", f"{db}/_design/w", {"bad": True}).status == 201


def test_changes_runs_filter_and_view_functions(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    _people(client, db)
    ddoc = {
        "filters": {"older": "function(doc, req) { return doc.age >= Number(req.query.min); }"},
        "views": {
            "x": {"map": "function(doc) { if ((doc.tags || []).indexOf('x') >= 0) emit(doc._id); }"}
        },
    }
    put(client, db, "_design/q", ddoc)
    older = client("GET", f"{db}/_changes?filter=q/older&min=23").json["results"]
    assert sorted(row["id"] for row in older) == ["p03", "p04"]
    tagged = client("GET", f"{db}/_changes?filter=_view&view=q/x").json["results"]
    assert sorted(row["id"] for row in tagged) == ["p01", "p03", "p04"]
    one = client("GET", f"{db}/_changes?filter=q/older&min=23&limit=1&include_docs=true").json
    assert [row["doc"]["age"] >= 23 for row in one["results"]] == [True]
    # filter.js keeps a document when the result is truthy: (r && true) || false.
    strings = "function(doc) { return doc.name ? doc.name.replace('cid', '') : ''; }"
    put(client, db, "_design/n", {"filters": {"n": strings}})
    nonempty = client("GET", f"{db}/_changes?filter=n/n").json["results"]
    assert sorted(row["id"] for row in nonempty) == ["p00", "p01", "p03", "p04"]


def test_a_live_feed_keeps_its_filter_when_the_design_document_changes(
    server: Any, client: Client, db: str
) -> None:
    """couch_changes resolves a feed's filter once, when it starts. Editing the
    design document made settee free the compiled function the running feed
    still called, and the feed failed at its next change."""
    pytest.importorskip("py_mini_racer")
    rev = put(client, db, "_design/q", {"filters": {"f": "function(doc) { return doc.ok; }"}})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", f"{db}/_changes?feed=continuous&filter=q/f&timeout=3000")
        feed = conn.getresponse()
        assert feed.status == 200
        put(client, db, "a", {"ok": True})
        assert json.loads(feed.readline())["id"] == "a"
        edited = {"_rev": rev, "filters": {"f": "function(doc) { return false; }"}}
        assert client("PUT", f"{db}/_design/q", edited).status == 201
        put(client, db, "b", {"ok": False})
        put(client, db, "c", {"ok": True})
        rows = [json.loads(line) for line in feed.read().splitlines() if line.strip()]
    finally:
        conn.close()
    assert [row.get("id") for row in rows[:-1]] == ["c"], rows
    assert "last_seq" in rows[-1]


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("function(doc) { while (true) {} }", "os_process_error"),
        ("function(doc) { throw new Error('boom'); }", "os_process_error"),
        ("this is not javascript", "compilation_error"),
        ("42", "compilation_error"),
        ("function(doc) { var a = []; while (true) a.push(new Array(1e6)); }", "os_process_error"),
    ],
)
def test_broken_filters_fail_alone(
    client: Client, db: str, source: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("py_mini_racer")
    from settee.serve import js

    monkeypatch.setattr(js, "CALL_SECONDS", 0.5)
    put(client, db, "d", {})
    put(client, db, "_design/f", {"filters": {"f": source}})
    r = client("GET", f"{db}/_changes?filter=f/f")
    assert (r.status, r.json["error"]) == (400, error), r.raw
    put(client, db, "_design/g", {"filters": {"g": "function(doc) { return true; }"}})
    assert client("GET", f"{db}/_changes?filter=g/g").status == 200


def test_without_mini_racer_design_functions_are_a_clear_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from settee.serve import js
    from settee.serve.protocol import HTTPError

    monkeypatch.setitem(sys.modules, "py_mini_racer", None)
    assert "pip install 'settee[js]'" in (js.js_available() or "")
    with pytest.raises(HTTPError) as refused:
        js.JsRuntime().compile("function(doc) {}", "_design/x: filters.f")
    assert refused.value.status == 400 and "settee[js]" in refused.value.reason


def test_bulk_docs_takes_local_docs_and_lets_revisions_name_the_rev(
    client: Client, db: str
) -> None:
    docs = [{"_id": "a"}, {"_id": "_local/cp", "seq": 1}, {"_id": "b"}]
    rows = client("POST", f"{db}/_bulk_docs", {"docs": docs}).json
    assert [row["id"] for row in rows] == ["a", "_local/cp", "b"]
    assert rows[1] == {"ok": True, "id": "_local/cp", "rev": "0-1"}
    assert client("GET", f"{db}/_local/cp").json == {"_id": "_local/cp", "_rev": "0-1", "seq": 1}
    # couch_doc:validate_docid refuses "_local/" for the whole request.
    refused = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "_local/"}]})
    assert (refused.status, refused.json["error"]) == (400, "illegal_docid")
    # CouchDB 3 checks no local revision: a write without _rev stores 0-1 again.
    again = client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": "_local/cp", "seq": 2}]}).json
    assert again == [{"ok": True, "id": "_local/cp", "rev": "0-1"}]
    assert "_local/cp" not in [r["id"] for r in client("GET", f"{db}/_all_docs").json["rows"]]
    # PouchDB sends a _rev that disagrees with _revisions; CouchDB goes by _revisions.
    doc = {
        "_id": "r",
        "_rev": "1-" + "c" * 32,
        "_revisions": {"start": 2, "ids": ["b" * 32, "a" * 32]},
    }
    assert client("POST", f"{db}/_bulk_docs", {"docs": [doc], "new_edits": False}).json == []
    assert client("GET", f"{db}/r").json["_rev"] == "2-" + "b" * 32
    # new_edits=false answers only errors (couch_db:update_docs' replicated_changes):
    # a local document stored is no row.
    local = {"docs": [{"_id": "_local/rep", "n": 1}], "new_edits": False}
    assert client("POST", f"{db}/_bulk_docs", local).json == []
    assert client("GET", f"{db}/_local/rep").json["n"] == 1
    put_r = client("PUT", f"{db}/p?new_edits=false", doc | {"_id": "p"})
    assert (put_r.status, put_r.json["rev"]) == (201, "2-" + "b" * 32)


def test_replicator_fields_are_kept_in_the_body(client: Client, db: str) -> None:
    doc = {"x": 1, "_replication_state": "completed", "_replication_stats": {"docs_written": 2}}
    rev = put(client, db, "job", doc)
    assert client("GET", f"{db}/job").json == {"_id": "job", "_rev": rev, **doc}


def test_free_form_revisions_from_replicators_are_stored(client: Client, db: str) -> None:
    fake = client("PUT", f"{db}/x?new_edits=false", {"_rev": "3-totally_fake_rev", "v": 1})
    assert (fake.status, fake.json["rev"]) == (201, "3-totally_fake_rev")
    got = client("GET", f"{db}/x?rev=3-totally_fake_rev")
    assert got.json["v"] == 1 and got.headers["ETag"] == '"3-totally_fake_rev"'
    empty = client(
        "POST", f"{db}/_bulk_docs", {"docs": [{"_id": "y", "_rev": "1-"}], "new_edits": False}
    )
    assert empty.json == []
    assert client("GET", f'{db}/y?open_revs=["1-"]').json == [{"ok": {"_id": "y", "_rev": "1-"}}]
    bad = client("PUT", f"{db}/z?new_edits=false", {"_rev": "1-" + "A" * 32})
    assert bad.status == 400


def test_requests_racing_a_database_delete_get_4xx_not_500(client: Client) -> None:
    """PouchDB's suite deletes a database in afterEach while the test's last writes
    are in flight; a request whose database is deleted under it is a 404."""
    statuses: list[int] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        while not stop.is_set():
            body = {"docs": [{"_id": f"w{n}-{i}", "v": i} for i in range(20)]}
            statuses.append(client("POST", "/racing/_bulk_docs", body).status)
            statuses.append(client("GET", "/racing/_changes?include_docs=true").status)
            statuses.append(client("PUT", f"/racing/_local/l{n}", {"v": 1}).status)
            statuses.append(client("POST", "/racing/_find", {"selector": {"v": 1}}).status)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    client("PUT", "/racing")
    for t in threads:
        t.start()
    try:
        for _ in range(40):
            client("DELETE", "/racing")
            client("PUT", "/racing")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert statuses and max(statuses) < 500, sorted(set(statuses))


# -- attachments -----------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def test_attachments_inline_stubs_and_standalone(client: Client, db: str) -> None:
    blob = bytes(range(256)) * 1000  # 256 KB: several chunks
    rev1 = put(
        client,
        db,
        "d",
        {"v": 1, "_attachments": {"a.txt": {"content_type": "text/plain", "data": _b64(b"hello")}}},
    )
    doc = client("GET", f"{db}/d").json
    assert doc["_attachments"] == {
        "a.txt": {
            "content_type": "text/plain",
            "revpos": 1,
            "digest": "md5-XUFAKrxLKna5cZ2REBfFkg==",
            "length": 5,
            "stub": True,
        }
    }
    raw = client("GET", f"{db}/d/a.txt")
    assert (raw.status, raw.raw, raw.headers["Content-Type"]) == (200, b"hello", "text/plain")
    assert raw.headers["ETag"] == '"XUFAKrxLKna5cZ2REBfFkg=="'
    stored = client(
        "PUT", f"{db}/d/dir/b.bin?rev={rev1}", raw=blob, headers={"Content-Type": "application/x-b"}
    )
    assert stored.status == 201, stored.raw
    rev2 = stored.json["rev"]
    doc2 = client("GET", f"{db}/d").json
    assert doc2["_rev"] == rev2 and doc2["v"] == 1
    assert set(doc2["_attachments"]) == {"a.txt", "dir/b.bin"}
    assert doc2["_attachments"]["a.txt"]["revpos"] == 1
    assert doc2["_attachments"]["dir/b.bin"]["revpos"] == 2
    assert client("GET", f"{db}/d/dir%2Fb.bin").raw == blob
    full = client("GET", f"{db}/d?attachments=true").json["_attachments"]
    assert full["dir/b.bin"]["data"] == _b64(blob) and "stub" not in full["a.txt"]
    since = client("GET", f'{db}/d?atts_since=["{rev1}"]').json["_attachments"]
    assert since["a.txt"]["stub"] is True and "data" in since["dir/b.bin"]
    opened = client("GET", f'{db}/d?open_revs=["{rev2}"]&attachments=true').json
    assert opened[0]["ok"]["_attachments"]["a.txt"]["data"] == _b64(b"hello")
    gone = client("DELETE", f"{db}/d/a.txt?rev={rev2}")
    assert gone.status == 200, gone.raw
    assert list(client("GET", f"{db}/d").json["_attachments"]) == ["dir/b.bin"]
    assert client("GET", f"{db}/d/a.txt").json == {
        "error": "not_found",
        "reason": "Document is missing attachment",
    }
    assert client("GET", f"{db}/d/a.txt?rev={rev1}").raw == b"hello"  # older revisions keep theirs
    assert client("GET", f"{db}/nope/a.txt").json["reason"] == "missing"


def test_attachment_stubs_must_find_their_attachment(client: Client, db: str) -> None:
    lost = client("PUT", f"{db}/n", {"_attachments": {"x": {"stub": True}}})
    assert (lost.status, lost.json["error"]) == (412, "missing_stub")
    rows = client(
        "POST",
        f"{db}/_bulk_docs",
        {"docs": [{"_id": "m", "_attachments": {"x": {"stub": True}}}, {"_id": "ok"}]},
    ).json
    assert rows[0]["error"] == "missing_stub" and rows[1]["ok"] is True
    refused = client("PUT", f"{db}/u", {"_attachments": {"_x": {"data": ""}}})
    assert refused.status == 400


def test_attachments_replicate_through_bulk_get_and_new_edits_false(
    client: Client, db: str
) -> None:
    rev = put(
        client,
        db,
        "s",
        {"_attachments": {"p.png": {"content_type": "image/png", "data": _b64(b"\x89PNG")}}},
    )
    got = client(
        "POST", f"{db}/_bulk_get?revs=true&attachments=true", {"docs": [{"id": "s", "rev": rev}]}
    ).json
    doc = got["results"][0]["docs"][0]["ok"]
    assert doc["_attachments"]["p.png"]["data"] == _b64(b"\x89PNG")
    copy = client("PUT", f"{db}-copy")
    assert copy.status == 201
    assert client("POST", f"{db}-copy/_bulk_docs", {"docs": [doc], "new_edits": False}).json == []
    assert client("GET", f"{db}-copy/s/p.png").raw == b"\x89PNG"
    assert client("GET", f"{db}-copy/s").json == client("GET", f"{db}/s").json


def _related(
    doc: dict[str, Any], parts: list[bytes], boundary: str = "abc123"
) -> tuple[bytes, dict[str, str]]:
    body = (
        b"--"
        + boundary.encode()
        + b"\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps(doc).encode()
    )
    for i, data in enumerate(parts):
        head = f'\r\n--{boundary}\r\nContent-Disposition: attachment; filename="f{i}"\r\n\r\n'
        body += head.encode() + data
    body += f"\r\n--{boundary}--".encode()
    return body, {"Content-Type": f'multipart/related; boundary="{boundary}"'}


def test_multipart_related_put_as_couchdbs_replicator_sends_it(client: Client, db: str) -> None:
    blob = b"\r\n--abc12\r\n" + bytes(range(256)) * 100  # CRLFs and near-boundaries inside
    doc = {
        "_id": "m",
        "_rev": "2-" + "b" * 32,
        "_revisions": {"start": 2, "ids": ["b" * 32, "a" * 32]},
        "v": 1,
        "_attachments": {
            "one.bin": {
                "follows": True,
                "content_type": "application/x",
                "length": len(blob),
                "revpos": 2,
            },
            "two.txt": {
                "follows": True,
                "content_type": "text/plain",
                "digest": "md5-XUFAKrxLKna5cZ2REBfFkg==",
            },
        },
    }
    body, headers = _related(doc, [blob, b"hello"])
    put_r = client("PUT", f"{db}/m?new_edits=false", raw=body, headers=headers)
    assert put_r.status == 201, put_r.raw
    assert client("GET", f"{db}/m/one.bin").raw == blob
    assert client("GET", f"{db}/m").json["_attachments"]["one.bin"]["revpos"] == 2
    assert client("GET", f"{db}/m/two.txt").raw == b"hello"
    wrong = dict(doc, _id="w")
    wrong["_attachments"] = {"x": {"follows": True, "length": 3}}
    body, headers = _related(wrong, [b"four"])
    assert client("PUT", f"{db}/w?new_edits=false", raw=body, headers=headers).status == 400
    body, headers = _related(wrong, [])
    assert client("PUT", f"{db}/w?new_edits=false", raw=body, headers=headers).status == 400
    assert client("PUT", f"{db}/w", raw=b"--x\r\n\r\n{}", headers=headers).status == 400


# -- views -----------------------------------------------------------------------------------------

VIEWS = {
    "by_score": {
        "map": "function(doc) { if (doc.score !== undefined) emit(doc.score, doc.tag); }",
        "reduce": "_count",
    },
    "by_tag": {"map": "function(doc) { emit([doc.tag, doc.score], doc.score); }", "reduce": "_sum"},
    "stats": {"map": "function(doc) { emit(doc.tag, doc.score); }", "reduce": "_stats"},
    "js": {
        "map": "function(doc) { emit(doc.tag, 1); }",
        "reduce": "function(keys, values, rereduce) { return sum(values) * 10; }",
    },
    "keys": {"map": "function(doc) { if (doc.k !== undefined) emit(doc.k, null); }"},
    "conflicts": {"map": "function(doc) { if (doc._conflicts) emit(doc._conflicts, null); }"},
}


def _view(client: Client, db: str, name: str, query: str = "") -> Any:
    r = client("GET", f"{db}/_design/q/_view/{name}{query}")
    assert r.status == 200, r.raw
    return r.json


def test_views_map_reduce_group_and_ranges_as_couchdb(client: Client, db: str) -> None:
    docs = [{"_id": f"d{i}", "score": i % 4, "tag": "ab"[i % 2]} for i in range(10)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    put(client, db, "_design/q", {"views": VIEWS})
    rows = _view(client, db, "by_score", "?reduce=false")
    assert [(r["key"], r["id"]) for r in rows["rows"]][:4] == [
        (0, "d0"),
        (0, "d4"),
        (0, "d8"),
        (1, "d1"),
    ]
    assert rows["total_rows"] == 10 and rows["offset"] == 0
    assert _view(client, db, "by_score")["rows"] == [{"key": None, "value": 10}]
    grouped = _view(client, db, "by_score", "?group=true")["rows"]
    assert grouped == [{"key": k, "value": n} for k, n in [(0, 3), (1, 3), (2, 2), (3, 2)]]
    assert _view(client, db, "by_tag", "?group_level=1")["rows"] == [
        {"key": ["a"], "value": 4},
        {"key": ["b"], "value": 9},
    ]
    stats = _view(client, db, "stats", '?key="a"')["rows"][0]["value"]
    assert stats == {"sum": 4, "count": 5, "min": 0, "max": 2, "sumsqr": 8}
    assert _view(client, db, "js", "?group=true")["rows"] == [
        {"key": "a", "value": 50},
        {"key": "b", "value": 50},
    ]
    window = _view(client, db, "by_score", "?reduce=false&startkey=1&endkey=2&inclusive_end=false")
    assert [r["key"] for r in window["rows"]] == [1, 1, 1] and window["offset"] == 3
    down = _view(client, db, "by_score", "?reduce=false&descending=true&limit=2&skip=1")
    assert [r["id"] for r in down["rows"]] == ["d3", "d6"]
    picked = client("POST", f"{db}/_design/q/_view/by_score?reduce=false", {"keys": [3, 0]}).json
    assert [r["key"] for r in picked["rows"]] == [3, 3, 0, 0, 0]
    with_docs = _view(client, db, "by_score", "?reduce=false&key=1&limit=1&include_docs=true")
    assert with_docs["rows"][0]["doc"]["_id"] == "d1"
    from_doc = _view(client, db, "by_score", "?reduce=false&startkey=1&startkey_docid=d5&limit=2")
    assert [r["id"] for r in from_doc["rows"]] == ["d5", "d9"]


def test_views_collate_keys_as_couchdb(client: Client, db: str) -> None:
    keys = [
        None,
        False,
        True,
        1,
        2,
        3.0,
        4,
        "a",
        "A",
        "aa",
        "b",
        ["a"],
        ["b", "c"],
        {"a": 1},
        {"b": 2},
    ]
    shuffled = keys[::-1][::2] + keys[::-1][1::2]
    docs = [{"_id": f"k{i:02d}", "k": k} for i, k in enumerate(shuffled)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    put(client, db, "_design/q", {"views": VIEWS})
    assert [r["key"] for r in _view(client, db, "keys")["rows"]] == keys
    ranged = _view(client, db, "keys", '?startkey="a"&endkey=["z"]')
    assert [r["key"] for r in ranged["rows"]] == ["a", "A", "aa", "b", ["a"], ["b", "c"]]


def test_views_follow_updates_deletions_and_conflicts(client: Client, db: str) -> None:
    rev = put(client, db, "a", {"score": 1, "tag": "x"})
    put(client, db, "_design/q", {"views": VIEWS})
    assert _view(client, db, "by_score", "?reduce=false")["rows"][0]["key"] == 1
    rev = put(client, db, "a", {"_rev": rev, "score": 5, "tag": "x"})
    assert [r["key"] for r in _view(client, db, "by_score", "?reduce=false")["rows"]] == [5]
    stale = client("PUT", f"{db}/b", {"score": 7, "tag": "y"})
    assert stale.status == 201
    assert len(_view(client, db, "by_score", "?reduce=false&stale=ok")["rows"]) == 1
    assert len(_view(client, db, "by_score", "?reduce=false")["rows"]) == 2
    client("DELETE", f"{db}/a?rev={rev}")
    assert [r["id"] for r in _view(client, db, "by_score", "?reduce=false")["rows"]] == ["b"]
    _winner, loser = make_conflict(client, db, "c")
    conflicts = _view(client, db, "conflicts")["rows"]
    assert conflicts == [{"id": "c", "key": [loser], "value": None}]


def test_design_info_reports_each_view_index_as_couchdb(client: Client, db: str) -> None:
    """GET /db/_design/ddoc/_info (api/ddoc/common.rst): the ddoc's name without its
    prefix and its view group's state; updates_pending counts the changes the views
    have not indexed (minimum: the most caught-up view, total: the least), the
    signature moves only when a map function does."""
    views = {
        "a": {"map": "function(doc) { emit(doc.n, null); }"},
        "b": {"map": "function(doc) { emit(doc.tag, 1); }", "reduce": "_sum"},
    }
    for i in range(5):
        put(client, db, f"d{i}", {"n": i, "tag": "x"})
    rev = put(client, db, "_design/g", {"views": views, "language": "javascript"})
    info = client("GET", f"{db}/_design/g/_info").json
    assert info["name"] == "g"
    index = info["view_index"]
    assert index["language"] == "javascript" and index["compact_running"] is False
    assert index["updates_pending"] == {"minimum": 6, "preferred": 6, "total": 6}  # with the ddoc
    assert re.fullmatch(r"[0-9a-f]{32}", index["signature"])
    assert set(index["sizes"]) == {"active", "external", "file"} and index["sizes"]["file"] > 0
    assert client("GET", f"{db}/_design/g/_view/a").json["total_rows"] == 5  # builds a alone
    half = client("GET", f"{db}/_design/g/_info").json["view_index"]
    assert half["updates_pending"] == {"minimum": 0, "preferred": 6, "total": 6}
    assert half["update_seq"] == 0  # the least caught-up view's: b was never built
    assert client("HEAD", f"{db}/_design/g/_info").status == 200  # chttpd: HEAD is GET
    assert client("GET", f"{db}/_design/g/_view/b").json["rows"] == [{"key": None, "value": 5}]
    index = client("GET", f"{db}/_design/g/_info").json["view_index"]
    assert index["updates_pending"] == {"minimum": 0, "preferred": 0, "total": 0}
    seq = client("GET", db).json["update_seq"]  # "6-...": the sum of the shards' seqs first
    assert index["update_seq"] == int(seq.partition("-")[0]) == 6
    views["b"]["map"] = "function(doc) { emit(doc.n, 2); }"
    rev = put(client, db, "_design/g", {"_rev": rev, "views": views})
    changed = client("GET", f"{db}/_design/g/_info").json["view_index"]
    assert changed["signature"] != index["signature"]
    assert client("GET", f"{db}/_design/nope/_info").json == {
        "error": "not_found",
        "reason": "missing",
    }
    assert client("POST", f"{db}/_design/g/_info", {}).status == 405
    client("DELETE", f"{db}/_design/g?rev={rev}")
    assert client("GET", f"{db}/_design/g/_info").json["reason"] == "deleted"


def test_missing_views_and_bad_queries(client: Client, db: str) -> None:
    put(client, db, "_design/q", {"views": VIEWS})
    assert client("GET", f"{db}/_design/q/_view/nope").json == {
        "error": "not_found",
        "reason": "missing_named_view",
    }
    assert client("GET", f"{db}/_design/z/_view/nope").json == {
        "error": "not_found",
        "reason": "missing",
    }
    assert client("GET", f"{db}/_design/q/_view/by_score?include_docs=true").status == 400
    assert client("GET", f"{db}/_design/q/_view/keys?group=true").status == 400
    assert client("GET", f"{db}/_design/q/_view/keys?limit=-1").status == 400
    assert client("GET", f"{db}/_design/q/_view/keys?startkey=notjson").status == 400


def test_view_indexes_persist_and_go_with_their_database(
    tmp_path: Path, client: Client, db: str
) -> None:
    root = tmp_path / "srv"
    handle = start_server(str(root), "127.0.0.1", 0, fsync=False)
    local = Client(handle.port)
    local("PUT", "/v")
    put(local, "/v", "a", {"score": 1, "tag": "x"})
    put(local, "/v", "_design/q", {"views": VIEWS})
    assert _view(local, "/v", "by_score")["rows"] == [{"key": None, "value": 1}]
    handle.stop()
    assert list((root / "_views").iterdir())  # the index is on disk
    handle = start_server(str(root), "127.0.0.1", 0, fsync=False)
    local = Client(handle.port)
    assert _view(local, "/v", "by_score", "?stale=ok")["rows"] == [{"key": None, "value": 1}]
    assert local("DELETE", "/v").status == 200
    assert not (root / "_views" / "v").exists()
    handle.stop()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.lists(
        st.one_of(st.binary(max_size=20), st.sampled_from([b"\r\n", b"\r\n\r\n", b"--abc", b"x"])),
        max_size=6,
    ).map(b"".join),
    with_headers=st.booleans(),
    with_length=st.booleans(),
)
def test_multipart_parts_keep_their_bytes(
    client: Client, data: bytes, with_headers: bool, with_length: bool
) -> None:
    """Whatever bytes a part carries (CRLFs, blank lines, near-boundaries), with or
    without part headers (MIME allows none; CouchDB 1.x's replicator sends none),
    the stored attachment is exactly them."""
    att: dict[str, Any] = {"follows": True, "content_type": "application/x"}
    if with_length:
        att["length"] = len(data)
    doc = {"_id": "p", "_rev": "1-" + "a" * 32, "_attachments": {"f": att}}
    head = b"Content-Type: application/x\r\n" if with_headers else b""
    body = (
        b"--zz\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps(doc).encode()
        + b"\r\n--zz\r\n"
        + head
        + b"\r\n"
        + data
        + b"\r\n--zz--"
    )
    client("DELETE", "/parts")
    client("PUT", "/parts")
    headers = {"Content-Type": 'multipart/related; boundary="zz"'}
    stored = client("PUT", "/parts/p?new_edits=false", raw=body, headers=headers)
    assert stored.status == 201, stored.raw
    assert client("GET", "/parts/p/f").raw == data


def test_atts_since_narrows_attachments_true_everywhere(client: Client, db: str) -> None:
    """What CouchDB's replicator asks: attachments=true&atts_since=[revs] sends only
    newer attachments' data (GET, open_revs and _bulk_get's per-doc atts_since)."""
    r1 = put(client, db, "a", {"_attachments": {"old": {"data": _b64(b"1")}}})
    r2 = put(
        client,
        db,
        "a",
        {"_rev": r1, "_attachments": {"old": {"stub": True}, "new": {"data": _b64(b"2")}}},
    )
    got = client("GET", f'{db}/a?attachments=true&atts_since=["{r1}"]').json["_attachments"]
    assert got["old"]["stub"] is True and got["new"]["data"] == _b64(b"2")
    opened = client("GET", f'{db}/a?open_revs=["{r2}"]&attachments=true&atts_since=["{r1}"]').json
    assert opened[0]["ok"]["_attachments"] == got
    bulk = client(
        "POST",
        f"{db}/_bulk_get?attachments=true",
        {"docs": [{"id": "a", "rev": r2, "atts_since": [r1]}]},
    )
    assert bulk.json["results"][0]["docs"][0]["ok"]["_attachments"] == got


# -- found by review: each test failed before its fix ---------------------------------------


def test_view_rows_come_back_when_a_key_returns(client: Client, db: str) -> None:
    put(client, db, "_design/q", {"views": VIEWS})
    rev = put(client, db, "d", {"k": 1})
    for body, keys in [
        ({"k": 2}, [2]),
        ({"k": 1}, [1]),
        ({}, []),
        ({"k": 1}, [1]),
        ({"k": 1, "x": 1}, [1]),
    ]:
        rev = put(client, db, "d", {**body, "_rev": rev})
        got = _view(client, db, "keys")
        assert [r["key"] for r in got["rows"]] == keys and got["total_rows"] == len(keys), body


def test_replicated_put_with_a_missing_stub_is_412(client: Client, db: str) -> None:
    doc = {"_rev": "2-" + "b" * 32, "_revisions": {"start": 2, "ids": ["b" * 32, "a" * 32]}}
    doc["_attachments"] = {"x": {"stub": True, "revpos": 1}}
    r = client("PUT", f"{db}/d?new_edits=false", doc)
    assert (r.status, r.json["error"]) == (412, "missing_stub")
    assert client("GET", f"{db}/d").status == 404


def test_attachment_writes_pass_validate_doc_update(client: Client, db: str) -> None:
    pytest.importorskip("py_mini_racer")
    vdu = (
        "function(doc) { var big = (doc._attachments || {}).big;"
        " if (big && big.length > 3) throw({forbidden: 'too big'}); }"
    )
    put(client, db, "_design/v", {"validate_doc_update": vdu})
    ok = client("PUT", f"{db}/a/small", raw=b"abc", headers={"Content-Type": "text/plain"})
    assert ok.status == 201, ok.raw
    big = client("PUT", f"{db}/b/big", raw=b"abcd", headers={"Content-Type": "text/plain"})
    assert (big.status, big.json) == (403, {"error": "forbidden", "reason": "too big"})
    doc = {"_id": "m", "_attachments": {"big": {"follows": True, "length": 1}}}
    body, headers = _related(doc, [b"z"])
    assert client("PUT", f"{db}/m", raw=body, headers=headers).status == 201


def test_view_group_level_zero_reduces_everything(client: Client, db: str) -> None:
    docs = [{"_id": f"d{i}", "score": i, "tag": "ab"[i % 2]} for i in range(3)]
    client("POST", f"{db}/_bulk_docs", {"docs": docs})
    put(client, db, "_design/q", {"views": VIEWS})
    assert _view(client, db, "stats", "?group_level=0")["rows"][0]["key"] is None
    assert len(_view(client, db, "keys", "?group_level=0")["rows"]) == 0


def test_view_ties_go_by_raw_document_id(client: Client, db: str) -> None:
    ids = ["a", "A", "b", "B", "é", "f", "x"]
    client("POST", f"{db}/_bulk_docs", {"docs": [{"_id": i, "k": 1} for i in ids]})
    put(client, db, "_design/q", {"views": VIEWS})
    assert [r["id"] for r in _view(client, db, "keys")["rows"]] == sorted(ids)
    after = _view(client, db, "keys", "?startkey=1&startkey_docid=b")  # a raw id, not JSON
    assert [r["id"] for r in after["rows"]] == ["b", "f", "x", "é"]


def test_multipart_odd_boundaries_and_gzip_parts(client: Client, db: str) -> None:
    import gzip

    odd = client(
        "PUT", f"{db}/o", raw=b"x", headers={"Content-Type": "multipart/related; boundary=é"}
    )
    assert odd.status == 400
    doc = {"_id": "g", "_attachments": {"t": {"follows": True, "encoding": "gzip", "length": 5}}}
    body, headers = _related(doc, [gzip.compress(b"hello")])
    assert client("PUT", f"{db}/g", raw=body, headers=headers).status == 201
    assert client("GET", f"{db}/g/t").raw == b"hello"


def _sections(content_type: str, body: bytes) -> list[tuple[dict[str, str], bytes]]:
    """The parts of a multipart body (headers, content), split on its boundary."""
    boundary = content_type.split("boundary=", 1)[1].strip('"').encode()
    inside = body.split(b"--" + boundary + b"\r\n", 1)[1]
    inside = inside.rsplit(b"\r\n--" + boundary + b"--", 1)[0]
    found = []
    for section in inside.split(b"\r\n--" + boundary + b"\r\n"):
        head, _, content = section.partition(b"\r\n\r\n")
        headers = {}
        for line in head.split(b"\r\n"):
            name, _, value = line.decode("utf-8").partition(": ")
            if name:
                headers[name.lower()] = value
        found.append((headers, content))
    return found


def test_multipart_answers_send_attachments_as_parts(client: Client, db: str) -> None:
    """CouchDB's attachments_multipart suite, settee's way: a GET that asks for
    multipart/related gets the JSON and each attachment above atts_since as a
    part; open_revs gets multipart/mixed with every attachment; without asking,
    the JSON answer."""
    doc = {
        "body": "This is a body.",
        "_attachments": {
            "foo.txt": {"follows": True, "content_type": "application/test", "length": 21},
            "bar.txt": {"follows": True, "content_type": "application/test", "length": 20},
        },
    }
    body, headers = _related(doc, [b"this is 21 chars long", b"this is 20 chars lon"])
    first = client("PUT", f"{db}/multipart", raw=body, headers=headers).json["rev"]
    doc = {
        "_rev": first,
        "_attachments": {
            "foo.txt": {"stub": True},
            "bar.txt": {"follows": True, "content_type": "application/test", "length": 18},
        },
    }
    body, headers = _related(doc, [b"this is 18 chars l"])
    second = client("PUT", f"{db}/multipart", raw=body, headers=headers).json["rev"]
    ask = {"Accept": "multipart/related,*/*;"}
    whole = client("GET", f"{db}/multipart?attachments=true", headers=ask)
    assert whole.status == 200 and int(whole.headers["Content-Length"]) == len(whole.raw)
    sections = _sections(whole.headers["Content-Type"], whole.raw)
    cached = {**ask, "If-None-Match": whole.headers["ETag"]}
    assert client("GET", f"{db}/multipart?attachments=true", headers=cached).status == 304
    assert [h["content-type"] for h, _ in sections] == [
        "application/json",
        *["application/test"] * 2,
    ]
    assert [h.get("content-length") for h, _ in sections[1:]] == ["21", "18"]
    assert sections[1][0]["content-disposition"] == 'attachment; filename="foo.txt"'
    shown = json.loads(sections[0][1])
    assert shown["_rev"] == second
    assert shown["_attachments"]["foo.txt"] == {
        "content_type": "application/test",
        "revpos": 1,
        "digest": shown["_attachments"]["foo.txt"]["digest"],
        "length": 21,
        "follows": True,
    }
    assert [c for _, c in sections[1:]] == [b"this is 21 chars long", b"this is 18 chars l"]
    since = urllib.parse.quote(json.dumps([first]))
    newer = client("GET", f"{db}/multipart?atts_since={since}", headers=ask)
    sections = _sections(newer.headers["Content-Type"], newer.raw)
    shown = json.loads(sections[0][1])
    assert shown["_attachments"]["foo.txt"]["stub"] is True
    assert shown["_attachments"]["bar.txt"]["follows"] is True
    assert [c for _, c in sections[1:]] == [b"this is 18 chars l"]
    # open_revs: multipart/mixed, the attachments after atts_since follow, as
    # couch_db:open_doc_revs applies it (attachments_multipart_test.exs)
    revs_q = urllib.parse.quote(json.dumps([second, "9-" + "a" * 32]))
    mixed = client("GET", f"{db}/multipart?open_revs={revs_q}&atts_since={since}", headers=ask)
    assert mixed.headers["Content-Type"].startswith("multipart/mixed")
    outer = _sections(mixed.headers["Content-Type"], mixed.raw)
    assert len(outer) == 2 and outer[1][0]["content-type"] == 'application/json; error="true"'
    assert json.loads(outer[1][1]) == {"missing": "9-" + "a" * 32}
    inner = _sections(outer[0][0]["content-type"], outer[0][1])
    assert [c for _, c in inner[1:]] == [b"this is 18 chars l"]
    # not asked for multipart: JSON, data inline
    plain = client("GET", f"{db}/multipart?attachments=true")
    assert plain.json["_attachments"]["bar.txt"]["data"] == _b64(b"this is 18 chars l")
    assert client("GET", f"{db}/multipart?open_revs=all", headers={"Accept": "*/*"}).json[0]["ok"]
    encoding = client("GET", f"{db}/multipart?att_encoding_info=true").json["_attachments"]
    assert encoding["foo.txt"]["stub"] is True and "encoding" not in encoding["foo.txt"]


def test_bulk_get_multipart_and_hostile_attachment_names(client: Client, db: str) -> None:
    """_bulk_get with Accept: multipart/mixed answers each revision as a part
    (X-Doc-Id, X-Rev-Id, its attachments as inner parts); an attachment name
    with quotes and line breaks cannot forge part headers."""
    name = 'a"b\r\nX-Evil: 1'
    rev = put(client, db, "d", {"_attachments": {name: {"data": _b64(b"\r\n--x\r\n")}}})
    put(client, db, "plain", {"v": 1})
    ask = {"docs": [{"id": "d"}, {"id": "plain"}, {"id": "nope"}]}
    got = client("POST", f"{db}/_bulk_get", ask, headers={"Accept": "multipart/mixed"})
    assert got.status == 200 and got.headers["Content-Type"].startswith("multipart/mixed")
    parts = _sections(got.headers["Content-Type"], got.raw.removeprefix(b"\r\n"))
    assert [h.get("x-doc-id") for h, _ in parts] == ["d", None, None]
    assert parts[0][0]["x-rev-id"] == rev
    inner = _sections(parts[0][0]["content-type"], parts[0][1])
    assert len(inner) == 2 and "x-evil" not in inner[1][0] and inner[1][1] == b"\r\n--x\r\n"
    assert json.loads(inner[0][1])["_attachments"][name]["follows"] is True
    assert json.loads(parts[1][1])["_id"] == "plain"
    assert parts[2][0]["content-type"] == 'application/json; error="true"'
    assert json.loads(parts[2][1])["error"] == "not_found"
    json_too = {"Accept": "multipart/mixed, application/json"}
    assert client("POST", f"{db}/_bulk_get", ask, headers=json_too).json["results"]


def test_a_huge_indexed_value_does_not_stop_the_index(client: Client, db: str) -> None:
    """Regression: a document whose indexed field held a 5 MB string made its index
    rows too large to store, so every later update of the index failed and every
    _find using it answered 400 after ~15 s, for every client. Such a document
    emits nothing (as a map that throws on it); the index goes on serving."""
    ask = {"index": {"fields": ["v"]}, "ddoc": "iv", "name": "iv"}
    assert client("POST", f"{db}/_index", ask).status == 200
    put(client, db, "ok", {"v": 1})
    put(client, db, "huge", {"v": "x" * 3_000_000})
    put(client, db, "later", {"v": 2})
    query = {"selector": {"v": {"$gt": 0}}, "use_index": "iv", "fields": ["_id"]}
    found = client("POST", f"{db}/_find", query)
    assert found.status == 200, found.raw[:300]
    assert [d["_id"] for d in found.json["docs"]] == ["ok", "later"]


def test_mango_json_indexes_serve_sorted_finds(client: Client, db: str) -> None:
    """POST /db/_index stores a json index as CouchDB does (a query design
    document); _find then sorts by its fields, reads it from the first key the
    selector allows, pages by bookmark and sees later edits; DELETE removes it."""
    for i, age in enumerate([5, 3, 9, 1, 7, 3]):
        put(client, db, f"p{i}", {"age": age, "kind": "person" if i % 2 else "pet"})
    put(client, db, "ageless", {"kind": "person"})
    ask = {"index": {"fields": ["age"]}, "ddoc": "ages", "name": "by-age"}
    made = client("POST", f"{db}/_index", ask)
    assert made.status == 200
    assert made.json == {"result": "created", "id": "_design/ages", "name": "by-age"}
    assert client("POST", f"{db}/_index", ask).json["result"] == "exists"
    listed = client("GET", f"{db}/_index").json
    assert listed["total_rows"] == 2 and listed["indexes"][0]["name"] == "_all_docs"
    assert listed["indexes"][1] == {
        "ddoc": "_design/ages",
        "name": "by-age",
        "type": "json",
        "partitioned": False,
        "def": {"fields": [{"age": "asc"}]},
    }
    assert client("GET", f"{db}/_design/ages").json["language"] == "query"
    query = {"selector": {"age": {"$gt": 2}}, "sort": ["age"], "fields": ["_id", "age"]}
    plan = client("POST", f"{db}/_explain", query).json
    assert plan["dbname"] == db.lstrip("/") and plan["index"]["name"] == "by-age"
    assert plan["mrargs"]["start_key"] == [2] and plan["mrargs"]["direction"] == "fwd"
    scan = client("POST", f"{db}/_explain", {"selector": {"kind": "pet"}}).json
    assert scan["index"]["name"] == "_all_docs" and scan["index"]["type"] == "special"
    found = client("POST", f"{db}/_find", query).json
    assert [d["age"] for d in found["docs"]] == [3, 3, 5, 7, 9] and "warning" not in found
    down = client("POST", f"{db}/_find", {**query, "sort": [{"age": "desc"}]}).json
    assert [d["age"] for d in down["docs"]] == [9, 7, 5, 3, 3]
    first = client("POST", f"{db}/_find", {**query, "limit": 2, "execution_stats": True}).json
    assert [d["age"] for d in first["docs"]] == [3, 3]
    # Started at age 3; the coordinator stops at the first match past the limit,
    # which the shard has examined (mango_cursor_view:handle_doc; 15-execution-stats
    # -test.py "with limit": 4 keys for a limit of 3).
    assert first["execution_stats"]["total_keys_examined"] == 3
    rest = client("POST", f"{db}/_find", {**query, "bookmark": first["bookmark"]}).json
    assert [d["age"] for d in rest["docs"]] == [5, 7, 9]
    capped = client("POST", f"{db}/_find", {"selector": {"age": {"$lt": 5}}, "sort": ["age"]})
    assert [d["age"] for d in capped.json["docs"]] == [1, 3, 3]
    rev = client("GET", f"{db}/p2").json["_rev"]
    put(client, db, "p2", {"_rev": rev, "age": 2, "kind": "pet"})
    assert [d["age"] for d in client("POST", f"{db}/_find", query).json["docs"]] == [3, 3, 5, 7]
    unsorted = client("POST", f"{db}/_find", {"selector": {"kind": "pet"}, "sort": ["kind"]})
    assert unsorted.status == 400 and unsorted.json["error"] == "no_usable_index"
    named = {"selector": {"kind": "pet"}, "use_index": "ages"}
    assert "was not used" in client("POST", f"{db}/_find", named).json["warning"]
    strict = client("POST", f"{db}/_find", {**named, "allow_fallback": False})
    # mango_cursor:create refuses an unusable use_index without fallback as
    # {invalid_index, [DDoc]} (05-index-selection-test.py test_no_valid_sort_index).
    assert strict.status == 400 and strict.json["error"] == "invalid_index"
    partial = {
        "index": {"fields": ["age"], "partial_filter_selector": {"kind": "person"}},
        "name": "people",
    }
    people = client("POST", f"{db}/_index", partial).json
    assert people["result"] == "created" and people["id"].startswith("_design/")
    mine = {"selector": {"age": {"$gte": 0}}, "sort": ["age"], "use_index": people["id"]}
    ids = [d["_id"] for d in client("POST", f"{db}/_find", mine).json["docs"]]
    assert ids == ["p3", "p1", "p5"]  # persons only; equal ages in id order
    # Found in review: a partial index picked for a query that does not name it
    # dropped documents; a bad hand-written query design document broke _find; a
    # bookmark holding NaN was a 500.
    everyone = client("POST", f"{db}/_find", {"selector": {"age": {"$gte": 0}}}).json["docs"]
    assert len(everyone) == 6
    put(
        client,
        db,
        "_design/bad",
        {
            "language": "query",
            "views": {"x": {"map": {"fields": {"a": "asc"}, "partial_filter_selector": "abc"}}},
        },
    )
    assert client("POST", f"{db}/_find", {"selector": {"age": 1}}).status == 200
    assert client("GET", f"{db}/_index").status == 200
    nan = base64.urlsafe_b64encode(b'[NaN, "p1"]').decode().rstrip("=")
    refused = client("POST", f"{db}/_find", {**query, "bookmark": nan})
    assert refused.status == 400 and refused.json["error"] == "invalid_bookmark"
    slashed = {"index": {"fields": ["age"]}, "ddoc": "a/b", "name": "n"}
    assert client("POST", f"{db}/_index", slashed).json["id"] == "_design/a/b"
    # mango_httpd matches 5 path parts (6 after a bare _design): the slashes in the
    # ddoc must be escaped.
    assert client("DELETE", f"{db}/_index/_design/a/b/json/n").status == 404
    assert client("DELETE", f"{db}/_index/_design%2Fa%2Fb/json/n").status == 200
    gone = client("DELETE", f"{db}/_index/_design/ages/json/by-age")
    assert gone.status == 200 and gone.json == {"ok": True}
    assert client("GET", f"{db}/_design/ages").status == 404
    assert client("DELETE", f"{db}/_index/ages/json/by-age").status == 404
    bad = client("POST", f"{db}/_index", {"index": {"fields": []}})
    assert bad.status == 400


def test_design_docs_and_local_docs(client: Client, db: str) -> None:
    """_design_docs: _all_docs narrowed to the design documents, total_rows their
    number (as documented); _local_docs: the local documents as rows, total_rows
    and offset null (CouchDB 3)."""
    for doc_id in ("a", "_design/x", "_design/y", "z"):
        put(client, db, doc_id, {"v": 1})
    for name in ("b", "a"):
        assert client("PUT", f"{db}/_local/{name}", {"n": name}).status == 201
    design = client("GET", f"{db}/_design_docs").json
    assert design["total_rows"] == 2 and design["offset"] == 0
    assert [r["id"] for r in design["rows"]] == ["_design/x", "_design/y"]
    down = client("GET", f"{db}/_design_docs?descending=true&include_docs=true").json
    assert [r["doc"]["_id"] for r in down["rows"]] == ["_design/y", "_design/x"]
    later = client("GET", f'{db}/_design_docs?startkey="_design/xx"').json
    assert [r["id"] for r in later["rows"]] == ["_design/y"] and later["offset"] == 1
    local = client("GET", f"{db}/_local_docs?include_docs=true").json
    assert local["total_rows"] is None and local["offset"] is None
    assert [(r["id"], r["value"]["rev"], r["doc"]["n"]) for r in local["rows"]] == [
        ("_local/a", "0-1", "a"),
        ("_local/b", "0-1", "b"),
    ]
    some = client("POST", f"{db}/_local_docs", {"keys": ["_local/b", "_local/q"]}).json
    assert some["rows"] == [
        {"id": "_local/b", "key": "_local/b", "value": {"rev": "0-1"}},
        {"key": "_local/q", "error": "not_found"},
    ]
    assert client("GET", f"{db}/_local_docs?descending=true&limit=1").json["rows"][0]["id"] == (
        "_local/b"
    )
    # Found in review: unchecked arguments, and keys that leave the namespace.
    one = client("GET", f'{db}/_local_docs?key="_local/a"').json["rows"]
    assert [r["id"] for r in one] == ["_local/a"]
    for bad in ({"skip": "1"}, {"limit": 1e9}, {"limit": -1}, {"descending": "yes"}):
        answer = client("POST", f"{db}/_local_docs", bad)
        # couch_mrview_http:parse_param's refusals, a view's own (parse_pos_int takes
        # no JSON string from a body).
        assert answer.status == 400 and answer.json["error"] == "query_parse_error", bad
    assert client("GET", f'{db}/_design_docs?key="a"').json["rows"] == []
    keyed = client("POST", f"{db}/_design_docs", {"keys": ["_design/y", "z"]}).json["rows"]
    # fabric_view_all_docs:filter_keys_by_namespace leaves keys outside it out.
    assert [row["id"] for row in keyed] == ["_design/y"]


def test_view_and_index_reads_go_a_page_at_a_time(client: Client, db: str) -> None:
    """More rows than one page of the index database (found in review: an index
    scan read its whole range before a limit applied): every row, in order, both
    ways, and a _find with a limit still answers from the first rows."""
    from settee.serve.viewindex import UPDATE_PAGE

    count = 2 * UPDATE_PAGE + 7
    docs = [{"_id": f"d{i:04d}", "n": count - i} for i in range(count)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    view = {"views": {"n": {"map": "function(doc) { emit(doc.n, null); }"}}}
    put(client, db, "_design/v", view)
    up = client("GET", f"{db}/_design/v/_view/n").json["rows"]
    assert [r["key"] for r in up] == list(range(1, count + 1))
    down = client("GET", f"{db}/_design/v/_view/n?descending=true&skip=3&limit=250").json
    assert [r["key"] for r in down["rows"]] == list(range(count - 3, count - 253, -1))
    client("POST", f"{db}/_index", {"index": {"fields": ["n"]}, "name": "n"})
    top = {"selector": {"n": {"$gt": 0}}, "sort": [{"n": "desc"}], "limit": 2}
    assert [d["n"] for d in client("POST", f"{db}/_find", top).json["docs"]] == [count, count - 1]
    every = client("POST", f"{db}/_find", {**top, "limit": count}).json["docs"]
    assert [d["n"] for d in every] == list(range(count, 0, -1))


def test_view_cleanup_removes_indexes_no_design_document_defines(tmp_path: Path) -> None:
    """POST /db/_view_cleanup (202): the indexes of an edited view and of a deleted
    Mango index go; the current ones stay and still answer."""
    root = tmp_path / "srv"
    handle = start_server(str(root), "127.0.0.1", 0, fsync=False)
    try:
        local = Client(handle.port)
        local("PUT", "/c")
        put(local, "/c", "a", {"n": 1})
        old = {"views": {"v": {"map": "function(doc) { emit(doc.n, 1); }"}}}
        rev = put(local, "/c", "_design/d", old)
        assert local("GET", "/c/_design/d/_view/v").json["rows"][0]["key"] == 1
        new = {"_rev": rev, "views": {"v": {"map": "function(doc) { emit(-doc.n, 1); }"}}}
        put(local, "/c", "_design/d", new)
        assert local("GET", "/c/_design/d/_view/v").json["rows"][0]["key"] == -1
        local("POST", "/c/_index", {"index": {"fields": ["n"]}, "ddoc": "m", "name": "m"})
        assert local("POST", "/c/_find", {"selector": {"n": 1}}).json["docs"]
        local("POST", "/c/_index", {"index": {"fields": ["n", "z"]}, "ddoc": "k", "name": "k"})
        both = {"selector": {"n": 1, "z": 1}, "use_index": "k"}
        assert local("POST", "/c/_find", both).json["docs"] == []
        assert local("DELETE", "/c/_index/m/json/m").status == 200
        folder = root / "_views" / "c"
        assert len(list(folder.iterdir())) == 4
        cleaned = local("POST", "/c/_view_cleanup", {})
        assert cleaned.status == 202 and cleaned.json == {"ok": True}
        assert len(list(folder.iterdir())) == 2  # the edited view's and the kept index's
        assert local("GET", "/c/_design/d/_view/v").json["rows"][0]["key"] == -1
        assert local("POST", "/c/_find", both).json["docs"] == []
        assert local("GET", "/c/_view_cleanup").status == 405
    finally:
        handle.stop()


def test_a_catastrophic_regex_is_a_400_and_the_server_keeps_serving(
    client: Client, db: str
) -> None:
    """One _find with a backtracking $regex froze the whole server (re holds the
    GIL); now the match is cut off after its time budget: 400 regex_timeout."""
    put(client, db, "s", {"v": "a" * 60 + "b"})
    slow = {"selector": {"v": {"$regex": "(a|aa)+$"}}}
    answer = client("POST", f"{db}/_find", slow)
    assert answer.status == 400 and answer.json["error"] == "regex_timeout"
    assert client("GET", f"{db}/s").status == 200


def test_what_an_adversarial_client_found_is_answered_4xx(client: Client, db: str) -> None:
    """Found by an adversarial client (each was a 500, a dropped answer or a silent
    misreading before): control characters in an id (the Location header),
    lone surrogates echoed in error messages, 1e999 and deep nesting in view
    keys, a content type no header can carry, invalid UTF-8 in the URL, an
    _id that is not a string."""
    made = client("POST", db, {"_id": "a\r\nb"})
    assert made.status == 201 and "%0D%0A" in made.headers["Location"]
    assert client("GET", f"{db}/a%0D%0Ab").status == 200
    assert client("POST", db, {"_id": []}).status == 400
    echoed = client("POST", f"{db}/_find", raw=b'{"selector":{},"\\ud800":1}')
    assert echoed.status == 400 and echoed.json["error"] == "invalid_key"
    put(client, db, "_design/v", {"views": {"v": {"map": "function(d) { emit(1, 1); }"}}})
    for query in ("startkey=1e999", "key=-1e999", "keys=[1e999]", "key=" + "[" * 990 + "]" * 990):
        answer = client("GET", f"{db}/_design/v/_view/v?{query}")
        assert answer.status == 400 and answer.json["error"] == "query_parse_error", query
    bad_type = {"_attachments": {"a": {"content_type": "text/plain\r\nX: y", "data": "aGk="}}}
    assert client("PUT", f"{db}/t", bad_type).status == 400
    assert client("GET", f"{db}/%FF%FE").status == 400
    indexed = {"selector": {"n": {"$gt": 1e300}}, "use_index": "n"}
    client("POST", f"{db}/_index", {"index": {"fields": ["n"]}, "ddoc": "n", "name": "n"})
    assert client("POST", f"{db}/_find", indexed).status == 200
    huge = b'{"selector":{"n":{"$gt":1e999}}}'
    assert client("POST", f"{db}/_find", raw=huge).status == 400


def test_a_slow_view_build_does_not_take_every_worker(tmp_path: Path) -> None:
    """Found by an adversarial client: concurrent queries of a slow-to-build view
    each held a worker thread while waiting for the index, so an unrelated request
    waited for the whole build. Now they wait on the event loop, and the unrelated
    request is answered while the build still runs."""
    handle = start_server(str(tmp_path / "srv"), "127.0.0.1", 0, fsync=False, threads=3)
    try:
        local = Client(handle.port)
        local("PUT", "/slow")
        local("PUT", "/other")
        put(local, "/other", "x", {})
        docs = [{"_id": f"d{i}"} for i in range(8)]
        local("POST", "/slow/_bulk_docs", {"docs": docs})
        busy = "function(d) { var t = Date.now(); while (Date.now() - t < 100) {} emit(1, 1); }"
        put(local, "/slow", "_design/v", {"views": {"v": {"map": busy}}})
        finished: list[str] = []
        lock = threading.Lock()

        def query(what: str, path: str) -> None:
            assert local("GET", path, timeout=60).status == 200
            with lock:
                finished.append(what)

        views = [
            threading.Thread(target=query, args=("view", "/slow/_design/v/_view/v"))
            for _ in range(6)
        ]
        for thread in views:
            thread.start()
        time.sleep(0.2)  # the build (about 0.8 s) is under way
        query("other", "/other/x")
        for thread in views:
            thread.join(60)
        assert finished[0] == "other" and finished.count("view") == 6, finished
    finally:
        handle.stop()


def test_rows_a_view_cannot_store_are_skipped_and_local_deleted_is_checked(
    client: Client, db: str
) -> None:
    """Found by an adversarial client: a map emitting a lone surrogate made every
    query of its view a 400 for as long as that document existed; now that
    document emits nothing (as when a map throws). A _local document's _deleted
    that is not a boolean was accepted."""
    put(client, db, "good", {"s": "fine"})
    put(client, db, "bad", {"s": "\\ud800"})
    surrogate = "function(d) { emit(d.s == '\\\\ud800' ? '\\ud800' : d.s, 1); }"
    put(client, db, "_design/v", {"views": {"v": {"map": surrogate}}})
    rows = client("GET", f"{db}/_design/v/_view/v")
    assert rows.status == 200 and [r["id"] for r in rows.json["rows"]] == ["good"]
    answer = client("PUT", f"{db}/_local/l", {"_deleted": "x"})
    assert answer.status == 400 and answer.json["error"] == "doc_validation"


# -- requests racing a database's reconfiguration ----------------------------------------------


@contextlib.contextmanager
def _traffic_on(client: Client, db: str) -> Iterator[list[Any]]:
    """Reads and writes on ``db``, each call round and round on its own thread, until
    the block ends; yields the (method, path, status, body) of every answer."""
    calls = [
        ("GET", db, None),
        ("POST", db, {"v": 1}),
        ("GET", f"{db}/_all_docs", None),
        ("GET", f"{db}/_changes", None),
        ("POST", f"{db}/_bulk_docs", {"docs": [{"v": 2}]}),
    ]
    seen: list[Any] = []
    stop = threading.Event()

    def loop(method: str, path: str, body: Any) -> None:
        while not stop.is_set():
            r = client(method, path, body)
            seen.append((method, path, r.status, r.raw[:200]))

    threads = [threading.Thread(target=loop, args=call) for call in calls]
    for t in threads:
        t.start()
    try:
        yield seen
    finally:
        stop.set()
        for t in threads:
            t.join()


def test_requests_go_on_while_revs_limit_changes(client: Client, db: str) -> None:
    """PUT /{db}/_revs_limit changes the open database in place: requests running
    meanwhile are answered as CouchDB answers them (found in review: reopening the
    database answered them 500 "database is closed" or 503)."""
    with _traffic_on(client, db) as seen:
        for limit in (5, 6, 7, 8, 9, 10):
            assert client("PUT", f"{db}/_revs_limit", limit).json == {"ok": True}
            time.sleep(0.05)
    refused = [s for s in seen if s[2] >= 400]
    assert seen and not refused, refused[:5]
    assert client("GET", f"{db}/_revs_limit").json == 10
    rev = put(client, db, "stemmed", {})
    for _ in range(12):
        rev = put(client, db, "stemmed", {"_rev": rev})
    assert len(client("GET", f"{db}/stemmed?revs=true").json["_revisions"]["ids"]) == 10


def test_requests_racing_delete_and_create_get_404_not_500(client: Client) -> None:
    """A request on a database deleted (and created again) while it runs answers as if
    it came after the DELETE: 404, never 500 (found in review: GET and POST /{db}
    answered 500 "database is closed")."""
    db = "/racing-delete"
    assert client("PUT", db).status == 201
    with _traffic_on(client, db) as seen:
        for _ in range(15):
            assert client("DELETE", db).status == 200
            time.sleep(0.02)
            assert client("PUT", db).status == 201
            time.sleep(0.04)
    failed = [s for s in seen if s[2] >= 500]
    assert seen and not failed, failed[:5]
    assert {status for _, _, status, _ in seen} <= {200, 201, 202, 404}


# -- CouchDB conformance (an HTTP review against chttpd_db) --------------------------------------


def test_repeated_query_parameters_take_their_last_value(client: Client, db: str) -> None:
    """CouchDB folds over the query string: the last value wins (views.rst)."""
    for i in range(3):
        put(client, db, f"d{i}", {})
    assert len(client("GET", f"{db}/_all_docs?limit=1&limit=2").json["rows"]) == 2
    assert client("GET", f"{db}/_changes?since=0&since=now").json["results"] == []
    assert client("GET", f"{db}/_all_docs?descending=TRUE&limit=1").json["rows"][0]["id"] == "d2"


def test_missing_revs_is_revs_diff_without_ancestors(client: Client, db: str) -> None:
    rev = put(client, db, "a", {})
    asked = {"a": [rev, "2-x"], "zz": ["1-q"]}
    r = client("POST", f"{db}/_missing_revs", asked)
    assert r.status == 200 and r.json == {"missing_revs": {"a": ["2-x"], "zz": ["1-q"]}}
    assert client("GET", f"{db}/_missing_revs").status == 405


def test_view_compaction_is_accepted_for_an_existing_design_doc(client: Client, db: str) -> None:
    put(client, db, "_design/d", {"views": {}})
    assert client("POST", f"{db}/_compact/d").status == 202
    assert client("POST", f"{db}/_compact/nope").status == 404
    assert client("POST", f"{db}/_compact/d", raw=b"", headers={"Content-Type": "x"}).status == 415


def test_locations_of_attachment_and_local_writes(client: Client, db: str) -> None:
    rev = put(client, db, "d", {})
    r = client("PUT", f"{db}/d/f.txt?rev={rev}", raw=b"hi", headers={"Content-Type": "text/plain"})
    assert r.status == 201 and r.headers["Location"].endswith(f"{db}/d/f.txt")
    # chttpd_db's PUT: couch_util:url_encode of the whole id, the slash too.
    r = client("PUT", f"{db}/_local/x", {"v": 1})
    assert r.status == 201 and r.headers["Location"].endswith(f"{db}/_local%2Fx")


def test_post_of_a_local_doc_stores_it(client: Client, db: str) -> None:
    r = client("POST", db, {"_id": "_local/viapost", "v": 1})
    assert r.status == 201 and r.json["id"] == "_local/viapost"
    assert client("GET", f"{db}/_local/viapost").json["v"] == 1
    assert client("GET", f"{db}/_all_docs").json["rows"] == []


def test_reading_an_id_no_write_accepts_is_404(client: Client, db: str) -> None:
    for path in ("_bogus", "_design", "_design/"):
        r = client("GET", f"{db}/{path}")
        assert (r.status, r.json) == (404, MISSING), path
    assert client("PUT", f"{db}/_bogus", {}).status == 400


def test_revs_info_only_without_rev_and_head_everywhere(client: Client, db: str) -> None:
    rev = put(client, db, "a", {})
    assert "_revs_info" in client("GET", f"{db}/a?revs_info=true").json
    assert "_revs_info" not in client("GET", f"{db}/a?rev={rev}&revs_info=true").json
    assert client("HEAD", f"{db}/_index").status == 200
    assert client("DELETE", "/").headers["Allow"] == "GET,HEAD"


def test_changes_descending_newest_first(client: Client) -> None:
    """One shard, so the feed has one order (over several, as in a CouchDB cluster,
    each shard's changes keep theirs)."""
    db = "/descending-changes"
    assert client("PUT", f"{db}?q=1").status == 201
    for i in range(4):
        put(client, db, f"d{i}", {})
    rows = client("GET", f"{db}/_changes?descending=true").json["results"]
    assert [r["id"] for r in rows] == ["d3", "d2", "d1", "d0"]
    page = client("GET", f"{db}/_changes?descending=true&limit=2").json
    assert [r["id"] for r in page["results"]] == ["d3", "d2"]
    assert page["last_seq"] == page["results"][-1]["seq"] and page["pending"] == 2


def test_replica_count_must_be_a_positive_integer(client: Client) -> None:
    """chttpd_db:parse_shards_opt checks n as it checks q (one node keeps one copy)."""
    for bad in ("0", "-1", "x", "%C2%B2"):  # the last: "²", which isdigit() takes
        assert client("PUT", f"/replicas?n={bad}").status == 400, bad
    assert client("PUT", "/replicas?n=3").status == 201


def test_live_feeds_ignore_descending_and_long_replica_counts_are_400(
    client: Client, db: str
) -> None:
    """descending applies to the normal feed only: a longpoll from now waits for a new
    change instead of sending the history again (found in review: every wait
    answered at once with all of it); n checks its length as q does."""
    for i in range(3):
        put(client, db, f"d{i}", {})
    path = f"{db}/_changes?feed=longpoll&since=now&descending=true&timeout=300"
    assert client("GET", path).json["results"] == []
    assert client("PUT", "/toomany?n=" + "9" * 5000).status == 400


def test_location_of_a_posted_id_with_a_slash_names_that_document(client: Client, db: str) -> None:
    """couch_util:url_encode: a slash in the id is %2F (after _design/ or _local/ too),
    else Location would name attachment b of document a."""
    for doc_id, tail in (("a/b", "/a%2Fb"), ("_local/s/t", "/_local%2Fs%2Ft")):
        r = client("POST", db, {"_id": doc_id})
        assert r.status == 201 and r.headers["Location"].endswith(db + tail), r.headers
        path = r.headers["Location"].split(str(client.port), 1)[1]
        assert client("GET", path).json["_id"] == doc_id


def test_uuids_are_sent_with_cache_busting_headers(client: Client) -> None:
    """couch_httpd_misc_handlers:handle_uuids_req: no-cache, a past Expires, an ETag
    (the common must-revalidate no longer overrides a handler's Cache-Control)."""
    r = client("GET", "/_uuids?count=3")
    assert r.status == 200 and len(r.json["uuids"]) == 3
    assert r.headers["Cache-Control"] == "no-cache" and r.headers["Pragma"] == "no-cache"
    assert r.headers["Expires"].endswith("1990 00:00:00 GMT") and r.headers["ETag"].startswith('"')
    assert client("GET", "/").headers["Cache-Control"] == "must-revalidate"


def test_attachment_byte_ranges(client: Client, db: str) -> None:
    """chttpd_db serves one Range of an attachment stored as is with 206 and
    Content-Range (attachments.rst "HTTP Range Requests"); a range past the end or
    running backward is 416; bytes=0- (attachment_ranges_test.exs: "a 200"), ten
    ranges or more, a malformed header or another unit get the whole attachment."""
    rev = put(client, db, "d", {})
    data = bytes(range(256)) * 300  # two chunks: a range may span them
    r = client("PUT", f"{db}/d/f?rev={rev}", raw=data, headers={"Content-Type": "x/y"})
    assert r.status == 201

    def get(spec: str) -> Resp:
        return client("GET", f"{db}/d/f", headers={"Range": spec})

    for spec, first, last in (
        ("bytes=1-2", 1, 2),
        ("bytes=70000-", 70000, len(data) - 1),
        ("bytes=-5", len(data) - 5, len(data) - 1),
        ("bytes=65530-65545", 65530, 65545),
        ("bytes=0-999999", 0, len(data) - 1),
    ):
        r = get(spec)
        assert r.status == 206, spec
        assert r.raw == data[first : last + 1], spec
        assert r.headers["Content-Range"] == f"bytes {first}-{last}/{len(data)}", spec
    for unsatisfiable in (f"bytes={len(data)}-", "bytes=5-2"):
        r = get(unsatisfiable)
        assert r.status == 416, unsatisfiable
        assert r.headers["Content-Range"] == f"bytes */{len(data)}", unsatisfiable
    ten = ",".join(f"{i}-{i}" for i in range(1, 11))
    for whole in ("bytes=0-", "bytes=0-,4-5", "lines=1-2", f"bytes={ten}", "bytes=1-2;3-4"):
        r = get(whole)
        assert (r.status, r.raw) == (200, data), whole
        assert "Content-Range" not in r.headers, whole
    assert client("GET", f"{db}/d/f").headers["Accept-Ranges"] == "bytes"
    empty = client("PUT", f"{db}/e/f", raw=b"", headers={"Content-Type": "x/y"})
    assert empty.status == 201
    r = client("GET", f"{db}/e/f", headers={"Range": "bytes=0-"})
    assert (r.status, r.raw) == (200, b"")


def test_several_byte_ranges_are_one_multipart_byteranges_answer(client: Client, db: str) -> None:
    """chttpd_db:send_ranges_multipart: two to nine ranges are a 206 multipart/byteranges
    body (RFC 9110 14.6), each part with its Content-Type and Content-Range, in the
    order asked, overlapping or not; a range past the end among others is left out,
    and ranges none of which holds a byte are 416."""
    rev = put(client, db, "d", {})
    data = bytes(range(256)) * 300  # two chunks: a range may span them
    r = client("PUT", f"{db}/d/f?rev={rev}", raw=data, headers={"Content-Type": "x/y"})
    assert r.status == 201
    asked = [(65530, 65545), (1, 2), (0, 3), (len(data) - 5, len(data) - 1)]
    spec = "bytes=65530-65545, 1-2,0-3,-5," + f"{len(data) + 10}-"
    r = client("GET", f"{db}/d/f", headers={"Range": spec})
    assert r.status == 206
    kind, _, boundary = r.headers["Content-Type"].partition("; boundary=")
    assert kind == "multipart/byteranges"
    boundary = boundary.strip('"')
    parts = r.raw.split(b"--" + boundary.encode())
    assert parts[0] == b"" and parts[-1] == b"--\r\n"
    for (first, last), part in zip(asked, parts[1:-1], strict=True):
        head, _, body = part.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[1:] == [
            b"Content-Type: x/y",
            f"Content-Range: bytes {first}-{last}/{len(data)}".encode(),
        ]
        assert body == data[first : last + 1] + b"\r\n"
    none = client("GET", f"{db}/d/f", headers={"Range": f"bytes={len(data)}-,-0"})
    assert none.status == 416
    assert client("HEAD", f"{db}/d/f", headers={"Range": "bytes=1-2,5-6"}).status == 206


def test_if_none_match_takes_a_list_and_weak_tags(client: Client, db: str) -> None:
    """chttpd:etag_match splits If-None-Match at commas and spaces and drops W/: a
    document, an attachment and the changes feed answer 304 for a list naming their
    ETag or for its weak form."""
    rev = put(client, db, "d", {"v": 1})
    rev = client("PUT", f"{db}/d/a?rev={rev}", raw=b"abc", headers={"Content-Type": "x/y"})
    for path in (f"{db}/d", f"{db}/d/a", f"{db}/_changes"):
        tag = client("GET", path).headers["ETag"]
        for header in (f'"other", {tag}', f"W/{tag}", f'W/"other",W/{tag}'):
            r = client("GET", path, headers={"If-None-Match": header})
            assert r.status == 304, (path, header)
            assert r.headers["Content-Length"] == "0", (path, header)  # as mochiweb
        assert client("GET", path, headers={"If-None-Match": '"other"'}).status == 200


def test_normal_changes_feed_has_an_etag(client: Client, db: str) -> None:
    """changes.rst: ETag "if changes feed is normal" (chttpd:etag_respond of the
    database's info): an unchanged database answers 304, a write changes it."""
    put(client, db, "a", {})
    first = client("GET", f"{db}/_changes")
    tag = first.headers["ETag"]
    assert client("GET", f"{db}/_changes", headers={"If-None-Match": tag}).status == 304
    put(client, db, "b", {})
    again = client("GET", f"{db}/_changes", headers={"If-None-Match": tag})
    assert again.status == 200 and again.headers["ETag"] != tag
    assert sorted(r["id"] for r in again.json["results"]) == ["a", "b"]


def test_local_seq_is_the_documents_sequence_in_its_shard(client: Client) -> None:
    """document/common.rst: local_seq=true adds _local_seq (couch_db:doc_meta_info);
    one shard here, so the sequence counts the database's writes."""
    db = "/local-seq"
    assert client("PUT", f"{db}?q=1").status == 201
    put(client, db, "a", {})
    rev = put(client, db, "b", {})
    put(client, db, "b", {"_rev": rev})
    assert client("GET", f"{db}/a?local_seq=true").json["_local_seq"] == 1
    assert client("GET", f"{db}/b?local_seq=true").json["_local_seq"] == 3
    assert "_local_seq" not in client("GET", f"{db}/b").json


def test_eventsource_feed_and_since_checked_before_streaming(client: Client, db: str) -> None:
    """feed=eventsource (changes.rst): each change a server-sent event, data the row
    and id its seq; a reconnect's Last-Event-ID resumes after it. A live feed with a
    since this database never gave is a 400 before any of the stream (found in
    review: the refusal came after the chunked headers and cut the answer)."""
    put(client, db, "a", {})
    r = client("GET", f"{db}/_changes?feed=eventsource&timeout=200")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    data, ident = r.raw.decode().split("\n")[:2]
    row = json.loads(data.removeprefix("data: "))
    assert row["id"] == "a" and ident == "id: " + json.dumps(row["seq"])
    put(client, db, "b", {})
    resumed = client(
        "GET",
        f"{db}/_changes?feed=eventsource&timeout=200",
        headers={"Last-Event-ID": ident.removeprefix("id: ")},
    )
    assert [
        json.loads(line[6:])["id"]
        for line in resumed.raw.decode().split("\n")
        if line.startswith("data: ")
    ] == ["b"]
    for feed in ("continuous", "longpoll", "eventsource"):
        r = client("GET", f"{db}/_changes?feed={feed}&since=garbage&timeout=200")
        assert r.status == 400 and r.json["error"] == "bad_request", feed


def test_changes_etag_names_the_database_and_if_range_guards_ranges(client: Client) -> None:
    """Found in review: a database deleted and created again with the same writes got
    the old feed's ETag (a 304 for other documents); and a Range with an If-Range of
    another version of the attachment was served, splicing two versions."""
    db = "/etag-identity"
    tags = []
    for body in ({"x": 1}, {"x": 2}):
        assert client("PUT", db).status == 201
        put(client, db, "a", body)
        tags.append(client("GET", f"{db}/_changes").headers["ETag"])
        assert client("DELETE", db).status == 200
    assert tags[0] != tags[1]
    assert client("PUT", db).status == 201
    rev = put(client, db, "d", {})
    rev = client("PUT", f"{db}/d/f?rev={rev}", raw=b"A" * 100, headers={"Content-Type": "x/y"})
    old_tag = client("GET", f"{db}/d/f").headers["ETag"]
    got = client("GET", f"{db}/d/f", headers={"Range": "bytes=50-", "If-Range": old_tag})
    assert (got.status, got.raw) == (206, b"A" * 50)
    client(
        "PUT", f"{db}/d/f?rev={rev.json['rev']}", raw=b"B" * 100, headers={"Content-Type": "x/y"}
    )
    got = client("GET", f"{db}/d/f", headers={"Range": "bytes=50-", "If-Range": old_tag})
    assert (got.status, got.raw) == (200, b"B" * 100)


def test_a_database_without_its_meta_file_is_still_there(tmp_path: Path) -> None:
    """The engine rebuilds settee.meta from the shards' headers: over HTTP such a
    database is found, listed and readable, and PUT /db is 412, its stored settings
    kept (found in review: 404, then PUT /db "created" it and dropped _revs_limit)."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        assert c("PUT", "/lost-meta").status == 201
        put(c, "/lost-meta", "a", {"v": 1})
        assert c("PUT", "/lost-meta/_revs_limit", 5).status == 200
    finally:
        handle.stop()
    [meta] = list(tmp_path.rglob("settee.meta"))
    meta.unlink()
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        assert c("GET", "/lost-meta").json["doc_count"] == 1
        assert "lost-meta" in c("GET", "/_all_dbs").json
        assert c("PUT", "/lost-meta").status == 412
        assert c("GET", "/lost-meta/_revs_limit").json == 5
        assert c("GET", "/lost-meta/a").json["v"] == 1
    finally:
        handle.stop()


@pytest.mark.parametrize("damage", ["shard file deleted", "meta and a shard deleted", "bit flip"])
def test_a_damaged_database_is_a_4xx_naming_the_file_and_nothing_else_changes(
    tmp_path: Path, damage: str
) -> None:
    """A half-deleted directory or a flipped bit answers 410 corruption saying which
    file to restore, never a 500 (a client retrying it would meet the same damage
    forever); the files are left as they were, and the server's other databases and
    new ones still read and write."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        for db in ("/hurt", "/whole"):
            assert c("PUT", f"{db}?q=2").status == 201
            for i in range(20):
                put(c, db, f"d{i:02d}", {"v": i})
    finally:
        handle.stop()
    hurt = next(p for p in tmp_path.iterdir() if p.name == "hurt")
    shard = hurt / "shard-001.settee"
    if damage == "bit flip":
        data = bytearray(shard.read_bytes())
        data[data.rindex(b"\x81\xa1v") + 3] ^= 0x01  # the value of a body {"v": n}
        shard.write_bytes(bytes(data))
    else:
        shard.unlink()
        if damage.startswith("meta"):
            (hurt / "settee.meta").unlink()
    before = {p.name: p.read_bytes() for p in hurt.iterdir() if p.is_file()}
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        statuses = []
        for method, path, body in (
            ("GET", "/hurt", None),
            ("GET", "/hurt/_all_docs?include_docs=true", None),
            ("GET", "/hurt/_changes", None),
            ("PUT", "/hurt/new", {"v": 1}),
            ("POST", "/hurt/_bulk_docs", {"docs": [{"_id": f"n{i}"} for i in range(8)]}),
        ):
            r = c(method, path, body)
            statuses.append(r.status)
            if r.status >= 400:
                assert (r.status, r.json["error"]) == (410, "corruption"), (path, r.raw)
                assert "shard-001" in r.json["reason"] or "settee.meta" in r.json["reason"]
        assert 410 in statuses and max(statuses) < 500, statuses
        assert c("GET", "/whole").json["doc_count"] == 20
        put(c, "/whole", "more", {"v": 1})
        assert c("PUT", "/fresh").status == 201
    finally:
        handle.stop()
    after = {p.name: p.read_bytes() for p in hurt.iterdir() if p.is_file()}
    if damage == "bit flip":  # the rest of the database still takes writes: appended only
        assert all(
            after[name].startswith(data) for name, data in before.items() if ".settee" in name
        )
    else:
        assert after == before


def test_a_database_another_process_holds_is_503_not_damage(tmp_path: Path) -> None:
    """The lock refusal is no damage (found in review: 410 corruption): 503, retry once
    the other process closes it, and then the database is served."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        assert Client(handle.port)("PUT", "/busy").status == 201
    finally:
        handle.stop()
    holder = settee.open(str(tmp_path / "busy"))  # the lock is per open file, as a process's
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        r = c("GET", "/busy")
        assert (r.status, r.json["error"]) == (503, "service_unavailable"), r.raw
        assert "open in another process" in r.json["reason"]
        holder.close()
        assert c("GET", "/busy").status == 200
    finally:
        holder.close()
        handle.stop()


def test_damaged_side_files_are_named_corruption_not_raw_errors(tmp_path: Path) -> None:
    """The server's JSON side files (settings, _local documents, _security) that no
    longer parse answer CouchDB's corruption error naming the file (found in review:
    a raw KeyError or JSONDecodeError, with a traceback, on every request)."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        assert c("PUT", "/side").status == 201
        assert c("PUT", "/side/_revs_limit", 5).status == 200
        assert c("PUT", "/side/_local/ck", {"seq": 1}).status == 201
        assert c("PUT", "/side/_security", {"admins": {"names": ["bob"]}}).status == 200
    finally:
        handle.stop()
    settings = [p for p in tmp_path.rglob("*.json") if p.parent.name == "_settings"]
    others = [p for p in tmp_path.rglob("*.json") if p not in settings]
    assert settings and len(others) == 2  # the _local document and _security
    for damaged, paths in (
        (others, ("/side/_local/ck", "/side/_security")),
        (settings, ("/side",)),
    ):
        for found in damaged:
            found.write_text('{"truncated": ')
        handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
        try:
            c = Client(handle.port)
            for path in paths:
                r = c("GET", path)
                assert r.json["error"] == "corruption" and ".json" in r.json["reason"], r.raw
        finally:
            handle.stop()


@pytest.mark.parametrize(
    "damage",
    [
        '{"revs_limit": "5"}',
        '{"revs_limit": 0}',
        '{"revs_limit": true}',
        '{"revs_limiu": 5}',  # a flipped bit in a name: the setting would be dropped
        '{"purged_infos_limit": 0}',
        '["revs_limit", 5]',
        "directory",
        "loop",
    ],
)
def test_damaged_settings_are_corruption_on_every_request(tmp_path: Path, damage: str) -> None:
    """A stored revs_limit settee.open refuses, and a directory or a symlink loop in
    the settings file's place: CouchDB's corruption error naming the file (found in
    review: 400 bad_request blaming the client, or a raw OSError answered 500)."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        assert c("PUT", "/side").status == 201
        assert c("PUT", "/side/_revs_limit", 5).status == 200
    finally:
        handle.stop()
    [settings] = [p for p in tmp_path.rglob("*.json") if p.parent.name == "_settings"]
    settings.unlink()
    if damage == "directory":
        settings.mkdir()
    elif damage == "loop":
        settings.symlink_to(settings)
    else:
        settings.write_text(damage)
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        for path in ("/side", "/side/_all_docs"):
            r = c("GET", path)
            assert (r.status, r.json["error"]) == (410, "corruption"), r.raw
            assert "_settings" in r.json["reason"]
    finally:
        handle.stop()


#: Side-file damage that JSON parsing alone does not catch: a flipped bit in a member's
#: name (``"rev"`` -> ``"reu"``) keeps the file valid JSON; a file replaced by a
#: directory or a symlink loop.
_SIDE_DAMAGES = ("{}", "[]", '"x"', '{"id": "ck", "reu": 1, "body": {}}', "directory", "loop")


@pytest.mark.parametrize("damage", _SIDE_DAMAGES)
def test_local_side_files_of_the_wrong_shape_or_no_files_are_corruption(
    tmp_path: Path, damage: str
) -> None:
    """Found in review: a _local document's file that parses to another shape answered
    a raw KeyError or TypeError (500 unknown_error, a traceback in the log) on every
    read of it and of _local_docs; one replaced by a directory or a symlink loop a raw
    OSError, and _security likewise. Each is now CouchDB's corruption error naming the
    file, and _local_docs no longer skips a document file that does not parse."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(handle.port)
        assert c("PUT", "/side").status == 201
        assert c("PUT", "/side/_local/ck", {"seq": 1}).status == 201
        assert c("PUT", "/side/_security", {"admins": {"names": ["bob"]}}).status == 200
    finally:
        handle.stop()
    folder = tmp_path / "_local" / "side"
    [local] = [p for p in folder.iterdir() if p.name != "_security.json"]
    security = (folder / "_security.json", ("/side/_security",))
    for found, paths in ((local, ("/side/_local/ck", "/side/_local_docs")), security):
        if found != local and damage.startswith("{"):
            continue  # any object is a security object
        pristine = found.read_bytes()
        found.unlink()
        if damage == "directory":
            found.mkdir()
        elif damage == "loop":
            found.symlink_to(found.name)
        else:
            found.write_text(damage)
        handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
        try:
            c = Client(handle.port)
            for path in paths:
                r = c("GET", path)
                assert r.json["error"] == "corruption" and found.name in r.json["reason"], r.raw
            if found is local:
                r = c("PUT", "/side/_local/ck", {"seq": 2})
                assert r.json["error"] == "corruption", r.raw
            else:  # written over (a symlink is replaced), or corruption naming the file
                r = c("PUT", "/side/_security", {"admins": {"names": ["eve"]}})
                refused = r.status == 410 and r.json["error"] == "corruption"
                assert r.status == 200 or (refused and found.name in r.json["reason"]), r.raw
        finally:
            handle.stop()
        if found.is_dir() and not found.is_symlink():
            found.rmdir()
        else:
            found.unlink()
        found.write_bytes(pristine)
    local.write_text('{"id": "ck", "rev": ')  # cut short: GET said so, the listing skipped it
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        r = Client(handle.port)("GET", "/side/_local_docs")
        assert r.json["error"] == "corruption" and local.name in r.json["reason"], r.raw
    finally:
        handle.stop()


def test_a_damaged_legacy_local_file_is_corruption(tmp_path: Path) -> None:
    """An earlier release's one-file store of _local documents (``_local/<db>.json``)
    that does not parse, or parses to another shape, was a raw JSONDecodeError,
    KeyError or TypeError on every _local request (found in review)."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        assert Client(handle.port)("PUT", "/old").status == 201
    finally:
        handle.stop()
    legacy = tmp_path / "_local" / "old.json"
    legacy.parent.mkdir(exist_ok=True)
    for damage in ('{"docs": ', "[]", '{"dogs": {}}', '{"docs": {"ck": {"rev": 1}}}'):
        legacy.write_text(damage)
        handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
        try:
            for path in ("/old/_local/ck", "/old/_local_docs"):
                r = Client(handle.port)("GET", path)
                assert r.json["error"] == "corruption" and "old.json" in r.json["reason"], r.raw
        finally:
            handle.stop()
        assert legacy.read_text() == damage, "the damaged file must be kept"


def test_a_damaged_attachment_chunk_stops_the_answer_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once the status and length are sent, a chunk that fails its crc can only cut
    the answer short, which the client sees; the server log says why (found in
    review: nothing was logged)."""
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    data = b"A" * 65536 + b"B" * 10000  # the second chunk is the damaged one
    try:
        c = Client(handle.port)
        assert c("PUT", "/dmg?q=1").status == 201
        rev = put(c, "/dmg", "d", {})
        r = c("PUT", f"/dmg/d/f?rev={rev}", raw=data, headers={"Content-Type": "x/y"})
        assert r.status == 201
    finally:
        handle.stop()
    [shard] = list(tmp_path.rglob("shard-000.settee"))
    raw = bytearray(shard.read_bytes())
    raw[raw.index(b"B" * 100) + 50] ^= 0x01
    shard.write_bytes(bytes(raw))
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        with (
            caplog.at_level("ERROR", logger="settee.serve"),
            pytest.raises(http.client.HTTPException),
        ):
            Client(handle.port)("GET", "/dmg/d/f")
        assert any("stopped after 65536 bytes" in r.getMessage() for r in caplog.records)
    finally:
        handle.stop()


def test_deleted_conflicts_listed_in_winner_order(client: Client, db: str) -> None:
    """GET ?deleted_conflicts=true lists the deleted losing leaves highest
    {pos, hash} first, the order couch_doc:to_doc_info sorts leaves in and the
    order ?conflicts=true lists the live ones; the existing test sees a single
    deleted leaf. (Found by mutation testing: deleted_conflicts sorted ascending by rev string.)"""
    root = "0" * 32

    def branch(top: int, h: str, deleted: bool) -> dict[str, Any]:
        ids = [h * 32] * (top - 1) + [root]
        doc: dict[str, Any] = {"_id": "d", "v": h, "_revisions": {"start": top, "ids": ids}}
        if deleted:
            doc["_deleted"] = True
        return doc

    docs = [branch(4, "e", False), branch(3, "b", True), branch(2, "c", True), branch(3, "d", True)]
    r = client("POST", f"{db}/_bulk_docs", {"docs": docs, "new_edits": False})
    assert (r.status, r.json) == (201, [])
    doc = client("GET", f"{db}/d?conflicts=true&deleted_conflicts=true").json
    assert doc["_rev"] == "4-" + "e" * 32 and "_conflicts" not in doc
    assert doc["_deleted_conflicts"] == ["3-" + "d" * 32, "3-" + "b" * 32, "2-" + "c" * 32]


def test_all_docs_start_key_and_end_key_aliases(client: Client, db: str) -> None:
    """`start_key` and `end_key` are aliases of `startkey` and `endkey`
    (docs.couchdb.org api/database/bulk-api "GET /{db}/_all_docs": "start_key
    (json) – Alias for startkey", "end_key (json) – Alias for endkey"), in the
    query string and in a POST body alike. (Found by mutation testing: one alias dropped
    from _all_docs_result, so the bound was silently ignored.)"""
    for i in range(5):
        put(client, db, f"k{i}", {"i": i})

    def ids(r: Any) -> list[str]:
        assert r.status == 200, r.raw
        return [row["id"] for row in r.json["rows"]]

    assert ids(client("GET", f'{db}/_all_docs?start_key="k1"&end_key="k3"')) == ["k1", "k2", "k3"]
    assert ids(client("GET", f'{db}/_all_docs?start_key="k3"')) == ["k3", "k4"]
    assert ids(client("GET", f'{db}/_all_docs?end_key="k1"')) == ["k0", "k1"]
    desc = client("GET", f'{db}/_all_docs?descending=true&start_key="k3"&end_key="k1"')
    assert ids(desc) == ["k3", "k2", "k1"]
    excl = client("GET", f'{db}/_all_docs?end_key="k2"&inclusive_end=false')
    assert ids(excl) == ["k0", "k1"]
    posted = client("POST", f"{db}/_all_docs", {"start_key": "k2", "end_key": "k3"})
    assert ids(posted) == ["k2", "k3"]
    assert client("GET", f'{db}/_all_docs?start_key="k1"').json["offset"] == 1


def test_put_of_a_tombstone_answers_200(client: Client, db: str) -> None:
    """A PUT whose document has `"_deleted": true` deletes it and answers 200, not
    201, exactly as DELETE does: chttpd_db:update_doc maps {Accepted=false,
    Deleted=true} to `ok` (200) and only a live write to `created` (201). (Found
    by mutation testing: every PUT answered 201.)"""
    rev = put(client, db, "t", {"v": 1})
    r = client("PUT", f"{db}/t", {"_rev": rev, "_deleted": True})
    assert r.status == 200, r.raw
    assert r.json["ok"] is True and r.json["rev"].startswith("2-")
    assert client("GET", f"{db}/t").status == 404
    # recreating on top of the tombstone is a live write again: 201
    assert client("PUT", f"{db}/t", {"v": 2}).status == 201


def test_selector_filter_with_all_docs_style_lists_only_the_leaves_that_pass(
    client: Client, db: str
) -> None:
    """couch_changes:filter/3 for {selector, Style, ...}: open_revs then filter_revs,
    so with style=all_docs a row's changes are the leaves whose own body matches."""
    winner, loser = make_conflict(client, db, "c")  # the winner holds v="b", the loser v="a"
    body = {"selector": {"v": "a"}}
    styled = client("POST", f"{db}/_changes?filter=_selector&style=all_docs", body)
    assert styled.status == 200, styled.raw
    [row] = styled.json["results"]
    assert row["id"] == "c" and row["changes"] == [{"rev": loser}]
    # main_only judges the winner alone, which does not match
    assert client("POST", f"{db}/_changes?filter=_selector", body).json["results"] == []
    both = client("POST", f"{db}/_changes?filter=_selector&style=all_docs", {"selector": {}})
    assert both.json["results"][0]["changes"] == [{"rev": winner}, {"rev": loser}]


def test_heartbeat_zero_is_refused_on_every_feed(client: Client, db: str) -> None:
    """chttpd_db:parse_changes_query takes a heartbeat only `when HeartbeatInteger > 0`,
    for any feed; 0 is 400 bad_request (a zero heartbeat would spin on newlines)."""
    for feed in ("normal", "longpoll", "continuous"):
        r = client("GET", f"{db}/_changes?feed={feed}&heartbeat=0&timeout=100", timeout=5)
        assert (r.status, r.json["error"]) == (400, "bad_request"), feed
    # CouchDB's changes_test.exs: a negative and a non-integer heartbeat, its reasons.
    below = "The heartbeat value should be a positive integer (in milliseconds)."
    garbled = "Invalid heartbeat value. Expecting a positive integer value (in milliseconds)."
    for value, reason in (("-1000", below), ("a1000", garbled)):
        r = client("GET", f"{db}/_changes?feed=longpoll&heartbeat={value}", timeout=5)
        assert (r.status, r.json) == (400, {"error": "bad_request", "reason": reason}), value


@pytest.mark.parametrize("value", ["1_000", "%201000", "%D9%A3", "1.5", ""])
def test_integer_query_parameters_are_ascii_digits(client: Client, db: str, value: str) -> None:
    """An integer query parameter is what Erlang's list_to_integer reads: ASCII digits
    with an optional sign. Python's int() also read "1_000", " 1000" and Arabic-Indic
    digits, so settee answered rows where CouchDB answers 400."""
    put(client, db, "a", {})
    limit = client("GET", f"{db}/_changes?limit={value}")
    garbled = {
        "error": "bad_request",
        "reason": "The limit parameter should be a non-negative integer",
    }
    assert (limit.status, limit.json) == (400, garbled), value
    beat = client("GET", f"{db}/_changes?feed=longpoll&heartbeat={value}&timeout=50", timeout=5)
    assert (beat.status, beat.json["error"]) == (400, "bad_request"), value
    assert client("GET", f"{db}/_changes?limit=%2B1").json["results"][0]["id"] == "a"


def test_changes_etag_changes_when_a_document_is_updated(client: Client, db: str) -> None:
    """The normal feed's ETag is made from the database info (update_seq included):
    an update that leaves doc_count alone must not be answered 304."""
    rev = put(client, db, "a", {"v": 1})
    tag = client("GET", f"{db}/_changes").headers["ETag"]
    new = client("PUT", f"{db}/a", {"_rev": rev, "v": 2}).json["rev"]
    again = client("GET", f"{db}/_changes", headers={"If-None-Match": tag})
    assert again.status == 200 and again.headers["ETag"] != tag
    assert [r["changes"] for r in again.json["results"]] == [[{"rev": new}]]


def test_continuous_feed_ends_as_soon_as_its_limit_is_sent(client: Client, db: str) -> None:
    """couch_changes stops a continuous feed once `limit` rows went out (then the
    last_seq line); it does not wait for the timeout. No clock: a feed that waited
    out its minute would outlast the client's 10 s socket timeout and fail."""
    for doc_id in ("a", "b", "c"):
        put(client, db, doc_id, {})
    r = client("GET", f"{db}/_changes?feed=continuous&limit=2&timeout=60000", timeout=10)
    lines = [json.loads(line) for line in r.raw.splitlines() if line.strip()]
    assert len(lines) == 3 and all("id" in row for row in lines[:2])
    assert set(lines[-1]) == {"last_seq", "pending"} and lines[-1]["pending"] == 1


def test_open_revs_names_each_revision_once(client: Client, db: str) -> None:
    """fabric_doc_open_revs collects replies in a dict, so a revision asked for twice
    is answered once (a replicator's open_revs may repeat a rev)."""
    rev = put(client, db, "d", {"v": 1})
    gone = "9-" + "f" * 32
    ask = urllib.parse.quote(json.dumps([rev, rev, gone, gone]))
    got = client("GET", f"{db}/d?open_revs={ask}", headers={"Accept": "application/json"}).json
    assert got == [{"ok": {"_id": "d", "_rev": rev, "v": 1}}, {"missing": gone}]


def test_revs_info_calls_a_deleted_ancestor_deleted(client: Client, db: str) -> None:
    """couch_db:doc_meta_info: a revision on the path whose leaf record says deleted is
    `deleted`, whether or not its (tombstone) body is still stored."""
    first = put(client, db, "d", {"v": 1})
    tomb = client("DELETE", f"{db}/d?rev={first}").json["rev"]
    again = put(client, db, "d", {"v": 3})  # recreated: extends the tombstone's branch
    info = client("GET", f"{db}/d?revs_info=true").json["_revs_info"]
    assert info == [
        {"rev": again, "status": "available"},
        {"rev": tomb, "status": "deleted"},
        {"rev": first, "status": "available"},
    ]


def test_attachment_if_none_match_with_its_etag_is_304(client: Client, db: str) -> None:
    """chttpd_db:db_attachment_req GET answers through chttpd:etag_respond with the
    quoted base64 md5 as ETag: the same ETag in If-None-Match is 304, no body."""
    rev = put(client, db, "d", {})
    client("PUT", f"{db}/d/a.txt?rev={rev}", raw=b"hello", headers={"Content-Type": "text/plain"})
    first = client("GET", f"{db}/d/a.txt")
    tag = first.headers["ETag"]
    assert tag == '"XUFAKrxLKna5cZ2REBfFkg=="'
    assert first.headers["Cache-Control"] == "must-revalidate"  # chttpd_db sends it
    cached = client("GET", f"{db}/d/a.txt", headers={"If-None-Match": tag})
    assert (cached.status, cached.raw, cached.headers["ETag"]) == (304, b"", tag)
    other = client("GET", f"{db}/d/a.txt", headers={"If-None-Match": '"other"'})
    assert (other.status, other.raw) == (200, b"hello")


def test_attachment_delete_codes(client: Client, db: str) -> None:
    """db_attachment_req DELETE: an attachment the revision lacks is 404 "Document is
    missing attachment" (get_existing_attachment); with no rev the new #doc{} has no
    revs, so an existing document answers 409 conflict."""
    rev = put(client, db, "d", {"_attachments": {"a": {"content_type": "x/y", "data": ""}}})
    absent = client("DELETE", f"{db}/d/nope?rev={rev}")
    assert (absent.status, absent.json) == (
        404,
        {"error": "not_found", "reason": "Document is missing attachment"},
    )
    norev = client("DELETE", f"{db}/d/a")
    assert (norev.status, norev.json["error"]) == (409, "conflict")
    # Without a rev the document and the attachment are looked up first: 404 for
    # either missing (chttpd_db opens the doc, then get_existing_attachment).
    gone = client("DELETE", f"{db}/nosuchdoc/a")
    assert (gone.status, gone.json["error"]) == (404, "not_found")
    lacks = client("DELETE", f"{db}/d/nope")
    assert (lacks.status, lacks.json) == (
        404,
        {"error": "not_found", "reason": "Document is missing attachment"},
    )
    assert client("GET", f"{db}/d/a").status == 200  # no refusal changed anything
    # A deleted document: opening it finds the tombstone, 404 "deleted".
    client("DELETE", f"{db}/d?rev={rev}")
    tomb = client("DELETE", f"{db}/d/a")
    assert (tomb.status, tomb.json) == (404, {"error": "not_found", "reason": "deleted"})


def test_attachment_put_keeps_the_request_content_type(client: Client, db: str) -> None:
    """db_attachment_req PUT: the attachment's type is the request's Content-Type
    (application/octet-stream only when there is none)."""
    rev = put(client, db, "d", {})
    stored = client(
        "PUT", f"{db}/d/x.png?rev={rev}", raw=b"PNG", headers={"Content-Type": "image/png"}
    )
    assert stored.status == 201, stored.raw
    assert client("GET", f"{db}/d/x.png").headers["Content-Type"] == "image/png"
    assert client("GET", f"{db}/d").json["_attachments"]["x.png"]["content_type"] == "image/png"


def test_attachment_rev_and_if_match_must_agree(client: Client, db: str) -> None:
    """chttpd_db:extract_header_rev: ?rev= and If-Match naming different revisions is
    400 "Document rev and etag have different values"; If-Match alone names the rev."""
    rev = put(client, db, "d", {})
    other = '"1-' + "0" * 32 + '"'
    clash = client(
        "PUT", f"{db}/d/a?rev={rev}", raw=b"x", headers={"Content-Type": "x/y", "If-Match": other}
    )
    assert (clash.status, clash.json["error"]) == (400, "bad_request")
    assert "_attachments" not in client("GET", f"{db}/d").json
    by_header = client(
        "PUT", f"{db}/d/a", raw=b"x", headers={"Content-Type": "x/y", "If-Match": f'"{rev}"'}
    )
    assert by_header.status == 201, by_header.raw
    rev = by_header.json["rev"]
    assert client("PUT", f"{db}/_local/l", {}).status == 201
    for path in (f"{db}/d?rev={rev}", f"{db}/_local/l?rev=0-1"):  # and a document's DELETE
        clash = client("DELETE", path, headers={"If-Match": other})
        reason = "Document rev and etag have different values"
        assert (clash.status, clash.json) == (400, {"error": "bad_request", "reason": reason})
    assert client("GET", f"{db}/d").status == 200


def test_deleting_a_missing_local_document_is_404(client: Client, db: str) -> None:
    """chttpd_db:db_doc_req DELETE opens the document first "to handle the 404 case";
    that holds for _local/ ids too: nothing to delete is not a successful delete."""
    gone = client("DELETE", f"{db}/_local/never")
    assert (gone.status, gone.json) == (404, MISSING)
    assert client("PUT", f"{db}/_local/once", {"v": 1}).status == 201
    assert client("DELETE", f"{db}/_local/once?rev=0-1").status == 200
    again = client("DELETE", f"{db}/_local/once")
    assert (again.status, again.json) == (404, MISSING)


def test_find_without_limit_returns_25_documents(client: Client, db: str) -> None:
    """mango_opts:validate_find: `limit` defaults to 25; the bookmark pages on."""
    docs = [{"_id": f"d{i:02}", "n": i} for i in range(30)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    first = client("POST", f"{db}/_find", {"selector": {"n": {"$gte": 0}}}).json
    assert [d["_id"] for d in first["docs"]] == [f"d{i:02}" for i in range(25)]
    rest = client(
        "POST", f"{db}/_find", {"selector": {"n": {"$gte": 0}}, "bookmark": first["bookmark"]}
    ).json
    assert [d["_id"] for d in rest["docs"]] == [f"d{i:02}" for i in range(25, 30)]


def test_find_past_the_last_page_hands_back_the_same_bookmark(client: Client, db: str) -> None:
    """mango_json_bookmark:create: with no row read the answer's bookmark is the one
    the request sent, so a client polling for more resumes from the same place
    (not from "nil", which would start over)."""
    docs = [{"_id": f"d{i}", "n": i} for i in range(3)]
    assert client("POST", f"{db}/_bulk_docs", {"docs": docs}).status == 201
    query: dict[str, Any] = {"selector": {"n": {"$gte": 0}}, "limit": 3}
    page = client("POST", f"{db}/_find", query).json
    assert len(page["docs"]) == 3 and page["bookmark"] != "nil"
    after = client("POST", f"{db}/_find", {**query, "bookmark": page["bookmark"]}).json
    assert after["docs"] == [] and after["bookmark"] == page["bookmark"]


def test_an_index_never_answers_for_documents_it_leaves_out(client: Client, db: str) -> None:
    """`$exists: false` asks for documents without the field, which a json index on
    that field does not hold (mango_idx_view:is_usable needs every indexed field to
    be required): the query must still find them."""
    put(client, db, "with", {"f": 1})
    put(client, db, "without", {"g": 1})
    made = client("POST", f"{db}/_index", {"index": {"fields": ["f"]}, "ddoc": "f", "name": "f"})
    assert made.status == 200
    found = client("POST", f"{db}/_find", {"selector": {"f": {"$exists": False}}}).json
    assert [d["_id"] for d in found["docs"]] == ["without"]
    assert (
        client("POST", f"{db}/_explain", {"selector": {"f": {"$exists": False}}}).json["index"][
            "name"
        ]
        == "_all_docs"
    )


def test_a_sort_must_follow_the_index_field_order(client: Client, db: str) -> None:
    """mango_idx_view:is_usable: the sort fields must be a prefix of the index's
    fields in their order; an index on [a, b] cannot serve sort [b, a]."""
    for i, (a, b) in enumerate([(1, 3), (2, 2), (3, 1)]):
        put(client, db, f"d{i}", {"a": a, "b": b})
    ask = {"index": {"fields": ["a", "b"]}, "ddoc": "ab", "name": "ab"}
    assert client("POST", f"{db}/_index", ask).status == 200
    selector = {"a": {"$gt": None}, "b": {"$gt": None}}
    good = client("POST", f"{db}/_find", {"selector": selector, "sort": ["a", "b"]}).json
    assert [d["_id"] for d in good["docs"]] == ["d0", "d1", "d2"]
    bad = client("POST", f"{db}/_find", {"selector": selector, "sort": ["b", "a"]})
    assert (bad.status, bad.json["error"]) == (400, "no_usable_index")


def test_a_sort_field_must_exist_in_every_document_found(client: Client, db: str) -> None:
    """mango_idx_view:is_usable: "sort fields are required to exist in the results",
    so an index on the sort field serves a selector that does not name it, and a
    document without that field is not found."""
    put(client, db, "young", {"kind": "person", "age": 1})
    put(client, db, "old", {"kind": "person", "age": 9})
    put(client, db, "ageless", {"kind": "person"})
    ask = {"index": {"fields": ["age"]}, "ddoc": "age", "name": "age"}
    assert client("POST", f"{db}/_index", ask).status == 200
    query = {"selector": {"kind": "person"}, "sort": [{"age": "desc"}]}
    assert [d["_id"] for d in client("POST", f"{db}/_find", query).json["docs"]] == ["old", "young"]


def test_an_index_ddoc_may_be_named_with_its_prefix(client: Client, db: str) -> None:
    """mango_idx:get_idx_ddoc keeps a ``ddoc`` that starts with ``_design/``."""
    ask = {"index": {"fields": ["a"]}, "ddoc": "_design/mine", "name": "a"}
    made = client("POST", f"{db}/_index", ask).json
    assert made == {"result": "created", "id": "_design/mine", "name": "a"}
    assert client("GET", f"{db}/_design/mine").status == 200


def test_deleting_one_index_keeps_the_others_of_its_design_document(
    client: Client, db: str
) -> None:
    """mango_idx:delete removes the index's view; the design document goes only
    when no view is left."""
    for name in ("a", "b"):
        ask = {"index": {"fields": [name]}, "ddoc": "two", "name": name}
        assert client("POST", f"{db}/_index", ask).status == 200
    assert client("DELETE", f"{db}/_index/two/json/a").json == {"ok": True}
    listed = client("GET", f"{db}/_index").json["indexes"]
    assert [(i["ddoc"], i["name"]) for i in listed] == [(None, "_all_docs"), ("_design/two", "b")]
    assert client("DELETE", f"{db}/_index/two/json/b").json == {"ok": True}
    assert client("GET", f"{db}/_design/two").status == 404


def test_open_revs_answers_in_couchdb_order(client: Client, db: str) -> None:
    """fabric_doc_open_revs sorts its replies: found documents first, then missing
    revs, each by (position as a number, hash) ascending, tombstones among the rest
    and the winner not first (chttpd_db_doc_get_tests: open_revs=all gives 2-revb
    before the winning 2-revc)."""
    low, tomb, high = "9-" + "f" * 32, "9-" + "0" * 32, "10-" + "a" * 32
    leaves = [
        {"_id": "o", "_rev": low, "v": "low"},
        {"_id": "o", "_rev": high, "v": "high"},
        {"_id": "o", "_rev": tomb, "_deleted": True},
    ]
    r = client("POST", f"{db}/_bulk_docs", {"docs": leaves, "new_edits": False})
    assert (r.status, r.json) == (201, [])
    accept = {"Accept": "application/json"}
    every = client("GET", f"{db}/o?open_revs=all", headers=accept).json
    assert [entry["ok"]["_rev"] for entry in every] == [tomb, low, high]
    assert every[0]["ok"]["_deleted"] is True
    gone_high, gone_low = "11-" + "1" * 32, "8-" + "e" * 32
    ask = urllib.parse.quote(json.dumps([gone_high, high, gone_low, low]))
    some = client("GET", f"{db}/o?open_revs={ask}", headers=accept).json
    assert some == [
        {"ok": {"_id": "o", "_rev": low, "v": "low"}},
        {"ok": {"_id": "o", "_rev": high, "v": "high"}},
        {"missing": gone_low},
        {"missing": gone_high},
    ]


def test_attachment_writes_name_a_revision_the_document_holds(client: Client, db: str) -> None:
    """chttpd_db:db_attachment_req opens a write's rev with fabric:open_revs: a rev the
    document lacks is 409 missing_rev (attachments_test.exs "delete attachment" and
    "saves binary"), and a write under an id no write accepts is 400 illegal_docid
    (COUCHDB-565), while a read of one is 404 missing."""
    rev = put(client, db, "d", {})
    put_raw = {"Content-Type": "text/plain"}
    r = client("PUT", f"{db}/d/a.txt?rev={rev}", raw=b"x", headers=put_raw)
    assert r.status == 201
    missing_rev = {"error": "not_found", "reason": "missing_rev"}
    r = client("DELETE", f"{db}/d/a.txt?rev=4-garbage")
    assert (r.status, r.json) == (409, missing_rev)
    r = client("PUT", f"{db}/d/b.txt?rev=1-{'a' * 32}", raw=b"x", headers=put_raw)
    assert (r.status, r.json) == (409, missing_rev)
    r = client("PUT", f"{db}/nodoc/b.txt?rev=1-{'a' * 32}", raw=b"x", headers=put_raw)
    assert (r.status, r.json) == (409, missing_rev)
    r = client("PUT", f"{db}/_nonexistant/attachment.txt", raw=b"x", headers=put_raw)
    assert (r.status, r.json["error"]) == (400, "illegal_docid")
    r = client("GET", f"{db}/_nonexistant/attachment.txt")
    assert (r.status, r.json) == (404, MISSING)
    assert client("GET", f"{db}/d/a.txt").raw == b"x"


def test_every_response_carries_chttpds_headers(client: Client, db: str) -> None:
    """chttpd sends Server, X-Couch-Request-ID and X-CouchDB-Body-Time with every
    response (basics_test.exs checks them on HEAD /db/id?open_revs=all), streamed
    ones too; a client's own request id comes back when chttpd:nonce/1 keeps it."""
    rev = put(client, db, "d", {})
    client("PUT", f"{db}/d/a?rev={rev}", raw=b"abc", headers={"Content-Type": "x/y"})
    paths = ("/", f"{db}/d", f"{db}/d?open_revs=all", f"{db}/d/a", f"{db}/_changes?feed=longpoll")
    for path in paths:
        for method in ("GET", "HEAD"):
            r = client(method, path)
            assert r.headers["Server"] == "settee", (method, path)
            assert r.headers["X-CouchDB-Body-Time"] == "0", (method, path)
            assert re.fullmatch(r"[0-9a-f]{10}", r.headers["X-Couch-Request-ID"]), (method, path)
    assert client("GET", "/nodb").headers["X-Couch-Request-ID"]
    mine = client("GET", f"{db}/d/a", headers={"X-Couch-Request-ID": "my-id_42"})
    assert mine.headers["X-Couch-Request-ID"] == "my-id_42"
    for refused in ("a" * 37, "no spaces", "é"):
        r = client("GET", "/", headers={"X-Couch-Request-ID": refused})
        assert re.fullmatch(r"[0-9a-f]{10}", r.headers["X-Couch-Request-ID"]), refused


def test_system_database_names_and_names_no_database_has(client: Client) -> None:
    """couch_db:validate_dbname accepts its SYSTEM_DATABASES (alone or after a valid
    prefix), which CouchDB's setup creates (_users, _replicator); any other name
    outside the rule is refused on create with the rule's reason, and is simply a
    database that does not exist for every other request (fabric answers 404)."""
    for name in ("_users", "_replicator", "_global_changes", "acme/_replicator"):
        quoted = "/" + urllib.parse.quote(name, safe="")
        assert client("PUT", quoted).status == 201, name
        assert client("GET", quoted).json["db_name"] == name
        assert name in client("GET", "/_all_dbs").json
        # A replicator database's documents must describe a replication (repdocs).
        wanted = 403 if name.endswith("_replicator") else 201
        assert client("PUT", f"{quoted}/d", {"v": 1}).status == wanted, name
    for bad in ("_foo", "_users2", "Abc", "%2F_users"):
        r = client("PUT", f"/{bad}")
        assert (r.status, r.json["error"]) == (400, "illegal_database_name"), bad
        assert "Only lowercase characters (a-z)" in r.json["reason"], bad
        for method in ("GET", "HEAD", "DELETE"):
            r = client(method, f"/{bad}")
            assert r.status == 404, (method, bad)
            if method != "HEAD":
                assert r.json == NO_DB, (method, bad)
    assert client("GET", "/_all_dbs/_all_docs").status == 404
    assert client("DELETE", "/_users").status == 200
    assert "_users" not in client("GET", "/_all_dbs").json


def test_inline_data_that_is_not_whole_base64_is_400(client: Client, db: str) -> None:
    """attachments_test.exs "errors for bad attachment": data "notBase64Encoded="
    (sixteen characters and a stray '=') is 400, and nothing is stored."""
    bad = {"_attachments": {"foo.txt": {"content_type": "text/plain", "data": "notBase64Encoded="}}}
    r = client("PUT", f"{db}/bad_doc", bad)
    assert (r.status, r.json["error"]) == (400, "bad_request")
    assert r.json["reason"].startswith("Invalid attachment data for foo.txt")
    assert client("GET", f"{db}/bad_doc").status == 404


def test_changes_parameters_as_parse_changes_query_reads_them(client: Client, db: str) -> None:
    """chttpd_db:parse_changes_query: limit and timeout below zero or not integers are
    bad_request with its reasons, seq_interval must be a positive integer, and a flag
    is on for "true" alone, any other value ignored (no 400)."""
    put(client, db, "a", {"v": 1})
    for name in ("limit", "timeout"):
        r = client("GET", f"{db}/_changes?{name}=-1")
        reason = f"The {name} value should be a non-negative integer"
        assert (r.status, r.json) == (400, {"error": "bad_request", "reason": reason}), name
        r = client("GET", f"{db}/_changes?{name}=abc")
        reason = f"The {name} parameter should be a non-negative integer"
        assert (r.status, r.json) == (400, {"error": "bad_request", "reason": reason}), name
    for value in ("0", "-5", "abc"):
        r = client("GET", f"{db}/_changes?seq_interval={value}")
        assert (r.status, r.json) == (
            400,
            {"error": "bad_request", "reason": "invalid_seq_interval"},
        )
    assert client("GET", f"{db}/_changes?seq_interval=10").status == 200
    for value, docs in (("true", True), ("1", False), ("TRUE", False), ("yes", False)):
        r = client("GET", f"{db}/_changes?include_docs={value}")
        assert r.status == 200 and ("doc" in r.json["results"][0]) is docs, value


def test_seq_interval_leaves_the_seq_out_between_intervals(client: Client, db: str) -> None:
    """fabric_view_changes: a row carries its seq when the rows left to the limit
    (CouchDB's default 10**15 without one) are a multiple of seq_interval, else null
    (chttpd_changes_test's t_seq_interval: 3 rows at interval 3 are null, seq, null);
    last_seq is always there, on every feed."""
    for n in range(5):
        put(client, db, f"d{n}", {"n": n})
    full = client("GET", f"{db}/_changes").json
    seqs = [row["seq"] for row in full["results"]]
    sparse = client("GET", f"{db}/_changes?seq_interval=3").json
    # 10**15 - i is a multiple of 3 for i = 1, 4.
    assert [row["seq"] for row in sparse["results"]] == [None, seqs[1], None, None, seqs[4]]
    assert [row["id"] for row in sparse["results"]] == [row["id"] for row in full["results"]]
    assert sparse["last_seq"] == full["last_seq"]
    limited = client("GET", f"{db}/_changes?seq_interval=2&limit=4").json
    assert [row["seq"] for row in limited["results"]] == [seqs[0], None, seqs[2], None]
    assert limited["last_seq"] == seqs[3]
    backwards = client("GET", f"{db}/_changes?seq_interval=2&limit=3&descending=true").json
    assert [row["seq"] for row in backwards["results"]] == [None, seqs[3], None]
    assert backwards["last_seq"] == seqs[2]
    lines = client(
        "GET", f"{db}/_changes?feed=continuous&seq_interval=2&limit=4&timeout=1"
    ).raw.splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    assert [row["seq"] for row in rows[:4]] == [seqs[0], None, seqs[2], None]
    assert rows[4]["last_seq"] == seqs[3]


@pytest.mark.parametrize("header", [b"X-Couch-Request-ID: " + b"a" * 9000, b"X-Bad: a\x01b"])
def test_what_the_http_parser_refuses_has_couchdbs_error_body(server: Any, header: bytes) -> None:
    """A header line past 8190 bytes or with a control character is refused by aiohttp's
    parser before any handler runs; its 400 still carries {"error", "reason"} JSON
    (found in review: it was text/plain)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    assert b"application/json" in head
    answer = json.loads(body)
    assert answer["error"] == "bad_request" and answer["reason"]

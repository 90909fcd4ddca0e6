"""``POST /_replicate`` as CouchDB 3.5 answers it: the essentials of CouchDB's
replication_test.exs (remote-to-remote: both endpoints are URLs of the server
under test), its error answers, and two properties: whatever edits, conflicts
and deletions a source holds, every document's leaf set arrives whole; and no
option value is answered with a 500.
"""

from __future__ import annotations

import base64
import itertools
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.proof.stateful.budget import scaled
from settee.serve import replicate, start_server
from settee.serve.repspec import quote_id
from tests import test_http
from tests.test_http import Client, Resp

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

_ATT1 = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 20
_ATT2 = base64.b64encode(_ATT1.encode()).decode()
_names = itertools.count()


# -- helpers ---------------------------------------------------------------------------------------


def _url(server: Any, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def _pair(client: Client, db: str, *, create_target: bool = True) -> tuple[str, str]:
    """A fresh source and target database (paths), named after the test's ``db``."""
    n = next(_names)
    src, tgt = f"{db}-src{n}", f"{db}-tgt{n}"
    assert client("PUT", src).status == 201
    if create_target:
        assert client("PUT", tgt).status == 201
    return src, tgt


def _replicate(client: Client, server: Any, src: str, tgt: str, **options: Any) -> dict[str, Any]:
    body = {"source": _url(server, src), "target": _url(server, tgt), **options}
    r = client("POST", "/_replicate", body)
    assert r.status == 200, r.raw
    return dict(r.json)


def _save(client: Client, db: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The documents written, each with its new ``_rev`` (replication_test.exs's save_docs)."""
    r = client("POST", f"{db}/_bulk_docs", {"docs": docs})
    assert r.status == 201, r.raw
    assert all(row.get("ok") for row in r.json), r.json
    return [{**doc, "_rev": row["rev"]} for doc, row in zip(docs, r.json, strict=True)]


def _make_docs(numbers: range) -> list[dict[str, Any]]:
    return [{"_id": str(i), "integer": i, "string": str(i)} for i in numbers]


def _attach(
    client: Client, db: str, doc: dict[str, Any], name: str, data: str, ctype: str
) -> dict[str, Any]:
    doc_id = quote_id(doc["_id"])
    r = client(
        "PUT",
        f"{db}/{doc_id}/{name}?rev={doc['_rev']}",
        raw=data.encode(),
        headers={"Content-Type": ctype},
    )
    assert r.status == 201, r.raw
    return {**doc, "_rev": r.json["rev"]}


def _get(client: Client, db: str, doc_id: str, query: str = "", att: str = "") -> Resp:
    path = f"{db}/{quote_id(doc_id)}" + (f"/{att}" if att else "")
    return client("GET", path + query)


def _info(client: Client, db: str) -> dict[str, Any]:
    r = client("GET", db)
    assert r.status == 200, r.raw
    return dict(r.json)


def _counters(history: dict[str, Any]) -> tuple[int, int, int, int, int]:
    names = ("missing_checked", "missing_found", "docs_read", "docs_written")
    return (*(history[n] for n in names), history["doc_write_failures"])


def _subset(doc: dict[str, Any], copy: dict[str, Any]) -> bool:
    """replication_test.exs's cmp_json: every field of ``doc`` is in ``copy`` as it is."""
    return all(key in copy and copy[key] == value for key, value in doc.items())


# -- replication_test.exs: run_simple_repl ------------------------------------------------------


def test_simple_replication_copies_documents_attachments_deletions_and_conflicts(
    client: Client, server: Any, db: str
) -> None:
    src, tgt = _pair(client, db)
    ddoc = {"_id": "_design/foo", "language": "javascript", "value": "ddoc"}
    docs = _save(client, src, [*_make_docs(range(1, 21)), ddoc])
    docs = [
        _attach(client, src, d, "readme.txt", _ATT1, "text/plain")
        if 10 <= d.get("integer", 0) < 15
        else d
        for d in docs
    ]
    result = _replicate(client, server, src, tgt)
    assert result["ok"] is True and isinstance(result["session_id"], str)
    assert result["replication_id_version"] == 4
    count = _info(client, src)["doc_count"]
    assert _info(client, tgt)["doc_count"] == count == 21
    [history] = result["history"]
    assert history["start_last_seq"] == 0 and isinstance(history["start_time"], str)
    assert history["session_id"] == result["session_id"]
    assert history["recorded_seq"] == history["end_last_seq"] == result["source_last_seq"]
    assert _counters(history) == (21, 21, 21, 21, 0)
    for doc in docs:
        copy = _get(client, tgt, doc["_id"]).json
        assert _subset(doc, copy)
        if 10 <= doc.get("integer", 0) < 15:
            att = copy["_attachments"]["readme.txt"]
            assert att["revpos"] == 2 and att["stub"] is True
            assert att["content_type"].startswith("text/plain")
            assert _get(client, tgt, doc["_id"], att="readme.txt").raw == _ATT1.encode()

    # One more document, and a second attachment on five: only what changed is read,
    # and the old attachment goes as a stub (atts_since), keeping its revpos.
    _save(client, src, [{"_id": "foo666", "value": "d"}])
    for i in range(10, 15):
        _attach(client, src, docs[i - 1], "data.dat", _ATT2, "application/binary")
    result = _replicate(client, server, src, tgt)
    assert len(result["history"]) == 2
    assert _counters(result["history"][0]) == (27, 27, 27, 27, 0)
    assert result["history"][1]["session_id"] != result["session_id"]
    for i in range(10, 15):
        atts = _get(client, tgt, str(i)).json["_attachments"]
        assert (atts["readme.txt"]["revpos"], atts["data.dat"]["revpos"]) == (2, 3)
        assert atts["data.dat"]["content_type"].startswith("application/binary")
        assert _get(client, tgt, str(i), att="data.dat").raw == _ATT2.encode()

    # A deletion.
    _save(client, src, [{"_id": "1", "_rev": docs[0]["_rev"], "_deleted": True}])
    result = _replicate(client, server, src, tgt)
    assert len(result["history"]) == 3
    assert _counters(result["history"][0]) == (28, 28, 28, 28, 0)
    assert _info(client, tgt)["doc_del_count"] == 1
    assert _get(client, tgt, "1").status == 404
    [change] = [c for c in client("GET", f"{tgt}/_changes").json["results"] if c["id"] == "1"]
    assert change["deleted"] is True

    # A conflict: both leaves end on the target.
    white = _save(client, src, [{**_get(client, src, "2").json, "value": "white"}])[0]
    _save(client, tgt, [{**_get(client, tgt, "2").json, "value": "black"}])
    result = _replicate(client, server, src, tgt)
    assert _counters(result["history"][0]) == (29, 29, 29, 29, 0)
    copy = _get(client, tgt, "2", "?conflicts=true").json
    assert copy["_rev"].startswith("2-") and len(copy["_conflicts"]) == 1
    assert copy["_conflicts"][0].startswith("2-")

    # The source's branch goes on; then the target deletes its own and the source wins.
    yellow = _save(client, src, [{**white, "value": "yellow"}])[0]
    result = _replicate(client, server, src, tgt)
    assert _counters(result["history"][0]) == (30, 30, 30, 30, 0)
    copy = _get(client, tgt, "2", "?conflicts=true").json
    assert copy["_rev"].startswith("3-") and len(copy["_conflicts"]) == 1
    _save(client, tgt, [{"_id": "2", "_rev": copy["_conflicts"][0], "_deleted": True}])
    _save(client, src, [{**yellow, "value": "rainbow"}])
    result = _replicate(client, server, src, tgt)
    assert len(result["history"]) == 6
    assert _counters(result["history"][0]) == (31, 31, 31, 31, 0)
    copy = _get(client, tgt, "2", "?conflicts=true").json
    assert copy["_rev"].startswith("4-") and "_conflicts" not in copy

    # Revisions the target already has are checked but not copied.
    three = [{"_id": f"foo{i}", "value": i * 111} for i in (1, 2, 3)]
    _save(client, src, three)
    _save(client, tgt, [three[0], three[2]])
    result = _replicate(client, server, src, tgt)
    assert _counters(result["history"][0]) == (34, 32, 32, 32, 0)
    assert _info(client, tgt)["doc_count"] == _info(client, src)["doc_count"]

    # Nothing to do: the last checkpoint, as it was, and no_changes.
    again = _replicate(client, server, src, tgt)
    assert again["no_changes"] is True and again["history"] == result["history"]


def test_attachments_added_after_a_first_replication_arrive_with_their_data(
    client: Client, server: Any, db: str
) -> None:
    """COUCHDB-885: a document replicated bare, then given attachments inline."""
    src, tgt = _pair(client, db)
    [doc] = _save(client, src, [{"_id": "doc1"}])
    first = _replicate(client, server, src, tgt)
    assert _counters(first["history"][0])[2:] == (1, 1, 0)
    atts = {
        "hello.txt": {"content_type": "text/plain", "data": "aGVsbG8gd29ybGQ="},
        "foo.dat": {"content_type": "not/compressible", "data": "aSBhbSBub3QgZ3ppcGVk"},
    }
    _save(client, src, [{**doc, "_attachments": atts}])
    result = _replicate(client, server, src, tgt)
    assert len(result["history"]) == 2 and _counters(result["history"][0])[2:] == (2, 2, 0)
    copy = _get(client, tgt, "doc1", "?conflicts=true&deleted_conflicts=true&attachments=true")
    assert "_conflicts" not in copy.json and "_deleted_conflicts" not in copy.json
    for name, att in atts.items():
        got = copy.json["_attachments"][name]
        assert (got["content_type"], got["data"]) == (att["content_type"], att["data"])


# -- options -------------------------------------------------------------------------------------


def test_since_seq_starts_from_that_change(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    docs = _save(client, src, _make_docs(range(1, 6)))
    changes = client("GET", f"{src}/_changes").json["results"]
    expected = {c["id"] for c in changes[3:]}
    result = _replicate(client, server, src, tgt, since_seq=changes[2]["seq"])
    assert result["history"][0]["start_last_seq"] == changes[2]["seq"]
    assert _counters(result["history"][0]) == (2, 2, 2, 2, 0)
    for doc in docs:
        got = _get(client, tgt, doc["_id"])
        assert got.status == (200 if doc["_id"] in expected else 404)


def test_validate_doc_update_refusals_count_as_write_failures(
    client: Client, server: Any, db: str
) -> None:
    pytest.importorskip("py_mini_racer")
    src, tgt = _pair(client, db)
    docs = _make_docs(range(1, 8))
    docs[1]["_attachments"] = {"hello.txt": {"content_type": "text/plain", "data": "aGk="}}
    _save(client, src, docs)
    vdu = """function(newDoc) {
        if ((newDoc.integer % 2) !== 0) { throw {forbidden: "I only like multiples of 2."}; }
    }"""
    _save(client, tgt, [{"_id": "_design/test", "validate_doc_update": vdu}])
    result = _replicate(client, server, src, tgt)
    assert result["ok"] is True
    assert _counters(result["history"][0]) == (7, 7, 7, 3, 4)
    for i in range(1, 8):
        assert _get(client, tgt, str(i)).status == (200 if i % 2 == 0 else 404)


def test_create_target_creates_it_with_the_given_params(
    client: Client, server: Any, db: str
) -> None:
    src, tgt = _pair(client, db, create_target=False)
    _save(client, src, _make_docs(range(1, 3)))
    without = client(
        "POST", "/_replicate", {"source": _url(server, src), "target": _url(server, tgt)}
    )
    assert (without.status, without.json["error"]) == (404, "db_not_found")
    params = {"q": 2}
    result = _replicate(client, server, src, tgt, create_target=True, create_target_params=params)
    assert result["ok"] is True
    info = _info(client, tgt)
    assert info["doc_count"] == 2 and info["cluster"]["q"] == 2
    # Not destructive: a second run finds the database there and goes on from its checkpoint.
    again = _replicate(client, server, src, tgt, create_target=True)
    assert again["no_changes"] is True


def test_filtered_replication_passes_query_params_and_restarts_when_the_filter_changes(
    client: Client, server: Any, db: str
) -> None:
    pytest.importorskip("py_mini_racer")
    src, tgt = _pair(client, db)
    code = """function(doc, req) {
        var modulus = Number(req.query.modulus);
        return (doc.integer % modulus === 0) || (doc.string === req.query.special);
    }"""
    ddoc = _save(client, src, [{"_id": "_design/mydesign", "filters": {"myfilter": code}}])[0]
    docs = _save(client, src, _make_docs(range(1, 31)))
    body = {"filter": "mydesign/myfilter", "query_params": {"modulus": "2", "special": "7"}}
    result = _replicate(client, server, src, tgt, **body)
    assert len(result["history"]) == 1 and _counters(result["history"][0]) == (16, 16, 16, 16, 0)
    for doc in docs:
        wanted = doc["integer"] % 2 == 0 or doc["string"] == "7"
        assert _get(client, tgt, doc["_id"]).status == (200 if wanted else 404)
    _save(client, src, _make_docs(range(50, 56)))
    result = _replicate(client, server, src, tgt, **body)
    assert len(result["history"]) == 2 and _counters(result["history"][0]) == (19, 19, 19, 19, 0)
    assert _get(client, tgt, "51").status == 404 and _get(client, tgt, "52").status == 200

    # New filter code is a new replication (COUCHDB-892): it starts from the beginning.
    _save(client, src, [{**ddoc, "filters": {"myfilter": "function(doc, req) { return true; }"}}])
    result = _replicate(client, server, src, tgt, **body)
    assert len(result["history"]) == 1
    assert _info(client, tgt)["doc_count"] == _info(client, src)["doc_count"]


def test_doc_ids_replicate_only_those_documents(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    _save(client, src, [{"_id": "_design/foo", "integer": 1}, *_make_docs(range(1, 11))])
    # Percent-encoded ids are decoded (the old replicator took them so); unknown ones skipped.
    result = _replicate(client, server, src, tgt, doc_ids=["_design%2Ffoo", "8", "foo_666"])
    assert (result["docs_read"], result["docs_written"], result["doc_write_failures"]) == (2, 2, 0)
    assert isinstance(result["start_time"], str) and isinstance(result["end_time"], str)
    assert _info(client, tgt)["doc_count"] == 2
    assert _get(client, tgt, "_design/foo").status == 200 and _get(client, tgt, "1").status == 404
    assert _replicate(client, server, src, tgt, doc_ids=[])["no_changes"] is True

    # Update one and re-replicate by its id; then a conflict made on both sides.
    doc = _get(client, src, "8").json
    _save(client, src, [{**doc, "integer": 666}])
    first = _replicate(client, server, src, tgt, doc_ids=["8"])
    assert (first["docs_read"], first["docs_written"]) == (1, 1)
    _save(client, src, [{**_get(client, src, "8").json, "integer": 766}])
    _save(client, tgt, [{**_get(client, tgt, "8").json, "integer": 667}])
    second = _replicate(client, server, src, tgt, doc_ids=["8"])
    assert (second["docs_read"], second["docs_written"]) == (2, 2)  # counted across runs
    copy = _get(client, tgt, "8", "?conflicts=true").json
    assert copy["_rev"].startswith("3-") and copy["_conflicts"][0].startswith("3-")


def test_selector_replicates_matching_documents(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    _save(client, src, _make_docs(range(1, 11)))
    result = _replicate(client, server, src, tgt, selector={"integer": {"$gt": 7}})
    assert _counters(result["history"][0]) == (3, 3, 3, 3, 0)
    ids = [row["id"] for row in client("GET", f"{tgt}/_all_docs").json["rows"]]
    assert ids == ["10", "8", "9"]


def test_an_endpoint_object_is_the_same_replication_as_its_url(
    client: Client, server: Any, db: str
) -> None:
    """The id takes the user, host, port, path and extra headers, never a password."""
    src, tgt = _pair(client, db)
    _save(client, src, _make_docs(range(1, 3)))
    url = _url(server, src)
    first = client(
        "POST",
        "/_replicate",
        {"source": url.replace("://", "://adm:pw1@"), "target": _url(server, tgt)},
    ).json
    source = {"url": url.replace("://", "://adm:pw2@"), "headers": {}}
    body = {"source": source, "target": {"url": _url(server, tgt)}}
    assert client("POST", "/_replicate", body).json["no_changes"] is True
    source["headers"] = {"X-Extra": "1"}
    again = client("POST", "/_replicate", body).json
    assert again["session_id"] != first["session_id"] and len(again["history"]) == 1


def test_without_checkpoints_every_run_starts_over(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    _save(client, src, _make_docs(range(1, 4)))
    assert _replicate(client, server, src, tgt, use_checkpoints=False) == {
        "ok": True,
        "use_checkpoints": False,
    }
    local = client("GET", f"{src}/_local_docs").json["rows"]
    assert local == []
    # Starting over, it checks every revision again and finds none missing.
    result = _replicate(client, server, src, tgt)
    assert _counters(result["history"][0]) == (3, 0, 0, 0, 0)


# -- continuous and cancel -----------------------------------------------------------------------


def _eventually(check: Any, what: str) -> Any:
    """Poll ``check`` until it answers something true (bounded: never a hang)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not seen within 20 s: {what}")


def _task(client: Client, job_id: str) -> Any:
    tasks = client("GET", "/_active_tasks").json
    return next((t for t in tasks if t.get("replication_id") == job_id), None)


def test_continuous_replication_follows_the_source_until_cancelled(
    client: Client, server: Any, db: str
) -> None:
    src, tgt = _pair(client, db)
    _save(client, src, _make_docs(range(1, 6)))
    body = {"source": _url(server, src), "target": _url(server, tgt), "continuous": True}
    started = client("POST", "/_replicate", body)
    assert started.status == 202 and started.json["ok"] is True
    job_id = started.json["_local_id"]
    assert job_id.endswith("+continuous")
    task = _task(client, job_id)
    assert task["type"] == "replication" and task["continuous"] is True
    _eventually(lambda: _info(client, tgt)["doc_count"] == 5, "the first five documents")
    _save(client, src, [{"_id": "late", "v": 1}])
    _eventually(lambda: _get(client, tgt, "late").status == 200, "a document written later")
    _eventually(lambda: _task(client, job_id)["revisions_checked"] == 6, "the task's counters")

    listed = client("GET", "/_scheduler/jobs").json
    assert listed["total_rows"] == len(listed["jobs"]) >= 1 and listed["offset"] == 0
    job = client("GET", f"/_scheduler/jobs/{urllib.parse.quote(job_id)}").json
    assert job in listed["jobs"] and job["id"] == job_id and job["database"] is None
    assert job["info"]["revisions_checked"] == 6 and job["source"] == _url(server, src) + "/"

    cancelled = client("POST", "/_replicate", {**body, "cancel": True})
    assert (cancelled.status, cancelled.json) == (200, {"ok": True, "_local_id": job_id})
    assert _task(client, job_id) is None
    assert job_id not in [j["id"] for j in client("GET", "/_scheduler/jobs").json["jobs"]]
    assert client("GET", f"/_scheduler/jobs/{urllib.parse.quote(job_id)}").status == 404
    # The cancel was answered after the job's last checkpoint: a one-shot run of the
    # same replication (same checkpoint documents) finds nothing left to do.
    after = _replicate(client, server, src, tgt)
    assert after["no_changes"] is True and after["history"][0]["missing_checked"] == 6
    again = client("POST", "/_replicate", {"replication_id": job_id, "cancel": True})
    assert (again.status, again.json) == (404, {"error": "not found"})


def test_a_continuous_job_is_cancelled_by_its_id(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    body = {"source": _url(server, src), "target": _url(server, tgt), "continuous": True}
    body["create_target"] = True
    job_id = client("POST", "/_replicate", body).json["_local_id"]
    assert job_id.endswith("+continuous+create_target")
    # The URL decoding of a "+" makes a space; CouchDB reads it back as a "+".
    by_id = {"replication_id": job_id.replace("+", " "), "cancel": True}
    assert client("POST", "/_replicate", by_id).json == {"ok": True, "_local_id": job_id}


def test_past_max_jobs_a_replication_is_refused_until_one_ends(
    client: Client, server: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replicate, "MAX_JOBS", len(client("GET", "/_active_tasks").json) + 1)
    src, tgt = _pair(client, db)
    body = {"source": _url(server, src), "target": _url(server, tgt), "continuous": True}
    job_id = client("POST", "/_replicate", body).json["_local_id"]
    assert client("POST", "/_replicate", body).status == 202  # the same job
    refused = client("POST", "/_replicate", {**body, "continuous": False})
    assert (refused.status, refused.json["error"]) == (503, "service_unavailable")
    assert client("POST", "/_replicate", {"replication_id": job_id, "cancel": True}).status == 200
    assert _replicate(client, server, src, tgt)["ok"] is True


def test_replications_to_the_same_server_do_not_starve_its_one_worker(
    tmp_path: Path,
) -> None:
    """Jobs run on threads of their own: with one worker thread, four replications
    whose every request comes back to this server still all finish."""
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False, threads=1) as one:
        client = Client(one.port)
        src, tgts = "/src", [f"/tgt{i}" for i in range(4)]
        assert client("PUT", src).status == 201
        _save(client, src, _make_docs(range(1, 11)))
        with ThreadPoolExecutor(4) as pool:
            runs = list(
                pool.map(lambda t: _replicate(client, one, src, t, create_target=True), tgts)
            )
        assert [r["history"][0]["docs_written"] for r in runs] == [10] * 4


def test_a_continuous_job_outlives_a_restart_of_its_source(
    client: Client, server: Any, db: str, tmp_path: Path
) -> None:
    """A request that cannot reach its server is sent again (retries_per_request)."""
    tgt = f"{db}-tgt"
    assert client("PUT", tgt).status == 201
    other = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    port = other.port
    remote = Client(port)
    assert remote("PUT", "/src").status == 201
    _save(remote, "/src", [{"_id": "before"}])
    body = {"source": f"http://127.0.0.1:{port}/src", "target": _url(server, tgt)}
    job_id = client("POST", "/_replicate", {**body, "continuous": True}).json["_local_id"]
    try:
        _eventually(lambda: _get(client, tgt, "before").status == 200, "the first document")
        other.stop()
        other = start_server(str(tmp_path), "127.0.0.1", port, fsync=False)
        _save(remote, "/src", [{"_id": "after"}])
        _eventually(lambda: _get(client, tgt, "after").status == 200, "a document after")
        assert _task(client, job_id) is not None
    finally:
        client("POST", "/_replicate", {"replication_id": job_id, "cancel": True})
        other.stop()


# -- errors --------------------------------------------------------------------------------------


def test_missing_databases_are_db_not_found(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db, create_target=False)
    for source, target, missing in [(f"{db}-nosrc", tgt, f"{db}-nosrc"), (src, tgt, tgt)]:
        body = {"source": _url(server, source), "target": _url(server, target)}
        r = client("POST", "/_replicate", body)
        assert r.status == 404
        assert r.json == {
            "error": "db_not_found",
            "reason": f"could not open {_url(server, missing)}/",
        }


def test_passwords_stay_out_of_answers(client: Client, server: Any, db: str) -> None:
    source = f"http://adm:secret@127.0.0.1:{server.port}{db}-none"
    r = client("POST", "/_replicate", {"source": source, "target": _url(server, db)})
    assert r.status == 404 and "secret" not in r.json["reason"] and "adm:*****@" in r.json["reason"]


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"source": "local", "target": "http://127.0.0.1:1/x"}, 400, "bad_request"),
        ({"target": "http://127.0.0.1:1/x"}, 400, "bad_request"),
        ({"source": 7, "target": "http://127.0.0.1:1/x"}, 400, "bad_request"),
        ({"source": {"url": "ftp://h/x"}, "target": "http://h/y"}, 400, "invalid_replication"),
        (
            {"source": "http://h/x", "target": "http://h/y", "continuous": "true"},
            400,
            "bad_request",
        ),
        ({"source": "http://h/x", "target": "http://h/y", "create_target": 1}, 400, "bad_request"),
        ({"source": "http://h/x", "target": "http://h/y", "doc_ids": "a"}, 400, "bad_request"),
        ({"source": "http://h/x", "target": "http://h/y", "selector": []}, 400, "bad_request"),
        ({"source": "http://h/x", "target": "http://h/y", "query_params": 1}, 400, "bad_request"),
        (
            {"source": "http://h/x", "target": "http://h/y", "filter": "nofilter"},
            400,
            "bad_request",
        ),
        ({"source": "h", "target": "h", "doc_ids": ["a"], "filter": "a/b"}, 400, "bad_request"),
        ({"source": "h", "target": "h", "query_params": {"a": 1}}, 400, "bad_request"),
        (
            {"source": "http://h/x", "target": "http://h/y", "selector": {"$bad": 1}},
            400,
            "invalid_operator",
        ),
        ({"cancel": "yes", "replication_id": "x"}, 400, "bad_request"),
        ({"source": "http://h/x", "target": "http://h/y", "proxy": "http://p"}, 400, "bad_request"),
        (
            {"source": {"url": "http://h/x", "auth": {"basic": 1}}, "target": "http://h/y"},
            400,
            "bad_request",
        ),
        ({"cancel": True, "replication_id": "nosuchjob"}, 404, "not found"),
    ],
)
def test_bad_requests_are_4xx_with_couchdb_error_names(
    client: Client, body: dict[str, Any], status: int, error: str
) -> None:
    r = client("POST", "/_replicate", body)
    assert (r.status, r.json["error"]) == (status, error), r.raw


_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
_JSON = (
    _SCALAR
    | st.lists(_SCALAR, max_size=2)
    | st.dictionaries(st.text(max_size=4), _SCALAR, max_size=2)
)
_OPTIONS = st.sampled_from(
    ["source", "target", "cancel", "continuous", "create_target", "create_target_params",
     "doc_ids", "filter", "query_params", "selector", "since_seq", "use_checkpoints",
     "worker_batch_size", "connection_timeout", "replication_id", "proxy", "auth"]
)  # fmt: skip


@settings(
    max_examples=scaled(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(options=st.dictionaries(_OPTIONS, _JSON, max_size=4))
def test_no_option_value_is_a_500(client: Client, options: dict[str, Any]) -> None:
    """Endpoints where nothing listens, so a body that parses fails fast, as a 4xx."""
    body = {"source": "http://127.0.0.1:1/a", "target": "http://127.0.0.1:1/b", **options}
    r = client("POST", "/_replicate", body)
    assert r.status < 500, r.raw
    assert set(r.json) >= {"error"} if r.status >= 400 else r.json["ok"] is True


def test_local_endpoints_are_refused_naming_why(client: Client, db: str) -> None:
    r = client("POST", "/_replicate", {"source": db[1:], "target": "http://127.0.0.1:1/x"})
    assert (r.status, r.json["reason"]) == (400, "local_endpoints_not_supported")


def test_body_method_and_content_type(client: Client) -> None:
    assert client("GET", "/_replicate").status == 405
    assert client("POST", "/_replicate", raw=b"{nope").json["error"] == "bad_request"
    assert client("POST", "/_replicate", ["a"]).json["error"] == "bad_request"
    wrong = client("POST", "/_replicate", {}, headers={"Content-Type": "text/plain"})
    assert (wrong.status, wrong.json["error"]) == (415, "bad_content_type")


def test_a_filter_the_source_cannot_run_is_a_4xx(client: Client, server: Any, db: str) -> None:
    src, tgt = _pair(client, db)
    _save(client, src, [{"_id": "_design/d", "filters": {}}, {"_id": "x"}])
    body = {"source": _url(server, src), "target": _url(server, tgt)}
    for name in ("nodesign/f", "d/f"):  # CouchDB's filter_fetch_error
        r = client("POST", "/_replicate", {**body, "filter": name})
        assert (r.status, r.json["error"]) == (404, "not_found")
        assert r.json["reason"].startswith("Couldn't")
    # A builtin filter the source does not have: its _changes answer, not a 500.
    r = client("POST", "/_replicate", {**body, "filter": "_nosuchfilter"})
    assert 400 <= r.status < 500 and _info(client, tgt)["doc_count"] == 0


# -- the property --------------------------------------------------------------------------------

_REV = st.text("0123456789abcdef", min_size=32, max_size=32)
_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c/+ ü%", "_design/d"]),
        st.sampled_from(["update", "branch", "delete"]),
        _REV,
    ),
    min_size=1,
    max_size=12,
)


def _apply(client: Client, db: str, doc_id: str, op: str, rev_hash: str, n: int) -> None:
    """An edit, a conflicting branch written as a replicator would, or a deletion."""
    leaves = _leaves(client, db, doc_id)
    live = sorted(d["_rev"] for d in leaves if not d.get("_deleted"))
    if op == "branch" or not live:
        # A new leaf off the first revision (or a new document): a conflict.
        start = 1 if not leaves else 2
        ids = [rev_hash] + ([] if start == 1 else [_first_rev_hash(client, db, doc_id)])
        doc = {"_id": doc_id, "n": n, "_rev": f"{start}-{rev_hash}"}
        doc["_revisions"] = {"start": start, "ids": ids}
        r = client("POST", f"{db}/_bulk_docs", {"docs": [doc], "new_edits": False})
        assert r.status == 201, r.raw
        return
    body = {"_id": doc_id, "_rev": live[-1], "n": n, "_deleted": op == "delete"}
    assert client("POST", f"{db}/_bulk_docs", {"docs": [body]}).status == 201


def _first_rev_hash(client: Client, db: str, doc_id: str) -> str:
    doc = _get(client, db, doc_id, f"?rev={_leaves(client, db, doc_id)[0]['_rev']}&revs=true")
    return str(doc.json["_revisions"]["ids"][-1])


def _leaves(client: Client, db: str, doc_id: str) -> list[dict[str, Any]]:
    r = _get(client, db, doc_id, "?open_revs=all&revs=true")
    if r.status == 404:
        return []
    return sorted((item["ok"] for item in r.json if "ok" in item), key=lambda d: d["_rev"])


@settings(
    max_examples=scaled(6),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(theirs=_EDITS, before=_EDITS, after=_EDITS)
def test_every_leaf_of_every_document_arrives(
    client: Client,
    server: Any,
    db: str,
    theirs: list[Any],
    before: list[Any],
    after: list[Any],
) -> None:
    """Edits, conflicting branches and deletions on the source, replicated, more
    of them, replicated again: the target holds each document's whole leaf set
    (bodies and rev paths), as ``open_revs=all`` shows it; documents the target
    edited first keep the target's leaves too. (Revision hashes the test makes
    start with 0 on the source, f on the target: one id never names two bodies.)"""
    src, tgt = _pair(client, db)
    for n, (doc_id, op, rev_hash) in enumerate(theirs):
        _apply(client, tgt, doc_id, op, "f" + rev_hash[1:], n)
    theirs_ids = {e[0] for e in theirs}
    for step, edits in enumerate((before, after)):
        for n, (doc_id, op, rev_hash) in enumerate(edits):
            _apply(client, src, doc_id, op, "0" + rev_hash[1:], n)
        result = _replicate(client, server, src, tgt)
        assert result["history"][0]["doc_write_failures"] == 0
        if not result.get("no_changes"):  # a branch the source had already changes nothing
            assert len(result["history"]) == step + 1
        for doc_id in {e[0] for e in before + after}:
            mine, copied = _leaves(client, src, doc_id), _leaves(client, tgt, doc_id)
            if doc_id in theirs_ids:
                assert all(leaf in copied for leaf in mine), doc_id
            else:
                assert copied == mine, doc_id
    assert _replicate(client, server, src, tgt)["no_changes"] is True

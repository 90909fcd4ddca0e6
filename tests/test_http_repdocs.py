"""The ``_replicator`` databases as CouchDB 3.5 runs them: a document written there
starts its replication, deleting it stops it, ``/_scheduler/docs`` tells each
document's state. Ported from couch_replicator_scheduler_docs_tests.erl and
replicator.rst; each test uses a ``<prefix>/_replicator`` database of its own
(the default ``_replicator`` is one per server, shared by the module's tests).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client, Resp

server, client, db = test_http.server, test_http.client, test_http.db

_WAIT = 20.0  # seconds a state change may take on a loaded 2-core machine


def _wait_for(what: Callable[[], Any], timeout: float = _WAIT) -> Any:
    """``what()``'s first truthy answer, polled; fails the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _repdb(client: Client, db: str) -> str:
    """A fresh ``<db>/_replicator`` database; its URL path (the "/" escaped)."""
    path = "/" + urllib.parse.quote(db.lstrip("/") + "/_replicator", safe="")
    assert client("PUT", path).status == 201
    return path


def _url(server: Any, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def _source(client: Client, db: str, docs: int = 3) -> str:
    src = f"{db}-src"
    assert client("PUT", src).status == 201
    body = {"docs": [{"_id": f"d{i}", "n": i} for i in range(docs)]}
    assert client("POST", f"{src}/_bulk_docs", body).status == 201
    return src


def _doc_when(client: Client, path: str, state: str) -> dict[str, Any] | None:
    r = client("GET", path)
    return dict(r.json) if r.status == 200 and r.json.get("_replication_state") == state else None


def _scheduler_doc(client: Client, repdb: str, doc_id: str) -> Resp:
    return client("GET", f"/_scheduler/docs{repdb}/{doc_id}")


def test_a_document_runs_its_replication_and_is_marked_completed(
    server: Any, client: Client, db: str
) -> None:
    repdb, src = _repdb(client, db), _source(client, db)
    tgt = f"{db}-tgt"
    rep = {"source": _url(server, src), "target": _url(server, tgt), "create_target": True}
    assert client("PUT", f"{repdb}/rep1", rep).status == 201
    done = _wait_for(lambda: _doc_when(client, f"{repdb}/rep1", "completed"))
    assert isinstance(done["_replication_state_time"], str)
    assert done["_replication_stats"]["docs_written"] == 3
    assert "start_time" in done["_replication_stats"]
    assert "_replication_id" not in done  # update_docs = false
    assert client("GET", tgt).json["doc_count"] == 3
    listed = client("GET", f"/_scheduler/docs{repdb}").json
    assert listed["total_rows"] == len(listed["docs"]) == 1
    [row] = listed["docs"]
    assert row["state"] == "completed" and row["doc_id"] == "rep1"
    assert row["database"] == urllib.parse.unquote(repdb.lstrip("/"))
    assert row["info"]["docs_written"] == 3 and "start_time" not in row["info"]
    assert row["source"] == _url(server, src) + "/"


def test_state_fields_a_user_writes_are_replaced_and_other_fields_kept(
    server: Any, client: Client, db: str
) -> None:
    """t_doc_fields_are_updated and t_doc_fields_are_ignored."""
    repdb, src = _repdb(client, db), _source(client, db, docs=1)
    rep = {
        "source": _url(server, src),
        "target": _url(server, f"{db}-tgt"),
        "create_target": True,
        "_replication_id": "foo3",
        "_replication_state": "triggered",
        "_replication_state_time": "foo5",
        "_replication_state_reason": "foo6",
        "replication_id": "foo1",
        "id": "foo2",
        "other_junk": True,
    }
    assert client("PUT", f"{repdb}/rep", rep).status == 201
    done = _wait_for(lambda: _doc_when(client, f"{repdb}/rep", "completed"))
    assert done["_replication_state_time"] != "foo5"
    assert "_replication_id" not in done and "_replication_state_reason" not in done
    assert (done["replication_id"], done["id"], done["other_junk"]) == ("foo1", "foo2", True)


def test_malformed_documents_are_refused_design_and_local_ones_kept(
    client: Client, db: str
) -> None:
    """t_malformed_docs_are_rejected, t_local_docs_can_be_written, t_design_docs_can_be_written."""
    repdb = _repdb(client, db)
    for body in ({}, {"foo": "bar"}, {"source": "not a url", "target": 5}):
        r = client("PUT", f"{repdb}/rep", body)
        assert r.status == 403 and r.json["error"] == "forbidden", r.raw
    r = client("POST", f"{repdb}/_bulk_docs", {"docs": [{"_id": "bad"}]})
    assert r.status == 201 and r.json[0]["error"] == "forbidden"
    # A replicated write is not checked (before_doc_update skips REPLICATED_CHANGES).
    body = {"docs": [{"_id": "copied", "_rev": "1-abc"}], "new_edits": False}
    assert client("POST", f"{repdb}/_bulk_docs", body).status == 201
    for doc_id in ("_local/doc1", "_design/ddoc1"):
        assert client("PUT", f"{repdb}/{doc_id}", {}).status == 201
    assert client("PUT", f"{repdb}/_local/doc2", {"foo": "bar"}).status == 201
    # A plain database takes the same documents.
    assert client("PUT", f"{db}/rep", {"foo": "bar"}).status == 201


def test_a_continuous_document_runs_until_it_is_deleted(
    server: Any, client: Client, db: str
) -> None:
    repdb, src = _repdb(client, db), _source(client, db, docs=1)
    tgt = f"{db}-tgt"
    rep = {
        "source": _url(server, src),
        "target": _url(server, tgt),
        "create_target": True,
        "continuous": True,
    }
    rev = client("PUT", f"{repdb}/cont", rep).json["rev"]
    row = _wait_for(
        lambda: (
            (r := _scheduler_doc(client, repdb, "cont")).status == 200
            and r.json["state"] == "running"
            and r.json
        )
    )
    assert row["id"].endswith("+continuous+create_target")
    assert row["error_count"] == 0 and row["info"]["docs_written"] in (0, 1)
    jobs = client("GET", "/_scheduler/jobs").json["jobs"]
    assert any(j["id"] == row["id"] and j["doc_id"] == "cont" for j in jobs)
    assert client("PUT", f"{src}/late", {"x": 1}).status == 201
    _wait_for(lambda: client("GET", f"{tgt}/late").status == 200)
    assert "_replication_state" not in client("GET", f"{repdb}/cont").json
    assert client("DELETE", f"{repdb}/cont?rev={rev}").status == 200
    jobs_now = lambda: client("GET", "/_scheduler/jobs").json["jobs"]  # noqa: E731
    _wait_for(lambda: not any(j["id"] == row["id"] for j in jobs_now()))
    assert client("PUT", f"{src}/after", {"x": 2}).status == 201
    time.sleep(0.5)
    assert client("GET", f"{tgt}/after").status == 404


def test_a_second_document_for_the_same_replication_fails(
    server: Any, client: Client, db: str
) -> None:
    repdb, src = _repdb(client, db), _source(client, db, docs=1)
    rep = {"source": _url(server, src), "target": _url(server, f"{db}-tgt"), "continuous": True}
    rep["create_target"] = True
    assert client("PUT", f"{repdb}/first", rep).status == 201
    _wait_for(lambda: _scheduler_doc(client, repdb, "first").json.get("state") == "running")
    assert client("PUT", f"{repdb}/dup", rep).status == 201
    failed = _wait_for(lambda: _doc_when(client, f"{repdb}/dup", "failed"))
    reason = failed["_replication_state_reason"]
    assert "already started" in reason and "`first`" in reason
    row = _scheduler_doc(client, repdb, "dup").json
    assert row["state"] == "failed" and row["error_count"] == 1
    assert row["info"] == {"error": reason}
    failed_only = client("GET", f"/_scheduler/docs{repdb}?states=failed").json["docs"]
    assert [r["doc_id"] for r in failed_only] == ["dup"]
    assert client("DELETE", repdb).status == 200  # its job stops with it


def test_a_missing_source_is_crashing_and_a_deleted_database_stops_its_jobs(
    server: Any, client: Client, db: str
) -> None:
    repdb = _repdb(client, db)
    rep = {"source": _url(server, f"{db}-nosuch"), "target": _url(server, f"{db}-tgt")}
    assert client("PUT", f"{repdb}/crash", rep).status == 201
    row = _wait_for(
        lambda: (
            (r := _scheduler_doc(client, repdb, "crash")).json.get("state") == "crashing" and r.json
        )
    )
    assert row["error_count"] >= 1 and isinstance(row["info"]["error"], str)
    assert "_replication_state" not in client("GET", f"{repdb}/crash").json
    # The database unescaped in the path (parse_unquoted_docs_path).
    plain = urllib.parse.unquote(repdb)
    assert client("GET", f"/_scheduler/docs{plain}/crash").json["state"] == "crashing"
    assert client("GET", f"/_scheduler/docs{plain}").json["total_rows"] == 1
    assert client("DELETE", repdb).status == 200
    assert client("GET", f"/_scheduler/docs{repdb}").status == 404


def test_scheduler_docs_refuses_what_couchdb_refuses(client: Client, db: str) -> None:
    repdb = _repdb(client, db)
    r = client("GET", f"/_scheduler/docs{repdb}?states=running,nonsense")
    assert r.status == 400 and r.json["error"] == "query_parse_error"
    assert client("GET", "/_scheduler/docs/notarepdb").status == 400
    assert client("GET", f"/_scheduler/docs{repdb}/nosuchdoc").status == 404
    assert client("POST", "/_scheduler/docs", {}).status == 405
    listed = client("GET", f"/_scheduler/docs{repdb}?states=running").json
    assert listed == {"total_rows": 0, "offset": 0, "docs": []}


def test_after_a_restart_unfinished_documents_run_again_and_finished_ones_do_not(
    tmp_path: Any,
) -> None:
    """replicator.rst, "Server restart": documents not ``completed`` or ``failed`` are
    run again; the default ``_replicator`` database is followed like the others."""
    from settee.serve import start_server

    first = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        c = Client(first.port)
        for name in ("/_replicator", "/src"):
            assert c("PUT", name).status == 201
        assert c("PUT", "/src/a", {"n": 1}).status == 201
        once = {"source": _url(first, "/src"), "target": _url(first, "/once")}
        assert c("PUT", "/_replicator/once", once | {"create_target": True}).status == 201
        done = _wait_for(lambda: _doc_when(c, "/_replicator/once", "completed"))
        cont = {"source": _url(first, "/src"), "target": _url(first, "/cont")}
        cont |= {"create_target": True, "continuous": True}
        assert c("PUT", "/_replicator/cont", cont).status == 201
        _wait_for(lambda: c("GET", "/cont/a").status == 200)
        states = {r["doc_id"]: r["state"] for r in c("GET", "/_scheduler/docs").json["docs"]}
        assert states == {"once": "completed", "cont": "running"}
    finally:
        first.stop()
    again = start_server(str(tmp_path), "127.0.0.1", first.port, fsync=False)
    try:
        c = Client(again.port)
        assert c("PUT", "/src/b", {"n": 2}).status == 201
        _wait_for(lambda: c("GET", "/cont/b").status == 200)  # the job runs again
        time.sleep(0.3)
        assert c("GET", "/_replicator/once").json == done  # not run a second time
        assert c("GET", "/once/b").status == 404
    finally:
        again.stop()

"""Real CouchDB clients against settee serve: pycouchdb (PyPI) and PouchDB (npm).

The PouchDB round trip installs tests/js's packages (pure JavaScript, from the
npm registry) into tests/js/node_modules on first use and reuses them; it is
skipped, with the reason, when node or npm is missing or the install fails.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")
pycouchdb = pytest.importorskip("pycouchdb", reason="pip install -e '.[test]' brings pycouchdb")

from settee.serve import start_server  # noqa: E402

JS = Path(__file__).resolve().parent / "js"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Any]:
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    yield handle
    handle.stop()


def test_pycouchdb_crud_bulk_all_docs_changes(server: Any) -> None:
    couch = pycouchdb.Server(server.url + "/")
    assert couch.info()["couchdb"] == "Welcome"
    db = couch.create("workload")
    assert "workload" in couch and list(couch) == ["workload"]

    doc = db.save({"_id": "one", "n": 1})
    assert doc["_rev"].startswith("1-")
    doc["n"] = 2
    doc = db.save(doc)
    assert db.get("one")["n"] == 2 and "one" in db
    with pytest.raises(pycouchdb.exceptions.Conflict):
        db.save({"_id": "one", "n": 3})
    revisions = list(db.revisions("one"))
    assert [r["n"] for r in revisions] == [2, 1]

    saved = db.save_bulk([{"_id": f"b{i:02d}", "i": i} for i in range(50)])
    assert all(d["_rev"].startswith("1-") for d in saved)
    assert len(db) == 51
    rows = db.all(as_list=True)
    assert [r["id"] for r in rows][:3] == ["b00", "b01", "b02"]
    assert rows[0]["doc"]["i"] == 0
    picked = db.all(keys=["b07", "b03"], as_list=True)
    assert [r["doc"]["i"] for r in picked] == [7, 3]
    ranged = db.all(startkey="b10", endkey="b12", include_docs="false", as_list=True)
    assert [r["id"] for r in ranged] == ["b10", "b11", "b12"]

    last_seq, changes = db.changes_list()
    assert len(changes) == 51
    db.delete("one")
    with pytest.raises(pycouchdb.exceptions.NotFound):
        db.get("one")
    db.delete_bulk(saved[:10])
    assert len(db) == 40
    _, after = db.changes_list(since=last_seq)
    assert {c["id"] for c in after} == {"one"} | {f"b{i:02d}" for i in range(10)}
    assert all(c.get("deleted") for c in after)

    assert db.compact()["ok"] is True
    couch.delete("workload")
    assert "workload" not in couch


# -- PouchDB ---------------------------------------------------------------------------------------


def _node_with_pouchdb() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the PouchDB round trip needs node and npm on PATH")
    marker = JS / "node_modules" / ".settee-installed"
    with open(JS / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # xdist workers install once, one at a time
        if not marker.exists():
            command = "ci" if (JS / "package-lock.json").exists() else "install"
            try:
                subprocess.run(
                    [npm, command, "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=JS,
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                output = (getattr(exc, "stderr", None) or "")[-500:]
                pytest.skip(f"npm {command} of PouchDB in {JS} failed (offline?): {output}")
            marker.touch()
    return node


def _call(server: Any, method: str, path: str, body: Any = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def test_pouchdb_replicates_to_memory_and_back_identically(server: Any) -> None:
    node = _node_with_pouchdb()
    _call(server, "PUT", "/shared")
    docs = [{"_id": f"d{i}", "i": i} for i in range(20)] + [{"_id": "t1"}, {"_id": "c1"}]
    revs = {r["id"]: r["rev"] for r in _call(server, "POST", "/shared/_bulk_docs", {"docs": docs})}
    _call(server, "DELETE", f"/shared/t1?rev={revs['t1']}")
    root = revs["c1"].split("-")[1]
    branches = [
        {"_id": "c1", "side": s, "_revisions": {"start": 2, "ids": [s * 32, root]}}
        for s in ("a", "b")
    ]
    _call(server, "POST", "/shared/_bulk_docs", {"docs": branches, "new_edits": False})
    _call(server, "PUT", "/shared/_design/app", {"language": "javascript"})

    run = subprocess.run(
        [node, str(JS / "roundtrip.js"), f"{server.url}/shared"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)

    for name in ("there", "back", "again"):
        assert result[name]["ok"] and result[name]["doc_write_failures"] == 0, result[name]
    assert result["there"]["docs_written"] == 24  # 20 + tombstone + 2 conflict leaves + ddoc
    assert result["again"]["docs_written"] == 0
    assert result["mem"] == result["remote"]  # the two sides end identical
    remote = result["remote"]
    assert [d["side"] for d in remote["c1"]] == ["a", "b"]  # both conflict leaves survived
    assert {d["side"] for d in remote["d1"]} == {"pouch", "pouch-edit"}  # conflict made in pouch
    assert remote["d2"][0]["_deleted"] is True and remote["t1"][0]["_deleted"] is True
    assert remote["d0"][0]["edited"] == "in pouch" and remote["from-pouch"][0]["n"] == 1
    # settee's own view agrees: the winner of d1 and its conflict, over plain HTTP
    d1 = _call(server, "GET", "/shared/d1?conflicts=true")
    assert {d1["_rev"], *d1["_conflicts"]} == {d["_rev"] for d in remote["d1"]}
    checkpoints = [r for r in _call(server, "GET", "/shared/_changes")["results"]]
    assert not any(r["id"].startswith("_local/") for r in checkpoints)

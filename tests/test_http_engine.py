"""The proof over HTTP: ``settee.http:open`` against ``settee serve`` (issue 14 item 3).

One in-process server per module (a free loopback port, its own directory) is the
``SETTEE_HTTP_URL`` of every test. The equivalence machine runs against the adapter
with a small derandomized budget; the rest checks the adapter's own parts: error
replies to settee errors, arguments refused before any request, the database
lifecycle, the stdlib client, and that a broken server is caught.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

import settee.http
import settee.reference
from settee import httpwire
from settee.httpclient import Client, Server, error_for
from settee.proof.stateful.campaigns import run_equivalence
from settee.proof.stateful.engines import accepts_option
from settee.serve import changes as serve_changes
from settee.serve import start_server
from settee.spec.errors import BadRequest, Conflict, CorruptionError, NotFound, SetteeError

ENGINE = "settee.http:open"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    handle = start_server(str(tmp_path_factory.mktemp("serve")), "127.0.0.1", 0, fsync=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(settee.http.URL_ENV, handle.url)
        yield handle
        settee.http.cleanup()  # before the server stops, so the deletions reach it
    handle.stop()


@pytest.fixture
def db(server: Any, tmp_path: Path) -> Iterator[settee.http.Database]:
    database = settee.http.open(str(tmp_path / "db"), shards=2)
    yield database
    database.destroy()


def server_databases(server: Any) -> list[str]:
    status, names = Client(Server.from_url(server.url)).request("GET", "/_all_dbs")
    assert status == 200
    return list(names)


# -- the proof ----------------------------------------------------------------------------------


def test_equivalence_machine_passes_over_http(server: Any) -> None:
    """Engine vs reference, every call through settee serve (derandomized: the same
    examples on every run)."""
    summary = run_equivalence(ENGINE, max_examples=25, seed=0)
    assert not summary.failures, summary.text()
    assert summary.steps > 500


def test_a_server_that_drops_the_first_change_is_caught(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine notices when the server, not the engine, is wrong."""
    honest = serve_changes.read_changes

    def drop_first(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result = honest(*args, **kwargs)
        result["results"] = result["results"][1:]
        return result

    monkeypatch.setattr(serve_changes, "read_changes", drop_first)
    summary = run_equivalence(ENGINE, max_examples=10, seed=0, shrink=False)
    assert summary.failures, summary.text()
    assert "changes" in summary.reproducer


def test_verify_runs_equivalence_and_skips_what_needs_settees_files(
    server: Any, tmp_path: Path
) -> None:
    """``settee verify --engine settee.http:open``: equivalence passes; crash (needs fs=)
    and corruption (settee's own files) are skipped, not failed."""
    report = tmp_path / "summary.json"
    only = "equivalence,crash,corruption"
    command = ["verify", "--engine", ENGINE, "--examples", "3", "--only", only]
    run = subprocess.run(
        [sys.executable, "-m", "settee", *command, "--json", str(report)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, settee.http.URL_ENV: server.url},
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    campaigns = {c["name"]: c for c in json.loads(report.read_text())["campaigns"]}
    assert campaigns["equivalence"]["operations"] > 0
    assert campaigns["crash"]["skipped"] and campaigns["corruption"]["skipped"]


@pytest.mark.parametrize("suite", ["test_hostile_input", "test_semantics"])
def test_the_installed_suites_pass_over_http(server: Any, suite: str) -> None:
    """The installed semantic and hostile-input suites against the adapter, as another
    project's CI would run them (``pytest --pyargs settee.proof --settee-engine``).
    Found by ``settee verify`` exploring: the equivalence machine met a list whose
    ``__iter__`` raises and a ``Mock(spec=list)`` handed to ``bulk_docs`` (raw
    RuntimeError and TypeError from the adapter) only now and then; these suites
    hold both and run in seconds."""
    plugins = ["-p", "no:cacheprovider", "-p", "no:xdist"]
    target = ["--pyargs", f"settee.proof.{suite}", "--settee-engine", ENGINE]
    # The adapter at every shard count, in one read mode: the server's read mode is
    # the engine's own business, which the main suite runs in both; the reference's
    # runs are the main suite's too. Half the suite's time in the gate.
    target += ["-k", "not serialized and not reference"]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, *target],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, settee.http.URL_ENV: server.url},
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "expected", "reason"),
    [
        (409, {"error": "conflict", "reason": "Document update conflict."}, Conflict, None),
        (404, {"error": "not_found", "reason": "missing"}, NotFound, "missing"),
        (404, {"error": "not_found", "reason": "deleted"}, NotFound, "deleted"),
        (404, {"error": "not_found", "reason": "Database does not exist."}, SetteeError, None),
        (400, {"error": "bad_request", "reason": "Invalid rev format"}, BadRequest, None),
        (413, {"error": "document_too_large", "reason": "a"}, BadRequest, None),
        (414, "URI Too Long", BadRequest, None),
        (410, {"error": "corruption", "reason": "/d/shard.0:4096: bad crc"}, CorruptionError, None),
        (500, {"error": "corruption", "reason": "/d/shard.0:4096: bad crc"}, CorruptionError, None),
        (500, {"error": "unknown_error", "reason": "boom"}, SetteeError, None),
        (
            401,
            {"error": "unauthorized", "reason": "Name or password is incorrect."},
            SetteeError,
            None,
        ),
    ],
)
def test_error_replies_map_to_the_engines_error_classes(
    status: int, body: Any, expected: type[SetteeError], reason: str | None
) -> None:
    error = error_for(status, body, "GET /db/a")
    assert type(error) is expected
    if reason is not None:
        assert error.reason == reason
    if isinstance(error, CorruptionError):
        assert (error.path, error.offset) == ("/d/shard.0", 4096)


def test_live_error_replies(db: settee.http.Database) -> None:
    rev = db.put({"_id": "a"})["rev"]
    with pytest.raises(Conflict):
        db.put({"_id": "a"})
    with pytest.raises(NotFound) as missing:
        db.get("nope")
    assert missing.value.reason == "missing"
    db.delete("a", rev)
    with pytest.raises(NotFound) as deleted:
        db.get("a")
    assert deleted.value.reason == "deleted"


def test_a_database_deleted_behind_the_adapter_is_no_missing_document(
    db: settee.http.Database,
) -> None:
    Client(db.server).request("DELETE", "/" + db.name)
    with pytest.raises(SetteeError) as gone:
        db.get("a")
    assert not isinstance(gone.value, NotFound)


def test_an_unreachable_server_is_a_setteeerror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    monkeypatch.setenv(settee.http.URL_ENV, f"http://127.0.0.1:{port}")
    with pytest.raises(SetteeError, match="running"):
        settee.http.open(str(tmp_path / "db"))
    monkeypatch.setenv(settee.http.URL_ENV, "ftp://example")
    with pytest.raises(SetteeError, match="http"):
        settee.http.open(str(tmp_path / "db"))


# -- arguments refused before any request ---------------------------------------------------------


def deeply_nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


REFUSED = [
    ("put", ({"_id": "a", "x": float("nan")},), {}),
    ("put", ({"_id": "a", "x": float("inf")},), {}),
    ("put", ({"_id": "a", "x": b"bytes"},), {}),
    ("put", ({"_id": "a", "x": {1: "int key"}},), {}),
    ("put", ({"_id": "a", "x": deeply_nested(10_000)},), {}),
    ("put", ({"_id": "a", "x": "lone \ud800"},), {}),
    ("put", ({"_id": "_local/a"},), {}),
    ("put", ({"_id": ""},), {}),
    ("bulk_docs", ([{"_id": "a"}, {"_id": "b", "x": {2, 3}}],), {}),
    ("bulk_docs", (iter([{"_id": "a"}]),), {}),
    ("get", ("",), {}),
    ("get", ("a",), {"rev": "1-a b"}),
    ("delete", ("a", 5), {}),
    ("all_docs", (), {"startkey": "\udc80"}),
    ("all_docs", (), {"keys": ["a"], "startkey": "a"}),
    ("changes", (), {"since": 10**5000}),
    ("changes", (), {"since": "0-\ud800"}),
    ("changes", (), {"since": 1.5}),
    ("revs_diff", ({"a": ["1-a", 7]},), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), REFUSED)
def test_arguments_json_cannot_carry_are_refused_before_any_request(
    db: settee.http.Database,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    def no_request(*_: Any, **__: Any) -> Any:
        raise AssertionError("a refused call reached the server")

    monkeypatch.setattr(db._client, "request", no_request)
    with pytest.raises(BadRequest):
        getattr(db, name)(*args, **kwargs)


def test_huge_counts_mean_what_they_mean(db: settee.http.Database) -> None:
    db.bulk_docs([{"_id": "a"}, {"_id": "b"}])
    assert len(db.all_docs(limit=10**5000)["rows"]) == 2
    assert db.all_docs(skip=2**64)["rows"] == []
    assert len(db.changes(limit=2**63)["results"]) == 2


def test_ids_are_quoted_whole_but_design_prefixes(db: settee.http.Database) -> None:
    for doc_id in ("a/b", "_design/x/y", "a b?c#d&e=f", "é😀", "%2F", "z" * 20_000):
        rev = db.put({"_id": doc_id, "v": 1})["rev"]
        assert db.get(doc_id) == {"_id": doc_id, "_rev": rev, "v": 1}
        assert db.delete(doc_id, rev)["id"] == doc_id


def test_design_document_paths_keep_their_slash() -> None:
    """CouchDB answers ``GET /db/_design%2Fx`` with a 301 to ``/db/_design/x``
    (chttpd_db:db_req), which the adapter would not follow: the prefix goes unquoted,
    the rest of the id quoted whole."""
    assert httpwire.doc_path("_design/x/y") == "/_design/x%2Fy"
    assert httpwire.doc_path("a/_design/x") == "/a%2F_design%2Fx"


def test_generated_ids_come_from_settees_generator(db: settee.http.Database) -> None:
    from settee.spec.docids import deterministic_docids

    with deterministic_docids("seed"):
        [result] = db.bulk_docs([{"v": 1}])
    with deterministic_docids("seed"):
        [again] = settee.reference.open().bulk_docs([{"v": 1}])
    assert result == again


# -- lifecycle ----------------------------------------------------------------------------------


def test_reopen_keeps_data_and_closed_calls_raise(server: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "db")
    with settee.http.open(path) as db:
        rev = db.put({"_id": "a", "v": 1})["rev"]
    with pytest.raises(SetteeError, match="closed"):
        db.get("a")
    with pytest.raises(SetteeError):
        db.__enter__()
    db.close()  # idempotent
    again = settee.http.open(path, create=False)
    assert again.get("a") == {"_id": "a", "_rev": rev, "v": 1}
    assert json.loads((tmp_path / "db" / settee.http.MARKER).read_text())["database"] == again.name
    again.destroy()
    assert again.name not in server_databases(server)


def test_create_false_on_a_missing_database_creates_nothing(server: Any, tmp_path: Path) -> None:
    path = tmp_path / "nothing"
    with pytest.raises(SetteeError, match="create=False") as refused:
        settee.http.open(str(path), create=False)
    assert not isinstance(refused.value, BadRequest)
    assert not path.exists()
    assert settee.http.database_name(str(path)) not in server_databases(server)


def test_database_names_follow_couchdb_rules() -> None:
    name = settee.http.database_name("/tmp/Some Dir/é")
    assert name == settee.http.database_name("/tmp/Some Dir/../Some Dir/é")
    assert name.startswith("settee-") and name == name.lower() and len(name) == 23


def test_a_removed_path_loses_its_database_at_the_next_open(server: Any, tmp_path: Path) -> None:
    first = settee.http.open(str(tmp_path / "first"))
    first.close()
    (tmp_path / "first" / settee.http.MARKER).unlink()
    (tmp_path / "first").rmdir()
    kept = settee.http.open(str(tmp_path / "kept"))
    names = server_databases(server)
    assert first.name not in names and kept.name in names
    settee.http.cleanup()
    assert kept.name not in server_databases(server)


def test_options_validated_as_the_engines_and_revs_limit_applied(tmp_path: Path) -> None:
    for bad in ({"shards": 0}, {"revs_limit": True}, {"no_such_option": 1}, {"fs": object()}):
        with pytest.raises(BadRequest):
            settee.http.open(str(tmp_path / "bad"), **bad)
    assert not accepts_option(settee.http.open, "fs")
    assert accepts_option(settee.http.open, "shards")
    with settee.http.open(str(tmp_path / "db"), revs_limit=2, strict=True, node_size=128) as db:
        rev = db.put({"_id": "a"})["rev"]
        for v in range(3):
            rev = db.put({"_id": "a", "_rev": rev, "v": v})["rev"]
        assert len(db.get("a", revs=True)["_revisions"]["ids"]) == 2
        db.destroy()


def test_compact_returns_when_done(db: settee.http.Database) -> None:
    rev = db.put({"_id": "a", "v": 1})["rev"]
    db.put({"_id": "a", "_rev": rev, "v": 2})
    db.compact()
    with pytest.raises(NotFound):
        db.get("a", rev=rev)  # the non-leaf body is gone: compaction finished


def test_threads_share_a_database(db: settee.http.Database) -> None:
    def write(n: int) -> None:
        for i in range(20):
            db.put({"_id": f"t{n}-{i}"})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert db.info()["doc_count"] == 80


# -- the client -----------------------------------------------------------------------------------


class _OneRequestPerConnection(socketserver.StreamRequestHandler):
    """Answers one request with a keep-alive reply, then closes the connection: the
    idle-timeout race a pooled client meets."""

    def handle(self) -> None:
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        body = b'{"ok":true}'
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )


def test_a_connection_the_server_closed_is_replaced() -> None:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _OneRequestPerConnection) as closing:
        threading.Thread(target=closing.serve_forever, daemon=True).start()
        try:
            client = Client(Server.from_url(f"http://127.0.0.1:{closing.server_address[1]}"))
            for _ in range(3):
                assert client.request("GET", "/") == (200, {"ok": True})
            client.close()
        finally:
            closing.shutdown()


def test_credentials_in_the_url_become_basic_auth() -> None:
    server = Server.from_url("https://admin:s%3Acret@db.example:6984/couch/")
    assert server.url == "https://db.example:6984/couch"
    headers = dict(server.headers)
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"admin:s:cret").decode()
    assert isinstance(server.connect(1.0), http.client.HTTPSConnection)


class _Accepting(socketserver.StreamRequestHandler):
    """Answers every request 202 (a CouchDB cluster short of its write quorum) and
    records its request line."""

    seen: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        self.seen.append(self.rfile.readline().strip())
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        self.rfile.read(length)
        body = b'{"ok":true}'
        self.wfile.write(
            b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )


def test_a_database_created_with_202_is_the_adapters_to_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CouchDB answers ``PUT /db`` 202 when the write quorum is not met: created all
    the same, so the adapter deletes it once its path is gone."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Accepting) as accepting:
        threading.Thread(target=accepting.serve_forever, daemon=True).start()
        try:
            monkeypatch.setenv(
                settee.http.URL_ENV, f"http://127.0.0.1:{accepting.server_address[1]}"
            )
            path = tmp_path / "accepted"
            database = settee.http.open(str(path))
            database.close()
            os.remove(path / settee.http.MARKER)
            path.rmdir()
            settee.http.open(str(tmp_path / "next")).destroy()  # open sweeps removed paths
            name = database.name.encode()
            assert b"DELETE /" + name + b" HTTP/1.1" in _Accepting.seen, _Accepting.seen
        finally:
            accepting.shutdown()


def test_readonly_creates_nothing_and_refuses_every_write(server: Any, tmp_path: Path) -> None:
    """SEMANTICS.md §1 over HTTP: readonly=True on a path with no database is a
    SetteeError and creates none (the adapter created one and took writes, found
    probing open's options); on one that exists, reads answer and put, delete,
    bulk_docs, purge and compact raise SetteeError naming readonly, changing nothing."""
    before = server_databases(server)
    with pytest.raises(SetteeError):
        settee.http.open(str(tmp_path / "missing"), readonly=True)
    assert server_databases(server) == before
    assert not (tmp_path / "missing").exists()
    path = str(tmp_path / "kept")
    with settee.http.open(path) as writer:
        rev = writer.put({"_id": "a", "n": 1})["rev"]
    reader = settee.http.open(path, readonly=True, revs_limit=3)
    try:
        assert reader.get("a")["n"] == 1
        writes = [
            lambda: reader.put({"_id": "b"}),
            lambda: reader.delete("a", rev),
            lambda: reader.bulk_docs([{"_id": "c"}]),
            lambda: reader.purge({"a": [rev]}),
            reader.compact,
        ]
        for write in writes:
            with pytest.raises(SetteeError, match="readonly"):
                write()
        assert [row["id"] for row in reader.all_docs()["rows"]] == ["a"]
    finally:
        reader.destroy()

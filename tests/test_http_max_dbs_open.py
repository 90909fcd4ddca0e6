"""``max_dbs_open``: settee serve keeps at most that many databases open, closing
the least recently used idle ones, never one a request is using (CouchDB's
couch_server and couch_lru).

Each database holds 10 file descriptors and 4 writer threads, so these tests
count what is really open: the descriptors this process holds under the
server's directory (``/proc/self/fd``; the server runs in-process), by database.
"""

from __future__ import annotations

import gc
import http.client
import json
import logging
import os
import random
import socket
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")
if not Path("/proc/self/fd").exists():
    pytest.skip("open descriptors are read from /proc (Linux)", allow_module_level=True)

import settee
from settee.cli import main as settee_main
from settee.serve import DEFAULTS, merge_options, start_server
from settee.serve.lru import LeasedLru
from settee.serve.options import descriptor_warning
from settee.serve.protocol import HTTPError
from settee.serve.registry import Registry

#: The descriptors one open database holds (2 per shard of 4, its lock, HEADS).
FDS_PER_DB = 10


# -- helpers -------------------------------------------------------------------------------------


class Server:
    """An in-process ``settee serve`` on a free port, and a small client for it."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.root = os.path.realpath(root)
        self.handle = start_server(self.root, "127.0.0.1", 0, fsync=False, **options)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.handle.port, timeout=30)
        try:
            data = None if body is None else json.dumps(body)
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"null")
        finally:
            conn.close()

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer = self.call(method, path, body)
        assert status < 300, (method, path, status, answer)
        return answer

    def descriptors(self) -> Counter[str]:
        """Open descriptors under the data directory, by its first path component
        (a database's directory; ``_views`` for view indexes)."""
        found: Counter[str] = Counter()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue  # closed since listed
            if target.startswith(self.root + os.sep):
                found[target[len(self.root) + 1 :].split(os.sep)[0]] += 1
        return found

    def open_dbs(self) -> set[str]:
        return {name for name in self.descriptors() if not name.startswith("_")}

    def stop(self) -> None:
        self.handle.stop()


@pytest.fixture
def three(tmp_path: Path) -> Iterator[Server]:
    """A server that keeps at most three databases open."""
    server = Server(tmp_path, max_dbs_open=3)
    yield server
    server.stop()


def make_dbs(server: Server, count: int) -> list[str]:
    """Databases db0, db1, ... each holding one document ``doc`` naming its database."""
    names = [f"db{i}" for i in range(count)]
    for name in names:
        server.ok("PUT", f"/{name}")
        server.ok("PUT", f"/{name}/doc", {"db": name})
    return names


@contextmanager
def held_upload(server: Server, db: str, others: list[str]) -> Iterator[None]:
    """A PUT of ``/db/held`` whose body stops half-way while the block runs: its
    request holds ``db``'s lease all along. ``db`` is closed first (by reading
    ``others``), so its opening says the request has its lease. On exit the rest
    of the body is sent and the write must succeed (201)."""
    touch_until_closed(server, db, others)
    body = json.dumps({"held": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.handle.port))
    sock.settimeout(10)
    try:
        head = (
            f"PUT /{db}/held HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode() + body[:4])
        wait_for(lambda: db in server.open_dbs(), f"{db} opened for the upload")
        yield
        sock.sendall(body[4:])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
    finally:
        sock.close()


def wait_for(condition: Any, what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.01)


def touch_until_closed(server: Server, db: str, others: list[str]) -> None:
    """Read the other databases round and round until ``db`` is closed to make room."""
    deadline = time.monotonic() + 5
    while db in server.open_dbs():
        assert time.monotonic() < deadline, f"{db} was never closed: {server.descriptors()}"
        for other in others:
            server.ok("GET", f"/{other}/doc")


# -- the option ----------------------------------------------------------------------------------


def test_max_dbs_open_defaults_merges_and_refuses_values_below_one(
    tmp_path: Path, capsys: Any
) -> None:
    assert merge_options()["max_dbs_open"] == DEFAULTS["max_dbs_open"] == 50
    assert merge_options(max_dbs_open=None)["max_dbs_open"] == 50  # None: the default
    assert merge_options(max_dbs_open=7)["threads"] == DEFAULTS["threads"]  # key by key
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(settee.BadRequest, match="max_dbs_open must be a positive int"):
            merge_options(max_dbs_open=bad)
    argv = ["serve", "--dir", str(tmp_path), "--port", "0", "--max-dbs-open", "0"]
    assert settee_main(argv) == 1
    assert "max_dbs_open must be a positive int, not 0" in capsys.readouterr().err


def test_a_descriptor_limit_below_what_the_bound_may_hold_is_warned_at_start(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 databases of 4 shards hold up to 500 descriptors: under a soft limit of 256
    (macOS's default) settee serve says so and how many databases fit, instead of
    failing at the 25th database with EMFILE."""
    assert descriptor_warning(merge_options(), 1024) is None
    warning = descriptor_warning(merge_options(), 256)
    assert warning is not None and "532" in warning and "--max-dbs-open 22" in warning
    assert descriptor_warning(merge_options(max_dbs_open=22), 256) is None
    tight = merge_options(max_dbs_open=22, max_connections=100)
    assert "--max-dbs-open 12" in (descriptor_warning(tight, 256) or "")
    assert "--max-dbs-open 1" in (descriptor_warning(merge_options(shards=64), 100) or "")

    from settee.serve import cli, server

    def stop_here(*args: Any, **options: Any) -> Any:
        raise SystemExit(3)

    monkeypatch.setattr(cli, "_descriptor_limit", lambda: 256)
    monkeypatch.setattr(server, "start_server", stop_here)
    with pytest.raises(SystemExit):
        settee_main(["serve", "--dir", str(tmp_path), "--port", "0"])
    assert "warning: max_dbs_open=50 databases of 4 shards" in capsys.readouterr().err


# -- the bookkeeping -------------------------------------------------------------------------------


def test_lru_evicts_the_least_recently_used_idle_items_and_never_a_leased_one() -> None:
    lru: LeasedLru[object] = LeasedLru()
    items = {name: object() for name in "abcd"}
    for name, item in items.items():
        lru.add(name, item, leased=False)
    assert lru.lease("a") is items["a"]  # now the most recently used, and busy
    assert lru.lease("b") is items["b"]
    lru.release("b", items["b"])  # used recently, idle again
    assert lru.evict_idle(keep=2) == [items["c"], items["d"]]  # b was used after them
    assert lru.evict_idle(keep=0) == [items["b"]]  # a is leased: more than keep remain
    assert lru.leased() == {"a": 1}
    lru.release("a", items["a"])
    assert lru.evict_idle(keep=0) == [items["a"]] and len(lru) == 0


def test_lru_leases_of_a_removed_item_are_forgotten() -> None:
    """A database deleted (or the server stopped) while leased: its requests' later
    releases must not touch a new database opened under the same name."""
    lru: LeasedLru[object] = LeasedLru()
    old, new = object(), object()
    lru.add("a", old, leased=True)
    assert lru.pop("a") is old
    lru.add("a", new, leased=False)
    lru.release("a", old)  # the old lease went with the old item
    assert not lru.retain("a", old)
    assert lru.leased() == {"a": 0}
    assert lru.retain("a", new) and lru.leased() == {"a": 1}


# -- over HTTP -------------------------------------------------------------------------------------


def test_touching_ten_databases_keeps_at_most_three_open(three: Server) -> None:
    names = make_dbs(three, 10)
    for round_ in range(2):
        for name in random.Random(round_).sample(names, len(names)):
            assert three.ok("GET", f"/{name}/doc")["db"] == name
            three.ok("POST", f"/{name}/_bulk_docs", {"docs": [{"_id": f"r{round_}"}]})
            assert len(three.open_dbs()) <= 3, three.descriptors()
    assert sum(three.descriptors().values()) <= 3 * FDS_PER_DB
    for name in names:  # every one reopens with all it was given
        assert three.ok("GET", f"/{name}")["doc_count"] == 3


def test_dbs_info_over_more_databases_than_the_bound(three: Server) -> None:
    names = make_dbs(three, 8)
    listed = three.ok("GET", "/_dbs_info")
    assert [row["key"] for row in listed] == names
    assert all(row["info"]["doc_count"] == 1 for row in listed)
    asked = three.ok("POST", "/_dbs_info", {"keys": [*reversed(names), "nope"]})
    assert [row.get("info", {}).get("db_name") for row in asked] == [*reversed(names), None]
    assert asked[-1] == {"key": "nope", "error": "not_found"}
    assert len(three.open_dbs()) <= 3, three.descriptors()


def test_deleting_an_evicted_database(three: Server) -> None:
    names = make_dbs(three, 5)
    three.ok("PUT", "/db0/_local/checkpoint", {"seq": 1})
    touch_until_closed(three, "db0", names[1:])
    three.ok("DELETE", "/db0")
    assert three.call("GET", "/db0/doc")[0] == 404
    assert three.call("GET", "/db0")[0] == 404
    assert "db0" not in three.descriptors() and not (Path(three.root) / "db0").exists()
    three.ok("PUT", "/db0")  # a new, empty database under the old name
    assert three.ok("GET", "/db0")["doc_count"] == 0
    assert three.call("GET", "/db0/_local/checkpoint")[0] == 404


def test_a_database_in_use_is_never_closed_to_make_room(three: Server) -> None:
    """A request's database stays open while it runs, whatever else opens; the
    write it was making lands (a broken bound closes it under the request: 404 or
    500 "database is closed")."""
    names = make_dbs(three, 6)
    with held_upload(three, "db0", names[1:]):
        for _ in range(3):
            for name in names[1:]:
                assert three.ok("GET", f"/{name}/doc")["db"] == name
                assert "db0" in three.open_dbs()
                assert len(three.open_dbs()) <= 3, three.descriptors()
    assert three.ok("GET", "/db0/held")["held"] is True


def test_when_every_open_database_is_in_use_another_is_refused_all_dbs_active(
    three: Server,
) -> None:
    """couch_server:maybe_close_lru_db: with no idle database to close, the open
    fails ``all_dbs_active`` rather than go past the bound (503 here: retry)."""
    make_dbs(three, 6)
    others = ["db3", "db4", "db5"]
    with held_upload(three, "db0", others), held_upload(three, "db1", others):
        with held_upload(three, "db2", others):
            status, answer = three.call("GET", "/db3/doc")
            assert status == 503 and answer["error"] == "all_dbs_active", answer
            assert three.call("PUT", "/db9")[0] == 503  # a create needs room too
            assert three.open_dbs() == {"db0", "db1", "db2"}
        assert three.ok("GET", "/db3/doc")["db"] == "db3"  # db2 became idle
    assert three.ok("PUT", "/db9") == {"ok": True}
    for name in ("db0", "db1", "db2"):
        assert three.ok("GET", f"/{name}/held")["held"] is True


def test_a_compaction_keeps_its_database_open_after_its_request(
    three: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """POST /db/_compact answers 202 at once and compacts on a worker: that work
    holds a lease of its own (couch_db:is_idle is false while a compaction runs)."""
    names = make_dbs(three, 5)
    real_compact = settee.Database.compact
    go_on = threading.Event()

    def held_compact(self: settee.Database) -> None:
        go_on.wait(10)  # runs until the test has opened the other databases
        real_compact(self)

    monkeypatch.setattr(settee.Database, "compact", held_compact)
    with caplog.at_level(logging.WARNING, logger="settee.serve"):
        assert three.call("POST", "/db0/_compact", {})[0] == 202
        for _ in range(3):
            for name in names[1:]:
                three.ok("GET", f"/{name}/doc")
                assert "db0" in three.open_dbs()
        go_on.set()
        wait_for(lambda: not three.ok("GET", "/db0")["compact_running"], "the compaction")
    assert not caplog.records, caplog.text
    touch_until_closed(three, "db0", names[1:])  # idle again once it finished
    assert three.ok("GET", "/db0/doc")["db"] == "db0"


def test_reopening_a_database_does_not_pile_up_its_compiled_functions(three: Server) -> None:
    """A database closed to make room compiles its design functions again when it
    reopens; the isolate must drop the old copies (it kept every one, until it ran
    out of memory and failed a request)."""
    pytest.importorskip("py_mini_racer", reason="design functions need mini-racer")
    from settee.serve.js import runtime

    names = make_dbs(three, 5)
    three.ok("PUT", "/db0/_design/v", {"validate_doc_update": "function(doc) {}"})
    three.ok("PUT", "/db0/first", {})
    before = runtime().compiled()
    for i in range(20):
        touch_until_closed(three, "db0", names[1:])
        three.ok("PUT", f"/db0/again{i}", {})  # the validator, compiled anew
    gc.collect()
    assert runtime().compiled() <= before + 1


def _feed(server: Server, db: str, feed: str) -> http.client.HTTPResponse:
    """A live feed on ``db`` from now on, its headers read (the feed has started)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.handle.port, timeout=10)
    conn.request("GET", f"/{db}/_changes?feed={feed}&since=now&timeout=30000")
    response = conn.getresponse()
    assert response.status == 200
    return response


def _next_id(response: http.client.HTTPResponse) -> str:
    """The document id of the feed's next row (continuous: a line; eventsource: an event)."""
    while True:
        line = response.readline()
        assert line, "the feed ended"
        text = line.decode().removeprefix("data: ").strip()
        if text.startswith("{"):
            return str(json.loads(text)["id"])


@pytest.mark.parametrize("feed", ["continuous", "eventsource"])
def test_a_feed_gives_its_database_back_while_it_waits_and_still_gets_later_changes(
    three: Server, feed: str
) -> None:
    """couch_changes closes its db while it waits: a waiting feed holds no
    database open (database-per-user replication keeps one feed per user), and a
    write to the database, reopened since, still wakes it."""
    names = make_dbs(three, 5)
    response = _feed(three, "db0", feed)
    try:
        touch_until_closed(three, "db0", names[1:])
        three.ok("PUT", "/db0/later", {})
        assert _next_id(response) == "later"  # within the read timeout, not at 30 s
        touch_until_closed(three, "db0", names[1:])
        three.ok("PUT", "/db0/later2", {})
        assert _next_id(response) == "later2"
    finally:
        response.close()


def test_a_longpoll_answers_a_write_to_its_reopened_database(three: Server) -> None:
    names = make_dbs(three, 5)
    since = urllib.parse.quote(three.ok("GET", "/db0")["update_seq"])
    answer: dict[str, Any] = {}
    path = f"/db0/_changes?feed=longpoll&since={since}&timeout=30000"
    poll = threading.Thread(target=lambda: answer.update(three.ok("GET", path)))
    poll.start()
    time.sleep(0.2)  # the poll is waiting (were it late, it answers at once: since is fixed)
    touch_until_closed(three, "db0", names[1:])
    three.ok("PUT", "/db0/later", {})
    poll.join(10)  # woken by the write, not at its 30 s timeout
    assert [row["id"] for row in answer["results"]] == ["later"]


def test_a_feed_ends_when_its_database_is_deleted(three: Server) -> None:
    """couch_changes stops on couch_event's ``deleted``; a database created again
    under the name is another database, whose changes the feed must not report."""
    make_dbs(three, 1)
    response = _feed(three, "db0", "continuous")
    try:
        started = time.monotonic()
        three.ok("DELETE", "/db0")
        three.ok("PUT", "/db0")
        three.ok("PUT", "/db0/other", {})
        lines = response.read().splitlines()  # the feed ends: no 30 s timeout
        assert time.monotonic() - started < 5
        assert [json.loads(line) for line in lines if line.strip()][-1]["pending"] == 0
        assert b"other" not in b"".join(lines)
    finally:
        response.close()


def test_requests_given_up_by_their_clients_leave_no_lease(three: Server) -> None:
    """A client that goes away cancels its request (aiohttp): the lease is given
    back, or its database could never close again."""
    names = make_dbs(three, 6)
    touch_until_closed(three, "db0", names[1:])
    for feed in ("longpoll", "continuous"):
        sock = socket.create_connection(("127.0.0.1", three.handle.port))
        sock.sendall(
            f"GET /db0/_changes?feed={feed}&timeout=30000 HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        wait_for(lambda: "db0" in three.open_dbs(), "db0 opened for the feed")
        sock.close()
    sock = socket.create_connection(("127.0.0.1", three.handle.port))
    sock.sendall(b"PUT /db1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    wait_for(lambda: "db1" in three.open_dbs(), "db1 opened for the upload")
    sock.close()
    time.sleep(0.1)
    touch_until_closed(three, "db0", names[2:])
    touch_until_closed(three, "db1", names[2:])


def test_many_threads_over_more_databases_than_the_bound(
    three: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """Eight clients read and write twelve databases, at most three open: nothing
    fails but the retryable ``all_dbs_active``, and every acknowledged write is
    there afterwards."""
    names = make_dbs(three, 12)
    acknowledged: dict[tuple[str, str], str] = {}
    failures: list[Any] = []
    refused = Counter[str]()

    def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        while True:
            status, answer = three.call(method, path, body)
            if status == 503 and answer.get("error") == "all_dbs_active":
                refused["all_dbs_active"] += 1
                time.sleep(0.005)  # a client retries a 503
                continue
            return status, answer

    def client(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(40):
                db = rng.choice(names)
                doc_id = f"c{n}-{i}"
                status, answer = call("PUT", f"/{db}/{doc_id}", {"n": n, "i": i})
                if status != 201:
                    failures.append(("PUT", db, doc_id, status, answer))
                    continue
                acknowledged[db, doc_id] = answer["rev"]
                other = rng.choice(names)
                for path in (f"/{other}/doc", f"/{other}/_all_docs?limit=5", f"/{other}/_changes"):
                    status, answer = call("GET", path)
                    if status != 200:
                        failures.append(("GET", path, status, answer))
        except Exception as exc:  # reported below with the others
            failures.append(repr(exc))

    with caplog.at_level(logging.WARNING, logger="settee.serve"):
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:5]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[:2000]
    assert len(acknowledged) == 8 * 40
    for (db, doc_id), rev in sorted(acknowledged.items()):
        status, doc = three.call("GET", f"/{db}/{doc_id}")
        assert status == 200 and doc["_rev"] == rev, (db, doc_id, status, doc)
    assert len(three.open_dbs()) <= 3


def test_shutdown_closes_every_database_in_use_or_not(tmp_path: Path) -> None:
    """``Registry.close`` closes leased databases too (the requests are over by then)."""
    root = os.path.realpath(tmp_path)
    registry = Registry(root, merge_options(max_dbs_open=2, fsync=False))
    for name in ("a", "b", "c"):
        registry.create(name)
    leased = registry.acquire("c")
    assert registry.leases() == {"b": 0, "c": 1}  # a closed to make room for c
    registry.close()
    assert not [fd for fd in os.listdir("/proc/self/fd") if _under(fd, root)]
    registry.release(leased)  # a request ending after shutdown: nothing to give back
    with pytest.raises(HTTPError, match="stopping"):
        registry.acquire("a")


def _under(fd: str, root: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith(root + os.sep)
    except OSError:
        return False


def test_a_local_write_racing_the_delete_of_its_database_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    """Found probing (``_local`` PUTs and ``_security`` racing ``DELETE /db``, then
    ``PUT /db``): a request holding the deleted database wrote its local document
    or security object after the delete removed them, into the directory the next
    database of that name reads, which then listed them as its own. Such a write
    is 404 now, as if it had come after the delete, and leaves nothing."""
    registry = Registry(os.path.realpath(tmp_path), merge_options(fsync=False))
    registry.create("a")
    old = registry.acquire("a")  # a request under way
    registry.delete("a")
    with pytest.raises(HTTPError, match="Database does not exist"):
        old.local.put("_local/x", {"v": 1}, None)
    with pytest.raises(HTTPError, match="Database does not exist"):
        old.local.set_security({"members": {"names": ["old"]}})
    registry.release(old)
    registry.create("a")
    new = registry.acquire("a")
    try:
        assert new.local.all() == []
        assert "names" not in new.local.security()["members"]
    finally:
        registry.release(new)
        registry.close()

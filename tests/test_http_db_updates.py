"""``GET /_db_updates`` as CouchDB's global_changes serves it: each database's
latest ``created``, ``updated`` and ``deleted`` event, kept as documents of the
``_global_changes`` database and listed as its changes (global_changes_httpd,
CouchDB's global_changes_tests.erl)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve.server import start_server
from tests.test_http import NO_DB, Client, put

_SETTLE = 10.0  # seconds an event may take to be listed (written every 0.5 s)


#: The events' write interval in these tests (CouchDB's and the server's: 0.5 s).
_INTERVAL = 0.05


@pytest.fixture(autouse=True, scope="module")
def _quick_writes() -> Any:
    """Events written every 50 ms: the tests wait for them, not for the interval."""
    from settee.serve import dbupdates

    saved, dbupdates.MAX_WRITE_DELAY = dbupdates.MAX_WRITE_DELAY, _INTERVAL
    yield
    dbupdates.MAX_WRITE_DELAY = saved


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    handle = start_server(str(tmp_path_factory.mktemp("serve")), "127.0.0.1", 0, fsync=False)
    assert Client(handle.port)("PUT", "/_global_changes").status == 201
    yield handle
    handle.stop()


@pytest.fixture
def client(server: Any) -> Client:
    return Client(server.port)


def _events(client: Client, query: str = "") -> list[tuple[str, str]]:
    r = client("GET", f"/_db_updates{query}")
    assert r.status == 200, r.raw
    return [(row["db_name"], row["type"]) for row in r.json["results"]]


def _wait_for(client: Client, wanted: set[tuple[str, str]], query: str = "") -> dict[str, Any]:
    """The feed's answer once it lists every event of ``wanted``."""
    deadline = time.monotonic() + _SETTLE
    while True:
        answer = client("GET", f"/_db_updates{query}").json
        listed = {(row["db_name"], row["type"]) for row in answer["results"]}
        if wanted <= listed or time.monotonic() > deadline:
            assert wanted <= listed, (wanted, answer)
            return answer  # type: ignore[no-any-return]
        time.sleep(0.05)


def test_creating_and_writing_a_database_lists_created_and_updated_once_each(
    client: Client,
) -> None:
    """global_changes_tests.erl: a new database and a document, then an edit of it:
    ``created`` and ``updated``, each once however many writes."""
    assert client("PUT", "/gc-one").status == 201
    rev = put(client, "/gc-one", "bar/baz", {"key": "value"})
    put(client, "/gc-one", "bar/baz", {"key": "new_value", "_rev": rev})
    answer = _wait_for(client, {("gc-one", "created"), ("gc-one", "updated")})
    mine = [row for row in answer["results"] if row["db_name"] == "gc-one"]
    assert sorted(row["type"] for row in mine) == ["created", "updated"]
    assert all(set(row) == {"db_name", "type", "seq"} for row in answer["results"])
    assert set(answer) == {"results", "last_seq"}  # no "pending", as CouchDB
    assert ("_global_changes", "updated") not in _events(client)  # its own writes are not


def test_deleting_a_database_is_listed_and_a_later_write_moves_its_event_last(
    client: Client,
) -> None:
    assert client("PUT", "/gc-two").status == 201
    assert client("PUT", "/gc-three").status == 201
    put(client, "/gc-two", "d", {})
    _wait_for(client, {("gc-two", "updated"), ("gc-three", "created")})
    assert client("DELETE", "/gc-three").status == 200
    put(client, "/gc-two", "e", {})
    time.sleep(3 * _INTERVAL)  # the two events land in one write, or the delete's first
    answer = _wait_for(client, {("gc-three", "deleted")})
    order = [(row["db_name"], row["type"]) for row in answer["results"]]
    assert order.index(("gc-three", "created")) < order.index(("gc-three", "deleted"))
    assert order.count(("gc-two", "updated")) == 1  # one row per event, at its latest
    assert order.index(("gc-two", "updated")) > order.index(("gc-three", "created"))


def test_since_limit_and_descending_page_the_feed(client: Client) -> None:
    assert client("PUT", "/gc-page").status == 201
    first = _wait_for(client, {("gc-page", "created")})
    everything = first["results"]
    assert _events(client, "?limit=1") == [(everything[0]["db_name"], everything[0]["type"])]
    newest = _events(client, "?descending=true&limit=1")
    assert newest == [(everything[-1]["db_name"], everything[-1]["type"])]
    since = json.dumps(first["last_seq"]).strip('"')
    assert _events(client, f"?since={since}") == []
    put(client, "/gc-page", "d", {})
    later = _wait_for(client, {("gc-page", "updated")}, f"?since={since}")
    assert [(r["db_name"], r["type"]) for r in later["results"]] == [("gc-page", "updated")]


def test_a_longpoll_waits_for_the_next_event(client: Client) -> None:
    """since=now: nothing yet; the feed answers once a database is created."""
    import threading

    answers: list[Any] = []
    waiting = threading.Thread(
        target=lambda: answers.append(client("GET", "/_db_updates?feed=longpoll&since=now"))
    )
    waiting.start()
    time.sleep(0.3)
    assert client("PUT", "/gc-poll").status == 201
    waiting.join(_SETTLE)
    assert not waiting.is_alive() and answers[0].status == 200
    assert ("gc-poll", "created") in [
        (row["db_name"], row["type"]) for row in answers[0].json["results"]
    ]


def test_a_continuous_feed_sends_lines_then_last_seq(client: Client) -> None:
    assert client("PUT", "/gc-cont").status == 201
    _wait_for(client, {("gc-cont", "created")})
    r = client("GET", "/_db_updates?feed=continuous&timeout=100")
    lines = [json.loads(line) for line in r.raw.decode().splitlines() if line]
    assert ("gc-cont", "created") in [(x.get("db_name"), x.get("type")) for x in lines]
    assert set(lines[-1]) == {"last_seq"}
    events = client("GET", "/_db_updates?feed=eventsource&timeout=100").raw.decode()
    assert events.startswith("data: {") and "\nid: " in events


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("?feed=sometimes", "Supported `feed` types: normal, continuous, longpoll, eventsource"),
        ("?limit=-1", "invalid_integer"),
        ("?limit=ten", "invalid_integer"),
        ("?feed=continuous&timeout=x", "invalid_integer"),
        ("?feed=continuous&heartbeat=1.5", "invalid_integer"),
    ],
)
def test_bad_parameters_are_400(client: Client, query: str, reason: str) -> None:
    r = client("GET", f"/_db_updates{query}")
    assert (r.status, r.json) == (400, {"error": "bad_request", "reason": reason})


def test_only_get_is_allowed(client: Client) -> None:
    r = client("POST", "/_db_updates", {})
    assert (r.status, r.headers["Allow"]) == (405, "GET")


def test_without_global_changes_the_feed_is_404_and_events_are_dropped(tmp_path: Any) -> None:
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as handle:
        client = Client(handle.port)
        assert client("GET", "/_db_updates").json == NO_DB
        assert client("PUT", "/early").status == 201
        time.sleep(3 * _INTERVAL)  # its event is written, or dropped, by now
        assert client("PUT", "/_global_changes").status == 201
        assert client("PUT", "/late").status == 201
        _wait_for(client, {("late", "created")})
        assert ("early", "created") not in _events(client)


def test_events_of_a_stop_are_written_and_outlive_a_restart(tmp_path: Any) -> None:
    """The server's stop writes the events collected since the last interval."""
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=True) as handle:
        client = Client(handle.port)
        assert client("PUT", "/_global_changes").status == 201
        assert client("PUT", "/kept").status == 201
        put(client, "/kept", "d", {})
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=True) as handle:
        assert {("kept", "created"), ("kept", "updated")} <= set(_events(Client(handle.port)))


def test_a_failed_write_of_events_does_not_stop_later_ones(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is one background task: an error in one interval (a damaged or
    closing ``_global_changes``) is logged, and the next interval writes again."""
    from settee.serve import dbupdates

    real = dbupdates._write_events
    failures: list[list[str]] = []

    def fails_once(entry: Any, ids: list[str]) -> None:
        if not failures:
            failures.append(ids)
            raise OSError("disk full, once")
        real(entry, ids)

    monkeypatch.setattr(dbupdates, "_write_events", fails_once)
    assert client("PUT", "/gc-fail-first").status == 201
    deadline = time.monotonic() + _SETTLE
    while not failures and time.monotonic() < deadline:
        time.sleep(0.05)
    assert failures == [["created:gc-fail-first"]]
    assert client("PUT", "/gc-fail-later").status == 201
    _wait_for(client, {("gc-fail-later", "created")})


def test_limit_counts_events_not_other_documents_of_global_changes(tmp_path: Any) -> None:
    """global_changes_httpd counts the limit "only [for] changes which happen after the
    filter": a document of _global_changes that is no event (found in review: limit=1
    answered no row) is skipped without using up the limit."""
    with start_server(str(tmp_path), "127.0.0.1", 0, fsync=False) as handle:
        client = Client(handle.port)
        assert client("PUT", "/_global_changes").status == 201
        put(client, "/_global_changes", "plain", {})  # the first change: no event
        assert client("PUT", "/gc-limit").status == 201
        everything = _wait_for(client, {("gc-limit", "created")})["results"]
        first = [(everything[0]["db_name"], everything[0]["type"])]
        assert first == [("gc-limit", "created")]
        assert _events(client, "?limit=1") == first
        assert _events(client, "?descending=true&limit=1") == first

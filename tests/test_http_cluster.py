"""CouchDB's cluster endpoints as settee serve answers them: one node, shards by
mem3 hash range, no partitioned databases (mem3_httpd, chttpd_db's
handle_partition_req and parse_partitioned_opt), and the database endpoints it
does not serve answered as such, not as document ids."""

from __future__ import annotations

import os
import urllib.parse
import zlib
from typing import Any

import pytest

import settee

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db

NODE = "nonode@nohost"
_UNDERSCORE = "Partition must not start with an underscore"
_NOT_PARTITIONED = "database is not partitioned"


def _error(error: str, reason: str) -> dict[str, str]:
    return {"error": error, "reason": reason}


def test_membership_names_the_one_node(client: Client) -> None:
    r = client("GET", "/_membership")
    assert (r.status, r.json) == (200, {"all_nodes": [NODE], "cluster_nodes": [NODE]})
    assert client("POST", "/_membership", {}).status == 405


@pytest.mark.parametrize("q", [1, 3, 4])
def test_shards_name_each_mem3_range_and_the_range_of_an_id(client: Client, q: int) -> None:
    name = f"shardsq{q}"
    client("DELETE", f"/{name}")
    assert client("PUT", f"/{name}?q={q}").status == 201
    shards = client("GET", f"/{name}/_shards").json["shards"]
    width = 2**32 // q
    bounds = [(i * width, (i + 1) * width - 1 if i < q - 1 else 2**32 - 1) for i in range(q)]
    assert shards == {f"{b:08x}-{e:08x}": [NODE] for b, e in bounds}
    for doc_id in ("a", "doc1", "zz top", "_design/x", "é"):
        h = zlib.crc32(doc_id.encode("utf-8"))
        b, e = next((b, e) for b, e in bounds if b <= h <= e)
        quoted = urllib.parse.quote(doc_id, safe="")
        r = client("GET", f"/{name}/_shards/{quoted}")
        assert (r.status, r.json) == (200, {"range": f"{b:08x}-{e:08x}", "nodes": [NODE]})
    assert client("POST", f"/{name}/_shards", {}).status == 405
    assert client("DELETE", f"/{name}").status == 200


def test_the_range_of_a_stored_document_is_the_shard_file_that_holds_it(
    client: Client, db: str, server: Any
) -> None:
    """The answer is where the engine put it, not only the same formula."""
    for n in range(20):
        assert client("PUT", f"{db}/d{n}", {"n": n}).status == 201
    ranges = sorted(client("GET", f"{db}/_shards").json["shards"])
    stored = settee.open(os.path.join(server.dir, db.lstrip("/")), readonly=True)
    try:
        for n in range(20):
            got = client("GET", f"{db}/_shards/d{n}").json["range"]
            holder = stored.shards[ranges.index(got)].current()
            assert holder.doc_info(f"d{n}") is not None
    finally:
        stored.close()


def test_sync_shards_is_accepted_and_post_only(client: Client, db: str) -> None:
    r = client("POST", f"{db}/_sync_shards", {})
    assert (r.status, r.json) == (202, {"ok": True})
    assert client("GET", f"{db}/_sync_shards").status == 405


def test_partitioned_databases_are_refused_as_couchdb_refuses_them_when_off(
    client: Client,
) -> None:
    client("DELETE", "/parted")
    r = client("PUT", "/parted?partitioned=true")
    assert (r.status, r.json) == (400, _error("bad_request", "Partitioned feature is not enabled."))
    assert client("GET", "/parted").status == 404  # nothing created
    r = client("PUT", "/parted?partitioned=yes")
    assert (r.status, r.json) == (400, _error("bad_request", "Invalid `partitioned` parameter"))
    assert client("PUT", "/parted?partitioned=false").status == 201
    assert client("DELETE", "/parted").status == 200


@pytest.mark.parametrize(
    ("method", "path", "status", "error", "reason"),
    [
        ("GET", "_partition", 400, "bad_request", "invalid_partition_req"),
        ("GET", "_partition/p", 400, "bad_request", "database is not partitioned"),
        ("GET", "_partition/_p", 400, "illegal_partition", _UNDERSCORE),
        ("GET", "_partition/a:b", 400, "illegal_partition", "Partition must not contain a colon"),
        ("POST", "_partition/_p", 400, "illegal_partition", _UNDERSCORE),
        ("PUT", "_partition/p", 405, "method_not_allowed", "Only GET allowed"),
        ("GET", "_partition/p/_all_docs", 400, "bad_request", "database is not partitioned"),
        ("POST", "_partition/p/_find", 400, "bad_request", "database is not partitioned"),
        ("GET", "_partition/p/_design/d/_view/v", 400, "bad_request", _NOT_PARTITIONED),
    ],
)  # fmt: skip
def test_partition(
    client: Client, db: str, method: str, path: str, status: int, error: str, reason: str
) -> None:
    r = client(method, f"{db}/{path}", {} if method != "GET" else None)
    assert (r.status, r.json) == (status, _error(error, reason))


@pytest.mark.parametrize("endpoint", ["_auto_purge", "_time_seq"])
@pytest.mark.parametrize("method", ["GET", "PUT", "POST", "DELETE"])
def test_unserved(client: Client, db: str, endpoint: str, method: str) -> None:
    """They were taken for document ids: GET "missing", POST 405, PUT illegal_docid."""
    assert client("PUT", f"{db}/keep", {"v": 1}).status == 201
    r = client(method, f"{db}/{endpoint}", {"keep": ["1-x"]} if method != "GET" else None)
    expected = _error("not_found", f"settee serve does not serve {endpoint} yet")
    assert (r.status, r.json) == (404, expected)
    assert client("GET", f"{db}/keep").json["v"] == 1
    assert client("GET", db).json["doc_count"] == 1


@pytest.mark.parametrize("name", ["_local", NODE])
def test_node_names_itself_and_shows_its_configuration(
    client: Client, name: str, server: Any
) -> None:
    """/_node/{node-name} (api/server/common.rst), _local or the node's name: the
    options under CouchDB's sections and keys, every value a string; an unknown
    key is 404 unknown_config_value, writing 405 (options are set at start)."""
    assert client("GET", f"/_node/{name}").json == {"name": NODE}
    config = client("GET", f"/_node/{name}/_config").json
    assert config["couchdb"]["max_dbs_open"] == "50"
    assert config["couchdb"]["database_dir"] == server.dir
    assert config["cluster"] == {"q": "4", "n": "1"}
    assert all(isinstance(v, str) for section in config.values() for v in section.values())
    assert client("GET", f"/_node/{name}/_config/couchdb").json == config["couchdb"]
    assert client("GET", f"/_node/{name}/_config/couchdb/max_dbs_open").json == "50"
    assert client("GET", f"/_node/{name}/_config/nosuch").json == {}
    assert client("GET", f"/_node/{name}/_config/couchdb/nosuch").json == _error(
        "not_found", "unknown_config_value"
    )
    r = client("PUT", f"/_node/{name}/_config/couchdb/max_dbs_open", "10")
    assert (r.status, r.headers["Allow"]) == (405, "GET,HEAD")
    versions = client("GET", f"/_node/{name}/_versions").json
    assert versions["settee"]["version"] == settee.__version__
    assert versions["javascript_engine"]["name"] == "v8"
    # chttpd_node:get_versions's members (settee's collator is its own).
    assert set(versions["collation_driver"]) == {
        "name",
        "library_version",
        "collation_algorithm_version",
        "collator_version",
    }


@pytest.mark.parametrize(
    "path",
    ["/_node/_local/_stats", "/_node/_local/_system",
     "/_scheduler/other", "/_utils/", "/_config"],
)  # fmt: skip
def test_server_endpoints_not_served_say_so(client: Client, path: str) -> None:
    """Where their names, taken as databases, answered "Database does not exist."."""
    r = client("GET", path)
    assert r.status == 404 and "settee serve does not serve" in r.json["reason"], r.raw


def test_an_unknown_node_is_not_found(client: Client) -> None:
    r = client("GET", "/_node/other@host/_config")
    assert r.status == 404 and "nonode@nohost only" in r.json["reason"]
    # chttpd_node:handle_node_req: a bare /_node, a config path past its key, and
    # the methods _versions allows.
    assert client("GET", "/_node").json == _error("bad_request", "Incomplete path to _node request")
    deep = client("GET", "/_node/_local/_config/couchdb/max_dbs_open/x")
    assert (deep.status, deep.json) == (404, _error("not_found", "missing"))
    versions = client("POST", "/_node/_local/_versions", {})
    assert (versions.status, versions.headers["Allow"]) == (405, "GET")

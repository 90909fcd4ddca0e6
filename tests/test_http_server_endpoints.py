"""Server-level endpoints as CouchDB 3.5 answers them, each checked against its
source: the welcome (chttpd_misc:handle_welcome_req), ``/_up`` (and mem3_seeds),
``/_session`` (couch_httpd_auth:handle_session_req) and the ``Allow`` header of
each endpoint's 405 (send_method_not_allowed in chttpd_misc, couch_httpd_auth).
"""

from __future__ import annotations

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db


def test_welcome_up_and_session_carry_couchdbs_members(client: Client) -> None:
    welcome = client("GET", "/").json
    assert list(welcome)[:5] == ["couchdb", "version", "git_sha", "uuid", "features"]
    assert isinstance(welcome["git_sha"], str)
    assert client("GET", "/_up").json == {"status": "ok", "seeds": {}}
    info = client("GET", "/_session").json["info"]
    assert info == {"authentication_handlers": ["default"], "authentication_db": "_users"}


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/", "GET,HEAD"),
        ("/_up", "GET,HEAD"),
        ("/_all_dbs", "GET,HEAD"),
        ("/_dbs_info", "GET,HEAD,POST"),
        ("/_active_tasks", "GET,HEAD"),
        ("/_session", "GET,HEAD,POST,DELETE"),
        ("/_uuids", "GET"),
    ],
)
def test_405_names_couchdbs_allowed_methods(client: Client, path: str, allowed: str) -> None:
    resp = client("PUT", path, {})
    assert (resp.status, resp.headers["Allow"]) == (405, allowed)
    assert resp.json["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("", "DELETE,GET,HEAD,POST"), ("/_security", "PUT,GET"), ("/_revs_limit", "PUT,GET")],
)
def test_database_405s_name_chttpd_dbs_allowed_methods(
    client: Client, db: str, path: str, allowed: str
) -> None:
    """chttpd_db:db_req's send_method_not_allowed lists, in its order."""
    resp = client("PATCH", f"{db}{path}", {})
    assert (resp.status, resp.headers["Allow"]) == (405, allowed)


def test_all_dbs_and_dbs_info_carry_the_shards_databases_etag(client: Client, db: str) -> None:
    """chttpd_misc:handle_all_dbs_info_req answers through etag_respond: an ETag of
    the shards database's info, and 304 to a request that names it, until a
    database is created or deleted."""
    first = client("GET", "/_all_dbs")
    tag = first.headers["ETag"]
    assert client("GET", "/_dbs_info?limit=1").headers["ETag"] == tag
    again = client("GET", "/_all_dbs", headers={"If-None-Match": tag})
    assert (again.status, again.raw) == (304, b"")
    assert client("PUT", db + "-more").status == 201
    assert client("GET", "/_all_dbs", headers={"If-None-Match": tag}).status == 200
    assert client("DELETE", db + "-more").status == 200


def test_connect_is_routed_by_its_path(client: Client, db: str) -> None:
    """mochiweb routes a CONNECT by its path like any other method (aiohttp reads
    the target as an authority, which sent every CONNECT to the welcome's 405):
    chttpd answers it where the path leads (01-index-crud-test.py test_bad_urls)."""
    assert client("CONNECT", f"{db}/_index/a").status == 404
    resp = client("CONNECT", db)
    assert (resp.status, resp.headers["Allow"]) == (405, "DELETE,GET,HEAD,POST")

"""Where an audit of settee serve against CouchDB 3.5's documentation (src/docs/src/api)
and its source (chttpd_db.erl, couch_util.erl at tag 3.5.0) found them to disagree:
each test names the lines that say what CouchDB does.
"""

from __future__ import annotations

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from tests import test_http
from tests.test_http import Client, put

# tests/test_http.py's fixtures: one server for this module, a fresh database per test.
server, client, db = test_http.server, test_http.client, test_http.db


def test_location_is_couch_util_url_encode_of_the_id(client: Client, db: str) -> None:
    """chttpd_db:db_doc_req's PUT (chttpd_db.erl 1120-1125), POST /db (519-524) and
    COPY (1220-1222) send ``absolute_uri(Req, "/" ++ url_encode(DbName) ++ "/" ++
    url_encode(DocId))``, and couch_util:url_encode (couch_util.erl 471-490) keeps
    ASCII letters, digits and ``_.-:`` and writes every other byte as ``%XX``: the
    slash after ``_design``/``_local`` too (a GET of ``_design%2F...`` is then
    chttpd_db's 301), a colon kept, as security.rst shows
    ``Location: http://localhost:5984/_users/org.couchdb.user:jan``."""
    cases = {
        "_design/app": "_design%2Fapp",
        "_local/x": "_local%2Fx",
        "org.couchdb.user:jan": "org.couchdb.user:jan",
        "a~b c": "a%7Eb%20c",
    }
    for doc_id, tail in cases.items():
        quoted = doc_id.replace("/", "%2F").replace(":", "%3A").replace(" ", "%20")
        made = client("PUT", f"{db}/{quoted}", {"v": 1})
        assert made.status == 201, made.raw
        assert made.headers["Location"].endswith(f"{db}/{tail}"), (doc_id, made.headers)
    # The same id named without escapes: the Location is built from the id, not the path.
    again = client("PUT", f"{db}/_design/app", {"v": 2, "_rev": made_rev(client, db)})
    assert again.headers["Location"].endswith(f"{db}/_design%2Fapp")
    posted = client("POST", db, {"_id": "_design/p"})
    assert posted.headers["Location"].endswith(f"{db}/_design%2Fp")
    put(client, db, "src", {"v": 1})
    copied = client("COPY", f"{db}/src", headers={"Destination": "_local/c"})
    assert copied.headers["Location"].endswith(f"{db}/_local%2Fc")
    # Each Location names the document it was sent for.
    path = copied.headers["Location"].split(str(client.port), 1)[1]
    assert client("GET", path).json["_id"] == "_local/c"


def made_rev(client: Client, db: str) -> str:
    return str(client("GET", f"{db}/_design/app").json["_rev"])


def test_post_to_a_database_sends_a_location_and_no_etag(client: Client, db: str) -> None:
    """chttpd_db's ``POST /{db}`` (chttpd_db.erl 533-541 at 3.5.0) answers
    ``send_json(Req, HttpCode, [{"Location", DocUrl}], ...)``: no ETag, where a PUT of
    the document (1126 and on) sends both. PouchDB and replicators read the rev from
    the body."""
    posted = client("POST", db, {"_id": "p", "v": 1})
    assert posted.status == 201, posted.raw
    assert "ETag" not in posted.headers, posted.headers
    assert posted.headers["Location"].endswith(f"{db}/p")
    assert posted.json["rev"].startswith("1-")
    replaced = client("PUT", f"{db}/p", {"v": 2, "_rev": posted.json["rev"]})
    assert replaced.headers["ETag"] == f'"{replaced.json["rev"]}"'

"""The semantic suite: CouchDB behaviour every settee implementation must show.

Every test runs against each implementation through the ``engine`` /
``opener`` fixtures (``settee.proof.plugin``; ``--settee-engine`` names the
engines) and never imports one directly. The
expected values come from CouchDB's documentation and sources (cited in each
docstring; files are in apache/couchdb) as adapted by spec/SEMANTICS.md, not
from any implementation's output. Section numbers (§) refer to SEMANTICS.md.

Tests do not depend on the shard count: changes are checked only through
their documented guarantees; a total order is asserted only with one shard.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import msgpack
import pytest

from settee.spec.errors import BadRequest, Conflict, NotFound, SetteeError
from settee.spec.routing import shard_of

REV_RE = re.compile(r"^[1-9][0-9]*-[0-9a-f]{32}$")
H = {c: c * 32 for c in "0123456789abcdef"}  # readable 32-hex hashes for replicated revs


# --------------------------------------------------------------------------- helpers


def pos(rev: str) -> int:
    return int(rev.split("-", 1)[0])


def hash_of(rev: str) -> str:
    return rev.split("-", 1)[1]


def replicate(
    db: Any, docid: str, path: list[str], body: dict[str, Any] | None = None, deleted: bool = False
) -> list[Any]:
    """Store ``path`` (newest first, consecutive positions) with new_edits=False,
    as a replicator does (docs.couchdb.org _bulk_docs "new_edits")."""
    doc: dict[str, Any] = {
        "_id": docid,
        "_rev": path[0],
        "_revisions": {"start": pos(path[0]), "ids": [hash_of(r) for r in path]},
        **(body or {}),
    }
    if deleted:
        doc["_deleted"] = True
    return db.bulk_docs([doc], new_edits=False)


def snapshot(db: Any) -> dict[str, Any]:
    """Everything a reader can see, minus opaque tokens, for "unchanged" checks."""
    rows = db.all_docs(include_docs=True)
    changes = db.changes(include_docs=True)["results"]
    return {
        "all_docs": rows,
        "changes": sorted(
            ((c["id"], c["changes"][0]["rev"], c.get("deleted", False), repr(c["doc"])))
            for c in changes
        ),
        "counts": (db.info()["doc_count"], db.info()["doc_del_count"]),
    }


def ids_of(changes: dict[str, Any]) -> list[str]:
    return [c["id"] for c in changes["results"]]


def seeded(db: Any, ids: list[str]) -> dict[str, str]:
    """Create one doc per id (one put each) and return id -> rev."""
    return {i: db.put({"_id": i, "v": i})["rev"] for i in ids}


def single_shard(opener: Any) -> bool:
    return opener.param.options.get("shards", 1) == 1


# --------------------------------------------------------------------------- create/read/update


def test_put_creates_first_revision(engine: Any) -> None:
    """PUT /{db}/{docid} answers {"ok": true, "id", "rev"} with rev "1-<md5>"
    (docs.couchdb.org api/document/common "PUT"; couch_db:new_revid)."""
    res = engine.put({"_id": "a", "x": 1})
    assert set(res) == {"ok", "id", "rev"}
    assert res["ok"] is True and res["id"] == "a"
    assert REV_RE.match(res["rev"]) and pos(res["rev"]) == 1


def test_get_returns_id_rev_and_body(engine: Any) -> None:
    """GET returns the winning revision with _id and _rev (api/document/common)."""
    rev = engine.put({"_id": "a", "x": 1, "nested": {"k": [1, 2]}})["rev"]
    assert engine.get("a") == {"_id": "a", "_rev": rev, "x": 1, "nested": {"k": [1, 2]}}


def test_update_increments_position(engine: Any) -> None:
    """Each edit adds one to the revision position (basics_test.exs; couch_doc revs)."""
    rev = engine.put({"_id": "a", "v": 0})["rev"]
    for n in range(2, 6):
        rev2 = engine.put({"_id": "a", "_rev": rev, "v": n})["rev"]
        assert REV_RE.match(rev2) and pos(rev2) == n and rev2 != rev
        rev = rev2
    assert engine.get("a") == {"_id": "a", "_rev": rev, "v": 5}


def test_stale_rev_conflicts_and_changes_nothing(engine: Any) -> None:
    """Updating with a non-leaf rev is 409 conflict (api/document/common PUT;
    bulk_docs_test.exs "can detect conflicts")."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_rev": r1, "v": 3})
    assert engine.get("a") == {"_id": "a", "_rev": r2, "v": 2}


def test_missing_rev_on_existing_doc_conflicts(engine: Any) -> None:
    """PUT without _rev on a live doc conflicts (couch_db:prep_and_validate_update:
    "new doc, and we have existing revs" -> conflict unless deleted)."""
    rev = engine.put({"_id": "a", "v": 1})["rev"]
    with pytest.raises(Conflict) as info:
        engine.put({"_id": "a", "v": 2})
    assert info.value.reason == "Document update conflict."
    assert engine.get("a")["_rev"] == rev


def test_rev_on_missing_doc_conflicts(engine: Any) -> None:
    """couch_db:prep_and_validate_updates: "old revs specified but none exist, a conflict"."""
    with pytest.raises(Conflict):
        engine.put({"_id": "new", "_rev": "1-" + H["a"], "v": 1})
    with pytest.raises(NotFound):
        engine.get("new")


def test_unknown_rev_on_existing_doc_conflicts(engine: Any) -> None:
    """A _rev that is not a leaf of the tree conflicts (couch_db prep_and_validate_update)."""
    engine.put({"_id": "a", "v": 1})
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_rev": "1-" + H["f"], "v": 2})
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_rev": "7-" + H["f"], "v": 2})


def test_revision_ids_are_deterministic(engine: Any) -> None:
    """couch_db:new_revid digests [deleted, parent pos, parent rev, body]: equal
    edits give equal revs, different bodies different revs (SEMANTICS §2.2)."""
    a = engine.put({"_id": "a", "same": True})["rev"]
    b = engine.put({"_id": "b", "same": True})["rev"]
    c = engine.put({"_id": "c", "same": False})["rev"]
    assert a == b and a != c
    a2 = engine.put({"_id": "a", "_rev": a, "n": 1})["rev"]
    b2 = engine.put({"_id": "b", "_rev": b, "n": 1})["rev"]
    assert a2 == b2


def new_rev_as_documented(
    parent: str | None, deleted: bool, body: dict[str, Any], atts: list[list[str]] | None = None
) -> str:
    """SEMANTICS §2.2's revision id: the md5 of msgpack ``[deleted, parent position,
    parent hash, body]`` (``0, ""`` for a first revision), with ``[name, content
    type, digest]`` of each attachment as a fifth element when there are any."""
    start, parent_hash = (0, "") if parent is None else (pos(parent), hash_of(parent))
    whole: list[Any] = [deleted, start, parent_hash, body, *([atts] if atts else [])]
    return f"{start + 1}-{hashlib.md5(msgpack.packb(whole, use_bin_type=True)).hexdigest()}"


def test_revision_ids_are_the_documented_digest(engine: Any) -> None:
    """couch_db:new_revid as SEMANTICS §2.2 adapts it, computed here from the
    formula: equal edits giving equal ids (above) does not pin what is digested,
    and spec.revs is shared by every settee implementation, so a digest that
    dropped a root's deleted flag or the attachments' digests passed every
    engine (found by mutation testing)."""
    first = engine.put({"_id": "a", "x": [1, "é"]})["rev"]
    assert first == new_rev_as_documented(None, False, {"x": [1, "é"]})
    second = engine.put({"_id": "a", "_rev": first, "x": 2})["rev"]
    assert second == new_rev_as_documented(first, False, {"x": 2})
    assert engine.delete("a", second)["rev"] == new_rev_as_documented(second, True, {})
    tombstone = engine.put({"_id": "t", "_deleted": True})["rev"]
    assert tombstone == new_rev_as_documented(None, True, {})
    with_att = engine.put({"_id": "b", "v": 1, "_attachments": {"x": _att(b"1")}})["rev"]
    digest = engine.get("b")["_attachments"]["x"]["digest"]
    assert with_att == new_rev_as_documented(None, False, {"v": 1}, [["x", "text/plain", digest]])


def test_get_missing_doc_is_not_found_missing(engine: Any) -> None:
    """GET of an unknown id: 404 {"error": "not_found", "reason": "missing"}."""
    with pytest.raises(NotFound) as info:
        engine.get("nope")
    assert info.value.reason == "missing"
    assert isinstance(info.value, KeyError)


def test_get_unknown_rev_is_missing(engine: Any) -> None:
    """GET ?rev= of a revision the tree does not hold: not_found missing."""
    engine.put({"_id": "a", "v": 1})
    with pytest.raises(NotFound) as info:
        engine.get("a", rev="1-" + H["0"])
    assert info.value.reason == "missing"
    with pytest.raises(NotFound) as info:
        engine.get("zzz", rev="1-" + H["0"])
    assert info.value.reason == "missing"


def test_get_old_revision_before_compaction(engine: Any) -> None:
    """Non-leaf revisions keep their bodies until compaction
    (api/document/common "rev" query parameter; SEMANTICS §6)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    assert engine.get("a", rev=r1) == {"_id": "a", "_rev": r1, "v": 1}
    assert engine.get("a", rev=r2) == {"_id": "a", "_rev": r2, "v": 2}


def test_revisions_shape(engine: Any) -> None:
    """?revs=true adds _revisions {"start": N, "ids": [newest..oldest hashes]}
    (api/document/common "Getting a List of Revisions")."""
    revs = [engine.put({"_id": "a", "v": 0})["rev"]]
    for n in range(1, 4):
        revs.append(engine.put({"_id": "a", "_rev": revs[-1], "v": n})["rev"])
    doc = engine.get("a", revs=True)
    assert doc["_revisions"] == {"start": 4, "ids": [hash_of(r) for r in reversed(revs)]}
    old = engine.get("a", rev=revs[1], revs=True)
    assert old["_revisions"] == {"start": 2, "ids": [hash_of(revs[1]), hash_of(revs[0])]}
    assert "_revisions" not in engine.get("a")


def test_body_values_round_trip(engine: Any) -> None:
    """JSON values are stored as given; tuples come back as lists (SEMANTICS §2.1)."""
    body = {
        "n": None,
        "t": True,
        "f": False,
        "i": -(2**63),
        "u": 2**64 - 1,
        "x": 1.5,
        "s": "é😀",
        "l": [1, [2, {"k": None}]],
        "tup": (1, 2),
        "d": {"": {"z": 0}},
    }
    rev = engine.put({"_id": "a", **body})["rev"]
    expected = {**body, "tup": [1, 2]}
    assert engine.get("a") == {"_id": "a", "_rev": rev, **expected}


def test_design_documents_are_ordinary_documents(engine: Any) -> None:
    """_design/ ids are valid and listed by _all_docs (couch_doc:validate_docid;
    api/database/bulk-api _all_docs includes design docs)."""
    rev = engine.put({"_id": "_design/app", "views": {}})["rev"]
    assert engine.get("_design/app")["_rev"] == rev
    assert [r["id"] for r in engine.all_docs()["rows"]] == ["_design/app"]
    assert engine.info()["doc_count"] == 1


def test_put_does_not_modify_its_argument(engine: Any) -> None:
    """The call never writes back into the caller's dict (SEMANTICS §1)."""
    doc = {"_id": "a", "v": [1]}
    engine.put(doc)
    assert doc == {"_id": "a", "v": [1]}


def test_results_are_copies(engine: Any) -> None:
    """Mutating what a read returned, or what was passed in, never changes the store
    (SEMANTICS §1)."""
    doc: dict[str, Any] = {"_id": "a", "v": [1], "d": {"k": 1}}
    rev = engine.put(doc)["rev"]
    doc["v"].append(2)
    doc["d"]["k"] = 99
    got = engine.get("a")
    got["v"].append(3)
    got["d"]["new"] = 1
    got["_rev"] = "x"
    rows = engine.all_docs(include_docs=True)["rows"]
    rows[0]["doc"]["v"].append(4)
    rows[0]["value"]["rev"] = "y"
    ch = engine.changes(include_docs=True)["results"]
    ch[0]["doc"]["v"].append(5)
    ch[0]["changes"][0]["rev"] = "z"
    assert engine.get("a") == {"_id": "a", "_rev": rev, "v": [1], "d": {"k": 1}}
    assert engine.all_docs()["rows"][0]["value"] == {"rev": rev}
    assert engine.changes()["results"][0]["changes"] == [{"rev": rev}]


def test_output_only_fields_are_ignored_on_input(engine: Any) -> None:
    """couch_doc:transfer_fields drops _conflicts, _deleted_conflicts, _revs_info and
    _local_seq, so a doc read with conflicts/revs can be written back."""
    rev = engine.put({"_id": "a", "v": 1, "_conflicts": ["1-" + H["a"]], "_local_seq": 3})["rev"]
    assert engine.get("a", conflicts=True) == {"_id": "a", "_rev": rev, "v": 1}
    doc = engine.get("a", revs=True, conflicts=True)
    doc["v"] = 2
    rev2 = engine.put(doc)["rev"]
    assert pos(rev2) == 2
    assert engine.get("a") == {"_id": "a", "_rev": rev2, "v": 2}


def test_non_ascii_ids_round_trip(engine: Any) -> None:
    """Ids are arbitrary Unicode strings (raw collation, couch_ejson_compare)."""
    ids = ["é", "😀", "日本", "a b/c?d", "\x00nul"]
    revs = seeded(engine, ids)
    for i in ids:
        assert engine.get(i) == {"_id": i, "_rev": revs[i], "v": i}


# --------------------------------------------------------------------------- delete


def test_delete_leaves_a_tombstone(engine: Any) -> None:
    """DELETE creates a deleted revision; GET then answers not_found "deleted"
    (api/document/common DELETE; bulk_docs_test.exs reason == "deleted")."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    res = engine.delete("a", r1)
    assert set(res) == {"ok", "id", "rev"} and res["ok"] is True and res["id"] == "a"
    assert REV_RE.match(res["rev"]) and pos(res["rev"]) == 2
    with pytest.raises(NotFound) as info:
        engine.get("a")
    assert info.value.reason == "deleted"
    assert engine.get("a", rev=res["rev"]) == {"_id": "a", "_rev": res["rev"], "_deleted": True}
    info2 = engine.info()
    assert (info2["doc_count"], info2["doc_del_count"]) == (0, 1)
    assert engine.all_docs()["rows"] == []
    (entry,) = engine.changes()["results"]
    assert entry["id"] == "a" and entry["deleted"] is True
    assert entry["changes"] == [{"rev": res["rev"]}]


def test_delete_missing_doc_is_not_found(engine: Any) -> None:
    """chttpd_db DELETE opens the doc first: unknown id -> 404 missing."""
    with pytest.raises(NotFound) as info:
        engine.delete("nope", "1-" + H["a"])
    assert info.value.reason == "missing"


def test_delete_deleted_doc_is_not_found_deleted(engine: Any) -> None:
    """chttpd_db DELETE opens the doc first: tombstone -> 404 deleted."""
    r1 = engine.put({"_id": "a"})["rev"]
    r2 = engine.delete("a", r1)["rev"]
    with pytest.raises(NotFound) as info:
        engine.delete("a", r2)
    assert info.value.reason == "deleted"


def test_delete_with_stale_or_no_rev_conflicts(engine: Any) -> None:
    """DELETE needs the current leaf rev, else 409 (api/document/common DELETE)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    with pytest.raises(Conflict):
        engine.delete("a", r1)
    with pytest.raises(Conflict):
        engine.delete("a", None)
    assert engine.get("a")["_rev"] == r2


def test_put_with_deleted_flag_deletes(engine: Any) -> None:
    """_deleted: true in a PUT/_bulk_docs body deletes (bulk_docs_test.exs)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "_deleted": True, "why": "gone"})["rev"]
    assert pos(r2) == 2
    with pytest.raises(NotFound):
        engine.get("a")
    assert engine.get("a", rev=r2) == {"_id": "a", "_rev": r2, "why": "gone", "_deleted": True}


def test_recreate_after_delete_continues_from_tombstone(engine: Any) -> None:
    """A PUT without _rev on a deleted doc extends the deleted branch
    (couch_db:prep_and_validate_update "reuse existing deleted doc")."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.delete("a", r1)["rev"]
    r3 = engine.put({"_id": "a", "v": 3})["rev"]
    assert pos(r3) == 3
    doc = engine.get("a", revs=True)
    assert doc["_revisions"] == {"start": 3, "ids": [hash_of(r3), hash_of(r2), hash_of(r1)]}
    assert (engine.info()["doc_count"], engine.info()["doc_del_count"]) == (1, 0)


def test_recreate_naming_the_tombstone_rev_conflicts(engine: Any) -> None:
    """A deleted doc is only recreated "from the root" (no _rev): naming even the
    tombstone conflicts (couch_db_updater:merge_rev_tree, "revision depth of 1
    ... and is also not deleted")."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.delete("a", r1)["rev"]
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_rev": r2, "v": 3})
    with pytest.raises(NotFound):
        engine.get("a")


def test_deleting_a_deleted_doc_without_rev_conflicts(engine: Any) -> None:
    """A tombstone written without _rev on a deleted doc is not a recreation
    (couch_db_updater:merge_rev_tree requires "not NewDeleted")."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    engine.delete("a", r1)
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_deleted": True})
    assert engine.changes()["results"][0]["changes"][0]["rev"] != r1


def test_bulk_docs_recreate_after_tombstone_in_same_call(engine: Any) -> None:
    """merge_rev_trees folds one id's entries in order: a create as tombstone
    followed by a create recreates from that tombstone."""
    res = engine.bulk_docs([{"_id": "a", "_deleted": True}, {"_id": "a", "v": 1}])
    assert res[0]["ok"] is True and res[1]["ok"] is True
    assert pos(res[0]["rev"]) == 1 and pos(res[1]["rev"]) == 2
    assert engine.get("a", revs=True)["_revisions"]["ids"] == [
        hash_of(res[1]["rev"]),
        hash_of(res[0]["rev"]),
    ]


def test_update_of_deleted_doc_with_old_rev_conflicts(engine: Any) -> None:
    """The pre-delete revision is no longer a leaf: conflict."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    engine.delete("a", r1)
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_rev": r1, "v": 2})


def test_create_as_tombstone(engine: Any) -> None:
    """A new doc with _deleted: true and no _rev is accepted (prep_and_validate_updates
    not_found + revs {0, []} -> ok) and stored as a deleted document."""
    rev = engine.put({"_id": "t", "_deleted": True})["rev"]
    assert pos(rev) == 1
    with pytest.raises(NotFound) as info:
        engine.get("t")
    assert info.value.reason == "deleted"
    assert (engine.info()["doc_count"], engine.info()["doc_del_count"]) == (0, 1)
    (entry,) = engine.changes()["results"]
    assert entry["deleted"] is True


# --------------------------------------------------------------------------- bulk_docs


def test_bulk_docs_results_in_order(engine: Any) -> None:
    """_bulk_docs answers one entry per doc in request order
    (api/database/bulk-api; bulk_docs_test.exs "create, update & delete")."""
    docs = [{"_id": str(i), "v": i} for i in (3, 1, 2)]
    res = engine.bulk_docs(docs)
    assert [r["id"] for r in res] == ["3", "1", "2"]
    assert all(r["ok"] is True and pos(r["rev"]) == 1 for r in res)
    upd = [{"_id": r["id"], "_rev": r["rev"], "v": "x"} for r in res]
    res2 = engine.bulk_docs(upd)
    assert all(pos(r["rev"]) == 2 for r in res2)
    dels = [{"_id": r["id"], "_rev": r["rev"], "_deleted": True} for r in res2]
    res3 = engine.bulk_docs(dels)
    assert all(pos(r["rev"]) == 3 for r in res3)
    for i in ("1", "2", "3"):
        with pytest.raises(NotFound):
            engine.get(i)


def test_bulk_docs_mixed_results(engine: Any) -> None:
    """A conflicting entry gets {"id", "error": "conflict", "reason"} and no rev;
    the others succeed (bulk_docs_test.exs "can detect conflicts")."""
    r = engine.put({"_id": "b", "v": 1})["rev"]
    engine.put({"_id": "b", "_rev": r, "v": 2})
    res = engine.bulk_docs(
        [{"_id": "a"}, {"_id": "b", "_rev": r, "v": 3}, {"_id": "c"}, {"_id": "b", "v": 4}]
    )
    assert res[0]["ok"] is True and res[2]["ok"] is True
    conflict = {"id": "b", "error": "conflict", "reason": "Document update conflict."}
    assert res[1] == conflict and res[3] == conflict
    assert engine.get("b")["v"] == 2


def test_bulk_docs_duplicate_ids_first_wins(engine: Any) -> None:
    """bulk_docs_test.exs "emits conflict error for duplicate doc `_id`s": the
    first entry is ok, the later duplicate conflicts."""
    docs = [{"_id": "0", "a": 0}, {"_id": "1", "a": 1}, {"_id": "1", "a": 2}, {"_id": "3", "a": 3}]
    res = engine.bulk_docs(docs)
    assert res[1]["id"] == "1" and res[1]["ok"] is True
    assert res[2] == {"id": "1", "error": "conflict", "reason": "Document update conflict."}
    assert res[0]["ok"] and res[3]["ok"]
    assert engine.get("1")["a"] == 1


def test_bulk_docs_update_and_delete_of_same_rev(engine: Any) -> None:
    """bulk_docs_test.exs "raises conflict error for combined update & delete":
    exactly one of two edits of the same parent succeeds (the first)."""
    rev = engine.put({"_id": "id", "val": "val"})["rev"]
    res = engine.bulk_docs(
        [
            {"_id": "id", "_rev": rev, "val": "newval"},
            {"_id": "id", "_rev": rev, "val": "val", "_deleted": True},
        ]
    )
    assert res[0]["ok"] is True and res[1]["error"] == "conflict"
    assert engine.get("id") == {"_id": "id", "_rev": res[0]["rev"], "val": "newval"}


def test_bulk_docs_cannot_name_rev_created_in_same_call(engine: Any) -> None:
    """Entries are validated against the state before the call
    (couch_db:prep_and_validate_updates), so naming a rev the same call creates
    conflicts even though revs are deterministic."""
    first = engine.put({"_id": "probe", "v": 1})["rev"]  # same body -> same rev below
    res = engine.bulk_docs([{"_id": "a", "v": 1}, {"_id": "a", "_rev": first, "v": 2}])
    assert res[0] == {"ok": True, "id": "a", "rev": first}
    assert res[1]["error"] == "conflict"


def test_bulk_docs_edits_of_two_leaves_in_one_call(engine: Any) -> None:
    """couch_db_updater:merge_rev_trees accepts several edits of one id when each
    extends a different leaf."""
    root = engine.put({"_id": "a", "v": 0})["rev"]
    replicate(engine, "a", ["2-" + H["1"], root])
    replicate(engine, "a", ["2-" + H["2"], root])
    res = engine.bulk_docs(
        [{"_id": "a", "_rev": "2-" + H["1"], "v": 1}, {"_id": "a", "_rev": "2-" + H["2"], "v": 2}]
    )
    assert res[0]["ok"] is True and res[1]["ok"] is True
    assert pos(res[0]["rev"]) == 3 and pos(res[1]["rev"]) == 3
    doc = engine.get("a", conflicts=True)
    assert {doc["_rev"], *doc["_conflicts"]} == {res[0]["rev"], res[1]["rev"]}


def test_bulk_docs_invalid_doc_rejects_whole_call(engine: Any) -> None:
    """The contract validates every doc first: one invalid doc -> BadRequest and
    nothing written (SEMANTICS §7; CouchDB would reject only that doc)."""
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "ok1"}, {"_id": ""}, {"_id": "ok2"}])
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "ok1"}, {"_id": "x", "_bad": 1}])
    assert engine.all_docs()["rows"] == [] and engine.changes()["results"] == []


def test_bulk_docs_empty_list(engine: Any) -> None:
    """An empty docs array is valid and answers [] (api/database/bulk-api)."""
    assert engine.bulk_docs([]) == []
    assert engine.bulk_docs([], new_edits=False) == []


# ------------------------------------------------------------ new_edits=False, winner, conflicts


def test_new_edits_false_stores_given_revisions(engine: Any) -> None:
    """new_edits=false stores the given rev and answers [] (successes omitted)
    (api/database/bulk-api "new_edits"; replication protocol)."""
    res = replicate(engine, "a", ["3-" + H["c"], "2-" + H["b"], "1-" + H["a"]], {"v": 3})
    assert res == []
    doc = engine.get("a", revs=True)
    assert doc == {
        "_id": "a",
        "_rev": "3-" + H["c"],
        "v": 3,
        "_revisions": {"start": 3, "ids": [H["c"], H["b"], H["a"]]},
    }


def test_new_edits_false_takes_free_form_revisions(engine: Any) -> None:
    """Replicators send revisions CouchDB stores as given: PouchDB's own tests write
    ``3-totally_fake_rev`` and ``1-`` (SEMANTICS §2.2). They are stored, win by
    position, are edited on top of, and named by get/delete/revs_diff."""
    assert replicate(engine, "a", ["3-totally_fake_rev", "2-A.b~c", "1-"], {"v": 1}) == []
    doc = engine.get("a", revs=True)
    assert doc["_rev"] == "3-totally_fake_rev"
    assert doc["_revisions"] == {"start": 3, "ids": ["totally_fake_rev", "A.b~c", ""]}
    assert engine.get("a", rev="3-totally_fake_rev")["v"] == 1
    child = engine.put({"_id": "a", "_rev": "3-totally_fake_rev", "v": 2})["rev"]
    assert pos(child) == 4 and engine.get("a")["_rev"] == child
    assert engine.revs_diff({"a": ["1-", "2-nope"]}) == {"a": {"missing": ["2-nope"]}}
    assert engine.bulk_docs([{"_id": "b", "_rev": "1-"}], new_edits=False) == []
    assert engine.delete("b", "1-")["ok"] is True
    longest = "1-" + "z" * 255
    assert engine.bulk_docs([{"_id": "c", "_rev": longest}], new_edits=False) == []
    assert engine.get("c")["_rev"] == longest


def test_new_edits_false_creates_conflicts(engine: Any) -> None:
    """all_docs_test.exs "Add conflicts": two new_edits=false revs at position 2
    make a doc with two conflicts; the winner is the highest rev."""
    r1 = engine.put({"_id": "3", "a": 4})["rev"]
    r2 = engine.put({"_id": "3", "_rev": r1, "a": 5})["rev"]
    c1 = "2-aa01552213fafa022e6167113ed01087"
    c2 = "2-ff01552213fafa022e6167113ed01087"
    assert engine.bulk_docs([{"_id": "3", "_rev": c1, "value": "X"}], new_edits=False) == []
    assert engine.bulk_docs([{"_id": "3", "_rev": c2, "value": "Z"}], new_edits=False) == []
    leaves = sorted([r2, c1, c2], key=lambda r: (pos(r), hash_of(r)), reverse=True)
    doc = engine.get("3", conflicts=True)
    assert doc["_rev"] == leaves[0]
    assert doc["_conflicts"] == leaves[1:]
    (row,) = engine.all_docs()["rows"]
    assert row["value"] == {"rev": leaves[0]}
    (entry,) = engine.changes()["results"]
    assert entry["changes"] == [{"rev": leaves[0]}]


def test_an_edit_may_extend_a_deleted_losing_leaf(engine: Any) -> None:
    """§4/§5: ``_rev`` may name any leaf of a live document, a deleted losing one too
    (couch_db_updater:merge_rev_tree: the edit extends a leaf), so put and delete of
    a tombstone leaf beside a live winner make its child (found by mutation testing:
    an engine refusing them passed the suite and the machine, which never drew a
    deleted losing leaf to edit)."""
    replicate(engine, "a", ["2-" + H["a"], "1-" + H["0"]], {"live": True})
    replicate(engine, "a", ["2-" + H["9"], "1-" + H["0"]], deleted=True)
    assert engine.get("a") == {"_id": "a", "_rev": "2-" + H["a"], "live": True}
    edited = engine.put({"_id": "a", "_rev": "2-" + H["9"], "back": 1})["rev"]
    assert pos(edited) == 3
    assert engine.get("a", rev=edited, revs=True)["_revisions"] == {
        "start": 3,
        "ids": [hash_of(edited), H["9"], H["0"]],
    }
    assert engine.get("a", conflicts=True)["_conflicts"] == ["2-" + H["a"]]
    replicate(engine, "b", ["2-" + H["a"], "1-" + H["0"]], {"live": True})
    replicate(engine, "b", ["2-" + H["9"], "1-" + H["0"]], deleted=True)
    tomb = engine.delete("b", "2-" + H["9"])["rev"]
    assert pos(tomb) == 3
    assert engine.get("b", rev=tomb) == {"_id": "b", "_rev": tomb, "_deleted": True}
    assert engine.get("b") == {"_id": "b", "_rev": "2-" + H["a"], "live": True}


def test_recreation_extends_the_winning_tombstone_of_equal_positions(engine: Any) -> None:
    """§4: a create over a deleted document extends the *winning* tombstone; with two
    at one position that is the larger hash, whichever was stored first (found by
    mutation testing: an engine taking the first highest tombstone it met passed)."""
    replicate(engine, "a", ["1-" + H["3"]], deleted=True)
    replicate(engine, "a", ["1-" + H["9"]], deleted=True)
    replicate(engine, "a", ["1-" + H["5"]], deleted=True)
    rev = engine.put({"_id": "a", "v": 1})["rev"]
    assert engine.get("a", revs=True)["_revisions"] == {"start": 2, "ids": [hash_of(rev), H["9"]]}


def test_winner_deep_branch_beats_wide(engine: Any) -> None:
    """The winner is the leaf with the highest position, whatever its hash
    (couch_key_tree / couch_doc:to_doc_info sort by {not deleted, pos, rev})."""
    replicate(engine, "a", ["3-" + H["1"], "2-" + H["1"], "1-" + H["0"]], {"b": "deep"})
    replicate(engine, "a", ["2-" + H["f"], "1-" + H["0"]], {"b": "wide1"})
    replicate(engine, "a", ["2-" + H["e"], "1-" + H["0"]], {"b": "wide2"})
    doc = engine.get("a", conflicts=True)
    assert doc["_rev"] == "3-" + H["1"] and doc["b"] == "deep"
    assert doc["_conflicts"] == ["2-" + H["f"], "2-" + H["e"]]


def test_winner_tie_broken_by_larger_hash(engine: Any) -> None:
    """Equal positions: the larger revision hash wins (couch_key_tree ordering)."""
    replicate(engine, "a", ["2-" + H["3"], "1-" + H["0"]], {"b": 3})
    replicate(engine, "a", ["2-" + H["9"], "1-" + H["0"]], {"b": 9})
    replicate(engine, "a", ["2-" + H["5"], "1-" + H["0"]], {"b": 5})
    doc = engine.get("a", conflicts=True)
    assert (doc["_rev"], doc["b"]) == ("2-" + H["9"], 9)
    assert doc["_conflicts"] == ["2-" + H["5"], "2-" + H["3"]]


def test_live_leaf_beats_longer_deleted_branch(engine: Any) -> None:
    """Non-deleted leaves win over deleted ones regardless of depth
    (couch_doc:to_doc_info; docs.couchdb.org replication/conflicts "winning rev")."""
    replicate(engine, "a", ["2-" + H["a"], "1-" + H["0"]], {"live": True})
    replicate(engine, "a", ["4-" + H["f"], "3-" + H["f"], "2-" + H["f"], "1-" + H["0"]], {})
    replicate(engine, "a", ["5-" + H["f"], "4-" + H["f"]], deleted=True)
    doc = engine.get("a", conflicts=True)
    assert doc == {"_id": "a", "_rev": "2-" + H["a"], "live": True}  # deleted leaf not a conflict
    assert engine.all_docs()["rows"][0]["value"] == {"rev": "2-" + H["a"]}
    (entry,) = engine.changes()["results"]
    assert "deleted" not in entry and entry["changes"] == [{"rev": "2-" + H["a"]}]
    assert (engine.info()["doc_count"], engine.info()["doc_del_count"]) == (1, 0)


def test_all_leaves_deleted_winner_is_highest_tombstone(engine: Any) -> None:
    """With only deleted leaves the doc is deleted; the winner is the highest
    deleted leaf (couch_doc:to_doc_info)."""
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], deleted=True)
    replicate(engine, "a", ["3-" + H["2"], "2-" + H["2"], "1-" + H["0"]], deleted=True)
    with pytest.raises(NotFound) as info:
        engine.get("a")
    assert info.value.reason == "deleted"
    assert engine.get("a", rev="3-" + H["2"])["_deleted"] is True
    (entry,) = engine.changes()["results"]
    assert entry["deleted"] is True and entry["changes"] == [{"rev": "3-" + H["2"]}]
    assert engine.all_docs(keys=["a"])["rows"][0]["value"] == {
        "rev": "3-" + H["2"],
        "deleted": True,
    }


def test_conflicts_absent_when_none(engine: Any) -> None:
    """_conflicts is only emitted when there are conflicts (couch_doc:to_json_obj)."""
    engine.put({"_id": "a"})
    assert "_conflicts" not in engine.get("a", conflicts=True)


def test_conflicts_only_with_the_winner(engine: Any) -> None:
    """conflicts=True adds _conflicts when the winner is read (rev=None); with an
    explicit rev, winner or loser, it is ignored (SEMANTICS §6, CouchDB's open_revs
    path). A get that added them with a rev passed the fast gate (found by mutation
    testing)."""
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["0"]], {"v": 2})
    assert engine.get("a", conflicts=True)["_conflicts"] == ["2-" + H["1"]]
    for rev, v in (("2-" + H["2"], 2), ("2-" + H["1"], 1)):
        assert engine.get("a", rev=rev, conflicts=True) == {"_id": "a", "_rev": rev, "v": v}


def test_resolve_conflict_by_deleting_loser(engine: Any) -> None:
    """Deleting the losing leaf resolves the conflict (docs.couchdb.org
    replication/conflicts "Working with conflicting documents")."""
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["0"]], {"v": 2})
    assert engine.get("a", conflicts=True)["_conflicts"] == ["2-" + H["1"]]
    res = engine.delete("a", "2-" + H["1"])
    assert pos(res["rev"]) == 3
    doc = engine.get("a", conflicts=True)
    assert doc == {"_id": "a", "_rev": "2-" + H["2"], "v": 2}


def test_losing_leaf_can_be_updated_and_win(engine: Any) -> None:
    """Any leaf may be edited; the winner is then recomputed (couch_db leaf check)."""
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["0"]], {"v": 2})
    r3 = engine.put({"_id": "a", "_rev": "2-" + H["1"], "v": 3})["rev"]
    doc = engine.get("a", conflicts=True)
    assert doc["_rev"] == r3 and doc["_conflicts"] == ["2-" + H["2"]]


def test_new_edits_false_known_revision_is_a_no_op(engine: Any) -> None:
    """Merging revisions the tree already holds changes nothing, so no new
    change is recorded (couch_key_tree:merge returns the same tree)."""
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["1"]], {"v": 2})
    token = engine.changes()["last_seq"]
    assert replicate(engine, "a", ["2-" + H["2"], "1-" + H["1"]], {"v": "other"}) == []
    assert engine.changes(since=token)["results"] == []
    assert engine.get("a")["v"] == 2


def test_new_edits_false_extends_existing_branch(engine: Any) -> None:
    """A replicated path that continues a local leaf extends it (no conflict)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    replicate(engine, "a", ["3-" + H["3"], "2-" + H["2"], r1], {"v": 3})
    doc = engine.get("a", revs=True, conflicts=True)
    assert doc["_rev"] == "3-" + H["3"] and "_conflicts" not in doc
    assert doc["_revisions"]["ids"] == [H["3"], H["2"], hash_of(r1)]


def test_new_edits_false_stops_at_a_known_revision_of_another_parent(engine: Any) -> None:
    """A path naming a known revision under another parent than the tree's keeps
    the tree's ancestry: the merge stops there, so the path's older revisions are
    not added (spec.revtree.merge_path; the flat tree holds a revision once). Found
    by mutation testing: a merge that went on added them as a new root, a live leaf
    with no body, and passed every engine (merge_path is shared by all of them)."""
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["1"]], {"v": 2})
    replicate(engine, "a", ["3-" + H["3"], "2-" + H["2"], "1-" + H["f"]], {"v": 3})
    doc = engine.get("a", revs=True, conflicts=True)
    assert doc["_rev"] == "3-" + H["3"] and "_conflicts" not in doc
    assert doc["_revisions"]["ids"] == [H["3"], H["2"], H["1"]]
    assert engine.revs_diff({"a": ["1-" + H["f"]]}) == {"a": {"missing": ["1-" + H["f"]]}}


def test_new_edits_false_with_only_rev(engine: Any) -> None:
    """_rev without _revisions is a one-node path (couch_doc:from_json_obj)."""
    assert engine.bulk_docs([{"_id": "a", "_rev": "5-" + H["5"], "v": 5}], new_edits=False) == []
    doc = engine.get("a", revs=True)
    assert doc["_rev"] == "5-" + H["5"]
    assert doc["_revisions"] == {"start": 5, "ids": [H["5"]]}


# --------------------------------------------------------------------------- _all_docs


@pytest.fixture
def abcde(engine: Any) -> dict[str, str]:
    return seeded(engine, ["c", "a", "e", "b", "d"])


def rows_ids(res: dict[str, Any]) -> list[str]:
    return [r["id"] for r in res["rows"]]


def test_all_docs_sorted_with_total_rows_and_offset(engine: Any, abcde: dict[str, str]) -> None:
    """_all_docs lists live docs sorted by id with total_rows and offset 0
    (all_docs_test.exs; api/database/bulk-api _all_docs)."""
    res = engine.all_docs()
    assert res["total_rows"] == 5 and res["offset"] == 0
    assert res["rows"] == [{"id": i, "key": i, "value": {"rev": abcde[i]}} for i in "abcde"]


def test_all_docs_offset_of_startkey(engine: Any) -> None:
    """all_docs_test.exs: startkey "2" over ids 0..3 gives offset 2."""
    seeded(engine, ["0", "3", "1", "2"])
    res = engine.all_docs(startkey="2")
    assert res["offset"] == 2 and rows_ids(res) == ["2", "3"] and res["total_rows"] == 4


def test_all_docs_startkey_endkey_inclusive(engine: Any, abcde: dict[str, str]) -> None:
    """startkey and endkey are both inclusive by default (api/ddoc/views
    "inclusive_end" default true)."""
    assert rows_ids(engine.all_docs(startkey="b", endkey="d")) == ["b", "c", "d"]
    assert rows_ids(engine.all_docs(startkey="bb", endkey="dd")) == ["c", "d"]
    assert rows_ids(engine.all_docs(endkey="b")) == ["a", "b"]
    assert rows_ids(engine.all_docs(startkey="d")) == ["d", "e"]


def test_all_docs_inclusive_end_false(engine: Any, abcde: dict[str, str]) -> None:
    """inclusive_end=false excludes the endkey row only (couch_mrview_util
    ad_ekey_opts end_key_gt)."""
    res = engine.all_docs(startkey="b", endkey="d", inclusive_end=False)
    assert rows_ids(res) == ["b", "c"] and res["offset"] == 1
    assert rows_ids(engine.all_docs(startkey="b", endkey="b", inclusive_end=False)) == []


def test_all_docs_descending(engine: Any, abcde: dict[str, str]) -> None:
    """descending=true reverses the order (all_docs_test.exs; api/ddoc/views)."""
    res = engine.all_docs(descending=True)
    assert rows_ids(res) == ["e", "d", "c", "b", "a"]
    assert res["total_rows"] == 5 and res["offset"] == 0


def test_all_docs_descending_swaps_start_and_end(engine: Any, abcde: dict[str, str]) -> None:
    """With descending=true startkey is the high bound and endkey the low one
    (api/ddoc/views "Reversing the Order": the keys swap roles)."""
    res = engine.all_docs(startkey="d", endkey="b", descending=True)
    assert rows_ids(res) == ["d", "c", "b"]
    assert res["offset"] == 1  # "e" precedes "d" in descending order
    res = engine.all_docs(startkey="dd", endkey="bb", descending=True)
    assert rows_ids(res) == ["d", "c"] and res["offset"] == 1
    assert rows_ids(engine.all_docs(startkey="c", descending=True)) == ["c", "b", "a"]
    assert rows_ids(engine.all_docs(endkey="c", descending=True)) == ["e", "d", "c"]


def test_all_docs_descending_inclusive_end_false(engine: Any, abcde: dict[str, str]) -> None:
    """inclusive_end=false with descending excludes the low bound (endkey)."""
    res = engine.all_docs(startkey="d", endkey="b", descending=True, inclusive_end=False)
    assert rows_ids(res) == ["d", "c"]


def test_all_docs_reversed_range_is_empty_not_an_error(engine: Any, abcde: dict[str, str]) -> None:
    """_all_docs does not run couch_mrview_util:check_range, so reversed bounds
    just match nothing."""
    res = engine.all_docs(startkey="d", endkey="b")
    assert res["rows"] == [] and res["total_rows"] == 5
    assert engine.all_docs(startkey="b", endkey="d", descending=True)["rows"] == []


def test_all_docs_skip_limit_offset(engine: Any, abcde: dict[str, str]) -> None:
    """offset = docs before the start + skip, capped at total_rows
    (fabric_view_all_docs: erlang:min(Total, Offset + Skip))."""
    res = engine.all_docs(skip=1, limit=2)
    assert rows_ids(res) == ["b", "c"] and res["offset"] == 1
    res = engine.all_docs(startkey="b", skip=2, limit=10)
    assert rows_ids(res) == ["d", "e"] and res["offset"] == 3
    res = engine.all_docs(descending=True, startkey="d", skip=1, limit=2)
    assert rows_ids(res) == ["c", "b"] and res["offset"] == 2
    res = engine.all_docs(startkey="c", skip=10)
    assert res["rows"] == [] and res["offset"] == 5


def test_all_docs_limit_zero(engine: Any, abcde: dict[str, str]) -> None:
    """limit=0 returns no rows but the same metadata (api/ddoc/views "limit")."""
    res = engine.all_docs(limit=0, startkey="c")
    assert res == {"total_rows": 5, "offset": 2, "rows": []}


def test_all_docs_offset_counts_only_live_docs(engine: Any, abcde: dict[str, str]) -> None:
    """Deleted docs are neither rows nor counted in total_rows/offset
    (couch_mrview all_docs_reduce_to_count; doc_count)."""
    engine.delete("b", abcde["b"])
    res = engine.all_docs(startkey="d")
    assert res["total_rows"] == 4 and res["offset"] == 2 and rows_ids(res) == ["d", "e"]
    res = engine.all_docs(startkey="a", descending=True)
    assert res["offset"] == 3 and rows_ids(res) == ["a"]


def test_all_docs_offset_does_not_depend_on_endkey(engine: Any, abcde: dict[str, str]) -> None:
    """Each shard reports the count before its first row; an empty range still
    reports the count before startkey (fabric_view_all_docs meta handling)."""
    res = engine.all_docs(startkey="bb", endkey="bc")
    assert res["rows"] == [] and res["offset"] == 2


def test_all_docs_include_docs(engine: Any, abcde: dict[str, str]) -> None:
    """include_docs adds the winning doc to each row (api/database/bulk-api)."""
    res = engine.all_docs(startkey="b", limit=1, include_docs=True)
    assert res["rows"] == [
        {
            "id": "b",
            "key": "b",
            "value": {"rev": abcde["b"]},
            "doc": {"_id": "b", "_rev": abcde["b"], "v": "b"},
        }
    ]
    assert "doc" not in engine.all_docs()["rows"][0]


def test_all_docs_include_docs_both_ways(engine: Any, abcde: dict[str, str]) -> None:
    """Every row of a range, ascending or descending, skipped into or not, carries its
    own document. Found by mutation testing: a merge that picked each shard's rows for
    their bodies as if every range were ascending passed (``made_the_cut_ascending_only``),
    as the suite's one include_docs range was ascending."""
    for descending in (False, True):
        for skip in (0, 1):
            rows = engine.all_docs(include_docs=True, descending=descending, skip=skip)["rows"]
            want = sorted(abcde, reverse=descending)[skip:]
            assert [r["id"] for r in rows] == want
            assert [(r["doc"]["_id"], r["doc"]["_rev"]) for r in rows] == [
                (i, abcde[i]) for i in want
            ]


def test_all_docs_keys_keep_order_and_duplicates(engine: Any, abcde: dict[str, str]) -> None:
    """keys= answers one row per key in the requested order, duplicates included,
    offset null (fabric_view_all_docs:go with keys; "offset": null)."""
    res = engine.all_docs(keys=["d", "a", "d", "c"])
    assert rows_ids(res) == ["d", "a", "d", "c"]
    assert res["total_rows"] == 5 and res["offset"] is None
    assert res["rows"][0] == {"id": "d", "key": "d", "value": {"rev": abcde["d"]}}


def test_all_docs_keys_descending_skips_the_reversed_list(
    engine: Any, abcde: dict[str, str]
) -> None:
    """descending=True reverses the asked keys, then skip and limit cut that list
    (SEMANTICS.md §8.2, fabric_view_all_docs:go with keys). Found by mutation testing:
    an engine that cut the keys first, then reversed them, passed the semantic suite."""
    res = engine.all_docs(keys=["a", "b", "c", "d", "zz"], descending=True, skip=1, limit=2)
    assert [row["key"] for row in res["rows"]] == ["d", "c"]


def test_all_docs_keys_unknown_id(engine: Any, abcde: dict[str, str]) -> None:
    """An unknown key gives {"key", "error": "not_found"} (fabric_view_all_docs
    open_doc_int not_found -> #view_row{key=Id}; api/database/bulk-api)."""
    res = engine.all_docs(keys=["a", "zz"], include_docs=True)
    assert res["rows"][1] == {"key": "zz", "error": "not_found"}
    assert res["rows"][0]["doc"] == {"_id": "a", "_rev": abcde["a"], "v": "a"}


def test_all_docs_keys_deleted_id(engine: Any, abcde: dict[str, str]) -> None:
    """A deleted key gives value {"rev", "deleted": true} and doc null
    (all_docs_test.exs "Test _all_docs with keys"; fabric_view_all_docs)."""
    tomb = engine.delete("c", abcde["c"])["rev"]
    res = engine.all_docs(keys=["c"], include_docs=True)
    assert res["rows"] == [
        {"id": "c", "key": "c", "value": {"rev": tomb, "deleted": True}, "doc": None}
    ]
    res = engine.all_docs(keys=["c"])
    assert res["rows"] == [{"id": "c", "key": "c", "value": {"rev": tomb, "deleted": True}}]


def test_all_docs_keys_descending_reverses(engine: Any, abcde: dict[str, str]) -> None:
    """fabric_view_all_docs:go reverses the keys list when descending."""
    res = engine.all_docs(keys=["b", "zz", "a", "e"], descending=True)
    assert [r["key"] for r in res["rows"]] == ["e", "a", "zz", "b"]


def test_all_docs_keys_skip_and_limit(engine: Any, abcde: dict[str, str]) -> None:
    """Skip and limit apply to the keys list (fabric_view_all_docs nthtail/sublist)."""
    res = engine.all_docs(keys=["e", "a", "zz", "b", "c"], skip=1, limit=3)
    assert [r["key"] for r in res["rows"]] == ["a", "zz", "b"]
    assert res["offset"] is None
    assert engine.all_docs(keys=["a", "b"], skip=5)["rows"] == []
    assert engine.all_docs(keys=[])["rows"] == []


def test_all_docs_code_point_order(engine: Any) -> None:
    """_all_docs uses raw collation: UTF-8 bytes = code points, so "Z" < "a" <
    "é" < "ﬀ" (U+FB00) < "😀" (U+1F600), unlike UTF-16 order
    (all_docs_test.exs "queries may assume raw collation")."""
    ids = ["😀", "a", "é", "ﬀ", "Z", "aa", "A", "0"]
    seeded(engine, ids)
    expected = ["0", "A", "Z", "a", "aa", "é", "ﬀ", "😀"]
    assert rows_ids(engine.all_docs()) == expected
    assert rows_ids(engine.all_docs(descending=True)) == expected[::-1]
    assert rows_ids(engine.all_docs(startkey="b")) == ["é", "ﬀ", "😀"]
    assert rows_ids(engine.all_docs(startkey="Z", endkey="Z")) == ["Z"]
    assert engine.all_docs(startkey="\ufb01")["offset"] == 7


def test_all_docs_raw_collation_range(engine: Any) -> None:
    """all_docs_test.exs: startkey "org.couchdb.user:" endkey "org.couchdb.user;"
    matches nothing when no such ids exist; ids inside the range match."""
    seeded(engine, ["0", "1", "org.couchdb.user:bob", "org.couchdb.userx"])
    res = engine.all_docs(startkey="org.couchdb.user:", endkey="org.couchdb.user;")
    assert rows_ids(res) == ["org.couchdb.user:bob"]


def test_all_docs_value_is_winner_of_conflicted_doc(engine: Any) -> None:
    """all_docs_test.exs: the row's value.rev is the winning revision."""
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["0"]], {"v": 2})
    (row,) = engine.all_docs(include_docs=True)["rows"]
    assert row["value"] == {"rev": "2-" + H["2"]}
    assert row["doc"] == {"_id": "a", "_rev": "2-" + H["2"], "v": 2}


# --------------------------------------------------------------------------- _changes


def test_changes_each_doc_once_at_latest(engine: Any) -> None:
    """_changes lists every doc once with its latest (winning) rev
    (api/database/changes; all_docs_test.exs "seq num should be different")."""
    revs = seeded(engine, ["a", "b", "c"])
    first = {c["id"]: c["seq"] for c in engine.changes()["results"]}
    r2 = engine.put({"_id": "b", "_rev": revs["b"], "v": 2})["rev"]
    r3 = engine.put({"_id": "b", "_rev": r2, "v": 3})["rev"]
    res = engine.changes()
    assert sorted(ids_of(res)) == ["a", "b", "c"]
    by_id = {c["id"]: c for c in res["results"]}
    assert by_id["b"]["changes"] == [{"rev": r3}]
    assert by_id["a"]["changes"] == [{"rev": revs["a"]}]
    assert by_id["b"]["seq"] != first["b"]
    assert all("deleted" not in c for c in res["results"])


def test_changes_deleted_flag(engine: Any) -> None:
    """A deleted doc appears with "deleted": true (all_docs_test.exs
    "deletions also show up right")."""
    revs = seeded(engine, ["0", "1", "2", "3"])
    engine.delete("1", revs["1"])
    res = engine.changes()["results"]
    assert len(res) == 4
    deleted = [c["id"] for c in res if c.get("deleted")]
    assert deleted == ["1"]


def test_changes_include_docs(engine: Any) -> None:
    """include_docs adds the winning doc, tombstones included
    (all_docs_test.exs deleted_doc["doc"]["_deleted"])."""
    revs = seeded(engine, ["a", "b"])
    tomb = engine.delete("b", revs["b"])["rev"]
    by_id = {c["id"]: c for c in engine.changes(include_docs=True)["results"]}
    assert by_id["a"]["doc"] == {"_id": "a", "_rev": revs["a"], "v": "a"}
    assert by_id["b"]["doc"] == {"_id": "b", "_rev": tomb, "_deleted": True}
    assert "doc" not in engine.changes()["results"][0]


def test_changes_entry_shape(engine: Any) -> None:
    """Entry keys: seq, id, changes[{rev}] (+deleted) (api/database/changes)."""
    rev = engine.put({"_id": "a"})["rev"]
    res = engine.changes()
    assert set(res) == {"results", "last_seq"}
    (entry,) = res["results"]
    assert set(entry) == {"seq", "id", "changes"}
    assert entry["changes"] == [{"rev": rev}]


def test_changes_since_last_seq_is_empty(engine: Any) -> None:
    """Resuming from last_seq with no new writes returns nothing, and later
    writes only (api/database/changes "since")."""
    seeded(engine, ["a", "b"])
    last = engine.changes()["last_seq"]
    assert engine.changes(since=last)["results"] == []
    engine.put({"_id": "c"})
    assert ids_of(engine.changes(since=last)) == ["c"]


def test_changes_since_the_string_zero_is_since_zero(engine: Any) -> None:
    """§9: ``since="0"`` is CouchDB's HTTP spelling of 0, the whole feed (found by
    mutation testing: an engine reading it as "now" passed)."""
    engine.put({"_id": "a"})
    engine.put({"_id": "b"})
    assert sorted(ids_of(engine.changes(since="0"))) == ["a", "b"]
    assert ids_of(engine.changes(since="0", limit=1)) == ids_of(engine.changes(limit=1))


def test_changes_since_now(engine: Any) -> None:
    """since=now starts at the current sequence (api/database/changes)."""
    revs = seeded(engine, ["a", "b"])
    res = engine.changes(since="now")
    assert res["results"] == []
    engine.put({"_id": "a", "_rev": revs["a"], "v": 2})
    assert ids_of(engine.changes(since=res["last_seq"])) == ["a"]


def test_changes_since_info_update_seq(engine: Any) -> None:
    """info().update_seq is a valid since token (api/database/common update_seq)."""
    seeded(engine, ["a"])
    token = engine.info()["update_seq"]
    assert engine.changes(since=token)["results"] == []
    engine.put({"_id": "b"})
    assert ids_of(engine.changes(since=token)) == ["b"]


def test_changes_resume_from_any_row_never_misses(engine: Any) -> None:
    """Resuming from any seq a row carried never misses a later change
    (api/database/changes; fabric_view_changes packed seqs)."""
    ids = [f"d{i}" for i in range(8)]
    revs = seeded(engine, ids)
    rows = engine.changes()["results"]
    assert sorted(c["id"] for c in rows) == ids
    for i, row in enumerate(rows):
        seen = {c["id"] for c in rows[: i + 1]}
        rest = set(ids_of(engine.changes(since=row["seq"])))
        assert seen | rest == set(ids)
    engine.put({"_id": "d0", "_rev": revs["d0"], "v": "new"})
    for row in rows:
        assert "d0" in ids_of(engine.changes(since=row["seq"]))


def test_changes_resume_from_every_row_of_a_long_feed(engine: Any) -> None:
    """The same over a feed long enough that sequences pass a byte and a token's
    bytes take every value (settee's tokens are base64url, whose alphabet holds
    ``-``: a token split at its last ``-`` rather than its first lost its seqs from
    sequence 190 on)."""
    ids = [f"d{i:03}" for i in range(300)]
    engine.bulk_docs([{"_id": i} for i in ids])
    rows = engine.changes()["results"]
    assert sorted(c["id"] for c in rows) == ids
    for i, row in enumerate(rows):
        rest = set(ids_of(engine.changes(since=row["seq"])))
        assert rest >= {c["id"] for c in rows[i + 1 :]}, row["seq"]


def test_changes_limit_pages_cover_everything_once(engine: Any) -> None:
    """Paging with limit and since=last_seq returns every doc exactly once
    (api/database/changes "limit"; SEMANTICS §9)."""
    ids = [f"d{i:02}" for i in range(11)]
    seeded(engine, ids)
    seen: list[str] = []
    since: Any = 0
    for _ in range(20):
        page = engine.changes(since=since, limit=3)
        assert len(page["results"]) <= 3
        if not page["results"]:
            break
        assert page["last_seq"] == page["results"][-1]["seq"] or len(page["results"]) < 3
        seen += ids_of(page)
        since = page["last_seq"]
    assert sorted(seen) == ids


def test_changes_limit_last_seq_is_last_row_seq(engine: Any) -> None:
    """When limit cuts the feed, last_seq is the seq of the last row sent
    (couch_changes / fabric_view_changes)."""
    seeded(engine, ["a", "b", "c", "d"])
    res = engine.changes(limit=2)
    assert len(res["results"]) == 2
    assert res["last_seq"] == res["results"][-1]["seq"]


def test_changes_limit_zero_returns_nothing(engine: Any) -> None:
    """limit=0 returns no rows and does not advance: CouchDB 3.5 answers
    {"results": [], "last_seq": <since>} (apache/couchdb issue #6088; PR #6089
    removed the docs' "same effect as 1" note)."""
    seeded(engine, ["a", "b", "c"])
    res = engine.changes(limit=0)
    assert res["results"] == []
    assert sorted(ids_of(engine.changes(since=res["last_seq"]))) == ["a", "b", "c"]
    token = engine.changes()["last_seq"]
    engine.put({"_id": "d"})
    res = engine.changes(since=token, limit=0)
    assert res["results"] == []
    assert ids_of(engine.changes(since=res["last_seq"])) == ["d"]
    assert len(engine.changes(limit=1)["results"]) == 1


def test_changes_refuses_a_token_of_a_database_further_along(opener: Any, engine: Any) -> None:
    """A token is this database's (SEMANTICS.md §9): one of another database that
    has made more changes (here: of a second database given the same writes and
    then more) is a BadRequest. Found in review: the engine took any vector of
    its shape, and the changes it answered then skipped this database's next writes."""
    other = opener.open(opener.path + "-other")
    for db in (engine, other):
        db.bulk_docs([{"_id": f"d{n}"} for n in range(8)])
    other.bulk_docs([{"_id": f"later{n}"} for n in range(64)])
    foreign = other.info()["update_seq"]
    with pytest.raises(BadRequest):
        engine.changes(since=foreign)
    before = engine.info()["update_seq"]
    engine.put({"_id": "after"})
    assert ids_of(engine.changes(since=before)) == ["after"]


def test_changes_order_single_shard(opener: Any, engine: Any) -> None:
    """With one shard (or the reference) the feed is ordered by each doc's
    latest change (all_docs.js "docs show up in the seq view in the order they
    were created"). Cross-shard order is not global, so not asserted there."""
    if not single_shard(opener):
        pytest.skip("total changes order is only defined for shards=1")
    revs = seeded(engine, ["0", "3", "1", "2"])
    assert ids_of(engine.changes()) == ["0", "3", "1", "2"]
    engine.put({"_id": "3", "_rev": revs["3"], "v": 9})
    assert ids_of(engine.changes()) == ["0", "1", "2", "3"]
    assert ids_of(engine.changes(limit=2)) == ["0", "1"]


def test_changes_losing_branch_edit_moves_doc(engine: Any) -> None:
    """Any revision added (even to a losing branch) is a change; the entry shows the
    winner (couch_db_updater assigns a new update_seq to the doc)."""
    replicate(engine, "a", ["2-" + H["9"], "1-" + H["0"]], {"v": 9})
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    token = engine.changes()["last_seq"]
    engine.delete("a", "2-" + H["1"])
    res = engine.changes(since=token)["results"]
    assert [c["id"] for c in res] == ["a"]
    assert res[0]["changes"] == [{"rev": "2-" + H["9"]}] and "deleted" not in res[0]


# --------------------------------------------------------------------------- _revs_diff


def test_revs_diff_known_revs_are_omitted(engine: Any) -> None:
    """Docs with nothing missing are left out (api/database/misc _revs_diff;
    fabric_rpc get_missing_revs)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    assert engine.revs_diff({"a": [r1, r2]}) == {}
    assert engine.revs_diff({}) == {}


def test_revs_diff_missing_and_possible_ancestors(engine: Any) -> None:
    """A missing rev above a leaf lists that leaf as possible ancestor
    (couch_db:possible_ancestors: leaves with pos < max missing pos)."""
    revs = [engine.put({"_id": "bbb", "foo": 1})["rev"]]
    for n in range(2, 5):
        revs.append(engine.put({"_id": "bbb", "_rev": revs[-1], "foo": n})["rev"])
    res = engine.revs_diff({"bbb": [revs[0], revs[2], "4-" + H["c"], "5-" + H["d"]]})
    assert res == {
        "bbb": {"missing": ["4-" + H["c"], "5-" + H["d"]], "possible_ancestors": [revs[3]]}
    }


def test_revs_diff_no_possible_ancestors_when_none_lower(engine: Any) -> None:
    """possible_ancestors is omitted when no leaf is below the missing revs
    (chttpd_db revs_diff; couch_db:possible_ancestors)."""
    r1 = engine.put({"_id": "a"})["rev"]
    engine.put({"_id": "a", "_rev": r1, "v": 2})
    assert engine.revs_diff({"a": ["1-" + H["e"]]}) == {"a": {"missing": ["1-" + H["e"]]}}


def test_revs_diff_possible_ancestors_in_winner_order(engine: Any) -> None:
    """All leaves (deleted too) below the highest missing pos, in doc_info order."""
    replicate(engine, "a", ["3-" + H["3"], "2-" + H["3"], "1-" + H["0"]], {})
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["0"]], deleted=True)
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["0"]], {})
    res = engine.revs_diff({"a": ["4-" + H["f"], "1-" + H["0"]]})
    assert res == {
        "a": {
            "missing": ["4-" + H["f"]],
            "possible_ancestors": ["3-" + H["3"], "2-" + H["1"], "2-" + H["2"]],
        }
    }


def test_revs_diff_unknown_doc_all_missing(engine: Any) -> None:
    """An unknown id: every rev missing, no possible_ancestors (fabric_rpc
    get_missing_revs not_found -> {Id, Revs, []})."""
    revs = ["1-" + H["a"], "2-" + H["b"]]
    assert engine.revs_diff({"nope": revs}) == {"nope": {"missing": revs}}


def test_revs_diff_sorts_a_known_docs_missing_revs_by_position(engine: Any) -> None:
    """couch_key_tree:find_missing sorts {pos, id} (pos an integer: 10 after 5);
    an unknown id keeps the given order."""
    engine.put({"_id": "a"})
    given = ["5-" + H["b"], "3-" + H["c"], "10-" + H["a"], "3-" + H["a"]]
    missing = engine.revs_diff({"a": given, "nope": given})
    assert missing["a"]["missing"] == ["3-" + H["a"], "3-" + H["c"], "5-" + H["b"], "10-" + H["a"]]
    assert missing["nope"] == {"missing": given}


def test_revs_diff_knows_non_leaf_and_deleted_revs(engine: Any) -> None:
    """Any node of the tree is known, leaf or not, deleted or not (couch_key_tree:find_missing)."""
    r1 = engine.put({"_id": "a"})["rev"]
    r2 = engine.delete("a", r1)["rev"]
    assert engine.revs_diff({"a": [r1, r2]}) == {}
    engine.compact()
    assert engine.revs_diff({"a": [r1, r2]}) == {}


# --------------------------------------------------------------------------- info


def test_info_counts(engine: Any) -> None:
    """doc_count counts live docs, doc_del_count deleted ones (api/database/common)."""
    info0 = engine.info()
    assert (info0["doc_count"], info0["doc_del_count"]) == (0, 0)
    assert set(info0) >= {"doc_count", "doc_del_count", "update_seq", "sizes"}
    assert set(info0["sizes"]) >= {"file", "active"}
    revs = seeded(engine, ["a", "b", "c"])
    engine.delete("a", revs["a"])
    engine.put({"_id": "b", "_rev": revs["b"], "v": 2})
    info = engine.info()
    assert (info["doc_count"], info["doc_del_count"]) == (2, 1)
    engine.put({"_id": "a", "v": "again"})
    info = engine.info()
    assert (info["doc_count"], info["doc_del_count"]) == (3, 0)


# --------------------------------------------------------------------------- compaction


def test_compact_preserves_every_read(engine: Any) -> None:
    """Compaction keeps documents, leaves, sequences and counts
    (api/database/compact; compact_test.exs)."""
    revs = seeded(engine, ["a", "b", "c"])
    engine.put({"_id": "a", "_rev": revs["a"], "v": 2})
    engine.delete("b", revs["b"])
    replicate(engine, "c", ["2-" + H["1"], revs["c"]], {"v": "loser?"})
    replicate(engine, "c", ["2-" + H["f"], revs["c"]], {"v": "winner"})
    before = snapshot(engine)
    last = engine.changes()["last_seq"]
    conflicted = engine.get("c", revs=True, conflicts=True)
    engine.compact()
    assert snapshot(engine) == before
    assert engine.get("c", revs=True, conflicts=True) == conflicted
    assert engine.changes(since=last)["results"] == []


def compaction_serves_current_bodies(db: Any) -> None:
    """Compact, read every document, edit every one (a body of the same size),
    compact again: each read returns the current document, body and revision.
    Positions are per file and two compactions of the same documents lay their bodies
    and tree nodes out alike, so anything kept from the older file by position (a
    body cache, a node cache) answers with the old body, or the old revision: a node
    cache kept across the swap (``node_cache_across_files``) passed while only the
    bodies were compared, its stale nodes pointing at bodies of the same size."""
    revs = {
        i: db.put({"_id": i, "v": 1, "pad": "x" * (40 * n)})["rev"]
        for n, i in enumerate("abcdefgh")
    }
    db.compact()
    assert all(db.get(i)["v"] == 1 for i in revs)
    assert [r["doc"]["v"] for r in db.all_docs(include_docs=True)["rows"]] == [1] * len(revs)
    for i, rev in revs.items():
        pad = "x" * (40 * "abcdefgh".index(i))
        revs[i] = db.put({"_id": i, "_rev": rev, "v": 2, "pad": pad})["rev"]
    db.compact()
    assert [(db.get(i)["v"], db.get(i)["_rev"]) for i in revs] == [(2, r) for r in revs.values()]
    rows = db.all_docs(include_docs=True)["rows"]
    assert [(r["value"]["rev"], r["doc"]["v"]) for r in rows] == [(r, 2) for r in revs.values()]


def test_compaction_serves_current_bodies(engine: Any) -> None:
    compaction_serves_current_bodies(engine)


def test_compact_drops_non_leaf_bodies_only(engine: Any) -> None:
    """After compaction only leaf revisions keep bodies: GET ?rev=<non-leaf> is
    not_found missing (compact_test.exs; couch_bt_engine_compactor copies leaves)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    t1 = engine.put({"_id": "t", "v": 1})["rev"]
    t2 = engine.delete("t", t1)["rev"]
    replicate(engine, "a", ["2-" + H["0"], r1], {"v": "losing"})
    engine.compact()
    with pytest.raises(NotFound) as info:
        engine.get("a", rev=r1)
    assert info.value.reason == "missing"
    assert engine.get("a", rev=r2)["v"] == 2
    assert engine.get("a", rev="2-" + H["0"])["v"] == "losing"
    assert engine.get("t", rev=t2) == {"_id": "t", "_rev": t2, "_deleted": True}
    with pytest.raises(NotFound):
        engine.get("t", rev=t1)
    assert engine.get("a", revs=True)["_revisions"]["ids"][-1] == hash_of(r1)


def test_attachment_of_a_revision_without_a_body_is_missing(engine: Any) -> None:
    """attachment(rev=R) reads R's own attachments: a revision whose body is not kept
    (compacted away, or a replicated ancestor never sent) has none, even when the
    winner holds one of that name (found by mutation testing: an engine answering
    the winner's attachment there passed, as nothing asked compacted revisions for
    attachments)."""
    r1 = engine.put({"_id": "a", "_attachments": {"x": _att(b"old")}})["rev"]
    engine.put({"_id": "a", "_rev": r1, "_attachments": {"x": _att(b"new")}})
    replicate(engine, "b", ["2-" + H["2"], "1-" + H["1"]], {"_attachments": {"x": _att(b"b")}})
    assert engine.attachment("a", "x", rev=r1)["data"] == b"old"
    engine.compact()
    for doc_id, rev in (("a", r1), ("b", "1-" + H["1"])):
        with pytest.raises(NotFound):
            engine.attachment(doc_id, "x", rev=rev)
    assert engine.attachment("a", "x")["data"] == b"new"


def test_writes_after_compaction(engine: Any) -> None:
    """The database stays writable and consistent after compaction."""
    revs = seeded(engine, ["a", "b"])
    engine.compact()
    r2 = engine.put({"_id": "a", "_rev": revs["a"], "v": 2})["rev"]
    engine.put({"_id": "c"})
    assert engine.get("a")["_rev"] == r2
    assert rows_ids(engine.all_docs()) == ["a", "b", "c"]
    engine.compact()
    assert engine.get("a") == {"_id": "a", "_rev": r2, "v": 2}


# --------------------------------------------------------------------------- persistence


def test_reopen_keeps_everything(engine: Any, reopen: Any) -> None:
    """Acknowledged writes survive close + open (SEMANTICS §14)."""
    revs = seeded(engine, ["a", "b", "c"])
    engine.delete("b", revs["b"])
    r2 = engine.put({"_id": "a", "_rev": revs["a"], "v": 2})["rev"]
    replicate(engine, "c", ["2-" + H["f"], revs["c"]], {"v": "x"})
    before = snapshot(engine)
    last = engine.changes()["last_seq"]
    db = reopen(engine)
    assert snapshot(db) == before
    assert db.get("a", rev=revs["a"])["v"] == "a"
    assert db.get("a", revs=True)["_revisions"]["ids"] == [hash_of(r2), hash_of(revs["a"])]
    assert db.changes(since=last)["results"] == []
    db.put({"_id": "d"})
    assert ids_of(db.changes(since=last)) == ["d"]


def test_reopen_after_compaction(engine: Any, reopen: Any) -> None:
    """Compaction's result is durable (SEMANTICS §13, §14)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    engine.compact()
    db = reopen(engine)
    assert db.get("a") == {"_id": "a", "_rev": r2, "v": 2}
    with pytest.raises(NotFound):
        db.get("a", rev=r1)


# --------------------------------------------------------------------------- stemming


def test_revs_limit_stems_history(opener: Any) -> None:
    """_revs_limit bounds the kept history per branch (api/database/misc
    _revs_limit; couch_key_tree:stem)."""
    db = opener.open(opener.path + "-stem", revs_limit=5)
    revs = [db.put({"_id": "a", "v": 0})["rev"]]
    for n in range(1, 10):
        revs.append(db.put({"_id": "a", "_rev": revs[-1], "v": n})["rev"])
    doc = db.get("a", revs=True)
    assert doc["_revisions"] == {"start": 10, "ids": [hash_of(r) for r in revs[:4:-1]]}
    with pytest.raises(NotFound) as info:
        db.get("a", rev=revs[0])
    assert info.value.reason == "missing"
    # Exactly the five newest kept: _revisions alone could not tell, reads cut it.
    assert db.revs_diff({"a": revs}) == {"a": {"missing": revs[:5]}}
    with pytest.raises(Conflict):
        db.put({"_id": "a", "_rev": revs[2], "v": "old"})


def test_revs_limit_applies_to_replicated_paths(opener: Any) -> None:
    """new_edits=false paths are stemmed too (couch_db_updater stems every update)."""
    db = opener.open(opener.path + "-stem", revs_limit=3)
    path = [f"{n}-{H[format(n, 'x')]}" for n in range(6, 0, -1)]
    replicate(db, "a", path, {"v": 6})
    assert db.get("a", revs=True)["_revisions"] == {"start": 6, "ids": [H["6"], H["5"], H["4"]]}
    # The tree itself stemmed, not only the read cut to the limit.
    assert db.revs_diff({"a": path}) == {"a": {"missing": sorted(path[3:])}}


def test_revs_limit_stems_short_replicated_paths_that_lengthen_a_branch(opener: Any) -> None:
    """§12: each replicated write stems the whole tree, also when the path it sends is
    no longer than revs_limit but lengthens a branch past it (found by mutation
    testing: an engine stemming only paths longer than the limit passed)."""
    db = opener.open(opener.path + "-stem-short", revs_limit=2)
    replicate(db, "a", ["2-" + H["2"], "1-" + H["1"]], {"v": 2})
    replicate(db, "a", ["3-" + H["3"], "2-" + H["2"]], {"v": 3})
    replicate(db, "a", ["4-" + H["4"], "3-" + H["3"]], {"v": 4})
    assert db.get("a", revs=True)["_revisions"] == {"start": 4, "ids": [H["4"], H["3"]]}
    asked = ["1-" + H["1"], "2-" + H["2"], "3-" + H["3"], "4-" + H["4"]]
    assert db.revs_diff({"a": asked}) == {"a": {"missing": asked[:2]}}


def test_revs_limit_counts_from_every_leaf_of_a_branched_tree(opener: Any) -> None:
    """Stemming keeps revs_limit revisions of each leaf's own path, a shorter
    branch's too, so a revision too far from the deepest leaf stays when it is near
    another (couch_key_tree:stem; SEMANTICS §12): revs_diff still knows it, and the
    short leaf's _revisions reaches it (the deep leaf's is cut to the limit, as
    every read's is). Found by mutation testing: a stem that stopped walking a
    branch at the first revision another leaf had kept passed every engine
    (spec.revtree is shared), as the suite stemmed only unbranched histories."""
    db = opener.open(opener.path + "-branched", revs_limit=3)
    replicate(db, "a", ["3-" + H["e"], "2-" + H["2"], "1-" + H["1"]], {"v": "short"})
    replicate(db, "a", ["4-" + H["4"], "3-" + H["3"], "2-" + H["2"], "1-" + H["1"]], {"v": 4})
    doc = db.get("a", revs=True, conflicts=True)
    assert doc["_rev"] == "4-" + H["4"] and doc["_conflicts"] == ["3-" + H["e"]]
    assert doc["_revisions"]["ids"] == [H["4"], H["3"], H["2"]]
    assert db.revs_diff({"a": ["1-" + H["1"], "2-" + H["2"]]}) == {}
    short = db.get("a", rev="3-" + H["e"], revs=True)["_revisions"]
    assert short == {"start": 3, "ids": [H["e"], H["2"], H["1"]]}


def test_revs_limit_of_one_keeps_only_each_leaf(opener: Any) -> None:
    """The smallest limit: every branch keeps its leaf alone, after an edit, a
    replication and a compaction (found by mutation testing: an engine that kept
    two revisions passed, as no run used 1)."""
    db = opener.open(opener.path + "-one", revs_limit=1)
    rev = db.put({"_id": "a", "v": 0})["rev"]
    rev = db.put({"_id": "a", "_rev": rev, "v": 1})["rev"]
    assert db.get("a", revs=True)["_revisions"] == {"start": 2, "ids": [hash_of(rev)]}
    replicate(db, "b", ["3-" + H["3"], "2-" + H["2"], "1-" + H["1"]], {"v": 3})
    assert db.get("b", revs=True)["_revisions"] == {"start": 3, "ids": [H["3"]]}
    db.compact()
    assert db.get("a", revs=True)["_revisions"] == {"start": 2, "ids": [hash_of(rev)]}
    assert db.revs_diff({"b": ["2-" + H["2"]]}) == {"b": {"missing": ["2-" + H["2"]]}}


def test_a_stemmed_revision_brought_back_by_replication_has_no_body(opener: Any) -> None:
    """Stemming forgets a revision with its body: when a replicated path names it
    again as the ancestor of a new branch, it is back in the tree without one
    (found by mutation testing: an engine keeping the bodies of stemmed revisions
    answered the old body for it, and took the branch's stubs from it)."""
    db = opener.open(opener.path + "-back", revs_limit=2)
    r1 = db.put({"_id": "a", "v": 1, "_attachments": {"x": _att(b"1")}})["rev"]
    r2 = db.put({"_id": "a", "_rev": r1, "v": 2})["rev"]
    db.put({"_id": "a", "_rev": r2, "v": 3})
    assert db.revs_diff({"a": [r1]}) == {"a": {"missing": [r1]}}
    branch = {
        "_id": "a",
        "_revisions": {"start": 2, "ids": [H["f"], hash_of(r1)]},
        "_attachments": {"x": {"stub": True}},
    }
    assert db.bulk_docs([branch], new_edits=False)[0]["error"] == "missing_stub"
    del branch["_attachments"]
    assert db.bulk_docs([branch], new_edits=False) == []
    assert db.revs_diff({"a": [r1]}) == {}
    with pytest.raises(NotFound):
        db.get("a", rev=r1)


def test_a_commit_of_megabytes_reads_back_before_and_after_reopen(opener: Any, reopen: Any) -> None:
    """One call of several MiB into one shard, with an attachment over a MiB: what a
    writer appends early on its way (settee's file.SPILL_BYTES) must be appended once
    (found by mutation testing: an engine that appended its spilled bytes twice
    passed, as no run committed a MiB at once)."""
    db = opener.open(opener.path + "-big", shards=1)
    docs: list[dict[str, Any]] = [
        {"_id": f"big{i}", "text": chr(65 + i) * 300_000} for i in range(6)
    ]
    blob = bytes(range(256)) * 5000
    docs.append({"_id": "att", "_attachments": {"f": {"data": blob}}})
    results = db.bulk_docs(docs)
    assert all(r["ok"] for r in results)
    for _ in range(2):
        for i in range(6):
            assert db.get(f"big{i}")["text"] == chr(65 + i) * 300_000
        assert db.attachment("att", "f")["data"] == blob
        assert db.info()["doc_count"] == 7
        db = reopen(db)


def test_range_whose_rows_all_come_from_one_shard(opener: Any) -> None:
    """A range whose first rows all live in one shard: listing across shards must
    read that shard past its share (found by mutation testing: a merge that never read
    a shard again passed, as the machines' ranges were a few rows over 8 ids)."""
    db = opener.open(opener.path + "-skewed", shards=2)
    first = [f"a{i:04d}" for i in range(2000) if shard_of(f"a{i:04d}", 2) == 0][:120]
    then = [f"b{i:04d}" for i in range(2000) if shard_of(f"b{i:04d}", 2) == 1][:120]
    db.bulk_docs([{"_id": doc_id} for doc_id in first + then])
    ids = sorted(first + then)
    for skip, limit in ((0, 100), (30, 70), (110, 20)):
        rows = db.all_docs(limit=limit, skip=skip)["rows"]
        assert [r["id"] for r in rows] == ids[skip : skip + limit], (skip, limit)
        rows = db.all_docs(limit=limit, skip=skip, descending=True)["rows"]
        assert [r["id"] for r in rows] == ids[::-1][skip : skip + limit], (skip, limit)


def test_range_over_unevenly_interleaved_shards_at_every_limit(opener: Any) -> None:
    """One shard holds two ids of a range for every one the other holds, interleaved:
    a merge that reads each shard a leaf at a time must not trust what it read past
    a shard's share, and a shard that runs out leaves fewer rows than asked for.
    Found by mutation testing (the range above has every row of one shard first, and
    the machines' 8 ids never fill a share): a merge whose bound was the last id a
    shard read, not the last one it merged, dropped rows at 33 of these 470 queries;
    one that skipped the enough-rows check raised IndexError at 174. Every limit is
    tried: which ones go wrong turns on leaf boundaries."""
    db = opener.open(opener.path + "-uneven", shards=2)
    names = [f"k{n:04d}" for n in range(300)]
    ids = [doc_id for n, doc_id in enumerate(names) if shard_of(doc_id, 2) == 0 or n % 2 == 0]
    db.bulk_docs([{"_id": doc_id} for doc_id in ids])
    for descending in (False, True):
        want = sorted(ids, reverse=descending)
        for limit in range(1, len(ids) + 2):
            rows = db.all_docs(limit=limit, descending=descending)["rows"]
            assert [r["id"] for r in rows] == want[:limit], (limit, descending)


def test_bounded_ranges_at_every_key_of_a_many_leaf_tree(opener: Any) -> None:
    """Ranges with both bounds, each id of a shard whose by_id tree has several leaves
    and an inner level (120 long ids, every ninth deleted) as a bound, both ways, with their
    offsets. Found by mutation testing: B+tree folds that stopped at a leaf boundary
    (an ascending fold ending after its first leaf wholly in range; a descending one
    stopping before the leaf whose last key is ``endkey``) and a descending offset
    counting the child ``startkey`` is in passed every test, as the ranges of many
    leaves had no ``endkey`` and the ranges with one fitted a leaf."""
    db = opener.open(opener.path + "-leaves", shards=1)
    # Long ids: a 4 KiB leaf holds about fifteen, so 120 make eight leaves.
    ids = [f"k{n:03d}" + "-" * 100 for n in range(120)]
    revs = {r["id"]: r["rev"] for r in db.bulk_docs([{"_id": i} for i in ids])}
    gone = ids[::9]
    db.bulk_docs([{"_id": i, "_rev": revs[i], "_deleted": True} for i in gone])
    live = [i for i in ids if i not in gone]
    for n, key in enumerate(ids):
        if n % 3 == 0:  # any range over two leaves shows the first fault
            upper = ids[min(n + 40, len(ids) - 1)]
            inclusive = n % 2 == 0
            got = db.all_docs(startkey=key, endkey=upper, inclusive_end=inclusive)
            want = [i for i in live if key <= i < upper or (inclusive and i == upper)]
            assert rows_ids(got) == want, (key, upper, inclusive)
            assert got["offset"] == sum(1 for i in live if i < key), key
        top = ids[min(n + 5, len(ids) - 1)]
        got = db.all_docs(startkey=top, endkey=key, descending=True)
        assert rows_ids(got) == [i for i in reversed(live) if key <= i <= top], (top, key)
        assert got["offset"] == sum(1 for i in live if i > top), top


def test_lower_revs_limit_on_reopen_stems_next_write(opener: Any, reopen: Any) -> None:
    """revs_limit is the session's; a doc written after reopening with a lower
    limit is stemmed to it (couch_db_updater stems on update), and compact() stems
    every doc. Reads cut _revisions to the limit at once, before either: CouchDB's
    couch_db:make_doc cuts the path it reads (rev_stemming_test.exs, "revs limit is
    kept after compaction"), so only revs_diff tells what the tree still holds."""
    db = opener.open()
    revs = [db.put({"_id": "a", "v": 0})["rev"]]
    for n in range(1, 8):
        revs.append(db.put({"_id": "a", "_rev": revs[-1], "v": n})["rev"])
    assert len(db.get("a", revs=True)["_revisions"]["ids"]) == 8
    db = reopen(db, revs_limit=3)
    assert db.get("a", revs=True)["_revisions"] == {
        "start": 8,
        "ids": [hash_of(r) for r in reversed(revs[-3:])],
    }
    assert db.revs_diff({"a": revs}) == {}  # nothing stemmed yet
    revs.append(db.put({"_id": "a", "_rev": revs[-1], "v": 8})["rev"])
    assert db.get("a", revs=True)["_revisions"]["start"] == 9
    assert len(db.get("a", revs=True)["_revisions"]["ids"]) == 3
    assert db.revs_diff({"a": revs}) == {"a": {"missing": revs[:-3]}}
    db.put({"_id": "b", "v": 0})
    b_revs = [db.get("b")["_rev"]]
    db = reopen(db, revs_limit=1000)
    for n in range(1, 5):
        b_revs.append(db.put({"_id": "b", "_rev": b_revs[-1], "v": n})["rev"])
    db = reopen(db, revs_limit=2)
    assert len(db.get("b", revs=True)["_revisions"]["ids"]) == 2
    db.compact()
    assert len(db.get("b", revs=True)["_revisions"]["ids"]) == 2
    assert db.revs_diff({"b": b_revs}) == {"b": {"missing": b_revs[:-2]}}


def test_revisions_of_a_named_revision_are_cut_to_revs_limit(opener: Any, reopen: Any) -> None:
    """Every read cuts _revisions to the session's revs_limit (SEMANTICS §3), a read of
    a named revision as a read of the winner: after a reopen with a lower limit, each
    stored revision's path shows at most that many ids. Found by mutation testing: an
    engine cutting only the winner's path passed (``revisions_cut_winner_only``), as
    every test of the cut read the winner."""
    db = opener.open()
    revs = [db.put({"_id": "a", "v": 0})["rev"]]
    for n in range(1, 5):
        revs.append(db.put({"_id": "a", "_rev": revs[-1], "v": n})["rev"])
    db = reopen(db, revs_limit=2)
    for n, rev in enumerate(revs):
        ids = [hash_of(r) for r in reversed(revs[: n + 1])][:2]
        assert db.get("a", rev=rev, revs=True)["_revisions"] == {"start": n + 1, "ids": ids}


def test_default_revs_limit_keeps_long_history(engine: Any) -> None:
    """Default _revs_limit is 1000 (api/database/misc), so 30 edits keep 30 ids."""
    rev = engine.put({"_id": "a", "v": 0})["rev"]
    for n in range(1, 30):
        rev = engine.put({"_id": "a", "_rev": rev, "v": n})["rev"]
    assert len(engine.get("a", revs=True)["_revisions"]["ids"]) == 30


# --------------------------------------------------------------------------- lifecycle


def test_closed_database_raises(engine: Any) -> None:
    """Every call on a closed database raises SetteeError, never hangs (DESIGN.md)."""
    rev = engine.put({"_id": "a"})["rev"]
    engine.close()
    calls = [
        lambda: engine.put({"_id": "b"}),
        lambda: engine.get("a"),
        lambda: engine.delete("a", rev),
        lambda: engine.bulk_docs([{"_id": "c"}]),
        lambda: engine.all_docs(),
        lambda: engine.changes(),
        lambda: engine.revs_diff({"a": [rev]}),
        lambda: engine.info(),
        lambda: engine.compact(),
    ]
    for call in calls:
        with pytest.raises(SetteeError) as info:
            call()
        assert not isinstance(info.value, (Conflict, NotFound, BadRequest))


def test_close_is_idempotent(engine: Any, reopen: Any) -> None:
    """close() twice is harmless and the data stays (SEMANTICS §1)."""
    engine.put({"_id": "a"})
    engine.close()
    engine.close()
    db = reopen(engine)
    assert rows_ids(db.all_docs()) == ["a"]


def test_context_manager_closes(opener: Any) -> None:
    """with open(...) as db: closes on exit, also on error (SEMANTICS §1)."""
    path = opener.path + "-ctx"
    with opener.open(path) as db:
        db.put({"_id": "a"})
    with pytest.raises(SetteeError):
        db.info()
    with pytest.raises(RuntimeError), opener.open(path) as db2:
        db2.put({"_id": "b"})
        raise RuntimeError("boom")
    with pytest.raises(SetteeError):
        db2.get("a")
    db3 = opener.open(path)
    assert rows_ids(db3.all_docs()) == ["a", "b"]


# --------------------------------------------------------------------------- BadRequest cases

LONE = "\ud800"

BAD_DOCS = {
    "not_a_dict": ["_id", "a"],
    "no_id": {"v": 1},
    "id_not_str": {"_id": 5},
    "id_empty": {"_id": ""},
    "id_underscore": {"_id": "_foo"},
    "id_local": {"_id": "_local/x"},
    "id_design_bare": {"_id": "_design/"},
    "id_design_no_slash": {"_id": "_design"},
    "id_lone_surrogate": {"_id": "a" + LONE},
    # An _id that is there but None is a bad id, not a missing one: _bulk_docs invents
    # ids only for documents without _id (couch_doc:validate_docid throws illegal_docid
    # for a non-binary; found by mutation testing: an _id of None given a new id passed).
    "id_none": {"_id": None},
    "unknown_special_field": {"_id": "a", "_foo": 1},
    # Near misses of the fields CouchDB reads, ignores or keeps in the body are
    # unknown too (SEMANTICS §2.1 "any other _-field").
    "special_near_ignored": {"_id": "a", "_conflict": ["1-" + H["a"]]},
    "special_near_read": {"_id": "a", "_revs": {"start": 1, "ids": [H["a"]]}},
    "special_near_body": {"_id": "a", "_replication": "x"},
    "special_local_id": {"_id": "a", "_local_id": "x"},
    "attachments": {"_id": "a", "_attachments": {"x": {"stub": "yes"}}},
    "deleted_not_bool": {"_id": "a", "_deleted": "yes"},
    "rev_not_str": {"_id": "a", "_rev": 1},
    "rev_no_dash": {"_id": "a", "_rev": "abc"},
    "rev_pos_zero": {"_id": "a", "_rev": "0-abc"},
    "rev_leading_zero": {"_id": "a", "_rev": "01-abc"},
    "rev_space_in_hash": {"_id": "a", "_rev": "1-a b"},
    "rev_upper_hex_hash": {"_id": "a", "_rev": "1-" + "ABCDEF01" * 4},
    "rev_32_not_hex": {"_id": "a", "_rev": "1-" + "g" * 32},
    # A free-form hash has at most 255 characters (SEMANTICS §2.2; found by mutation
    # testing: a spec.revs taking 256 passed every engine, as no case was that long).
    "rev_hash_of_256": {"_id": "a", "_rev": "1-" + "a" * 256},
    "rev_bad_pos": {"_id": "a", "_rev": "x-abc"},
    "revisions_not_dict": {"_id": "a", "_revisions": ["1-abc"]},
    "revisions_empty_ids": {"_id": "a", "_revisions": {"start": 1, "ids": []}},
    # Exactly start and ids (SEMANTICS §2.1; found by mutation testing: a check that
    # only required both passed).
    "revisions_extra_member": {
        "_id": "a",
        "_revisions": {"start": 1, "ids": [H["a"]], "rev": "1-" + H["a"]},
    },
    "revisions_start_too_low": {"_id": "a", "_revisions": {"start": 1, "ids": ["a", "b"]}},
    "revisions_disagree_with_rev": {
        "_id": "a",
        "_rev": "2-" + H["a"],
        "_revisions": {"start": 2, "ids": [H["b"], H["a"]]},
    },
    "value_bytes": {"_id": "a", "v": b"raw"},
    "value_set": {"_id": "a", "v": {1, 2}},
    "value_object": {"_id": "a", "v": object()},
    "value_nan": {"_id": "a", "v": float("nan")},
    "value_inf": {"_id": "a", "v": float("inf")},
    "value_int_too_big": {"_id": "a", "v": 2**64},
    "value_int_too_small": {"_id": "a", "v": -(2**63) - 1},
    "nested_non_str_key": {"_id": "a", "v": {"ok": {1: "x"}}},
    "top_level_non_str_key": {"_id": "a", 1: "x"},
    "value_lone_surrogate": {"_id": "a", "v": ["x" + LONE]},
    "key_lone_surrogate": {"_id": "a", "k" + LONE: 1},
}


@pytest.mark.parametrize("case", sorted(BAD_DOCS))
def test_bad_documents_are_rejected_and_change_nothing(engine: Any, case: str) -> None:
    """Invalid documents are 400 bad_request / doc_validation and write nothing
    (couch_doc:validate_docid, transfer_fields; SEMANTICS §2.1, §15)."""
    rev = engine.put({"_id": "a", "v": 1})["rev"]
    before = snapshot(engine)
    doc = BAD_DOCS[case]
    with pytest.raises(BadRequest):
        engine.put(doc)
    if case != "no_id":  # _bulk_docs invents ids (test_bulk_docs_generates_missing_ids)
        with pytest.raises(BadRequest):
            engine.bulk_docs([{"_id": "fresh"}, doc])
    with pytest.raises(BadRequest):
        engine.bulk_docs([doc], new_edits=False)
    assert snapshot(engine) == before
    assert engine.get("a")["_rev"] == rev


def test_bulk_docs_generates_missing_ids(engine: Any) -> None:
    """CouchDB's _bulk_docs (and POST /db) give a document without _id a new uuid
    (couch_uuids, "sequential": 32 hex digits); put still needs one (PUT /db/id)."""
    results = engine.bulk_docs([{"v": 1}, {"v": 1}, {"_id": "named", "v": 2}])
    ids = [r["id"] for r in results]
    assert all(r["ok"] for r in results)
    assert ids[2] == "named" and ids[0] != ids[1]
    assert all(len(i) == 32 and set(i) <= set("0123456789abcdef") for i in ids[:2])
    docs = [engine.get(i) for i in ids]
    assert [d["_rev"] for d in docs] == [r["rev"] for r in results]
    assert [d["v"] for d in docs] == [1, 1, 2]
    assert engine.info()["doc_count"] == 3


def test_replicated_bulk_docs_without_id_get_new_ids(engine: Any) -> None:
    """chttpd_db's _bulk_docs gives a document without _id a new uuid whatever
    new_edits says; the replicated one keeps the revision it names."""
    rev = "3-" + H["c"]
    assert engine.bulk_docs([{"_rev": rev, "v": 1}], new_edits=False) == []
    [row] = engine.all_docs()["rows"]
    assert len(row["id"]) == 32 and row["value"]["rev"] == rev
    assert engine.get(row["id"]) == {"_id": row["id"], "_rev": rev, "v": 1}


def test_all_docs_keys_of_one_with_equal_bounds_is_key(engine: Any) -> None:
    """couch_mrview_util:validate_args accepts {[Key], Key, Key} (how key=K arrives)
    and empty keys beside any bounds ({[], _, _} -> ok: no rows); any other bound
    beside keys is refused."""
    engine.put({"_id": "a"})
    engine.put({"_id": "b"})
    keyed = engine.all_docs(keys=["a"], startkey="a", endkey="a")
    assert keyed == engine.all_docs(keys=["a"])
    # Found by mutation testing: refusing bounds beside keys=[] passed every engine.
    assert engine.all_docs(keys=[], startkey="a", endkey="b")["rows"] == []
    assert engine.all_docs(keys=[], startkey="b")["rows"] == []
    for bounds in ({"startkey": "a"}, {"startkey": "a", "endkey": "b"}):
        with pytest.raises(BadRequest):
            engine.all_docs(keys=["a"], **bounds)


def test_bad_request_beats_conflict(engine: Any) -> None:
    """Validation happens before state checks (SEMANTICS §15)."""
    engine.put({"_id": "a"})
    with pytest.raises(BadRequest):
        engine.put({"_id": "a", "_bad": 1})
    with pytest.raises(BadRequest):
        engine.put({"_id": "a", "_rev": "1-" + H["f"], "v": b"x"})


def test_bulk_docs_bad_arguments(engine: Any) -> None:
    """bulk_docs_test.exs: "`docs` parameter must be an array", "`new_edits`
    parameter must be a boolean"; a new_edits=false doc must name its revision
    (settee decision, SEMANTICS §7.2, spec/docs.py validate_doc)."""
    with pytest.raises(BadRequest):
        engine.bulk_docs({"_id": "a"})
    with pytest.raises(BadRequest):
        engine.bulk_docs("abc")
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "a"}], new_edits=0)
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "a"}], new_edits="false")
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "a", "v": 1}], new_edits=False)
    assert engine.changes()["results"] == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"docid": 1},
        {"docid": ""},
        {"docid": "_foo"},
        {"docid": "a" + LONE},
        {"docid": "a", "rev": "bad"},
        {"docid": "a", "rev": 2},
        {"docid": "a", "revs": "yes"},
        {"docid": "a", "conflicts": 1},
    ],
    ids=lambda kw: "-".join(f"{k}={v!r}" for k, v in kw.items()),
)
def test_get_bad_arguments(engine: Any, kwargs: dict[str, Any]) -> None:
    """Malformed ids/revs/flags are bad_request (couch_doc:parse_rev; SEMANTICS §6)."""
    engine.put({"_id": "a"})
    kwargs = dict(kwargs)  # the parametrised dict is shared between engines
    docid = kwargs.pop("docid")
    with pytest.raises(BadRequest):
        engine.get(docid, **kwargs)


def test_delete_bad_arguments(engine: Any) -> None:
    """DELETE with a malformed id or rev is bad_request, nothing written."""
    rev = engine.put({"_id": "a"})["rev"]
    for docid, bad_rev in [(1, rev), ("", rev), ("_x", rev), ("a", "bad"), ("a", 5)]:
        with pytest.raises(BadRequest):
            engine.delete(docid, bad_rev)
    assert engine.get("a")["_rev"] == rev


@pytest.mark.parametrize(
    "kwargs",
    [
        {"startkey": 1},
        {"endkey": b"x"},
        {"startkey": "a" + LONE},
        {"keys": "abc"},
        {"keys": ["a", 1]},
        {"keys": {"a": 1}},
        {"keys": ["a" + LONE]},
        {"limit": -1},
        {"limit": 1.5},
        {"limit": True},
        {"skip": -1},
        {"skip": None},
        {"skip": True},
        {"descending": "yes"},
        {"inclusive_end": None},
        {"include_docs": 1},
        {"keys": ["a"], "startkey": "a"},
        {"keys": ["a"], "endkey": "z"},
        # {[Key], Key, Key} is the one exception: two keys are not key=K (found by
        # mutation testing: an exception for any number of keys passed).
        {"keys": ["a", "a"], "startkey": "a", "endkey": "a"},
    ],
    ids=lambda kw: "-".join(f"{k}={v!r}" for k, v in kw.items()),
)
def test_all_docs_bad_arguments(engine: Any, kwargs: dict[str, Any]) -> None:
    """couch_mrview_util:validate_args: limit/skip positive integers, booleans,
    "`keys` is incompatible with `key`, `start_key` and `end_key`"."""
    engine.put({"_id": "a"})
    with pytest.raises(BadRequest):
        engine.all_docs(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"since": -1},
        {"since": "garbage"},
        {"since": None},
        {"since": True},
        {"since": 1.5},
        {"limit": -1},
        {"limit": "1"},
        {"limit": True},
        {"include_docs": "yes"},
    ],
    ids=lambda kw: "-".join(f"{k}={v!r}" for k, v in kw.items()),
)
def test_changes_bad_arguments(engine: Any, kwargs: dict[str, Any]) -> None:
    """Malformed since/limit/include_docs are bad_request (chttpd_db
    parse_changes_query; SEMANTICS §9)."""
    engine.put({"_id": "a"})
    with pytest.raises(BadRequest):
        engine.changes(**kwargs)


@pytest.mark.parametrize(
    "arg",
    [["a"], {"a": "1-abc"}, {"a": ["bad"]}, {1: ["1-abc"]}, {"a": [1]}, {"a" + LONE: ["1-a"]}],
    ids=repr,
)
def test_revs_diff_bad_arguments(engine: Any, arg: Any) -> None:
    """revs_diff takes {docid: [rev, ...]}; malformed revs are bad_request
    (couch_doc:parse_revs)."""
    with pytest.raises(BadRequest):
        engine.revs_diff(arg)


@pytest.mark.parametrize(
    "options",
    [
        {"no_such_option": 1},
        {"revs_limit": 0},
        {"revs_limit": "5"},
        {"revs_limit": True},
        {"shards": 0},
        {"shards": 2.0},
        {"read_mode": "fast"},
        {"fsync": "yes"},
        {"max_document_size": 0},
    ],
    ids=lambda o: "-".join(f"{k}={v!r}" for k, v in o.items()),
)
def test_open_bad_options(opener: Any, options: dict[str, Any]) -> None:
    """Unknown options and bad values are BadRequest naming the option (contract;
    DESIGN.md config)."""
    with pytest.raises(BadRequest) as info:
        opener.open(opener.path + "-opts", **options)
    assert next(iter(options)) in str(info.value)


def test_max_document_size(opener: Any) -> None:
    """Documents above max_document_size are refused (CouchDB 413
    document_too_large; settee BadRequest, SEMANTICS §2.1)."""
    db = opener.open(opener.path + "-size", max_document_size=200)
    db.put({"_id": "small", "v": "x" * 50})
    with pytest.raises(BadRequest):
        db.put({"_id": "big", "v": "x" * 300})
    with pytest.raises(BadRequest):
        db.bulk_docs([{"_id": "ok"}, {"_id": "big", "v": "x" * 300}])
    assert rows_ids(db.all_docs()) == ["small"]


def test_max_document_size_is_a_bound_the_body_may_reach(opener: Any) -> None:
    """A body whose msgpack encoding is exactly max_document_size bytes is stored;
    one byte more is refused (SEMANTICS §2.1: "more than max_document_size msgpack
    bytes"; found by mutation testing: a check refusing the limit itself passed)."""
    body = {"v": "x" * 100}
    size = len(msgpack.packb(body, use_bin_type=True))
    db = opener.open(opener.path + "-bound", max_document_size=size)
    db.put({"_id": "at", **body})
    with pytest.raises(BadRequest):
        db.put({"_id": "above", "v": "x" * 101})
    assert rows_ids(db.all_docs()) == ["at"]
    assert db.get("at")["v"] == body["v"]


def test_put_with_revisions_in_interactive_mode(engine: Any) -> None:
    """With new_edits=true, _revisions names the parent path like _rev does
    (couch_doc:transfer_fields takes revs from _revisions)."""
    r1 = engine.put({"_id": "a", "v": 1})["rev"]
    r2 = engine.put({"_id": "a", "_revisions": {"start": 1, "ids": [hash_of(r1)]}, "v": 2})["rev"]
    assert pos(r2) == 2 and engine.get("a")["v"] == 2
    with pytest.raises(Conflict):
        engine.put({"_id": "a", "_revisions": {"start": 1, "ids": [hash_of(r1)]}, "v": 3})


# -- attachments (SEMANTICS §18) -------------------------------------------------------------------


def _att(data: bytes, content_type: str = "text/plain") -> dict[str, Any]:
    import base64

    return {"content_type": content_type, "data": base64.b64encode(data).decode("ascii")}


def test_revpos_of_a_recreation_and_of_a_replicated_attachment_without_one(
    engine: Any,
) -> None:
    """§18 [differs]: an inline attachment's revpos is the position of the revision
    storing it, for a document recreated over a tombstone too (CouchDB gives 1), and
    for a replicated one sent without revpos (CouchDB gives 0). Found by mutation
    testing: engines doing either as CouchDB does passed the suite and the machine."""
    r1 = engine.put({"_id": "a"})["rev"]
    engine.delete("a", r1)
    rev = engine.put({"_id": "a", "_attachments": {"t": _att(b"x")}})["rev"]
    assert pos(rev) == 3
    assert engine.get("a")["_attachments"]["t"]["revpos"] == 3
    leaf = "2-" + H["b"]
    doc = {"_id": "b", "_revisions": {"start": 2, "ids": [H["b"], H["a"]]}}
    assert engine.bulk_docs([doc | {"_attachments": {"t": _att(b"y")}}], new_edits=False) == []
    assert engine.get("b", rev=leaf)["_attachments"]["t"]["revpos"] == 2


def test_attachments_are_stored_shown_as_stubs_and_read_whole(engine: Any) -> None:
    """couch_att: inline base64 in, stubs out (content_type, revpos, digest, length),
    bytes back through attachment() and get(attachments=True)."""
    rev = engine.put({"_id": "a", "v": 1, "_attachments": {"t.txt": _att(b"hello")}})["rev"]
    doc = engine.get("a")
    assert list(doc) == ["_id", "_rev", "v", "_attachments"]
    assert doc["_attachments"]["t.txt"] == {
        "content_type": "text/plain",
        "revpos": 1,
        "digest": "md5-XUFAKrxLKna5cZ2REBfFkg==",
        "length": 5,
        "stub": True,
    }
    whole = engine.get("a", attachments=True)["_attachments"]["t.txt"]
    assert whole["data"] == "aGVsbG8=" and "stub" not in whole
    assert engine.attachment("a", "t.txt")["data"] == b"hello"
    assert engine.attachment("a", "t.txt", rev=rev)["length"] == 5
    with pytest.raises(NotFound):
        engine.attachment("a", "nope")
    row = engine.all_docs(include_docs=True)["rows"][0]
    assert row["doc"]["_attachments"] == doc["_attachments"]
    assert engine.changes(include_docs=True)["results"][0]["doc"] == doc


def test_attachment_stubs_keep_bytes_omitted_ones_are_gone(engine: Any) -> None:
    """A new revision's _attachments is its whole set: stubs keep the previous
    revision's attachment (and its revpos), what is not listed is dropped."""
    big = bytes(range(256)) * 600  # three chunks
    r1 = engine.put({"_id": "a", "_attachments": {"x": _att(b"1"), "big": _att(big)}})["rev"]
    r2 = engine.put(
        {"_id": "a", "_rev": r1, "_attachments": {"big": {"stub": True}, "y": _att(b"2")}}
    )["rev"]
    atts = engine.get("a")["_attachments"]
    assert list(atts) == ["big", "y"] and atts["big"]["revpos"] == 1 and atts["y"]["revpos"] == 2
    assert engine.attachment("a", "big")["data"] == big
    assert engine.attachment("a", "x", rev=r1)["data"] == b"1"
    since = engine.get("a", atts_since=[r1])["_attachments"]
    assert since["big"].get("stub") is True and "data" in since["y"]
    # chttpd: atts_since narrows attachments=true too (what CouchDB's replicator sends).
    assert engine.get("a", attachments=True, atts_since=[r1])["_attachments"] == since
    r3 = engine.put({"_id": "a", "_rev": r2, "v": 3})["rev"]
    assert "_attachments" not in engine.get("a", rev=r3)


def test_atts_since_counts_only_ancestors_of_the_revision_read(engine: Any) -> None:
    """couch_db's find_ancestor_rev_pos walks the path of the revision it returns:
    a named descendant or a revision of another branch does not mean the reader
    holds that revision's attachments, so they come with their data."""
    r1 = engine.put({"_id": "a", "_attachments": {"f": _att(b"one")}})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "_attachments": {"f": {"stub": True}}})["rev"]
    assert "data" in engine.get("a", rev=r1, atts_since=[r2])["_attachments"]["f"]
    assert engine.get("a", rev=r2, atts_since=[r1])["_attachments"]["f"].get("stub") is True
    other = "2-" + "f" * 32
    engine.bulk_docs(
        [{"_id": "a", "_rev": other, "_revisions": {"start": 2, "ids": ["f" * 32, r1[2:]]}}],
        new_edits=False,
    )
    # The branch's own revision names nothing on r2's path; its parent r1 does.
    assert "data" in engine.get("a", rev=r2, atts_since=[other])["_attachments"]["f"]
    assert engine.get("a", rev=r2, atts_since=[other, r1])["_attachments"]["f"].get("stub")


def test_line_wrapped_base64_is_stored_as_its_bytes(engine: Any) -> None:
    """CouchDB's base64:decode skips whitespace: base64.encodebytes' output is taken."""
    data = bytes(range(256))
    wrapped = base64.encodebytes(data).decode("ascii")
    assert "\n" in wrapped
    engine.put({"_id": "a", "_attachments": {"f": {"data": wrapped}}})
    assert engine.attachment("a", "f")["data"] == data


@pytest.mark.parametrize("data", ["notBase64Encoded=", "YWJj=", "YWJj===="])
def test_base64_with_a_stray_pad_is_refused_and_nothing_stored(engine: Any, data: str) -> None:
    """Erlang's base64:decode, and so CouchDB (attachments_test.exs "errors for bad
    attachment"), refuses '=' after whole groups of four, which Python's decoder
    takes: BadRequest, the store unchanged, the shard still writable."""
    with pytest.raises(BadRequest, match=r"Invalid attachment data for foo\.txt"):
        engine.put({"_id": "a", "_attachments": {"foo.txt": {"data": data}}})
    with pytest.raises(NotFound):
        engine.get("a")
    engine.put({"_id": "a", "_attachments": {"foo.txt": {"data": "YWJj"}}})
    assert engine.attachment("a", "foo.txt")["data"] == b"abc"


def test_attachment_data_may_be_bytes(engine: Any) -> None:
    """The embedded API takes the bytes themselves as well as base64: same revision."""
    as_text = engine.put({"_id": "a", "_attachments": {"x": _att(b"\x00\xff")}})["rev"]
    as_bytes = {"content_type": "text/plain", "data": b"\x00\xff"}
    assert engine.put({"_id": "b", "_attachments": {"x": as_bytes}})["rev"] == as_text
    assert engine.attachment("b", "x")["data"] == b"\x00\xff"


def test_a_stub_without_its_attachment_is_missing_stub(engine: Any) -> None:
    """couch_doc:merge_stubs: 412 missing_stub; bulk_docs answers it per document."""
    with pytest.raises(BadRequest) as raised:
        engine.put({"_id": "a", "_attachments": {"x": {"stub": True}}})
    assert raised.value.error == "missing_stub"
    rev = engine.put({"_id": "b", "_attachments": {"x": _att(b"1")}})["rev"]
    rows = engine.bulk_docs(
        [
            {"_id": "b", "_rev": rev, "_attachments": {"x": {"stub": True, "revpos": 9}}},
            {"_id": "c"},
        ]
    )
    assert rows[0]["error"] == "missing_stub" and rows[1]["ok"] is True
    assert engine.get("b")["_rev"] == rev


def test_replicated_stubs_come_from_the_nearest_stored_ancestor(engine: Any) -> None:
    """new_edits=false: stubs resolve against the newest ancestor on the sent path
    whose body is kept (couch_db:make_first_doc_on_disk); the sender's revpos stays."""
    rev = engine.put({"_id": "a", "_attachments": {"x": _att(b"1")}})["rev"]
    doc = {
        "_id": "a",
        "_revisions": {"start": 3, "ids": ["c" * 32, "b" * 32, rev.split("-")[1]]},
        "_attachments": {"x": {"stub": True}, "y": {**_att(b"2"), "revpos": 2}},
    }
    assert engine.bulk_docs([doc], new_edits=False) == []
    atts = engine.get("a")["_attachments"]
    assert atts["x"]["revpos"] == 1 and atts["y"]["revpos"] == 2
    orphan = {"_id": "z", "_rev": "1-" + "d" * 32, "_attachments": {"x": {"stub": True}}}
    assert engine.bulk_docs([orphan], new_edits=False)[0]["error"] == "missing_stub"


def test_replicated_stubs_skip_older_stored_ancestors(engine: Any) -> None:
    """The newest stored ancestor on the sent path, not any: with two kept, a stub
    takes the nearer one's attachment (found by mutation testing: stubs resolved
    against the oldest stored ancestor passed, as the test above keeps one)."""
    r1 = engine.put({"_id": "a", "_attachments": {"x": _att(b"1")}})["rev"]
    r2 = engine.put({"_id": "a", "_rev": r1, "_attachments": {"x": _att(b"2")}})["rev"]
    doc = {
        "_id": "a",
        "_revisions": {"start": 3, "ids": ["c" * 32, hash_of(r2), hash_of(r1)]},
        "_attachments": {"x": {"stub": True}},
    }
    assert engine.bulk_docs([doc], new_edits=False) == []
    assert engine.get("a")["_rev"] == "3-" + "c" * 32
    assert engine.attachment("a", "x")["data"] == b"2"
    assert engine.get("a")["_attachments"]["x"]["revpos"] == 2


def test_stubs_of_a_losing_leaf_edit_come_from_that_leaf(engine: Any) -> None:
    """An interactive edit's stubs name the attachments of the revision its _rev
    names (couch_db: the previous revision of the edit), a losing leaf's too, not
    the winner's (found by mutation testing: stubs read from the winner passed;
    the machine rarely edits a loser whose attachment the winner also names)."""
    lose, win = "1-" + H["a"], "1-" + H["b"]
    for rev, data in ((lose, b"lose"), (win, b"win")):
        doc = {"_id": "d", "_rev": rev, "_attachments": {"x": _att(data)}}
        assert engine.bulk_docs([doc], new_edits=False) == []
    assert engine.get("d", conflicts=True)["_conflicts"] == [lose]
    edit = {"_id": "d", "_rev": lose, "v": 1, "_attachments": {"x": {"stub": True}}}
    rev = engine.put(edit)["rev"]
    assert engine.get("d")["_rev"] == rev
    assert engine.attachment("d", "x")["data"] == b"lose"
    assert engine.attachment("d", "x", rev=win)["data"] == b"win"


def test_revision_ids_digest_attachments(engine: Any) -> None:
    """couch_db:new_revid digests attachment names, types and digests; the same
    edit gives the same id on every store, a different attachment another."""
    a = engine.put({"_id": "a", "v": 1, "_attachments": {"x": _att(b"1")}})["rev"]
    b = engine.put({"_id": "b", "v": 1, "_attachments": {"x": _att(b"1")}})["rev"]
    c = engine.put({"_id": "c", "v": 1, "_attachments": {"x": _att(b"2")}})["rev"]
    d = engine.put({"_id": "d", "v": 1})["rev"]
    assert a == b and len({a, c, d}) == 3


def test_attachments_survive_compaction_and_reopen(opener: Any, reopen: Any) -> None:
    db = opener.open()
    r1 = db.put({"_id": "a", "_attachments": {"x": _att(b"one" * 30000)}})["rev"]
    db.put({"_id": "a", "_rev": r1, "_attachments": {"x": {"stub": True}, "y": _att(b"y")}})
    db.put({"_id": "b", "_attachments": {"z": _att(b"")}})
    before = (db.get("a", attachments=True), db.get("b", attachments=True))
    db.compact()
    assert (db.get("a", attachments=True), db.get("b", attachments=True)) == before
    db = reopen(db)
    assert (db.get("a", attachments=True), db.get("b", attachments=True)) == before
    assert db.attachment("a", "x")["data"] == b"one" * 30000


def test_same_named_attachments_of_different_documents_survive_compaction(
    opener: Any, reopen: Any
) -> None:
    """Attachments are told apart by their bytes, not their names: a compaction that
    shared the chunks of every attachment called ``a.txt`` gave one document the
    other's bytes (found by mutation testing: the machines' attachments never
    shared a name across documents with different bytes). Eight documents: at any
    shard count some share a shard, whose compaction copies them (with four, at four
    shards, each could land alone, and settee verify's semantics campaign missed it)."""
    db = opener.open()
    data = {doc_id: doc_id.encode() * (1 + n % 2 * 30000) for n, doc_id in enumerate("pqrstuvw")}
    for doc_id, raw in data.items():
        db.put({"_id": doc_id, "_attachments": {"a.txt": _att(raw)}})
    db.compact()
    for doc_id, raw in data.items():
        assert db.attachment(doc_id, "a.txt")["data"] == raw
    db = reopen(db)
    for doc_id, raw in data.items():
        assert db.attachment(doc_id, "a.txt")["data"] == raw


def test_compaction_keeps_the_attachments_of_every_leaf(engine: Any) -> None:
    """Compaction keeps every leaf with its body and its attachments (SEMANTICS §13), a
    losing leaf's as the winner's. Found by mutation testing: a compaction that copied
    the winner's attachments only passed (``compact_losers_lose_attachments``), as no
    test compacted a conflicted document whose losing leaf held an attachment."""
    replicate(engine, "a", ["2-" + H["2"], "1-" + H["1"]], {"_attachments": {"w": _att(b"W")}})
    replicate(engine, "a", ["2-" + H["1"], "1-" + H["1"]], {"_attachments": {"l": _att(b"LL")}})
    loser = "2-" + H["1"]
    assert engine.get("a", conflicts=True)["_conflicts"] == [loser]
    before = engine.get("a", rev=loser, attachments=True)
    engine.compact()
    assert engine.get("a", rev=loser, attachments=True) == before
    assert engine.attachment("a", "l", rev=loser)["data"] == b"LL"
    assert engine.attachment("a", "w")["data"] == b"W"


def test_attachments_of_one_commit_keep_their_own_bytes(engine: Any) -> None:
    """Documents written in one call, each with new bytes under the same attachment name,
    keep their own bytes (eight of them: some share a shard, so a group commit, at
    every shard count). Found by mutation testing: a writer that shared the chunks it
    wrote within a commit by attachment name passed (``chunks_shared_by_name``), as
    every test wrote same-named attachments in separate calls."""
    data = {doc_id: doc_id.encode() * 3 for doc_id in "stuvwxyz"}
    engine.bulk_docs([{"_id": i, "_attachments": {"a.txt": _att(raw)}} for i, raw in data.items()])
    for doc_id, raw in data.items():
        assert engine.attachment(doc_id, "a.txt")["data"] == raw


def test_attachment_chunks_stream_the_same_bytes(engine: Any) -> None:
    """attachment_chunks: the record without data, then the bytes in chunks of at
    most 64 KiB that join to exactly attachment()'s data."""
    data = bytes(range(256)) * 700  # three chunks
    engine.put({"_id": "a", "_attachments": {"x": {"content_type": "a/b", "data": data}}})
    meta, chunks = engine.attachment_chunks("a", "x")
    parts = list(chunks)
    whole = engine.attachment("a", "x")
    assert meta == {k: v for k, v in whole.items() if k != "data"}
    assert b"".join(parts) == data == whole["data"] and max(map(len, parts)) <= 65536
    with pytest.raises(NotFound):
        engine.attachment_chunks("a", "nope")


def test_an_edit_whose_revision_is_already_held_merges_into_it(engine: Any) -> None:
    """Revision ids are digests, so an edit can compute one the tree already holds:
    here the tombstone deleting ``1-x`` would get, replicated in before as a live
    root. The edit merges as a path (the held revision keeps its flag, gains the
    parent and the new body); the engine overwrote it with the edit's tombstone,
    so the document read as deleted where the reference kept it live (found by
    mutation testing's equivalence runs)."""
    r1 = engine.put({"_id": "x"})["rev"]
    engine.put({"_id": "y"})
    tomb = engine.delete("y", r1)["rev"]  # what deleting {} at r1 digests to
    engine.bulk_docs([{"_id": "x", "_rev": tomb}], new_edits=False)
    result = engine.bulk_docs([{"_id": "x", "_rev": r1, "_deleted": True}])
    assert result == [{"ok": True, "id": "x", "rev": tomb}]
    assert engine.get("x", conflicts=True) == {"_id": "x", "_rev": tomb}
    assert engine.get("x", revs=True)["_revisions"]["ids"] == [tomb.split("-")[1], r1.split("-")[1]]
    assert engine.info()["doc_count"] == 1  # x live, y deleted


def test_winner_and_conflicts_compare_positions_as_numbers(engine: Any) -> None:
    """Leaves at positions 11, 10 and 9 order 11, 10, 9 whatever their hashes: the
    position is an integer, not text ("9" > "11" > "10" as strings).
    couch_doc:to_doc_info sorts leaves descending by {not deleted, {Pos, RevId}}
    with Pos an integer; docs.couchdb.org replication/conflicts: "the revision with
    the longest revision history list becomes the winning revision"; _conflicts
    and possible_ancestors list the other leaves in that order (§3, §10).
    (Found by mutation testing: _winner_key kept the position as a str; conflicts sorted
    by rev string.)"""
    root = "1-" + H["0"]
    for top, h in ((11, "1"), (10, "2"), (9, "f")):
        path = [f"{n}-{H[h]}" for n in range(top, 1, -1)] + [root]
        replicate(engine, "a", path, {"top": top})
    winner, conflicts = "11-" + H["1"], ["10-" + H["2"], "9-" + H["f"]]
    doc = engine.get("a", conflicts=True)
    assert doc == {"_id": "a", "_rev": winner, "top": 11, "_conflicts": conflicts}
    assert engine.all_docs()["rows"][0]["value"] == {"rev": winner}
    (entry,) = engine.changes()["results"]
    assert entry["changes"] == [{"rev": winner}]
    assert engine.revs_diff({"a": ["12-" + H["3"]]}) == {
        "a": {"missing": ["12-" + H["3"]], "possible_ancestors": [winner, *conflicts]}
    }


#: The `_`-fields couch_doc:transfer_fields keeps as body members, named here and
#: not read from settee.spec.docs.BODY_FIELDS, so a name dropped there is caught.
COUCHDB_BODY_FIELDS = (
    "_access",
    "_replication_id",
    "_replication_state",
    "_replication_state_reason",
    "_replication_state_time",
    "_replication_stats",
)


@pytest.mark.parametrize("field", COUCHDB_BODY_FIELDS)
def test_body_special_fields_are_stored_and_returned(engine: Any, field: str) -> None:
    """The `_`-fields couch_doc:transfer_fields keeps as body members (the
    replicator's state fields, and `_access`) are accepted in any database,
    stored and returned in the body in document order (§2.1). Named here one by
    one, not read from settee.spec.docs.BODY_FIELDS, so dropping one from that set
    is caught. (Found by mutation testing: one name dropped, so the field was refused.)"""
    rev = engine.put({"_id": "a", "x": 1, field: {"v": [1, "two"]}, "y": 2})["rev"]
    assert engine.get("a") == {"_id": "a", "_rev": rev, "x": 1, field: {"v": [1, "two"]}, "y": 2}
    assert list(engine.get("a")) == ["_id", "_rev", "x", field, "y"]
    (result,) = engine.bulk_docs([{"_id": "b", field: "s"}])
    assert result["ok"] is True and engine.get("b")[field] == "s"


def test_compact_stems_every_document_to_the_sessions_revs_limit(opener: Any, reopen: Any) -> None:
    """§12: compact() stems every document with the session's revs_limit, as
    CouchDB's compactor copies trees stemmed to the database's _revs_limit; a
    stemmed revision is then unknown (get(rev=) NotFound, missing in revs_diff)."""
    db = opener.open()
    revs = [db.put({"_id": "a", "v": 0})["rev"]]
    for n in range(1, 6):
        revs.append(db.put({"_id": "a", "_rev": revs[-1], "v": n})["rev"])
    assert len(db.get("a", revs=True)["_revisions"]["ids"]) == 6
    db = reopen(db, revs_limit=2)
    db.compact()
    got = db.get("a", revs=True)
    assert got["_rev"] == revs[-1] and got["v"] == 5
    assert got["_revisions"] == {"start": 6, "ids": [hash_of(revs[-1]), hash_of(revs[-2])]}
    with pytest.raises(NotFound):
        db.get("a", rev=revs[0])
    assert db.revs_diff({"a": [revs[0]]})["a"]["missing"] == [revs[0]]
    db = reopen(db)  # and it stays stemmed
    assert len(db.get("a", revs=True)["_revisions"]["ids"]) == 2


# --------------------------------------------------------------------------- §19 purge


@pytest.fixture
def purging(engine: Any) -> Any:
    """The engine, if it has ``purge`` (§19): an engine written before it is skipped."""
    if not callable(getattr(engine, "purge", None)):
        pytest.skip("this engine has no purge (SEMANTICS.md §19)")
    return engine


def conflicted(db: Any, docid: str = "a") -> tuple[str, str]:
    """A document whose two live leaves share position 2: (winner, loser)."""
    replicate(db, docid, ["2-" + H["9"], "1-" + H["0"]], {"v": 9})
    replicate(db, docid, ["2-" + H["1"], "1-" + H["0"]], {"v": 1})
    return "2-" + H["9"], "2-" + H["1"]


def test_purge_one_leaf_leaves_the_other_as_the_only_revision(purging: Any) -> None:
    """couch_key_tree:remove_leafs removes the leaf and what only it needed;
    chttpd_db answers {"purge_seq": null, "purged": {id: [revs]}}."""
    winner, loser = conflicted(purging)
    assert purging.purge({"a": [winner]}) == {"purge_seq": None, "purged": {"a": [winner]}}
    doc = purging.get("a", revs=True, conflicts=True)
    assert doc == {
        "_id": "a",
        "_rev": loser,
        "v": 1,
        "_revisions": {"start": 2, "ids": [H["1"], H["0"]]},
    }
    with pytest.raises(NotFound):
        purging.get("a", rev=winner)
    assert purging.revs_diff({"a": [winner, loser]}) == {"a": {"missing": [winner]}}
    purging.compact()
    assert purging.get("a", conflicts=True)["_rev"] == loser


def test_purge_every_leaf_removes_the_document_without_a_tombstone(purging: Any) -> None:
    """A document purged whole is gone, not deleted: no row in _all_docs or
    _changes, counted nowhere; a new write starts it again at 1- (purge_docs_test)."""
    winner, loser = conflicted(purging)
    purging.put({"_id": "b"})
    deleted = purging.put({"_id": "c"})["rev"]
    tomb = purging.delete("c", deleted)["rev"]
    before = purging.info()["update_seq"]
    answer = purging.purge({"a": [loser, winner, winner], "c": [tomb]})
    # couch_bt_engine:purge_docs moves update_seq even when no document is left to
    # carry the new seq, "so indexers see" the purge.
    assert purging.info()["update_seq"] != before
    assert answer == {"purge_seq": None, "purged": {"a": [loser, winner], "c": [tomb]}}
    for gone in ("a", "c"):
        with pytest.raises(NotFound) as caught:
            purging.get(gone)
        assert caught.value.reason == "missing"
    assert [r.get("error") for r in purging.all_docs(keys=["a", "c"])["rows"]] == [
        "not_found",
        "not_found",
    ]
    assert ids_of(purging.changes()) == ["b"]
    assert (purging.info()["doc_count"], purging.info()["doc_del_count"]) == (1, 0)
    assert purging.put({"_id": "a"})["rev"].startswith("1-")


def test_purge_ignores_what_is_not_a_leaf(purging: Any) -> None:
    """Revisions that are not leaves (ancestors, unknown ones) and unknown ids purge
    nothing: remove_leafs filters them out."""
    first = purging.put({"_id": "a", "v": 1})["rev"]
    purging.put({"_id": "a", "_rev": first, "v": 2})
    before = snapshot(purging)
    answer = purging.purge({"a": [first, "7-" + H["7"]], "nobody": ["1-" + H["1"]], "x": []})
    assert answer == {"purge_seq": None, "purged": {"a": [], "nobody": [], "x": []}}
    assert snapshot(purging) == before


def test_purge_moves_a_partly_purged_document_to_the_end_of_changes(
    opener: Any, purging: Any
) -> None:
    """The document left with leaves gets a new update_seq (apply_purge_reqs relabels
    its leaves), so a feed resuming from before the purge lists it."""
    winner, _loser = conflicted(purging)
    purging.put({"_id": "b"})
    token = purging.changes()["last_seq"]
    purging.purge({"a": [winner]})
    assert ids_of(purging.changes(since=token)) == ["a"]
    if single_shard(opener):
        assert ids_of(purging.changes()) == ["b", "a"]


def test_purge_of_a_deleted_branch_keeps_the_live_one(purging: Any) -> None:
    """Purging the tombstone leaf of a branch leaves the document live, its deleted
    conflicts gone."""
    replicate(purging, "a", ["2-" + H["2"], "1-" + H["0"]], {"v": 2})
    replicate(purging, "a", ["3-" + H["3"], "2-" + H["3"], "1-" + H["0"]], deleted=True)
    purging.purge({"a": ["3-" + H["3"]]})
    assert purging.get("a", revs=True) == {
        "_id": "a",
        "_rev": "2-" + H["2"],
        "v": 2,
        "_revisions": {"start": 2, "ids": [H["2"], H["0"]]},
    }
    assert purging.revs_diff({"a": ["2-" + H["3"]]}) == {"a": {"missing": ["2-" + H["3"]]}}
    assert purging.info()["doc_del_count"] == 0


def test_purge_outlives_a_reopen_and_a_compaction(purging: Any, reopen: Any) -> None:
    winner, loser = conflicted(purging)
    purging.put({"_id": "b"})
    purging.purge({"a": [winner, loser]})
    purging.compact()
    again = reopen(purging)
    with pytest.raises(NotFound):
        again.get("a")
    assert [r["id"] for r in again.all_docs()["rows"]] == ["b"]


@pytest.mark.parametrize(
    "request_",
    [None, ["a"], {"a": "1-" + H["1"]}, {"a": ["not a rev"]}, {"a": [1]}, {1: ["1-" + H["1"]]}],
)
def test_purge_refuses_a_malformed_request_and_changes_nothing(purging: Any, request_: Any) -> None:
    """As revs_diff's argument (§10): {id: [rev, ...]}, else BadRequest."""
    purging.put({"_id": "a"})
    before = snapshot(purging)
    with pytest.raises(BadRequest):
        purging.purge(request_)
    assert snapshot(purging) == before


def test_purge_then_compaction_and_reopen_keep_update_seq(purging: Any, reopen: Any) -> None:
    """A token taken after a purge stays valid across a compaction and a reopen, and
    a later write is listed after it: update_seq never goes back (a compacted log
    that kept only the documents' own seqs reopened below the purge's seq)."""
    purging.put({"_id": "a"})
    purging.put({"_id": "b"})
    purging.purge({"b": [purging.get("b")["_rev"]]})
    token = purging.info()["update_seq"]
    purging.compact()
    again = reopen(purging)
    again.put({"_id": "c"})
    assert ids_of(again.changes(since=token)) == ["c"]


# -------------------------------------------------------------- the sixth mutation round
# Each test below was added for a slip that passed the whole proof (the semantic suite
# and one minute of the equivalence, interleavings and stress campaigns), as
# stateful_tests/mutants/round6.py records.


def test_atts_since_takes_the_newest_named_revision_on_the_path(engine: Any) -> None:
    """With several revisions of the path named, the newest of them decides which
    attachments come as stubs: couch_db's find_ancestor_rev_pos walks the path from
    the revision read down and stops at the first one named (found by mutation
    testing: a walk from the root, taking the oldest named, passed every check, as
    each test named one revision of a path)."""
    r1 = engine.put({"_id": "a", "_attachments": {"x": _att(b"1")}})["rev"]
    r2 = engine.put(
        {"_id": "a", "_rev": r1, "_attachments": {"x": {"stub": True}, "y": _att(b"2")}}
    )["rev"]
    engine.put(
        {
            "_id": "a",
            "_rev": r2,
            "_attachments": {"x": {"stub": True}, "y": {"stub": True}, "z": _att(b"3")},
        }
    )
    for since in ([r1, r2], [r2, r1]):
        atts = engine.get("a", atts_since=since)["_attachments"]
        assert atts["x"].get("stub") is True and atts["y"].get("stub") is True, since
        assert "data" in atts["z"], since


def test_each_replicated_write_that_deepens_a_branch_past_revs_limit_stems_it(
    opener: Any,
) -> None:
    """§12: the replicated write that takes a branch one revision past revs_limit stems
    it at once (couch_db_updater stems after every merge, maybe_stem_full_doc_info),
    whatever the length of the path it sends; each later write too (found by mutation
    testing: an engine counting the branch's height one short stemmed a write late,
    and passed, as every test read the tree after a second write past the limit)."""
    db = opener.open(opener.path + "-deepen", revs_limit=2)
    path = [f"{n}-{H[format(n, 'x')]}" for n in range(1, 6)]
    replicate(db, "a", [path[1], path[0]], {"v": 2})
    for n in range(2, 5):
        replicate(db, "a", [path[n], path[n - 1]], {"v": n + 1})
        assert db.revs_diff({"a": path[: n + 1]}) == {"a": {"missing": path[: n - 1]}}, n
        assert db.get("a", revs=True)["_revisions"]["start"] == n + 1

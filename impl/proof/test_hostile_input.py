"""Hostile input, decided in spec/ and the same for every implementation (SEMANTICS.md §15.1).

Each test is named after a failure found by trying settee as a hostile caller
would; the equivalence machine draws the same kinds of values at random
(``settee.proof.stateful.hostile``). Every test runs against the reference and
each engine under test (the ``engine`` fixture), and ends by showing that every shard still
accepts writes.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import sys
import threading
import warnings
from typing import Any

import pytest

from settee.spec.errors import BadRequest, Conflict, NotFound, SetteeError
from settee.spec.revs import MAX_REV_POS
from settee.spec.routing import shard_of

H = "a" * 32


class Ids(enum.StrEnum):
    A = "hostile-a"


class Lying(str):
    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __lt__(self, other: object) -> bool:
        return True

    def __str__(self) -> str:
        return "lie"


class Two(enum.IntEnum):
    TWO = 2


def every_shard_accepts_writes(db: Any) -> None:
    """A write to an id of every shard succeeds (a refusing shard raises SetteeError)."""
    shards = len(getattr(db, "shards", [None]))
    ids = {shard_of(f"probe-{n}", shards): f"probe-{n}" for n in range(64)}
    assert len(ids) == shards
    for doc_id in ids.values():
        assert db.put({"_id": doc_id, "probe": True})["ok"]


def test_str_subclass_id_is_stored_as_a_plain_str(engine: Any) -> None:
    """Regression: a StrEnum ``_id`` passed validation, then broke the shard writer
    ("btree keys must be all str or all int") and every later write to that shard."""
    rev = engine.put({"_id": Ids.A, Ids.A: Ids.A})["rev"]
    doc = engine.get("hostile-a")
    assert doc == {"_id": "hostile-a", "_rev": rev, "hostile-a": "hostile-a"}
    assert all(type(v) is str for v in doc) and type(doc["hostile-a"]) is str
    assert engine.bulk_docs([{"_id": Ids.A, "_rev": rev}])[0]["ok"]
    assert [r["id"] for r in engine.all_docs(startkey=Ids.A)["rows"]] == ["hostile-a"]
    every_shard_accepts_writes(engine)


def test_lying_str_subclass_is_judged_by_its_content(engine: Any) -> None:
    """A str subclass whose __eq__/__hash__/__lt__/__str__ lie is read as its real text."""
    engine.put({"_id": Lying("real"), "k": Lying("v")})
    assert engine.get("real")["k"] == "v"
    with pytest.raises(BadRequest):
        engine.put({"_id": Lying("")})
    with pytest.raises(BadRequest):
        engine.put({"_id": Lying("_x")})
    assert engine.all_docs(keys=[Lying("real")])["rows"][0]["id"] == "real"
    every_shard_accepts_writes(engine)


def test_keys_are_read_in_one_walk(engine: Any) -> None:
    """Regression: ``check_keys`` walked ``keys`` three times and kept the third walk,
    so a list whose walks differ slipped an int and a lone surrogate past the check
    (a raw AttributeError). The keys are what one walk gives."""

    class Shifting(list):  # type: ignore[type-arg]
        walks = 0

        def __iter__(self) -> Any:
            self.walks += 1
            return super().__iter__() if self.walks == 1 else iter([1, "\ud800"])

    assert engine.all_docs(keys=Shifting(["a"]))["rows"] == [{"key": "a", "error": "not_found"}]
    every_shard_accepts_writes(engine)


def test_thirty_digit_revision_position_is_refused_and_the_shard_stays_writable(
    engine: Any,
) -> None:
    """Regression: new_edits=False with a 30-digit position, then an update of it, raised
    OverflowError in the writer and disabled the shard (compaction failed too)."""
    rev = f"{10**29}-{H}"
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "big", "_rev": rev}], new_edits=False)
    with pytest.raises(BadRequest):
        engine.put({"_id": "big", "_rev": rev})
    assert engine.info()["doc_count"] == 0
    engine.compact()
    every_shard_accepts_writes(engine)


def test_revision_at_the_largest_position_can_be_edited_once(engine: Any) -> None:
    """Positions up to 2**63-1 are accepted; the child of one is readable, not nameable."""
    top = f"{MAX_REV_POS}-{H}"
    assert engine.bulk_docs([{"_id": "top", "_rev": top}], new_edits=False) == []
    child = engine.put({"_id": "top", "_rev": top, "v": 1})["rev"]
    assert child.startswith(f"{MAX_REV_POS + 1}-")
    assert engine.get("top") == {"_id": "top", "_rev": child, "v": 1}
    assert engine.get("top", revs=True)["_revisions"]["start"] == MAX_REV_POS + 1
    with pytest.raises(BadRequest):
        engine.put({"_id": "top", "_rev": child, "v": 2})
    with pytest.raises(BadRequest):
        engine.get("top", rev=child)
    engine.compact()
    assert engine.get("top")["_rev"] == child
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize(
    "rev",
    ["9" * 5000 + "-a", f"{2**64}-a", "\u0661-a", "\uff11-a", "1_0-a", "+1-a", " 1-a", "1-a\n"],
    ids=[
        "5000 digits",
        "2**64",
        "arabic digit",
        "fullwidth digit",
        "underscore",
        "plus",
        "space",
        "newline",
    ],
)
def test_almost_valid_revisions_are_bad_requests(engine: Any, rev: str) -> None:
    """Regression: a 5,000-digit position raised ValueError (int() digit limit)."""
    engine.put({"_id": "a"})
    for call in (
        lambda: engine.put({"_id": "a", "_rev": rev}),
        lambda: engine.get("a", rev=rev),
        lambda: engine.delete("a", rev),
        lambda: engine.revs_diff({"a": [rev]}),
        lambda: engine.bulk_docs([{"_id": "a", "_rev": rev}], new_edits=False),
    ):
        with pytest.raises(BadRequest):
            call()
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "a", "_revisions": {"start": 10**5000, "ids": ["a"]}}])
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize("huge", [2**63, 2**64, 10**5000], ids=["2**63", "2**64", "5000 digits"])
def test_huge_limit_and_skip_mean_no_limit(engine: Any, huge: int) -> None:
    """Regression: limit=2**63 / skip=2**63 raised ValueError from itertools.islice."""
    engine.bulk_docs([{"_id": i} for i in "abc"])
    assert len(engine.all_docs(limit=huge)["rows"]) == 3
    assert engine.all_docs(skip=huge)["rows"] == []
    assert engine.all_docs(skip=huge)["offset"] == 3
    assert len(engine.all_docs(keys=["a", "z"], limit=huge)["rows"]) == 2
    assert engine.all_docs(keys=["a"], skip=huge)["rows"] == []
    assert len(engine.changes(limit=huge)["results"]) == 3
    assert len(engine.all_docs(limit=Two.TWO)["rows"]) == 2


@pytest.mark.parametrize(
    "bad",
    [-(10**5000), -1, 1.0, float("nan"), True, "3", b"1"],
    ids=["minus 5000 digits", "-1", "1.0", "nan", "True", "'3'", "b'1'"],
)
def test_bad_counts_are_bad_requests(engine: Any, bad: Any) -> None:
    for call in (
        lambda: engine.all_docs(limit=bad),
        lambda: engine.all_docs(skip=bad),
        lambda: engine.changes(limit=bad),
    ):
        with pytest.raises(BadRequest):
            call()


def test_since_zero_may_be_spelled_as_a_str(engine: Any) -> None:
    """Regression: since="0" and since=0.0 were accepted by the engine and refused by
    the reference. "0" is CouchDB's own spelling (every HTTP since is a string)."""
    engine.put({"_id": "a"})
    assert [r["id"] for r in engine.changes(since="0")["results"]] == ["a"]
    assert [r["id"] for r in engine.changes(since=0)["results"]] == ["a"]
    for bad in (0.0, -1, 2**63, 10**5000, b"0", None, True, [0], "1-", "x-abc"):
        with pytest.raises(BadRequest):
            engine.changes(since=bad)


@pytest.mark.parametrize("depth", [501, 100_000])
def test_deep_nesting_is_a_bad_request_not_a_recursion_error(engine: Any, depth: int) -> None:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    with pytest.raises(BadRequest):
        engine.put({"_id": "deep", "v": value})
    with pytest.raises(BadRequest):
        engine.all_docs(keys=value)
    with pytest.raises(BadRequest):
        engine.revs_diff({"a": value})
    shallow: Any = 1
    for _ in range(499):
        shallow = [shallow]
    engine.put({"_id": "deep", "v": shallow})
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize("leaf", [1, [], {}], ids=["scalar", "empty list", "empty object"])
def test_values_may_nest_500_levels_and_not_one_more(engine: Any, leaf: Any) -> None:
    """SEMANTICS §14: a document's own fields are level 1 and a value deeper than 500
    levels is BadRequest, whatever it is, an empty container included; one at level
    500 is stored. (A checker that refused empty containers a level early, as if
    their missing contents were deeper, passed every other test.)"""
    at_500: Any = leaf
    for _ in range(499):
        at_500 = [at_500]
    engine.put({"_id": "at-500", "v": at_500})
    assert engine.get("at-500")["v"] == at_500
    with pytest.raises(BadRequest):
        engine.put({"_id": "at-501", "v": [at_500]})
    with pytest.raises(BadRequest):
        engine.put({"_id": "at-501", "v": {"x": at_500}})
    assert [r["id"] for r in engine.all_docs()["rows"]] == ["at-500"]


def test_error_messages_survive_unprintable_values(engine: Any) -> None:
    """repr() of a 5,000-digit int raises ValueError: messages use a safe description."""
    with pytest.raises(BadRequest, match="bits"):
        engine.all_docs(limit=-(10**5000))
    with pytest.raises(BadRequest):
        engine.put({"_id": "a", "v": 10**5000})


def test_bulk_docs_without_ids_get_new_ids_and_put_still_needs_one(engine: Any) -> None:
    results = engine.bulk_docs([{"v": 1}, {"v": 2}])
    assert len({r["id"] for r in results}) == 2
    with pytest.raises(BadRequest):
        engine.put({"v": 1})
    with pytest.raises(BadRequest):  # a replicated document still needs its revision
        engine.bulk_docs([{"v": 3}], new_edits=False)
    # chttpd_db's _bulk_docs gives an id whatever new_edits says.
    assert engine.bulk_docs([{"_rev": "1-a"}], new_edits=False) == []
    assert engine.info()["doc_count"] == 3


def test_conflict_on_a_made_up_revision_is_decided_by_the_writer(engine: Any) -> None:
    """The probe the equivalence machine uses to show a shard still accepts writes."""
    with pytest.raises(Conflict):
        engine.put({"_id": "probe-0", "_rev": "999-probe"})


class ShortList(list):  # type: ignore[type-arg]
    """A list whose ``__len__`` lies (says it is empty)."""

    def __len__(self) -> int:
        return 0


class TripleItems(dict):  # type: ignore[type-arg]
    """A dict whose ``items()`` lies (gives triples)."""

    def items(self) -> Any:
        return [("a", 1, 2)]


class StartOnly(dict):  # type: ignore[type-arg]
    """A dict whose ``__iter__`` names keys its storage does not have."""

    def __iter__(self) -> Any:
        return iter(["start", "ids"])


class LyingBase64(str):
    """A str whose ``encode`` gives other (valid) base64 than its content."""

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return b"aGVsbG8="  # b"hello"


def test_lying_containers_are_read_as_their_storage(engine: Any) -> None:
    """SEMANTICS.md §15.1: a subclass is its exact base value. Found in review: a
    list whose __len__ lied was a raw IndexError, a dict whose items() lied a raw
    ValueError, and a _revisions dict whose __iter__ lied a raw KeyError."""
    engine.put({"_id": "a", "x": ShortList([1, 2]), "y": TripleItems(k="v")})
    doc = engine.get("a")
    assert doc["x"] == [1, 2] and doc["y"] == {"k": "v"}
    assert engine.put(TripleItems({"_id": "b", "z": 1}))["ok"]
    assert engine.get("b")["z"] == 1
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "c", "_revisions": StartOnly(start=1)}], new_edits=False)
    assert engine.revs_diff(TripleItems({"a": [doc["_rev"]]})) == {}
    every_shard_accepts_writes(engine)


def test_attachment_data_is_the_str_content_not_its_encode(engine: Any) -> None:
    engine.put({"_id": "s", "_attachments": {"f": {"data": LyingBase64("aGk=")}}})
    assert engine.attachment("s", "f")["data"] == b"hi"


@pytest.mark.parametrize("revpos", [2**63, 2**64, 10**5000], ids=["2**63", "2**64", "5000 digits"])
def test_attachment_revpos_beyond_64_bits_is_a_bad_request(engine: Any, revpos: int) -> None:
    """Found in review: with new_edits=False the engine's writer failed on it and the
    reference raised a raw OverflowError after keeping the document in memory."""
    doc = {"_id": "z", "_rev": "1-" + H, "_attachments": {"f": {"data": "eA==", "revpos": revpos}}}
    with pytest.raises(BadRequest):
        engine.bulk_docs([doc], new_edits=False)
    with pytest.raises(BadRequest):
        engine.put({k: v for k, v in doc.items() if k != "_rev"})
    assert engine.all_docs()["rows"] == []
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize(
    "where", ["name of 300 characters", "a file", "under a file", "a NUL byte"]
)
def test_an_unusable_path_is_a_settee_error(opener: Any, tmp_path: Any, where: str) -> None:
    """Found in review: the reference raised raw OSErrors (ENAMETOOLONG,
    FileExistsError, NotADirectoryError) where the engine named the path."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a database")
    path = {
        "name of 300 characters": str(tmp_path / ("n" * 300)),
        "a file": str(blocker),
        "under a file": str(blocker / "db"),
        # The OS refuses it with a raw ValueError (found by mutation testing: a path
        # check without the NUL test passed, as no case held one).
        "a NUL byte": str(tmp_path / "a\0b"),
    }[where]
    opener.open()
    if not os.path.exists(opener.path):
        pytest.skip("this implementation keeps no files at its path (a server's database)")
    with pytest.raises(SetteeError):
        opener.open(path)
    assert blocker.read_bytes() == b"not a database"


def test_a_text_file_is_refused_even_at_its_end(engine: Any) -> None:
    """Found by the equivalence machine (settee verify): the engine read a hostile
    StringIO to its end and refused it; the same object, drained, then gave the
    reference "" and was stored as an empty attachment."""
    import io

    drained = io.StringIO("abc")
    drained.read()
    for data in (io.StringIO("abc"), drained, io.StringIO("")):
        with pytest.raises(BadRequest):
            engine.put({"_id": "t", "_attachments": {"a": {"data": data}}})
    assert engine.all_docs()["rows"] == []


class _ClaimsOne(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1


class _NegativeLen(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return -1


class _RaisingIter(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        raise RuntimeError("cannot be walked")


class _BrokenBitLength(int):
    def bit_length(self) -> int:
        raise RuntimeError("bit_length")


def test_revision_ids_that_claim_fewer_than_they_hold_are_refused(engine: Any) -> None:
    """Regression: ``_revisions.ids`` of three hashes whose ``__len__`` said 1 passed
    the count check with start 1, and positions 0 and -1 were stored: reads of the
    document, ``settee check`` and ``settee dump`` then failed on stored data (and
    strict mode refused every later write)."""
    doc = {"_id": "lying-ids", "_revisions": {"start": 1, "ids": _ClaimsOne(["a", "b", "c"])}}
    with pytest.raises(BadRequest, match="below the 3 ids"):
        engine.bulk_docs([doc], new_edits=False)
    with pytest.raises(SetteeError):
        engine.get("lying-ids")
    doc["_revisions"] = {"start": 3, "ids": _ClaimsOne(["a", "b", "c"])}
    assert engine.bulk_docs([doc], new_edits=False) == []
    assert engine.get("lying-ids", revs=True)["_revisions"] == {"start": 3, "ids": ["a", "b", "c"]}
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize("shape", [_NegativeLen, _RaisingIter, _ClaimsOne])
def test_sequence_arguments_are_read_as_their_storage(engine: Any, shape: type) -> None:
    """Regression: a list whose ``__len__`` is -1 made ``tuple()``/``list()`` raise a raw
    ValueError, one whose ``__iter__`` raises passed its exception out; the storage
    is what the caller handed over."""
    rev = engine.put({"_id": "seq", "v": shape([1, 2])})["rev"]
    assert engine.get("seq")["v"] == [1, 2]
    assert [r["id"] for r in engine.bulk_docs(shape([{"_id": "seq2"}]))] == ["seq2"]
    rows = engine.all_docs(keys=shape(["seq", "seq2"]))["rows"]
    assert [r["id"] for r in rows] == ["seq", "seq2"]
    assert engine.revs_diff({"seq": shape([rev, "9-" + H])})["seq"]["missing"] == ["9-" + H]
    assert engine.get("seq", atts_since=shape([rev]))["v"] == [1, 2]
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize("claimed", [str, int, bool, dict, list, float])
def test_objects_claiming_a_builtin_class_are_bad_requests(engine: Any, claimed: type) -> None:
    """Regression: ``unittest.mock.Mock(spec=str)`` passes ``isinstance(x, str)`` (it
    sets ``__class__``) and then broke ``str.join``, ``int.__index__``, ``dict.items``
    with raw TypeErrors; ``Mock(spec=bool)`` was accepted as a flag and kept."""
    from unittest import mock

    fake = mock.Mock(spec=claimed)
    calls = [
        lambda: engine.get(fake),
        lambda: engine.put({"_id": "m", "v": fake}),
        lambda: engine.put(fake),
        lambda: engine.all_docs(limit=fake),
        lambda: engine.all_docs(keys=[fake]),
        lambda: engine.changes(since=fake),
        lambda: engine.get("m", revs=fake),
        lambda: engine.revs_diff({"m": fake}),
        lambda: engine.bulk_docs(fake),
    ]
    for call in calls:
        with pytest.raises(BadRequest):
            call()
    with pytest.raises(SetteeError):
        engine.get("m")
    every_shard_accepts_writes(engine)


def test_an_int_subclass_with_a_raising_bit_length_is_described_safely(engine: Any) -> None:
    """Regression: an error message called the value's own ``bit_length``."""
    for call in (
        lambda: engine.all_docs(limit=_BrokenBitLength(-1)),
        lambda: engine.get(_BrokenBitLength(5)),
        lambda: engine.changes(include_docs=_BrokenBitLength(1)),
    ):
        with pytest.raises(BadRequest):
            call()
    every_shard_accepts_writes(engine)


def test_a_released_memoryview_is_a_bad_request(engine: Any) -> None:
    view = memoryview(b"abc")
    view.release()
    with pytest.raises(BadRequest, match="cannot be read"):
        engine.put({"_id": "mv", "_attachments": {"a": {"data": view}}})
    every_shard_accepts_writes(engine)


def test_shared_references_are_bounded_before_they_are_copied(engine: Any) -> None:
    """Regression: nine nested ``[x] * 10`` are a few hundred objects describing 10**9
    values; the copy walked every one (minutes, then out of memory) before the size
    limit was checked. A list shared by two fields is an ordinary document."""
    value: Any = 0
    for _ in range(9):
        value = [value] * 10
    with pytest.raises(BadRequest, match="shared"):
        engine.put({"_id": "wide", "v": value})
    tags = ["a", {"b": 1}]
    assert engine.put({"_id": "shared", "x": tags, "y": tags})["ok"]
    assert engine.get("shared")["y"] == ["a", {"b": 1}]
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(BadRequest):
        engine.put({"_id": "loop", "v": loop})
    every_shard_accepts_writes(engine)


def test_spooled_data_is_only_what_a_spool_writer_made(engine: Any) -> None:
    """Regression: a hand-made ``Spooled`` was trusted (its length and digest stored as
    given); a closed one was a raw ValueError."""
    from settee.spec.spool import Spooled, SpoolWriter

    with pytest.raises(TypeError, match="SpoolWriter"):
        Spooled(None, 2**70, "md5-x")  # type: ignore[arg-type]
    writer = SpoolWriter()
    writer.write(b"abc")
    spooled = writer.finish()
    spooled.close()
    with pytest.raises(BadRequest, match="closed"):
        engine.put({"_id": "sp", "_attachments": {"a": {"data": spooled}}})
    every_shard_accepts_writes(engine)


def test_revisions_path_may_start_at_the_largest_position(engine: Any) -> None:
    """`_revisions.start` is a position a caller names, so it may be 2**63-1 as `_rev`
    may (SEMANTICS.md §2.2: N <= MAX_REV_POS); one above is refused. The existing
    test names the top position only through `_rev`. (Found by mutation testing: `start >=
    MAX_REV_POS` refused the largest allowed start.)"""
    top = {"start": MAX_REV_POS, "ids": [H, "b" * 32]}
    assert engine.bulk_docs([{"_id": "top", "_revisions": top, "v": 1}], new_edits=False) == []
    assert engine.get("top", revs=True) == {
        "_id": "top",
        "_rev": f"{MAX_REV_POS}-{H}",
        "v": 1,
        "_revisions": top,
    }
    over = {"start": MAX_REV_POS + 1, "ids": [H]}
    with pytest.raises(BadRequest):
        engine.bulk_docs([{"_id": "over", "_revisions": over}], new_edits=False)
    every_shard_accepts_writes(engine)


class _ZeroLen(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 0


class _RaisingLen(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        raise RuntimeError("this dict cannot be measured")


def _nested_dicts(depth: int, kind: type) -> Any:
    value: Any = kind(x=1)
    for _ in range(depth - 1):
        value = kind(x=value)
    return value


@pytest.mark.parametrize("depth", [500, 10_000])
def test_a_dict_whose_len_lies_is_measured_by_its_storage(engine: Any, depth: int) -> None:
    """SEMANTICS §15.1: a dict subclass is read as its storage, and nesting past 500
    levels is BadRequest. Found by probing: the depth check asked the dict's own
    ``__len__``, so dicts claiming to be empty, their innermost value at level 501,
    were stored, nested 10,000
    deep a raw ValueError from msgpack, and a raising ``__len__`` escaped raw."""
    with pytest.raises(BadRequest):
        engine.put({"_id": "deep", "v": _nested_dicts(depth, _ZeroLen)})
    with pytest.raises(BadRequest):
        engine.put({"_id": "deep", "v": _nested_dicts(depth, _RaisingLen)})
    engine.put({"_id": "shallow", "v": _nested_dicts(499, _RaisingLen)})
    assert engine.get("shallow")["v"] == _nested_dicts(499, dict)
    assert [r["id"] for r in engine.all_docs()["rows"]] == ["shallow"]
    every_shard_accepts_writes(engine)


class _RaisingBytes(bytes):
    def __bytes__(self) -> bytes:
        raise RuntimeError("no bytes today")


class _LyingBytes(bytes):
    def __bytes__(self) -> bytes:
        return b"not the storage"


class _StrBytes(bytearray):
    def __bytes__(self) -> Any:
        return "not bytes at all"


class _EmptyClaimingBytes(bytes):
    def __len__(self) -> int:
        return 0


class _LyingBytesFile:
    def __init__(self) -> None:
        self.pieces = [_LyingBytes(b"ab"), _EmptyClaimingBytes(b"c"), b""]

    def read(self, size: int = -1) -> bytes:
        return self.pieces.pop(0)


def test_attachment_bytes_are_read_from_their_storage(engine: Any) -> None:
    """SEMANTICS §15.1: a subclass is its exact base value, bytes too. Found by
    probing: ``bytes(data)`` called a subclass's ``__bytes__``, so one that raised
    or answered a str escaped as a raw RuntimeError or TypeError, and one that lied
    was stored instead of the bytes it holds (a file's pieces likewise, and one
    claiming to be empty ended the file)."""
    for data in (_RaisingBytes(b"abc"), _LyingBytes(b"abc"), _StrBytes(b"abc")):
        engine.put({"_id": f"att-{type(data).__name__}", "_attachments": {"a": {"data": data}}})
        assert engine.attachment(f"att-{type(data).__name__}", "a")["data"] == b"abc"
    engine.put({"_id": "att-file", "_attachments": {"a": {"data": _LyingBytesFile()}}})
    assert engine.attachment("att-file", "a")["data"] == b"abc"
    every_shard_accepts_writes(engine)


class _AddsAnAttachment:
    """A binary file whose first read adds an attachment to the dict holding it."""

    def __init__(self, attachments: dict[str, Any]) -> None:
        self.attachments = attachments
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.reads == 1:
            self.attachments["later"] = {"data": "eA=="}
            self.attachments.pop("b", None)
            return b"abc"
        return b""


def test_attachments_changed_by_a_file_read_are_read_as_given(engine: Any) -> None:
    """SEMANTICS §15.1: an argument is read as it was when the call read it. Found by
    probing: an attachment file's read that added to (or removed from) the
    ``_attachments`` dict being walked was a raw RuntimeError."""
    attachments: dict[str, Any] = {}
    attachments["a"] = {"data": _AddsAnAttachment(attachments)}
    attachments["b"] = {"data": "eQ=="}
    engine.put({"_id": "grown", "_attachments": attachments})
    stored = engine.get("grown", attachments=True)["_attachments"]
    assert {name: att["data"] for name, att in stored.items()} == {"a": "YWJj", "b": "eQ=="}
    every_shard_accepts_writes(engine)


def test_a_body_another_thread_changes_is_read_at_one_instant(engine: Any) -> None:
    """SEMANTICS §15.1: each list and dict of a body is read once, at one instant.
    Found by probing: a list another thread appended to while ``put`` copied it was a
    raw IndexError (the copy was sized before the walk), a dict a raw RuntimeError,
    and a list it shrank was stored with ``None`` for the items it dropped."""
    grows = list(range(5_000))
    table = {str(n): n for n in range(5_000)}
    shrinks = list(range(50_000))
    stop = threading.Event()

    def change() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            grows.append(n)
            table[f"k{n}"] = n
            if shrinks:
                shrinks.pop()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    changer = threading.Thread(target=change)
    changer.start()
    try:
        for n in range(2):
            engine.put({"_id": f"moving-{n}", "grows": grows, "table": table})
            engine.put({"_id": f"shrinking-{n}", "shrinks": shrinks})
    finally:
        stop.set()
        changer.join()
        sys.setswitchinterval(interval)
    for n in range(2):
        doc = engine.get(f"moving-{n}")
        assert doc["grows"] == grows[: len(doc["grows"])]
        assert all(doc["table"][k] == table[k] for k in doc["table"])
        kept = engine.get(f"shrinking-{n}")["shrinks"]
        assert kept == list(range(len(kept)))
    every_shard_accepts_writes(engine)


@pytest.fixture
def thousand_directories(tmp_path: Any) -> Any:
    """A path of 1,000 nested directories under ``tmp_path``, removed afterwards level
    by level (``shutil.rmtree``, and pytest's own clean-up with it, recurses per level
    and would fail on it). Set up before ``opener``, so torn down after it."""
    path = str(tmp_path / "/".join(["d"] * 1000))
    yield path
    while path != str(tmp_path):
        if os.path.isdir(path):
            shutil.rmtree(path)  # one level: the database's files
        path = os.path.dirname(path)


def test_a_path_of_a_thousand_directories_is_created(
    thousand_directories: str, opener: Any
) -> None:
    """A path is an argument too: its parents are created as ``os.makedirs`` would,
    however many there are. Found by probing: ``os.makedirs`` recurses once per
    missing parent, so a path of 1,000 short directories (2,000 characters, which
    the OS takes) was a raw RecursionError in both implementations."""
    opener.open()
    if not os.path.exists(opener.path):
        pytest.skip("this implementation keeps no files at its path (a server's database)")
    db = opener.open(thousand_directories)
    db.put({"_id": "deep"})
    assert [row["id"] for row in db.all_docs()["rows"]] == ["deep"]
    db.close()
    assert opener.open(thousand_directories).get("deep")["_id"] == "deep"


def test_attachment_names_that_read_the_same_name_one_attachment(engine: Any) -> None:
    """SEMANTICS §15.1: a str subclass is its exact value, so ``"a"`` and a lying
    subclass of ``"a"`` (another hash: another key of the dict) are one name, the
    later value winning as for any dict key of a document. Found by probing: both
    were stored, so ``get`` showed the second attachment and ``attachment`` read
    the first."""
    engine.put(
        {"_id": "twice", "_attachments": {"a": {"data": "eA=="}, Lying("a"): {"data": "eQ=="}}}
    )
    doc = engine.get("twice", attachments=True)
    assert doc["_attachments"]["a"]["data"] == "eQ=="
    assert engine.attachment("twice", "a")["data"] == b"y"
    expected = engine.put({"_id": "once", "_attachments": {"a": {"data": "eQ=="}}})["rev"]
    assert doc["_rev"] == expected  # the revision digests one attachment
    every_shard_accepts_writes(engine)


def test_every_hostile_attachment_data_is_stored_or_refused(opener: Any) -> None:
    """Each value of the machine's attachment-data table, in one sweep: stored, or
    refused with a SetteeError that changes nothing. The machine draws one of them now
    and then; this shows each at once. (Found probing: an object whose ``read`` lookup
    raises, a lazy proxy, let its error escape raw from validation.)"""
    from settee.proof.stateful import hostile

    engine = opener.open(fsync=False)  # a sweep of many writes; durability is not asked

    for n, label in enumerate(sorted(hostile.ATTACHMENT_DATA)):
        data = hostile.build(hostile.ATTACHMENT_DATA, label)
        doc = {"_id": f"att-{n}", "_attachments": {"a": {"data": data}}}
        try:
            engine.put(doc)
        except SetteeError:
            with pytest.raises(SetteeError):
                engine.get(doc["_id"])
        except Exception as exc:
            raise AssertionError(f"attachment data {label}: raw {exc!r}") from exc
    every_shard_accepts_writes(engine)


def test_every_hostile_text_as_an_id_or_a_document_is_refused_or_answered(opener: Any) -> None:
    """Each value of the machine's text table as the id ``get``, ``delete`` and ``put``
    take, and as the document itself: answered, or refused with a SetteeError that
    changes nothing. (Found probing: a dead ``weakref.proxy`` raised ReferenceError from
    ``isinstance``'s lookup of its ``__class__``.)"""
    from settee.proof.stateful import hostile

    engine = opener.open(fsync=False)  # a sweep of many writes; durability is not asked

    calls = {
        "get": lambda value: engine.get(value),
        "delete": lambda value: engine.delete(value, None),
        "put": lambda value: engine.put(value),
        "put _id": lambda value: engine.put({"_id": value}),
    }
    for label in sorted(hostile.TEXTS):
        for name, call in calls.items():
            try:
                call(hostile.build(hostile.TEXTS, label))
            except SetteeError:
                pass
            except Exception as exc:
                raise AssertionError(f"{name} of {label}: raw {exc!r}") from exc
    every_shard_accepts_writes(engine)


class _Big(int):
    """An int subclass past 64 bits."""


class _Real(float):
    """A float subclass."""


#: Values no document may hold, by label: each is refused at every place it may sit.
_BAD_VALUES: dict[str, Any] = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "2**64": 2**64,
    "-(2**63)-1": -(2**63) - 1,
    "int subclass 2**64": _Big(2**64),
    "float subclass inf": _Real("inf"),
    "float subclass nan": _Real("nan"),
    "lone surrogate": "x\ud800",
    "bytes": b"x",
}
#: Where a value sits in a body: each wraps it once.
_PLACES: dict[str, Any] = {
    "a field": lambda v: v,
    "a list": lambda v: [1, v],
    "a tuple": lambda v: (v,),
    "a dict": lambda v: {"k": v},
    "a dict in a list": lambda v: [{"k": v}],
    "a list in a dict in a list": lambda v: [{"k": [0.5, v]}],
}


def test_a_bad_value_is_refused_wherever_it_sits(engine: Any) -> None:
    """Each value no document may hold is refused at the top, in a list, in a dict and
    deeper: found by mutation testing, a validator whose inline fast path skipped the
    finiteness test for a list's floats (or an int subclass's bound) stored NaN, as
    every test put its bad value in a field."""
    rev = engine.put({"_id": "a", "v": 1})["rev"]
    for label, value in _BAD_VALUES.items():
        for place, wrap in _PLACES.items():
            for doc in (
                {"_id": "a", "_rev": rev, "v": wrap(value)},
                {"_id": "n", "v": wrap(value)},
            ):
                with pytest.raises(BadRequest):
                    engine.put(doc)
                    pytest.fail(f"{label} in {place} was stored")
    with pytest.raises(BadRequest):
        engine.put({"_id": "n", "v": [{"k\ud800": 1}]})
    assert engine.get("a")["_rev"] == rev
    assert [r["id"] for r in engine.all_docs()["rows"]] == ["a"]
    every_shard_accepts_writes(engine)


def _exact(value: Any, where: str = "answer") -> None:
    """AssertionError unless ``value`` is made only of exact builtins (no caller's
    subclass came back, SEMANTICS.md §15.1)."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            assert type(key) is str, f"{where} has key {key!r} of {type(key).__name__}"
            _exact(item, f"{where}[{key!r}]")
    elif kind is list or kind is tuple:
        for i, item in enumerate(value):
            _exact(item, f"{where}[{i}]")
    else:
        assert kind in (str, int, float, bool, bytes, type(None)), (
            f"{where} is a {kind.__name__}: a caller's class came back"
        )


class _Sub(str):
    """A str subclass that adds nothing."""


@pytest.mark.parametrize("kind", [_Sub, Lying], ids=["subclass", "lying"])
def test_every_str_argument_is_read_as_its_text(engine: Any, kind: type) -> None:
    """Each str argument of each call, passed as a str subclass, gets the answer its
    text gets, made of exact builtins. Found by mutation testing: ``endkey``, an
    attachment's name, ``changes``' ``since``, ``get``'s ``rev`` and ``revs_diff``'s
    revisions, each checked and then kept as the caller's object on one path, passed
    every test (the machine never reads attachments by a hostile name, and a lying
    ``since`` equals ``0``)."""
    ones = engine.bulk_docs(
        [
            {"_id": "a", "_attachments": {"x": {"data": "eA=="}, "y": {"data": "eQ=="}}},
            {"_id": "b", "v": 1},
            {"_id": "c", "v": 2},
        ]
    )
    rev = {r["id"]: r["rev"] for r in ones}
    two = engine.put({"_id": "b", "_rev": rev["b"], "v": 3})["rev"]
    other = "9-" + H
    s = kind

    calls: dict[str, Any] = {
        "all_docs keys": lambda t: engine.all_docs(keys=[t("c"), t("zz"), t("a")]),
        "all_docs startkey": lambda t: engine.all_docs(startkey=t("b")),
        "all_docs endkey": lambda t: engine.all_docs(endkey=t("a")),
        "all_docs endkey descending": lambda t: engine.all_docs(endkey=t("b"), descending=True),
        "changes since now": lambda t: engine.changes(since=t("now"))["results"],
        "changes since 0": lambda t: engine.changes(since=t("0"), include_docs=True)["results"],
        "get": lambda t: engine.get(t("b"), rev=t(rev["b"]), revs=True),
        "get winner": lambda t: engine.get(t("b"), rev=t(two), conflicts=True),
        "get atts_since": lambda t: engine.get(t("a"), atts_since=[t(rev["a"])]),
        "attachment": lambda t: engine.attachment(t("a"), t("y"), rev=t(rev["a"])),
        "attachment_chunks": lambda t: (lambda meta, chunks: (meta, b"".join(chunks)))(
            *engine.attachment_chunks(t("a"), t("y"))
        ),
        # One id a request: two lying keys are one key of the caller's own dict.
        "revs_diff": lambda t: engine.revs_diff({t("b"): [t(two), t(other)]}),
        "revs_diff missing id": lambda t: engine.revs_diff({t("zz"): [t(two)]}),
    }
    for name, call in calls.items():
        want = call(str)
        try:
            got = call(s)
        except SetteeError as exc:
            raise AssertionError(f"{name} of a {kind.__name__}: {exc!r}") from exc
        _exact(got, name)
        assert got == want, f"{name} of a {kind.__name__}: {got!r} != {want!r}"
    assert engine.delete(s("c"), s(rev["c"]))["ok"]
    with pytest.raises(NotFound):
        engine.get("c")
    if callable(getattr(engine, "purge", None)):  # an engine before SEMANTICS.md §19 has none
        purged = engine.purge({s("b"): [s(two)]})
        _exact(purged, "purge")
        assert purged["purged"] == {"b": [two]}
    every_shard_accepts_writes(engine)


@pytest.mark.parametrize("flag", ["revs", "conflicts", "attachments"])
def test_each_flag_of_get_is_checked_with_every_other_option_at_its_default(
    engine: Any, flag: str
) -> None:
    """A flag that is not True or False is refused even when every other option is at
    its default, where ``get`` takes its fast path. Found by mutation testing: a fast
    path taking ``not revs`` for ``revs is False`` answered ``revs=0``, ``None`` and
    ``[]``, and the machine's hostile ``get`` sets ``conflicts=True`` by default."""
    engine.put({"_id": "b", "v": 1})
    values: tuple[Any, ...] = (0, 1, None, [], "", Two.TWO, 0.0)
    for value in values:
        with pytest.raises(BadRequest):
            engine.get("b", **{flag: value})
            pytest.fail(f"get(..., {flag}={value!r}) was answered")
    every_shard_accepts_writes(engine)


def _doc_texts(t: type, doc_id: str) -> list[tuple[str, Any]]:
    """Calls writing documents whose every str is made by ``t``; each is ``(call, doc)``."""
    h1, h2 = "1" * 32, "2" * 32
    return [
        ("put", {t("_id"): t(doc_id), t("k"): t("v"), t("n"): {t("deep"): [t("x")]}}),
        (
            "put",
            {
                t("_id"): t(doc_id + "-att"),
                t("_attachments"): {
                    t("a.txt"): {t("content_type"): t("text/plain"), t("data"): t("aGk=")}
                },
            },
        ),
        (
            "replicate",
            {
                t("_id"): t(doc_id + "-rep"),
                t("_revisions"): {t("start"): 2, t("ids"): [t(h2), t(h1)]},
                t("v"): 1,
            },
        ),
        ("replicate", {t("_id"): t(doc_id + "-rev"), t("_rev"): t("3-" + h1)}),
    ]


def test_every_str_in_a_document_is_read_as_its_text(engine: Any) -> None:
    """A document whose every key and str value (ids, revisions, ``_revisions`` hashes,
    attachment names and fields) is a str subclass is stored as the same document of
    plain strs. Found by mutation testing: a ``_revisions`` hash formatted as the
    caller's object, and special fields sorted by the subclass's own ``startswith``,
    passed every test; a lying str (whose ``format`` says ``"lie"``, whose
    ``startswith`` says no) shows both."""
    for t, doc_id in ((str, "plain"), (_Sub, "sub")):
        for call, doc in _doc_texts(t, doc_id):
            if call == "put":
                engine.put(doc)
            else:
                assert engine.bulk_docs([doc], new_edits=False) == []
    for suffix in ("", "-att", "-rep", "-rev"):
        got, want = engine.get("sub" + suffix, revs=True), engine.get("plain" + suffix, revs=True)
        _exact(got, "get")
        assert {**got, "_id": "x"} == {**want, "_id": "x"}, (suffix, got, want)
    # One lying key a document (all lying keys are one key of a dict): each is the
    # special field its text names, and a lying hash is its text.
    assert engine.put({Lying("_id"): "lying-id", "v": 1})["id"] == "lying-id"
    with pytest.raises(BadRequest):
        engine.put({"_id": "lying-special", Lying("_x"): 1})
    engine.bulk_docs(
        [{"_id": "lying-rev", "_revisions": {"start": 2, "ids": [Lying("2" * 32), "1" * 32]}}],
        new_edits=False,
    )
    assert engine.get("lying-rev")["_rev"] == "2-" + "2" * 32
    every_shard_accepts_writes(engine)


# -- a damaged directory -------------------------------------------------------------------------

#: What one file of a database's directory may have become (SEMANTICS §16: a half-deleted
#: folder, a copy cut short, a disk that garbled a block, a name now taken by a folder or
#: by a link to a file that is gone).
FILE_DAMAGES = ("removed", "emptied", "cut in half", "garbled", "a folder", "a dangling link")


def _damage_file(path: str, how: str) -> None:
    with open(path, "rb") as file:
        data = file.read()
    os.remove(path)
    if how == "a folder":
        os.mkdir(path)
    elif how == "a dangling link":  # a backup's link whose target is gone
        os.symlink(path + ".gone", path)
    elif how != "removed":
        half = len(data) // 2
        if how == "emptied":
            kept = b""
        elif how == "cut in half":
            kept = data[:half]
        else:  # garbled: 64 bytes from the middle on, inverted
            flipped = bytes(b ^ 0xFF for b in data[half : half + 64])
            kept = data[:half] + flipped + data[half + 64 :]
        with open(path, "wb") as file:
            file.write(kept)


def _entries(folder: str) -> dict[str, bytes | None]:
    """Every entry of ``folder``: a file's bytes, None for anything else."""
    out: dict[str, bytes | None] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as file:
                out[name] = file.read()
        else:
            out[name] = None
    return out


def _rewritten(before: dict[str, bytes | None], after: dict[str, bytes | None]) -> set[str]:
    """The files of ``before`` whose bytes ``after`` holds other than by appending."""
    return {
        name
        for name, found in before.items()
        if isinstance(found, bytes)
        and not (isinstance(after.get(name), bytes) and after[name].startswith(found))  # type: ignore[union-attr]
    }


def _open_damaged(opener: Any, folder: str) -> Any:
    """The database at ``folder`` opened with the engine's options, or None if refused;
    not the opener's, whose teardown checks every database it opened for damage."""
    try:
        return opener.param.factory()(folder, **opener.param.options)
    except SetteeError:
        return None


def _use_damaged(db: Any, ids: list[str]) -> None:
    """Read every document and write one to every shard: each an answer or a
    SetteeError (a write whose tree path crosses garbled bytes is refused with a
    CorruptionError), never a raw exception; then close."""
    try:
        for doc_id in ids:
            with contextlib.suppress(SetteeError):
                db.get(doc_id)
        with contextlib.suppress(SetteeError):
            every_shard_accepts_writes(db)
    finally:
        db.close()


def test_a_damaged_directory_is_refused_or_opened_whole(opener: Any, tmp_path: Any) -> None:
    """Every file of a database's folder, in turn, removed, emptied, cut in half,
    garbled, or replaced by a folder or a dangling link: ``open`` refuses with a
    SetteeError or opens a database whose every read and write is an answer or a
    SetteeError (an older commit may come back: a shard cut short loses its newest
    ones; a write whose tree path crosses garbled bytes is refused). Either way every
    entry it found is still there, and every file it found keeps its bytes, appended
    to at most; only files a clean open rewrites too (hints such as settee's HEADS)
    are exempt, and a refused open makes nothing but those (SEMANTICS §16: ``open()``
    never deletes what it finds)."""
    db = opener.open()
    if not os.path.isdir(opener.path):
        pytest.skip("this implementation keeps no files at its path (a server's database)")
    ids = [f"kept-{n:02d}" for n in range(12)]
    db.bulk_docs([{"_id": doc_id, "n": n} for n, doc_id in enumerate(ids)])
    db.close()
    pristine = str(tmp_path / "pristine")
    shutil.copytree(opener.path, pristine)
    found = _entries(pristine)
    clean = str(tmp_path / "clean")
    shutil.copytree(pristine, clean)
    opener.open(clean).close()
    opened = _entries(clean)
    hints = _rewritten(found, opened) | (set(opened) - set(found))
    for name in [n for n, data in found.items() if data is not None]:
        for how in FILE_DAMAGES:
            where = f"{name} {how}"
            folder = str(tmp_path / f"damaged-{len(os.listdir(tmp_path))}")
            shutil.copytree(pristine, folder)
            _damage_file(os.path.join(folder, name), how)
            before = _entries(folder)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an older commit opened says so, rightly
                db = _open_damaged(opener, folder)
                if db is not None:
                    _use_damaged(db, ids)
            after = _entries(folder)
            assert set(before) <= set(after), f"{where}: open deleted {set(before) - set(after)}"
            changed = _rewritten(before, after) - hints
            assert not changed, f"{where}: open rewrote {sorted(changed)}"
            if db is None:
                made = set(after) - set(before) - hints
                assert not made, f"{where}: a refused open made {sorted(made)}"

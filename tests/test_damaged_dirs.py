"""Damaged database directories: refused with a clear error, never "repaired" by deletion.

Each test is named after what a damaged directory used to do (silent data loss,
deleted shards, a bypassable lock) or does now (SEMANTICS.md §16, README
"Caveats"). ``open()`` never deletes or truncates anything it finds.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import settee
import settee.reference
from settee.check import check_database
from settee.cli import main as cli_main
from settee.file import ShardFile
from settee.io import OsFileSystem
from settee.layout import META_NAME, MetadataRebuiltWarning, shard_path
from settee.shard import ShardIdentity, check_identity
from settee.spec.errors import CorruptionError, SetteeError


def _make(path: Path, shards: int = 2, docs: int = 50) -> dict[str, str]:
    with settee.open(str(path), shards=shards) as db:
        results = db.bulk_docs([{"_id": f"d{i:03d}", "n": i} for i in range(docs)])
    return {r["id"]: r["rev"] for r in results}


def _listing(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.mark.parametrize("damage", ["zero length", "garbage", "torn first block"])
def test_shard_without_a_valid_header_is_a_corruption_error_naming_the_file(
    tmp_path: Path, damage: str
) -> None:
    """Regression: a zero-length or headerless shard opened as an empty shard (20 of 50
    docs served, no error), and after one write `settee check` said OK."""
    db_path = tmp_path / "db"
    _make(db_path)
    shard = Path(shard_path(str(db_path), 1))
    content = {"zero length": b"", "garbage": os.urandom(9000), "torn first block": b"\x01\x89SE"}
    shard.write_bytes(content[damage])
    before = _listing(db_path)
    with pytest.raises(CorruptionError) as caught:
        settee.open(str(db_path))
    assert caught.value.path == str(shard)
    assert "restore" in str(caught.value)
    assert _listing(db_path) == before, "open() must not change a damaged directory"
    assert list(check_database(str(db_path))), "settee check must report the damage too"


def test_missing_metadata_is_rebuilt_from_the_shard_headers_without_losing_data(
    tmp_path: Path,
) -> None:
    """Regression: a missing settee.meta made open() delete every shard file and create
    an empty database."""
    db_path = tmp_path / "db"
    revs = _make(db_path, shards=3)
    (db_path / META_NAME).unlink()
    with pytest.warns(MetadataRebuiltWarning), settee.open(str(db_path)) as db:
        assert db.info()["doc_count"] == len(revs)
        assert {r["id"]: r["value"]["rev"] for r in db.all_docs()["rows"]} == revs
        assert len(db.shards) == 3
    assert not list(check_database(str(db_path)))


@pytest.mark.parametrize("damage", ["shard missing", "shard headerless"])
def test_missing_metadata_beside_a_damaged_shard_is_refused_and_nothing_deleted(
    tmp_path: Path, damage: str
) -> None:
    db_path = tmp_path / "db"
    _make(db_path, shards=3)
    (db_path / META_NAME).unlink()
    shard = Path(shard_path(str(db_path), 2))
    if damage == "shard missing":
        shard.unlink()
    else:
        shard.write_bytes(b"")
    before = _listing(db_path)
    with pytest.raises(SetteeError, match="restore"):
        settee.open(str(db_path))
    assert _listing(db_path) == before


def test_missing_metadata_beside_shards_of_two_databases_is_refused(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    _make(one, shards=2)
    _make(two, shards=2)
    os.replace(shard_path(str(two), 1), shard_path(str(one), 1))
    (one / META_NAME).unlink()
    before = _listing(one)
    with pytest.raises(SetteeError, match="different databases"):
        settee.open(str(one))
    assert _listing(one) == before


def test_metadata_of_another_shard_count_is_kept(tmp_path: Path) -> None:
    """An explicit ``shards`` that the shard headers contradict is refused before the
    missing settee.meta is rebuilt: a refused open changes nothing (it wrote the
    metadata, then refused; found by the real-file fault hunt). A plain open rebuilds."""
    db_path = tmp_path / "db"
    revs = _make(db_path, shards=2)
    (db_path / META_NAME).unlink()
    before = _listing(db_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MetadataRebuiltWarning)
        with pytest.raises(SetteeError, match="shards=2"):
            settee.open(str(db_path), shards=4)
    assert _listing(db_path) == before
    with pytest.warns(MetadataRebuiltWarning), settee.open(str(db_path)) as db:
        assert {r["id"]: r["value"]["rev"] for r in db.all_docs()["rows"]} == revs


def test_a_file_named_like_a_metadata_temp_file_is_kept(tmp_path: Path) -> None:
    """Found in review: creating the database removed whatever ``settee.meta.tmp``
    held (an older settee's temp name). Open never deletes what it finds: the
    metadata's temp file is named after the database's own uuid."""
    db_path = tmp_path / "db"
    db_path.mkdir()
    (db_path / (META_NAME + ".tmp")).write_bytes(b"someone's precious bytes")
    with settee.open(str(db_path)) as db:
        db.put({"_id": "a"})
    with settee.open(str(db_path)) as db:
        assert db.get("a")["_id"] == "a"
    assert (db_path / (META_NAME + ".tmp")).read_bytes() == b"someone's precious bytes"
    assert not [p.name for p in db_path.iterdir() if p.name.startswith(META_NAME + ".tmp-")]


def _holder(path: Path) -> subprocess.Popen[str]:
    """A process that opens ``path``, writes, says "ready" and sleeps until killed."""
    code = textwrap.dedent(
        f"""
        import sys, time, settee
        db = settee.open({str(path)!r})
        db.put({{"_id": "held"}})
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_single_writer_lock_cannot_be_bypassed_by_unlinking_a_file(tmp_path: Path) -> None:
    """Regression: deleting the LOCK file while a database was open let a second process
    open it for writing (300 of 600 acknowledged writes lost). The lock is now an flock
    on the directory itself: no file in it can be unlinked to get around it."""
    db_path = tmp_path / "db"
    holder = _holder(db_path)
    try:
        for name in os.listdir(db_path):
            if name in ("LOCK", META_NAME):
                os.unlink(db_path / name)
        with pytest.raises(SetteeError, match="another process"):
            settee.open(str(db_path))
    finally:
        holder.kill()
        holder.wait()


def test_kill_9_of_the_holder_releases_the_lock_at_once(tmp_path: Path) -> None:
    db_path = tmp_path / "db"
    holder = _holder(db_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    with settee.open(str(db_path)) as db:
        assert db.get("held")["_id"] == "held"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("below", [False, True], ids=["the path", "a folder above it"])
def test_a_path_that_is_a_file_is_refused_saying_so_and_kept(tmp_path: Path, below: bool) -> None:
    """The errno alone ("File exists") read as if a database were there already."""
    afile = tmp_path / "notes.txt"
    afile.write_text("mine")
    with pytest.raises(SetteeError, match="is a file, not a database directory"):
        settee.open(str(afile / "db" if below else afile))
    assert afile.read_text() == "mine"


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    with settee.open(str(tmp_path / "db")), pytest.raises(SetteeError, match="another"):
        settee.open(str(tmp_path / "db"))


@pytest.mark.parametrize("command", ["dump", "check"])
def test_dump_and_check_on_a_path_without_a_database_create_nothing(
    tmp_path: Path, command: str, capsys: Any
) -> None:
    """Regression: `settee dump` on a mistyped path created an empty database there."""
    missing = tmp_path / "no-such-db"
    assert cli_main([command, str(missing)]) != 0
    assert not missing.exists()
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    assert cli_main([command, str(empty)]) != 0
    assert list(empty.iterdir()) == []
    err = capsys.readouterr().err.lower()
    assert "no settee database" in err or "not a settee database" in err or command == "check"


def test_open_with_create_false_refuses_a_path_without_a_database(tmp_path: Path) -> None:
    for opener in (settee.open, settee.reference.open):
        with pytest.raises(SetteeError, match="check the path"):
            opener(str(tmp_path / "nothing"), create=False)
    assert not (tmp_path / "nothing").exists()


def test_compaction_leftover_is_not_deleted_by_open(tmp_path: Path) -> None:
    db_path = tmp_path / "db"
    _make(db_path, shards=1)
    leftover = Path(shard_path(str(db_path), 0) + ".compact")
    leftover.write_bytes(b"half a compaction")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settee.open(str(db_path)).close()
    assert leftover.read_bytes() == b"half a compaction"


# -- any damage, drawn ---------------------------------------------------------------------------

#: A database's own files, each of which a damaged directory may lack or hold damaged.
_OWN_NAMES = (META_NAME, "shard-000.settee", "shard-001.settee", "HEADS", "LOCK")
#: Files a directory may hold beside them that only look like the database's own.
_FOREIGN_NAMES = (META_NAME + ".tmp", "shard-001.settee.compact", "shard-002.settee", "notes.txt")
#: Removal twice: the commonest damage (a half-deleted directory).
_DAMAGES = (
    "remove",
    "remove",
    "empty",
    "truncate",
    "garbage",
    "directory",
    # A FIFO made open wait forever for a peer; a dangling symlink settee.meta was
    # taken for a missing one and replaced (both found in review).
    "fifo",
    "dangling symlink",
    # The writer wrote HEADS slots through a link over a shard's first bytes.
    "symlink to a shard",
)


def _damage(path: Path, name: str, damage: str, where: int) -> None:
    target = path / name
    if target.is_dir():
        return
    data = target.read_bytes() if target.exists() else b""
    if damage != "directory" and os.path.lexists(target):
        target.unlink()
    if damage == "empty":
        target.write_bytes(b"")
    elif damage == "truncate":
        target.write_bytes(data[: where % (len(data) + 1)])
    elif damage == "garbage":
        target.write_bytes(bytes((where + i) % 256 for i in range(where % 5000)))
    elif damage == "directory" and not target.exists():
        target.mkdir()
    elif damage == "fifo":
        os.mkfifo(target)
    elif damage == "dangling symlink":
        target.symlink_to(path / "no-such-backup" / name)
    elif damage == "symlink to a shard":
        target.symlink_to(f"shard-{where % 2:03d}.settee")


def _state(path: Path) -> dict[str, bytes | str | None]:
    """Every entry of ``path``: a file's bytes, None for a directory, what a symlink
    names or "fifo"."""
    return {p.name: _entry(p) for p in sorted(path.iterdir())}


def _entry(p: Path) -> bytes | str | None:
    if p.is_symlink():
        return f"symlink to {os.readlink(p)}"
    if p.is_fifo():
        return "fifo"
    return None if p.is_dir() else p.read_bytes()


#: Files open may write: shards are appended to (a creation that crashed before its
#: metadata is finished), HEADS is a rewritten hint, LOCK an informational empty file.
_OPEN_WRITES = {"HEADS", "LOCK"}


@given(
    own=st.dictionaries(st.sampled_from(_OWN_NAMES), st.sampled_from(_DAMAGES), max_size=3),
    foreign=st.dictionaries(
        st.sampled_from(_FOREIGN_NAMES), st.sampled_from(("garbage", "directory")), max_size=2
    ),
    where=st.integers(0, 2**16),
    # The shard count a caller names, or none: an explicit count the shard headers
    # contradict was refused only after settee.meta had been rebuilt (found in review).
    shards=st.sampled_from((None, None, 1, 2, 3)),
)
# The review's find, which random draws make too (--hypothesis-seed=1 does at once):
# CI's derandomized draw must not depend on luck for it.
@example(own={META_NAME: "remove"}, foreign={META_NAME + ".tmp": "garbage"}, where=100, shards=None)
@example(own={"HEADS": "symlink to a shard"}, foreign={}, where=1, shards=None)
@example(own={META_NAME: "remove"}, foreign={}, where=0, shards=3)
@settings(deadline=None)
@pytest.mark.timeout(120)  # an open that waits on a FIFO fails instead of hanging
def test_open_of_any_damaged_directory_keeps_every_byte_it_finds(
    tmp_path_factory: pytest.TempPathFactory,
    own: dict[str, str],
    foreign: dict[str, str],
    where: int,
    shards: int | None,
) -> None:
    """Whatever is removed, emptied, cut short, garbled or turned into a directory
    (the database's files, and files that only look like its own), open either
    refuses with a SetteeError or opens a database whose every shard takes writes;
    and every entry it found is still there, each file with its bytes (a shard
    file may only grow). A refused open also adds nothing but LOCK and HEADS.
    Found by review: creation removed a ``settee.meta.tmp`` it had not written."""
    path = tmp_path_factory.mktemp("damaged") / "db"
    _make(path, shards=2, docs=20)
    for name, damage in [*own.items(), *foreign.items()]:
        _damage(path, name, damage, where)
    before = _state(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with settee.open(str(path), readonly=True) as reader:
                reader.all_docs(include_docs=True)
        except SetteeError:
            pass
        options = {} if shards is None else {"shards": shards}
        try:
            db = settee.open(str(path), **options)
        except SetteeError:
            db = None
    if db is None:
        made = set(_state(path)) - set(before) - _OPEN_WRITES
        assert not made, f"a refused open made {sorted(made)}"
    if db is not None:
        with db:
            for n in range(8):  # ids of both shards
                db.put({"_id": f"after-{n}"})
    after = _state(path)
    for name, found in before.items():
        assert name in after, f"open deleted {name}"
        kept = after[name]
        if name in _OPEN_WRITES or found is None:
            continue
        if name.startswith("shard-") and name.endswith(".settee") and db is not None:
            assert isinstance(kept, bytes) and isinstance(found, bytes), name
            assert kept.startswith(found), f"open rewrote {name}"
        else:
            assert kept == found, f"open changed {name}"


@pytest.mark.parametrize("fmt", ["5", 5.0, None, [5], True])
def test_metadata_whose_format_is_no_version_is_a_corruption_error(
    tmp_path: Path, fmt: Any
) -> None:
    """Found in review: ``"format": "5"`` (crc intact) said "format version 5, this
    settee reads version 5: run settee dump", contradicting itself."""
    from settee.spec.format import encode_frame, encode_payload

    db_path = tmp_path / "db"
    _make(db_path, shards=2)
    meta = db_path / META_NAME
    meta.write_bytes(encode_frame(encode_payload({"format": fmt, "shards": 2, "uuid": "x" * 32})))
    before = _listing(db_path)
    with pytest.raises(CorruptionError, match="format"):
        settee.open(str(db_path))
    assert _listing(db_path) == before


def test_files_no_crash_could_leave_are_not_adopted(tmp_path: Path) -> None:
    """Found in review: with no settee.meta, a text file named shard-000.settee and an
    empty shard-001.settee were taken for a crashed creation: open appended a header
    to the text and created two more shards. A crash leaves at most one headerless
    shard file, the last one made."""
    db_path = tmp_path / "db"
    db_path.mkdir()
    (db_path / "shard-000.settee").write_bytes(b"my notes, not a settee file\n")
    (db_path / "shard-001.settee").write_bytes(b"")
    before = _state(db_path)
    for readonly in (False, True):
        with pytest.raises(SetteeError):
            settee.open(str(db_path), readonly=readonly)
    assert _state(db_path) == before


@pytest.mark.parametrize("name", ["shard-001.settee", "shard-003.settee"])
def test_a_lone_headerless_shard_after_the_first_is_not_adopted(tmp_path: Path, name: str) -> None:
    """Found in review: a crash leaves a headerless shard file only as the last one
    it made, after every shard before it; a lone shard-003 got a header appended."""
    db_path = tmp_path / "db"
    db_path.mkdir()
    (db_path / name).write_bytes(b"my notes\n")
    before = _state(db_path)
    with pytest.raises(SetteeError):
        settee.open(str(db_path), shards=8)
    assert _state(db_path) == before


def test_engine_fs_option_must_be_a_file_system(tmp_path: Path) -> None:
    """Regression: ``fs="/tmp"`` was a raw AttributeError."""
    for bad in ("/tmp", 1, object()):
        with pytest.raises(settee.BadRequest, match="fs must be"):
            settee.open(str(tmp_path / "db"), fs=bad)
    assert not (tmp_path / "db").exists()


def test_reference_readonly_open_leaves_a_torn_log_as_it_is(tmp_path: Path) -> None:
    """Regression: a readonly open of a reference log with a torn last record wrote a
    ``.torn-N`` copy and truncated the log (a writer appending meanwhile lost bytes)."""
    path = tmp_path / "ref"
    with settee.reference.open(str(path)) as db:
        db.put({"_id": "a"})
    log = path / "reference.log"
    log.write_bytes(log.read_bytes() + b"\x94\xa1")  # a record cut short
    before = _state(path)
    with pytest.warns(UserWarning, match="incomplete last record"):
        reader = settee.reference.open(str(path), readonly=True)
    with reader:
        assert [r["id"] for r in reader.all_docs()["rows"]] == ["a"]
    assert _state(path) == before


@pytest.mark.parametrize(
    "record",
    [
        ["a", None, {"1-a": [None, False]}, {"1-a": {}}],
        ["a", 1, ["1-a"], {}],
        [7, 1, {"1-a": [None, False]}, {"1-a": {}}],
        ["a", 1, {"1-a": [None, False]}, {"1-a": "body"}],
        ["a", 1, {"1-a": "garbage"}, {}],
        # A leaf without its body: a get of it raised a raw KeyError.
        ["a", 1, {"1-a": [None, False]}, {}],
        5,
    ],
)
def test_reference_log_records_of_the_wrong_shape_are_corruption(
    tmp_path: Path, record: Any
) -> None:
    """Regression: well-formed msgpack records of the wrong shape made open raise raw
    TypeErrors, or reads later."""
    import msgpack

    path = tmp_path / "ref"
    with settee.reference.open(str(path)) as db:
        db.put({"_id": "b"})
    log = path / "reference.log"
    log.write_bytes(log.read_bytes() + msgpack.packb(record))
    with pytest.raises(settee.CorruptionError):
        settee.reference.open(str(path))


def _reference_log_cuts(path: Path, start: int) -> Iterator[tuple[bool, Any]]:
    """The reference database at ``path`` opened readonly with its log cut at every
    offset from ``start`` to its end: ``(whether the log is whole, the database)``."""
    log = path / "reference.log"
    data = log.read_bytes()
    for cut in range(start, len(data) + 1):
        log.write_bytes(data[:cut])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the torn tail is reported, and ignored
            db = settee.reference.open(str(path), readonly=True)
        yield cut == len(data), db


def test_reference_log_cut_inside_a_call_leaves_every_leaf_readable(tmp_path: Path) -> None:
    """Regression: a call that edited one document twice wrote a record per edit,
    each with the tree after the call; a cut between them left a leaf without its
    body, a state no call produces. A record per document per call cannot be split."""
    path = tmp_path / "ref"
    with settee.reference.open(str(path)) as db:
        db.put({"_id": "z"})
        start = (path / "reference.log").stat().st_size
        replicated = [{"_id": "a", "_rev": f"1-{h}", "v": h} for h in ("a", "b")]
        db.bulk_docs(replicated, new_edits=False)
    for whole, db in _reference_log_cuts(path, start):
        with db:
            assert db.get("z")["_id"] == "z"
            if not whole:  # the call's one record for "a" is cut: none of it stays
                with pytest.raises(settee.NotFound):
                    db.get("a")
                assert db.revs_diff({"a": ["1-a", "1-b"]}) == {"a": {"missing": ["1-a", "1-b"]}}
                continue
            for rev in ("1-a", "1-b"):
                assert db.get("a", rev=rev)["v"] == rev[2:]


def test_reference_log_cut_inside_a_call_keeps_a_prefix_of_its_documents(
    tmp_path: Path,
) -> None:
    """A cut inside a call of several documents keeps the records before it, in
    the call's order: the survivors are a prefix of the call, never a later
    document without an earlier one (records written in another order passed
    every other test, found by mutation testing)."""
    path = tmp_path / "ref"
    order = ["m", "c", "x", "a"]  # not sorted: the call's order is what counts
    with settee.reference.open(str(path)) as db:
        db.put({"_id": "z"})
        start = (path / "reference.log").stat().st_size
        db.bulk_docs([{"_id": i, "v": i} for i in order])
    seen = set()
    for _, db in _reference_log_cuts(path, start):
        with db:
            rows = db.all_docs(keys=order)["rows"]
            kept = [row["key"] for row in rows if "error" not in row]
        assert kept == order[: len(kept)], kept
        seen.add(len(kept))
    assert seen == set(range(len(order) + 1))


@pytest.mark.parametrize("readonly", [False, True], ids=["writer", "readonly"])
@pytest.mark.parametrize("damage", ["shards swapped", "shard of another database"])
def test_a_shard_file_of_another_shard_or_database_is_refused(
    tmp_path: Path, damage: str, readonly: bool
) -> None:
    """Every header names its database, shard and shard count (FORMAT.md "Shard header
    payload": a shard of another database is refused). Mutants: a shard open that
    skipped the identity check served another database's documents (or a shard's
    documents under the other shard's hash range), and passed the whole proof."""
    db_path = tmp_path / "db"
    _make(db_path)
    first, second = Path(shard_path(str(db_path), 0)), Path(shard_path(str(db_path), 1))
    if damage == "shards swapped":
        first_bytes = first.read_bytes()
        first.write_bytes(second.read_bytes())
        second.write_bytes(first_bytes)
    else:
        _make(tmp_path / "other")
        first.write_bytes(Path(shard_path(str(tmp_path / "other"), 0)).read_bytes())
    before = _listing(db_path)
    with warnings.catch_warnings(), pytest.raises(SetteeError, match="cannot be moved"):
        # A readonly open may warn first: HEADS names commits the swapped file lacks.
        warnings.simplefilter("ignore")
        settee.open(str(db_path), readonly=readonly)
    assert _listing(db_path) == before, "open() must not change a damaged directory"
    problems = list(check_database(str(db_path)))
    assert any(f"{first}:" in p and "header names" in p for p in problems), problems


def test_a_header_naming_another_shard_count_is_refused(tmp_path: Path) -> None:
    """The identity check compares all three fields: a header of shard 0 of the same
    database opened with another shard count is refused (mutant: a check of the
    uuid and index only)."""
    db_path = tmp_path / "db"
    _make(db_path)
    fs = OsFileSystem()
    file = ShardFile.open(fs, shard_path(str(db_path), 0), create=False)
    try:
        header = file.header
        assert header is not None
        check_identity(file, ShardIdentity(header.db, 0, 2))
        for wrong in (ShardIdentity(header.db, 0, 3), ShardIdentity(header.db, 1, 2)):
            with pytest.raises(SetteeError, match="cannot be moved between databases"):
                check_identity(file, wrong)
    finally:
        file.close()


@pytest.mark.parametrize("missing", [0, 2])
def test_a_shard_file_missing_beside_the_metadata_is_refused_and_nothing_made(
    tmp_path: Path, missing: int
) -> None:
    """Whichever shard file is gone, the first or the last, open refuses the database
    as damaged and creates nothing in its place (found by mutation testing: a check
    that stopped one shard short opened the database with its last shard empty)."""
    path = tmp_path / "db"
    _make(path, shards=3, docs=10)
    os.remove(shard_path(str(path), missing))
    with pytest.raises(settee.layout.DamagedDirectory, match="is missing"):
        settee.open(str(path))
    assert not os.path.exists(shard_path(str(path), missing))


def _write_meta_file(db_path: Path, info: dict[str, Any]) -> None:
    from settee.spec.format import encode_frame, encode_payload

    (db_path / META_NAME).write_bytes(encode_frame(encode_payload(info)))


def _uuid_of(db_path: Path) -> str:
    with settee.open(str(db_path), readonly=True) as db:
        return str(db.shards[0].identity.db_uuid)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"format": "older"}, SetteeError, "format version"),
        ({"shards": 2000}, CorruptionError, "shards=2000"),
        ({"uuid": None}, CorruptionError, "lacks format, shards or uuid"),
    ],
)
def test_metadata_that_is_not_this_settees_is_refused_and_kept(
    tmp_path: Path, change: dict[str, Any], error: type[Exception], match: str
) -> None:
    """An older format version is another settee's database (dump and load it), not
    one to open; a shard count past 1024 or a missing uuid is damage (mutants L2,
    L3, L18: each was accepted)."""
    from settee.spec.format import FORMAT_VERSION

    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=5)
    info: dict[str, Any] = {"format": FORMAT_VERSION, "shards": 2, "uuid": _uuid_of(db_path)}
    for key, value in change.items():
        if value is None:
            del info[key]
        else:
            info[key] = FORMAT_VERSION - 1 if value == "older" else value
    _write_meta_file(db_path, info)
    before = _listing(db_path)
    with pytest.raises(error, match=match):
        settee.open(str(db_path))
    assert _listing(db_path) == before


def test_a_shard_file_past_the_shard_count_is_not_adopted(tmp_path: Path) -> None:
    """With no settee.meta, a headerless shard-002 beside the two shards of a 2-shard
    database is no crashed creation's (mutant L5 took index == count for one)."""
    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=5)
    (db_path / META_NAME).unlink()
    (db_path / "shard-002.settee").write_bytes(b"")
    before = _state(db_path)
    with pytest.raises(SetteeError, match="do not fit"):
        settee.open(str(db_path))
    assert _state(db_path) == before


@pytest.mark.parametrize(
    "name", ["shard-0002.settee", "shard-0001.settee", "shard-\u0661\u0662\u0663.settee"]
)
def test_a_file_named_like_no_shard_settee_writes_is_not_taken_for_one(
    tmp_path: Path, name: str
) -> None:
    """Only the names settee writes (``shard-001.settee``) are shard files. Found by a
    sweep of stray names: with no settee.meta, ``shard-0002.settee`` (and Arabic-Indic
    digits, which ``\\d`` matched) was refused as a shard "that does not fit", and
    ``shard-0001.settee`` stood for shard 1 in place of ``shard-001.settee`` when the
    directory listed it last, so a healthy database was refused as missing shard 1."""
    db_path = tmp_path / "db"
    revs = _make(db_path, shards=2, docs=5)
    (db_path / META_NAME).unlink()
    (db_path / name).write_bytes(b"a stray file, no shard\n")
    with pytest.warns(MetadataRebuiltWarning), settee.open(str(db_path)) as db:
        assert {r["id"]: r["value"]["rev"] for r in db.all_docs()["rows"]} == revs
    assert (db_path / name).read_bytes() == b"a stray file, no shard\n"


def test_two_headerless_shards_are_not_a_crashed_creation(tmp_path: Path) -> None:
    """A creation writes and syncs each shard's header before it makes the next file,
    so a crash leaves at most one headerless file. (Mutant L7, allowing two, is
    equivalent: the lower one is then never the last file, which is refused too.)"""
    db_path = tmp_path / "db"
    _make(db_path, shards=3, docs=0)
    (db_path / META_NAME).unlink()
    for name in ("shard-001.settee", "shard-002.settee"):
        (db_path / name).write_bytes(b"")
    before = _state(db_path)
    with pytest.raises(SetteeError, match="hold no settee header"):
        settee.open(str(db_path))
    assert _state(db_path) == before


def test_a_headerless_last_shard_of_one_block_is_a_crashed_creation(tmp_path: Path) -> None:
    """A first header torn inside its block leaves at most one block of bytes: that
    file is finished, not refused (mutant L9 refused exactly one block), and its
    bytes are kept (a header is appended after them)."""
    from settee.spec.format import BLOCK_SIZE

    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=0)
    (db_path / META_NAME).unlink()
    torn = b"\x07" * BLOCK_SIZE
    (db_path / "shard-001.settee").write_bytes(torn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with settee.open(str(db_path)) as db:
            db.put({"_id": "after"})
    assert (db_path / "shard-001.settee").read_bytes().startswith(torn)
    with settee.open(str(db_path)) as again:
        assert again.get("after")["_id"] == "after"


@pytest.mark.parametrize("blocks", [1.001, 2])
def test_a_headerless_last_shard_of_more_than_one_block_is_refused(
    tmp_path: Path, blocks: float
) -> None:
    """A crashed creation leaves at most one block of a first header: a headerless file
    any longer held commits whose headers are damaged, so it is refused, beside shards
    that hold nothing too, and nothing is written. Found by mutation testing: a bound
    of two blocks adopted (and emptied) such a file, and only one block was tried."""
    from settee.spec.format import BLOCK_SIZE

    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=0)
    (db_path / META_NAME).unlink()
    (db_path / "shard-001.settee").write_bytes(b"\x07" * int(blocks * BLOCK_SIZE))
    before = _listing(db_path)
    with pytest.raises(CorruptionError, match="cannot tell what the shard held"):
        settee.open(str(db_path))
    assert _listing(db_path) == before


def test_a_metadata_temp_file_of_this_database_is_replaced_when_it_is_rebuilt(
    tmp_path: Path,
) -> None:
    """The temp file named after the database's own uuid can only be left by its own
    creation: rebuilding the metadata writes it afresh (mutant L17 appended to the
    leftover, and the renamed settee.meta no longer decoded)."""
    from settee.layout import meta_temp_name

    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=5)
    leftover = db_path / meta_temp_name(_uuid_of(db_path))
    leftover.write_bytes(b"half a frame")
    (db_path / META_NAME).unlink()
    with pytest.warns(MetadataRebuiltWarning), settee.open(str(db_path)) as db:
        assert db.info()["doc_count"] == 5
    assert not leftover.exists()
    with settee.open(str(db_path)) as again:
        assert again.info()["doc_count"] == 5


@pytest.mark.parametrize("target", ["another shard", "dangling", "a hard link to another shard"])
def test_a_heads_symlink_is_not_written_through(tmp_path: Path, target: str) -> None:
    """HEADS is a hint the writer rewrites in place: through a symlink to another
    shard it wrote its slots over that shard's first bytes (its first header, or
    a compacted file's documents), and a dangling one made a file wherever it
    pointed. A symlink there is left as it is, and readers scan the shard files;
    so is a HEADS that is another name of a shard file (a hard link)."""
    db_path = tmp_path / "db"
    _make(db_path, shards=2, docs=20)
    heads = db_path / "HEADS"
    heads.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if target == "a hard link to another shard":
        os.link(db_path / "shard-001.settee", heads)
    else:
        heads.symlink_to("shard-001.settee" if target == "another shard" else elsewhere / "HEADS")
    before = _state(db_path)
    with pytest.warns(UserWarning, match="HEADS"), settee.open(str(db_path)) as db:
        for n in range(8):  # ids of both shards
            db.put({"_id": f"after-{n}"})
        with settee.open(str(db_path), readonly=True) as reader:
            assert reader.info()["doc_count"] == 28
    after = _state(db_path)
    shared = target == "a hard link to another shard"  # HEADS is shard-001 itself
    assert after["HEADS"] == (after["shard-001.settee"] if shared else before["HEADS"])
    for name in ("shard-000.settee", "shard-001.settee"):
        found, kept = before[name], after[name]
        assert isinstance(found, bytes) and isinstance(kept, bytes)
        assert kept.startswith(found), f"open rewrote {name}"
    assert not list(elsewhere.iterdir())
    assert not list(check_database(str(db_path)))


def test_missing_metadata_beside_a_header_naming_too_many_shards_is_refused(
    tmp_path: Path,
) -> None:
    """A crc-valid header naming more shards than settee.meta may hold (1024): with
    no settee.meta, open took the count from it, made 1024 empty shard files and a
    settee.meta the next open refused (with 2**40 shards: a MemoryError). Nothing
    a creation could leave; refused, and nothing made."""
    from settee.shard import shard_header

    db_path = tmp_path / "db"
    db_path.mkdir()
    identity = ShardIdentity("ab" * 16, 0, 1025)
    with ShardFile.open(OsFileSystem(), shard_path(str(db_path), 0), create=True) as file:
        file.write_header(shard_header(identity, None, None, 0))
        file.sync()
    before = _state(db_path)
    with pytest.raises(settee.layout.DamagedDirectory, match="1025 shards"):
        settee.open(str(db_path))
    assert _state(db_path) == before


@pytest.mark.parametrize("opener", ["writer", "readonly", "check"])
def test_a_huge_metadata_file_is_refused_without_reading_it_whole(
    tmp_path: Path, opener: str
) -> None:
    """settee.meta is one small frame, but open read the whole file whatever its
    size: one grown to a terabyte (a sparse file here; a symlink to a big file
    does the same) was a raw MemoryError from open, readonly open and settee check."""
    db_path = tmp_path / "db"
    _make(db_path, shards=1, docs=3)
    with open(db_path / META_NAME, "r+b") as meta:
        meta.truncate(1 << 40)
    if opener == "check":
        [problem] = list(check_database(str(db_path)))
        assert "settee.meta" in problem and "bytes" in problem
        return
    with pytest.raises(CorruptionError, match="bytes"):
        settee.open(str(db_path), readonly=opener == "readonly")
    assert (db_path / META_NAME).stat().st_size == 1 << 40


def _shard_file_to_append_to(db_path: Path) -> ShardFile:
    """The shard file of a new one-shard database of five documents, open to append a
    commit by hand; HEADS is removed, since that commit is no writer's."""
    _make(db_path, shards=1, docs=5)
    os.remove(db_path / "HEADS")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ShardFile.open(OsFileSystem(), shard_path(str(db_path), 0), create=False)


@pytest.mark.parametrize(
    "value",
    [
        (1, False, "1-" + "a" * 32),  # three fields: no active bytes to sum
        (1, False, "1-" + "a" * 32, "3", b"\x92\x80\x80", (4100, 3)),  # active a str
        7,  # not a list at all
    ],
    ids=["short", "active str", "int"],
)
def test_check_names_a_malformed_by_id_value_the_reduction_cannot_sum(
    tmp_path: Path, value: Any
) -> None:
    """FORMAT.md ``malformed_by_id_value``: settee check names the document. Its tree
    check recounted the leaf's reduction from the unchecked values first, and a
    value without a summable ``active`` field made ``settee check`` die with a raw
    IndexError or TypeError (found with a crc-valid header whose by_id root was
    the by_seq root)."""
    from dataclasses import replace

    from settee.btree import KV_NODE

    db_path = tmp_path / "db"
    with _shard_file_to_append_to(db_path) as file:
        header = file.header
        assert header is not None
        batch = file.new_batch()
        leaf = batch.add([KV_NODE, [["zz-bad", value]]])  # no writer reduces such a leaf
        file.write_batch(batch)
        file.write_header(replace(header, by_id=(leaf, (1, 0, 0))))
        file.sync()
    problems = list(check_database(str(db_path)))
    assert any("'zz-bad'" in p and "malformed" in p for p in problems), problems


def _by_seq_rooted_at_by_id(path: str) -> None:
    """A crc-valid newest header whose by_seq root is the by_id root (a writer bug or
    a crafted file: no flipped bit makes it)."""
    with settee.open(path, shards=1) as db:
        db.bulk_docs([{"_id": f"d{i:03d}"} for i in range(20)])
    os.remove(os.path.join(path, "HEADS"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        file = ShardFile.open(OsFileSystem(), shard_path(path, 0), create=False)
    header = file.header
    file.write_header(dataclasses.replace(header, by_seq=header.by_id))
    file.sync()
    file.close()


@pytest.mark.parametrize("readonly", [False, True])
def test_a_tree_root_naming_the_other_trees_node_is_corruption(
    tmp_path: Path, readonly: bool
) -> None:
    """Found with real-file faults: changes() compared int seqs with the by_id node's
    str keys, a raw TypeError (the node cached by the by_id tree or not), and
    compaction failed the same way. Opening checks each root holds its tree's
    keys (each node a tree decodes is checked too), and settee check reports it."""
    path = str(tmp_path / "db")
    _by_seq_rooted_at_by_id(path)
    with pytest.raises(CorruptionError, match="not one of this tree's"):
        settee.open(path, readonly=readonly)
    assert any("not one of this tree's" in problem for problem in check_database(path))


def test_a_shard_file_extended_by_a_huge_hole_opens_without_reading_it(tmp_path: Path) -> None:
    """A shard file extended by a 64 GiB hole (``truncate``; some file systems leave
    such tails after a crash) holds nothing past its data: opening finds the newest
    header after reading a few blocks, where it scanned the whole hole block by
    block before (20 GiB took 72 s: a terabyte, an open that never ends). The hole
    is kept, like any tail, and the next commit goes after it."""
    from settee.io import CountingFileSystem

    stored = _make(tmp_path / "db", shards=1, docs=20)
    [shard] = [p for p in (tmp_path / "db").iterdir() if p.name.endswith(".settee")]
    os.truncate(shard, shard.stat().st_size + (64 << 30))
    fd = os.open(shard, os.O_RDONLY)
    try:
        if not hasattr(os, "SEEK_HOLE") or os.lseek(fd, 0, os.SEEK_HOLE) >= (64 << 30):
            pytest.skip("this file system does not report holes")
    finally:
        os.close(fd)
    fs = CountingFileSystem(OsFileSystem())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the hole is a torn tail, reported as one
        db = settee.open(str(tmp_path / "db"), fs=fs)
    try:
        assert fs.bytes_read < (1 << 20), fs.bytes_read
        assert {doc_id: db.get(doc_id)["_rev"] for doc_id in stored} == stored
        db.put({"_id": "after-the-hole"})
    finally:
        db.close()
    assert shard.stat().st_size > (64 << 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with settee.open(str(tmp_path / "db")) as again:
            assert again.get("after-the-hole")["_id"] == "after-the-hole"


def test_compaction_of_a_symlinked_shard_file_replaces_the_file_behind_the_link(
    tmp_path: Path,
) -> None:
    """A shard file moved to another disk and linked back: compaction writes its
    copy beside the file the link names and renames it over that file, so the link
    stays and the data stays on that disk (it replaced the link with a regular file
    in the database's directory, and left the old file behind the link)."""
    stored = _make(tmp_path / "db", shards=1, docs=40)
    [shard] = [p for p in (tmp_path / "db").iterdir() if p.name.endswith(".settee")]
    elsewhere = tmp_path / "disk2" / shard.name
    elsewhere.parent.mkdir()
    os.replace(shard, elsewhere)
    shard.symlink_to(elsewhere)
    with settee.open(str(tmp_path / "db")) as db:
        for doc_id, rev in list(stored.items())[:20]:
            stored[doc_id] = db.put({"_id": doc_id, "_rev": rev, "again": True})["rev"]
        before = elsewhere.stat().st_size
        db.compact()
        db.put({"_id": "after"})
    assert shard.is_symlink() and os.path.realpath(shard) == str(elsewhere)
    assert elsewhere.stat().st_size < before  # the compacted copy, written over there
    assert not [p for p in (tmp_path / "db").iterdir() if p.name.endswith(".compact")]
    assert not [p for p in elsewhere.parent.iterdir() if p.name != shard.name]
    with settee.open(str(tmp_path / "db")) as db:
        assert {doc_id: db.get(doc_id)["_rev"] for doc_id in stored} == stored
        assert db.get("after")["_id"] == "after"


@pytest.mark.parametrize("where", ["past the end", "a node"])
def test_check_reads_every_leaf_body_a_document_names(tmp_path: Path, where: str) -> None:
    """A by_id value whose winner's body entry names bytes that are no body (a writer
    bug: every frame of the file still passes its crc, and the value agrees with
    itself) is reported by ``settee check``, naming the document. Found by mutation
    testing: a check that never read the leaf bodies passed every test."""
    from dataclasses import replace

    from settee.btree import KV_NODE, NodeCache
    from settee.docinfo import DocInfo
    from settee.snapshot import by_id_tree
    from settee.spec.format import encode_payload

    db_path = tmp_path / "db"
    with _shard_file_to_append_to(db_path) as file:
        header = file.header
        assert header is not None
        by_id = by_id_tree(file, header.by_id, NodeCache(1 << 20))
        [(doc_id, value)] = [(k, v) for k, v in by_id.fold() if k == "d000"]
        info = DocInfo.from_value(doc_id, value)
        bad = {"past the end": file.size() + 10 * 4096, "a node": header.by_id[0]}[where]
        entry = [bad, *info.bodies[info.winner][1:]]
        revs = encode_payload([info.tree, {**info.bodies, info.winner: entry}])
        batch = file.new_batch()
        leaf = batch.add([KV_NODE, [[doc_id, [*value[:4], revs, entry]]]])
        file.write_batch(batch)
        file.write_header(replace(header, by_id=(leaf, (1, 0, value[3]))))
        file.sync()
    problems = list(check_database(str(db_path)))
    assert any("body of 'd000'" in p for p in problems), problems

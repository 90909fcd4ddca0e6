"""The command line: --version/--help, ``settee check``, ``settee dump``/``load``."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import settee
from settee.check import check_database
from settee.cli import main
from settee.file import LostCommitWarning, TornTailWarning
from settee.io import MemoryFileSystem
from settee.layout import shard_path
from settee.transfer import dump, load


def _populate(db: settee.Database) -> None:
    """Live, updated, deleted, conflicted and recreated documents."""
    docs = db.bulk_docs([{"_id": f"d{i:02d}", "i": i} for i in range(40)])
    rev = db.put({"_id": "d00", "_rev": docs[0]["rev"], "i": 100})["rev"]
    db.delete("d01", docs[1]["rev"])
    db.put({"_id": "d01", "again": True})
    db.delete("d02", docs[2]["rev"])
    db.bulk_docs(
        [{"_id": "d00", "_rev": "2-aaaa", "_revisions": {"start": 2, "ids": ["aaaa", rev[2:]]}}],
        new_edits=False,
    )
    branch = {"start": 2, "ids": ["bbbb", docs[3]["rev"][2:]]}
    db.bulk_docs([{"_id": "d03", "_rev": "2-bbbb", "_revisions": branch}], new_edits=False)
    # An attachment of two chunk terms, so check and the bit-flip test read them too.
    data = base64.b64encode(bytes(range(256)) * 300).decode()
    db.put({"_id": "d04", "_rev": docs[4]["rev"], "_attachments": {"f": {"data": data}}})


def test_version_and_help(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert settee.__version__ in capsys.readouterr().out
    assert main([]) == 0
    assert "verify" in capsys.readouterr().out


def test_console_script_lists_every_subcommand(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "settee", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    for command in ("verify", "check", "dump", "load", "bench", "serve"):
        assert command in result.stdout


def test_check_reports_ok_on_a_healthy_database(tmp_path: Any, capsys: Any) -> None:
    path = str(tmp_path / "db")
    with settee.open(path, shards=3) as db:
        _populate(db)
        db.compact()
        db.put({"_id": "after-compaction"})
    assert main(["check", path]) == 0
    assert capsys.readouterr().out.strip() == "OK"


def test_check_on_a_missing_database_is_a_problem(tmp_path: Any, capsys: Any) -> None:
    assert main(["check", str(tmp_path / "nothing")]) == 1
    assert "not a settee database" in capsys.readouterr().out


def test_check_prints_a_kept_torn_tail_as_a_note_and_passes(tmp_path: Any, capsys: Any) -> None:
    path = str(tmp_path / "db")
    with settee.open(path, shards=1) as db:
        _populate(db)
    with open(shard_path(path, 0), "ab") as f:
        f.write(b"\x07" * 5)
    with pytest.warns(TornTailWarning), settee.open(path) as db:
        db.put({"_id": "after-the-tail"})
    assert main(["check", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[-1] == "OK", lines
    assert lines[0].startswith(f"note: {shard_path(path, 0)}:") and "5 bytes" in lines[0]


def test_check_fails_on_damage_and_still_prints_notes(tmp_path: Any, capsys: Any) -> None:
    path = str(tmp_path / "db")
    with settee.open(path, shards=1) as db:
        _populate(db)
    shard = shard_path(path, 0)
    with open(shard, "ab") as f:
        f.write(b"\x07" * 5)
    with pytest.warns(TornTailWarning), settee.open(path) as db:
        db.put({"_id": "after-the-tail"})
    data = bytearray(Path(shard).read_bytes())
    data[300] ^= 0x04  # superseded data of an early commit
    Path(shard).write_bytes(bytes(data))
    assert main(["check", path]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("note: ")] != []
    assert any(line.startswith(f"{shard}:") and "does not verify" in line for line in out), out


def _flip_offsets(data: bytes, end: int) -> list[int]:
    """Every 11th offset before ``end``, but only every 99th inside the attachment's
    bytes (the repeating 0..255 run, half the file): a flip there is one more flip in
    the same crc-checked chunk payload, and sampling it as densely as the frames,
    nodes and headers around it doubled the test's time."""

    def in_attachment_run(offset: int) -> bool:
        window = data[offset - 8 : offset + 8]
        return len(window) == 16 and all(
            (window[0] + k) % 256 == byte for k, byte in enumerate(window)
        )

    return [o for o in range(0, end, 11) if o % 99 == 0 or not in_attachment_run(o)]


def test_check_pinpoints_every_flipped_bit_in_committed_data() -> None:
    """Flip one bit at sampled offsets of the committed part of a shard file:
    check reports that file, at an offset at or before the flip (the damaged
    frame's start; one past a damaged block marker), every time."""
    fs = MemoryFileSystem()
    with settee.Database("/db", fs=fs, shards=1) as db:
        _populate(db)
    shard = "/db/shard-000.settee"
    pristine = fs.contents(shard)
    assert list(check_database("/db", fs)) == []
    header_start = len(pristine) - len(pristine) % 4096 or len(pristine) - 4096
    tried = 0
    for offset in _flip_offsets(pristine, header_start):
        damaged = bytearray(pristine)
        damaged[offset] ^= 1 << (offset % 8)
        fs.set_contents(shard, bytes(damaged))
        problems = list(check_database("/db", fs))
        assert problems, f"flip at {offset} went unnoticed"
        where = [int(p.split(":")[1]) for p in problems if p.startswith(shard + ":")]
        assert where and min(where) <= offset + (offset % 4096 == 0), (offset, problems)
        tried += 1
    fs.set_contents(shard, pristine)
    assert tried > 100


def test_dump_then_load_reproduces_winners_conflicts_and_tombstones(tmp_path: Any) -> None:
    with settee.open(str(tmp_path / "a"), shards=2) as source:
        _populate(source)
        out = io.StringIO()
        count = dump(source, out)
        with settee.open(str(tmp_path / "b"), shards=3) as target:
            assert load(target, io.StringIO(out.getvalue())) == count
            for query in ({}, {"include_docs": True}, {"keys": ["d00", "d01", "d02", "nope"]}):
                assert target.all_docs(**query) == source.all_docs(**query)
            for doc_id in ("d00", "d01", "d03"):
                want = source.get(doc_id, revs=True, conflicts=True)
                assert target.get(doc_id, revs=True, conflicts=True) == want
            assert target.get("d02", rev=source.all_docs(keys=["d02"])["rows"][0]["value"]["rev"])
            for key in ("doc_count", "doc_del_count"):
                assert target.info()[key] == source.info()[key]


def test_load_rejects_garbage_and_writes_nothing(tmp_path: Any) -> None:
    with settee.open(str(tmp_path / "db")) as db:
        with pytest.raises(settee.BadRequest, match="line 2"):
            load(db, io.StringIO('{"_id": "a", "_rev": "1-a"}\nnot json\n'))
        assert db.info()["doc_count"] == 0


def test_load_skips_blank_lines(tmp_path: Any) -> None:
    """JSON lines may be separated by blank lines (an edited dump, a trailing newline)."""
    with settee.open(str(tmp_path / "db")) as db:
        lines = '\n{"_id": "a", "_rev": "1-a"}\n\n  \n{"_id": "b", "_rev": "1-b"}\n\n'
        assert load(db, io.StringIO(lines)) == 2
        assert [row["id"] for row in db.all_docs()["rows"]] == ["a", "b"]


def test_load_refuses_a_document_the_database_refuses(tmp_path: Any) -> None:
    """A line bulk_docs answers with an error row (here a stub of an attachment no
    stored revision has) is not dropped silently: load says which and fails."""
    with settee.open(str(tmp_path / "db")) as db:
        line = {"_id": "s", "_rev": "1-a", "_attachments": {"f": {"stub": True}}}
        with pytest.raises(settee.BadRequest, match="missing_stub"):
            load(db, io.StringIO(json.dumps(line) + "\n"))


def test_load_counts_every_document_across_batches(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load stores LOAD_BATCH lines per bulk_docs call and returns how many it stored
    in all, each once."""
    monkeypatch.setattr(settee.transfer, "LOAD_BATCH", 2)
    with settee.open(str(tmp_path / "db")) as db:
        lines = "".join(json.dumps({"_id": f"d{i}", "_rev": "1-a"}) + "\n" for i in range(5))
        assert load(db, io.StringIO(lines)) == 5
        assert db.info()["doc_count"] == 5
        assert len(db.changes()["results"]) == 5


def test_dump_then_load_keeps_attachments(tmp_path: Any) -> None:
    import base64

    data = bytes(range(256)) * 400
    with settee.open(str(tmp_path / "a"), shards=2) as source:
        att = {"content_type": "image/png", "data": base64.b64encode(data).decode()}
        rev = source.put({"_id": "p", "_attachments": {"a.png": att}})["rev"]
        source.put({"_id": "p", "_rev": rev, "v": 2, "_attachments": {"a.png": {"stub": True}}})
        out = io.StringIO()
        dump(source, out)
        with settee.open(str(tmp_path / "b"), shards=3) as target:
            load(target, io.StringIO(out.getvalue()))
            assert target.get("p", revs=True) == source.get("p", revs=True)
            assert target.attachment("p", "a.png") == source.attachment("p", "a.png")


@pytest.mark.parametrize(
    "line",
    [
        "[" * 100_000,  # json's decoder recursed: a raw RecursionError
        '{"_id": "a", "_rev": "1-a", "x": ' + "1" * 5000 + "}",  # a raw ValueError
        '{"_id": "a", "_rev": "1-a", "x": NaN}',
        '{"_id": "a", "_rev": "1-a", "x": 1e999}',
        '["not", "a", "document"]',
    ],
    ids=["nested 100,000 deep", "int of 5000 digits", "NaN", "inf", "a list"],
)
def test_load_refuses_a_hostile_line_with_bad_request(tmp_path: Any, line: str) -> None:
    """Found in review: a line nested 100,000 deep or holding a 5,000-digit number made
    ``settee load`` fail with a raw RecursionError or ValueError and a traceback."""
    with settee.open(str(tmp_path / "db")) as db:
        with pytest.raises(settee.BadRequest):
            load(db, io.StringIO('{"_id": "b", "_rev": "1-b"}\n' + line + "\n"))
        assert db.info()["doc_count"] == 0


def test_dump_and_load_speak_utf8_whatever_the_locale(tmp_path: Any) -> None:
    """Found in review: under an ASCII or Latin-1 locale ``settee dump`` died with a raw
    UnicodeEncodeError on a non-ASCII id, and ``settee load`` of bytes that are not
    UTF-8 (under a UTF-8 locale) with a raw UnicodeDecodeError: the JSON lines are
    UTF-8 on every machine."""
    source, target = str(tmp_path / "a"), str(tmp_path / "b")
    with settee.open(source) as db:
        db.put({"_id": "é😀", "x": "ü"})
    env = {"PATH": "/usr/bin:/bin", "PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
    run = [sys.executable, "-m", "settee"]
    dumped = subprocess.run([*run, "dump", source], capture_output=True, env=env, timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    assert "é😀".encode() in dumped.stdout
    loaded = subprocess.run(
        [*run, "load", target], input=dumped.stdout, capture_output=True, env=env, timeout=60
    )
    assert loaded.returncode == 0, loaded.stderr
    with settee.open(target) as db:
        assert db.get("é😀")["x"] == "ü"
    env["PYTHONIOENCODING"] = "utf-8"
    refused = subprocess.run(
        [*run, "load", target], input=b"\xff\xfe{}\n", capture_output=True, env=env, timeout=60
    )
    assert refused.returncode == 1 and b"Traceback" not in refused.stderr, refused.stderr
    assert b"UTF-8" in refused.stderr


def test_dump_never_writes_so_a_lost_commit_stays_reported(tmp_path: Any, capsys: Any) -> None:
    """Found in review: ``settee dump`` opened the database as its writer, which
    republishes HEADS; after a flipped bit in a shard's newest header (a durable commit
    lost), dumping erased the only record of the loss and ``settee check`` then said
    OK. A dump is a read: it opens readonly, changes no byte, and runs beside the
    writer."""
    path = str(tmp_path / "db")
    with settee.open(path, shards=1) as db:
        db.put({"_id": "a"})
        db.put({"_id": "b"})
    shard = Path(shard_path(path, 0))
    data = bytearray(shard.read_bytes())
    data[(len(data) - 1) // 4096 * 4096 + 30] ^= 1  # inside the newest header
    shard.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in Path(path).iterdir()}
    assert main(["check", path]) == 1
    with pytest.warns(LostCommitWarning):
        assert main(["dump", path]) == 0
    assert {p.name: p.read_bytes() for p in Path(path).iterdir()} == before
    capsys.readouterr()
    assert main(["check", path]) == 1
    assert "HEADS names as durable" in capsys.readouterr().out
    shard.write_bytes(bytes(data[: (len(data) - 1) // 4096 * 4096]))  # the loss accepted
    (Path(path) / "HEADS").unlink()
    with settee.open(path) as writer:
        writer.put({"_id": "c"})
        capsys.readouterr()
        assert main(["dump", path]) == 0
        assert [json.loads(line)["_id"] for line in capsys.readouterr().out.splitlines()] == [
            "a",
            "c",
        ]


def test_dump_of_shards_without_metadata_says_how_to_rebuild_it(tmp_path: Any, capsys: Any) -> None:
    """A dump reads (readonly), so it does not rebuild a lost ``settee.meta`` as a
    writer's open does; it says so instead of calling the directory no database."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=2) as db:
        db.put({"_id": "a"})
    (path / "settee.meta").unlink()
    before = sorted(p.name for p in path.iterdir())
    assert main(["dump", str(path)]) == 1
    assert "open it with settee.open(path) to rebuild" in capsys.readouterr().err
    assert sorted(p.name for p in path.iterdir()) == before

"""Real-file faults in every file settee and ``settee serve`` write, a deterministic
sample of ``scripts/fault_sweep.py`` (which sweeps every offset): each case is a
regression test named after what broke.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import settee
from settee.file import ShardFile
from settee.io import OsFileSystem
from settee.layout import shard_path


def _flip_root(path: Path, tree: str) -> int:
    """Flip a payload bit of the newest commit's ``tree`` root node; its offset."""
    shard = shard_path(str(path), 0)
    file = ShardFile.open(OsFileSystem(), shard, create=False)
    try:
        assert file.header is not None
        root = getattr(file.header, tree)
        assert root is not None
        pos = root[0]
    finally:
        file.close()
    data = bytearray(Path(shard).read_bytes())
    data[pos + 10] ^= 0x04
    Path(shard).write_bytes(bytes(data))
    return int(pos)


def test_a_write_that_needs_a_damaged_node_is_a_corruption_error(tmp_path: Path) -> None:
    """The writer refused a write whose tree update had to read a damaged node with a
    plain SetteeError ("could not apply"), which serve answered 500 unknown_error:
    it is a CorruptionError naming the file and offset (410 over HTTP), and the
    shard still takes writes that do not need those bytes."""
    path = tmp_path / "db"
    with settee.open(str(path), shards=1) as db:
        db.bulk_docs([{"_id": f"d{i}", "v": i} for i in range(5)])
    pos = _flip_root(path, "by_seq")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db = settee.open(str(path))
    with db:
        with pytest.raises(settee.CorruptionError) as caught:
            db.put({"_id": "new"})
        assert caught.value.offset == pos and caught.value.path.endswith("shard-000.settee")
        assert db.get("d1")["v"] == 1  # by_id is intact


# -- settee serve ----------------------------------------------------------------------------


def _serve(root: Path, requests: list[tuple[str, str, Any]]) -> list[tuple[int, Any]]:
    """Start a server on ``root``, make ``requests``, stop it; each (status, JSON)."""
    from settee.serve import start_server

    handle = start_server(str(root), "127.0.0.1", 0, fsync=True)
    try:
        answers = []
        for method, path, body in requests:
            conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=30)
            try:
                data = None if body is None else json.dumps(body)
                conn.request(method, path, data, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                answers.append((resp.status, json.loads(resp.read())))
            finally:
                conn.close()
        return answers
    finally:
        handle.stop()


_VIEW = "/v/_design/d/_view/n?reduce=false"


def _view_db(root: Path) -> Path:
    """A database ``v`` of one shard with a view queried once; the index's folder."""
    map_fn = "function(doc){ if (doc.n !== undefined) emit(doc.n, null); }"
    made = _serve(
        root,
        [
            ("PUT", "/v?q=1", None),
            *[("PUT", f"/v/d{i}", {"n": i}) for i in range(4)],
            ("PUT", "/v/_design/d", {"views": {"n": {"map": map_fn}}}),
            ("GET", _VIEW, None),
            ("PUT", "/v/d9", {"n": 9}),
            ("GET", _VIEW, None),
        ],
    )
    assert [status for status, _ in made] == [201] * 6 + [200, 201, 200], made
    [index] = (root / "_views" / "v").iterdir()
    return index


def test_a_view_index_missing_its_shard_file_is_410_not_500(tmp_path: Path) -> None:
    """A view index whose shard file was deleted answered 500 unknown_error (the
    engine's DamagedDirectory was mapped to 410 for databases only)."""
    index = _view_db(tmp_path)
    (index / "shard-000.settee").unlink()
    [(status, body)] = _serve(tmp_path, [("GET", _VIEW, None)])
    assert (status, body["error"]) == (410, "corruption"), body
    assert str(index) in body["reason"]


@pytest.mark.parametrize("kind", ["database", "view index"])
def test_a_shard_cut_before_its_durable_commit_is_refused_until_restored(
    tmp_path: Path, kind: str
) -> None:
    """A shard file cut short before the commit HEADS names as durable opened at its
    older commit: serve answered 200 with acknowledged writes missing (a purged or
    updated document's old view row, a document gone), and once its writer had
    republished HEADS nothing said so any more. It is 410 naming the file, on every
    request and restart, until HEADS is removed to accept the older state."""
    index = _view_db(tmp_path)
    folder = tmp_path / "v" if kind == "database" else index
    shard = folder / "shard-000.settee"
    os.truncate(shard, shard.stat().st_size - 1)  # the newest header torn
    path = "/v/d9" if kind == "database" else _VIEW
    for _ in range(2):  # the refusal outlives a restart: HEADS still names the commit
        [(status, body)] = _serve(tmp_path, [("GET", path, None)])
        assert (status, body["error"]) == (410, "corruption"), body
        assert str(shard) in body["reason"] and "HEADS" in body["reason"]
    (folder / "HEADS").unlink()
    [(status, body)] = _serve(tmp_path, [("GET", "/v", None)])
    assert status == 200, body


def test_every_bit_flip_of_the_settings_file_is_corruption(tmp_path: Path) -> None:
    """The settings file carried no checksum: a flipped bit that kept it valid JSON
    (``"revs_limit":7`` read as 5, or 3) was served as the database's setting. Now
    each of its bits flipped either reads as written or is a CorruptionError naming
    the file, never another setting."""
    from settee.serve.options import merge_options
    from settee.serve.registry import Registry

    made = _serve(
        tmp_path,
        [("PUT", "/s", None), ("PUT", "/s/_revs_limit", 7), ("PUT", "/s/_purged_infos_limit", 50)],
    )
    assert [status for status, _ in made] == [201, 200, 200], made
    [settings] = (tmp_path / "_settings").iterdir()
    pristine = settings.read_bytes()
    registry = Registry(str(tmp_path), merge_options(fsync=False))
    assert registry._settings("s") == {"revs_limit": 7, "purged_infos_limit": 50}
    served = []
    for offset in range(len(pristine)):
        for bit in range(8):
            damaged = bytearray(pristine)
            damaged[offset] ^= 1 << bit
            settings.write_bytes(bytes(damaged))
            try:
                found = registry._settings("s")
            except settee.CorruptionError as exc:
                assert exc.path == str(settings)
                continue
            if found != {"revs_limit": 7, "purged_infos_limit": 50}:
                served.append((offset, bit, found))
    assert not served, served[:5]


def test_a_database_made_again_after_a_half_finished_delete_starts_clean(
    tmp_path: Path,
) -> None:
    """A DELETE that crashed after the database's directory went leaves its view
    indexes and _local documents: the database next created under the name served
    the old _local documents (a replicator's checkpoint of another database) and
    reused the old view index, every query of it 400 ("since value ... names changes
    this database has not made"). Creating the database clears them first."""
    _view_db(tmp_path)
    assert _serve(tmp_path, [("PUT", "/v/_local/ck", {"seq": "old"})])[0][0] == 201
    shutil.rmtree(tmp_path / "v")  # the crash: the rest of the DELETE never ran
    map_fn = "function(doc){ if (doc.n !== undefined) emit(doc.n, null); }"
    answers = _serve(
        tmp_path,
        [
            ("PUT", "/v?q=1", None),
            ("PUT", "/v/new", {"n": 1}),
            ("PUT", "/v/_design/d", {"views": {"n": {"map": map_fn}}}),
            ("GET", _VIEW, None),
            ("GET", "/v/_local/ck", None),
        ],
    )
    assert [status for status, _ in answers] == [201, 201, 201, 200, 404], answers
    assert [row["id"] for row in answers[3][1]["rows"]] == ["new"]


def test_a_view_index_ahead_of_its_restored_database_is_rebuilt(tmp_path: Path) -> None:
    """A database restored from an older copy (its HEADS with it) left its view index
    ahead of it: every query was 400, blaming the client for the index's checkpoint.
    The index starts over, as CouchDB resets an index ahead of its database."""
    _serve(tmp_path, [("PUT", "/v?q=1", None), ("PUT", "/v/d0", {"n": 0})])
    backup = tmp_path.parent / "backup"
    shutil.copytree(tmp_path / "v", backup)
    map_fn = "function(doc){ if (doc.n !== undefined) emit(doc.n, null); }"
    made = _serve(
        tmp_path,
        [
            *[("PUT", f"/v/d{i}", {"n": i}) for i in range(1, 5)],
            ("PUT", "/v/_design/d", {"views": {"n": {"map": map_fn}}}),
            ("GET", _VIEW, None),
        ],
    )
    assert made[-1][1]["total_rows"] == 5, made
    shutil.rmtree(tmp_path / "v")
    shutil.copytree(backup, tmp_path / "v")  # the design document is gone with it
    answers = _serve(
        tmp_path,
        [("PUT", "/v/_design/d", {"views": {"n": {"map": map_fn}}}), ("GET", _VIEW, None)],
    )
    assert answers[0][0] == 201, answers
    assert answers[1][0] == 200, answers
    assert [row["id"] for row in answers[1][1]["rows"]] == ["d0"]


@pytest.mark.parametrize("where", ["_views", "_views/v", "index"])
def test_a_file_in_place_of_a_view_folder_is_410_not_a_raw_error(
    tmp_path: Path, where: str
) -> None:
    """A file where a view folder should be was a raw NotADirectoryError or
    FileExistsError (500, a traceback in the log) on every view query, Mango query
    and purge; the index's own folder a 503 "retry", which no retry mends."""
    index = _view_db(tmp_path)
    folder = index if where == "index" else tmp_path / where
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    answers = _serve(tmp_path, [("GET", _VIEW, None), ("POST", "/v/_purge", {"d1": ["1-x"]})])
    for status, body in answers[: 1 if where == "index" else 2]:
        assert (status, body["error"]) == (410, "corruption"), answers
        assert str(folder) in body["reason"]
    assert folder.read_text() == "not a folder"


def _serve_process(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``settee serve`` (fsync on) in a process of its own; it and its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    argv = [sys.executable, "-m", "settee", "serve", "--dir", str(root), "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(3000):  # until it listens, or it exited
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            assert proc.poll() is None, "settee serve exited"
            time.sleep(0.01)
    proc.kill()
    raise AssertionError("settee serve did not listen")


def _call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_kill_9_of_settee_serve_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    """``settee serve`` killed with SIGKILL while bulk writes are in flight: every
    write it acknowledged (documents, a _local checkpoint, _security) is there after
    a restart, and every shard still takes a write (scripts/fault_sweep.py
    kill-serve runs many more kills, with purges, compactions and views)."""
    acked: set[str] = set()
    local: dict[str, Any] = {}
    for run in range(2):
        proc, port = _serve_process(tmp_path)
        try:
            if run == 0:
                assert _call(port, "PUT", "/k?q=4")[0] == 201
            for n in range(3):
                docs = [{"_id": f"{run}-{n}-{k}"} for k in range(8)]
                status, rows = _call(port, "POST", "/k/_bulk_docs", {"docs": docs})
                assert status == 201 and all("ok" in row for row in rows), rows
                acked.update(doc["_id"] for doc in docs)
                local = {"run": run, "n": n}
                assert _call(port, "PUT", "/k/_local/ck", local)[0] == 201
            in_flight = []
            for n in range(3):  # sent, never answered: the kill lands among them
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                docs = [{"_id": f"{run}-x{n}-{k}"} for k in range(40)]
                body = json.dumps({"docs": docs})
                conn.request("POST", "/k/_bulk_docs", body, {"Content-Type": "application/json"})
                in_flight.append(conn)
            time.sleep(0.003 * run)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        for conn in in_flight:
            conn.close()
    proc, port = _serve_process(tmp_path)
    try:
        status, body = _call(port, "POST", "/k/_all_docs", {"keys": sorted(acked)})
        assert status == 200, body
        assert [row["key"] for row in body["rows"] if "error" in row] == []
        status, body = _call(port, "GET", "/k/_local/ck")
        assert {k: v for k, v in body.items() if not k.startswith("_")} == local
        docs = [{"_id": f"after-{i}"} for i in range(16)]  # every shard of four
        status, rows = _call(port, "POST", "/k/_bulk_docs", {"docs": docs})
        assert status == 201 and all("ok" in row for row in rows), rows
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_directory_in_place_of_the_purge_marker_is_410(tmp_path: Path) -> None:
    """A directory where the purge marker (``_views/<db>/.purging``) should be could
    not be removed, so every view query dropped every index of the database and
    built it again, silently; it is damage, named."""
    index = _view_db(tmp_path)
    marker = index.parent / ".purging"
    marker.mkdir()
    [(status, body), (again, _)] = _serve(tmp_path, [("GET", _VIEW, None), ("GET", _VIEW, None)])
    assert (status, body["error"], again) == (410, "corruption", 410), body
    assert str(marker) in body["reason"] and index.is_dir()


def test_a_damaged_attachment_of_one_chunk_is_410_not_a_200_cut_at_0_bytes(
    tmp_path: Path,
) -> None:
    """The status and length were sent before the first chunk was read, so a damaged
    attachment of one chunk (up to 64 KiB, most of them) was a 200 whose body
    stopped at 0 bytes; the first chunk is read first, and damage in it is 410."""
    from settee.serve import start_server

    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=True)
    try:
        assert _call(handle.port, "PUT", "/a?q=1")[0] == 201
        rev = _call(handle.port, "PUT", "/a/d", {})[1]["rev"]
        conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=30)
        conn.request("PUT", f"/a/d/f?rev={rev}", b"Z" * 1000, {"Content-Type": "x/y"})
        assert conn.getresponse().status == 201
        conn.close()
    finally:
        handle.stop()
    shard = tmp_path / "a" / "shard-000.settee"
    data = bytearray(shard.read_bytes())
    data[data.index(b"Z" * 1000) + 500] ^= 0x01
    shard.write_bytes(bytes(data))
    [(status, body)] = _serve(tmp_path, [("GET", "/a/d/f", None)])
    assert (status, body["error"]) == (410, "corruption"), body


def test_a_view_index_of_another_format_version_is_500_not_503_retry(tmp_path: Path) -> None:
    """A view index the engine refuses to open (another format version; a permission
    alike) answered 503 "an index closed while this query ran; retry", which no
    retry mends: it is the server's 500 naming the refusal, as for a database."""
    from settee.spec.format import decode_frame, decode_payload, encode_frame, encode_payload

    index = _view_db(tmp_path)
    meta = index / "settee.meta"
    found = decode_payload(decode_frame(meta.read_bytes()))
    meta.write_bytes(encode_frame(encode_payload({**found, "format": found["format"] - 1})))
    [(status, body)] = _serve(tmp_path, [("GET", _VIEW, None)])
    assert (status, body["error"]) == (500, "unknown_error"), body
    assert "format version" in body["reason"]


def test_every_bit_flip_of_a_local_side_file_is_corruption(tmp_path: Path) -> None:
    """The ``_local`` documents, ``_security`` and the purge records carried no
    checksum: a flipped bit that kept one valid JSON was served (a replication
    checkpoint's ``seq`` 5 read back as 4). Now each bit of each, flipped, either
    reads as written or is a CorruptionError naming the file, never another value."""
    from settee.serve.local import LocalDocs

    made = _serve(
        tmp_path,
        [
            ("PUT", "/s", None),
            ("PUT", "/s/_local/ck", {"seq": 5, "name": "ab"}),
            ("PUT", "/s/_security", {"admins": {"names": ["x"]}}),
            ("POST", "/s/_purge", {"gone": ["1-" + "a" * 32]}),
        ],
    )
    assert [status for status, _ in made] == [201, 201, 200, 201], made
    local = LocalDocs(str(tmp_path / "_local" / "s.json"), fsync=False)
    reads = {
        "_security.json": local.security,
        "_purged_infos.json": local.purged_infos,
    }
    files = sorted((tmp_path / "_local" / "s").iterdir())
    assert len(files) == 3, files
    served = []
    for path in files:
        read = reads.get(path.name, lambda: local.get("_local/ck"))
        pristine = path.read_bytes()
        expected = read()
        for offset in range(len(pristine)):
            for bit in range(8):
                damaged = bytearray(pristine)
                damaged[offset] ^= 1 << bit
                path.write_bytes(bytes(damaged))
                local._cache.clear()
                try:
                    found = read()
                except settee.CorruptionError as exc:
                    assert exc.path == str(path)
                    continue
                except settee.NotFound:
                    found = None
                if found != expected:
                    served.append((path.name, offset, bit, found))
        path.write_bytes(pristine)
    assert not served, served[:5]


def test_a_directory_in_place_of_a_side_file_is_410_on_write(tmp_path: Path) -> None:
    """A directory where ``_security.json`` (or a ``_local`` document's file) should
    be made the write a 500 with the server's own error; it is damage to restore."""
    made = _serve(tmp_path, [("PUT", "/s", None), ("PUT", "/s/_local/ck", {"seq": 1})])
    assert [status for status, _ in made] == [201, 201], made
    folder = tmp_path / "_local" / "s"
    (folder / "_security.json").mkdir()
    [local_doc] = [p for p in folder.iterdir() if p.suffix == ".json" and p.is_file()]
    local_doc.unlink()
    local_doc.mkdir()
    answers = _serve(
        tmp_path, [("PUT", "/s/_security", {"admins": {}}), ("PUT", "/s/_local/ck", {"seq": 2})]
    )
    for status, body in answers:
        assert (status, body["error"]) == (410, "corruption"), answers

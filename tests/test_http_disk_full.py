"""A full disk: CouchDB's 507 ``insufficient_storage``, and writes that work again
once there is room, without restarting the server.

A failed write leaves its shard refusing writes until the database is reopened
(SEMANTICS.md, "A failed request never disables a shard": only an I/O error
does, as the file's state is then unknown). The server reopens such a database
on the next request that finds it idle, so a client retrying after space was
freed succeeds; nothing acknowledged is lost. The disk is made full by making
``os.pwrite`` (the shard files' appends) fail with ENOSPC.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aiohttp", reason="settee serve needs aiohttp: pip install -e '.[serve]'")

from settee.serve import start_server
from tests.test_http import Client, put


class _Disk:
    """``os.pwrite`` that fails with ``errno`` while ``full`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full: int | None = None
        real = os.pwrite

        def pwrite(fd: int, data: Any, offset: int) -> int:
            if self.full is not None:
                raise OSError(self.full, os.strerror(self.full))
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Client, _Disk]]:
    handle = start_server(str(tmp_path), "127.0.0.1", 0, fsync=False)
    try:
        yield Client(handle.port), _Disk(monkeypatch)
    finally:
        handle.stop()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_507_and_writes_work_again_once_there_is_room(
    served: tuple[Client, _Disk], code: int
) -> None:
    client, disk = served
    assert client("PUT", "/full").status == 201
    kept = put(client, "/full", "kept", {"v": 1})
    disk.full = code
    for _ in range(2):  # the failed write, then one the failed shard refuses
        r = client("PUT", "/full/lost", {"v": 2})
        assert (r.status, r.json["error"]) == (507, "insufficient_storage"), r.raw
    assert client("GET", "/full/kept").json["_rev"] == kept  # reads go on
    disk.full = None
    assert client("PUT", "/full/later", {"v": 3}).status == 201
    assert client("GET", "/full/lost").status == 404  # never acknowledged
    assert client("GET", "/full/kept").json["_rev"] == kept
    ids = [row["id"] for row in client("GET", "/full/_all_docs").json["rows"]]
    assert ids == ["kept", "later"]


def test_a_database_created_on_a_full_disk_is_507_and_can_be_created_later(
    served: tuple[Client, _Disk],
) -> None:
    client, disk = served
    disk.full = errno.ENOSPC
    r = client("PUT", "/newdb")
    assert (r.status, r.json["error"]) == (507, "insufficient_storage"), r.raw
    disk.full = None
    assert client("PUT", "/newdb").status == 201
    assert client("PUT", "/newdb/d", {"v": 1}).status == 201


def test_a_view_index_that_could_not_be_written_is_rebuilt_once_there_is_room(
    served: tuple[Client, _Disk],
) -> None:
    """A view index is a settee database of its own: its failed update is a 507 too,
    and the next query after space was freed reopens it and answers in full."""
    client, disk = served
    assert client("PUT", "/views").status == 201
    ddoc = {"views": {"v": {"map": "function(doc) { emit(doc.n, null); }"}}}
    assert client("PUT", "/views/_design/d", ddoc).status == 201
    put(client, "/views", "a", {"n": 1})
    assert len(client("GET", "/views/_design/d/_view/v").json["rows"]) == 1
    put(client, "/views", "b", {"n": 2})
    disk.full = errno.ENOSPC
    r = client("GET", "/views/_design/d/_view/v")
    assert (r.status, r.json["error"]) == (507, "insufficient_storage"), r.raw
    disk.full = None
    rows = client("GET", "/views/_design/d/_view/v").json["rows"]
    assert [row["key"] for row in rows] == [1, 2]

"""Real-file faults in every file settee and ``settee serve`` write, a deterministic
sample of ``scripts/fault_sweep.py`` (which sweeps every offset): each case is a
regression test named after what broke.
"""

from __future__ import annotations

import warnings
from pathlib import Path

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

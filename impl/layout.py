"""A database directory: its metadata file, its shard files and its lock.

```
<path>/
  settee.meta          one frame: {"format", "shards", "uuid"}; written last at creation
  shard-000.settee     one file per shard (FORMAT.md)
  shard-000.settee.compact   a compaction in progress (removed on open)
  LOCK                 flock'd by the process that has the database open
```

Creation writes every shard file (with its first header) and fsyncs the
directory before the metadata file appears, by write-to-temp, fsync, rename,
fsync-directory. So a database either has its metadata file and all its
shards, or it was never created and holds nothing acknowledged.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from dataclasses import dataclass

from settee.io import FileSystem, OsFileSystem
from settee.spec.errors import BadRequest, CorruptionError, SetteeError
from settee.spec.format import (
    FORMAT_VERSION,
    decode_frame,
    decode_payload,
    encode_frame,
    encode_payload,
)

__all__ = [
    "COMPACT_SUFFIX",
    "META_NAME",
    "Layout",
    "acquire_lock",
    "open_layout",
    "read_layout",
    "release_lock",
    "shard_path",
]

META_NAME = "settee.meta"
LOCK_NAME = "LOCK"
COMPACT_SUFFIX = ".compact"


def shard_path(path: str, index: int) -> str:
    """The file of shard ``index``."""
    return os.path.join(path, f"shard-{index:03d}.settee")


@dataclass(frozen=True, slots=True)
class Layout:
    """What the metadata file fixes for the database's lifetime."""

    path: str
    shards: int
    uuid: str
    created: bool


def open_layout(fs: FileSystem, path: str, shards: int, *, shards_explicit: bool) -> Layout:
    """Read the database's metadata, or create the database with ``shards`` shards."""
    meta = os.path.join(path, META_NAME)
    if fs.exists(meta):
        layout = _read_meta(fs, path, meta)
        if shards_explicit and shards != layout.shards:
            raise BadRequest(
                f"{path} was created with shards={layout.shards}, not {shards}; open it "
                "without the shards option (the shard count is fixed at creation)"
            )
        for index in range(layout.shards):
            if not fs.exists(shard_path(path, index)):
                raise SetteeError(
                    f"{shard_path(path, index)} is missing: the database is incomplete; "
                    "restore the file from a backup"
                )
        return layout
    return _create(fs, path, shards)


def read_layout(fs: FileSystem, path: str) -> Layout:
    """The metadata of an existing database; SetteeError if ``path`` holds none."""
    meta = os.path.join(path, META_NAME)
    if not fs.exists(meta):
        raise SetteeError(f"{path} is not a settee database (no {META_NAME}); check the path")
    return _read_meta(fs, path, meta)


def _read_meta(fs: FileSystem, path: str, meta: str) -> Layout:
    handle = fs.open(meta, create=False)
    try:
        raw = handle.pread(0, handle.size())
    finally:
        handle.close()
    info = decode_payload(decode_frame(raw, path=meta, offset=0))
    if not isinstance(info, dict) or not {"format", "shards", "uuid"} <= info.keys():
        raise CorruptionError(meta, 0, "metadata lacks format, shards or uuid")
    if info["format"] != FORMAT_VERSION:
        raise SetteeError(
            f"{path} uses settee format version {info.get('format')}, this settee reads "
            f"version {FORMAT_VERSION}: dump it with the settee that wrote it and load it here"
        )
    return Layout(path, int(info["shards"]), str(info["uuid"]), created=False)


def _create(fs: FileSystem, path: str, shards: int) -> Layout:
    from settee.file import ShardFile
    from settee.shard import ShardIdentity, header_payload

    fs.makedirs(path)
    db_uuid = uuid.uuid4().hex
    for name in fs.listdir(path):
        # Left by a creation that crashed before its metadata file was durable:
        # such a database never acknowledged a write, so nothing is lost.
        if (
            name.startswith("shard-") and name.endswith((".settee", ".compact"))
        ) or name == META_NAME + ".tmp":
            fs.remove(os.path.join(path, name))
    layout = Layout(path, shards, db_uuid, created=True)
    for index in range(shards):
        # Each shard's first header is durable before the metadata file can be,
        # so a database whose metadata exists always has openable shards.
        with ShardFile.open(fs, shard_path(path, index), create=True) as file:
            file.write_header(header_payload(ShardIdentity(db_uuid, index, shards), None, None, 0))
            file.sync()
    tmp = os.path.join(path, META_NAME + ".tmp")
    handle = fs.open(tmp, create=True)
    try:
        handle.append(
            encode_frame(
                encode_payload({"format": FORMAT_VERSION, "shards": shards, "uuid": db_uuid})
            )
        )
        handle.fsync()
    finally:
        handle.close()
    fs.rename(tmp, os.path.join(path, META_NAME))
    fs.fsync_dir(path)
    # The database directory's own entry must be durable too, or a crash could
    # lose the directory with every acknowledged write in it.
    fs.fsync_dir(
        os.path.dirname(os.path.abspath(path))
        if isinstance(fs, OsFileSystem)
        else os.path.dirname(path) or "."
    )
    return layout


def acquire_lock(fs: FileSystem, path: str) -> int | None:
    """Take the database's advisory write lock; SetteeError if another process holds it.

    Only real files can be locked; simulated file systems return None.
    """
    if not isinstance(fs, OsFileSystem):
        return None
    fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SetteeError(
            f"{path} is open in another process (or another settee.open in this one); "
            "settee allows one process per database: close the other one first"
        ) from None
    return fd


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)

"""A database directory: its metadata file, its shard files and its lock.

```
<path>/
  settee.meta          one frame: {"format", "shards", "uuid"}; written last at creation
  shard-000.settee     one file per shard (FORMAT.md)
  shard-000.settee.compact   a compaction in progress (left alone by open; the next
                       compaction of that shard replaces it)
  LOCK                 empty, informational: the lock is an flock on the directory
  HEADS                each shard's newest durable header, for readonly readers
                       (settee.heads; a hint, never fsynced)
```

Creation writes every shard file (with its first header) and fsyncs the
directory before the metadata file appears, by write-to-temp, fsync, rename,
fsync-directory. So a database either has its metadata file and all its
shards, or its creation never finished and it holds nothing acknowledged.

Opening never deletes or truncates anything it finds (SEMANTICS.md §16):

* ``settee.meta`` present: every shard it names must exist and carry a valid
  header (checked by the shard), else the database is refused.
* ``settee.meta`` missing, no shard files: a new database (unless
  ``create=False``).
* ``settee.meta`` missing beside shard files: the metadata is rebuilt from
  the shards' own headers (:func:`_recover`) when they agree and nothing can
  be lost: either every shard is present with a valid header, or no shard
  holds a commit (a creation that crashed before its metadata was durable,
  which is then finished with the same uuid). Anything else is refused.

The single-writer lock is an ``flock`` on the database directory itself, so
no file can be unlinked to bypass it, and a killed holder releases it at once.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
import uuid
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

from settee.io import FileSystem, on_os_files, open_regular
from settee.spec.errors import BadRequest, CorruptionError, SetteeError
from settee.spec.format import (
    BLOCK_SIZE,
    FORMAT_VERSION,
    decode_frame,
    decode_payload,
    encode_frame,
    encode_payload,
)
from settee.spec.values import describe

__all__ = [
    "COMPACT_SUFFIX",
    "META_NAME",
    "DamagedDirectory",
    "DatabaseInUse",
    "Layout",
    "MetadataRebuiltWarning",
    "acquire_lock",
    "mark_locked",
    "open_layout",
    "read_layout",
    "release_lock",
    "shard_path",
]

META_NAME = "settee.meta"
LOCK_NAME = "LOCK"
COMPACT_SUFFIX = ".compact"
#: The most shards a database has (the ``shards`` option's bound, spec/config.py):
#: a ``settee.meta`` or a shard header naming more is damage.
MAX_SHARDS = 1024
#: ASCII digits only: ``\d`` also matches other scripts' digits, which int() reads.
_SHARD_NAME = re.compile(r"shard-([0-9]{3,})\.settee")


class MetadataRebuiltWarning(UserWarning):
    """Opening found no ``settee.meta`` and rebuilt it from the shard headers."""


class DamagedDirectory(SetteeError):
    """A database directory open refuses because files are missing or are not its
    own: restore or move them (nothing was changed). ``settee serve`` answers it
    as damage (410), where it answers another refusal as the server's."""


class DatabaseInUse(SetteeError):
    """Another process (or another writable handle) holds the database's lock."""


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


def open_layout(
    fs: FileSystem, path: str, shards: int, *, shards_explicit: bool, create: bool = True
) -> Layout:
    """Read the database's metadata, rebuild it from the shard headers, or create
    the database with ``shards`` shards (see the module docstring)."""
    meta = os.path.join(path, META_NAME)
    if fs.exists(meta):
        layout = _read_meta(fs, path, meta)
    elif _shard_files(fs, path):
        if not create:
            raise SetteeError(
                f"{path} has shard files but no {META_NAME}: open it with settee.open(path) "
                "to rebuild the metadata from the shard headers"
            )
        layout = _recover(fs, path, shards, shards_explicit=shards_explicit)
    elif not create:
        raise SetteeError(f"{path} holds no settee database (no {META_NAME}); check the path")
    else:
        return _create(fs, path, shards, uuid.uuid4().hex)
    if shards_explicit and shards != layout.shards:
        raise _fixed_count(path, layout.shards, shards)
    for index in range(layout.shards):
        if not fs.exists(shard_path(path, index)):
            raise DamagedDirectory(
                f"{shard_path(path, index)} is missing: the database is incomplete; "
                "restore the file from a backup"
            )
    return layout


def read_layout(fs: FileSystem, path: str) -> Layout:
    """The metadata of an existing database; SetteeError if ``path`` holds none."""
    meta = os.path.join(path, META_NAME)
    if fs.exists(meta):
        return _read_meta(fs, path, meta)
    if _shard_files(fs, path):
        # Readonly handles, settee dump and settee check never write: only a writer's
        # open rebuilds the metadata.
        raise SetteeError(
            f"{path} has shard files but no {META_NAME}: open it with settee.open(path) "
            "to rebuild the metadata from the shard headers"
        )
    raise SetteeError(f"{path} is not a settee database (no {META_NAME}); check the path")


def _read_meta(fs: FileSystem, path: str, meta: str) -> Layout:
    handle = fs.open(meta, create=False)
    try:
        size = handle.size()
        if size > _META_MAX_BYTES:
            # Read whole, a file grown huge (or a link to a big file) was a MemoryError.
            raise CorruptionError(
                meta, 0, f"{size} bytes is no settee metadata (one small frame): damaged"
            )
        raw = handle.pread(0, size)
    finally:
        handle.close()
    payload = decode_frame(raw, path=meta, offset=0)
    try:
        info = decode_payload(payload)
    except Exception as exc:  # crc held: a writer bug or a crc collision
        raise CorruptionError(meta, 0, f"undecodable metadata: {exc}") from exc
    if not isinstance(info, dict) or not {"format", "shards", "uuid"} <= info.keys():
        raise CorruptionError(meta, 0, "metadata lacks format, shards or uuid")
    if type(info["format"]) is not int:
        # Not a version at all (found in review: "5" read "version 5, this settee
        # reads version 5"): damage or a writer bug, not another settee's file.
        raise CorruptionError(
            meta, 0, f"metadata names format {describe(info['format'])}, not an int"
        )
    if info["format"] != FORMAT_VERSION:
        raise SetteeError(
            f"{path} uses settee format version {info.get('format')}, this settee reads "
            f"version {FORMAT_VERSION}: run `settee dump` with the settee that wrote it, "
            "then `settee load` into a new database with this one"
        )
    shards, db_uuid = info["shards"], info["uuid"]
    if type(shards) is not int or not 1 <= shards <= MAX_SHARDS or type(db_uuid) is not str:
        raise CorruptionError(meta, 0, f"metadata names shards={shards!r}, uuid={db_uuid!r}")
    return Layout(path, shards, db_uuid, created=False)


#: The largest ``settee.meta`` read: its one frame holds three short fields, so far
#: fewer bytes than this, in any format version.
_META_MAX_BYTES = 1 << 20


def _shard_files(fs: FileSystem, path: str) -> dict[int, str]:
    """``{index: file}`` of every ``shard-NNN.settee`` file in ``path``."""
    if not fs.exists(path):
        return {}
    found = {}
    for name in fs.listdir(path):
        match = _SHARD_NAME.fullmatch(name)
        # Only the name shard_path gives is that shard's file: shard-0001.settee is
        # a stray file, not a second shard 1 to stand in for shard-001.settee.
        if match and os.path.join(path, name) == shard_path(path, int(match.group(1))):
            found[int(match.group(1))] = os.path.join(path, name)
    return found


@dataclass(frozen=True, slots=True)
class _Found:
    """What one shard file's newest header says, for :func:`_recover`."""

    index: int
    identity: tuple[str, int, int] | None  # (db uuid, shard index, shard count)
    seq: int


def _read_found(fs: FileSystem, index: int, file_path: str) -> _Found:
    from settee.file import ShardFile

    handle = fs.open(file_path, create=False)
    try:
        size = handle.size()
    finally:
        handle.close()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a torn tail is reported when the shard opens
            with ShardFile.open(fs, file_path, create=False) as file:
                header = file.header
    except SetteeError:
        header = None  # not readable as a shard (garbled bytes): judged by its size below
    if header is not None:
        return _Found(index, (header.db, header.shard, header.shards), header.seq)
    if size > BLOCK_SIZE:
        raise CorruptionError(
            file_path,
            0,
            f"no valid header in {size} bytes and no {META_NAME}: cannot tell what the "
            "shard held; restore the database from a backup",
        )
    # At most one block and no header: a creation that crashed inside its first header.
    return _Found(index, None, 0)


def _fixed_count(path: str, stored: int, asked: int) -> BadRequest:
    return BadRequest(
        f"{path} was created with shards={stored}, not {asked}; open it "
        "without the shards option (the shard count is fixed at creation)"
    )


def _recover(fs: FileSystem, path: str, shards: int, *, shards_explicit: bool) -> Layout:
    """Rebuild ``settee.meta`` from the shard headers; refuse whatever could lose data,
    and an explicit ``shards`` the headers contradict, before anything is written."""
    found = [_read_found(fs, i, p) for i, p in sorted(_shard_files(fs, path).items())]
    identities = {f.identity[0::2] for f in found if f.identity is not None}
    if len(identities) > 1:
        raise DamagedDirectory(
            f"{path} has no {META_NAME} and its shard files belong to different databases "
            f"{sorted(identities)}; move the foreign files away"
        )
    db_uuid, count = identities.pop() if identities else (uuid.uuid4().hex, shards)
    if count > MAX_SHARDS:
        # Only damage or a writer bug names more (the option stops at MAX_SHARDS): taking
        # it made that many shard files and a settee.meta the next open refused.
        raise DamagedDirectory(
            f"{path} has no {META_NAME} and its shard headers name {count} shards, more "
            f"than settee allows ({MAX_SHARDS}): they are damaged; restore them from a backup"
        )
    if shards_explicit and shards != count:
        raise _fixed_count(path, count, shards)
    wrong = [
        f.index for f in found if f.index >= count or (f.identity and f.identity[1] != f.index)
    ]
    if wrong:
        raise DamagedDirectory(
            f"{path} has no {META_NAME} and shard files {wrong} do not fit a database of "
            f"{count} shards; move them away"
        )
    _refuse_foreign_files(path, found)
    complete = {f.index for f in found if f.identity is not None}
    if complete != set(range(count)) and any(f.seq > 0 for f in found):
        missing = sorted(set(range(count)) - complete)
        raise DamagedDirectory(
            f"{path} has no {META_NAME}, and shards {missing} are missing or have no valid "
            "header while others hold data: restore the files from a backup"
        )
    if complete != set(range(count)):
        # A creation that crashed before its metadata: nothing was ever committed.
        # Finish it with the same uuid (torn first headers are appended after, not cut).
        _write_shards(fs, path, db_uuid, count, sorted(set(range(count)) - complete))
    else:
        warnings.warn(
            MetadataRebuiltWarning(
                f"{path}: {META_NAME} was missing; rebuilt it from the {count} shard headers"
            ),
            stacklevel=4,
        )
    _write_meta(fs, path, db_uuid, count)
    return Layout(path, count, db_uuid, created=False)


def _refuse_foreign_files(path: str, found: list[_Found]) -> None:
    """SetteeError unless the shard files without a header could be a crashed
    creation's: it writes and fsyncs each shard's first header before it creates
    the next file, so a crash leaves at most one such file, the last it made,
    with every shard before it present.
    Found in review: a text file named ``shard-000.settee`` beside an empty
    ``shard-001.settee`` had a header appended to it (and two shards added)."""
    headerless = [f.index for f in found if f.identity is None]
    # Directory entries become durable in the order they were made (a prefix), so
    # every shard before a headerless one is there, with its header.
    indexes = sorted(f.index for f in found)
    if len(headerless) > 1 or (headerless and indexes != list(range(headerless[0] + 1))):
        names = [os.path.basename(shard_path(path, i)) for i in headerless]
        raise DamagedDirectory(
            f"{path} has no {META_NAME} and {names} hold no settee header: a creation that "
            "crashed leaves at most one such file, the last it made, so these are not "
            "settee's; move them away (nothing was changed)"
        )


def _create(fs: FileSystem, path: str, shards: int, db_uuid: str) -> Layout:
    fs.makedirs(path)
    _write_shards(fs, path, db_uuid, shards, range(shards))
    _write_meta(fs, path, db_uuid, shards)
    # The database directory's own entry must be durable too, or a crash could
    # lose the directory with every acknowledged write in it.
    fs.fsync_dir(
        os.path.dirname(os.path.abspath(path)) if on_os_files(fs) else os.path.dirname(path) or "."
    )
    return Layout(path, shards, db_uuid, created=True)


def _write_shards(
    fs: FileSystem, path: str, db_uuid: str, shards: int, indexes: Iterable[int]
) -> None:
    """Give each shard in ``indexes`` its first header, durably."""
    from settee.file import ShardFile
    from settee.shard import ShardIdentity, shard_header

    for index in indexes:
        # Each shard's first header is durable before the metadata file can be,
        # so a database whose metadata exists always has openable shards. The file
        # is new, or holds at most a crashed creation's torn first header: it is not
        # scanned, and the header goes after those bytes (appended, never cut).
        target = shard_path(path, index)
        existed = fs.exists(target)
        with ShardFile(fs.open(target, create=True), created=not existed) as file:
            file.write_header(shard_header(ShardIdentity(db_uuid, index, shards), None, None, 0))
            file.sync()


def meta_temp_name(db_uuid: str) -> str:
    """The temp file ``settee.meta`` of database ``db_uuid`` is written as."""
    return f"{META_NAME}.tmp-{db_uuid}"


def _write_meta(fs: FileSystem, path: str, db_uuid: str, shards: int) -> None:
    """Write ``settee.meta`` atomically: temp file, fsync, rename, fsync the directory.

    The temp file is named after the database's uuid (``meta_temp_name``), so it
    is never a file someone else put there: a ``settee.meta.tmp`` of an older
    settee, or anybody's, is left alone (open never deletes what it finds).
    """
    tmp = os.path.join(path, meta_temp_name(db_uuid))
    if fs.exists(tmp):
        # Ours, left by a crash of this database's own creation before its rename
        # (the uuid is in the name): at most a copy of the metadata written now.
        fs.remove(tmp)
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


def acquire_lock(fs: FileSystem, path: str) -> int | None:
    """Take the database's write lock: an ``flock`` on the directory itself, which
    no unlink can bypass; SetteeError if another process (or open) holds it.

    Only real directories can be locked; simulated file systems return None.
    """
    if not on_os_files(fs):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    # A few tries: a readonly open holds a shared lock for an instant (writer_running).
    for attempt in range(_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if attempt + 1 < _LOCK_TRIES:
                time.sleep(_LOCK_PAUSE)
    os.close(fd)
    raise DatabaseInUse(
        f"{path} is open in another process (or another settee.open in this one); "
        "settee allows one process per database: close the other one first"
    )


#: How many times, ``_LOCK_PAUSE`` seconds apart, a writer's open tries the lock.
_LOCK_TRIES = 5
_LOCK_PAUSE = 0.01


def writer_running(path: str) -> bool | None:
    """Whether a writer holds the database's lock, by taking it shared for an
    instant (a writer's open retries past that); None where it cannot be told
    (not a directory we can open). Readonly opens ask it so that a HEADS the
    files have overtaken (a machine crash loses its unsynced slots) is not
    trusted when no writer will ever update it (found in review)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing the descriptor releases the shared lock
    return False


def mark_locked(fs: FileSystem, path: str) -> None:
    """Leave an empty LOCK file in an opened database: it says "this directory is
    locked" to people and older tools. The lock is the directory's own flock, so
    deleting the file changes nothing. Only databases on the OS file system."""
    if on_os_files(fs):
        lock = os.path.join(path, LOCK_NAME)
        try:
            os.close(open_regular(lock, os.O_WRONLY | os.O_CREAT))
        except OSError as exc:  # a FIFO there made this wait forever (found in review)
            raise SetteeError(f"{lock}: cannot mark the database locked: {exc}; remove it") from exc


def release_lock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)

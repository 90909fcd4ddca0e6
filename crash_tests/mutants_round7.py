"""Seventh mutation round, the file side: one-token slips in what reads and writes a
database's files rather than what answers its calls: ``settee check`` (``check.py``) and
its walker, the adoption and recovery of a directory's files (``layout.py``), HEADS
(``heads.py``), a readonly handle's following (``follower.py``), the frame and header
checksums (``spec/format.py``), the writer's fsyncs (``Shard._commit``) and the inline
crc of the body fast path (``ShardFile.read_sized``).

Each ``SLIPS`` entry is the engine's own function recompiled with one edit
(``internals.slipped``), set in its module (or class) while the slip is ``applied``:
being process-wide, it is for a gate test or a whole test session run with it (a
plugin applying ``SLIPS[name]``), not for ``settee verify --engine``. ``ENGINE_SLIPS``
are engine factories (``settee.proof.crash.mutants_round7:NAME``) for ``settee verify
--only crash,corruption``.

Of the thirty-four, twenty-nine were caught as the tests stood (``CAUGHT`` names the
test that failed first: most by the repository's tests/, the writer's fsync slips by
the crash campaign, the body crc by the bit flips). One of those,
``create_parent_unsynced`` (a creation that never fsyncs the directory holding the
database), only a fixed test of ``test_crash.py`` saw: ``settee verify --only crash``
recorded without ``strict_mkdir``, and now records every workload with it. Two escaped
every test and are now caught (``crash_tests/test_mutants_round7.py``): ``settee check``
never reading leaf bodies (a body entry naming no body), and recovery adopting a
headerless last shard of two blocks (only one block was tried). Three change no answer
(``EQUIVALENT`` there says why).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import settee
from settee import check, follower, heads, layout, walker
from settee.file import ShardFile
from settee.proof.stateful.mutants.internals import slipped
from settee.proof.stateful.mutants.lifecycle import plant
from settee.shard import Shard
from settee.spec import format as fmt

__all__ = ["CAUGHT", "ENGINE_SLIPS", "SLIPS", "Slip"]


@dataclass(frozen=True)
class Slip:
    """``owner.name`` recompiled with ``old`` made ``new``: what that breaks."""

    owner: Any
    name: str
    old: str
    new: str
    breaks: str

    def replacement(self) -> Any:
        original = self.owner.__dict__[self.name]
        if isinstance(original, staticmethod):
            return staticmethod(slipped(original.__func__, self.old, self.new))
        return slipped(original, self.old, self.new)

    def apply(self) -> None:
        """Make the slip for good (a whole session run with it)."""
        setattr(self.owner, self.name, self.replacement())

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The slip made for the block."""
        original = self.owner.__dict__[self.name]
        setattr(self.owner, self.name, self.replacement())
        try:
            yield
        finally:
            setattr(self.owner, self.name, original)


SLIPS: dict[str, Slip] = {
    # -- settee check ---------------------------------------------------------------------------
    "check_counts_unchecked": Slip(
        check,
        "_check_agreement",
        "if counts[:2] != [live, deleted]:",
        "if False:",
        "stored counts are not compared with a recount",
    ),
    "check_seq_past_snapshot": Slip(
        check,
        "_check_agreement",
        "if info.seq in seen_seqs or info.seq > snap.seq:",
        "if info.seq in seen_seqs:",
        "a document's seq past its commit's is not reported",
    ),
    "check_by_seq_orphans": Slip(
        check,
        "_check_agreement",
        "for seq in set(by_seq) - seen_seqs:",
        "for seq in ():",
        "by_seq rows no document owns are not reported",
    ),
    "check_identity_skipped": Slip(
        check,
        "check_shard",
        "yield from _check_identity(file, db_uuid, index, shards)",
        "pass",
        "a shard file of another shard or database passes",
    ),
    "check_lost_commit_skipped": Slip(
        check,
        "check_shard",
        "if slot is not None and (lost := file.lost_commit(slot.offset, slot.seq)) is not None:",
        "if False and (lost := file.lost_commit(slot.offset, slot.seq)) is not None:",
        "a commit HEADS names as durable may be lost unreported",
    ),
    "check_digest_skipped": Slip(
        check,
        "_check_attachments",
        "if digest_of(data) != att.digest:",
        "if False:",
        "attachment bytes are not compared with their digest",
    ),
    "check_bodies_unread": Slip(
        check,
        "_check_doc",
        "snap.body(info, leaf)",
        "pass",
        "leaf bodies are not read",
    ),
    "check_problems_as_notes": Slip(
        check,
        "_check_commits",
        'if item.kind == "problem":',
        'if item.kind == "problems":',
        "the walker's problems (damage in superseded data) become notes",
    ),
    # -- a directory's files ----------------------------------------------------------------------
    "adopt_two_headerless": Slip(
        layout,
        "_refuse_foreign_files",
        "if len(headerless) > 1 or",
        "if len(headerless) > 2 or",
        "two headerless shard files are taken for a crashed creation",
    ),
    "recover_when_every_shard_holds_data": Slip(
        layout,
        "_recover",
        "any(f.seq > 0 for f in found)",
        "all(f.seq > 0 for f in found)",
        "a missing shard is recreated empty beside shards that hold data",
    ),
    "meta_shards_unbounded": Slip(
        layout,
        "_read_meta",
        "not 1 <= shards <= MAX_SHARDS",
        "not 1 <= shards",
        "a settee.meta naming 10**6 shards is believed",
    ),
    "shard_files_any_name": Slip(
        layout,
        "_shard_files",
        "if match and os.path.join(path, name) == shard_path(path, int(match.group(1))):",
        "if match:",
        "shard-0001.settee is taken for shard 1",
    ),
    "recover_index_past_count": Slip(
        layout,
        "_recover",
        "f.index >= count or ",
        "",
        "a shard file past the count the headers name is ignored by recovery",
    ),
    "meta_format_any_type": Slip(
        layout,
        "_read_meta",
        'if type(info["format"]) is not int:',
        "if False:",
        'a settee.meta naming format "5" is read as another version',
    ),
    # -- HEADS and readonly handles ---------------------------------------------------------------
    "slot_crc_unchecked": Slip(
        heads,
        "_slot",
        "if crc32c.crc32c(fields[:-4]) != crc or offset > _MAX_OFFSET:",
        "if offset > _MAX_OFFSET:",
        "a HEADS slot is believed without its crc",
    ),
    "follower_slot_seq_unchecked": Slip(
        follower.FollowerShard,
        "_load_slot",
        "if header is None or header.seq != slot.seq:",
        "if header is None:",
        "a header at the slot's offset counts whatever its seq",
    ),
    "follower_token_inode_only": Slip(
        follower.FollowerShard,
        "_file_token",
        'return ("stat", st.st_ino, st.st_size)',
        'return ("stat", st.st_ino)',
        "without HEADS, a readonly handle misses commits appended to the file it follows",
    ),
    "follower_identity_unchecked": Slip(
        follower.FollowerShard,
        "_newest",
        "check_identity(file, self.identity)",
        "pass",
        "a readonly handle scanning a swapped-in file never checks whose it is",
    ),
    "heads_replacement_unnoticed": Slip(
        heads.HeadsFile,
        "_retire_if_replaced",
        "same = os.stat(self.path).st_ino == os.fstat(fd).st_ino",
        "same = True",
        "a reader keeps the HEADS a reopened writer replaced, and its slots never move",
    ),
    "follower_unknown_generation_kept": Slip(
        follower.FollowerShard,
        "_file_for",
        "if known == generation or (known is None and not self._replaced(followed)):",
        "if known == generation or known is None:",
        "a slot of a file never seen is looked for in the file followed, swapped or not",
    ),
    "follower_heads_header_not_adopted": Slip(
        follower.FollowerShard,
        "_first_state",
        "file.adopt(header, slot.offset)\n            return slot,",
        "return slot,",
        "a readonly open keeps the newest header its scan found, not the slot's",
    ),
    "follower_lost_unwarned": Slip(
        follower.FollowerShard,
        "_first_state",
        "warn_if_lost(file, slot)",
        "pass",
        "a readonly open says nothing of a durable commit whose header is damaged",
    ),
    "read_found_two_blocks": Slip(
        layout,
        "_read_found",
        "if size > BLOCK_SIZE:",
        "if size > 2 * BLOCK_SIZE:",
        "a headerless shard of two blocks is taken for a crashed creation",
    ),
    "meta_unsynced": Slip(
        layout,
        "_write_meta",
        "handle.fsync()",
        "pass",
        "settee.meta is renamed into place before its bytes are durable",
    ),
    "first_headers_unsynced": Slip(
        layout,
        "_write_shards",
        "file.sync()",
        "pass",
        "a new shard's first header is not durable before settee.meta names it",
    ),
    "create_parent_unsynced": Slip(
        layout,
        "_create",
        "fs.fsync_dir(",
        "(lambda _: None)(",
        "a new database's own directory entry is never made durable",
    ),
    # -- the walker (settee check's first pass) --------------------------------------------------
    "walker_overlap_unreported": Slip(
        walker,
        "_walk_commit",
        "if last_end is not None and start < last_end:",
        "if False:",
        "a commit whose data overlaps the previous header is not reported",
    ),
    "walker_markers_unchecked": Slip(
        walker,
        "_frames",
        "if pos % BLOCK_SIZE == 0:",
        "if False:",
        "a damaged block marker before a frame is not reported",
    ),
    "walker_stops_at_damaged_prev": Slip(
        walker,
        "_chain",
        "link = yield from _scan_below(file, prev, size)",
        "return",
        "commits before a damaged header are never checked",
    ),
    # -- the frame checksum ------------------------------------------------------------------------
    "frame_crc_short": Slip(
        fmt,
        "_frame_crc",
        "crc32c.crc32c(payload, crc32c.crc32c(length_field))",
        "crc32c.crc32c(payload[:-1], crc32c.crc32c(length_field))",
        "a frame's crc covers all but its last byte",
    ),
    "header_crc_short": Slip(
        fmt,
        "_header_crc",
        "crc32c.crc32c(payload, crc32c.crc32c(fields))",
        "crc32c.crc32c(payload[:-1], crc32c.crc32c(fields))",
        "a header's crc covers all but its last byte",
    ),
}


# -- engine factories: one writer step slipped (``settee verify --only crash --engine``) ---------


def _shard_with(name: str, old: str, new: str) -> type[Shard]:
    """A ``Shard`` whose method ``name`` is its own source with ``old`` made ``new``."""
    return type(f"Slipped{name}", (Shard,), {name: slipped(Shard.__dict__[name], old, new)})


_SMALL_BATCH_HEADER_UNSYNCED = _shard_with(
    "_commit",
    'self._step("before_header_fsync")\n            file.sync()',
    'self._step("before_header_fsync")\n            if len(batch) >= 4096:\n'
    "                file.sync()",
)
_SMALL_BATCH_DATA_UNSYNCED = _shard_with(
    "_commit",
    'self._step("before_data_fsync")\n            file.sync()',
    'self._step("before_data_fsync")\n            if len(batch) >= 4096:\n'
    "                file.sync()",
)


def small_batch_header_unsynced(path: str, fs: Any = None, **options: Any) -> Any:
    """A commit whose batch is under 4 KiB is acknowledged without its header fsync
    (an optimisation for the common small write, "the next commit's fsync covers it")."""
    return plant(settee.Database(path, fs=fs, **options), _SMALL_BATCH_HEADER_UNSYNCED)


def small_batch_data_unsynced(path: str, fs: Any = None, **options: Any) -> Any:
    """A commit whose batch is under 4 KiB skips the data fsync before its header: the
    header may reach the disk before the data it points to."""
    return plant(settee.Database(path, fs=fs, **options), _SMALL_BATCH_DATA_UNSYNCED)


_READ_SIZED_UNCHECKED = slipped(
    ShardFile.read_sized,
    "if length == size and crc32c(payload, crc32c(frame[at : at + 4])) == crc:",
    "if length == size:",
)


class _UncheckedBodies(ShardFile):
    read_sized = _READ_SIZED_UNCHECKED


def body_fast_path_crc_unchecked(path: str, fs: Any = None, **options: Any) -> Any:
    """Bodies read through ``read_sized``'s inline fast path (within a block or across
    one boundary) are decoded without their crc: a flipped bit is a wrong answer."""
    db = settee.Database(path, fs=fs, **options)
    for shard in db.shards:
        shard.snapshot.file.__class__ = _UncheckedBodies
    return db


def create_parent_unsynced(path: str, fs: Any = None, **options: Any) -> Any:
    """settee's engine whose creation of a database never fsyncs the directory holding
    it (``SLIPS["create_parent_unsynced"]`` for the open alone)."""
    with SLIPS["create_parent_unsynced"].applied():
        return settee.Database(path, fs=fs, **options)


#: Engine factories: name -> factory.
ENGINE_SLIPS = {
    "small_batch_header_unsynced": small_batch_header_unsynced,
    "small_batch_data_unsynced": small_batch_data_unsynced,
    "body_fast_path_crc_unchecked": body_fast_path_crc_unchecked,
    "create_parent_unsynced": create_parent_unsynced,
}

#: Slips the tests caught as they stood -> the test that failed first (``R7SLIP=name``
#: over tests/test_{damaged_dirs,engine,readonly,cli,walker,format,shard_file}.py and
#: crash_tests/test_{corruption,io_errors}.py; the engine factories by ``settee verify``).
CAUGHT = {
    "check_counts_unchecked": (
        "tests/test_engine.py::test_check_recounts_the_deleted_documents_the_reduction_claims"
    ),
    "check_seq_past_snapshot": (
        "tests/test_engine.py::test_check_reports_a_document_past_the_header_seq"
    ),
    "check_by_seq_orphans": (
        "tests/test_engine.py::test_strict_mode_refuses_a_compaction_that_would_change_the_shard"
    ),
    "check_identity_skipped": (
        "tests/test_damaged_dirs.py::test_a_shard_file_of_another_shard_or_database_is_refused"
    ),
    "check_lost_commit_skipped": (
        "tests/test_readonly.py::"
        "test_a_damaged_header_of_a_durable_commit_is_reported_not_taken_for_a_torn_tail"
    ),
    "check_digest_skipped": (
        "tests/test_engine.py::test_check_reports_an_attachment_stored_with_another_digest"
    ),
    "check_problems_as_notes": (
        "tests/test_cli.py::test_check_fails_on_damage_and_still_prints_notes"
    ),
    "recover_when_every_shard_holds_data": (
        "tests/test_damaged_dirs.py::"
        "test_missing_metadata_beside_a_damaged_shard_is_refused_and_nothing_deleted"
    ),
    "meta_shards_unbounded": (
        "tests/test_damaged_dirs.py::test_metadata_that_is_not_this_settees_is_refused_and_kept"
    ),
    "shard_files_any_name": (
        "tests/test_damaged_dirs.py::"
        "test_a_file_named_like_no_shard_settee_writes_is_not_taken_for_one"
    ),
    "recover_index_past_count": (
        "tests/test_damaged_dirs.py::test_a_shard_file_past_the_shard_count_is_not_adopted"
    ),
    "meta_format_any_type": (
        "tests/test_damaged_dirs.py::test_metadata_whose_format_is_no_version_is_a_corruption_error"
    ),
    "slot_crc_unchecked": "tests/test_readonly.py::test_heads_are_read_until_two_reads_agree",
    "follower_slot_seq_unchecked": (
        "tests/test_readonly.py::test_a_slot_naming_another_commits_header_is_not_followed"
    ),
    "follower_token_inode_only": (
        "tests/test_readonly.py::test_a_damaged_heads_file_falls_back_to_scanning"
    ),
    "follower_identity_unchecked": (
        "tests/test_damaged_dirs.py::test_a_shard_file_of_another_shard_or_database_is_refused"
    ),
    "heads_replacement_unnoticed": (
        "tests/test_readonly.py::test_a_reader_follows_a_heads_file_recreated_by_a_new_writer"
    ),
    "follower_lost_unwarned": (
        "tests/test_readonly.py::"
        "test_a_damaged_header_of_a_durable_commit_is_reported_not_taken_for_a_torn_tail"
    ),
    # file.py computes the frame crc inline too (add_encoded, read_sized): every
    # document read fails at once.
    "frame_crc_short": "tests/test_damaged_dirs.py (every read), tests/test_format.py",
    "header_crc_short": "tests/test_format.py::test_header_every_bit_flip_is_detected",
    "meta_unsynced": "the crash checker (crash_tests/test_mutants.py's _crash_suite)",
    "first_headers_unsynced": "the crash checker (crash_tests/test_mutants.py's _crash_suite)",
    # Not by `settee verify --only crash`, whose campaign made a new directory durable at
    # once until this round (test_mutants_round7.py).
    "create_parent_unsynced": (
        "crash_tests/test_crash.py::test_database_directory_entry_is_made_durable"
    ),
    "walker_overlap_unreported": (
        "tests/test_walker.py::test_walker_reports_a_region_overlapping_the_previous_header"
    ),
    "walker_markers_unchecked": (
        "tests/test_walker.py::test_walker_reports_a_bad_marker_of_the_block_a_frame_starts_after"
    ),
    "walker_stops_at_damaged_prev": "tests/test_walker.py::test_damage_bad_prev_header",
    "small_batch_header_unsynced": "settee verify --only crash (acknowledged writes lost)",
    "small_batch_data_unsynced": "settee verify --only crash (a frame crc mismatch on reopen)",
    "body_fast_path_crc_unchecked": "settee verify --only corruption (a body bit flip)",
}

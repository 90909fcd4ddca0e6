"""The checkout's own pytest settings (the proof's fixtures and profiles are the installed
plugin's, ``settee.proof.plugin``).

Temporary directories go to memory: unless ``TMPDIR`` or ``--basetemp`` says where, pytest's
``tmp_path`` (and ``tempfile``, and every subprocess a test starts) uses ``/dev/shm`` when
it is a writable folder with room to spare (``ROOM``: pytest keeps the last three runs'
folders there; a container's default 64 MB ``/dev/shm`` is left alone) and not mounted
``noexec``, as the state machines' scratch directories already do
(``settee.proof.stateful.engines.scratch_dir``). Every database a test opens fsyncs on
creation and on each commit; on this disk the semantic suite spent half its wall time
waiting for them (``impl/proof/test_semantics.py`` alone: 32.5 s in /tmp, 14.8 s in
/dev/shm, the same 1,837 tests). The engine still makes every one of those calls: only the
wait for the disk is gone, and what a crash may lose is the crash suite's subject, checked
on its simulated file system (``crash_tests/simfs.py``), never on the real one.
"""

from __future__ import annotations

import os
import tempfile

import pytest

SHM = "/dev/shm"
#: The free space /dev/shm must have for the run's temporary folders to go there.
ROOM = 2 * 2**30


def _memory_folder() -> str | None:
    if not (os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK)):
        return None
    stat = os.statvfs(SHM)
    if stat.f_flag & getattr(os, "ST_NOEXEC", 0) or stat.f_bavail * stat.f_frsize < ROOM:
        return None
    return SHM


def pytest_configure(config: pytest.Config) -> None:
    # xdist's workers inherit the environment, so they (and their subprocesses) agree.
    if config.option.basetemp or os.environ.get("TMPDIR"):
        return
    folder = _memory_folder()
    if folder is not None:
        os.environ["TMPDIR"] = folder
        tempfile.tempdir = None  # gettempdir() computes it again, from TMPDIR

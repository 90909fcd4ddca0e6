"""``settee.open`` as the server opens its databases and view indexes.

The engine opens a damaged directory the way SEMANTICS.md §16 says; the server
turns what a client could not act on into CouchDB answers:

* a directory the engine refuses as damaged (``DamagedDirectory``: a shard file
  missing, files not its own) is ``protocol.damaged`` (410), as a file that fails
  its checks (``CorruptionError``, which ``error_reply`` answers so);
* a shard whose newest valid commit is older than the one ``HEADS`` names as
  durable (``LostCommitWarning``: a flipped bit in a header, a file cut short or
  restored from an older copy) is refused the same way. The embedded API warns
  and opens the older commit; a server has nobody to warn, and answering 200
  would serve the older state, acknowledged writes missing, as if nothing
  happened (found by the fault sweep). Refusing before the writer republishes
  that shard's HEADS slot keeps the evidence, so the database stays refused
  until the shard is restored, or HEADS deleted to accept the older state;
* a directory where a file should be, a file where a directory should be, a
  symlink loop (``EISDIR``, ``ENOTDIR``, ``EEXIST``, ``ELOOP``) is damage too: it
  was a 500, or for a view index a 503 "retry", which no retry mends;
* a database another process holds is 503 (retry once it closes).

Any other refusal (a permission, a format this settee cannot read) stays the
server's own error, a 500 (a full disk a 507).
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from typing import Any

import settee
from settee.file import LostCommitWarning
from settee.heads import HEADS_NAME
from settee.layout import DamagedDirectory, DatabaseInUse
from settee.serve.protocol import HTTPError, damaged, out_of_space

__all__ = ["DAMAGE_ERRNOS", "open_database"]

#: What the file system answers when a path holds the wrong kind of entry.
DAMAGE_ERRNOS = frozenset({errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.ELOOP})

#: ``warnings.catch_warnings`` changes the process's filters: opens that change them
#: one at a time restore them in order.
_FILTERS = threading.Lock()


def open_database(path: str, *, what: str = "database", **options: Any) -> settee.Database:
    """``settee.open(path, **options)``, refusing damage as the module says; ``what``
    names it in the answer (a view index is rebuilt once its folder is removed)."""
    try:
        with _FILTERS, warnings.catch_warnings():
            warnings.simplefilter("error", LostCommitWarning)
            return settee.open(path, **options)
    except LostCommitWarning as exc:
        heads = os.path.join(path, HEADS_NAME)
        raise damaged(
            f"{exc} (the {what} is refused until the shard file is restored; remove "
            f"{heads} to accept the older state)"
        ) from None
    except DamagedDirectory as exc:
        raise damaged(str(exc)) from exc
    except DatabaseInUse as exc:
        raise HTTPError(503, "service_unavailable", str(exc)) from exc
    except settee.SetteeError as exc:
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno in DAMAGE_ERRNOS:
            raise damaged(str(exc)) from exc
        if type(exc) is settee.SetteeError and not out_of_space(exc):
            # Answered as it is, a plain SetteeError reads as "closed meanwhile": a view
            # query answered a 503 "retry" that no retry mends (found probing an index
            # of another format version).
            raise HTTPError(500, "unknown_error", str(exc)) from exc
        raise

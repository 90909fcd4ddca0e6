"""A readonly handle in another process, driven over a pipe: the stress campaign's
reader process.

The history checker needs every call on one clock. So the reader's client runs
in this process like any other, and its calls go to a ``ReaderProcess`` proxy:
the invocation is recorded before the request is sent and the response after
the answer arrives, so the recorded interval contains the read the other
process really made, on its own ``settee.open(path, readonly=True)``.

The other process is ``python -m settee.proof.stateful.reader_process SPEC PATH``
speaking pickles on stdin/stdout (a plain subprocess: nothing of the parent's
``__main__`` is re-imported, so it works under pytest, ``settee verify`` and
``python -c`` alike).
"""

from __future__ import annotations

import contextlib
import pickle
import select
import subprocess
import sys
from typing import IO, Any

__all__ = ["READS", "ReaderProcess"]

#: The calls a reader process serves (a readonly handle refuses the rest anyway).
READS = frozenset({"get", "all_docs", "changes", "info", "revs_diff"})
#: Seconds to wait for the reader process to start or answer before failing.
TIMEOUT = 60.0


def _open_reader(spec: str, path: str) -> Any:
    from settee.proof.stateful.engines import load_factory

    factory = load_factory(spec)
    opener = getattr(factory, "open_follower", None)  # a mutant's broken reader
    if opener is not None:
        return opener(path)
    import settee

    return settee.open(path, readonly=True)


def _send(out: IO[bytes], obj: Any) -> None:
    out.write(pickle.dumps(obj))
    out.flush()


def serve(spec: str, path: str, inp: IO[bytes], out: IO[bytes]) -> None:
    """The reader process: open, say ready, answer ``(name, args, kwargs)`` until None."""
    try:
        db = _open_reader(spec, path)
    except BaseException as exc:
        _send(out, ("failed", repr(exc)))
        return
    _send(out, ("ready", None))
    try:
        while True:
            request = pickle.load(inp)
            if request is None:
                break
            name, args, kwargs = request
            try:
                _send(out, (True, getattr(db, name)(*args, **kwargs)))
            except Exception as exc:  # the caller's outcome() classifies it
                _send(out, (False, exc))
    finally:
        db.close()


class ReaderProcess:
    """Forwards read calls to a readonly handle opened in another process."""

    def __init__(self, spec: str, path: str) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "settee.proof.stateful.reader_process", spec, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        status, detail = self._receive()
        if status != "ready":
            self.close()
            raise RuntimeError(f"the reader process could not open {path}: {detail}")

    def _receive(self) -> Any:
        out = self._process.stdout
        assert out is not None  # opened with stdout=PIPE
        ready, _, _ = select.select([out], [], [], TIMEOUT)
        if not ready:
            raise TimeoutError(f"the reader process did not answer within {TIMEOUT} s")
        return pickle.load(out)

    def __getattr__(self, name: str) -> Any:
        if name not in READS:
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            assert self._process.stdin is not None  # opened with stdin=PIPE
            _send(self._process.stdin, (name, args, kwargs))
            ok, value = self._receive()
            if ok:
                return value
            raise value

        return call

    def close(self) -> None:
        """Stop the reader process (it closes its handle first). Idempotent."""
        if self._process.poll() is None and self._process.stdin is not None:
            with contextlib.suppress(OSError):
                _send(self._process.stdin, None)
                self._process.stdin.close()
        try:
            self._process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2], sys.stdin.buffer, sys.stdout.buffer)

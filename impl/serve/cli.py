"""``settee serve``: the command line of the HTTP server."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["add_parser", "default_dir"]


def default_dir() -> str:
    """``$XDG_DATA_HOME/settee`` (``~/.local/share/settee``): a per-user data directory."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(base, "settee")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the ``settee`` command's subparsers."""
    parser = subparsers.add_parser(
        "serve",
        help="serve databases over CouchDB's HTTP API",
        description="Serve every database under DIR over a CouchDB-compatible HTTP API "
        "(curl, CouchDB clients, PouchDB replication). Socket options are only set when "
        "given: by default the kernel autotunes the TCP buffers.",
    )
    parser.add_argument("--dir", default=None, help=f"data directory (default: {default_dir()})")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5984, help="port to listen on (0: any)")
    for name, help_text in (
        ("backlog", "listen() queue length"),
        ("max-connections", "open connections at once (more are closed at once)"),
        ("recbuf", "SO_RCVBUF bytes; unset: the kernel autotunes (recommended)"),
        ("sndbuf", "SO_SNDBUF bytes; unset: the kernel autotunes (recommended)"),
        ("threads", "worker threads for engine calls"),
        ("max-url-length", "longest request URL in bytes (a document id must fit in one)"),
        ("idle-timeout", "ms a connection may stay open without sending a whole request"),
        ("shards", "shards of new databases (PUT /db?q=N overrides)"),
        (
            "max-dbs-open",
            "databases kept open at once; the least recently used idle ones close "
            "first (each holds 10 file descriptors and 4 threads)",
        ),
    ):
        parser.add_argument(f"--{name}", type=int, default=None, help=help_text)
    parser.add_argument(
        "--no-fsync",
        action="store_true",
        help="UNSAFE: acknowledge writes before they are durable",
    )
    parser.set_defaults(func=run)
    return parser


def _descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE (no limit: as good as infinite)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return sys.maxsize if soft == resource.RLIM_INFINITY else soft


def run(args: argparse.Namespace) -> int:
    from settee.serve.options import descriptor_warning, merge_options
    from settee.serve.server import start_server

    # Only the options the user gave: the rest keep their defaults (options.py).
    given = {
        key: getattr(args, key)
        for key in (
            "backlog",
            "max_connections",
            "recbuf",
            "sndbuf",
            "threads",
            "max_url_length",
            "idle_timeout",
            "shards",
            "max_dbs_open",
        )
        if getattr(args, key) is not None
    }
    if args.no_fsync:
        given["fsync"] = False
    directory = args.dir or default_dir()
    warning = descriptor_warning(merge_options(**given), _descriptor_limit())
    if warning is not None:
        print(f"settee serve: warning: {warning}", file=sys.stderr, flush=True)
    handle = start_server(directory, args.host, args.port, **given)
    print(f"settee serve: {handle.url}/ serving {handle.dir}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        if not handle.running:
            print("settee serve: the server stopped on an error", file=sys.stderr)
            return 1
    handle.stop()
    return 0

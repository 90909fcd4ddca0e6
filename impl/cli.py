"""The ``settee`` command line: ``settee verify``, ``settee --version``, ...

Subcommands that later issues add (bench, check, dump, load, serve) register
themselves in ``COMMANDS``; every subcommand is a function taking parsed
arguments and returning a process exit status.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence

import settee

__all__ = ["main"]

Command = Callable[[argparse.Namespace], int]


def _cmd_verify(args: argparse.Namespace) -> int:
    """Smoke run on an embedded temporary database until the proof campaigns land."""
    from settee.smoke import run_smoke

    with tempfile.TemporaryDirectory(prefix="settee-verify-") as tmp:
        return run_smoke(tmp, out=sys.stdout, shards=args.shards)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="settee",
        description="settee: an embedded, CouchDB-style document store with a proven engine.",
    )
    parser.add_argument("--version", action="version", version=f"settee {settee.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    verify = sub.add_parser(
        "verify",
        help="check the engine on an embedded temporary database",
        description="Open a temporary database, exercise the engine and compare it with the "
        "reference model; exit 1 on any disagreement.",
    )
    verify.add_argument("--shards", type=int, default=4, help="shards of the temporary database")
    verify.set_defaults(func=_cmd_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``settee`` console script; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``settee`` command line: ``settee verify``, ``settee --version``, ...

Subcommands that later issues add (bench, check, dump, load, serve) register
themselves in ``COMMANDS``; every subcommand is a function taking parsed
arguments and returning a process exit status.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import settee

__all__ = ["load_bench", "main"]

Command = Callable[[argparse.Namespace], int]


def _cmd_check(args: argparse.Namespace) -> int:
    """Verify a database's files; print OK or each problem. Notes (kept torn tails,
    which recovery accepts) are printed with a ``note:`` prefix and do not fail."""
    from settee.check import check_database

    problems = 0
    for problem in check_database(args.path, notes=lambda note: print(f"note: {note}")):
        print(problem)
        problems += 1
    if problems:
        print(f"{problems} problem(s) found in {args.path}", file=sys.stderr)
        return 1
    print("OK")
    return 0


def _utf8(stream: object) -> None:
    """Make a standard stream UTF-8: a dump's JSON lines are UTF-8 whatever the
    locale (ids and bodies hold any character; an ASCII locale's stdout could not
    write them), and ``load`` refuses other bytes instead of guessing."""
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(encoding="utf-8", errors="strict")


def _cmd_dump(args: argparse.Namespace) -> int:
    from settee.transfer import dump

    _utf8(sys.stdout)
    # Readonly: a dump only reads. A writer's open republishes HEADS, which erased
    # the record of a durable commit a damaged header lost (settee check then said
    # OK), and it could not dump beside the running writer.
    with settee.open(args.path, readonly=True) as db:
        count = dump(db, sys.stdout)
    print(f"dumped {count} revisions", file=sys.stderr)
    return 0


def _cmd_load(args: argparse.Namespace) -> int:
    from settee.transfer import load

    _utf8(sys.stdin)
    with settee.open(args.path) as db:
        count = load(db, sys.stdin)
    print(f"loaded {count} revisions into {args.path}", file=sys.stderr)
    return 0


def load_bench() -> ModuleType | None:
    """The ``bench`` package of the source checkout settee runs from (an editable
    install), imported from its folder without putting the checkout on sys.path; None
    when settee is installed from a wheel, which does not ship the benchmarks."""
    root = Path(__file__).resolve().parent.parent
    init = root / "bench" / "__init__.py"
    if not init.is_file() or not (root / "pyproject.toml").is_file():
        return None
    loaded = sys.modules.get("bench")
    if loaded is not None and Path(loaded.__file__ or "").resolve() == init:
        return loaded
    spec = importlib.util.spec_from_file_location(
        "bench", init, submodule_search_locations=[str(init.parent)]
    )
    assert spec is not None and spec.loader is not None  # a file location always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # bench's own imports (bench.runner, ...) resolve through it
    spec.loader.exec_module(module)
    return module


def _cmd_bench(args: argparse.Namespace) -> int:
    """Run bench/ from the source checkout (benchmarks are not installed with the package)."""
    if load_bench() is None:
        print(
            "settee bench needs a source checkout: the benchmarks (bench/) are not installed "
            "with the package. From a clone: pip install -e '.[bench]' && settee bench",
            file=sys.stderr,
        )
        return 2
    runner = importlib.import_module("bench.runner")
    return int(runner.main(args.bench_args))


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="settee",
        description="settee: an embedded, CouchDB-style document store with a proven engine.",
    )
    parser.add_argument("--version", action="version", version=f"settee {settee.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    from settee.verify import add_parser as add_verify_parser

    add_verify_parser(sub)
    check = sub.add_parser(
        "check",
        help="verify a database's files without changing them",
        description="Check every block marker, frame checksum and header, the B+tree "
        "invariants and by_id/by_seq agreement. Prints OK, or each problem as "
        "file:offset: what (exit 1). Repair is not offered: restore from a dump or backup.",
    )
    check.add_argument("path", help="database directory")
    check.set_defaults(func=_cmd_check)
    dump = sub.add_parser("dump", help="write every document revision as JSON lines to stdout")
    dump.add_argument("path", help="database directory")
    dump.set_defaults(func=_cmd_dump)
    load = sub.add_parser("load", help="read JSON lines (from settee dump) from stdin")
    load.add_argument("path", help="database directory (created if missing)")
    load.set_defaults(func=_cmd_load)
    bench = sub.add_parser("bench", help="run the benchmark suite (see bench/README.md)")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="options for the runner")
    bench.set_defaults(func=_cmd_bench)
    from settee.serve import add_parser as add_serve_parser  # aiohttp loads only when serving

    add_serve_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``settee`` console script; returns the exit status."""
    parser = _build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # Everything after "bench" is the runner's (argparse would take `--quick` as
        # an unknown option of `settee` itself instead of passing it on).
        args = argparse.Namespace(command="bench", func=_cmd_bench, bench_args=argv[1:])
    else:
        args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args))
    except settee.SetteeError as exc:
        print(f"settee {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``settee serve``: settee's databases over CouchDB's HTTP API.

One settee database per CouchDB database under a data directory, served so
that CouchDB's own tools work against it: curl, Python clients, PouchDB
replication (``_revs_diff``, ``_bulk_get``, ``_changes?style=all_docs``,
``_local`` checkpoints, ``new_edits=false``).

Why aiohttp (over uvicorn + starlette): one well-kept package that is the
whole stack, server and test-side client, with a C HTTP parser (llhttp); its
low-level ``web.Server`` lets settee create the listening socket itself, so
the socket policy (sockets.py) is settee's and not a framework default, and
gives each request its transport, so the policy can be applied to and
checked on every accepted connection; request bodies are a stream
(``request.content``), and ``StreamResponse`` serves longpoll heartbeats and
continuous feeds. uvicorn would add a second package and a second parser,
and owns its sockets' options.

Every engine call and every JSON encode/decode of a body runs on a thread
pool (``State.run``), never on the event loop.

Databases open on first use, at most ``max_dbs_open`` at once: requests lease
theirs, and the least recently used idle ones close to make room (registry.py).

Modules, in reading order: options → sockets → protocol → local → lru →
registry → lease → notifier → dbevents → revs (the only reader of engine internals) →
state → docchecks → validation → doccopy → docs → alldocs → bulk → dbs →
changes → dbupdates → cluster → app → server → cli.
"""

from __future__ import annotations

from typing import Any

from settee.serve.cli import add_parser
from settee.serve.options import DEFAULTS, merge_options

__all__ = ["DEFAULTS", "ServerHandle", "add_parser", "merge_options", "start_server"]


def __getattr__(name: str) -> Any:
    # The server needs aiohttp (the `serve` extra); `settee --help` and add_parser must not.
    if name in ("ServerHandle", "start_server"):
        from settee.serve import server

        return getattr(server, name)
    raise AttributeError(f"module 'settee.serve' has no attribute {name!r}")

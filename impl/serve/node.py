"""``/_node/{node-name}/...``: the one node's name, configuration and versions.

``{node-name}`` is ``_local`` or the node's name (``cluster.NODE``), as in
CouchDB (api/server/common.rst). ``_config`` shows settee serve's options under
the CouchDB sections and keys that mean the same thing, every value a string as
CouchDB's are; the options are set when the server starts (``settee serve
--help``), so writing them is 405. ``_versions`` names the JavaScript engine and
settee. The node's statistics (``_stats``, ``_system``, ``_prometheus``) and
the other node endpoints are not served and say so.
"""

from __future__ import annotations

import functools
import platform
from typing import Any

from aiohttp import web

import settee
from settee.serve.cluster import NODE
from settee.serve.js import js_available
from settee.serve.protocol import HTTPError, method_not_allowed, reply, respond
from settee.serve.state import State

__all__ = ["handle_node"]


async def handle_node(
    state: State, request: web.BaseRequest, parts: list[str]
) -> web.StreamResponse:
    """``parts``: the path after ``_node``."""
    if not parts:
        # chttpd_node:handle_node_req's answer to a bare /_node.
        raise HTTPError(400, "bad_request", "Incomplete path to _node request")
    if parts[0] not in ("_local", NODE):
        raise HTTPError(404, "not_found", f"no node {parts[0]!r} in this cluster: {NODE} only")
    rest = parts[1:]
    if rest[:1] == ["_config"] and len(rest) > 3:
        raise HTTPError(404, "not_found", "missing")  # chttpd:send_error(Req, not_found)
    if rest == ["_config", "_reload"]:
        # chttpd_node: a reload flushes unpersisted values, which settee serve has
        # none of (its options are set at start), so it is a no-op; POST alone.
        if request.method != "POST":
            raise method_not_allowed("POST")
        return respond(reply(200, {"ok": True}))
    if request.method not in ("GET", "HEAD"):
        if rest[:1] == ["_config"]:
            raise HTTPError(
                405,
                "method_not_allowed",
                "settee serve's configuration is set when it starts (settee serve --help)",
                headers={"Allow": "GET,HEAD"},
            )
        # chttpd_node answers GET only for _versions (HEAD is chttpd's GET).
        raise method_not_allowed("GET" if rest == ["_versions"] else "GET,HEAD")
    if not rest:
        return respond(reply(200, {"name": NODE}))
    if rest[0] == "_config":
        return respond(reply(200, _config_part(config(state), rest[1:])))
    if rest[0] == "_versions" and len(rest) == 1:
        return respond(reply(200, _versions()))
    raise HTTPError(404, "not_found", f"settee serve does not serve /_node/{{node}}/{rest[0]} yet")


def config(state: State) -> dict[str, dict[str, str]]:
    """The server's options as CouchDB's configuration sections."""
    options = state.options
    couchdb = {
        "uuid": state.uuid,
        "database_dir": state.registry.root,
        "view_index_dir": state.registry.root,
        "max_dbs_open": str(options["max_dbs_open"]),
        "max_document_size": str(options["max_document_size"]),
        "file_compression": "none",
    }
    chttpd: dict[str, str] = {"changes_timeout": str(options["changes_timeout"])}
    if state.bind_address is not None:
        # config_test.exs finds chttpd's port among the standard options.
        chttpd["bind_address"], chttpd["port"] = state.bind_address[0], str(state.bind_address[1])
    if options.get("max_request_size") is not None:
        chttpd["max_http_request_size"] = str(options["max_request_size"])
    return {
        "couchdb": couchdb,
        "chttpd": chttpd,
        "httpd": {"max_uri_length": str(options["max_url_length"])},
        "cluster": {"q": str(options["shards"]), "n": "1"},
    }


def _config_part(sections: dict[str, dict[str, str]], path: list[str]) -> Any:
    """The whole configuration, a section, or one value; CouchDB's 404s otherwise."""
    if not path:
        return sections
    section = sections.get(path[0])
    if len(path) == 1:
        return section or {}  # CouchDB answers an unknown section with {}
    if len(path) == 2 and section is not None and path[1] in section:
        return section[path[1]]
    raise HTTPError(404, "not_found", "unknown_config_value")


def _versions() -> dict[str, Any]:
    engine = {"name": "v8", "version": "unavailable" if js_available() else _v8_version()}
    return {
        "javascript_engine": engine,
        # chttpd_node:get_versions names the ICU collator; settee collates strings
        # with its own approximation of the UCA (spec/collation.py).
        "collation_driver": {
            "name": "settee",
            "library_version": settee.__version__,
            "collation_algorithm_version": "UCA, approximated",
            "collator_version": settee.__version__,
        },
        "settee": {"version": settee.__version__},
        "python": {"version": platform.python_version()},
    }


@functools.cache
def _v8_version() -> str:
    try:
        from py_mini_racer import MiniRacer

        return str(MiniRacer().v8_version)
    except Exception:  # the engine's version is a courtesy: never fail the request for it
        return "unknown"

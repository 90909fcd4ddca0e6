"""Design-document JavaScript, run in an embedded V8 (``mini-racer``, the optional
extra ``settee[js]``).

CouchDB runs design functions in ``couchjs`` processes; settee serve compiles
each function once into one V8 isolate of its own process and calls it with
JSON arguments. Every call has a time limit and the isolate a memory limit, so
a function that loops or allocates without end fails its request (400
``os_process_error``), never the server. Calls are serialised by a lock: V8
isolates are single-threaded, and design functions are small.

The globals a function may use are CouchDB's: ``emit`` (map functions),
``log``, ``isArray``, ``toJSON``, ``sum``, and ``require`` for a design
document's CommonJS modules (a map function's from ``views.lib`` alone). A
thrown object is returned as is (``{forbidden: ...}``, ``{unauthorized: ...}``:
what ``validate_doc_update`` throws); a thrown ``Error`` becomes ``os_process_error``.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import deque
from typing import Any

from settee.serve.protocol import HTTPError

__all__ = ["FunctionError", "JsFunction", "JsRuntime", "Thrown", "js_available", "runtime"]

#: Seconds one call may run (CouchDB's os_process_timeout is 5 s).
CALL_SECONDS = 5.0
#: Bytes the isolate may hold before calls fail.
MEMORY_LIMIT = 256 * 1024 * 1024

_PRELUDE = r"""
var __settee = {fns: {}, emitted: null, next: 0};
function emit(key, value) {
  if (__settee.emitted === null) throw new Error("emit() outside a map function");
  __settee.emitted.push([key === undefined ? null : key, value === undefined ? null : value]);
}
function log(message) {}
function isArray(value) { return Array.isArray(value); }
function toJSON(value) { return JSON.stringify(value); }
function sum(values) {
  var s = 0;
  for (var i = 0; i < values.length; i++) s += values[i];
  return s;
}
function __settee_compile(source, root) {
  // couchjs runs a function's source as a script whose last statement is the function
  // (rewrite_fun.js turns it into an expression): a trailing ";" or line comment is
  // fine there, not inside "( ... )", so they are kept out of the parentheses.
  var text = "(" + source.replace(/[\s;]+$/, "") + "\n)";
  // In the global scope, or beside the one name "require" when the function has a
  // module root; a direct eval here would let it see this function's own locals.
  var fn = root === null ? (0, eval)(text) : __settee_eval_with(__settee_require_in(root), text);
  if (typeof fn !== "function") throw new Error("expression does not evaluate to a function");
  var id = String(__settee.next++);
  __settee.fns[id] = fn;
  return id;
}
function __settee_call(id, argsJson, collect) {
  var args = JSON.parse(argsJson);
  __settee.emitted = collect ? [] : null;
  try {
    var result = __settee.fns[id].apply(null, args);
    var out = collect ? {ok: __settee.emitted} : {ok: result === undefined ? null : result};
    return JSON.stringify(out);
  } catch (e) {
    if (e instanceof Error) return JSON.stringify({error: String(e)});
    return JSON.stringify({thrown: e === undefined ? null : e});
  } finally {
    __settee.emitted = null;
  }
}
function __settee_forget(id) { delete __settee.fns[id]; }
function __settee_eval_with(require, __settee_text) { return eval(__settee_text); }
// CommonJS modules as couchjs's util.js resolves them (resolveModule): a path is
// absolute from the root, or relative ("." and "..") to the requiring module.
function __settee_resolve(names, mod, root) {
  if (names.length == 0) {
    if (typeof mod.current != "string") {
      throw ["error", "invalid_require_path",
             "Must require a JavaScript string, not: " + (typeof mod.current)];
    }
    return {current: mod.current, parent: mod.parent, id: mod.id, exports: {}};
  }
  var n = names.shift();
  if (n == "..") {
    if (!(mod.parent && mod.parent.parent)) {
      throw ["error", "invalid_require_path",
             "Object has no parent " + JSON.stringify(mod.current)];
    }
    return __settee_resolve(names, {id: mod.id.slice(0, mod.id.lastIndexOf("/")),
                                    parent: mod.parent.parent, current: mod.parent.current});
  } else if (n == ".") {
    if (!mod.parent) {
      throw ["error", "invalid_require_path",
             "Object has no parent " + JSON.stringify(mod.current)];
    }
    return __settee_resolve(names, {parent: mod.parent, current: mod.current, id: mod.id});
  } else if (root) {
    mod = {current: root};
  }
  if (mod.current === null || typeof mod.current != "object" || mod.current[n] === undefined) {
    throw ["error", "invalid_require_path",
           "Object has no property \"" + n + "\". " + JSON.stringify(mod.current)];
  }
  return __settee_resolve(names, {current: mod.current[n], parent: mod,
                                  id: mod.id !== undefined ? mod.id + "/" + n : n});
}
// couchjs's require (Couch.compileFunction): each module runs once, its exports
// cached before it runs so that circular requires end.
function __settee_require_in(root) {
  var cache = {};
  var require = function (name, module) {
    module = module || {};
    var found = __settee_resolve(String(name).split("/"), module.parent, root);
    if (!cache.hasOwnProperty(found.id)) {
      cache[found.id] = {};
      var s = "(function (module, exports, require) { " + found.current + "\n });";
      try {
        (0, eval)(s).apply(globalThis, [found, found.exports, function (name) {
          return require(name, found);
        }]);
      } catch (e) {
        throw ["error", "compilation_error", "Module require('" + name + "') raised error " +
               (e instanceof Error ? e.stack : JSON.stringify(e))];
      }
      cache[found.id] = found.exports;
    }
    return cache[found.id];
  };
  return require;
}
"""

#: Show and list functions (render.py), as CouchDB's render.js and mimeparse.js
#: run them: start/send/getRow/provides/registerType, the answer's type negotiated
#: by ``?format=`` or ``Accept``; ``__settee_render`` runs one with ``this`` the
#: design document.
_RENDER_PRELUDE = r"""
var __settee_types = {mimes: {}, key: {}};
function registerType(key) {
  var mimes = Array.prototype.slice.call(arguments, 1);
  __settee_types.mimes[key] = mimes;
  mimes.forEach(function (mime) { __settee_types.key[mime] = key; });
}
[["all", "*/*"], ["text", "text/plain; charset=utf-8", "txt"],
 ["html", "text/html; charset=utf-8"], ["xhtml", "application/xhtml+xml", "xhtml"],
 ["xml", "application/xml", "text/xml", "application/x-xml"],
 ["js", "text/javascript", "application/javascript", "application/x-javascript"],
 ["css", "text/css"], ["ics", "text/calendar"], ["csv", "text/csv"],
 ["rss", "application/rss+xml"], ["atom", "application/atom+xml"],
 ["yaml", "application/x-yaml", "text/yaml"], ["multipart_form", "multipart/form-data"],
 ["url_encoded_form", "application/x-www-form-urlencoded"],
 ["json", "application/json", "text/x-json"]
].forEach(function (t) { registerType.apply(null, t); });
var __settee_out = null;
function __settee_reset_out(rows) {
  // start: what start() last gave; pending: the head a flush handed on (a list's
  // answer starts with the first flush that carries data, as couch_mrview_show
  // sends it, so a start() before that still sets the status and headers).
  __settee_out = {chunks: [], start: {}, newStart: false, pending: null, began: false,
                  body: [], provided: [], type: null, rows: rows, next: 0, gotRow: false,
                  ended: false};
}
function start(resp) { __settee_out.start = resp || {}; __settee_out.newStart = true; }
function send(chunk) { __settee_out.chunks.push(chunk.toString()); }
function provides(type, fun) { __settee_out.provided.push([type, fun]); }
function __settee_with_type(resp) {
  resp.headers = resp.headers || {};
  if (__settee_out.type && !resp.headers["Content-Type"]) {
    resp.headers["Content-Type"] = __settee_out.type;
  }
  return resp;
}
function __settee_flush(head) {
  var out = __settee_out, data = out.chunks.join("");
  if (head !== null && !out.began) out.pending = head;
  if (data) { out.began = true; out.body.push(data); }
  out.chunks = [];
}
function __settee_flush_rows() {
  var out = __settee_out;
  if (!out.gotRow) {
    out.gotRow = true;
    var head = __settee_with_type(out.start || {});
    out.start = {}; out.newStart = false;
    __settee_flush(head);
  } else {
    var given = out.newStart ? out.start : null;
    out.newStart = false;
    __settee_flush(given);
  }
}
function getRow() {
  var out = __settee_out;
  if (out.rows === null) throw new Error("getRow() is for list functions");
  if (out.next >= out.rows.length) {
    if (!out.ended) { out.ended = true; __settee_flush_rows(); }
    return null;
  }
  __settee_flush_rows();
  return out.rows[out.next++];
}
function __settee_media(range) {
  var parts = range.split(";"), params = {};
  parts.slice(1).forEach(function (p) {
    var kv = p.split("=");
    if (kv.length == 2) params[kv[0].trim()] = kv[1].trim();
  });
  var full = parts[0].trim();
  if (full == "*") full = "*/*";
  var q = parseFloat(params.q);
  params.q = (params.q === undefined || isNaN(q) || q > 1 || q < 0) ? "1" : params.q;
  var t = full.split("/");
  return [t[0], t[1], params];
}
function __settee_best_mime(supported, accept) {
  var ranges = accept.split(",").map(__settee_media);
  var weighted = supported.map(function (mime, i) {
    var target = __settee_media(mime), fitness = -1, q = 0;
    ranges.forEach(function (r) {
      if ((r[0] == target[0] || r[0] == "*" || target[0] == "*") &&
          (r[1] == target[1] || r[1] == "*" || target[1] == "*")) {
        var f = (r[0] == target[0] ? 100 : 0) + (r[1] == target[1] ? 10 : 0);
        for (var p in target[2]) if (p != "q" && r[2][p] && r[2][p] == target[2][p]) f += 1;
        if (f > fitness) { fitness = f; q = r[2].q; }
      }
    });
    return [[fitness, parseFloat(q)], i, mime];
  });
  weighted.sort();  // as mimeparse.js sorts them: by their text
  var best = weighted[weighted.length - 1];
  return best[0][1] ? best[2] : "";
}
function __settee_run_provides(req, ddoc) {
  var out = __settee_out, key = null, accept = req.headers && req.headers["Accept"];
  if (req.query && req.query.format) {
    key = req.query.format;
    out.type = __settee_types.mimes[key][0];
  } else if (accept) {
    var supported = [];
    out.provided.reverse().forEach(function (p) {
      if (__settee_types.mimes[p[0]]) supported = supported.concat(__settee_types.mimes[p[0]]);
    });
    out.type = __settee_best_mime(supported, accept);
    key = __settee_types.key[out.type];
  } else {
    key = out.provided[0][0];
    out.type = __settee_types.mimes[key][0];
  }
  for (var i = 0; i < out.provided.length; i++) {
    if (out.provided[i][0] == key) return out.provided[i][1].call(ddoc);
  }
  var offered = out.provided.map(function (p) {
    return (__settee_types.mimes[p[0]] || []).join(", ") || p[0];
  });
  throw ["error", "not_acceptable",
         "Content-Type " + (accept || key) + " not supported, try one of: " + offered.join(", ")];
}
function __settee_wrap(resp) { return typeof resp == "string" ? {body: resp} : resp; }
function __settee_show(fn, ddoc, args) {
  __settee_reset_out(null);
  var out = __settee_out;
  var resp = __settee_wrap(fn.apply(ddoc, args) || {});
  if (out.chunks.length) {
    resp.headers = resp.headers || {};
    for (var name in out.start) resp.headers[name] = out.start[name];
    resp.body = out.chunks.join("") + (resp.body || "");
    out.chunks = []; out.start = {};
  }
  if (out.provided.length) {
    var provided = __settee_wrap(__settee_run_provides(args[1], ddoc) || {});
    resp.body = (resp.body || "") + out.chunks.join("") + (provided.body || "");
    resp = __settee_with_type(resp);
  }
  if (resp === null || (typeof resp != "object" && typeof resp != "string") || Array.isArray(resp))
    throw ["error", "render_error", "undefined response from show function"];
  return resp;
}
function __settee_list(fn, ddoc, args, rows) {
  __settee_reset_out(rows);
  var out = __settee_out;
  var tail = fn.apply(ddoc, args);
  if (out.provided.length) tail = __settee_run_provides(args[1], ddoc);
  if (!out.gotRow) __settee_flush_rows();
  if (tail !== undefined) out.chunks.push(tail);
  __settee_flush(out.newStart ? out.start : null);
  return {start: out.pending, body: out.body.join("")};
}
function __settee_render(id, kind, argsJson, ddocJson, rowsJson) {
  var args = JSON.parse(argsJson), ddoc = JSON.parse(ddocJson), fn = __settee.fns[id];
  try {
    var result = kind == "show" ? __settee_show(fn, ddoc, args)
                                : __settee_list(fn, ddoc, args, JSON.parse(rowsJson));
    return JSON.stringify({ok: result});
  } catch (e) {
    if (kind == "show" && args[0] === null && args[1].path.length > 5)
      return JSON.stringify({thrown: ["error", "not_found", "document not found"]});
    if (e instanceof Error) return JSON.stringify({error: String(e)});
    return JSON.stringify({thrown: e === undefined ? null : e});
  } finally {
    __settee_out = null;
  }
}
"""


class Thrown(Exception):
    """A function threw a non-``Error`` value (``validate_doc_update``'s way to refuse)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


class FunctionError(HTTPError):
    """A function threw an ``Error`` (not a time or memory limit of the engine)."""


def js_available() -> str | None:
    """None when the JavaScript engine imports, else how to install it."""
    try:
        import py_mini_racer  # noqa: F401
    except ImportError:
        return (
            "settee serve runs design-document JavaScript with mini-racer: pip install 'settee[js]'"
        )
    return None


class JsFunction:
    """One compiled function; call it with JSON-able arguments. The isolate keeps
    it until no Python object refers to it any more."""

    def __init__(self, runtime: JsRuntime, handle: str, generation: int) -> None:
        self._runtime = runtime
        self._handle = handle
        # A database closed to make room (max_dbs_open) drops its compiled functions
        # and compiles them again when it reopens: without this the isolate kept
        # every old copy until it ran out of memory and failed a request.
        weakref.finalize(self, runtime.forget_later, handle, generation)

    def __call__(self, *args: Any) -> Any:
        return self._runtime.call(self._handle, list(args), collect=False)

    def render(self, kind: str, args: list[Any], ddoc: dict[str, Any], rows: Any = None) -> Any:
        """A show (``kind`` "show", ``args`` [doc, req]: the response object) or list
        function (``"list"``, [head, req], the view's ``rows``: ``{start, body}``)
        run as CouchDB's render.js runs them, with ``this`` the design document."""
        return self._runtime.render(self._handle, kind, args, ddoc, rows)

    def emitted(self, *args: Any) -> list[list[Any]]:
        """A map function's ``emit``s for these arguments."""
        rows: list[list[Any]] = self._runtime.call(self._handle, list(args), collect=True)
        return rows


class JsRuntime:
    """The process's V8 isolate (created on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ctx: Any = None
        #: Bumped when the isolate is replaced (after it ran out of memory): every
        #: function compiled before is gone, and callers compile again.
        self.generation = 0
        #: (handle, generation) of functions no Python object refers to any more.
        self._unreferenced: deque[tuple[str, int]] = deque()

    def _context(self) -> Any:
        if self._ctx is None:
            missing = js_available()
            if missing is not None:
                raise HTTPError(400, "bad_request", missing)
            from py_mini_racer import MiniRacer

            ctx = MiniRacer()
            ctx.set_hard_memory_limit(MEMORY_LIMIT)
            ctx.eval(_PRELUDE)
            ctx.eval(_RENDER_PRELUDE)
            self._ctx = ctx
        return self._ctx

    def compile(self, source: Any, where: str, root: Any = None) -> JsFunction:
        """The function ``source`` defines; 400 ``compilation_error`` if it is not one.
        With a ``root`` (JSON: a design document, or a map function's ``{"views":
        {"lib": ...}}``) it may ``require`` CommonJS modules from it, as couchjs's."""
        if not isinstance(source, str):
            raise HTTPError(400, "compilation_error", f"{where} is not a string of JavaScript")
        modules = "null" if root is None else json.dumps(root, ensure_ascii=False)
        with self._lock:
            self._forget_unreferenced()
            try:
                handle = self._eval(f"__settee_compile({json.dumps(source)}, {modules})")
            except HTTPError as exc:
                raise HTTPError(400, "compilation_error", f"{where}: {exc.reason}") from exc
            generation = self.generation
        return JsFunction(self, str(handle), generation)

    def call(self, handle: str, args: list[Any], *, collect: bool) -> Any:
        payload = json.dumps(json.dumps(args, ensure_ascii=False))
        code = f"__settee_call({json.dumps(handle)}, {payload}, {'true' if collect else 'false'})"
        return self._answer(code)

    def render(
        self, handle: str, kind: str, args: list[Any], ddoc: dict[str, Any], rows: Any
    ) -> Any:
        texts = [json.dumps(value, ensure_ascii=False) for value in (args, ddoc, rows)]
        quoted = ", ".join(json.dumps(text) for text in texts)
        return self._answer(f"__settee_render({json.dumps(handle)}, {json.dumps(kind)}, {quoted})")

    def _answer(self, code: str) -> Any:
        """Evaluate a call and unpack its ``{ok}``, ``{error}`` or ``{thrown}``."""
        with self._lock:
            self._forget_unreferenced()
            text = self._eval(code)
        try:
            answer = json.loads(text)
        except RecursionError:
            # A result nested past Python's recursion limit (found in review: a 500
            # on every query of the view); a map error skips the document, as couchjs's.
            raise HTTPError(
                400, "os_process_error", "the function's result nests too deeply"
            ) from None
        if "error" in answer:
            raise FunctionError(400, "os_process_error", str(answer["error"]))
        if "thrown" in answer:
            raise Thrown(answer["thrown"])
        return answer["ok"]

    def forget_later(self, handle: str, generation: int) -> None:
        """Forget ``handle`` at the next call into the isolate. The garbage collector
        calls this, on whatever thread it runs, perhaps one inside ``_eval``
        holding the lock: so it only queues the handle."""
        self._unreferenced.append((handle, generation))

    def _forget_unreferenced(self) -> None:
        """Forget the queued handles (holding the lock). Handles restart at 0 in a
        replaced isolate, so one of an older generation is dropped, not forgotten."""
        handles = []
        while self._unreferenced:
            handle, generation = self._unreferenced.popleft()
            if generation == self.generation:
                handles.append(handle)
        if handles and self._ctx is not None:
            self._eval(f"{json.dumps(handles)}.forEach(__settee_forget)")

    def compiled(self) -> int:
        """How many functions the isolate holds (0 before it starts)."""
        with self._lock:
            if self._ctx is None:
                return 0
            self._forget_unreferenced()
            return int(self._eval("Object.keys(__settee.fns).length"))

    def _eval(self, code: str) -> Any:
        ctx = self._context()  # 400 with how to install it when mini-racer is absent
        from py_mini_racer import JSEvalException, JSOOMException, JSTimeoutException

        try:
            return ctx.eval(code, timeout_sec=CALL_SECONDS)
        except JSTimeoutException as exc:
            raise HTTPError(
                400, "os_process_error", f"JavaScript ran longer than {CALL_SECONDS:g} s"
            ) from exc
        except JSOOMException as exc:
            self._ctx = None  # an isolate past its hard limit is not trusted again
            self.generation += 1
            ctx.close()
            raise HTTPError(
                400, "os_process_error", f"JavaScript used more than {MEMORY_LIMIT} bytes"
            ) from exc
        except JSEvalException as exc:
            raise HTTPError(400, "os_process_error", str(exc).strip()[:500]) from exc


_RUNTIME = JsRuntime()


def runtime() -> JsRuntime:
    """The process's runtime (one isolate for every database)."""
    return _RUNTIME

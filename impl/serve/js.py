"""Design-document JavaScript, run in an embedded V8 (``mini-racer``, the optional
extra ``settee[js]``).

CouchDB runs design functions in ``couchjs`` processes; settee serve compiles
each function once into one V8 isolate of its own process and calls it with
JSON arguments. Every call has a time limit and the isolate a memory limit, so
a function that loops or allocates without end fails its request (400
``os_process_error``), never the server. Calls are serialised by a lock: V8
isolates are single-threaded, and design functions are small.

The globals a function may use are CouchDB's: ``emit`` (map functions),
``log``, ``isArray``, ``toJSON``, ``sum``. A thrown object is returned as is
(``{forbidden: ...}``, ``{unauthorized: ...}``: what ``validate_doc_update``
throws); a thrown ``Error`` becomes ``os_process_error``.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import deque
from typing import Any

from settee.serve.protocol import HTTPError

__all__ = ["JsFunction", "JsRuntime", "Thrown", "js_available", "runtime"]

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
function __settee_compile(source) {
  // couchjs runs a function's source as a script whose last statement is the function
  // (rewrite_fun.js turns it into an expression): a trailing ";" or line comment is
  // fine there, not inside "( ... )", so they are kept out of the parentheses.
  var fn = eval("(" + source.replace(/[\s;]+$/, "") + "\n)");
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
"""


class Thrown(Exception):
    """A function threw a non-``Error`` value (``validate_doc_update``'s way to refuse)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


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
            self._ctx = ctx
        return self._ctx

    def compile(self, source: Any, where: str) -> JsFunction:
        """The function ``source`` defines; 400 ``compilation_error`` if it is not one."""
        if not isinstance(source, str):
            raise HTTPError(400, "compilation_error", f"{where} is not a string of JavaScript")
        with self._lock:
            self._forget_unreferenced()
            try:
                handle = self._eval(f"__settee_compile({json.dumps(source)})")
            except HTTPError as exc:
                raise HTTPError(400, "compilation_error", f"{where}: {exc.reason}") from exc
            generation = self.generation
        return JsFunction(self, str(handle), generation)

    def call(self, handle: str, args: list[Any], *, collect: bool) -> Any:
        payload = json.dumps(json.dumps(args, ensure_ascii=False))
        code = f"__settee_call({json.dumps(handle)}, {payload}, {'true' if collect else 'false'})"
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
            raise HTTPError(400, "os_process_error", str(answer["error"]))
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

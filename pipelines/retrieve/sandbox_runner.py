"""The program inside the retrieve sandbox: standard library only, run as `python -I -S <this file>`.

It locks itself down before it reads any model code (pipelines.retrieve.sandbox describes the
layers), then serves one JSON message per line on stdin/stdout:

  host → {"op": "init", "query", "documents", "limits"}         runner → {"op": "ready", "protections"}
  host → {"op": "exec", "code"}                                  runner → {"op": "done", "output", "error", "final"}
  runner → {"op": "call", "fn", "args"} (a helper the host serves)  host → {"op": "reply", "value"|"error"}

The model's code runs with restricted builtins, an import allow-list of pure modules (exposed as
namespaces of their functions, never the modules themselves) and an AST check that rejects names
and attributes starting with "_" and the frame/code/generator internals, wherever the syntax
reaches them (dotted names, match class/mapping patterns, binding names, keywords); REPL state persists
between execs. Nothing the code does reaches stdout except through the bounded `print`.
"""

import ast
import ctypes
import json
import os
import resource
import signal
import sys

NOBODY = 65534
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID = 0x10000000, 0x40000000, 0x20000000
PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE, PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 38, 4, 1, 36
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_OUT = sys.stdout.buffer
_IN = sys.stdin.buffer


def _send(msg: dict) -> None:
    _OUT.write(json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n")
    _OUT.flush()


def _recv() -> dict:
    line = _IN.readline()
    if not line:
        raise SystemExit(0)
    return json.loads(line)


# --- the operating-system layer ----------------------------------------------------------------


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _own_pid_namespace(libc, p: dict, allowed: bool = True) -> None:
    """Every process the code starts must die with the sandbox, also one that left the session
    (setsid) and was orphaned (reparented away from the runner). In a PID namespace of its own the
    runner forks the namespace's init, which goes on as the runner; when that init dies (the host's
    kill) the kernel kills every process of the namespace. The outer runner only waits and exits
    with its status, and the init dies with it (PDEATHSIG). Where the kernel refuses the namespace,
    the runner becomes a child subreaper: orphans reparent to it, and the host finds and kills them
    below it (pipelines.retrieve.sandbox.Sandbox.kill)."""
    if not allowed or libc.unshare(CLONE_NEWPID) != 0:
        p["pid_namespace_error"] = os.strerror(ctypes.get_errno()) if allowed else "not asked for (tests)"
        p["subreaper"] = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        return
    child = os.fork()
    if child:  # the outer runner: nothing but wait
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    p["namespaces"].append("pid")


def lock_down(limits: dict, empty_root: str, pid_namespace: bool = True) -> dict:
    """Drop to nobody, enter new namespaces, chroot into an empty read-only directory, drop every
    capability, set the rlimits. Returns which protections took effect (a refused one is reported,
    never pretended)."""
    p: dict = {}
    libc = ctypes.CDLL(None, use_errno=True)
    # 1. The uid: root drops to nobody (the kernel does not apply RLIMIT_NPROC to root).
    if os.getuid() == 0 or os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        except OSError as e:
            p["uid_error"] = str(e)
    p["uid"] = os.getuid()
    p["unprivileged_uid"] = os.getuid() != 0 and os.geteuid() != 0
    # 2. Namespaces: a user namespace first (it lets an unprivileged process create the others).
    p["namespaces"] = []
    if libc.unshare(CLONE_NEWUSER) == 0:
        p["namespaces"].append("user")
    else:
        p["namespaces_error"] = os.strerror(ctypes.get_errno())
    _own_pid_namespace(libc, p, pid_namespace)
    for name, flag in (("net", CLONE_NEWNET), ("mount", CLONE_NEWNS), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS)):
        if libc.unshare(flag) == 0:
            p["namespaces"].append(name)
    # 3. The file system: an empty directory no one may write, as the root (needs the user namespace).
    try:
        os.chroot(empty_root)
        os.chdir("/")
        p["filesystem"] = "none (chroot into an empty read-only directory)"
    except OSError as e:
        p["filesystem"] = f"visible as uid {os.getuid()} (chroot refused: {e.strerror})"
    # 4. No capabilities left (not even those a user namespace grants), none to gain by exec.
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    p["capabilities_dropped"] = libc.capset(ctypes.byref(hdr), data) == 0
    p["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    # 5. Resource limits.
    mb = 1024 * 1024
    rl = {
        "RLIMIT_AS": (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb),
        "RLIMIT_CPU": (resource.RLIMIT_CPU, int(limits["cpu_s"])),
        "RLIMIT_FSIZE": (resource.RLIMIT_FSIZE, int(limits["file_bytes"])),
        "RLIMIT_NPROC": (resource.RLIMIT_NPROC, int(limits["max_procs"])),
        "RLIMIT_NOFILE": (resource.RLIMIT_NOFILE, int(limits["max_files"])),
        "RLIMIT_CORE": (resource.RLIMIT_CORE, 0),
    }
    p["rlimits"] = {}
    for name, (which, value) in rl.items():
        try:
            resource.setrlimit(which, (value, value))
            p["rlimits"][name] = value
        except (ValueError, OSError) as e:
            p["rlimits"][name] = f"refused: {e}"
    return p


# --- the Python layer ---------------------------------------------------------------------------

BLOCKED_ATTRS = frozenset(
    {
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "format",  # "{0.__class__}".format(x) reaches attributes by name
        "format_map",
        "mro",
    }
)
BLOCKED_NAMES = frozenset({"getattr", "setattr", "delattr", "vars", "globals", "locals", "eval", "exec"})


# Classes whose positional class pattern (`case int(n)`) binds the subject itself; any other class's
# positional pattern reads the attributes its __match_args__ names, which the check cannot see.
_SELF_MATCHING = frozenset({"bool", "dict", "float", "frozenset", "int", "list", "set", "str", "tuple"})


def _bad_attr(name: str) -> bool:
    return name.startswith("_") or name in BLOCKED_ATTRS


def _bound_names(node: ast.AST) -> list[str]:
    """Names a statement or pattern binds or passes as plain strings (not ast.Name nodes)."""
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return [node.name] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    if isinstance(node, ast.ExceptHandler):
        return [node.name] if node.name else []
    if isinstance(node, ast.alias):
        return [node.asname] if node.asname else []
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    return []


def _check_pattern(node: ast.AST) -> None:
    """Structural pattern matching reads attributes without a dotted name: a class pattern's
    keywords (`case Exception(__traceback__=tb)`) and, through __match_args__, its positional
    sub-patterns; a mapping pattern looks keys up by value."""
    if isinstance(node, ast.MatchClass):
        for attr in node.kwd_attrs:
            if _bad_attr(attr):
                raise SyntaxError(f"attribute {attr!r} is not allowed (in a class pattern)")
        if node.patterns and not (isinstance(node.cls, ast.Name) and node.cls.id in _SELF_MATCHING):
            raise SyntaxError(
                "positional class patterns are allowed only for built-in types "
                f"({', '.join(sorted(_SELF_MATCHING))}); use keyword patterns"
            )
    if isinstance(node, ast.MatchMapping):
        for key in node.keys:
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("_"):
                raise SyntaxError(f"mapping pattern key {key.value!r} is not allowed")


def _check_bound_names_and_patterns(node: ast.AST) -> None:
    for name in _bound_names(node):
        if name.startswith("_"):
            raise SyntaxError(f"name {name!r} is not allowed")
    if isinstance(node, (ast.MatchClass, ast.MatchMapping)):
        _check_pattern(node)


def check_code(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        _check_bound_names_and_patterns(node)
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in BLOCKED_ATTRS):
            raise SyntaxError(f"attribute {node.attr!r} is not allowed")
        if isinstance(node, ast.Name) and (node.id.startswith("_") or node.id in BLOCKED_NAMES):
            raise SyntaxError(f"name {node.id!r} is not allowed")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
            raise SyntaxError(f"name {node.name!r} is not allowed")
        if isinstance(node, ast.arg) and node.arg.startswith("_"):
            raise SyntaxError(f"name {node.arg!r} is not allowed")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            raise SyntaxError("global/nonlocal is not allowed")
        if isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith, ast.Yield, ast.YieldFrom)):
            raise SyntaxError("generators and async code are not allowed")
        if isinstance(node, ast.alias) and node.name.split(".")[0] not in _MODULES:
            raise ImportError(f"import of {node.name!r} is not allowed (allowed: {', '.join(sorted(_MODULES))})")
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "") not in _MODULES):
            raise ImportError(f"import from {node.module!r} is not allowed")


def _namespace(mod, names) -> object:
    class Module:
        pass

    ns = Module()
    for n in names:
        setattr(ns, n, getattr(mod, n))
    return ns


def _modules() -> dict:
    import collections
    import heapq
    import itertools
    import math
    import re
    import unicodedata

    return {
        "re": _namespace(
            re,
            [
                "compile",
                "search",
                "match",
                "fullmatch",
                "findall",
                "finditer",
                "sub",
                "subn",
                "split",
                "escape",
                "IGNORECASE",
                "I",
                "MULTILINE",
                "M",
                "DOTALL",
                "S",
                "ASCII",
                "A",
            ],
        ),
        "math": _namespace(math, [n for n in dir(math) if not n.startswith("_")]),
        "collections": _namespace(collections, ["Counter", "defaultdict", "OrderedDict", "deque"]),
        "itertools": _namespace(itertools, [n for n in dir(itertools) if not n.startswith("_")]),
        "heapq": _namespace(heapq, ["heappush", "heappop", "heapify", "nlargest", "nsmallest", "merge"]),
        "json": _namespace(json, ["loads", "dumps"]),
        "unicodedata": _namespace(unicodedata, ["normalize", "category", "east_asian_width"]),
    }


_MODULES: dict = {}


def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
    if level or name not in _MODULES:
        raise ImportError(f"import of {name!r} is not allowed")
    return _MODULES[name]


SAFE_BUILTINS = [
    "abs",
    "all",
    "any",
    "bool",
    "chr",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "frozenset",
    "hash",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "ord",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "zip",
    "Exception",
    "ArithmeticError",
    "AssertionError",
    "IndexError",
    "KeyError",
    "LookupError",
    "NameError",
    "RuntimeError",
    "StopIteration",
    "TypeError",
    "ValueError",
    "ZeroDivisionError",
    "True",
    "False",
    "None",
]


class _Final(Exception):
    pass


class Repl:
    def __init__(self, query: str, documents: list[dict], limits: dict):
        import builtins

        self.limits = limits
        self.out: list[str] = []
        self.out_len = 0
        self.final: list | None = None
        b = {n: getattr(builtins, n) for n in SAFE_BUILTINS}
        b["__import__"] = _import
        b["print"] = self._print
        self.env: dict = {
            "__builtins__": b,
            "__name__": "repl",
            "query": query,
            "documents": documents,
            "grep": self.grep,
            "bm25": lambda q, k=10: self._call("bm25", {"query": q, "k": k}),
            "extract": lambda q, k=5: self._call("extract", {"query": q, "k": k}),
            "llm_query": lambda prompt: self._call("llm_query", {"prompt": prompt}),
            "FINAL": self._final,
        }

    def _print(self, *args, sep=" ", end="\n"):
        s = sep.join(str(a) for a in args) + end
        room = int(self.limits["output_chars"]) - self.out_len
        if room > 0:
            self.out.append(s[:room])
        self.out_len += len(s)

    def grep(self, pattern, flags=0, context=80, limit=50):
        """[{doc_id, start, end, text}] of regex matches (character offsets), `context` chars around."""
        import re

        rx = re.compile(pattern, flags)
        hits = []
        for d in self.env["documents"]:
            t = d["text"]
            for m in rx.finditer(t):
                a, b = max(0, m.start() - context), min(len(t), m.end() + context)
                hits.append({"doc_id": d["id"], "start": m.start(), "end": m.end(), "text": t[a:b]})
                if len(hits) >= limit:
                    return hits
        return hits

    def _call(self, fn: str, args: dict):
        _send({"op": "call", "fn": fn, "args": args})
        msg = _recv()
        if msg.get("error"):
            raise RuntimeError(msg["error"])
        return msg.get("value")

    def _final(self, passages):
        self.final = passages
        raise _Final

    def run(self, code: str) -> dict:
        self.out, self.out_len, err = [], 0, None
        try:
            tree = ast.parse(code, "<repl>", "exec")
            check_code(tree)
            exec(compile(tree, "<repl>", "exec"), self.env)  # noqa: S102  # nosec B102
        except _Final:
            pass
        except MemoryError:
            err = "MemoryError: the sandbox's memory limit was reached"
        except RecursionError:
            err = "RecursionError"
        except BaseException as e:  # noqa: BLE001 - the model's error (even SystemExit) goes back to the model
            err = f"{type(e).__name__}: {e}"[:1000]
        out = "".join(self.out)
        if self.out_len > len(out):
            out += f"\n[output truncated: {self.out_len} characters]"
        final = self.final
        try:
            json.dumps(final)
        except (TypeError, ValueError):
            final, err = None, "FINAL's argument must be JSON data"
        self.final = None
        return {"op": "done", "output": out, "error": err, "final": final}


def main() -> None:
    init = _recv()
    _MODULES.update(_modules())  # imported before the file system goes away
    for name in init.get("preload_for_tests") or ():  # tests of the OS layer alone (socket, ...)
        __import__(name)
    # tests of the fallback (a kernel that refuses PID namespaces) ask for none
    protections = lock_down(init["limits"], init["empty_root"], not init.get("no_pid_namespace_for_tests"))
    sys.setrecursionlimit(400)
    repl = Repl(init["query"], init["documents"], init["limits"])
    del init
    _send({"op": "ready", "protections": protections})
    while True:
        msg = _recv()
        if msg.get("op") == "exec":
            _send(repl.run(msg["code"]))
        elif msg.get("op") == "exec_unrestricted" and msg.get("allow"):  # tests of the OS layer alone
            try:
                exec(msg["code"], {"modules": sys.modules})  # noqa: S102  # nosec B102
                _send({"op": "done", "output": "", "error": None, "final": None})
            except BaseException as e:  # noqa: BLE001 - reported to the test
                _send({"op": "done", "output": "", "error": f"{type(e).__name__}: {e}"[:1000], "final": None})
        else:
            return


if __name__ == "__main__":
    main()

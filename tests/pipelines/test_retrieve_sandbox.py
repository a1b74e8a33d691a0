"""The retrieve sandbox's escape corpus: every attempt blocked, the host process unharmed.

Two layers are attacked separately: the model's code as it really runs (restricted Python inside
the locked-down process), and raw Python in the same locked-down process (the operating-system
layer alone: uid, namespaces, empty read-only root, no capabilities, rlimits), so that each layer
is shown to hold on its own.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from pipelines.retrieve.sandbox import Limits, Sandbox, SandboxError, descendants

DOCS = [{"id": "a", "text": "The harbour froze in 1947. 港は凍った。"}, {"id": "b", "text": "Nothing here."}]
LIMITS = Limits(memory_mb=256, cpu_s=5, max_procs=6, output_chars=2000, message_bytes=1 << 20)


@pytest.fixture
def listener():
    """A TCP server on the host's loopback that records every connection (a network escape)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    got: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                got.append(1)
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], got
    stop.set()
    t.join(2)
    srv.close()


@pytest.fixture
def secret_env(monkeypatch):
    monkeypatch.setenv("YANA_TEST_SECRET", "s3cr3t-" + uuid.uuid4().hex)
    return os.environ["YANA_TEST_SECRET"]


def _rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def test_protections_in_effect_are_reported():
    with Sandbox("q", DOCS, LIMITS) as sb:
        p = sb.protections
    print("sandbox protections on this machine:", p)
    assert p["unprivileged_uid"] and p["uid"] != 0
    assert p["capabilities_dropped"] and p["no_new_privs"]
    assert {k for k, v in p["rlimits"].items() if isinstance(v, int)} == {
        "RLIMIT_AS",
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_CORE",
    }
    userns_allowed = int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    if userns_allowed:  # this kernel allows them: every namespace and the empty root must be in effect
        assert set(p["namespaces"]) == {"user", "pid", "net", "mount", "ipc", "uts"}
        assert p["filesystem"].startswith("none")
    else:  # refused: said so, not pretended
        assert "user" not in p["namespaces"] and p["filesystem"].startswith("visible")


# (name, code) the model could write: each must end in an error, never in an effect.
RESTRICTED_CORPUS = [
    ("file read", "print(open('/etc/passwd').read())"),
    ("file read via io", "import io\nprint(io.open('/etc/passwd').read())"),
    ("file read via json's codecs", "import json\nprint(json.codecs.open('/etc/passwd').read())"),
    ("file write", "open(PATH, 'w').write('x')"),
    ("network", "import socket\ns = socket.socket(); s.connect(('127.0.0.1', PORT))"),
    ("network via urllib", "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:PORT/')"),
    ("subprocess", "import subprocess\nsubprocess.run(['touch', PATH])"),
    ("os.system", "import os\nos.system('touch PATH')"),
    ("ctypes", "import ctypes\nctypes.CDLL(None).system(b'touch PATH')"),
    ("__import__", "__import__('os').system('touch PATH')"),
    ("builtins dict", "__builtins__['open'](PATH, 'w')"),
    ("importlib", "import importlib\nimportlib.import_module('os')"),
    ("relative import", "from . import sandbox_runner"),
    ("from-import of a hidden name", "from re import _compile\nprint(_compile)"),
    ("module internals", "import re\nprint(re.sys.modules['os'].system('touch PATH'))"),
    ("__subclasses__", "print(().__class__.__bases__[0].__subclasses__())"),
    ("subclasses by getattr", "print(getattr(getattr((), '__cl' + 'ass__'), '__ba' + 'ses__'))"),
    ("type() to object", "print(type(()).mro())"),
    (
        "frame walk via traceback",
        "try:\n    1/0\nexcept Exception as e:\n    print(e.__traceback__.tb_frame.f_back.f_globals)",
    ),
    ("frame walk via generator", "g = (x for x in [1])\nprint(g.gi_frame.f_back.f_globals)"),
    ("generator function", "def f():\n    yield 1\nprint(list(f()))"),
    ("format string attribute walk", "print('{0.__class__.__bases__}'.format(()))"),
    ("eval/exec/compile", "exec('import os')"),
    ("globals()", "print(globals())"),
    ("helper internals", "print(grep.__self__.env)"),
    ("helper closure", "print(bm25.__closure__)"),
    ("global statement", "global FINAL\nFINAL = 1"),
]


@pytest.mark.parametrize("name,code", RESTRICTED_CORPUS, ids=[c[0] for c in RESTRICTED_CORPUS])
def test_restricted_corpus_is_blocked(name, code, tmp_path, listener):
    port, connections = listener
    target = tmp_path / "escaped"
    code = code.replace("PATH", str(target)).replace("PORT", str(port))
    with Sandbox("q", DOCS, LIMITS) as sb:
        out = sb.execute(code, 5)
        assert out["error"], f"{name}: no error, output {out['output'][:200]!r}"
        assert not target.exists() and not connections
        # the REPL is still usable after the attempt
        assert sb.execute("print(len(documents))", 5)["output"] == "2\n"


def test_memory_bomb_is_contained():
    before = _rss_kb()
    with Sandbox("q", DOCS, LIMITS) as sb:
        out = sb.execute("x = 'a' * (4 * 1024 ** 3)", 10)
        assert out["error"].startswith("MemoryError")
        out = sb.execute("keep = []\nwhile True:\n    keep.append('x' * 10 ** 6)", 10)
        assert out["error"].startswith("MemoryError")
        assert sb.execute("keep = None\nprint('alive')", 5)["output"] == "alive\n"
    assert _rss_kb() - before < 50_000  # the host did not pay for it


def test_infinite_loop_is_killed_on_the_wall_clock():
    with Sandbox("q", DOCS, LIMITS) as sb:
        t0 = time.monotonic()
        with pytest.raises(SandboxError) as e:
            sb.execute("while True:\n    pass", 1.0)
        assert e.value.reason == "timeout"
        assert time.monotonic() - t0 < 3
        assert sb.proc.poll() is not None


def test_huge_output_is_bounded():
    with Sandbox("q", DOCS, LIMITS) as sb:
        out = sb.execute("print('x' * 10 ** 7)", 10)
        assert len(out["output"]) < LIMITS.output_chars + 100 and "truncated" in out["output"]
        with pytest.raises(SandboxError) as e:  # a result too big to read back
            sb.execute("FINAL(['x' * 10 ** 7])", 10)
        assert e.value.reason == "output_limit"
        assert sb.proc.poll() is not None


# --- the operating-system layer alone: raw Python inside the locked-down process -----------------


def _raw(sb: Sandbox, code: str, timeout: float = 5) -> dict:
    return sb.execute(code, timeout, unrestricted_for_tests=True)


def test_os_layer_blocks_files_network_processes_and_privileges(tmp_path, listener, secret_env):
    port, connections = listener
    (tmp_path / "host-file").write_text("host secret")
    with Sandbox("q", DOCS, LIMITS, preload_for_tests=("socket", "subprocess")) as sb:
        assert "FileNotFoundError" in _raw(sb, "open('/etc/passwd').read()")["error"]
        assert "FileNotFoundError" in _raw(sb, f"open({str(tmp_path / 'host-file')!r}).read()")["error"]
        assert _raw(sb, "open('/escaped', 'w').write('x')")["error"]  # read-only empty root
        assert _raw(sb, "import os\nos.mkdir('/d')")["error"]
        out = _raw(sb, f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))")
        assert "Errno" in (out["error"] or ""), out  # own network namespace: not even loopback is up
        assert _raw(sb, "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'true'])")["error"]
        assert _raw(sb, "import os\nos.setuid(0)")["error"]
        assert _raw(sb, "import ctypes\nassert ctypes.CDLL(None).setresuid(0, 0, 0) == 0")["error"]
        assert _raw(sb, "import os\nos.chroot('/')")["error"]  # no capabilities left
        # an empty environment (Python itself adds LC_CTYPE for its C-locale coercion): no secrets
        assert _raw(sb, "import os\nassert set(os.environ) <= {'LC_CTYPE'}, dict(os.environ)")["error"] is None
        assert _raw(sb, f"import os\nassert not any({secret_env!r} in v for v in os.environ.values())")["error"] is None
        assert _raw(sb, "assert bytearray(1024 ** 3)")["error"].startswith("MemoryError")
    assert not connections and not (Path("/escaped")).exists()


def test_fork_bomb_stays_under_the_process_cap():
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    seen = [0]
    with Sandbox("q", DOCS, LIMITS) as sb:
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                seen[0] = max(seen[0], 1 + len(descendants(sb.proc.pid)))
                time.sleep(0.02)

        w = threading.Thread(target=watch, daemon=True)
        w.start()
        with pytest.raises(SandboxError):
            _raw(sb, bomb, timeout=3)
        stop.set()
        w.join(2)
        pid = sb.proc.pid
    print(f"fork bomb: at most {seen[0]} processes (cap {LIMITS.max_procs})")
    assert 1 < seen[0] <= LIMITS.max_procs  # it did fork, and no further than the cap
    time.sleep(0.2)
    assert descendants(pid) == []  # the wall-clock kill took every one


def test_host_unharmed_after_the_corpus():
    """After every attack above (this test runs after them in file order) the host still spawns
    and uses sandboxes, and no sandbox process is left behind."""
    with Sandbox("q", DOCS, LIMITS) as sb:
        assert sb.execute("FINAL([{'doc_id': 'a', 'text': 'froze'}])", 5)["final"] == [{"doc_id": "a", "text": "froze"}]
    assert descendants(os.getpid()) == [] or all(
        not Path(f"/proc/{p}/cmdline").read_bytes().endswith(b"sandbox_runner.py\x00") for p in descendants(os.getpid())
    )


# --- attribute reads without a dotted name (issue 26, defect 6) --------------------------------

_TRY = "try:\n    1/0\nexcept Exception as e:\n    err = e\n"
ATTRIBUTE_BYPASS_CORPUS = [
    ("match keyword class pattern", _TRY + "match err:\n    case Exception(__traceback__=tb):\n        print(tb)"),
    ("match __class__", _TRY + "match err:\n    case object(__class__=c):\n        print(c)"),
    ("match __dict__", _TRY + "match err:\n    case Exception(__dict__=d):\n        print(d)"),
    ("match __init_subclass__", "match 1:\n    case int(__init_subclass__=s):\n        print(s)"),
    (
        "match __setattr__",
        _TRY + "match err:\n    case Exception(__setattr__=s):\n        s('x', 1)\n        print('set')",
    ),
    (
        "match tb_frame",
        _TRY + "match err.with_traceback(None):\n    case Exception(args=a):\n        pass\n"
        "match 1:\n    case int(real=r, tb_frame=f):\n        print(f)",
    ),
    ("match gi_frame", "g = (x for x in [1])\nmatch g:\n    case object(gi_frame=f):\n        print(f)"),
    (
        "positional class pattern via __match_args__",
        "class P:\n    pass\nP.match_args = ('x',)\nmatch P():\n    case P(a):\n        print(a)",
    ),
    ("match str.format", "match '{0.__class__.__bases__}':\n    case str(format=f):\n        print(f(()))"),
    ("match mro", "match int:\n    case object(mro=m):\n        print(m())"),
    ("match binds __builtins__", "match {}:\n    case __builtins__:\n        pass\nprint(len)"),
    ("match star binds a dunder", "match [1, 2]:\n    case [*__x]:\n        print(__x)"),
    ("mapping rest binds a dunder", "match {'a': 1}:\n    case {**__x}:\n        print('bound')"),
    ("except as a dunder name", "try:\n    1/0\nexcept Exception as __builtins__:\n    pass"),
    ("import as a dunder name", "import math as __builtins__"),
    ("keyword argument with a dunder name", "print(dict(__class__=1))"),
    ("mapping pattern with a dunder key", "match {'__x': 1}:\n    case {'__builtins__': b}:\n        print(b)"),
    ("format attribute walk in a variable", "f = '{0.__class__}'\nprint(str.format(f, ()))"),
    ("format via str.format unbound", "print(str.format('{0.__class__.__bases__}', ()))"),
    ("f-string conversion to a dunder", "print(f'{().__class__!r}')"),
    ("format_map via a name", "fm = str.format_map\nprint(fm('{x.__class__}', {'x': 1}))"),
    ("vars()", "print(vars(query))"),
    ("dir()", "print(dir(query))"),
    ("getattr via builtins dict lookup", "b = print.__self__\nprint(b)"),
    ("attrgetter", "import operator\nprint(operator.attrgetter('__class__')(1))"),
    ("string.Formatter", "import string\nprint(string.Formatter().format('{0.__class__}', 1))"),
    ("decorator reaching a name", "@getattr\ndef f():\n    pass"),
    ("star-unpacking of a dunder", "print(*'{0.__class__}'.split())\nprint(str.format(*['{0.__class__}', 1]))"),
    ("type() three-arg", "T = type('T', (), {})\nprint(T)"),
    ("object.__getattribute__ by name", "print(object.__getattribute__(1, '__class__'))"),
]


@pytest.mark.parametrize("name,code", ATTRIBUTE_BYPASS_CORPUS, ids=[c[0] for c in ATTRIBUTE_BYPASS_CORPUS])
def test_attribute_reads_without_a_dotted_name_are_blocked(name, code):
    with Sandbox("q", DOCS, LIMITS) as sb:
        out = sb.execute(code, 5)
        assert out["error"], f"{name}: no error, output {out['output'][:200]!r}"
        assert "<traceback" not in out["output"] and "<class" not in out["output"], out
        assert sb.execute("print(len(documents))", 5)["output"] == "2\n"


def test_ordinary_matching_and_formatting_still_work():
    code = (
        "match {'k': [1, 2]}:\n    case {'k': [a, b]}:\n        print(a + b)\n"
        "match (1, 'x'):\n    case (int(n), str() as s):\n        print(n, s)\n"
        "print(f'{3:>4}|{query!r}')\n"
        "print('%s-%d' % ('a', 2))"
    )
    with Sandbox("q", DOCS, LIMITS) as sb:
        out = sb.execute(code, 5)
    assert out["error"] is None, out
    assert out["output"] == "3\n1 x\n   3|'q'\na-2\n"


# --- every process of the sandbox dies with it (issue 26, defect 7) ----------------------------


def _pids_named(comm: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == comm:
                    out.append(int(entry))
            except OSError:
                pass
    return out


@pytest.mark.parametrize("pid_namespace", [True, False], ids=["pid-namespace", "subreaper-fallback"])
@pytest.mark.parametrize("how", ["setsid-fork", "double-fork", "killed-while-running"])
def test_detached_grandchildren_die_with_the_sandbox(how, pid_namespace):
    """A child that leaves the session and forks (its grandchild reparents away from the sandbox,
    to pid 1) is still killed by close(): nothing of the sandbox outlives it."""
    comm = "yg" + uuid.uuid4().hex[:12]  # the grandchild names itself (PR_SET_NAME) so the host finds it
    spawn = (
        "import os, time, ctypes\n"
        "if os.fork() == 0:\n"
        "    SETSID\n"
        "    if os.fork() == 0:\n"
        f"        ctypes.CDLL(None).prctl(15, {comm.encode()!r}, 0, 0, 0)\n"
        "        while True:\n"
        "            time.sleep(0.05)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
    ).replace("SETSID", "pass" if how == "double-fork" else "os.setsid()")
    with Sandbox("q", DOCS, LIMITS, no_pid_namespace_for_tests=not pid_namespace) as sb:
        assert ("pid" in sb.protections["namespaces"]) == pid_namespace
        out = _raw(sb, spawn)
        assert out["error"] is None, out
        deadline = time.monotonic() + 5
        while not _pids_named(comm) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _pids_named(comm), "the grandchild was not started"
        if how == "killed-while-running":
            with pytest.raises(SandboxError):
                _raw(sb, "while True:\n    pass", timeout=0.5)
    deadline = time.monotonic() + 2
    while _pids_named(comm) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _pids_named(comm)
    for pid in left:  # do not leave it running whatever the outcome
        os.kill(pid, 9)
    assert left == [], "a process of the sandbox outlived close()"

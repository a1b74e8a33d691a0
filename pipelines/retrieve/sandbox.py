"""The sandbox the retrieve LLM loop runs the model's Python in (host side).

One subprocess per loop (REPL state persists between the model's turns), `python -I -S` running
pipelines/retrieve/sandbox_runner.py (standard library only) with an empty environment, its cwd
an empty directory, its own session (process group), stdin/stdout pipes and nothing else. Before
it reads any model code the runner locks itself down, in layers:

  * uid: when started as root (as CI runs) it drops to nobody (65534), groups cleared, so that
    RLIMIT_NPROC applies (the kernel exempts root);
  * namespaces: its own user namespace, then a PID namespace (every process the code starts,
    also one that calls setsid() and is orphaned, dies with the namespace's init), network (no interface but a down loopback: no
    network), mount, IPC and UTS namespaces;
  * file system: chroot into an empty directory nobody may write (no file system view at all);
  * capabilities: every capability dropped (also those the user namespace grants), no_new_privs;
  * rlimits: address space, CPU seconds, file size, process count, open files, no core dumps;
  * Python: restricted builtins (no open/eval/exec/getattr/type/object...), imports only from an
    allow-list of pure modules handed over as namespaces of their functions, an AST check that
    rejects names/attributes starting with "_" and frame/generator internals; `print` bounded.

The host adds a wall-clock kill of the whole process tree (PID namespace; else frozen, then killed), a
cap on the bytes it reads back, and serves the helpers that need more than the standard library
(bm25, the extractor, sub-queries to the model) itself. What the kernel refused is reported in
`protections` (and logged), never pretended.
"""

from __future__ import annotations

import json
import logging
import os
import select
import shutil
import signal
import subprocess  # nosec B404
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("yana.retrieve.sandbox")

RUNNER = str(Path(__file__).resolve().parent / "sandbox_runner.py")


@dataclass
class Limits:
    memory_mb: int = 512
    cpu_s: int = 10
    file_bytes: int = 1 << 20
    max_procs: int = 8
    max_files: int = 32
    output_chars: int = 4000  # what `print` keeps per exec
    message_bytes: int = 2 << 20  # the most one message back may weigh


class SandboxError(Exception):
    """The sandbox failed: `reason` is timeout | died | output_limit | protocol."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (by parent links in /proc), also those in another session."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


_FULL_NAMESPACES = {"user", "pid", "net", "mount", "ipc", "uts"}


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


_degraded_logged = False


def _log_degraded(p: dict) -> None:
    """Once per process: which protections the kernel refused here (the rest still hold)."""
    global _degraded_logged
    missing = sorted(_FULL_NAMESPACES - set(p.get("namespaces") or []))
    refused = [k for k, v in (p.get("rlimits") or {}).items() if not isinstance(v, int)]
    weak = missing or refused or not p.get("unprivileged_uid") or not str(p.get("filesystem", "")).startswith("none")
    if weak and not _degraded_logged:
        _degraded_logged = True
        log.warning(
            "retrieve sandbox degraded on this machine: namespaces missing %s, rlimits refused %s, uid %s, "
            "file system %s",
            missing,
            refused,
            p.get("uid"),
            p.get("filesystem"),
        )


class Sandbox:
    def __init__(
        self,
        query: str,
        documents: list[dict],
        limits: Limits | None = None,
        handlers: dict[str, Callable[[dict], object]] | None = None,
        start_timeout_s: float = 10.0,
        preload_for_tests: tuple[str, ...] = (),
        no_pid_namespace_for_tests: bool = False,
    ):
        self.limits = limits or Limits()
        self.handlers = handlers or {}
        self.root = tempfile.mkdtemp(prefix="yana-sandbox-")
        os.chmod(self.root, 0o555)  # nosec B103
        self._buf = b""
        self.proc = subprocess.Popen(  # nosec B603
            [sys.executable, "-I", "-S", RUNNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={},
            cwd=self.root,
            start_new_session=True,
            close_fds=True,
        )
        self.protections: dict = {}
        try:
            init = {
                "op": "init",
                "query": query,
                "documents": [{"id": d["id"], "text": d["text"]} for d in documents],
                "limits": asdict(self.limits),
                "empty_root": self.root,
                "preload_for_tests": list(preload_for_tests),
                "no_pid_namespace_for_tests": no_pid_namespace_for_tests,
            }
            self._send(init)
            ready = self._read(time.monotonic() + start_timeout_s)
            if ready.get("op") != "ready":
                raise SandboxError("protocol", f"expected ready, got {ready.get('op')!r}")
            self.protections = ready["protections"]
            _log_degraded(self.protections)
        except BaseException:
            self.close()
            raise

    # --- protocol ---

    def _send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(msg, ensure_ascii=False).encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise SandboxError("died", str(e)) from e

    def _read(self, deadline: float) -> dict:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise SandboxError("timeout", "the wall-clock limit was reached")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.kill()
                raise SandboxError("died", f"exit status {self.proc.poll()}")
            self._buf += chunk
            if len(self._buf) > self.limits.message_bytes:
                self.kill()
                raise SandboxError("output_limit", f"over {self.limits.message_bytes} bytes")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as e:
            self.kill()
            raise SandboxError("protocol", "unreadable message") from e

    def execute(self, code: str, timeout_s: float, *, unrestricted_for_tests: bool = False) -> dict:
        """Run `code` in the REPL; serve its helper calls until it is done. Returns {output, error,
        final}; raises SandboxError (the process is then gone) on timeout, death or too much output."""
        deadline = time.monotonic() + timeout_s
        if unrestricted_for_tests:
            self._send({"op": "exec_unrestricted", "code": code, "allow": True})
        else:
            self._send({"op": "exec", "code": code})
        while True:
            msg = self._read(deadline)
            if msg.get("op") == "done":
                return msg
            if msg.get("op") != "call":
                self.kill()
                raise SandboxError("protocol", f"unexpected message {msg.get('op')!r}")
            fn = self.handlers.get(str(msg.get("fn")))
            if fn is None:
                self._send({"op": "reply", "error": f"no helper {msg.get('fn')!r}"})
                continue
            try:
                value = fn(msg.get("args") or {})
                self._send({"op": "reply", "value": value})
            except SandboxError:
                raise
            except Exception as e:  # noqa: BLE001 - a helper's failure goes back to the model's code
                self._send({"op": "reply", "error": f"{type(e).__name__}: {e}"[:500]})

    # --- teardown ---

    def kill(self) -> None:
        """Kill every process of the sandbox. The runner's own PID namespace makes this whole (its
        init dies, the kernel kills the rest); without one the runner is a subreaper, and the tree
        below it is first frozen (SIGSTOP, until no new process appears: a stopped process neither
        forks nor is reaped away) and then killed, so nothing escapes between look and kill."""
        root = self.proc.pid
        if self.proc.poll() is None or descendants(root):
            seen: set[int] = set()
            for _ in range(20):
                new = ({root} | set(descendants(root))) - seen
                if not new:
                    break
                for pid in new:
                    _signal(pid, signal.SIGSTOP)
                seen |= new
            try:
                os.killpg(root, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for pid in seen | set(descendants(root)):
                _signal(pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("sandbox %s did not die", self.proc.pid)

    def close(self) -> None:
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

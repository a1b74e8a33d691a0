"""The worker main loads the embedding model, the near-duplicate check's compiled kernels and the
label reader (PP-OCR) before it forks its pool and before it announces itself: when the worker counts as up, every
pool process already holds them (shared copy-on-write, one load, not one per process), and no
job waits for a model (a first job used to wait seconds, long enough to miss its heartbeat)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from tests.stack import start_stack

pytestmark = pytest.mark.stack  # starts its own processes: the stack tier


def _loaded_lines(svc, msg: str = "embedding model loaded") -> list[dict]:
    out = []
    for line in svc.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("msg") == msg:
                out.append(rec)
    return out


def _pool(svc) -> list[psutil.Process]:
    return psutil.Process(svc.proc.pid).children()


def _maps(p: psutil.Process) -> str:
    return Path(f"/proc/{p.pid}/maps").read_text()


def _resident_kb(pid: int, library: str) -> int:
    """Resident kB of a shared library's mappings in a process."""
    return sum(m.rss for m in psutil.Process(pid).memory_maps(grouped=False) if library in m.path) // 1024


def test_the_worker_is_up_only_with_the_model_loaded_once_before_the_pool_forks(tmp_path):
    stack = start_stack(tmp_path / "data", chroma=False, api=False, worker=False)
    try:
        svc = stack.start_worker(concurrency=2)  # returns once the worker announced itself
        # already loaded, once, in the worker main (before its announcement, so no waiting here)
        lines = _loaded_lines(svc)
        assert len(lines) == 1 and lines[0].get("model"), lines
        assert len(_loaded_lines(svc, "near-duplicate kernels ready")) == 1
        assert len(_loaded_lines(svc, "label reader ready")) == 1  # OCR is on by default
        pool = _pool(svc)
        assert len(pool) == 2
        # LLVM linked the cached kernels and is not used again: its code pages were given back
        # before the fork (~68 MB resident in the worker main before).
        llvm_kb = _resident_kb(svc.proc.pid, "libllvmlite")
        assert llvm_kb < 8 * 1024, f"libllvmlite still resident in the worker main: {llvm_kb} kB"
        for p in pool:  # inherited from the main: the pool processes did not load anything
            assert "onnxruntime" in _maps(p) and "llvmlite" in _maps(p) and "cv2" in _maps(p)
            assert "libtorch" not in _maps(p)
        started = time.monotonic()
        off = stack.start_worker(name="worker-nopreload", WORKER_PRELOAD_MODEL="false")
        time.sleep(max(0.0, 5 - (time.monotonic() - started)))
        assert _loaded_lines(off) == [] and _loaded_lines(off, "near-duplicate kernels ready") == []
        assert _loaded_lines(off, "label reader ready") == []
        assert not any("onnxruntime" in _maps(p) for p in _pool(off))
    finally:
        stack.stop()

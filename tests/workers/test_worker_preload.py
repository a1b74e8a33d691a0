"""Worker children load the embedding model and the near-duplicate check's compiled kernels as they
start, before any job arrives (a first job used to wait seconds for the model, long enough to miss
its heartbeat on a busy machine)."""

from __future__ import annotations

import json
import time

from tests.stack import start_stack, wait_for


def _loaded_lines(svc, msg: str = "embedding model loaded") -> list[dict]:
    out = []
    for line in svc.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if rec.get("msg") == msg:
                out.append(rec)
    return out


def test_each_worker_child_preloads_the_model_with_no_job_sent(tmp_path):
    stack = start_stack(tmp_path / "data", chroma=False, api=False, worker=False)
    try:
        svc = stack.start_worker(concurrency=2)
        lines = wait_for(lambda: (got := _loaded_lines(svc)) and len(got) >= 2 and got, timeout_s=90, what="two loads")
        assert all(rec.get("model") for rec in lines)
        kernels = "near-duplicate kernels ready"
        wait_for(lambda: len(_loaded_lines(svc, kernels)) >= 2, timeout_s=90, what="two kernel warm-ups")
        started = time.monotonic()
        off = stack.start_worker(name="worker-nopreload", WORKER_PRELOAD_MODEL="false")
        # the children above loaded ~5 s after their worker was ready; give this one 15 s
        time.sleep(max(0.0, 15 - (time.monotonic() - started)))
        assert _loaded_lines(off) == [] and _loaded_lines(off, "near-duplicate kernels ready") == []
    finally:
        stack.stop()

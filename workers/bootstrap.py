"""Per-process bootstrap: JSON logs, one compute thread per worker child, the model preloaded.

Imported with the Celery app, so the API (which only sends tasks) pays for nothing here: torch
is touched only inside worker processes."""

from __future__ import annotations

import logging
import os
import threading
import time

from celery import signals

from yana import logging as ylog

_THREAD_VARS = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def pin_threads() -> None:
    """Two cores shared by everything: each worker child computes on one thread."""
    for var, value in _THREAD_VARS.items():
        os.environ.setdefault(var, value)
    try:
        import torch  # only in worker processes; the API never needs it here

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
    except (ImportError, RuntimeError):  # torch absent, or interop threads already set
        pass


for _var, _value in _THREAD_VARS.items():  # before any child forks or any model loads
    os.environ.setdefault(_var, _value)


@signals.setup_logging.connect
def _setup_logging(**_):
    ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))


def lower_priority() -> None:
    """Raise the worker main's niceness to WORKER_NICE before its pool forks (children inherit it)."""
    from yana.settings import get_settings

    want = get_settings().worker_nice
    try:
        now = os.getpriority(os.PRIO_PROCESS, 0)
        if want > now:
            os.setpriority(os.PRIO_PROCESS, 0, want)
    except OSError:  # not permitted here: run at the inherited priority
        logging.getLogger("yana.worker").warning("cannot set worker niceness %s", want, exc_info=True)


@signals.worker_init.connect
def _worker_init(**_):
    pin_threads()
    lower_priority()


def _preload_model() -> None:
    from pipelines.embedding.backends import get_embedder
    from pipelines.ingest.pipeline import warm_up

    try:
        get_embedder()
    except Exception:  # noqa: BLE001 - the first job loads it again and fails with a clear error
        logging.getLogger("yana.worker").warning("embedding model preload failed", exc_info=True)
    started = time.monotonic()
    try:
        warm_up()
    except Exception:  # noqa: BLE001 - the first near-duplicate check compiles them again
        logging.getLogger("yana.worker").warning("near-duplicate kernels warm-up failed", exc_info=True)
    else:
        logging.getLogger("yana.worker").info(
            "near-duplicate kernels ready", extra={"seconds": round(time.monotonic() - started, 2)}
        )


@signals.worker_process_init.connect
def _child_init(**_):
    pin_threads()
    ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))
    from yana.settings import get_settings

    if get_settings().worker_preload_model:
        # In a thread: this signal must return within worker_proc_alive_timeout (4 s) or the
        # pool kills the child, and a model load can take longer on a busy machine.
        threading.Thread(target=_preload_model, name="model-preload", daemon=True).start()

"""Per-process bootstrap: JSON logs, one thread per child, and the maintenance loop."""

from __future__ import annotations

import os

from celery import signals

from yana import logging as ylog


def pin_threads() -> None:
    """Two cores shared by everything: each worker child computes on one thread."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
        os.environ.setdefault(var, "false" if var == "TOKENIZERS_PARALLELISM" else "1")
    try:
        import torch

        torch.set_num_threads(1)
        torch.set_num_interop_threads(1)
    except Exception:  # torch absent or interop threads already set
        pass


pin_threads()  # before any child forks or any model loads


@signals.setup_logging.connect
def _setup_logging(**_):
    ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))


@signals.worker_process_init.connect
def _child_init(**_):
    pin_threads()
    ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))


_loop = None


@signals.worker_ready.connect
def _start_maintenance(**_):
    global _loop
    from workers.maintenance import MaintenanceLoop
    from yana.settings import get_settings

    _loop = MaintenanceLoop(get_settings().reconcile_interval_s)
    _loop.start()


@signals.worker_shutdown.connect
def _stop_maintenance(**_):
    if _loop is not None:
        _loop.stop.set()

"""Per-process bootstrap: JSON logs, one compute thread per worker child, the models preloaded,
a task's freed memory given back to the system after it.

Imported with the Celery app, so the API (which only sends tasks) pays for nothing here.

The embedding model, the compiled near-duplicate kernels and the label reader are loaded in the
worker *main* process, before it forks its pool (``worker_init``): every pool process shares those pages
copy-on-write instead of holding (and, on a fresh install, compiling) its own copy, and a pool
process replaced after WORKER_MAX_TASKS_PER_CHILD starts ready at once. The worker announces
itself (its liveness key, tasks/maintenance.py) only after ``worker_ready``, which Celery sends
after this, so `yana up` and the tests wait for a worker that can take a job. torch is never
imported here: the default int8 encoder runs on onnxruntime (torch only builds it, once, in
`yana prepare`)."""

from __future__ import annotations

import gc
import logging
import os
import subprocess  # nosec B404
import sys
import time

from celery import signals

from yana import logging as ylog
from yana import memory

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
    import sys

    torch = sys.modules.get("torch")  # never imported for this: only a non-default model loads it
    if torch is not None:
        try:
            torch.set_num_threads(1)
            torch.set_num_interop_threads(1)
        except RuntimeError:  # interop threads already set
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
    from yana.settings import get_settings

    if get_settings().worker_preload_model:
        ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))  # Celery sets up its logging later
        _preload_model()  # before the pool forks: one copy, shared by every pool process
        # What the loading left: its garbage collected and its freed heap given back, and every
        # object alive now out of the collector's sight, so a pool process's collections do not
        # write to (and so copy) the pages it shares with this process.
        gc.collect()
        gc.freeze()
        _give_memory_back()
        memory.drop_library_pages(LOAD_ONLY_LIBRARIES)


def _prepare_first() -> None:
    """The one-time builds when nothing ran them yet (`yana worker` on a fresh machine): in a
    short-lived child process, so that torch (which only builds the encoder) never enters this
    long-lived one, nor through it every pool process."""
    from pipelines.prepare import steps as prepare

    if not prepare.pending():
        return
    log = logging.getLogger("yana.worker")
    log.info("running the one-time builds (yana prepare) before taking jobs")
    code = "from pipelines.prepare.steps import main; main()"
    done = subprocess.run([sys.executable, "-c", code], timeout=1800, check=False)
    if done.returncode:  # the model load below builds it in-process instead
        log.warning("the one-time builds failed (exit code %s)", done.returncode)


def _preload_model() -> None:
    from pipelines.embedding.backends import get_embedder
    from pipelines.ingest.pipeline import warm_up

    try:
        _prepare_first()
    except Exception:  # noqa: BLE001 - the model load below builds what is missing
        logging.getLogger("yana.worker").warning("the one-time builds failed", exc_info=True)

    started = time.monotonic()
    try:
        get_embedder()
    except Exception:  # noqa: BLE001 - the first job loads it again and fails with a clear error
        logging.getLogger("yana.worker").warning("embedding model preload failed", exc_info=True)
    else:
        logging.getLogger("yana.worker").info(
            "embedding model ready", extra={"seconds": round(time.monotonic() - started, 2)}
        )
    _preload_reader()
    _preload_libraries()
    started = time.monotonic()
    try:
        warm_up()
    except Exception:  # noqa: BLE001 - the first near-duplicate check compiles them again
        logging.getLogger("yana.worker").warning("near-duplicate kernels warm-up failed", exc_info=True)
    else:
        logging.getLogger("yana.worker").info(
            "near-duplicate kernels ready", extra={"seconds": round(time.monotonic() - started, 2)}
        )


def _preload_libraries() -> None:
    """What a pool process's first ingest would import on its own (the Chroma client, pHash's
    scipy, the Japanese tokenizer and its dictionary): ~25 MB a pool process, shared if loaded here."""
    try:
        import chromadb  # noqa: F401
        from PIL import Image

        from pipelines.neardup import hashing
        from pipelines.search.tokenizer import run_readings

        hashing.phash_hex(Image.new("L", (64, 64)))
        run_readings("日本酒")
    except Exception:  # noqa: BLE001 - a first job imports them itself
        logging.getLogger("yana.worker").warning("library preload failed", exc_info=True)


def _preload_reader() -> None:
    """The label reader (PP-OCR's sessions and their libraries) before the fork too, when labels
    are read: one copy of its weights and imports for the whole pool."""
    from yana.settings import get_settings

    s = get_settings()
    if s.ocr_mode == "off":
        return
    from pipelines.read.ocr import get_reader

    started = time.monotonic()
    try:
        get_reader(s.ocr_engine)
    except Exception:  # noqa: BLE001 - the first read loads it again and reports a clear warning
        logging.getLogger("yana.worker").warning("label reader preload failed", exc_info=True)
    else:
        logging.getLogger("yana.worker").info(
            "label reader ready", extra={"seconds": round(time.monotonic() - started, 2)}
        )


@signals.worker_process_init.connect
def _child_init(**_):
    pin_threads()
    ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))


# Libraries used only while loading: LLVM links numba's cached kernels into memory and is not
# touched again (no new compilation in a running worker). Its code pages stay resident in the
# process that loaded it (~68 MB of libllvmlite.so, counted in its RSS and, mapped by it alone,
# in full in its PSS) unless given back.
LOAD_ONLY_LIBRARIES = ("libllvmlite",)


@signals.task_postrun.connect
def _give_memory_back(**_):
    """A task's freed memory back to the system: glibc keeps freed heap (a label read's images and
    activations) in the process otherwise, so an idle pool process would hold its busiest moment."""
    memory.give_back_freed_heap()

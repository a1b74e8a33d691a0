"""Giving freed memory back to the system (glibc), for long-lived processes.

glibc keeps the heap a process has freed (temporary buffers of a model load, a label read's
images) mapped in the process, so its resident size stays at its busiest moment; `malloc_trim`
returns the free pages of every arena. Elsewhere (musl, macOS) these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


LIBC = _libc()
_malloc_trim = getattr(LIBC, "malloc_trim", None)  # None where the C library is not glibc


def give_back_freed_heap() -> None:
    """Return the heap's free pages to the system (after a load or a task that allocated a lot)."""
    if _malloc_trim is not None:
        _malloc_trim(0)

"""Giving freed memory back to the system (glibc), for long-lived processes.

glibc keeps the heap a process has freed (temporary buffers of a model load, a label read's
images) mapped in the process, so its resident size stays at its busiest moment; `malloc_trim`
returns the free pages of every arena. A library used only while loading keeps its code pages
resident too; `drop_library_pages` gives those back. Elsewhere (musl, macOS) these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_malloc_trim = getattr(_LIBC, "malloc_trim", None)  # None where the C library is not glibc


def give_back_freed_heap() -> None:
    """Return the heap's free pages to the system (after a load or a task that allocated a lot)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def drop_library_pages(names: tuple[str, ...]) -> int:
    """Give back the resident pages of these shared libraries' clean read-only mappings (their code
    and constants), before the pool forks. Only mappings with no dirty page: a relocated read-only
    one (RELRO) holds the loader's writes, and dropping those would fault the file's unrelocated
    bytes back in. A clean one holds nothing but the file's bytes, so a later use faults them in
    again from the page cache. Returns the bytes advised (0 where /proc or madvise is not there)."""
    import mmap

    import psutil

    madvise = getattr(_LIBC, "madvise", None)
    if madvise is None or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    try:
        maps = psutil.Process().memory_maps(grouped=False)
    except (psutil.Error, OSError):
        return 0
    dropped = 0
    for m in maps:
        clean = m.private_dirty == 0 and m.shared_dirty == 0 and m.anonymous == 0
        if "w" in m.perms or not clean or not any(n in os.path.basename(m.path) for n in names):
            continue
        start, end = (int(x, 16) for x in m.addr.split("-"))
        if madvise(start, end - start, mmap.MADV_DONTNEED) == 0:
            dropped += end - start
    return dropped

"""Which pages of a file are in the OS page cache (Linux `mincore`), without reading the file."""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import re
import sys
from pathlib import Path

_RESIDENT_BIT = bytes(i & 1 for i in range(256))  # mincore sets the lowest bit; the others are undefined
_MISSING_RUN = re.compile(b"\x00+")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def residency(path: Path) -> bytes | None:
    """One byte per page of `path`, 1 where the page is in the page cache, else 0; None where the system cannot
    say (not Linux, or the mapping failed)."""
    size = path.stat().st_size
    if size == 0:
        return b""
    if sys.platform != "linux":
        return None
    libc, pages = _libc(), (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            return bytes(vec).translate(_RESIDENT_BIT)
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def missing_ranges(pages: bytes, merge_gap: int = 64) -> list[tuple[int, int]]:
    """(first page, page count) of the runs of pages not in the cache, runs fewer than `merge_gap` cached pages
    apart merged into one: reading a few cached pages again costs less than a disk request more."""
    runs: list[tuple[int, int]] = []
    for m in _MISSING_RUN.finditer(pages):
        start, end = m.start(), m.end()
        if runs and start - (runs[-1][0] + runs[-1][1]) < merge_gap:
            start = runs.pop()[0]
        runs.append((start, end - start))
    return runs

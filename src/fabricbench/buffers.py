"""Host buffers that are written before they are timed.

A buffer that was never written maps the kernel's shared zero page, and large
sends from it look faster than the fabric is. Every buffer here is filled
with a non-zero pattern on allocation.
"""

from __future__ import annotations

import numpy as np

PAGE = 4096
POISON = 0xFE  # never produced by pattern(): marks "nothing arrived here"
EMPTY = np.empty(0, dtype=np.uint8)  # what a rank that receives nothing validates


def aligned(nbytes: int, dtype: str = "u1") -> np.ndarray:
    """A page-aligned array, so Python buffers start where C's would."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(nbytes + PAGE, dtype=np.uint8)
    offset = (-raw.ctypes.data) % PAGE
    return raw[offset : offset + nbytes].view(dtype)[: nbytes // itemsize]


def times_address(times: memoryview) -> int:
    """Where the runner's int64 sample array starts, for a C loop."""
    return np.frombuffer(times, dtype=np.int64).ctypes.data


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Bytes 1..251 that differ per seed (rank, direction), never 0 and never POISON."""
    return ((np.arange(nbytes, dtype=np.int64) + 31 * seed) % 251 + 1).astype(np.uint8)


def float_pattern(count: int, seed: int) -> np.ndarray:
    """Small integers as float32, so sums over many ranks stay exact."""
    return ((np.arange(count, dtype=np.int64) % 17) + seed + 1).astype(np.float32)


def filled(nbytes: int, seed: int) -> np.ndarray:
    buf = aligned(nbytes)
    buf[:] = pattern(nbytes, seed)
    return buf


def poisoned(nbytes: int, dtype: str = "u1") -> np.ndarray:
    buf = aligned(nbytes, dtype)
    buf.view(np.uint8)[:] = POISON
    return buf

"""Host buffers that are written before they are timed.

A buffer that was never written maps the kernel's shared zero page, and large
sends from it look faster than the fabric is. Every buffer here is filled
with a non-zero pattern on allocation.
"""

from __future__ import annotations

import functools

from fabricbench.lazy import np

PAGE = 4096
POISON = 0xFE  # never produced by pattern(): marks "nothing arrived here"


@functools.cache
def nothing() -> np.ndarray:
    """What a rank that receives nothing validates: one empty uint8 array, made at first use (importing this
    module imports no numpy)."""
    return np.empty(0, dtype=np.uint8)


def __getattr__(name: str):
    if name == "EMPTY":  # the same array under its constant's name, for code that reads it once numpy is in
        return nothing()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def aligned(nbytes: int, dtype: str = "u1") -> np.ndarray:
    """A page-aligned array, so Python buffers start where C's would."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(nbytes + PAGE, dtype=np.uint8)
    offset = (-raw.ctypes.data) % PAGE
    return raw[offset : offset + nbytes].view(dtype)[: nbytes // itemsize]


def times_address(times: memoryview) -> int:
    """Where the runner's int64 sample array starts, for a C loop."""
    return np.frombuffer(times, dtype=np.int64).ctypes.data


PATTERN_PERIOD = 251  # pattern() repeats every 251 bytes, float_pattern() every 17 values


def _repeat_into(out: np.ndarray, period: np.ndarray) -> np.ndarray:
    """Write ``period`` over ``out`` again and again, in place: one period, then what is written is copied
    onto the rest, doubling each time. No temporary larger than one period, whatever the size."""
    n = len(out)
    done = min(n, len(period))
    out[:done] = period[:done]
    while done < n:  # done is a whole number of periods, so out[done + j] continues out[j]
        step = min(done, n - done)
        out[done : done + step] = out[:step]
        done += step
    return out


def _byte_period(seed: int) -> np.ndarray:
    return ((np.arange(PATTERN_PERIOD, dtype=np.int64) + 31 * seed) % PATTERN_PERIOD + 1).astype(np.uint8)


def _float_period(seed: int) -> np.ndarray:
    return (np.arange(17, dtype=np.int64) + seed + 1).astype(np.float32)


def write_pattern(buf: np.ndarray, seed: int) -> np.ndarray:
    """``pattern(len(buf), seed)`` written into the byte array ``buf`` in place."""
    return _repeat_into(buf, _byte_period(seed))


def pattern(nbytes: int, seed: int) -> np.ndarray:
    """Bytes 1..251 that differ per seed (rank, direction), never 0 and never POISON: byte i is
    (i + 31 seed) mod 251 + 1. Built without temporaries: a message's pattern costs the message."""
    return write_pattern(np.empty(nbytes, dtype=np.uint8), seed)


def write_float_pattern(buf: np.ndarray, seed: int) -> np.ndarray:
    """``float_pattern(len(buf), seed)`` written into the float32 array ``buf`` in place."""
    return _repeat_into(buf, _float_period(seed))


def float_pattern(count: int, seed: int) -> np.ndarray:
    """Small integers as float32, so sums over many ranks stay exact: value i is i mod 17 + seed + 1."""
    return write_float_pattern(np.empty(count, dtype=np.float32), seed)


def filled(nbytes: int, seed: int) -> np.ndarray:
    """A page-aligned buffer holding ``pattern(nbytes, seed)``, written in place."""
    return write_pattern(aligned(nbytes), seed)


def poisoned(nbytes: int, dtype: str = "u1") -> np.ndarray:
    buf = aligned(nbytes, dtype)
    buf.view(np.uint8)[:] = POISON
    return buf

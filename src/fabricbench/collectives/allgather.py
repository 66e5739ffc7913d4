"""Allgather: every rank ends with every rank's block of S bytes, in rank order."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import filled, pattern, poisoned
from fabricbench.collectives.spec import (
    BYTE,
    OSU_MAX_SIZE,
    CollectiveBuffers,
    CollectiveSpec,
    all_blocks_bytes,
    ring_factor,
    with_result,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return np.concatenate([pattern(size, r) for r in range(ranks)])


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    return with_result(filled(size, rank), poisoned(size * ranks), size, partial(expected, size, ranks, rank))


SPEC = CollectiveSpec(
    "allgather", "{lib} Allgather Latency Test", BYTE, 1, OSU_MAX_SIZE, buffers, all_blocks_bytes, ring_factor
)

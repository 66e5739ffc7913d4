"""Reduce-scatter: the sum of every rank's n blocks of S bytes (float32 unless OSU's -T says); rank r keeps
block r of it."""

from __future__ import annotations

from functools import partial

from fabricbench.collectives.spec import (
    FLOAT32,
    OSU_MAX_SIZE,
    REDUCIBLE,
    CollectiveBuffers,
    CollectiveSpec,
    Element,
    all_blocks_bytes,
    filled_values,
    ring_factor,
    value_result,
    value_sum,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> np.ndarray:
    count = size // element.size
    return value_sum(count * ranks, ranks, element)[rank * count : (rank + 1) * count].view(np.uint8)


def buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    count = size // element.size
    check = partial(expected, size, ranks, rank, element)
    return value_result(filled_values(count * ranks, rank, element), count, check, element)


SPEC = CollectiveSpec(
    "reduce_scatter",
    "{lib} Reduce_scatter Latency Test",
    FLOAT32,
    4,
    OSU_MAX_SIZE,
    buffers,
    all_blocks_bytes,
    ring_factor,
    REDUCIBLE,
)

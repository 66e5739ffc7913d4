"""Reduce-scatter: the float32 sum of every rank's n blocks of S bytes; rank r keeps block r of it."""

from __future__ import annotations

from functools import partial

import numpy as np

from fabricbench.collectives import (
    FLOAT32,
    OSU_MAX_SIZE,
    CollectiveBuffers,
    CollectiveSpec,
    all_blocks_bytes,
    filled_floats,
    float_result,
    float_sum,
    ring_factor,
)


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    count = size // FLOAT32.size
    return float_sum(count * ranks, ranks)[rank * count : (rank + 1) * count].view(np.uint8)


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    count = size // FLOAT32.size
    return float_result(filled_floats(count * ranks, rank), count, partial(expected, size, ranks, rank))


SPEC = CollectiveSpec(
    "reduce_scatter",
    "{lib} Reduce_scatter Latency Test",
    FLOAT32,
    4,
    OSU_MAX_SIZE,
    buffers,
    all_blocks_bytes,
    ring_factor,
)

"""Allreduce: every rank ends with the float32 sum of every rank's vector of S bytes."""

from __future__ import annotations

from functools import partial

import numpy as np

from fabricbench.collectives import (
    FLOAT32,
    OSU_MAX_SIZE,
    CollectiveBuffers,
    CollectiveSpec,
    block_bytes,
    filled_floats,
    float_result,
    float_sum,
)


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return float_sum(size // FLOAT32.size, ranks).view(np.uint8)


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    count = size // FLOAT32.size
    return float_result(filled_floats(count, rank), count, partial(expected, size, ranks, rank))


def bus_factor(ranks: int) -> float:
    """2(n-1)/n: a reduce-scatter then an allgather, each (n-1)/n."""
    return 2 * (ranks - 1) / ranks


SPEC = CollectiveSpec(
    "allreduce", "{lib} Allreduce Latency Test", FLOAT32, 4, OSU_MAX_SIZE, buffers, block_bytes, bus_factor
)

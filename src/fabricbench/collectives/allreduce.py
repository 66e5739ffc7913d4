"""Allreduce: every rank ends with the sum of every rank's vector of S bytes (float32 unless OSU's -T says)."""

from __future__ import annotations

from functools import partial

from fabricbench.collectives.spec import (
    FLOAT32,
    OSU_MAX_SIZE,
    REDUCIBLE,
    CollectiveBuffers,
    CollectiveSpec,
    Element,
    block_bytes,
    filled_values,
    in_place_result,
    value_result,
    value_sum,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> np.ndarray:
    return value_sum(size // element.size, ranks, element).view(np.uint8)


def buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    count = size // element.size
    check = partial(expected, size, ranks, rank, element)
    return value_result(filled_values(count, rank, element), count, check, element)


def in_place_buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    """MPI_IN_PLACE: this rank's vector in the one buffer, the sum over it."""
    count = size // element.size
    return in_place_result(filled_values(count, rank, element), count, partial(expected, size, ranks, rank, element))


def bus_factor(ranks: int) -> float:
    """2(n-1)/n: a reduce-scatter then an allgather, each (n-1)/n."""
    return 2 * (ranks - 1) / ranks


SPEC = CollectiveSpec(
    "allreduce",
    "{lib} Allreduce Latency Test",
    FLOAT32,
    4,
    OSU_MAX_SIZE,
    buffers,
    block_bytes,
    bus_factor,
    REDUCIBLE,
    in_place_buffers=in_place_buffers,
    in_place_side="send",
)

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
    in_place_result,
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


def in_place_buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    """MPI_IN_PLACE: this rank's n blocks in the one buffer; its block of the sum lands at its start."""
    count = size // element.size
    check = partial(expected, size, ranks, rank, element)
    return in_place_result(filled_values(count * ranks, rank, element), count, check, slice(0, count))


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
    in_place_buffers=in_place_buffers,
    in_place_side="send",
)

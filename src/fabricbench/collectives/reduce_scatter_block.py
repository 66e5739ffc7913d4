"""Reduce_scatter_block, as OSU's osu_reduce_scatter_block sizes it: S is each rank's whole vector (float32
unless OSU's -T says); the sum of the first n·c elements of every rank's vector is taken, and rank r keeps its
block r of c = S/(element size)/n elements, rounded down (no element when S holds fewer than n).

This differs from fabricbench's ``reduce_scatter``, whose S is the block each rank keeps (its vector is n·S)."""

from __future__ import annotations

from functools import partial

from fabricbench.collectives.spec import (
    FLOAT32,
    OSU_MAX_SIZE,
    REDUCIBLE,
    CollectiveBuffers,
    CollectiveSpec,
    Element,
    filled_values,
    in_place_result,
    ring_factor,
    value_result,
    value_sum,
)
from fabricbench.lazy import np


def block_count(size: int, ranks: int, element: Element = FLOAT32) -> int:
    """c, the elements each rank keeps: OSU's portion, the vector's elements over the ranks, rounded down."""
    return size // element.size // ranks


def algbw_bytes(size: int, ranks: int, element: Element = FLOAT32) -> int:
    """nccl-tests' reduce_scatter count, the vector that is summed: n·c elements, S where S divides evenly."""
    return block_count(size, ranks, element) * ranks * element.size


def expected(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> np.ndarray:
    count = block_count(size, ranks, element)
    return value_sum(count * ranks, ranks, element)[rank * count : (rank + 1) * count].view(np.uint8)


def buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    check = partial(expected, size, ranks, rank, element)
    send = filled_values(size // element.size, rank, element)  # the whole vector; the call reads n·c of it
    return value_result(send, block_count(size, ranks, element), check, element)


def in_place_buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    """MPI_IN_PLACE: the whole vector in the one buffer; this rank's block of the sum lands at its start."""
    count = block_count(size, ranks, element)
    check = partial(expected, size, ranks, rank, element)
    return in_place_result(filled_values(size // element.size, rank, element), count, check, slice(0, count))


SPEC = CollectiveSpec(
    "reduce_scatter_block",
    "{lib} Reduce_scatter_block Latency Test",
    FLOAT32,
    4,
    OSU_MAX_SIZE,
    buffers,
    algbw_bytes,
    ring_factor,
    REDUCIBLE,
    algbw_by_element=True,
    in_place_buffers=in_place_buffers,
    in_place_side="send",
)

"""Reduce: the sum of every rank's vector of S bytes (float32 unless OSU's -T says) arrives at the root; the other
ranks receive nothing."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import nothing
from fabricbench.collectives import allreduce
from fabricbench.collectives.spec import (
    FLOAT32,
    OSU_MAX_SIZE,
    REDUCIBLE,
    ROOT,
    CollectiveBuffers,
    CollectiveSpec,
    Element,
    block_bytes,
    filled_values,
    in_place_result,
    unit_factor,
    value_result,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> np.ndarray:
    return allreduce.expected(size, ranks, rank, element) if rank == ROOT else nothing()


def buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    count = size // element.size
    send, check = filled_values(count, rank, element), partial(expected, size, ranks, rank, element)
    if rank == ROOT:
        return value_result(send, count, check, element)
    return CollectiveBuffers(send, nothing(), count, nothing(), check)  # MPI_Reduce takes no receive buffer here


def in_place_buffers(size: int, ranks: int, rank: int, element: Element = FLOAT32) -> CollectiveBuffers:
    """MPI_IN_PLACE at the root: its vector in the one buffer, the sum over it; the other ranks as out of place."""
    if rank != ROOT:
        return buffers(size, ranks, rank, element)
    count = size // element.size
    return in_place_result(filled_values(count, rank, element), count, partial(expected, size, ranks, rank, element))


SPEC = CollectiveSpec(
    "reduce",
    "{lib} Reduce Latency Test",
    FLOAT32,
    4,
    OSU_MAX_SIZE,
    buffers,
    block_bytes,
    unit_factor,
    REDUCIBLE,
    in_place_buffers=in_place_buffers,
    in_place_side="root send",
    root=ROOT,
)

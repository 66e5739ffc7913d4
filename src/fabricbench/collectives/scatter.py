"""Scatter: the root's block r of S bytes arrives at rank r (the root keeps its own); the other ranks send
nothing."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import aligned, nothing, pattern, poisoned
from fabricbench.collectives.spec import (
    BYTE,
    OSU_MAX_SIZE,
    ROOT,
    CollectiveBuffers,
    CollectiveSpec,
    all_blocks_bytes,
    blocks_in_rank_order,
    ring_factor,
    with_result,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return pattern(size, rank)


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    if rank == ROOT:
        send = aligned(size * ranks)
        send[:] = blocks_in_rank_order(size, ranks)
    else:
        send = nothing()  # MPI_Scatter reads no send buffer here
    return with_result(send, poisoned(size), size, partial(expected, size, ranks, rank))


# nccl-tests' scatter: algbw over the S·n bytes the root starts with, busbw (n-1)/n of it (its own block stays).
SPEC = CollectiveSpec(
    "scatter", "{lib} Scatter Latency Test", BYTE, 1, OSU_MAX_SIZE, buffers, all_blocks_bytes, ring_factor
)

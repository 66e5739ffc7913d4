"""Scatter: the root's block r of S bytes arrives at rank r (the root keeps its own); the other ranks send
nothing."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import aligned, nothing, pattern, poisoned
from fabricbench.collectives.spec import (
    ROOT,
    CollectiveBuffers,
    blocks_in_rank_order,
    blocks_spec,
    in_place_result,
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


def in_place_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """MPI_IN_PLACE at the root (its receive buffer): its own block stays at root·S of the one buffer it sends
    from, which validation checks; the other ranks as out of place."""
    if rank != ROOT:
        return buffers(size, ranks, rank)
    check = partial(expected, size, ranks, rank)
    return in_place_result(blocks_in_rank_order(size, ranks), size, check, slice(rank * size, (rank + 1) * size))


# nccl-tests' scatter: algbw over the S·n bytes the root starts with, busbw (n-1)/n of it (its own block stays).
SPEC = blocks_spec(
    "scatter",
    "{lib} Scatter Latency Test",
    buffers,
    in_place_buffers=in_place_buffers,
    in_place_side="root recv",
    root=ROOT,
)

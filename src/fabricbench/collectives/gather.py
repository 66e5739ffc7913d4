"""Gather: every rank's block of S bytes arrives at the root, in rank order; the other ranks receive nothing."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import filled, nothing, pattern, poisoned
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
    return blocks_in_rank_order(size, ranks) if rank == ROOT else nothing()


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    send, check = filled(size, rank), partial(expected, size, ranks, rank)
    if rank == ROOT:
        return with_result(send, poisoned(size * ranks), size, check)
    return CollectiveBuffers(send, nothing(), size, nothing(), check)  # MPI_Gather reads no receive buffer here


def in_place_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """MPI_IN_PLACE at the root: its block already at root·S of the one buffer, the rest poisoned until it
    arrives; the other ranks as out of place."""
    if rank != ROOT:
        return buffers(size, ranks, rank)
    data = poisoned(size * ranks)
    data[rank * size : (rank + 1) * size] = pattern(size, rank)
    return in_place_result(data, size, partial(expected, size, ranks, rank))


# nccl-tests' gather: algbw over the S·n bytes the root ends with, busbw (n-1)/n of it (its own block stays).
SPEC = blocks_spec(
    "gather",
    "{lib} Gather Latency Test",
    buffers,
    in_place_buffers=in_place_buffers,
    in_place_side="root send",
    root=ROOT,
)

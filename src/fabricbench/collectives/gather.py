"""Gather: every rank's block of S bytes arrives at the root, in rank order; the other ranks receive nothing."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import filled, nothing, poisoned
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
    return blocks_in_rank_order(size, ranks) if rank == ROOT else nothing()


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    send, check = filled(size, rank), partial(expected, size, ranks, rank)
    if rank == ROOT:
        return with_result(send, poisoned(size * ranks), size, check)
    return CollectiveBuffers(send, nothing(), size, nothing(), check)  # MPI_Gather reads no receive buffer here


# nccl-tests' gather: algbw over the S·n bytes the root ends with, busbw (n-1)/n of it (its own block stays).
SPEC = CollectiveSpec(
    "gather", "{lib} Gather Latency Test", BYTE, 1, OSU_MAX_SIZE, buffers, all_blocks_bytes, ring_factor
)

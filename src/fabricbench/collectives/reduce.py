"""Reduce: the float32 sum of every rank's vector of S bytes arrives at the root; the other ranks receive nothing."""

from __future__ import annotations

from functools import partial

import numpy as np

from fabricbench.buffers import EMPTY
from fabricbench.collectives import (
    FLOAT32,
    OSU_MAX_SIZE,
    ROOT,
    CollectiveBuffers,
    CollectiveSpec,
    allreduce,
    block_bytes,
    filled_floats,
    float_result,
    unit_factor,
)


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return allreduce.expected(size, ranks, rank) if rank == ROOT else EMPTY


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    count = size // FLOAT32.size
    send, check = filled_floats(count, rank), partial(expected, size, ranks, rank)
    if rank == ROOT:
        return float_result(send, count, check)
    return CollectiveBuffers(send, EMPTY, count, EMPTY, check)  # MPI_Reduce takes no receive buffer here


SPEC = CollectiveSpec(
    "reduce", "{lib} Reduce Latency Test", FLOAT32, 4, OSU_MAX_SIZE, buffers, block_bytes, unit_factor
)

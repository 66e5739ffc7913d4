"""Broadcast: the root's S bytes arrive at every other rank, in one buffer that is both sent and received."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import filled, nothing, pattern, poisoned
from fabricbench.collectives.spec import (
    BYTE,
    OSU_MAX_SIZE,
    ROOT,
    CollectiveBuffers,
    CollectiveSpec,
    block_bytes,
    unit_factor,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return nothing() if rank == ROOT else pattern(size, ROOT)


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    if rank == ROOT:
        buf, received = filled(size, ROOT), nothing()
    else:
        buf = received = poisoned(size)
    return CollectiveBuffers(buf, buf, size, received, partial(expected, size, ranks, rank))


# MPI_Bcast has one buffer already (nccl's broadcast has two, and an in-place form: transports/gpu/nccl.py).
SPEC = CollectiveSpec(
    "bcast",
    "{lib} Broadcast Latency Test",
    BYTE,
    1,
    OSU_MAX_SIZE,
    buffers,
    block_bytes,
    unit_factor,
    no_in_place="MPI_Bcast has no MPI_IN_PLACE: its one buffer is sent at the root and received elsewhere",
    root=ROOT,
)

"""Alltoall: rank r sends its block d (S bytes) to rank d and ends with every rank's block r, in rank order."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import aligned, pattern, poisoned
from fabricbench.collectives.spec import (
    BYTE,
    OSU_MAX_SIZE,
    CollectiveBuffers,
    CollectiveSpec,
    all_blocks_bytes,
    ring_factor,
    with_result,
)
from fabricbench.lazy import np


def _block_seed(src: int, dest: int, ranks: int) -> int:
    """Every (source, destination) block differs, so a block delivered to the wrong rank fails."""
    return src * ranks + dest


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return np.concatenate([pattern(size, _block_seed(src, rank, ranks)) for src in range(ranks)])


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    send = aligned(size * ranks)
    for dest in range(ranks):
        send[dest * size : (dest + 1) * size] = pattern(size, _block_seed(rank, dest, ranks))
    return with_result(send, poisoned(size * ranks), size, partial(expected, size, ranks, rank))


SPEC = CollectiveSpec(
    "alltoall",
    "{lib} All-to-All Personalized Exchange Latency Test",
    BYTE,
    1,
    OSU_MAX_SIZE,
    buffers,
    all_blocks_bytes,
    ring_factor,
)

"""Alltoall: rank r sends its block d (S bytes) to rank d and ends with every rank's block r, in rank order."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import aligned, pattern, poisoned
from fabricbench.collectives.spec import (
    CollectiveBuffers,
    blocks_spec,
    in_place_result,
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


def in_place_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """MPI_IN_PLACE: block d for rank d in the one buffer, replaced by block r from rank d."""
    out_of_place = buffers(size, ranks, rank)
    return in_place_result(out_of_place.send, size, out_of_place.expected)


SPEC = blocks_spec(
    "alltoall",
    "{lib} All-to-All Personalized Exchange Latency Test",
    buffers,
    in_place_buffers=in_place_buffers,
    in_place_side="send",
)

"""Allgather: every rank ends with every rank's block of S bytes, in rank order."""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import filled, pattern, poisoned
from fabricbench.collectives.spec import (
    CollectiveBuffers,
    blocks_spec,
    in_place_result,
    with_result,
)
from fabricbench.lazy import np


def expected(size: int, ranks: int, rank: int) -> np.ndarray:
    return np.concatenate([pattern(size, r) for r in range(ranks)])


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    return with_result(filled(size, rank), poisoned(size * ranks), size, partial(expected, size, ranks, rank))


def in_place_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """MPI_IN_PLACE: this rank's block already at r·S of the one buffer, the rest poisoned until it arrives."""
    data = poisoned(size * ranks)
    data[rank * size : (rank + 1) * size] = pattern(size, rank)
    return in_place_result(data, size, partial(expected, size, ranks, rank))


SPEC = blocks_spec(
    "allgather", "{lib} Allgather Latency Test", buffers, in_place_buffers=in_place_buffers, in_place_side="send"
)

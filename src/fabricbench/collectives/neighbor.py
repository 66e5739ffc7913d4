"""Neighbourhood collectives (MPI_Neighbor_*), on OSU 7.4's default topology: a periodic ring, radius 1.

OSU builds its neighbourhood from a periodic Cartesian grid of ``dim`` dimensions (1 by default) and takes every
rank within ``rad`` steps (1 by default) along each of them as both a source and a destination, in the order of
the displacements from -rad to +rad (0, the rank itself, left out); the distributed graph communicator is made
from those lists with MPI_Dist_graph_create_adjacent, weights 1, no reordering. On the default ring that is
(left, right) for every rank. OSU refuses a radius above half the smallest dimension less one, where a neighbour
would appear twice: the ring needs 3 ranks.

Block l of the receive buffer comes from source l, block i of the send buffer goes to destination i; a block is S
bytes. Each (source, destination) block differs, so a block delivered to the wrong neighbour fails.
"""

from __future__ import annotations

from functools import partial

from fabricbench.buffers import aligned, filled, pattern, poisoned
from fabricbench.collectives.spec import (
    BYTE,
    OSU_MAX_SIZE,
    CollectiveBuffers,
    CollectiveSpec,
    with_result,
)
from fabricbench.lazy import np

RADIUS = 1  # OSU's default rad
MIN_RANKS = 2 * RADIUS + 1  # the ring's size at which no neighbour appears twice


def ring_neighbours(rank: int, ranks: int, radius: int = RADIUS) -> tuple[list[int], list[int]]:
    """(sources, destinations) of ``rank`` on OSU's periodic 1-D ring of ``ranks``: the ranks -radius..+radius
    steps away, itself left out, in that order; both lists alike. ValueError where a neighbour would appear twice
    (OSU's refusal: radius above (ranks - 1) // 2)."""
    if radius < 1 or radius > (ranks - 1) // 2:
        raise ValueError(
            f"the neighbourhood radius {radius} is more than half the ring of {ranks} ranks less one: "
            f"it needs at least {2 * radius + 1} ranks"
        )
    around = [(rank + step) % ranks for step in range(-radius, radius + 1) if step]
    return around, list(around)


def _block_seed(src: int, dest: int, ranks: int) -> int:
    return src * ranks + dest


def _gathered(size: int, ranks: int, rank: int) -> np.ndarray:
    sources, _ = ring_neighbours(rank, ranks)
    return np.concatenate([pattern(size, src) for src in sources])


def gather_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """allgather(v): this rank's S bytes go to every destination; block l arrives from source l."""
    sources, _ = ring_neighbours(rank, ranks)
    return with_result(filled(size, rank), poisoned(size * len(sources)), size, partial(_gathered, size, ranks, rank))


def _exchanged(size: int, ranks: int, rank: int) -> np.ndarray:
    sources, _ = ring_neighbours(rank, ranks)
    return np.concatenate([pattern(size, _block_seed(src, rank, ranks)) for src in sources])


def exchange_buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    """alltoall(v, w): block i (S bytes) to destination i; block l arrives from source l."""
    sources, destinations = ring_neighbours(rank, ranks)
    send = aligned(size * len(destinations))
    for i, dest in enumerate(destinations):
        send[i * size : (i + 1) * size] = pattern(size, _block_seed(rank, dest, ranks))
    return with_result(send, poisoned(size * len(sources)), size, partial(_exchanged, size, ranks, rank))


def neighbour_bytes(size: int, ranks: int) -> int:
    """What a rank receives: S from each of its 2·radius sources."""
    return size * 2 * RADIUS


def unit_factor(ranks: int) -> float:
    return 1.0


def _spec(name: str, title: str, buffers) -> CollectiveSpec:
    return CollectiveSpec(
        name,
        f"{{lib}} {title} Latency Test",
        BYTE,
        1,
        OSU_MAX_SIZE,
        buffers,
        neighbour_bytes,
        unit_factor,
        no_in_place="MPI's neighbourhood collectives take no MPI_IN_PLACE",
    )


SPECS = (
    _spec("neighbor_allgather", "Neighborhood Allgather", gather_buffers),
    _spec("neighbor_allgatherv", "Neighborhood Allgatherv", gather_buffers),
    _spec("neighbor_alltoall", "Neighborhood All-to-All", exchange_buffers),
    _spec("neighbor_alltoallv", "Neighborhood All-to-Allv", exchange_buffers),
    _spec("neighbor_alltoallw", "Neighborhood All-to-Allw", exchange_buffers),
)
NAMES = frozenset(spec.name for spec in SPECS)

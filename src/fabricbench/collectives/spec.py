"""What every collective's spec is made of: its element type, its buffers, nccl-tests' byte counts and factors.

The operations (one module each in this package) build their ``CollectiveSpec`` from these parts; the
transports take ROOT and the element types from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from fabricbench.buffers import aligned, float_pattern, pattern, poisoned
from fabricbench.lazy import np

OSU_MAX_SIZE = 1024 * 1024  # OSU's largest collective message by default: 1 MiB
ROOT = 0  # the rank that broadcasts (bcast) or receives the result (reduce)


@dataclass
class CollectiveBuffers:
    """One rank's written buffers for one operation at one size, and what validation compares."""

    send: np.ndarray  # what this rank contributes (for bcast, the one buffer)
    recv: np.ndarray  # where the result lands
    count: int  # elements per block, as MPI and NCCL count them
    received: np.ndarray  # uint8 view that validation checks (may be empty)
    expected: Callable[[], np.ndarray]


@dataclass(frozen=True)
class Element:
    """What a collective's buffers hold: sizes are whole multiples of it."""

    dtype: str  # numpy's name, an array-protocol type string: a kind, then bytes ("f4")
    osu_datatype: str  # OSU's "# Datatype:" line

    @property
    def size(self) -> int:
        return int(self.dtype[1:])  # read from the name, so that the command line's checks need no numpy


FLOAT32 = Element("f4", "MPI_FLOAT")  # reductions: small integers as floats, so sums stay exact
BYTE = Element("u1", "MPI_CHAR")
# What a reduction may sum, as OSU 7.4's -T names them. MPI_CHAR is OSU's default: signed bytes whose sums wrap
# modulo 256, as the MPI library adds C chars; MPI_INT's and MPI_FLOAT's sums of small integers stay exact.
CHAR = Element("i1", "MPI_CHAR")
INT32 = Element("i4", "MPI_INT")
REDUCIBLE = (CHAR, INT32, FLOAT32)


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective. ``element``, ``algbw_bytes`` and ``bus_factor`` are None for one that moves no data."""

    name: str
    osu_title: str  # OSU's title line, {lib} standing for the library
    element: Element | None
    min_size: int  # OSU's default sweep
    max_size: int
    buffers: Callable[[int, int, int], CollectiveBuffers]  # (S, n, rank): this rank's written buffers
    algbw_bytes: Callable[[int, int], int] | None  # (S, n): the bytes nccl-tests divides by the time
    bus_factor: Callable[[int], float] | None  # n: nccl-tests' factor from algorithm to bus bandwidth
    # The elements ``buffers`` can also be built of (its ``element=`` keyword): a reduction's -T types.
    elements: tuple[Element, ...] = ()
    # ``algbw_bytes`` takes the element too (its ``element=`` keyword): a count that is rounded to whole elements
    # per rank (reduce_scatter_block's S/n per rank, rounded down).
    algbw_by_element: bool = False

    @property
    def elem_bytes(self) -> int:
        return self.element.size if self.element else 1

    @property
    def osu_datatype(self) -> str:
        return self.element.osu_datatype if self.element else ""

    def with_element(self, element: Element) -> CollectiveSpec:
        """This collective on buffers of ``element`` (one of ``elements``): sizes from one element up."""
        if element not in self.elements:
            raise ValueError(f"{self.name} is not built of {element.osu_datatype}")
        if element == self.element:
            return self
        algbw = partial(self.algbw_bytes, element=element) if self.algbw_by_element else self.algbw_bytes
        return replace(
            self,
            element=element,
            min_size=element.size,
            buffers=partial(self.buffers, element=element),
            algbw_bytes=algbw,
        )


def block_bytes(size: int, ranks: int) -> int:
    """nccl-tests' algbw count for a collective whose buffer is one block: S."""
    return size


def all_blocks_bytes(size: int, ranks: int) -> int:
    """nccl-tests' algbw count for one that handles a block per rank: S·n."""
    return size * ranks


def ring_factor(ranks: int) -> float:
    """(n-1)/n: each rank sends (or receives) all but its own block once."""
    return (ranks - 1) / ranks


def unit_factor(ranks: int) -> float:
    """1: the bus carries what the algorithm counts (bcast, reduce)."""
    return 1.0


def filled_floats(count: int, seed: int) -> np.ndarray:
    """``count`` float32 values of ``float_pattern``, in an aligned, written buffer."""
    buf = aligned(count * FLOAT32.size, FLOAT32.dtype)
    buf[:] = float_pattern(count, seed)
    return buf


def filled_values(count: int, seed: int, element: Element) -> np.ndarray:
    """``count`` values of ``float_pattern`` (i mod 17 + seed + 1) as ``element``, in an aligned, written buffer;
    as C converts them, so a char holds the value modulo 256."""
    if element == FLOAT32:
        return filled_floats(count, seed)
    buf = aligned(count * element.size, element.dtype)
    buf[:] = np.resize((np.arange(17, dtype=np.int64) + seed + 1).astype(element.dtype), count)
    return buf


def value_sum(count: int, ranks: int, element: Element) -> np.ndarray:
    """Sum over ranks r of filled_values(count, r, element), in closed form, as ``element`` holds it."""
    base = (np.arange(count, dtype=np.int64) % 17) + 1
    return (base * ranks + ranks * (ranks - 1) // 2).astype(element.dtype)


def with_result(
    send: np.ndarray, recv: np.ndarray, count: int, expected: Callable[[], np.ndarray]
) -> CollectiveBuffers:
    """Buffers whose whole ``recv`` is checked after the operation."""
    return CollectiveBuffers(send, recv, count, recv.view(np.uint8), expected)


def value_result(
    send: np.ndarray, count: int, expected: Callable[[], np.ndarray], element: Element
) -> CollectiveBuffers:
    """Buffers whose result is ``count`` values of ``element``, poisoned until they arrive."""
    return with_result(send, poisoned(count * element.size, element.dtype), count, expected)


# --- the v-variants' and the rooted collectives' parts (gather, scatter, allgatherv, alltoallv, alltoallw, ...) ---


def uniform_layout(count: int, ranks: int) -> tuple[list[int], list[int]]:
    """The counts and displacements (in elements) that OSU 7.4's v-variants pass (osu_gatherv, osu_scatterv,
    osu_allgatherv, osu_alltoallv; osu_alltoallw in bytes, times the element's size): every rank's block holds
    ``count`` elements and block r starts at r·count, so a v-variant moves what its plain form moves."""
    return [count] * ranks, [rank * count for rank in range(ranks)]


def blocks_in_rank_order(size: int, ranks: int) -> np.ndarray:
    """Every rank's ``pattern`` block of S bytes, rank 0's first: what a gather's root and every allgather rank
    receive, and what a scatter's root sends."""
    return np.concatenate([pattern(size, rank) for rank in range(ranks)])

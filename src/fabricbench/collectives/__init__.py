"""Collective operations as data: one spec per operation, one module each, as nccl-tests' ``struct testColl``.

A spec says only what differs between collectives: its element type, OSU's
sizes and title, the buffers a rank needs for a message size S on n ranks
(filled, with the expected result), and nccl-tests' bandwidth formulas. The
runner, the rows, the reports and every transport that runs collectives take
what they need from here, so adding a collective is one module here plus the
transports' calls. Sizes are OSU's: S is the per-rank block (the reduced vector
for allreduce and reduce).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fabricbench.buffers import aligned, float_pattern, poisoned

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

    dtype: str  # numpy's name
    osu_datatype: str  # OSU's "# Datatype:" line

    @property
    def size(self) -> int:
        return np.dtype(self.dtype).itemsize


FLOAT32 = Element("f4", "MPI_FLOAT")  # reductions: small integers as floats, so sums stay exact
BYTE = Element("u1", "MPI_CHAR")


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

    @property
    def elem_bytes(self) -> int:
        return self.element.size if self.element else 1

    @property
    def osu_datatype(self) -> str:
        return self.element.osu_datatype if self.element else ""


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


def float_sum(count: int, ranks: int) -> np.ndarray:
    """Sum over ranks r of float_pattern(count, r), in closed form."""
    base = (np.arange(count, dtype=np.int64) % 17) + 1
    return (base * ranks + ranks * (ranks - 1) // 2).astype(np.float32)


def with_result(
    send: np.ndarray, recv: np.ndarray, count: int, expected: Callable[[], np.ndarray]
) -> CollectiveBuffers:
    """Buffers whose whole ``recv`` is checked after the operation."""
    return CollectiveBuffers(send, recv, count, recv.view(np.uint8), expected)


def float_result(send: np.ndarray, count: int, expected: Callable[[], np.ndarray]) -> CollectiveBuffers:
    """Buffers whose result is ``count`` float32 values, poisoned until they arrive."""
    return with_result(send, poisoned(count * FLOAT32.size, FLOAT32.dtype), count, expected)


# The operations import the helpers above, so they come last.
from fabricbench.collectives import (  # noqa: E402
    allgather,
    allreduce,
    alltoall,
    barrier,
    bcast,
    reduce,
    reduce_scatter,
)

COLLECTIVES: dict[str, CollectiveSpec] = {
    module.SPEC.name: module.SPEC for module in (allreduce, allgather, alltoall, bcast, reduce, reduce_scatter, barrier)
}

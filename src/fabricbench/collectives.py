"""Collective operations as data: buffers, fill and the expected result.

As in nccl-tests, each collective says only what differs: how big its buffers
are for a message size S on n ranks, how they are filled, and what a correct
result is. Any transport that runs collectives takes its buffers from here.
Sizes are OSU's: S is the per-rank block (the reduced vector for allreduce).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fabricbench.buffers import aligned, float_pattern, pattern, poisoned
from fabricbench.transports.base import EMPTY


@dataclass
class CollectiveBuffers:
    send: np.ndarray  # what this rank contributes (for bcast, the one buffer)
    recv: np.ndarray  # where the result lands
    count: int  # elements per block, as MPI and NCCL count them
    received: np.ndarray  # uint8 view that validation checks (may be empty)
    expected: Callable[[], np.ndarray]


def _floats_sum(count: int, ranks: int) -> np.ndarray:
    """Sum over ranks r of float_pattern(count, r), in closed form."""
    base = (np.arange(count, dtype=np.int64) % 17) + 1
    return (base * ranks + ranks * (ranks - 1) // 2).astype(np.float32)


def _filled_floats(count: int, seed: int) -> np.ndarray:
    buf = aligned(count * 4, "f4")
    buf[:] = float_pattern(count, seed)
    return buf


def _filled_bytes(nbytes: int, seed: int) -> np.ndarray:
    buf = aligned(nbytes)
    buf[:] = pattern(nbytes, seed)
    return buf


def collective_buffers(name: str, size: int, ranks: int, rank: int) -> CollectiveBuffers:
    if name == "allreduce":
        count = size // 4
        recv = poisoned(count * 4, "f4")
        return CollectiveBuffers(
            _filled_floats(count, rank),
            recv,
            count,
            recv.view(np.uint8),
            lambda: _floats_sum(count, ranks).view(np.uint8),
        )
    if name == "reduce_scatter":
        count = size // 4
        recv = poisoned(count * 4, "f4")
        return CollectiveBuffers(
            _filled_floats(count * ranks, rank),
            recv,
            count,
            recv.view(np.uint8),
            lambda: _floats_sum(count * ranks, ranks)[rank * count : (rank + 1) * count].view(np.uint8),
        )
    if name == "allgather":
        recv = poisoned(size * ranks)
        return CollectiveBuffers(
            _filled_bytes(size, rank),
            recv,
            size,
            recv,
            lambda: np.concatenate([pattern(size, r) for r in range(ranks)]),
        )
    if name == "alltoall":
        send = aligned(size * ranks)
        for dest in range(ranks):
            send[dest * size : (dest + 1) * size] = pattern(size, rank * ranks + dest)
        recv = poisoned(size * ranks)
        return CollectiveBuffers(
            send,
            recv,
            size,
            recv,
            lambda: np.concatenate([pattern(size, src * ranks + rank) for src in range(ranks)]),
        )
    if name == "bcast":
        if rank == 0:
            buf = _filled_bytes(size, 0)
            return CollectiveBuffers(buf, buf, size, EMPTY, lambda: EMPTY)
        buf = poisoned(size)
        return CollectiveBuffers(buf, buf, size, buf, lambda: pattern(size, 0))
    if name == "barrier":
        return CollectiveBuffers(EMPTY, EMPTY, 0, EMPTY, lambda: EMPTY)
    raise KeyError(name)

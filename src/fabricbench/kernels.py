"""What each kernel is, independent of the transport that runs it.

A kernel fixes the rank pattern, what one timed sample means, the OSU
defaults a user would compare against, and how a time becomes a bandwidth.
The transports only supply the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricbench.errors import UsageError

KiB = 1024
MiB = 1024 * KiB
LARGE_MESSAGE = 8 * KiB  # OSU switches to the "large" iteration counts above this

# (iterations small, iterations large, warm-up small, warm-up large), from OSU 7.4
OSU_DEFAULTS = {
    "latency": (10000, 1000, 100, 10),
    "bandwidth": (100, 20, 10, 2),
    "collective": (1000, 100, 100, 10),
}


@dataclass(frozen=True)
class Kernel:
    """A timed pattern of operations.

    pattern: ``pair`` uses rank 0 and rank N/2; ``pairs`` uses every rank r < N/2
    with r + N/2; ``all`` is every rank.
    sample: what one entry of the per-iteration time array is: ``rtt`` (a
    round trip, reported halved), ``window`` (W messages and the ack) or ``op``.
    """

    name: str
    family: str  # key into OSU_DEFAULTS
    pattern: str
    sample: str
    min_size: int
    max_size: int
    osu_title: str
    elem_bytes: int = 1  # sizes must be multiples of this (float32 reductions)
    directions: int = 1  # bibw moves bytes both ways
    algbw_ranks: bool = False  # nccl-tests: algbw counts S * n bytes
    busbw: str = ""  # nccl-tests bus-bandwidth factor: "", "allreduce", "(n-1)/n", "1"
    min_ranks: int = 2

    @property
    def collective(self) -> bool:
        return self.family == "collective"

    @property
    def windowed(self) -> bool:
        return self.sample == "window"

    def defaults(self, size: int) -> tuple[int, int]:
        """OSU's (iterations, warm-up) for one message size."""
        small_it, large_it, small_wu, large_wu = OSU_DEFAULTS[self.family]
        if size > LARGE_MESSAGE:
            return large_it, large_wu
        return small_it, small_wu

    def busbw_factor(self, ranks: int) -> float:
        """nccl-tests' factor from algorithm bandwidth to bus bandwidth."""
        if self.busbw == "allreduce":
            return 2.0 * (ranks - 1) / ranks
        if self.busbw == "(n-1)/n":
            return (ranks - 1) / ranks
        return 1.0

    def check_ranks(self, ranks: int) -> None:
        if ranks < self.min_ranks:
            raise UsageError(f"kernel {self.name!r} needs at least {self.min_ranks} ranks, got {ranks}")
        if self.pattern == "pairs" and ranks % 2:
            raise UsageError(
                f"kernel {self.name!r} pairs rank r with r + N/2 and needs an even rank count, got {ranks}"
            )


_ALL = [
    Kernel("latency", "latency", "pair", "rtt", 0, 4 * MiB, "Latency Test"),
    Kernel("bw", "bandwidth", "pair", "window", 1, 4 * MiB, "Bandwidth Test"),
    Kernel("bibw", "bandwidth", "pair", "window", 1, 4 * MiB, "Bi-Directional Bandwidth Test", directions=2),
    Kernel("msgrate", "bandwidth", "pairs", "window", 1, 4 * MiB, "Multiple Bandwidth / Message Rate Test"),
    Kernel("multi-latency", "latency", "pairs", "rtt", 0, 4 * MiB, "Multi Latency Test"),
    Kernel("allreduce", "collective", "all", "op", 4, MiB, "Allreduce Latency Test", elem_bytes=4, busbw="allreduce"),
    Kernel("allgather", "collective", "all", "op", 1, MiB, "Allgather Latency Test", algbw_ranks=True, busbw="(n-1)/n"),
    Kernel(
        "alltoall",
        "collective",
        "all",
        "op",
        1,
        MiB,
        "All-to-All Personalized Exchange Latency Test",
        algbw_ranks=True,
        busbw="(n-1)/n",
    ),
    Kernel("bcast", "collective", "all", "op", 1, MiB, "Broadcast Latency Test", busbw="1"),
    Kernel(
        "reduce_scatter",
        "collective",
        "all",
        "op",
        4,
        MiB,
        "Reduce_scatter Latency Test",
        elem_bytes=4,
        algbw_ranks=True,
        busbw="(n-1)/n",
    ),
    Kernel("barrier", "collective", "all", "op", 0, 0, "Barrier Latency Test"),
    Kernel("put", "latency", "pair", "op", 1, 4 * MiB, "_Put Latency Test"),
    Kernel("get", "latency", "pair", "op", 1, 4 * MiB, "_Get Latency Test"),
    Kernel("put-bw", "bandwidth", "pair", "window", 1, 4 * MiB, "_Put Bandwidth Test"),
    Kernel("get-bw", "bandwidth", "pair", "window", 1, 4 * MiB, "_Get Bandwidth Test"),
]
KERNELS: dict[str, Kernel] = {k.name: k for k in _ALL}


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise UsageError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}") from None


def peer_of(kernel: Kernel, rank: int, ranks: int) -> tuple[int, bool] | None:
    """(peer, initiator) for a point-to-point kernel, or None if this rank sits out."""
    half = ranks // 2
    if kernel.pattern == "pair":
        if rank == 0:
            return half, True
        if rank == half:
            return 0, False
        return None
    if rank < half:
        return rank + half, True
    if rank < 2 * half:
        return rank - half, False
    return None

"""What a plan costs in memory on one rank, refused before any rank starts when the host lacks it.

A rank holds one case (one kernel at one size) at a time. Its peak, measured
as RSS on real ranks, is what its kernel holds (Kernel.held_bytes): one send
and one receive buffer, whatever the window
(every message of a window is sent from the same send buffer and lands in the
same receive buffer, as osu_bw's s_buf and r_buf), written without
temporaries; with validation (-c), also the expected copy of what arrives and
the comparison's mask (a reduction's expected sum is built with int64
temporaries first); plus the sample array and rank 0's copies of it for the
statistics, plus MPI's requests for a window of messages in flight.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fabricbench.errors import UsageError
from fabricbench.hostinfo import announced_local_ranks
from fabricbench.measure.formatting import format_bytes
from fabricbench.measure.plan import Plan

SAMPLE_BYTES = 8  # the int64 sample array, one entry per iteration or warm-up iteration
STATS_BYTES = 32  # per timed iteration on rank 0: the samples' copy, as float64, sorted and scaled
REQUEST_BYTES = 1024  # per message in a window: MPI's request objects and the loop's handles
MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class Need:
    """A rank's peak for the plan's costliest (transport, kernel, size), in bytes, by what it is for."""

    transport: str
    kernel: str
    size: int
    ranks: int
    iterations: int
    window: int
    buffers: int
    samples: int
    requests: int

    @property
    def total(self) -> int:
        return self.buffers + self.samples + self.requests


def sample_bytes(iterations: int, warmup: int) -> int:
    """The sample array (it holds warm-up iterations too) and rank 0's copies for the statistics."""
    return SAMPLE_BYTES * max(iterations, warmup, 1) + STATS_BYTES * iterations


def plan_need(plan: Plan, ranks: int) -> Need | None:
    """The costliest (transport, kernel, size) of the plan on one rank, or None for an empty plan."""
    worst = None
    for step in plan.steps:
        kernel = step.kernel_def
        for size in step.sizes:
            iterations, warmup = plan.counts(kernel, size)
            window = plan.window if kernel.windowed else 0
            need = Need(
                step.transport,
                kernel.name,
                size,
                ranks,
                iterations,
                window,
                kernel.held_bytes(size, ranks, plan.validate),
                sample_bytes(iterations, warmup),
                REQUEST_BYTES * window * kernel.directions,
            )
            if worst is None or need.total > worst.total:
                worst = need
    return worst


def describe(need: Need) -> str:
    """One clause naming the size, the figure and what most of it is for."""
    parts = [
        (need.buffers, f"buffers for {need.kernel} at {format_bytes(need.size)} (-m)"),
        (need.samples, f"samples of {need.iterations} iterations (-i, -x)"),
        (need.requests, f"requests for a window of {need.window} (-W)"),
    ]
    most = max(parts, key=lambda part: part[0])[1]
    return (
        f"{need.transport} {need.kernel} at {format_bytes(need.size)} on {need.ranks} ranks needs about "
        f"{format_bytes(need.total)} per rank, most of it {most}"
    )


def available_bytes() -> int | None:
    """The kernel's MemAvailable: what can be allocated without swapping; None where there is no /proc."""
    try:
        with open(MEMINFO) as meminfo:
            for line in meminfo:
                name, _, value = line.partition(":")
                if name == "MemAvailable":
                    return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def local_rank_count(ranks: int) -> int:
    """Ranks that share this host: the launcher's word for it, else all of them (a self-launched run)."""
    announced = announced_local_ranks(os.environ)
    return announced[0] if announced else ranks


def check_memory(plan: Plan, ranks: int, local_ranks: int, limit: int | None) -> None:
    """Refuse (UsageError) a plan whose peak on one rank exceeds ``limit`` (--max-memory) or, without one,
    this host's available memory shared among its ``local_ranks``."""
    need = plan_need(plan, ranks)
    if need is None:
        return
    if limit is not None:
        if need.total > limit:
            raise UsageError(f"{describe(need)}; --max-memory allows {format_bytes(limit)}")
        return
    available = available_bytes()
    if available is None or need.total <= available // local_ranks:
        return
    share = f"{format_bytes(available // local_ranks)} for each of {local_ranks} ranks" if local_ranks > 1 else ""
    raise UsageError(
        f"{describe(need)}; this host has {format_bytes(available)} available{', ' + share if share else ''}"
        " (--max-memory sets another limit)"
    )

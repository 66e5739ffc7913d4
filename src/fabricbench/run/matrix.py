"""The all-pairs kernels on every rank: phase by phase, each pair timed by its transport's own loop.

For one size, every phase of the schedule (``fabricbench.measure.verdict``) runs
between barriers: each rank asks its transport for the case of its part in
the phase (``Transport.pair_case``: a source, a destination, both under
``shift``, or none), warms up, times, and validates when asked. The ranks
agree on the iteration count as ``runner.measure`` does, and the watchdog
bounds every phase. After each phase every rank sends rank 0 one vector: its
statistics as a source, from which rank 0 makes one row per (source,
destination).
"""

from __future__ import annotations

import math
import socket

import numpy as np

from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import Plan
from fabricbench.measure.rows import base_row
from fabricbench.measure.stats import bandwidth_MBps, latency_stats
from fabricbench.measure.verdict import per_node, phases
from fabricbench.transports.base import Case

STATS = ("lat_min_us", "lat_p50_us", "lat_mean_us", "lat_p90_us", "lat_p99_us", "lat_p999_us", "lat_max_us")
STATS += ("lat_stdev_us",)
# What every rank reports after a phase, gathered on rank 0: its destination (-1: none) and, as a source, its samples.
SUMMARY = ("dst", "iterations", "total_ns", "valid", "min_ns", *STATS)


class Idle(Case):
    """A rank with no part in this phase (a bye, or a rank left out by --per-node): it only meets the barriers."""

    def run(self, iterations: int, times: memoryview) -> None:
        pass

    def poison(self) -> None:
        pass


def participants(ctrl, per_node_only: bool) -> tuple[list[int], list[str]]:
    """The ranks that take part (all, or the lowest of each host) and every rank's host, on every rank alike."""
    hosts = [str(r.get("host", "")) for r in allgather_json(ctrl, {"host": socket.gethostname()}, "host list")]
    return (per_node(hosts) if per_node_only else list(range(ctrl.size))), hosts


def measure_pairs(ctrl, transport, kernel: Kernel, size: int, plan: Plan, watchdog, failure=None) -> list[dict]:
    """Time every ordered pair at one size; rank 0 returns the rows, the others an empty list.

    Raises Unsupported on every rank alike, before any traffic, where the
    transport cannot run the kernel at this size or --per-node leaves one rank.
    """
    from fabricbench.run.runner import check, stop_if_failed

    schedule = plan.pairs.schedule
    ranks, hosts = participants(ctrl, plan.pairs.per_node)
    if len(ranks) < 2:
        raise Unsupported(f"--per-node leaves one rank: all {ctrl.size} ranks are on {hosts[0]}")
    iterations, warmup = plan.counts(kernel, size)
    divisor = 2 if kernel.sample == "rtt" else 1
    gathered, method = [], ""
    stop_if_failed(ctrl, failure)  # the size's first barrier
    for number, phase in enumerate(phases(schedule, ranks), 1):
        send_to = next((dst for src, dst in phase if src == ctrl.rank), None)
        recv_from = next((src for src, dst in phase if dst == ctrl.rank), None)
        what = f"{transport.name} {kernel.name} at {size} B, {schedule} phase {number}"
        guess = watchdog.guess(plan, kernel, size, 2, warmup + iterations)
        watchdog.arm(plan.timeout, what, guess, guessed=True)
        case = transport.pair_case(kernel, size, send_to, recv_from) or Idle()
        try:
            times = np.zeros(max(iterations, warmup, 1), dtype=np.int64)
            view = memoryview(times)
            ctrl.barrier()
            case.run(warmup, view)
            count = iterations
            if plan.max_time and warmup:
                mine = float(np.median(times[:warmup])) if send_to is not None else 0.0
                estimate_ns = max(_estimate(ctrl, schedule, mine, send_to, recv_from), 1.0)
                count = max(1, min(iterations, int(plan.max_time * 1e9 / estimate_ns)))
            ctrl.barrier()
            case.run(count, view)
            valid = check(ctrl, case, kernel) if plan.validate else -1
        finally:
            case.close()
        summary = np.full(len(SUMMARY), math.nan)
        summary[0], summary[3] = -1.0, float(valid)
        if send_to is not None:
            samples = times[:count]
            stats = latency_stats(samples, divisor)
            summary[:5] = (send_to, count, float(samples.sum()), valid, float(samples.min()))
            summary[5:] = [stats[name] for name in STATS]
            if ctrl.rank == 0 and not method:
                method = case.method
        gathered.append(ctrl.gather(summary))
    watchdog.disarm()
    if ctrl.rank != 0:
        return []
    window = plan.window if kernel.windowed else 0
    rows = []
    for table in gathered:
        for src, vector in enumerate(table):
            if vector[0] >= 0:
                dst = int(vector[0])
                valids = {int(vector[3]), int(table[dst][3])}
                row = pair_row(plan, transport, kernel, size, len(ranks), schedule, vector, window)
                row.update(
                    method=method or transport.name,
                    src_rank=src,
                    dst_rank=dst,
                    src_host=hosts[src],
                    dst_host=hosts[dst],
                    warmup=warmup,
                    validation="off" if valids == {-1} else ("fail" if 0 in valids else "pass"),
                )
                rows.append(row)
    return sorted(rows, key=lambda row: (row["src_rank"], row["dst_rank"]))


def _estimate(ctrl, schedule: str, mine: float, send_to: int | None, recv_from: int | None) -> float:
    """The warm-up's ns per iteration that sets --max-time's count, alike on both ranks of a pair.

    isolated: each pair its own source's, so a slow pair in a round does not cut the fast ones' samples to
    its few. shift: every rank's loop waits on its neighbours', so all take the slowest, as measure() does.
    """
    if schedule == "shift":
        return ctrl.allreduce_max(mine)
    table = allgather_json(ctrl, {"ns": mine}, "warm-up estimates")
    source = ctrl.rank if send_to is not None else recv_from
    if source is None:
        return 0.0
    value = table[source].get("ns")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise PeerError(f"rank {source} sent a bad warm-up estimate {value!r}")
    return float(value)


def pair_row(plan, transport, kernel: Kernel, size: int, ranks: int, schedule: str, vector, window: int) -> dict:
    """One (source, destination) row from the source's summary vector (SUMMARY)."""
    fields = dict(zip(SUMMARY, vector, strict=True))
    row = base_row(plan, transport.name, kernel, size, ranks, transport.buffer)
    iterations, seconds = int(fields["iterations"]), fields["total_ns"] / 1e9
    row.update({name: float(fields[name]) for name in STATS})
    row.update(schedule=schedule, pairs=1, window=window, iterations=iterations, status="ok", note="")
    nan = math.nan
    row.update(bw_MBps=nan, bw_peak_MBps=nan, msgrate_per_s=nan, algbw_GBps=nan, busbw_GBps=nan)
    if kernel.windowed and seconds > 0:
        row["bw_MBps"] = float(bandwidth_MBps(size * window * iterations, seconds))
        row["bw_peak_MBps"] = float(bandwidth_MBps(size * window, fields["min_ns"] / 1e9))
        row["msgrate_per_s"] = window * iterations / seconds
    return row

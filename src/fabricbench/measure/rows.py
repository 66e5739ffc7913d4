"""Samples and per-rank summaries to one tidy row. Pure functions, no network."""

from __future__ import annotations

import math

import numpy as np

from fabricbench.measure.kernels import Kernel
from fabricbench.measure.stats import across_ranks, bandwidth_MBps, latency_stats, stability_note

# What every rank reports after a size: one float64 vector, gathered on rank 0.
SUMMARY = ("initiator", "iterations", "total_ns", "valid")
VALID_WORDS = {1: "pass", 0: "fail", -1: "off"}


def rank_summary(initiator: bool, iterations: int, samples_ns: np.ndarray, valid: int) -> np.ndarray:
    total = float(samples_ns.sum()) if initiator else 0.0
    return np.array([float(initiator), float(iterations), total, float(valid)])


def base_row(plan, transport: str, kernel: Kernel, size: int | None, ranks: int, buffer: str = "host") -> dict:
    return {
        "run_id": plan.run_id,
        "label": plan.label,
        "repeat": 0,
        "transport": transport,
        "kernel": kernel.name,
        "buffer": buffer,
        "size_B": size,
        "ranks": ranks,
        "sample": {"rtt": "rtt/2", "window": "window", "op": "op"}[kernel.sample],
    }


def unsupported_row(
    plan, transport: str, kernel: Kernel, size: int | None, ranks: int, reason: str, buffer: str = "host"
) -> dict:
    row = base_row(plan, transport, kernel, size, ranks, buffer)
    row.update(status=f"unsupported: {reason}", validation="off")
    return row


def measured_row(
    plan,
    transport: str,
    kernel: Kernel,
    size: int,
    case,
    warmup: int,
    samples_ns: np.ndarray,
    gathered: np.ndarray,
    buffer: str = "host",
) -> dict:
    """The row for one size: rank 0's own samples plus every rank's summary."""
    ranks = len(gathered)
    row = base_row(plan, transport, kernel, size, ranks, buffer)
    initiators = gathered[gathered[:, 0] == 1]
    iterations = int(initiators[0, 1]) if len(initiators) else 0
    divisor = 2 if kernel.sample == "rtt" else 1
    stats = latency_stats(samples_ns, divisor)
    means_us = initiators[:, 2] / initiators[:, 1] / 1000.0 / divisor
    stats.update(across_ranks(means_us))
    row.update(stats)
    row.update(
        method=case.method,
        pairs=case.pairs,
        window=case.window,
        iterations=iterations,
        warmup=warmup,
        status="ok",
        note=stability_note(samples_ns),
    )
    valid = gathered[:, 3]
    row["validation"] = "off" if (valid == -1).all() else ("fail" if (valid == 0).any() else "pass")
    nan = math.nan
    row.update(bw_MBps=nan, bw_peak_MBps=nan, msgrate_per_s=nan, algbw_GBps=nan, busbw_GBps=nan)
    if kernel.windowed:
        per_iteration = size * case.window * kernel.directions
        # Each initiator's own rate, summed: osu_mbw_mr's aggregate over pairs.
        iterations_each, seconds_each = initiators[:, 1], initiators[:, 2] / 1e9
        with np.errstate(divide="ignore", invalid="ignore"):  # a window timed at 0 ns is refused below
            row["bw_MBps"] = float(bandwidth_MBps(per_iteration * iterations_each, seconds_each).sum())
            row["msgrate_per_s"] = float((case.window * kernel.directions * iterations_each / seconds_each).sum())
            if len(samples_ns) and getattr(case, "window_holds_transit", True):
                row["bw_peak_MBps"] = float(bandwidth_MBps(per_iteration, float(samples_ns.min()) / 1e9))
    elif kernel.collective and kernel.moves_data:
        seconds = float(means_us.mean()) / 1e6
        algbw = kernel.collective_spec.algbw_bytes(size, ranks) / seconds / 1e9
        row["algbw_GBps"] = algbw
        row["busbw_GBps"] = algbw * kernel.busbw_factor(ranks)
    row.update(getattr(case, "row_fields", {}))
    if kernel.windowed:
        link_MBps, link_label = getattr(case, "link_MBps", None), getattr(case, "link_label", "")
        refuse_impossible(row, kernel.directions, max(1, len(initiators)), link_MBps, link_label)
    return row


def _mbps(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


def refuse_impossible(row: dict, directions: int, pairs: int, link_MBps: float | None, link_label: str = "") -> None:
    """Refuse, in place, each bandwidth figure of a windowed row that could not have happened: NaN in its cell,
    and the figure and why in the row's note.

    A rate from a window timed at 0 ns (or less) is impossible on any link. With a rate the hardware reports
    (``link_MBps``, one direction of the link), so is rank 0's peak above ``directions`` times it, and the sum
    over ``pairs`` initiators above ``pairs`` times that (each pair at most on a link of its own). A refused
    bw_MBps takes msgrate_per_s with it: the same bytes over the same time. NaN cells are left alone.
    """
    link = link_MBps if link_MBps is not None and link_MBps > 0 else None
    clauses = []
    for column, factor, why in (
        ("bw_peak_MBps", directions, "a window sample shorter than its bytes allow"),
        ("bw_MBps", directions * pairs, "windows timed shorter than their bytes allow"),
    ):
        value = row.get(column, math.nan)
        if math.isnan(value):
            continue
        if not math.isfinite(value) or value < 0:  # 0 MB/s is a zero-byte message's
            reason = "not a possible rate (a window timed at 0 ns or less)"
        elif link is not None and value > link * factor:
            parts = [f"{directions} directions"] if directions > 1 else []
            parts += [f"{pairs} pairs"] if factor > directions else []
            scope = f" of {' × '.join(parts)} at the {_mbps(link)} MB/s" if parts else ""
            where = f" ({link_label})" if link_label else ""
            reason = f"above the {_mbps(link * factor)} MB/s{scope} the link reports{where}; {why}"
        else:
            continue
        row[column] = math.nan
        also = ""
        if column == "bw_MBps" and not math.isnan(row.get("msgrate_per_s", math.nan)):
            row["msgrate_per_s"], also = math.nan, " (msgrate_per_s with it)"
        clauses.append(f"{column} {_mbps(value)}{also} refused: {reason}")
    if clauses:
        row["note"] = "; ".join(filter(None, [row.get("note", ""), *clauses]))

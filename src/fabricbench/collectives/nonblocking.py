"""Non-blocking collectives (``--method nonblocking``, OSU's osu_i*): the figures OSU prints beside the time.

OSU times the pure communication first (start, MPI_Wait), then, with a dummy compute as long as that pure
communication took on the rank, the overall time of start, compute (with its MPI_Test calls) and MPI_Wait. Each
rank keeps the means of its samples; OSU reports their means over the ranks, and the least and most pure
communication, and the overlap from the means:

    overlap % = max(0, 100 - (overall - (compute - test)) / pure × 100)

where ``compute`` holds the MPI_Test calls made within it (their time is ``test``), so ``compute - test`` is the
compute alone, the "Compute" OSU prints. Pure functions of numbers; the C loop (``fb_icollective``) measures them.
"""

from __future__ import annotations

from fabricbench.lazy import np

# fb_icollective's figures, in its order (ns, this rank's means), and the overall mean this side adds last.
PURE, COMPUTE, TEST, WAIT, START, OVERALL = range(6)
FIGURES = 6

# OSU 7.4's title of each non-blocking program, {lib} standing for the library, by fabricbench's kernel.
TITLES = {
    "allreduce": "{lib} Non-blocking Allreduce Latency Test",
    "allgather": "{lib} Non-blocking Allgather Latency Test",
    "alltoall": "{lib} Non-blocking All-to-All Latency Test",  # OSU 7.4 says no "Personalized Exchange" here
    "bcast": "{lib} Non-Blocking Broadcast Latency Test",  # "Blocking" capitalised, as OSU 7.4 prints it
    "reduce": "{lib} Non-blocking Reduce Latency Test",
    "reduce_scatter": "{lib} Non-blocking Reduce_scatter Latency Test",
    "barrier": "{lib} Non-blocking Barrier Latency Test",
    "gather": "{lib} Non-blocking Gather Latency Test",
    "gatherv": "{lib} Non-blocking Gatherv Latency Test",
    "scatter": "{lib} Non-blocking Scatter Latency Test",
    "scatterv": "{lib} Non-blocking Scatterv Latency Test",
    "allgatherv": "{lib} Non-blocking Allgatherv Latency Test",
    "alltoallv": "{lib} Non-blocking All-to-Allv Personalized Exchange Latency Test",
    "alltoallw": "{lib} Non-blocking All-to-Allw Personalized Exchange Latency Test",
    "reduce_scatter_block": "{lib} Non-blocking Reduce_scatter_block Latency Test",
    "neighbor_allgather": "{lib} Non-blocking Neighborhood Allgather Latency Test",
    "neighbor_allgatherv": "{lib} Non-blocking Neighborhood Allgatherv Latency Test",
    "neighbor_alltoall": "{lib} Non-blocking Neighborhood All-to-All Latency Test",
    "neighbor_alltoallv": "{lib} Non-blocking Neighborhood All-to-Allv Latency Test",
    "neighbor_alltoallw": "{lib} Non-blocking Neighborhood All-to-Allw Latency Test",
}
# OSU's line under the title of every non-blocking program.
OVERALL_LINE = "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait"


def overlap_percent(overall_us: float, compute_us: float, test_us: float, pure_us: float) -> float:
    """OSU's overlap: the share of the pure communication hidden behind the compute, floored at 0; ``compute_us``
    with its MPI_Test calls (``test_us``) in it. NaN where there was no pure communication to hide."""
    if not pure_us > 0:
        return float("nan")
    return max(0.0, 100.0 - (overall_us - (compute_us - test_us)) / pure_us * 100.0)


def row_fields(per_rank_ns: np.ndarray) -> dict[str, float]:
    """The row's figures from every rank's (FIGURES,) means in ns (rows: ranks): OSU's means over ranks, the least
    and most pure communication, and the overlap; "Compute" without its tests, as OSU prints it."""
    us = np.asarray(per_rank_ns, dtype=float).reshape(-1, FIGURES) / 1000.0
    mean = us.mean(axis=0)
    return {
        "compute_us": float(mean[COMPUTE] - mean[TEST]),
        "pure_comm_us": float(mean[PURE]),
        "pure_comm_min_us": float(us[:, PURE].min()),
        "pure_comm_max_us": float(us[:, PURE].max()),
        "init_us": float(mean[START]),
        "test_us": float(mean[TEST]),
        "wait_us": float(mean[WAIT]),
        "overlap_pct": overlap_percent(mean[OVERALL], mean[COMPUTE], mean[TEST], mean[PURE]),
    }


def bandwidths(kernel, size: int, ranks: int, fields: dict) -> dict[str, float]:
    """A non-blocking row's algbw_GBps and busbw_GBps (nccl-tests' formulas, ``Kernel.bandwidth``'s) over its pure
    communication: the overall time holds the dummy compute, which moves nothing. NaN where the kernel moves no
    data or nothing was timed."""
    pure_s = fields["pure_comm_us"] / 1e6
    if not kernel.moves_data or not pure_s > 0:
        return {"algbw_GBps": float("nan"), "busbw_GBps": float("nan")}
    algbw = kernel.collective_spec.algbw_bytes(size, ranks) / pure_s / 1e9
    return {"algbw_GBps": algbw, "busbw_GBps": algbw * kernel.busbw_factor(ranks)}

"""Samples to statistics to one tidy row, on hand-made numbers: fabricbench.rows and fabricbench.stats.

Every rank's summary is built with rank_summary, as the runner builds it, and gathered by stacking;
the case is plain data with the three fields measured_row reads.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fabricbench.kernels import get_kernel
from fabricbench.plan import Plan
from fabricbench.rows import measured_row, rank_summary, unsupported_row
from fabricbench.stats import across_ranks, bandwidth_MBps, latency_stats, stability_note

PLAN = Plan(steps=[], run_id="run-1", label="fabric-a")
NO_SAMPLES = np.zeros(0, dtype=np.int64)
RATES = ("bw_MBps", "bw_peak_MBps", "msgrate_per_s", "algbw_GBps", "busbw_GBps")


def ns(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def case(method: str = "persistent", pairs: int = 1, window: int = 0) -> SimpleNamespace:
    return SimpleNamespace(method=method, pairs=pairs, window=window)


def row_for(kernel: str, size: int, samples_ns: np.ndarray, summaries: list, **fields) -> dict:
    """measured_row on mpi with rank 0's samples and the ranks' summaries, as the runner calls it."""
    spec = get_kernel(kernel)
    return measured_row(PLAN, "mpi", spec, size, case(**fields), 2, samples_ns, np.stack(summaries))


def nan_except(row: dict, *measured: str) -> None:
    for column in RATES:
        assert math.isnan(row[column]) != (column in measured), column


# --- rank_summary and unsupported_row -----------------------------------------------------------------------------


def test_rank_summary_carries_the_total_only_from_an_initiator():
    samples = ns(100, 200, 300)
    assert rank_summary(True, 3, samples, 1).tolist() == [1.0, 3.0, 600.0, 1.0]
    assert rank_summary(False, 3, NO_SAMPLES, -1).tolist() == [0.0, 3.0, 0.0, -1.0]
    assert rank_summary(False, 3, samples, 0).tolist() == [0.0, 3.0, 0.0, 0.0]
    assert rank_summary(True, 3, samples, 1).dtype == np.float64


def test_unsupported_row_says_why_and_holds_no_number():
    row = unsupported_row(PLAN, "tcp", get_kernel("alltoall"), 8, 2, "tcp has no alltoall kernel")
    assert row == {
        "run_id": "run-1",
        "label": "fabric-a",
        "repeat": 0,
        "transport": "tcp",
        "kernel": "alltoall",
        "buffer": "host",
        "size_B": 8,
        "ranks": 2,
        "sample": "op",
        "status": "unsupported: tcp has no alltoall kernel",
        "validation": "off",
    }
    assert unsupported_row(PLAN, "mpi", get_kernel("allreduce"), None, 2, "x")["size_B"] is None


# --- measured_row -------------------------------------------------------------------------------------------------


def test_latency_row_halves_round_trips():
    rtt = ns(2000, 4000, 6000, 8000)  # µs one way: 1, 2, 3, 4
    row = row_for("latency", 8, rtt, [rank_summary(True, 4, rtt, -1), rank_summary(False, 4, NO_SAMPLES, -1)])
    assert row["sample"] == "rtt/2" and row["ranks"] == 2 and row["size_B"] == 8
    assert (row["run_id"], row["label"], row["transport"], row["kernel"], row["buffer"]) == (
        "run-1",
        "fabric-a",
        "mpi",
        "latency",
        "host",
    )
    assert (row["method"], row["pairs"], row["window"]) == ("persistent", 1, 0)
    assert (row["iterations"], row["warmup"], row["status"], row["note"]) == (4, 2, "ok", "")
    assert (row["lat_min_us"], row["lat_p50_us"], row["lat_mean_us"], row["lat_max_us"]) == (1.0, 2.0, 2.5, 4.0)
    # OSU's Min/Avg/Max over ranks: only the initiator's mean, halved as well.
    assert (row["lat_rank_min_us"], row["lat_rank_avg_us"], row["lat_rank_max_us"]) == (2.5, 2.5, 2.5)
    nan_except(row)


def test_windowed_row_sums_the_pairs_and_takes_the_peak_from_the_fastest_window():
    # msgrate on 4 ranks: two pairs, 1000-byte messages, 64 per window, 10 windows each.
    first = ns(500_000, *[1_000_000] * 8, 1_500_000)  # 10 ms in all; fastest window 0.5 ms
    second = np.full(10, 2_000_000, dtype=np.int64)  # 20 ms in all
    summaries = [
        rank_summary(True, 10, first, -1),
        rank_summary(True, 10, second, -1),
        rank_summary(False, 10, NO_SAMPLES, -1),
        rank_summary(False, 10, NO_SAMPLES, -1),
    ]
    row = row_for("msgrate", 1000, first, summaries, pairs=2, window=64)
    assert (row["sample"], row["pairs"], row["window"], row["iterations"]) == ("window", 2, 64, 10)
    # 64 000 bytes a window, MB = 10^6: 640 000 B in 10 ms is 64 MB/s, in 20 ms 32 MB/s; osu_mbw_mr adds them.
    assert row["bw_MBps"] == pytest.approx(64.0 + 32.0)
    assert row["msgrate_per_s"] == pytest.approx(64_000 + 32_000)
    assert row["bw_peak_MBps"] == pytest.approx(64_000 / 0.5e-3 / 1e6)  # 128 MB/s
    assert row["lat_p50_us"] == 1000.0  # a window's time, not halved
    nan_except(row, "bw_MBps", "bw_peak_MBps", "msgrate_per_s")


def test_bibw_counts_both_directions():
    windows = np.full(10, 1_000_000, dtype=np.int64)  # 10 ms in all
    summaries = [rank_summary(True, 10, windows, -1), rank_summary(False, 10, NO_SAMPLES, -1)]
    row = row_for("bibw", 1000, windows, summaries, window=64)
    assert row["bw_MBps"] == pytest.approx(2 * 64.0)
    assert row["bw_peak_MBps"] == pytest.approx(2 * 64.0)
    assert row["msgrate_per_s"] == pytest.approx(2 * 64_000)


@pytest.mark.parametrize(
    ("kernel", "ranks", "algbw", "busbw"),
    [
        # nccl-tests: allreduce algbw = S / t, busbw = algbw * 2(n-1)/n.
        ("allreduce", 2, 5.0, 5.0),
        ("allreduce", 4, 5.0, 7.5),
        # allgather counts S * n bytes, busbw = algbw * (n-1)/n.
        ("allgather", 4, 20.0, 15.0),
        ("bcast", 4, 5.0, 5.0),
    ],
)
def test_collective_row_has_nccl_tests_bandwidths(kernel, ranks, algbw, busbw):
    # 1 MB per rank; rank means alternate 100 µs and 300 µs, so t is their average, 200 µs.
    ops = {100: ns(100_000, 100_000), 300: ns(200_000, 400_000)}
    means = [100, 300] * (ranks // 2)
    summaries = [rank_summary(True, 2, ops[mean], 1) for mean in means]
    row = row_for(kernel, 1_000_000, ops[100], summaries)
    assert row["ranks"] == ranks and row["sample"] == "op" and row["validation"] == "pass"
    assert (row["lat_rank_min_us"], row["lat_rank_avg_us"], row["lat_rank_max_us"]) == (100.0, 200.0, 300.0)
    assert row["algbw_GBps"] == pytest.approx(algbw)
    assert row["busbw_GBps"] == pytest.approx(busbw)
    nan_except(row, "algbw_GBps", "busbw_GBps")


def test_barrier_row_has_no_bandwidth():
    ops = ns(10_000, 30_000)
    row = row_for("barrier", 0, ops, [rank_summary(True, 2, ops, -1), rank_summary(True, 2, ops, -1)])
    assert row["lat_rank_avg_us"] == 20.0
    nan_except(row)


@pytest.mark.parametrize(
    ("valid", "word"),
    [
        ((-1, -1), "off"),
        ((1, 1), "pass"),
        ((1, -1), "pass"),  # a rank that checks nothing does not fail the row
        ((1, 0), "fail"),
        ((0, -1), "fail"),
    ],
)
def test_validation_is_off_pass_or_fail_over_all_ranks(valid, word):
    rtt = ns(2000, 2000)
    summaries = [rank_summary(True, 2, rtt, valid[0]), rank_summary(False, 2, NO_SAMPLES, valid[1])]
    assert row_for("latency", 8, rtt, summaries)["validation"] == word


def test_a_drifting_run_carries_a_note():
    rtt = np.concatenate([np.full(500, 2000), np.full(500, 6000)]).astype(np.int64)
    summaries = [rank_summary(True, 1000, rtt, -1), rank_summary(False, 1000, NO_SAMPLES, -1)]
    assert row_for("latency", 8, rtt, summaries)["note"].startswith("unstable: ")


# --- stats --------------------------------------------------------------------------------------------------------


def test_latency_stats_take_nearest_rank_percentiles():
    samples = np.arange(1000, 0, -1, dtype=np.int64) * 1000  # 1..1000 µs, unsorted
    stats = latency_stats(samples)
    assert [stats[f"lat_{p}_us"] for p in ("p50", "p90", "p99", "p999")] == [500.0, 900.0, 990.0, 999.0]
    assert (stats["lat_min_us"], stats["lat_mean_us"], stats["lat_max_us"]) == (1.0, 500.5, 1000.0)
    assert stats["lat_stdev_us"] == pytest.approx(np.std(np.arange(1, 1001), ddof=1))
    assert len(stats) == 8
    # 7 samples: rank round(7 p / 100), so p50 is the 4th (3.5 rounds to even: 4), p90 the 6th, p99 the 7th.
    seven = latency_stats(ns(7000, 1000, 6000, 2000, 5000, 3000, 4000))
    assert (seven["lat_p50_us"], seven["lat_p90_us"], seven["lat_p99_us"]) == (4.0, 6.0, 7.0)


def test_latency_stats_of_one_or_no_sample():
    assert latency_stats(NO_SAMPLES) == {}
    one = latency_stats(ns(3000), divisor=2)
    assert one["lat_stdev_us"] == 0.0
    assert one["lat_min_us"] == one["lat_p999_us"] == one["lat_max_us"] == 1.5


def test_across_ranks_of_one_or_no_rank():
    assert across_ranks(np.zeros(0)) == {}
    assert across_ranks(np.array([4.5])) == {"lat_rank_min_us": 4.5, "lat_rank_avg_us": 4.5, "lat_rank_max_us": 4.5}


def test_bandwidth_counts_a_megabyte_as_a_million_bytes():
    assert bandwidth_MBps(1_000_000, 1.0) == 1.0
    assert bandwidth_MBps(1 << 20, 1.0) == pytest.approx(1.048576)
    both = bandwidth_MBps(np.array([1e6, 4e6]), np.array([0.5, 2.0]))
    assert both.tolist() == [2.0, 2.0]


def test_stability_note_flags_a_step_change():
    step = np.concatenate([np.full(500, 1000), np.full(500, 3000)]).astype(np.int64)
    # 20 blocks, medians ten at 1000 and ten at 3000: stdev 1000 * sqrt(20/19) over the median of medians, 2000.
    assert stability_note(step) == "unstable: block medians vary by 51%"


def test_stability_note_stays_quiet_on_flat_noise_and_on_few_samples():
    noise = np.random.default_rng(7).normal(1000, 100, 2000).astype(np.int64)
    assert stability_note(noise) == ""
    short_step = np.concatenate([np.full(25, 1000), np.full(24, 3000)]).astype(np.int64)
    assert stability_note(short_step) == ""  # under 50 samples: fewer than 5 blocks, nothing to compare

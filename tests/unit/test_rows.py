"""Samples to statistics to one tidy row, on hand-made numbers: fabricbench.measure.rows and fabricbench.measure.stats.

Every rank's summary is built with rank_summary, as the runner builds it, and gathered by stacking;
the case is plain data with the three fields measured_row reads.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.plan import Plan
from fabricbench.measure.rows import measured_row, rank_summary, refuse_impossible, unsupported_row
from fabricbench.measure.stats import across_ranks, bandwidth_MBps, latency_stats, stability_note

PLAN = Plan(steps=[], run_id="run-1", label="fabric-a")
NO_SAMPLES = np.zeros(0, dtype=np.int64)
RATES = ("bw_MBps", "bw_peak_MBps", "msgrate_per_s", "algbw_GBps", "busbw_GBps")
TAILS = ("bw_win_p50_MBps", "bw_win_p90_MBps", "bw_win_p99_MBps")


def ns(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def case(method: str = "persistent", pairs: int = 1, window: int = 0, **link) -> SimpleNamespace:
    """``link``: link_MBps, link_label, window_holds_transit, as a transport sets them."""
    return SimpleNamespace(method=method, pairs=pairs, window=window, **link)


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
    assert rank_summary(True, 3, samples, 1).tolist() == [1.0, 3.0, 600.0, 1.0, -1.0]  # no wrong elements counted
    assert rank_summary(False, 3, NO_SAMPLES, -1).tolist() == [0.0, 3.0, 0.0, -1.0, -1.0]
    assert rank_summary(False, 3, samples, 0).tolist() == [0.0, 3.0, 0.0, 0.0, -1.0]
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
        "placement": "out-of-place",
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


# --- figures no link could carry ------------------------------------------------------------------------------------

SOFTROCE = "rxe0 port 1, 10 Gb/s"
BURST = ns(91_000, *[4_000_000] * 9)  # 64 x 64 KiB windows: one reaped in a 91 µs burst, nine at 4 ms


def bw_row(kernel: str, samples: np.ndarray, size: int = 65536, **link) -> dict:
    summaries = [rank_summary(True, len(samples), samples, 1), rank_summary(False, len(samples), NO_SAMPLES, 1)]
    return row_for(kernel, size, samples, summaries, window=64, **link)


def test_a_peak_above_what_the_link_reports_is_refused_and_the_note_says_why():
    row = bw_row("bw", BURST, link_MBps=1250.0, link_label=SOFTROCE)
    # 64 x 65536 B in 91 µs would be 46 091 MB/s over a 10 Gb/s link.
    assert math.isnan(row["bw_peak_MBps"])
    why = "above the 1250 MB/s the link reports (rxe0 port 1, 10 Gb/s); a window sample shorter than its bytes allow"
    # Of 10 windows, OSU's P99 tail bandwidth is the fastest one: the same burst, refused with it.
    assert row["note"] == f"bw_peak_MBps 46091 refused: {why}; bw_win_p99_MBps 46091 refused: {why}"
    assert math.isnan(row["bw_win_p99_MBps"]) and row["bw_win_p90_MBps"] < 1250
    # The rest of the row stands: the average over all ten windows is possible, the window's time is what it was.
    assert row["bw_MBps"] == pytest.approx(64 * 65536 * 10 / 36.091e-3 / 1e6)  # 1162 MB/s
    assert row["msgrate_per_s"] > 0 and row["lat_min_us"] == 91.0 and row["validation"] == "pass"
    assert (row["status"], row["iterations"]) == ("ok", 10)


def test_a_possible_row_is_untouched():
    steady = np.full(10, 4_000_000, dtype=np.int64)  # 4 MB in 4 ms: 1049 MB/s on a 1250 MB/s link
    row = bw_row("bw", steady, link_MBps=1250.0, link_label=SOFTROCE)
    same = bw_row("bw", steady)  # as with no link rate at all, but for the link's own columns
    assert row.keys() - same.keys() == {"link", "link_MBps", "link_pct"}
    assert all(row[k] == same[k] or (math.isnan(row[k]) and math.isnan(same[k])) for k in same)
    assert row["note"] == "" and row["bw_peak_MBps"] == pytest.approx(64 * 65536 / 4e-3 / 1e6)


def test_a_row_of_one_link_says_what_share_of_it_its_bandwidth_is():
    steady = np.full(10, 4_000_000, dtype=np.int64)  # 1049 MB/s
    row = bw_row("bw", steady, link_MBps=1250.0, link_label="eth0 10 Gb/s")
    assert (row["link"], row["link_MBps"]) == ("eth0 10 Gb/s", 1250.0)
    assert row["link_pct"] == pytest.approx(100 * 64 * 65536 / 4e-3 / 1e6 / 1250)  # 83.9 %
    both = bw_row("bibw", np.full(10, 5_000_000, dtype=np.int64), link_MBps=1250.0)  # 1678 MB/s over both ways
    assert both["link_pct"] == pytest.approx(100 * 2 * 64 * 65536 / 5e-3 / 1e6 / 2500)
    assert "link_MBps" not in bw_row("bw", steady)  # no path known: blank


def test_a_latency_row_names_its_link_and_has_no_share_of_it():
    rtt = ns(2000, 4000)
    summaries = [rank_summary(True, 2, rtt, -1), rank_summary(False, 2, NO_SAMPLES, -1)]
    row = row_for("latency", 8, rtt, summaries, link_MBps=12421.0, link_label="mlx5_0 port 1, 4X EDR")
    assert (row["link"], row["link_MBps"]) == ("mlx5_0 port 1, 4X EDR", 12421.0) and "link_pct" not in row


def test_several_pairs_at_once_carry_the_link_but_no_share_of_it():
    windows = np.full(10, 1_000_000, dtype=np.int64)
    summaries = [rank_summary(True, 10, windows, -1)] * 2 + [rank_summary(False, 10, NO_SAMPLES, -1)] * 2
    row = row_for("msgrate", 1000, windows, summaries, pairs=2, window=64, link_MBps=70.0, link_label="eth0")
    assert row["link_MBps"] == 70.0 and "link_pct" not in row  # one NIC shared, or one each: not known here


def test_a_rate_that_is_no_bound_gives_a_share_and_refuses_nothing():
    # A shaper's bucket lets its burst through at the line's rate, SoftRoCE's port rate has no wire behind it.
    steady = np.full(10, 4_000_000, dtype=np.int64)  # 1049 MB/s
    row = bw_row("bw", steady, link_MBps=800.0, link_label="veth0 tbf 6.4 Gb/s", link_bound=False)
    assert row["note"] == "" and row["bw_MBps"] == pytest.approx(1048.576)
    assert row["link_pct"] == pytest.approx(100 * 1048.576 / 800)
    assert math.isnan(bw_row("bw", steady, link_MBps=800.0)["bw_MBps"])  # the same rate as a bound: refused


def test_bibw_may_carry_both_directions_of_the_link():
    windows = np.full(10, 5_000_000, dtype=np.int64)  # 2 x 64 x 64 KiB in 5 ms: 1678 MB/s
    kept = bw_row("bibw", windows, link_MBps=1250.0)
    assert kept["note"] == "" and kept["bw_MBps"] == pytest.approx(2 * 64 * 65536 / 5e-3 / 1e6)
    refused = bw_row("bibw", windows, link_MBps=800.0, link_label="eth2, 6400 Mb/s")
    assert math.isnan(refused["bw_MBps"]) and math.isnan(refused["msgrate_per_s"]) and refused["lat_p50_us"] == 5000
    above = "above the 1600 MB/s of 2 directions at the 800 MB/s the link reports (eth2, 6400 Mb/s)"
    tails = [f"{column} 1678 refused: {above}; a window sample shorter than its bytes allow" for column in TAILS]
    assert refused["note"] == "; ".join(
        [
            f"bw_peak_MBps 1678 refused: {above}; a window sample shorter than its bytes allow",
            *tails,  # OSU's tail bandwidths of both directions (rows.tail_window_bytes), held as the peak is
            f"bw_MBps 1678 (msgrate_per_s with it) refused: {above}; windows timed shorter than their bytes allow",
        ]
    )


def test_the_sum_over_pairs_may_carry_a_link_per_pair_but_a_pairs_peak_only_its_own():
    windows = np.full(10, 1_000_000, dtype=np.int64)  # 64 000 B a window in 1 ms: 64 MB/s each pair
    summaries = [rank_summary(True, 10, windows, -1)] * 2 + [rank_summary(False, 10, NO_SAMPLES, -1)] * 2
    row = row_for("msgrate", 1000, windows, summaries, pairs=2, window=64, link_MBps=40.0)
    assert math.isnan(row["bw_peak_MBps"]) and row["note"].startswith("bw_peak_MBps 64 refused: above the 40 MB/s")
    assert math.isnan(row["bw_MBps"])
    assert "; bw_MBps 128 (msgrate_per_s with it) refused: above the 80 MB/s of 2 pairs at the 40 MB/s" in row["note"]
    within = row_for("msgrate", 1000, windows, summaries, pairs=2, window=64, link_MBps=70.0)
    assert within["bw_MBps"] == pytest.approx(128.0) and within["note"] == ""


def test_a_window_timed_at_no_time_is_refused_on_any_link():
    row = bw_row("bw", ns(0, 4_000_000, 4_000_000))
    assert math.isnan(row["bw_peak_MBps"])
    assert row["note"] == "bw_peak_MBps inf refused: not a possible rate (a window timed at 0 ns or less)"
    assert row["bw_MBps"] > 0  # the total time is not zero
    backwards = bw_row("bw", ns(-5, 4_000_000))  # a clock read the wrong way round
    assert math.isnan(backwards["bw_peak_MBps"])
    assert backwards["note"].startswith("bw_peak_MBps -838860800 refused: not a possible rate")
    empty = bw_row("bw", ns(1000, 2000), size=0)  # zero bytes at 0 MB/s is a true figure
    assert (empty["bw_MBps"], empty["bw_peak_MBps"], empty["note"]) == (0.0, 0.0, "")


def test_a_window_that_does_not_hold_its_transit_gives_no_peak():
    row = bw_row("bibw", BURST, window_holds_transit=False)
    assert math.isnan(row["bw_peak_MBps"]) and row["bw_MBps"] > 0 and row["note"] == ""


def test_a_refusal_joins_the_stability_note():
    row = {"bw_MBps": 10.0, "bw_peak_MBps": 30.0, "msgrate_per_s": 5.0, "note": "unstable: block medians vary by 12%"}
    refuse_impossible(row, 1, 1, 20.0)
    assert row["note"] == (
        "unstable: block medians vary by 12%; "
        "bw_peak_MBps 30 refused: above the 20 MB/s the link reports; a window sample shorter than its bytes allow"
    )
    assert row["bw_MBps"] == 10.0 and row["msgrate_per_s"] == 5.0
    unknown = {"bw_MBps": 10.0, "bw_peak_MBps": 30.0, "note": ""}
    for link in (None, 0.0, math.nan):
        refuse_impossible(unknown, 1, 1, link)
        assert unknown == {"bw_MBps": 10.0, "bw_peak_MBps": 30.0, "note": ""}


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

"""Pure parts: statistics, rows and plans, without any network."""

from __future__ import annotations

import numpy as np
import pytest

from fabricbench.errors import UsageError
from fabricbench.measure.kernels import KERNELS, Pairing, get_kernel, partner_of
from fabricbench.measure.plan import kernel_sizes, parse_size, parse_size_range, sizes_between
from fabricbench.measure.stats import across_ranks, latency_stats, nearest_rank, stability_note


def test_percentiles_use_osus_nearest_rank():
    values = np.arange(1, 101, dtype=np.float64)  # 1..100
    assert nearest_rank(values, 50) == 50
    assert nearest_rank(values, 99) == 99
    assert nearest_rank(values, 99.9) == 100
    assert nearest_rank(np.array([7.0]), 99.9) == 7


def test_latency_stats_halve_round_trips_and_report_microseconds():
    rtt_ns = np.array([2000, 4000, 6000, 8000], dtype=np.int64)
    stats = latency_stats(rtt_ns, divisor=2)
    assert stats["lat_min_us"] == 1.0 and stats["lat_max_us"] == 4.0
    assert stats["lat_mean_us"] == 2.5 and stats["lat_p50_us"] == 2.0
    assert stats["lat_stdev_us"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))


def test_across_ranks_is_min_avg_max_of_means():
    assert across_ranks(np.array([1.0, 2.0, 6.0])) == {
        "lat_rank_min_us": 1.0,
        "lat_rank_avg_us": 3.0,
        "lat_rank_max_us": 6.0,
    }


def test_stability_note_flags_a_drifting_mean_but_not_spikes():
    steady = np.full(1000, 1000, dtype=np.int64)
    steady[::97] = 50000  # isolated spikes hit every block alike
    assert stability_note(steady) == ""
    drifting = np.concatenate([np.full(500, 1000), np.full(500, 3000)]).astype(np.int64)
    assert stability_note(drifting).startswith("unstable: block medians vary by")


def test_sizes_follow_osu_doubling():
    assert sizes_between(0, 8) == [0, 1, 2, 4, 8]
    assert sizes_between(3, 20) == [3, 6, 12]
    assert parse_size("4M") == 4 * 1024 * 1024 and parse_size("64KiB") == 65536
    assert parse_size_range("1K") == (-1, 1024)
    assert kernel_sizes(get_kernel("bw"), None)[0] == 1
    assert kernel_sizes(get_kernel("latency"), None)[-1] == 4 * 1024 * 1024
    assert kernel_sizes(get_kernel("barrier"), (1, 1024)) == [0]
    with pytest.raises(UsageError):
        parse_size_range("9:3")
    with pytest.raises(UsageError):
        parse_size("-4")


def test_pairs_match_osu_mbw_mr():
    msgrate = get_kernel("msgrate")
    assert [partner_of(msgrate, r, 4) for r in range(4)] == [(2, True), (3, True), (0, False), (1, False)]
    latency = get_kernel("latency")
    assert [partner_of(latency, r, 4) for r in range(4)] == [(2, True), None, (0, False), None]
    assert (msgrate.pairs(6), latency.pairs(6), get_kernel("allreduce").pairs(6)) == (3, 1, 1)
    with pytest.raises(UsageError, match="even rank count"):
        msgrate.check_ranks(3)
    latency.check_ranks(3)


def test_a_pattern_means_one_pairing():
    """Kernel.pairing says what the pattern's name means for pairing; every kernel of a pattern says the same."""
    pairings: dict[str, set[Pairing]] = {}
    for kernel in KERNELS.values():
        pairings.setdefault(kernel.pattern, set()).add(kernel.pairing)
    assert {pattern: pairing for pattern, (pairing,) in pairings.items()} == {
        "one-pair": Pairing.ONE,
        "concurrent-pairs": Pairing.HALVES,
        "all": Pairing.NONE,
        "all-pairs": Pairing.MESH,
        "gpu-routes": Pairing.NONE,
        "congestion": Pairing.MESH,
        "bisection": Pairing.MESH,
        "fan": Pairing.FAN,
    }


def test_busbw_factors_are_nccl_tests():
    assert get_kernel("allreduce").busbw_factor(8) == pytest.approx(2 * 7 / 8)
    assert get_kernel("allgather").busbw_factor(8) == pytest.approx(7 / 8)
    assert get_kernel("bcast").busbw_factor(8) == 1.0

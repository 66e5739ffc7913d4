"""``fabricbench model``'s pure parts on synthetic data: the Hockney fit, its segments and intervals, the projection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricbench.analysis.model import (
    ALGORITHMS,
    DEFAULT_RANKS,
    allreduce_time_us,
    busbw_GBps,
    fit_hockney,
    fit_line,
    project,
    segment_bounds,
)

SIZES = np.array([2.0**k for k in range(0, 23)])  # 1 B .. 4 MiB, as a sweep doubles


def hockney(sizes, alpha_us: float, beta_GBps: float) -> np.ndarray:
    return alpha_us + np.asarray(sizes) / (beta_GBps * 1e3)


def test_an_exact_line_is_recovered_exactly():
    alpha, slope, sse = fit_line(SIZES, hockney(SIZES, 1.5, 12.0))
    assert alpha == pytest.approx(1.5, rel=1e-9) and 1e-3 / slope == pytest.approx(12.0, rel=1e-9)
    assert sse == pytest.approx(0, abs=1e-20)


def test_one_regime_is_one_segment_with_its_alpha_beta_and_n_half():
    (segment,) = fit_hockney(SIZES, hockney(SIZES, 2.0, 10.0))
    assert (segment.size_min, segment.size_max, segment.sizes) == (1, 4 << 20, 23)
    assert segment.alpha_us == pytest.approx(2.0) and segment.beta_GBps == pytest.approx(10.0)
    assert segment.n_half_B == pytest.approx(2.0 * 10.0 * 1e3)  # 2 µs at 10^4 B/µs: 20 kB
    assert segment.alpha_lo_us == pytest.approx(2.0) and segment.beta_hi_GBps == pytest.approx(10.0)


def test_noisy_points_give_intervals_that_hold_the_truth_about_95_percent_of_the_time():
    held_alpha = held_beta = 0
    trials = 60
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        times = hockney(SIZES, 25.0, 0.012) * rng.lognormal(0, 0.03, len(SIZES))  # 3 % noise, a 12 MB/s link
        segment = fit_hockney(SIZES, times, seed=seed)[0]
        assert segment.beta_GBps == pytest.approx(0.012, rel=0.05) and segment.alpha_us == pytest.approx(25, rel=0.05)
        assert segment.alpha_hi_us - segment.alpha_lo_us < 5  # the interval says something
        held_alpha += segment.alpha_lo_us < 25.0 < segment.alpha_hi_us
        held_beta += segment.beta_lo_GBps < 0.012 < segment.beta_hi_GBps
    # The percentile bootstrap on 23 points is a little optimistic: 93 and 92 of 100 here.
    assert held_alpha >= 0.85 * trials and held_beta >= 0.85 * trials, (held_alpha, held_beta)
    assert fit_hockney(SIZES, times, seed=1) == fit_hockney(SIZES, times, seed=1)  # seeded: the same every time


def test_an_eager_to_rendezvous_switch_is_its_own_segment():
    small, large = SIZES[SIZES <= 8192], SIZES[SIZES > 8192]
    times = np.concatenate([hockney(small, 0.5, 4.0), hockney(large, 6.0, 11.0)])  # a jump in α, a change in β
    first, second = fit_hockney(SIZES, times)
    assert (first.size_max, second.size_min) == (8192, 16384)
    assert first.alpha_us == pytest.approx(0.5) and first.beta_GBps == pytest.approx(4.0)
    assert second.alpha_us == pytest.approx(6.0) and second.beta_GBps == pytest.approx(11.0)


def test_noise_alone_is_not_cut_and_a_cut_keeps_its_minimum_of_sizes():
    rng = np.random.default_rng(3)
    times = hockney(SIZES, 3.0, 5.0) * rng.lognormal(0, 0.02, len(SIZES))
    assert segment_bounds(SIZES, times) == [(0, len(SIZES))]
    # A regime of only two sizes at the end is too short to be a segment of its own.
    times = np.concatenate([hockney(SIZES[:-2], 1.0, 5.0), hockney(SIZES[-2:], 50.0, 1.0)])
    assert all(len(np.unique(SIZES[a:b])) >= 4 for a, b in segment_bounds(SIZES, times))


def test_repeated_sizes_stay_in_one_segment():
    sizes = np.repeat(SIZES[:12], 3)
    (segment,) = fit_hockney(sizes, hockney(sizes, 1.0, 2.0))
    assert segment.sizes == 12 and segment.alpha_us == pytest.approx(1.0)


def test_too_few_sizes_give_no_fit():
    assert fit_hockney([8, 16], [1.0, 1.1]) == []
    assert fit_hockney([8, 8, 8, 8], [1.0, 1.1, 1.0, 0.9]) == []


def test_a_flat_latency_has_an_unbounded_beta_and_no_n_half():
    sizes = np.array([1.0, 2, 4, 8, 16])
    (segment,) = fit_hockney(sizes, [5.0, 5.0, 4.9, 4.9, 4.8])  # a slope below 0: noise, no rate
    assert math.isinf(segment.beta_GBps) and math.isnan(segment.n_half_B)


def test_ring_recursive_doubling_and_tree_formulas():
    alpha, beta, n = 10.0, 2.0, 1e6  # n/β = 500 µs
    assert allreduce_time_us("ring", 2, n, alpha, beta) == pytest.approx(2 * 10 + 500)
    assert allreduce_time_us("ring", 4, n, alpha, beta) == pytest.approx(6 * 10 + 1.5 * 500)
    assert allreduce_time_us("recursive-doubling", 8, n, alpha, beta) == pytest.approx(3 * (10 + 500))
    assert allreduce_time_us("recursive-doubling", 5, n, alpha, beta) == pytest.approx(3 * (10 + 500))  # ⌈log2 5⌉
    assert allreduce_time_us("double-binary-tree", 1024, n, alpha, beta) == pytest.approx(20 * 10 + 2 * 500)
    with pytest.raises(ValueError):
        allreduce_time_us("butterfly", 2, n, alpha, beta)


def test_ring_bus_bandwidth_tends_to_beta_and_latency_dominates_at_scale():
    assert busbw_GBps(64, 1e9, allreduce_time_us("ring", 64, 1e9, 0.0, 12.5)) == pytest.approx(12.5)
    rows = project(5.0, 25.0, 1 << 30, DEFAULT_RANKS)
    assert len(rows) == len(ALGORITHMS) * len(DEFAULT_RANKS) and DEFAULT_RANKS[-1] == 100_000
    ring = {r["ranks"]: r for r in rows if r["algorithm"] == "ring"}
    tree = {r["ranks"]: r for r in rows if r["algorithm"] == "double-binary-tree"}
    assert ring[2]["time_us"] < tree[2]["time_us"]  # few ranks: the ring's bandwidth term wins
    assert tree[100_000]["time_us"] < ring[100_000]["time_us"]  # 2(N-1)α grows linearly, the tree's log N

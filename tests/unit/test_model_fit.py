"""``fabricbench model``'s pure parts on synthetic data: the Hockney fit, its segments and intervals, the projection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricbench.analysis.model import (
    ALGORITHMS,
    DEFAULT_RANKS,
    allreduce_time_us,
    alpha_beta,
    busbw_GBps,
    fit_hockney,
    fit_line,
    fit_tiers,
    hosts_per_switch,
    project,
    project_tree,
    segment_bounds,
    tree_allreduce_us,
    tree_model,
)
from fabricbench.errors import UsageError

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


def test_a_stream_whose_last_segment_does_not_grow_takes_beta_from_the_latency_fit():
    """A loaded host's bw sweep can end in sizes whose time per message does not grow (slope <= 0, an unbounded
    beta): the projection takes beta from the latency fit's last segment instead, and names where it came from."""
    latency = fit_hockney(SIZES, hockney(SIZES, 1.0, 8.0))
    flat = fit_hockney(SIZES, np.full(len(SIZES), 3.0))  # no growth at all: beta is infinite
    assert flat[-1].beta_GBps == math.inf
    alpha, alpha_from, beta, beta_from = alpha_beta(latency, flat)
    assert alpha == pytest.approx(1.0) and beta == pytest.approx(8.0)
    assert beta_from == "latency, last segment (bw's last segment has no positive slope)"
    stream = fit_hockney(SIZES, hockney(SIZES, 0.5, 12.0))
    assert alpha_beta(latency, stream)[2:] == (pytest.approx(12.0), "bw, last segment")
    assert alpha_beta(None, flat)[2] == math.inf  # nothing to fall back on: not usable, said by the caller


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


# --- by tier: all-pairs rows fitted per tier, and the fat-tree projection --------------------------------------------

TIER_SIZES = [2.0**k for k in range(0, 21, 2)]  # 1 B .. 1 MiB
SAME, CROSS = (2.0, 10.0), (6.0, 2.5)  # (alpha us, beta GB/s): across the uplink 3x the latency, a quarter the rate


def _pair_rows(tiers: dict[str, tuple[float, float]], hosts: int = 6) -> list[dict]:
    """pairs-latency (one-way p50) and pairs-bw rows of every ordered pair of ``hosts`` hosts, three a leaf, from
    Hockney's line of the pair's tier."""
    rows = []
    for a in range(hosts):
        for b in range(hosts):
            if a == b:
                continue
            tier = "same-switch" if a // 3 == b // 3 else "cross-switch"
            alpha, beta = tiers[tier]
            for size in TIER_SIZES:
                time_us = float(hockney(size, alpha, beta))
                base = {"src_host": f"h{a}", "dst_host": f"h{b}", "tier": tier, "size_B": size}
                rows.append(base | {"kernel": "pairs-latency", "lat_p50_us": time_us, "bw_MBps": math.nan})
                rows.append(base | {"kernel": "pairs-bw", "lat_p50_us": math.nan, "bw_MBps": size / time_us})
    return rows


def test_each_tier_gets_its_own_alpha_and_beta_from_the_pairs_of_that_tier():
    import pandas as pd

    tiers = fit_tiers(pd.DataFrame(_pair_rows({"same-switch": SAME, "cross-switch": CROSS})), seed=0)
    assert [t.tier for t in tiers] == ["same-switch", "cross-switch"]
    same, cross = tiers
    assert (same.pairs, cross.pairs) == (12, 18)  # 2 leaves x 3 x 2 ordered pairs within; 2 x 3 x 3 across
    assert same.alpha_us == pytest.approx(2.0, rel=1e-6) and same.beta_GBps == pytest.approx(10.0, rel=1e-6)
    assert cross.alpha_us == pytest.approx(6.0, rel=1e-6) and cross.beta_GBps == pytest.approx(2.5, rel=1e-6)
    assert same.beta_from == "bw, last segment" and set(same.fits) == {"latency", "bw"}


def test_the_hierarchical_allreduce_is_the_three_rings_and_the_flat_ring_pays_the_uplink_alpha_every_step():
    n, k, hosts, s = 2.0**30, 4, 64, 4.0
    leaves = hosts // k
    flat = tree_allreduce_us("ring", hosts, k, n, SAME, CROSS, s)
    # one flow crosses each leaf's uplinks: the leaf's k host links over s, capped at a host link
    assert flat == pytest.approx(2 * (hosts - 1) * 6.0 + 2 * (hosts - 1) / hosts * n / (min(10.0, k * 10.0 / s) * 1e3))
    hier = tree_allreduce_us("hierarchical", hosts, k, n, SAME, CROSS, s)
    within = 2 * (k - 1) * 2.0 + 2 * (k - 1) / k * n / 10e3
    across = 2 * (leaves - 1) * 6.0 + 2 * (leaves - 1) / leaves * (n / k) / (10.0 / s * 1e3)
    assert hier == pytest.approx(within + across)
    # one leaf: both are the ring within it
    assert tree_allreduce_us("hierarchical", 3, k, n, SAME, CROSS, s) == pytest.approx(
        allreduce_time_us("ring", 3, n, *SAME)
    )
    assert tree_allreduce_us("ring", 3, k, n, SAME, CROSS, s) == pytest.approx(allreduce_time_us("ring", 3, n, *SAME))
    # small messages at scale: alpha rules, and the hierarchy pays the uplink's alpha once a leaf, not once a host
    small = [tree_allreduce_us(a, 100_000, 32, 8, SAME, CROSS, s) for a in ("ring", "hierarchical")]
    assert small[0] / small[1] > 20
    with pytest.raises(ValueError):
        tree_allreduce_us("tree", hosts, k, n, SAME, CROSS, s)


def test_the_tree_model_takes_the_measured_oversubscription_or_the_given_one_and_names_what_it_lacks():
    import pandas as pd

    tiers = fit_tiers(pd.DataFrame(_pair_rows({"same-switch": SAME, "cross-switch": CROSS})))
    measured = tree_model(tiers, 3, "the run's topology", None)
    assert measured.oversubscription == pytest.approx(4.0, rel=1e-6) and "measured" in measured.oversubscription_from
    assert tree_model(tiers, 3, "", 2.0).oversubscription == 2.0
    rows = project_tree(measured, 2**20, [6, 96])
    assert [(r["algorithm"], r["hosts"], r["switches"]) for r in rows] == [
        ("ring", 6, 2),
        ("ring", 96, 32),
        ("hierarchical", 6, 2),
        ("hierarchical", 96, 32),
    ]
    with pytest.raises(UsageError, match="needs cross-switch pairs; the run has same-switch"):
        tree_model(tiers[:1], 3, "", None)
    shaped = tiers[1].__class__(**(vars(tiers[1]) | {"alpha_us": -47.0}))  # a shaper's burst under the sizes
    with pytest.raises(UsageError, match="needs cross-switch alpha and beta above 0: alpha -47 us"):
        tree_model([tiers[0], shaped], 3, "", None)
    with pytest.raises(UsageError, match="give --hosts-per-switch"):
        tree_model(tiers, None, "", None)
    metadata = {"topology": {"hosts": {f"h{i}": {"switch": f"leaf{i // 3}", "group": "spine"} for i in range(7)}}}
    assert hosts_per_switch(metadata) == 3 and hosts_per_switch({}) is None

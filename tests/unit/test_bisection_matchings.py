"""Netgauge's random matchings and the bisection rows' statistics (measure.bisection), without processes."""

from __future__ import annotations

import math

import pytest

from fabricbench.errors import UsageError
from fabricbench.measure.bisection import ALL, Matching, PairRate, effective_lines, matchings, tier_figures
from fabricbench.measure.plan import BisectionOptions


@pytest.mark.parametrize("count", [2, 3, 6, 7, 16])
def test_each_matching_is_perfect_and_an_odd_count_leaves_one_out(count):
    units = list(range(10, 10 + count))
    for matching in matchings(units, 20, seed=5):
        ends = [unit for pair in matching.pairs for unit in pair]
        assert len(ends) == len(set(ends)) == count - count % 2
        assert len(matching.pairs) == count // 2
        assert (matching.left_out is None) == (count % 2 == 0)
        assert sorted(ends + ([matching.left_out] if matching.left_out is not None else [])) == units


def test_matchings_are_reproducible_from_the_seed_and_differ_between_seeds_and_rounds():
    units = list(range(8))
    assert matchings(units, 8, 3) == matchings(units, 8, 3)
    assert matchings(units, 8, 3) != matchings(units, 8, 4)
    assert len({frozenset(m.pairs) for m in matchings(units, 8, 3)}) > 1


def test_over_many_rounds_every_unit_is_left_out_some_time():
    left = {m.left_out for m in matchings(range(5), 200, seed=0)}
    assert left == set(range(5))


def test_a_partner_is_found_both_ways_and_none_outside():
    matching = Matching(((0, 3), (2, 1)), left_out=4)
    assert [matching.partner(unit) for unit in range(5)] == [3, 2, 1, 0, None]


def test_figures_per_tier_and_all_from_synthetic_pairs():
    """Two matchings of two pairs: one fast same-switch pair and one slow cross-switch pair each."""
    rates = [
        PairRate(0, "same-switch", (100.0, 300.0)),  # 200 MB/s one way
        PairRate(0, "cross-switch", (10.0, 10.0)),
        PairRate(1, "same-switch", (400.0, 400.0)),
        PairRate(1, "cross-switch", (30.0, 10.0)),  # 20
    ]
    found = tier_figures(rates, 2, ("same-host", "same-switch", "cross-switch", "cross-group"))
    assert list(found) == [ALL, "same-switch", "cross-switch"]  # tiers no pair fell in give no row
    assert found[ALL]["bw_MBps"] == pytest.approx((200 + 10 + 400 + 20) / 4)
    assert found[ALL]["bw_p1_MBps"] == 10.0 and found[ALL]["bw_p50_MBps"] == 20.0  # nearest rank
    assert found["cross-switch"]["bw_MBps"] == 15.0 and found["cross-switch"]["tier_pairs"] == 2
    # Both directions, summed over a matching's pairs, averaged over the matchings; the tiers add up to all.
    assert found["cross-switch"]["aggregate_MBps"] == pytest.approx((20 + 40) / 2)
    assert found[ALL]["aggregate_MBps"] == pytest.approx((420 + 840) / 2)
    assert found[ALL]["aggregate_MBps"] == pytest.approx(
        found["same-switch"]["aggregate_MBps"] + found["cross-switch"]["aggregate_MBps"]
    )


def test_the_low_tail_is_the_rate_99_percent_of_the_pairs_reach():
    rates = [PairRate(0, "x", (float(v), float(v))) for v in range(1, 201)]
    found = tier_figures(rates, 1)
    assert list(found) == [ALL] and found[ALL]["bw_p1_MBps"] == 2.0 and found[ALL]["bw_p50_MBps"] == 100.0


def test_the_summary_reads_the_largest_size_beside_one_pair_alone():
    rows = [
        {"transport": "tcp", "size_B": size, "tier": ALL, "bw_MBps": bw, "bw_p1_MBps": 1.0, "pairs": 3}
        for size, bw in ((1024, 10.0), (65536, 50.0))
    ]
    rows.append({"transport": "tcp", "size_B": 65536, "tier": "cross-switch", "bw_MBps": 5.0})
    (line,) = effective_lines(rows, lambda row: 100.0 if row["size_B"] == 65536 else None)
    assert "tcp, 65536 B: 50.0 MB/s per pair (3 pairs at once" in line and "0.50x one pair alone" in line
    (alone,) = effective_lines(rows, lambda row: math.nan)
    assert "one pair alone" not in alone


@pytest.mark.parametrize(
    "options", [BisectionOptions(rounds=0), BisectionOptions(seed=-1), BisectionOptions(rounds=1.5)]
)
def test_bad_options_are_one_line(options):
    with pytest.raises(UsageError, match="--bisection-"):
        options.check()

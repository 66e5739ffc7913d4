"""The bracketed design of the reference benchmarks (benchmarks/paired.py): which pairs count, how speed modes
are told apart, and the verdicts. Pure logic, no processes."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from paired import AGREE, Pair, judge_bracketed, run_bracketed, split_modes  # noqa: E402


def test_every_contender_runs_between_two_reference_launches_and_shares_them():
    launches = []

    def launch(name):
        def run():
            launches.append(name)
            return len(launches)  # the launch's position: which reference launch bracketed what

        return run

    results = run_bracketed(random.Random(3), launch("R"), {"a": launch("a"), "b": launch("b"), "c": launch("c")})
    assert launches[::2] == ["R"] * 4 and sorted(launches[1::2]) == ["a", "b", "c"]
    for before, value, after in results.values():
        assert (before, after) == (value - 1, value + 1)


def test_a_pair_counts_only_when_its_references_agree():
    agreeing, switched = Pair(100, 105, 100 * AGREE), Pair(270, 300, 900)
    judged = judge_bracketed([agreeing] * 4 + [switched] * 3, 1.05, higher_is_better=False)
    assert (judged.kept, judged.total) == (4, 7)
    assert judged.modes[0].ratio.median == pytest.approx(105 / (100 * AGREE**0.5))


def test_two_speed_modes_are_judged_apart_and_the_worse_one_decides():
    fast = [Pair(270, 270 * r, 272) for r in (1.00, 1.01, 1.02, 0.99, 1.00)]  # meets <= 1.05
    slow = [Pair(900, 900 * r, 910) for r in (1.20, 1.18, 1.25, 1.22)]  # misses
    modes = split_modes(fast + slow)
    assert [len(m) for m in modes] == [5, 4] and modes[0][0].reference < modes[1][0].reference
    judged = judge_bracketed(fast + slow, 1.05, higher_is_better=False)
    assert judged.worst.count == 4 and judged.worst.ratio.median > 1.15
    assert judged.verdict.startswith("MISSED")
    # Pooled, the fast mode's pairs would have carried the median under the target: the miss would be hidden.
    assert sorted(p.ratio for p in fast + slow)[4] < 1.05


def test_references_that_differ_by_less_than_the_gap_are_one_mode():
    pairs = [Pair(r, r, r) for r in (100, 110, 125, 140, 160)]
    assert [len(m) for m in split_modes(pairs)] == [5]


def test_higher_is_better_puts_the_lowest_ratio_first():
    low = [Pair(10, 10 * 0.90, 10) for _ in range(3)]
    high = [Pair(40, 40 * 1.0, 40) for _ in range(3)]
    judged = judge_bracketed(low + high, 0.97, higher_is_better=True)
    assert judged.worst.ratio.median == pytest.approx(0.90) and judged.verdict.startswith("MISSED")


def test_too_few_kept_pairs_leave_the_figure_unresolved():
    judged = judge_bracketed([Pair(1, 1, 2), Pair(1, 1, 1), Pair(3, 3, 1)], 1.05, higher_is_better=False)
    assert judged.worst is None and judged.verdict == "unresolved: 1 of 3 pairs kept"


def test_launch_modes_compare_each_tool_within_the_speed_mode_its_launches_landed_in():
    from paired import judge_modes

    # Both tools land in a fast (about 0.4 us) and a slow (about 1.2 us) mode; in each, ours is 2 % slower.
    reference = [0.40, 0.41, 0.39, 0.40, 1.20, 1.22, 1.19]
    ours = [0.408, 0.418, 0.398, 1.224, 1.244, 1.214, 1.22]
    modes, worst, verdict = judge_modes(reference, ours, 1.05, higher_is_better=False)
    assert [(len(m.reference), len(m.ours)) for m in modes] == [(4, 3), (3, 4)]
    assert all(m.ratio.median == pytest.approx(1.02, abs=0.005) for m in modes)
    assert not verdict.startswith("MISSED")
    # Pooled, the ratio of medians says which mode more of each tool's launches landed in: 3x, not 2 %.
    import statistics

    assert statistics.median(ours) / statistics.median(reference) > 2


def test_a_tool_whose_launches_all_sit_apart_is_not_judged_in_a_mode_it_has_no_launch_in():
    from paired import judge_modes

    modes, worst, verdict = judge_modes([1.0] * 6, [3.0] * 6, 1.05, higher_is_better=False)
    assert [(len(m.reference), len(m.ours)) for m in modes] == [(6, 0), (0, 6)]
    assert worst is None and verdict == "unresolved: 6 vs 0 launches, 0 vs 6 launches"

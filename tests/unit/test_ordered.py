"""measure.ordered: the median and MAD of a sorted multiset less others, against sorting what is left."""

from __future__ import annotations

import random

import numpy as np
import pytest

from fabricbench.measure.ordered import Remaining, mad, median


def _sorted_middle(values: list[float]) -> float:
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


@pytest.mark.parametrize("seed", range(40))
def test_what_is_left_has_the_median_and_mad_of_sorting_it(seed):
    draw = random.Random(seed)
    for _ in range(50):
        # ties (whole numbers), negatives, and a spread of sizes, so duplicates straddle what is taken out
        values = [draw.choice([draw.random(), float(draw.randint(0, 5)), draw.gauss(0, 1)]) for _ in range(60)]
        values = values[: draw.randint(1, 60)]
        remaining = Remaining(np.array(values))
        left = list(values)
        gone = draw.sample(left, draw.randint(0, len(left) // 2))
        for value in gone:
            left.remove(value)
        cuts = sorted(draw.sample(range(len(gone) + 1), min(3, len(gone) + 1)))
        for first, end in zip([0, *cuts], [*cuts, len(gone)], strict=True):  # taken out a few at a time, as uplinks
            remaining.take_out(np.array(gone[first:end]))
        without = draw.sample(left, draw.randint(0, len(left)))
        for value in without:
            left.remove(value)
        count, centre, spread = remaining.stats(np.sort(np.array(without)))
        if not left:
            assert count == 0
            continue
        expected_centre = _sorted_middle(left)
        assert (count, centre, spread) == (
            len(left),
            expected_centre,
            _sorted_middle([abs(v - expected_centre) for v in left]),
        )


def test_the_plain_median_and_mad():
    assert median(np.array([3.0, 1.0, 2.0])) == 2.0 and median(np.array([4.0, 1.0, 2.0, 3.0])) == 2.5
    assert np.isnan(median(np.array([])))
    assert mad(np.array([1.0, 2.0, 4.0, 8.0]), 3.0) == 1.5

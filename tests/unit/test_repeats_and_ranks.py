"""run --repeat and --ranks without processes: the bootstrap, the schedule, the plan on the wire, compare's table."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fabricbench.analysis.compare import MIN_REPEATS, comparison_table, report
from fabricbench.analysis.load import Series, by_rank_count
from fabricbench.errors import UsageError
from fabricbench.launch.peer import check_wire_steps, decode_hello, encode_hello
from fabricbench.measure.plan import Plan, Step, parse_rank_counts
from fabricbench.measure.stats import bootstrap_median, bootstrap_ratio, significant

# ---- the bootstrap ---------------------------------------------------------------------------------------------


def test_constant_values_give_a_point_interval_and_a_ratio_of_one_that_is_not_significant():
    assert bootstrap_median([2.5] * 5) == (2.5, 2.5, 2.5)
    ratio, low, high = bootstrap_ratio([2.5] * 5, [2.5] * 5)
    assert (ratio, low, high) == (1.0, 1.0, 1.0)
    assert not significant(low, high)


def test_the_same_values_give_the_same_interval_every_time():
    values = [1.0, 1.3, 0.9, 1.1, 1.05]
    assert bootstrap_median(values) == bootstrap_median(list(values))
    assert bootstrap_ratio(values, values[::-1]) == bootstrap_ratio(values, values[::-1])


def test_nothing_to_summarise_is_nan_and_nan_values_are_dropped():
    assert all(math.isnan(v) for v in bootstrap_median([]))
    assert all(math.isnan(v) for v in bootstrap_ratio([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]))
    assert bootstrap_median([1.0, math.nan, 3.0, 2.0])[0] == 2.0


def test_the_median_interval_covers_the_true_median_about_as_often_as_it_says():
    """Normal samples of 15 (median 10): the 95 % interval holds 10 in at least 88 % of 300 seeded trials."""
    rng = np.random.default_rng(7)
    trials = [bootstrap_median(rng.normal(10.0, 1.0, 15), resamples=2000) for _ in range(300)]
    covered = np.mean([low <= 10.0 <= high for _, low, high in trials])
    assert covered >= 0.88, covered


def _flagged(shift: float, repeats: int, trials: int, seed: int) -> float:
    """The share of trials whose ratio is significant: two samples of ``repeats`` from a log-normal with 3 %
    spread, the second scaled by ``shift``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        base = rng.lognormal(0.0, 0.03, repeats)
        other = shift * rng.lognormal(0.0, 0.03, repeats)
        hits += significant(*bootstrap_ratio(base, other, resamples=2000)[1:])
    return hits / trials


def test_under_no_difference_few_ratios_are_significant():
    """The false alarms of the percentile bootstrap (README states these figures: 10 %, 2.3 %, 2.5 %)."""
    assert _flagged(1.0, 3, 400, seed=1) <= 0.12
    assert _flagged(1.0, 5, 400, seed=1) <= 0.06
    assert _flagged(1.0, 9, 400, seed=1) <= 0.06


def test_a_ten_percent_difference_is_found_at_five_repeats():
    assert _flagged(1.10, 5, 200, seed=3) >= 0.95
    assert _flagged(0.90, 5, 200, seed=4) >= 0.95


def test_the_ratio_interval_is_around_the_ratio_of_medians():
    ratio, low, high = bootstrap_ratio([1.0, 1.1, 0.9, 1.0, 1.05], [2.0, 2.2, 1.8, 2.0, 2.1])
    assert ratio == pytest.approx(2.0)
    assert 1.6 < low <= ratio <= high < 2.5
    assert significant(low, high)


# ---- the schedule and the plan ---------------------------------------------------------------------------------


def _plan(**fields) -> Plan:
    steps = [Step("mpi", "latency", [0, 1]), Step("tcp", "latency", [0, 1]), Step("mpi", "allreduce", [4, 8])]
    return Plan(steps=steps, **fields)


def test_repeats_interleave_and_odd_repeats_run_the_steps_backwards():
    order = [(e.repeat, e.step.transport, e.step.kernel) for e in _plan(repeat=3).schedule()]
    forward = [("mpi", "latency"), ("tcp", "latency"), ("mpi", "allreduce")]
    assert order == [(r, *s) for r, steps in enumerate([forward, forward[::-1], forward]) for s in steps]


def test_ranks_repeat_only_the_collectives_smallest_first():
    entries = _plan(ranks=[2, 4]).schedule()
    assert [(e.step.kernel, e.ranks) for e in entries] == [
        ("latency", None),
        ("latency", None),
        ("allreduce", 2),
        ("allreduce", 4),
    ]


def test_the_plan_keeps_repeat_and_ranks_through_json_and_an_older_json_reads_with_defaults():
    plan = _plan(repeat=4, ranks=[2, 4])
    again = Plan.from_json(plan.to_json())
    assert (again.repeat, again.ranks) == (4, [2, 4])
    older = json.loads(plan.to_json())
    del older["repeat"], older["ranks"]
    read = Plan.from_json(json.dumps(older).encode())
    assert (read.repeat, read.ranks) == (1, [])


def test_a_peer_hello_carries_the_interleaved_schedule_as_plain_steps():
    steps = [Step("tcp", "latency", [0, 8]), Step("tcp", "bw", [8])]
    plan = Plan(steps=steps, run_id="r1", repeat=3, iterations=10)
    decoded, _, _ = decode_hello(encode_hello(plan, None), {})
    assert decoded.repeat == 1
    assert [s.kernel for s in decoded.steps] == ["latency", "bw", "bw", "latency", "latency", "bw"]
    assert [e.step.kernel for e in decoded.schedule()] == [e.step.kernel for e in plan.schedule()]


def test_a_peer_plan_over_the_servers_step_limit_is_refused_before_connecting():
    plan = Plan(steps=[Step("tcp", "latency", [8])] * 2, repeat=40)
    with pytest.raises(UsageError, match="at most 64 steps .* this has 80"):
        check_wire_steps(plan)


@pytest.mark.parametrize(("text", "expected"), [("2,4,8", [2, 4, 8]), ("8,2,2", [2, 8]), (" 4 ", [4])])
def test_rank_counts_parse_sorted_and_once(text, expected):
    assert parse_rank_counts(text) == expected


@pytest.mark.parametrize(("text", "message"), [("2,x", "must be a whole number"), ("0", "at least 1"), (",", "no")])
def test_bad_rank_counts_name_the_problem(text, message):
    with pytest.raises(UsageError, match=message):
        parse_rank_counts(text)


# ---- compare on repeated rows ----------------------------------------------------------------------------------


def _tidy(values: dict[str, list[float]]) -> pd.DataFrame:
    """Latency rows at one size for each letter, a repeat per value."""
    rows = []
    for letter, latencies in values.items():
        for repeat, latency in enumerate(latencies):
            rows.append(
                {
                    "kernel": "latency", "size_B": 8.0, "series": letter, "letter": letter, "transport": "mpi",
                    "buffer": "host", "method": "", "run_id": letter, "source": letter, "status": "ok",
                    "validation": "off", "sample": "rtt/2", "repeat": str(repeat), "lat_p50_us": latency,
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def _series(letters) -> list[Series]:
    return [Series(letter, letter, letter, letter, "mpi", "host", {}) for letter in letters]


def test_repeated_rows_compare_as_medians_with_intervals_and_a_verdict():
    tidy = _tidy({"A": [1.0, 1.1, 0.9, 1.0, 1.05], "B": [2.0, 2.2, 1.8, 2.0, 2.1], "C": [1.0, 1.02, 0.98, 1.01, 0.99]})
    table = comparison_table(tidy, ["lat_p50_us"]).set_index("letter")
    assert list(table["repeats"]) == [5, 5, 5]
    assert table.loc["B", "lat_p50_us"] == 2.0 and table.loc["B", "lat_p50_us_ratio"] == 2.0
    assert table.loc["B", "lat_p50_us_low"] <= 2.0 <= table.loc["B", "lat_p50_us_high"]
    assert table.loc["B", "lat_p50_us_significance"] == "significant"
    assert table.loc["C", "lat_p50_us_significance"] == "not significant"
    assert table.loc["A", "lat_p50_us_significance"] == ""  # the baseline is not divided by itself
    text = report(_series("ABC"), table.reset_index(), {"latency": ["lat_p50_us"]}, [])
    assert "# repeats: A 5, B 5, C 5; values are medians over repeats with 95% bootstrap intervals" in text
    line = next(line for line in text.splitlines() if line.strip().startswith("8 B"))
    assert "not significant" in line and " significant" in line.replace("not significant", "")


def test_too_few_repeats_get_no_verdict_and_the_console_says_why():
    tidy = _tidy({"A": [1.0, 1.1], "B": [2.0, 2.2]})
    table = comparison_table(tidy, ["lat_p50_us"])
    assert list(table["lat_p50_us_significance"]) == ["", ""]
    text = report(_series("AB"), table, {"latency": ["lat_p50_us"]}, [])
    assert f"both sides have {MIN_REPEATS} repeats or more" in text


def test_rows_without_repeats_keep_todays_columns():
    table = comparison_table(_tidy({"A": [1.0], "B": [2.0]}), ["lat_p50_us"])
    assert "repeats" not in table.columns and "lat_p50_us_low" not in table.columns
    assert list(table["lat_p50_us_ratio"]) == [1.0, 2.0]


def test_a_kernel_on_several_rank_counts_is_named_per_count():
    rows = pd.DataFrame({"kernel": ["allreduce", "allreduce", "latency"], "ranks": [2, 4, 4]})
    named = by_rank_count(rows)
    assert list(named["kernel"]) == ["allreduce on 2 ranks", "allreduce on 4 ranks", "latency"]
    assert list(named["scaling"]) == ["allreduce", "allreduce", ""]

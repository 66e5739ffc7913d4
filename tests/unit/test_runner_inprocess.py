"""The runner, every pattern and rank 0's reporter, run in-process: thread-ranks (tests/inprocess.py) moving
real bytes through in-memory links, ``runner.execute`` as the ranks run it, and the table read back from disk.

No assertion here is about how fast anything went: only counts, columns, validation and what a figure can be.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fabricbench.analysis.load import read_run
from fabricbench.measure.plan import AllPairsOptions, BisectionOptions, Plan, Step
from fabricbench.measure.results import CSV_NAME, META_NAME, PARQUET_NAME, prepare_out_dir
from fabricbench.measure.schema import INTEGER, NUMERIC
from inprocess import Aborted, RanksFailed, ThreadRanks

ITERATIONS, WARMUP, WINDOW = 3, 1, 2
TIMEOUT_S = 300.0  # the runner's watchdog ends the process when it fires: far beyond any wait in-process
NUMBERS = ["lat_min_us", "lat_p50_us", "lat_max_us", "bw_MBps", "bw_peak_MBps", "msgrate_per_s", "algbw_GBps"]


@pytest.fixture
def memory_transport(monkeypatch):
    """The in-memory transport in the registry, as ``memory``, for one test."""
    from fabricbench import transports

    monkeypatch.setitem(transports.TRANSPORTS, "memory", ("inprocess", "MemoryTransport"))


@dataclass
class Finished:
    """A run's table and metadata as read back from disk, its console text, and every rank's Case.run calls."""

    out: Path
    rows: pd.DataFrame
    metadata: dict
    console: str
    runs: list[tuple[int, str, int, int]]
    failed_validation: int

    def counts(self, rank: int) -> list[tuple[int, int, int]]:
        """The (warm-up, timed, check) counts of every case ``rank`` ran, in order: three Case.run calls each."""
        made = [count for who, _, _, count in self.runs if who == rank]
        return list(zip(made[0::3], made[1::3], made[2::3], strict=True))


@pytest.fixture
def measure(tmp_path, memory_transport):
    """``measure(ranks, steps, memory=None, **plan_fields)``: a plan of ``steps`` (Plan's fields from the module's
    counts, overridden by ``plan_fields``; ``memory``: the in-memory transport's options) run by runner.execute on
    ``ranks`` thread-ranks, rank 0's Reporter writing the table into tmp_path/runN as orchestrate.execute_plan
    builds and closes it."""
    from fabricbench.launch import metadata as env
    from fabricbench.run.reporter import Reporter
    from fabricbench.run.runner import execute

    runs_made = itertools.count()

    def run(thread_ranks: int, steps: list[Step], memory: dict | None = None, **fields) -> Finished:
        out = tmp_path / f"run{next(runs_made)}"
        settings = dict(iterations=ITERATIONS, warmup=WARMUP, window=WINDOW, validate=True, timeout=TIMEOUT_S)
        settings.update(run_id="in-process", label="threads", transport_options={"memory": memory or {}})
        plan = Plan(steps=steps, out_dir=str(out), **(settings | fields))
        prepare_out_dir(plan.out_dir)
        console = io.StringIO()

        def rank_main(ctrl):
            ranks_info = ctrl.gather_json(env.rank_info())
            reporter = None
            if ctrl.rank == 0:
                reporter = Reporter(plan, out, env.run_metadata(plan, ranks_info, None), ctrl.size, console)
            execute(plan, ctrl, reporter)
            if reporter:
                reporter.close()
                return reporter.failed_validation
            return None

        world = ThreadRanks(thread_ranks)
        failed_validation = world.run(rank_main)[0]
        frame, metadata = read_run(out)
        return Finished(out, frame, metadata, console.getvalue(), world.runs, failed_validation)

    return run


def step(kernel: str, sizes: list[int]) -> Step:
    return Step("memory", kernel, sizes)


def measured(rows: pd.DataFrame) -> None:
    """Every row ok, validated, with the plan's counts."""
    assert (rows.status == "ok").all(), rows.status.tolist()
    assert (rows.validation == "pass").all()
    assert (rows.iterations == ITERATIONS).all() and (rows.warmup == WARMUP).all()
    assert (rows.lat_min_us <= rows.lat_p50_us).all() and (rows.lat_p50_us <= rows.lat_max_us).all()


# ---- every pattern's rows --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ranks", [2, 4])
def test_pair_kernels_give_one_validated_row_per_size(measure, ranks):
    """pattern "one-pair" (rank 0 with rank N/2) and "concurrent-pairs" (every r < N/2 with r + N/2, all at once)."""
    sizes = {"latency": [0, 4096], "bw": [1, 4096], "bibw": [64], "msgrate": [64], "multi-latency": [8]}
    done = measure(ranks, [step(kernel, at) for kernel, at in sizes.items()])
    rows = done.rows
    measured(rows)
    assert list(zip(rows.kernel, rows.size_B, strict=True)) == [(k, z) for k, at in sizes.items() for z in at]
    assert (rows.transport == "memory").all() and (rows.ranks == ranks).all()
    assert rows.method.str.startswith("in-memory queue").all()
    assert rows.src_rank.isna().all() and rows.src_gpu.isna().all() and (rows.schedule == "").all()
    windowed = rows.kernel.isin(["bw", "bibw", "msgrate"])
    assert (rows.window == np.where(windowed, WINDOW, 0)).all()
    assert (rows["sample"] == np.where(windowed, "window", "rtt/2")).all()
    assert (rows.pairs == np.where(rows.kernel.isin(["msgrate", "multi-latency"]), ranks // 2, 1)).all()
    # Rank 0 and rank N/2 took part in every size: its warm-up, its timed count and the check, like every rank.
    cases = sum(len(at) for at in sizes.values())
    assert done.counts(0) == done.counts(ranks // 2) == [(WARMUP, ITERATIONS, 1)] * cases
    assert all(set(done.counts(rank)) <= {(WARMUP, ITERATIONS, 1)} for rank in range(ranks))


@pytest.mark.parametrize("ranks", [2, 4])
def test_an_allreduce_sums_every_ranks_vector_and_refuses_a_size_off_its_element(measure, ranks):
    rows = measure(ranks, [step("allreduce", [2, 4, 1024])]).rows
    assert rows.size_B.tolist() == [2, 4, 1024]
    off = rows.iloc[0]
    assert off.status == "unsupported: size is not a multiple of the 4-byte element"
    assert off.validation == "off" and math.isnan(off.lat_p50_us)
    good = rows.iloc[1:]
    measured(good)
    assert (good.ranks == ranks).all() and (good.pairs == 1).all()
    assert (good.algbw_GBps > 0).all() and np.isfinite(good.algbw_GBps).all()
    np.testing.assert_allclose(good.busbw_GBps, good.algbw_GBps * 2 * (ranks - 1) / ranks, rtol=1e-6)


def test_an_allreduce_of_another_element_is_checked_against_its_own_sum(measure):
    """A char's sum wraps modulo 256 on four ranks: the check must expect the wrapped sum, and an int's the whole."""
    rows = measure(4, [Step("memory", "allreduce", [64], "MPI_CHAR"), Step("memory", "allreduce", [64], "MPI_INT")])
    measured(rows.rows)
    assert len(rows.rows) == 2


@pytest.mark.parametrize("ranks, schedule", [(4, "isolated"), (3, "isolated"), (4, "shift")])
def test_all_pairs_kernels_give_a_row_per_ordered_pair_and_a_verdict(measure, ranks, schedule):
    """Three ranks in isolated phases leave one rank out of each round (a bye)."""
    done = measure(
        ranks, [step("pairs-latency", [1]), step("pairs-bw", [1, 256])], pairs=AllPairsOptions(schedule=schedule)
    )
    rows = done.rows
    measured(rows)
    every_pair = sorted((s, d) for s in range(ranks) for d in range(ranks) if s != d)
    for (kernel, size), at_size in rows.groupby(["kernel", "size_B"]):
        assert sorted(zip(at_size.src_rank, at_size.dst_rank, strict=True)) == every_pair, (kernel, size)
    assert len(rows) == 3 * len(every_pair)
    assert (rows.schedule == schedule).all() and (rows.pairs == 1).all() and (rows.ranks == ranks).all()
    assert (rows.src_host == socket.gethostname()).all() and (rows.dst_host == socket.gethostname()).all()
    assert (rows.window == np.where(rows.kernel == "pairs-bw", WINDOW, 0)).all()
    assert rows.src_gpu.isna().all()
    assert json.loads((done.out / "verdict.json").read_text())  # the reporter judged the pairs it was handed


@pytest.mark.parametrize("ranks", [4, 5])
def test_under_max_time_each_pair_times_for_its_own_sources_pace(measure, ranks):
    """--max-time with the isolated schedule: each source passes its warm-up's pace to its destination (pass_on),
    and both ends run the count it sets; five ranks leave one out of each round."""
    done = measure(ranks, [step("pairs-bw", [64])], max_time=0.01, warmup=2)
    rows = done.rows
    assert len(rows) == ranks * (ranks - 1) and (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert (rows.iterations >= 1).all() and (rows.iterations <= ITERATIONS).all()


def test_a_size_past_the_csvs_bound_is_spooled_to_parquet_alone_and_judged_from_it(measure, monkeypatch):
    """Five ranks' matrix (20 pairs) with the bounds made small: its rows go to Parquet parts of at most 7 rows as
    the phases end, never to the CSV, and results.parquet holds every row at the end, the parts gone."""
    from fabricbench.analysis.load import read_pairs
    from fabricbench.measure import results
    from fabricbench.measure.schema import PARQUET_ONLY_ROWS, PARTS_NAME
    from fabricbench.run import reporter

    monkeypatch.setattr(reporter, "CSV_SIZE_ROWS", 12)
    monkeypatch.setattr(reporter, "CONSOLE_SIZE_ROWS", 12)
    monkeypatch.setattr(results, "PART_ROWS", 7)
    written = []
    monkeypatch.setattr(results.PartSpool, "flush", _counting(results.PartSpool.flush, written))
    done = measure(5, [step("latency", [8]), step("pairs-bw", [64]), step("pairs-latency", [1])])
    rows = done.rows
    measured(rows)
    assert len(rows) == 1 + 2 * 20 and rows.kernel.value_counts()["pairs-bw"] == 20
    assert done.metadata["rows"] == 41 and done.metadata[PARQUET_ONLY_ROWS] == 40
    in_csv = pd.read_csv(done.out / CSV_NAME)
    assert in_csv.kernel.tolist() == ["latency"]
    assert not (done.out / PARTS_NAME).exists() and sum(written) >= 6  # 40 rows, at most 7 a part
    assert "# 20 rows at 64 B, one a pair, are in results.parquet" in done.console
    groups = list(read_pairs(done.out).table.groups())
    assert [g.key[1] for g in groups] == ["pairs-bw", "pairs-latency"] and groups[0].values.shape == (5, 5)
    assert json.loads((done.out / "verdict.json").read_text())["groups"][0]["pairs"] == 20


def _counting(flush, written: list):
    def counted(spool):
        waiting = spool._count
        flush(spool)
        written.append(waiting > 0)

    return counted


def test_per_node_on_one_host_leaves_one_rank_and_says_so_per_size(measure):
    rows = measure(2, [step("pairs-bw", [1, 64])], pairs=AllPairsOptions(per_node=True)).rows
    assert rows.size_B.tolist() == [1, 64]
    assert rows.status.str.startswith("unsupported: --per-node leaves one rank").all()


@pytest.mark.parametrize("ranks", [4, 5])
def test_the_bisection_kernel_gives_an_all_row_and_one_per_tier_with_its_matchings_recorded(measure, ranks):
    """Every rank on this host: with a topology placing it, every pair is same-host; five ranks leave one out of
    each matching, and every rank outside a matching only meets the barriers."""
    host = socket.gethostname()
    topology = {"source": "test", "switch": {host: "leaf1"}, "group": {"leaf1": "leaf1"}, "parent": {}}
    options = BisectionOptions(rounds=3, seed=9)
    done = measure(ranks, [step("bisection", [64, 4096])], bisection=options, topology=topology)
    rows = done.rows
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert list(zip(rows.size_B, rows.tier, strict=True)) == [(z, t) for z in (64, 4096) for t in ("all", "same-host")]
    assert (rows.pairs == ranks // 2).all() and (rows.tier_pairs == 3 * (ranks // 2)).all()
    assert (rows.ranks == ranks).all() and (rows.window == WINDOW).all() and (rows["sample"] == "window").all()
    assert (rows.bw_p1_MBps <= rows.bw_p50_MBps).all() and (rows.bw_MBps > 0).all()
    # Both directions of every pair: the aggregate is at least each pair's one-way rate, twice, at the low tail.
    assert (rows.aggregate_MBps >= 2 * rows.pairs * rows.bw_p1_MBps * (1 - 1e-9)).all()
    recorded = done.metadata["bisection"]
    assert recorded["seed"] == 9 and recorded["rounds"] == 3 and recorded["ranks"] == list(range(ranks))
    for matching in recorded["matchings"]:
        ends = sorted(unit for pair in matching["pairs"] for unit in pair)
        left = [] if matching["left_out"] is None else [matching["left_out"]]
        assert sorted(ends + left) == list(range(ranks)) and len(left) == ranks % 2
        assert all(pair == [host, host] for pair in matching["hosts"])
    # Each rank took part in each matching of each size (warm-up, timed, check) but the one left out.
    taking_part = sum(ranks - ranks % 2 for _ in recorded["matchings"]) * 2
    assert sum(1 for _, kernel, _, count in done.runs if kernel == "bisection" and count == ITERATIONS) == taking_part


def test_the_bisection_kernel_without_a_topology_gives_the_all_row_alone_and_refuses_what_no_link_carries(measure):
    rows = measure(2, [step("bisection", [64])], bisection=BisectionOptions(rounds=2), memory={"link_MBps": 1e-9}).rows
    assert rows.tier.tolist() == ["all"] and rows.status.tolist() == ["ok"]
    row = rows.iloc[0]
    assert math.isnan(row.bw_MBps) and math.isnan(row.aggregate_MBps) and math.isnan(row.bw_p1_MBps)
    assert "bw_MBps" in row.note and "refused" in row.note


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_routes_kernel_gives_a_row_per_ordered_device_pair(measure, ranks):
    sizes = [1, 4096]
    rows = measure(ranks, [step("peer", sizes)]).rows
    measured(rows)
    routes = [(s, d) for s in range(3) for d in range(3) if s != d]
    assert list(zip(rows.size_B, rows.src_gpu, rows.dst_gpu, strict=True)) == [(z, *r) for z in sizes for r in routes]
    assert (rows.src_host == socket.gethostname()).all() and (rows.dst_host == socket.gethostname()).all()
    assert (rows.window == 1).all() and (rows.ranks == ranks).all() and rows.src_rank.isna().all()


def test_a_routes_kernel_with_no_route_gives_an_unsupported_row_per_size(measure):
    rows = measure(2, [step("peer", [1, 64])], memory={"devices": 1}).rows
    assert rows.size_B.tolist() == [1, 64]
    assert (rows.status == "unsupported: peer copies need two devices; rank 0 has 1").all()
    assert rows[NUMBERS].isna().all().all()


# ---- validation ------------------------------------------------------------------------------------------------

EVERY_PATTERN = ["latency", "bw", "bibw", "msgrate", "allreduce", "pairs-latency", "pairs-bw", "peer"]


def test_a_link_that_damages_a_byte_fails_validation_in_every_pattern(measure):
    done = measure(4, [step(kernel, [64]) for kernel in EVERY_PATTERN], memory={"corrupt": EVERY_PATTERN})
    rows = done.rows
    assert (rows.status == "ok").all() and (rows.validation == "fail").all()
    assert set(rows.kernel) == set(EVERY_PATTERN)
    assert done.failed_validation == len(rows)  # what the run's exit code is made from
    assert json.loads((done.out / META_NAME).read_text())["complete"] is True


def test_the_runners_corruption_hook_fails_only_its_kernel(measure, monkeypatch):
    from fabricbench.run.runner import CORRUPT_HOOK

    monkeypatch.setenv(CORRUPT_HOOK, "bw")
    done = measure(2, [step("latency", [64]), step("bw", [64])])
    assert dict(zip(done.rows.kernel, done.rows.validation, strict=True)) == {"latency": "pass", "bw": "fail"}
    assert done.failed_validation == 1


def test_without_validation_every_row_says_off(measure):
    rows = measure(4, [step(kernel, [64]) for kernel in EVERY_PATTERN], validate=False).rows
    assert (rows.status == "ok").all() and (rows.validation == "off").all()


# ---- counts, refusals, repeats and rank subsets ----------------------------------------------------------------


def test_max_time_gives_every_rank_one_agreed_count(measure):
    """A budget below one warm-up iteration leaves one timed iteration, on every rank alike (a rank that ran a
    different count would have waited for a message that never came)."""
    kernels = ["latency", "msgrate", "allreduce", "pairs-bw"]
    done = measure(4, [step(kernel, [64]) for kernel in kernels], warmup=3, max_time=1e-12)
    assert (done.rows.iterations == 1).all() and (done.rows.validation == "pass").all()
    assert set(done.rows.kernel) == set(kernels)
    made = [counts for rank in range(4) for counts in done.counts(rank)]
    assert made and set(made) == {(3, 1, 1)}


def test_a_generous_max_time_keeps_the_plans_count(measure):
    done = measure(4, [step("bw", [64]), step("pairs-latency", [64])], warmup=3, max_time=3600.0)
    assert (done.rows.iterations == ITERATIONS).all()
    assert {counts for rank in range(4) for counts in done.counts(rank)} == {(3, ITERATIONS, 1)}


def test_a_kernel_the_transport_lacks_gives_one_unsupported_row_and_no_number(measure):
    rows = measure(2, [step("put", [1, 64, 1024])]).rows
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row.status == "unsupported: memory has no put kernel"
    assert pd.isna(row.size_B) and row.validation == "off"
    assert rows[NUMBERS].isna().all().all()


def test_a_size_the_transport_refuses_is_one_unsupported_row_among_measured_ones(measure):
    """Unsupported from case(), pair_case() or a route's case(), on every rank alike: one row for the size (the
    all-pairs and routes kernels too), and the next size is measured again."""
    kernels = ["bw", "allreduce", "pairs-bw", "peer"]
    rows = measure(2, [step(kernel, [4, 64, 4096]) for kernel in kernels], memory={"max_size": 64}).rows
    refused = rows[rows.size_B == 4096]
    assert refused.kernel.tolist() == kernels
    assert (refused.status == "unsupported: 4096 B is above the in-memory link's 64 B").all()
    assert refused[NUMBERS].isna().all().all()
    measured(rows[rows.size_B < 4096])


def test_repeats_interleave_the_steps_and_number_their_rows(measure):
    rows = measure(2, [step("latency", [8]), step("bw", [8])], repeat=3).rows
    assert list(zip(rows.repeat, rows.kernel, strict=True)) == [
        (0, "latency"),
        (0, "bw"),
        (1, "bw"),
        (1, "latency"),
        (2, "latency"),
        (2, "bw"),
    ]
    measured(rows)


def test_rank_subsets_run_a_collective_on_the_first_ranks_and_a_pair_kernel_on_all(measure):
    done = measure(4, [step("allreduce", [64]), step("latency", [64])], ranks=[2, 4])
    rows = done.rows
    measured(rows)
    assert list(zip(rows.kernel, rows.ranks, strict=True)) == [("allreduce", 2), ("allreduce", 4), ("latency", 4)]
    allreduce_cases = [sum(who == r and kernel == "allreduce" for who, kernel, _, _ in done.runs) for r in range(4)]
    assert allreduce_cases == [6, 6, 3, 3]  # three Case.run calls per case: on 2 and 4 ranks, or on 4 only


def test_a_subset_leaves_the_other_ranks_out_of_its_cases(measure):
    done = measure(4, [step("allreduce", [64])], ranks=[2])
    assert done.rows.ranks.tolist() == [2]
    assert {rank for rank, _, _, _ in done.runs} == {0, 1}


def test_a_rank_that_fails_mid_size_ends_every_rank_and_keeps_the_rows_so_far(measure, tmp_path, capsys):
    with pytest.raises(RanksFailed) as failed:
        measure(2, [step("latency", [1]), step("bw", [1])], memory={"fail_in_run": "bw"})
    errors = failed.value.errors
    assert all(isinstance(error, Aborted) and error.code == 1 for error in errors), errors
    said = capsys.readouterr().err
    assert "rank 1: internal error: RuntimeError: the in-memory link of rank 1 broke" in said
    frame, metadata = read_run(tmp_path / "run0")
    assert metadata["complete"] is False and frame.kernel.tolist() == ["latency"]


# ---- figures ---------------------------------------------------------------------------------------------------


def test_bandwidth_figures_are_ones_the_sizes_allow(measure):
    kernels = {"latency": [0, 64], "bw": [1, 4096], "msgrate": [4096], "bibw": [4096], "allreduce": [4096]}
    rows = measure(2, [step(kernel, sizes) for kernel, sizes in kernels.items()]).rows
    one_way = rows[rows.kernel.isin(["bw", "msgrate"])]
    assert (one_way.bw_MBps > 0).all() and np.isfinite(one_way.bw_MBps).all()
    # One pair: its fastest window is at least its mean (min <= mean, whatever the clock said).
    assert (one_way.bw_peak_MBps >= one_way.bw_MBps * (1 - 1e-6)).all()
    # A window message per second moves size bytes: the two figures are one.
    np.testing.assert_allclose(one_way.msgrate_per_s, one_way.bw_MBps * 1e6 / one_way.size_B, rtol=1e-6)
    bibw = rows[rows.kernel == "bibw"]
    assert (bibw.bw_MBps > 0).all() and bibw.bw_peak_MBps.isna().all()  # two windows at once hold no transit
    latency = rows[rows.kernel == "latency"]
    assert latency[["bw_MBps", "bw_peak_MBps", "msgrate_per_s", "algbw_GBps"]].isna().all().all()
    assert (latency.lat_min_us > 0).all()
    allreduce = rows[rows.kernel == "allreduce"]
    assert (allreduce.algbw_GBps > 0).all() and allreduce.bw_MBps.isna().all()


def test_a_figure_above_the_reported_link_rate_is_refused_with_why(measure):
    rows = measure(2, [step("bw", [4096])], memory={"link_MBps": 1e-9}).rows
    row = rows.iloc[0]
    assert math.isnan(row.bw_MBps) and math.isnan(row.bw_peak_MBps) and math.isnan(row.msgrate_per_s)
    assert "bw_MBps" in row.note and "refused" in row.note


def test_each_pair_of_an_all_pairs_run_carries_its_share_of_its_sources_link(measure):
    rows = measure(3, [step("pairs-bw", [4096]), step("pairs-latency", [8])], memory={"link_MBps": 1e9}).rows
    bw = rows[rows.kernel == "pairs-bw"]
    assert len(bw) == 6 and (bw.link_MBps == 1e9).all()
    assert np.allclose(bw.link_pct, 100 * bw.bw_MBps / 1e9) and (bw.link_pct > 0).all()
    assert rows[rows.kernel == "pairs-latency"].link_pct.isna().all()  # no bandwidth, no share


# ---- the reporter's files --------------------------------------------------------------------------------------


def test_the_csv_the_parquet_copy_and_the_metadata_agree(measure):
    done = measure(4, [step("latency", [8]), step("pairs-bw", [8]), step("put", [8]), step("peer", [8])])
    from_csv, _ = read_run(done.out / CSV_NAME)
    from_parquet, parquet_metadata = read_run(done.out / PARQUET_NAME)
    # The same frame from either file, types included: an integer column with a blank (src_rank of a
    # non-pair row) reads as floats with NaN from both, not as text from the CSV.
    assert from_csv.src_rank.isna().any() and from_csv.src_rank.notna().any()
    integer = {c: "float64" if from_csv[c].isna().any() else "int64" for c in INTEGER & set(from_csv)}
    assert {c: str(from_csv[c].dtype) for c in integer} == integer and "int64" in integer.values()
    assert all(from_csv[column].dtype == float for column in NUMERIC & set(from_csv)), from_csv.dtypes
    assert from_csv.note.map(lambda text: isinstance(text, str)).all()  # text stays text, "" where blank
    pd.testing.assert_frame_equal(from_csv, from_parquet)
    metadata = json.loads((done.out / META_NAME).read_text())
    assert metadata == parquet_metadata == done.metadata
    assert metadata["complete"] is True and metadata["rows"] == len(from_csv) == 1 + 12 + 1 + 6
    assert metadata["run_id"] == "in-process" and (from_csv.run_id == "in-process").all()
    assert (from_csv.label == "threads").all() and metadata["label"] == "threads"
    assert metadata["transports"]["memory"] == {"links": "in-memory queues", "ranks": 4}
    assert [s["kernel"] for s in metadata["steps"]] == ["latency", "pairs-bw", "put", "peer"]
    assert len(metadata["ranks"]) == 4


def test_the_console_shows_a_header_per_step_and_a_line_per_row(measure):
    done = measure(2, [step("latency", [8, 64]), step("put", [8])])
    lines = done.console.splitlines()
    assert sum(line.startswith("# memory latency on 2 ranks") for line in lines) == 1
    assert "# unsupported: memory has no put kernel" in lines
    assert sum(not line.startswith("#") for line in lines) == 2


def test_the_osu_format_prints_osus_text(measure):
    done = measure(2, [step("latency", [8, 64])], output_format="osu")
    lines = done.console.splitlines()
    assert any(line.startswith("# ") and "Latency Test" in line for line in lines)
    assert [line.split()[0] for line in lines if not line.startswith("#")] == ["8", "64"]

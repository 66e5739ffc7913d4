"""The compare report's pure parts on hand-built tables: ratios, baselines, metric names, sizes, migration."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from fabricbench.analysis.compare import compare, comparison_table, parse_metrics
from fabricbench.analysis.load import MIGRATED, OPTIONAL, migrate, split_series
from fabricbench.errors import UsageError
from fabricbench.measure.formatting import format_sizes
from fabricbench.measure.schema import NONBLOCKING_COLUMNS, OPTIONAL_NUMERIC, SCHEMA_VERSION

METRICS = ["lat_p50_us", "bw_MBps"]


def _row(letter: str, kernel: str, size: int, p50: float, bw: float = math.nan, **fields) -> dict:
    """One row as split_series gives it: series letter, what was run, the metrics."""
    return {
        "series": f"run {letter}",
        "letter": letter,
        "run_id": f"run-{letter}",
        "transport": "mpi",
        "buffer": "host",
        "method": "persistent",
        "source": f"/results/{letter}",
        "kernel": kernel,
        "size_B": size,
        "status": "ok",
        "validation": "off",
        "sample": "rtt/2",
        "lat_p50_us": p50,
        "bw_MBps": bw,
        **fields,
    }


def _cell(table: pd.DataFrame, letter: str, kernel: str, size: int, column: str):
    chosen = table[(table.letter == letter) & (table.kernel == kernel) & (table.size_B == size)]
    assert len(chosen) == 1, (letter, kernel, size)
    return chosen[column].iloc[0]


def test_ratios_divide_each_series_by_a_at_the_same_kernel_and_size():
    tidy = pd.DataFrame(
        [
            _row("A", "bw", 64, 2.0, bw=100.0),
            _row("A", "bw", 128, 4.0, bw=200.0),
            _row("B", "bw", 64, 3.0, bw=50.0),
            _row("B", "bw", 128, 2.0, bw=400.0),
            _row("B", "bw", 256, 2.5, bw=500.0),
        ]
    )
    table = comparison_table(tidy, METRICS)
    assert (table.baseline == "A").all()
    assert _cell(table, "B", "bw", 64, "lat_p50_us_ratio") == pytest.approx(1.5)
    assert _cell(table, "B", "bw", 128, "lat_p50_us_ratio") == pytest.approx(0.5)
    assert _cell(table, "B", "bw", 64, "bw_MBps_ratio") == pytest.approx(0.5)
    assert _cell(table, "B", "bw", 128, "bw_MBps_ratio") == pytest.approx(2.0)
    assert (table[table.letter == "A"].lat_p50_us_ratio == 1.0).all()
    # A has no 256 B row: B keeps its value, with no ratio.
    assert _cell(table, "B", "bw", 256, "lat_p50_us") == 2.5
    assert pd.isna(_cell(table, "B", "bw", 256, "lat_p50_us_ratio"))
    assert len(table) == len(tidy)


def test_a_kernel_a_lacks_is_divided_by_the_first_series_that_has_it():
    tidy = pd.DataFrame(
        [
            _row("A", "latency", 8, 2.0),
            _row("B", "latency", 8, 4.0),
            _row("B", "put", 8, 5.0),
            _row("C", "put", 8, 10.0),
            _row("C", "latency", 8, 1.0),
        ]
    )
    table = comparison_table(tidy, METRICS)
    assert set(table[table.kernel == "put"].baseline) == {"B"}
    assert set(table[table.kernel == "latency"].baseline) == {"A"}
    assert _cell(table, "C", "put", 8, "lat_p50_us_ratio") == pytest.approx(2.0)
    assert _cell(table, "C", "latency", 8, "lat_p50_us_ratio") == pytest.approx(0.5)


def test_failed_validation_and_unsupported_rows_give_no_values_and_no_ratios():
    tidy = pd.DataFrame(
        [
            _row("A", "latency", 8, 2.0),
            _row("A", "latency", 16, 2.0, validation="fail"),
            _row("B", "latency", 8, 4.0, status="unsupported: no latency here", sample=""),
            _row("B", "latency", 16, 3.0),
            # A's put is unsupported, so B's measured put is the baseline for put.
            _row("A", "put", 8, math.nan, status="unsupported: mpi has no put kernel", sample=""),
            _row("B", "put", 8, 5.0),
        ]
    )
    table = comparison_table(tidy, METRICS)
    assert pd.isna(_cell(table, "A", "latency", 16, "lat_p50_us"))
    assert pd.isna(_cell(table, "B", "latency", 16, "lat_p50_us_ratio"))
    assert pd.isna(_cell(table, "B", "latency", 8, "lat_p50_us"))
    assert pd.isna(_cell(table, "B", "latency", 8, "lat_p50_us_ratio"))
    assert _cell(table, "A", "latency", 8, "lat_p50_us_ratio") == 1.0
    assert set(table[table.kernel == "put"].baseline) == {"B"}
    assert _cell(table, "B", "put", 8, "lat_p50_us_ratio") == 1.0
    # The rows stay in the table, with the status that says why they hold no numbers.
    assert _cell(table, "A", "latency", 16, "validation") == "fail"
    assert _cell(table, "A", "put", 8, "status").startswith("unsupported")


def test_parse_metrics_takes_short_and_column_names_once_each():
    assert parse_metrics(None) == ["lat_p50_us", "bw_MBps", "busbw_GBps"]
    assert parse_metrics(["p99", "bw_MBps", "lat_p99_us", "busbw"]) == ["lat_p99_us", "bw_MBps", "busbw_GBps"]
    with pytest.raises(UsageError, match="unknown metric 'speed'; known: .*p50"):
        parse_metrics(["speed"])


@pytest.mark.parametrize(
    ("sizes", "text"),
    [
        ([1, 2, 4, 8, 16, 32], "1 B-32 B (6 sizes)"),
        ([2048, 1024, 64], "64 B, 1 KiB-2 KiB (2 sizes)"),
        ([0, 1, 2], "0 B-2 B (3 sizes)"),
        ([3 << 20], "3 MiB"),
        ([], "all sizes"),
        ([math.nan], "all sizes"),
    ],
)
def test_format_sizes_shortens_runs_of_doublings(sizes, text):
    assert format_sizes(sizes) == text


def _schema_1_frame() -> pd.DataFrame:
    """Rows as a table written before schema_version may hold them: no run_id, label, buffer, method, ..."""
    return pd.DataFrame({"transport": ["mpi"], "kernel": ["latency"], "size_B": [8], "status": ["ok"]})


def test_schema_1_is_migrated_and_says_so():
    frame, metadata = _schema_1_frame(), {"kernel": "6.1.0-test", "label": "old run", "hosts": ["h1"]}
    migrated, meta = migrate(frame, metadata)
    assert meta["schema_version"] == SCHEMA_VERSION
    assert meta["os_release"] == "6.1.0-test" and "kernel" not in meta
    assert meta[MIGRATED] == f"read as schema 1 (it has no schema_version); migrated to {SCHEMA_VERSION}"
    assert meta["label"] == "old run" and meta["hosts"] == ["h1"]
    for column, default in OPTIONAL.items():
        assert (migrated[column] == default).all(), column
    assert migrated["kernel"].tolist() == ["latency"]  # the rows' kernel column is not the metadata's
    # The inputs are left as they were.
    assert "kernel" in metadata and "schema_version" not in metadata and "buffer" not in frame.columns


def test_schema_2_gains_the_repeat_and_pair_columns_and_keeps_its_metadata():
    frame = _schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c in ("run_id", "label", "buffer")})
    migrated, meta = migrate(frame, {"schema_version": 2, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 2; migrated to {SCHEMA_VERSION}" and meta["os_release"] == "6.1.0-test"
    assert migrated["repeat"].tolist() == [0] and migrated["src_host"].tolist() == [""]


def test_schema_3_gains_the_gpu_pair_columns():
    frame = _schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c not in ("src_gpu", "dst_gpu")})
    migrated, meta = migrate(frame, {"schema_version": 3, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 3; migrated to {SCHEMA_VERSION}"
    assert migrated["src_gpu"].tolist() == [""] and migrated["dst_gpu"].tolist() == [""]


def test_schema_4_gains_the_congestion_columns_empty_and_its_figures_as_nan():
    frame = _schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c not in ("canary", "congestor")})
    frame = frame.drop(columns=["canaries", "congestors"])
    migrated, meta = migrate(frame, {"schema_version": 4, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 4; migrated to {SCHEMA_VERSION}"
    assert migrated["canary"].tolist() == [""] and migrated["congestors"].tolist() == [""]
    assert all(math.isnan(migrated[column].iloc[0]) for column in OPTIONAL_NUMERIC)


def test_schema_5_gains_the_tier_and_hops_columns_blank():
    frame = _schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c not in ("tier", "hops")})
    migrated, meta = migrate(frame, {"schema_version": 5, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 5; migrated to {SCHEMA_VERSION}"
    assert migrated["tier"].tolist() == [""] and migrated["hops"].tolist() == [""]


def test_schema_6_gains_the_bisection_columns_blank_and_its_figures_as_nan():
    frame = _schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c != "tier_pairs"})
    migrated, meta = migrate(frame, {"schema_version": 6, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 6; migrated to {SCHEMA_VERSION}"
    assert migrated["tier_pairs"].tolist() == [""]
    assert math.isnan(migrated["bw_p1_MBps"].iloc[0]) and math.isnan(migrated["aggregate_MBps"].iloc[0])


def test_schema_8_gains_the_nonblocking_figures_as_nan():
    frame = _schema_1_frame().assign(**OPTIONAL)
    migrated, meta = migrate(frame, {"schema_version": 8, "os_release": "6.1.0-test"})
    assert meta[MIGRATED] == f"read as schema 8; migrated to {SCHEMA_VERSION}"
    assert all(math.isnan(migrated[column].iloc[0]) for column in NONBLOCKING_COLUMNS)


def test_schema_11_gains_the_link_blank_and_its_rate_and_share_as_nan():
    older = {"schema_version": 11, "os_release": "6.1.0-test"}
    migrated, meta = migrate(_schema_1_frame().assign(**{c: d for c, d in OPTIONAL.items() if c != "link"}), older)
    link = migrated.iloc[0][["link", "link_MBps", "link_pct"]].tolist()
    assert meta[MIGRATED] == f"read as schema 11; migrated to {SCHEMA_VERSION}" and link[0] == ""
    assert math.isnan(link[1]) and math.isnan(link[2])


def test_a_current_table_passes_unchanged():
    frame, metadata = _schema_1_frame(), {"schema_version": SCHEMA_VERSION, "os_release": "6.1.0-test"}
    migrated, meta = migrate(frame, metadata)
    assert migrated is frame and meta is metadata and MIGRATED not in meta


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            {"schema_version": SCHEMA_VERSION + 1},
            f"was written by a newer fabricbench (schema {SCHEMA_VERSION + 1}); this one reads up to {SCHEMA_VERSION}",
        ),
        ({"schema_version": "2"}, "metadata field 'schema_version' = '2', not a positive integer"),
        ({"schema_version": True}, "metadata field 'schema_version' = True, not a positive integer"),
        ({"schema_version": 0}, "metadata field 'schema_version' = 0, not a positive integer"),
        ([1, 2], "has metadata that is not a JSON object"),
        ({"hosts": 5}, "metadata field 'hosts' = 5, not a list of strings"),
        ({"hosts": ["h1", 2]}, "metadata field 'hosts' = ['h1', 2], not a list of strings"),
        ({"label": 3}, "metadata field 'label' = 3, not a string"),
        ({"run_id": None}, "metadata field 'run_id' = None, not a string"),
        ({"mpi_vendor": ["MPICH"]}, "metadata field 'mpi_vendor' = ['MPICH'], not a string"),
    ],
)
def test_metadata_of_a_newer_schema_or_the_wrong_type_is_refused(metadata, message):
    with pytest.raises(UsageError) as refused:
        migrate(_schema_1_frame(), metadata)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def _write_run(directory, metadata, frame: pd.DataFrame) -> str:
    directory.mkdir()
    frame.assign(lat_p50_us=[2.5]).to_csv(directory / "results.csv", index=False)
    (directory / "metadata.json").write_text(json.dumps(metadata))
    return str(directory)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"hosts": 5}, "has metadata field 'hosts' = 5, not a list of strings"),
        # Current tables hold every column: a missing one is not filled in.
        (
            {"schema_version": SCHEMA_VERSION},
            f"is not a schema {SCHEMA_VERSION} table: no column run_id, label, buffer, method, validation, sample, "
            "repeat, schedule, src_rank, dst_rank, src_host, dst_host, tier, hops, src_gpu, dst_gpu, canary, "
            "congestor, canaries, congestors, tier_pairs, placement, wrong_elements, link",
        ),
    ],
)
def test_a_refused_input_is_named_in_the_error(tmp_path, metadata, message):
    path = _write_run(tmp_path / "bad", metadata, _schema_1_frame())
    with pytest.raises(UsageError) as refused:
        split_series([path])
    assert str(refused.value) == f"{path!r} {message}"


def test_the_report_prints_the_migration_as_a_note(tmp_path, capsys):
    old = _write_run(tmp_path / "old", {"kernel": "6.1.0-test", "label": "old run"}, _schema_1_frame())
    new = _write_run(
        tmp_path / "new", {"schema_version": SCHEMA_VERSION, "label": "new run"}, _schema_1_frame().assign(**OPTIONAL)
    )
    series, _, notes = split_series([old, new])
    assert series[0].metadata["os_release"] == "6.1.0-test"
    assert notes == [f"{old}: read as schema 1 (it has no schema_version); migrated to {SCHEMA_VERSION}"]
    assert compare([old, new]) == 0
    assert (
        f"# note: {old}: read as schema 1 (it has no schema_version); migrated to {SCHEMA_VERSION}"
        in capsys.readouterr().out
    )


def _runs_rows(values: dict[tuple[str, str, str], list[float]]) -> pd.DataFrame:
    """Rows of (letter, run, transport) -> latency at 8 B per repeat, as split_series gives them."""
    rows = []
    for (letter, run, transport), latencies in values.items():
        for repeat, latency in enumerate(latencies):
            rows.append(
                _row(letter, "latency", 8, latency, bw=1000.0 / latency, run_id=run, source=f"/results/{run}",
                     transport=transport, repeat=repeat)
            )  # fmt: skip
    return pd.DataFrame(rows)


def _series_of(tidy: pd.DataFrame) -> list:
    from fabricbench.analysis.load import Series

    firsts = tidy.drop_duplicates("letter")
    return [Series(r.letter, r.series, r.source, r.run_id, r.transport, r.buffer, {}) for r in firsts.itertuples()]


def test_two_runs_of_two_transports_are_compared_transport_with_transport():
    tidy = _runs_rows({
        ("A", "one", "mpi"): [2.0], ("B", "one", "tcp"): [10.0], ("C", "two", "mpi"): [3.0], ("D", "two", "tcp"): [5.0],
    })  # fmt: skip
    table = comparison_table(tidy, METRICS)
    assert dict(zip(table.letter, table.baseline, strict=True)) == {"A": "A", "B": "B", "C": "A", "D": "B"}
    assert _cell(table, "C", "latency", 8, "lat_p50_us_ratio") == pytest.approx(1.5)  # two's mpi over one's mpi
    assert _cell(table, "D", "latency", 8, "lat_p50_us_ratio") == pytest.approx(0.5)  # two's tcp over one's tcp
    from fabricbench.analysis.compare import report

    text = report(_series_of(tidy), table, {"latency": ["lat_p50_us"]}, [])
    assert "# ratios: C/A, D/B" in text
    assert "# latency: A, C (mpi; latency is half a round trip)" in text
    assert "# latency: B, D (tcp; latency is half a round trip)" in text
    assert "A/B" not in text and "D/A" not in text and "B/A" not in text


def test_a_transport_only_one_run_holds_is_divided_by_its_own_runs_first_series():
    tidy = _runs_rows({("A", "one", "mpi"): [2.0], ("B", "two", "mpi"): [4.0], ("C", "two", "ucx"): [1.0]})
    table = comparison_table(tidy, METRICS)
    assert dict(zip(table.letter, table.baseline, strict=True)) == {"A": "A", "B": "A", "C": "B"}
    # One run of two transports keeps one baseline, A.
    one = comparison_table(_runs_rows({("A", "one", "mpi"): [2.0], ("B", "one", "tcp"): [4.0]}), METRICS)
    assert list(one.baseline) == ["A", "A"]


def test_repeats_of_two_runs_of_two_transports_fit_120_columns_and_one_repeat_shows_no_interval():
    from fabricbench.analysis.compare import CONSOLE_WIDTH, report

    spread = [1.0, 1.1, 0.9]
    tidy = _runs_rows({
        ("A", "one", "mpi"): [2 * v for v in spread], ("B", "one", "tcp"): [9 * v for v in spread],
        ("C", "two", "mpi"): [3 * v for v in spread], ("D", "two", "tcp"): [9.5],
    })  # fmt: skip
    tidy["lat_p99_us"] = tidy["lat_p50_us"] * 2
    metrics = ["lat_p50_us", "lat_p99_us"]
    table = comparison_table(tidy, metrics)
    text = report(_series_of(tidy), table, {"latency": metrics}, [])
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= CONSOLE_WIDTH, max(lines, key=len)
    assert "# latency: A, C (mpi; latency is half a round trip) [p50]" in lines
    row = lines[lines.index("# latency: B, D (tcp; latency is half a round trip) [p50]") + 2]
    # D's single repeat: its value, no interval of its own, and no verdict.
    assert row.split()[:3] == ["8", "B", "9.00"] and row.split()[4:] == ["9.50", "-", "1.06", "-", "-"], row


def test_in_place_rows_are_a_kernel_of_their_own_not_repeats_of_the_out_of_place_ones():
    from fabricbench.analysis.load import by_placement

    rows = pd.DataFrame(
        [
            _row("A", "allreduce", 8, 2.0, placement="out-of-place"),
            _row("A", "allreduce", 8, 3.0, placement="in-place"),
            _row("A", "latency", 8, 1.0, placement=""),
        ]
    )
    named = by_placement(rows)
    assert list(named["kernel"]) == ["allreduce", "allreduce in place", "latency"]
    assert not named.duplicated(["kernel", "size_B"]).any()

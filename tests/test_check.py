"""``fabricbench check`` on real finished runs, and on a run it starts: exit 0 pass, 1 fail, 2 malformed."""

from __future__ import annotations

from pathlib import Path

import pytest

from support import fabricbench, one_error_line, read_rows

PASSING = """
[[threshold]]
transport = "mpi"
kernel = "latency"
size = ":1K"
max_lat_p50_us = 1000000

[[threshold]]
transport = "mpi"
kernel = "bw"
size = "64:"
min_bw_MBps = 0.001
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """mpi latency and bw, 1 B to 1 KiB, on 2 local ranks."""
    out = tmp_path_factory.mktemp("check") / "run"
    result = fabricbench(
        "run",
        "-t",
        "mpi",
        "-k",
        "latency,bw",
        "-m",
        "1:1K",
        "-i",
        "20",
        "-x",
        "2",
        "--format",
        "none",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    return out


def thresholds(tmp_path: Path, text: str) -> str:
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return str(path)


def test_a_run_within_its_thresholds_passes_with_exit_0(finished, tmp_path):
    result = fabricbench("check", thresholds(tmp_path, PASSING), str(finished))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "check: pass: 16 rows checked against 2 thresholds", lines
    assert sum(line.startswith("ok ") for line in lines) == 2 and not any("FAIL" in line for line in lines)


def test_each_failing_row_is_one_line_and_the_exit_code_is_1(finished, tmp_path):
    text = PASSING.replace("max_lat_p50_us = 1000000", "max_lat_p50_us = 0.001")
    result = fabricbench("check", thresholds(tmp_path, text), str(finished))
    assert result.returncode == 1, result.stdout + result.stderr
    failing = [line.strip() for line in result.stdout.splitlines() if line.startswith("  FAIL")]
    rows, _ = read_rows(finished)
    latency = rows[rows.kernel == "latency"]
    assert len(failing) == len(latency) == 11
    first = latency.iloc[0]
    assert failing[0] == f"FAIL mpi latency 1 B: lat_p50_us {first.lat_p50_us:.4g}, expected <= 0.001"
    assert result.stdout.splitlines()[-1].startswith("check: FAIL: 11 failing lines; 16 rows checked")


def test_a_threshold_that_checks_nothing_fails_and_optional_warns(finished, tmp_path):
    text = PASSING + '\n[[threshold]]\ntransport = "tcp"\nkernel = "bw"\nmin_bw_MBps = 1\n'
    result = fabricbench("check", thresholds(tmp_path, text), str(finished))
    assert result.returncode == 1
    assert "FAIL threshold 3, line 14: tcp bw every size: covers no row; nothing was checked" in result.stdout
    result = fabricbench("check", thresholds(tmp_path, text + "optional = true\n"), str(finished))
    assert result.returncode == 0, result.stdout
    assert "warn threshold 3, line 14" in result.stdout and result.stdout.endswith("; 1 warnings\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "[[threshold]]\ntransport = 'mpi'\nkernel = latency\n",
            "thresholds.toml: not valid TOML: Invalid value (at line 3",
        ),
        (PASSING + "min_bw_MBs = 3\n", "thresholds.toml: line 13: threshold 2, field 'min_bw_MBs': unknown field"),
        (PASSING.replace('size = "64:"', 'size = "64Q"'), "line 11: threshold 2, field 'size': must be a byte"),
    ],
)
def test_a_malformed_file_exits_2_naming_line_and_field(finished, tmp_path, text, expected):
    result = fabricbench("check", thresholds(tmp_path, text), str(finished))
    assert result.returncode == 2 and result.stdout == ""
    one_error_line(result.stderr, expected)


def test_a_missing_run_or_file_is_one_line_and_exit_2(tmp_path):
    result = fabricbench("check", thresholds(tmp_path, PASSING), str(tmp_path / "nowhere"))
    assert result.returncode == 2
    one_error_line(result.stderr, "no such file or directory")
    result = fabricbench("check", str(tmp_path / "none.toml"), str(tmp_path))
    assert result.returncode == 2
    one_error_line(result.stderr, "no thresholds file")


def test_check_starts_a_run_and_judges_it(tmp_path):
    out = tmp_path / "started"
    args = ["-t", "mpi", "-k", "latency,bw", "-m", "64:128", "-i", "10", "-x", "1", "--format", "none"]
    result = fabricbench("check", thresholds(tmp_path, PASSING), "--", "run", *args, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"against {out} (4 rows)" in result.stdout and (out / "results.csv").exists()
    # Bad run options are refused before anything starts, as run refuses them.
    result = fabricbench("check", thresholds(tmp_path, PASSING), "--", "run", "-k", "nosuch", "--out", str(out / "x"))
    assert result.returncode == 2 and not (out / "x").exists()
    one_error_line(result.stderr, "nosuch")


def test_a_failing_check_writes_a_junit_report_naming_each_failing_row_and_its_figures(finished, tmp_path):
    from junitparser import Failure, JUnitXml

    report = tmp_path / "check.xml"
    text = PASSING.replace("max_lat_p50_us = 1000000", "max_lat_p50_us = 0.001")
    result = fabricbench("check", thresholds(tmp_path, text), str(finished), "--junit", str(report))
    assert result.returncode == 1, result.stdout + result.stderr
    xml = JUnitXml.fromfile(str(report))
    latency_suite, bw_suite = list(xml)
    rows, _ = read_rows(finished)
    latency, bw = rows[rows.kernel == "latency"], rows[(rows.kernel == "bw") & (rows.size_B >= 64)]
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (len(latency) + len(bw), len(latency), 0, 0)
    # One case per row the threshold covers; each failure carries the row, what it measured and what was allowed.
    assert latency_suite.name == "threshold 1, line 2" and len(latency_suite) == len(latency) == 11
    for case, (_, row) in zip(latency_suite, latency.iterrows(), strict=True):
        (failure,) = case.result
        assert isinstance(failure, Failure) and failure.type == "max_lat_p50_us"
        size = case.name.removeprefix("mpi latency ")
        assert failure.message == f"mpi latency {size}: lat_p50_us {row.lat_p50_us:.4g}, expected <= 0.001"
    assert [case.name for case in latency_suite][:2] == ["mpi latency 1 B", "mpi latency 2 B"]
    assert len(bw_suite) == len(bw) == 5 and all(case.is_passed for case in bw_suite)


def test_a_passing_check_writes_a_junit_report_of_passed_cases(finished, tmp_path):
    from junitparser import JUnitXml

    report = tmp_path / "check.xml"
    result = fabricbench("check", "--junit", str(report), thresholds(tmp_path, PASSING), str(finished))
    assert result.returncode == 0, result.stdout + result.stderr
    xml = JUnitXml.fromfile(str(report))
    cases = [case for suite in xml for case in suite]
    assert len(cases) == xml.tests == 16 and all(case.is_passed for case in cases)
    assert (xml.failures, xml.errors, xml.skipped) == (0, 0, 0)


def test_a_junit_path_that_cannot_be_written_is_one_line_and_exit_2_before_any_run(finished, tmp_path):
    missing = tmp_path / "nowhere" / "check.xml"
    result = fabricbench("check", thresholds(tmp_path, PASSING), str(finished), "--junit", str(missing))
    assert result.returncode == 2 and result.stdout == ""
    one_error_line(result.stderr, "no folder")
    out = tmp_path / "never"
    path = thresholds(tmp_path, PASSING)
    result = fabricbench("check", "--junit", str(tmp_path), path, "--", "run", "--out", str(out))
    assert result.returncode == 2 and not out.exists()
    one_error_line(result.stderr, "is a folder")

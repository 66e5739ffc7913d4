"""compare, check and model on a real run's table made impossible one way: one line naming the file, row and column.

The run is conftest's ``finished_runs["a"]`` (mpi latency and bw, 1 B to 1 KiB); each case copies it, drops the
Parquet copy (readers prefer it) where the CSV is edited, and changes one thing.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from fabricbench.measure.schema import COLUMNS
from support import fabricbench, one_error_line

THRESHOLDS = '[[threshold]]\ntransport = "mpi"\nkernel = "latency"\nmax_lat_p50_us = 1000000\n'


def _cell(folder: Path, column: str, text: str, row: int = 3) -> None:
    """ROW's COLUMN of the CSV replaced (row from 1, below the header); the Parquet copy removed."""
    with open(folder / "results.csv", newline="") as table:
        lines = list(csv.reader(table))
    lines[row][COLUMNS.index(column)] = text
    with open(folder / "results.csv", "w", newline="") as table:
        csv.writer(table).writerows(lines)
    (folder / "results.parquet").unlink()


def _rows(folder: Path, count: int) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps(meta | {"rows": count}))


def _cut(folder: Path) -> None:
    (folder / "results.csv").write_bytes((folder / "results.csv").read_bytes()[:-25])
    (folder / "results.parquet").unlink()


def _no_metrics(folder: Path) -> None:
    with open(folder / "results.csv", newline="") as table:
        lines = list(csv.reader(table))
    keep = [COLUMNS.index(c) for c in ("transport", "kernel", "size_B", "status")]
    with open(folder / "results.csv", "w", newline="") as table:
        csv.writer(table).writerows([[line[i] for i in keep] for line in lines])
    (folder / "results.parquet").unlink()
    (folder / "metadata.json").unlink()


# Each case: what is done to the copy, and the words of the one line (FILE: the file that holds the fault).
CASES = {
    "inf latency": (lambda d: _cell(d, "lat_p50_us", "inf"), "{csv!r} has lat_p50_us = 'inf' (row 3): not a finite"),
    "-inf latency": (lambda d: _cell(d, "lat_p50_us", "-inf"), "{csv!r} has lat_p50_us = '-inf' (row 3): not a finite"),
    "NaN bandwidth": (lambda d: _cell(d, "bw_MBps", "NaN", row=20), "{csv!r} has bw_MBps = 'NaN' (row 20)"),
    "10^9 rows": (lambda d: _rows(d, 10**9), "says the table holds 1000000000 rows, but {parquet!r} holds 22"),
    "a kernel of 5": (lambda d: _cell(d, "kernel", "5"), "{csv!r} has kernel = '5' (row 3): not a kernel"),
    "an empty kernel": (lambda d: _cell(d, "kernel", ""), "{csv!r} has kernel = '' (row 3): not a kernel"),
    "an empty size": (lambda d: _cell(d, "size_B", ""), "{csv!r} has size_B = '' (row 3): empty in a row measured ok"),
    "cut mid-row": (_cut, "{csv!r} ends in a cut row (row 22 has no line break)"),
    "no metric columns": (_no_metrics, "{csv!r} is not a fabricbench table: no measured column"),
}  # fmt: skip
FOR_CHECK_AND_MODEL = ["inf latency", "-inf latency", "NaN bandwidth", "10^9 rows", "a kernel of 5", "cut mid-row"]


def _command(command: str, folder: Path, tmp_path: Path) -> list[str]:
    if command == "check":
        (tmp_path / "t.toml").write_text(THRESHOLDS)
        return ["check", str(tmp_path / "t.toml"), str(folder)]
    out = ["--out", str(tmp_path / "out")]
    return [command, str(folder), *out]


def _copy(finished_runs, tmp_path) -> Path:
    return shutil.copytree(finished_runs["a"], tmp_path / "run")


@pytest.mark.parametrize("command", ["compare", "check", "model"])
def test_the_run_as_written_reads(command, finished_runs, tmp_path):
    result = fabricbench(*_command(command, _copy(finished_runs, tmp_path), tmp_path), timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("command", "case"),
    [("compare", case) for case in CASES]
    + [(command, case) for command in ("check", "model") for case in FOR_CHECK_AND_MODEL],
)
def test_an_impossible_table_is_one_line_and_exit_2(command, case, finished_runs, tmp_path):
    folder = _copy(finished_runs, tmp_path)
    damage, words = CASES[case]
    damage(folder)
    result = fabricbench(*_command(command, folder, tmp_path), timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    one_error_line(
        result.stderr, words.format(csv=str(folder / "results.csv"), parquet=str(folder / "results.parquet"))
    )
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == "", result.stdout + result.stderr

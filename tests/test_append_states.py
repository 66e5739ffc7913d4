"""``run --append`` on every partial state of a run folder: made whole from what is whole, or refused with one line.

An earlier run of 8 rows is copied and broken one way per test (a file missing, cut short, or disagreeing with
the others); then a real one-row run (mpi, two local ranks) is pointed at it with --append. Either it runs and
every file then holds the 8 old rows and the new one, or it is refused with exit 2 before any rank starts and
the folder is left byte for byte as it was.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fabricbench.measure.schema import COLUMNS
from support import fabricbench, one_error_line

QUICK = ["-i", "20", "-x", "2", "--format", "none"]
OLD_ROWS = 8  # latency at 8 B .. 1 KiB


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("append") / "run"
    done = fabricbench("run", "-t", "mpi", "-k", "latency", "-m", "8:1K", "--label", "first", "--out", str(out), *QUICK)
    assert done.returncode == 0, done.stderr
    return out


def _csv_rows(folder: Path) -> list[list[str]]:
    with open(folder / "results.csv", newline="") as table:
        lines = list(csv.reader(table))
    assert lines[0] == COLUMNS
    return lines[1:]


def _contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def _append(folder: Path):
    return fabricbench("run", "-t", "mpi", "-k", "latency", "-m", "8:8", "--append", "--out", str(folder), *QUICK)


def _cut_csv(folder: Path, rows: int) -> None:
    """Keep the header and the first ROWS rows: a table cut at a row's end."""
    lines = (folder / "results.csv").read_bytes().split(b"\r\n")
    (folder / "results.csv").write_bytes(b"\r\n".join(lines[: rows + 1]) + b"\r\n")


def _metadata(folder: Path, **changes) -> None:
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps(meta | changes))


def _edit_cell(folder: Path, column: str, text: str) -> None:
    """The third row's COLUMN replaced in the CSV only, written back as the writer writes (csv's \\r\\n)."""
    rows = [COLUMNS, *_csv_rows(folder)]
    rows[3][COLUMNS.index(column)] = text
    with open(folder / "results.csv", "w", newline="") as table:
        csv.writer(table).writerows(rows)


# Each state the run folder may be left in that is made whole: what is done to the earlier run's copy.
REBUILT = {
    "csv missing": lambda d: (d / "results.csv").unlink(),
    "csv cut to 5 of its rows": lambda d: _cut_csv(d, 5),
    "csv with its header only": lambda d: _cut_csv(d, 0),
    "parquet missing": lambda d: (d / "results.parquet").unlink(),
    "parquet cut short": lambda d: (d / "results.parquet").write_bytes((d / "results.parquet").read_bytes()[:400]),
    "metadata missing": lambda d: (d / "metadata.json").unlink(),
}


@pytest.mark.parametrize("state", REBUILT)
def test_a_partial_folder_is_made_whole_and_keeps_every_old_row(state, earlier, tmp_path):
    folder = shutil.copytree(earlier, tmp_path / "run")
    old_rows = _csv_rows(earlier)
    old_meta = json.loads((earlier / "metadata.json").read_text())
    assert len(old_rows) == OLD_ROWS == pq.read_table(earlier / "results.parquet").num_rows
    REBUILT[state](folder)
    result = _append(folder)
    assert result.returncode == 0, result.stderr
    rows = _csv_rows(folder)
    assert len(rows) == OLD_ROWS + 1 and rows[:OLD_ROWS] == old_rows
    assert pq.read_table(folder / "results.parquet").num_rows == OLD_ROWS + 1
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["rows"] == 1 and [run["run_id"] for run in meta["previous_runs"]] == [old_meta["run_id"]]
    assert meta["previous_runs"][0]["rows"] == OLD_ROWS
    assert "Traceback" not in result.stderr and "error" not in result.stderr
    compared = fabricbench("compare", str(folder), timeout=60)  # the folder reads back whole
    assert compared.returncode == 0, compared.stderr


# Each state that cannot be made whole: what is done to the copy, and the words of the one line.
REFUSED = {
    "csv and parquet missing": (
        lambda d: [(d / name).unlink() for name in ("results.csv", "results.parquet")],
        "metadata.json describes a run, but {d} holds no results.csv or results.parquet",
    ),
    "csv missing, parquet cut short": (
        lambda d: [(d / "results.csv").unlink(), (d / "results.parquet").write_bytes(b"PAR1 cut")],
        "{d} holds no results.csv, and cannot read results from",
    ),
    "csv cut mid-row": (
        lambda d: (d / "results.csv").write_bytes((d / "results.csv").read_bytes()[:-20]),
        "results.csv ends in a cut row",
    ),
    "csv cut to 5 rows, parquet missing": (
        lambda d: [_cut_csv(d, 5), (d / "results.parquet").unlink()],
        "metadata.json says the table holds 8 rows, but {d}/results.csv holds 5",
    ),
    "csv with a row added": (
        lambda d: (d / "results.csv").write_bytes((d / "results.csv").read_bytes() + _csv_line(d)),
        "metadata.json says the table holds 8 rows, but {d}/results.csv holds 9",
    ),
    "metadata and parquet missing": (
        lambda d: [(d / name).unlink() for name in ("metadata.json", "results.parquet")],
        "{d} holds results.csv but no metadata.json: nothing says which runs wrote its rows",
    ),
    "metadata cut short": (
        lambda d: (d / "metadata.json").write_bytes((d / "metadata.json").read_bytes()[:50]),
        "--append: cannot read {d}/metadata.json",
    ),
    "metadata counting 10^9 rows": (
        lambda d: _metadata(d, rows=10**9),
        "metadata.json says the table holds 1000000000 rows, but {d}/results.csv holds 8",
    ),
    "csv and parquet disagree in a cell": (
        lambda d: _edit_cell(d, "lat_p50_us", "123456"),
        "{d}/results.parquet and results.csv disagree at row 3, column lat_p50_us",
    ),
    "an infinite latency in an ok row": (
        lambda d: [_edit_cell(d, "lat_p50_us", "inf"), (d / "results.parquet").unlink()],
        "has lat_p50_us = 'inf' (row 3): not a finite measurement, in a row measured ok",
    ),
    "csv a symlink to a file outside": (
        lambda d: _link_out(d, "results.csv"),
        "--append: {d}/results.csv is a symlink; a run writes its table only into regular files",
    ),
    "metadata a symlink to a file outside": (
        lambda d: _link_out(d, "metadata.json"),
        "--append: {d}/metadata.json is a symlink",
    ),
    "a kernel of 5": (
        lambda d: [_edit_cell(d, "kernel", "5"), (d / "results.parquet").unlink()],
        "has kernel = '5' (row 3): not a kernel fabricbench has",
    ),
}


def _link_out(folder: Path, name: str) -> None:
    """NAME moved beside the folder and a symlink to it left in its place: --append must not write through it."""
    outside = folder.parent / f"outside-{name}"
    (folder / name).rename(outside)
    (folder / name).symlink_to(outside)


def _csv_line(folder: Path) -> bytes:
    return (folder / "results.csv").read_bytes().split(b"\r\n")[-2] + b"\r\n"


@pytest.mark.parametrize("state", REFUSED)
def test_a_folder_that_cannot_be_made_whole_is_refused_and_left_as_it_was(state, earlier, tmp_path):
    folder = shutil.copytree(earlier, tmp_path / "run")
    damage, words = REFUSED[state]
    damage(folder)
    before = _contents(folder)
    result = _append(folder)
    assert result.returncode == 2, result.stderr
    one_error_line(result.stderr, words.format(d=folder))
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert _contents(folder) == before  # no file written, renamed or removed: the old rows are where they were

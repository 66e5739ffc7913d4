"""The one check of a table read from disk (measure/table_cells.py), on hand-written schema 4 folders: no process.

compare, check, model and run --append read through it; each refusal is one line naming the file, row and column.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fabricbench.analysis import load
from fabricbench.errors import UsageError
from fabricbench.measure.results import TableWriter, write_parquet
from fabricbench.measure.schema import COLUMNS, CSV_NAME, META_NAME, PARQUET_NAME
from fabricbench.measure.table_cells import first_difference

SIZES = [8 << k for k in range(8)]  # 8 B .. 1 KiB: eight ok rows, as a latency sweep writes them


def _rows() -> list[dict]:
    rows = [
        {"run_id": "r1", "transport": "mpi", "kernel": "latency", "buffer": "host", "size_B": size, "ranks": 2,
         "sample": "rtt/2", "lat_min_us": 1.0, "lat_p50_us": 1.5 + size / 1e3, "validation": "off", "status": "ok"}
        for size in SIZES
    ]  # fmt: skip
    # A kernel the transport lacks: one row without a size or a figure.
    rows.append({"run_id": "r1", "transport": "tcp", "kernel": "put", "buffer": "host", "ranks": 2,
                 "validation": "off", "status": "unsupported: tcp has no put kernel"})  # fmt: skip
    return rows


def _run(folder: Path, parquet: bool = False, **metadata) -> Path:
    """A finished run's folder as the writers leave it: the CSV, metadata.json and, if asked, the Parquet copy."""
    folder.mkdir()
    writer = TableWriter(folder)
    for row in _rows():
        writer.append(row)
    writer.close()
    meta = {"schema_version": 8, "run_id": "r1", "label": "", "rows": len(_rows()), **metadata}
    (folder / META_NAME).write_text(json.dumps(meta))
    if parquet:
        write_parquet(folder, meta)
    return folder


def _edit(folder: Path, row: int, column: str, text: str) -> None:
    """Replace one cell of the CSV (row from 1, below the header); no cell of _rows() holds a comma."""
    lines = (folder / CSV_NAME).read_text().split("\n")
    cells = lines[row].split(",")
    cells[COLUMNS.index(column)] = text
    lines[row] = ",".join(cells)
    (folder / CSV_NAME).write_text("\n".join(lines))


def _refused(path: Path) -> str:
    with pytest.raises(UsageError) as refused:
        load.read_run(str(path))
    message = str(refused.value)
    assert "\n" not in message
    return message


@pytest.fixture
def run(tmp_path) -> Path:
    return _run(tmp_path / "run")


def test_the_folder_as_written_reads_with_its_figures_and_sizes(tmp_path, run):
    frame, metadata = load.read_run(str(run))
    assert len(frame) == 9 and metadata["rows"] == 9
    assert list(frame["size_B"][:8]) == SIZES and math.isnan(frame["size_B"][8])
    assert frame["lat_p50_us"][0] == pytest.approx(1.508) and math.isnan(frame["bw_MBps"][0])
    copy, _ = load.read_run(str(_run(tmp_path / "with-parquet", parquet=True)))
    assert first_difference(frame, copy) is None and len(copy) == 9


def test_a_note_with_line_breaks_stays_one_row_and_an_appending_writer_counts_it(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    writer = TableWriter(folder)
    writer.append(_rows()[0] | {"note": "first line\nsecond line\r\nthird"})
    writer.close()
    text = (folder / CSV_NAME).read_text()
    assert text.count("\n") == 2 and "first line second line third" in text
    again = TableWriter(folder)  # --append: the rows already there, counted from the file
    assert again.earlier_rows == 1
    again.close()


@pytest.mark.parametrize(
    ("row", "column", "text", "why"),
    [
        (3, "lat_p50_us", "inf", "has lat_p50_us = 'inf' (row 3): not a finite measurement, in a row measured ok"),
        (3, "lat_p50_us", "-inf", "has lat_p50_us = '-inf' (row 3): not a finite measurement"),
        (5, "lat_p50_us", "NaN", "has lat_p50_us = 'NaN' (row 5): not a finite measurement"),
        (1, "bw_MBps", "Infinity", "has bw_MBps = 'Infinity' (row 1): not a finite measurement"),
        (2, "lat_min_us", "fast", "has lat_min_us = 'fast' (row 2): not a number"),
        (4, "kernel", "", "has kernel = '' (row 4): not a kernel fabricbench has"),
        (4, "kernel", "5", "has kernel = '5' (row 4): not a kernel fabricbench has"),
        (2, "transport", "infiniband", "has transport = 'infiniband' (row 2): not a transport fabricbench has"),
        (6, "size_B", "", "has size_B = '' (row 6): empty in a row measured ok"),
        (6, "size_B", "1.5", "has size_B = 1.5 (row 6): not a whole number of bytes from 0 to"),
        (6, "ranks", "-2", "has ranks = -2 (row 6): not a whole number from 0 to 2**53"),
        (7, "status", "", "has status = '' (row 7): a row says ok, or why it was not measured"),
    ],
)
def test_a_bad_cell_is_refused_naming_the_file_row_and_column(run, row, column, text, why):
    _edit(run, row, column, text)
    assert _refused(run).startswith(f"{str(run / CSV_NAME)!r} {why}")


def test_an_unsupported_rows_cells_are_not_measurements(run):
    _edit(run, 9, "lat_p50_us", "inf")  # run by no one: not compared, checked or fitted
    frame, _ = load.read_run(str(run))
    assert math.isinf(frame["lat_p50_us"][8]) and math.isnan(frame["size_B"][8])


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_figure_in_the_parquet_copy_is_refused(tmp_path, value):
    run = _run(tmp_path / "run", parquet=True)
    table = pq.read_table(run / PARQUET_NAME)
    p50 = table.column("lat_p50_us").to_pylist()
    p50[2] = value  # a float NaN, not the null an empty cell is
    index = table.column_names.index("lat_p50_us")
    pq.write_table(table.set_column(index, "lat_p50_us", pa.array(p50, pa.float64())), run / PARQUET_NAME)
    shown = {math.inf: "inf", -math.inf: "-inf"}.get(value, "nan")
    assert _refused(run) == f"{str(run / PARQUET_NAME)!r} has lat_p50_us = {shown!r} (row 3): " + (
        "not a finite measurement, in a row measured ok"
    )


def test_a_csv_cut_mid_row_is_refused(run):
    table = run / CSV_NAME
    table.write_bytes(table.read_bytes()[:-30])
    assert _refused(run).endswith("ends in a cut row (row 9 has no line break): a table written to its end has")


def test_a_row_with_fields_missing_is_refused(run):
    lines = (run / CSV_NAME).read_text().split("\n")
    lines[4] = ",".join(lines[4].split(",")[:-3])
    (run / CSV_NAME).write_text("\n".join(lines))
    expected = f"row 4 has {len(COLUMNS) - 3} fields, its header {len(COLUMNS)}: a row cut short or run together"
    assert expected in _refused(run)


def test_a_table_without_measured_columns_is_refused(tmp_path):
    table = tmp_path / "dashes.csv"
    table.write_text("transport,kernel,size_B,status\nmpi,latency,8,ok\n")
    assert (
        _refused(table) == f"{str(table)!r} is not a fabricbench table: no measured column (lat_p50_us, bw_MBps, ...)"
    )


def test_a_column_twice_is_refused(tmp_path):
    table = tmp_path / "twice.csv"
    table.write_text("transport,kernel,size_B,status,lat_p50_us,kernel\nmpi,latency,8,ok,1.5,bw\n")
    assert _refused(table) == f"{str(table)!r} has column 'kernel' twice"


@pytest.mark.parametrize(
    ("metadata", "why"),
    [
        ({"rows": 10**9}, "says the table holds 1000000000 rows, but {table!r} holds 9"),
        ({"rows": 8}, "says the table holds 8 rows, but {table!r} holds 9"),
        ({"rows": 5, "previous_runs": [{"rows": 5}]}, "says the table holds 10 rows, but {table!r} holds 9"),
        ({"rows": 4, "previous_runs": [{"complete": False}, {"rows": 6}]}, "holds at least 10 rows, but"),
        ({"rows": "9"}, "has metadata field 'rows' = '9', not a count of rows"),
        ({"rows": True}, "has metadata field 'rows' = True, not a count of rows"),
        ({"previous_runs": {"rows": 1}}, "has metadata field 'previous_runs' = {'rows': 1}, not a list of objects"),
    ],
)
def test_a_row_count_other_than_the_metadatas_is_refused(tmp_path, metadata, why):
    run = _run(tmp_path / "run", **metadata)
    message = _refused(run)
    assert (
        message.startswith(f"{str(run / META_NAME)!r} ")
        and why.replace("{table!r}", repr(str(run / CSV_NAME))) in message
    )


@pytest.mark.parametrize(
    "metadata",
    [
        {"rows": 4, "previous_runs": [{"rows": 5}]},  # run --append: every run's rows together
        {"rows": 4, "previous_runs": [{"complete": False}]},  # an earlier run was killed: at least 4
        {"complete": False},  # the run was killed: it recorded no count
    ],
)
def test_the_counts_of_every_run_in_the_folder_add_up(tmp_path, metadata):
    run = _run(tmp_path / "run", **metadata)
    if "rows" not in metadata:
        (run / META_NAME).write_text(json.dumps({"schema_version": 8, **metadata}))
    frame, _ = load.read_run(str(run))
    assert len(frame) == 9


def test_the_parquet_copys_own_metadata_counts_when_there_is_no_metadata_json(tmp_path):
    run = _run(tmp_path / "run", parquet=True, rows=10**9)
    (run / META_NAME).unlink()
    assert _refused(run) == f"{str(run / PARQUET_NAME)!r} says the table holds 1000000000 rows, but " + (
        f"{str(run / PARQUET_NAME)!r} holds 9"
    )


def test_first_difference_names_the_row_and_column(run, tmp_path):
    frame, _ = load.read_run(str(run))
    other = frame.copy()
    other.loc[5, "note"] = "edited"
    assert first_difference(frame, other) == (6, "note")
    assert first_difference(frame.iloc[:4], frame) is None
    assert first_difference(frame, frame.iloc[:4]) == (5, "")


# Ctrl-C is raised in the main thread when a system call returns; where it lands inside a row's write cannot be
# chosen on a real run, so these stand in for it: os.fsync (os.write) raising KeyboardInterrupt after the row
# (half of it) reached the file.
def _interrupted_at(monkeypatch, call: str, after: int) -> None:
    import fabricbench.measure.results as results

    real = getattr(results.os, call)
    calls = []

    def interrupted(fd, *args):
        calls.append(fd)
        if len(calls) <= after:
            return real(fd, *args)
        if call == "write":
            real(fd, args[0][: len(args[0]) // 2])
        else:
            real(fd, *args)
        monkeypatch.setattr(results.os, call, real)
        raise KeyboardInterrupt

    monkeypatch.setattr(results.os, call, interrupted)


@pytest.mark.parametrize("call", ["fsync", "write"])
def test_a_table_closed_after_ctrl_c_mid_row_counts_the_rows_the_file_holds(tmp_path, monkeypatch, call):
    folder = tmp_path / "run"
    folder.mkdir()
    writer = TableWriter(folder)
    first, second = _rows()[:2]
    writer.append(first)
    _interrupted_at(monkeypatch, call, after=0)
    with pytest.raises(KeyboardInterrupt):
        writer.append(second)
    writer.close()
    lines = (folder / CSV_NAME).read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends with a whole line: a half row is cut back
    whole = len(lines) - 2  # less the header and the empty string after the last newline
    assert writer.rows == whole == (2 if call == "fsync" else 1)


def test_closing_a_table_twice_leaves_other_files_alone(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    writer = TableWriter(folder)
    writer.append(_rows()[0])
    writer.close()
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)  # may take the number the table's file had
    try:
        writer.close()  # the error path closes again: nothing happens, no OSError, the other file stays open
        os.fstat(other)
    finally:
        os.close(other)
    assert writer.rows == 1


@pytest.mark.parametrize("dropped", ["bw_MBps", "lat_p50_us"])
def test_a_table_without_a_measured_column_reads_it_as_not_measured(tmp_path, capsys, dropped):
    """A table trimmed by hand (a measured column left out) is read with that column blank: compare and model
    answer from what is there instead of dying on the missing name."""
    from fabricbench.cli import main

    example = Path(__file__).resolve().parents[2] / "results" / "examples" / "default-sweep"
    lines = (example / CSV_NAME).read_text().splitlines()
    at = lines[0].split(",").index(dropped)
    trimmed = tmp_path / "trimmed"
    trimmed.mkdir()
    (trimmed / CSV_NAME).write_text("".join(",".join(c for i, c in enumerate(line.split(",")) if i != at) + "\n"
                                            for line in lines))  # fmt: skip
    (trimmed / META_NAME).write_text((example / META_NAME).read_text())
    frame, _ = load.read_run(trimmed)
    assert frame[dropped].isna().all()
    assert main(["model", str(trimmed)]) == 0
    assert main(["compare", str(trimmed), str(example)]) == 0
    assert "Traceback" not in capsys.readouterr().err

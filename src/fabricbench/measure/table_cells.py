"""The tidy table as a file holds it, read back cell by cell, and the one check of what was read.

Every reader of a finished table goes through ``check_cells``: compare, check and model (analysis/load.py)
and ``run --append``'s repair of its folder (results.py), so a table is refused in the same words wherever it
is read. pandas is imported only by the functions that build DataFrames: ranks import this package.
"""

from __future__ import annotations

import csv
import io
import json
import math
import reprlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fabricbench.errors import UsageError
from fabricbench.measure.schema import INTEGER, NUMERIC, OPTIONAL, PARQUET_ONLY_ROWS, PREVIOUS_RUNS, is_measured

if TYPE_CHECKING:
    import pandas as pd

REQUIRED = ["transport", "kernel", "size_B", "status"]
MAX_SIZE_B = 1 << 50  # 1 PiB: no run measures a larger message; below it float64 holds every size exactly
MAX_COUNT = 1 << 53  # the other integer columns (ranks, iterations, ...): float64 holds every one exactly


@dataclass
class Cells:
    """A table as its file holds it: the column names and every row's cells as text ("" for an empty cell)."""

    name: str  # the file, as a refusal names it
    header: list[str]
    rows: list[list[str]]


def csv_cells(source: Path, name: str) -> Cells:
    """A CSV's cells, every row whole: a file that ends mid-row, or a row of another field count, raises UsageError.

    fabricbench ends every row with a line break, so a last line without one is a row cut off
    (a kill, a full disk, a copy cut short); pandas would read it, padded with empty cells.
    """
    data = source.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read results from {name!r}: not UTF-8 text (byte {exc.start})") from None
    try:
        lines = [line for line in csv.reader(io.StringIO(text, newline=""), strict=True) if line]
    except csv.Error as exc:
        raise UsageError(f"cannot read results from {name!r}: {exc}") from None
    if not lines:
        raise UsageError(f"{name!r} is empty")
    header, rows = lines[0], lines[1:]
    if not text.endswith("\n"):
        where = f"row {len(rows)}" if rows else "its header"
        raise UsageError(f"{name!r} ends in a cut row ({where} has no line break): a table written to its end has")
    for number, row in enumerate(rows, 1):
        if len(row) != len(header):
            raise UsageError(
                f"{name!r} row {number} has {len(row)} fields, its header {len(header)}: "
                "a row cut short or run together"
            )
    return Cells(name, header, rows)


def _text(value: object) -> str:
    """A Parquet cell as CSV text: null is an empty cell; a float keeps every digit (repr), and NaN shows as nan."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def parquet_cells(source: Path, name: str, pairs: bool = True) -> tuple[Cells, object]:
    """A Parquet file's cells as CSV text, and the metadata in its schema (None without any); without its measured
    all-pairs rows (those with ranks) unless ``pairs``; raises UsageError."""
    import pyarrow
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from fabricbench.measure.verdict import METRICS

    try:
        leave_out = None
        if not pairs and "src_rank" in pq.read_schema(source).names:
            leave_out = ~(pc.field("kernel").isin(list(METRICS)) & pc.field("src_rank").is_valid())
        table = pq.read_table(source, filters=leave_out)
    except (OSError, ValueError, pyarrow.ArrowException) as exc:
        raise UsageError(f"cannot read results from {name!r}: {first_line(exc)}") from None
    header = [str(column) for column in table.column_names]
    columns = [[_text(value) for value in column.to_pylist()] for column in table.columns]
    rows = [list(row) for row in zip(*columns, strict=True)] if columns else []
    raw = (table.schema.metadata or {}).get(b"fabricbench")
    return Cells(name, header, rows), parse_json(raw, name) if raw else None


def first_line(exc: Exception) -> str:
    """What a reader's exception says, in one line (its type where it says nothing)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def embedded_metadata(source: Path) -> object:
    """The metadata a Parquet file keeps in its schema ({} without any); a one-line UsageError."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        raw = (pq.read_schema(source).metadata or {}).get(b"fabricbench")
    except (OSError, pyarrow.ArrowException) as exc:
        raise UsageError(f"cannot read results from {str(source)!r}: {first_line(exc)}") from None
    return parse_json(raw, str(source)) if raw else {}


def parse_json(raw: str | bytes, name: str) -> object:
    """JSON text read from ``name`` (a metadata file, or a Parquet file's own copy); a UsageError naming it."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise UsageError(f"cannot read results from {name!r}: its JSON is nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"cannot read results from {name!r}: {str(exc).splitlines()[0]}") from None


def check_cells(cells: Cells, transports: Collection[str], empty: bool = False) -> pd.DataFrame:
    """The one check of a table read from disk (compare, check, model and run --append), as a typed DataFrame.

    ``transports``: the names a row's transport may hold (the registry's, which lies above this layer).
    Refused, with one line naming the file, the row (from 1, below the header) and the column: a
    table without the columns every schema has (transport, kernel, size_B, status and at least one
    measured column), a column twice, no rows, a transport or kernel fabricbench does not have, an
    empty status, a measured cell that is no number, or is not finite (inf, -inf, nan) in a row
    measured ``ok``, and an integer column (size_B, ranks, ...) holding anything but a whole number;
    an ok row's size_B may not be empty (an unsupported row's may). Measured columns come back as
    float64 with NaN for an empty cell, size_B and the other integer columns as float64 too, except
    the schema-3 and later ones (repeat, the ranks and GPUs of a pair), which stay text as written.
    """
    import pandas as pd

    name, header = cells.name, cells.header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UsageError(f"{name!r} is not a fabricbench table: no column {', '.join(missing)}")
    if not NUMERIC & set(header):
        raise UsageError(f"{name!r} is not a fabricbench table: no measured column (lat_p50_us, bw_MBps, ...)")
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise UsageError(f"{name!r} has column {twice[0]!r} twice")
    if not cells.rows and not empty:  # ``empty``: a table read without its all-pairs rows may hold no other
        raise UsageError(f"{name!r} holds no result rows")

    def refuse(number: int, column: str, shown: object, why: str) -> UsageError:
        return UsageError(f"{name!r} has {column} = {reprlib.repr(shown)} (row {number}): {why}")

    at = {column: index for index, column in enumerate(header)}
    from fabricbench.measure.kernels import KERNELS

    kernels = set(KERNELS)
    statuses = [row[at["status"]] for row in cells.rows]
    measured = [is_measured(status) for status in statuses]
    for number, row in enumerate(cells.rows, 1):
        if row[at["transport"]] not in transports:
            raise refuse(number, "transport", row[at["transport"]], "not a transport fabricbench has")
        if row[at["kernel"]] not in kernels:
            raise refuse(number, "kernel", row[at["kernel"]], "not a kernel fabricbench has")
        if not statuses[number - 1]:
            raise refuse(number, "status", "", "a row says ok, or why it was not measured")
    typed: dict[str, object] = {}
    for column, index in at.items():
        texts = [row[index] for row in cells.rows]
        if column in NUMERIC:
            typed[column] = _numbers(texts, measured, lambda n, t, w, c=column: refuse(n, c, t, w))
        elif column in INTEGER:
            values = _whole(texts, measured, column, lambda n, t, w, c=column: refuse(n, c, t, w))
            if column in OPTIONAL:  # text, as migrate fills these columns in for older tables
                typed[column] = ["" if math.isnan(v) else str(int(v)) for v in values]
            else:
                typed[column] = values
        else:
            typed[column] = texts
    return pd.DataFrame(typed)


def first_difference(short: pd.DataFrame, long: pd.DataFrame) -> tuple[int, str] | None:
    """Where the rows of ``short`` differ from the first rows of ``long`` (two check_cells tables of one layout):
    (row from 1, column), or None when ``long`` begins with every row of ``short``."""
    if len(short) > len(long) or list(short.columns) != list(long.columns):
        return (min(len(short), len(long)) + 1, "") if len(short) > len(long) else (1, "")
    head = long.iloc[: len(short)].reset_index(drop=True)
    short = short.reset_index(drop=True)
    differ = np.zeros((len(short), len(short.columns)), dtype=bool)
    for index, column in enumerate(short.columns):
        a, b = short[column], head[column]
        differ[:, index] = ~((a == b) | (a.isna() & b.isna())).to_numpy(bool)
    rows = np.flatnonzero(differ.any(axis=1))
    if not len(rows):
        return None
    row = int(rows[0])
    return row + 1, str(short.columns[int(np.flatnonzero(differ[row])[0])])


def _numbers(texts: list[str], measured: list[bool], refuse) -> np.ndarray:
    """A measured column as floats (NaN for an empty cell); no number, or a non-finite one in an ok row, refused."""
    values = np.full(len(texts), math.nan)
    for row, text in enumerate(texts):
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            raise refuse(row + 1, text, "not a number") from None
        if measured[row] and not math.isfinite(value):
            raise refuse(row + 1, text, "not a finite measurement, in a row measured ok") from None
        values[row] = value
    return values


def _whole(texts: list[str], measured: list[bool], column: str, refuse) -> np.ndarray:
    """An integer column as floats (NaN for an empty cell): each cell a whole number (8, or 8.0 as pandas writes)."""
    top, top_text = (MAX_SIZE_B, f"{MAX_SIZE_B} (1 PiB)") if column == "size_B" else (MAX_COUNT, "2**53")
    what = "a whole number of bytes" if column == "size_B" else "a whole number"
    values = np.full(len(texts), math.nan)
    for row, text in enumerate(texts):
        if not text:
            if column == "size_B" and measured[row]:
                raise refuse(row + 1, text, "empty in a row measured ok: its message size is not known")
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (0 <= value <= top and value % 1 == 0):
            # A number is shown as one (1.5, 1e+30, -4), what is none as the text it is.
            shown = text if math.isnan(value) else int(value) if value.is_integer() and abs(value) < 1e18 else value
            raise refuse(row + 1, shown, f"not {what} from 0 to {top_text}")
        values[row] = value
    return values


def expected_rows(metadata: dict, csv: bool = False) -> tuple[int, bool]:
    """The rows a table with ``metadata`` holds, and whether exactly: the sum of ``rows`` over the run and its
    PREVIOUS_RUNS (run --append); for its ``csv``, less the rows kept in Parquet only (PARQUET_ONLY_ROWS). A run
    that did not finish recorded no count, so its rows are at least the others'. A count that is not a whole
    number of 0 or more raises UsageError (worded to follow the file's name)."""
    previous = metadata.get(PREVIOUS_RUNS, [])
    if not isinstance(previous, list) or not all(isinstance(run, dict) for run in previous):
        raise UsageError(f"has metadata field {PREVIOUS_RUNS!r} = {reprlib.repr(previous)}, not a list of objects")
    total, exact = 0, True
    for run in [*previous, metadata]:
        if "rows" not in run:
            exact = False
            continue
        for field in ("rows", PARQUET_ONLY_ROWS) if csv else ("rows",):
            count = run.get(field, 0)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise UsageError(f"has metadata field {field!r} = {reprlib.repr(count)}, not a count of rows")
            total += count if field == "rows" else -count
    return total, exact


def check_row_count(rows: int, metadata: dict, meta_name: str, table_name: str, csv: bool = False) -> None:
    """Refuse a table whose row count is not the one its metadata records: rows lost, or rows added by hand (a
    ``csv`` holds all but those kept in Parquet only)."""
    try:
        total, exact = expected_rows(metadata, csv)
    except UsageError as exc:
        raise UsageError(f"{meta_name!r} {exc}") from None
    if rows != total if exact else rows < total:
        says = f"{total}" if exact else f"at least {total}"
        raise UsageError(f"{meta_name!r} says the table holds {says} rows, but {table_name!r} holds {rows}")

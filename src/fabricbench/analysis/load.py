"""Reading finished runs for ``fabricbench compare``: checked inputs, schema migration, series.

Every input is read, checked and migrated to the current schema here, so the
comparison and the plots only see tables of one shape. ``check_cells`` is the one
check of a table on disk, which check, model and ``run --append`` read through too.
A series is one (run, transport, buffer) of one input, so a run that measured both
mpi and tcp gives two series. Only those commands import this module, on one
process (rank 0 for --append), so pandas is imported at the top.
"""

from __future__ import annotations

import csv
import io
import json
import math
import reprlib
import stat
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fabricbench.errors import UsageError
from fabricbench.measure.memory import format_bytes
from fabricbench.measure.results import (
    CSV_NAME,
    INTEGER,
    META_NAME,
    NUMERIC,
    PARQUET_NAME,
    PREVIOUS_RUNS,
    SCHEMA_VERSION,
)

REQUIRED = ["transport", "kernel", "size_B", "status"]
# Columns an older table may lack, with the value a row without them means: schema 1 may lack the first six,
# schema 2 lacks the repeat index (one run: repeat 0) and the all-pairs columns (no pair rows then), schema 3 the
# GPU-pair columns (no GPU pair rows then).
OPTIONAL = {
    "run_id": "",
    "label": "",
    "buffer": "host",
    "method": "",
    "validation": "",
    "sample": "",
    "repeat": 0,
    "schedule": "",
    "src_rank": "",
    "dst_rank": "",
    "src_host": "",
    "dst_host": "",
    "src_gpu": "",
    "dst_gpu": "",
}
# Metadata fields the report reads that must be strings (and "hosts", a list of strings).
STRING_FIELDS = ("label", "run_id", "mpi_vendor")
# What migrate() records in the metadata it returns: the sentence the report prints as a note.
MIGRATED = "migrated"
KEY = ["kernel", "size_B"]
SCALING = "scaling"  # the column split_series adds: a --ranks row's own kernel name ("" for every other row)
MAX_SIZE_B = 1 << 50  # 1 PiB: no run measures a larger message; below it float64 holds every size exactly
MAX_COUNT = 1 << 53  # the other integer columns (ranks, iterations, ...): float64 holds every one exactly
# The largest table or metadata file read (compare --max-input): pandas holds several times a table's size.
max_input_bytes = 1 << 30


@dataclass
class Series:
    """One line in the tables and plots."""

    letter: str
    name: str
    source: str
    run_id: str
    transport: str
    buffer: str
    metadata: dict


def _printable(text: str) -> bool:
    """False for JSON's lone surrogate escapes (\\ud800): a str, but one no terminal or file can take."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _check_metadata(metadata: object) -> None:
    """Raise a UsageError, worded to follow the input's name, for metadata the report cannot read."""
    if not isinstance(metadata, dict):
        raise UsageError("has metadata that is not a JSON object")
    hosts = metadata.get("hosts", [])
    if not (isinstance(hosts, list) and all(isinstance(host, str) for host in hosts)):
        raise UsageError(f"has metadata field 'hosts' = {reprlib.repr(hosts)}, not a list of strings")
    for field in STRING_FIELDS:
        if not isinstance(metadata.get(field, ""), str):
            raise UsageError(f"has metadata field {field!r} = {reprlib.repr(metadata[field])}, not a string")
    for field, text in [*(("hosts", host) for host in hosts), *((f, metadata.get(f, "")) for f in STRING_FIELDS)]:
        if not _printable(text):
            raise UsageError(f"has metadata field {field!r} = {reprlib.repr(text)}, with characters no text can hold")
    version = metadata.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError(f"has metadata field 'schema_version' = {reprlib.repr(version)}, not a positive integer")
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"was written by a newer fabricbench (schema {version}); this one reads up to {SCHEMA_VERSION}"
        )


def migrate(frame: pd.DataFrame, metadata: dict) -> tuple[pd.DataFrame, dict]:
    """A table and its metadata brought up to SCHEMA_VERSION, so old tables are read on purpose, not by defaults.

    Schema 1 is every table written before ``schema_version`` existed: its
    metadata called the OS release ``kernel`` (the name of a row column).
    Rows of schema 1 to 3 may lack the OPTIONAL columns. The returned metadata says under
    MIGRATED what was done; a current table comes back unchanged. Metadata of
    the wrong shape or of a newer schema raises a UsageError.
    """
    _check_metadata(metadata)
    if metadata.get("schema_version", 1) == SCHEMA_VERSION:
        return frame, metadata
    metadata = dict(metadata)
    version = metadata.get("schema_version", 1)
    if version == 1 and "kernel" in metadata:
        metadata["os_release"] = metadata.pop("kernel")
    frame = frame.copy()
    for column, default in OPTIONAL.items():
        if column not in frame.columns:
            frame[column] = default
    unmarked = "" if "schema_version" in metadata else " (it has no schema_version)"
    metadata["schema_version"] = SCHEMA_VERSION
    metadata[MIGRATED] = f"read as schema {version}{unmarked}; migrated to {SCHEMA_VERSION}"
    return frame, metadata


def _require_columns(path: str, frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UsageError(f"{path!r} is not a {what}: no column {', '.join(missing)}")


def _check_file(name: str, source: Path) -> None:
    """A file compare may read: a regular one (/dev/zero never ends, a FIFO may never answer) within the cap."""
    info = source.stat()
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{name!r} is not a regular file")
    if info.st_size > max_input_bytes:
        raise UsageError(
            f"{name!r} holds {format_bytes(info.st_size)}; compare reads up to {format_bytes(max_input_bytes)} "
            "(--max-input raises it)"
        )


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


def parquet_cells(source: Path, name: str) -> tuple[Cells, object]:
    """A Parquet file's cells as CSV text, and the metadata in its schema (None without any); raises UsageError."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(source)
    except (OSError, ValueError, pyarrow.ArrowException) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read results from {name!r}: {first_line}") from None
    header = [str(column) for column in table.column_names]
    columns = [[_text(value) for value in column.to_pylist()] for column in table.columns]
    rows = [list(row) for row in zip(*columns, strict=True)] if columns else []
    raw = (table.schema.metadata or {}).get(b"fabricbench")
    return Cells(name, header, rows), _json(raw, name) if raw else None


def _json(raw: str | bytes, name: str) -> object:
    try:
        return json.loads(raw)
    except RecursionError:
        raise UsageError(f"cannot read results from {name!r}: its JSON is nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"cannot read results from {name!r}: {str(exc).splitlines()[0]}") from None


def _known() -> tuple[set[str], set[str]]:
    from fabricbench.measure.kernels import KERNELS
    from fabricbench.transports import TRANSPORTS

    return set(TRANSPORTS), set(KERNELS)


def check_cells(cells: Cells) -> pd.DataFrame:
    """The one check of a table read from disk (compare, check, model and run --append), as a typed DataFrame.

    Refused, with one line naming the file, the row (from 1, below the header) and the column: a
    table without the columns every schema has (transport, kernel, size_B, status and at least one
    measured column), a column twice, no rows, a transport or kernel fabricbench does not have, an
    empty status, a measured cell that is no number, or is not finite (inf, -inf, nan) in a row
    measured ``ok``, and an integer column (size_B, ranks, ...) holding anything but a whole number;
    an ok row's size_B may not be empty (an unsupported row's may). Measured columns come back as
    float64 with NaN for an empty cell, size_B and the other integer columns as float64 too, except
    the schema-3 and later ones (repeat, the ranks and GPUs of a pair), which stay text as written.
    """
    name, header = cells.name, cells.header
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UsageError(f"{name!r} is not a fabricbench table: no column {', '.join(missing)}")
    if not NUMERIC & set(header):
        raise UsageError(f"{name!r} is not a fabricbench table: no measured column (lat_p50_us, bw_MBps, ...)")
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise UsageError(f"{name!r} has column {twice[0]!r} twice")
    if not cells.rows:
        raise UsageError(f"{name!r} holds no result rows")

    def refuse(number: int, column: str, shown: object, why: str) -> UsageError:
        return UsageError(f"{name!r} has {column} = {reprlib.repr(shown)} (row {number}): {why}")

    at = {column: index for index, column in enumerate(header)}
    transports, kernels = _known()
    statuses = [row[at["status"]] for row in cells.rows]
    measured = [status.startswith("ok") for status in statuses]
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


def expected_rows(metadata: dict) -> tuple[int, bool]:
    """The rows a table with ``metadata`` holds, and whether exactly: the sum of ``rows`` over the run and its
    PREVIOUS_RUNS (run --append). A run that did not finish recorded no count, so its rows are at least the
    others'. A count that is not a whole number of 0 or more raises UsageError (worded to follow the file's name)."""
    previous = metadata.get(PREVIOUS_RUNS, [])
    if not isinstance(previous, list) or not all(isinstance(run, dict) for run in previous):
        raise UsageError(f"has metadata field {PREVIOUS_RUNS!r} = {reprlib.repr(previous)}, not a list of objects")
    total, exact = 0, True
    for run in [*previous, metadata]:
        if "rows" not in run:
            exact = False
            continue
        count = run["rows"]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise UsageError(f"has metadata field 'rows' = {reprlib.repr(count)}, not a count of rows")
        total += count
    return total, exact


def check_row_count(rows: int, metadata: dict, meta_name: str, table_name: str) -> None:
    """Refuse a table whose row count is not the one its metadata records: rows lost, or rows added by hand."""
    try:
        total, exact = expected_rows(metadata)
    except UsageError as exc:
        raise UsageError(f"{meta_name!r} {exc}") from None
    if rows != total if exact else rows < total:
        says = f"{total}" if exact else f"at least {total}"
        raise UsageError(f"{meta_name!r} says the table holds {says} rows, but {table_name!r} holds {rows}")


def _load(path: str) -> tuple[pd.DataFrame, dict]:
    """One input as a checked DataFrame of the current schema, or a one-line UsageError."""
    source = Path(path)
    if not source.exists():
        raise UsageError(f"no such file or directory: {path!r}")
    if source.is_dir() and not any((source / name).exists() for name in (CSV_NAME, PARQUET_NAME)):
        raise UsageError(f"no {CSV_NAME} or {PARQUET_NAME} in {path!r}")
    inside = [source / name for name in (META_NAME, PARQUET_NAME, CSV_NAME)] if source.is_dir() else [source]
    for file in inside:
        if file.exists():
            _check_file(str(file) if file != source else path, file)
    if source.is_file() and source.stat().st_size == 0:
        raise UsageError(f"{path!r} is empty")
    metadata: object = {}
    meta_name = ""
    table = source
    if source.is_dir():
        if (source / META_NAME).exists():
            meta_name = str(source / META_NAME)
            try:
                metadata = _json((source / META_NAME).read_bytes(), path)
            except OSError as exc:
                raise UsageError(f"cannot read results from {path!r}: {exc.strerror or exc}") from None
        table = source / PARQUET_NAME if (source / PARQUET_NAME).exists() else source / CSV_NAME
    name = path if table == source else str(table)
    try:
        if table.suffix == ".parquet":
            cells, embedded = parquet_cells(table, name)
            if embedded is not None and not meta_name:
                metadata, meta_name = embedded, name
        else:
            cells = csv_cells(table, name)
    except OSError as exc:
        raise UsageError(f"cannot read results from {path!r}: {exc.strerror or exc}") from None
    frame = check_cells(cells)
    try:
        frame, metadata = migrate(frame, metadata)
    except UsageError as exc:
        raise UsageError(f"{path!r} {exc}") from None
    _require_columns(path, frame, OPTIONAL, f"schema {SCHEMA_VERSION} table")
    if meta_name:
        check_row_count(len(frame), metadata, meta_name, name)
    frame = frame.copy()
    for column, default in OPTIONAL.items():
        frame[column] = frame[column].fillna(default).astype(str)
    frame["size_B"] = frame["size_B"].astype(float)
    return frame, metadata


def _path_name(path: str) -> str:
    source = Path(path).resolve()
    if source.name in (CSV_NAME, PARQUET_NAME):
        return source.parent.name
    return source.stem if source.is_file() else source.name


def _run_label(path: str, metadata: dict, run_id: str, rows: pd.DataFrame) -> str:
    """The metadata's label, else the rows' label, else the run id, else the path's name."""
    if metadata.get("label") and metadata.get("run_id", run_id) == run_id:
        return metadata["label"]
    labels = [label for label in rows["label"].unique() if label]
    return labels[0] if labels else run_id or _path_name(path)


def comparable(rows: pd.DataFrame) -> pd.Series:
    """Rows whose numbers stand: measured, and not failed validation."""
    return rows["status"].str.startswith("ok") & (rows["validation"] != "fail")


def by_rank_count(rows: pd.DataFrame) -> pd.DataFrame:
    """One series' rows with a kernel measured on several rank counts (run --ranks) named per count,
    "allreduce on 4 ranks", so each count is compared on its own; SCALING keeps the kernel's name for the
    scaling plot. A kernel on one rank count keeps its name, so runs on different counts still compare."""
    rows = rows.copy()
    rows[SCALING] = ""
    counts = pd.to_numeric(rows["ranks"], errors="coerce") if "ranks" in rows.columns else None
    if counts is None:
        return rows
    for kernel in rows["kernel"].unique():
        mine = rows["kernel"] == kernel
        if counts[mine].nunique() > 1:
            rows.loc[mine, SCALING] = kernel
            rows.loc[mine, "kernel"] = kernel + " on " + counts[mine].astype("Int64").astype(str) + " ranks"
    return rows


def split_series(paths: list[str]) -> tuple[list[Series], pd.DataFrame, list[str]]:
    """Every input cut into series; the tidy rows of all of them; notes about migrations and repeated rows."""
    found: list[tuple[str, dict, str, str, str, str, pd.DataFrame]] = []
    notes = []
    for path in paths:
        frame, metadata = _load(path)
        if MIGRATED in metadata:
            notes.append(f"{path}: {metadata[MIGRATED]}")
        for (run_id, transport, buffer), rows in frame.groupby(["run_id", "transport", "buffer"], sort=False):
            label = _run_label(path, metadata, run_id, rows)
            found.append((path, metadata, run_id, transport, buffer, label, rows))
    if len(found) > len(string.ascii_uppercase):
        raise UsageError(f"compare takes at most {len(string.ascii_uppercase)} series, these inputs hold {len(found)}")
    vary_transport = len({f[3] for f in found}) > 1
    vary_buffer = len({f[4] for f in found}) > 1
    series, frames, taken = [], [], set()
    for letter, (path, metadata, run_id, transport, buffer, label, rows) in zip(
        string.ascii_uppercase, found, strict=False
    ):
        detail = [part for part, varies in ((transport, vary_transport), (buffer, vary_buffer)) if varies]
        name = f"{label} ({', '.join(detail)})" if detail else label
        unique, copy = name, 2
        while unique in taken:
            unique, copy = f"{name} #{copy}", copy + 1
        taken.add(unique)
        series.append(Series(letter, unique, path, run_id, transport, buffer, metadata))
        rows = by_rank_count(rows)
        measured = rows[comparable(rows)]
        # An all-pairs kernel has a row per (source, destination) rank or GPU at each size: those are not repeats.
        unique_by = [*KEY, "repeat", "src_rank", "dst_rank", "src_gpu", "dst_gpu"]
        repeated = measured.duplicated(unique_by, keep="last").reindex(rows.index, fill_value=False)
        if repeated.any():
            notes.append(f"{letter} holds {int(repeated.sum())} repeated (kernel, size) rows; the last of each is used")
        rows = rows[~repeated].copy()
        rows.insert(0, "letter", letter)
        rows.insert(0, "series", unique)
        rows["source"] = path
        frames.append(rows)
    return series, pd.concat(frames, ignore_index=True), notes

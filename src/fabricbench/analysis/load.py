"""Reading finished runs for compare, check and model: one public reader (``read_run``), migration, series.

Every input is read, checked (measure/table_cells.py, the check ``run --append``
reads through too) and migrated to the current schema by ``read_run``, so the
comparison, the plots, the thresholds and the model only see tables of one shape.
A series is one (run, transport, buffer) of one input, so a run that measured both
mpi and tcp gives two series. Only those commands import this module, so pandas is
imported at the top.
"""

from __future__ import annotations

import math
import reprlib
import stat
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fabricbench.collectives.spec import IN_PLACE
from fabricbench.errors import UsageError
from fabricbench.measure.formatting import format_bytes
from fabricbench.measure.pair_table import PairTable, run_sources
from fabricbench.measure.schema import (
    CSV_NAME,
    INTEGER,
    META_NAME,
    NUMERIC,
    OPTIONAL,
    OPTIONAL_NUMERIC,
    PARQUET_NAME,
    SCHEMA_VERSION,
    is_measured,
)
from fabricbench.measure.table_cells import (
    check_cells,
    check_row_count,
    csv_cells,
    embedded_metadata,
    parquet_cells,
    parse_json,
)
from fabricbench.measure.topology import Topology
from fabricbench.measure.verdict import METRICS
from fabricbench.transports import TRANSPORTS

# Metadata fields the report reads that must be strings (and "hosts", a list of strings).
STRING_FIELDS = ("label", "run_id", "mpi_vendor")
# What migrate() records in the metadata it returns: the sentence the report prints as a note.
MIGRATED = "migrated"
KEY = ["kernel", "size_B"]
SCALING = "scaling"  # the column split_series adds: a --ranks row's own kernel name ("" for every other row)
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
    Rows of schema 1 to 4 may lack the OPTIONAL and OPTIONAL_NUMERIC columns. The returned metadata says under
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
    for column in OPTIONAL_NUMERIC:
        if column not in frame.columns:
            frame[column] = math.nan
    unmarked = "" if "schema_version" in metadata else " (it has no schema_version)"
    metadata["schema_version"] = SCHEMA_VERSION
    metadata[MIGRATED] = f"read as schema {version}{unmarked}; migrated to {SCHEMA_VERSION}"
    return frame, metadata


def _require_columns(path: str, frame: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UsageError(f"{path!r} is not a {what}: no column {', '.join(missing)}")


def _check_file(name: str, source: Path, capped: bool = True) -> None:
    """A file compare may read: a regular one (/dev/zero never ends, a FIFO may never answer), within the cap where
    it is read whole (``capped``)."""
    info = source.stat()
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{name!r} is not a regular file")
    if capped and info.st_size > max_input_bytes:
        raise UsageError(
            f"{name!r} holds {format_bytes(info.st_size)}; compare reads up to {format_bytes(max_input_bytes)} "
            "(--max-input raises it)"
        )


def read_run(path: str | Path, pairs: bool = True) -> tuple[pd.DataFrame, dict]:
    """A finished run (its folder, CSV or Parquet file) as a checked DataFrame of the current schema, and its
    metadata; a one-line UsageError for anything else. Every reader of a finished table (compare, check, model,
    the tests and the benchmarks) reads through it. Without ``pairs`` its measured all-pairs rows are left out:
    compare and check read those as matrices (read_pairs), where 100 million rows are 800 MB, not a frame.

    One typing whichever file is read, the one pandas gives the Parquet copy: a measured column is float64 with
    NaN for a blank cell; an integer column (size_B, ranks, repeat, the ranks and GPUs of a pair, ...) is int64,
    or float64 with NaN where it has a blank cell; every other column is text ("" for a blank cell). A table of
    schema 1 to 4 gets the columns it lacks (migrate): repeat 0, the other integer ones NaN, the text ones their
    OPTIONAL default.
    """
    path = str(path)
    source = Path(path)
    if not source.exists():
        raise UsageError(f"no such file or directory: {path!r}")
    if source.is_dir() and not any((source / name).exists() for name in (CSV_NAME, PARQUET_NAME)):
        raise UsageError(f"no {CSV_NAME} or {PARQUET_NAME} in {path!r}")
    inside = [source / name for name in (META_NAME, PARQUET_NAME, CSV_NAME)] if source.is_dir() else [source]
    for file in inside:
        if file.exists():  # a Parquet file read without its pairs is read filtered: its size is theirs
            _check_file(str(file) if file != source else path, file, pairs or file.suffix != ".parquet")
    if source.is_file() and source.stat().st_size == 0:
        raise UsageError(f"{path!r} is empty")
    metadata: object = {}
    meta_name = ""
    table = source
    if source.is_dir():
        if (source / META_NAME).exists():
            meta_name = str(source / META_NAME)
            try:
                metadata = parse_json((source / META_NAME).read_bytes(), path)
            except OSError as exc:
                raise UsageError(f"cannot read results from {path!r}: {exc.strerror or exc}") from None
        table = source / PARQUET_NAME if (source / PARQUET_NAME).exists() else source / CSV_NAME
    name = path if table == source else str(table)
    try:
        if table.suffix == ".parquet":
            cells, embedded = parquet_cells(table, name, pairs)
            if embedded is not None and not meta_name:
                metadata, meta_name = embedded, name
            total = pq_rows(table) if not pairs else None
        else:
            cells = csv_cells(table, name)
            total = None
    except OSError as exc:
        raise UsageError(f"cannot read results from {path!r}: {exc.strerror or exc}") from None
    frame = check_cells(cells, TRANSPORTS, empty=bool(total))
    try:
        frame, metadata = migrate(frame, metadata)
    except UsageError as exc:
        raise UsageError(f"{path!r} {exc}") from None
    _require_columns(path, frame, OPTIONAL, f"schema {SCHEMA_VERSION} table")
    if meta_name:
        check_row_count(len(frame) if total is None else total, metadata, meta_name, name, table.suffix == ".csv")
    if not pairs:
        frame = frame[~(frame["kernel"].isin(list(METRICS)) & (frame["src_rank"] != ""))]
    frame = frame.copy()
    for column in sorted(NUMERIC - set(frame.columns)):  # a measured column left out of the table: not measured
        frame[column] = math.nan
    for column, default in OPTIONAL.items():
        if column not in INTEGER:
            frame[column] = frame[column].fillna(default).astype(str)
    for column in INTEGER & set(frame.columns):
        # check_cells and migrate hold the schema-3 integer columns as text ("" for blank): numbers from here on.
        values = pd.to_numeric(frame[column]).astype(float)
        frame[column] = values if values.isna().any() else values.astype("int64")
    return frame, metadata


def pq_rows(source: Path) -> int:
    """How many rows a Parquet file holds, from its footer."""
    import pyarrow.parquet as pq

    return pq.read_metadata(source).num_rows


def path_name(path: str) -> str:
    """What an input is called when nothing inside names it: its folder's name, or its file's without the suffix."""
    source = Path(path).resolve()
    if source.name in (CSV_NAME, PARQUET_NAME):
        return source.parent.name
    return source.stem if source.is_file() else source.name


def _run_label(path: str, metadata: dict, run_id: str, rows: pd.DataFrame) -> str:
    """The metadata's label, else the rows' label, else the run id, else the path's name."""
    if metadata.get("label") and metadata.get("run_id", run_id) == run_id:
        return metadata["label"]
    labels = [label for label in rows["label"].unique() if label]
    return labels[0] if labels else run_id or path_name(path)


def comparable(rows: pd.DataFrame) -> pd.Series:
    """Rows whose numbers stand: measured, and not failed validation."""
    return rows["status"].map(is_measured).astype(bool) & (rows["validation"] != "fail")


def shown_metrics(chosen: dict[str, list[str]]) -> list[str]:
    """Every metric that some kernel shows (compare's {kernel: metrics}), once each, in the order they were chosen."""
    return list(dict.fromkeys(m for ms in chosen.values() for m in ms))


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


def by_placement(rows: pd.DataFrame) -> pd.DataFrame:
    """A collective measured in place (run --placement) named so, "allreduce in place", beside its out-of-place
    rows: runs are compared placement with placement, and neither is taken for a repeat of the other."""
    if "placement" not in rows.columns:
        return rows
    in_place = rows["placement"] == IN_PLACE
    if in_place.any():
        rows = rows.copy()
        rows.loc[in_place, "kernel"] = rows.loc[in_place, "kernel"] + " in place"
    return rows


def split_series(paths: list[str]) -> tuple[list[Series], pd.DataFrame, list[str]]:
    """Every input cut into series; the tidy rows of all of them but the measured all-pairs ones (read_pairs reads
    those as matrices); notes about migrations and repeated rows."""
    found: list[tuple[str, dict, str, str, str, str, pd.DataFrame]] = []
    notes = []
    for path in paths:
        frame, metadata = read_run(path, pairs=False)
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
        rows = by_placement(by_rank_count(rows))
        measured = rows[comparable(rows)]
        # An all-pairs kernel has a row per (source, destination) rank or GPU at each size, and the congestion
        # kernel one per (canary test, congestor): those are not repeats.
        unique_by = [*KEY, "repeat", "src_rank", "dst_rank", "src_gpu", "dst_gpu", "canary", "congestor"]
        repeated = measured.duplicated(unique_by, keep="last").reindex(rows.index, fill_value=False)
        if repeated.any():
            notes.append(f"{letter} holds {int(repeated.sum())} repeated (kernel, size) rows; the last of each is used")
        rows = rows[~repeated].copy()
        rows.insert(0, "letter", letter)
        rows.insert(0, "series", unique)
        rows["source"] = path
        frames.append(rows)
    if not frames:  # inputs of all-pairs rows alone: nothing to compare, their matrices to draw
        frames = [by_rank_count(frame.iloc[:0]).assign(series="", letter="", source="")]
    return series, pd.concat(frames, ignore_index=True), notes


# --- the all-pairs rows, as matrices ---------------------------------------------------------------------------


@dataclass
class PairRun:
    """A run's all-pairs rows as matrices (measure.pair_table.PairTable: read a batch of rows at a time, one matrix
    held at a time), with the run's metadata and the topology it keeps (None for a flat fabric)."""

    name: str
    table: PairTable
    metadata: dict
    topology: Topology | None


def read_pairs(path: str | Path) -> PairRun:
    """A finished run's all-pairs rows (its folder, CSV or Parquet file), checked as they are read: a one-line
    UsageError names the file, the row and the column of anything the verdict cannot take."""
    name = str(path)
    source = Path(path)
    if not source.exists():
        raise UsageError(f"no such file or directory: {name!r}")
    metadata: object = {}
    if source.is_dir():
        sources = run_sources(source)
        if not sources:
            raise UsageError(f"no {CSV_NAME} or {PARQUET_NAME} in {name!r}")
        if (source / META_NAME).exists():
            _check_file(str(source / META_NAME), source / META_NAME)
            try:
                metadata = parse_json((source / META_NAME).read_bytes(), name)
            except OSError as exc:
                raise UsageError(f"cannot read results from {name!r}: {exc.strerror or exc}") from None
    else:
        sources = [source]
        if source.suffix == ".parquet":
            metadata = embedded_metadata(source)
    for file in sources:
        if not stat.S_ISREG(file.stat().st_mode):
            raise UsageError(f"{str(file)!r} is not a regular file")
    try:
        _check_metadata(metadata)
        topology = Topology.from_metadata(metadata.get("topology"))
    except UsageError as exc:
        raise UsageError(f"{name!r} {exc}" if str(exc).startswith("has ") else f"{name!r}: {exc}") from None
    return PairRun(name, PairTable(sources, TRANSPORTS), metadata, topology)

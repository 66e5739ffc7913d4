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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fabricbench.errors import UsageError
from fabricbench.measure.formatting import format_bytes
from fabricbench.measure.schema import (
    CSV_NAME,
    INTEGER,
    META_NAME,
    NUMERIC,
    OPTIONAL,
    OPTIONAL_NUMERIC,
    PARQUET_NAME,
    PARTS_NAME,
    SCHEMA_VERSION,
    is_measured,
)
from fabricbench.measure.table_cells import (
    MAX_SIZE_B,
    check_cells,
    check_row_count,
    csv_cells,
    parquet_cells,
    parse_json,
)
from fabricbench.measure.topology import Topology
from fabricbench.measure.verdict import METRICS, PAIR_COLUMNS, PairGroup, fill_matrix
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


def read_run(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """A finished run (its folder, CSV or Parquet file) as a checked DataFrame of the current schema, and its
    metadata; a one-line UsageError for anything else. Every reader of a finished table (compare, check, model,
    the tests and the benchmarks) reads through it.

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
                metadata = parse_json((source / META_NAME).read_bytes(), path)
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
    frame = check_cells(cells, TRANSPORTS)
    try:
        frame, metadata = migrate(frame, metadata)
    except UsageError as exc:
        raise UsageError(f"{path!r} {exc}") from None
    _require_columns(path, frame, OPTIONAL, f"schema {SCHEMA_VERSION} table")
    if meta_name:
        check_row_count(len(frame), metadata, meta_name, name)
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


def split_series(paths: list[str]) -> tuple[list[Series], pd.DataFrame, list[str]]:
    """Every input cut into series; the tidy rows of all of them; notes about migrations and repeated rows."""
    found: list[tuple[str, dict, str, str, str, str, pd.DataFrame]] = []
    notes = []
    for path in paths:
        frame, metadata = read_run(path)
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
    return series, pd.concat(frames, ignore_index=True), notes


# --- the all-pairs rows, as matrices ---------------------------------------------------------------------------

PAIR_BATCH_ROWS = 1 << 20  # rows read at a time: what the reader holds beside the matrix it fills
_TEXT = ("transport", "kernel", "schedule", "status", "validation", "src_host", "dst_host")
_WHOLE = ("size_B", "src_rank", "dst_rank")
MAX_RANK = (1 << 31) - 1


@dataclass
class PairRun:
    """A run's all-pairs rows (measure.verdict.METRICS' kernels) as matrices, read a batch of rows at a time from
    its Parquet file (or its CSV and spooled parts where the run did not end), never as a frame of rows: the run's
    metadata, the topology it keeps (None for a flat fabric), and each group's row count, in key order.
    ``groups()`` reads the rows again for each group and yields its matrix, so one matrix is held at a time."""

    name: str
    sources: list[Path]
    metadata: dict
    topology: Topology | None
    counts: dict[tuple, int]

    def groups(self, keys: Iterable[tuple] | None = None) -> Iterator[PairGroup]:
        """Each group's PairGroup (of the ``keys`` given, else of all), in key order."""
        for key in sorted(self.counts if keys is None else keys):
            src, dst, value, hosts = [], [], [], {}
            for batch, index, keys_here in _pair_batches(self.sources, hosts=True):
                if key not in keys_here:
                    continue
                chosen = np.flatnonzero(index == keys_here.index(key))
                if not len(chosen):
                    continue
                src.append(batch["src_rank"][chosen].astype(np.int64))
                dst.append(batch["dst_rank"][chosen].astype(np.int64))
                value.append(batch["figure"][chosen])
                _last_hosts(hosts, src[-1], dst[-1], batch["src_host"], batch["dst_host"], chosen)
            src_all, dst_all = np.concatenate(src), np.concatenate(dst)
            ranks = np.unique(np.concatenate([src_all, dst_all]))
            values = fill_matrix(ranks, src_all, dst_all, np.concatenate(value))
            del src, dst, value, src_all, dst_all  # the rows go before the next group's are read
            yield PairGroup(key, ranks, [hosts[rank] for rank in ranks.tolist()], values)


def read_pairs(path: str | Path) -> PairRun:
    """A finished run's all-pairs rows (its folder, CSV or Parquet file), checked as they are read: a one-line
    UsageError names the file, the row and the column of anything the verdict cannot take."""
    name = str(path)
    source = Path(path)
    if not source.exists():
        raise UsageError(f"no such file or directory: {name!r}")
    metadata: object = {}
    if source.is_dir():
        if (source / PARQUET_NAME).exists():
            sources = [source / PARQUET_NAME]
        else:
            parts = sorted((source / PARTS_NAME).glob("*.parquet")) if (source / PARTS_NAME).is_dir() else []
            sources = [source / CSV_NAME] * (source / CSV_NAME).exists() + parts
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
            metadata = _embedded_metadata(source)
    for file in sources:
        if not stat.S_ISREG(file.stat().st_mode):
            raise UsageError(f"{str(file)!r} is not a regular file")
    try:
        _check_metadata(metadata)
        topology = Topology.from_metadata(metadata.get("topology"))
    except UsageError as exc:
        raise UsageError(f"{name!r} {exc}" if str(exc).startswith("has ") else f"{name!r}: {exc}") from None
    counts: dict[tuple, int] = {}
    for _, index, keys in _pair_batches(sources):
        for key, count in zip(keys, np.bincount(index[index >= 0], minlength=len(keys)).tolist(), strict=True):
            counts[key] = counts.get(key, 0) + count
    return PairRun(name, sources, metadata, topology, {k: c for k, c in sorted(counts.items()) if c})


def _embedded_metadata(source: Path) -> object:
    """The metadata a Parquet file keeps in its schema ({} without any)."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        raw = (pq.read_schema(source).metadata or {}).get(b"fabricbench")
    except (OSError, pyarrow.ArrowException) as exc:
        raise UsageError(f"cannot read results from {str(source)!r}: {_first_line(exc)}") from None
    return parse_json(raw, str(source)) if raw else {}


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _batches(source: Path, columns: list[str]) -> Iterator[dict]:
    """A table file's ``columns`` a batch of rows at a time, as {column: pyarrow array} (a missing column: nulls)."""
    import pyarrow
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        if source.suffix == ".parquet":
            file = pq.ParquetFile(source, read_dictionary=[c for c in _TEXT if c in columns])
            present = [c for c in columns if c in file.schema_arrow.names]
            batches = file.iter_batches(batch_size=PAIR_BATCH_ROWS, columns=present)
        else:
            kinds = {c: pyarrow.dictionary(pyarrow.int32(), pyarrow.string()) for c in _TEXT}
            kinds |= {c: pyarrow.float64() for c in columns if c not in _TEXT}
            convert = pacsv.ConvertOptions(
                include_columns=columns, include_missing_columns=True, column_types=kinds, strings_can_be_null=False
            )
            batches = pacsv.open_csv(
                source, read_options=pacsv.ReadOptions(block_size=64 << 20), convert_options=convert
            )
        for batch in batches:
            yield {c: batch.column(c) if c in batch.schema.names else None for c in columns}
    except (OSError, pyarrow.ArrowException) as exc:
        raise UsageError(f"cannot read results from {str(source)!r}: {_first_line(exc)}") from None


def _codes(array) -> tuple[np.ndarray, list]:
    """A column (text or numbers, plain or dictionary-encoded; None for a missing one) as codes into its distinct
    values; null is ""."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if array is None or pa.types.is_null(array.type):
        return np.zeros(len(array) if array is not None else 0, dtype=np.int64), [""]
    encoded = array if pa.types.is_dictionary(array.type) else array.dictionary_encode()
    names = ["" if value is None else value for value in encoded.dictionary.to_pylist()]
    return pc.fill_null(encoded.indices, len(names)).to_numpy().astype(np.int64), [*names, ""]


def _numbers(array, rows: int) -> np.ndarray:
    """A numeric column as float64 (NaN for null; a missing column all NaN)."""
    if array is None:
        return np.full(rows, math.nan)
    return array.to_numpy(zero_copy_only=False).astype(np.float64)


def _pair_batches(sources: list[Path], hosts: bool = False) -> Iterator[tuple[dict, np.ndarray, list[tuple]]]:
    """Each batch of the all-pairs rows' columns, checked, as ({src_rank, dst_rank, figure, and with ``hosts``
    src_host and dst_host: numpy arrays or (codes, names)}, each row's group as an index into the batch's keys
    (-1: not a measured, valid pair row), the keys)."""
    columns = [*PAIR_COLUMNS] if hosts else [c for c in PAIR_COLUMNS if c not in ("src_host", "dst_host")]
    for source in sources:
        row = 0
        for batch in _batches(source, columns):
            count = len(next(array for array in batch.values() if array is not None))
            index, keys, arrays = _pair_groups_of(batch, count, str(source), row)
            if hosts:
                arrays |= {c: _codes(batch[c]) for c in ("src_host", "dst_host")}
            row += count
            yield arrays, index, keys


def _pair_groups_of(batch: dict, count: int, name: str, first_row: int) -> tuple[np.ndarray, list[tuple], dict]:
    """One batch's rows checked, and each row's group (see _pair_batches)."""
    text = {c: _codes(batch[c]) for c in ("transport", "kernel", "schedule", "status", "validation")}

    def refuse(where: np.ndarray, column: str, shown: object, why: str) -> UsageError:
        number = first_row + int(np.flatnonzero(where)[0]) + 1
        return UsageError(f"{name!r} has {column} = {reprlib.repr(shown)} (row {number}): {why}")

    def names(column: str, chosen: Iterable[str]) -> np.ndarray:
        codes, values = text[column]
        return np.isin(codes, [i for i, value in enumerate(values) if value in chosen])

    kernels = text["kernel"][1]
    pairs = names("kernel", METRICS)
    figure = np.full(count, math.nan)
    for code, kernel in enumerate(kernels):
        if kernel in METRICS:
            mine = text["kernel"][0] == code
            figure[mine] = _numbers(batch[METRICS[kernel][0]], count)[mine]
    arrays = {"figure": figure} | {c: _numbers(batch[c], count) for c in _WHOLE}
    empty = pairs & names("status", [""])
    if empty.any():
        raise refuse(empty, "status", "", "a row says ok, or why it was not measured")
    unknown = pairs & ~names("transport", TRANSPORTS)
    if unknown.any():
        shown = text["transport"][1][text["transport"][0][np.flatnonzero(unknown)[0]]]
        raise refuse(unknown, "transport", shown, "not a transport fabricbench has")
    measured = pairs & names("status", [s for s in text["status"][1] if is_measured(s)])
    not_finite = measured & np.isinf(figure)
    if not_finite.any():
        column = METRICS[kernels[text["kernel"][0][np.flatnonzero(not_finite)[0]]]][0]
        raise refuse(not_finite, column, float(figure[not_finite][0]), "not a finite measurement, in a row measured ok")
    kept = measured & ~names("validation", ["fail"]) & ~np.isnan(figure)
    for column in _WHOLE:
        values = arrays[column]
        top = MAX_SIZE_B if column == "size_B" else MAX_RANK
        with np.errstate(invalid="ignore"):
            bad = kept & ~((values >= 0) & (values <= top) & (values % 1 == 0))
        if bad.any():
            shown = values[bad][0]
            raise refuse(bad, column, "" if math.isnan(shown) else shown, f"not a whole number from 0 to {top}")
    index = np.full(count, -1, dtype=np.int64)
    if not kept.any():
        return index, [], arrays
    parts = [text[c] for c in ("transport", "kernel", "schedule")] + [_codes_of_numbers(arrays["size_B"][kept])]
    combined = np.zeros(int(kept.sum()), dtype=np.int64)
    for codes, values in parts:  # one number per (transport, kernel, schedule, size): few, so a bincount
        combined = combined * len(values) + (codes[kept] if len(codes) == count else codes)
    present = np.flatnonzero(np.bincount(combined))
    lookup = np.zeros(int(present[-1]) + 1, dtype=np.int64)
    lookup[present] = np.arange(present.size)
    keys = []
    for number in present.tolist():
        key = []
        for _, values in reversed(parts):
            number, code = divmod(number, len(values))
            key.append(values[code])
        transport, kernel, schedule, size = reversed(key)
        keys.append((transport, kernel, schedule, int(size)))
    index[kept] = lookup[combined]
    return index, keys, arrays


def _codes_of_numbers(values: np.ndarray) -> tuple[np.ndarray, list]:
    """Whole numbers (a batch's sizes) as codes into their distinct values."""
    distinct, codes = np.unique(values, return_inverse=True)
    return codes.reshape(-1), distinct.tolist()


def _last_hosts(hosts: dict, src: np.ndarray, dst: np.ndarray, src_host, dst_host, chosen: np.ndarray) -> None:
    """Each rank's host as the ``chosen`` rows last say it (rows in order, a row's source before its destination):
    the last of each rank's mentions, found by taking the first of them from the end."""
    ranks = np.stack([src, dst], axis=1).reshape(-1)
    names = np.stack([src_host[0][chosen], dst_host[0][chosen] + len(src_host[1])], axis=1).reshape(-1)
    both = [*src_host[1], *dst_host[1]]
    distinct, first = np.unique(ranks[::-1], return_index=True)
    for rank, code in zip(distinct.tolist(), names[::-1][first].tolist(), strict=True):
        hosts[rank] = both[code]

"""The tidy table and its writers (rank 0 only).

Rows are appended to the CSV and flushed as each size finishes, so a run that
dies keeps everything it measured. Parquet, with the run's metadata in the
file's schema metadata, is written at the end when pyarrow is installed.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

from fabricbench.errors import UsageError

# Units are in the names: µs, MB/s with MB = 10^6 bytes, GB/s with GB = 10^9 bytes.
COLUMNS = [
    "run_id",
    "label",
    "transport",
    "kernel",
    "method",
    "buffer",
    "size_B",
    "ranks",
    "pairs",
    "window",
    "iterations",
    "warmup",
    "sample",
    "lat_min_us",
    "lat_p50_us",
    "lat_mean_us",
    "lat_p90_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "lat_stdev_us",
    "lat_rank_min_us",
    "lat_rank_avg_us",
    "lat_rank_max_us",
    "bw_MBps",
    "bw_peak_MBps",
    "msgrate_per_s",
    "algbw_GBps",
    "busbw_GBps",
    "validation",
    "status",
    "note",
]
NUMERIC = {c for c in COLUMNS if c.endswith(("_us", "_MBps", "_GBps", "_per_s"))}
INTEGER = {"size_B", "ranks", "pairs", "window", "iterations", "warmup"}
# The table's and its metadata's layout; compare migrates older ones (report/load.py).
# 1: every table written before schema_version existed; 2: metadata says os_release, not kernel.
SCHEMA_VERSION = 2
CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
META_NAME = "metadata.json"


def prepare_out_dir(path: str) -> Path:
    """Create the output directory and prove it is writable, or raise UsageError."""
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".fabricbench-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"output directory {path!r} is not writable: {exc.strerror or exc}") from None
    return out


def _cell(value: object) -> object:
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.9g}"
    return value


class TableWriter:
    """Appends rows to ``results.csv`` as they are measured."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.csv_path = out_dir / CSV_NAME
        new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
        self._file = open(self.csv_path, "a", newline="")  # noqa: SIM115 - held for the run
        self._csv = csv.DictWriter(self._file, fieldnames=COLUMNS, extrasaction="raise")
        if new:
            self._csv.writeheader()
            self._file.flush()
        self.rows = 0

    def append(self, row: dict) -> None:
        self._csv.writerow({c: _cell(row.get(c, "")) for c in COLUMNS})
        self._file.flush()
        os.fsync(self._file.fileno())
        self.rows += 1

    def close(self) -> None:
        self._file.close()


def write_metadata(out_dir: Path, metadata: dict) -> None:
    path = out_dir / META_NAME
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(metadata, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def write_parquet(out_dir: Path, metadata: dict) -> Path | None:
    """Parquet copy of the CSV with the metadata in the schema; None without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return None
    types = {c: pa.float64() if c in NUMERIC else pa.int64() if c in INTEGER else pa.string() for c in COLUMNS}
    convert = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False)
    table = pacsv.read_csv(out_dir / CSV_NAME, convert_options=convert)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[b"fabricbench"] = json.dumps(metadata, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(schema_meta)
    path = out_dir / PARQUET_NAME
    pq.write_table(table, path)
    return path


def read_table(path: str | Path):
    """A results directory, CSV or Parquet file as a pandas DataFrame, plus its metadata."""
    import pandas as pd

    source = Path(path)
    metadata: dict = {}
    if source.is_dir():
        meta_path = source / META_NAME
        if meta_path.exists():
            metadata = json.loads(meta_path.read_text())
        parquet = source / PARQUET_NAME
        source = parquet if parquet.exists() else source / CSV_NAME
    if not source.exists():
        raise UsageError(f"no results at {str(path)!r}")
    if source.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(source)
        raw = (table.schema.metadata or {}).get(b"fabricbench")
        if raw and not metadata:
            metadata = json.loads(raw)
        frame = table.to_pandas()
    else:
        frame = pd.read_csv(source, keep_default_na=False, na_values={c: [""] for c in NUMERIC})
    return frame, metadata

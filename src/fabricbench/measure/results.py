"""The tidy table's writers (rank 0 only), and the check and repair of an --append folder.

Rows are appended to the CSV and made durable as each size (or an all-pairs phase) finishes, each row whole or not
at all, so a run that dies keeps everything it measured. A size of more than CSV_SIZE_ROWS rows (an all-pairs
matrix of more than 256 ranks: 65,792 pairs and up, 100 million at 10,000 hosts) is kept in Parquet only: its rows
are spooled as they come to whole Parquet files in results.parts/ (PartSpool), at most PART_ROWS rows or
PART_SECONDS apart, and never held in memory. At the end the CSV's rows and the parts' become results.parquet,
with the run's metadata in the file's schema, a row group at a time; the parts are then removed. Every file that is
replaced is written aside and renamed, and the file aside is removed when writing fails.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import math
import os
import secrets
import shutil
import socket
import stat
import sys
import time
from collections.abc import Collection
from pathlib import Path

from fabricbench.errors import FabricbenchError, UsageError
from fabricbench.lazy import np
from fabricbench.measure.schema import (
    COLUMNS,
    CSV_NAME,
    INTEGER,
    META_NAME,
    NUMERIC,
    PARQUET_NAME,
    PARQUET_ONLY_ROWS,
    PARTS_NAME,
    PREVIOUS_RUNS,
    SCHEMA_VERSION,
)


class ResultsError(FabricbenchError):
    """The table could not be written (a full disk, a lost directory): every rank stops, the rows so far stay."""

    exit_code = 1


def _results_error(exc: OSError, path: Path) -> ResultsError:
    """``results: no space left on device: PATH``: the OS's words for what failed, and the file."""
    reason = os.strerror(exc.errno) if exc.errno else str(exc).strip().split("\n")[0]
    return ResultsError(f"results: {reason[:1].lower()}{reason[1:]}: {path}")


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


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


def check_reuse(path: str, append: bool, transports: Collection[str]) -> None:
    """Refuse an output directory that holds anything, unless ``append``; then its table must be one to add rows to
    (``transports``: the names its rows' transport may hold).

    New rows in an earlier run's folder would mix two runs in one table under
    metadata that describes only the last: that takes --append, which keeps
    every run's metadata.
    """
    out = Path(path)
    try:
        taken = out.is_dir() and any(out.iterdir())
    except OSError as exc:
        raise UsageError(f"output directory {path!r} is not readable: {exc.strerror or exc}") from None
    if taken and not append:
        raise UsageError(f"output directory {path!r} is not empty: give a new --out, or --append to add to its table")
    if taken:
        _refuse_links(out)
        _make_whole(out, transports)


def _refuse_links(out: Path) -> None:
    """Refuse an --append folder whose table, Parquet copy or metadata is a symlink or not a regular file, or whose
    table has another name (a hard link): a run would write through the link into a file outside the folder (the
    writers open with O_NOFOLLOW as well, and TableWriter looks again). The Parquet copy and the metadata are
    replaced by a rename, which never writes into a file another name holds."""
    for name in (CSV_NAME, PARQUET_NAME, META_NAME):
        path = out / name
        try:
            found = path.lstat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise UsageError(f"--append: cannot read {path}: {exc.strerror or exc}") from None
        if stat.S_ISLNK(found.st_mode):
            raise UsageError(f"--append: {path} is a symlink; a run writes its table only into regular files")
        if not stat.S_ISREG(found.st_mode):
            raise UsageError(f"--append: {path} is not a regular file")
        if name == CSV_NAME and found.st_nlink > 1:
            raise UsageError(_hard_link(path, found.st_nlink))


def _hard_link(path: Path, links: int) -> str:
    return f"--append: {path} has {links} links (a hard link); a run appends only to a table no other name holds"


def _create(path: Path):
    """``path`` opened for writing as a new file (binary), never through a symlink: a stale file aside is removed
    first, and O_EXCL refuses whatever a race puts there in between."""
    _remove(path)
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666), "wb")


def _check_header(csv_path: Path) -> None:
    """Refuse to append to a CSV that is not this version's table, or that ends in a cut row."""
    try:
        if not csv_path.exists() or csv_path.stat().st_size == 0:
            return
        with open(csv_path, "rb") as table:
            first = table.readline()
            table.seek(-1, os.SEEK_END)
            last = table.read(1)
    except OSError as exc:
        raise UsageError(f"--append: cannot read {csv_path}: {exc.strerror or exc}") from None
    if first != HEADER:
        raise UsageError(f"--append: {csv_path} has another header than a schema {SCHEMA_VERSION} fabricbench table")
    if last != b"\n":
        raise UsageError(f"--append: {csv_path} ends in a cut row")


def _metadata(path: Path) -> dict | None:
    """metadata.json of a schema SCHEMA_VERSION run, None when there is none; anything else raises UsageError."""
    if not path.exists():
        return None
    try:
        newest = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"--append: cannot read {path}: {exc}") from None
    return _schema_metadata(newest, path)


def _schema_metadata(metadata: object, path: Path) -> dict:
    if not isinstance(metadata, dict) or metadata.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(f"--append: {path} is not the metadata of a schema {SCHEMA_VERSION} fabricbench run")
    previous = metadata.get(PREVIOUS_RUNS, [])
    if not isinstance(previous, list) or not all(isinstance(run, dict) for run in previous):
        raise UsageError(f"--append: {path} has a {PREVIOUS_RUNS!r} that is not a list of objects")
    return metadata


def earlier_runs(out_dir: Path) -> list[dict]:
    """The metadata of every run already in ``out_dir``, oldest first: what an appending run keeps in PREVIOUS_RUNS."""
    newest = _metadata(out_dir / META_NAME)
    if newest is None:
        return []
    newest = dict(newest)
    previous = newest.pop(PREVIOUS_RUNS, [])
    return [*previous, newest]


def _make_whole(out: Path, transports: Collection[str]) -> None:
    """An --append folder whose three files agree, made so from what is whole, or a one-line UsageError.

    Called before any rank starts. The CSV is the table and the Parquet file its copy (made again at
    the end of the run), and metadata.json (or, without it, the Parquet's own copy) says how many
    rows the runs wrote. Each table is read with the check compare reads it with (table_cells.py).
    Then: a CSV whose row count is the metadata's stands, if the Parquet copy holds the same rows or
    fewer of them (a copy that cannot be read is made again); a CSV that is missing or holds only the
    first rows of a Parquet copy whose count is the metadata's is rebuilt from it; metadata.json is
    rebuilt from the Parquet's when missing. Every other state is refused and nothing is changed, so
    the rows an earlier run wrote are never lost.
    """
    from fabricbench.measure import table_cells  # pandas, on rank 0 and only for --append

    csv_path, parquet_path, meta_path = out / CSV_NAME, out / PARQUET_NAME, out / META_NAME
    meta = _metadata(meta_path)
    if (meta and any(run.get(PARQUET_ONLY_ROWS) for run in earlier_runs(out))) or (out / PARTS_NAME).exists():
        raise UsageError(
            f"--append: {out} keeps rows in Parquet only (an all-pairs size of more than {CSV_SIZE_ROWS:,} pairs), "
            "which a run cannot add to: give a new --out"
        )
    _check_header(csv_path)

    def read(reader, path: Path):
        """(cells, checked rows or None for none, the file's own metadata); UsageError as --append's."""
        try:
            got = reader(path, str(path))
            cells, own = got if isinstance(got, tuple) else (got, None)
            if cells.header != COLUMNS:
                raise UsageError(f"{str(path)!r} has other columns than a schema {SCHEMA_VERSION} fabricbench table")
            return cells, table_cells.check_cells(cells, transports) if cells.rows else None, own
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None

    try:
        table = read(table_cells.csv_cells, csv_path) if csv_path.exists() and csv_path.stat().st_size else None
    except UsageError as exc:
        raise UsageError(f"--append: {exc}") from None
    copy, unreadable = None, ""
    if parquet_path.exists():
        try:
            copy = read(table_cells.parquet_cells, parquet_path)
            copy = (*copy[:2], _schema_metadata(copy[2], parquet_path))
        except UsageError as exc:
            unreadable = str(exc).removeprefix("--append: ")
    if meta is None and copy is None:
        if table is None or not table[0].rows:
            if unreadable and table is None:
                raise UsageError(f"--append: {out} holds no {CSV_NAME}, and {unreadable}")
            return  # no earlier rows: a new table
        raise UsageError(f"--append: {out} holds {CSV_NAME} but no {META_NAME}: nothing says which runs wrote its rows")
    described, meta_name = (meta, str(meta_path)) if meta is not None else (copy[2], str(parquet_path))
    try:
        total, exact = table_cells.expected_rows(described)
    except UsageError as exc:
        raise UsageError(f"--append: {meta_name!r} {exc}") from None

    def fits(rows: int) -> bool:
        return rows == total if exact else rows >= total

    def prefix(short, long) -> tuple[int, str] | None:
        """Where ``short``'s rows differ from the first rows of ``long`` (row from 1, column), None if nowhere."""
        return table_cells.first_difference(short[1], long[1]) if short[1] is not None else None

    csv_rows = len(table[0].rows) if table else 0
    copy_rows = len(copy[0].rows) if copy else 0
    says = f"{total}" if exact else f"at least {total}"
    if table is not None and fits(csv_rows):
        if copy is not None:
            differ = prefix(copy, table) if copy_rows <= csv_rows else (0, "")
            if differ:
                where = (
                    f"at row {differ[0]}, column {differ[1]}"
                    if differ[0]
                    else f"({copy_rows} rows, the CSV {csv_rows})"
                )
                raise UsageError(
                    f"--append: {parquet_path} and {CSV_NAME} disagree {where}: which one is whole is not known"
                )
        if meta is None:
            write_metadata(out, copy[2])
            print(f"fabricbench: --append: {META_NAME} was missing; rebuilt from {PARQUET_NAME}", file=sys.stderr)
        return
    if copy is not None and fits(copy_rows) and csv_rows <= copy_rows and not (table and prefix(table, copy)):
        _rebuild_csv(csv_path, copy[0])
        if meta is None:
            write_metadata(out, copy[2])
        what = "missing" if table is None else f"cut to {csv_rows} rows"
        print(
            f"fabricbench: --append: {CSV_NAME} was {what}; rebuilt from {PARQUET_NAME} ({copy_rows} rows)",
            file=sys.stderr,
        )
        return
    if table is not None:
        raise UsageError(f"--append: {meta_name} says the table holds {says} rows, but {csv_path} holds {csv_rows}")
    if unreadable:
        raise UsageError(f"--append: {out} holds no {CSV_NAME}, and {unreadable}")
    if copy is not None:
        raise UsageError(
            f"--append: {meta_name} says the table holds {says} rows, but {parquet_path} holds {copy_rows}"
        )
    raise UsageError(f"--append: {meta_name} describes a run, but {out} holds no {CSV_NAME} or {PARQUET_NAME}")


def _rebuild_csv(path: Path, cells) -> None:
    """The CSV written again, aside then renamed, from a Parquet copy's cells, each as the writer writes it."""
    numeric = [column in NUMERIC for column in COLUMNS]
    integer = [column in INTEGER for column in COLUMNS]

    def cell(text: str, index: int) -> object:
        if not text:
            return ""
        if numeric[index]:
            return _cell(float(text))
        return str(int(float(text))) if integer[index] else text

    tmp = path.with_name(f"{CSV_NAME}.tmp")
    try:
        with _create(tmp) as table:
            table.write(HEADER)
            for row in cells.rows:
                table.write(_line({c: cell(text, i) for i, (c, text) in enumerate(zip(COLUMNS, row, strict=True))}))
            table.flush()
            os.fsync(table.fileno())
        tmp.replace(path)
    except OSError as exc:
        _remove(tmp)
        raise _results_error(exc, path) from None


def _line(row: dict) -> bytes:
    """One line of the table, as csv writes it; a field that is not a column raises ValueError."""
    text = io.StringIO()
    csv.DictWriter(text, fieldnames=COLUMNS, extrasaction="raise").writerow(row)
    return text.getvalue().encode()


HEADER = _line({c: c for c in COLUMNS})


def _cell(value: object) -> object:
    """A value as the table holds it: a float in 9 significant digits (NaN empty); a text's line breaks as spaces,
    so that a row is one line (a note may carry a library's multi-line error) and rows count by newlines."""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.9g}"
    if isinstance(value, str) and ("\n" in value or "\r" in value):
        return " ".join(value.splitlines())
    return value


READ_PART = 1 << 20  # bytes of the table read at a time where its rows are counted


class TableWriter:
    """Appends rows to ``results.csv`` as they are measured, each row whole or not at all.

    Raises ResultsError when the file cannot be opened or a row cannot be
    written; a row that did not fit is cut off again, so every line stays a
    whole row.
    """

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.csv_path = out_dir / CSV_NAME
        self.rows = 0
        self._created = not self.csv_path.exists()
        try:
            # less the umask; never through a symlink put there after check_reuse looked
            self._fd = os.open(self.csv_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise _results_error(exc, self.csv_path) from None
        opened = os.fstat(self._fd)
        if opened.st_nlink > 1:  # a hard link made since check_reuse looked: rows would land in the other name too
            os.close(self._fd)
            raise ResultsError(_hard_link(self.csv_path, opened.st_nlink))
        self._length = opened.st_size
        # The rows already in the table (--append): its lines less the header, read a part at a time.
        lines = sum(os.pread(self._fd, READ_PART, at).count(b"\n") for at in range(0, self._length, READ_PART))
        self.earlier_rows = max(lines - 1, 0)
        if self._length == 0:
            try:
                self._write(HEADER)
            except ResultsError:
                self.discard()
                raise
        self._rows_from = self._length  # where this writer's rows begin

    def _write(self, line: bytes) -> None:
        """Append ``line`` and make it durable, or cut the file back to its length before and raise ResultsError."""
        try:
            rest = memoryview(line)
            while rest:  # a write that runs out of space mid-line returns short; the next one raises
                rest = rest[os.write(self._fd, rest) :]
            os.fsync(self._fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._length)
            raise _results_error(exc, self.csv_path) from None
        self._length += len(line)

    def append(self, row: dict) -> None:
        self.append_many([row])

    def append_many(self, rows: list[dict]) -> None:
        """Rows made durable together: one write and one fsync for a phase's rows."""
        if not rows:
            return
        self._write(b"".join(_line({c: _cell(row.get(c, "")) for c in COLUMNS}) for row in rows))
        first = self.rows == 0
        self.rows += len(rows)
        if first:
            # An earlier run's Parquet copy (--append) now lacks rows, and readers prefer Parquet: the CSV alone
            # stands until write_parquet makes the copy again from the whole CSV.
            _remove(self.out_dir / PARQUET_NAME)

    def close(self) -> None:
        """Close the table, its row count agreeing with the file.

        Ctrl-C is raised in the main thread when a system call returns, so it can land between a row's write and
        its count (fsync is where a rank waits): the rank then closes the table with one row on disk that
        ``rows`` lacks, and metadata.json would disagree with the CSV. The rows this writer added are counted
        from the file instead, and a row cut short is cut back. A second call does nothing: the error path may
        close a table its writer closed already, and closing the number again could close another file's.
        """
        if self._fd < 0:
            return
        try:
            end = os.fstat(self._fd).st_size
            if end != self._length:
                added = os.pread(self._fd, end - self._rows_from, self._rows_from)
                whole = added.rfind(b"\n") + 1
                os.ftruncate(self._fd, self._rows_from + whole)
                self.rows, self._length = added[:whole].count(b"\n"), self._rows_from + whole
        except OSError:
            pass  # the count stays as the writes left it; the read check refuses a table that disagrees
        finally:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def discard(self) -> None:
        """Close, and remove the file if this writer created it: a run that could not start leaves no table."""
        self.close()
        if self._created and self.rows == 0:
            _remove(self.csv_path)


def write_metadata(out_dir: Path, metadata: dict) -> None:
    """Replace metadata.json whole (written aside, then renamed); raises ResultsError."""
    write_json(out_dir / META_NAME, metadata)


def write_json(path: Path, data: dict) -> None:
    """Replace a JSON file beside the table whole (written aside, then renamed); raises ResultsError."""
    tmp = path.with_suffix(".tmp")
    try:
        with _create(tmp) as out:
            out.write((json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode())
        tmp.replace(path)  # a rename replaces a symlink at ``path`` itself, never the file it names
    except OSError as exc:
        _remove(tmp)
        raise _results_error(exc, path) from None


CSV_SIZE_ROWS = 1 << 16  # a size with more rows than this is kept in Parquet only (an all-pairs matrix of 257 ranks up)
PART_ROWS = 1 << 18  # the most rows a spooled part holds, and a row group of results.parquet
PART_SECONDS = 10.0  # spooled rows reach disk at least this often while a size runs
COMPRESSION = "zstd"  # Parquet's: beside the default (snappy), as fast to write, faster to read, and smaller


def arrow_schema(metadata: dict | None = None):
    """The table's Arrow schema: measured columns float64, integer columns int64, the rest text; ``metadata`` kept
    in it as JSON under b"fabricbench"."""
    import pyarrow as pa

    kinds = [(c, pa.float64() if c in NUMERIC else pa.int64() if c in INTEGER else pa.string()) for c in COLUMNS]
    kept = {b"fabricbench": json.dumps(metadata, sort_keys=True, default=str).encode()} if metadata else None
    return pa.schema(kinds, metadata=kept)


def arrow_rows(batch) -> object:
    """A RowBatch (measure.rows) as an Arrow table of the table's schema: a column not given is empty ("" as text,
    null as a number, as the CSV's empty cells are read), NaN is null, a shared value is repeated and Coded text
    is cast from its codes inside Arrow."""
    import pyarrow as pa

    from fabricbench.measure.rows import Coded

    unknown = sorted(set(batch.columns) - set(COLUMNS))
    if unknown:  # as the CSV writer refuses a field that is not a column
        raise ValueError(f"not a column of the table: {', '.join(unknown)}")
    arrays = []
    for field in arrow_schema():
        value = batch.columns.get(field.name, "")
        text = pa.types.is_string(field.type)
        if isinstance(value, Coded):
            codes = pa.array(value.codes.astype(np.int32))
            arrays.append(pa.DictionaryArray.from_arrays(codes, pa.array(value.names, pa.string())).cast(field.type))
        elif isinstance(value, np.ndarray):  # an integer column with blanks comes as floats, NaN for blank
            arrays.append(pa.array(value, from_pandas=True).cast(field.type))
        elif value == "" and not text or isinstance(value, float) and math.isnan(value):
            arrays.append(pa.nulls(batch.count, field.type))
        else:
            arrays.append(pa.repeat(pa.scalar(value, field.type), batch.count))
    return pa.Table.from_arrays(arrays, schema=arrow_schema())


class PartSpool:
    """The rows kept in Parquet only, spooled to whole Parquet files in results.parts/ as they come (each written
    aside and renamed), so rank 0 holds at most PART_ROWS of them and a run that dies keeps what reached a part:
    a part is written once PART_ROWS rows or PART_SECONDS are waiting, and at the end of each size (``flush``)."""

    def __init__(self, out_dir: Path):
        self.folder = out_dir / PARTS_NAME
        self.rows = 0  # written to parts
        self._waiting: list = []
        self._count = 0
        self._since = 0.0
        self._parts = 0

    def append(self, batch) -> None:
        """A RowBatch; raises ResultsError when a part cannot be written."""
        if not self._waiting:
            self._since = time.monotonic()
        self._waiting.append(arrow_rows(batch))
        self._count += batch.count
        if self._count >= PART_ROWS or time.monotonic() - self._since >= PART_SECONDS:
            self.flush()

    def flush(self) -> None:
        if not self._waiting:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._parts += 1
        path = self.folder / f"part-{self._parts:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        try:
            self.folder.mkdir(exist_ok=True)
            with _create(tmp) as out:
                pq.write_table(pa.concat_tables(self._waiting), out, row_group_size=PART_ROWS, compression=COMPRESSION)
            tmp.replace(path)
        except OSError as exc:
            _remove(tmp)
            raise _results_error(exc, path) from None
        self.rows += self._count
        self._waiting, self._count = [], 0


def write_parquet(out_dir: Path, metadata: dict) -> Path | None:
    """results.parquet from the CSV's rows and then the spooled parts' (PartSpool), a row group of at most
    PART_ROWS rows at a time, with the metadata in the schema; the parts are removed once it stands. None without
    pyarrow. Raises ResultsError."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return None
    schema = arrow_schema(metadata)
    convert = pacsv.ConvertOptions(
        column_types=dict(zip(schema.names, schema.types, strict=True)), strings_can_be_null=False
    )
    path = out_dir / PARQUET_NAME
    tmp = path.with_name(f"{PARQUET_NAME}.tmp")
    parts = sorted((out_dir / PARTS_NAME).glob("*.parquet"))
    try:
        with _create(tmp) as out, pq.ParquetWriter(out, schema, compression=COMPRESSION) as writer:
            waiting: list = []

            def write() -> None:
                writer.write_table(pa.Table.from_batches(waiting, schema=plain), row_group_size=PART_ROWS)
                waiting.clear()

            plain = schema.remove_metadata()
            batches = pacsv.open_csv(out_dir / CSV_NAME, convert_options=convert)
            for part in [None, *parts]:
                for batch in batches if part is None else pq.ParquetFile(part).iter_batches(batch_size=PART_ROWS):
                    waiting.append(pa.RecordBatch.from_arrays(batch.columns, schema=plain))
                    if sum(len(b) for b in waiting) >= PART_ROWS:
                        write()
            if waiting:
                write()
        tmp.replace(path)
    except OSError as exc:
        _remove(tmp)
        raise _results_error(exc, path) from None
    shutil.rmtree(out_dir / PARTS_NAME, ignore_errors=True)
    return path


RUN_ID_VAR = "FABRICBENCH_RUN_ID"  # a self-launching parent names the run once; its ranks keep that name


def new_run_id() -> str:
    """A run's name: when and where it started, and 4 random hex digits to tell apart runs of the same second."""
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}-{secrets.token_hex(2)}"

"""A run's all-pairs rows as matrices, read a batch of rows at a time from its Parquet or CSV files.

The verdict, ``check`` and the heatmaps judge and draw each group of pair rows (a transport, kernel, schedule and
size) as an N x N matrix (measure.verdict.PairGroup). At 10,000 hosts a group is 100 million rows: read as a frame
of rows it would take tens of GB, read as here it takes the matrix (8 bytes a pair) and the group's own three
columns while they are gathered. Only PAIR_COLUMNS are read; each batch is checked as it is read (one line naming
the file, the row and the column, as table_cells.check_cells words it). pyarrow is imported here, on rank 0 and
in analysis only.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.measure.schema import CSV_NAME, PARQUET_NAME, PARTS_NAME, is_measured
from fabricbench.measure.table_cells import MAX_SIZE_B, first_line
from fabricbench.measure.verdict import METRICS, PAIR_COLUMNS, PairGroup, fill_matrix

PAIR_BATCH_ROWS = 1 << 20  # rows read at a time: what the reader holds beside the matrix it fills
FAILED_LISTED = 100_000  # the failed checks of a group whose pairs are kept to be named (all are counted)
_TEXT = ("transport", "kernel", "schedule", "status", "validation", "src_host", "dst_host", "run_id", "buffer")
_WHOLE = ("size_B", "src_rank", "dst_rank")
MAX_RANK = (1 << 31) - 1


class PairTable:
    """A table's all-pairs rows (verdict.METRICS' kernels) as matrices, read from its files (``sources``: Parquet
    or CSV, in order) a batch of rows at a time, never as a frame of rows; ``transports``: the names a row's
    transport may hold; ``run_id``: only that run's rows. A group is one run's (an --append folder holds
    several) rows of one (transport, kernel, schedule, size): its key is (run_id, transport, kernel, schedule,
    size). ``counts``: each group's measured rows, in key order, from one pass over the files; ``groups()``
    reads them again for each group and yields its matrix, so one matrix is held at a time."""

    def __init__(self, sources: list[Path], transports: Collection[str], run_id: str | None = None):
        self.sources, self.transports, self.run_id = sources, transports, run_id
        self.counts: dict[tuple, int] = {}  # each group's measured rows with a figure, in key order
        self.failed: dict[tuple, int] = {}  # how many rows of each group failed their check
        self.failed_pairs: dict[tuple, list[tuple]] = {}  # (src_rank, dst_rank, src_host, dst_host), FAILED_LISTED
        self.buffers: dict[tuple, set[str]] = {}  # the buffer kinds (host, cuda) of each group's rows
        self.ranks: dict[tuple, np.ndarray] = {}  # each group's ranks, sorted: its matrix's rows and columns
        for batch, index, keys in self._batches():
            for number, key in enumerate(keys):
                mine = index == number
                kept, failed = mine & batch["kept"], np.flatnonzero(mine & batch["failed"])
                if kept.any():
                    self.counts[key] = self.counts.get(key, 0) + int(kept.sum())
                    ends = _distinct(np.concatenate([batch["src_rank"][kept], batch["dst_rank"][kept]]))
                    self.ranks[key] = np.union1d(self.ranks.get(key, ends[:0]), ends)
                codes, names = batch["buffer"]
                self.buffers.setdefault(key, set()).update(names[code] or "host" for code in np.unique(codes[mine]))
                if len(failed):
                    self.failed[key] = self.failed.get(key, 0) + len(failed)
                    listed = self.failed_pairs.setdefault(key, [])
                    for at in failed[: FAILED_LISTED - len(listed)].tolist():
                        hosts = (batch[c][1][batch[c][0][at]] for c in ("src_host", "dst_host"))
                        listed.append((int(batch["src_rank"][at]), int(batch["dst_rank"][at]), *hosts))
        self.counts = dict(sorted(self.counts.items()))

    def groups(self, keys: Iterable[tuple] | None = None, column: str | None = None) -> Iterator[PairGroup]:
        """Each group's PairGroup (of the ``keys`` given, else of all), in key order: its matrix of the kernel's
        figure, or of ``column`` (NaN where a row has none)."""
        for key in sorted(self.counts if keys is None else keys):
            if key not in self.counts:
                continue
            ranks = self.ranks[key]
            count, hosts = len(ranks), {}
            values = np.full(count * count, math.nan)
            filled = 0
            for src, dst, figure in self._rows_of(key, column, hosts):
                values[np.searchsorted(ranks, src) * count + np.searchsorted(ranks, dst)] = figure
                filled += len(figure)
            if np.count_nonzero(~np.isnan(values)) < filled:  # run --repeat: each pair's median, from all its rows
                rows = list(self._rows_of(key, column, hosts))
                src, dst, figure = (np.concatenate(parts) for parts in zip(*rows, strict=True))
                matrix = fill_matrix(ranks, src, dst, figure)
                del rows, src, dst, figure
            else:
                matrix = values.reshape(count, count)
            del values
            yield PairGroup(key[1:], ranks, [hosts[rank] for rank in ranks.tolist()], matrix, key[0])

    def _rows_of(self, key: tuple, column: str | None, hosts: dict) -> Iterator[tuple[np.ndarray, ...]]:
        """A group's measured rows, a batch at a time, as (source ranks, destination ranks, figures of ``column``
        or the kernel's), a rank's row with itself and figures the row lacks left out; ``hosts`` learns each
        rank's host as the rows last say it."""
        for batch, index, keys_here in self._batches(column):
            chosen = np.flatnonzero((index == keys_here.index(key)) & batch["kept"]) if key in keys_here else ()
            if not len(chosen):
                continue
            src = batch["src_rank"][chosen].astype(np.int64)
            dst = batch["dst_rank"][chosen].astype(np.int64)
            figure = batch["figure" if column is None else column][chosen]
            _last_hosts(hosts, src, dst, batch["src_host"], batch["dst_host"], chosen)
            keep = (src != dst) & ~np.isnan(figure)
            yield src[keep], dst[keep], figure[keep]

    def _batches(self, column: str | None = None) -> Iterator[tuple[dict, np.ndarray, list[tuple]]]:
        """Each batch of the pair rows' columns, checked, as ({src_rank, dst_rank, figure and ``column``: numpy
        arrays; kept, failed: masks; src_host, dst_host, buffer: (codes, names)}, each measured pair row's group as
        an index into the batch's keys (-1: another row), the keys)."""
        import pyarrow

        extra = [c for c in (column, "buffer", "run_id") if c]
        columns = [*PAIR_COLUMNS, *(c for c in extra if c not in PAIR_COLUMNS)]
        for source in self.sources:
            row = 0
            for batch in _batches(source, columns):
                count = len(batch["kernel"])
                try:
                    index, keys, arrays = _groups_of(batch, count, str(source), row, self.transports)
                    arrays |= {c: _codes(batch[c]) for c in ("src_host", "dst_host", "buffer")}
                    if column is not None and column not in arrays:
                        arrays[column] = _numbers(batch[column])
                except pyarrow.ArrowException as exc:  # a column of text where numbers belong: cast refuses it
                    raise UsageError(f"{str(source)!r}, rows {row + 1}-{row + count}: {first_line(exc)}") from None
                if self.run_id is not None:  # another run's rows are no group's (-1 looks up the last: True)
                    others = np.array([key[0] != self.run_id for key in keys] + [True])
                    index[others[index]] = -1
                row += count
                yield arrays, index, keys


def run_sources(folder: Path) -> list[Path]:
    """The files a run folder's pair rows are read from: its Parquet table, else (a run that did not end) its CSV
    and the Parquet parts it spooled."""
    if (folder / PARQUET_NAME).exists():
        return [folder / PARQUET_NAME]
    parts = sorted((folder / PARTS_NAME).glob("*.parquet")) if (folder / PARTS_NAME).is_dir() else []
    return [folder / CSV_NAME] * (folder / CSV_NAME).exists() + parts


def _batches(source: Path, columns: list[str]) -> Iterator[dict]:
    """A table file's ``columns`` a batch of rows at a time, as {column: pyarrow array} (a missing column: nulls)."""
    import pyarrow
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        if source.suffix == ".parquet":
            present = [c for c in columns if c in pq.read_schema(source).names]
            # pre_buffer off: on, the reader keeps what it read ahead, which grows with the file.
            file = pq.ParquetFile(source, read_dictionary=[c for c in _TEXT if c in present], pre_buffer=False)
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
            yield {c: batch.column(c) if c in batch.schema.names else pyarrow.nulls(batch.num_rows) for c in columns}
    except (OSError, pyarrow.ArrowException) as exc:
        raise UsageError(f"cannot read results from {str(source)!r}: {first_line(exc)}") from None


def _codes(array) -> tuple[np.ndarray, list]:
    """A column (text or numbers, plain or dictionary-encoded; all null for one the file lacks) as codes into its
    distinct values; null is ""."""
    import pyarrow as pa

    if pa.types.is_null(array.type):
        return np.zeros(len(array), dtype=np.int64), [""]
    encoded = array if pa.types.is_dictionary(array.type) else array.dictionary_encode()
    names = ["" if value is None else value for value in encoded.dictionary.to_pylist()]
    return _plain(encoded.indices, pa.int64(), len(names)), [*names, ""]


def _numbers(array) -> np.ndarray:
    """A numeric column as float64 (NaN for null)."""
    import pyarrow as pa

    return _plain(array, pa.float64(), math.nan)


def _plain(array, kind, null) -> np.ndarray:
    """A pyarrow array cast to ``kind`` (int64 or float64), as numpy from its buffers, ``null`` where it is null.
    pyarrow's own to_numpy and fill_null import pandas (some 50 MB, on rank 0 at the end of a run)."""
    array = array.cast(kind)
    validity, data = array.buffers()[:2]
    end = array.offset + len(array)
    values = np.frombuffer(data, dtype=np.dtype(kind.to_pandas_dtype()), count=end)[array.offset :]
    if not array.null_count:
        return values.copy()  # the buffer is pyarrow's, read-only
    valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=end, bitorder="little")[array.offset :]
    return np.where(valid.astype(bool), values, null)


def _groups_of(batch: dict, count: int, name: str, first_row: int, transports) -> tuple[np.ndarray, list, dict]:
    """One batch's rows checked: each measured pair row's group (an index into the keys, -1 for other rows), the
    keys, and {figure, the ranks and size as numbers, kept: measured with a figure and not failed, failed: its
    check failed}."""
    text = {c: _codes(batch[c]) for c in ("transport", "kernel", "schedule", "status", "validation")}

    def refuse(where: np.ndarray, column: str, shown: object, why: str) -> UsageError:
        number = first_row + int(np.flatnonzero(where)[0]) + 1
        return UsageError(f"{name!r} has {column} = {reprlib.repr(shown)} (row {number}): {why}")

    def names(column: str, chosen: Iterable[str]) -> np.ndarray:
        """Which rows' ``column`` is one of ``chosen``: a look-up of each row's code, not a search."""
        codes, values = text[column]
        return np.array([value in chosen for value in values], dtype=bool)[codes]

    kernels = text["kernel"][1]
    pairs = names("kernel", METRICS)
    figure = np.full(count, math.nan)
    for code, kernel in enumerate(kernels):
        if kernel in METRICS:
            mine = text["kernel"][0] == code
            figure[mine] = _numbers(batch[METRICS[kernel][0]])[mine]
    arrays = {"figure": figure} | {c: _numbers(batch[c]) for c in _WHOLE}
    empty = pairs & names("status", [""])
    if empty.any():
        raise refuse(empty, "status", "", "a row says ok, or why it was not measured")
    unknown = pairs & ~names("transport", transports)
    if unknown.any():
        shown = text["transport"][1][text["transport"][0][np.flatnonzero(unknown)[0]]]
        raise refuse(unknown, "transport", shown, "not a transport fabricbench has")
    measured = pairs & names("status", [s for s in text["status"][1] if is_measured(s)])
    not_finite = measured & np.isinf(figure)
    if not_finite.any():
        column = METRICS[kernels[text["kernel"][0][np.flatnonzero(not_finite)[0]]]][0]
        raise refuse(not_finite, column, float(figure[not_finite][0]), "not a finite measurement, in a row measured ok")
    failed = measured & names("validation", ["fail"])
    arrays["kept"] = measured & ~failed & ~np.isnan(figure)
    arrays["failed"] = failed
    chosen = arrays["kept"] | failed  # the rows a group holds: its measured pairs, and those whose check failed
    for column in _WHOLE:
        values = arrays[column]
        top = MAX_SIZE_B if column == "size_B" else MAX_RANK
        with np.errstate(invalid="ignore"):
            bad = chosen & ~((values >= 0) & (values <= top) & (np.trunc(values) == values))
        if bad.any():
            shown = values[bad][0]
            raise refuse(bad, column, "" if math.isnan(shown) else shown, f"not a whole number from 0 to {top}")
    index = np.full(count, -1, dtype=np.int64)
    if not chosen.any():
        return index, [], arrays
    parts = [_codes(batch["run_id"]), *(text[c] for c in ("transport", "kernel", "schedule")), _codes(batch["size_B"])]
    combined = np.zeros(int(chosen.sum()), dtype=np.int64)
    for codes, values in parts:  # one number per (run, transport, kernel, schedule, size): few, so a bincount
        combined = combined * len(values) + codes[chosen]
    present = np.flatnonzero(np.bincount(combined))
    lookup = np.zeros(int(present[-1]) + 1, dtype=np.int64)
    lookup[present] = np.arange(present.size)
    keys = []
    for number in present.tolist():
        key = []
        for _, values in reversed(parts):
            number, code = divmod(number, len(values))
            key.append(values[code])
        run_id, transport, kernel, schedule, size = reversed(key)
        keys.append((run_id, transport, kernel, schedule, int(size)))
    index[chosen] = lookup[combined]
    return index, keys, arrays


def _distinct(ranks: np.ndarray) -> np.ndarray:
    """The distinct ranks among ``ranks`` (whole numbers from 0), sorted: a presence table, no sort of the rows."""
    if not ranks.size:
        return ranks.astype(np.int64)
    if ranks.max() > 4 * ranks.size + (1 << 20):  # rank numbers far apart: a table of them would be larger
        return np.unique(ranks).astype(np.int64)
    present = np.zeros(int(ranks.max()) + 1, dtype=bool)
    present[ranks.astype(np.int64)] = True
    return np.flatnonzero(present)


def _last_hosts(hosts: dict, src: np.ndarray, dst: np.ndarray, src_host, dst_host, chosen: np.ndarray) -> None:
    """Each rank's host as the ``chosen`` rows last say it (rows in order, a row's source before its destination).
    Where every row of the batch gives a rank the same host (a run's rows do), a table of rank to host is enough;
    otherwise the last of each rank's mentions is found by taking the first of them from the end."""
    ranks = np.stack([src, dst], axis=1).reshape(-1)
    both, common = np.unique(np.array([*src_host[1], *dst_host[1]], dtype=object), return_inverse=True)
    common = common.reshape(-1)  # each of the two columns' dictionary entries as one code of ``both``
    names = np.stack([common[src_host[0][chosen]], common[dst_host[0][chosen] + len(src_host[1])]], axis=1)
    names = names.reshape(-1)
    table = np.full(int(ranks.max()) + 1 if ranks.max() <= 4 * ranks.size + (1 << 20) else 0, -1, dtype=np.int64)
    if table.size:
        table[ranks] = names
    if table.size and np.array_equal(table[ranks], names):
        distinct = np.flatnonzero(table >= 0)
        codes = table[distinct]
    else:
        distinct, first = np.unique(ranks[::-1], return_index=True)
        codes = names[::-1][first]
    for rank, code in zip(distinct.tolist(), codes.tolist(), strict=True):
        hosts[rank] = both[code]

"""Rows kept in Parquet only: spooled to whole parts as they come, read back from the parts beside the CSV when a
run did not end, and made into results.parquet with the CSV's rows when it did."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from fabricbench.analysis.load import read_pairs
from fabricbench.measure import results
from fabricbench.measure.rows import RowBatch
from fabricbench.measure.schema import CSV_NAME, PARQUET_NAME, PARTS_NAME
from fabricbench.transports import TRANSPORTS

RANKS = 4


def _batch(sources: list[int], shift: int, last: bool) -> RowBatch:
    """One shift phase of a pairs-bw matrix on RANKS ranks, figure 100 * source + destination."""
    src = np.array(sources)
    dst = (src + shift) % RANKS
    columns = {"run_id": "r1", "transport": "tcp", "kernel": "pairs-bw", "schedule": "shift", "size_B": 64}
    columns |= {"status": "ok", "validation": "off", "src_rank": src, "dst_rank": dst, "bw_MBps": 100.0 * src + dst}
    columns |= {"src_host": np.array([f"h{r}" for r in src], dtype=object), "tier": "", "hops": ""}
    columns["dst_host"] = np.array([f"h{r}" for r in dst], dtype=object)
    return RowBatch(len(src), columns, RANKS * (RANKS - 1), last)


def test_parts_stand_beside_the_csv_until_the_end_and_then_results_parquet_holds_every_row(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "PART_ROWS", 5)
    writer = results.TableWriter(tmp_path)
    writer.append({"run_id": "r1", "transport": "tcp", "kernel": "latency", "size_B": 8, "status": "ok"})
    spool = results.PartSpool(tmp_path)
    for shift in (1, 2, 3):
        spool.append(_batch([0, 1, 2, 3], shift, shift == 3))
    spool.flush()
    writer.close()
    parts = sorted((tmp_path / PARTS_NAME).iterdir())
    assert spool.rows == 12 and len(parts) == 2 and [pq.read_metadata(p).num_rows for p in parts] == [8, 4]
    # A run that died here: the pairs are read from the parts, the other rows from the CSV.
    (group,) = read_pairs(tmp_path).table.groups()
    expected = np.add.outer(100.0 * np.arange(RANKS), np.arange(RANKS))
    np.fill_diagonal(expected, np.nan)
    np.testing.assert_array_equal(group.values, expected)
    assert group.hosts == ["h0", "h1", "h2", "h3"] and group.key == ("tcp", "pairs-bw", "shift", 64)
    # The end: one Parquet table, the CSV's row first, and no parts left.
    results.write_parquet(tmp_path, {"rows": 13})
    table = pq.read_table(tmp_path / PARQUET_NAME)
    assert table.num_rows == 13 and table["kernel"].to_pylist()[:2] == ["latency", "pairs-bw"]
    assert not (tmp_path / PARTS_NAME).exists() and (tmp_path / CSV_NAME).read_text().count("\n") == 2
    (again,) = read_pairs(tmp_path).table.groups()
    np.testing.assert_array_equal(again.values, expected)


def test_only_the_runs_own_rows_are_judged(tmp_path):
    writer = results.TableWriter(tmp_path)
    writer.append_many(_batch([0, 1, 2, 3], 1, True).rows())
    other = _batch([0, 1, 2, 3], 2, True)
    other.columns["run_id"] = "r0"  # an earlier run of an --append folder
    writer.append_many(other.rows())
    writer.close()
    from fabricbench.measure.pair_table import PairTable, run_sources

    (group,) = PairTable(run_sources(tmp_path), TRANSPORTS, run_id="r1").groups()
    assert int(np.count_nonzero(~np.isnan(group.values))) == RANKS


def test_a_columns_numbers_and_codes_are_read_from_its_buffers_nulls_and_slices_included():
    import pyarrow as pa

    from fabricbench.measure.pair_table import _codes, _numbers

    numbers = pa.array([1, None, 3, 4, None], pa.int64()).slice(1)  # an offset into the validity bitmap
    np.testing.assert_array_equal(_numbers(numbers), [np.nan, 3.0, 4.0, np.nan])
    np.testing.assert_array_equal(_numbers(pa.array([2.5, 1.0])), [2.5, 1.0])
    codes, names = _codes(pa.array(["a", None, "b", "a"]).slice(1))
    assert [names[c] for c in codes] == ["", "b", "a"]
    codes, names = _codes(pa.nulls(2))
    assert [names[c] for c in codes] == ["", ""]

"""The table writer never appends to a results.csv another name holds (a hard link, which O_NOFOLLOW opens), and
counts the rows an --append folder's table held before. No process."""

from __future__ import annotations

import os

import pytest

from fabricbench.errors import UsageError
from fabricbench.measure.results import HEADER, ResultsError, TableWriter, check_reuse


def test_a_hard_linked_table_is_refused_by_the_check_and_by_the_writer(tmp_path):
    out, outside = tmp_path / "run", tmp_path / "outside.csv"
    out.mkdir()
    (out / "results.csv").write_bytes(HEADER)
    os.link(out / "results.csv", outside)
    with pytest.raises(UsageError, match=r"results.csv has 2 links \(a hard link\)"):
        check_reuse(str(out), True, ["mpi"])
    with pytest.raises(ResultsError, match=r"results.csv has 2 links \(a hard link\)"):
        TableWriter(out)
    assert outside.read_bytes() == HEADER


def test_the_writer_counts_the_rows_the_table_held_before(tmp_path):
    (tmp_path / "results.csv").write_bytes(HEADER + b"row\n" * 3)
    writer = TableWriter(tmp_path)
    assert (writer.earlier_rows, writer.rows) == (3, 0)
    writer.close()
    fresh = tmp_path / "new"
    fresh.mkdir()
    assert TableWriter(fresh).earlier_rows == 0

"""The table's writers never write through a symlink in the output folder, even one put there after the check."""

from __future__ import annotations

import pytest

from fabricbench.measure.results import ResultsError, TableWriter, write_metadata


def test_the_table_writer_refuses_a_csv_that_is_a_symlink(tmp_path):
    outside = tmp_path / "outside.csv"
    outside.write_bytes(b"someone else's file\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.csv").symlink_to(outside)
    with pytest.raises(ResultsError, match="results.csv"):
        TableWriter(out)
    assert outside.read_bytes() == b"someone else's file\n"


def test_metadata_written_aside_does_not_follow_a_symlink_at_the_file_aside(tmp_path):
    outside = tmp_path / "outside"
    outside.write_bytes(b"kept\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / "metadata.tmp").symlink_to(outside)
    (out / "metadata.json").symlink_to(outside)
    write_metadata(out, {"rows": 1})
    assert outside.read_bytes() == b"kept\n"
    assert not (out / "metadata.json").is_symlink() and '"rows": 1' in (out / "metadata.json").read_text()

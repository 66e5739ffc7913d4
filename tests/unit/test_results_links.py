"""The table's writers never write through a symlink in the output folder, even one put there after the check."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricbench.measure.results import ResultsError, TableWriter, write_metadata


def _folder_with_links(tmp_path: Path, *names: str) -> tuple[Path, Path]:
    """A run folder whose NAMES are symlinks to one file outside it; returns (folder, that file)."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"someone else's file\n")
    out = tmp_path / "run"
    out.mkdir()
    for name in names:
        (out / name).symlink_to(outside)
    return out, outside


def test_the_table_writer_refuses_a_csv_that_is_a_symlink(tmp_path):
    out, outside = _folder_with_links(tmp_path, "results.csv")
    with pytest.raises(ResultsError, match="results.csv"):
        TableWriter(out)
    assert outside.read_bytes() == b"someone else's file\n"


def test_metadata_written_aside_does_not_follow_a_symlink_at_the_file_aside(tmp_path):
    out, outside = _folder_with_links(tmp_path, "metadata.tmp", "metadata.json")
    write_metadata(out, {"rows": 1})
    assert outside.read_bytes() == b"someone else's file\n"
    assert not (out / "metadata.json").is_symlink() and '"rows": 1' in (out / "metadata.json").read_text()

"""``run --append`` against a table with more than one name, and the closing line of an appending run.

A hard link is not a symlink: O_NOFOLLOW opens it, and a run appended its rows to the file behind both names,
one of them outside the folder. It is refused now, in one line before any rank starts.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support import fabricbench, one_error_line

QUICK = ["-t", "mpi", "-k", "latency", "-i", "20", "-x", "2"]


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("append") / "run"
    done = fabricbench("run", *QUICK, "-m", "8:64", "--format", "none", "--out", str(out))  # 4 rows
    assert done.returncode == 0, done.stderr
    return out


def test_a_hard_linked_table_is_refused_and_the_other_name_is_untouched(earlier, tmp_path):
    folder, outside = tmp_path / "run", tmp_path / "someone-elses.csv"
    shutil.copytree(earlier, folder)
    os.link(folder / "results.csv", outside)
    before = outside.read_bytes()
    done = fabricbench("run", *QUICK, "-m", "8:8", "--append", "--out", str(folder))
    assert done.returncode == 2
    one_error_line(done.stderr, f"--append: {folder / 'results.csv'} has 2 links (a hard link)")
    assert outside.read_bytes() == before


def test_an_appending_run_counts_every_row_of_the_table(earlier, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(earlier, folder)
    done = fabricbench("run", *QUICK, "-m", "8:8", "--format", "table", "--append", "--out", str(folder))
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"# 5 rows in {folder}/ (1 added; results.csv"), done.stderr

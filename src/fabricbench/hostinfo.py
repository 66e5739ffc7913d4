"""Facts about the host a rank runs on, shared by the launcher and the transports."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # a new random id at every boot, one per kernel


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a launcher's binding, a cgroup's cpuset), else the
    host's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def job_cpus() -> int:
    """The CPUs this host gives the job's ranks, before MPI starts: this process's affinity mask joined with its
    parent's, the launcher's process on this host (hydra's proxy, orted, slurmstepd), which a binding of each rank
    to its own core does not narrow but a taskset or cpuset around the whole job does. This process's alone where
    the parent's cannot be read."""
    if not hasattr(os, "sched_getaffinity"):
        return os.cpu_count() or 1
    cpus = set(os.sched_getaffinity(0))
    parent = os.getppid()
    if parent > 1:
        with contextlib.suppress(OSError):  # another user's launcher, or one gone
            cpus |= os.sched_getaffinity(parent)
    return len(cpus)


# What a launcher tells each rank, before MPI starts, of the ranks it started on this host: hydra (MPICH, Intel MPI),
# Open MPI's mpirun, a PMIx launcher.
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE")


def announced_local_ranks(env) -> tuple[int, str] | None:
    """The ranks a launcher says it started on this host, and the variable that says so; None where none says (a
    value that is not a whole number counts as unsaid)."""
    for var in LOCAL_SIZE_VARS:
        value = env.get(var, "")
        if value.isascii() and value.isdigit() and int(value) > 0:
            return int(value), var
    return None


def this_host() -> str:
    """The name a rank gives for its host in the records the ranks trade."""
    return socket.gethostname()


def ranks_here(records: list[dict]) -> int:
    """How many of the ranks' records (each with the "host" this_host() gave) name this host."""
    host = this_host()
    return sum(1 for record in records if record.get("host") == host)


def boot_id() -> str:
    """This kernel's boot id ("unknown" where it cannot be read): hosts that give the same one share one kernel
    (network namespaces, containers), and with it shared memory that MPI may use between them."""
    try:
        return BOOT_ID.read_text().strip() or "unknown"
    except OSError:
        return "unknown"

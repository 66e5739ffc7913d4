"""Facts about the host a rank runs on, shared by the launcher and the transports."""

from __future__ import annotations

import os
import socket
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # a new random id at every boot, one per kernel


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a launcher's binding, a cgroup's cpuset), else the
    host's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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

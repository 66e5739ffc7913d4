"""Facts about the host a rank runs on, shared by the launcher and the transports."""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (a launcher's binding, a cgroup's cpuset), else the
    host's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1

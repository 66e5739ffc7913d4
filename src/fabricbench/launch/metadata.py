"""Where a table came from: the metadata written beside every run."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from fabricbench import __version__
from fabricbench.argtypes import masked_command_line
from fabricbench.measure.schema import SCHEMA_VERSION


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "unavailable"


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def transparent_hugepages() -> str:
    """The THP mode in force, e.g. 'madvise' from 'always [madvise] never'."""
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    if "[" in text:
        return text[text.index("[") + 1 : text.index("]")]
    return text


def numpy_hugepages() -> bool | None:
    """Whether numpy madvises huge pages for large arrays (NUMPY_MADVISE_HUGEPAGE)."""
    getter = getattr(np._core.multiarray, "_get_madvise_hugepage", None)
    return bool(getter()) if getter else None


def set_numpy_hugepages(enabled: bool) -> None:
    setter = getattr(np._core.multiarray, "_set_madvise_hugepage", None)
    if setter:
        setter(enabled)


def rank_info() -> dict:
    """What differs per rank: host, process, CPU binding."""
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"host": socket.gethostname(), "pid": os.getpid(), "cpu_affinity": affinity}


def mpi_info() -> dict:
    import mpi4py
    from mpi4py import MPI

    vendor, version = MPI.get_vendor()
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled", MPI.THREAD_SERIALIZED: "serialized"}
    return {
        "mpi_thread_level": levels.get(MPI.Query_thread(), "multiple"),
        "mpi_library_version": MPI.Get_library_version().strip(),
        "mpi_vendor": f"{vendor} {'.'.join(map(str, version))}",
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi4py_version": mpi4py.__version__,
    }


def run_metadata(plan, ranks: list[dict], launcher: str | None) -> dict:
    """The run's metadata; ``ranks`` is rank_info() from every rank, in rank order. A topology that does not place
    every rank's host is refused here (UsageError), before any step runs."""
    hosts = sorted({r["host"] for r in ranks})
    fabric = plan.fabric()
    if fabric is not None:
        fabric.check_hosts(hosts)
    meta = {
        "schema_version": SCHEMA_VERSION,
        "run_id": plan.run_id,
        "label": plan.label,
        "fabricbench_version": __version__,
        "command_line": masked_command_line(sys.argv),  # the token's value masked, in whatever spelling
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "launcher": launcher or "none",
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "numpy_version": np.__version__,
        "hosts": hosts,
        "topology": fabric.metadata(hosts) if fabric is not None else None,  # each host's switch and group
        "ranks": ranks,
        "cpu_model": cpu_model(),
        "os_release": platform.release(),
        "transparent_hugepage": transparent_hugepages(),
        "numpy_madvise_hugepage": numpy_hugepages(),
        "NUMPY_MADVISE_HUGEPAGE": os.environ.get("NUMPY_MADVISE_HUGEPAGE", "unset"),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
        "plan": {k: v for k, v in asdict(plan).items() if k not in ("steps", "topology")},
        "steps": [asdict(s) for s in plan.steps],
    }
    return meta

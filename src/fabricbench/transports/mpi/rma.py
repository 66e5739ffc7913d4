"""Transport ``mpi-rma``: one-sided Put and Get, as osu_put_latency / osu_put_bw.

The window comes from ``MPI_Win_allocate`` and synchronisation is passive
target lock/flush, OSU's defaults. Rank 0 is the origin and rank N/2 the
target; the target does nothing while it is timed, which is the point of RMA.

The windows are host memory only: with ``--buffer cuda`` (which the mpi options
carry for both transports) every kernel's row says unsupported, and the
GPU is never opened, so the run's other transports still run.
"""

from __future__ import annotations

import time

from fabricbench.buffers import POISON, filled, nothing, pattern, poisoned
from fabricbench.lazy import np
from fabricbench.measure.kernels import Kernel, partner_of
from fabricbench.transports.base import Case, Transport
from fabricbench.transports.mpi.cloop import CLoop
from fabricbench.transports.mpi.transport import (
    MPI_OPTIONS,
    MPITransport,
    import_mpi,
    loop_metadata,
    open_loop,
    preflight_loop,
    require_success,
    times_address,
)

ORIGIN_SEED = 101
TARGET_SEED = 202


def buffer_unsupported(options: dict) -> str | None:
    """Why mpi-rma cannot run with these mpi options (Plan.transport_options["mpi"]), or None: its windows
    are host memory (MPI_Win_allocate), and it never puts a message in GPU memory in their place."""
    buffer = options.get("buffer", "host")
    if buffer != "host":
        return f"mpi-rma runs host windows only; --buffer {buffer} is for -t mpi"
    return None


class OneSided(Case):
    def __init__(self, comm, kernel: Kernel, size: int, window: int, cloop: CLoop | None):
        super().__init__()
        MPI = import_mpi()
        self.cloop = cloop
        self.method = f"{'c' if cloop else 'python'} loop, lock/flush"
        self.what = f"mpi-rma {kernel.name} at {size} B"
        self.size = size
        self.put = kernel.name.startswith("put")
        self.window = window if kernel.windowed else 0
        self.rank = comm.Get_rank()
        role = partner_of(kernel, self.rank, comm.Get_size())
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        self.win = MPI.Win.Allocate(size, 1, MPI.INFO_NULL, comm)
        self.memory = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
        # Written before timing: the target's window holds data for Get, the
        # origin's buffer holds data for Put.
        self.memory[:] = pattern(size, TARGET_SEED) if not self.put else POISON
        if self.initiator:
            self.local = filled(size, ORIGIN_SEED) if self.put else poisoned(size)
            self.received = nothing() if self.put else self.local
        elif self.active:
            self.received = self.memory if self.put else nothing()
        if self.initiator and cloop:
            self.c_args = (self.win.py2f(), self.peer, int(self.put), self.local.ctypes.data, size, self.window)

    def expected(self):
        if self.received.size == 0:
            return nothing()
        return pattern(self.size, ORIGIN_SEED if self.put else TARGET_SEED)

    def poison(self) -> None:
        MPI = import_mpi()
        if self.received is self.memory:
            # The target writes its own window inside an exclusive epoch.
            self.win.Lock(self.rank, MPI.LOCK_EXCLUSIVE)
            self.memory[:] = POISON
            self.win.Unlock(self.rank)
        else:
            self.received[:] = POISON

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.initiator:
            return
        if self.cloop:
            require_success(self.cloop.lib.fb_rma(*self.c_args, iterations, times_address(times)), self.what)
            return
        MPI = import_mpi()
        win, target, clock = self.win, self.peer, time.perf_counter_ns
        message = [self.local, self.size, MPI.BYTE]
        operation = win.Put if self.put else win.Get
        flush = win.Flush
        per_flush = range(self.window or 1)
        win.Lock(target, MPI.LOCK_SHARED)
        try:
            # One untimed operation opens the epoch (a library may take the lock lazily), as in fb_rma.
            operation(message, target)
            flush(target)
            last = clock()
            if self.window:
                for i in range(iterations):
                    for _ in per_flush:
                        operation(message, target)
                    flush(target)
                    now = clock()
                    times[i] = now - last
                    last = now
            else:
                for i in range(iterations):
                    operation(message, target)
                    flush(target)
                    now = clock()
                    times[i] = now - last
                    last = now
        finally:
            win.Unlock(target)

    def close(self) -> None:
        self.memory = self.received = nothing()
        self.win.Free()


class MPIRMATransport(Transport):
    name = "mpi-rma"
    kernels = frozenset({"put", "get", "put-bw", "get-bw"})
    default_kernels = ("put", "get", "put-bw")
    needs_launcher = True
    osu_name = "MPI"
    option_groups = (MPI_OPTIONS,)  # the same MPI, loop and library as the mpi transport
    doctor = MPITransport.doctor

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """mpi's checks less the GPU's: with --buffer cuda these kernels say unsupported and open no GPU, so a
        host without one must not be told to install CuPy for them."""
        preflight_loop(MPI_OPTIONS.of(settings))

    @classmethod
    def osu_header_lines(cls, kernel: Kernel) -> list[str]:
        if kernel.name not in cls.kernels:
            return []
        return ["# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_flush"]

    def __init__(self, ctrl, plan):
        import_mpi()
        self.comm = ctrl.comm.Dup()
        self.window = plan.window
        options = MPI_OPTIONS.of(plan.transport_options)
        self.buffer_reason = buffer_unsupported(options)
        self.buffer = options.get("buffer", "host")  # the rows say what was asked for, beside why it was not run
        try:
            self.cloop = open_loop(self.comm, options)
        except BaseException:
            self.comm.Free()
            raise

    def unsupported(self, kernel: Kernel) -> str | None:
        return super().unsupported(kernel) or self.buffer_reason

    def case(self, kernel: Kernel, size: int) -> Case:
        return OneSided(self.comm, kernel, size, self.window, self.cloop)

    def metadata(self) -> dict:
        return {"rma_window": "MPI_Win_allocate", "rma_sync": "MPI_Win_lock/flush"} | loop_metadata(self.cloop)

    def close(self) -> None:
        self.comm.Free()

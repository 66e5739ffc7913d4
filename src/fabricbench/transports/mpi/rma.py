"""Transport ``mpi-rma``: OSU's one-sided tests: Put and Get latency and bandwidth, Put both ways, Accumulate,
Get_accumulate, Fetch_and_op and Compare_and_swap.

The window and the synchronisation are OSU's -w and -s (``--rma-window``,
``--rma-sync``), with OSU's defaults: ``MPI_Win_allocate`` (``MPI_Win_create``
for get-acc, as osu_get_acc_latency's own default) and passive-target
lock/flush, except osu_put_bibw's post/start/complete/wait (it synchronises
actively only, pscw or fence). Rank 0 is the origin and rank N/2 the target;
under a passive synchronisation the target does nothing while it is timed,
which is the point of RMA. Under pscw and fence a latency is OSU's: each side
operates on the other's window in turn and the round trip is halved.

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
from fabricbench.transports.mpi.cloop import RMA_OPS, RMA_SYNCS, CLoop
from fabricbench.transports.mpi.transport import (
    C_TYPES,
    MPI_OPTIONS,
    MPITransport,
    import_mpi,
    loop_metadata,
    open_loop,
    preflight_loop,
    require_success,
    times_address,
)
from fabricbench.transports.options import OptionGroup

ORIGIN_SEED = 101  # + the rank: what each rank puts, accumulates or swaps in
TARGET_SEED = 202  # + the rank: what a window holds for Get to read

# OSU's -w and -s words, and the lines OSU prints for them (osu_util_mpi.c's win_info and sync_info).
WINDOWS = {"create": "MPI_Win_create", "allocate": "MPI_Win_allocate", "dynamic": "MPI_Win_create_dynamic"}
SYNCS = {
    "lock": "MPI_Win_lock/unlock",
    "pscw": "MPI_Win_post/start/complete/wait",
    "fence": "MPI_Win_fence",
    "flush": "MPI_Win_flush",
    "flush_local": "MPI_Win_flush_local",
    "lock_all": "MPI_Win_lock_all/unlock_all",
}
# The row's method: what closes each sample's operations.
SYNC_METHODS = {
    "lock": "lock/unlock",
    "pscw": "post/start/complete/wait",
    "fence": "fence",
    "flush": "lock/flush",
    "flush_local": "lock/flush_local",
    "lock_all": "lock_all/unlock_all",
}
ACTIVE = ("pscw", "fence")  # the target takes part in every sample
FLUSHED = ("flush", "flush_local")  # one lock for the loop, opened by one untimed operation
DEFAULT_WINDOW = "allocate"
SUMS = ("acc", "get_acc")  # MPI_SUM on signed bytes
SMALL_ADDEND = 63  # a sum's bytes are 1..63: start 0 plus the check's two at most stays below 127


def rma_op(kernel: Kernel) -> str:
    """fb_rma_sync's operation for a kernel: put, get, acc, get_acc, fop or cas."""
    return kernel.name.removesuffix("-bibw").removesuffix("-bw").replace("-", "_")


def default_window(kernel: Kernel) -> str:
    """OSU's -w default: MPI_Win_allocate, but MPI_Win_create for osu_get_acc_latency, whose own default it is."""
    return "create" if kernel.name == "get-acc" else DEFAULT_WINDOW


def default_sync(kernel: Kernel) -> str:
    """OSU's -s default: flush, or pscw for osu_put_bibw, which synchronises actively only."""
    return "pscw" if kernel.directions == 2 else "flush"


def sync_reason(kernel: Kernel, sync: str, ranks: int) -> str | None:
    """Why a kernel cannot run under ``sync`` on ``ranks`` ranks (OSU refuses it too), or None."""
    if kernel.directions == 2 and sync not in ACTIVE:
        return f"{kernel.name} synchronises actively (--rma-sync pscw or fence), as osu_put_bibw"
    if sync == "fence" and ranks != 2:
        return "--rma-sync fence makes every rank of the window fence with the pair: it runs on 2 ranks, as OSU"
    return None


class RMAOptions(OptionGroup):
    """mpi-rma's window creation and synchronisation: OSU's -w and -s."""

    name = "rma"

    def add_arguments(self, parser, role: str) -> None:
        if role != "run":
            return
        group = parser.add_argument_group("mpi-rma transport")
        group.add_argument(
            "--rma-window",
            choices=list(WINDOWS),
            help="how each window is made, OSU's -w: MPI_Win_create over a buffer, MPI_Win_allocate or "
            "MPI_Win_create_dynamic with the buffer attached (default: allocate, and create for get-acc, as OSU)",
        )
        group.add_argument(
            "--rma-sync",
            choices=list(SYNCS),
            help="how operations are completed, OSU's -s: lock/unlock, flush or flush_local inside one lock "
            "(flush: the default), lock_all/unlock_all, post/start/complete/wait (pscw) or fence; put-bibw "
            "takes pscw (its default) or fence",
        )

    def parse(self, args, role: str) -> dict:
        if role != "run":
            return {}
        given = {"window": args.rma_window, "sync": args.rma_sync}
        return {key: value for key, value in given.items() if value is not None}


RMA_OPTIONS = RMAOptions()


def buffer_unsupported(options: dict) -> str | None:
    """Why mpi-rma cannot run with these mpi options (Plan.transport_options["mpi"]), or None: its windows
    are host memory (MPI_Win_allocate), and it never puts a message in GPU memory in their place."""
    buffer = options.get("buffer", "host")
    if buffer != "host":
        return f"mpi-rma runs host windows only; --buffer {buffer} is for -t mpi"
    return None


def atomic_element(kernel: Kernel) -> tuple[str, int]:
    """(numpy dtype, fb_rma_sync's atomic_type code) of the one element fop and cas operate on: OSU's -T type
    (Kernel.with_datatype: MPI_CHAR, MPI_INT, MPI_FLOAT), else the kernel's own 8-byte integer (code 0)."""
    for element, (code, _) in C_TYPES.items():
        if element.osu_datatype == kernel.osu_datatype:
            return element.dtype, code
    return "i8", 0


def operand(op: str, size: int, rank: int, atomic_dtype: str = "i8") -> np.ndarray:
    """What ``rank`` puts, accumulates, adds or swaps in (bytes); fop adds one element of ``atomic_dtype``. A sum's
    operands stay small enough that the check's few sums never overflow: MPI leaves a signed overflow to the
    library, and Open MPI's vector MPI_SUM on signed chars saturates where MPICH's wraps."""
    if op == "fop":
        one_byte = np.dtype(atomic_dtype).itemsize == 1
        value = (ORIGIN_SEED + rank) % SMALL_ADDEND + 1 if one_byte else ORIGIN_SEED + rank
        return np.array([value], dtype=atomic_dtype).view(np.uint8)
    data = filled(size, ORIGIN_SEED + rank)
    if op in SUMS:
        data %= SMALL_ADDEND
        data += 1
    return data


class OneSided(Case):
    """One rank's part in a one-sided kernel: its window, what it sends from and fetches into, and its loop."""

    def __init__(self, comm, kernel: Kernel, size: int, window: int, cloop: CLoop | None, window_kind: str, sync: str):
        super().__init__()
        MPI = import_mpi()
        self.cloop, self.sync, self.window_kind = cloop, sync, window_kind
        extra = "" if window_kind == DEFAULT_WINDOW else f", {WINDOWS[window_kind]}"
        self.method = f"{'c' if cloop else 'python'} loop, {SYNC_METHODS[sync]}{extra}"
        self.what = f"mpi-rma {kernel.name} at {size} B"
        self.op = rma_op(kernel)
        self.size = size
        self.window = window if kernel.windowed else 0
        self.per_epoch = self.window or 1
        self.round_trip = sync in ACTIVE and not kernel.windowed  # OSU's pscw and fence latencies: each way, halved
        self.both_ways = kernel.directions == 2
        self.comm, self.rank = comm, comm.Get_rank()
        role = partner_of(kernel, self.rank, comm.Get_size())
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        issues = self.active and (self.initiator or self.round_trip or self.both_ways)
        self.outgoing = self.per_epoch + (sync in FLUSHED) if self.initiator else (self.per_epoch if issues else 0)
        self.incoming = 0
        if self.active and not self.initiator:
            self.incoming = self.per_epoch + (sync in FLUSHED)
        elif self.initiator and (self.round_trip or self.both_ways):
            self.incoming = self.per_epoch
        self.window_start = self._window_start(self.rank)
        self.base = self.memory = None
        self._open_window(comm, window_kind)
        self.memory[:] = self.window_start
        self.atomic_dtype, atomic_code = atomic_element(kernel)
        self.origin = operand(self.op, size, self.rank, self.atomic_dtype)
        self.result = poisoned(size)
        self.compare = self._window_start(self.rank)  # cas: swap while the target holds what it started with
        if self.active and cloop:
            buffers = (self.origin.ctypes.data, self.result.ctypes.data, self.compare.ctypes.data)
            self.c_args = (self.win.py2f(), self.peer, int(self.initiator), RMA_OPS[self.op], RMA_SYNCS[sync])
            self.c_args += (
                int(self.round_trip),
                int(self.both_ways),
                atomic_code,
                *buffers,
                size,
                self.disp,
                self.per_epoch,
            )

    def _window_start(self, rank: int) -> np.ndarray:
        """What a rank's window holds before each run: Get's data; 0 for the sums to start from; else POISON."""
        if self.op == "get":
            return pattern(self.size, TARGET_SEED + rank)
        return np.full(self.size, 0 if self.op in (*SUMS, "fop") else POISON, np.uint8)

    def _open_window(self, comm, kind: str) -> None:
        """The window (collective on ``comm``), ``memory`` (a byte view of this rank's part) and ``disp`` (where
        the peer's part starts, for its operations: 0 but for a dynamic window's address)."""
        MPI = import_mpi()
        self.disp = 0
        if kind == "allocate":
            self.win = MPI.Win.Allocate(self.size, 1, MPI.INFO_NULL, comm)
            self.memory = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
            return
        self.base = self.memory = poisoned(self.size)
        if kind == "create":
            self.win = MPI.Win.Create(self.base, 1, MPI.INFO_NULL, comm)
            return
        self.win = MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)
        self.win.Attach(self.base)
        addresses = comm.allgather(MPI.Get_address(self.base))
        self.disp = addresses[self.peer] if self.active else 0

    @property
    def received(self) -> np.ndarray:
        """What this rank's check reads: its window where the peer wrote into it (put, acc, get_acc, fop, cas),
        then what its own operations fetched (get, get_acc, fop, cas)."""
        if not getattr(self, "active", False):
            return nothing()
        parts = []
        if self.incoming and self.op != "get":
            parts.append(self.memory)
        if self.outgoing and self.op not in ("put", "acc"):
            parts.append(self.result)
        return np.concatenate(parts) if parts else nothing()

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the window and result are what is checked
        pass

    def expected(self) -> np.ndarray:
        """What ``received`` holds after one run of one iteration from the start (poison): ``incoming`` operations
        of the peer on this window, ``outgoing`` of this rank on the peer's."""
        if not self.active:
            return nothing()
        peer_origin, own_origin = operand(self.op, self.size, self.peer, self.atomic_dtype), self.origin
        parts = []
        if self.incoming and self.op != "get":
            parts.append(self._after(self._window_start(self.rank), peer_origin, self.incoming))
        if self.outgoing and self.op not in ("put", "acc"):
            if self.op == "get":
                parts.append(self._window_start(self.peer))
            else:  # the peer's window before this rank's last operation
                parts.append(self._after(self._window_start(self.peer), own_origin, self.outgoing - 1))
        return np.concatenate(parts) if parts else nothing()

    def _after(self, start: np.ndarray, added: np.ndarray, operations: int) -> np.ndarray:
        """A window's bytes after ``operations`` of this kernel's operation with operand ``added``, from ``start``."""
        if operations == 0:
            return start.copy()
        if self.op == "put":
            return added.copy()
        if self.op in SUMS:
            return start + np.uint8(operations) * added
        if self.op == "fop":
            dtype = np.dtype(self.atomic_dtype)
            return (start.view(dtype) + dtype.type(operations) * added.view(dtype)).view(np.uint8)
        return added.copy()  # cas: the first swaps in the operand; the later ones compare and leave it

    def poison(self) -> None:
        MPI = import_mpi()
        # A passive target returns from its run at once: the origin's last operations may still be on their way
        # into its window, and an accumulate landing after the poison would be counted in the check.
        self.comm.Barrier()
        if self.active:
            # This rank writes its own window inside an exclusive epoch.
            self.win.Lock(self.rank, MPI.LOCK_EXCLUSIVE)
            self.memory[:] = self.window_start
            self.win.Unlock(self.rank)
        self.result[:] = POISON

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if self.cloop:
            done = self.cloop.lib.fb_rma_sync(*self.c_args, iterations, times_address(times))
            require_success(done, self.what)
            return
        if not self.initiator:
            return
        self._run_python(iterations, times)

    def _run_python(self, iterations: int, times: memoryview) -> None:
        """Put or Get with lock/flush (what MPIRMATransport.unsupported leaves the Python loop), as fb_rma_sync."""
        MPI = import_mpi()
        win, target, clock = self.win, self.peer, time.perf_counter_ns
        put = self.op == "put"
        message = [self.origin if put else self.result, self.size, MPI.BYTE]
        operation = win.Put if put else win.Get
        flush = win.Flush
        per_flush = range(self.per_epoch)
        win.Lock(target, MPI.LOCK_SHARED)
        try:
            # One untimed operation opens the epoch (a library may take the lock lazily), as in fb_rma_sync.
            operation(message, target)
            flush(target)
            last = clock()
            for i in range(iterations):
                for _ in per_flush:
                    operation(message, target)
                flush(target)
                now = clock()
                times[i] = now - last
                last = now
        finally:
            win.Unlock(target)

    def close(self) -> None:
        self.memory = nothing()
        if self.window_kind == "dynamic":
            self.win.Detach(self.base)
        self.win.Free()
        self.base = None


class MPIRMATransport(Transport):
    name = "mpi-rma"
    kernels = frozenset({"put", "get", "put-bw", "get-bw", "put-bibw", "acc", "get-acc", "fop", "cas"})
    default_kernels = ("put", "get", "put-bw")
    needs_launcher = True
    osu_name = "MPI"
    osu_atomic_types = True  # fb_rma_sync's fop and cas take one element of OSU's type (rma.atomic_element)
    option_groups = (MPI_OPTIONS, RMA_OPTIONS)  # the same MPI, loop and library as the mpi transport; OSU's -w, -s
    doctor = MPITransport.doctor

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """mpi's checks less the GPU's: with --buffer cuda these kernels say unsupported and open no GPU, so a
        host without one must not be told to install CuPy for them."""
        preflight_loop(MPI_OPTIONS.of(settings))

    @classmethod
    def osu_header_lines(cls, kernel: Kernel, transport_options: dict | None = None) -> list[str]:
        if kernel.name not in cls.kernels:
            return []
        rma = RMA_OPTIONS.of(transport_options or {})
        window = WINDOWS[rma.get("window") or default_window(kernel)]
        sync = SYNCS[rma.get("sync", default_sync(kernel))]
        return [f"# Window creation: {window}", f"# Synchronization: {sync}"]

    def __init__(self, ctrl, plan):
        import_mpi()
        self.comm = ctrl.comm.Dup()
        self.window = plan.window
        options = MPI_OPTIONS.of(plan.transport_options)
        rma = RMA_OPTIONS.of(plan.transport_options)
        self.window_kind, self.sync = rma.get("window"), rma.get("sync")  # None: OSU's default for the kernel
        self.buffer_reason = buffer_unsupported(options)
        self.buffer = options.get("buffer", "host")  # the rows say what was asked for, beside why it was not run
        try:
            self.cloop = open_loop(self.comm, options)
        except BaseException:
            self.comm.Free()
            raise

    def _sync(self, kernel: Kernel) -> str:
        return self.sync or default_sync(kernel)

    def _window(self, kernel: Kernel) -> str:
        return self.window_kind or default_window(kernel)

    def unsupported(self, kernel: Kernel) -> str | None:
        found = super().unsupported(kernel) or self.buffer_reason
        found = found or sync_reason(kernel, self._sync(kernel), self.comm.Get_size())
        if found or self.cloop:
            return found
        python_loop = self._sync(kernel) == "flush" and self._window(kernel) != "dynamic"
        if kernel.name.removesuffix("-bw") not in ("put", "get") or not python_loop:
            return (
                f"the python loop times put and get (and their -bw) with lock/flush on an allocated or created "
                f"window; {kernel.name} with {SYNC_METHODS[self._sync(kernel)]} is timed in C only"
            )
        return None

    def case(self, kernel: Kernel, size: int) -> Case:
        return OneSided(self.comm, kernel, size, self.window, self.cloop, self._window(kernel), self._sync(kernel))

    def metadata(self) -> dict:
        sync = {"rma_sync": SYNCS[self.sync]} if self.sync else {"rma_sync": "OSU's default per kernel"}
        default = f"{WINDOWS[DEFAULT_WINDOW]} (get-acc: {WINDOWS['create']}, as OSU)"  # default_window's
        window = WINDOWS[self.window_kind] if self.window_kind else default
        return {"rma_window": window} | sync | loop_metadata(self.cloop)

    def close(self) -> None:
        self.comm.Free()

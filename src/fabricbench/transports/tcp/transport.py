"""Transport ``tcp``: the kernels over plain TCP sockets, the baseline every fabric is compared with.

The links (one TCP connection per needed pair of ranks) come from
``tcp_link``; this module holds the timed loops. They call plain ``send`` and
``recv_into`` on preallocated, written buffers, one system call per message
as osu_latency and osu_bw make one MPI call, and finish a partial transfer off
the fast path.

The latency, bw and msgrate loops run in C (``_tcploop.c``, the same system
calls with the GIL released), a Python extension that ``cbuild`` builds on
first use: the interpreter's cost per message is not the network's, and a TCP
baseline must not carry it. Every rank takes the C loop or none does.
The C streaming window waits in poll() between non-blocking calls, as iperf3
does, within the same socket timeouts. ``--loop python`` times the same
pattern in Python instead, for a like-for-like look beside mpi4py; the row's
``method`` says which loop ran.

- latency: ping-pong between rank 0 and rank N/2 (osu_latency).
- bw, msgrate: W messages, then a 1-byte ack (osu_bw, osu_mbw_mr over pairs r, r + N/2).
- bibw: both ways at once, W messages each (osu_bibw).
- allreduce: ring reduce-scatter then ring allgather, float32 sums in numpy.
- allgather: ring allgather.
- reduce: a chain along the ring to rank 0, float32 sums in numpy.
- congestion: GPCNeT's canaries and congestors (all-to-all, incast) over links between every pair of ranks
  (``tcp_congestion``); no one-sided patterns.
"""

from __future__ import annotations

import argparse
import shlex
import socket
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType

from fabricbench.argtypes import port_number
from fabricbench.buffers import aligned, filled, nothing, pattern, poisoned
from fabricbench.collectives.spec import ROOT
from fabricbench.control import allgather_json
from fabricbench.control.rendezvous import FieldReader, Fields, ProtocolError
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.congestion import Role
from fabricbench.measure.kernels import Kernel, Pairing, partner_of
from fabricbench.transports import cbuild
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.cbuild import CLoopUnavailable
from fabricbench.transports.options import LOOP, OptionGroup
from fabricbench.transports.tcp.link import (
    ANY,
    NO_RATE,
    WAITALL,
    Duplex,
    check_local_address,
    check_ports_free,
    finish_recv,
    link_rates,
    open_links,
)

SOURCE = Path(__file__).with_name("_tcploop.c")
MODULE = "fabricbench.transports.tcp._tcploop"
PYTHON_HEADERS = "Debian/Ubuntu: apt-get install python3-dev; RHEL/Fedora: dnf install python3-devel"


@dataclass(frozen=True)
class CLoop:
    """The loaded extension, the file it came from and the compiler that built it (metadata and ``doctor``)."""

    module: ModuleType
    path: str
    compiler: str  # the command
    compiler_version: str  # the first line of its --version


_LOADED: list[CLoop] = []  # this process's C loop once loaded: preflight, doctor and the transport share it
_LOOP_NOTICE: list[str] = []  # the fallback notice, printed once per process


def load_c_loop() -> CLoop:
    """The C loops built for this Python, from the cache or compiled now. Raises CLoopUnavailable."""
    if not _LOADED:
        compiler = cbuild.find_compiler()
        include = sysconfig.get_paths()["include"]
        recipe = cbuild.Recipe(
            name="tcploop",
            source=SOURCE,
            compiler=compiler,
            # Python.h, and the extension's ABI: a build for one interpreter never loads into another.
            compile_flags=(f"-I{include}",),
            suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so",
            key_parts=(sys.version, sysconfig.get_config_var("SOABI") or "", include),
            missing_hint=PYTHON_HEADERS,
        )
        module, path = cbuild.load_extension(recipe, MODULE)
        _LOADED.append(CLoop(module, str(path), shlex.join(compiler), cbuild.compiler_identity(compiler)))
    return _LOADED[0]


def open_c_loop(ctrl, choice: str) -> tuple[CLoop | None, str]:
    """The C loop on every rank, or on none, and why not: the ranks agree, so no row mixes loops.

    ``--loop c`` was checked by preflight on this host; should another rank fail to load it, every rank
    stops with UsageError. ``auto`` falls back to the Python loop with one notice.
    """
    if choice == "python":
        return None, "not asked for"
    try:
        cloop, why = load_c_loop(), ""
    except CLoopUnavailable as exc:
        cloop, why = None, str(exc)
    table = allgather_json(ctrl, {"c_loop_unavailable": why}, "tcp loop table")
    reasons = [record.get("c_loop_unavailable") for record in table]
    failed = [(rank, str(said)) for rank, said in enumerate(reasons) if said]
    if not failed:
        return cloop, ""
    rank, said = failed[0]
    why = said if rank == ctrl.rank else f"on rank {rank}: {said}"
    if choice == "c":
        raise UsageError(f"--loop c: {why}")
    if ctrl.rank == 0 and not _LOOP_NOTICE:
        _LOOP_NOTICE.append(why)
        print(f"fabricbench: notice: tcp kernels are timed in Python (python loop): {why}", file=sys.stderr, flush=True)
    return None, why


class _TCPCase(Case):
    """Turns socket failures inside the timed loop into one clear PeerError."""

    method = "python loop"

    def __init__(self, kernel: Kernel, size: int, timeout: float, peers: list[int]):
        super().__init__()
        self.what = f"tcp {kernel.name} at {size} B"
        self.timeout = timeout
        self.peers = peers

    def _who(self) -> str:
        return "rank " + ", ".join(map(str, self.peers)) if len(self.peers) < 2 else f"ranks {self.peers}"

    def run(self, iterations: int, times: memoryview) -> None:
        try:
            self._run(iterations, times)
        except BlockingIOError:
            raise PeerError(f"{self.what}: timed out after {self.timeout:g} s waiting for {self._who()}") from None
        except (EOFError, ConnectionError):  # an orderly close, a reset or a broken pipe
            raise PeerError(f"{self.what}: peer closed the connection ({self._who()})") from None
        except OSError as exc:
            raise PeerError(f"{self.what}: connection to {self._who()} lost: {exc.strerror or exc}") from None

    def _run(self, iterations: int, times: memoryview) -> None:
        raise NotImplementedError


def _send_seed(rank: int) -> int:
    return rank + 1


class _PointToPoint(_TCPCase):
    """This rank's partner, role and written buffers; ranks outside the pattern sit out."""

    loop = None  # the C loops' module when they time this case, else None
    both_ways = False

    def __init__(self, links: dict, rank: int, ranks: int, kernel: Kernel, size: int, timeout: float, role=None):
        role = role or partner_of(kernel, rank, ranks)  # role: (partner, initiator) of an all-pairs phase
        super().__init__(kernel, size, timeout, [role[0]] if role else [])
        self.pairs = kernel.pairs(ranks)
        self.active = role is not None
        self.peer, self.initiator = role if role else (-1, False)
        self.size = size
        self.send_buf = filled(size, _send_seed(rank))
        self.recv_buf = poisoned(size)
        self.send_view, self.recv_view = memoryview(self.send_buf), memoryview(self.recv_buf)
        if self.active:
            self.sock = links[self.peer]
            self.fd = self.sock.fileno()
            self.received = self.recv_buf

    def use_c_loop(self, module: ModuleType) -> None:
        self.loop, self.method = module, "c loop"

    def expected(self):
        return pattern(len(self.received), _send_seed(self.peer))


class PingPong(_PointToPoint):
    """osu_latency: one sample is a round trip (reported halved)."""

    def _run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        if self.loop:
            self.loop.pingpong(self.fd, self.send_view, self.recv_view, iterations, times, self.initiator)
            return
        send, sendall, recv_into = self.sock.send, self.sock.sendall, self.sock.recv_into
        send_view, recv_view, size, clock = self.send_view, self.recv_view, self.size, time.perf_counter_ns
        if self.initiator:
            last = clock()
            for i in range(iterations):
                sent = send(send_view)
                if sent != size:
                    sendall(send_view[sent:])
                got = recv_into(recv_view)
                if got != size:
                    finish_recv(recv_into, recv_view, got)
                now = clock()
                times[i] = now - last
                last = now
        else:
            for _ in range(iterations):
                got = recv_into(recv_view)
                if got != size:
                    finish_recv(recv_into, recv_view, got)
                sent = send(send_view)
                if sent != size:
                    sendall(send_view[sent:])


class Window(_PointToPoint):
    """osu_bw / osu_mbw_mr (W messages, then a 1-byte ack) and osu_bibw (W each way, no ack)."""

    def __init__(self, links, rank, ranks, kernel, size, timeout, window: int, role=None):
        super().__init__(links, rank, ranks, kernel, size, timeout, role)
        self.window = window
        self.both_ways = kernel.directions == 2
        self.window_holds_transit = not self.both_ways  # the peer's next window may land before our stamp
        self.ack = memoryview(filled(1, 0))
        self.ack_in = memoryview(poisoned(1))
        if self.active and self.initiator and not self.both_ways:
            self.received = nothing()  # a one-way sender receives only the ack
        if self.active and self.both_ways:
            self.duplex = Duplex(self.sock, self.sock, timeout)

    def _run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        clock = time.perf_counter_ns
        if self.both_ways:
            transfer, send_view, recv_view, window = self.duplex.transfer, self.send_view, self.recv_view, self.window
            last = clock()
            for i in range(iterations):
                transfer(send_view, recv_view, window)
                now = clock()
                times[i] = now - last
                last = now
            return
        if self.loop:
            self.loop.window(
                self.fd, self.send_view, self.recv_view, self.ack, self.ack_in,
                iterations, self.window, times, self.initiator,
            )  # fmt: skip
            return
        sendall, recv_into = self.sock.sendall, self.sock.recv_into
        window, ack, ack_in = range(self.window), self.ack, self.ack_in
        if self.initiator:
            send_view = self.send_view
            last = clock()
            for i in range(iterations):
                for _ in window:
                    sendall(send_view)
                if not recv_into(ack_in, 1):
                    raise EOFError
                now = clock()
                times[i] = now - last
                last = now
            return
        recv_view, size = self.recv_view, self.size
        for _ in range(iterations):
            for _ in window:
                got = recv_into(recv_view, 0, WAITALL)
                if got != size:
                    finish_recv(recv_into, recv_view, got)
            sendall(ack)


class Shift(_TCPCase):
    """mpiGraph's step for the all-pairs kernels: send to ``dst`` while receiving from ``src``, every rank at once;
    with ``dst == src``, a bisection pair's exchange over one socket (the ack follows the window in its stream).

    bw: W messages out to dst while W come in from src (the duplex engine
    bibw uses), then a 1-byte ack back to src; a sample ends when dst's ack
    arrives. latency: one message each way round, then each is answered; a
    sample is the round trip to dst. Timed in Python.
    """

    def __init__(self, links: dict, rank: int, kernel: Kernel, size: int, timeout: float, window: int, dst, src):
        super().__init__(kernel, size, timeout, sorted({dst, src}))
        self.initiator = True
        self.rtt = kernel.sample == "rtt"
        self.window = 0 if self.rtt else window
        self.src = src
        self.send_view = memoryview(filled(size, _send_seed(rank)))
        self.recv_buf = poisoned(size)
        self.recv_view, self.reply_view = memoryview(self.recv_buf), memoryview(poisoned(size))
        self.received = self.recv_buf
        self.ack, self.ack_in = memoryview(filled(1, 0)), memoryview(poisoned(1))
        self.forward = Duplex(links[dst], links[src], timeout).transfer  # out to dst, in from src
        self.back = Duplex(links[src], links[dst], timeout).transfer  # answers: out to src, in from dst
        self.ack_to_src, self.ack_from_dst = links[src].sendall, links[dst].recv_into

    def expected(self):
        return pattern(len(self.received), _send_seed(self.src))

    def _run(self, iterations: int, times: memoryview) -> None:
        forward, back, clock = self.forward, self.back, time.perf_counter_ns
        send_view, recv_view, reply_view, window = self.send_view, self.recv_view, self.reply_view, self.window
        ack, ack_in, ack_to_src, ack_from_dst = self.ack, self.ack_in, self.ack_to_src, self.ack_from_dst
        last = clock()
        for i in range(iterations):
            if self.rtt:
                forward(send_view, recv_view)
                back(recv_view, reply_view)
            else:
                forward(send_view, recv_view, window)
                ack_to_src(ack)
                if not ack_from_dst(ack_in, 1, WAITALL):
                    raise EOFError
            now = clock()
            times[i] = now - last
            last = now


def _bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.view(np.uint8))


class _Ring(_TCPCase):
    """A collective over the ring links, on the buffers its spec gives this rank.

    One sample is one operation; an untimed barrier follows each, as in OSU.
    A subclass sets ``operation``, a function of no arguments with its buffers bound.
    """

    operation: Callable[[], None]

    def __init__(self, ctrl, links: dict, kernel: Kernel, size: int, timeout: float):
        rank, ranks = ctrl.rank, ctrl.size
        right, left = (rank + 1) % ranks, (rank - 1) % ranks
        super().__init__(kernel, size, timeout, sorted({left, right}))
        self.initiator = True
        self.barrier = ctrl.barrier
        self.right, self.left = links[right], links[left]
        self.bufs = kernel.collective_spec.buffers(size, ranks, rank)
        self.received = self.bufs.received

    def expected(self):
        return self.bufs.expected()

    def _run(self, iterations: int, times: memoryview) -> None:
        operation, barrier, clock = self.operation, self.barrier, time.perf_counter_ns
        for i in range(iterations):
            start = clock()
            operation()
            times[i] = clock() - start
            barrier()

    def _ring_pass(self, own_dst: np.ndarray, steps: list[tuple]) -> Callable[[], None]:
        """Copy this rank's own block into place, then each step sends one block right while receiving one
        from the left; ``steps`` holds (send view, receive view, np.add's arguments or None)."""
        transfer = Duplex(self.right, self.left, self.timeout).transfer
        copyto, add, own = np.copyto, np.add, self.bufs.send

        def operation() -> None:
            copyto(own_dst, own)
            for send_view, recv_view, reduce in steps:
                transfer(send_view, recv_view)
                if reduce:
                    add(*reduce)

        return operation


class RingAllgather(_Ring):
    def __init__(self, ctrl, links, kernel, size, timeout):
        super().__init__(ctrl, links, kernel, size, timeout)
        rank, ranks, recv = ctrl.rank, ctrl.size, self.bufs.recv
        blocks = [recv[b * size : (b + 1) * size] for b in range(ranks)]
        steps = []
        for step in range(ranks - 1):
            out, into = (rank - step) % ranks, (rank - step - 1) % ranks
            steps.append((_bytes(blocks[out]), _bytes(blocks[into]), None))
        self.operation = self._ring_pass(blocks[rank], steps)


class RingAllreduce(_Ring):
    """Ring reduce-scatter then ring allgather over N chunks of the float32 vector."""

    def __init__(self, ctrl, links, kernel, size, timeout):
        super().__init__(ctrl, links, kernel, size, timeout)
        rank, ranks, result = ctrl.rank, ctrl.size, self.bufs.recv
        count = self.bufs.count
        edges = [c * count // ranks for c in range(ranks + 1)]
        chunks = [result[edges[c] : edges[c + 1]] for c in range(ranks)]
        incoming = aligned(max(len(c) for c in chunks) * 4, "f4")
        incoming[:] = 0
        steps = []
        for step in range(ranks - 1):
            out, into = chunks[(rank - step) % ranks], chunks[(rank - step - 1) % ranks]
            landing = incoming[: len(into)]
            steps.append((_bytes(out), _bytes(landing), (into, landing, into)))
        for step in range(ranks - 1):
            out, into = chunks[(rank + 1 - step) % ranks], chunks[(rank - step) % ranks]
            steps.append((_bytes(out), _bytes(into), None))
        self.operation = self._ring_pass(result, steps)


class ChainReduce(_Ring):
    """Reduce to the root as a chain along the ring, the links a TCP run has.

    Rank ROOT + 1 sends its float32 vector right; each next rank receives the
    partial sum from its left, adds its own in place and sends it right; the
    root, right of the last rank, receives into its result and adds its own.
    """

    def __init__(self, ctrl, links, kernel, size, timeout):
        super().__init__(ctrl, links, kernel, size, timeout)
        own = self.bufs.send
        if ctrl.rank == (ROOT + 1) % ctrl.size:
            self.operation = partial(self.right.sendall, _bytes(own))
            return
        at_root = ctrl.rank == ROOT
        partial_sum = self.bufs.recv if at_root else poisoned(own.nbytes, "f4")
        view, nbytes, add = _bytes(partial_sum), own.nbytes, np.add
        recv_into, forward = self.left.recv_into, None if at_root else self.right.sendall

        def operation() -> None:
            got = recv_into(view, 0, WAITALL)
            if got != nbytes:
                finish_recv(recv_into, view, got)
            add(partial_sum, own, partial_sum)
            if forward:
                forward(view)

        self.operation = operation


# The collectives tcp runs, and the class that runs each.
COLLECTIVE_CASES = {"allreduce": RingAllreduce, "allgather": RingAllgather, "reduce": ChainReduce}


class TCPOptions(OptionGroup):
    """tcp's own: where its data connections bind, and (carried in its HELLO section) the --loop choice."""

    name = "tcp"
    includes = (LOOP,)
    handshake_version = 1  # 1: the loop choice

    def add_arguments(self, parser, role: str) -> None:
        group = parser.add_argument_group("tcp transport")
        group.add_argument("--tcp-address", help="address to bind and advertise for data connections (default: all)")
        group.add_argument("--tcp-interface", help="bind to this interface's IPv4 address instead, e.g. eth0")
        group.add_argument(
            "--tcp-port", type=port_number, help="listening port for data; rank r uses PORT+r (default: any free)"
        )
        if role == "run":  # the former name of --loop; serve takes the client's choice
            group.add_argument(
                "--tcp-loop", dest="loop", choices=list(LOOP.CHOICES), default=argparse.SUPPRESS, help="same as --loop"
            )

    def parse(self, args, role: str) -> dict:
        given = {"address": args.tcp_address, "interface": args.tcp_interface, "port": args.tcp_port}
        if role == "serve" and args.address != ANY and not args.tcp_interface:
            given["address"] = given["address"] or args.address  # data goes where clients already reach us
        return {key: value for key, value in given.items() if value is not None}

    def preflight(self, settings: dict, ranks: int) -> None:
        """The port range and the address or interface, before any rank starts."""
        port = settings.get("port")
        if port and port + ranks - 1 > 65535:
            raise UsageError(
                f"--tcp-port {port}: rank r listens on {port}+r, so rank {ranks - 1} would need {port + ranks - 1}; "
                f"give a port of at most {65536 - ranks}"
            )
        check_local_address(settings)

    def preflight_local(self, settings: dict, ranks: int) -> None:
        """Every rank's --tcp-port free on this host, the host of all of them."""
        check_ports_free(settings, ranks)

    def encode_handshake(self, settings: dict) -> bytes:
        return Fields().u8(LOOP.code(settings)).payload()

    def decode_handshake(self, reader: FieldReader, settings: dict) -> dict:
        loop = LOOP.chosen(reader.u8())
        if loop is None:
            raise ProtocolError("bad tcp loop setting")
        # Whether this host can build the C loop for --loop c is the session's to find (open_c_loop), not the
        # handshake's: a compile would stall serve's other handshakes.
        return settings | loop


TCP_OPTIONS = TCPOptions()


class TCPTransport(Transport):
    name = "tcp"
    kernels = frozenset(
        {"latency", "bw", "bibw", "msgrate", "allreduce", "allgather", "reduce", "pairs-latency", "pairs-bw"}
        | {"bisection", "congestion"}  # all-to-all and incast congestors (tcp_congestion)
    )
    default_kernels = ("latency", "bw", "allreduce")
    option_groups = (TCP_OPTIONS,)

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """``--loop c``: build (or find) the C loop now, so a missing compiler is one line before any rank starts."""
        if TCP_OPTIONS.of(settings).get("loop") == "c":
            try:
                load_c_loop()
            except CLoopUnavailable as exc:
                raise UsageError(f"--loop c: {exc}") from None

    @classmethod
    def doctor(cls) -> Diagnosis:
        try:
            cloop = load_c_loop()
            loop = f"c loop, built with {cloop.compiler} ({cloop.path})"
        except CLoopUnavailable as exc:
            loop = f"python loop only: {exc}"
        return Diagnosis(True, details={"timed loop": loop})

    def __init__(self, ctrl, plan):
        self.ctrl = ctrl
        self.timeout = plan.timeout
        self.window = plan.window
        options = TCP_OPTIONS.of(plan.transport_options)
        # "auto" (the default) takes the C loops where every rank has them.
        self.cloop, self.why = open_c_loop(ctrl, options.get("loop", "auto"))
        # The all-pairs and congestion kernels need a link to every rank; the others, a partner and ring neighbours.
        everyone = any(s.transport == self.name and s.kernel_def.pairing is Pairing.MESH for s in plan.steps)
        self.links, self.bind = open_links(ctrl, options, plan.run_id, plan.timeout, everyone)
        self.link_rates = link_rates(self.links)  # {peer: (MB/s or None, what reported it, whether it is a bound)}

    def case(self, kernel: Kernel, size: int) -> Case:
        ctrl = self.ctrl
        if kernel.collective:
            return COLLECTIVE_CASES[kernel.name](ctrl, self.links, kernel, size, self.timeout)
        if size == 0:
            raise Unsupported("a TCP byte stream carries no zero-byte messages")
        if kernel.windowed:
            case = Window(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout, self.window)
            case.link_MBps, case.link_label, case.link_bound = self.link_rates.get(case.peer, NO_RATE)
        else:
            case = PingPong(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout)
        if self.cloop and not case.both_ways:  # bibw's duplex loop stays in Python
            case.use_c_loop(self.cloop.module)
        return case

    def pair_case(self, kernel: Kernel, size: int, send_to: int | None, recv_from: int | None) -> Case | None:
        """One phase of an all-pairs kernel: latency's or bw's loop (C where it is built) over the link to the
        phase's peer, or mpiGraph's send-and-receive step when this rank is both a source and a destination."""
        if size == 0:
            raise Unsupported("a TCP byte stream carries no zero-byte messages")
        ctrl = self.ctrl
        if send_to is not None and recv_from is not None:
            shift = Shift(self.links, ctrl.rank, kernel, size, self.timeout, self.window, send_to, recv_from)
            shift.link_MBps, shift.link_label, shift.link_bound = self.link_rates.get(send_to, NO_RATE)  # its way
            return shift
        if send_to is None and recv_from is None:
            return None
        role = (send_to, True) if send_to is not None else (recv_from, False)
        if kernel.windowed:
            case = Window(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout, self.window, role)
        else:
            case = PingPong(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout, role)
        if send_to is not None:  # the source's samples time the link its bytes leave by
            case.link_MBps, case.link_label, case.link_bound = self.link_rates.get(send_to, NO_RATE)
        if self.cloop:
            case.use_c_loop(self.cloop.module)
        return case

    def congestion_case(self, role: Role) -> Case:
        """A congestion phase's part of this rank over the links to every rank (``tcp_congestion``), in the C loop
        where it is built, else in Python; no traffic here, so nothing collective."""
        # here: only a congestion run needs its loops
        from fabricbench.transports.tcp import congestion as tcp_congestion

        loop = self.cloop.module if self.cloop else None
        return tcp_congestion.case(self.links, role, self.timeout, loop)

    def congestion_unsupported(self, pattern: str) -> str | None:
        from fabricbench.transports.tcp import congestion as tcp_congestion

        return tcp_congestion.UNSUPPORTED.get(pattern)

    def metadata(self) -> dict:
        sock = next(iter(self.links.values()), None)
        meta = {"tcp_bind_address": self.bind or ANY, "tcp_nodelay": True, "tcp_c_loop": self.cloop is not None}
        if self.cloop:
            meta |= {
                "timed_loop": "c loop",
                "c_loop_compiler": self.cloop.compiler,
                "c_loop_compiler_version": self.cloop.compiler_version,
                "c_loop_library": self.cloop.path,
            }
        else:
            meta |= {"timed_loop": "python loop", "c_loop_unavailable": self.why}
        if sock:
            meta["tcp_so_sndbuf"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            meta["tcp_so_rcvbuf"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        return meta

    def close(self) -> None:
        for sock in self.links.values():
            sock.close()
        self.links = {}

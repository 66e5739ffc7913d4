"""Transport ``tcp``: the kernels over plain TCP sockets, the baseline every fabric is compared with.

The ranks meet through the control plane (MPI under a launcher, the
rendezvous connection under ``serve``/``run --peer``): each rank that expects
connections listens, the listening addresses are gathered and broadcast, then
the lower rank of every needed pair connects and names itself with a LINK
message. From then on the data path is sockets only.

Sockets have TCP_NODELAY and kernel-side timeouts (SO_RCVTIMEO/SO_SNDTIMEO)
instead of Python's, so one send or receive is one system call and a dead
peer still ends the run. The loops call plain ``send`` and ``recv_into`` on
preallocated, written buffers (measured a little faster than ``sendall`` or
MSG_WAITALL for small messages) and finish a partial transfer off the fast
path, with MSG_WAITALL.

The latency, bw and msgrate loops run in C (``_tcploop``, the same system
calls with the GIL released) when the extension was built: the interpreter's
cost per message is not the network's, and a TCP baseline must not carry it.
The C streaming window calls send/recv with MSG_DONTWAIT and waits in poll()
between them, as iperf3 does (measured a few per cent faster at 256 KiB than
blocking calls), within the same socket timeouts.
``--tcp-loop python`` times the same pattern in Python instead, for a
like-for-like look beside mpi4py; the row's ``method`` says which loop ran.

- latency: ping-pong between rank 0 and rank N/2 (osu_latency).
- bw, msgrate: W messages, then a 1-byte ack (osu_bw, osu_mbw_mr over pairs r, r + N/2).
- bibw: both ways at once, W messages each (osu_bibw).
- allreduce: ring reduce-scatter then ring allgather, float32 sums in numpy.
- allgather: ring allgather.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import struct
import time

import numpy as np

from fabricbench.buffers import aligned, filled, pattern, poisoned
from fabricbench.collectives import collective_buffers
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.kernels import Kernel, peer_of
from fabricbench.rendezvous import LINK, FieldReader, Fields, accept, connect, listen, recv_message, send_message
from fabricbench.transports.base import EMPTY, Case, Transport

try:
    from fabricbench import _tcploop
except ImportError:  # installed without a C compiler: the Python loops time everything
    _tcploop = None

WAITALL = socket.MSG_WAITALL
DONTWAIT = socket.MSG_DONTWAIT
READABLE = select.POLLIN | select.POLLERR | select.POLLHUP
WRITABLE = select.POLLOUT | select.POLLERR | select.POLLHUP
SIOCGIFADDR = 0x8915
ANY = "0.0.0.0"


def interface_address(name: str) -> str:
    """The IPv4 address of a network interface, as ``ip addr`` shows it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            raw = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise UsageError(f"--tcp-interface {name!r}: no IPv4 address ({exc.strerror})") from None
    return socket.inet_ntoa(raw[20:24])


def _net_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0


def _needed_peers(rank: int, ranks: int) -> set[int]:
    """The ranks this rank exchanges data with: its pair partner and its ring neighbours."""
    half = ranks // 2
    peers = {(rank + 1) % ranks, (rank - 1) % ranks}
    if rank < half:
        peers.add(rank + half)
    elif rank < 2 * half:
        peers.add(rank - half)
    peers.discard(rank)
    return peers


def _data_socket(sock: socket.socket, timeout: float) -> socket.socket:
    """Blocking in Python, bounded in the kernel: no poll() before every call."""
    sock.settimeout(None)
    seconds = int(timeout)
    limit = struct.pack("ll", seconds, int((timeout - seconds) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _address_table(ctrl, entry: dict) -> list[dict]:
    """Every rank's entry, on every rank, over the control plane (no data path yet)."""
    gathered = ctrl.gather_json(entry)
    table = json.loads(ctrl.bcast_bytes(json.dumps(gathered).encode() if ctrl.rank == 0 else None))
    if not isinstance(table, list) or len(table) != ctrl.size or not all(isinstance(e, dict) for e in table):
        raise PeerError("tcp: the address table from rank 0 is malformed")
    return table


def _reach(me: dict, other: dict, rank: int) -> tuple[str, int]:
    """Where to connect to reach ``other``'s listener from here."""
    port = other.get("port")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise PeerError(f"tcp: rank {rank} sent a bad port {port!r}")
    for key in ("address", "fallback"):
        if other.get(key) is not None and not isinstance(other[key], str):
            raise PeerError(f"tcp: rank {rank} sent a bad {key} {other[key]!r}")
    if other.get("address"):
        return other["address"], port
    if (other.get("host"), other.get("netns")) == (me["host"], me["netns"]):
        return "127.0.0.1", port
    if other.get("fallback"):
        return other["fallback"], port
    raise PeerError(
        f"tcp: no address to reach rank {rank} on {other.get('host')!r}; give --tcp-address or --tcp-interface"
    )


def open_links(ctrl, options: dict, token: str, timeout: float) -> tuple[dict[int, socket.socket], str | None]:
    """Connect this rank to the ranks it needs: {peer rank: socket}, and the bound address.

    The lower rank of each pair connects, the higher accepts. Connections
    complete in the listener's backlog before anyone accepts, so the order
    cannot deadlock.
    """
    rank, ranks = ctrl.rank, ctrl.size
    bind = options.get("address") or (interface_address(options["interface"]) if options.get("interface") else None)
    bind = None if bind == ANY else bind
    peers = _needed_peers(rank, ranks)
    incoming = sorted(p for p in peers if p < rank)
    listener = None
    if incoming:
        port = options.get("port")
        listener = listen(bind or ANY, port + rank if port else 0, backlog=len(incoming) + 4)
    try:
        fallback = getattr(ctrl, "local_address", None)
        if fallback is None:
            try:
                fallback = socket.gethostbyname(socket.gethostname())
            except OSError:
                fallback = None
        entry = {
            "host": socket.gethostname(),
            "netns": _net_namespace(),
            "address": bind,
            "fallback": fallback,
            "port": listener.getsockname()[1] if listener else 0,
        }
        table = _address_table(ctrl, entry)
        links: dict[int, socket.socket] = {}
        for peer in sorted(p for p in peers if p > rank):
            host, port = _reach(entry, table[peer], peer)
            sock = connect(host, port, timeout, source=bind)
            send_message(sock, LINK, Fields().text(token).u32(rank).payload())
            links[peer] = sock
        for _ in incoming:
            sock, where = accept(listener, timeout, f"tcp connections from ranks {incoming}")
            sock.settimeout(timeout)
            reader = FieldReader(recv_message(sock, LINK), f"LINK message from {where}")
            their_token, peer = reader.text(), reader.u32()
            reader.end()
            if their_token != token or peer not in incoming or peer in links:
                sock.close()
                raise PeerError(f"tcp: unexpected connection from {where} (rank {peer}, run {their_token!r})")
            links[peer] = sock
    finally:
        if listener:
            listener.close()
    return {peer: _data_socket(sock, timeout) for peer, sock in links.items()}, bind


def _finish_recv(recv_into, view: memoryview, got: int) -> None:
    """The slow path: the rest of a message that arrived in pieces (or a closed peer)."""
    size = len(view)
    while got < size:
        n = recv_into(view[got:], 0, WAITALL)
        if not n:
            raise EOFError
        got += n


class _Duplex:
    """Sends to one socket while receiving from another (or the same), so two senders never block each other.

    It sends eagerly until the kernel would block, then polls both ways. Once
    one direction is done it blocks on the other: if our receive is complete
    the peer has finished sending and is draining us, and the other way round.
    """

    def __init__(self, out_sock: socket.socket, in_sock: socket.socket, timeout: float):
        self.send, self.sendall, self.recv_into = out_sock.send, out_sock.sendall, in_sock.recv_into
        self.out_fd, self.in_fd = out_sock.fileno(), in_sock.fileno()
        self.poller = select.poll()
        if self.out_fd == self.in_fd:
            self.poller.register(self.out_fd, READABLE | WRITABLE)
        else:
            self.poller.register(self.out_fd, WRITABLE)
            self.poller.register(self.in_fd, READABLE)
        self.timeout_ms = int(timeout * 1000)

    def transfer(self, send_view: memoryview, recv_view: memoryview, repeat: int = 1) -> None:
        """Send ``send_view`` ``repeat`` times while receiving ``repeat`` messages into ``recv_view``."""
        send, recv_into = self.send, self.recv_into
        out_size, in_size = len(send_view), len(recv_view)
        out_end, in_end = out_size * repeat, in_size * repeat
        sent = got = 0
        try:
            while sent < out_end:
                offset = sent % out_size
                sent += send(send_view[offset:] if offset else send_view, DONTWAIT)
        except BlockingIOError:
            pass
        out_fd, in_fd, poll, timeout_ms = self.out_fd, self.in_fd, self.poller.poll, self.timeout_ms
        while sent < out_end and got < in_end:
            events = poll(timeout_ms)
            if not events:
                raise BlockingIOError
            for fd, event in events:
                if fd == out_fd and event & WRITABLE and sent < out_end:
                    offset = sent % out_size
                    try:  # noqa: SIM105 - suppress() would cost a context manager per call here
                        sent += send(send_view[offset:] if offset else send_view, DONTWAIT)
                    except BlockingIOError:
                        pass
                if fd == in_fd and event & READABLE and got < in_end:
                    offset = got % in_size
                    try:
                        n = recv_into(recv_view[offset:] if offset else recv_view, 0, DONTWAIT)
                    except BlockingIOError:
                        continue
                    if not n:
                        raise EOFError
                    got += n
        while sent < out_end:
            offset = sent % out_size
            self.sendall(send_view[offset:] if offset else send_view)
            sent += out_size - offset
        while got < in_end:
            offset = got % in_size
            n = recv_into(recv_view[offset:] if offset else recv_view, 0, WAITALL)
            if not n:
                raise EOFError
            got += n


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


def c_loop_built() -> bool:
    return _tcploop is not None


class _PointToPoint(_TCPCase):
    """This rank's partner, role and written buffers; ranks outside the pattern sit out."""

    loop = None  # the C loops (_tcploop) when they time this case, else None
    both_ways = False

    def __init__(self, links: dict, rank: int, ranks: int, kernel: Kernel, size: int, timeout: float):
        role = peer_of(kernel, rank, ranks)
        super().__init__(kernel, size, timeout, [role[0]] if role else [])
        self.pairs = ranks // 2 if kernel.pattern == "pairs" else 1
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

    def use_c_loop(self) -> None:
        self.loop, self.method = _tcploop, "c loop"

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
                    _finish_recv(recv_into, recv_view, got)
                now = clock()
                times[i] = now - last
                last = now
        else:
            for _ in range(iterations):
                got = recv_into(recv_view)
                if got != size:
                    _finish_recv(recv_into, recv_view, got)
                sent = send(send_view)
                if sent != size:
                    sendall(send_view[sent:])


class Window(_PointToPoint):
    """osu_bw / osu_mbw_mr (W messages, then a 1-byte ack) and osu_bibw (W each way, no ack)."""

    def __init__(self, links, rank, ranks, kernel, size, timeout, window: int):
        super().__init__(links, rank, ranks, kernel, size, timeout)
        self.window = window
        self.both_ways = kernel.directions == 2
        self.ack = memoryview(filled(1, 0))
        self.ack_in = memoryview(poisoned(1))
        if self.active and self.initiator and not self.both_ways:
            self.received = EMPTY  # a one-way sender receives only the ack
        if self.active and self.both_ways:
            self.duplex = _Duplex(self.sock, self.sock, timeout)

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
                    _finish_recv(recv_into, recv_view, got)
            sendall(ack)


def _bytes(array: np.ndarray) -> memoryview:
    return memoryview(array.view(np.uint8))


class _Ring(_TCPCase):
    """A ring collective: each step sends one block right while receiving one from the left.

    One sample is one operation; an untimed barrier follows each, as in OSU.
    """

    def __init__(self, ctrl, links: dict, kernel: Kernel, size: int, timeout: float):
        rank, ranks = ctrl.rank, ctrl.size
        right, left = (rank + 1) % ranks, (rank - 1) % ranks
        super().__init__(kernel, size, timeout, sorted({left, right}))
        self.initiator = True
        self.barrier = ctrl.barrier
        self.duplex = _Duplex(links[right], links[left], timeout)
        self.bufs = collective_buffers(kernel.name, size, ranks, rank)
        self.received = self.bufs.received
        self.steps: list[tuple] = []  # (send view, receive view, reduction arguments or None)

    def expected(self):
        return self.bufs.expected()

    def _run(self, iterations: int, times: memoryview) -> None:
        transfer, steps, barrier, clock = self.duplex.transfer, self.steps, self.barrier, time.perf_counter_ns
        copyto, own, own_dst, add = np.copyto, self.bufs.send, self.own_dst, np.add
        for i in range(iterations):
            start = clock()
            copyto(own_dst, own)
            for send_view, recv_view, reduce in steps:
                transfer(send_view, recv_view)
                if reduce:
                    add(*reduce)
            times[i] = clock() - start
            barrier()


class RingAllgather(_Ring):
    def __init__(self, ctrl, links, kernel, size, timeout):
        super().__init__(ctrl, links, kernel, size, timeout)
        rank, ranks, recv = ctrl.rank, ctrl.size, self.bufs.recv
        blocks = [recv[b * size : (b + 1) * size] for b in range(ranks)]
        self.own_dst = blocks[rank]
        for step in range(ranks - 1):
            out, into = (rank - step) % ranks, (rank - step - 1) % ranks
            self.steps.append((_bytes(blocks[out]), _bytes(blocks[into]), None))


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
        self.own_dst = result
        for step in range(ranks - 1):
            out, into = chunks[(rank - step) % ranks], chunks[(rank - step - 1) % ranks]
            landing = incoming[: len(into)]
            self.steps.append((_bytes(out), _bytes(landing), (into, landing, into)))
        for step in range(ranks - 1):
            out, into = chunks[(rank + 1 - step) % ranks], chunks[(rank - step) % ranks]
            self.steps.append((_bytes(out), _bytes(into), None))


class TCPTransport(Transport):
    name = "tcp"
    kernels = frozenset({"latency", "bw", "bibw", "msgrate", "allreduce", "allgather"})

    def __init__(self, ctrl, plan):
        self.ctrl = ctrl
        self.timeout = plan.timeout
        self.window = plan.window
        options = plan.transport_options.get("tcp", {})
        # "auto" (the default) takes the C loops where this rank's install has them.
        if options.get("loop") == "c" and not c_loop_built():  # rank 0 checked its own install, not this one
            raise UsageError(f"--tcp-loop c: the install on {socket.gethostname()} has no C loop")
        self.c_loop = options.get("loop", "auto") != "python" and c_loop_built()
        self.links, self.bind = open_links(ctrl, options, plan.run_id, plan.timeout)

    def case(self, kernel: Kernel, size: int) -> Case:
        ctrl = self.ctrl
        if kernel.collective:
            ring = RingAllreduce if kernel.name == "allreduce" else RingAllgather
            return ring(ctrl, self.links, kernel, size, self.timeout)
        if size == 0:
            raise Unsupported("a TCP byte stream carries no zero-byte messages")
        if kernel.windowed:
            case = Window(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout, self.window)
        else:
            case = PingPong(self.links, ctrl.rank, ctrl.size, kernel, size, self.timeout)
        if self.c_loop and not case.both_ways:  # bibw's duplex loop stays in Python
            case.use_c_loop()
        return case

    def metadata(self) -> dict:
        sock = next(iter(self.links.values()), None)
        meta = {"tcp_bind_address": self.bind or ANY, "tcp_nodelay": True, "tcp_c_loop": self.c_loop}
        if sock:
            meta["tcp_so_sndbuf"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            meta["tcp_so_rcvbuf"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        return meta

    def close(self) -> None:
        for sock in self.links.values():
            sock.close()
        self.links = {}

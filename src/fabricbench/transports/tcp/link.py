"""The tcp transport's links: address discovery, one TCP connection per needed pair of ranks, and a duplex engine.

The ranks meet through the control plane (MPI under a launcher, the
rendezvous connection under ``serve``/``run --peer``): each rank that expects
connections listens, the listening addresses are gathered and broadcast, then
the lower rank of every needed pair connects and names itself with a LINK
message. From then on the data path is sockets only.

Sockets have TCP_NODELAY and kernel-side timeouts (SO_RCVTIMEO/SO_SNDTIMEO)
instead of Python's, so one send or receive is one system call and a dead
peer still ends the run. The timed loops live in ``tcp.py``.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import select
import shutil
import socket
import struct
import subprocess
from pathlib import Path

from fabricbench.argtypes import host_name
from fabricbench.control import allgather_json
from fabricbench.control.rendezvous import (
    LINK,
    FieldReader,
    Fields,
    accept,
    connect,
    listen,
    recv_message,
    send_message,
)
from fabricbench.errors import PeerError, UsageError
from fabricbench.transports.link_payload import tcp_over_ethernet_MBps, tcp_through_shaper_MBps

WAITALL = socket.MSG_WAITALL
DONTWAIT = socket.MSG_DONTWAIT
READABLE = select.POLLIN | select.POLLERR | select.POLLHUP
WRITABLE = select.POLLOUT | select.POLLERR | select.POLLHUP
SIOCGIFADDR = 0x8915
ANY = "0.0.0.0"
NET_CLASS = "/sys/class/net"
PROC_ROUTE = "/proc/net/route"
RTF_UP = 0x1
# Paravirtual NICs report the speed their hypervisor was given, not what a wire carries: two guests on one host
# pass it by far. Their rate is not trusted.
PARAVIRTUAL_DRIVERS = frozenset({"virtio_net", "vmxnet3", "hv_netvsc", "vif"})
# (MB/s of TCP payload, what reported it, whether a figure above it is impossible): a link whose rate is unknown
NO_RATE: tuple[float | None, str, bool] = (None, "", True)
TCPI_OPT_TIMESTAMPS = 1  # tcp_info's tcpi_options (its sixth byte): the timestamp option was negotiated


def interface_address(name: str) -> str:
    """The IPv4 address of a network interface, as ``ip addr`` shows it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            raw = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError as exc:
            raise UsageError(f"--tcp-interface {name!r}: no IPv4 address ({exc.strerror})") from None
    return socket.inet_ntoa(raw[20:24])


def check_local_address(options: dict) -> None:
    """Before any rank starts: --tcp-interface exists, and --tcp-address is one of this host's (a bind on port 0)."""
    if options.get("interface") is not None:
        interface_address(options["interface"])
    address = options.get("address")
    if address is None or address == ANY:
        return
    host_name("--tcp-address")(address)
    try:
        listen(address, 0).close()
    except UsageError as exc:
        raise UsageError(f"--tcp-address {address} is not an address of this host: {exc}") from None


def check_ports_free(options: dict, ranks: int) -> None:
    """With --tcp-port P and every rank on this host: the ports of the ranks that listen can be listened on.

    Every rank but 0 listens (each has its lower ring neighbour to accept, see _needed_peers), rank r on
    P + r, bound as open_links binds. A port found in use here is one line, before any rank starts.
    """
    port = options.get("port")
    if not port:
        return
    bind = options.get("address") or (interface_address(options["interface"]) if options.get("interface") else None)
    for rank in range(1, ranks):
        try:
            listen(bind or ANY, port + rank, backlog=1).close()
        except UsageError as exc:  # "cannot listen on ADDRESS:PORT: address already in use"
            raise UsageError(
                f"--tcp-port {port}: rank {rank} listens on {port}+{rank}, and {exc}; "
                "give another --tcp-port, or none (any free port)"
            ) from None


def nic_rate_Mbps(interface: str, net_class: str | Path = NET_CLASS) -> int | None:
    """The Mb/s a real NIC's driver reports in sysfs; None for a virtual interface (lo, veth, bridge, bond, tun: no
    ``device`` behind it), a paravirtual one, or a speed the driver does not know (-1)."""
    base = Path(net_class) / interface
    device, driver = base / "device", base / "device" / "driver"
    if not device.exists() or (driver.exists() and driver.resolve().name in PARAVIRTUAL_DRIVERS):
        return None
    try:
        mbits = int((base / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return mbits if mbits > 0 else None


def shaper(qdiscs: list[dict]) -> tuple[float, int] | None:
    """(bytes/s, per-frame overhead) of the token-bucket shaper at the root of an interface's egress, from
    ``tc -j qdisc show``'s list; None without one. Only a root tbf shapes every flow: an htb's classes shape the
    flows its filters pick, which a rank cannot tell apart from here."""
    for qdisc in qdiscs:
        options = qdisc.get("options") or {}
        if qdisc.get("root") and qdisc.get("kind") == "tbf" and options.get("rate"):
            return float(options["rate"]), int(options.get("overhead", 0))
    return None


def shaper_on(interface: str) -> tuple[float, int] | None:
    """shaper() of INTERFACE in this network namespace, as ``tc`` reads it; None where tc is not installed."""
    tc = shutil.which("tc")
    if tc is None:
        return None
    try:
        asked = [tc, "-j", "qdisc", "show", "dev", interface]
        shown = subprocess.run(asked, capture_output=True, text=True, timeout=10)
        return shaper(json.loads(shown.stdout)) if shown.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, AttributeError, TypeError):  # tc hung, or said nonsense
        return None


def rate_text(bits_per_s: float) -> str:
    """``10 Gb/s``, ``100 Mb/s``: how a label says a rate."""
    return f"{bits_per_s / 1e9:g} Gb/s" if bits_per_s >= 1e9 else f"{bits_per_s / 1e6:g} Mb/s"


def payload_rate(
    name: str, mbits: int | None, shaped: tuple[float, int] | None, mss: int, timestamps: bool
) -> tuple[float | None, str, bool]:
    """The TCP payload one direction of interface NAME carries (link_payload's formulas), what reported it, and
    whether a figure above it is impossible: the NIC's (``mbits``, its MAC rate) or, where it is lower, the root
    shaper's (``shaped``: bytes/s and per-frame overhead). A shaper's rate is not a bound: its bucket lets its burst
    through at the line's rate, so a short sample can read above it."""
    nic = tcp_over_ethernet_MBps(mbits, mss, timestamps=timestamps) if mbits else None
    if shaped is not None:
        rate_Bps, overhead = shaped
        limit = tcp_through_shaper_MBps(rate_Bps, mss, overhead=overhead, timestamps=timestamps)
        if nic is None or limit < nic:
            return limit, f"{name} tbf {rate_text(rate_Bps * 8)}", False
    return (nic, f"{name} {rate_text(mbits * 1e6)}", True) if nic else NO_RATE


def route_interface(address: str, routes: str) -> str | None:
    """The interface the main IPv4 routing table (``routes``: /proc/net/route's text) sends ADDRESS through: the
    longest prefix that holds it, then the lowest metric."""
    target = struct.unpack("=I", socket.inet_aton(address))[0]  # the table's words are addresses in memory order
    best, chosen = None, None
    for line in routes.splitlines()[1:]:
        fields = line.split()
        try:
            name, destination, flags, metric, mask = fields[0], *(int(fields[i], 16) for i in (1, 3, 6, 7))
        except (IndexError, ValueError):
            continue
        if flags & RTF_UP and target & mask == destination:
            rank = (mask.bit_count(), -metric)
            if best is None or rank > best:
                best, chosen = rank, name
    return chosen


def _is_local(address: str) -> bool:
    """Whether ADDRESS is one of this host's (in this network namespace): a bind to it succeeds."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def _interface_with(address: str) -> str | None:
    """The interface whose (primary) IPv4 address is ADDRESS."""
    for _, name in socket.if_nameindex():
        try:
            if interface_address(name) == address:
                return name
        except UsageError:  # no IPv4 address
            continue
    return None


def link_rate(
    sock: socket.socket, net_class: str | Path = NET_CLASS, proc_route: str = PROC_ROUTE, shaped=shaper_on
) -> tuple[float | None, str, bool]:
    """payload_rate() for the interface a connected socket's bytes leave through, or NO_RATE.

    Only a real NIC's reported speed, or a shaper on the interface, is used, and only when the bytes surely cross
    it: the peer is not on this host (the kernel loops those bytes back whatever address they carry), the
    interface holding our address is the one the routing table sends them through, and sysfs shows that
    interface (same index) and not one of another network namespace's.
    """
    try:
        local, peer = sock.getsockname()[0], sock.getpeername()[0]
        routes = Path(proc_route).read_text()
        if sock.family != socket.AF_INET or _is_local(peer):
            return NO_RATE
        name = _interface_with(local)
        if name is None or route_interface(peer, routes) != name:
            return NO_RATE
        if int((Path(net_class) / name / "ifindex").read_text()) != socket.if_nametoindex(name):
            return NO_RATE
        mss = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        shaper = shaped(name)
    except (OSError, ValueError):
        return NO_RATE
    timestamps = bool(info[5] & TCPI_OPT_TIMESTAMPS)
    return payload_rate(name, nic_rate_Mbps(name, net_class), shaper, mss, timestamps)


def link_rates(links: dict[int, socket.socket]) -> dict[int, tuple[float | None, str, bool]]:
    """link_rate for each peer's link, ``tc`` asked once per interface: an all-pairs rank's links to every other
    rank mostly leave by one."""
    shaped = functools.cache(shaper_on)  # for this run's links only: a serve process outlives a shaper
    return {peer: link_rate(sock, shaped=shaped) for peer, sock in links.items()}


def _net_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0


def _needed_peers(rank: int, ranks: int, everyone: bool = False) -> set[int]:
    """The ranks this rank exchanges data with: its pair partner and its ring neighbours (``everyone``: all ranks,
    for the all-pairs kernels)."""
    if everyone:
        return set(range(ranks)) - {rank}
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


def open_links(
    ctrl, options: dict, token: str, timeout: float, everyone: bool = False
) -> tuple[dict[int, socket.socket], str | None]:
    """Connect this rank to the ranks it needs: {peer rank: socket}, and the bound address.

    The lower rank of each pair connects, the higher accepts. Connections
    complete in the listener's backlog before anyone accepts, so the order
    cannot deadlock.
    """
    rank, ranks = ctrl.rank, ctrl.size
    bind = options.get("address") or (interface_address(options["interface"]) if options.get("interface") else None)
    bind = None if bind == ANY else bind
    peers = _needed_peers(rank, ranks, everyone)
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
        table = allgather_json(ctrl, entry, "tcp address table")
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


def finish_recv(recv_into, view: memoryview, got: int) -> None:
    """The slow path: the rest of a message that arrived in pieces (or a closed peer)."""
    size = len(view)
    while got < size:
        n = recv_into(view[got:], 0, WAITALL)
        if not n:
            raise EOFError
        got += n


class Duplex:
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

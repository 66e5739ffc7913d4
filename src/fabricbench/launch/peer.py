"""Two hosts without MPI: ``fabricbench serve`` on one, ``fabricbench run --peer HOST:PORT`` on the other.

As with perftest or sockperf, the client (rank 0) connects to the server
(rank 1) and sends a HELLO: the plan as JSON, size-bounded, then each
transport's own fields. The server checks the plan as ``run`` does
(``Plan.from_json``), then what a two-rank run without MPI can take, then the
plan against its own caps, then sends
a CHALLENGE (a fresh nonce); the client answers with a PROOF (the HMAC of the
nonce and its HELLO under the shared token, when it has one), and the server
answers ACCEPT or an ERROR in words. The same connection then carries the
control plane (``ConnectionControl``), so the runner, the transports and the
reporter work exactly as under mpiexec; the client writes the results.

The server is one process that never waits on any one client: it reads every
handshake as its bytes arrive, under a deadline for the whole handshake, and
runs one session at a time in a forked child, so whatever happens in a session
(a dead client, a watchdog exit) ends that child only. A client that arrives
during a session is told whom the server is serving; a child that outlives its
session's budget is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import select
import selectors
import signal
import socket
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace

from fabricbench import __version__
from fabricbench.argtypes import TOKEN_VAR, masked_command_line
from fabricbench.control.connection import RANKS, ConnectionControl
from fabricbench.control.rendezvous import (
    ACCEPT,
    CHALLENGE,
    HELLO,
    PROOF,
    VERSION,
    FieldReader,
    Fields,
    Inbox,
    ProtocolError,
    Refused,
    connect,
    host_port,
    listen,
    recv_message,
    refuse,
    send_message,
)
from fabricbench.errors import FabricbenchError, PeerError, UsageError
from fabricbench.launch.orchestrate import execute_plan
from fabricbench.measure.kernels import Kernel
from fabricbench.measure.plan import NO_FORMAT, AllPairsOptions, OsuColumns, Plan, Step
from fabricbench.run.patterns import pattern_of
from fabricbench.run.runner import EXPECTED_SLACK
from fabricbench.terminal import LINE, printable
from fabricbench.transports import TRANSPORTS, handshake_sections, transport_class
from fabricbench.transports.capabilities import SelfTimed

MAX_STEPS = 64
MAX_SIZES = 64
# The plan's JSON in a HELLO: room for MAX_STEPS steps of every size run sweeps, far below a message's limit.
MAX_PLAN_BYTES = 32 * 1024
MAX_SECTIONS = 16  # transports' own field sections in one HELLO
HUGEPAGES = {None: 0, "on": 1, "off": 2}
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def default_transport() -> str:
    """What ``run --peer`` measures when told no transport: the first registered one that needs no launcher."""
    return next(name for name in TRANSPORTS if not transport_class(name).needs_launcher)


def mpi_free(plan: Plan) -> None:
    """A peer run has no launcher: refuse the transports that need one."""
    for step in plan.steps:
        if transport_class(step.transport).needs_launcher:
            free = ", ".join(name for name in TRANSPORTS if not transport_class(name).needs_launcher)
            raise UsageError(
                f"transport {step.transport!r} needs MPI and a launcher; --peer runs without MPI (transports "
                f"that need none: {free})"
            )


def wire_steps(plan: Plan) -> list[Step]:
    """The steps a HELLO carries: the plan's schedule written out, so the server runs a --repeat plan's
    interleaved order as a plain plan (it writes no rows, so it needs no repeat index)."""
    return [entry.step for entry in plan.schedule()]


def check_wire_steps(plan: Plan) -> None:
    """Refuse, before connecting, a schedule longer than a server takes (UsageError)."""
    count = len(wire_steps(plan))
    if count > MAX_STEPS:
        raise UsageError(
            f"a --peer run takes at most {MAX_STEPS} steps (transport x kernel x --repeat); this has {count}"
        )


def wire_plan(plan: Plan) -> Plan:
    """The plan as a HELLO carries it: its schedule written out, and none of what is rank 0's own (its folder,
    label, console, OSU columns, verdict settings) or its host's (the transports' options: the server has its
    own, and each transport's section carries what the client chooses for both sides)."""
    pairs = AllPairsOptions(plan.pairs.schedule, plan.pairs.per_node)
    return replace(
        plan,
        steps=wire_steps(plan),
        repeat=1,
        ranks=[],
        out_dir="",
        label="",
        output_format=NO_FORMAT,
        osu=OsuColumns(),
        pairs=pairs,
        progress=False,
        transport_options={},
    )


def _handshake_owners(plan: Plan) -> dict:
    """{option group name: group} for the groups of the plan's transports that add fields to the HELLO, in step
    order."""
    return handshake_sections(step.transport for step in plan.steps)


def encode_hello(plan: Plan, hugepages: str | None) -> bytes:
    """The HELLO payload: our version, the hugepages setting, the plan as JSON (wire_plan), then each
    transport's own section, struct-packed; UsageError for a plan over MAX_PLAN_BYTES.

    A section is (options key, that transport's field version, its fields), so a transport's new option
    bumps its own version, not the protocol's.
    """
    data = wire_plan(plan).to_json()
    if len(data) > MAX_PLAN_BYTES:
        raise UsageError(
            f"a --peer run's plan is at most {MAX_PLAN_BYTES} B as JSON; this one is {len(data)} B "
            "(fewer kernels, sizes or repeats)"
        )
    fields = Fields().text(__version__).u8(HUGEPAGES[hugepages]).blob(data)
    owners = _handshake_owners(plan)
    fields.u16(len(owners))
    for key, cls in owners.items():
        section = cls.encode_handshake(plan.transport_options.get(key, {}))
        fields.text(key).u16(cls.handshake_version).blob(section)
    return fields.payload()


def _refuse_unless(ok: bool, message: str) -> None:
    if not ok:
        raise ProtocolError(message)


def decode_hello(payload: bytes, transport_options: dict) -> tuple[Plan, str | None, str]:
    """Check the HELLO; returns (plan, hugepages, client version) or raises ProtocolError.

    The plan is checked as run checks its own (``Plan.from_json``), then for what a two-rank run without MPI
    can take. ``transport_options`` are the server's own (addresses, devices): they describe this host, so
    they never come from the client, except what a transport's own section lets the client choose
    for both sides of its run (each transport's decode_handshake checks its fields).
    """
    reader = FieldReader(payload, "HELLO message")
    client_version, hugepages = reader.text(64), reader.u8()
    _refuse_unless(hugepages in HUGEPAGES.values(), f"bad hugepages setting {hugepages}")
    try:
        plan = Plan.from_json(reader.blob(MAX_PLAN_BYTES))
    except UsageError as exc:
        raise ProtocolError(str(exc)) from None
    _check_peer_plan(plan)
    transport_options = _decode_sections(reader, _handshake_owners(plan), transport_options)
    reader.end()
    plan = replace(wire_plan(plan), transport_options=transport_options)  # nothing of the client's host or console
    hugepages_name = {code: name for name, code in HUGEPAGES.items()}[hugepages]
    return plan, hugepages_name, client_version


def _check_peer_plan(plan: Plan) -> None:
    """What a HELLO's plan must be beyond a valid plan: a run id fit for a log line, its schedule written out,
    one pair of ranks, and a bounded count of steps and sizes, each a kernel its transport has, without MPI."""
    _refuse_unless(_RUN_ID.match(plan.run_id) is not None, f"bad run id {plan.run_id!r}")
    _refuse_unless(1 <= len(plan.steps) <= MAX_STEPS, f"{len(plan.steps)} steps; 1 to {MAX_STEPS} are allowed")
    _refuse_unless(
        plan.repeat == 1 and not plan.ranks, "a HELLO carries its schedule written out: no --repeat and no --ranks"
    )
    _refuse_unless(
        plan.pairs.schedule == AllPairsOptions.schedule and not plan.pairs.per_node,
        "a peer run has two ranks, one pair: no --schedule shift and no --per-node",
    )
    for step in plan.steps:
        transport, kernel = step.transport, step.kernel_def
        _refuse_unless(transport in TRANSPORTS, f"unknown transport {transport!r}")
        _refuse_unless(
            not transport_class(transport).needs_launcher, f"transport {transport!r} needs MPI; a peer run has none"
        )
        _refuse_unless(1 <= len(step.sizes) <= MAX_SIZES, f"{len(step.sizes)} sizes; 1 to {MAX_SIZES} are allowed")
        try:
            kernel.check_ranks(RANKS)
        except UsageError as exc:
            raise ProtocolError(str(exc)) from None
        _refuse_unless(kernel.name in transport_class(transport).kernels, f"{transport} has no {kernel.name} kernel")


def _decode_sections(reader: FieldReader, owners: dict, transport_options: dict) -> dict:
    """The transports' own sections: exactly one per transport in the plan that has fields, each of its version."""
    count = reader.u16()
    _refuse_unless(count <= MAX_SECTIONS, f"{count} transport sections; at most {MAX_SECTIONS} are allowed")
    seen = set()
    merged = dict(transport_options)
    for _ in range(count):
        key, version, section = reader.text(64), reader.u16(), reader.blob()
        _refuse_unless(key in owners and key not in seen, f"unexpected transport section {key!r}")
        seen.add(key)
        cls = owners[key]
        _refuse_unless(
            version == cls.handshake_version,
            f"the client's {key} fields are version {version}; this server speaks {key} version "
            f"{cls.handshake_version}: run the same fabricbench version on both sides",
        )
        fields = FieldReader(section, f"{key} section of the HELLO message")
        merged[key] = cls.decode_handshake(fields, merged.get(key, {}))
        fields.end()
    missing = sorted(set(owners) - seen)
    _refuse_unless(not missing, f"no transport section for {', '.join(missing)}")
    return merged


MiB = 1 << 20
NONCE_BYTES = 32
MAX_PROOF = 64  # an HMAC-SHA256 is 32 bytes
MAX_PENDING = 32  # handshakes in progress at once; a newer client evicts the oldest (_Server._make_room)
MAX_PENDING_PER_ADDRESS = 4  # of them from one source address, so one stranger cannot hold every slot
# Connections the kernel queues for serve (it caps this at net.core.somaxconn): a flood of strangers from many
# addresses fills a short queue, and a client whose SYN is dropped waits for its retransmits, 1, 3, 7, 15 s on.
ACCEPT_BACKLOG = 4096
# Connections taken per look at the listener before the handshakes are read again: under a flood that reopens
# each connection evicted, every accept evicts one, so a burst below half the slots never evicts a newcomer whose
# PROOF is already on its way.
ACCEPT_BURST = MAX_PENDING // 2
REAP_POLL_S = 0.2  # how often serve looks whether its session child has ended, or its client has left
EVICTED = "busy: evicted:"  # how serve's refusal of an evicted handshake begins
EVICTED_TRIES = 5  # handshakes run --peer makes when serve evicts each one
EVICTED_PAUSE_S = 0.1  # before the next, times the tries so far
CLIENT_GONE_GRACE_S = 3.0  # after its client left, how long a session child has to end itself before it is killed
# A session's budget: the plan's length on a slow link (Kernel.slow_iteration_seconds), BUDGET_SLACK times over
# (as the runner's watchdog allows each size), plus the client's --timeout.
SLOW_SIZE_SETUP_S = 0.25  # barriers, buffers, validation and gathers around each size
BUDGET_SLACK = EXPECTED_SLACK


@dataclass(frozen=True)
class Caps:
    """What a client may ask of this server; ``serve --max-<field>`` sets each."""

    timeout: float  # the client's --timeout, seconds
    iterations: int
    warmup: int
    window: int
    bytes: int  # what one iteration's messages hold at one size (Kernel.message_bytes)
    session: float  # the session's budget, seconds (session_budget)


def _size_seconds(plan: Plan, kernel: Kernel, size: int, self_timed: bool) -> float:
    """One size of one step on a slow link, as the runner counts its iterations.

    With --max-time the runner times the pattern's warm-up (Pattern.probe), then
    max(1, min(iterations, max_time / the warm-up's time each)) iterations (runner.time_phase), in each of
    the pattern's phases on two ranks (Pattern.serve_phases). A reference tool (perftest) runs its count
    whatever --max-time says.
    """
    iterations, warmup = plan.counts(kernel, size)
    each = kernel.slow_iteration_seconds(size, RANKS, plan.window)
    pattern = pattern_of(kernel)
    phases = pattern.serve_phases(RANKS)
    probe = warmup if self_timed else pattern.probe(plan, warmup)
    timed = iterations * each
    if plan.max_time and probe and not self_timed:
        timed = min(timed, plan.max_time + each)  # at most max_time of iterations at the warm-up's pace, or one
    return SLOW_SIZE_SETUP_S + phases * ((probe + int(plan.validate)) * each + timed)


def session_budget(plan: Plan) -> float:
    """Seconds a session may take before serve kills it: the plan's length on a slow link, with slack, plus --timeout.

    A running session ends itself when it stalls (the runner's watchdog); this bounds one that cannot (a
    stopped child) and what any one client can take of the server. --max-time counts as the runner applies
    it (_size_seconds): a client that lies about its warm-up's pace to run longer is killed at the budget.
    """
    expected = 0.0
    for step in plan.steps:
        self_timed = issubclass(transport_class(step.transport), SelfTimed)
        for size in step.sizes:
            expected += _size_seconds(plan, step.kernel_def, size, self_timed)
    return plan.timeout + BUDGET_SLACK * expected


def _over(what: str, cap: str, option: str) -> ProtocolError:
    return ProtocolError(f"{what} over this server's cap of {cap} (serve --max-{option})")


def admit(plan: Plan, caps: Caps) -> float:
    """Refuse a plan that asks for more than this server's caps; returns its session budget in seconds."""
    if plan.timeout > caps.timeout:
        raise _over(f"timeout {plan.timeout:g} s is", f"{caps.timeout:g} s", "timeout")
    counts = [plan.counts(step.kernel_def, size) for step in plan.steps for size in step.sizes]
    iterations, warmup = max(c[0] for c in counts), max(c[1] for c in counts)
    if iterations > caps.iterations:
        raise _over(f"{iterations} iterations is", str(caps.iterations), "iterations")
    if warmup > caps.warmup:
        raise _over(f"a warm-up of {warmup} iterations is", str(caps.warmup), "warmup")
    if plan.window > caps.window:
        raise _over(f"window {plan.window} is", str(caps.window), "window")
    footprint, kernel, size = max(
        (step.kernel_def.message_bytes(size, RANKS, plan.window), step.kernel, size)
        for step in plan.steps
        for size in step.sizes
    )
    if footprint > caps.bytes:
        what = f"{kernel} at {size} B with window {plan.window} needs {footprint / MiB:g} MiB per rank,"
        raise _over(what, f"{caps.bytes / MiB:g} MiB", "bytes")
    budget = session_budget(plan)
    if budget > caps.session:
        what = f"this plan's budget of {budget:.0f} s (its length on a slow link, with slack, plus --timeout) is"
        raise _over(what, f"{caps.session:.0f} s", "session")
    return budget


def token_from(given: str | None) -> bytes | None:
    """The shared secret: ``--token``, else $FABRICBENCH_TOKEN, else None (no token); an empty one is refused."""
    source, value = ("--token", given) if given is not None else (TOKEN_VAR, os.environ.get(TOKEN_VAR))
    if value is None:
        return None
    if not value:
        raise UsageError(f"{source} is empty: give the shared secret, or leave it unset for no token")
    return value.encode()


def token_proof(token: bytes, nonce: bytes, hello: bytes) -> bytes:
    """HMAC-SHA256 of the server's nonce and our HELLO under the token: proves the secret without sending it."""
    return hmac.new(token, nonce + hello, hashlib.sha256).digest()


def client_handshake(sock: socket.socket, hello: bytes, token: bytes | None) -> tuple[str, str]:
    """The client's half: HELLO, the server's CHALLENGE, our PROOF, its ACCEPT; returns (server version, host)."""
    send_message(sock, HELLO, hello)
    reader = FieldReader(recv_message(sock, CHALLENGE), "CHALLENGE message")
    nonce = reader.blob(NONCE_BYTES)
    reader.end()
    if len(nonce) != NONCE_BYTES:
        raise ProtocolError(f"malformed CHALLENGE message: a nonce of {len(nonce)} B")
    send_message(sock, PROOF, Fields().blob(token_proof(token, nonce, hello) if token else b"").payload())
    reader = FieldReader(recv_message(sock, ACCEPT), "ACCEPT message")
    server_version, server_host = reader.text(64), reader.text(256)
    reader.end()
    return server_version, server_host


def _open_session(plan: Plan, where: tuple[str, int], hugepages: str | None, token: bytes | None):
    """Connect and shake hands; returns (socket, server version, server host) or raises PeerError in one line.

    A handshake that serve evicted for a newer one (strangers hold every slot, and ours was the oldest that had
    sent nothing yet, as when this process was not scheduled for a moment after connecting) is tried again, up
    to EVICTED_TRIES times in all. Each outcome is one line: the error, which counts the evictions before it,
    or, once admitted after an eviction, one notice.
    """
    host, port = where
    server = host_port(host, port)
    hello = encode_hello(plan, hugepages)  # before connecting: the HELLO follows the connect at once
    tries = 1
    while True:
        evicted = f" (after serve evicted {tries - 1} of our handshakes for newer ones)" if tries > 1 else ""
        sock = connect(host, port, plan.timeout)
        try:
            accepted = (sock, *client_handshake(sock, hello, token))
        except Refused as exc:
            sock.close()
            if not exc.reason.startswith(EVICTED) or tries == EVICTED_TRIES:
                raise PeerError(f"fabricbench serve at {server} refused the run: {exc.reason}{evicted}") from None
        except FabricbenchError as exc:
            sock.close()
            raise PeerError(f"handshake with {server} failed: {exc}{evicted}") from None
        else:
            if evicted:
                print(
                    f"fabricbench: notice: serve at {server} evicted our handshake for a newer one "
                    f"{tries - 1} time(s); admitted at try {tries} of {EVICTED_TRIES}",
                    file=sys.stderr,
                    flush=True,
                )
            return accepted
        tries += 1
        time.sleep(EVICTED_PAUSE_S * tries)


def run_client(plan: Plan, peer: tuple[str, int], hugepages: str | None, token: bytes | None = None) -> int:
    """Rank 0 of a peer run against ``peer`` (host, port): handshake, then the ordinary runner over
    ConnectionControl."""
    from pathlib import Path

    from fabricbench.measure.results import prepare_out_dir

    host, port = peer
    mpi_free(plan)
    check_wire_steps(plan)
    out = Path(plan.out_dir).absolute()
    made = [folder for folder in (out, *out.parents) if not folder.exists()]  # deepest first
    prepare_out_dir(plan.out_dir)
    try:
        sock, server_version, server_host = _open_session(plan, (host, port), hugepages, token)
    except PeerError:
        for folder in made:  # a refused run leaves no empty results folder, nor the results/ root it made
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    ctrl = ConnectionControl(sock, 0, plan.timeout)
    metadata = {
        "mode": "peer",
        "peer": host_port(host, port),
        "peer_host": server_host,
        "peer_fabricbench_version": server_version,
        "control_plane": f"fabricbench rendezvous protocol {VERSION} over TCP",
        "token": token is not None,
        "command_line": masked_command_line(sys.argv),
    }
    try:
        return execute_plan(plan, ctrl, None, hugepages, metadata)
    finally:
        ctrl.close()


def _log(line: str) -> None:
    print(f"fabricbench serve: {printable(line, LINE)}", file=sys.stderr, flush=True)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops serve as Ctrl-C does: its session child is ended too


def serve(
    address: str, port: int, transport_options: dict, handshake_timeout: float, caps: Caps, token: bytes | None
) -> int:
    """Serve clients, one session at a time, until interrupted; a bad or unlucky client costs one log line.

    ``transport_options`` are this host's settings per transport, as Plan.transport_options.
    """
    if not address.strip():
        raise UsageError("--address is empty: give 127.0.0.1 (this host only), an interface's address or 0.0.0.0")
    server = _Server(listen(address, port, ACCEPT_BACKLOG), transport_options, handshake_timeout, caps, token)
    bound = server.listener.getsockname()
    if token:
        exposure = "a token is required"
    elif ipaddress.ip_address(bound[0]).is_loopback:
        exposure = "this host only, no token"
    else:
        exposure = "no token: anyone who reaches this port may run sessions within the caps"
    previous = signal.signal(signal.SIGTERM, _interrupt)
    listening = host_port(address, bound[1])
    _log(f"listening on {listening} (protocol {VERSION}; {exposure}); one session at a time, Ctrl-C stops")
    try:
        server.run()
    except KeyboardInterrupt:
        _log("stopped")
        return 0
    finally:
        server.close()
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Handshake:
    """A client between connect and ACCEPT: what it sent so far, and when its time is up."""

    sock: socket.socket
    client: str
    address: str  # its source address, without the port: what the per-address bound counts
    started: float
    deadline: float
    inbox: Inbox
    hello: bytes = b""
    plan: Plan | None = None
    hugepages: str | None = None
    client_version: str = ""
    budget: float = 0.0
    nonce: bytes = b""


@dataclass
class _Session:
    """The session child: who it serves, since when, for how long at most.

    ``sock`` is serve's own copy of the client's connection, never read or written (the child owns the
    stream): serve only looks whether the client has closed it, and closes it once the child is reaped.
    """

    pid: int
    client: str
    run_id: str
    started: float
    budget: float
    sock: socket.socket
    killed: bool = False
    client_left: float | None = None  # when serve first saw the client's end of the connection


# What poll reports once the other side has closed or reset a connection, whatever is still unread in it.
_CLOSED = getattr(select, "POLLRDHUP", 0) | select.POLLHUP | select.POLLERR


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the other side of a connection has closed (FIN) or reset it; reads nothing, waits for nothing."""
    poller = select.poll()
    poller.register(sock, _CLOSED)
    return any(events & _CLOSED for _, events in poller.poll(0))


def _close_after_reply(sock: socket.socket) -> None:
    """Close without a reset: read away what the client sent and we did not, so our last message reaches it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        for _ in range(16):
            if not sock.recv(65536):
                break
    sock.close()


class _Server:
    """serve's one process: a listener, every handshake in progress and at most one session child, in one loop."""

    def __init__(self, listener, transport_options: dict, handshake_timeout: float, caps: Caps, token: bytes | None):
        self.listener = listener
        self.transport_options = transport_options
        self.handshake_timeout = handshake_timeout
        self.caps = caps
        self.token = token
        self.pending: dict[int, _Handshake] = {}
        self.session: _Session | None = None
        listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ)

    def run(self) -> None:
        while True:
            # The handshakes first, the listener last: what a client sent is read before a newer connection
            # may evict it.
            for key, _ in sorted(self.selector.select(self._wait()), key=lambda event: event[0].data is None):
                if key.data is None:
                    self._accept()
                elif self.pending.get(key.data.sock.fileno()) is key.data:  # not evicted by an accept just now
                    self._advance(key.data)
            now = time.monotonic()
            for late in [hs for hs in self.pending.values() if hs.deadline <= now]:
                self._drop(late, f"no complete handshake within {self.handshake_timeout:g} s", tell=True)
            self._watch_session(now)

    def _wait(self) -> float | None:
        """Seconds until the next deadline or look at the session child (None: nothing to wait for)."""
        now = time.monotonic()
        deadlines = [hs.deadline - now for hs in self.pending.values()]
        if self.session:
            deadlines.append(REAP_POLL_S)
        return max(0.0, min(deadlines)) if deadlines else None

    def _accept(self) -> None:
        """Take the connections queued, until EAGAIN or ACCEPT_BURST of them; the loop comes back at once for
        the rest, after reading the handshakes."""
        for _ in range(ACCEPT_BURST):
            try:
                sock, addr = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                _log(f"cannot accept a connection: {exc.strerror or exc}; still serving")
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            now = time.monotonic()
            hs = _Handshake(sock, host_port(addr[0], addr[1]), addr[0], now, now + self.handshake_timeout, Inbox(sock))
            self._make_room(hs.address)
            self.pending[sock.fileno()] = hs
            self.selector.register(sock, selectors.EVENT_READ, hs)
            # A client sends its HELLO as soon as it is connected: answer what is already here, so that it is past
            # its HELLO, and evicted last, before the next connection in the queue asks for room.
            self._advance(hs)

    def _make_room(self, address: str) -> None:
        """Before a handshake from ``address`` joins: evict the oldest one that stands in its way.

        At most MAX_PENDING_PER_ADDRESS from one address and MAX_PENDING in all. The one evicted is the
        oldest that has sent no HELLO yet (a silent or dripping stranger) before any that has, from ``address``
        when that address is at its bound, else from the address that holds the most; so a stranger holding
        every slot costs a newcomer nothing, and one holding its address's few costs others nothing.
        """
        if not self._full(address):
            return
        for hs in [hs for hs in self.pending.values() if hs.plan is None]:
            # What came since the last look: a client whose HELLO is in is evicted last, one that left frees room.
            if self.pending.get(hs.sock.fileno()) is hs:
                self._advance(hs)
        same = [hs for hs in self.pending.values() if hs.address == address]
        if len(same) >= MAX_PENDING_PER_ADDRESS:
            victim = min(same, key=lambda hs: (hs.plan is not None, hs.started))
            why = f"{MAX_PENDING_PER_ADDRESS} handshakes from {address} at once, and a newer one came"
        elif len(self.pending) >= MAX_PENDING:
            held = Counter(hs.address for hs in self.pending.values())
            victim = min(self.pending.values(), key=lambda hs: (hs.plan is not None, -held[hs.address], hs.started))
            why = f"{MAX_PENDING} handshakes at once, and a newer client came"
        else:
            return
        self._drop(victim, f"{EVICTED} {why}; try again later", tell=True)

    def _full(self, address: str) -> bool:
        """Whether a handshake from ``address`` finds no room: its address at its bound, or every slot taken."""
        same = sum(hs.address == address for hs in self.pending.values())
        return same >= MAX_PENDING_PER_ADDRESS or len(self.pending) >= MAX_PENDING

    def _advance(self, hs: _Handshake) -> None:
        """Read what the client sent; answer once its HELLO or its PROOF is complete."""
        try:
            if hs.plan is None:
                self._on_hello(hs)
            else:
                self._on_proof(hs)
        except ProtocolError as exc:
            self._drop(hs, str(exc), tell=True)
        except (FabricbenchError, OSError) as exc:
            self._drop(hs, str(exc) if isinstance(exc, FabricbenchError) else (exc.strerror or str(exc)))
        except Exception as exc:  # noqa: BLE001 - no client may end the server, not even through a bug here
            self._drop(hs, f"internal error: {type(exc).__name__}: {exc}")

    def _on_hello(self, hs: _Handshake) -> None:
        payload = hs.inbox.read(HELLO)
        if payload is None:
            return
        plan, hugepages, client_version = decode_hello(payload, self.transport_options)
        hs.budget = admit(plan, self.caps)
        hs.hello, hs.plan, hs.hugepages, hs.client_version = payload, plan, hugepages, client_version
        hs.nonce = secrets.token_bytes(NONCE_BYTES)
        send_message(hs.sock, CHALLENGE, Fields().blob(hs.nonce).payload())

    def _on_proof(self, hs: _Handshake) -> None:
        payload = hs.inbox.read(PROOF, MAX_PROOF + 4)
        if payload is None:
            return
        reader = FieldReader(payload, "PROOF message")
        proof = reader.blob(MAX_PROOF)
        reader.end()
        if self.token and not proof:
            raise ProtocolError(f"this server needs a token: give run --token, or {TOKEN_VAR}, the same as serve's")
        if self.token and not hmac.compare_digest(proof, token_proof(self.token, hs.nonce, hs.hello)):
            raise ProtocolError("wrong token")
        self._watch_session(time.monotonic())
        if self.session:
            s = self.session
            since = time.monotonic() - s.started
            raise ProtocolError(
                f"busy: serving {s.client} since {since:.0f} s (run {s.run_id}, budget about {s.budget:.0f} s); "
                "try again later"
            )
        send_message(hs.sock, ACCEPT, Fields().text(__version__).text(socket.gethostname()).payload())
        self._forget(hs)
        pid = self._fork(hs)
        with contextlib.suppress(OSError):  # the child did it too; whichever runs first, the other is a no-op
            os.setpgid(pid, pid)
        plan = hs.plan
        self.session = _Session(pid, hs.client, plan.run_id, time.monotonic(), hs.budget, hs.sock)
        kernels = ", ".join(f"{s.transport} {s.kernel}" for s in plan.steps)
        _log(
            f"{hs.client}: running {kernels} for fabricbench {printable(hs.client_version, 64)} "
            f"(run {plan.run_id}, pid {pid}, budget {hs.budget:.0f} s)"
        )

    def _fork(self, hs: _Handshake) -> int:
        """Run the session as rank 1 in a child process; returns its pid."""
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            os.setpgid(0, 0)  # its own process group: serve ends it with whatever it started (perftest's tools)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._close_sockets()  # the child keeps only its client's connection
            plan = hs.plan
            code = execute_plan(plan, ConnectionControl(hs.sock, 1, plan.timeout), None, hs.hugepages)
        except FabricbenchError as exc:
            print(f"fabricbench: error: rank 1: {printable(exc, LINE)}", file=sys.stderr)
            code = exc.exit_code
        except KeyboardInterrupt:
            code = 130
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the serve loop
            print(
                f"fabricbench: error: rank 1: internal error: {type(exc).__name__}: {printable(exc)}", file=sys.stderr
            )
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def _watch_session(self, now: float) -> None:
        """Reap the session child once it ended; kill it once it outlived its budget, or its client (stopped or
        not): a client that closed its connection, or whose host reset it, ends its session within
        CLIENT_GONE_GRACE_S, which a running child takes to see the end itself and exit."""
        s = self.session
        if s is None:
            return
        pid, status = os.waitpid(s.pid, os.WNOHANG)
        if pid:
            self.session = None
            s.sock.close()  # the last copy: the client sees the connection end
            code = os.waitstatus_to_exitcode(status)
            if s.killed:
                return
            _log(
                f"{s.client}: session done"
                if code == 0
                else f"{s.client}: session ended with exit code {code}; still serving"
            )
            return
        if s.killed:
            return
        if now - s.started > s.budget:
            self._kill_session(f"outlived its budget of {s.budget:.0f} s")
        elif s.client_left is None:
            if _peer_closed(s.sock):
                s.client_left = now
        elif now - s.client_left > CLIENT_GONE_GRACE_S:
            self._kill_session(f"outlived its client, which closed the connection {now - s.client_left:.0f} s ago")

    def _kill_session(self, why: str) -> None:
        """SIGKILL the session child's process group (a stopped child too); it is reaped on the next look."""
        s = self.session
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(s.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(s.pid, signal.SIGKILL)  # should its own group not have been made yet
        s.killed = True
        _log(f"{s.client}: session (run {s.run_id}, pid {s.pid}) {why}; killed it; still serving")

    def _forget(self, hs: _Handshake) -> None:
        if self.pending.pop(hs.sock.fileno(), None) is hs:
            self.selector.unregister(hs.sock)

    def _drop(self, hs: _Handshake, reason: str, tell: bool = False) -> None:
        """End a handshake: tell the client why (``tell``), close, and log one line."""
        self._forget(hs)
        if tell:
            refuse(hs.sock, reason)
        _close_after_reply(hs.sock)
        _log(f"{hs.client}: {'refused: ' if tell else ''}{reason}; still serving")

    def _close_sockets(self) -> None:
        for hs in self.pending.values():
            hs.sock.close()
        self.pending.clear()
        self.selector.close()
        self.listener.close()

    def close(self) -> None:
        """Stop: the session child is killed and reaped, every socket closed."""
        if self.session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.session.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.session.pid, signal.SIGKILL)
            os.waitpid(self.session.pid, 0)
            self.session.sock.close()
            self.session = None
        self._close_sockets()

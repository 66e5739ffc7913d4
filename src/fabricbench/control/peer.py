"""Two hosts without MPI: ``fabricbench serve`` on one, ``fabricbench run --peer HOST:PORT`` on the other.

As with perftest or sockperf, the client (rank 0) connects to the server
(rank 1) and sends a HELLO: the plan's fields in a versioned binary message.
The server checks every field and answers ACCEPT or an ERROR in words. The
same connection then carries the control plane (``PairControl``), so the
runner, the transports and the reporter work exactly as under mpiexec; the
client writes the results.

The server runs each session in a forked child, so whatever happens in a
session (a dead client, a watchdog exit) ends that child only, and the server
goes on to the next client.
"""

from __future__ import annotations

import math
import os
import re
import socket
import sys

from fabricbench import __version__
from fabricbench.control.pair import RANKS, PairControl
from fabricbench.control.rendezvous import (
    ACCEPT,
    HELLO,
    VERSION,
    FieldReader,
    Fields,
    ProtocolError,
    Refused,
    connect,
    listen,
    recv_message,
    refuse,
    send_message,
    serve_forever,
)
from fabricbench.errors import FabricbenchError, PeerError, UsageError
from fabricbench.kernels import get_kernel
from fabricbench.orchestrate import execute_plan
from fabricbench.plan import Plan, Step
from fabricbench.transports import TRANSPORTS, transport_class

MAX_STEPS = 64
MAX_SIZES = 64
MAX_COUNT = 10**9  # iterations or warm-up
MAX_WINDOW = 65536
MAX_SECONDS = 86400.0
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


def _handshake_owners(plan: Plan) -> dict:
    """{options key: transport class} for the plan's transports that add fields to the HELLO, in step order."""
    owners = {}
    for step in plan.steps:
        cls = transport_class(step.transport)
        if cls.handshake_version:
            owners.setdefault(cls.options_key, cls)
    return owners


def encode_hello(plan: Plan, hugepages: str | None) -> bytes:
    """The HELLO payload: the plan fields the server needs, then each transport's own section, struct-packed.

    A section is (options key, that transport's field version, its fields), so a transport's new option
    bumps its own version, not the protocol's.
    """
    fields = Fields().text(__version__).text(plan.run_id)
    fields.i64(-1 if plan.iterations is None else plan.iterations).i64(-1 if plan.warmup is None else plan.warmup)
    fields.u32(plan.window).f64(plan.max_time or 0.0).u8(int(plan.validate)).f64(plan.timeout)
    fields.u8(HUGEPAGES[hugepages]).u16(len(plan.steps))
    for step in plan.steps:
        fields.text(step.transport).text(step.kernel).u16(len(step.sizes))
        for size in step.sizes:
            fields.u64(size)
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
    """Check every HELLO field; returns (plan, hugepages, client version) or raises ProtocolError.

    ``transport_options`` are the server's own (addresses, devices): they describe this host, so
    they never come from the client, except what a transport's own section lets the client choose
    for both sides of its run (each transport's decode_handshake checks its fields).
    """
    reader = FieldReader(payload, "HELLO message")
    client_version, run_id = reader.text(64), reader.text(128)
    _refuse_unless(_RUN_ID.match(run_id) is not None, f"bad run id {run_id!r}")
    iterations, warmup, window = reader.i64(), reader.i64(), reader.u32()
    _refuse_unless(iterations == -1 or 1 <= iterations <= MAX_COUNT, f"iterations {iterations} out of range")
    _refuse_unless(warmup == -1 or 0 <= warmup <= MAX_COUNT, f"warm-up {warmup} out of range")
    _refuse_unless(1 <= window <= MAX_WINDOW, f"window {window} out of range 1..{MAX_WINDOW}")
    max_time, validate, timeout = reader.f64(), reader.u8(), reader.f64()
    _refuse_unless(max_time == 0 or (math.isfinite(max_time) and 0 < max_time <= MAX_SECONDS), "bad --max-time")
    _refuse_unless(validate in (0, 1), f"bad validate flag {validate}")
    _refuse_unless(math.isfinite(timeout) and 0 < timeout <= MAX_SECONDS, f"bad --timeout {timeout}")
    hugepages = reader.u8()
    _refuse_unless(hugepages in HUGEPAGES.values(), f"bad hugepages setting {hugepages}")
    step_count = reader.u16()
    _refuse_unless(1 <= step_count <= MAX_STEPS, f"{step_count} steps; 1 to {MAX_STEPS} are allowed")
    steps = []
    for _ in range(step_count):
        transport, kernel_name, size_count = reader.text(64), reader.text(64), reader.u16()
        _refuse_unless(transport in TRANSPORTS, f"unknown transport {transport!r}")
        _refuse_unless(
            not transport_class(transport).needs_launcher, f"transport {transport!r} needs MPI; a peer run has none"
        )
        _refuse_unless(1 <= size_count <= MAX_SIZES, f"{size_count} sizes; 1 to {MAX_SIZES} are allowed")
        sizes = [reader.u64() for _ in range(size_count)]
        try:
            kernel = get_kernel(kernel_name)
            kernel.check_ranks(RANKS)
        except UsageError as exc:
            raise ProtocolError(str(exc)) from None
        _refuse_unless(kernel.name in transport_class(transport).kernels, f"{transport} has no {kernel.name} kernel")
        for size in sizes:
            _refuse_unless(
                kernel.min_size <= size <= kernel.max_size,
                f"{kernel.name} size {size} B is outside {kernel.min_size}..{kernel.max_size} B",
            )
        steps.append(Step(transport, kernel.name, sizes))
    plan = Plan(steps=steps)
    transport_options = _decode_sections(reader, _handshake_owners(plan), transport_options)
    reader.end()
    plan = Plan(
        steps=steps,
        iterations=None if iterations == -1 else iterations,
        warmup=None if warmup == -1 else warmup,
        window=window,
        max_time=max_time or None,
        validate=bool(validate),
        timeout=timeout,
        run_id=run_id,
        output_format="none",
        transport_options=transport_options,
    )
    hugepages_name = {code: name for name, code in HUGEPAGES.items()}[hugepages]
    return plan, hugepages_name, client_version


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


def parse_peer(text: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) from the command line."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--peer must be HOST:PORT, got {text!r}")
    return host, int(port)


def run_client(plan: Plan, peer: str, hugepages: str | None) -> int:
    """Rank 0 of a peer run: handshake, then the ordinary runner over PairControl."""
    from fabricbench.results import prepare_out_dir

    host, port = parse_peer(peer)
    mpi_free(plan)
    prepare_out_dir(plan.out_dir)
    where = f"{host}:{port}"
    sock = connect(host, port, plan.timeout)
    try:
        send_message(sock, HELLO, encode_hello(plan, hugepages))
        reader = FieldReader(recv_message(sock, ACCEPT), "ACCEPT message")
        server_version, server_host = reader.text(64), reader.text(256)
        reader.end()
    except Refused as exc:
        sock.close()
        raise PeerError(f"fabricbench serve at {where} refused the run: {exc.reason}") from None
    except FabricbenchError as exc:
        sock.close()
        raise PeerError(f"handshake with {where} failed: {exc}") from None
    ctrl = PairControl(sock, 0, plan.timeout)
    metadata = {
        "mode": "peer",
        "peer": where,
        "peer_host": server_host,
        "peer_fabricbench_version": server_version,
        "control_plane": f"fabricbench rendezvous protocol {VERSION} over TCP",
    }
    try:
        return execute_plan(plan, ctrl, None, hugepages, metadata)
    finally:
        ctrl.close()


def _log(line: str) -> None:
    print(f"fabricbench serve: {line}", file=sys.stderr, flush=True)


def serve(address: str, port: int, timeout: float, transport_options: dict) -> int:
    """Serve clients one at a time until interrupted; a bad client costs one log line.

    ``transport_options`` are this host's settings per transport, as Plan.transport_options.
    """
    listener = listen(address, port)

    def session(sock: socket.socket, client: str) -> None:
        try:
            plan, hugepages, client_version = decode_hello(recv_message(sock, HELLO), transport_options)
        except ProtocolError as exc:
            refuse(sock, str(exc))
            raise PeerError(f"refused: {exc}") from None
        send_message(sock, ACCEPT, Fields().text(__version__).text(socket.gethostname()).payload())
        kernels = ", ".join(f"{s.transport} {s.kernel}" for s in plan.steps)
        _log(f"{client}: running {kernels} for fabricbench {client_version} (run {plan.run_id})")
        code = _run_forked(listener, sock, plan, hugepages)
        if code:
            raise PeerError(f"session ended with exit code {code}")
        _log(f"{client}: session done")

    where = f"{address}:{listener.getsockname()[1]}"
    _log(f"listening on {where} (protocol {VERSION}); one client at a time, Ctrl-C stops")
    try:
        serve_forever(listener, timeout, session, _log)
    except KeyboardInterrupt:
        _log("stopped")
        return 0
    finally:
        listener.close()


def _run_forked(listener: socket.socket, sock: socket.socket, plan: Plan, hugepages: str | None) -> int:
    """Run one session as rank 1 in a child process and return its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    code = 1
    try:
        listener.close()
        code = execute_plan(plan, PairControl(sock, 1, plan.timeout), None, hugepages)
    except FabricbenchError as exc:
        print(f"fabricbench: error: rank 1: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BaseException as exc:  # noqa: BLE001 - the child must never return into the serve loop
        print(f"fabricbench: error: rank 1: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

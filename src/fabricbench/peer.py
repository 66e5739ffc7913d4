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

import json
import math
import os
import re
import socket
import struct
import sys

import numpy as np

from fabricbench import __version__
from fabricbench.errors import FabricbenchError, PeerError, UsageError
from fabricbench.kernels import get_kernel
from fabricbench.plan import Plan, Step
from fabricbench.rendezvous import (
    ACCEPT,
    BARRIER,
    BYTES,
    HELLO,
    JSON,
    VALUE,
    VECTOR,
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
from fabricbench.transports import TRANSPORTS, supported_kernels, tcp

RANKS = 2
MAX_STEPS = 64
MAX_SIZES = 64
MAX_COUNT = 10**9  # iterations or warm-up
MAX_WINDOW = 65536
MAX_SECONDS = 86400.0
HUGEPAGES = {None: 0, "on": 1, "off": 2}
TCP_LOOPS = {"auto": 0, "c": 1, "python": 2}
_RUN_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_F64 = struct.Struct("!d")


class PairControl:
    """The control plane of a two-rank run over one rendezvous connection (MPIControl's interface).

    Rank 0 is the client, rank 1 the server. Every call sends a typed
    message and, where the result needs it, waits for the peer's; every wait
    times out.
    """

    size = RANKS

    def __init__(self, sock: socket.socket, rank: int, timeout: float):
        sock.settimeout(timeout)
        self.sock = sock
        self.rank = rank
        inet = sock.family in (socket.AF_INET, socket.AF_INET6)
        self.local_address = sock.getsockname()[0] if inet else None  # the address the other side reached us by

    def _exchange(self, kind: int, payload: bytes) -> bytes:
        send_message(self.sock, kind, payload)
        return recv_message(self.sock, kind)

    def barrier(self) -> None:
        if self._exchange(BARRIER, b""):
            raise ProtocolError("malformed BARRIER message: it carries a payload")

    def allreduce_max(self, value: float) -> float:
        other = FieldReader(self._exchange(VALUE, _F64.pack(value)), "VALUE message")
        theirs = other.f64()
        other.end()
        return max(value, theirs)

    def gather(self, values: np.ndarray) -> np.ndarray | None:
        """Rank 0 gets a (2, k) float64 array: its own vector, then the server's."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        if self.rank != 0:
            send_message(self.sock, VECTOR, values.astype(">f8").tobytes())
            return None
        payload = recv_message(self.sock, VECTOR)
        if len(payload) != values.nbytes:
            raise ProtocolError(f"malformed VECTOR message: {len(payload)} B where {values.nbytes} B were due")
        return np.vstack([values, np.frombuffer(payload, dtype=">f8").astype(np.float64)])

    def bcast_bytes(self, data: bytes | None) -> bytes:
        if self.rank == 0:
            send_message(self.sock, BYTES, data)
            return data
        return recv_message(self.sock, BYTES)

    def gather_json(self, obj: dict) -> list[dict] | None:
        if self.rank != 0:
            send_message(self.sock, JSON, json.dumps(obj).encode())
            return None
        try:
            theirs = json.loads(recv_message(self.sock, JSON))
        except (ValueError, RecursionError):
            raise ProtocolError("malformed JSON message") from None
        if not isinstance(theirs, dict):
            raise ProtocolError("malformed JSON message: not an object")
        return [obj, theirs]

    def abort(self, code: int) -> None:
        """Like MPI_Abort: the peer sees the connection close, this process ends now."""
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def close(self) -> None:
        self.sock.close()


def mpi_free(plan: Plan) -> None:
    """A peer run has no MPI: refuse the transports that need it."""
    for step in plan.steps:
        if step.transport.startswith("mpi"):
            raise UsageError(
                f"transport {step.transport!r} needs MPI and a launcher; --peer runs without MPI (try -t tcp)"
            )


def encode_hello(plan: Plan, hugepages: str | None) -> bytes:
    """The HELLO payload: the plan fields the server needs, struct-packed."""
    fields = Fields().text(__version__).text(plan.run_id)
    fields.i64(-1 if plan.iterations is None else plan.iterations).i64(-1 if plan.warmup is None else plan.warmup)
    fields.u32(plan.window).f64(plan.max_time or 0.0).u8(int(plan.validate)).f64(plan.timeout)
    fields.text(plan.method).u8(HUGEPAGES[hugepages])
    fields.u8(TCP_LOOPS[plan.transport_options.get("tcp", {}).get("loop", "auto")]).u16(len(plan.steps))
    for step in plan.steps:
        fields.text(step.transport).text(step.kernel).u16(len(step.sizes))
        for size in step.sizes:
            fields.u64(size)
    return fields.payload()


def _refuse_unless(ok: bool, message: str) -> None:
    if not ok:
        raise ProtocolError(message)


def decode_hello(payload: bytes, transport_options: dict) -> tuple[Plan, str | None, str]:
    """Check every HELLO field; returns (plan, hugepages, client version) or raises ProtocolError.

    ``transport_options`` are the server's own (addresses, devices): they describe this host, so
    they never come from the client. The one exception is the tcp loop, which the client picks
    for both sides of its run.
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
    method, hugepages = reader.text(32), reader.u8()
    _refuse_unless(hugepages in HUGEPAGES.values(), f"bad hugepages setting {hugepages}")
    loop = {code: name for name, code in TCP_LOOPS.items()}.get(reader.u8())
    _refuse_unless(loop is not None, "bad tcp loop setting")
    _refuse_unless(loop != "c" or tcp.c_loop_built(), "--tcp-loop c: this server's install has no C loop")
    if loop != "auto":
        transport_options = transport_options | {"tcp": transport_options.get("tcp", {}) | {"loop": loop}}
    step_count = reader.u16()
    _refuse_unless(1 <= step_count <= MAX_STEPS, f"{step_count} steps; 1 to {MAX_STEPS} are allowed")
    steps = []
    for _ in range(step_count):
        transport, kernel_name, size_count = reader.text(64), reader.text(64), reader.u16()
        _refuse_unless(transport in TRANSPORTS, f"unknown transport {transport!r}")
        _refuse_unless(not transport.startswith("mpi"), f"transport {transport!r} needs MPI; a peer run has none")
        _refuse_unless(1 <= size_count <= MAX_SIZES, f"{size_count} sizes; 1 to {MAX_SIZES} are allowed")
        sizes = [reader.u64() for _ in range(size_count)]
        try:
            kernel = get_kernel(kernel_name)
            kernel.check_ranks(RANKS)
        except UsageError as exc:
            raise ProtocolError(str(exc)) from None
        _refuse_unless(kernel.name in supported_kernels(transport), f"{transport} has no {kernel.name} kernel")
        for size in sizes:
            _refuse_unless(
                kernel.min_size <= size <= kernel.max_size,
                f"{kernel.name} size {size} B is outside {kernel.min_size}..{kernel.max_size} B",
            )
        steps.append(Step(transport, kernel.name, sizes))
    reader.end()
    plan = Plan(
        steps=steps,
        iterations=None if iterations == -1 else iterations,
        warmup=None if warmup == -1 else warmup,
        window=window,
        max_time=max_time or None,
        validate=bool(validate),
        method=method,
        timeout=timeout,
        run_id=run_id,
        output_format="none",
        transport_options=transport_options,
    )
    hugepages_name = {code: name for name, code in HUGEPAGES.items()}[hugepages]
    return plan, hugepages_name, client_version


def parse_peer(text: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) from the command line."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--peer must be HOST:PORT, got {text!r}")
    return host, int(port)


def run_client(plan: Plan, peer: str, hugepages: str | None) -> int:
    """Rank 0 of a peer run: handshake, then the ordinary runner over PairControl."""
    from fabricbench.cli import execute_plan
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
    tcp = dict(transport_options.get("tcp", {}))
    if address != "0.0.0.0" and not tcp.get("interface"):
        tcp.setdefault("address", address)  # data goes where the client already reaches us
    data_options = transport_options | {"tcp": tcp}

    def session(sock: socket.socket, client: str) -> None:
        try:
            plan, hugepages, client_version = decode_hello(recv_message(sock, HELLO), data_options)
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
    from fabricbench.cli import execute_plan

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

"""Transport ``ucx``: UCX's UCP between two ranks, timed in C: what Open MPI's pml/ucx, MPICH's ch4:ucx and
NCCL's UCX plug-in sit on.

UCX picks, per endpoint, the transports and devices (its "lanes") that reach
the peer: shared memory (posix, sysv, cma, xpmem, knem) between ranks on one
host, tcp, and InfiniBand or RoCE verbs (rc_verbs, ud_verbs, rc_mlx5, dc_mlx5)
between hosts, limited by the user's UCX_TLS and UCX_NET_DEVICES. This
transport measures UCP between rank 0 and rank N/2 with the loops of
``_ucxloop.c`` (built on first use against the host's libucp):

- latency: a ping-pong of tagged messages (ucp_tag_send_nbx /
  ucp_tag_recv_nbx, as MPI over UCX uses them), or of stream or active
  messages (``--ucx-api stream|am``); half the round trip, as osu_latency;
- bw, bibw: a window of messages per sample, with osu_bw's 4-byte
  acknowledgement (bw) or both ways at once (bibw);
- put, get, put-bw, get-bw: ucp_put_nbx and ucp_get_nbx on the peer's
  registered buffer through its packed rkey; a put sample ends with
  ucp_ep_flush_nbx (the data is in the peer's memory), a get sample when its
  requests complete; one operation per sample, or a window (-bw).

Completions are driven by busy ucp_worker_progress, by ucp_worker_progress
and sched_yield where it found nothing (``--ucx-progress yield``, and auto's
choice where a host runs more ranks than a rank has CPUs), or, with
``--ucx-progress wait``, by waiting on the worker's event descriptor. Worker addresses and
rkeys travel over the control plane (MPI, or ``--peer``'s connection) as hex,
each checked (length bounds, hex) before UCX reads it. What UCX chose is read
from ``ucp_ep_print_info`` (UCX 1.13 has no ep_query for transports: see
``cloop``) on both sides, after one tagged exchange has wired the endpoint
up: the rows' method names rank 0's lanes (``c loop, tag, posix/memory,
spin``), and the metadata every side's lanes and UCX_* variables.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from fabricbench.buffers import POISON, aligned, nothing, times_address
from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.hostinfo import ranks_here, this_host, usable_cpus
from fabricbench.measure.kernels import Kernel
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.device_link import RDMA_CLASS, device_link
from fabricbench.transports.handle_cases import HandleCase, HandlePingPong, HandleStream
from fabricbench.transports.tcp.link import NET_CLASS, shaper_on
from fabricbench.transports.ucx import cloop as ucx_cloop
from fabricbench.transports.ucx.cloop import (
    ADDRESS_BYTES,
    API_CODES,
    DESCRIBE_BYTES,
    ERROR_BYTES,
    RKEY_BYTES,
    RMA_CODES,
    Lane,
    lanes_summary,
    parse_lanes,
    used_for,
)
from fabricbench.transports.ucx.options import (
    MAX_ENV,
    MAX_ENV_CHARS,
    UCX_ENV_PREFIX,
    UCX_OPTIONS,
    UCXUnavailable,
    resolve_progress,
    ucx_environment,
)

MAX_LANES = 32  # lanes per endpoint taken from a peer's record
CONTROL_BYTES = 64  # after the two halves: the acknowledgement, DONE and handshake messages
MAX_WINDOW = 4096  # _ucxloop.c's MAX_WINDOW: the most messages a window holds
TWO_SIDED = {
    "tag": "ucp_tag_send_nbx/ucp_tag_recv_nbx",
    "stream": "ucp_stream_send_nbx/ucp_stream_recv_nbx",
    "am": "ucp_am_send_nbx to a receive handler",
}
PROGRESS_WORDS = {  # the metadata's words for each --ucx-progress, once auto is resolved
    "spin": "busy ucp_worker_progress",
    "yield": "ucp_worker_progress, and sched_yield where it found nothing",
    "wait": "ucp_worker_arm and a wait on the worker's event descriptor",
}
RMA_CALLS = {"put": "ucp_put_nbx + ucp_ep_flush_nbx", "get": "ucp_get_nbx"}
RMA_LANES = ("rma", "rma_bw")
MESSAGE_LANES = ("am", "am_bw", "tag")  # tagged, stream and active messages go over UCP's am lanes (tag: offload)
NO_RMA_LANE = "emulated over active messages"  # UCP's software RMA, where no lane does RMA itself (tcp)
LANES_SOURCE = "ucp_ep_print_info (UCX 1.13 has no UCP_EP_ATTR_FIELD_TRANSPORTS for ucp_ep_query)"
ZERO_STREAM = "a stream has no messages of 0 B (ucp_stream_recv_nbx waits for bytes)"
# Measured here: a 0 B ucp_put_nbx completed in 0.03 us and 140 million a second, with nothing sent to the peer.
ZERO_RMA = "an RMA operation of 0 B moves nothing: UCP completes it at once, without the peer"


def check_environment(record: object, rank: int) -> dict[str, str]:
    """Another rank's UCX_* record as the control plane brought it: a small dict of strings, else PeerError."""
    if not isinstance(record, dict) or len(record) > MAX_ENV:
        raise PeerError(f"rank {rank}'s UCX_* environment record is malformed")
    for key, value in record.items():
        if not (isinstance(value, str) and key.startswith(UCX_ENV_PREFIX)):
            raise PeerError(f"rank {rank}'s UCX_* environment record is malformed")
        if len(key) > MAX_ENV_CHARS or len(value) > MAX_ENV_CHARS:
            raise PeerError(f"rank {rank}'s UCX_* environment record is malformed")
    return record


def decode_blob(text: object, rank: int, what: str, limit: int) -> bytes:
    """A peer's worker address or packed rkey as the control plane brought it (hex), checked: 1 to ``limit``
    bytes of hex, else PeerError naming ``what``."""
    if not isinstance(text, str) or not 0 < len(text) <= 2 * limit or len(text) % 2:
        raise PeerError(f"rank {rank} sent no usable UCX {what} (1 to {limit} B of hex)")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise PeerError(f"rank {rank} sent a UCX {what} that is not hex") from None


def check_base(value: object, rank: int) -> int:
    """A peer's registered buffer address: an unsigned 64-bit integer, else PeerError."""
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise PeerError(f"rank {rank} sent a malformed UCX buffer address")
    return value


BANDWIDTH_LANES = ("am_bw", "rma_bw", "tag")  # what UCP moves a large message's bytes on


def lane_link(
    lanes: list[Lane], net_class: str | Path = NET_CLASS, rdma_class: str | Path = RDMA_CLASS, shaped=shaper_on
) -> tuple[float | None, str]:
    """The link an endpoint's large messages cross, where they cross one device: (MB/s, label), else (None, "").
    Shared memory and several devices at once (UCX stripes a message over its lanes) give none; one device, its
    device_link."""
    chosen = [lane for lane in lanes if set(lane.operations) & set(BANDWIDTH_LANES)] or lanes
    devices = {lane.device for lane in chosen}
    if len(devices) != 1:
        return None, ""
    return device_link(devices.pop(), net_class, rdma_class, shaped)


def lane_records(lanes: list[Lane]) -> list[list]:
    """Lanes as the control plane carries them: [transport, device, [operations]]."""
    return [[lane.transport, lane.device, list(lane.operations)] for lane in lanes]


def check_lanes(record: object, rank: int) -> list[Lane]:
    """A peer's lanes as the control plane brought them, each field a short printable string, else PeerError."""
    if not isinstance(record, list) or len(record) > MAX_LANES:
        raise PeerError(f"rank {rank}'s UCX lane record is malformed")
    lanes = []
    for index, item in enumerate(record):
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], list) and len(item[2]) <= 16):
            raise PeerError(f"rank {rank}'s UCX lane record is malformed")
        words = [item[0], item[1], *item[2]]
        if not all(isinstance(w, str) and 0 < len(w) <= 64 and w.isprintable() and " " not in w for w in words):
            raise PeerError(f"rank {rank}'s UCX lane record is malformed")
        lanes.append(Lane(index, item[0], item[1], tuple(item[2])))
    return lanes


def open_refusal(said: str, version: str, environ=os.environ) -> str:
    """The one line for a UCX that would not open: what it said, and what the user set that limits it."""
    limits = [f"{name}={environ[name]}" for name in ("UCX_TLS", "UCX_NET_DEVICES") if environ.get(name)]
    where = f" with {' '.join(limits)}" if limits else ""
    return f"UCX {version} could not open a worker{where}: {said} (ucx_info -d lists the transports and devices)"


class RMA(HandleCase):
    """put, get (one operation per sample) and put-bw, get-bw (a window per sample) on the origin, rank 0; the
    target drives progress until the origin's DONE message."""

    def __init__(self, transport, kernel, size):
        self.put = kernel.name.startswith("put")
        self.window = transport.window if kernel.windowed else 0
        calls = RMA_CALLS["put" if self.put else "get"] + (f", window {self.window}" if self.window else "")
        super().__init__(transport, kernel, size, f"{calls}, {transport.rma_lanes()}")
        if not self.active:
            return
        # A put lands in the target's receive half; a get in the origin's, from the target's send half.
        receives = not self.initiator if self.put else self.initiator
        if not receives:
            self.received = nothing()

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.active:
            return
        t = self.transport
        if not self.initiator:
            t.require_success(t.lib.fb_wait_done(t.handle))
            return
        code = RMA_CODES[self.kernel.name]
        t.require_success(t.lib.fb_rma(t.handle, code, self.size, self.window, iterations, times_address(times)))
        t.require_success(t.lib.fb_signal_done(t.handle))


class UCXTransport(Transport):
    """UCP between rank 0 and rank N/2 (see the module docstring)."""

    name = "ucx"
    kernels = frozenset({"latency", "bw", "bibw", "put", "get", "put-bw", "get-bw"})
    option_groups = (UCX_OPTIONS,)

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """No UCX or no compiler: one line, exit 2, before any rank starts (there is no Python loop)."""
        ucx_cloop.load()

    @classmethod
    def preflight_local(cls, settings: dict, ranks: int) -> None:
        """Where every rank runs here, a worker must open with this environment (a UCX_TLS that matches no
        transport here is refused now, in one line, before any rank starts)."""
        loop = ucx_cloop.load()
        memory = aligned(2 * 8 + CONTROL_BYTES)
        error = ctypes.create_string_buffer(ERROR_BYTES)
        progress = int(UCX_OPTIONS.of(settings).get("progress", "auto") == "wait")
        handle = loop.lib.fb_open(API_CODES["tag"], progress, memory.ctypes.data, memory.nbytes, 8, 1000, error,
                                  ERROR_BYTES)  # fmt: skip
        if not handle:
            raise UCXUnavailable(open_refusal(error.value.decode(errors="replace"), loop.version))
        loop.lib.fb_close(handle)

    @classmethod
    def doctor(cls) -> Diagnosis:
        from fabricbench.transports.ucx.ucx_perftest import ucx_info_devices

        try:
            loop = ucx_cloop.load()
        except UCXUnavailable as exc:
            return Diagnosis(False, str(exc))
        return Diagnosis(
            True,
            details={
                "ucx": f"{loop.version}, {loop.library} ({loop.found})",
                "timed loop": f"c loop, built with {loop.compiler} ({loop.path})",
                "transports and devices (ucx_info -d)": ucx_info_devices(),
                "UCX_* set": ucx_environment() or "none",
            },
        )

    def __init__(self, ctrl, plan):
        self.rank, self.ranks = ctrl.rank, ctrl.size
        self.settings = settings = UCX_OPTIONS.of(plan.transport_options)
        self.api = settings.get("api", "tag")
        self.progress = settings.get("progress", "auto")  # auto: resolved to spin or yield once the ranks are known
        self.progress_choice = self.progress
        self.sockaddr = settings.get("sockaddr", "")  # client-server set-up through a listener there
        self.window = plan.window
        self.timeout = plan.timeout
        self.region = max([s for step in plan.steps if step.transport == self.name for s in step.sizes] + [8])
        half = self.ranks // 2
        self.pair = (0, half) if self.ranks >= 2 else ()
        self.peer = {0: half, half: 0}.get(self.rank) if self.ranks >= 2 else None
        self.handle = None
        self.lib = None
        self.loop = None
        self.memory = nothing()
        self.lanes: dict[int, list[Lane]] = {}
        self.link: tuple[float | None, str] = (None, "")  # lane_link of this rank's endpoint
        try:
            self._open(ctrl)
        except BaseException:
            self.close()
            raise

    def _open(self, ctrl) -> None:
        """Open this side, trade worker addresses and rkeys, connect, wire up, then trade what each endpoint
        chose; every rank takes part in each exchange, and a failure on either side of the pair stops all."""
        why = ""
        address = rkey = base = None
        if self.peer is not None:
            try:
                self.loop = ucx_cloop.load()
                self.lib = self.loop.lib
                address, rkey, base = self._open_worker()
            except UCXUnavailable as exc:
                why = str(exc)[:400]
        mine = {"why": why, "address": address, "rkey": rkey, "base": base, "env": ucx_environment()}
        mine["host"] = this_host()
        table = allgather_json(ctrl, mine, "UCX address table")
        for rank in self.pair:
            said = table[rank].get("why")
            if said:
                said = said if isinstance(said, str) else "no reason given"
                raise UCXUnavailable(f"rank {rank}: {said}")
        self._choose_progress(ranks_here(table))
        self.environments = [check_environment(record.get("env"), r) for r, record in enumerate(table)]
        connected = ""
        if self.sockaddr:
            connected = self._connect_sockaddr(ctrl, table)
        elif self.peer is not None:
            record = table[self.peer]
            peer_address = decode_blob(record.get("address"), self.peer, "worker address", ADDRESS_BYTES)
            connected = self._connect(peer_address, table)
        if not self.sockaddr:
            self._check_all(ctrl, connected, "could not reach its peer")
        wired = ""
        lanes: list[Lane] = []
        if self.peer is not None and not connected:
            if self.lib.fb_handshake(self.handle):
                wired = self.lib.fb_error(self.handle).decode(errors="replace")
            else:
                lanes = self._describe()
        if self.sockaddr:  # a side that could not connect or accept is named as such, after the other's wait
            self._check_all(ctrl, connected, "could not reach its peer")
        table = self._check_all(ctrl, wired, "could not exchange a first message", {"lanes": lane_records(lanes)})
        self.lanes = {rank: check_lanes(table[rank].get("lanes"), rank) for rank in self.pair}
        self.link = lane_link(lanes)  # this rank's own endpoint's

    def _choose_progress(self, local_ranks: int) -> None:
        """Resolve --ucx-progress auto (options.resolve_progress) and tell the C loop whether to yield."""
        self.progress, self.progress_choice = resolve_progress(self.progress, local_ranks, usable_cpus())
        if self.handle:
            self.lib.fb_set_yield(self.handle, int(self.progress == "yield"))

    def _open_worker(self) -> tuple[str, str, int]:
        self.memory = aligned(2 * self.region + CONTROL_BYTES)
        self.memory[:] = POISON
        error = ctypes.create_string_buffer(ERROR_BYTES)
        timeout_ms = int(min(self.timeout, 2**31 / 1000) * 1000)
        self.handle = self.lib.fb_open(
            API_CODES[self.api], int(self.progress == "wait"), self.memory.ctypes.data, self.memory.nbytes,
            self.region, timeout_ms, error, ERROR_BYTES,
        )  # fmt: skip
        if not self.handle:
            raise UCXUnavailable(open_refusal(error.value.decode(errors="replace"), self.loop.version))
        out = ctypes.create_string_buffer(max(ADDRESS_BYTES, RKEY_BYTES))
        length = self.lib.fb_address(self.handle, out, ADDRESS_BYTES)
        address = out.raw[: max(length, 0)].hex()
        found_base = ctypes.c_uint64()
        rkey_length = self.lib.fb_rkey(self.handle, out, RKEY_BYTES, ctypes.byref(found_base))
        if length < 0 or rkey_length < 0:  # over what the control plane carries: said on every rank alike
            raise UCXUnavailable(self.lib.fb_error(self.handle).decode(errors="replace"))
        return address, out.raw[:rkey_length].hex(), found_base.value

    def _connect_sockaddr(self, ctrl, table: list[dict]) -> str:
        """Client-server set-up: the pair's first rank listens on --ucx-sockaddr, the port goes to every rank, the
        other rank connects and the first accepts; '' on success, else why. The rkey is unpacked as for a worker
        address. The sides meet in the handshake that follows, with no exchange between: the listener's wait for
        the request would otherwise hold the connecting side in the control plane."""
        port, why = 0, ""
        if self.rank == self.pair[0]:
            port = self.lib.fb_listen(self.handle, self.sockaddr.encode())
            if port < 0:
                why, port = self.lib.fb_error(self.handle).decode(errors="replace"), 0
        ports = allgather_json(ctrl, {"said": why[:400], "port": port}, "UCX listener table")
        said = ports[self.pair[0]].get("said")
        if said:
            raise PeerError(f"the UCX listener of rank {self.pair[0]} on {self.sockaddr}: {str(said)[:400]}")
        if self.peer is None:
            return ""
        if self.rank == self.pair[0]:
            failed = self.lib.fb_accept(self.handle)
        else:
            port = ports[self.pair[0]].get("port")
            if not isinstance(port, int) or not 0 < port < 65536:
                raise PeerError(f"rank {self.pair[0]} sent no listener port: {port!r}")
            failed = self.lib.fb_connect_sockaddr(self.handle, self.sockaddr.encode(), port)
        if failed:
            return self.lib.fb_error(self.handle).decode(errors="replace")
        return self._set_remote(table)

    def _connect(self, address: bytes, table: list[dict]) -> str:
        """The endpoint to the peer's worker address and its rkey unpacked; '' on success, else why."""
        if self.lib.fb_connect(self.handle, address, len(address)):
            return self.lib.fb_error(self.handle).decode(errors="replace")
        return self._set_remote(table)

    def _set_remote(self, table: list[dict]) -> str:
        """The peer's rkey (checked as it came over the control plane) unpacked on the endpoint; '' or why."""
        record = table[self.peer]
        rkey = decode_blob(record.get("rkey"), self.peer, "rkey", RKEY_BYTES)
        if self.lib.fb_set_remote(self.handle, rkey, len(rkey), check_base(record.get("base"), self.peer)):
            return self.lib.fb_error(self.handle).decode(errors="replace")
        return ""

    def _check_all(self, ctrl, said: str, what: str, extra: dict | None = None) -> list[dict]:
        """Every rank's word on a step; a PeerError on every rank where a side of the pair failed it."""
        table = allgather_json(ctrl, {"said": said[:400], **(extra or {})}, "UCX connection table")
        for rank in self.pair:
            failed = table[rank].get("said")
            if failed:
                failed = failed if isinstance(failed, str) else "no reason given"
                raise PeerError(f"the UCX endpoint of rank {rank} {what}: {failed}")
        return table

    def _describe(self) -> list[Lane]:
        out = ctypes.create_string_buffer(DESCRIBE_BYTES)
        self.lib.fb_describe(self.handle, out, DESCRIBE_BYTES)
        return parse_lanes(out.value.decode(errors="replace"))

    def require_success(self, code: int) -> None:
        """A C call's return: 0, or -1 with its one line of text (a failed completion is the peer's fault)."""
        if code:
            raise PeerError(self.lib.fb_error(self.handle).decode(errors="replace"))

    def case_method(self, calls: str) -> str:
        """A row's method: the loop, the calls (with the lanes they use) and the progress."""
        return f"c loop, {calls}, {self.progress}"

    def message_calls(self, size: int) -> str:
        """A two-sided message's calls, whatever its size: the API and the lanes it goes on."""
        return self.two_sided_method()

    def two_sided_method(self) -> str:
        """The API and the lanes rank 0's endpoint sends messages on: ``tag, sysv/memory``."""
        return f"{self.api}, {used_for(self.lanes.get(0, []), MESSAGE_LANES)}"

    def rma_lanes(self) -> str:
        """The lanes rank 0's endpoint does RMA on, or the active-message lanes UCP emulates RMA over."""
        lanes = self.lanes.get(0, [])
        if any(set(lane.operations) & set(RMA_LANES) for lane in lanes):
            return used_for(lanes, RMA_LANES)
        return f"{used_for(lanes, ('am', 'am_bw'))} ({NO_RMA_LANE})"

    def case(self, kernel: Kernel, size: int) -> Case:
        if size > self.region:
            raise Unsupported(f"{size} B is more than the {self.region} B registered for this run")
        if self.window > MAX_WINDOW and kernel.windowed:
            raise Unsupported(f"a window of {self.window} is over the ucx loop's {MAX_WINDOW}")
        if kernel.name in RMA_CODES:
            if size == 0:
                raise Unsupported(ZERO_RMA)
            made = RMA(self, kernel, size)
        elif size == 0 and self.api == "stream":
            raise Unsupported(ZERO_STREAM)
        elif kernel.name == "latency":
            made = HandlePingPong(self, kernel, size)
        else:
            made = HandleStream(self, kernel, size)
        made.link_MBps, made.link_label = self.link
        made.link_bound = False
        return made

    def metadata(self) -> dict:
        environments = self.environments
        same = all(env == environments[0] for env in environments)
        return {
            "timed_loop": "c loop",
            "c_loop_library": self.loop.path if self.loop else None,
            "c_loop_compiler": self.loop.compiler if self.loop else None,
            "ucx": self.loop.version if self.loop else None,
            "ucx_found": self.loop.found if self.loop else None,
            "ucx_library": self.loop.library if self.loop else None,
            "ucx_apart_from": self.loop.apart_from if self.loop else None,
            "connection": (
                f"client-server: a UCP listener on {self.sockaddr} (--ucx-sockaddr)"
                if self.sockaddr
                else "endpoints from the worker addresses the ranks exchanged"
            ),
            "api": TWO_SIDED[self.api],
            "rma_calls": RMA_CALLS,
            "progress": PROGRESS_WORDS[self.progress],
            "progress_choice": self.progress_choice,
            "peer_rank": self.peer,
            "window": self.window,
            "lanes_source": LANES_SOURCE,
            # each side's endpoint to the other: its lanes as transport/device and what UCP uses each for
            "lanes_by_rank": {
                str(rank): [f"{lane.name} ({' '.join(lane.operations) or '-'})" for lane in lanes]
                for rank, lanes in self.lanes.items()
            },
            "transports_by_rank": {str(rank): lanes_summary(lanes) for rank, lanes in self.lanes.items()},
            "rma_lanes": self.rma_lanes() if self.lanes else None,
            "ucx_environment": environments[0] if same else {f"rank {r}": env for r, env in enumerate(environments)},
        }

    def close(self) -> None:
        if self.handle and self.lib:
            self.lib.fb_close(self.handle)
        self.handle = None

    release = close  # closing the endpoint, worker and context is local

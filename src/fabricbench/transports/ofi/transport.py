"""Transport ``ofi``: libfabric's endpoints directly, timed in C: Slingshot (cxi), EFA, Omni-Path, and any provider.

libfabric (OFI) is what Cray MPICH, Open MPI's ``ofi`` MTL, NCCL's
aws-ofi-nccl plug-in and Intel MPI sit on; on HPE Slingshot its ``cxi``
provider is the NIC's native interface, as verbs is InfiniBand's. This
transport measures it between rank 0 and rank N/2, with the fabtests loops
(``_ofiloop.c``, built on first use against the host's libfabric):

- latency: ping-pong of tagged (``fi_tsend``/``fi_trecv``, as MPI over OFI
  uses it) or untagged messages (``--ofi-messages msg``), injected at or
  below the provider's inject size; half the round trip, as osu_latency;
- bw, bibw: a window of messages per sample, with osu_bw's 4-byte
  acknowledgement (bw) or both ways at once (bibw);
- put, get, put-bw, get-bw: ``fi_write`` (delivery complete, where the
  provider takes that flag: MPI_Win_flush's guarantee) and ``fi_read``, one
  per sample (a full round trip, as osu_put_latency) or a window per sample.
  ``unsupported`` where the provider lacks FI_RMA.

Endpoints are RDM by default (``cxi`` and ``efa`` have no other), MSG with
``--ofi-endpoint msg``. Completions are busy-polled (``fi_cq_read``) or
waited for (``fi_cq_sread``, ``--ofi-progress wait``). The provider is
``--ofi-provider``'s, else fi_getinfo's first choice for the hints, and the
rows' method and the metadata name what was chosen. Between ``serve`` and
``run --peer`` each side opens the domain whose address is the one the
control connection uses there, where the provider lists one (tcp, sockets:
a domain per interface); fi_getinfo's first choice is the fastest interface
with the lowest address, which on a host with two networks may be one the
peer cannot reach. Addresses and memory keys travel over the control plane
(MPI, or ``--peer``'s connection), each checked before use.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
from pathlib import Path

from fabricbench.argtypes import MASK
from fabricbench.buffers import POISON, aligned, nothing, times_address
from fabricbench.control import allgather_json
from fabricbench.errors import PeerError, Unsupported
from fabricbench.measure.kernels import Kernel
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.handle_cases import HandleCase, HandlePingPong, HandleStream
from fabricbench.transports.ofi import cloop as ofi_cloop
from fabricbench.transports.ofi.cloop import CONTROL_BYTES, ERROR_BYTES, NAME_BYTES, RMA_CODES, OFIInfo
from fabricbench.transports.ofi.options import OFI_OPTIONS, OFIUnavailable
from fabricbench.transports.tcp.link import NET_CLASS, rate_text

FI_ENV_PREFIX = "FI_"  # libfabric's settings (FI_PROVIDER, FI_CXI_*, FI_TCP_*): the metadata records each rank's
MAX_ENV = 64  # FI_* variables per rank carried to rank 0
MAX_ENV_CHARS = 256
# FI_* variables whose value is a job's key or a secret (PSM3's and OPX's job UUID, CXI's auth key): never on disk
SECRET_NAMES = re.compile(r"UUID|KEY|TOKEN|SECRET|PASS|AUTH|CRED", re.IGNORECASE)
# Providers differ on a zero-length RMA operation (shm in libfabric 1.17 never completes one), and it moves nothing.
ZERO_RMA = "an RMA operation of 0 B is not timed: libfabric's providers differ on it (shm never completes one)"
EXTRA_DEPTH = 4  # operations in flight beyond the window: the acknowledgement and DONE messages
DELIVERY_CALL, TRANSMIT_CALL = "fi_writemsg delivery complete", "fi_write transmit complete"  # a put's method
UNIVERSE = "2"  # FI_UNIVERSE_SIZE where the user sets none: the pair's two endpoints


def fi_environment(environ=os.environ) -> dict[str, str]:
    """This rank's FI_* variables (at most MAX_ENV, each cut at MAX_ENV_CHARS), for the metadata; the values of
    those that hold a job's key or secret (FI_OPX_UUID, FI_PSM3_UUID, an auth key) masked."""
    found = sorted((k, v) for k, v in environ.items() if k.startswith(FI_ENV_PREFIX))
    return {k[:MAX_ENV_CHARS]: MASK if SECRET_NAMES.search(k) else v[:MAX_ENV_CHARS] for k, v in found[:MAX_ENV]}


def source_address(ctrl) -> str:
    """The address the control connection reached this rank by (``--peer``'s), the one whose domain to open: an
    IPv4-mapped IPv6 address as its IPv4 address, no zone; '' where there is none (MPI's control plane)."""
    address = getattr(ctrl, "local_address", None) or ""
    try:
        ip = ipaddress.ip_address(address.partition("%")[0])
    except ValueError:
        return ""
    return str(getattr(ip, "ipv4_mapped", None) or ip)


def open_hint(said: str, provider: str, environ=os.environ) -> str:
    """What to try where opening failed after fi_getinfo chose ``provider`` ('' when nothing is known to help).

    libfabric's verbs provider lists every RDMA device, but connects with rdma_cm, which needs the device's
    netdev to carry an IP address and refuses one on lo (SoftRoCE's usual set-up): fi_domain then fails with
    no data. FI_VERBS_IFACE names the netdev to use."""
    if provider.startswith("verbs") and "fi_domain" in said and "FI_VERBS_IFACE" not in environ:
        return (
            " (the verbs provider connects with rdma_cm, which needs an RDMA device whose netdev has an IP address, "
            "not lo: set FI_VERBS_IFACE to that netdev)"
        )
    return ""


def check_environment(record: object, rank: int) -> dict[str, str]:
    """Another rank's FI_* record as the control plane brought it: a small dict of strings, else PeerError."""
    if not isinstance(record, dict) or len(record) > MAX_ENV:
        raise PeerError(f"rank {rank}'s FI_* environment record is malformed")
    for key, value in record.items():
        if not (isinstance(value, str) and key.startswith(FI_ENV_PREFIX)):
            raise PeerError(f"rank {rank}'s FI_* environment record is malformed")
        if len(key) > MAX_ENV_CHARS or len(value) > MAX_ENV_CHARS:
            raise PeerError(f"rank {rank}'s FI_* environment record is malformed")
    return record


def decode_address(text: object, rank: int) -> bytes:
    """A peer's endpoint address as the control plane brought it (hex), checked: 1 to NAME_BYTES bytes."""
    if not isinstance(text, str) or not 0 < len(text) <= 2 * NAME_BYTES:
        raise PeerError(f"rank {rank} sent no usable libfabric address")
    try:
        return bytes.fromhex(text)
    except ValueError:
        raise PeerError(f"rank {rank} sent a libfabric address that is not hex") from None


def provider_link(speed_bps: int, domain: str, net_class: str | Path = NET_CLASS) -> tuple[float | None, str]:
    """A row's link from what the provider reports of its NIC (fi_info's nic->link_attr->speed, bits/s): MB/s and
    a label, or (None, "") where it reports none, or where the domain is a netdev sysfs shows with no device behind
    it (a veth's nominal speed has no wire). The rate is the link's, not the payload's: the provider's headers are
    its own, so it is a reference and never a bound."""
    netdev = Path(net_class) / domain
    if speed_bps <= 0 or (domain and netdev.exists() and not (netdev / "device").exists()):
        return None, ""
    return speed_bps / 8e6, f"{domain} {rate_text(speed_bps)}, as the provider reports it"


def check_key(record: object, rank: int) -> tuple[int, int]:
    """A peer's RMA key and base address, each an unsigned 64-bit integer, else PeerError."""
    fields = record if isinstance(record, dict) else {}
    key, base = fields.get("key"), fields.get("base")
    if not all(type(n) is int and 0 <= n < 1 << 64 for n in (key, base)):
        raise PeerError(f"rank {rank} sent a malformed RMA key record")
    return key, base


class RMA(HandleCase):
    """put, get (one operation per sample) and put-bw, get-bw (a window per sample) on the origin, rank 0; the
    target drives progress until the origin's DONE message."""

    def __init__(self, transport, kernel, size):
        self.put = kernel.name.startswith("put")
        calls = transport.write_call() if self.put else "fi_read"
        self.window = transport.window if kernel.windowed else 0
        super().__init__(transport, kernel, size, calls + (f", window {self.window}" if self.window else ""))
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
            self.require_success(t.lib.fb_wait_done(t.handle))
            return
        self.require_success(
            t.lib.fb_rma(
                t.handle, RMA_CODES[self.kernel.name], self.size, self.window, iterations, times_address(times)
            )
        )
        if self.put and t.delivery and not t.lib.fb_delivery_complete(t.handle):
            # The provider refused FI_DELIVERY_COMPLETE on the first WRITE: the row says what was timed.
            t.delivery = False
            self.method = self.method.replace(DELIVERY_CALL, TRANSMIT_CALL)
        self.require_success(t.lib.fb_signal_done(t.handle))


class OFITransport(Transport):
    """libfabric endpoints between rank 0 and rank N/2 (see the module docstring)."""

    name = "ofi"
    kernels = frozenset({"latency", "bw", "bibw", "put", "get", "put-bw", "get-bw"})
    option_groups = (OFI_OPTIONS,)

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """No libfabric or no compiler: one line, exit 2, before any rank starts (there is no Python loop)."""
        ofi_cloop.load()

    @classmethod
    def preflight_local(cls, settings: dict, ranks: int) -> None:
        """Where every rank runs here, the provider asked for must be one this host's libfabric has."""
        ofi_cloop.load().probe(OFI_OPTIONS.of(settings))

    @classmethod
    def doctor(cls) -> Diagnosis:
        try:
            loop = ofi_cloop.load()
            chosen = loop.probe({}).facts()
            providers = ofi_cloop.survey_lines(loop.survey())
        except OFIUnavailable as exc:
            return Diagnosis(False, str(exc))
        return Diagnosis(
            True,
            details={
                "libfabric": f"{loop.version}, {loop.library} ({loop.found})",
                "timed loop": f"c loop, built with {loop.compiler} ({loop.path})",
                "default choice": f"{chosen['provider']} RDM on {chosen['domain']}",
                "providers": providers,
            },
        )

    def __init__(self, ctrl, plan):
        self.rank, self.ranks = ctrl.rank, ctrl.size
        self.settings = settings = OFI_OPTIONS.of(plan.transport_options)
        self.endpoint = settings.get("endpoint", "rdm")
        self.tagged = settings.get("messages", "tagged") == "tagged"
        self.progress = settings.get("progress", "spin")
        self.window = plan.window
        self.timeout = plan.timeout
        self.region = max([s for step in plan.steps if step.transport == self.name for s in step.sizes] + [8])
        half = self.ranks // 2
        self.pair = (0, half) if self.ranks >= 2 else ()
        self.peer = {0: half, half: 0}.get(self.rank) if self.ranks >= 2 else None
        self.listener = self.rank == half  # a MSG endpoint's passive side
        self.source = source_address(ctrl)
        self.handle = None
        self.lib = None
        self.loop = None
        self.info = OFIInfo()
        self.link: tuple[float | None, str] = (None, "")  # the provider's NIC: provider_link, once open
        self.memory = nothing()
        self.rma_reason = ""
        self.delivery = True
        self.universe_set = False  # whether FI_UNIVERSE_SIZE is fabricbench's (unset by the user)
        try:
            self._open(ctrl)
        except BaseException:
            self.close()
            raise

    def _open(self, ctrl) -> None:
        """Open this side, trade addresses, connect, then trade RMA keys; every rank takes part in each exchange,
        and a failure on any rank of the pair stops all of them alike."""
        why = ""
        if self.peer is not None:
            try:
                self.loop = ofi_cloop.load()
                self.lib = self.loop.lib
                # The pair is the only traffic: two endpoints. Providers size their queues by FI_UNIVERSE_SIZE
                # (ofi_rxm's completion queue is 256 entries per peer, over SoftRoCE's limit at its default 256).
                if self.lib.fb_default_env(b"FI_UNIVERSE_SIZE", UNIVERSE.encode()):
                    self.universe_set = True
                self._open_endpoint()
            except (OFIUnavailable, PeerError) as exc:
                why = str(exc)[:400]
        mine = {
            "why": why,
            "address": self.info.address().hex() if self.handle else None,
            "facts": self.info.facts() if self.handle else None,
            "env": fi_environment(),
        }
        table = allgather_json(ctrl, mine, "libfabric address table")
        for rank in self.pair:
            said = table[rank].get("why")
            if said:
                said = said if isinstance(said, str) else "no reason given"
                raise OFIUnavailable(f"rank {rank} could not open a libfabric endpoint: {said}")
        self.environments = [check_environment(record.get("env"), r) for r, record in enumerate(table)]
        self.facts = {r: table[r].get("facts") for r in self.pair}
        for rank, facts in self.facts.items():
            if not isinstance(facts, dict) or not isinstance(facts.get("provider"), str):
                raise PeerError(f"rank {rank} sent a malformed libfabric record")
        providers = {facts["provider"] for facts in self.facts.values()}
        if len(providers) > 1:
            raise PeerError(f"the two ranks opened different libfabric providers: {', '.join(sorted(providers))}")
        self.provider = providers.pop() if providers else (self.settings.get("provider") or "")
        connected = ""
        if self.peer is not None:
            # A MSG listener takes the peer's connection request; every other side needs the peer's address.
            dialling = self.endpoint == "rdm" or not self.listener
            connected = self._connect(decode_address(table[self.peer].get("address"), self.peer) if dialling else b"")
        self._trade_keys(ctrl, connected)

    def _open_endpoint(self) -> None:
        options = ofi_cloop.hints(self.settings)
        depth = self.window + EXTRA_DEPTH
        self.memory = aligned(2 * self.region + CONTROL_BYTES)
        self.memory[:] = POISON
        error = ctypes.create_string_buffer(ERROR_BYTES)
        listen = int(self.endpoint == "msg" and self.listener)
        self.handle = self.lib.fb_open(
            *options[:2], self.source.encode(), *options[2:], listen, self.memory.ctypes.data, self.memory.nbytes,
            self.region, depth, int(min(self.timeout, 2**31 / 1000) * 1000), ctypes.byref(self.info), error,
            ERROR_BYTES,
        )  # fmt: skip
        if not self.handle:
            said = error.value.decode(errors="replace")
            chosen = self.info.provider.decode(errors="replace")  # filled once fi_getinfo chose, before fi_domain
            asked = ofi_cloop.no_match(self.settings)
            raise OFIUnavailable(f"libfabric {self.loop.version} has {asked}: {said}{open_hint(said, chosen)}")
        self.link = provider_link(self.info.link_speed, self.info.domain.decode(errors="replace"))  # every size's

    def _connect(self, address: bytes) -> str:
        """Join the peer; '' on success, else why (every rank learns it in the key exchange that follows)."""
        buffer = ctypes.create_string_buffer(address, len(address) or 1)
        code = self.lib.fb_connect(self.handle, buffer, len(address), int(self.listener))
        return self.lib.fb_error(self.handle).decode(errors="replace") if code else ""

    def _trade_keys(self, ctrl, connected: str) -> None:
        rma = all(facts.get("rma") is True for facts in self.facts.values())
        key = base = None
        if self.peer is not None and not connected and rma:
            found_key, found_base = ctypes.c_uint64(), ctypes.c_uint64()
            if self.lib.fb_local_key(self.handle, ctypes.byref(found_key), ctypes.byref(found_base)):
                self.rma_reason = self.lib.fb_error(self.handle).decode(errors="replace")
            else:
                key, base = found_key.value, found_base.value
        mine = {"connected": connected[:400], "key": key, "base": base, "rma_reason": self.rma_reason[:400]}
        table = allgather_json(ctrl, mine, "libfabric key table")
        for rank in self.pair:
            said = table[rank].get("connected")
            if said:
                raise PeerError(f"rank {rank}'s libfabric endpoint did not connect: {said}")
        if not rma:
            self.rma_reason = f"provider {self.provider} lacks FI_RMA"
            return
        reasons = [table[r].get("rma_reason") for r in self.pair if table[r].get("rma_reason")]
        if reasons:
            self.rma_reason = reasons[0] if isinstance(reasons[0], str) else "no RMA key"
            return
        if self.peer is not None:
            self.lib.fb_set_remote(self.handle, *check_key(table[self.peer], self.peer))

    def require_success(self, code: int) -> None:
        """A C call's return: 0, or -1 with its one line of text (a failed completion is the peer's fault)."""
        if code:
            raise PeerError(self.lib.fb_error(self.handle).decode(errors="replace"))

    def case_method(self, calls: str) -> str:
        """A row's method: the loop, the provider and endpoint type, the calls and the progress."""
        return f"c loop, {self.provider} {self.endpoint.upper()}, {calls}, {self.progress}"

    def message_calls(self, size: int) -> str:
        """The calls a message of ``size`` bytes takes: inject at or below the provider's inject size."""
        inject = size <= self.info.inject_size if self.handle else False
        if self.tagged:
            return "fi_tinject" if inject else "fi_tsend/fi_trecv"
        return "fi_inject" if inject else "fi_send/fi_recv"

    def write_call(self) -> str:
        return DELIVERY_CALL if self.delivery else TRANSMIT_CALL

    def case(self, kernel: Kernel, size: int) -> Case:
        if size > self.region:
            raise Unsupported(f"{size} B is more than the {self.region} B registered for this run")
        facts = self.facts.get(0) or {}
        largest = facts.get("max_msg_size_B")
        if type(largest) is int and largest and size > largest:
            raise Unsupported(f"{size} B is over provider {self.provider}'s largest message, {largest} B")
        if kernel.name in RMA_CODES:
            if self.rma_reason:
                raise Unsupported(self.rma_reason)
            if size == 0:
                raise Unsupported(ZERO_RMA)
            made = RMA(self, kernel, size)
        elif kernel.name == "latency":
            made = HandlePingPong(self, kernel, size)
        else:
            made = HandleStream(self, kernel, size)
        if self.handle:
            made.link_MBps, made.link_label = self.link
            made.link_bound = False
        return made

    def domain_chosen_by(self) -> str:
        """Why this rank's endpoint is on its domain, in the metadata's words."""
        if self.info.source_matched:
            return f"its address {self.source}, the control connection's"
        if self.source:
            return f"fi_getinfo's first choice (no {self.provider or 'provider'} domain has address {self.source})"
        return "fi_getinfo's first choice"

    def metadata(self) -> dict:
        facts = self.facts.get(self.rank) or self.facts.get(0) or {}
        environments = self.environments
        same = all(env == environments[0] for env in environments)
        return {
            "timed_loop": "c loop",
            "c_loop_library": self.loop.path if self.loop else None,
            "c_loop_compiler": self.loop.compiler if self.loop else None,
            "libfabric": self.loop.version if self.loop else None,
            "libfabric_found": self.loop.found if self.loop else None,
            "libfabric_library": self.loop.library if self.loop else None,
            "libfabric_apart_from": self.loop.apart_from if self.loop else None,
            "hints": {
                "provider": self.settings.get("provider") or "any (fi_getinfo's first choice)",
                "domain": self.settings.get("domain") or "any",
                "endpoint": f"FI_EP_{self.endpoint.upper()}",
                "caps": "FI_TAGGED" if self.tagged else "FI_MSG",
            },
            **facts,
            "endpoint": f"FI_EP_{self.endpoint.upper()}",
            "messages": "tagged" if self.tagged else "untagged",
            "progress": "busy-polled fi_cq_read" if self.progress == "spin" else "fi_cq_sread (waiting)",
            "rma_write_completion": "FI_DELIVERY_COMPLETE" if self.delivery else "FI_TRANSMIT_COMPLETE",
            "rma": not self.rma_reason,
            "domain_chosen_by": self.domain_chosen_by(),
            "peer_rank": self.peer,
            # each side's own choice (serve's host may open another interface than the client's)
            "domain_by_rank": {str(r): f.get("domain") for r, f in self.facts.items() if isinstance(f, dict)},
            "window": self.window,
            "fi_environment": environments[0] if same else {f"rank {r}": env for r, env in enumerate(environments)},
            "fi_universe_size": f"{UNIVERSE}, set by fabricbench (the pair's two endpoints)"
            if self.universe_set
            else "as the environment says",
        }

    def close(self) -> None:
        if self.handle and self.lib:
            self.lib.fb_close(self.handle)
        self.handle = None

    release = close  # closing the endpoint, CQ, domain and fabric is local

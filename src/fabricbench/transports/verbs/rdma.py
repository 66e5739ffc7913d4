"""What the RDMA transports share, without importing pyverbs at module level.

pyverbs is imported only by ``load_pyverbs()``, on the ranks that open a
verbs transport. Everything else here is plain data: the command-line
options (``RDMA_OPTIONS``), the queue-pair exchange record and its checks, and the GID choice
perftest makes. Those run (and are tested) on machines with no RDMA at all.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from types import SimpleNamespace

from fabricbench.argtypes import whole_number
from fabricbench.control.rendezvous import FieldReader, Fields, ProtocolError
from fabricbench.errors import FabricbenchError, PeerError, UsageError
from fabricbench.transports.options import LOOP, OptionGroup

PROTOCOL_VERSION = 1  # of the queue-pair exchange record
BAD_RKEY_HOOK = "FABRICBENCH_TEST_VERBS_BAD_RKEY"  # test hook: corrupt the rkey received from the peer
PYVERBS_DIRS_VAR = "FABRICBENCH_PYVERBS_DIRS"  # where to look for the distribution's pyverbs (colon list)
# The distributions' own site directories: python3-pyverbs installs there, built for the system Python.
DISTRO_DIRS = (
    "/usr/lib/python3/dist-packages",  # Debian, Ubuntu
    "/usr/lib64/python{v}/site-packages",  # RHEL, Fedora
    "/usr/lib/python{v}/site-packages",
)
INSTALL_HINT = (
    "Debian/Ubuntu: apt-get install python3-pyverbs rdma-core ibverbs-providers; "
    "RHEL/Fedora: dnf install python3-pyverbs rdma-core libibverbs"
)
MAX_WINDOW = 65536  # work requests in flight that a peer client may ask for
QP_TYPES = ("rc", "uc", "ud")  # --qp-type, in the order of their code in the peer handshake
UD_GRH_BYTES = 40  # a UD receive buffer holds the packet's global route header before the payload
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}  # enum ibv_mtu
GID_TYPES = {0: "IB", 1: "RoCE v1", 2: "RoCE v2"}  # enum ibv_gid_type (the extended GID query)
LINK_LAYERS = {0: "unspecified", 1: "InfiniBand", 2: "Ethernet"}


class VerbsUnavailable(FabricbenchError):
    """No rdma-core, no pyverbs or no usable device: nothing to measure, said in one line."""

    exit_code = 2


class CompletionError(PeerError):
    """A work completion with a status other than success."""


# --- command line ------------------------------------------------------------------------------------------------


def _host_arguments(group, port_flag: str) -> None:
    """The settings that describe this host's side of a verbs link."""
    group.add_argument("--device", help="RDMA device, e.g. mlx5_0 or rxe0 (default: the first with an active port)")
    group.add_argument(
        port_flag,
        dest="device_port",
        type=whole_number(port_flag),
        help="port of the device (default: its first active one)",
    )
    group.add_argument(
        "--gid-index",
        type=whole_number("--gid-index", minimum=0),
        help="GID table index (default: as perftest, a RoCE v2 IPv4-mapped GID; InfiniBand uses the LID)",
    )
    group.add_argument(
        "--inline",
        type=whole_number("--inline", minimum=0),
        default=220,
        help="send messages up to this many bytes inline, capped by the device (default 220, as perftest; 0: never)",
    )
    group.add_argument(
        "--spin",
        choices=["auto", "busy", "yield"],
        default="auto",
        help="waiting for the fabric: busy-poll, or yield the CPU between polls "
        "(auto: yield when this host runs more ranks than this rank has CPUs)",
    )


class RDMAOptions(OptionGroup):
    """The RDMA transports' options (verbs, verbs-send, perftest, perftest-send): this host's device, and on
    ``run`` the queue pairs' settings, which with the --loop choice travel in the HELLO's "verbs" section.

    On ``serve`` they describe the server's own device, so they are the server's to choose and never come
    from the client.
    """

    name = "verbs"  # its key in Plan.transport_options and its HELLO section's, as the verbs transports named it
    includes = (LOOP,)
    handshake_version = 2  # 1: --cq-mod; 2: --qp-type, --post-list, --events and --loop

    def add_arguments(self, parser, role: str) -> None:
        if role == "serve":
            _host_arguments(parser.add_argument_group("verbs and perftest transports, on this host"), "--device-port")
            return
        group = parser.add_argument_group("verbs and perftest transports")
        _host_arguments(group, "--port")
        group.add_argument(
            "--cq-mod",
            type=whole_number("--cq-mod"),
            help="bandwidth kernels signal every Nth work request; N divides --window (default: a quarter of it)",
        )
        group.add_argument(
            "--qp-type",
            choices=QP_TYPES,
            default="rc",
            help="queue pair type, as perftest's -c: rc (default), uc (WRITEs and SENDs, unacknowledged), "
            "ud (SENDs of at most the path MTU, a 40-byte GRH before each in the receive buffer); C loop only",
        )
        group.add_argument(
            "--post-list",
            type=whole_number("--post-list"),
            default=1,
            help="bandwidth kernels post N work requests per ibv_post_send call, as perftest's -l; N divides "
            "--window (default 1)",
        )
        group.add_argument(
            "--events",
            action="store_true",
            help="wait for completions on a completion channel (ibv_get_cq_event) instead of busy-polling the CQ, "
            "as perftest's -e; C loop only",
        )

    def parse(self, args, role: str) -> dict:
        given = {
            "device": args.device,
            "port": args.device_port,
            "gid_index": args.gid_index,
            "inline": args.inline,
            "spin": args.spin,
        }
        if role == "run":
            check_cq_mod(args.cq_mod, args.window)
            check_post_list(args.post_list, args.window)
            given.update(cq_mod=args.cq_mod, qp_type=args.qp_type, post_list=args.post_list, events=args.events)
        return {key: value for key, value in given.items() if value is not None}

    def encode_handshake(self, settings: dict) -> bytes:
        fields = Fields().u32(settings.get("cq_mod") or 0).u8(QP_TYPES.index(settings.get("qp_type", "rc")))
        fields.u32(settings.get("post_list") or 1).u8(int(bool(settings.get("events"))))
        return fields.u8(LOOP.code(settings)).payload()

    def decode_handshake(self, reader: FieldReader, settings: dict) -> dict:
        """The client's loop and queue-pair settings, every one range-checked; the device settings stay the
        server's own."""
        cq_mod, qp_type, post_list, events, loop = reader.u32(), reader.u8(), reader.u32(), reader.u8(), reader.u8()
        if cq_mod > MAX_WINDOW:
            raise ProtocolError(f"--cq-mod {cq_mod} out of range")
        loop_chosen = LOOP.chosen(loop)
        if qp_type >= len(QP_TYPES) or not 1 <= post_list <= MAX_WINDOW or events > 1 or loop_chosen is None:
            raise ProtocolError("bad verbs queue-pair or loop settings")
        chosen = {"qp_type": QP_TYPES[qp_type], "post_list": post_list, "events": bool(events)} | loop_chosen
        return settings | chosen | ({"cq_mod": cq_mod} if cq_mod else {})


RDMA_OPTIONS = RDMAOptions()


def check_cq_mod(cq_mod: int | None, window: int) -> None:
    """Chains of cq_mod work requests must fill the window exactly."""
    if cq_mod and window % cq_mod:
        raise UsageError(f"--cq-mod {cq_mod} must divide the window of {window} WRs (-W)")


def check_post_list(post_list: int | None, window: int) -> None:
    """A window is posted in calls of post_list work requests each."""
    if post_list and window % post_list:
        raise UsageError(f"--post-list {post_list} must divide the window of {window} WRs (-W)")


def default_cq_mod(window: int) -> int:
    """The largest divisor of the window up to a quarter of it: four signalled chains stay in flight."""
    limit = max(1, window // 4)
    return max(d for d in range(1, limit + 1) if window % d == 0)


# --- pyverbs -----------------------------------------------------------------------------------------------------


def enums_module(import_module=importlib.import_module):
    """libibverbs' enums: ``pyverbs.libibverbs_enums`` from rdma-core 59, ``pyverbs.enums`` before."""
    try:
        return import_module("pyverbs.libibverbs_enums")
    except ImportError:
        return import_module("pyverbs.enums")


def _distro_dirs() -> list[str]:
    configured = os.environ.get(PYVERBS_DIRS_VAR)
    if configured is not None:
        return [d for d in configured.split(":") if d]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return [d.format(v=version) for d in DISTRO_DIRS]


def _import_distro_pyverbs() -> str | None:
    """Import the distribution's pyverbs into a Python that does not see its site directory (a venv).

    Only the ``pyverbs`` package is taken from there, nothing else in that
    directory. Its compiled modules must match this interpreter's version;
    returns where it came from, or None when no usable copy was found.
    """
    import importlib.machinery
    import importlib.util
    import sysconfig

    for directory in _distro_dirs():
        spec = importlib.machinery.PathFinder.find_spec("pyverbs", [directory])
        if spec is None or spec.loader is None:
            continue
        suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
        package_dir = os.path.dirname(spec.origin or "")
        if not os.path.exists(os.path.join(package_dir, "device" + suffix)):
            continue  # built for another Python version
        module = importlib.util.module_from_spec(spec)
        sys.modules["pyverbs"] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules["pyverbs"]
            raise
        return package_dir
    return None


def _find_pyverbs() -> str:
    """Where pyverbs is imported from: this Python's own path, else the distribution's site directory."""
    try:
        import pyverbs  # noqa: F401

        return "this Python's path"
    except ImportError:
        pass
    try:
        origin = _import_distro_pyverbs()
    except ImportError as exc:
        raise VerbsUnavailable(f"pyverbs does not load: {exc} ({INSTALL_HINT})") from None
    if origin is None:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise VerbsUnavailable(
            f"pyverbs is not installed for this Python {version} ({INSTALL_HINT}; a venv sees it when made "
            f"from the system python3 with --system-site-packages)"
        )
    return origin


def load_pyverbs() -> SimpleNamespace:
    """pyverbs' classes and libibverbs' enums, or VerbsUnavailable saying what is missing and how to get it."""
    import ctypes.util

    if ctypes.util.find_library("ibverbs") is None:
        raise VerbsUnavailable(f"rdma-core's libibverbs is not installed ({INSTALL_HINT})")
    origin = _find_pyverbs()
    try:
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
        from pyverbs.device import Context, get_device_list
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsError
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        from pyverbs.wr import SGE, RecvWR, SendWR

        enums = enums_module()
    except ImportError as exc:
        raise VerbsUnavailable(f"pyverbs does not load: {exc} ({INSTALL_HINT})") from None
    return SimpleNamespace(
        origin=origin,
        enums_module=enums.__name__,
        e=enums,
        Context=Context,
        get_device_list=get_device_list,
        PD=PD,
        MR=MR,
        CQ=CQ,
        CQEX=CQEX,
        CqInitAttrEx=CqInitAttrEx,
        PollCqAttr=PollCqAttr,
        QP=QP,
        QPCap=QPCap,
        QPInitAttr=QPInitAttr,
        QPAttr=QPAttr,
        SGE=SGE,
        SendWR=SendWR,
        RecvWR=RecvWR,
        GID=GID,
        GlobalRoute=GlobalRoute,
        AHAttr=AHAttr,
        PyverbsError=PyverbsError,
    )


def wc_status_text(status: int) -> str:
    """libibverbs' own words for a completion status (ibv_wc_status_str)."""
    import ctypes

    try:
        function = ctypes.CDLL("libibverbs.so.1").ibv_wc_status_str
        function.restype, function.argtypes = ctypes.c_char_p, [ctypes.c_int]
        return function(int(status)).decode()
    except (OSError, AttributeError):
        return f"completion status {int(status)}"


# --- GIDs ----------------------------------------------------------------------------------------------------------


def gid_bytes(text: str) -> bytes:
    """16 bytes from a GID as pyverbs prints it (``fe80:0000:...``) or as plain hex."""
    digits = text.replace(":", "")
    if len(digits) != 32:
        raise ValueError(f"a GID has 32 hex digits, got {text!r}")
    return bytes.fromhex(digits)


def gid_text(raw: bytes) -> str:
    """pyverbs' GID notation: eight groups of four hex digits."""
    hexed = raw.hex()
    return ":".join(hexed[i : i + 4] for i in range(0, 32, 4))


def ipv4_mapped(raw: bytes) -> bool:
    """``::ffff:a.b.c.d``: the GID RoCE v2 derives from an IPv4 address."""
    return raw[:12] == bytes(10) + b"\xff\xff"


def pick_gid(entries: list[tuple[int, bytes, int]]) -> tuple[int, bytes, int]:
    """perftest's choice among (index, gid, type) entries.

    RoCE v2 first, then an IPv4-mapped GID, then the lowest index. The
    all-zero GID marks an empty slot and is never chosen.
    """
    usable = [entry for entry in entries if any(entry[1])]
    if not usable:
        raise VerbsUnavailable("the port's GID table is empty: give the netdev an address, or pass --gid-index")
    return min(usable, key=lambda e: (e[2] != 2, not ipv4_mapped(e[1]), e[0]))


# --- the queue-pair exchange -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """What a peer needs to reach this rank's queue pair and memory (perftest's exchange, plus a version).

    ``addr`` is the start of the registered memory; the peer writes into its
    second half and reads from its first, ``region`` bytes each.
    """

    lid: int
    qpn: int
    psn: int
    gid: bytes
    mtu: int  # enum ibv_mtu of this side's active MTU
    rkey: int
    addr: int
    region: int
    rd_atomic: int  # RDMA READs this side can have outstanding or serve
    version: int = PROTOCOL_VERSION


# field: (lowest, highest) allowed
_LIMITS = {
    "lid": (0, 0xFFFF),
    "qpn": (1, 0xFFFFFF),
    "psn": (0, 0xFFFFFF),
    "mtu": (1, 5),
    "rkey": (0, 0xFFFFFFFF),
    "addr": (0, 2**64 - 1),
    "region": (1, 2**48),
    "rd_atomic": (1, 255),
    "version": (PROTOCOL_VERSION, PROTOCOL_VERSION),
}


def encode_endpoint(endpoint: Endpoint) -> dict:
    """The JSON-able record sent over the control plane (no pickle: numbers and a hex string)."""
    record = {name: getattr(endpoint, name) for name in _LIMITS}
    record["gid"] = endpoint.gid.hex()
    return record


def decode_endpoint(record: object, who: str) -> Endpoint:
    """Check every field of a peer's record; anything missing, extra, mistyped or out of range is refused."""
    if not isinstance(record, dict):
        raise PeerError(f"{who} sent a malformed queue-pair record: not an object")
    expected = set(_LIMITS) | {"gid"}
    if set(record) != expected:
        odd = sorted(set(record) ^ expected)
        raise PeerError(f"{who} sent a malformed queue-pair record: unexpected or missing fields {', '.join(odd)}")
    if record["version"] != PROTOCOL_VERSION:
        raise PeerError(
            f"{who} speaks queue-pair exchange version {record['version']!r}, this fabricbench speaks "
            f"{PROTOCOL_VERSION}: run the same fabricbench version on both sides"
        )
    for name, (lowest, highest) in _LIMITS.items():
        value = record[name]
        if type(value) is not int or not lowest <= value <= highest:
            raise PeerError(f"{who} sent a malformed queue-pair record: {name}={value!r} is not in {lowest}..{highest}")
    gid = record["gid"]
    if not isinstance(gid, str) or len(gid) != 32:
        raise PeerError(f"{who} sent a malformed queue-pair record: gid must be 32 hex digits")
    try:
        raw_gid = bytes.fromhex(gid)
    except ValueError:
        raise PeerError(f"{who} sent a malformed queue-pair record: gid {gid!r} is not hex") from None
    fields = {name: record[name] for name in _LIMITS}
    if os.environ.get(BAD_RKEY_HOOK) == "1":
        fields["rkey"] ^= 0x5A5A5A5A
    return Endpoint(gid=raw_gid, **fields)

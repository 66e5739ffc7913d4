"""The verbs transports' queue pair and timed loops in C (``_verbsloop.c``), built on first use.

Through pyverbs each post and each poll is an interpreter call that builds
Python objects, a visible part of an RDMA round trip; the C loops make the
plain libibverbs calls instead, as perftest does. The library is compiled by
the one builder (``fabricbench.transports.cbuild``) against the host's libibverbs
(headers from libibverbs-dev / rdma-core-devel) and cached per source,
library and compiler. pyverbs still chooses the device, port and GID
(``verbs_link.Port``), so both loops address the fabric alike.
"""

from __future__ import annotations

import ctypes
import functools
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from fabricbench.errors import PeerError, UsageError
from fabricbench.transports.cbuild import (
    I64,
    INT,
    PTR,
    U8,
    U32,
    U64,
    CLoopUnavailable,
    Recipe,
    find_compiler,
    load_library,
    read_codes,
)
from fabricbench.transports.verbs.link import MARKERS, Port
from fabricbench.transports.verbs.rdma import MTU_BYTES, UD_GRH_BYTES, Endpoint, VerbsUnavailable, gid_text

SOURCE = Path(__file__).with_name("_verbsloop.c")
CODES = Path(__file__).with_name("_verbscodes.h")  # the numbers the C loop takes, read by both sides
QP_CODES = read_codes(CODES, "QP_")  # {"rc": 0, ...}: fb_open's queue-pair type
OP_CODES = read_codes(CODES, "OP_")  # {"write": 0, ..., "cas": 4}: fb_op_latency's and fb_stream's operation
HEADERS_HINT = "Debian/Ubuntu: apt-get install libibverbs-dev; RHEL/Fedora: dnf install rdma-core-devel"
ERROR_BYTES = 256

_u8, _u32, _u64, _i64, _int, _ptr = U8, U32, U64, I64, INT, PTR


class CEndpoint(ctypes.Structure):
    """``struct fb_endpoint``: what fb_open reports about this side's queue pair and memory."""

    _fields_ = [
        ("qpn", _u32),
        ("rkey", _u32),
        ("addr", _u64),
        ("max_inline", _u32),
        ("rd_atomic", _u32),
        ("atomics", _u32),
    ]


# Every function's (arguments, result), in _verbsloop.c's order.
SIGNATURES = {
    "fb_open": (
        [
            ctypes.c_char_p,
            _int,
            _int,
            _ptr,
            _u64,
            _u64,
            _int,
            _int,
            _int,
            _int,
            _int,
            _int,
            ctypes.POINTER(CEndpoint),
            ctypes.c_char_p,
            _int,
        ],
        _ptr,
    ),  # fmt: skip
    "fb_close": ([_ptr], None),
    "fb_error": ([_ptr], ctypes.c_char_p),
    "fb_set_yield": ([_ptr, _int], None),
    "fb_connect": ([_ptr, _u32, _u32, _u32, _int, ctypes.c_char_p, _int, _int, _int, _int, _u32, _u64, _u64], _int),
    "fb_post_receives": ([_ptr, _int], _int),
    "fb_write_latency": ([_ptr, _u64, _i64, _int, ctypes.POINTER(_u8), _ptr], _int),
    "fb_send_latency": ([_ptr, _u64, _i64, _int, _ptr], _int),
    "fb_op_latency": ([_ptr, _int, _u64, _i64, ctypes.POINTER(_u64), _ptr], _int),
    "fb_stream": ([_ptr, _int, _u64, _int, _int, _int, _int, _int, _i64, ctypes.POINTER(_u64), _ptr], _int),
    "fb_signal_done": ([_ptr, _u8], _int),
    "fb_loop_cost": ([_ptr, _i64, _ptr, _ptr, _ptr], _int),
}


@dataclass(frozen=True)
class VerbsLoop:
    """The loaded library and what it was built with (the run's metadata and ``doctor`` say so)."""

    lib: ctypes.CDLL
    path: str
    compiler: str
    libibverbs: str


def libibverbs_identity() -> str:
    """The libibverbs this process loads, as ``libibverbs 1.14.44.0 /usr/lib/.../libibverbs.so.1.14.44.0``: the
    build's cache key, so a new rdma-core gets a build of its own."""
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError as exc:
        raise VerbsUnavailable(f"rdma-core's libibverbs does not load: {exc}") from None
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libibverbs.so" in line and "/" in line}
    path = os.path.realpath(sorted(paths)[0]) if paths else "libibverbs.so.1"
    version = path.rpartition(".so.")[2] if ".so." in path else "unknown"
    return f"libibverbs {version} {path}"


@functools.cache
def _load() -> VerbsLoop | CLoopUnavailable:
    compiler = find_compiler()  # None: load_library says so
    identity = libibverbs_identity()
    recipe = Recipe(
        name="verbsloop",
        source=SOURCE,
        compiler=compiler,
        link_flags=("-libverbs",),
        key_parts=(identity,),
        missing_hint=HEADERS_HINT,
    )
    try:
        lib, path = load_library(recipe, SIGNATURES)
    except CLoopUnavailable as exc:
        return exc
    return VerbsLoop(lib=lib, path=str(path), compiler=" ".join(compiler or []), libibverbs=identity)


def load() -> VerbsLoop:
    """The C loop built against this host's libibverbs, from the cache or built now (once per process); raises
    CLoopUnavailable with one line saying why not and the fix."""
    found = _load()
    if isinstance(found, CLoopUnavailable):
        raise found
    return found


def provider(device: str, sysfs: str = "/sys/class/infiniband") -> str:
    """The kernel driver behind an RDMA device (mlx5_core, efa, ...), else its name's prefix (rxe, siw)."""
    driver = os.path.join(sysfs, device, "device", "driver")
    if os.path.islink(driver):
        return os.path.basename(os.readlink(driver))
    return device.rstrip("0123456789") or device


class CLink(Port):
    """This rank's end of a queue pair built and driven in C, on the port pyverbs chose.

    The memory is laid out as the pyverbs Link's (``Port._allocate``): a send
    half, a receive half and the flag page, in a numpy array the runner
    validates directly. pyverbs' own context is closed once the choice is
    made; the C side opens the device again and owns every resource.
    """

    def __init__(self, verbs, loop: VerbsLoop, settings: dict, region: int, send_depth: int, recv_depth: int,
                 timeout_s: float):  # fmt: skip
        self.loop, self.lib = loop, loop.lib
        self.handle = None  # before the port is chosen: a failed choice closes this object
        super().__init__(verbs, settings)
        self.qp_type = settings.get("qp_type", "rc")
        self.events = bool(settings.get("events"))
        try:
            self.facts = {"active_mtu": self.port_attr.active_mtu, "lid": self.port_attr.lid}
            self.port_facts = self.port_metadata()
            super().close()  # pyverbs' context: the C side opens its own
            self._allocate(region + (UD_GRH_BYTES if self.qp_type == "ud" else 0))
            found, error = CEndpoint(), ctypes.create_string_buffer(ERROR_BYTES)
            self.handle = self.lib.fb_open(
                self.device.encode(), self.port, QP_CODES[self.qp_type], self.memory.ctypes.data, self.memory.nbytes,
                self.region, send_depth, recv_depth, settings.get("inline", 220), int(self.events), 0,
                int(min(timeout_s, 2**31 / 1000) * 1000), ctypes.byref(found), error, ERROR_BYTES,
            )  # fmt: skip
            if not self.handle:
                raise VerbsUnavailable(error.value.decode(errors="replace"))
        except BaseException:
            self.close()
            raise
        self.qpn, self.rkey, self.max_inline = found.qpn, found.rkey, found.max_inline
        self.rd_atomic = self.reads = found.rd_atomic
        self.atomics = bool(found.atomics)
        self.psn = secrets.randbelow(1 << 24)
        self.path_mtu = self.facts["active_mtu"]

    def require_success(self, code: int) -> None:
        """A C call's return: 0, or -1 with its one line of text (a failed completion is the peer's fault)."""
        if code:
            raise PeerError(self.lib.fb_error(self.handle).decode(errors="replace"))

    def set_yield(self, yielding: bool) -> None:
        self.lib.fb_set_yield(self.handle, int(yielding))

    def endpoint(self) -> Endpoint:
        return Endpoint(
            lid=self.facts["lid"],
            qpn=self.qpn,
            psn=self.psn,
            gid=self.gid,
            mtu=self.facts["active_mtu"],
            rkey=self.rkey,
            addr=self.memory.ctypes.data,
            region=self.region,
            rd_atomic=self.rd_atomic,
        )

    def connect(self, remote: Endpoint) -> None:
        """RTR and RTS against the peer's record (or, for UD, an address handle to it)."""
        if remote.region < self.region:
            raise UsageError(f"the peer registered {remote.region} B per half, this rank needs {self.region} B")
        self.remote = remote
        self.path_mtu = min(self.facts["active_mtu"], remote.mtu)
        self.reads = min(self.rd_atomic, remote.rd_atomic)
        code = self.lib.fb_connect(
            self.handle, remote.qpn, remote.psn, self.psn, remote.lid, remote.gid, int(self.use_grh), self.gid_index,
            self.path_mtu, self.reads, remote.rkey, remote.addr, remote.region,
        )  # fmt: skip
        if code:
            message = self.lib.fb_error(self.handle).decode(errors="replace")
            raise PeerError(f"the queue pair on {self.device} did not connect to the peer's: {message}")

    def signal_done(self, relax=None) -> None:
        """Tell a waiting peer this run's transfers are complete (its data has landed): one 1-byte WRITE."""
        self.runs_signalled = self.runs_signalled % MARKERS + 1
        self.require_success(self.lib.fb_signal_done(self.handle, self.runs_signalled))

    def metadata(self) -> dict:
        return self.port_facts | {
            "gid": gid_text(self.gid),
            "path_mtu_B": MTU_BYTES.get(self.path_mtu),
            "qp_type": self.qp_type.upper(),
            "max_inline_B": self.max_inline,
            "max_rd_atomic": self.reads,
            "atomics": self.atomics,
            "completion_queue": "ibv_poll_cq in C" + (", completion channel (ibv_get_cq_event)" if self.events else ""),
            "registered_B": int(self.memory.nbytes),
        }

    def close(self) -> None:
        """The C side's QP, CQs, channel, MR, PD and context, then pyverbs'; safe to call twice."""
        if self.handle:
            self.lib.fb_close(self.handle)
            self.handle = None
        super().close()

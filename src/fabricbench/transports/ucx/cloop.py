"""The ucx transport's C loop (``_ucxloop.c``), built on first use against the host's UCX, and what it reports.

UCX is found as the host's build tools find it: ``pkg-config ucx`` (Debian's
libucx-dev, Spack, a module that sets PKG_CONFIG_PATH), else an install
under $UCX_ROOT or $UCX_HOME, else the system's paths. The build is cached
per source, compiler and UCX (``cbuild``) and made once per host under a lock.

A libucp already in this process is another library's (the MPI wheel bundles
its own UCX, loaded with mpi4py): the loop then opens in a link-map
namespace of its own (``cbuild.open_apart``), so it measures the host's UCX,
the one its headers and ucx_info describe.

UCX 1.13 has no ``UCP_EP_ATTR_FIELD_TRANSPORTS`` (ucp_ep_query returns a name
and socket addresses only), so what an endpoint chose is read from
``ucp_ep_print_info``, UCX's own description of the endpoint's configuration:
one line per lane, ``lane[0]:  2:posix/memory.0 md[2] -> md[2]/posix/sysdev[255]
am am_bw#0``, whose ``transport/device`` and operations ``parse_lanes``
reads.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fabricbench.transports.cbuild import (
    I64,
    INT,
    PTR,
    STR,
    U64,
    CLoopUnavailable,
    FoundLibrary,
    HostLibrary,
    Recipe,
    find_compiler,
    load_library,
    mapped_libraries,
    read_codes,
)
from fabricbench.transports.ucx.options import INSTALL_HINT, UCXUnavailable

SOURCE = Path(__file__).with_name("_ucxloop.c")
CODES = Path(__file__).with_name("_ucxcodes.h")  # the numbers the C loop takes, read by both sides
API_CODES = read_codes(CODES, "API_")  # {"tag": 0, "stream": 1, "am": 2}
_OPS = read_codes(CODES, "OP_")
RMA_CODES = {"put": _OPS["put"], "get": _OPS["get"], "put-bw": _OPS["put"], "get-bw": _OPS["get"]}
ROOT_VARS = ("UCX_ROOT", "UCX_HOME")
SYSTEM_HEADER = "/usr/include/ucp/api/ucp.h"
ADDRESS_BYTES = 1 << 14  # the largest worker address carried (every transport of a host with many NICs fits)
RKEY_BYTES = 1 << 12  # the largest packed rkey carried
DESCRIBE_BYTES = 1 << 14
ERROR_BYTES = 256
MARKER = "/libucp"
# A lane as ucp_ep_print_info writes it: "lane[1]:  8:cma/memory.0 md[5] -> md[5]/cma/sysdev[255] rma_bw#0 wireup"
LANE = re.compile(r"lane\[(\d+)\]:\s*(?:\d+:)?([\w-]+)/([^\s.]+)(?:\.\d+)?\b(.*)")
OPERATIONS = re.compile(r"\b(am|am_bw|rma|rma_bw|amo|tag|wireup|keepalive|rkey_ptr|cm)(?:#\d+)?\b")

_int, _ptr, _str, _u64, _i64 = INT, PTR, STR, U64, I64
_bytes = ctypes.c_char_p

# Every function's (arguments, result), in _ucxloop.c's order.
SIGNATURES = {
    "fb_error": ([_ptr], _str),
    "fb_version": ([], _str),
    "fb_close": ([_ptr], None),
    "fb_open": ([_int, _int, _ptr, _u64, _u64, _int, ctypes.c_char_p, _int], _ptr),
    "fb_address": ([_ptr, ctypes.c_char_p, _int], _int),
    "fb_rkey": ([_ptr, ctypes.c_char_p, _int, ctypes.POINTER(_u64)], _int),
    "fb_connect": ([_ptr, _bytes, _int], _int),
    "fb_listen": ([_ptr, _bytes], _int),
    "fb_accept": ([_ptr], _int),
    "fb_connect_sockaddr": ([_ptr, _bytes, _int], _int),
    "fb_set_yield": ([_ptr, _int], None),
    "fb_set_remote": ([_ptr, _bytes, _int, _u64], _int),
    "fb_describe": ([_ptr, ctypes.c_char_p, _int], _int),
    "fb_pingpong": ([_ptr, _u64, _i64, _int, _ptr], _int),
    "fb_stream": ([_ptr, _u64, _int, _i64, _int, _int, _int, _ptr], _int),
    "fb_rma": ([_ptr, _int, _u64, _int, _i64, _ptr], _int),
    "fb_signal_done": ([_ptr], _int),
    "fb_wait_done": ([_ptr], _int),
    "fb_handshake": ([_ptr], _int),
}


@dataclass(frozen=True)
class Lane:
    """One lane of an endpoint: its UCX transport, device, and what UCP uses it for (am, rma_bw, tag, ...)."""

    index: int
    transport: str
    device: str
    operations: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.transport}/{self.device}"


def parse_lanes(text: str) -> list[Lane]:
    """The lanes in ucp_ep_print_info's text, in its order; [] where it lists none."""
    lanes = []
    for line in text.splitlines():
        found = LANE.search(line)
        if found:
            index, transport, device, rest = found.groups()
            ops = tuple(dict.fromkeys(OPERATIONS.findall(rest.partition("->")[2] or rest)))
            lanes.append(Lane(int(index), transport, device, ops))
    return lanes


def lanes_summary(lanes: list[Lane]) -> str:
    """The transports and devices an endpoint uses, each once in lane order: ``posix/memory, cma/memory``;
    ``no lanes reported`` where there are none."""
    return ", ".join(dict.fromkeys(lane.name for lane in lanes)) or "no lanes reported"


def used_for(lanes: list[Lane], operations: tuple[str, ...]) -> str:
    """The lanes that carry any of ``operations`` (``("rma", "rma_bw")`` for put and get), as lanes_summary says
    them; all lanes where none is marked so."""
    chosen = [lane for lane in lanes if set(lane.operations) & set(operations)]
    return lanes_summary(chosen or lanes)


def version_text(said: str) -> str:
    """ucp_get_version_string()'s answer as printed ("1.13.1"), 'unknown' where empty."""
    return said.strip() or "unknown"


UCX = HostLibrary("ucx", "ucp/api/ucp.h", "libucp.so*", ("-lucp", "-lucs"), name="UCX")


def find_ucx(environ=os.environ) -> FoundLibrary:
    """Where UCX is, in the order of the module docstring. The system's paths are the answer when nothing else
    is: a missing header there is the build's one-line refusal, with the packages to install."""
    return UCX.from_pkg_config() or UCX.from_roots(environ, ROOT_VARS, UCXUnavailable) or UCX.system()


@dataclass(frozen=True)
class UCXLoop:
    """The loaded library and what it was built with (the run's metadata and ``doctor`` say so)."""

    lib: ctypes.CDLL
    path: str
    compiler: str
    found: str  # how UCX was found
    version: str  # ucp_get_version_string() of the libucp loaded
    library: str  # the libucp file the loop calls
    apart_from: str = ""  # the other libucp in this process, where the loop was opened apart from it


@functools.cache
def _load() -> UCXLoop | CLoopUnavailable | UCXUnavailable:
    try:
        found = find_ucx()
    except UCXUnavailable as exc:
        return exc
    recipe = Recipe(
        name="ucxloop",
        source=SOURCE,
        compiler=find_compiler(),
        compile_flags=found.compile_flags,
        link_flags=found.link_flags,
        key_parts=(found.how,),
        missing_hint=INSTALL_HINT,
    )
    before = mapped_libraries(MARKER)
    try:
        lib, path = load_library(recipe, SIGNATURES, apart=bool(before))
    except CLoopUnavailable as exc:
        return exc
    after = mapped_libraries(MARKER)
    return UCXLoop(
        lib=lib,
        path=str(path),
        compiler=" ".join(recipe.compiler or []),
        found=found.how,
        version=version_text(lib.fb_version().decode(errors="replace")),
        library=", ".join(sorted(after - before)) or ", ".join(sorted(after)),
        apart_from=", ".join(sorted(before)) if after - before else "",
    )


def load() -> UCXLoop:
    """The C library built against this host's UCX, from the cache or built now (once per process); raises
    UCXUnavailable with one line saying why not and the fix."""
    found = _load()
    if isinstance(found, CLoopUnavailable):
        raise UCXUnavailable(f"the ucx transport needs UCX and a C compiler: {found}")
    if isinstance(found, UCXUnavailable):
        raise found
    return found

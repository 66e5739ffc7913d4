"""The ofi transport's C library (``_ofiloop.c``): found, built on first use against the host's libfabric, loaded.

libfabric has no maintained Python binding, so there is no Python loop to
fall back to: without a libfabric to build against, the transport says so in
one line (OFIUnavailable, exit 2) before any rank starts.

Where libfabric is found, in order: ``pkg-config libfabric`` (what
``module load libfabric`` sets up on a Cray EX system), ``$LIBFABRIC_ROOT``
or ``$FI_ROOT``, the system's own paths (``libfabric-dev`` on Debian,
``libfabric-devel`` on RHEL), and last Cray's ``/opt/cray/libfabric/*``. A
prefix outside the system paths is linked with an rpath, so the ranks load
the libfabric the loop was built against. The build is cached per source,
compiler and libfabric (``cbuild``) and made once per host under a lock.
"""

from __future__ import annotations

import _ctypes
import ctypes
import functools
import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fabricbench.transports.cbuild import (
    I64,
    INT,
    PTR,
    STR,
    U8,
    U32,
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
from fabricbench.transports.ofi.options import INSTALL_HINT, MESSAGES, PROGRESS, OFIUnavailable

SOURCE = Path(__file__).with_name("_ofiloop.c")
CODES = Path(__file__).with_name("_oficodes.h")  # the numbers the C loop takes, read by both sides
ENDPOINT_CODES = read_codes(CODES, "EP_")  # {"rdm": 0, "msg": 1}: fb_probe's and fb_open's endpoint type
_RMA = read_codes(CODES, "OP_")  # fb_rma's operations
ROOT_VARS = ("LIBFABRIC_ROOT", "FI_ROOT")
CRAY_GLOB = "/opt/cray/libfabric/*"
SYSTEM_HEADER = "/usr/include/rdma/fabric.h"
RMA_CODES = {"put": _RMA["write"], "get": _RMA["read"], "put-bw": _RMA["write"], "get-bw": _RMA["read"]}
NAME_BYTES = 256  # _ofiloop.c's NAME_BYTES: the largest endpoint address
CONTROL_BYTES = 64  # after the two halves: the acknowledgement and DONE messages' buffer
ERROR_BYTES = 256
SURVEY_BYTES = 1 << 16
# fi_mr_mode bits (rdma/fabric.h), for the metadata's words
MR_MODE_BITS = {
    1 << 2: "FI_MR_LOCAL",
    1 << 3: "FI_MR_RAW",
    1 << 4: "FI_MR_VIRT_ADDR",
    1 << 5: "FI_MR_ALLOCATED",
    1 << 6: "FI_MR_PROV_KEY",
    1 << 7: "FI_MR_MMU_NOTIFY",
    1 << 8: "FI_MR_RMA_EVENT",
    1 << 9: "FI_MR_ENDPOINT",
    1 << 10: "FI_MR_HMEM",
    1 << 11: "FI_MR_COLLECTIVE",
}

_u8, _u32, _u64, _i64, _int, _ptr, _str = U8, U32, U64, I64, INT, PTR, STR


class OFIInfo(ctypes.Structure):
    """``struct fb_ofi_info``: what fi_getinfo chose and this side's address."""

    _fields_ = [
        ("provider", ctypes.c_char * 64),
        ("fabric", ctypes.c_char * 128),
        ("domain", ctypes.c_char * 128),
        ("inject_size", _u64),
        ("max_msg_size", _u64),
        ("tx_size", _u64),
        ("rx_size", _u64),
        ("link_speed", _u64),
        ("rma", _u32),
        ("mr_mode", _u32),
        ("version", _u32),
        ("name_len", _u32),
        ("source_matched", _u32),
        ("name", _u8 * NAME_BYTES),
    ]

    def facts(self) -> dict:
        """What was chosen, as the metadata and doctor say it."""
        return {
            "provider": self.provider.decode(errors="replace"),
            "fabric": self.fabric.decode(errors="replace"),
            "domain": self.domain.decode(errors="replace"),
            "inject_size_B": int(self.inject_size),
            "max_msg_size_B": int(self.max_msg_size),
            "tx_queue": int(self.tx_size),
            "rx_queue": int(self.rx_size),
            "link_speed_bps": int(self.link_speed),  # the NIC's link as the provider reports it; 0: none
            "rma": bool(self.rma),
            "mr_mode": mr_mode_words(self.mr_mode),
        }

    def address(self) -> bytes:
        return bytes(self.name[: min(int(self.name_len), NAME_BYTES)])


# Every function's (arguments, result), in _ofiloop.c's order.
SIGNATURES = {
    "fb_error": ([_ptr], _str),
    "fb_version": ([], _u32),
    "fb_default_env": ([_str, _str], _int),
    "fb_probe": ([_str, _str, _int, _int, _int, ctypes.POINTER(OFIInfo)], _int),
    "fb_survey": ([ctypes.c_char_p, _int], _int),
    "fb_close": ([_ptr], None),
    "fb_open": (
        [_str, _str, _str, _int, _int, _int, _int, _ptr, _u64, _u64, _int, _int, ctypes.POINTER(OFIInfo), _str, _int],
        _ptr,
    ),
    "fb_connect": ([_ptr, _ptr, _u32, _int], _int),
    "fb_local_key": ([_ptr, ctypes.POINTER(_u64), ctypes.POINTER(_u64)], _int),
    "fb_set_remote": ([_ptr, _u64, _u64], None),
    "fb_pingpong": ([_ptr, _u64, _i64, _int, _ptr], _int),
    "fb_stream": ([_ptr, _u64, _int, _i64, _int, _int, _int, _ptr], _int),
    "fb_rma": ([_ptr, _int, _u64, _int, _i64, _ptr], _int),
    "fb_delivery_complete": ([_ptr], _int),
    "fb_signal_done": ([_ptr], _int),
    "fb_wait_done": ([_ptr], _int),
}


def mr_mode_words(mode: int) -> str:
    """fi_mr_mode bits as their names, ``FI_MR_LOCAL | FI_MR_VIRT_ADDR``; ``none`` for 0."""
    words = [name for bit, name in MR_MODE_BITS.items() if mode & bit]
    return " | ".join(words) or "none"


def version_text(version: int) -> str:
    """fi_version()'s (major << 16 | minor) as ``1.17``."""
    return f"{version >> 16}.{version & 0xFFFF}"


LIBFABRIC = HostLibrary("libfabric", "rdma/fabric.h", "libfabric.so*", ("-lfabric",))
Found = FoundLibrary


def find_libfabric(environ=os.environ, cray_glob: str = CRAY_GLOB, system_header: str = SYSTEM_HEADER) -> Found:
    """Where libfabric is, in the order of the module docstring. The system's paths are the answer when nothing
    else is: a missing header there is the build's one-line refusal."""
    found = LIBFABRIC.from_pkg_config() or LIBFABRIC.from_roots(environ, ROOT_VARS, OFIUnavailable)
    if found:
        return found
    if Path(system_header).is_file() or not glob.glob(cray_glob):
        return LIBFABRIC.system()
    for root in sorted(glob.glob(cray_glob), reverse=True):  # the newest version first
        found = LIBFABRIC.under(root, root)
        if found:
            return found
    return LIBFABRIC.system()


@dataclass(frozen=True)
class OFILoop:
    """The loaded library and what it was built with (the run's metadata and ``doctor`` say so)."""

    lib: ctypes.CDLL
    path: str
    compiler: str
    found: str  # how libfabric was found
    version: str  # fi_version() of the libfabric loaded
    library: str  # the libfabric file the loop calls
    apart_from: str = ""  # the other libfabric in this process, where the loop was opened apart from it

    def probe(self, settings: dict) -> OFIInfo:
        """What fi_getinfo chooses for ``settings`` (the ofi option group's), opening nothing; OFIUnavailable
        naming the providers there are when none matches."""
        info = OFIInfo()
        code = self.lib.fb_probe(*hints(settings), ctypes.byref(info))
        if code:
            raise OFIUnavailable(f"libfabric {self.version} has {no_match(settings)}: {error_text(code)}")
        return info

    def survey(self) -> list[dict]:
        """Every provider fi_getinfo returns here, once per (provider, fabric, domain, endpoint type)."""
        out = ctypes.create_string_buffer(SURVEY_BYTES)
        used = self.lib.fb_survey(out, SURVEY_BYTES)
        if used < 0:
            raise OFIUnavailable(f"fi_getinfo lists no provider here: {error_text(used)}")
        return parse_survey(out.value.decode(errors="replace"))


def hints(settings: dict) -> tuple:
    """fb_probe's and fb_open's hint arguments from the ofi option group's settings: provider, domain (bytes), the
    endpoint type's code, tagged (1/0), waiting (1/0)."""
    return (
        (settings.get("provider") or "").encode(),
        (settings.get("domain") or "").encode(),
        ENDPOINT_CODES[settings.get("endpoint", "rdm")],
        int(settings.get("messages", "tagged") == MESSAGES[0]),
        int(settings.get("progress", "spin") == PROGRESS[1]),
    )


def no_match(settings: dict) -> str:
    """How a refusal names what was asked: ``no provider "cxi" with RDM endpoints and tagged messages``."""
    provider = settings.get("provider")
    what = f'no provider "{provider}"' if provider else "no provider"
    domain = f' on domain "{settings["domain"]}"' if settings.get("domain") else ""
    calls = "tagged messages" if settings.get("messages", "tagged") == "tagged" else "untagged messages"
    return f"{what}{domain} with {settings.get('endpoint', 'rdm').upper()} endpoints and {calls}"


def error_text(code: int) -> str:
    """A negative libfabric return as its words (FI_ENODATA: ``No data available``)."""
    return os.strerror(-code) if 0 < -code < 256 else f"libfabric error {code}"


def parse_survey(text: str) -> list[dict]:
    """fb_survey's lines (provider, fabric, domain, endpoint, RMA, atomics, HMEM, inject size, MR mode; tab
    separated), one record per distinct (provider, fabric, domain, endpoint), in fi_getinfo's order."""
    seen, records = set(), []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 9:
            continue
        provider, fabric, domain, endpoint, rma, atomic, hmem, inject, mr_mode = fields
        key = (provider, fabric, domain, endpoint)
        if key in seen:
            continue
        seen.add(key)
        records.append(
            {
                "provider": provider,
                "fabric": fabric,
                "domain": domain,
                "endpoint": endpoint,
                "FI_RMA": rma == "1",
                "FI_ATOMIC": atomic == "1",
                "FI_HMEM": hmem == "1",
                "inject_size_B": int(inject) if inject.isdigit() else None,
                "mr_mode": mr_mode.strip() or "none",
            }
        )
    return records


def survey_lines(records: list[dict]) -> list[str]:
    """doctor's lines: ``tcp;ofi_rxm rdm, domain eth0, fabric 192.0.2.0/24: FI_RMA, inject 64 B, MR [...]``."""
    lines = []
    for r in records:
        caps = ", ".join(cap for cap in ("FI_RMA", "FI_ATOMIC", "FI_HMEM") if r[cap]) or "no RMA, atomics or HMEM"
        inject = f"inject {r['inject_size_B']} B" if r["inject_size_B"] is not None else "inject size unknown"
        lines.append(
            f"{r['provider']} {r['endpoint']}, domain {r['domain']}, fabric {r['fabric']}: {caps}, {inject}, "
            f"MR mode {r['mr_mode']}"
        )
    return lines


@functools.cache
def _load() -> OFILoop | CLoopUnavailable | OFIUnavailable:
    try:
        found = find_libfabric()
    except OFIUnavailable as exc:
        return exc
    compiler = find_compiler()
    recipe = Recipe(
        name="ofiloop",
        source=SOURCE,
        compiler=compiler,
        compile_flags=found.compile_flags,
        link_flags=found.link_flags,
        key_parts=(found.how,),
        missing_hint=INSTALL_HINT,
    )
    # A libfabric already in this process is another library's (the MPI wheel's own copy, loaded with mpi4py):
    # binding to it would measure that one, not the host's, so the loop then opens in a namespace of its own.
    before = mapped_libfabric()
    with staying_put():
        try:
            lib, path = load_library(recipe, SIGNATURES, apart=bool(before))
        except CLoopUnavailable as exc:
            return exc
        after = mapped_libfabric()
        apart_from = ""
        if before:
            if after - before:
                apart_from = ", ".join(sorted(before))
            else:  # the host's libfabric is the one already loaded (Cray MPICH's): one copy is enough
                _ctypes.dlclose(lib._handle)
                try:
                    lib, path = load_library(recipe, SIGNATURES)
                except CLoopUnavailable as exc:
                    return exc
    return OFILoop(
        lib=lib,
        path=str(path),
        compiler=" ".join(compiler or []),
        found=found.how,
        version=version_text(lib.fb_version()),
        library=", ".join(sorted(after - before)) or ", ".join(sorted(after)),
        apart_from=apart_from,
    )


def current_cpu() -> int:
    """The CPU this thread runs on (sched_getcpu), -1 where the C library cannot say."""
    try:
        return int(ctypes.CDLL(None).sched_getcpu())
    except (AttributeError, OSError):
        return -1


@contextmanager
def staying_put() -> Iterator[None]:
    """Put this thread back on its CPU where loading a library moved it, its affinity mask left as it was.

    Debian's libfabric links PSM (libpsm-infinipath1), whose libinfinipath.so.4 calibrates its cycle counter in a
    load-time constructor: it pins the thread to CPU 0, sleeps, and restores the mask, which leaves the thread on
    CPU 0. Every rank that loads the loop then busy-polls on CPU 0, and where the other CPUs are busy the scheduler
    leaves two ranks there, taking turns: on a 2-core host that halved bw at 1 MiB and more.
    """
    try:
        mask = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        yield
        return
    cpu = current_cpu()
    try:
        yield
    finally:
        try:
            if cpu in mask and current_cpu() != cpu and os.sched_getaffinity(0) == mask:
                os.sched_setaffinity(0, {cpu})
                os.sched_setaffinity(0, mask)
        except OSError:
            pass  # a mask this process may not set: it stays where the library left it


def mapped_libfabric(maps: str = "/proc/self/maps") -> set[str]:
    """The libfabric files this process has mapped (their real paths); empty where /proc cannot say."""
    return mapped_libraries("/libfabric", maps)


def load() -> OFILoop:
    """The C library built against this host's libfabric, from the cache or built now (once per process); raises
    OFIUnavailable with one line saying why not and the fix."""
    found = _load()
    if isinstance(found, CLoopUnavailable):
        raise OFIUnavailable(f"the ofi transport needs libfabric and a C compiler: {found}")
    if isinstance(found, OFIUnavailable):
        raise found
    return found

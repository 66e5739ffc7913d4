"""The mpi and mpi-rma transports' timed loops in C (``_mpiloop.c``), built on first use.

A Python loop adds the interpreter's cost to every MPI call, a visible part of a small message's time; the C loops
make the same calls without it. They must link the very MPI library mpi4py loaded, and only that MPI's own compiler
wrapper knows how, so the library is compiled at run time, not at install time, by the one builder of every C loop
(``fabricbench.transports.cbuild``), and cached per source, library and wrapper. It is plain C called through
ctypes, which releases the GIL for each call: the runner's watchdog thread keeps running while a loop does.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from fabricbench.errors import PeerError
from fabricbench.transports import cbuild
from fabricbench.transports.cbuild import CLoopUnavailable  # also the mpi transports' name for it

SOURCE = Path(__file__).with_name("_mpiloop.c")
CODES = Path(__file__).with_name("_mpicodes.h")
C_OPS = cbuild.read_codes(CODES, "OP_")  # fb_collective's code of each collective kernel, as the C loop numbers them
COLL_MODES = cbuild.read_codes(CODES, "COLL_")  # fb_collective's mode bits: "persistent", "send_in_place", ...
RMA_OPS = cbuild.read_codes(CODES, "RMA_OP_")  # fb_rma_sync's one-sided operations ("put", "get_acc", "fop", ...)
RMA_SYNCS = cbuild.read_codes(CODES, "RMA_SYNC_")  # fb_rma_sync's synchronisations, OSU's -s names ("flush_local")
NO_WRAPPER = "no MPI compiler wrapper found (set MPICC, or install the MPI's development package)"

_HANDLE = _FLAG = ctypes.c_int  # MPI_Fint, ranks, flags and codes are C ints
_BUFFER = ctypes.c_void_p  # buffers and the int64 times array, passed as addresses
_INT64 = ctypes.c_longlong  # sizes, counts and iterations
# Each function's arguments, in _mpiloop.c's order; every function returns an int.
SIGNATURES = {
    "fb_pingpong": [_HANDLE, _FLAG, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _INT64, _BUFFER],
    "fb_window": [_HANDLE, *[_FLAG] * 5, _BUFFER, _BUFFER, _BUFFER, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_collective": [_HANDLE, _FLAG, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_pingpong_synced": [_HANDLE, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _INT64, _BUFFER],
    "fb_fork_idle": [_FLAG, _BUFFER],
    "fb_pingpong_mt": [_HANDLE, *[_FLAG] * 4, _BUFFER, _INT64, _INT64, _BUFFER],
    "fb_rma_sync": [_HANDLE, *[_FLAG] * 7, *[_BUFFER] * 3, _INT64, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_canary": [_HANDLE, _HANDLE, *[_FLAG] * 3, *[_BUFFER] * 4, _INT64, _FLAG, _FLAG, _BUFFER, _FLAG, _BUFFER]
    + [_INT64, _BUFFER],
    "fb_congestor": [*[_HANDLE] * 3, _FLAG, _FLAG, *[_BUFFER] * 3, _INT64, _FLAG, _BUFFER],
    "fb_persistent_collectives": [],
    "fb_neighbor": [_HANDLE, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _INT64, _BUFFER],
    "fb_icollective": [_HANDLE, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _FLAG, _FLAG, _INT64, _BUFFER, _BUFFER],
    "fb_fan": [_HANDLE, _FLAG, _FLAG, _BUFFER, _FLAG, *[_BUFFER] * 3, _INT64, _FLAG, _INT64, _BUFFER],
}


def require_success(code: int, what: str) -> None:
    """A C loop's return: 0, or the MPI error code (with MPI_ERRORS_RETURN) that ended it."""
    if code:
        raise PeerError(f"{what}: the C loop ended with MPI error {code}")


@dataclass(frozen=True)
class CLoop:
    """The loaded library, and what it was built with and for (the run's metadata and ``doctor`` say so)."""

    lib: ctypes.CDLL
    path: str
    wrapper: str
    built_against: str
    persistent_collectives: bool


def find_wrapper() -> list[str] | None:
    """The compiler wrapper: $MPICC (split with shlex, may carry flags), else `mpicc` beside the running Python (a venv
    with PyPI's MPICH or Open MPI wheel has it in sys.prefix/bin), else `mpicc` on PATH, else Cray's `cc` when
    CRAYPE_VERSION is set.

    The wrapper beside the interpreter comes before PATH's because it belongs to the MPI that mpi4py most likely
    loaded; on a Cray the compiler driver is the MPI's wrapper.
    """
    if command := shlex.split(os.environ.get("MPICC", "")):
        return command
    for found in (shutil.which("mpicc", path=str(Path(sys.prefix, "bin"))), shutil.which("mpicc")):
        if found:
            return [found]
    if os.environ.get("CRAYPE_VERSION") and (cray := shutil.which("cc")):
        return [cray]
    return None


def _wrapper_flags(wrapper: list[str]) -> str:
    """What the wrapper adds to the compiler (MPICH's -show, Open MPI's --showme), or "" if neither answers: the
    same wrapper path pointed at another MPI or compiler then gets a build of its own."""
    for option in ("-show", "--showme"):
        if (said := cbuild.tool_output([*wrapper, option])) is not None:
            return said
    return ""


def _described(lib: ctypes.CDLL, path: Path, wrapper: list[str], library_version: str) -> CLoop:
    # The version's first line, whitespace collapsed; Open MPI's string carries its C terminator.
    first_line = library_version.partition("\0")[0].partition("\n")[0]
    return CLoop(
        lib=lib,
        path=str(path),
        wrapper=shlex.join(wrapper),
        built_against=" ".join(first_line.split()),
        persistent_collectives=bool(lib.fb_persistent_collectives()),
    )


def wrapper_identity() -> str | None:
    """What the wrapper adds to the compiler, the build's cache key beside the library (a run of the wrapper);
    None when there is no wrapper."""
    wrapper = find_wrapper()
    return None if wrapper is None else _wrapper_flags(wrapper)


def load(library_version: str, identity: str | None = None) -> CLoop:
    """The C loop built against this MPI: from the cache when a build for this source, library and wrapper
    exists, else built now (``cbuild``). ``identity``: ``wrapper_identity()`` where another rank of this host has
    asked it already (None: asked here). Raises CLoopUnavailable."""
    wrapper = find_wrapper()
    if wrapper is None:
        raise CLoopUnavailable(NO_WRAPPER)
    recipe = cbuild.Recipe(
        name="mpiloop",
        source=SOURCE,
        compiler=wrapper,
        key_parts=(library_version,),
        missing_hint="install the MPI's development package, or set MPICC to its compiler wrapper",
        identity=_wrapper_flags(wrapper) if identity is None else identity,
        compiler_hint="set MPICC to the MPI's compiler wrapper",
    )
    lib, path = cbuild.load_library(recipe, {name: (args, ctypes.c_int) for name, args in SIGNATURES.items()})
    return _described(lib, path, wrapper, library_version)

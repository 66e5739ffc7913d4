"""The mpi and mpi-rma transports' timed loops in C (``_mpiloop.c``), built on first use.

A Python loop adds the interpreter's cost to every MPI call, a visible part of a small message's time; the C loops
make the same calls without it. They must link the very MPI library mpi4py loaded, and only that MPI's own compiler
wrapper knows how, so the library is compiled at run time, not at install time, and cached per source, library and
wrapper. It is plain C called through ctypes, which releases the GIL for each call: the runner's watchdog thread
keeps running while a loop does.
"""

from __future__ import annotations

import _ctypes
import ctypes
import fcntl
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("_mpiloop.c")
BUILD_TIMEOUT_S = 120
SHOW_TIMEOUT_S = 30
OUTPUT_CHARS = 240
NO_WRAPPER = "no MPI compiler wrapper found (set MPICC, or install the MPI's development package)"

_HANDLE = _FLAG = ctypes.c_int  # MPI_Fint, ranks, flags and codes are C ints
_BUFFER = ctypes.c_void_p  # buffers and the int64 times array, passed as addresses
_INT64 = ctypes.c_longlong  # sizes, counts and iterations
# Each function's arguments, in _mpiloop.c's order; every function returns an int.
SIGNATURES = {
    "fb_pingpong": [_HANDLE, _FLAG, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _INT64, _BUFFER],
    "fb_window": [_HANDLE, _FLAG, _FLAG, _FLAG, _FLAG, _BUFFER, _BUFFER, _BUFFER, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_collective": [_HANDLE, _FLAG, _FLAG, _FLAG, _BUFFER, _BUFFER, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_rma": [_HANDLE, _FLAG, _FLAG, _BUFFER, _INT64, _FLAG, _INT64, _BUFFER],
    "fb_persistent_collectives": [],
}


@dataclass(frozen=True)
class CLoop:
    """The loaded library, and what it was built with and for (the run's metadata and ``doctor`` say so)."""

    lib: ctypes.CDLL
    path: str
    wrapper: str
    built_against: str
    persistent_collectives: bool


class CLoopUnavailable(Exception):
    """The C loop cannot be built or loaded here; the message is one line: why, and the fix."""


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


def _cache_dir() -> Path:
    """Per user and across runs, where other tools keep their caches: one build serves every later run."""
    if root := os.environ.get("FABRICBENCH_CACHE_DIR"):
        return Path(root, "mpiloop")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "fabricbench", "mpiloop")


def _wrapper_flags(wrapper: list[str]) -> str:
    """What the wrapper adds to the compiler (MPICH's -show, Open MPI's --showme), or "" if neither answers: the
    same wrapper path pointed at another MPI or compiler then gets a build of its own."""
    for option in ("-show", "--showme"):
        try:
            done = subprocess.run([*wrapper, option], capture_output=True, text=True, timeout=SHOW_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return done.stdout
    return ""


def _cache_key(library_version: str, wrapper: list[str]) -> str:
    """sha256 of what the build depends on: a new source, library or wrapper gets a new build."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    for part in (library_version, shlex.join(wrapper), _wrapper_flags(wrapper)):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def _one_line(text: str) -> str:
    """A tool's complaint as one line: its lines with words in them (Open MPI frames its messages in rules of
    dashes), joined, and cut after OUTPUT_CHARS."""
    said = " ".join(line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)) or "no output"
    return said if len(said) <= OUTPUT_CHARS else said[: OUTPUT_CHARS - 3] + "..."


def _build(wrapper: list[str], target: Path) -> None:
    """Compile into `target` through a temporary name and os.replace: a rank that finds the file finds it whole."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _compile(wrapper, partial)
        os.replace(partial, target)
    except OSError as exc:
        raise CLoopUnavailable(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


def _compile(wrapper: list[str], output: Path) -> None:
    """Run the wrapper in a process group of its own: a wrapper that is a script leaves its compiler running when it
    is killed alone, and that compiler would write `output` after it was cleaned away."""
    name = Path(wrapper[0]).name
    command = [*wrapper, "-O2", "-shared", "-fPIC", "-o", str(output), str(SOURCE)]
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
    except OSError as exc:
        raise CLoopUnavailable(
            f"cannot run {wrapper[0]}: {exc.strerror or exc} (set MPICC to the MPI's compiler wrapper)"
        ) from exc
    with process:
        try:
            stdout, stderr = process.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise CLoopUnavailable(f"{name} did not finish within {BUILD_TIMEOUT_S} s") from exc
    if process.returncode != 0:
        raise CLoopUnavailable(f"{name} failed: {_one_line(stderr or stdout)}")


def _open(path: Path) -> ctypes.CDLL:
    """The library with every function's argument and result types set; OSError or AttributeError if it is not one
    of ours (another machine's, a stale or foreign file)."""
    lib = ctypes.CDLL(str(path))
    try:
        for function_name, argtypes in SIGNATURES.items():
            function = getattr(lib, function_name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
    except AttributeError:
        # Unloaded, or the dynamic loader would hand this one back for a rebuilt file at the same path.
        _ctypes.dlclose(lib._handle)
        raise
    return lib


def _open_or_build(wrapper: list[str], path: Path) -> ctypes.CDLL:
    """The library at `path`, built first if missing; one that does not load is rebuilt once."""
    if not path.exists():
        _build(wrapper, path)
    try:
        return _open(path)
    except (OSError, AttributeError):
        _build(wrapper, path)
    try:
        return _open(path)
    except (OSError, AttributeError) as exc:
        path.unlink(missing_ok=True)  # the next run then builds afresh
        raise CLoopUnavailable(f"the library {Path(wrapper[0]).name} built does not load: {exc}") from exc


@contextmanager
def _locked_cache() -> Iterator[Path | None]:
    """The cache directory under an exclusive lock, so that the ranks on one host build once and the others wait and
    load that build; None when the directory cannot be created or written."""
    directory = _cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = os.open(directory / ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        yield None
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield directory if os.access(directory, os.W_OK) else None
    finally:
        os.close(lock)  # which releases the lock


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


def load(library_version: str) -> CLoop:
    """The C loop built against this MPI: from the cache when a build for this source and library exists, else built
    now. Raises CLoopUnavailable."""
    wrapper = find_wrapper()
    if wrapper is None:
        raise CLoopUnavailable(NO_WRAPPER)
    name = f"_mpiloop-{_cache_key(library_version, wrapper)[:16]}.so"
    with _locked_cache() as directory:
        if directory is not None:
            path = directory / name
            return _described(_open_or_build(wrapper, path), path, wrapper, library_version)
    # An unwritable cache: a build of this process's own, removed again if it fails.
    private = Path(tempfile.mkdtemp(prefix="fabricbench-mpiloop-"))
    path = private / name
    try:
        return _described(_open_or_build(wrapper, path), path, wrapper, library_version)
    except CLoopUnavailable:
        shutil.rmtree(private, ignore_errors=True)
        raise

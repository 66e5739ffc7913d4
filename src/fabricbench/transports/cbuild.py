"""The one builder of fabricbench's C loops: compile a C source against a library on first use, cache it, load it.

Every timed loop in C (the MPI loops, the tcp loops, the verbs and ofi loops) must match what this host has: the MPI
that mpi4py loaded, this Python's ABI, the installed libibverbs or libfabric. So each is compiled at run time, not at
install time, and cached per user by everything the build depends on (the source and the headers of fabricbench's
it includes, the compiler and its identity, the flags and the library's version), so a new library, compiler or
fabricbench builds anew and every later run loads the same file. Ranks on one host build once, under a lock.
Whatever goes wrong is one line in ``CLoopUnavailable``, and the caller falls back to its Python loop or stops.

Every loop includes the one runtime header, ``fb_runtime.h`` beside this module (the clock, the per-iteration stamp,
the error buffer), found on the include path this builder gives. The numeric codes Python passes a loop live in a
small header beside it, which the loop includes and Python reads (``read_codes``): one list for both sides.
"""

from __future__ import annotations

import _ctypes
import ctypes
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

BUILD_TIMEOUT_S = 120
QUERY_TIMEOUT_S = 30  # --version, -show: answered at once, or the tool is stuck
OUTPUT_CHARS = 240
COMPILERS = ("cc", "gcc", "clang")
NO_COMPILER = "no C compiler found (install gcc, or set CC)"

RUNTIME_HEADER = Path(__file__).with_name("fb_runtime.h")
# `#include "name"`: a header of fabricbench's own, looked up beside the including file, then beside RUNTIME_HEADER.
_LOCAL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
# A codes header's one kind of line, once its comments are gone: `#define NAME number`.
_CODE_LINE = re.compile(r"#define[ \t]+([A-Z][A-Z0-9_]*)[ \t]+(\d+)")

# A header the compiler cannot find: gcc's and clang's wordings (the compiler runs with LC_ALL=C).
_MISSING_HEADER = (
    re.compile(r"fatal error: ([^\s:]+): No such file or directory"),
    re.compile(r"fatal error: '([^']+)' file not found"),
)

Loaded = TypeVar("Loaded")


class CLoopUnavailable(Exception):
    """The C loop cannot be built or loaded here; the message is one line: why, and the fix."""


@dataclass(frozen=True)
class Recipe:
    """What to build and what the build depends on.

    The command is ``compiler -O2 -shared -fPIC -I<RUNTIME_HEADER's folder> *compile_flags -o OUT source
    *link_flags``; the built file is ``<cache>/<name>/<name>-<key><suffix>``.
    """

    name: str  # the cache subfolder and the file-name prefix
    source: Path
    compiler: list[str] | None  # find_compiler()'s answer, or an MPI wrapper; None: there is none
    link_flags: tuple[str, ...] = ()  # after the source: libraries to link
    key_parts: tuple[str, ...] = ()  # what else the build depends on, e.g. the library's version and file
    missing_hint: str = ""  # how to install what provides a missing header
    compile_flags: tuple[str, ...] = ()  # before the output, e.g. an include directory
    suffix: str = ".so"
    identity: str | None = None  # what identifies the compiler; None: the first line of its --version
    compiler_hint: str = "set CC to a C compiler"  # the fix when the compiler cannot be run


def find_compiler() -> list[str] | None:
    """The C compiler: $CC (split with shlex, may carry flags), else cc, gcc or clang on PATH; None if none."""
    if command := shlex.split(os.environ.get("CC", "")):
        return command
    for name in COMPILERS:
        if found := shutil.which(name):
            return [found]
    return None


def cache_dir(name: str) -> Path:
    """Per user and across runs, where other tools keep their caches: one build serves every later run."""
    if root := os.environ.get("FABRICBENCH_CACHE_DIR"):
        return Path(root, name)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "fabricbench", name)


def _run(command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a compiler or wrapper in a process group of its own, in the C locale; on timeout kill the whole group:
    a wrapper that is a script leaves its compiler running when it is killed alone, and that compiler would write
    its output after it was cleaned away. Raises OSError and subprocess.TimeoutExpired."""
    process = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=os.environ | {"LC_ALL": "C"},  # messages in the words missing_header() reads
    )
    with process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def tool_output(command: Sequence[str]) -> str | None:
    """What a query such as ``cc --version`` prints, or None when it cannot run, fails or hangs."""
    try:
        done = _run(command, QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


@dataclass(frozen=True)
class FoundLibrary:
    """Where a C loop's build takes a host library from: its flags, and how it was found (the metadata says so)."""

    how: str  # "pkg-config ucx 1.13.1", "$LIBFABRIC_ROOT=/opt/libfabric", "system paths", a Cray module's root
    compile_flags: tuple[str, ...] = ()
    link_flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostLibrary:
    """How a C loop finds a host library (libfabric, UCX): by pkg-config, else under a root an environment variable
    names, else wherever the compiler looks by itself."""

    package: str  # pkg-config's name, and the name a refusal gives it
    header: str  # under include/: "rdma/fabric.h"
    shared: str  # a glob under lib64/ or lib/: "libfabric.so*"
    libs: tuple[str, ...]  # the -l flags
    name: str = ""  # how a refusal names it, where not as pkg-config does ("UCX")

    def system(self) -> FoundLibrary:
        return FoundLibrary("system paths", (), self.libs)

    def from_pkg_config(self) -> FoundLibrary | None:
        """pkg-config's flags, an rpath added for each -L, where pkg-config knows the package."""
        if not shutil.which("pkg-config"):
            return None
        version = (tool_output(["pkg-config", "--modversion", self.package]) or "").strip()
        if not version:
            return None
        cflags = (tool_output(["pkg-config", "--cflags", self.package]) or "").split()
        libs = (tool_output(["pkg-config", "--libs", self.package]) or " ".join(self.libs)).split()
        rpath = [f"-Wl,-rpath,{flag[2:]}" for flag in libs if flag.startswith("-L")]
        return FoundLibrary(f"pkg-config {self.package} {version}", tuple(cflags), tuple(libs + rpath))

    def under(self, root: str, how: str) -> FoundLibrary | None:
        """An install under ``root`` (include/HEADER and lib64 or lib), linked with an rpath; None where none is."""
        include = Path(root, "include")
        if not (include / self.header).is_file():
            return None
        for lib in ("lib64", "lib"):
            directory = os.path.join(root, lib)
            if list(Path(directory).glob(self.shared)):
                return FoundLibrary(how, (f"-I{include}",), (f"-L{directory}", f"-Wl,-rpath,{directory}", *self.libs))
        return None

    def from_roots(self, environ, names: Sequence[str], unavailable: type[Exception]) -> FoundLibrary | None:
        """The install under the first of ``names`` the environment sets; ``unavailable`` where it holds none."""
        for name in names:
            root = environ.get(name)
            if root:
                found = self.under(root, f"${name}={root}")
                if found is None:
                    shared = self.shared.rstrip("*")
                    raise unavailable(
                        f"${name}={root} holds no {self.name or self.package} (include/{self.header} and lib/{shared})"
                    )
                return found
        return None


def compiler_identity(compiler: Sequence[str]) -> str:
    """The first line of ``compiler --version`` ("" when it does not answer), asked once per process."""
    return _identity(tuple(compiler))


@functools.cache
def _identity(compiler: tuple[str, ...]) -> str:
    said = tool_output([*compiler, "--version"]) or ""
    return said.strip().partition("\n")[0]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CLoopUnavailable(f"cannot read {path}: {exc.strerror or exc}") from exc


def local_headers(source: Path) -> list[Path]:
    """The headers of fabricbench's own that `source` includes (``#include "name"``), and those they include, each
    once, in the order first met: looked up beside the including file, then beside RUNTIME_HEADER, as the
    compiler does with the -I this builder gives. One found in neither is left to the compiler to name.
    Raises CLoopUnavailable when a file cannot be read."""
    found: list[Path] = []
    pending = [source]
    while pending:
        including = pending.pop(0)
        for name in _LOCAL_INCLUDE.findall(_read(including).decode(errors="replace")):
            for folder in (including.parent, RUNTIME_HEADER.parent):
                if (header := folder / name).is_file():
                    if header not in found:
                        found.append(header)
                        pending.append(header)
                    break
    return found


def cache_key(recipe: Recipe) -> str:
    """sha256 of everything the build depends on: a new source, header of fabricbench's, compiler, flag or library
    gets a new build. Raises CLoopUnavailable when the source or a header cannot be read."""
    digest = hashlib.sha256(_read(recipe.source))
    for header in local_headers(recipe.source):
        digest.update(b"\0" + header.name.encode() + b"\0" + _read(header))
    compiler = recipe.compiler or []
    identity = recipe.identity if recipe.identity is not None else compiler_identity(compiler)
    fixed = (shlex.join(compiler), identity, shlex.join(recipe.compile_flags), shlex.join(recipe.link_flags))
    for part in (*fixed, recipe.suffix, *recipe.key_parts):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()


def missing_header(output: str) -> str | None:
    """The header a failed compile could not find, from gcc's or clang's message; None for any other failure."""
    for pattern in _MISSING_HEADER:
        if found := pattern.search(output):
            return found.group(1)
    return None


def _one_line(text: str) -> str:
    """A tool's complaint as one line: its lines with words in them (Open MPI frames its messages in rules of
    dashes), joined, and cut after OUTPUT_CHARS."""
    said = " ".join(line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)) or "no output"
    return said if len(said) <= OUTPUT_CHARS else said[: OUTPUT_CHARS - 3] + "..."


def _compile(recipe: Recipe, compiler: list[str], output: Path) -> None:
    flags = ["-O2", "-shared", "-fPIC", f"-I{RUNTIME_HEADER.parent}", *recipe.compile_flags]
    command = [*compiler, *flags, "-o", str(output), str(recipe.source), *recipe.link_flags]
    name = Path(compiler[0]).name
    try:
        done = _run(command, BUILD_TIMEOUT_S)
    except OSError as exc:
        raise CLoopUnavailable(f"cannot run {compiler[0]}: {exc.strerror or exc} ({recipe.compiler_hint})") from exc
    except subprocess.TimeoutExpired as exc:
        raise CLoopUnavailable(f"{name} did not finish within {BUILD_TIMEOUT_S} s") from exc
    if done.returncode == 0:
        return
    said = done.stderr or done.stdout
    if header := missing_header(said):
        hint = f" ({recipe.missing_hint})" if recipe.missing_hint else ""
        raise CLoopUnavailable(f"cannot build the {recipe.name} C loop: {header} not found{hint}")
    raise CLoopUnavailable(f"{name} failed: {_one_line(said)}")


def _build(recipe: Recipe, compiler: list[str], target: Path) -> None:
    """Compile into `target` through a temporary name and os.replace: a rank that finds the file finds it whole."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        _compile(recipe, compiler, partial)
        os.replace(partial, target)
    except OSError as exc:
        raise CLoopUnavailable(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        partial.unlink(missing_ok=True)


# What an opener raises for a file that is not a build of this recipe (another machine's, stale, truncated).
_NOT_OURS = (OSError, AttributeError, ImportError)


def _open_or_build(recipe: Recipe, compiler: list[str], path: Path, opener: Callable[[Path], Loaded]) -> Loaded:
    """The build at `path`, built first if missing; one that does not load is rebuilt once."""
    if not path.exists():
        _build(recipe, compiler, path)
    try:
        return opener(path)
    except _NOT_OURS:
        _build(recipe, compiler, path)
    try:
        return opener(path)
    except _NOT_OURS as exc:
        path.unlink(missing_ok=True)  # the next run then builds afresh
        said = _one_line(str(exc))
        raise CLoopUnavailable(f"the library {Path(compiler[0]).name} built does not load: {said}") from exc


@contextmanager
def _locked_cache(name: str) -> Iterator[Path | None]:
    """The recipe's cache directory under an exclusive lock, so that the ranks on one host build once and the
    others wait and load that build; None when the directory cannot be created or written."""
    directory = cache_dir(name)
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


def _load(recipe: Recipe, opener: Callable[[Path], Loaded]) -> tuple[Loaded, Path]:
    """The recipe's build opened: from the cache when one exists, else built now. Raises CLoopUnavailable."""
    if not recipe.compiler:
        raise CLoopUnavailable(NO_COMPILER)
    compiler = recipe.compiler
    name = f"{recipe.name}-{cache_key(recipe)[:16]}{recipe.suffix}"
    with _locked_cache(recipe.name) as directory:
        if directory is not None:
            path = directory / name
            return _open_or_build(recipe, compiler, path, opener), path
    # An unwritable cache: a build of this process's own, removed again if it fails.
    private = Path(tempfile.mkdtemp(prefix=f"fabricbench-{recipe.name}-"))
    path = private / name
    try:
        return _open_or_build(recipe, compiler, path, opener), path
    except CLoopUnavailable:
        shutil.rmtree(private, ignore_errors=True)
        raise


def _defines(header: Path) -> dict[str, int]:
    text = header.read_text()
    # Comments out, their line breaks kept, so that a line's number is the file's.
    text = re.sub(r"/\*.*?\*/", lambda comment: "\n" * comment.group().count("\n"), text, flags=re.DOTALL)
    defines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not (line := line.strip()):
            continue
        if not (match := _CODE_LINE.fullmatch(line)) or match[1] in defines:
            raise ValueError(f"{header}:{number}: not a new '#define NAME number' line: {line!r}")
        defines[match[1]] = int(match[2])
    return defines


def read_codes(header: Path, prefix: str) -> dict[str, int]:
    """The codes a C loop takes, from the header it includes: every ``#define PREFIX_NAME number``, as
    {"name": number} (``OP_REDUCE_SCATTER`` is "reduce_scatter"). A codes header holds comments and such lines
    only; any other line, a name defined twice, a prefix with no name or two names of one prefix with one number
    is a ValueError: the two sides could no longer agree."""
    codes = {name[len(prefix) :].lower(): code for name, code in _defines(header).items() if name.startswith(prefix)}
    if not codes or len(set(codes.values())) != len(codes):
        raise ValueError(f"{header}: the {prefix}* codes must exist and differ: {codes}")
    return codes


# ctypes' types under the names the C loops' signature tables use
U8, U32, U64, I64, INT, PTR, STR = (
    ctypes.c_uint8,
    ctypes.c_uint32,
    ctypes.c_uint64,
    ctypes.c_int64,
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_char_p,
)
LM_ID_NEWLM = -1  # dlmopen: a new link-map namespace
RTLD_NOW = 2


def mapped_libraries(marker: str, maps: str = "/proc/self/maps") -> set[str]:
    """The shared libraries whose path holds ``marker`` ("/libfabric", "/libucp") that this process has mapped,
    as their real paths; empty where /proc cannot say. A loop whose library is already mapped as another copy
    (an MPI wheel's bundled one) opens apart from it (``open_apart``)."""
    try:
        with open(maps) as lines:
            return {os.path.realpath(line.split()[-1]) for line in lines if marker in line and ".so" in line}
    except OSError:
        return set()


def open_apart(path: Path) -> ctypes.CDLL:
    """A shared library opened in a link-map namespace of its own (glibc's dlmopen), so that it binds to its own
    dependencies even where this process has already loaded another library of the same soname (an MPI wheel's
    bundled libfabric.so.1). OSError when dlmopen is missing or refuses."""
    libc = ctypes.CDLL(None)
    try:
        dlmopen, dlerror = libc.dlmopen, libc.dlerror
    except AttributeError:
        raise OSError("this C library has no dlmopen") from None
    dlmopen.restype, dlmopen.argtypes = ctypes.c_void_p, [ctypes.c_long, ctypes.c_char_p, ctypes.c_int]
    dlerror.restype = ctypes.c_char_p
    handle = dlmopen(LM_ID_NEWLM, str(path).encode(), RTLD_NOW)
    if not handle:
        said = dlerror()
        raise OSError(said.decode(errors="replace") if said else f"dlmopen of {path} failed")
    return ctypes.CDLL(str(path), handle=handle)


def load_library(
    recipe: Recipe, signatures: dict[str, tuple[list[Any], Any]], apart: bool = False
) -> tuple[ctypes.CDLL, Path]:
    """The recipe built as a plain shared library and opened with ctypes, each function in `signatures`
    (name -> (argtypes, restype)) typed; and the built file. ``apart``: opened in a namespace of its own
    (``open_apart``). Raises CLoopUnavailable."""

    def opener(path: Path) -> ctypes.CDLL:
        lib = open_apart(path) if apart else ctypes.CDLL(str(path))
        try:
            for function_name, (argtypes, restype) in signatures.items():
                function = getattr(lib, function_name)
                function.argtypes, function.restype = argtypes, restype
        except AttributeError:
            # Unloaded, or the dynamic loader would hand this one back for a rebuilt file at the same path.
            _ctypes.dlclose(lib._handle)
            raise
        return lib

    return _load(recipe, opener)


def load_extension(recipe: Recipe, module_name: str) -> tuple[ModuleType, Path]:
    """The recipe built as a Python extension module and imported as `module_name` (also entered in
    sys.modules); and the built file. The recipe gives Python's include directory and extension suffix.
    Raises CLoopUnavailable."""

    def opener(path: Path) -> ModuleType:
        loader = importlib.machinery.ExtensionFileLoader(module_name, str(path))
        spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        sys.modules[module_name] = module
        return module

    return _load(recipe, opener)

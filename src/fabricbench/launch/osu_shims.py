"""Stand-ins for OSU 7.4's binaries: OSU's options in, OSU's text out, fabricbench's tidy table on the side.

``fabricbench osu-shims DIR`` writes one small script per OSU benchmark that
fabricbench covers (``osu_latency``, ``osu_allreduce``, ...). Each execs this
Python with ``-m fabricbench osu NAME "$@"``, so under ``mpiexec -n 2
osu_latency ...`` every rank is a rank of a launched job, exactly as
``fabricbench run`` is. ``translate`` turns OSU's command line into a
``fabricbench run`` command line (pure, unit-tested); the CLI then runs it.

What each OSU option becomes:

- ``-m [MIN:]MAX``, ``-i``, ``-x``, ``-W``, ``-c``: fabricbench's own -m, -i, -x, -W, -c;
- ``-f``: ``--osu-full`` (a collective's Min/Max/Iterations columns);
- ``-z [LIST]``: ``--osu-percentiles LIST`` (OSU's default 50,90,99);
- ``-T TYPE``: ``--osu-datatype TYPE``: what a reduction sums (MPI_CHAR, MPI_INT or MPI_FLOAT), the others'
  MPI_CHAR; any other type is refused;
- ``-d cpu``: host buffers;
- ``-d cuda``: CuPy GPU buffers, ``--buffer cuda`` (mpi's ``-d cuda``): a collective's every buffer, as
  OSU puts them; a point-to-point test's where its buffer positionals say so, as a CUDA build of OSU 7.4
  reads them: ``D D`` both on the GPU, ``H H`` both in host memory. fabricbench puts both ends in one
  place, so a mixed pair (``H D``) and managed memory (``M``) are refused, and so is ``-d cuda`` with no
  pair (OSU would then use host memory, which is not what ``-d cuda`` is usually written for). The
  one-sided tests refuse ``-d cuda``: mpi-rma's windows are host memory;
- the ``H|D|M H|D|M`` buffer positionals without ``-d cuda``: a CPU build of OSU 7.4 reads them only
  when built with an accelerator, and otherwise ignores them, so ``D D`` (which ReFrame's hpctestlib
  always passes) runs host buffers there as here;
- ``-w allocate`` and ``-s flush`` (one-sided): the window and synchronisation fabricbench uses.

What OSU 7.4 runs without being told, the shims run too: a reduction (``osu_allreduce``, ``osu_reduce``,
``osu_reduce_scatter``) sums MPI_CHAR unless ``-T`` names MPI_INT or MPI_FLOAT (``osu_datatype``); and the sizes are
OSU's sweep less those that hold no element, which OSU skips (``osu_sizes``): ``osu_latency`` starts at 1 B, not
0, and a minimum of 0 in ``-m`` leaves OSU's own. The tidy table goes under one results root (``results_root``),
never into the working directory.

Anything else OSU has (``-d rocm``, ``-w create``, ``-T mpi_int`` on osu_latency, ``-T all``, an option this
benchmark does not list) is refused in one line naming it, exit 2: never a silent change of meaning.
"""

from __future__ import annotations

import datetime
import os
import re
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from fabricbench import __version__
from fabricbench.collectives import neighbor
from fabricbench.errors import UsageError
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.plan import parse_size_range
from fabricbench.transports import transport_class

OSU_VERSION = "7.4"
RESULTS_VAR = "FABRICBENCH_OSU_RESULTS"  # the results root: a shim's results folders go under it
OSU_DATATYPE = "MPI_CHAR"  # what OSU 7.4 moves (and a reduction sums) without -T
MARKER = "# fabricbench osu-shims:"  # the line that tells our own shim from a real OSU binary in DIR
DEFAULT_PERCENTILES = "50,90,99"  # OSU's -z without a list
DEVICES = ("cuda", "managed", "rocm", "openacc", "sycl")  # OSU's accelerator kinds (-d)
BUFFER_PLACES = ("H", "D", "M")  # OSU's host, device and managed buffer positionals


@dataclass(frozen=True)
class Option:
    letter: str
    long: str
    value: str  # "": a flag; "required"; "optional" (attached only, as getopt's "z::")
    help: str


OPTIONS = {
    o.letter: o
    for o in (
        Option("m", "message-size", "required", "[MIN:]MAX  message sizes, powers of two from MIN to MAX"),
        Option("i", "iterations", "required", "ITER  timed iterations per size (default: OSU's)"),
        Option("x", "warmup", "required", "WARMUP  untimed iterations per size (default: OSU's)"),
        Option("W", "window-size", "required", "SIZE  messages in flight (default 64)"),
        Option("c", "validation", "", "check received data outside the timed region (Pass/Fail column)"),
        Option("f", "full", "", "Min, Max and Iterations columns"),
        Option("z", "tail-lat", "optional", "[LIST]  tail latency columns, e.g. 50,90,99 (default)"),
        Option("T", "type", "required", "TYPE  datatype: the one fabricbench moves for this benchmark"),
        Option("d", "accelerator", "required", "TYPE  buffers: cpu, or cuda (CuPy GPU memory: --buffer cuda)"),
        Option("w", "win-option", "required", "OPTION  window creation: allocate"),
        Option("s", "sync-option", "required", "OPTION  synchronisation: flush"),
        Option("t", "num_test_calls", "required", "CALLS  MPI_Test calls during the dummy compute (default 0)"),
        Option("h", "help", "", "this help"),
        Option("v", "version", "", "OSU's version line"),
    )
}
LONG = {o.long: o for o in OPTIONS.values()}


@dataclass(frozen=True)
class Benchmark:
    name: str
    transport: str
    kernel: str
    letters: str  # the options OSU 7.4's --help lists for it that fabricbench honours (h, v always)
    buffers: bool = False  # takes OSU's two buffer-location positionals (the point-to-point tests)
    min_size: int = 1  # OSU's default smallest size (MIN_MESSAGE_SIZE; 0 for its point-to-point latency tests)
    skips_empty: bool = True  # OSU skips a size that holds no element (osu_latency's 0 B, 1 B of MPI_FLOAT)
    method: str = ""  # mpi's --method where OSU's calls are not the default ones: "nonblocking" for osu_i*

    @property
    def gpu_buffers(self) -> bool:
        """Whether its transport can put the buffers on a GPU (OSU's -d cuda)."""
        return any(place.on_gpu for place in transport_class(self.transport).buffer_places)


_LAT, _BW, _MR = "mixczTd", "mixWczTd", "mixWcTd"
_COLL, _RMA_LAT, _RMA_BW = "mixfczTd", "mixczdws", "mixWcdws"
_NBC = _COLL + "t"  # osu_i*: also -t, the MPI_Test calls within the dummy compute
# The collectives whose osu_i* program runs on fabricbench's kernel of the same name (osu_iallreduce: allreduce);
# the neighbourhood ones' too (osu_ineighbor_alltoall).
_NONBLOCKING = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter", *sorted(neighbor.NAMES))
BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark("osu_latency", "mpi", "latency", _LAT, True, min_size=0),
        Benchmark("osu_bw", "mpi", "bw", _BW, True),
        Benchmark("osu_bibw", "mpi", "bibw", _BW, True),
        Benchmark("osu_mbw_mr", "mpi", "msgrate", _MR, True),
        Benchmark("osu_multi_lat", "mpi", "multi-latency", _LAT, True, min_size=0, skips_empty=False),  # sends 0 B
        Benchmark("osu_allreduce", "mpi", "allreduce", _COLL),
        Benchmark("osu_allgather", "mpi", "allgather", _COLL),
        Benchmark("osu_alltoall", "mpi", "alltoall", _COLL),
        Benchmark("osu_bcast", "mpi", "bcast", _COLL),
        Benchmark("osu_reduce", "mpi", "reduce", _COLL),
        Benchmark("osu_reduce_scatter", "mpi", "reduce_scatter", _COLL),
        Benchmark("osu_barrier", "mpi", "barrier", "ixfzd"),
        *(Benchmark(f"osu_{name}", "mpi", name, _COLL) for name in sorted(neighbor.NAMES)),
        *(Benchmark(f"osu_i{name}", "mpi", name, _NBC, method="nonblocking") for name in _NONBLOCKING),
        Benchmark("osu_ibarrier", "mpi", "barrier", "ixfzdt", method="nonblocking"),
        Benchmark("osu_put_latency", "mpi-rma", "put", _RMA_LAT, True),
        Benchmark("osu_get_latency", "mpi-rma", "get", _RMA_LAT, True),
        Benchmark("osu_put_bw", "mpi-rma", "put-bw", _RMA_BW, True),
        Benchmark("osu_get_bw", "mpi-rma", "get-bw", _RMA_BW, True),
    )
}
# The one value fabricbench honours for an option that names how OSU works; anything else is refused.
ONLY_VALUE = {"w": ("allocate", "MPI_Win_allocate windows"), "s": ("flush", "lock/flush synchronisation")}


def benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise UsageError(f"no OSU benchmark {name!r} here; known: {', '.join(BENCHMARKS)}") from None


@dataclass
class Request:
    """What one OSU command line asked for, checked."""

    bench: Benchmark
    values: dict  # letter -> value ("" for a flag given)
    action: str = "run"  # "run", "help" or "version"
    buffer: str = "host"  # fabricbench's --buffer: "host" or "cuda" (-d cuda)


def parse(name: str, argv: list[str]) -> Request:
    """OSU's getopt-style command line for benchmark NAME; UsageError (one line) for anything not honoured."""
    bench = benchmark(name)
    allowed = bench.letters + "hv"
    values: dict[str, str] = {}
    positionals: list[str] = []
    items = list(argv)
    while items:
        token = items.pop(0)
        if token == "--":
            positionals += items
            break
        if token.startswith("--"):
            key, eq, attached = token[2:].partition("=")
            option = LONG.get(key)
            if option is None or option.letter not in allowed:
                raise UsageError(f"{name}: fabricbench cannot honour option {token.split('=')[0]}")
            if option.value == "required" and not eq:
                if not items:
                    raise UsageError(f"{name}: option --{key} needs a value")
                attached = items.pop(0)
            elif option.value == "" and eq:
                raise UsageError(f"{name}: option --{key} takes no value")
            values[option.letter] = attached
            continue
        if not token.startswith("-") or token == "-":
            positionals.append(token)
            continue
        cluster = token[1:]
        while cluster:
            letter, cluster = cluster[0], cluster[1:]
            option = OPTIONS.get(letter)
            if option is None or letter not in allowed:
                raise UsageError(f"{name}: fabricbench cannot honour option -{letter}")
            if option.value == "required":
                if not cluster:
                    if not items:
                        raise UsageError(f"{name}: option -{letter} needs a value")
                    cluster = items.pop(0)
                values[letter], cluster = cluster, ""
            elif option.value == "optional":
                # getopt takes an optional value only attached (-z50,90); a separate list is accepted too.
                if not cluster and items and re.fullmatch(r"[0-9.,]+", items[0]):
                    cluster = items.pop(0)
                values[letter], cluster = cluster, ""
            else:
                values[letter] = ""
    if "h" in values:
        return Request(bench, values, "help")
    if "v" in values:
        return Request(bench, values, "version")
    _check_positionals(bench, positionals)
    _check_values(bench, values)
    return Request(bench, values, buffer=_buffer(bench, values.get("d"), positionals))


def _check_positionals(bench: Benchmark, positionals: list[str]) -> None:
    if not positionals:
        return
    if not bench.buffers:
        raise UsageError(
            f"{bench.name}: unexpected argument {positionals[0]!r} (buffer locations are for point-to-point tests)"
        )
    if len(positionals) != 2 or any(p not in BUFFER_PLACES for p in positionals):
        raise UsageError(f"{bench.name}: buffer locations are two of H, D, M (e.g. D D), got {' '.join(positionals)}")


def _check_values(bench: Benchmark, values: dict) -> None:
    device = values.get("d")
    if device is not None and device not in ("cpu", "cuda"):
        if device in DEVICES:
            raise UsageError(f"{bench.name}: -d {device}: fabricbench's GPU buffers are CUDA's only (-d cuda)")
        raise UsageError(f"{bench.name}: -d {device!r}: not a buffer kind (cpu, or one of {', '.join(DEVICES)})")
    for letter, (only, what) in ONLY_VALUE.items():
        if letter in values and values[letter] != only:
            given = values[letter]
            raise UsageError(f"{bench.name}: -{letter} {given}: fabricbench uses {what} only (-{letter} {only})")


def _buffer(bench: Benchmark, device: str | None, positionals: list[str]) -> str:
    """fabricbench's --buffer for OSU's -d and buffer positionals (both already checked one by one)."""
    if device != "cuda":
        return "host"  # -d cpu, or no -d: the positionals are ignored, as a CPU build of OSU ignores them
    if not bench.gpu_buffers:
        raise UsageError(f"{bench.name}: -d cuda: fabricbench's one-sided windows are host memory only")
    if not bench.buffers:
        return "cuda"  # a collective: OSU puts every buffer on the GPU
    if not positionals:
        raise UsageError(
            f"{bench.name}: -d cuda without buffer locations means H H (host memory) to OSU: "
            "give D D for GPU buffers, or H H"
        )
    if "M" in positionals:
        raise UsageError(f"{bench.name}: -d cuda {' '.join(positionals)}: fabricbench has no managed (M) buffers")
    if positionals[0] != positionals[1]:
        raise UsageError(
            f"{bench.name}: -d cuda {' '.join(positionals)}: fabricbench puts both buffers in one place (D D or H H)"
        )
    return "cuda" if positionals[0] == "D" else "host"


def results_root(env: dict | None = None) -> str:
    """The folder under which every shim run's results folder goes: $FABRICBENCH_OSU_RESULTS, else the per-user
    data directory ($XDG_DATA_HOME/fabricbench/osu, or ~/.local/share/fabricbench/osu). Never the working
    directory, which OSU leaves as it was."""
    env = os.environ if env is None else env
    if env.get(RESULTS_VAR):
        return env[RESULTS_VAR]
    data = env.get("XDG_DATA_HOME", "")
    if not os.path.isabs(data):  # the XDG spec: a relative XDG_DATA_HOME is ignored
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "fabricbench", "osu")


def results_dir(name: str, now: datetime.datetime | None = None, env: dict | None = None) -> str:
    """Where a shim's tidy table goes: a new folder, named after the benchmark and the time, under results_root."""
    now = now or datetime.datetime.now()
    return os.path.join(results_root(env), f"fabricbench-osu-{name}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}")


def osu_datatype(bench: Benchmark, values: dict) -> str | None:
    """The --osu-datatype that runs what OSU runs: -T's type as given, else OSU's MPI_CHAR where the kernel on its
    own moves another (a reduction sums float32 in ``fabricbench run``); None where nothing need be said."""
    if "T" in values:
        return values["T"]
    own = get_kernel(bench.kernel).osu_datatype
    return OSU_DATATYPE if "T" in bench.letters and own and own != OSU_DATATYPE else None


def osu_sizes(bench: Benchmark, values: dict) -> str | None:
    """The -m that sweeps the sizes OSU 7.4 prints for this command line, or None where fabricbench's default
    sweep is already OSU's.

    OSU doubles from its minimum (``-m``'s, or its default where ``-m`` gives none or 0, which OSU refuses
    silently) and skips a size that holds no element of the datatype: osu_latency prints from 1 B, a
    reduction of MPI_FLOAT from 4 B."""
    if "m" not in bench.letters:
        return None
    kernel = get_kernel(bench.kernel).with_datatype(osu_datatype(bench, values) or "")
    given = values.get("m")
    if given is None:
        lo, hi = -1, kernel.max_size
    elif given.endswith(":") and given.count(":") == 1:  # OSU's "-m MIN:": the default maximum
        lo, hi = parse_size_range(f"{given}{max(kernel.max_size, 1)}")
    else:
        lo, hi = parse_size_range(given)
    first = bench.min_size if lo <= 0 else lo
    if bench.skips_empty:
        while first < kernel.elem_bytes:
            first = first * 2 if first else 1
    if lo < 0 and first == kernel.min_size:
        return given  # fabricbench starts where OSU does
    return f"{first}:{hi}"


def run_argv(request: Request, out_dir: str) -> list[str]:
    """The ``fabricbench run`` command line that does what the OSU command line asked."""
    bench, values = request.bench, request.values
    argv = ["run", "-t", bench.transport, "-k", bench.kernel, "--format", "osu", "--label", bench.name]
    if bench.method:
        argv += ["--method", bench.method]
    if "t" in values:
        argv += ["--test-calls", values["t"]]
    sizes = osu_sizes(bench, values)
    if sizes is not None:
        argv += ["-m", sizes]
    for letter, flag in (("i", "-i"), ("x", "-x"), ("W", "-W")):
        if letter in values:
            argv += [flag, values[letter]]
    if "c" in values:
        argv.append("-c")
    if "f" in values:
        argv.append("--osu-full")
    if "z" in values:
        argv += ["--osu-percentiles", values["z"] or DEFAULT_PERCENTILES]
    datatype = osu_datatype(bench, values)
    if datatype:
        argv += ["--osu-datatype", datatype]
    if request.buffer != "host":
        argv += ["--buffer", request.buffer]
    return [*argv, "--out", out_dir]


def usage(bench: Benchmark) -> str:
    places = " [H|D|M H|D|M]" if bench.buffers else ""
    lines = [
        f"Usage: {bench.name} [options]{places}",
        f"fabricbench {__version__}'s stand-in for OSU {OSU_VERSION}'s {bench.name}:",
        "OSU's options, OSU's text on stdout. fabricbench's tidy table goes to a new results folder, named on",
        f"stderr, under ${RESULTS_VAR}, else $XDG_DATA_HOME/fabricbench/osu (~/.local/share/fabricbench/osu);",
        "the working directory is left as it was.",
        "",
        "Options:",
    ]
    for letter in bench.letters + "hv":
        option = OPTIONS[letter]
        value, _, text = option.help.partition("  ") if option.value else ("", "", option.help)
        lines.append(f"  -{letter}, --{option.long} {value}".ljust(38) + text)
    if bench.buffers and not bench.gpu_buffers:
        lines.append("Buffer locations are read as a CPU build of OSU reads them: host memory.")
    elif bench.buffers:
        lines.append("Buffer locations: with -d cuda, D D puts both in GPU memory and H H both in host memory;")
        lines.append("without it they are read as a CPU build of OSU reads them: host memory.")
    return "\n".join(lines)


def translate(argv: list[str]) -> list[str] | None:
    """``fabricbench osu NAME OSU-ARGS``: the ``run`` command line, or None once --help or -v was answered."""
    from fabricbench.launch.launcher import env_rank

    if not argv:
        raise UsageError(f"osu needs a benchmark name: one of {', '.join(BENCHMARKS)}")
    request = parse(argv[0], argv[1:])
    if request.action != "run":
        if env_rank() == 0:  # under mpiexec every rank parses; one answers, as OSU's rank 0 does
            print(usage(request.bench) if request.action == "help" else version_text(request.bench))
        return None
    return run_argv(request, results_dir(request.bench.name))


def version_text(bench: Benchmark) -> str:
    from fabricbench.report import osu

    title = osu.title(bench.transport, bench.kernel, nonblocking=bench.method == "nonblocking")
    return f"{title} (fabricbench {__version__})"


def script(name: str, python: str) -> str:
    return (
        "#!/bin/sh\n"
        f"{MARKER} {name} runs fabricbench with OSU {OSU_VERSION}'s options and text; --help says more.\n"
        f'exec {shlex.quote(python)} -m fabricbench osu {name} "$@"\n'
    )


def write_shims(directory: str, python: str | None = None) -> list[Path]:
    """One executable per benchmark in DIRECTORY (made if missing); a file there that is not ours is kept."""
    python = os.path.abspath(python or sys.executable)
    folder = Path(directory)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make {directory}: {exc.strerror}") from None
    for name in BENCHMARKS:
        path = folder / name
        if path.exists() and not _is_ours(path):
            raise UsageError(f"{path} exists and is not a fabricbench shim (a real OSU binary?): choose another DIR")
    written = []
    for name in BENCHMARKS:
        path = folder / name
        try:
            path.write_text(script(name, python))
            path.chmod(0o755)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror}") from None
        written.append(path)
    return written


def _is_ours(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return MARKER.encode() in f.read(512)
    except OSError:
        return False

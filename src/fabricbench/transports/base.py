"""The contract between fabricbench and a transport.

A transport connects the ranks and turns (kernel, size) into a Case. A Case
owns its buffers and its timed loop and nothing else: the runner does warm-up,
barriers, time budgets, validation and statistics for every transport alike.

A transport also declares what it brings (the option groups it reads, where
its buffers can live, whether it needs a launcher, its preflight and doctor checks),
so adding one is its folder (transports/<fabric>/), one line in the registry and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricbench.buffers import POISON, nothing
from fabricbench.errors import FabricbenchError
from fabricbench.lazy import np
from fabricbench.measure.kernels import Kernel
from fabricbench.transports.buffer_place import HOST, BufferPlace
from fabricbench.transports.options import OptionGroup


class Case:
    """One kernel at one message size on this rank, buffers written, ready to time."""

    initiator: bool = False  # this rank's samples speak for the row
    method: str = ""  # how the loop is built; recorded in the row
    window: int = 0  # messages per timed iteration for windowed kernels
    pairs: int = 1
    # The payload one direction of the link this case's bytes cross can carry, MB/s (10^6 B/s), after encoding and
    # headers (transports.link_payload), where the path is known (an HCA port's speed × width, a NIC's speed, a
    # shaper on the interface); None when unknown or virtual (loopback, an unshaped veth). The row's link_MBps and
    # link_pct; where ``link_bound``, a windowed row's figure above it is refused (rows.refuse_impossible).
    link_MBps: float | None = None
    link_label: str = ""  # what reported link_MBps, for the row's link column: "mlx5_0 port 1, 4X HDR", "eth2 25 Gb/s"
    # Whether no figure can pass link_MBps: False for a rate that is a reference, not a wall (a software RDMA
    # device's nominal rate, a shaper whose bucket lets a burst through at the line's rate).
    link_bound: bool = True
    # Whether one window sample holds the whole transit of its bytes (every one sent after the sample began and
    # known received before it ended), so that its bytes over the shortest sample are a rate the link carried:
    # the row's bw_peak_MBps. osu_bw's window and ack do; osu_bibw's two unsynchronised windows do not.
    window_holds_transit: bool = True
    checks: bool = True  # False: it moves nothing -c could check (osu_init's MPI_Init), so its rows say "off"

    def __init__(self) -> None:
        self.received: np.ndarray = nothing()  # uint8 view of what this rank received
        self.row_fields: dict = {}  # columns the transport sets in the row (rank 0's case): sample, note

    def run(self, iterations: int, times: memoryview) -> None:
        """Run ``iterations`` iterations; write each one's duration in ns to ``times[i]``."""
        raise NotImplementedError

    def expected(self) -> np.ndarray:
        """What ``received`` must hold after one iteration (uint8 view)."""
        return nothing()

    def poison(self) -> None:
        """Overwrite what was received so that validation sees only fresh data."""
        self.received[:] = POISON

    def close(self) -> None:
        """Release what the case allocated or registered."""


class Transport:
    """Connects ranks and builds cases; and declares, before any rank starts, what the rest must know.

    Everything above ``__init__`` is read by the CLI, the peer protocol,
    ``doctor`` and the reports without a rank, so a transport module imports
    its heavy dependencies (mpi4py.MPI, pyverbs, cupy) only where a rank opens
    it. The CLI, the peer protocol, the runner and the reports never name a
    transport: they ask these attributes.
    """

    name = ""
    kernels: frozenset[str] = frozenset()
    default_kernels: tuple[str, ...] = ()  # what ``fabricbench run`` with no -t/-k measures on it
    needs_launcher = False  # MPI ranks only: refused by ``serve`` and ``run --peer``
    osu_name = ""  # how OSU's text header names it ("MPI"); empty: "fabricbench NAME"
    osu_sums_any_type = False  # its reductions sum every OSU -T type a collective spec lists, not the default only
    osu_atomic_types = False  # its fop and cas take OSU's -T types (one element), not an 8-byte integer only
    # The option groups whose settings it reads (fabricbench.transports.options); the registry adds each to the
    # command line once, whichever transports include it.
    option_groups: tuple[OptionGroup, ...] = ()
    buffer_places: tuple[BufferPlace, ...] = (HOST,)  # where it can put its message buffers
    buffer = "host"  # the rows' buffer column: where this run's buffers are (or, refused, were asked to be)
    sub_communicators = False  # runs on a control plane of the first N ranks (run --ranks), its .comm for MPI
    # Its collectives run on one rank (NCCL on one GPU, as nccl-tests' -g 1: a time, and a bus bandwidth of 0 by
    # nccl-tests' factor); elsewhere a collective needs 2 ranks (OSU refuses fewer).
    one_rank_collectives = False

    @classmethod
    def min_ranks(cls, kernel) -> int:
        """The fewest ranks it runs ``kernel`` (a measure.kernels.Kernel) on."""
        return 1 if cls.one_rank_collectives and kernel.collective else kernel.min_ranks

    @classmethod
    def buffer_place(cls, transport_options: dict) -> BufferPlace:
        """Where its buffers are with a plan's transport_options: what the OSU text's title and buffer lines say."""
        return HOST

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        """Raise a one-line FabricbenchError before any rank starts when the transport cannot work here
        (``settings``: {group name: settings} of its option groups; ``ranks``: the run's rank count, 2 when
        ``doctor`` asks). Its groups' own checks (a port range) run beside it."""

    @classmethod
    def preflight_local(cls, settings: dict, ranks: int) -> None:
        """As ``preflight``, for what the ranks will take of a host that runs all of them (a port in use), so
        the refusal is one line before any rank or results folder exists. Not asked under ``--peer``, nor
        where a launcher spreads the ranks over hosts."""

    @classmethod
    def doctor(cls) -> Diagnosis:
        """Whether it can run here, why not and the fix (preflight's words), and what it found."""
        try:
            cls.preflight({}, 2)
        except FabricbenchError as exc:
            return Diagnosis(False, str(exc))
        return Diagnosis(True)

    @classmethod
    def osu_header_lines(cls, kernel: Kernel, transport_options: dict | None = None) -> list[str]:
        """Extra lines OSU prints under its title for this kernel (e.g. the RMA window's kind), for a run with these
        Plan.transport_options (None: the defaults)."""
        return []

    @classmethod
    def osu_title(cls, kernel: Kernel, transport_options: dict) -> str:
        """OSU's title words for this kernel run with these Plan.transport_options, ``{lib}`` for the library."""
        return kernel.osu_title

    @classmethod
    def osu_nonblocking(cls, transport_options: dict) -> bool:
        """Whether these Plan.transport_options make this transport time its collectives' non-blocking forms beside
        a dummy compute, so that the OSU text is that of OSU's osu_i* programs (the "# Overall" line, the overlap
        columns)."""
        return False

    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this transport cannot run the kernel, or None when it can."""
        if kernel.name not in self.kernels:
            return f"{self.name} has no {kernel.name} kernel"
        return None

    def case(self, kernel: Kernel, size: int) -> Case:
        """This rank's case of a kernel whose pattern is one pair, every pair at once or all ranks (and, for a
        transport with GPU routes, the route the pattern set). Raises Unsupported on every rank alike, before any
        traffic, where it cannot. What else a pattern may ask of a transport (pairs in phases, GPU routes,
        congestion loops, timing itself) is a capability of its own: ``fabricbench.transports.capabilities``."""
        raise NotImplementedError

    def metadata(self) -> dict:
        return {}

    def close(self) -> None:
        """Release connections and devices."""

    def release(self) -> None:
        """On the error path, just before the run is aborted: free local resources, talking to no peer."""


@dataclass
class Diagnosis:
    """``doctor``'s verdict on one transport: can it run here, and if not, why (with the fix)."""

    available: bool
    reason: str = ""  # empty when available
    details: dict = field(default_factory=dict)  # what it found: library versions, devices, loops built

"""What every collective's spec is made of: its element type, its buffers, nccl-tests' byte counts and factors.

The operations (one module each in this package) build their ``CollectiveSpec`` from these parts; the
transports take ROOT and the element types from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from fabricbench.buffers import aligned, float_pattern, pattern, poisoned
from fabricbench.errors import Unsupported
from fabricbench.lazy import np

OSU_MAX_SIZE = 1024 * 1024  # OSU's largest collective message by default: 1 MiB
ROOT = 0  # the rank that broadcasts (bcast) or receives the result (reduce)
OUT_OF_PLACE, IN_PLACE = "out-of-place", "in-place"  # the placement column's words, nccl-tests' blocks'
# What MPI_IN_PLACE replaces (CollectiveSpec.in_place_side): every rank's send buffer (allreduce, allgather,
# alltoall, reduce_scatter), the root's send buffer (reduce, gather) or the root's receive buffer (scatter).
IN_PLACE_SIDES = ("send", "root send", "root recv")


@dataclass
class CollectiveBuffers:
    """One rank's written buffers for one operation at one size, and what validation compares."""

    send: np.ndarray  # what this rank contributes (for bcast, the one buffer)
    recv: np.ndarray  # where the result lands
    count: int  # elements per block, as MPI and NCCL count them
    received: np.ndarray  # uint8 view that validation checks (may be empty)
    expected: Callable[[], np.ndarray]
    # In place: writes the input back into the one buffer, which the result overwrote (validation calls it where
    # it would poison an out-of-place result); None out of place.
    refill: Callable[[], None] | None = None


@dataclass(frozen=True)
class Element:
    """What a collective's buffers hold: sizes are whole multiples of it."""

    dtype: str  # numpy's name, an array-protocol type string: a kind, then bytes ("f4")
    osu_datatype: str  # OSU's "# Datatype:" line
    nccl_type: str  # nccl-tests' name of the type (its "type" column)

    @property
    def size(self) -> int:
        return int(self.dtype[1:])  # read from the name, so that the command line's checks need no numpy


FLOAT32 = Element("f4", "MPI_FLOAT", "float")  # reductions: small integers as floats, so sums stay exact
BYTE = Element("u1", "MPI_CHAR", "uint8")
# What a reduction may sum, as OSU 7.4's -T names them. MPI_CHAR is OSU's default: signed bytes whose sums wrap
# modulo 256, as the MPI library adds C chars; MPI_INT's and MPI_FLOAT's sums of small integers stay exact.
CHAR = Element("i1", "MPI_CHAR", "int8")
INT32 = Element("i4", "MPI_INT", "int32")
REDUCIBLE = (CHAR, INT32, FLOAT32)


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective. ``element``, ``algbw_bytes`` and ``bus_factor`` are None for one that moves no data."""

    name: str
    osu_title: str  # OSU's title line, {lib} standing for the library
    element: Element | None
    min_size: int  # OSU's default sweep
    max_size: int
    buffers: Callable[[int, int, int], CollectiveBuffers]  # (S, n, rank): this rank's written buffers
    algbw_bytes: Callable[[int, int], int] | None  # (S, n): the bytes nccl-tests divides by the time
    bus_factor: Callable[[int], float] | None  # n: nccl-tests' factor from algorithm to bus bandwidth
    # The elements ``buffers`` can also be built of (its ``element=`` keyword): a reduction's -T types.
    elements: tuple[Element, ...] = ()
    # ``algbw_bytes`` takes the element too (its ``element=`` keyword): a count that is rounded to whole elements
    # per rank (reduce_scatter_block's S/n per rank, rounded down).
    algbw_by_element: bool = False
    # The in-place form (MPI_IN_PLACE; nccl-tests' second block): ``in_place_buffers`` builds its one buffer as
    # ``buffers`` does two (None: the collective has none, ``no_in_place`` says why); ``in_place_side`` is the
    # argument MPI_IN_PLACE stands for (IN_PLACE_SIDES). ``in_place``: this spec is that form (``placed``).
    in_place_buffers: Callable[[int, int, int], CollectiveBuffers] | None = None
    in_place_side: str = ""
    no_in_place: str = ""
    in_place: bool = False
    root: int | None = None  # the root a rooted collective names (ROOT), as nccl-tests' "root" column; None: none

    @property
    def elem_bytes(self) -> int:
        return self.element.size if self.element else 1

    @property
    def osu_datatype(self) -> str:
        return self.element.osu_datatype if self.element else ""

    def with_element(self, element: Element) -> CollectiveSpec:
        """This collective on buffers of ``element`` (one of ``elements``): sizes from one element up."""
        if element not in self.elements:
            raise ValueError(f"{self.name} is not built of {element.osu_datatype}")
        if element == self.element:
            return self
        algbw = partial(self.algbw_bytes, element=element) if self.algbw_by_element else self.algbw_bytes
        in_place = self.in_place_buffers and partial(self.in_place_buffers, element=element)
        return replace(
            self,
            element=element,
            min_size=element.size,
            buffers=partial(self.buffers, element=element),
            algbw_bytes=algbw,
            in_place_buffers=in_place,
        )

    @property
    def placement(self) -> str:
        """The row's placement column: IN_PLACE or OUT_OF_PLACE."""
        return IN_PLACE if self.in_place else OUT_OF_PLACE

    def placed(self) -> CollectiveSpec:
        """Its in-place form: one buffer, sent from and received into (``in_place_buffers``). Where it has none on
        host buffers, its buffers raise Unsupported with ``no_in_place``'s words (a transport with buffers of its
        own, nccl's, may still have one)."""
        buffers = self.in_place_buffers or no_in_place(self.no_in_place or f"{self.name} has no in-place form")
        return replace(self, buffers=buffers, in_place=True)

    def in_place_argument(self, rank: int) -> str:
        """Which of this rank's arguments MPI_IN_PLACE replaces in the in-place form: "send", "recv" or "" (a
        rooted collective's other ranks pass their buffers as out of place)."""
        side = self.in_place_side
        if side.startswith("root "):
            return side.removeprefix("root ") if rank == self.root else ""
        return side

    @property
    def redop(self) -> str:
        """nccl-tests' "redop" column: sum for a reduction (fabricbench sums), none for the rest."""
        return "sum" if self.elements else "none"

    def count(self, size: int, ranks: int) -> int:
        """The element count a call takes for S (nccl-tests' "count" column): a block's elements."""
        if self.algbw_by_element:  # reduce_scatter_block: S is the vector, each rank keeps 1/n of it
            return self.algbw_bytes(size, ranks) // ranks // self.elem_bytes
        return size // self.elem_bytes


def blocks_spec(name: str, title: str, buffers: Callable, **extra) -> CollectiveSpec:
    """A collective of byte blocks, one per rank (allgather, alltoall, gather, scatter): OSU's sizes from 1 B,
    nccl-tests' S·n bytes and (n-1)/n factor."""
    return CollectiveSpec(name, title, BYTE, 1, OSU_MAX_SIZE, buffers, all_blocks_bytes, ring_factor, **extra)


def block_bytes(size: int, ranks: int) -> int:
    """nccl-tests' algbw count for a collective whose buffer is one block: S."""
    return size


def all_blocks_bytes(size: int, ranks: int) -> int:
    """nccl-tests' algbw count for one that handles a block per rank: S·n."""
    return size * ranks


def ring_factor(ranks: int) -> float:
    """(n-1)/n: each rank sends (or receives) all but its own block once."""
    return (ranks - 1) / ranks


def unit_factor(ranks: int) -> float:
    """1: the bus carries what the algorithm counts (bcast, reduce)."""
    return 1.0


def filled_floats(count: int, seed: int) -> np.ndarray:
    """``count`` float32 values of ``float_pattern``, in an aligned, written buffer."""
    buf = aligned(count * FLOAT32.size, FLOAT32.dtype)
    buf[:] = float_pattern(count, seed)
    return buf


def filled_values(count: int, seed: int, element: Element) -> np.ndarray:
    """``count`` values of ``float_pattern`` (i mod 17 + seed + 1) as ``element``, in an aligned, written buffer;
    as C converts them, so a char holds the value modulo 256."""
    if element == FLOAT32:
        return filled_floats(count, seed)
    buf = aligned(count * element.size, element.dtype)
    buf[:] = np.resize((np.arange(17, dtype=np.int64) + seed + 1).astype(element.dtype), count)
    return buf


def value_sum(count: int, ranks: int, element: Element) -> np.ndarray:
    """Sum over ranks r of filled_values(count, r, element), in closed form, as ``element`` holds it."""
    base = (np.arange(count, dtype=np.int64) % 17) + 1
    return (base * ranks + ranks * (ranks - 1) // 2).astype(element.dtype)


def with_result(
    send: np.ndarray, recv: np.ndarray, count: int, expected: Callable[[], np.ndarray]
) -> CollectiveBuffers:
    """Buffers whose whole ``recv`` is checked after the operation."""
    return CollectiveBuffers(send, recv, count, recv.view(np.uint8), expected)


def value_result(
    send: np.ndarray, count: int, expected: Callable[[], np.ndarray], element: Element
) -> CollectiveBuffers:
    """Buffers whose result is ``count`` values of ``element``, poisoned until they arrive."""
    return with_result(send, poisoned(count * element.size, element.dtype), count, expected)


# --- the v-variants' and the rooted collectives' parts (gather, scatter, allgatherv, alltoallv, alltoallw, ...) ---


def uniform_layout(count: int, ranks: int) -> tuple[list[int], list[int]]:
    """The counts and displacements (in elements) that OSU 7.4's v-variants pass (osu_gatherv, osu_scatterv,
    osu_allgatherv, osu_alltoallv; osu_alltoallw in bytes, times the element's size): every rank's block holds
    ``count`` elements and block r starts at r·count, so a v-variant moves what its plain form moves."""
    return [count] * ranks, [rank * count for rank in range(ranks)]


def blocks_in_rank_order(size: int, ranks: int) -> np.ndarray:
    """Every rank's ``pattern`` block of S bytes, rank 0's first: what a gather's root and every allgather rank
    receive, and what a scatter's root sends."""
    return np.concatenate([pattern(size, rank) for rank in range(ranks)])


WRONG_CHUNK_BYTES = 1 << 22  # bytes wrong_elements compares at a time


def wrong_elements(received: np.ndarray, expected: np.ndarray, element_size: int) -> int:
    """nccl-tests' #wrong: how many elements of ``element_size`` bytes differ between two byte buffers (bytes where
    they are not whole elements); where their lengths differ, every element of the longer."""
    got, want = received.view(np.uint8).ravel(), expected.view(np.uint8).ravel()
    width = element_size if got.size % element_size == 0 and want.size % element_size == 0 else 1
    if got.size != want.size:
        return max(got.size, want.size) // width
    # A slice at a time: the comparison's mask of a whole 64 MiB message would be one more message on the rank's
    # peak (Kernel.held_bytes counts one mask, not a mask and its per-element reduction).
    step = max(width, WRONG_CHUNK_BYTES // width * width)
    return sum(
        int((got[at : at + step] != want[at : at + step]).reshape(-1, width).any(axis=1).sum())
        for at in range(0, got.size, step)
    )


def in_place_result(
    input_data: np.ndarray, count: int, expected: Callable[[], np.ndarray], result: slice = slice(None)
) -> CollectiveBuffers:
    """One aligned buffer holding ``input_data`` (written now and again on every refill), sent from and received
    into; ``result`` (in its elements) is the part validation checks."""
    buf = aligned(input_data.nbytes, input_data.dtype)

    def write() -> None:
        buf[...] = input_data

    write()
    return CollectiveBuffers(buf, buf, count, buf[result].view(np.uint8), expected, write)


def no_in_place(why: str) -> Callable[..., CollectiveBuffers]:
    """The buffers of a collective with no in-place form on host buffers: Unsupported, before any traffic."""

    def refuse(*args, **kwargs) -> CollectiveBuffers:
        raise Unsupported(why)

    return refuse

"""The collective specs without processes: each rank's expected result, nccl-tests' formulas, OSU's labels."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fabricbench.buffers import EMPTY, POISON
from fabricbench.collectives import COLLECTIVES as EVERY_COLLECTIVE
from fabricbench.collectives import neighbor
from fabricbench.collectives.spec import ROOT, uniform_layout
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.plan import kernel_sizes
from fabricbench.measure.rows import measured_row
from fabricbench.report.osu import Columns, header
from fabricbench.transports import TRANSPORTS, transport_class

# Every collective on all ranks; the neighbourhood ones, on OSU's ring, have their own checks
# (test_nonblocking_figures.py).
COLLECTIVES = {name: spec for name, spec in EVERY_COLLECTIVE.items() if name not in neighbor.NAMES}
RANKS = (2, 3, 4)
SIZES = (0, 1, 3, 4, 12, 17, 64, 1000, 4096)


def _sum(sends: list[np.ndarray]) -> np.ndarray:
    """The float32 sum of every rank's vector, added one rank after another as a reduction would."""
    total = np.zeros_like(sends[0])
    for send in sends:
        total += send
    return total.view(np.uint8)


def _block(buf: np.ndarray, index: int, size: int) -> np.ndarray:
    return buf.view(np.uint8)[index * size : (index + 1) * size]


def _osu_block_sum(sends: list[np.ndarray], rank: int, size: int) -> np.ndarray:
    """osu_reduce_scatter_block: S is the vector; rank r keeps block r of S/e/n elements (rounded down) of the sum
    of every rank's first n blocks."""
    count = sends[0].size // len(sends)
    return _block(_sum([send[: count * len(sends)] for send in sends]), rank, count * sends[0].itemsize)


# What rank ``rank`` holds after the operation, computed from every rank's send buffer; S is bytes per block.
SIMULATED = {
    "allreduce": lambda sends, rank, size: _sum(sends),
    "reduce": lambda sends, rank, size: _sum(sends) if rank == ROOT else EMPTY,
    "reduce_scatter": lambda sends, rank, size: _block(_sum(sends), rank, size),
    "allgather": lambda sends, rank, size: np.concatenate(sends),
    "alltoall": lambda sends, rank, size: np.concatenate([_block(send, rank, size) for send in sends]),
    "bcast": lambda sends, rank, size: EMPTY if rank == ROOT else sends[ROOT],
    "barrier": lambda sends, rank, size: EMPTY,
    "gather": lambda sends, rank, size: np.concatenate(sends) if rank == ROOT else EMPTY,
    "gatherv": lambda sends, rank, size: np.concatenate(sends) if rank == ROOT else EMPTY,
    "scatter": lambda sends, rank, size: _block(sends[ROOT], rank, size),
    "scatterv": lambda sends, rank, size: _block(sends[ROOT], rank, size),
    "allgatherv": lambda sends, rank, size: np.concatenate(sends),
    "alltoallv": lambda sends, rank, size: np.concatenate([_block(send, rank, size) for send in sends]),
    "alltoallw": lambda sends, rank, size: np.concatenate([_block(send, rank, size) for send in sends]),
    "reduce_scatter_block": _osu_block_sum,
}
# nccl-tests' bus-bandwidth factors and algbw byte counts (S bytes per rank's buffer, n ranks).
NCCL_BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "bcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    **dict.fromkeys(
        ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw", "reduce_scatter_block"),
        lambda n: (n - 1) / n,
    ),
}
NCCL_ALGBW_BYTES = {
    "allreduce": lambda size, n: size,
    "allgather": lambda size, n: size * n,
    "alltoall": lambda size, n: size * n,
    "reduce_scatter": lambda size, n: size * n,
    "bcast": lambda size, n: size,
    "reduce": lambda size, n: size,
    **dict.fromkeys(
        ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw"), lambda size, n: size * n
    ),
    # nccl-tests' reduce_scatter counts the summed vector: n blocks of S/4/n float32 elements (rounded down)
    "reduce_scatter_block": lambda size, n: size // 4 // n * n * 4,
}
# The elements each rank's block holds (MPI's count), from S bytes, n ranks and the element's size.
COUNTS = {"reduce_scatter_block": lambda size, n, elem: size // elem // n}
# (element bytes, OSU's datatype line, OSU's min and max size)
OSU = {
    "allreduce": (4, "MPI_FLOAT", 4, 1 << 20),
    "reduce": (4, "MPI_FLOAT", 4, 1 << 20),
    "reduce_scatter": (4, "MPI_FLOAT", 4, 1 << 20),
    "allgather": (1, "MPI_CHAR", 1, 1 << 20),
    "alltoall": (1, "MPI_CHAR", 1, 1 << 20),
    "bcast": (1, "MPI_CHAR", 1, 1 << 20),
    "barrier": (1, "", 0, 0),
    **dict.fromkeys(
        ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw"),
        (1, "MPI_CHAR", 1, 1 << 20),
    ),
    "reduce_scatter_block": (4, "MPI_FLOAT", 4, 1 << 20),
}


def test_every_collective_has_a_simulation_and_reference_figures():
    assert set(SIMULATED) == set(OSU) == set(COLLECTIVES)
    assert set(NCCL_BUS_FACTOR) == set(NCCL_ALGBW_BYTES) == {n for n, s in COLLECTIVES.items() if s.max_size}


@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("name", COLLECTIVES)
def test_expected_result_is_the_collective_of_every_ranks_send_buffer(name, ranks):
    spec = COLLECTIVES[name]
    sizes = [size for size in SIZES if size % spec.elem_bytes == 0 and size <= spec.max_size]
    assert sizes
    for size in sizes:
        buffers = [spec.buffers(size, ranks, rank) for rank in range(ranks)]
        sends = [bufs.send for bufs in buffers]
        for rank, bufs in enumerate(buffers):
            want = SIMULATED[name](sends, rank, size)
            assert np.array_equal(bufs.expected().view(np.uint8), want), (size, rank)
            # Nothing has arrived yet: what validation reads is as long as the result, and all poison.
            assert bufs.received.dtype == np.uint8 and bufs.received.size == want.size
            assert (bufs.received == POISON).all()
            assert bufs.count == COUNTS.get(name, lambda s, n, e: s // e)(size, ranks, spec.elem_bytes)


@pytest.mark.parametrize("name", NCCL_BUS_FACTOR)
def test_bandwidth_formulas_are_nccl_tests(name):
    spec, kernel = COLLECTIVES[name], get_kernel(name)
    for ranks in range(2, 9):
        assert spec.bus_factor(ranks) == pytest.approx(NCCL_BUS_FACTOR[name](ranks))
        assert kernel.busbw_factor(ranks) == pytest.approx(NCCL_BUS_FACTOR[name](ranks))
        for size in (4, 12, 4096, 1 << 20):
            assert spec.algbw_bytes(size, ranks) == NCCL_ALGBW_BYTES[name](size, ranks)


@pytest.mark.parametrize("name", COLLECTIVES)
def test_kernel_takes_element_datatype_and_sizes_from_the_spec(name):
    elem_bytes, datatype, min_size, max_size = OSU[name]
    spec, kernel = COLLECTIVES[name], get_kernel(name)
    assert kernel.collective and kernel.collective_spec is spec and kernel.family == "collective"
    assert (spec.elem_bytes, spec.osu_datatype, spec.min_size, spec.max_size) == OSU[name]
    assert (kernel.elem_bytes, kernel.osu_datatype, kernel.min_size, kernel.max_size) == OSU[name]
    assert kernel.osu_title == spec.osu_title and "{lib}" in spec.osu_title


def test_reduce_has_osus_header_and_is_not_in_any_default_sweep():
    assert header("mpi", "reduce", 64, 1).splitlines()[1:] == [
        "# OSU MPI Reduce Latency Test v7.4",
        "# Datatype: MPI_FLOAT.",
        "# Size       Avg Latency(us)",  # Min/Max/Iterations only with OSU's -f (--osu-full)
    ]
    assert {"mpi", "tcp"} <= {name for name in TRANSPORTS if "reduce" in transport_class(name).kernels}
    assert not any("reduce" in transport_class(name).default_kernels for name in TRANSPORTS)


def _row(name: str, size: int, ranks: int, mean_ns: float) -> dict:
    """The row measured_row makes when every rank took ``mean_ns`` per operation."""
    plan = SimpleNamespace(run_id="run", label="")
    case = SimpleNamespace(method="blocking", pairs=1, window=0)
    gathered = np.array([[1.0, 10.0, 10 * mean_ns, 1.0]] * ranks)
    return measured_row(plan, "mpi", get_kernel(name), size, case, 1, np.full(10, mean_ns), gathered)


def test_barrier_moves_no_data():
    spec, kernel = COLLECTIVES["barrier"], get_kernel("barrier")
    assert spec.element is None and spec.algbw_bytes is None and spec.bus_factor is None
    assert not kernel.moves_data and all(get_kernel(name).moves_data for name in NCCL_BUS_FACTOR)
    assert kernel_sizes(kernel, (4, 65536)) == [0] and kernel_sizes(kernel, None) == [0]
    row = _row("barrier", 0, 4, 1000.0)
    assert math.isnan(row["algbw_GBps"]) and math.isnan(row["busbw_GBps"])
    assert header("mpi", "barrier", 64, 1).splitlines()[2] == "# Avg Latency(us)"  # no datatype line, no size


def test_rows_take_algbw_and_busbw_from_the_spec():
    row = _row("alltoall", 4096, 4, 1000.0)  # 1 µs per operation
    assert row["algbw_GBps"] == pytest.approx(4096 * 4 / 1e-6 / 1e9)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 3 / 4)
    assert _row("reduce", 4096, 3, 1000.0)["busbw_GBps"] == pytest.approx(4096 / 1e-6 / 1e9)


REDUCTIONS = [name for name, spec in COLLECTIVES.items() if spec.elements]


def test_the_reductions_take_osus_minus_T_types_and_the_rest_move_bytes():
    assert REDUCTIONS == ["allreduce", "reduce", "reduce_scatter", "reduce_scatter_block"]
    for name in REDUCTIONS:
        assert get_kernel(name).osu_datatypes == ("MPI_CHAR", "MPI_INT", "MPI_FLOAT")
    # The others move bytes, and so the bytes of any type OSU's -T names; a barrier moves none.
    assert get_kernel("allgather").osu_datatypes == ("MPI_CHAR", "MPI_INT", "MPI_FLOAT")
    assert get_kernel("barrier").osu_datatypes == ()


@pytest.mark.parametrize(
    ("datatype", "elem_bytes", "first"), [("MPI_CHAR", 1, 1), ("mpi_int", 4, 4), ("MPI_FLOAT", 4, 4)]
)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_a_reduction_with_minus_T_sums_that_type_from_one_element(name, datatype, elem_bytes, first):
    kernel = get_kernel(name).with_datatype(datatype)
    assert (kernel.osu_datatype, kernel.elem_bytes, kernel.min_size) == (datatype.upper(), elem_bytes, first)
    assert kernel.collective_spec.osu_datatype == datatype.upper() and kernel.collective_spec.min_size == first
    assert kernel_sizes(kernel, None)[:3] == [first, 2 * first, 4 * first]  # OSU's sweep: MPI_CHAR from 1 B
    assert kernel_sizes(kernel, (-1, 8)) == [s for s in (1, 2, 4, 8) if s >= first]
    assert get_kernel(name).with_datatype("MPI_DOUBLE") is get_kernel(name)  # refused by check_columns
    moved = get_kernel("alltoall").with_datatype(datatype)  # bytes of the type: whole elements, the same spec
    assert (moved.osu_datatype, moved.elem_bytes, moved.min_size) == (datatype.upper(), elem_bytes, first)
    assert moved.collective_spec is get_kernel("alltoall").collective_spec


@pytest.mark.parametrize("ranks", (2, 3, 200))  # 200 ranks: MPI_CHAR's sums wrap modulo 256, as MPI's do
@pytest.mark.parametrize("name", REDUCTIONS)
def test_each_types_expected_result_is_the_sum_the_mpi_library_computes(name, ranks):
    for element in COLLECTIVES[name].elements:
        spec = COLLECTIVES[name].with_element(element)
        for size in (element.size, 3 * element.size, 64):
            ranks_here = range(ranks) if ranks < 10 else (0, 1, ranks - 1)
            sends = [spec.buffers(size, ranks, rank).send for rank in range(ranks)]
            assert all(send.dtype == np.dtype(element.dtype) for send in sends)
            for rank in ranks_here:
                bufs = spec.buffers(size, ranks, rank)
                want = SIMULATED[name](sends, rank, size)
                assert np.array_equal(bufs.expected().view(np.uint8), want), (element, size, rank)
                count = COUNTS.get(name, lambda s, n, e: s // e)(size, ranks, element.size)
                assert bufs.count == count and (bufs.received == POISON).all()
    wrapped = COLLECTIVES[name].with_element(COLLECTIVES[name].elements[0])  # MPI_CHAR
    if name in ("allreduce", "reduce") and ranks == 200:
        # element 0 holds 1 + r on rank r: the sum 200 + 200*199/2 = 20100, stored as a char, 20100 mod 256
        assert wrapped.buffers(1, ranks, ROOT).expected()[0] == (200 + 200 * 199 // 2) % 256 == 132


@pytest.mark.parametrize("ranks", (2, 3, 4))
def test_the_v_variants_take_osus_counts_and_displacements(ranks):
    # osu_gatherv, osu_scatterv, osu_allgatherv, osu_alltoallv: every block `count` elements, block r at r·count
    assert uniform_layout(5, ranks) == ([5] * ranks, [5 * r for r in range(ranks)])
    assert uniform_layout(0, ranks) == ([0] * ranks, [0] * ranks)
    # and so each v-variant moves exactly its plain form's buffers
    for plain, variants in (("gather", ("gatherv",)), ("scatter", ("scatterv",)), ("allgather", ("allgatherv",))):
        for name in variants:
            mine, theirs = COLLECTIVES[name].buffers(12, ranks, 0), COLLECTIVES[plain].buffers(12, ranks, 0)
            assert np.array_equal(mine.send, theirs.send) and mine.recv.size == theirs.recv.size
    for name in ("alltoallv", "alltoallw"):
        assert np.array_equal(
            COLLECTIVES[name].buffers(12, ranks, 1).send, COLLECTIVES["alltoall"].buffers(12, ranks, 1).send
        )


def test_osus_reduce_scatter_block_splits_the_vector_and_counts_what_is_summed():
    spec = COLLECTIVES["reduce_scatter_block"]
    # 1 KiB of float32 on 3 ranks: 256 elements, 85 each, 255 summed; the vector is sent whole
    bufs = spec.buffers(1024, 3, 2)
    assert bufs.count == 85 and bufs.send.nbytes == 1024 and bufs.received.nbytes == 85 * 4
    assert spec.algbw_bytes(1024, 3) == 255 * 4
    # fewer elements than ranks: nothing to keep, nothing summed (OSU's portion 0), so no bandwidth
    assert spec.buffers(4, 2, 0).count == 0 and spec.algbw_bytes(4, 2) == 0
    # with -T MPI_CHAR the count is of bytes: 1 KiB on 3 ranks keeps 341 each
    chars = spec.with_element(spec.elements[0])
    assert chars.buffers(1024, 3, 0).count == 341 and chars.algbw_bytes(1024, 3) == 1023
    assert get_kernel("reduce_scatter_block").with_datatype("MPI_CHAR").message_bytes(1024, 3, 64) == 1023


def test_the_new_collectives_have_osus_titles():
    titles = {
        "gather": "# OSU MPI Gather Latency Test v7.4",
        "gatherv": "# OSU MPI Gatherv Latency Test v7.4",
        "scatter": "# OSU MPI Scatter Latency Test v7.4",
        "scatterv": "# OSU MPI Scatterv Latency Test v7.4",
        "allgatherv": "# OSU MPI Allgatherv Latency Test v7.4",
        "alltoallv": "# OSU MPI All-to-Allv Personalized Exchange Latency Test v7.4",
        "alltoallw": "# OSU MPI All-to-Allw Personalized Exchange Latency Test v7.4",
        "reduce_scatter_block": "# OSU MPI Reduce_scatter_block Latency Test v7.4",
    }
    for name, title in titles.items():
        assert header("mpi", name, 64, 1).splitlines()[1] == title
        assert name in transport_class("mpi").kernels and name not in transport_class("mpi").default_kernels


PERSISTENT_TITLES = {  # OSU 7.4's 14 *_persistent programs' titles, by the kernel each runs
    "allgather": "Allgather",
    "allgatherv": "Allgatherv",
    "allreduce": "Allreduce",
    "alltoall": "All-to-All Personalized Exchange",
    "alltoallv": "All-to-Allv Personalized Exchange",
    "alltoallw": "All-to-Allw Personalized Exchange",
    "barrier": "Barrier",
    "bcast": "Broadcast",
    "gather": "Gather",
    "gatherv": "Gatherv",
    "reduce": "Reduce",
    "reduce_scatter": "Reduce_scatter",
    "scatter": "Scatter",
    "scatterv": "Scatterv",
}


@pytest.mark.parametrize(("name", "words"), PERSISTENT_TITLES.items())
def test_persistent_collectives_have_the_title_of_osus_persistent_programs(name, words):
    persistent = Columns(transport_options={"mpi": {"method": "persistent"}})
    assert header("mpi", name, 64, 1, persistent).splitlines()[1] == f"# OSU MPI {words} Persistent Latency Test v7.4"
    blocking = Columns(transport_options={"mpi": {"method": "blocking"}})
    assert header("mpi", name, 64, 1, blocking).splitlines()[1] == f"# OSU MPI {words} Latency Test v7.4"
    assert header("mpi", "latency", 64, 1, persistent).splitlines()[1] == "# OSU MPI Latency Persistent Test v7.4"


# --- the in-place forms (MPI_IN_PLACE), nccl-tests' #wrong, --placement ------------------------------------------


def _mpi_in_place(name: str, bufs: list, ranks: int) -> None:
    """What MPI's in-place form of each call writes into every rank's one buffer, from every rank's input."""
    spec = COLLECTIVES[name]
    dtype = spec.element.dtype
    vectors = [b.send.view(dtype).copy() for b in bufs]
    count = bufs[0].count
    if name == "allreduce":
        for b in bufs:
            b.recv.view(dtype)[:] = sum(vectors[1:], vectors[0].copy())
    elif name == "reduce":
        bufs[ROOT].recv.view(dtype)[:] = sum(vectors[1:], vectors[0].copy())
    elif name in ("reduce_scatter", "reduce_scatter_block"):
        total = sum((v[: count * ranks] for v in vectors[1:]), vectors[0][: count * ranks].copy())
        for r, b in enumerate(bufs):
            b.recv.view(dtype)[:count] = total[r * count : (r + 1) * count]
    elif name in ("allgather", "allgatherv"):
        for b in bufs:
            for r in range(ranks):
                b.recv[r * count : (r + 1) * count] = vectors[r][r * count : (r + 1) * count]
    elif name in ("alltoall", "alltoallv", "alltoallw"):
        for d, b in enumerate(bufs):
            for s in range(ranks):
                b.recv[s * count : (s + 1) * count] = vectors[s][d * count : (d + 1) * count]
    elif name in ("gather", "gatherv"):
        for r in range(ranks):
            if r != ROOT:
                bufs[ROOT].recv[r * count : (r + 1) * count] = vectors[r]
    elif name in ("scatter", "scatterv"):
        for r, b in enumerate(bufs):
            if r != ROOT:
                b.recv[:] = vectors[ROOT][r * count : (r + 1) * count]


IN_PLACE = sorted(name for name, spec in COLLECTIVES.items() if spec.in_place_buffers)


@pytest.mark.parametrize("name", IN_PLACE)
@pytest.mark.parametrize("ranks", RANKS)
def test_in_place_buffers_hold_the_input_and_check_what_mpi_in_place_leaves(name, ranks):
    spec = COLLECTIVES[name].placed()
    assert spec.in_place and spec.placement == "in-place" and COLLECTIVES[name].placement == "out-of-place"
    size = 64 * spec.elem_bytes
    bufs = [spec.buffers(size, ranks, rank) for rank in range(ranks)]
    for rank, b in enumerate(bufs):
        if spec.in_place_argument(rank):  # this rank passes MPI_IN_PLACE: one buffer, written before the call
            assert b.send is b.recv and b.refill is not None
            assert not np.array_equal(b.received, b.expected()) or name in ("scatter", "scatterv")
    _mpi_in_place(name, bufs, ranks)
    for b in bufs:
        assert np.array_equal(b.received, b.expected().view(np.uint8))
        if b.refill:  # validation puts the input back where an out-of-place check poisons the result
            b.refill()
    assert [np.array_equal(b.send, spec.buffers(size, ranks, r).send) for r, b in enumerate(bufs)] == [True] * ranks


def test_in_place_argument_is_every_ranks_send_or_the_roots():
    assert COLLECTIVES["allreduce"].in_place_argument(1) == "send"
    assert [COLLECTIVES["reduce"].in_place_argument(r) for r in (ROOT, 1)] == ["send", ""]
    assert [COLLECTIVES["scatter"].in_place_argument(r) for r in (ROOT, 1)] == ["recv", ""]


@pytest.mark.parametrize("name", ["bcast", "barrier", "neighbor_allgather"])
def test_a_collective_with_no_in_place_form_is_unsupported_before_any_buffer(name):
    from fabricbench.errors import Unsupported

    with pytest.raises(Unsupported, match="IN_PLACE|no data"):
        EVERY_COLLECTIVE[name].placed().buffers(64, 3, 0)


def test_wrong_elements_counts_elements_not_bytes():
    from fabricbench.collectives.spec import wrong_elements

    want = np.arange(8, dtype=np.float32)
    got = want.copy()
    assert wrong_elements(got.view(np.uint8), want.view(np.uint8), 4) == 0
    got.view(np.uint8)[[1, 2, 9]] ^= 0xFF  # two bytes of element 0, one of element 2
    assert wrong_elements(got.view(np.uint8), want.view(np.uint8), 4) == 2
    assert wrong_elements(np.zeros(3, np.uint8), np.zeros(5, np.uint8), 4) == 5  # lengths differ: all wrong


def test_placement_is_out_of_place_unless_asked_and_both_for_nccl_text():
    from types import SimpleNamespace as Args

    from fabricbench.transports.placement import PLACEMENT, in_place_flags, placed_kernels

    def flags(placement, output_format="table"):
        options = {"placement": PLACEMENT.parse(Args(placement=placement, output_format=output_format), "run")}
        return in_place_flags(options)

    assert flags(None) == (False,)
    assert flags(None, "nccl") == (False, True)
    assert flags("in-place", "nccl") == (True,)
    assert flags("both") == (False, True)
    kernels = placed_kernels(get_kernel("allreduce"), {"placement": {"placement": "both"}})
    assert [k.collective_spec.in_place for k in kernels] == [False, True]
    assert placed_kernels(get_kernel("latency"), {"placement": {"placement": "both"}}) == [get_kernel("latency")]


def test_a_collective_row_says_its_placement_and_its_ranks_wrong_elements():
    kernel = get_kernel("allreduce")
    plan = SimpleNamespace(run_id="r", label="", validate=True)
    samples = np.full(4, 1000, dtype=np.int64)
    gathered = np.array([[1, 4, 4000, 0, 3], [1, 4, 4000, 1, 0]], dtype=float)
    case = SimpleNamespace(method="c loop", pairs=1, window=0)
    row = measured_row(plan, "mpi", kernel, 64, case, 1, samples, gathered)
    assert (row["placement"], row["validation"], row["wrong_elements"]) == ("out-of-place", "fail", 3)
    from dataclasses import replace

    placed = replace(kernel, collective_spec=kernel.collective_spec.placed())
    gathered[:, 3:] = [[-1, -1], [-1, -1]]  # not checked: no count
    row = measured_row(plan, "mpi", placed, 64, case, 1, samples, gathered)
    assert row["placement"] == "in-place" and "wrong_elements" not in row

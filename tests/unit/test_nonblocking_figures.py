"""The non-blocking collectives' figures (OSU's overlap arithmetic), OSU's ring of neighbours and the neighbourhood
specs' buffers, and the osu_i* text layout: pure functions, no process."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fabricbench.collectives import neighbor
from fabricbench.collectives.nonblocking import FIGURES, bandwidths, overlap_percent, row_fields
from fabricbench.measure.kernels import get_kernel
from fabricbench.report import osu


@pytest.mark.parametrize(
    ("overall", "compute", "test", "pure", "expected"),
    [
        (10.0, 10.0, 0.0, 10.0, 100.0),  # the whole communication hidden behind the compute
        (20.0, 10.0, 0.0, 10.0, 0.0),  # none of it: compute, then the whole communication
        (15.0, 10.0, 0.0, 10.0, 50.0),
        (30.0, 10.0, 0.0, 10.0, 0.0),  # worse than serial: floored at 0, as OSU's MAX(0, ...)
        (16.0, 12.0, 2.0, 10.0, 40.0),  # the MPI_Test calls are taken out of the compute
    ],
)
def test_overlap_is_osus_formula(overall, compute, test, pure, expected):
    assert overlap_percent(overall, compute, test, pure) == pytest.approx(expected)


def test_overlap_without_pure_communication_is_not_a_number():
    assert math.isnan(overlap_percent(5.0, 5.0, 0.0, 0.0))


def test_row_fields_are_osus_means_over_ranks_and_extremes_of_pure_communication():
    # Two ranks' means in ns: pure, compute (tests in it), tests, wait, start, overall.
    per_rank = np.array([[10_000, 12_000, 2_000, 3_000, 500, 15_000], [20_000, 18_000, 0, 1_000, 1_500, 25_000]])
    assert per_rank.shape[1] == FIGURES
    fields = row_fields(per_rank)
    assert fields["pure_comm_us"] == pytest.approx(15.0)
    assert (fields["pure_comm_min_us"], fields["pure_comm_max_us"]) == (10.0, 20.0)
    assert fields["compute_us"] == pytest.approx(15.0 - 1.0)  # OSU's Compute: the compute less its tests
    assert fields["test_us"] == pytest.approx(1.0) and fields["wait_us"] == pytest.approx(2.0)
    assert fields["init_us"] == pytest.approx(1.0)
    assert fields["overlap_pct"] == pytest.approx(100 - (20.0 - 14.0) / 15.0 * 100)


def test_bandwidths_are_over_the_pure_communication_not_the_overall_time():
    found = bandwidths(get_kernel("allgather"), 1000, 4, {"pure_comm_us": 2.0})
    assert found["algbw_GBps"] == pytest.approx(4000 / 2e-6 / 1e9)  # S·n bytes over 2 us
    assert found["busbw_GBps"] == pytest.approx(found["algbw_GBps"] * 3 / 4)
    assert all(math.isnan(v) for v in bandwidths(get_kernel("barrier"), 0, 4, {"pure_comm_us": 2.0}).values())
    assert all(math.isnan(v) for v in bandwidths(get_kernel("allgather"), 8, 4, {"pure_comm_us": 0.0}).values())


@pytest.mark.parametrize(
    ("rank", "ranks", "radius", "expected"),
    [(0, 4, 1, [3, 1]), (3, 4, 1, [2, 0]), (1, 3, 1, [0, 2]), (0, 5, 2, [3, 4, 1, 2]), (2, 7, 1, [1, 3])],
)
def test_ring_neighbours_are_osus_displacements_minus_radius_to_radius(rank, ranks, radius, expected):
    sources, destinations = neighbor.ring_neighbours(rank, ranks, radius)
    assert sources == destinations == expected


@pytest.mark.parametrize(("ranks", "radius"), [(2, 1), (1, 1), (4, 2), (3, 0)])
def test_ring_neighbours_refuse_a_radius_that_would_repeat_a_neighbour(ranks, radius):
    with pytest.raises(ValueError, match="needs at least"):
        neighbor.ring_neighbours(0, ranks, radius)


@pytest.mark.parametrize("ranks", [3, 4, 5, 8])
def test_the_graph_is_symmetric_every_edge_seen_from_both_ends(ranks):
    edges_out = {(r, d) for r in range(ranks) for d in neighbor.ring_neighbours(r, ranks)[1]}
    edges_in = {(s, r) for r in range(ranks) for s in neighbor.ring_neighbours(r, ranks)[0]}
    assert edges_out == edges_in


def _deliver(spec, size: int, ranks: int) -> list[np.ndarray]:
    """What MPI's neighbourhood collective SPEC delivers on OSU's ring, done by hand from every rank's send buffer:
    block l of a receive buffer from source l, block i of a send buffer (the whole buffer for allgather) to
    destination i."""
    sends = [spec.buffers(size, ranks, r).send for r in range(ranks)]
    received = []
    for rank in range(ranks):
        sources, _ = neighbor.ring_neighbours(rank, ranks)
        blocks = []
        for src in sources:
            if "allgather" in spec.name:
                blocks.append(sends[src][:size])
            else:
                index = neighbor.ring_neighbours(src, ranks)[1].index(rank)
                blocks.append(sends[src][index * size : (index + 1) * size])
        received.append(np.concatenate(blocks))
    return received


@pytest.mark.parametrize("name", sorted(neighbor.NAMES))
@pytest.mark.parametrize("ranks", [3, 4, 6])
def test_each_spec_expects_what_its_collective_delivers(name, ranks):
    spec = {s.name: s for s in neighbor.SPECS}[name]
    size = 5
    for rank, delivered in enumerate(_deliver(spec, size, ranks)):
        bufs = spec.buffers(size, ranks, rank)
        assert bufs.recv.size == size * 2 and bufs.count == size
        assert np.array_equal(delivered, bufs.expected())
        assert not np.array_equal(bufs.received, bufs.expected())  # poisoned until it arrives


NONBLOCKING = osu.Columns(transport_options={"mpi": {"method": "nonblocking"}})
ROW = {
    "kernel": "allreduce",
    "size_B": 1024,
    "status": "ok",
    "validation": "pass",
    "lat_rank_avg_us": 12.3456,
    "compute_us": 7.0,
    "pure_comm_us": 6.5,
    "pure_comm_min_us": 6.0,
    "pure_comm_max_us": 7.25,
    "init_us": 0.5,
    "test_us": 0.0,
    "wait_us": 4.75,
    "overlap_pct": 16.07,
    "lat_p50_us": 12.0,
}


def test_osu_i_header_and_line_are_osus_printf_layout():
    assert osu.column_header("allreduce", NONBLOCKING) == (
        "# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)"
    )
    assert osu.line(ROW, NONBLOCKING) == ("1024" + " " * 6 + f"{12.3456:18.2f}{7.0:18.2f}{6.5:18.2f}{16.07:18.2f}")
    header = osu.header("mpi", "allreduce", 64, 1, NONBLOCKING).splitlines()
    assert header[1:5] == [
        "# OSU MPI Non-blocking Allreduce Latency Test v7.4",
        "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait",
        "",
        "# Datatype: MPI_FLOAT.",
    ]


def test_osu_i_full_validation_and_tails_in_osus_order():
    columns = osu.Columns(validate=True, full=True, percentiles=(50,), transport_options=NONBLOCKING.transport_options)
    names = ["Overall(us)", "Compute(us)", "Coll. Init(us)", "MPI_Test(us)", "MPI_Wait(us)", "Pure Comm.(us)"]
    names += ["Min Comm.(us)", "Max Comm.(us)", "Overlap(%)", "Validation", "P50 Tail Lat(us)"]
    assert osu.column_header("allreduce", columns) == "# Size    " + "".join(f"{n:>18}" for n in names)
    values = [12.3456, 7.0, 0.5, 0.0, 4.75, 6.5, 6.0, 7.25, 16.07]
    expected = "1024      " + "".join(f"{v:18.2f}" for v in values) + f"{'Pass':>18}{12.0:18.2f}"
    assert osu.line(ROW, columns) == expected


def test_osu_ibarrier_has_no_size_column():
    row = ROW | {"kernel": "barrier", "size_B": 0}
    assert osu.column_header("barrier", NONBLOCKING) == (
        "# Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)"
    )
    assert osu.line(row, NONBLOCKING) == f"{12.3456:13.2f}{7.0:18.2f}{6.5:18.2f}{16.07:18.2f}"
    assert "# Datatype" not in osu.header("mpi", "barrier", 64, 1, NONBLOCKING)


def test_the_blocking_layout_is_left_as_it_was_without_nonblocking():
    assert osu.column_header("allreduce") == "# Size       Avg Latency(us)"
    assert osu.title("mpi", "neighbor_alltoall") == "# OSU MPI Neighborhood All-to-All Latency Test v7.4"

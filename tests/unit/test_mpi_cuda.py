"""mpi --buffer cuda and mpi-rma's answer to it, the parts that need no GPU and no rank: which case runs a kernel,
what each rank's collective buffers do on the GPU, and mpi-rma's unsupported rows. The GPU runs themselves are
in test_gpu.py (on a GPU host)."""

from __future__ import annotations

import pytest

from fabricbench.collectives import COLLECTIVES
from fabricbench.collectives.spec import ROOT
from fabricbench.errors import Unsupported
from fabricbench.measure.kernels import get_kernel
from fabricbench.transports.mpi.rma import MPIRMATransport, buffer_unsupported
from fabricbench.transports.mpi.transport import MPITransport, collective_roles, cuda_path

POINT_TO_POINT = ("latency", "bw", "bibw", "msgrate", "multi-latency")
MOVING_COLLECTIVES = ("allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter")
MOVING_COLLECTIVES += ("gather", "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw")
MOVING_COLLECTIVES += ("reduce_scatter_block",)


def test_every_mpi_kernel_but_the_matrix_has_a_cuda_route():
    routed = set(POINT_TO_POINT) | set(MOVING_COLLECTIVES) | {"barrier"}
    # The all-pairs matrix, the bisection and the congestion kernel stay in host memory (they say so: unsupported);
    # the start-up kernels (init, hello) report MPI_Init and move no buffer; latency-mt and latency-mp, and the fan
    # kernels, run host buffers.
    host_only = ("congestion", "bisection", "init", "hello", "latency-mt", "latency-mp", "bw-fan-in", "bw-fan-out")
    # The neighbourhood collectives too.
    assert routed == {
        k for k in MPITransport.kernels if not k.startswith(("pairs-", "neighbor_")) and k not in host_only
    }


@pytest.mark.parametrize("name", MOVING_COLLECTIVES)
@pytest.mark.parametrize(("staged", "aware"), [(True, False), (True, True), (False, True)])
def test_collectives_run_on_device_buffers(name, staged, aware):
    assert cuda_path(get_kernel(name), staged, aware) == "collective"


@pytest.mark.parametrize("name", POINT_TO_POINT)
def test_point_to_point_kernels_keep_their_case(name):
    assert cuda_path(get_kernel(name), True, False) == "point-to-point"
    assert cuda_path(get_kernel(name), False, True) == "point-to-point"


@pytest.mark.parametrize("name", POINT_TO_POINT + MOVING_COLLECTIVES)
def test_device_memory_to_an_mpi_that_is_not_cuda_aware_is_unsupported(name):
    with pytest.raises(Unsupported, match=r"^MPI is not CUDA-aware \(--method staged copies through host memory\)$"):
        cuda_path(get_kernel(name), False, False)


@pytest.mark.parametrize(("staged", "aware"), [(False, False), (True, False), (False, True)])
def test_barrier_moves_no_buffer_so_it_runs_the_host_loop_on_any_mpi(staged, aware):
    assert cuda_path(get_kernel("barrier"), staged, aware) == "no buffers"


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("name", MOVING_COLLECTIVES)
def test_collective_roles_follow_what_validation_checks(name, ranks):
    """Every rank of every collective: it receives exactly where the spec's expected() is not empty, and a
    receiver's whole receive buffer is what is checked, so the staged copy back (recv's bytes) brings all of it."""
    spec = COLLECTIVES[name]
    size = 4 * spec.elem_bytes * 3
    for rank in range(ranks):
        bufs = spec.buffers(size, ranks, rank)
        shared, sends, receives = collective_roles(bufs, rank)
        assert receives == (bufs.expected().size > 0), (name, rank)
        if receives:
            assert bufs.recv.nbytes == bufs.received.size == bufs.expected().size
        assert shared == (name == "bcast")
        if name == "bcast":  # one buffer: the root's data, the others' result
            assert (sends, receives) == (rank == ROOT, rank != ROOT)
        elif name in ("reduce", "gather", "gatherv"):  # everyone contributes; only the root gets the result
            assert (sends, receives) == (True, rank == ROOT)
        else:
            assert (sends, receives) == (True, True)


def test_mpi_rma_refuses_gpu_buffers_in_one_line():
    assert buffer_unsupported({}) is None
    assert buffer_unsupported({"buffer": "host", "loop": "c"}) is None
    reason = buffer_unsupported({"buffer": "cuda", "method": "staged"})
    assert reason == "mpi-rma runs host windows only; --buffer cuda is for -t mpi"


def test_mpi_rma_preflight_asks_for_no_gpu():
    """Its rows with --buffer cuda say unsupported and it opens no GPU, so its preflight must pass without one
    (mpi's own preflight, on the same options, is what asks for CuPy and a device)."""
    MPIRMATransport.preflight({"mpi": {"buffer": "cuda", "method": "staged"}}, 2)

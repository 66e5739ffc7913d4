"""The mpi transport's Python loops on a communicator that records its calls: what one sample calls.

OSU's collectives follow each timed call with an untimed barrier; osu_barrier does not, the call being one.
osu_mbw_mr (msgrate) starts every window after a barrier; osu_bw's windows run back to back. The C loop
(_mpiloop.c's fb_collective and fb_window) makes the same calls; test_mpi_kernels runs both on real ranks.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fabricbench.measure.kernels import get_kernel
from fabricbench.transports.mpi import transport as mpi


class Recording:
    """The few mpi4py communicator methods Collective uses, each call written to ``calls``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def Get_size(self) -> int:
        return 2

    def Get_rank(self) -> int:
        return 0

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append(name)


@pytest.fixture(autouse=True)
def no_mpi(monkeypatch):
    waitall = SimpleNamespace(Waitall=lambda requests: None)
    monkeypatch.setattr(mpi, "MPI", SimpleNamespace(BYTE="byte", FLOAT="float", SUM="sum", Request=waitall))


@pytest.mark.parametrize(
    ("kernel", "size", "calls"), [("allreduce", 64, ["Allreduce", "Barrier"]), ("barrier", 0, ["Barrier"])]
)
def test_each_sample_is_the_call_then_a_barrier_unless_the_call_is_one(kernel, size, calls):
    comm = Recording()
    case = mpi.Collective(comm, get_kernel(kernel), size, persistent=False, cloop=None)
    case.run(3, memoryview(np.zeros(3, dtype=np.int64)))
    assert comm.calls == calls * 3


@pytest.mark.parametrize(("kernel", "first"), [("msgrate", ["Barrier"]), ("bw", [])])
def test_a_msgrate_window_starts_after_a_barrier_and_a_bw_window_does_not(kernel, first):
    comm = Recording()
    case = mpi.Window(comm, get_kernel(kernel), 8, "blocking", 4, cloop=None)
    case.run(2, memoryview(np.zeros(2, dtype=np.int64)))
    assert comm.calls == (first + ["Isend"] * 4 + ["Recv"]) * 2


class Arguments(Recording):
    """Recording, with each call's arguments as well, on ``ranks`` ranks."""

    def __init__(self, ranks: int, rank: int) -> None:
        super().__init__()
        self.ranks, self.rank = ranks, rank
        self.args: list[tuple] = []

    def Get_size(self) -> int:
        return self.ranks

    def Get_rank(self) -> int:
        return self.rank

    def __getattr__(self, name: str):
        return lambda *args: (self.calls.append(name), self.args.append(args))


ROOTED_AND_V = {
    "gather": "Gather",
    "gatherv": "Gatherv",
    "scatter": "Scatter",
    "scatterv": "Scatterv",
    "allgatherv": "Allgatherv",
    "alltoallv": "Alltoallv",
    "alltoallw": "Alltoallw",
    "reduce_scatter_block": "Reduce_scatter_block",
}


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("kernel", ROOTED_AND_V)
def test_the_rooted_and_v_collectives_make_their_call_then_a_barrier(monkeypatch, kernel, rank):
    byte = SimpleNamespace(Get_size=lambda: 1)  # alltoallw's byte displacements ask the datatype its size
    monkeypatch.setattr(mpi, "MPI", SimpleNamespace(BYTE=byte, FLOAT=byte, SUM="sum"))
    comm = Arguments(3, rank)
    case = mpi.Collective(comm, get_kernel(kernel), 64, persistent=False, cloop=None)
    case.run(2, memoryview(np.zeros(2, dtype=np.int64)))
    assert comm.calls == [ROOTED_AND_V[kernel], "Barrier"] * 2
    args = comm.args[0]
    if kernel in ("gatherv", "allgatherv"):  # OSU's layout: 64 bytes from every rank, rank r's at r·64
        if kernel == "gatherv" and rank:
            assert args[1] is None
        else:
            assert args[1][1:3] == [[64] * 3, [0, 64, 128]]
    if kernel == "scatterv":
        assert args[0] is None if rank else args[0][1:3] == [[64] * 3, [0, 64, 128]]
    if kernel == "alltoallw":  # displacements in bytes, a datatype per block
        assert args[0][1:] == [[64] * 3, [0, 64, 128], [byte] * 3]
    if kernel in ("gather", "scatter") and rank:  # only the root passes the result (gather), the data (scatter)
        assert args[1 if kernel == "gather" else 0] is None
    if kernel == "reduce_scatter_block":  # 64 B of float32 on 3 ranks: 16 elements, 5 kept by each rank
        assert args[0][1] == args[1][1] == 5

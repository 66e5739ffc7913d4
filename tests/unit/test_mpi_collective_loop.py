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

"""The in-process control plane (tests/inprocess.py) the runner's unit tests stand on: it moves real values
between thread-ranks, and a rank that dies or stalls ends every other rank's wait instead of hanging it."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

import inprocess
from fabricbench.control import allgather_json, rank_hosts
from inprocess import Aborted, RankFailure, RanksFailed, ThreadRanks


@pytest.mark.parametrize("size", [2, 4])
def test_every_collective_moves_each_ranks_own_values(size):
    def main(ctrl):
        gathered = ctrl.gather(np.array([ctrl.rank, 10.0 * ctrl.rank]))
        records = ctrl.gather_json({"rank": ctrl.rank})
        table = allgather_json(ctrl, {"twice": 2 * ctrl.rank})
        ctrl.barrier()
        return {
            "max": ctrl.allreduce_max(float(ctrl.rank)),
            "bytes": ctrl.bcast_bytes(b"from rank 0" if ctrl.rank == 0 else None),
            "gathered": gathered,
            "records": records,
            "table": table,
        }

    results = ThreadRanks(size).run(main)
    assert [r["max"] for r in results] == [size - 1.0] * size
    assert [r["bytes"] for r in results] == [b"from rank 0"] * size
    assert results[0]["gathered"].tolist() == [[r, 10.0 * r] for r in range(size)]
    assert results[0]["records"] == [{"rank": r} for r in range(size)]
    assert all(r["gathered"] is None and r["records"] is None for r in results[1:])
    assert all(r["table"] == [{"twice": 2 * r} for r in range(size)] for r in results)


@pytest.mark.parametrize("size", [2, 5])
def test_each_source_passes_its_number_to_its_destination_and_the_host_list_is_asked_once(size):
    def main(ctrl):
        send_to, recv_from = (ctrl.rank + 1) % size, (ctrl.rank - 1) % size  # a ring: every rank both ends
        passed = ctrl.pass_on(1.5 * ctrl.rank, send_to, recv_from)
        alone = ctrl.pass_on(7.0, None, None)  # a rank with no part in a phase
        first = rank_hosts(ctrl)
        return passed, alone, first is rank_hosts(ctrl), len(first)  # kept on the control plane: asked once

    results = ThreadRanks(size).run(main)
    assert [passed for passed, *_ in results] == [1.5 * ((rank - 1) % size) for rank in range(size)]
    assert all(np.isnan(alone) and same and count == size for _, alone, same, count in results)


def test_a_gathered_vector_is_a_copy_that_later_writes_do_not_reach():
    def main(ctrl):
        mine = np.array([1.0])
        gathered = ctrl.gather(mine)
        mine[0] = 99.0
        ctrl.barrier()
        return gathered

    assert ThreadRanks(2).run(main)[0].tolist() == [[1.0], [1.0]]


def test_first_makes_a_control_plane_of_the_first_ranks_and_none_on_the_others():
    def main(ctrl):
        sub = ctrl.first(2)
        inside = None if sub is None else (sub.rank, sub.size, sub.allreduce_max(float(sub.rank)))
        ctrl.idle_barrier()
        return inside

    assert ThreadRanks(4).run(main) == [(0, 2, 1.0), (1, 2, 1.0), None, None]


def test_a_rank_that_raises_ends_the_others_waits_at_once():
    def main(ctrl):
        if ctrl.rank == 1:
            raise ValueError("rank 1 died")
        ctrl.barrier()

    with pytest.raises(RanksFailed) as failed:
        ThreadRanks(3).run(main, deadline_s=inprocess.WAIT_S / 2)
    errors = failed.value.errors
    assert isinstance(errors[1], ValueError)
    assert isinstance(errors[0], RankFailure) and "rank 1 raised ValueError: rank 1 died" in str(errors[0])
    assert isinstance(errors[2], RankFailure)


def test_abort_ends_this_rank_with_its_code_and_wakes_the_others():
    def main(ctrl):
        if ctrl.rank == 0:
            ctrl.abort(3)
        ctrl.barrier()

    with pytest.raises(RanksFailed) as failed:
        ThreadRanks(2).run(main, deadline_s=inprocess.WAIT_S / 2)
    assert isinstance(failed.value.errors[0], Aborted) and failed.value.errors[0].code == 3
    assert "rank 0 aborted with code 3" in str(failed.value.errors[1])


def test_a_rank_that_never_comes_fails_the_wait_at_its_deadline(monkeypatch):
    monkeypatch.setattr(inprocess, "WAIT_S", 0.2)

    def main(ctrl):
        if ctrl.rank == 1:
            ctrl.group.world.broken.wait(5)  # stalls until rank 0's wait has given up, then finds the barrier broken
        ctrl.barrier()

    with pytest.raises(RanksFailed) as failed:
        ThreadRanks(2).run(main, deadline_s=10)
    assert "waited 0.2 s" in str(failed.value.errors[0])


def test_a_rank_still_running_at_the_tests_deadline_is_named():
    stop = threading.Event()

    def main(ctrl):
        if ctrl.rank == 1:
            stop.wait(5)

    with pytest.raises(AssertionError, match="rank-1 still running"):
        ThreadRanks(2).run(main, deadline_s=0.1)
    stop.set()


def test_a_peer_connection_passes_one_number_from_the_sender_alone():
    from fabricbench.control.connection import ConnectionControl

    left, right = socket.socketpair()
    client, server = ConnectionControl(left, 0, 5.0), ConnectionControl(right, 1, 5.0)
    client.pass_on(2.5, 1, None)  # the source sends; nothing comes back to it
    assert server.pass_on(9.0, None, 0) == 2.5
    assert np.isnan(client.pass_on(1.0, None, None))
    left.close()
    right.close()

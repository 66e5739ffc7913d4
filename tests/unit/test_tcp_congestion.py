"""The tcp congestion kernel's schedules, without a network: every rank's program built, then run in lockstep on an
in-memory wire that checks each step takes from every link exactly what the other end put on it (so no link is
ever left with bytes unread), and the data each test must deliver; the program's encoding; and the Python loop
on socket pairs, with a dead peer and a silent one."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from fabricbench.buffers import POISON
from fabricbench.measure.congestion import Group, Role
from fabricbench.measure.congestion import Test as Asked
from fabricbench.transports.tcp import congestion as tc
from fabricbench.transports.tcp.congestion import ADD_INT64, COPY, RECEIVE, SEND, Program, Seg
from support import run_cases_together


def simulate(programs: dict[int, Program], buffers: dict[int, list[np.ndarray]]) -> None:
    """Run every rank's program step by step (all ranks have as many steps), moving bytes between their buffers:
    within a step every send is read before any receive lands, as the links buffer them, and a step's bytes on a
    link must be taken whole by that step's receives on the other end."""
    steps = {len(program.steps) for program in programs.values()}
    assert len(steps) == 1, f"ranks disagree on the steps: {steps}"

    def view(rank: int, seg: Seg) -> np.ndarray:
        return buffers[rank][seg.buffer].view(np.uint8)[seg.offset : seg.offset + seg.size]

    for at in range(steps.pop()):
        wire: dict[tuple[int, int], bytearray] = {}
        for rank, program in programs.items():
            for (peer, direction), segs in program.steps[at].lanes.items():
                if direction == SEND:
                    wire.setdefault((rank, peer), bytearray()).extend(b"".join(view(rank, s).tobytes() for s in segs))
        for rank, program in programs.items():
            for (peer, direction), segs in program.steps[at].lanes.items():
                if direction == RECEIVE:
                    stream = wire.get((peer, rank), bytearray())
                    for seg in segs:
                        assert len(stream) >= seg.size, f"step {at}: rank {rank} waits for bytes {peer} never sends"
                        view(rank, seg)[:] = np.frombuffer(bytes(stream[: seg.size]), dtype=np.uint8)
                        del stream[: seg.size]
        left = {link: len(stream) for link, stream in wire.items() if stream}
        assert not left, f"step {at}: bytes left unread on links {left}"
        for rank, program in programs.items():
            step = program.steps[at]
            if step.action == ADD_INT64:
                a, b = view(rank, step.a).view(np.int64), view(rank, step.b).view(np.int64)
                a += b
            elif step.action == COPY:
                view(rank, step.a)[:] = view(rank, step.b)


def role(rank: int, canaries, test: str = "rr-latency", size: int = 8, groups=()) -> Role:
    return Role(rank, Asked(test, size), tuple(canaries), tuple(groups))


@pytest.mark.parametrize("n", range(2, 10))
def test_recursive_doubling_sums_int64s_exactly_on_any_ring_size(n):
    ring = [7, 3, 11, 0, 5, 9, 2, 4, 8][:n]  # canaries in ring order are any ranks
    count = 5
    programs, buffers = {}, {}
    for rank in ring:
        program = Program()
        tc.recursive_doubling(program, ring, rank, (1, 2, 3), count * 8)
        send = tc._int64_values(count, tc._seed(rank))
        buffers[rank] = [tc._flags(), send, np.full(count, -1, np.int64), np.full(count, -1, np.int64)]
        programs[rank] = program
    simulate(programs, buffers)
    want = tc._int64_values(count, sum(tc._seed(r) for r in ring))
    for rank in ring:
        assert np.array_equal(buffers[rank][2], want), rank


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("window", [1, 8])
def test_the_ring_exchange_lands_each_neighbours_message_on_its_side_even_with_two_canaries(n, window):
    ring = list(range(10, 10 + n))
    size = 6
    programs, buffers = {}, {}
    for rank in ring:
        left, right = role(rank, ring).neighbours()
        program = Program()
        tc.barrier(program, rank, ring, tc.FLAGS)
        tc.ring_exchange(program, left, right, window, (1, 2, 3), size)
        sends = [tc.filled(size, tc._seed(rank, d)) for d in (tc.TO_LEFT, tc.TO_RIGHT)]
        buffers[rank] = [tc._flags(), *sends, np.full(2 * size, POISON, np.uint8)]
        programs[rank] = program
    simulate(programs, buffers)
    for rank in ring:
        left, right = role(rank, ring).neighbours()
        want = np.concatenate([tc.pattern(size, tc._seed(left, tc.TO_RIGHT)), tc.pattern(size, tc._seed(right, 0))])
        assert np.array_equal(buffers[rank][3], want), rank


@pytest.mark.parametrize("pattern", ["all-to-all", "incast"])
def test_a_congestor_iteration_and_its_agreement_leave_every_link_clean(pattern):
    ranks = (4, 1, 6, 3)
    size, n = 3, 4
    build = tc.all_to_all if pattern == "all-to-all" else tc.incast
    programs, buffers = {}, {}
    for index, rank in enumerate(ranks):
        iteration = Program()
        build(iteration, ranks, rank, (1, 2), size)
        gather, release = tc.agreement(ranks, rank, tc.FLAGS)
        iteration.steps += gather.steps + release.steps
        send = np.concatenate([tc.pattern(size, 1 + index * n + to) for to in range(n)])
        buffers[rank] = [tc._flags(), send, np.full((n - 1) * size, POISON, np.uint8)]
        programs[rank] = iteration
    buffers[ranks[0]][0][tc.DECISION] = 1  # the first rank's decision reaches every other rank
    simulate(programs, buffers)
    assert all(buffers[rank][0][tc.DECISION] == 1 for rank in ranks)
    if pattern == "all-to-all":
        for index, rank in enumerate(ranks):
            want = np.concatenate([tc.pattern(size, 1 + s * n + index) for s in range(n) if s != index])
            assert np.array_equal(buffers[rank][2], want)
    else:
        got = buffers[ranks[0]][2]
        assert np.array_equal(got, np.concatenate([tc.pattern(size, 1 + i * n) for i in range(1, n)]))


def test_the_canaries_start_and_stop_around_their_samples_only_when_congestors_run():
    groups = (Group("all-to-all", 8, (5, 6)), Group("incast", 8, (7, 8)))
    before, after = tc.signal_programs(role(2, (2, 3), groups=groups), tc.FLAGS)
    assert list(before.steps[0].lanes) == [(5, RECEIVE), (7, RECEIVE)]  # "started" from every group's first
    assert list(after.steps[-1].lanes) == [(5, SEND), (7, SEND)]  # "stop" to each, after the last barrier
    other_before, _ = tc.signal_programs(role(3, (2, 3), groups=groups), tc.FLAGS)
    assert [list(s.lanes) for s in other_before.steps] == [[(2, SEND)], [(2, RECEIVE)]]  # only the barrier
    alone = tc.signal_programs(role(2, (2, 3)), tc.FLAGS)
    assert all(not program.steps for program in alone)


def test_the_encoding_leaves_out_empty_steps_and_names_fds_and_action_segments():
    program = Program()
    program.step(COPY, Seg(2, 0, 16), Seg(1, 0, 16))
    program.step()  # nothing: left out
    program.step().send(9, Seg(1, 0, 16)).recv(9, Seg(3, 0, 16)).send(9, Seg(1, 8, 0))  # an empty segment
    words = program.encode({9: 42}).tolist()
    assert words[:3] == [2, 2, 4]
    steps, lanes, segs = words[3:13], words[13:21], words[21:]
    assert steps == [0, 0, COPY, 0, 1, 0, 2, 0, 0, 0]
    assert lanes == [42, SEND, 2, 1, 42, RECEIVE, 3, 1]
    assert segs == [2, 0, 16, 1, 0, 16, 1, 0, 16, 3, 0, 16]


def test_the_unsupported_patterns_say_why():
    assert "no one-sided put" in tc.UNSUPPORTED["put-incast"]
    assert "no one-sided get" in tc.UNSUPPORTED["get-bcast"]
    assert "put-incast" in tc.UNSUPPORTED["mix"] and "all-to-all" not in tc.UNSUPPORTED


# --- the Python loop on socket pairs ------------------------------------------------------------------------------


def _canaries(loop=None, timeout: float = 5.0):
    """Two canaries on a socket pair, ranks 0 and 1 (left == right), each its rr-bw case."""
    a, b = socket.socketpair()
    cases = [
        tc.Canary({1: a}, role(0, (0, 1), "rr-bw", 100_000), timeout, loop),
        tc.Canary({0: b}, role(1, (0, 1), "rr-bw", 100_000), timeout, loop),
    ]
    return cases, (a, b)


def test_the_python_loop_runs_a_window_of_large_messages_both_ways_on_one_socket_and_validates():
    cases, socks = _canaries()
    try:
        for case in cases:
            case.poison()
        assert run_cases_together(cases) == []
        for case in cases:
            assert np.array_equal(case.received, case.expected())
            assert case.method.startswith("python loop")
        for sock in socks:  # nothing left unread
            with pytest.raises(BlockingIOError):
                sock.recv(1, socket.MSG_DONTWAIT)
    finally:
        for sock in socks:
            sock.close()


def test_a_silent_peer_is_a_timeout_that_names_it_and_a_closed_one_is_said_so():
    from fabricbench.errors import PeerError

    cases, socks = _canaries(timeout=0.3)
    try:
        with pytest.raises(PeerError, match=r"canary rr-bw at 100000 B: timed out after 0.3 s waiting for rank 1"):
            cases[0].run(1, memoryview(np.zeros(1, np.int64)))
        socks[1].close()
        with pytest.raises(PeerError, match=r"rank 1 (closed the connection|.*lost)"):
            cases[0].run(1, memoryview(np.zeros(1, np.int64)))
    finally:
        socks[0].close()

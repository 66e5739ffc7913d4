"""The tcp transport's part of the congestion kernel (GPCNeT): a canary's timed test and a congestor's pattern over
the links, and the start/stop protocol of the mpi transport's (``mpi_congestion``), carried by one-byte messages.

Every rank has a link to every rank in a run with a congestion step (``TCPTransport``), and in one phase a link
carries one role's bytes only: canary to canary (the ring, the canaries' barrier, the allreduce), congestor to
congestor within a group, and the canary leader (the ring's first) to each group's first rank for "started" and
"stop". Each rank's part is a ``Program``: steps that run one after the other, each a set of lanes progressed
together (one per link and direction, its messages in order), and an action once they are done (an int64 sum, a
copy). Python builds it once per case from the ranks, and the same schedule built on the other end sends exactly
what this end receives, step by step: so every link is clean (nothing unread) whenever run() returns, and the next
phase or kernel reuses the sockets. ``_tcploop.c`` runs the programs with the GIL released (``--loop c`` or
``auto`` where it builds); ``run_canary_py`` and ``run_congestor_py`` here run the same programs where it does not.

The protocol, in each run() of a congested phase (warm-up, timed run, validation): every congestor group runs its
pattern; after its first iteration and then every AGREE_EVERY-th the group agrees (every rank but the first sends it
one byte, the first answers each with one byte: stop or go on), so all its ranks leave after the same iteration;
the first agreement proves that every rank has finished an iteration, and the first rank then sends "started" to
the canary leader. The leader reads "started" from every group, the canaries meet (a gather and release through the
leader), take their samples, meet again, and the leader sends "stop" to each group's first rank, which reads it
without waiting at its next agreement. In the isolated phase the congestors are idle and the canaries just run.

TCP sockets have no one-sided operations: put-incast and get-bcast (and mix, which needs them) are refused
(``UNSUPPORTED``), and run on mpi only.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fabricbench.buffers import EMPTY, PATTERN_PERIOD, aligned, filled, pattern, poisoned, write_pattern
from fabricbench.errors import PeerError
from fabricbench.measure.congestion import INT64, MIX, Flood, Role
from fabricbench.transports.base import Case

# As the mpi transport's (mpi_congestion.AGREE_EVERY): a congestor group agrees whether to stop after its first
# iteration and then after every 32nd. The agreement costs one byte from each rank to the first and one back, beside
# 32 iterations of at least one message each way; the stop lands at most 32 iterations after the last sample.
# It also bounds how far an incast's senders run ahead of the first rank's receives.
AGREE_EVERY = 32
UNSUPPORTED = {
    "put-incast": "TCP sockets have no one-sided put (put-incast runs on mpi)",
    "get-bcast": "TCP sockets have no one-sided get (get-bcast runs on mpi)",
    MIX: "TCP sockets have no one-sided put or get, and mix runs put-incast and get-bcast beside the others",
}
RECEIVE, SEND = 0, 1  # a lane's direction (_tcploop.c's)
NO_ACTION, ADD_INT64, COPY = 0, 1, 2  # a step's action once its lanes are done (_tcploop.c's)
STEP_WORDS, LANE_WORDS, SEG_WORDS = 5, 4, 3
TO_LEFT, TO_RIGHT = 0, 1  # a canary's two directions in the ring
# A case's flags buffer (buffer 0): the decision of an agreement, a constant 1 to send, a byte to receive into.
FLAGS = 0
DECISION, ONE, SCRATCH = 0, 1, 2


def _seed(rank: int, direction: int = 0) -> int:
    """The pattern a rank sends (a canary's per direction): mpi_congestion's, so both transports move like data."""
    return 1 + 2 * rank + direction


def _int64_values(count: int, factor: int) -> np.ndarray:
    """Canary allreduce's int64s, as mpi_congestion's: (i mod 251 + 1) × factor, so that the sum over the ring is
    the same values times the sum of the ranks' factors, exactly."""
    return (np.arange(count, dtype=np.int64) % PATTERN_PERIOD + 1) * factor


# --- programs -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    """``size`` bytes at ``offset`` in the case's buffer number ``buffer``."""

    buffer: int
    offset: int
    size: int


@dataclass
class Step:
    """Lanes progressed together, keyed (peer rank, direction), each its segments in order; then ``action`` on
    segments ``a`` and ``b`` (ADD_INT64: a += b; COPY: a = b)."""

    lanes: dict[tuple[int, int], list[Seg]] = field(default_factory=dict)
    action: int = NO_ACTION
    a: Seg | None = None
    b: Seg | None = None

    def send(self, peer: int, seg: Seg) -> Step:
        self.lanes.setdefault((peer, SEND), []).append(seg)
        return self

    def recv(self, peer: int, seg: Seg) -> Step:
        self.lanes.setdefault((peer, RECEIVE), []).append(seg)
        return self


class Program:
    """One rank's schedule: steps one after the other. ``encode`` turns it into _tcploop.c's int64 words."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def step(self, action: int = NO_ACTION, a: Seg | None = None, b: Seg | None = None) -> Step:
        made = Step(action=action, a=a, b=b)
        self.steps.append(made)
        return made

    def peers(self) -> set[int]:
        return {peer for step in self.steps for peer, _ in step.lanes}

    def encode(self, fds: Mapping[int, int]) -> np.ndarray:
        """[steps, lanes, segments, each step's 5 words, each lane's 4, each segment's 3]; a step that neither moves
        nor acts is left out, and so is an empty segment."""
        steps, lanes, segs = [], [], []
        for step in self.steps:
            first_lane = len(lanes)
            for (peer, direction), parts in step.lanes.items():
                kept = [seg for seg in parts if seg.size]
                if kept:
                    lanes.append((fds[peer], direction, len(segs), len(kept)))
                    segs.extend((seg.buffer, seg.offset, seg.size) for seg in kept)
            count = len(lanes) - first_lane
            if count == 0 and step.action == NO_ACTION:
                continue
            where = [0, 0]
            if step.action != NO_ACTION:
                where = [_action_segment(segs, step.a), _action_segment(segs, step.b)]
            steps.append((first_lane, count, step.action, *where))
        words = [len(steps), len(lanes), len(segs)]
        for table in (steps, lanes, segs):
            words.extend(value for row in table for value in row)
        return np.array(words, dtype=np.int64)


def _action_segment(segs: list[tuple], seg: Seg) -> int:
    """The index of an action's segment, appended to the segment table (it is no lane's)."""
    segs.append((seg.buffer, seg.offset, seg.size))
    return len(segs) - 1


def ring_exchange(program: Program, left: int, right: int, window: int, buffers: tuple[int, int, int], size: int):
    """One step: ``window`` messages of ``size`` to each ring neighbour and from each (buffers: send-left,
    send-right, received; received holds what came from the left, then what came from the right; the window's
    receives of one side share its half). With two canaries (left == right) the one socket carries both: this end
    sends to-left before to-right, and the other end's to-left message arrives first, as the one from the right."""
    send_left, send_right, received = buffers
    from_left, from_right = Seg(received, 0, size), Seg(received, size, size)
    step = program.step()
    for _ in range(window):
        step.send(left, Seg(send_left, 0, size)).send(right, Seg(send_right, 0, size))
        if left == right:
            step.recv(left, from_right).recv(left, from_left)
        else:
            step.recv(left, from_left).recv(right, from_right)
    return step


def _gather_release(gather: Step, release: Step, me: int, members: Sequence[int], flags: int, answer: int, into: int):
    """Every member but the first sends the first one byte (``flags``'s byte ONE) in ``gather``; the first, once it
    has them all, sends each its byte at ``answer`` in ``release``, read into ``into``."""
    first = members[0]
    if me == first:
        for other in members[1:]:
            gather.recv(other, Seg(flags, SCRATCH, 1))
            release.send(other, Seg(flags, answer, 1))
    else:
        gather.send(first, Seg(flags, ONE, 1))
        release.recv(first, Seg(flags, into, 1))


def barrier(program: Program, me: int, members: Sequence[int], flags: int) -> None:
    """Two steps: every member but the first sends the first one byte and the first, once it has them all, answers
    each with one (ONE, into SCRATCH)."""
    _gather_release(program.step(), program.step(), me, members, flags, ONE, SCRATCH)


def recursive_doubling(program: Program, ring: Sequence[int], me: int, buffers: tuple[int, int, int], nbytes: int):
    """The allreduce of int64 sums over ``ring`` by recursive doubling, MPICH's for short messages (buffers: send,
    result, incoming). The result starts as this rank's send; with a ring size that is no power of two, the first
    2 × (n - p) ranks (p the largest power of two below n) fold in pairs (the even sends to the odd, which adds),
    then the p ranks left exchange and add with the partner whose index differs in bit k, for each k; at the end
    each odd rank sends the result back to its even one. Every rank runs the same number of steps."""
    send, result, incoming = buffers
    whole, landing = Seg(result, 0, nbytes), Seg(incoming, 0, nbytes)
    n, index = len(ring), ring.index(me)
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    program.step(COPY, whole, Seg(send, 0, nbytes))
    fold = program.step()
    if index < 2 * rem:
        if index % 2 == 0:
            fold.send(ring[index + 1], whole)
            new = -1
        else:
            fold.recv(ring[index - 1], landing)
            fold.action, fold.a, fold.b = ADD_INT64, whole, landing
            new = index // 2
    else:
        new = index - rem
    mask = 1
    while mask < p:
        step = program.step()
        if new >= 0:
            other = new ^ mask
            partner = ring[2 * other + 1 if other < rem else other + rem]
            step.send(partner, whole).recv(partner, landing)
            step.action, step.a, step.b = ADD_INT64, whole, landing
        mask <<= 1
    unfold = program.step()
    if index < 2 * rem:
        if index % 2:
            unfold.send(ring[index - 1], whole)
        else:
            unfold.recv(ring[index + 1], whole)


def all_to_all(program: Program, ranks: Sequence[int], me: int, buffers: tuple[int, int], size: int) -> None:
    """One step: block j of send to the group's rank j, and from every other rank its block into received, in group
    order without this rank (buffers: send, n blocks; received, n - 1 blocks)."""
    send, received = buffers
    step = program.step()
    others = [r for r in ranks if r != me]
    for at, other in enumerate(others):
        step.send(other, Seg(send, ranks.index(other) * size, size))
        step.recv(other, Seg(received, at * size, size))


def incast(program: Program, ranks: Sequence[int], me: int, buffers: tuple[int, int], size: int) -> None:
    """One step: every rank but the first sends it ``size`` bytes; the first takes them all at once, in group order
    (buffers: send, received)."""
    send, received = buffers
    step = program.step()
    if me == ranks[0]:
        for at, other in enumerate(ranks[1:]):
            step.recv(other, Seg(received, at * size, size))
    else:
        step.send(ranks[0], Seg(send, 0, size))


def agreement(ranks: Sequence[int], me: int, flags: int) -> tuple[Program, Program]:
    """A congestor group's agreement: ``gather`` (every rank but the first sends it one byte) and ``release`` (the
    first sends each its DECISION byte, read into theirs)."""
    gather, release = Program(), Program()
    _gather_release(gather.step(), release.step(), me, ranks, flags, DECISION, DECISION)
    return gather, release


def _flags() -> np.ndarray:
    flags = aligned(3)
    flags[:] = (0, 1, 0)
    return flags


def signal_programs(role: Role, flags: int) -> tuple[Program, Program]:
    """A canary's start and end of a congested run: (before, after). The leader reads "started" from every group's
    first rank, then the canaries meet; after the samples they meet again and the leader sends "stop" to each
    first rank. Empty in the isolated phase (no groups)."""
    before, after = Program(), Program()
    if not role.groups:
        return before, after
    leader = role.canaries[0]
    if role.rank == leader:
        started = before.step()
        for group in role.groups:
            started.recv(group.ranks[0], Seg(flags, SCRATCH, 1))
    barrier(before, role.rank, role.canaries, flags)
    barrier(after, role.rank, role.canaries, flags)
    if role.rank == leader:
        stop = after.step()
        for group in role.groups:
            stop.send(group.ranks[0], Seg(flags, ONE, 1))
    return before, after


# --- the Python loops ---------------------------------------------------------------------------------------------


class LinkFailure(Exception):
    """A lane's socket failed (``error``: BlockingIOError on a timeout, EOFError on a close, an OSError)."""

    def __init__(self, fd: int, error: BaseException):
        super().__init__(fd, error)
        self.fd, self.error = fd, error


class PyProgram:
    """A program decoded for the Python loop: per step, its lanes as (socket, direction, memoryviews); ``socks``
    maps the program's fds to their sockets."""

    def __init__(self, words: np.ndarray, views: Sequence[memoryview], socks: Mapping[int, socket.socket]):
        n_steps, n_lanes, n_segs = (int(v) for v in words[:3])
        step_words = words[3 : 3 + STEP_WORDS * n_steps].reshape(n_steps, STEP_WORDS)
        at = 3 + STEP_WORDS * n_steps
        lane_words = words[at : at + LANE_WORDS * n_lanes].reshape(n_lanes, LANE_WORDS)
        seg_words = words[at + LANE_WORDS * n_lanes :].reshape(n_segs, SEG_WORDS)
        segs = [views[b][o : o + s] for b, o, s in seg_words.tolist()]
        lanes = [(socks[fd], direction, segs[f : f + c]) for fd, direction, f, c in lane_words.tolist()]
        self.steps = []
        for first, count, action, a, b in step_words.tolist():
            act = None
            if action == ADD_INT64:
                act = (np.frombuffer(segs[a], dtype=np.int64), np.frombuffer(segs[b], dtype=np.int64))
            elif action == COPY:
                act = (segs[a], segs[b])
            self.steps.append((lanes[first : first + count], action, act))

    def run(self, timeout: float) -> None:
        for lanes, action, act in self.steps:
            _py_step(lanes, timeout)
            if action == ADD_INT64:
                np.add(act[0], act[1], out=act[0])
            elif action == COPY:
                act[0][:] = act[1]


def _py_step(lanes: list, timeout: float) -> None:
    """_tcploop.c's run_step in Python: every lane's messages, in order, progressed together; LinkFailure when a
    socket fails, closes, or no byte moves for ``timeout`` s."""
    state = [[sock, direction, segs, 0, 0] for sock, direction, segs in lanes]  # ..., segment at, bytes done
    pending = state
    timeout_ms = max(1, int(timeout * 1000))
    while True:
        waiting = []
        for lane in pending:
            sock, direction, segs = lane[0], lane[1], lane[2]
            try:
                while lane[3] < len(segs):
                    seg = segs[lane[3]]
                    view = seg[lane[4] :] if lane[4] else seg
                    n = (
                        sock.send(view, socket.MSG_DONTWAIT)
                        if direction == SEND
                        else sock.recv_into(view, 0, socket.MSG_DONTWAIT)
                    )
                    if not n:
                        raise EOFError
                    lane[4] += n
                    if lane[4] == len(seg):
                        lane[3], lane[4] = lane[3] + 1, 0
            except BlockingIOError:
                waiting.append(lane)
            except (EOFError, OSError) as exc:
                raise LinkFailure(sock.fileno(), exc) from None
        if not waiting:
            return
        poller = select.poll()
        masks: dict[int, int] = {}
        for lane in waiting:
            fd = lane[0].fileno()
            masks[fd] = masks.get(fd, 0) | (select.POLLOUT if lane[1] == SEND else select.POLLIN)
        for fd, mask in masks.items():
            poller.register(fd, mask)
        if not poller.poll(timeout_ms):
            raise LinkFailure(waiting[0][0].fileno(), BlockingIOError())
        pending = waiting


def run_canary_py(before: PyProgram, sample: PyProgram, after: PyProgram, iterations, times, timeout) -> None:
    """congestion_canary in Python."""
    before.run(timeout)
    clock, run = time.perf_counter_ns, sample.run
    last = clock()
    for i in range(iterations):
        run(timeout)
        now = clock()
        times[i] = now - last
        last = now
    after.run(timeout)


def run_congestor_py(programs: Sequence[PyProgram], decision: np.ndarray, first: bool, stop, stats, timeout) -> None:
    """congestion_congestor in Python (``stop``: the first rank's socket to the canary leader)."""
    iteration, gather, release, started = programs
    done, stop_seen, started_ns = 0, False, 0
    while True:
        iteration.run(timeout)
        done += 1
        if (done - 1) % AGREE_EVERY:
            continue
        if done == 1:
            started_ns = time.perf_counter_ns()
        gather.run(timeout)
        if first:
            if done > 1 and not stop_seen:
                try:
                    got = stop.recv(1, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    got = None
                except OSError as exc:
                    raise LinkFailure(stop.fileno(), exc) from None
                if got == b"":
                    raise LinkFailure(stop.fileno(), EOFError())
                stop_seen = bool(got)
            decision[DECISION] = stop_seen
        release.run(timeout)
        if done == 1:
            if first:
                started.run(timeout)
        elif decision[DECISION]:
            stats[:] = (done - 1, time.perf_counter_ns() - started_ns)
            return


# --- the cases ----------------------------------------------------------------------------------------------------


class _Part(Case):
    """A canary's or congestor's part: its buffers (a tuple the programs index), its links, and the loop that runs
    it; a failure on a link becomes one PeerError naming the peer."""

    def __init__(self, links: Mapping[int, socket.socket], timeout: float, loop, what: str):
        super().__init__()
        self.links, self.timeout, self.loop, self.what = links, timeout, loop, what
        self.fds = {peer: sock.fileno() for peer, sock in links.items()}
        self.by_fd = {fd: peer for peer, fd in self.fds.items()}
        self.where = np.full(1, -1, dtype=np.int64)
        self.buffers: tuple[np.ndarray, ...] = ()
        self._expected = EMPTY

    def expected(self) -> np.ndarray:
        return self._expected

    def _python(self, program: Program) -> PyProgram:
        views = [memoryview(buffer.view(np.uint8)) for buffer in self.buffers]
        return PyProgram(program.encode(self.fds), views, {sock.fileno(): sock for sock in self.links.values()})

    def run(self, iterations: int, times: memoryview) -> None:
        self.where[0] = -1
        try:
            self._run(iterations, times)
        except LinkFailure as failure:
            self.where[0] = failure.fd
            self._fail(failure.error)
        except (BlockingIOError, EOFError, OSError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException):
        peer = self.by_fd.get(int(self.where[0]))
        who = f"rank {peer}" if peer is not None else "a peer"
        if isinstance(exc, BlockingIOError):
            raise PeerError(f"{self.what}: timed out after {self.timeout:g} s waiting for {who}") from None
        if isinstance(exc, (EOFError, ConnectionError)):
            raise PeerError(f"{self.what}: {who} closed the connection") from None
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise PeerError(f"{self.what}: connection to {who} lost: {reason}") from None

    def _run(self, iterations: int, times: memoryview) -> None:
        raise NotImplementedError


class Idle(Case):
    """A rank with no part in the phase (a congestor in the isolated phase, a rank --per-node leaves out)."""

    method = "idle"

    def run(self, iterations: int, times: memoryview) -> None:
        pass

    def poison(self) -> None:
        pass


def loop_name(loop) -> str:
    return "c loop" if loop is not None else "python loop"


class Canary(_Part):
    """One canary rank's test: its samples speak for the row. Validation as mpi's: rr-latency and rr-bw receive
    the left neighbour's message then the right one's, each its sender's pattern for that direction; allreduce, the
    exact int64 sum over the ring."""

    def __init__(self, links, role: Role, timeout: float, loop):
        test, rank, size = role.canary, role.rank, role.canary.size
        super().__init__(links, timeout, loop, f"tcp congestion canary {test.name} at {size} B")
        self.initiator = True
        left, right = role.neighbours()
        sample = Program()
        how = loop_name(loop)
        if test.name == "allreduce":
            count = size // INT64
            send = aligned(count * INT64, "i8")
            send[:] = _int64_values(count, _seed(rank))
            result, incoming = poisoned(count * INT64, "i8"), poisoned(count * INT64, "i8")
            self.buffers = (_flags(), send, result, incoming)
            self.received = result.view(np.uint8)
            self._expected = _int64_values(count, sum(_seed(r) for r in role.canaries)).view(np.uint8)
            recursive_doubling(sample, role.canaries, rank, (1, 2, 3), count * INT64)
            self.method = f"{how}, recursive doubling of int64 sums over the canaries' links"
        else:
            received = poisoned(2 * size)  # from the left, then from the right
            self.buffers = (_flags(), filled(size, _seed(rank, TO_LEFT)), filled(size, _seed(rank, TO_RIGHT)), received)
            self.received = received
            self._expected = np.concatenate(
                [pattern(size, _seed(left, TO_RIGHT)), pattern(size, _seed(right, TO_LEFT))]
            )
            window = role.window if test.name == "rr-bw" else 1
            if test.name == "rr-bw":
                self.window = window
                barrier(sample, rank, role.canaries, FLAGS)
                self.method = (
                    f"{how}, a barrier through the first canary, then {window} sends to and receives from each ring "
                    "neighbour, progressed together in poll()"
                )
            else:
                self.method = f"{how}, a send to and a receive from each ring neighbour, progressed together in poll()"
            ring_exchange(sample, left, right, window, (1, 2, 3), size)
        before, after = signal_programs(role, FLAGS)
        self.programs = (before, sample, after)
        if loop is not None:
            self.words = tuple(program.encode(self.fds) for program in self.programs)
        else:
            self.py = tuple(self._python(program) for program in self.programs)

    def _run(self, iterations: int, times: memoryview) -> None:
        if self.loop is not None:
            self.loop.congestion_canary(self.buffers, *self.words, iterations, times, self.timeout, self.where)
        else:
            run_canary_py(*self.py, iterations, times, self.timeout)


class Congestor(_Part):
    """One congestor rank's pattern, again and again until the canary leader says stop; ``iterations`` is ignored
    and no sample is written.

    After each run(), as mpi's: ``active_ns`` is the time on this rank from the end of its first iteration to the
    end of the agreement that stopped it, a span that holds every canary sample (each rank enters the first
    agreement before the first rank can send "started", and leaves the last only after "stop" came); and
    ``moved_bytes`` is what this rank sent in the iterations it finished in that span (all but its first):
    all-to-all (n - 1) × size an iteration, its own block excluded; incast size an iteration from every rank but
    the first, which sends nothing. The agreements' bytes are not counted. ``runs`` holds a Flood per run() in call
    order (warm-up, timed run, validation).

    Validation: all-to-all, every other rank's block, each the pattern of its (sender, receiver) pair; incast, the
    first rank holding every other rank's pattern in group order. Ranks that receive nothing validate EMPTY.
    """

    def __init__(self, links, role: Role, timeout: float, loop):
        group, rank = role.group, role.rank
        name, size, ranks = group.pattern, group.size, group.ranks
        super().__init__(links, timeout, loop, f"tcp congestion {name} at {size} B")
        n, index = len(ranks), ranks.index(rank)
        self.first = index == 0
        how = loop_name(loop)
        iteration = Program()
        if name == "all-to-all":
            send = aligned(n * size)
            for to in range(n):
                write_pattern(send[to * size : (to + 1) * size], 1 + index * n + to)
            received = poisoned((n - 1) * size)
            self._expected = np.concatenate([pattern(size, 1 + s * n + index) for s in range(n) if s != index])
            self.per_iteration = (n - 1) * size
            all_to_all(iteration, ranks, rank, (1, 2), size)
            calls = "every rank sends to and receives from each other, progressed together in poll()"
        elif name == "incast":
            send = EMPTY if self.first else filled(size, _seed(rank))
            received = poisoned((n - 1) * size) if self.first else EMPTY
            self._expected = np.concatenate([pattern(size, _seed(r)) for r in ranks[1:]]) if self.first else EMPTY
            self.per_iteration = 0 if self.first else size
            incast(iteration, ranks, rank, (1, 2), size)
            calls = "every other rank sends to the first, which receives from all at once in poll()"
        else:  # congestion_unsupported refused it before any phase
            raise ValueError(f"tcp has no congestor {name}")
        self.received = received
        self.buffers = (_flags(), send, received)
        self.method = f"{how}, {name}: {calls}; stop agreed through the first rank every {AGREE_EVERY} iterations"
        gather, release = agreement(ranks, rank, FLAGS)
        started = Program()
        leader = role.canaries[0]
        if self.first:
            started.step().send(leader, Seg(FLAGS, ONE, 1))
        self.stop = links[leader] if self.first else None
        self.programs = (iteration, gather, release, started)
        self.stats = np.zeros(2, dtype=np.int64)
        if loop is not None:
            self.words = tuple(program.encode(self.fds) for program in self.programs)
        else:
            self.py = tuple(self._python(program) for program in self.programs)
        self.runs: list[Flood] = []
        self.moved_bytes = self.active_ns = 0

    def _run(self, iterations: int, times: memoryview) -> None:
        self.stats[:] = 0
        if self.loop is not None:
            stop_fd = self.stop.fileno() if self.stop else -1
            self.loop.congestion_congestor(
                self.buffers, *self.words, FLAGS, self.first, stop_fd, AGREE_EVERY, self.timeout, self.stats,
                self.where,
            )  # fmt: skip
        else:
            run_congestor_py(self.py, self.buffers[FLAGS], self.first, self.stop, self.stats, self.timeout)
        done, active_ns = (int(value) for value in self.stats)
        flood = Flood(done, done * self.per_iteration, active_ns)
        self.runs.append(flood)
        self.moved_bytes, self.active_ns = flood.moved_bytes, flood.active_ns


def case(links: Mapping[int, socket.socket], role: Role, timeout: float, loop) -> Case:
    """This rank's case of one congestion phase: Canary, Congestor or Idle. ``loop``: the C loops' module, or None
    for the Python loop. No traffic: every link a program names must exist (every rank's, in a congestion run)."""
    if role.is_canary:
        return Canary(links, role, timeout, loop)
    if role.group is not None:
        return Congestor(links, role, timeout, loop)
    return Idle()

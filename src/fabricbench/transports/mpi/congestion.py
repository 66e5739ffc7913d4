"""The mpi transport's part of the congestion kernel (GPCNeT): a canary's timed test, a congestor's pattern run
until it is told to stop, and the start/stop protocol that keeps every canary sample inside the congestion.

``case`` is called on every rank of the transport's communicator for every phase, in the same order: it splits
that communicator into the canaries' ring (ranked in ring order) and one communicator per congestor group (ranked
in the group's order, its first rank 0), and duplicates it for the start/stop messages, so that their tags can
never meet the control plane's or a loop's. Idle ranks take part in those calls and get a case that does nothing.

The protocol, in each ``run`` of a congested phase (warm-up, timed run, validation: one congestor run per canary
run). Every congestor group runs its pattern; after its first iteration the group agrees (see AGREE_EVERY), which
proves that every rank of it has finished one, and its first rank sends "started" to the canary leader (the ring's
first). The leader receives "started" from every group, the canaries meet at a barrier, take their samples, meet
again, and the leader sends "stop" to every group's first rank; the group leaves together at its next agreement.
In the isolated phase the congestors are idle and the canaries just run.

The loops are C only (``fb_canary`` and ``fb_congestor`` in ``_mpiloop.c``): a congestor's iterations and a
canary's samples make MPI calls and nothing else.
"""

from __future__ import annotations

import numpy as np

from fabricbench.buffers import (
    EMPTY,
    PATTERN_PERIOD,
    POISON,
    aligned,
    filled,
    pattern,
    poisoned,
    times_address,
    write_pattern,
)
from fabricbench.control.mpi import import_mpi
from fabricbench.measure.congestion import INT64, Flood, Role
from fabricbench.transports.base import Case
from fabricbench.transports.mpi.cloop import CLoop, require_success

# A congestor group agrees whether to stop after its first iteration and then after every AGREE_EVERY-th: one
# MPI_Allreduce (MAX) of a 4-byte flag on the group's communicator. Its cost is one small allreduce beside
# AGREE_EVERY iterations, each at least one round trip (a put or get and its flush) or a whole collective; and the
# stop lands at most AGREE_EVERY iterations after it was sent: after the canaries' last sample, so in no sample.
# The agreement also bounds how far an incast's eager senders run ahead of the first rank's receives.
AGREE_EVERY = 32
CANARY_CODES = {"rr-latency": 0, "rr-bw": 1, "allreduce": 2}  # fb_canary's tests
PATTERN_CODES = {"all-to-all": 0, "incast": 1, "put-incast": 2, "get-bcast": 3}  # fb_congestor's patterns
TO_LEFT, TO_RIGHT = 0, 1  # a canary's two directions in the ring


def _seed(rank: int, direction: int = 0) -> int:
    """The pattern a rank sends (a canary's per direction), unlike any other rank's while ranks are few."""
    return 1 + 2 * rank + direction


def _int64_values(count: int, factor: int) -> np.ndarray:
    """Canary allreduce's int64s: (i mod 251 + 1) × factor, so that the sum over the ring is the same values times
    the sum of the ranks' factors, exactly, at any ring size an int64 can hold."""
    return (np.arange(count, dtype=np.int64) % PATTERN_PERIOD + 1) * factor


def case(comm, role: Role, cloop: CLoop) -> Case:
    """This rank's case of one congestion phase: Canary, Congestor or Idle. Collective on ``comm`` (the
    transport's): every rank calls it with its own Role of the same phase."""
    MPI = import_mpi()
    group = role.group
    if role.is_canary:
        color, key = 0, role.canaries.index(role.rank)
    elif group is not None:
        color, key = 1 + role.groups.index(group), group.ranks.index(role.rank)
    else:
        color, key = MPI.UNDEFINED, 0
    part = comm.Split(color, key)  # the ring, this rank's group, or COMM_NULL
    signal = comm.Dup()
    try:
        if role.is_canary:
            return Canary(part, signal, role, cloop)
        if group is not None:
            return Congestor(part, signal, role, cloop)
        return Idle([signal])
    except BaseException:
        for comm_made in (part, signal):
            if comm_made != MPI.COMM_NULL:
                comm_made.Free()
        raise


class _Part(Case):
    """A rank's part in a phase, holding the communicators and window it was given; close() frees them, last
    made first (a window before its communicator)."""

    def __init__(self, held: list) -> None:
        super().__init__()
        self._held = held

    def close(self) -> None:
        while self._held:
            self._held.pop().Free()


class Idle(_Part):
    """A rank with no part in the phase (a congestor in the isolated phase, a rank --per-node leaves out): it took
    part in the phase's Split and Dup, and now only meets the runner's barriers."""

    method = "idle"

    def run(self, iterations: int, times: memoryview) -> None:
        pass

    def poison(self) -> None:
        pass


class Canary(_Part):
    """One canary rank's test: its samples speak for the row. Validation: rr-latency and rr-bw receive, in
    ``received``, the left neighbour's message then the right one's, each its sender's pattern for that direction;
    allreduce, the exact int64 sum over the ring."""

    def __init__(self, ring, signal, role: Role, cloop: CLoop):
        super().__init__([signal, ring])
        self.initiator = True
        self.cloop = cloop
        test, rank, size = role.canary, role.rank, role.canary.size
        self.what = f"mpi congestion canary {test.name} at {size} B"
        left, right = role.neighbours()
        if test.name == "allreduce":
            count = size // INT64
            self.send = aligned(count * INT64, "i8")
            self.send[:] = _int64_values(count, _seed(rank))
            recv = poisoned(count * INT64, "i8")
            self.received = recv.view(np.uint8)
            self._expected = _int64_values(count, sum(_seed(r) for r in role.canaries)).view(np.uint8)
            buffers = (self.send.ctypes.data, self.send.ctypes.data, recv.ctypes.data, recv.ctypes.data)
            self.method = "c loop, MPI_Allreduce of int64 sums, back to back"
        else:
            self.send_left, self.send_right = filled(size, _seed(rank, TO_LEFT)), filled(size, _seed(rank, TO_RIGHT))
            self.received = poisoned(2 * size)  # from the left, then from the right
            self._expected = np.concatenate(
                [pattern(size, _seed(left, TO_RIGHT)), pattern(size, _seed(right, TO_LEFT))]
            )
            recv = self.received.ctypes.data
            buffers = (self.send_left.ctypes.data, self.send_right.ctypes.data, recv, recv + size)
            if test.name == "rr-bw":
                self.window = role.window  # messages to each neighbour a sample
                self.method = (
                    f"c loop, MPI_Barrier then {role.window} MPI_Irecv/MPI_Isend each ring neighbour, MPI_Waitall"
                )
            else:
                self.method = "c loop, MPI_Irecv/MPI_Isend each ring neighbour, MPI_Waitall"
        leads = rank == role.canaries[0] and bool(role.groups)
        self.firsts = np.array([g.ranks[0] for g in role.groups] if leads else [0], dtype=np.intc)
        self.signal_buf = filled(2, 0)  # "started" lands in byte 0; the leader sends "stop" from it
        ring_left, ring_right = role.canaries.index(left), role.canaries.index(right)
        self.c_args = (ring.py2f(), signal.py2f(), CANARY_CODES[test.name], ring_left, ring_right, *buffers, size)
        self.c_args += (role.window, int(bool(role.groups)), self.firsts.ctypes.data, len(role.groups) if leads else 0)
        self.c_args += (self.signal_buf.ctypes.data,)

    def expected(self) -> np.ndarray:
        return self._expected

    def run(self, iterations: int, times: memoryview) -> None:
        require_success(self.cloop.lib.fb_canary(*self.c_args, iterations, times_address(times)), self.what)


class Congestor(_Part):
    """One congestor rank's pattern, again and again until the canary leader says stop; ``iterations`` is ignored
    and no sample is written.

    After each run(): ``active_ns`` is the time on this rank from the end of its first iteration (when it enters
    the group's first agreement, whose end tells the first rank that every rank runs, and the leader so) to the end
    of the agreement that stopped it: a span that holds every canary sample, on every rank of the group, since each
    rank enters that agreement before it can end anywhere and leaves the last only after "stop" was sent. And
    ``moved_bytes`` is what this rank moved in the iterations it finished in that span (all but its first):
    what it sent to the other ranks (all-to-all: (n - 1) × size an iteration, its own block excluded; incast and
    put-incast: size an iteration from every rank but the first, which sends nothing), or for get-bcast what it
    fetched (size an iteration, the root nothing). The agreements' own bytes are not counted. ``runs`` holds a
    Flood per run() in call order (warm-up, timed run, validation), since the runner validates after the timed run.

    Validation: all-to-all, every block from every rank of the group, each the pattern of its (sender, receiver)
    pair; incast and put-incast, the first rank's buffer or window holding every other rank's pattern in group
    order; get-bcast, every other rank holding the first's window. Ranks that receive nothing validate EMPTY.
    """

    def __init__(self, comm, signal, role: Role, cloop: CLoop):
        super().__init__([signal, comm])
        MPI = import_mpi()
        self.cloop = cloop
        group, rank = role.group, role.rank
        name, size, ranks = group.pattern, group.size, group.ranks
        n, index = len(ranks), ranks.index(rank)
        first = index == 0
        self.what = f"mpi congestion {name} at {size} B"
        self.size = size
        self.win = None
        self.memory = EMPTY  # the first rank's window memory, one-sided patterns
        self.send = self.recv = EMPTY
        calls = {
            "all-to-all": "MPI_Alltoall",
            "incast": "MPI_Send to the first rank, MPI_Irecv from each and MPI_Waitall there",
            "put-incast": "MPI_Put into the first rank's window and MPI_Win_flush, one shared lock a run",
            "get-bcast": "MPI_Get from the first rank's window and MPI_Win_flush, one shared lock a run",
        }[name]
        self.method = f"c loop, {calls}; stop agreed by MPI_Allreduce every {AGREE_EVERY} iterations"
        if name == "all-to-all":
            self.send = aligned(n * size)
            for to in range(n):
                write_pattern(self.send[to * size : (to + 1) * size], 1 + index * n + to)
            self.recv = self.received = poisoned(n * size)
            self._expected = np.concatenate([pattern(size, 1 + sender * n + index) for sender in range(n)])
            self.per_iteration = (n - 1) * size
        elif name == "incast":
            if first:
                self.recv = self.received = poisoned((n - 1) * size)
            else:
                self.send = filled(size, _seed(rank))
            self.per_iteration = 0 if first else size
        elif name in ("put-incast", "get-bcast"):
            put = name == "put-incast"
            self.win = MPI.Win.Allocate(((n - 1) * size if put else size) if first else 0, 1, MPI.INFO_NULL, comm)
            self._held.append(self.win)
            if first:
                self.memory = np.frombuffer(self.win.tomemory(), dtype=np.uint8)
                self._write_own_window(POISON if put else pattern(size, _seed(rank)))
                self.received = self.memory if put else EMPTY
            elif put:
                self.send = filled(size, _seed(rank))
            else:
                self.recv = self.received = poisoned(size)
            self.per_iteration = 0 if first else size
        if name != "all-to-all":
            senders = ranks[1:] if first else ranks[:1]
            self._expected = np.concatenate([pattern(size, _seed(r)) for r in senders]) if self.received.size else EMPTY
        self.stats = np.zeros(2, dtype=np.int64)  # fb_congestor's: active iterations, active ns
        self.signal_buf = filled(2, 0)  # the first rank sends "started" from byte 0; "stop" lands in byte 1
        win = (self.win or MPI.WIN_NULL).py2f()
        self.c_args = (comm.py2f(), signal.py2f(), win, PATTERN_CODES[name], role.canaries[0])
        self.c_args += (self.send.ctypes.data, self.recv.ctypes.data, self.signal_buf.ctypes.data, size, AGREE_EVERY)
        self.runs: list[Flood] = []
        self.moved_bytes = self.active_ns = 0

    def _write_own_window(self, content) -> None:
        """The first rank writes its own window inside an exclusive epoch on itself, so that no epoch of the
        others' reads it half written."""
        MPI = import_mpi()
        self.win.Lock(0, MPI.LOCK_EXCLUSIVE)
        self.memory[:] = content
        self.win.Unlock(0)

    def expected(self) -> np.ndarray:
        return self._expected

    def poison(self) -> None:
        if self.received.size and self.received is self.memory:  # put-incast's first rank: its window
            self._write_own_window(POISON)
        else:
            self.received[:] = POISON

    def run(self, iterations: int, times: memoryview) -> None:
        require_success(self.cloop.lib.fb_congestor(*self.c_args, self.stats.ctypes.data), self.what)
        done, active_ns = (int(value) for value in self.stats)
        flood = Flood(done, done * self.per_iteration, active_ns)
        self.runs.append(flood)
        self.moved_bytes, self.active_ns = flood.moved_bytes, flood.active_ns

    def close(self) -> None:
        self.memory = self.received = EMPTY  # no view of the window outlives it
        super().close()

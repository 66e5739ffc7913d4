"""Transport ``nccl``: NCCL through CuPy (``cupy.cuda.nccl``), one rank per GPU, as nccl-tests measures it.

- Bootstrap as nccl-tests: each rank selects its GPU (``fabricbench.transports.gpu.devices``),
  rank 0 makes the unique id and the control plane broadcasts it (hex in
  JSON, never pickled), then every rank joins the communicator.
- Collectives are NCCL's own; alltoall is grouped send/recv, as nccl-tests'
  alltoall_perf. latency (ping-pong) and bw (a window of sends) are grouped
  send/recv between rank 0 and rank N/2.
- Sizes are fabricbench's S (the per-rank block, OSU's convention); algbw and
  busbw use nccl-tests' formulas through the collective specs.
- Timing is CUDA events on the rank's stream (``cuda_timing``); ``-c``
  compares on the device and counts nccl-tests' ``#wrong`` (the row's wrong_elements).
- ``--placement`` (``transports.placement``) measures a collective in place too, in one buffer as nccl-tests
  places it (``in_place_offsets``); its rows' placement column says which.
"""

from __future__ import annotations

import json

from fabricbench.collectives.spec import ROOT
from fabricbench.errors import PeerError, Unsupported, UsageError
from fabricbench.lazy import np
from fabricbench.measure.kernels import Kernel, partner_of
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.gpu import devices as gpu
from fabricbench.transports.gpu.timing import EventTimer, sample_name
from fabricbench.transports.placement import PLACEMENT

COLLECTIVE_KERNELS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "bcast", "reduce")
REDUCING = {"allreduce", "reduce_scatter", "reduce"}
PATTERN_PERIOD = 17  # data is small integers, (i mod 17) + 1 + a per-rank offset: exact in every dtype's range


def nccl_counts(kernel: str, size: int, ranks: int, itemsize: int) -> tuple[int, int, int]:
    """(send elements, receive elements, the count NCCL's call takes) for a per-rank block of ``size`` bytes,
    as nccl-tests' getCollByteCount lays out the buffers."""
    count = size // itemsize
    if kernel in ("allreduce", "bcast", "reduce"):
        return count, count, count
    if kernel == "allgather":
        return count, count * ranks, count
    if kernel == "reduce_scatter":
        return count * ranks, count, count
    if kernel == "alltoall":
        return count * ranks, count * ranks, count  # count to and from each peer
    if kernel in ("latency", "bw"):
        return count, count, count
    raise ValueError(kernel)


def nccl_tests_size(kernel: str, size: int, ranks: int) -> int:
    """The ``size`` column nccl-tests prints for our per-rank block S: the bytes its algbw divides by the time."""
    return size * ranks if kernel in ("allgather", "reduce_scatter", "alltoall") else size


def in_place_offsets(kernel: str, rank: int, count: int) -> tuple[int, int]:
    """In-place: (send offset, receive offset) in elements inside one buffer, as nccl-tests places them."""
    if kernel == "allgather":
        return rank * count, 0
    if kernel == "reduce_scatter":
        return 0, rank * count
    return 0, 0


def encode_unique_id(uid) -> bytes:
    """NCCL's unique id as JSON: 128 bytes (CuPy >= 14) as hex, or the tuple of ints older CuPy gives."""
    if isinstance(uid, (bytes, bytearray)):
        return json.dumps({"hex": bytes(uid).hex()}).encode()
    return json.dumps({"ints": [int(v) for v in uid]}).encode()


def decode_unique_id(data: bytes):
    """The unique id rank 0 broadcast, its shape checked (it crossed the network)."""
    try:
        found = json.loads(data)
        if "hex" in found:
            uid = bytes.fromhex(found["hex"])
            if len(uid) != 128:
                raise ValueError
            return uid
        ints = found["ints"]
        if len(ints) != 128 or not all(isinstance(v, int) and -128 <= v <= 255 for v in ints):
            raise ValueError
        return tuple(ints)
    except (ValueError, TypeError, KeyError, AttributeError):
        raise PeerError("the NCCL unique id broadcast by rank 0 is malformed") from None


def shared_gpus(ranks: list[dict]) -> str | None:
    """Two ranks on one GPU (NCCL refuses them), named; None when every rank has its own."""
    seen: dict[tuple, int] = {}
    for rank, record in enumerate(ranks):
        key = (record.get("host"), record.get("bus_id"))
        if key in seen:
            return f"ranks {seen[key]} and {rank} share GPU {record.get('bus_id')} on {record.get('host')}"
        seen[key] = rank
    return None


class NcclCase(Case):
    """One NCCL kernel at one size on this rank: device buffers written, the launch bound, events ready."""

    def __init__(self, transport: NCCLTransport, kernel: Kernel, size: int):
        super().__init__()
        cupy, nccl = transport.cupy, transport.nccl
        self.cupy, self.ctrl, self.kernel = cupy, transport.ctrl, kernel
        self.rank, self.ranks = transport.ctrl.rank, transport.ctrl.size
        self.dtype = np.dtype(transport.dtype)
        if size % self.dtype.itemsize:
            raise Unsupported(f"size is not a multiple of the {self.dtype.itemsize}-byte {transport.dtype}")
        self.in_place = kernel.collective and kernel.collective_spec.in_place  # --placement's in-place form
        if self.in_place and kernel.name == "alltoall":
            raise Unsupported("alltoall in place: grouped send/recv would read blocks already overwritten")
        self.nccl_type = getattr(nccl, f"NCCL_{transport.dtype.upper()}")
        self.nccl_op = getattr(nccl, f"NCCL_{transport.op.upper()}", None)
        if self.nccl_op is None:
            raise Unsupported(f"this NCCL has no {transport.op} reduction")
        self.op = transport.op
        self.stream = transport.stream
        self.comm = transport.comm
        self.send_n, self.recv_n, self.count = nccl_counts(kernel.name, size, self.ranks, self.dtype.itemsize)
        self.initiator = True
        self.active = True
        self.peer = -1
        if not kernel.collective:
            role = partner_of(kernel, self.rank, self.ranks)
            self.active = role is not None
            self.peer, self.initiator = role if role else (-1, False)
            self.window = transport.window if kernel.windowed else 0
        with cupy.cuda.Device(transport.binding.index):
            self._allocate()
        launch = self._launcher() if self.active else (lambda: None)
        self.timer = EventTimer(cupy, self.stream, launch, transport.timing, transport.graph)
        self.method = (
            "events" + (", cuda graph" if transport.graph else "") + ("" if kernel.collective else ", send/recv")
        )
        self.row_fields = {"sample": sample_name(kernel.sample, transport.timing)}
        if kernel.collective and kernel.name in REDUCING:
            self.row_fields["note"] = f"dtype {transport.dtype}, op {transport.op}"
        elif kernel.collective:
            self.row_fields["note"] = f"dtype {transport.dtype}"
        self.wrong = 0

    # ----- data: what each rank contributes and what must arrive (on the device) -----

    def _contribution(self, n: int, offset: int):
        """``n`` elements of small integers ((i mod 17) + 1 + offset) in the run's dtype."""
        xp = self.cupy
        return ((xp.arange(n, dtype=xp.int64) % PATTERN_PERIOD) + 1 + offset).astype(self.dtype)

    def _input(self):
        """This rank's send data: alltoall's block for peer d is offset by rank·n + d, so misdelivery shows."""
        if self.kernel.name == "alltoall":
            blocks = [self._contribution(self.count, self.rank * self.ranks + d) for d in range(self.ranks)]
            return self.cupy.concatenate(blocks) if blocks else self._contribution(0, 0)
        return self._contribution(self.send_n, self.rank)

    def _allocate(self) -> None:
        xp = self.cupy
        if self.in_place:
            total = max(self.send_n, self.recv_n)
            self.buffer = xp.empty(total, dtype=self.dtype)
            send_at, recv_at = in_place_offsets(self.kernel.name, self.rank, self.count)
            self.send = self.buffer[send_at : send_at + self.send_n]
            self.recv = self.buffer[recv_at : recv_at + self.recv_n]
        else:
            self.send = xp.empty(self.send_n, dtype=self.dtype)
            self.recv = xp.empty(self.recv_n, dtype=self.dtype)
        self.poison()  # written, never the zero page: the result poisoned, then the input

    def _expected(self):
        """The receive buffer nccl-tests would check, computed on the device."""
        xp, name, ranks, count = self.cupy, self.kernel.name, self.ranks, self.count
        if name == "allgather":
            return xp.concatenate([self._contribution(count, r) for r in range(ranks)])
        if name == "alltoall":
            return xp.concatenate([self._contribution(count, s * ranks + self.rank) for s in range(ranks)])
        if name == "bcast":
            return self._contribution(count, ROOT)
        if name in ("latency", "bw"):
            return self._contribution(count, self.peer)
        n = self.send_n
        acc = None
        for r in range(ranks):
            part = self._contribution(n, r)
            if acc is None:
                acc = part.copy()
            elif self.op in ("sum", "avg"):
                acc += part
            elif self.op == "prod":
                acc *= part
            elif self.op == "max":
                acc = xp.maximum(acc, part)
            else:
                acc = xp.minimum(acc, part)
        if self.op == "avg":
            acc = (acc / ranks).astype(self.dtype) if self.dtype.kind == "f" else acc // ranks
        if name == "reduce_scatter":
            return acc[self.rank * count : (self.rank + 1) * count]
        return acc

    def _checks(self) -> bool:
        """Whether this rank has a result to check."""
        if not self.active or (self.kernel.name == "reduce" and self.rank != ROOT):
            return False
        return not (self.kernel.windowed and self.initiator)  # a bw sender receives nothing

    # ----- the launch: one iteration's work enqueued on the stream -----

    def _launcher(self):
        comm, stream_ptr = self.comm, self.stream.ptr
        send, recv = self.send.data.ptr, self.recv.data.ptr
        count, dtype, op, nccl = self.count, self.nccl_type, self.nccl_op, self.nccl_module()
        name = self.kernel.name
        if name == "allreduce":
            return lambda: comm.allReduce(send, recv, count, dtype, op, stream_ptr)
        if name == "allgather":
            return lambda: comm.allGather(send, recv, count, dtype, stream_ptr)
        if name == "reduce_scatter":
            return lambda: comm.reduceScatter(send, recv, count, dtype, op, stream_ptr)
        if name == "reduce":
            return lambda: comm.reduce(send, recv, count, dtype, op, ROOT, stream_ptr)
        if name == "bcast":
            source = send if self.rank == ROOT else recv
            return lambda: comm.broadcast(source, recv, count, dtype, ROOT, stream_ptr)
        group_start, group_end = nccl.groupStart, nccl.groupEnd
        if name == "alltoall":
            block = count * self.dtype.itemsize
            pairs = [(send + p * block, recv + p * block, p) for p in range(self.ranks)]

            def alltoall():
                group_start()
                for send_at, recv_at, peer in pairs:
                    comm.send(send_at, count, dtype, peer, stream_ptr)
                    comm.recv(recv_at, count, dtype, peer, stream_ptr)
                group_end()

            return alltoall
        peer = self.peer
        if self.kernel.sample == "rtt":  # ping-pong: the initiator sends then receives, the other the reverse
            first, second = (comm.send, send), (comm.recv, recv)
            if not self.initiator:
                first, second = second, first

            def pingpong():
                first[0](first[1], count, dtype, peer, stream_ptr)
                second[0](second[1], count, dtype, peer, stream_ptr)

            return pingpong
        window = range(self.window)
        post, buffer = (comm.send, send) if self.initiator else (comm.recv, recv)

        def one_window():  # the initiator's sends, or the peer's receives, as one NCCL group
            group_start()
            for _ in window:
                post(buffer, count, dtype, peer, stream_ptr)
            group_end()

        return one_window

    def nccl_module(self):
        from cupy.cuda import nccl

        return nccl

    # ----- the runner's hooks -----

    def run(self, iterations: int, times: memoryview) -> None:
        self.timer.run(iterations, times)

    def poison(self) -> None:
        """Poison the result and write the input again (in-place runs overwrote it)."""
        xp = self.cupy
        self.recv.view(xp.uint8)[...] = 0xFE
        self.send[...] = self._input()
        xp.cuda.runtime.deviceSynchronize()

    @property
    def received(self):
        """The device comparison as one byte (1: every element right), so the runner's check stays one compare;
        ``wrong`` keeps the count of wrong elements, nccl-tests' #wrong, which the runner takes for the row."""
        if not hasattr(self, "recv"):
            return np.empty(0, dtype=np.uint8)
        self.wrong = 0
        if self._checks():
            got, want = self.recv, self._expected()
            if self.dtype.kind == "f" and self.op in ("prod", "avg"):
                tolerance = 1e-2 if self.dtype.itemsize == 2 else 1e-5
                bad = ~self.cupy.isclose(got, want, rtol=tolerance, atol=0, equal_nan=False)
            else:
                bad = got != want
            self.wrong = int(bad.sum())
        return np.array([int(self.wrong == 0)], dtype=np.uint8)

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the device check replaces it
        pass

    def expected(self) -> np.ndarray:
        """The verdict byte ``received`` is compared with: every element right."""
        return np.array([1], dtype=np.uint8)

    def close(self) -> None:
        self.timer.close()
        self.send = self.recv = self.buffer = None


class NCCLTransport(Transport):
    name = "nccl"
    kernels = frozenset({"latency", "bw", *COLLECTIVE_KERNELS})
    default_kernels = ()  # a GPU transport runs when asked (-t nccl), never in a CPU host's default sweep
    needs_launcher = True
    osu_name = "NCCL"
    option_groups = (gpu.GPU_OPTIONS, PLACEMENT)  # PLACEMENT: nccl-tests' in-place block too
    one_rank_collectives = True

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        from fabricbench.measure.memory import local_rank_count

        gpu.require(cls.name, nccl=True, ranks_here=local_rank_count(ranks))

    @classmethod
    def doctor(cls) -> Diagnosis:
        return Diagnosis(*gpu.doctor_verdict("missing_nccl"))

    def __init__(self, ctrl, plan):
        options = gpu.GPU_OPTIONS.of(plan.transport_options)
        self.ctrl = ctrl
        self.window = plan.window
        self.dtype = options.get("dtype", "float32")
        self.op = options.get("op", "sum")
        self.timing = options.get("timing", "loop")
        self.graph = bool(options.get("graph"))
        self.binding = gpu.Binding(ctrl, options.get("gpu_map"))
        self.cupy = self.binding.cupy
        shared = shared_gpus(self.binding.ranks)
        if shared:
            raise UsageError(f"nccl takes one rank per GPU: {shared} (use --gpu-map or fewer ranks)")
        self.nccl = gpu.open_nccl()
        uid = encode_unique_id(self.nccl.get_unique_id()) if ctrl.rank == 0 else None
        uid = decode_unique_id(ctrl.bcast_bytes(uid))
        self.comm = self.nccl.NcclCommunicator(ctrl.size, uid, ctrl.rank)
        self.stream = self.cupy.cuda.Stream(non_blocking=True)  # graphs cannot capture the legacy stream

    def case(self, kernel: Kernel, size: int) -> Case:
        return NcclCase(self, kernel, size)

    def metadata(self) -> dict:
        return self.binding.metadata() | {
            "nccl_version": gpu.nccl_version_text(self.nccl.get_version()),
            "nccl_env_by_rank": [r.get("nccl_env", {}) for r in self.binding.ranks],
            "dtype": self.dtype,
            "op": self.op,
            "timing": self.timing,
            "cuda_graph": self.graph,
        }

    def close(self) -> None:
        comm, self.comm = getattr(self, "comm", None), None
        if comm is not None:
            comm.destroy()

    def release(self) -> None:
        comm, self.comm = getattr(self, "comm", None), None
        if comm is not None:
            comm.abort()

"""Transport ``cuda-copy``: copy-engine bandwidth on the GPU of rank 0, the questions nvbandwidth answers.

- ``h2d`` / ``d2h``: host to device and back, from pinned host memory
  (``cudaMemcpyAsync``); ``h2d-pageable`` / ``d2h-pageable`` from ordinary
  (pageable) host memory, which the driver stages itself.
- ``d2d``: a copy within one GPU's memory.
- ``peer``: ``cudaMemcpyPeerAsync`` between every ordered pair of visible
  GPUs; the row's bandwidth is the slowest pair's and its note holds the
  whole matrix (GB/s, src->dst). It needs two GPUs.

Every copy is timed with CUDA events on one stream (``cuda_timing``); a row's
bw_MBps is bytes copied per second with MB = 10^6. Only rank 0 copies, so a
row speaks for one GPU, as nvbandwidth's do.
"""

from __future__ import annotations

import contextlib

import numpy as np

from fabricbench import gpu
from fabricbench.buffers import pattern
from fabricbench.errors import Unsupported
from fabricbench.kernels import COPY_KERNELS, Kernel
from fabricbench.transports.base import EMPTY, Case, Diagnosis, Transport
from fabricbench.transports.cuda_timing import EventTimer, sample_name

SEED = 7  # the copied pattern's seed


class CopyCase(Case):
    """One copy kernel at one size: source written, destination poisoned, the copy bound to the stream."""

    def __init__(self, transport: CudaCopyTransport, kernel: Kernel, size: int):
        super().__init__()
        cupy = transport.cupy
        runtime = cupy.cuda.runtime
        self.cupy, self.size, self.kernel = cupy, size, kernel
        self.initiator = transport.ctrl.rank == 0
        self.window = 1
        self.method = "cudaMemcpyAsync, events" + (", cuda graph" if transport.graph else "")
        self.row_fields = {"sample": sample_name("op", transport.timing)}
        self.src = self.dst = None
        self.host_check = EMPTY
        if not self.initiator:
            self.timer = EventTimer(cupy, transport.stream, lambda: None, transport.timing, False)
            return
        stream_ptr = transport.stream.ptr
        name = kernel.name
        pinned = not name.endswith("-pageable")
        if name.startswith(("h2d", "d2h")):
            host = self._host(size, pinned)
            device = cupy.empty(size, dtype=cupy.uint8)
            if name.startswith("h2d"):
                host[:] = pattern(size, SEED)
                device[...] = 0xFE
                src, dst, kind = host.ctypes.data, device.data.ptr, runtime.memcpyHostToDevice
                self._result = lambda: cupy.asnumpy(device)
            else:
                device[...] = cupy.asarray(pattern(size, SEED))
                host[:] = 0xFE
                src, dst, kind = device.data.ptr, host.ctypes.data, runtime.memcpyDeviceToHost
                self._result = lambda: host
            self.src, self.dst = host, device
            self.method += ", pinned host memory" if pinned else ", pageable host memory"

            def launch():
                runtime.memcpyAsync(dst, src, size, kind, stream_ptr)

        elif name == "d2d":
            self.src = cupy.asarray(pattern(size, SEED))
            self.dst = cupy.full(size, 0xFE, dtype=cupy.uint8)
            src, dst, kind = self.src.data.ptr, self.dst.data.ptr, runtime.memcpyDeviceToDevice
            self._result = lambda: cupy.asnumpy(self.dst)

            def launch():
                runtime.memcpyAsync(dst, src, size, kind, stream_ptr)

        else:
            raise Unsupported(f"cuda-copy has no {name} kernel")
        graph = transport.graph and pinned  # a pageable copy is synchronous to the host: not capturable
        self.timer = EventTimer(cupy, transport.stream, launch, transport.timing, graph)
        runtime.deviceSynchronize()

    def _host(self, size: int, pinned: bool) -> np.ndarray:
        """Host memory: page-locked (cudaHostAlloc through CuPy) or numpy's pageable, written before use."""
        if not pinned:
            from fabricbench.buffers import aligned

            return aligned(size)
        memory = self.cupy.cuda.alloc_pinned_memory(max(size, 1))
        self._pinned = memory  # keeps it alive
        return np.frombuffer(memory, dtype=np.uint8, count=size)

    def run(self, iterations: int, times: memoryview) -> None:
        if self.initiator:
            self.timer.run(iterations, times)

    def poison(self) -> None:
        if not self.initiator:
            return
        if isinstance(self.dst, np.ndarray):
            self.dst[:] = 0xFE
        elif self.kernel.name.startswith("d2h"):
            self.src[:] = 0xFE  # d2h's destination is the host buffer, kept in src
        else:
            self.dst[...] = 0xFE
        self.cupy.cuda.runtime.deviceSynchronize()

    @property
    def received(self):
        if not self.initiator or self.src is None:
            return EMPTY
        self.cupy.cuda.runtime.deviceSynchronize()
        return self._result()

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the copy's destination is what is checked
        pass

    def expected(self) -> np.ndarray:
        return pattern(self.size, SEED) if self.initiator else EMPTY

    def close(self) -> None:
        self.timer.close()
        self.src = self.dst = self._pinned = None


class PeerCase(Case):
    """``cudaMemcpyPeerAsync`` over every ordered pair of visible GPUs; each sample is the slowest pair's copy."""

    def __init__(self, transport: CudaCopyTransport, kernel: Kernel, size: int):
        super().__init__()
        cupy = self.cupy = transport.cupy
        self.initiator = transport.ctrl.rank == 0
        self.window = 1
        self.size = size
        self.timing = transport.timing
        self.method = "cudaMemcpyPeerAsync, events"
        self.row_fields = {"sample": "op (slowest pair, loop mean)"}
        count = cupy.cuda.runtime.getDeviceCount()
        if count < 2:
            raise Unsupported(f"peer copies need two GPUs; {count} visible")
        self.buffers = {}
        self.routes: list[tuple[int, int]] = []
        if not self.initiator:
            return
        for index in range(count):
            with cupy.cuda.Device(index):
                self.buffers[index] = cupy.asarray(pattern(size, SEED + index))
                for other in range(count):
                    if other != index and cupy.cuda.runtime.deviceCanAccessPeer(index, other):
                        with contextlib.suppress(cupy.cuda.runtime.CUDARuntimeError):  # already enabled
                            cupy.cuda.runtime.deviceEnablePeerAccess(other)
        self.routes = [(src, dst) for src in range(count) for dst in range(count) if src != dst]

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.initiator or iterations <= 0:
            return
        cupy, runtime, size = self.cupy, self.cupy.cuda.runtime, self.size
        slowest, matrix = 0.0, []
        for src, dst in self.routes:
            with cupy.cuda.Device(src):
                stream = cupy.cuda.Stream(non_blocking=True)
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                src_ptr, dst_ptr = self.buffers[src].data.ptr, self.buffers[dst].data.ptr
                start.record(stream)
                for _ in range(iterations):
                    runtime.memcpyPeerAsync(dst_ptr, dst, src_ptr, src, size, stream.ptr)
                end.record(stream)
                end.synchronize()
                per_copy_ns = cupy.cuda.get_elapsed_time(start, end) * 1e6 / iterations
            slowest = max(slowest, per_copy_ns)
            matrix.append(f"{src}->{dst} {size / per_copy_ns:.1f}")
        for i in range(iterations):
            times[i] = int(slowest)
        self.row_fields["note"] = "GB/s " + ", ".join(matrix)

    def close(self) -> None:
        self.buffers = {}


class CudaCopyTransport(Transport):
    name = "cuda-copy"
    kernels = frozenset(COPY_KERNELS)
    default_kernels = ()  # runs when asked (-t cuda-copy), never in a CPU host's default sweep
    needs_launcher = True
    osu_name = "CUDA"
    options_key = "gpu"  # --gpu-map, --gpu-timing and --cuda-graph, declared by nccl

    @classmethod
    def preflight(cls, options: dict, ranks: int) -> None:
        gpu.require(cls.name, nccl=False)

    @classmethod
    def doctor(cls) -> Diagnosis:
        found = gpu.probe()
        return Diagnosis(not found["missing"], found["missing"] or "", gpu.doctor_details(found))

    def __init__(self, ctrl, plan):
        options = plan.transport_options.get(self.options_key, {})
        self.ctrl = ctrl
        self.timing = options.get("timing", "loop")
        self.graph = bool(options.get("graph"))
        self.binding = gpu.Binding(ctrl, options.get("gpu_map"))
        self.cupy = self.binding.cupy
        self.stream = self.cupy.cuda.Stream(non_blocking=True)

    def case(self, kernel: Kernel, size: int) -> Case:
        if kernel.name == "peer":
            return PeerCase(self, kernel, size)
        return CopyCase(self, kernel, size)

    def metadata(self) -> dict:
        return self.binding.metadata() | {"timing": self.timing, "cuda_graph": self.graph}

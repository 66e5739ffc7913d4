"""Transport ``cuda-copy``: copy-engine bandwidth on the GPU of rank 0, the questions nvbandwidth answers.

- ``h2d`` / ``d2h``: host to device and back, from pinned host memory
  (``cudaMemcpyAsync``); ``h2d-pageable`` / ``d2h-pageable`` from ordinary
  (pageable) host memory, which the driver stages itself.
- ``d2d``: a copy within one GPU's memory.
- ``peer``: ``cudaMemcpyPeerAsync`` between every ordered pair of the GPUs
  visible to rank 0, one row per pair (``src_gpu``, ``dst_gpu``), which
  ``compare --out`` draws as a heatmap: the NVLink/PCIe matrix. It needs
  two GPUs; rank 0 says how many it sees, so every rank runs the same routes.

Every copy is timed with CUDA events on one stream (``cuda_timing``); a row's
bw_MBps is bytes copied per second with MB = 10^6. Only rank 0 copies, so a
row speaks for one GPU, as nvbandwidth's do.
"""

from __future__ import annotations

import contextlib

from fabricbench.buffers import nothing, pattern
from fabricbench.errors import PeerError, Unsupported
from fabricbench.lazy import np
from fabricbench.measure.kernels import COPY_KERNELS, Kernel
from fabricbench.transports.base import Case, Diagnosis, Transport
from fabricbench.transports.gpu import devices as gpu
from fabricbench.transports.gpu.timing import EventTimer, sample_name

SEED = 7  # the copied pattern's seed
MAX_GPUS = 1024  # GPUs a host may report: far above any one host's, so a bad count from the network is refused


def gpu_routes(count: int) -> list[tuple[int, int]]:
    """Every ordered pair (source, destination) of ``count`` GPUs, source-major, as nvbandwidth's matrix."""
    return [(src, dst) for src in range(count) for dst in range(count) if src != dst]


def peer_gpu_count(ctrl, mine: int | None) -> int:
    """Rank 0's visible GPU count on every rank (it crossed the network: checked)."""
    data = ctrl.bcast_bytes(str(mine).encode() if ctrl.rank == 0 else None)
    text = data.decode("ascii", errors="replace")
    if not (text.isascii() and text.isdigit()) or int(text) > MAX_GPUS:
        raise PeerError(f"rank 0 sent a bad GPU count {text[:20]!r}")
    return int(text)


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
            # A reference, not a bound: the Max_Payload_Size the formula takes is assumed, not read.
            self.link_MBps, self.link_label = gpu.pcie_link(transport.binding.device.pci_bus_id)
            self.link_bound = False

            def launch():
                runtime.memcpyAsync(dst, src, size, kind, stream_ptr)

        elif name == "d2d":
            self.src = cupy.asarray(pattern(size, SEED))
            self.dst = cupy.full(size, 0xFE, dtype=cupy.uint8)
            src, dst, kind = self.src.data.ptr, self.dst.data.ptr, runtime.memcpyDeviceToDevice
            self._result = lambda: cupy.asnumpy(self.dst)
            self.link_MBps, self.link_label = gpu.memory_copy_link(runtime, transport.binding.index)
            self.link_bound = False  # a copy that fits in the L2 cache can pass the memory's rate

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
            return nothing()
        self.cupy.cuda.runtime.deviceSynchronize()
        return self._result()

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the copy's destination is what is checked
        pass

    def expected(self) -> np.ndarray:
        return pattern(self.size, SEED) if self.initiator else nothing()

    def close(self) -> None:
        self.timer.close()
        self.src = self.dst = self._pinned = None


class PeerCase(Case):
    """``cudaMemcpyPeerAsync`` from GPU ``src`` to GPU ``dst`` on rank 0's host, on a stream of the source GPU:
    one route of the ``peer`` matrix, timed as any other copy (warm-up, iterations, -c) by ``runner.time_phase``."""

    def __init__(self, transport: CudaCopyTransport, kernel: Kernel, size: int, route: tuple[int, int]):
        super().__init__()
        cupy = self.cupy = transport.cupy
        self.initiator = transport.ctrl.rank == 0
        self.window = 1
        self.src_gpu, self.dst_gpu = route
        self.row_fields = {"sample": sample_name("op", transport.timing)}
        self.source = self.destination = None
        if not self.initiator:
            self.method = "cudaMemcpyPeerAsync, events"
            self.timer = EventTimer(cupy, transport.stream, lambda: None, transport.timing, False)
            return
        runtime = cupy.cuda.runtime
        src, dst = route
        # Without peer access the driver stages the copy through host memory: the row says which it measured.
        direct = bool(runtime.deviceCanAccessPeer(src, dst))
        with cupy.cuda.Device(dst):
            self.destination = cupy.full(size, 0xFE, dtype=cupy.uint8)
        with cupy.cuda.Device(src):
            if direct:
                with contextlib.suppress(runtime.CUDARuntimeError):  # cudaErrorPeerAccessAlreadyEnabled
                    runtime.deviceEnablePeerAccess(dst)
            self.source = cupy.asarray(pattern(size, SEED + src))
            self.stream = cupy.cuda.Stream(non_blocking=True)  # the source GPU's: its events time the copy
            src_ptr, dst_ptr, stream_ptr = self.source.data.ptr, self.destination.data.ptr, self.stream.ptr

            def launch():
                runtime.memcpyPeerAsync(dst_ptr, dst, src_ptr, src, size, stream_ptr)

            self.timer = EventTimer(cupy, self.stream, launch, transport.timing, transport.graph)
        access = "peer access" if direct else "no peer access: staged through the host by the driver"
        self.method = f"cudaMemcpyPeerAsync, events{', cuda graph' if transport.graph else ''}, {access}"
        self.size = size
        runtime.deviceSynchronize()

    def run(self, iterations: int, times: memoryview) -> None:
        if not self.initiator:
            return
        with self.cupy.cuda.Device(self.src_gpu):  # events and graphs belong to the source GPU, as its stream
            self.timer.run(iterations, times)

    def poison(self) -> None:
        if self.initiator:
            with self.cupy.cuda.Device(self.dst_gpu):
                self.destination[...] = 0xFE
                self.cupy.cuda.runtime.deviceSynchronize()

    @property
    def received(self):
        if not self.initiator:
            return nothing()
        with self.cupy.cuda.Device(self.src_gpu):
            self.stream.synchronize()
        return self.cupy.asnumpy(self.destination)

    @received.setter
    def received(self, value) -> None:  # Case.__init__ sets it; the destination GPU's buffer is what is checked
        pass

    def expected(self) -> np.ndarray:
        return pattern(self.size, SEED + self.src_gpu) if self.initiator else nothing()

    def close(self) -> None:
        self.timer.close()
        self.source = self.destination = None


class CudaCopyTransport(Transport):
    name = "cuda-copy"
    kernels = frozenset(COPY_KERNELS)
    default_kernels = ()  # runs when asked (-t cuda-copy), never in a CPU host's default sweep
    needs_launcher = True
    osu_name = "CUDA"
    option_groups = (gpu.GPU_OPTIONS,)  # its --gpu-map, --gpu-timing and --cuda-graph
    # The route (source, destination GPU) from ``routes`` that ``case`` builds next, set by the GPU-routes pattern
    # (``fabricbench.run.patterns.gpu_routes``) around each call; None otherwise.
    route: tuple[int, int] | None = None

    @classmethod
    def preflight(cls, settings: dict, ranks: int) -> None:
        gpu.require(cls.name, nccl=False)

    @classmethod
    def doctor(cls) -> Diagnosis:
        return Diagnosis(*gpu.doctor_verdict("missing"))

    def __init__(self, ctrl, plan):
        options = gpu.GPU_OPTIONS.of(plan.transport_options)
        self.ctrl = ctrl
        self.timing = options.get("timing", "loop")
        self.graph = bool(options.get("graph"))
        self.binding = gpu.Binding(ctrl, options.get("gpu_map"))
        self.cupy = self.binding.cupy
        self.stream = self.cupy.cuda.Stream(non_blocking=True)
        self.gpus = peer_gpu_count(ctrl, self.cupy.cuda.runtime.getDeviceCount() if ctrl.rank == 0 else None)

    def routes(self, kernel: Kernel) -> list[tuple[int, int]]:
        """The routes (ordered GPU pairs) the peer kernel copies along, alike on every rank; Unsupported under two."""
        if self.gpus < 2:
            raise Unsupported(f"peer copies need two GPUs; rank 0 sees {self.gpus}")
        return gpu_routes(self.gpus)

    def case(self, kernel: Kernel, size: int) -> Case:
        if kernel.name == "peer":
            if self.route is None:
                raise Unsupported("peer copies run per GPU route (run.patterns.GpuRoutes)")
            return PeerCase(self, kernel, size, self.route)
        return CopyCase(self, kernel, size)

    def metadata(self) -> dict:
        return self.binding.metadata() | {"timing": self.timing, "cuda_graph": self.graph}

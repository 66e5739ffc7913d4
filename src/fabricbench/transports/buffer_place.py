"""Buffer places: where a transport's message buffers live, for any transport to use.

Host memory; a GPU's memory handed to the calls as it is (a CUDA-aware
library); or a GPU's memory staged through pinned host memory, copied device
to host before a send and host to device after a receive, as an application on
a library that is not CUDA-aware must, the copies in the time. A transport
declares the places it offers (``Transport.buffer_places``) and which one a
run's settings ask for (``Transport.buffer_place``); the rows, preflight and
the OSU text ask the place, never the transport's name.

Everything above ``DeviceBuffer`` is plain data: the CLI, preflight and the
reports read it without CUDA. ``DeviceBuffer`` runs on a rank, with CuPy.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabricbench.buffers import POISON
from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.transports.gpu import devices as gpu
from fabricbench.transports.options import OptionGroup

HOST_TO_DEVICE, DEVICE_TO_HOST = 1, 2  # cudaMemcpyKind
# OSU's line under a point-to-point test's title when both its buffers are on the GPU (its "D D").
OSU_DEVICE_BUFFERS = "# Send Buffer on DEVICE (D) and Receive Buffer on DEVICE (D)"


@dataclass(frozen=True)
class BufferPlace:
    """Where the buffers live, and how the calls that move them reach them."""

    name: str  # the row's buffer column: "host" or "cuda"
    staged: bool = False  # device buffers copied through pinned host memory around each call
    calls: str = ""  # how the calls reach device buffers, the end of the row's method; empty on the host

    @property
    def on_gpu(self) -> bool:
        return self.name != "host"

    @property
    def option_groups(self) -> tuple[OptionGroup, ...]:
        """The groups whose settings open it: a GPU place's --gpu-map."""
        return (gpu.GPU_OPTIONS,) if self.on_gpu else ()

    @property
    def osu_device(self) -> str:
        """What OSU's title adds after the library for these buffers (OSU's -d cuda: "MPI-CUDA")."""
        return "CUDA" if self.on_gpu else ""

    def osu_buffer_lines(self, point_to_point: bool) -> list[str]:
        """OSU's lines naming where a point-to-point test's buffers are (none for host buffers or a collective)."""
        return [OSU_DEVICE_BUFFERS] if self.on_gpu and point_to_point else []

    def preflight(self, who: str) -> None:
        """A GPU place: CuPy and a device, or one line (``who:`` first) naming what is missing."""
        if self.on_gpu:
            gpu.require(who, nccl=False)

    def open(self, ctrl, transport_options: dict) -> gpu.Binding | None:
        """On a rank: this rank's GPU, chosen by --gpu-map and made current, for a GPU place; None on the host."""
        if not self.on_gpu:
            return None
        return gpu.Binding(ctrl, gpu.GPU_OPTIONS.of(transport_options).get("gpu_map"))


HOST = BufferPlace("host")
CUDA = BufferPlace("cuda", calls="CUDA-aware")
CUDA_STAGED = BufferPlace("cuda", staged=True, calls="staged through pinned host memory")


def place_of(buffer: str | None, staged: bool) -> BufferPlace:
    """The place ``--buffer`` names (None: host), staged through pinned host memory when asked (``--method
    staged``); UsageError when staging is asked of host buffers."""
    if staged and buffer != "cuda":
        raise UsageError("--method staged copies GPU buffers through host memory: it needs --buffer cuda")
    if buffer == "cuda":
        return CUDA_STAGED if staged else CUDA
    return HOST


class DeviceBuffer:
    """A buffer on this rank's GPU, written from a host array, with a pinned host copy of it when staged.

    ``for_calls`` is what the library is handed: the device array, or the
    pinned host array around which ``to_host`` and ``to_device`` (memcpy's
    arguments, built once) copy it.
    """

    def __init__(self, cupy, host: np.ndarray, staged: bool):
        self.cupy = cupy
        self.device = cupy.asarray(host)
        self.pinned = self.to_host = self.to_device = self._memory = None
        self.for_calls = self.device
        if staged:
            self._memory = cupy.cuda.alloc_pinned_memory(max(host.nbytes, 1))
            self.pinned = np.frombuffer(self._memory, host.dtype, count=host.size)
            nbytes, device, pinned = host.nbytes, self.device.data.ptr, self.pinned.ctypes.data
            self.to_host = (pinned, device, nbytes, DEVICE_TO_HOST)
            self.to_device = (device, pinned, nbytes, HOST_TO_DEVICE)
            self.for_calls = self.pinned

    def poison(self) -> None:
        """Overwrite it, and its pinned copy, so that validation sees only what the next call brings."""
        self.device.view(self.cupy.uint8).fill(POISON)
        if self.pinned is not None:
            self.pinned.view(np.uint8)[:] = POISON

    def read(self) -> np.ndarray:
        """Its bytes, copied to host memory (uint8)."""
        return self.cupy.asnumpy(self.device).view(np.uint8)

    def close(self) -> None:
        self.device = self.pinned = self.for_calls = self._memory = None

"""GPUs for the GPU transports (``nccl``, ``cuda-copy``) and ``mpi --buffer cuda``: what is here, and which is whose.

Everything above ``open_cupy`` is pure or reads only the environment, so the
CLI, preflight and the unit tests use it without CUDA. CuPy is imported only
where a rank opens a GPU transport, or in the child process ``probe`` starts:
a broken driver must not take down the CLI or ``doctor``, and a CPU-only run
must not pay for importing CuPy.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from fabricbench.errors import UsageError
from fabricbench.transports.gpu.timing import TIMINGS
from fabricbench.transports.link_payload import device_memory_copy_MBps, pcie_generation, pcie_MBps
from fabricbench.transports.options import OptionGroup

# Where launchers put a rank's index among the ranks on its host, in the order they are trusted.
LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK")
MAX_GPU_MAP = 1024  # entries --gpu-map takes: far above the GPUs of any one host
INSTALL_CUPY = "pip install 'fabricbench[cuda12]' (CUDA 12 driver) or 'fabricbench[cuda13]' (CUDA 13 driver)"
# The CuPy wheels and the NCCL wheel that matches each.
CUPY_PACKAGES = {"cupy-cuda13x": "nvidia-nccl-cu13", "cupy-cuda12x": "nvidia-nccl-cu12"}
PROBE_TIMEOUT_S = 120  # the first CuPy import on a cold file cache takes a while
# --dtype: NCCL's name for it (cupy.cuda.nccl.NCCL_*) and numpy's.
DTYPES = {
    "float32": "float32",
    "float16": "float16",
    "float64": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
}
OPS = ("sum", "prod", "max", "min", "avg")  # --op


def launcher_local_rank(env=None) -> int | None:
    """This rank's index on its host as the launcher said it, or None when no launcher said."""
    env = os.environ if env is None else env
    for var in LOCAL_RANK_VARS:
        value = env.get(var, "").strip()
        if value.isascii() and value.isdigit():
            return int(value)
    return None


def parse_gpu_map(text: str) -> list[int]:
    """``--gpu-map 3,2,1,0``: local rank i uses GPU map[i]; UsageError (one line) if it is not such a list."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not (part.isascii() and part.isdigit()) for part in parts):
        raise UsageError(f"--gpu-map {text!r}: give GPU indices by local rank, comma separated, e.g. 0,1,2,3")
    if len(parts) > MAX_GPU_MAP:
        raise UsageError(f"--gpu-map: at most {MAX_GPU_MAP} entries, got {len(parts)}")
    gpus = [int(part) for part in parts]
    if max(gpus) >= MAX_GPU_MAP:
        raise UsageError(f"--gpu-map {text!r}: GPU index {max(gpus)} is past any host's GPUs")
    return gpus


def choose_gpu(local_rank: int, visible: int, gpu_map: list[int] | None = None) -> int:
    """The GPU a rank uses: ``gpu_map[local_rank]`` when given, else local rank mod the visible GPU count."""
    if visible < 1:
        raise UsageError("no CUDA device is visible (check CUDA_VISIBLE_DEVICES)")
    if gpu_map:
        if local_rank >= len(gpu_map):
            raise UsageError(f"--gpu-map names {len(gpu_map)} GPUs but this host has local rank {local_rank}")
        gpu = gpu_map[local_rank]
        if gpu >= visible:
            raise UsageError(f"--gpu-map gives local rank {local_rank} GPU {gpu}, but {visible} GPUs are visible")
        return gpu
    return local_rank % visible


def local_rank(ctrl) -> int:
    """The launcher's local rank, else this rank's index in an MPI shared-memory split of the control plane."""
    found = launcher_local_rank()
    if found is not None:
        return found
    comm = getattr(ctrl, "comm", None)
    if comm is None:  # not under MPI: one rank per host
        return 0
    from fabricbench.control.mpi import import_mpi

    node = comm.Split_type(import_mpi().COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def cupy_package() -> str | None:
    """The installed CuPy wheel's name (cupy-cuda13x, cupy-cuda12x, or cupy built from source), or None."""
    from importlib import metadata  # here: three dozen modules (email, zipfile) no command line or host rank needs

    for name in (*CUPY_PACKAGES, "cupy"):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return name
    return None


def nccl_wheel() -> str:
    """The NCCL wheel that matches the installed CuPy."""
    return CUPY_PACKAGES.get(cupy_package() or "", "nvidia-nccl-cu12 or nvidia-nccl-cu13 (matching your CuPy)")


def driver_library() -> bool:
    """Whether the NVIDIA driver's libcuda.so.1 loads: without it CUDA says "insufficient driver" too."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def nvidia_devices(root: str = "/dev") -> list[str]:
    """The NVIDIA driver's device nodes here (/dev/nvidia0, /dev/nvidiactl, ...): none without a GPU and driver."""
    try:
        return sorted(name for name in os.listdir(root) if name.startswith("nvidia"))
    except OSError:
        return []


def missing_driver() -> str | None:
    """What this host lacks before CuPy could help, in one line naming the driver and device first; None where
    the driver's libcuda.so.1 loads (a device it cannot see is CUDA's to report, through CuPy)."""
    if driver_library():
        return None
    devices = nvidia_devices()
    smi = shutil.which("nvidia-smi")
    shown = ", ".join(devices[:3]) + (" ..." if len(devices) > 3 else "")
    seen = f"/dev has {shown}" if devices else "no /dev/nvidia* device"
    seen += f", nvidia-smi is at {smi}" if smi else ", no nvidia-smi"
    hint = (
        "install the driver's user-space library (a container: the NVIDIA container toolkit)"
        if devices or smi
        else "run on a host with an NVIDIA GPU and its driver"
    )
    return f"no NVIDIA driver: libcuda.so.1 does not load ({seen}); {hint}"


def cuda_failure(exc: BaseException) -> str:
    """What a CUDA runtime error at start-up means for the user, in one line."""
    text = " ".join(str(exc).split())
    if not driver_library():
        return f"no CUDA driver: libcuda.so.1 is not installed, so this host has no usable NVIDIA GPU ({text})"
    if "InsufficientDriver" in text or "insufficient" in text.lower():
        return (
            f"the CUDA driver is older than the CUDA that CuPy ({cupy_package() or 'cupy'}) was built for "
            f"({text}); update the driver, or install the extra for your driver's CUDA: {INSTALL_CUPY}"
        )
    if "NoDevice" in text or "no CUDA-capable device" in text:
        return f"no CUDA device is visible ({text}); check the GPUs and CUDA_VISIBLE_DEVICES"
    if "libcuda" in text or "driver" in text.lower() or "NotInitialized" in text:
        return f"no CUDA driver (libcuda.so.1) is installed or it cannot start ({text})"
    return f"CUDA cannot start: {text}"


def preload_nccl() -> str | None:
    """Load the NCCL wheel's libnccl.so.2 (nvidia-nccl-cu12/13) into the process by its path, so that CuPy's
    ``dlopen("libnccl.so.2")`` finds it without LD_LIBRARY_PATH; returns the path, or None if no wheel has one."""
    import ctypes

    try:
        import nvidia.nccl  # noqa: F401 - a namespace package that holds lib/libnccl.so.2
    except ImportError:
        return None
    for root in getattr(sys.modules["nvidia.nccl"], "__path__", []):
        path = os.path.join(root, "lib", "libnccl.so.2")
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            return path
    return None


def format_uuid(raw: bytes) -> str:
    """A GPU's 16-byte UUID as nvidia-smi writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def driver_uuid(index: int) -> str | None:
    """The UUID of CUDA device ``index`` (after CUDA_VISIBLE_DEVICES, as the runtime counts) from the driver's
    cuDeviceGetUuid; None where the driver does not answer. CuPy's getDeviceProperties()["uuid"] is the C
    char[16] turned into bytes up to its first zero byte, so it cannot be trusted to hold all 16."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, raw = ctypes.c_int(0), ctypes.create_string_buffer(16)
    get_uuid = getattr(lib, "cuDeviceGetUuid_v2", None) or getattr(lib, "cuDeviceGetUuid", None)
    if get_uuid is None or lib.cuInit(0) != 0 or lib.cuDeviceGet(ctypes.byref(device), ctypes.c_int(index)) != 0:
        return None
    if get_uuid(raw, device) != 0:
        return None
    return format_uuid(raw.raw[:16])


def device_record(cupy, index: int) -> dict:
    """One GPU's name, PCI bus id, UUID and memory, as metadata and ``doctor`` show them."""
    props = cupy.cuda.runtime.getDeviceProperties(index)
    name = props.get("name", b"")
    uuid = driver_uuid(index)
    if uuid is None:  # CuPy's copy: whole only when none of its 16 bytes is zero
        found = props.get("uuid", b"")
        uuid = format_uuid(found) if isinstance(found, bytes) and len(found) == 16 else "unknown"
    return {
        "index": index,
        "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "bus_id": cupy.cuda.Device(index).pci_bus_id,
        "uuid": uuid,
        "memory_GB": round(props.get("totalGlobalMem", 0) / 1e9, 1),
    }


def cuda_version(number: int) -> str:
    """CUDA's 12040 as "12.4"."""
    return f"{number // 1000}.{number % 1000 // 10}"


def nccl_version_text(number: int) -> str:
    """NCCL's 22703 (or 2.x's old 2704 form) as "2.27.3"."""
    if number >= 10000:
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}"
    return f"{number // 1000}.{number % 1000 // 100}.{number % 100}"


def open_cupy():
    """CuPy, imported (the rank side); UsageError naming what is missing when it cannot start a device."""
    try:
        import cupy
    except ImportError as exc:
        lacking = missing_driver()  # without a driver CuPy cannot help: what is missing first, CuPy after it
        if lacking:
            raise UsageError(f"{lacking}; then CuPy, not installed either: {INSTALL_CUPY}") from None
        raise UsageError(f"CuPy is not installed ({exc}); {INSTALL_CUPY}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError, or an OSError from a missing libcuda
        raise UsageError(cuda_failure(exc)) from None
    if count < 1:
        raise UsageError("no CUDA device is visible; check the GPUs and CUDA_VISIBLE_DEVICES")
    return cupy


def open_nccl():
    """cupy.cuda.nccl with a usable library; UsageError naming the wheel to install otherwise."""
    preload_nccl()
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise UsageError(f"CuPy cannot load NCCL ({exc}); pip install {nccl_wheel()}") from None
    if not getattr(nccl, "available", False):
        raise UsageError(f"CuPy finds no NCCL library; pip install {nccl_wheel()}")
    return nccl


def probe_here() -> dict:
    """What this process finds: CuPy, driver, runtime, GPUs and NCCL, with ``missing`` / ``missing_nccl`` the
    one-line reasons (None when nothing is missing). Imports CuPy: call it in a child (``probe``)."""
    found: dict = {"cupy": None, "cupy_package": cupy_package(), "missing": None, "missing_nccl": None}
    try:
        cupy = open_cupy()
    except UsageError as exc:
        found["missing"] = str(exc)
        found["missing_nccl"] = found["missing"]
        if "cupy" in sys.modules:
            found["cupy"] = sys.modules["cupy"].__version__
        return found
    runtime = cupy.cuda.runtime
    found["cupy"] = cupy.__version__
    found["driver_cuda"] = cuda_version(runtime.driverGetVersion())
    found["runtime_cuda"] = cuda_version(runtime.runtimeGetVersion())
    found["devices"] = [device_record(cupy, i) for i in range(runtime.getDeviceCount())]
    try:
        nccl = open_nccl()
        found["nccl"] = nccl_version_text(nccl.get_version())
    except UsageError as exc:
        found["missing_nccl"] = str(exc)
    return found


@functools.cache
def probe() -> dict:
    """``probe_here`` in a child process (once per process): CUDA is not started in the CLI or ``doctor``."""
    code = "import json; from fabricbench.transports.gpu.devices import probe_here; print(json.dumps(probe_here()))"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=_child_env()
        )
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        done, found = None, None
    if isinstance(found, dict):
        return found
    why = (done.stderr.strip().splitlines() or ["no output"])[-1] if done else "no answer"
    reason = f"the CUDA probe failed ({why})"
    return {"cupy": None, "cupy_package": cupy_package(), "missing": reason, "missing_nccl": reason}


def _child_env() -> dict:
    """This environment less a launcher's rank variables: the probe is no rank."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM_WORLD"))}


def require(transport: str, nccl: bool, ranks_here: int | None = None) -> dict:
    """Preflight of a GPU transport: the probe, or UsageError (one line, ``transport:`` first) naming what is
    missing; ``ranks_here``: ranks that need a GPU each on this host (NCCL's one rank per GPU)."""
    found = probe()
    missing = found["missing_nccl"] if nccl else found["missing"]
    if missing:
        raise UsageError(f"{transport}: {missing}")
    visible = len(found.get("devices", []))
    if ranks_here is not None and ranks_here > visible:
        raise UsageError(
            f"{transport}: {ranks_here} ranks on this host but {visible} GPU(s) visible; NCCL takes one rank per GPU"
        )
    return found


def doctor_details(found: dict) -> dict:
    """What ``doctor`` prints for a GPU transport."""
    details = {"cupy": found.get("cupy") or "not installed", "cupy_package": found.get("cupy_package") or "-"}
    for key in ("driver_cuda", "runtime_cuda", "nccl"):
        if key in found:
            details[key] = found[key]
    if found.get("devices"):
        details["gpus"] = found["devices"]
    return details


def doctor_verdict(missing: str) -> tuple[bool, str, dict]:
    """A GPU transport's ``doctor`` verdict (Diagnosis's fields) from one probe: it runs unless the probe's
    ``missing`` entry ("missing", or "missing_nccl" for NCCL too) names what it lacks."""
    found = probe()
    return not found[missing], found[missing] or "", doctor_details(found)


def nccl_environment() -> dict:
    """The NCCL_* variables this rank sees."""
    return {key: value for key, value in os.environ.items() if key.startswith("NCCL_")}


PCI_DEVICES = "/sys/bus/pci/devices"
CUDA_MEMORY_CLOCK, CUDA_MEMORY_BUS_WIDTH = 36, 37  # cudaDevAttrMemoryClockRate (kHz), cudaDevAttrGlobalMemoryBusWidth


def _lane(device: Path) -> tuple[float, int]:
    """(GT/s, lanes) a PCI function's port can train to: sysfs max_link_speed ("16.0 GT/s PCIe"), max_link_width."""
    return float((device / "max_link_speed").read_text().split()[0]), int((device / "max_link_width").read_text())


def pcie_link(bus_id: str, sysfs: str | Path = PCI_DEVICES) -> tuple[float | None, str]:
    """The payload a GPU's PCIe link carries one way (link_payload.pcie_MBps) and how a row names it, or (None, "").

    The link is the lower of what the GPU's port and the port above it (its slot's bridge) can train to: a GPU
    drops to 2.5 GT/s when idle, so its current_link_speed read before a copy says less than the copy gets.
    """
    try:
        device = (Path(sysfs) / bus_id.lower()).resolve()
        (gts, lanes), (up_gts, up_lanes) = _lane(device), _lane(device.parent)
    except (OSError, ValueError, IndexError):
        return None, ""
    generation, width = pcie_generation(min(gts, up_gts)), min(lanes, up_lanes)
    rate = pcie_MBps(generation, width)  # None for a generation the table does not know
    return (rate, f"{bus_id.lower()} PCIe {generation}.0 x{width}") if rate else (None, "")


def memory_copy_link(runtime, index: int) -> tuple[float | None, str]:
    """What a copy within GPU ``index``'s memory can move (link_payload.device_memory_copy_MBps), from the clock and
    bus width CUDA reports, and how a row names it; (None, "") where the driver does not say."""
    try:
        clock_kHz = runtime.deviceGetAttribute(CUDA_MEMORY_CLOCK, index)
        bits = runtime.deviceGetAttribute(CUDA_MEMORY_BUS_WIDTH, index)
    except (AttributeError, RuntimeError):  # CuPy's CUDARuntimeError is a RuntimeError
        return None, ""
    if clock_kHz <= 0 or bits <= 0:
        return None, ""
    return device_memory_copy_MBps(clock_kHz, bits), f"GPU {index} memory, {bits}-bit at {clock_kHz / 1e3:g} MHz"


class Binding:
    """This rank's GPU, chosen and made current, with every rank's choice (gathered over the control plane)."""

    def __init__(self, ctrl, gpu_map: list[int] | None):
        from fabricbench.control import allgather_json

        self.cupy = open_cupy()
        visible = self.cupy.cuda.runtime.getDeviceCount()
        self.local_rank = local_rank(ctrl)
        self.index = choose_gpu(self.local_rank, visible, gpu_map)
        self.device = self.cupy.cuda.Device(self.index)
        self.device.use()
        import socket

        mine = device_record(self.cupy, self.index) | {
            "host": socket.gethostname(),
            "local_rank": self.local_rank,
            "nccl_env": nccl_environment(),
        }
        self.ranks = allgather_json(ctrl, mine, "GPU table")

    def metadata(self) -> dict:
        runtime = self.cupy.cuda.runtime
        return {
            "cupy": self.cupy.__version__,
            "driver_cuda": cuda_version(runtime.driverGetVersion()),
            "runtime_cuda": cuda_version(runtime.runtimeGetVersion()),
            "gpus_by_rank": [{k: v for k, v in r.items() if k != "nccl_env"} for r in self.ranks],
        }


class GPUOptions(OptionGroup):
    """The GPU options: which GPU each rank takes and how GPU time is taken (nccl, cuda-copy and GPU buffers),
    and nccl's element type and reduction (its in-place collectives: --placement, transports.placement)."""

    name = "gpu"

    def add_arguments(self, parser, role: str) -> None:
        if role != "run":
            return
        group = parser.add_argument_group("GPU transports (nccl, cuda-copy) and mpi --buffer cuda")
        group.add_argument(
            "--gpu-map",
            metavar="LIST",
            help="GPU of each local rank, e.g. 3,2,1,0 (default: local rank mod the visible GPU count)",
        )
        group.add_argument("--dtype", choices=list(DTYPES), help="nccl: element type (default float32)")
        group.add_argument("--op", choices=OPS, help="nccl: reduction of the reducing collectives (default sum)")
        group.add_argument(
            "--gpu-timing",
            choices=TIMINGS,
            help="loop: events around all iterations, each gets the mean (nccl-tests, default); "
            "iteration: events around each, for percentiles",
        )
        group.add_argument(
            "--cuda-graph", action="store_true", help="capture the timed launches (and the warm-up's) in a CUDA graph"
        )

    def parse(self, args, role: str) -> dict:
        if role != "run":
            return {}
        found = {
            "gpu_map": parse_gpu_map(args.gpu_map) if args.gpu_map is not None else None,
            "dtype": args.dtype,
            "op": args.op,
            "timing": args.gpu_timing,
            "graph": args.cuda_graph or None,
        }
        return {key: value for key, value in found.items() if value is not None}


GPU_OPTIONS = GPUOptions()

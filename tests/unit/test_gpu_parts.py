"""The GPU transports' pure parts, without CUDA: GPU choice, --gpu-map, nccl-tests' byte counts and formulas."""

from __future__ import annotations

import pytest

from fabricbench.errors import PeerError, UsageError
from fabricbench.measure.kernels import get_kernel
from fabricbench.transports.gpu import devices as gpu
from fabricbench.transports.gpu import nccl
from fabricbench.transports.gpu.timing import sample_name


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "SLURM_LOCALID": "1"}, 3),
        ({"MPI_LOCALRANKID": "2"}, 2),
        ({"SLURM_LOCALID": "1", "LOCAL_RANK": "5"}, 1),
        ({"LOCAL_RANK": "5"}, 5),
        ({"LOCAL_RANK": "x", "SLURM_LOCALID": ""}, None),
        ({}, None),
    ],
)
def test_launcher_local_rank(env, expected):
    assert gpu.launcher_local_rank(env) == expected


def test_choose_gpu_wraps_and_maps():
    assert [gpu.choose_gpu(r, 4) for r in range(6)] == [0, 1, 2, 3, 0, 1]
    assert gpu.choose_gpu(1, 4, [3, 2, 1, 0]) == 2
    with pytest.raises(UsageError, match="local rank 2"):
        gpu.choose_gpu(2, 4, [0, 1])
    with pytest.raises(UsageError, match="2 GPUs are visible"):
        gpu.choose_gpu(0, 2, [5])
    with pytest.raises(UsageError, match="no CUDA device"):
        gpu.choose_gpu(0, 0)


@pytest.mark.parametrize("text", ["", "a", "0,,1", "-1", "1.5", "0;1", "٣"])
def test_gpu_map_rejects(text):
    with pytest.raises(UsageError) as caught:
        gpu.parse_gpu_map(text)
    assert "\n" not in str(caught.value)


def test_gpu_map_parses():
    assert gpu.parse_gpu_map(" 3, 2,1 ,0") == [3, 2, 1, 0]
    with pytest.raises(UsageError, match="at most"):
        gpu.parse_gpu_map(",".join(["0"] * (gpu.MAX_GPU_MAP + 1)))


def test_versions():
    assert gpu.cuda_version(12040) == "12.4"
    assert gpu.cuda_version(13000) == "13.0"
    assert gpu.nccl_version_text(22703) == "2.27.3"
    assert gpu.nccl_version_text(2708) == "2.7.8"


@pytest.mark.parametrize(
    ("kernel", "send", "recv", "count"),
    [
        ("allreduce", 256, 256, 256),
        ("bcast", 256, 256, 256),
        ("reduce", 256, 256, 256),
        ("allgather", 256, 1024, 256),
        ("reduce_scatter", 1024, 256, 256),
        ("alltoall", 1024, 1024, 256),
    ],
)
def test_nccl_counts(kernel, send, recv, count):
    """nccl-tests' buffer layout for a per-rank block of 1 KiB of float32 on 4 ranks."""
    assert nccl.nccl_counts(kernel, 1024, 4, 4) == (send, recv, count)


@pytest.mark.parametrize(
    ("kernel", "size", "factor"),
    [("allreduce", 1 << 20, 1.5), ("allgather", 4 << 20, 0.75), ("reduce_scatter", 4 << 20, 0.75)]
    + [("alltoall", 4 << 20, 0.75), ("bcast", 1 << 20, 1.0), ("reduce", 1 << 20, 1.0)],
)
def test_nccl_tests_formulas(kernel, size, factor):
    """algbw divides nccl-tests' printed size by the time; busbw is its factor for 4 ranks."""
    spec = get_kernel(kernel).collective_spec
    assert spec.algbw_bytes(1 << 20, 4) == nccl.nccl_tests_size(kernel, 1 << 20, 4) == size
    assert spec.bus_factor(4) == pytest.approx(factor)


def test_in_place_offsets():
    assert nccl.in_place_offsets("allgather", 2, 100) == (200, 0)
    assert nccl.in_place_offsets("reduce_scatter", 2, 100) == (0, 200)
    assert nccl.in_place_offsets("allreduce", 2, 100) == (0, 0)


def test_unique_id_round_trip():
    raw = bytes(range(128))
    assert nccl.decode_unique_id(nccl.encode_unique_id(raw)) == raw
    ints = tuple(range(-64, 64))
    assert nccl.decode_unique_id(nccl.encode_unique_id(ints)) == ints
    for bad in (b"not json", b'{"hex": "00"}', b'{"ints": [1, 2]}', b"[]", b'{"hex": 5}'):
        with pytest.raises(PeerError):
            nccl.decode_unique_id(bad)


def test_shared_gpus():
    ranks = [{"host": "a", "bus_id": "0000:01:00.0"}, {"host": "b", "bus_id": "0000:01:00.0"}]
    assert nccl.shared_gpus(ranks) is None
    ranks.append({"host": "a", "bus_id": "0000:01:00.0"})
    assert "ranks 0 and 2" in nccl.shared_gpus(ranks)


def test_sample_names():
    assert sample_name("op", "iteration") == "op"
    assert sample_name("rtt", "loop") == "rtt/2 (loop mean)"


def test_cuda_failure_words(monkeypatch):
    monkeypatch.setattr(gpu, "driver_library", lambda: False)
    assert "no CUDA driver" in gpu.cuda_failure(RuntimeError("cudaErrorInsufficientDriver: x"))
    monkeypatch.setattr(gpu, "driver_library", lambda: True)
    assert "older than" in gpu.cuda_failure(RuntimeError("cudaErrorInsufficientDriver: x"))
    assert "no CUDA device" in gpu.cuda_failure(RuntimeError("cudaErrorNoDevice: no CUDA-capable device"))


def test_uuid_as_nvidia_smi_writes_it():
    raw = bytes.fromhex("5a1c3f0e00b24d1e9f6a0c1d2e3f4a5b")
    assert gpu.format_uuid(raw) == "GPU-5a1c3f0e-00b2-4d1e-9f6a-0c1d2e3f4a5b"


def test_no_driver_no_uuid():
    """This CI host has no libcuda.so.1: the driver's UUID is None, not an exception."""
    if gpu.driver_library():
        pytest.skip("this host has an NVIDIA driver")
    assert gpu.driver_uuid(0) is None


def test_without_a_driver_the_driver_is_named_before_cupy():
    """This host, as it is (no NVIDIA driver, no device, no CuPy): the refusal names what CuPy cannot replace first."""
    import importlib.util

    if gpu.driver_library() or gpu.nvidia_devices() or importlib.util.find_spec("cupy"):
        pytest.skip("this host has an NVIDIA driver, a device or CuPy")
    with pytest.raises(UsageError) as refused:
        gpu.open_cupy()
    line = str(refused.value)
    assert line.startswith("no NVIDIA driver: libcuda.so.1 does not load (no /dev/nvidia* device"), line
    assert line.index("libcuda.so.1") < line.index("/dev/nvidia") < line.index("nvidia-smi") < line.index("CuPy")
    assert "pip install" in line and "\n" not in line
    assert gpu.probe()["missing"] == line  # what preflight (mpi --buffer cuda, nccl, cuda-copy) refuses with


def test_the_driver_line_follows_what_the_host_has(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu, "driver_library", lambda: True)
    assert gpu.missing_driver() is None
    monkeypatch.setattr(gpu, "driver_library", lambda: False)
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    assert gpu.nvidia_devices(str(tmp_path)) == ["nvidia0", "nvidiactl"]
    monkeypatch.setattr(gpu, "nvidia_devices", lambda: ["nvidia0", "nvidiactl"])
    assert "/dev has nvidia0, nvidiactl" in gpu.missing_driver()
    assert "driver's user-space library" in gpu.missing_driver()


def test_nccl_runs_its_collectives_on_one_rank_and_mpi_refuses_them():
    """nccl-tests runs a collective on one GPU (-g 1); OSU refuses a collective on one rank, and so does mpi."""
    from fabricbench.transports import transport_class

    allreduce, latency = get_kernel("allreduce"), get_kernel("latency")
    assert transport_class("nccl").min_ranks(allreduce) == 1
    assert transport_class("nccl").min_ranks(latency) == 2  # a ping-pong still needs its peer
    assert transport_class("mpi").min_ranks(allreduce) == 2
    allreduce.check_ranks(1, transport_class("nccl").min_ranks(allreduce))
    with pytest.raises(UsageError, match="needs at least 2 ranks, got 1"):
        allreduce.check_ranks(1, transport_class("mpi").min_ranks(allreduce))


# --- the GPU's links (no GPU: a sysfs tree and CUDA's answers made here) ------------------------------------------


def _pci(base, speed: str, width: int):
    base.mkdir(parents=True, exist_ok=True)
    (base / "max_link_speed").write_text(f"{speed} GT/s PCIe\n")
    (base / "max_link_width").write_text(f"{width}\n")
    return base


def test_a_gpus_pcie_link_is_the_lower_of_its_port_and_the_slot_above_it(tmp_path):
    bridge = _pci(tmp_path / "pci0000:00" / "0000:00:01.0", "16.0", 16)
    gpu_dir = _pci(bridge / "0000:3b:00.0", "32.0", 16)  # a Gen5 GPU in a Gen4 slot
    devices = tmp_path / "bus"
    devices.mkdir()
    (devices / "0000:3b:00.0").symlink_to(gpu_dir)
    rate, label = gpu.pcie_link("0000:3B:00.0", devices)  # CuPy's bus id is upper case
    assert label == "0000:3b:00.0 PCIe 4.0 x16"
    assert rate == pytest.approx(16e3 * 128 / 130 * 16 / 8 * 256 / 280)  # 28.8 GB/s
    assert gpu.pcie_link("0000:af:00.0", devices) == (None, "")  # not in sysfs


class _Runtime:
    """CUDA's answers to cudaDeviceGetAttribute, as an H100 SXM gives them."""

    def __init__(self, answers):
        self.answers = answers

    def deviceGetAttribute(self, attribute, index):
        return self.answers[attribute]


def test_a_device_copy_is_held_to_half_the_memorys_rate():
    rate, label = gpu.memory_copy_link(_Runtime({36: 2_619_000, 37: 5120}), 0)
    assert rate == pytest.approx(2 * 2.619e9 * 5120 / 8 / 1e6 / 2) and label == "GPU 0 memory, 5120-bit at 2619 MHz"
    assert gpu.memory_copy_link(_Runtime({36: 0, 37: 5120}), 0) == (None, "")

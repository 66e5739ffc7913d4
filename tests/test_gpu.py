"""The GPU transports (nccl, cuda-copy) and mpi --buffer cuda on this host.

Without a GPU (CI): every GPU path stops before any rank starts with one line
that names what is missing, a CPU-only run never imports CuPy, and ``doctor``
says what it found. With CuPy but no driver (a throwaway venv with
cupy-cuda13x, when FABRICBENCH_TEST_CUPY_PYTHON names its python) the words
are the driver's. With a CUDA device the GPU sweeps run for real; elsewhere
they skip with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fabricbench.transports import transport_class
from support import PYTHON, REPO, clean_env, fabricbench

GPU_TRANSPORTS = ("nccl", "cuda-copy")


def _cuda_devices() -> int:
    """CUDA devices CuPy sees here, from a child process (0 without CuPy, a driver or a device)."""
    code = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    return int(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip().isdigit() else 0


DEVICES = _cuda_devices()
needs_gpu = pytest.mark.skipif(DEVICES == 0, reason="no CUDA device")
no_gpu = pytest.mark.skipif(DEVICES > 0, reason="this host has a CUDA device")


def _one_line_refusal(result: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, one line on stderr, no traceback, nothing on stdout (no rank started, no table)."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and not result.stdout.strip()
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@no_gpu
def test_gpu_transports_refuse_in_one_line_before_any_rank(tmp_path):
    out = tmp_path / "out"
    line = _one_line_refusal(fabricbench("run", "-t", "nccl,cuda-copy", "--out", str(out)), "nccl:")
    assert "pip install" in line or "driver" in line or "device" in line
    assert not out.exists()  # no rank started, so no table was begun


@no_gpu
@pytest.mark.parametrize("transport", GPU_TRANSPORTS)
def test_each_gpu_transport_refuses(transport, tmp_path):
    _one_line_refusal(fabricbench("run", "-t", transport, "--out", str(tmp_path / "o")), f"{transport}:")


@no_gpu
@pytest.mark.parametrize(
    "args",
    [
        ["-t", "mpi", "-k", "latency"],
        ["-t", "mpi", "-k", "allreduce"],  # the collectives on GPU buffers need CuPy and a GPU as well
        ["-t", "mpi", "-k", "bcast,reduce,barrier", "--method", "staged"],
        ["-t", "mpi,mpi-rma", "-k", "allreduce,put"],  # mpi's line stops the run; mpi-rma asks for no GPU
    ],
)
def test_mpi_cuda_buffers_refuse(args, tmp_path):
    out = tmp_path / "o"
    _one_line_refusal(fabricbench("run", *args, "--buffer", "cuda", "--out", str(out)), "mpi --buffer cuda:")
    assert not out.exists()


def test_mpi_rma_says_unsupported_for_cuda_buffers_on_any_host(tmp_path):
    """mpi-rma's windows are host memory: with --buffer cuda every kernel's row says so, with or without a GPU
    (its preflight asks for none), and nothing is measured in host memory in their place."""
    out = tmp_path / "o"
    result = fabricbench(
        "run", "-t", "mpi-rma", "--buffer", "cuda", "-m", "8:8", "-i", "5", "-x", "1", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    rows = _table(out)
    assert sorted(r["kernel"] for r in rows) == sorted(transport_class("mpi-rma").kernels)
    reason = "unsupported: mpi-rma runs host windows only; --buffer cuda is for -t mpi"
    assert all(r["status"] == reason and r["validation"] == "off" and r["buffer"] == "cuda" for r in rows), rows
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpu-map", "0,x"], "--gpu-map"),
        (["--method", "staged"], "needs --buffer cuda"),
        (["--dtype", "complex"], "--dtype"),
        (["--op", "xor"], "--op"),
        (["--gpu-timing", "never"], "--gpu-timing"),
    ],
)
def test_bad_gpu_options_are_one_line(args, words, tmp_path):
    result = fabricbench("run", "-t", "mpi", "-k", "latency", *args, "--out", str(tmp_path / "o"))
    _one_line_refusal(result, words)


def test_cpu_only_run_never_imports_cupy(tmp_path):
    """A CuPy that ends any process importing it: the CLI, the registry and a plain mpi run must not."""
    fake = tmp_path / "site" / "cupy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os\nos._exit(97)\n")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO / "src")])}
    code = (
        "import sys\nfrom fabricbench import cli\nfrom fabricbench.transports import TRANSPORTS, transport_class\n"
        "[transport_class(n).kernels for n in TRANSPORTS]\ncli.build_parser()\n"
        "assert not any(m.split('.')[0] == 'cupy' for m in sys.modules), 'cupy imported'\nprint('clean')"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=clean_env(env))
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr
    result = fabricbench(
        "run", "-t", "mpi", "-k", "latency", "-m", "8:8", "-i", "20", "-x", "2", "--out", str(tmp_path / "r"), env=env
    )
    assert result.returncode == 0, result.stderr


def test_cuda_aware_query_finds_the_mpi_library():
    """The wheel's MPICH answers MPIX_GPU_query_support (not CUDA-aware); the answer is never a crash."""
    code = "from mpi4py import MPI\nfrom fabricbench.transports.mpi.transport import cuda_aware_mpi\n"
    code += "print(cuda_aware_mpi())"
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "MPIX_" in done.stdout


def test_doctor_reports_the_gpu_stack():
    found = json.loads(fabricbench("doctor", "--json").stdout)
    for name in GPU_TRANSPORTS:
        verdict = found["transports"][name]
        assert verdict["needs_launcher"]
        if DEVICES:
            assert verdict["details"]["gpus"] and verdict["details"]["driver_cuda"]
        else:
            assert not verdict["available"]
            assert "\n" not in verdict["reason"] and verdict["reason"]
            assert verdict["details"]["cupy"]
    console = fabricbench("doctor").stdout
    assert "nccl" in console and "cuda-copy" in console


CUPY_PYTHON = os.environ.get("FABRICBENCH_TEST_CUPY_PYTHON", "")


@pytest.mark.skipif(not CUPY_PYTHON, reason="FABRICBENCH_TEST_CUPY_PYTHON names no python with CuPy")
@no_gpu
def test_cupy_without_a_driver_names_the_driver():
    """CuPy imports, but there is no driver (or no device): the line says so, not 'CuPy is not installed'."""
    site = subprocess.run(
        [PYTHON, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True
    ).stdout.strip()
    env = clean_env({"PYTHONPATH": os.pathsep.join([str(REPO / "src"), site])})
    code = "import json; from fabricbench.transports.gpu.devices import probe_here; print(json.dumps(probe_here()))"
    done = subprocess.run([CUPY_PYTHON, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    found = json.loads(done.stdout)
    assert found["cupy"], found
    assert "driver" in found["missing"] or "device" in found["missing"], found
    assert "not installed (No module" not in found["missing"]
    result = subprocess.run(
        [CUPY_PYTHON, "-m", "fabricbench", "run", "-t", "cuda-copy", "-k", "h2d", "--out", "/nonexistent/x"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    _one_line_refusal(result, "cuda-copy:", "driver")
    for kernels in ("latency", "allreduce,bcast"):  # mpi --buffer cuda, point-to-point and collectives alike
        result = subprocess.run(
            [CUPY_PYTHON, "-m", "fabricbench", "run", "-t", "mpi", "-k", kernels, "--buffer", "cuda", "--out", "/x/y"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        _one_line_refusal(result, "mpi --buffer cuda:", "driver")


@pytest.mark.skipif(not CUPY_PYTHON, reason="FABRICBENCH_TEST_CUPY_PYTHON names no python with CuPy")
@no_gpu
def test_cupy_nccl_takes_the_unique_id_as_the_control_plane_carries_it():
    """The NCCL wheel loads by its path, and the id rank 0 makes, once through the broadcast's JSON, is one
    NcclCommunicator accepts: without a GPU it then fails on CUDA, never on the id's type."""
    site = subprocess.run(
        [PYTHON, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True
    ).stdout.strip()
    code = (
        "from fabricbench.transports.gpu import devices as gpu\n"
        "from fabricbench.transports.gpu.nccl import decode_unique_id, encode_unique_id\n"
        "nccl = gpu.open_nccl()\n"
        "uid = decode_unique_id(encode_unique_id(nccl.get_unique_id()))\n"
        "print(gpu.nccl_version_text(nccl.get_version()))\n"
        "try:\n"
        "    nccl.NcclCommunicator(1, uid, 0)\n"
        "except nccl.NcclError as exc:\n"
        "    print('NcclError', exc)\n"
    )
    env = clean_env({"PYTHONPATH": os.pathsep.join([str(REPO / "src"), site])})
    done = subprocess.run([CUPY_PYTHON, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    version, failure = done.stdout.strip().splitlines()
    assert version.startswith("2.") and version.count(".") == 2
    assert failure.startswith("NcclError") and "cuda" in failure.lower(), failure


# ----- on a GPU host (scripts/gpu-check.sh runs these) -----


def _table(out) -> list[dict]:
    import csv

    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


@needs_gpu
def test_nccl_one_rank_every_collective_validates(tmp_path):
    kernels = "allreduce,allgather,reduce_scatter,alltoall,bcast,reduce"
    for extra in ([], ["--cuda-graph"], ["--gpu-timing", "iteration", "--placement", "both"]):
        out = tmp_path / ("o" + "".join(extra).replace("-", ""))
        result = fabricbench(
            "run", "-t", "nccl", "-k", kernels, "--np", "1", "-m", "8:1M", "-i", "20", "-x", "5", "-c",
            "--out", str(out), *extra, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        rows = _table(out)
        assert rows and all(r["status"] == "ok" or r["status"].startswith("unsupported") for r in rows)
        assert all(r["validation"] == "pass" for r in rows if r["status"] == "ok"), rows
        assert all(r["wrong_elements"] == "0" for r in rows if r["status"] == "ok")


@needs_gpu
def test_cuda_copy_host_and_device(tmp_path):
    result = fabricbench(
        "run", "-t", "cuda-copy", "-k", "h2d,d2h,h2d-pageable,d2h-pageable,d2d", "--np", "1", "-m", "1K:16M",
        "-i", "10", "-x", "2", "-c", "--out", str(tmp_path / "o"), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = _table(tmp_path / "o")
    assert all(r["status"] == "ok" and r["validation"] == "pass" and float(r["bw_MBps"]) > 0 for r in rows)


MPI_CUDA_KERNELS = "latency,bw,allreduce,allgather,alltoall,bcast,reduce,reduce_scatter"


@needs_gpu
def test_cuda_copy_peer_matrix_or_its_unsupported_row(tmp_path):
    """A row per ordered GPU pair, each validated; with one GPU, one unsupported row that says why."""
    out = tmp_path / "o"
    result = fabricbench(
        "run", "-t", "cuda-copy", "-k", "peer", "--np", "1", "-m", "1M:1M", "-i", "10", "-x", "2", "-c",
        "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = _table(out)
    if DEVICES < 2:
        assert [r["status"] for r in rows] == ["unsupported: peer copies need two GPUs; rank 0 sees 1"]
        return
    pairs = {(int(r["src_gpu"]), int(r["dst_gpu"])) for r in rows}
    assert pairs == {(s, d) for s in range(DEVICES) for d in range(DEVICES) if s != d}
    assert all(r["status"] == "ok" and r["validation"] == "pass" and float(r["bw_MBps"]) > 0 for r in rows)


@needs_gpu
def test_mpi_cuda_buffers_staged_and_unsupported(tmp_path):
    for method, ok in (("staged", True), ("blocking", None)):
        out = tmp_path / method
        result = fabricbench(
            "run", "-t", "mpi", "-k", MPI_CUDA_KERNELS, "--buffer", "cuda", "--method", method, "-m", "8:64K",
            "-i", "20", "-x", "2", "-c", "--out", str(out), timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        rows = _table(out)
        assert {r["kernel"] for r in rows} == set(MPI_CUDA_KERNELS.split(","))
        measured = [r for r in rows if r["status"] == "ok"]
        assert all(r["buffer"] == "cuda" for r in rows)
        assert all(r["validation"] == "pass" for r in measured), measured
        if ok:
            assert len(measured) == len(rows) and all("staged through pinned host memory" in r["method"] for r in rows)
        else:  # the wheel's MPICH is not CUDA-aware; a CUDA-aware one passes
            assert all(r["status"] == "ok" or "MPI is not CUDA-aware" in r["status"] for r in rows)
            assert all("CUDA-aware" in r["method"] for r in measured)


@needs_gpu
def test_mpi_cuda_barrier_runs_on_any_mpi(tmp_path):
    """A barrier moves no buffer: with --buffer cuda it runs the host loop, CUDA-aware MPI or not."""
    result = fabricbench(
        "run", "-t", "mpi", "-k", "barrier", "--buffer", "cuda", "--method", "blocking", "-i", "20", "-x", "2",
        "--out", str(tmp_path / "o"), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [r["status"] for r in _table(tmp_path / "o")] == ["ok"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

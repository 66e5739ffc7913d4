"""The ofi transport on real libfabric providers (tcp, shm) between two local MPI ranks, and its refusals.

Every kernel moves data that is checked (-c); the rows name the provider and the C loop. A host without
libfabric is made by hiding its headers in a mount namespace of the test's own (unshare -m), so the build
really fails as it would there, and the refusal comes before any rank starts.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from support import PYTHON, clean_env, fabricbench, one_error_line, read_rows

KERNELS = "latency,bw,bibw,put,get,put-bw,get-bw"


def _libfabric() -> str:
    """Why the ofi transport cannot run here ('' when it can)."""
    from fabricbench.transports.ofi import cloop as ofi_cloop
    from fabricbench.transports.ofi.options import OFIUnavailable

    try:
        ofi_cloop.load()
    except OFIUnavailable as exc:
        return str(exc)
    return ""


MISSING = _libfabric()
needs_libfabric = pytest.mark.skipif(bool(MISSING), reason=f"no libfabric to build against: {MISSING}")


def run_ofi(out, *options: str, kernels: str = KERNELS, sizes: str = "0:16K", env: dict | None = None):
    result = fabricbench(
        "run", "-t", "ofi", "-k", kernels, "-m", sizes, "-i", "30", "-x", "2", "-c", "--out", str(out),
        "--format", "none", *options, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return read_rows(out)


@needs_libfabric
@pytest.mark.parametrize("provider", ["tcp", "shm"])
def test_every_kernel_moves_checked_data_on_the_provider(provider, tmp_path):
    rows, meta = run_ofi(tmp_path, "--ofi-provider", provider)
    assert set(rows.kernel) == set(KERNELS.split(","))
    measured = rows[rows.status == "ok"]
    # 0 B: every two-sided kernel runs it; an RMA operation of 0 B is refused on every provider alike.
    refused = rows[rows.status != "ok"]
    assert set(refused.kernel) == {"put", "get", "put-bw", "get-bw"} and (refused.size_B == 0).all(), refused
    assert refused.status.str.contains("0 B is not timed").all()
    assert len(measured) == len(rows) - 4
    assert (measured.validation == "pass").all(), measured[measured.validation != "pass"][["kernel", "size_B"]]
    assert measured.method.str.startswith("c loop, ").all()
    assert measured.method.str.contains(provider).all()
    latency = measured[measured.kernel == "latency"]
    assert (latency.lat_p50_us > 0).all()
    assert (measured[(measured.kernel == "bw") & (measured.size_B > 0)].bw_MBps > 0).all()
    small = latency[latency.size_B == 8].method.iloc[0]
    assert "fi_tinject" in small  # 8 B is at or below every provider's inject size
    info = meta["transports"]["ofi"]
    assert provider in info["provider"] and info["rma"] is True
    assert info["libfabric"].startswith("1.") and info["libfabric_library"]
    assert info["hints"]["provider"] == provider and info["endpoint"] == "FI_EP_RDM"
    assert isinstance(info["fi_environment"], dict)


STALE_REGION = """
import contextlib, ctypes, os
import numpy as np
from fabricbench.transports.ofi import cloop as ofi_cloop
loop = ofi_cloop.load()
stale = f"/dev/shm/{os.getpid()}:0:0"  # libfabric 1.17's name for this process's first shm endpoint
with open(stale, "wb") as file:
    file.write(bytes(4096))  # not a region this libfabric made: as a killed rank of another version leaves it
try:
    memory = np.zeros(1 << 16, np.uint8)
    info, error = ofi_cloop.OFIInfo(), ctypes.create_string_buffer(ofi_cloop.ERROR_BYTES)
    handle = loop.lib.fb_open(b"shm", b"", b"", 0, 1, 0, 0, memory.ctypes.data, memory.nbytes, 4096, 4, 5000,
                              ctypes.byref(info), error, ofi_cloop.ERROR_BYTES)
    print(bytes(info.name[:info.name_len]).decode().rstrip("\\0") if handle else "refused: " + error.value.decode())
    if handle:
        loop.lib.fb_close(handle)
finally:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stale)
"""


@needs_libfabric
def test_a_region_left_under_this_process_id_does_not_stop_shm(tmp_path):
    # A rank killed before it closed leaves /dev/shm/<pid>:0:0 behind; when a later rank is given the same id,
    # shm saw a live process holding the name and refused to open (fi_enable: EBUSY). The region is made here
    # under this process's own id; the endpoint opens under a name of its own.
    result = subprocess.run([PYTHON, "-c", STALE_REGION], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("fi_shm://fabricbench-"), result.stdout


@needs_libfabric
def test_connected_endpoints_untagged_calls_and_waiting_for_completions(tmp_path):
    rows, meta = run_ofi(
        tmp_path, "--ofi-provider", "tcp", "--ofi-endpoint", "msg", "--ofi-messages", "msg", "--ofi-progress", "wait",
        kernels="latency,bw,put", sizes="8:4K", env={"FI_LOG_LEVEL": "warn"},
    )  # fmt: skip
    assert (rows.status == "ok").all() and (rows.validation == "pass").all()
    assert rows[rows.size_B == 4096].method.str.contains("fi_send/fi_recv").any()
    assert rows.method.str.contains("MSG").all() and rows.method.str.endswith("wait").all()
    info = meta["transports"]["ofi"]
    assert info["endpoint"] == "FI_EP_MSG" and info["messages"] == "untagged"
    assert info["fi_environment"] == {"FI_LOG_LEVEL": "warn"}  # what each rank saw, recorded


@needs_libfabric
def test_a_provider_this_host_lacks_is_one_line_before_any_rank(tmp_path):
    result = fabricbench("run", "-t", "ofi", "-k", "latency", "--ofi-provider", "cxi", "--out", str(tmp_path / "r"))
    assert result.returncode == 2
    one_error_line(result.stderr, 'no provider "cxi" with RDM endpoints')
    assert not (tmp_path / "r").exists()
    # tcp's connected endpoints carry no tagged messages: said as what was asked for
    result = fabricbench("run", "-t", "ofi", "--ofi-provider", "tcp", "--ofi-endpoint", "msg", "--out", str(tmp_path))
    assert result.returncode == 2
    one_error_line(result.stderr, 'no provider "tcp" with MSG endpoints and tagged messages')


@needs_libfabric
def test_doctor_lists_the_providers_with_their_capabilities():
    result = fabricbench("doctor", "--json")
    assert result.returncode == 0, result.stderr
    ofi = json.loads(result.stdout)["transports"]["ofi"]
    assert ofi["available"], ofi
    providers = ofi["details"]["providers"]
    assert any(line.startswith("shm rdm") and "FI_RMA" in line for line in providers), providers
    assert any(line.startswith("tcp") and "inject" in line and "MR mode" in line for line in providers)
    assert ofi["details"]["libfabric"].startswith("1.")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_without_libfabric_the_refusal_is_one_line_and_no_rank_starts(tmp_path):
    # A mount namespace in which libfabric's headers and pkg-config file are hidden, and an empty build cache: the
    # build fails on its first include, as on a host without libfabric-dev. Needs root (as CI runs).
    hide = "mount -t tmpfs none /usr/include/rdma && "
    command = f"{hide}exec {PYTHON} -m fabricbench run -t ofi,tcp -k latency --out {tmp_path / 'r'} --ofi-provider tcp"
    env = clean_env({"FABRICBENCH_CACHE_DIR": str(tmp_path / "cache"), "PKG_CONFIG_LIBDIR": str(tmp_path)})
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    one_error_line(result.stderr, "rdma/fabric.h not found")
    assert "apt-get install libfabric-dev" in result.stderr and "libfabric-devel" in result.stderr
    assert not (tmp_path / "r").exists()  # refused before the results folder, so before any rank

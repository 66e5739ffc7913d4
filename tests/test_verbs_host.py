"""The verbs and perftest transports on a machine without RDMA: the errors users see.

The real data paths run on a real rxe device in tests/verbs (inside the
SoftRoCE VM, see test_softroce_vm.py). Here: the one-line errors when
rdma-core, pyverbs or a device is missing, and the pyverbs this machine has.
The plain-data parts (the queue-pair record, the GID choice, perftest's
output, the enum layouts) are tested in tests/unit/test_rdma_records.py.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import subprocess
import sys
from pathlib import Path

import pytest

from fabricbench.transports.verbs.rdma import PYVERBS_DIRS_VAR, VerbsUnavailable, load_pyverbs
from support import PYTHON, clean_env, fabricbench, mpiexec

HAS_DEVICE = Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir())
no_device = pytest.mark.skipif(HAS_DEVICE, reason="this machine has an RDMA device; the VM tests cover it")


def _pyverbs_loads() -> bool:
    try:
        load_pyverbs()
    except VerbsUnavailable:
        return False
    return True


def _one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fabricbench: error: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


@no_device
@pytest.mark.skipif(not _pyverbs_loads(), reason="needs rdma-core and python3-pyverbs installed (no device)")
@pytest.mark.parametrize("transport", ["verbs", "verbs-send"])
def test_no_device_is_one_line_and_exit_2(transport, out):
    result = fabricbench("run", "-t", transport, "-k", "latency", "-m", "8:8", "--out", str(out), timeout=60)
    line = _one_error_line(result)
    assert result.returncode == 2
    assert "no RDMA device found" in line and "softroce" in line


@no_device
@pytest.mark.skipif(not _pyverbs_loads(), reason="needs rdma-core and python3-pyverbs installed (no device)")
def test_no_device_under_a_launcher_is_said_once(out):
    result = mpiexec(2, "run", "-t", "verbs", "-k", "bw", "--out", str(out), timeout=60)
    line = _one_error_line(result)
    assert result.returncode == 2
    assert "no RDMA device found" in line


@pytest.mark.skipif(
    importlib.machinery.PathFinder.find_spec("pyverbs", sys.path) is not None,
    reason="pyverbs is on this Python's own path, so there is nothing to hide",
)
def test_missing_pyverbs_names_the_packages(tmp_path, out):
    # An empty directory stands where the distribution's pyverbs would be: nothing to find.
    result = fabricbench("run", "-t", "verbs", "--out", str(out), env={PYVERBS_DIRS_VAR: str(tmp_path)}, timeout=60)
    line = _one_error_line(result)
    assert result.returncode == 2
    assert "pyverbs is not installed" in line
    assert "apt-get install python3-pyverbs" in line and "dnf install python3-pyverbs" in line


@no_device
def test_perftest_without_a_device_is_one_line(out):
    result = fabricbench("run", "-t", "perftest", "-k", "latency", "--out", str(out), timeout=60)
    line = _one_error_line(result)
    assert result.returncode == 2
    assert "perftest" in line and ("no RDMA device" in line or "not installed" in line)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--device-port", "0"], "--device-port must be at least 1, got 0"),
        (["--gid-index", "-1"], "--gid-index must be at least 0, got -1"),
        (["--inline", "-8"], "--inline must be at least 0, got -8"),
        (["--spin", "sometimes"], "invalid choice: 'sometimes'"),
    ],
)
def test_serve_checks_its_own_verbs_options(args, words):
    """serve takes this host's device settings (its --port is the listening port, hence --device-port)."""
    result = fabricbench("serve", "--address", "127.0.0.1", "--port", "1", *args, timeout=60)
    assert result.returncode == 2
    assert words in _one_error_line(result)


def test_cq_mod_must_divide_the_window(out):
    result = fabricbench("run", "-t", "verbs", "-W", "64", "--cq-mod", "10", "--out", str(out), timeout=60)
    line = _one_error_line(result)
    assert result.returncode == 2
    assert "--cq-mod 10 must divide the window of 64" in line


# --- --loop c where the verbs C loop cannot be built ------------------------------------------------------------------

# The CLI with pyverbs and one device stood in for (the preflight's device check passes), so that what decides is the
# C loop's build alone: that refusal comes before any rank, so it needs no device of its own. (Moved here from
# tests/verbs, where under emulation each of these launches cost about 9 s.)
WITH_A_DEVICE = (
    "import sys\n"
    "from fabricbench.transports.verbs import transport as verbs\n"
    "verbs.load_pyverbs = lambda: None\n"
    "verbs.device_names = lambda _verbs: ['rxe0']\n"
    "from fabricbench.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _libibverbs_loads() -> bool:
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _libibverbs_loads(), reason="needs rdma-core's libibverbs (the C loop's cache key)")
@pytest.mark.parametrize(
    ("compiler", "words"),
    [
        ("/nonexistent/cc", "/nonexistent/cc"),
        # A compiler that sees no system headers: where libibverbs-dev is missing, verbs.h is the first it lacks.
        ("cc --sysroot=/nonexistent", "infiniband/verbs.h not found (Debian/Ubuntu: apt-get install libibverbs-dev"),
    ],
)
def test_loop_c_without_the_build_stops_in_one_line_before_any_rank(out, tmp_path, compiler, words):
    env = clean_env({"CC": compiler, "FABRICBENCH_CACHE_DIR": str(tmp_path / "empty-cache")})
    result = subprocess.run(
        [PYTHON, "-c", WITH_A_DEVICE, "run", "-t", "verbs", "-k", "latency", "-m", "8:8", "--loop", "c",
         "--out", str(out)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fabricbench: error: --loop c: the verbs C loop is unavailable")
    assert words in lines[0] and "Traceback" not in result.stderr
    assert not (out / "results.csv").exists()


# --- the pyverbs this machine has ---------------------------------------------------------------------------------


@pytest.mark.skipif(not _pyverbs_loads(), reason="needs rdma-core and python3-pyverbs installed")
def test_installed_pyverbs_loads_with_its_enum_layout():
    verbs = load_pyverbs()
    assert verbs.enums_module in ("pyverbs.enums", "pyverbs.libibverbs_enums")
    assert verbs.e.IBV_WC_SUCCESS == 0 and verbs.e.IBV_QPT_RC == 2
    assert sys.modules[verbs.enums_module] is verbs.e

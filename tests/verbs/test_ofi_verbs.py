"""libfabric's verbs provider under ofi_rxm on a real RDMA device: the ``ofi`` transport.

One fabricbench run (about a minute under emulation before it measures anything). Before it, ``fi_info`` says
whether libfabric offers ``verbs;ofi_rxm`` RDM endpoints here at all, and where it does not, the test skips with
fi_info's own words.

What verbs;ofi_rxm needs on SoftRoCE (found in the VM, libfabric 1.17):

- an RDMA device on a netdev with an IP address other than loopback: the verbs provider connects with rdma_cm,
  which refuses rxe0 on lo (scripts/softroce-vm.sh adds rxe1 on dummy0, 10.77.0.1, for its default run), and
  FI_VERBS_IFACE naming that netdev, else fi_getinfo picks rxe0 first and fi_domain fails;
- FI_UNIVERSE_SIZE at most 127: ofi_rxm sizes its completion queue (128 + 128 entries) x FI_UNIVERSE_SIZE
  (default 256) = 65536 entries, rxe allows 32767 (max_cqe), and fi_enable fails with EINVAL otherwise.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest

from fabricbench.measure.plan import sizes_between
from fabricbench.transports import TRANSPORTS
from fabricbench.transports.ofi.options import BIN_HINT
from support import NEEDS_RDMA_DEVICE, RDMA_DEVICES, clean_env, mpiexec, read_rows

pytestmark = NEEDS_RDMA_DEVICE
RUN_TIMEOUT = 600  # seconds for the fabricbench run under emulation
PROVIDER = "verbs;ofi_rxm"
# fabricbench's -m 128:256: 128 B is injected (rxe's inject size is 192 B), 256 B is sent. Two sizes only: this
# file's share of CI's time under emulation is about a minute.
SIZES = sizes_between(128, 256)
UNIVERSE = "64"  # FI_UNIVERSE_SIZE: ofi_rxm's completion queue then fits rxe's 32767 entries (see above)
TRANSPORTS_HERE = ("ofi",)  # fi-pingpong runs on the host's tcp and shm (tests/test_fi_pingpong.py): here each of its
# pairs costs seconds to start under emulation
LOG_PREFIX = re.compile(r"^libfabric:\d+:\d+:")  # fi_info's warnings start with libfabric:PID:TIME:


def _netdevs() -> list[tuple[str, str]]:
    """(device, netdev) of each RDMA port that has one (RoCE, rxe): GID 0's netdev, from sysfs."""
    found = []
    for device in sorted(RDMA_DEVICES.iterdir()):
        for entry in sorted(device.glob("ports/*/gid_attrs/ndevs/0")):
            try:
                netdev = entry.read_text().strip()
            except OSError:  # InfiniBand: no netdev behind the GID
                continue
            if netdev:
                found.append((device.name, netdev))
    return found


@pytest.fixture(scope="module")
def verbs_rxm() -> dict:
    """The environment verbs;ofi_rxm needs here and the domain fi_info offers; a skip saying why where it offers
    none."""
    if shutil.which("fi_info") is None:
        pytest.skip(f"fi_info is not installed, so libfabric's verbs provider cannot be probed ({BIN_HINT})")
    env = {"FI_UNIVERSE_SIZE": UNIVERSE}
    netdevs = _netdevs()
    # A netdev other than lo where there is one; lo itself otherwise, so that fi_info says what it lacks.
    usable = [pair for pair in netdevs if pair[1] != "lo"] or netdevs
    if usable:
        env["FI_VERBS_IFACE"] = usable[0][1]
    command = ["fi_info", "-p", PROVIDER, "-t", "FI_EP_RDM"]
    probe = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=clean_env(env | {"FI_LOG_LEVEL": "warn"})
    )
    domains = re.findall(r"^\s*domain: (\S+)$", probe.stdout, re.MULTILINE)
    if probe.returncode != 0 or not domains:
        said = [LOG_PREFIX.sub("", line).lstrip(":") for line in (probe.stderr + probe.stdout).splitlines()]
        said = [line for line in dict.fromkeys(said) if line.strip() and "mrail" not in line]  # ofi_mrail: any host
        where = ", ".join(f"{device} on {netdev}" for device, netdev in netdevs) or "no netdev behind any RDMA port"
        hint = ""
        if usable and usable[0][1] == "lo":
            hint = (
                "; the verbs provider connects with rdma_cm, which needs an RDMA device on a netdev with an IP "
                "address other than lo (scripts/softroce-vm.sh: FABRICBENCH_VM_RDMACM=1 adds rxe1 on dummy0)"
            )
        iface = f"FI_VERBS_IFACE={env['FI_VERBS_IFACE']} " if "FI_VERBS_IFACE" in env else ""
        pytest.skip(
            f"libfabric offers no {PROVIDER} RDM endpoint here ({where}): `{iface}{shlex.join(command)}` exited "
            f"{probe.returncode}: {' | '.join(said[-6:]) or 'no output'}{hint}"
        )
    return {"env": env, "domain": domains[0]}


@pytest.fixture(scope="module")
def run(verbs_rxm, tmp_path_factory):
    """One fabricbench run over verbs;ofi_rxm: latency and bw at SIZES, validated, for every transport here
    that fabricbench has (a test whose transport is missing fails on its own)."""
    out = tmp_path_factory.mktemp("ofi-verbs") / "run"
    transports = [name for name in TRANSPORTS_HERE if name in TRANSPORTS]
    if not transports:
        pytest.fail(f"fabricbench has none of the transports {', '.join(TRANSPORTS_HERE)}")
    result = mpiexec(
        2, "run", "-t", ",".join(transports), "-k", "latency,bw", "--ofi-provider", PROVIDER,
        "-m", f"{SIZES[0]}:{SIZES[-1]}", "-i", "5", "-x", "1", "-W", "4", "-c", "--timeout", "300",
        "--out", str(out), "--format", "none", env=verbs_rxm["env"], timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


def _require(transport: str) -> None:
    if transport not in TRANSPORTS:
        pytest.fail(f"fabricbench has no {transport!r} transport yet; known: {', '.join(TRANSPORTS)}")


def test_ofi_latency_and_bw_over_verbs_rxm_move_intact_data(run, verbs_rxm):
    _require("ofi")
    rows, meta = read_rows(run)
    ofi = rows[rows.transport == "ofi"]
    assert (ofi.status == "ok").all(), set(ofi.status)
    assert sorted(zip(ofi.kernel, ofi.size_B, strict=True)) == sorted((k, s) for k in ("latency", "bw") for s in SIZES)
    assert (ofi.validation == "pass").all()
    latency, bw = ofi[ofi.kernel == "latency"], ofi[ofi.kernel == "bw"]
    assert (latency.lat_p50_us > 0).all() and (latency.lat_min_us <= latency.lat_p50_us).all()
    assert (bw.bw_MBps > 0).all() and (bw.window == 4).all()
    device = meta["transports"]["ofi"]
    assert device["provider"] == PROVIDER and device["endpoint"] == "FI_EP_RDM"
    assert device["domain"] == verbs_rxm["domain"], device
    assert verbs_rxm["env"].items() <= device["fi_environment"].items(), device["fi_environment"]
    # Tagged messages, injected up to the provider's inject size, busy-polled.
    inject = device["inject_size_B"]
    for size, method in zip(ofi.size_B, ofi.method, strict=True):
        calls = "fi_tinject" if size <= inject else "fi_tsend/fi_trecv"
        assert method.startswith(f"c loop, {PROVIDER} RDM, {calls}, "), (size, method)
        assert method.endswith(", spin"), method

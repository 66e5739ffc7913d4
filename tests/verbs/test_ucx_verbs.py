"""UCX's verbs transports (rc_verbs, with ud_verbs beside it) on a real RDMA device: the ``ucx`` transport beside
``verbs``, in one run; and rc_verbs alone, wired up by rdma_cm through UCX's client-server set-up
(``--ucx-sockaddr``) on a device whose netdev has an IPv4 address.

UCX_TLS names the verbs transports only (no shared memory, no tcp), so the two local ranks can only meet over
the device: the rows name rc_verbs on it and every figure is of checked data, or, where UCX cannot reach the
peer over the device, the run says so in one line and makes up nothing. Where UCX finds no verbs transport on
the device, the test skips with ucx_info's own list. Under emulation only pass or fail counts.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from fabricbench.hostinfo import usable_cpus
from fabricbench.measure.plan import sizes_between
from support import NEEDS_RDMA_DEVICE, RDMA_DEVICES, mpiexec, read_rows

pytestmark = NEEDS_RDMA_DEVICE
RUN_TIMEOUT = 600
SIZES = sizes_between(128, 256)  # two sizes: this file's share of CI's time under emulation is about a minute
KERNELS = ("latency", "bw", "put", "get")
# ud_verbs (rc_verbs' wire-up transport) declares a peer dead when it answers nothing for UCX_UD_TIMEOUT (30 s by
# default): under emulation a rank spends that long in Python between two kernels, and UCX then aborts the rank
# ("UD endpoint ...: unhandled timeout error"). The time a peer may be silent here, not a figure.
UD_TIMEOUT = "600s"


def ipv4_gid_index(device: str) -> str:
    """The index of port 1's first RoCE v2 GID that maps an IPv4 address (``::ffff:a.b.c.d``), as text; '' where
    there is none. UCX 1.13 takes GID 0 by default, and on rxe over lo that is a link-local GID nothing answers:
    the first message then never arrives (perftest's -x 1 in the VM is the same choice)."""
    for entry in sorted((RDMA_DEVICES / device / "ports" / "1" / "gids").glob("*"), key=lambda p: int(p.name)):
        try:
            gid = entry.read_text().strip()
            kind = (RDMA_DEVICES / device / "ports" / "1" / "gid_attrs" / "types" / entry.name).read_text()
        except OSError:
            continue
        if gid.startswith("0000:0000:0000:0000:0000:ffff:") and "v2" in kind:
            return entry.name
    return ""


@pytest.fixture(scope="module")
def ucx_verbs() -> dict:
    """The environment that limits UCX to the first RDMA device's verbs transports; a skip saying why where UCX
    has none there."""
    from fabricbench.transports.ucx import cloop as ucx_cloop
    from fabricbench.transports.ucx.options import UCXUnavailable
    from fabricbench.transports.ucx.ucx_perftest import parse_devices

    try:
        ucx_cloop.load()
    except UCXUnavailable as exc:
        pytest.skip(f"the ucx transport cannot run here: {exc}")
    if shutil.which("ucx_info") is None:
        pytest.skip("ucx_info is not installed (apt-get install ucx-utils)")
    device = sorted(RDMA_DEVICES.iterdir())[0].name
    said = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True, timeout=120).stdout
    found = parse_devices(said)
    if f"rc_verbs/{device}:1" not in found:
        pytest.skip(f"UCX lists no rc_verbs on {device}:1 here: {', '.join(found) or 'nothing'}")
    env = {"UCX_TLS": "rc_verbs,ud_verbs", "UCX_NET_DEVICES": f"{device}:1", "UCX_UD_TIMEOUT": UD_TIMEOUT}
    if gid_index := ipv4_gid_index(device):
        env["UCX_IB_GID_INDEX"] = gid_index
    return {"device": f"{device}:1", "env": env}


def test_ucx_over_rc_verbs_moves_intact_data_beside_verbs_or_says_why_in_one_line(ucx_verbs, tmp_path):
    """UCX's verbs lanes either carry checked data (the rows name rc_verbs on the device), or the run ends in one
    line per rank naming UCX's first message that never completed, exit 3, with the verbs rows kept and no ucx
    figure made up. On rxe over lo in the VM (UCX 1.13.1) it is the second: ud_verbs, which wires rc_verbs up,
    delivers nothing there, and ucx_perftest with the same settings aborts on its UD timeout. The ranks wait for
    completions on the worker's event descriptor (--ucx-progress wait) with a 20 s deadline: a guest that spun for
    it would hold one of the host's two cores that long."""
    out = tmp_path / "run"
    result = mpiexec(
        2, "run", "-t", "verbs,ucx", "-k", ",".join(KERNELS), "-m", f"{SIZES[0]}:{SIZES[-1]}", "-i", "5", "-x", "1",
        "-W", "4", "-c", "--timeout", "20", "--ucx-progress", "wait", "--out", str(out), "--format", "none",
        env=ucx_verbs["env"],
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert "Traceback" not in result.stderr
    rows, meta = read_rows(out)
    verbs = rows[rows.transport == "verbs"]
    assert len(verbs) and (verbs[verbs.status == "ok"].validation == "pass").all()
    ucx = rows[rows.transport == "ucx"]
    if result.returncode != 0:
        assert result.returncode == 3, result.stderr[-3000:]
        said = [line for line in result.stderr.splitlines() if line.startswith("fabricbench: error:")]
        assert said and all("could not exchange a first message" in line for line in said), result.stderr[-3000:]
        assert ucx.empty  # no figure where UCX moved nothing
        return
    assert (ucx.status == "ok").all(), set(ucx.status)
    assert sorted(zip(ucx.kernel, ucx.size_B, strict=True)) == sorted((k, s) for k in KERNELS for s in SIZES)
    assert (ucx.validation == "pass").all()
    assert ucx.method.str.contains(f"rc_verbs/{ucx_verbs['device']}", regex=False).all(), set(ucx.method)
    assert (ucx[ucx.kernel == "latency"].lat_p50_us > 0).all() and (ucx[ucx.kernel == "bw"].bw_MBps > 0).all()
    info = meta["transports"]["ucx"]
    assert all(f"rc_verbs/{ucx_verbs['device']}" in lanes for lanes in info["transports_by_rank"].values()), info
    assert info["ucx_environment"] == ucx_verbs["env"]


def _ipv4_device() -> tuple[str, str]:
    """(device, IPv4 address) of the first RDMA port whose netdev is not lo and has an IPv4 address (rdma_cm binds
    there; scripts/softroce-vm.sh: FABRICBENCH_VM_RDMACM=1 adds rxe1 on dummy0); ('', '') where none is."""
    for device in sorted(RDMA_DEVICES.iterdir()):
        try:
            netdev = (device / "ports" / "1" / "gid_attrs" / "ndevs" / "0").read_text().strip()
        except OSError:
            continue
        if not netdev or netdev == "lo":
            continue
        said = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", netdev], capture_output=True, text=True).stdout
        found = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/", said)
        if found:
            return device.name, found[1]
    return "", ""


def test_ucx_client_server_over_rdma_cm_runs_rc_verbs_without_ud_verbs(ucx_verbs, tmp_path):
    """rdma_cm carries the wire-up (a UCP listener on the device's IPv4 address, --ucx-sockaddr), so rc_verbs runs
    without ud_verbs: every kernel moves checked data, its lanes name rc_verbs on that device and nothing else, and
    -t verbs runs beside on the same device. UCX_TLS keeps sm and self for the MPI's own UCX (MPICH's ch4:ucx reads
    the same variables and needs a transport that wires up here); a client-server endpoint, which asks for peer
    error handling, leaves shared memory out of its lanes."""
    device, address = _ipv4_device()
    if not device:
        pytest.skip("no RDMA port on a netdev with an IPv4 address other than lo (rdma_cm needs one)")
    env = {"UCX_TLS": "rc_verbs,sm,self", "UCX_NET_DEVICES": f"{device}:1"}
    if gid_index := ipv4_gid_index(device):
        env["UCX_IB_GID_INDEX"] = gid_index
    out = tmp_path / "run"
    result = mpiexec(
        2, "run", "-t", "verbs,ucx", "-k", ",".join(KERNELS), "-m", f"{SIZES[0]}:{SIZES[-1]}", "-i", "5", "-x", "1",
        "-W", "4", "-c", "--timeout", "120", "--device", device, "--ucx-sockaddr", address, "--out", str(out),
        "--format", "none", env=env, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows, meta = read_rows(out)
    rows = rows[(rows.transport == "ucx") | (rows.kernel != "put")]  # verbs has no put kernel: its row says so
    assert (rows.status == "ok").all() and (rows.validation == "pass").all(), rows[["transport", "kernel", "status"]]
    ucx = rows[rows.transport == "ucx"]
    assert sorted(zip(ucx.kernel, ucx.size_B, strict=True)) == sorted((k, s) for k in KERNELS for s in SIZES)
    assert ucx.method.str.contains(f"rc_verbs/{device}:1", regex=False).all(), set(ucx.method)
    assert (rows.transport == "verbs").any()
    info = meta["transports"]["ucx"]
    assert info["connection"] == f"client-server: a UCP listener on {address} (--ucx-sockaddr)"
    assert set(info["transports_by_rank"].values()) == {f"rc_verbs/{device}:1"}, info
    # --ucx-progress auto: two ranks on the VM's one vCPU yield (spinning, each tagged message waited for the
    # scheduler's 4 ms tick); on a host with a CPU per rank they spin.
    cpus = usable_cpus()
    expected = "yield" if cpus < 2 else "spin"
    assert ucx.method.str.endswith(f", {expected}").all(), set(ucx.method)
    assert info["progress_choice"].startswith(f"auto: {expected} (2 ranks on this host, {cpus} CPU"), info

"""The ucx transport on real UCX transports (shared memory, tcp) between two local ranks, ucx_perftest beside it,
and its refusals.

Every kernel moves data that is checked (-c); the rows name the UCX transport and device each endpoint chose.
A host without UCX is made by hiding its headers in a mount namespace of the test's own (unshare -m), so the
build really fails as it would there; an unreachable peer is a ``serve`` that offers shared memory only to a
client that offers tcp only, so UCX itself finds no common transport.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from fabricbench.hostinfo import usable_cpus
from fabricbench.transports.ucx.transport import PROGRESS_WORDS
from support import PYTHON, Server, clean_env, fabricbench, one_error_line, read_rows

KERNELS = "latency,bw,bibw,put,get,put-bw,get-bw"


def _ucx() -> str:
    """Why the ucx transport cannot run here ('' when it can)."""
    from fabricbench.transports.ucx import cloop as ucx_cloop
    from fabricbench.transports.ucx.options import UCXUnavailable

    try:
        ucx_cloop.load()
    except UCXUnavailable as exc:
        return str(exc)
    return ""


MISSING = _ucx()
needs_ucx = pytest.mark.skipif(bool(MISSING), reason=f"no UCX to build against: {MISSING}")
needs_perftest = pytest.mark.skipif(shutil.which("ucx_perftest") is None, reason="needs ucx-utils (ucx_perftest)")


def run_ucx(out, *options: str, kernels: str = KERNELS, sizes: str = "0:16K", env: dict | None = None):
    result = fabricbench(
        "run", "-t", "ucx", "-k", kernels, "-m", sizes, "-i", "30", "-x", "2", "-c", "--out", str(out),
        "--format", "none", *options, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return read_rows(out)


@needs_ucx
@pytest.mark.parametrize(("tls", "named"), [("sm,self", "/memory"), ("tcp", "tcp/")])
def test_every_kernel_moves_checked_data_over_the_ucx_transport(tls, named, tmp_path):
    rows, meta = run_ucx(tmp_path, env={"UCX_TLS": tls})
    assert set(rows.kernel) == set(KERNELS.split(","))
    # A 0 B put or get moves nothing (UCP completes it at once, without the peer): said, never timed.
    empty = rows.kernel.isin(["put", "get", "put-bw", "get-bw"]) & (rows.size_B == 0)
    assert empty.any() and rows[empty].status.str.contains("RMA operation of 0 B moves nothing").all()
    rows = rows[~empty]
    assert (rows.status == "ok").all(), rows[rows.status != "ok"][["kernel", "size_B", "status"]]
    assert (rows.validation == "pass").all(), rows[rows.validation != "pass"][["kernel", "size_B"]]
    # --ucx-progress auto: two ranks spin where each has a CPU, and yield where they share one
    progress = "spin" if usable_cpus() >= 2 else "yield"
    assert rows.method.str.startswith("c loop, ").all() and rows.method.str.endswith(f", {progress}").all()
    assert rows.method.str.contains(named, regex=False).all(), set(rows.method)
    two_sided = rows[rows.kernel.isin(["latency", "bw", "bibw"])]
    assert two_sided.method.str.startswith("c loop, tag, ").all()
    assert rows[rows.kernel == "put"].method.str.contains("ucp_put_nbx + ucp_ep_flush_nbx", regex=False).all()
    assert (rows[rows.kernel == "latency"].lat_p50_us > 0).all()
    assert (rows[(rows.kernel == "bw") & (rows.size_B > 0)].bw_MBps > 0).all()
    info = meta["transports"]["ucx"]
    assert info["ucx"].startswith("1.") and info["ucx_library"]
    assert info["ucx_environment"] == {"UCX_TLS": tls}  # what each rank saw, recorded
    assert set(info["transports_by_rank"]) == {"0", "1"}
    assert all(named in lanes for lanes in info["transports_by_rank"].values())
    assert info["lanes_source"].startswith("ucp_ep_print_info")


@needs_ucx
@pytest.mark.parametrize(("api", "progress"), [("stream", "wait"), ("am", "yield")])
def test_the_other_two_sided_apis_and_the_other_ways_of_progress(api, progress, tmp_path):
    rows, meta = run_ucx(
        tmp_path, "--ucx-api", api, "--ucx-progress", progress, kernels="latency,bw,bibw", sizes="0:64K",
        env={"UCX_TLS": "tcp"},
    )  # fmt: skip
    measured = rows[rows.status == "ok"]
    if api == "stream":  # a stream carries no message of 0 B: said, not measured
        refused = rows[rows.status != "ok"]
        assert (refused.size_B == 0).all() and refused.status.str.contains("no messages of 0 B").all()
        assert len(refused) == 3
    else:
        assert len(measured) == len(rows)
    assert (measured.validation == "pass").all()
    assert measured.method.str.startswith(f"c loop, {api}, tcp/").all()
    assert measured.method.str.endswith(f", {progress}").all()
    assert meta["transports"]["ucx"]["progress"] == PROGRESS_WORDS[progress]
    assert meta["transports"]["ucx"]["progress_choice"] == progress  # named, so not auto's to choose


@needs_ucx
@needs_perftest
def test_ucx_perftest_rows_sit_beside_the_ucx_rows(tmp_path):
    result = fabricbench(
        "run", "-t", "ucx,ucx-perftest", "-k", "latency,bw,bibw,put,get", "-m", "8:32", "-i", "200", "-x", "20",
        "--out", str(tmp_path), "--format", "none", env={"UCX_TLS": "sm,self"}, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows, meta = read_rows(tmp_path)
    tool = rows[rows.transport == "ucx-perftest"]
    assert set(tool.kernel) == {"latency", "bw", "bibw", "put", "get"}
    assert tool[tool.kernel == "bibw"].status.str.contains("no bidirectional test").all()
    measured = tool[tool.status == "ok"]
    assert len(measured) == 4 * 3 and (measured.validation == "off").all()
    assert (measured[measured.kernel == "latency"].lat_p50_us > 0).all()
    assert (measured[measured.kernel == "bw"].bw_MBps > 0).all()
    assert set(measured.method.str.split().str[2]) == {"tag_lat", "tag_bw", "ucp_put_lat", "ucp_get"}
    assert measured[measured.kernel == "put"].note.str.contains("half a round trip").all()
    assert meta["transports"]["ucx-perftest"]["ucx"].startswith("1.")


@needs_ucx
def test_a_ucx_tls_that_matches_nothing_is_one_line_before_any_rank(tmp_path):
    result = fabricbench("run", "-t", "ucx", "-k", "latency", "--out", str(tmp_path / "r"), env={"UCX_TLS": "bogus"})
    assert result.returncode == 2
    one_error_line(result.stderr, "UCX_TLS=bogus")
    assert "ucx_info -d" in result.stderr
    assert not (tmp_path / "r").exists()  # refused before the results folder, so before any rank


@needs_ucx
def test_a_peer_ucx_cannot_reach_is_one_line_and_the_server_goes_on(tmp_path):
    server = Server(env={"UCX_TLS": "sm"})
    try:
        result = fabricbench(
            "run", "--peer", f"127.0.0.1:{server.port}", "-t", "ucx", "-k", "latency", "-m", "8", "--timeout", "30",
            "--out", str(tmp_path), "--format", "none", env={"UCX_TLS": "tcp"},
        )  # fmt: skip
        assert result.returncode == 3, result.stderr
        one_error_line(result.stderr, "Destination is unreachable")
        server.wait_for("session ended with exit code 3")
        assert server.proc.poll() is None  # the server lives on for the next client
    finally:
        server.stop()


@needs_ucx
def test_doctor_lists_ucx_with_its_transports_and_devices():
    result = fabricbench("doctor", "--json")
    assert result.returncode == 0, result.stderr
    ucx = json.loads(result.stdout)["transports"]["ucx"]
    assert ucx["available"], ucx
    devices = ucx["details"]["transports and devices (ucx_info -d)"]
    assert "tcp/lo" in devices and "posix/memory" in devices, devices
    assert ucx["details"]["ucx"].startswith("1.")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="unshare (util-linux) is not installed")
def test_without_ucx_the_refusal_is_one_line_and_no_rank_starts(tmp_path):
    # A mount namespace in which UCX's headers and pkg-config files are hidden, and an empty build cache: the build
    # fails on its first include, as on a host without libucx-dev. Needs root (as CI runs).
    hide = "mount -t tmpfs none /usr/include/ucp && "
    command = f"{hide}exec {PYTHON} -m fabricbench run -t ucx,tcp -k latency --out {tmp_path / 'r'}"
    env = clean_env({"FABRICBENCH_CACHE_DIR": str(tmp_path / "cache"), "PKG_CONFIG_LIBDIR": str(tmp_path)})
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    if not os.path.isdir("/usr/include/ucp"):
        pytest.skip("UCX's headers are not installed here: nothing to hide")
    result = subprocess.run(["unshare", "-m", "sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    one_error_line(result.stderr, "ucp/api/ucp.h not found")
    assert "apt-get install libucx-dev ucx-utils" in result.stderr
    assert not (tmp_path / "r").exists()


@needs_ucx
def test_a_listener_on_a_socket_address_connects_the_pair_client_server(tmp_path):
    # UCX's client-server set-up (--ucx-sockaddr): rank 0 listens, rank 1 connects to its address and port, UCX's
    # connection manager wires the endpoint up; then every kernel moves checked data as over exchanged addresses.
    rows, meta = run_ucx(
        tmp_path, "--ucx-sockaddr", "127.0.0.1", kernels="latency,bw,put,get", sizes="8:4K", env={"UCX_TLS": "tcp"}
    )
    assert (rows.status == "ok").all() and (rows.validation == "pass").all(), rows[["kernel", "size_B", "status"]]
    assert rows.method.str.contains("tcp/").all(), set(rows.method)
    assert meta["transports"]["ucx"]["connection"] == "client-server: a UCP listener on 127.0.0.1 (--ucx-sockaddr)"
    bad = fabricbench("run", "-t", "ucx", "--ucx-sockaddr", "nowhere", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and not (tmp_path / "bad").exists()
    one_error_line(bad.stderr, "--ucx-sockaddr 'nowhere': not an IPv4 address")

"""The verbs C loop on a real RDMA device (rxe0 in the SoftRoCE VM): UC and UD queue pairs, and the fallback.

softroce-vm.sh builds the C loops on the host before the VM boots (a compile under emulation takes minutes), so
the runs here load that build; the fallback test points the cache at an empty folder and takes the compiler away,
so it builds (and fails) on first use as a host without a compiler would. ``--loop c`` refusing a loop that cannot
be built stops before any rank and needs no device: tests/test_verbs_host.py tests it on the host.
"""

from __future__ import annotations

from support import NEEDS_RDMA_DEVICE, mpiexec, read_rows

pytestmark = NEEDS_RDMA_DEVICE
RUN_TIMEOUT = 600  # seconds for one fabricbench run under emulation


def _ok(rows):
    return rows[rows.status == "ok"]


def test_uc_writes_and_sends_run_in_c_and_what_uc_cannot_do_says_so(out):
    result = mpiexec(
        2, "run", "-t", "verbs,verbs-send", "-k", "latency,bw,bibw,get,fop", "-m", "4K:4K", "--qp-type", "uc",
        "-i", "10", "-x", "2", "-W", "16", "-c", "--timeout", "300", "--out", str(out), "--format", "none",
        timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    measured = _ok(rows)
    expected = {(t, k) for t in ("verbs", "verbs-send") for k in ("latency", "bw", "bibw")}
    assert set(zip(measured.transport, measured.kernel, strict=True)) == expected
    assert (measured.validation == "pass").all()
    assert measured.method.str.startswith("c loop, UC ").all(), set(measured.method)
    refused = dict(zip(zip(rows.transport, rows.kernel, strict=True), rows.status, strict=True))
    assert refused["verbs", "get"] == (
        "unsupported: RDMA READ needs a reliable connection (--qp-type rc); UC carries WRITEs and SENDs only"
    )
    assert refused["verbs", "fop"].startswith("unsupported: RDMA atomics needs a reliable connection")
    assert meta["transports"]["verbs"]["qp_type"] == "UC"


def test_ud_sends_up_to_the_mtu_with_events_and_a_post_list_in_c(out):
    """UD: each message one packet, landing after the 40-byte GRH; completions waited for on a channel."""
    result = mpiexec(
        2, "run", "-t", "verbs-send,verbs", "-k", "latency,bw,bibw", "-m", "1K:8K", "--qp-type", "ud",
        "--events", "--post-list", "4", "-i", "10", "-x", "2", "-W", "16", "-c", "--timeout", "300",
        "--out", str(out), "--format", "none", timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows, meta = read_rows(out)
    device = meta["transports"]["verbs-send"]
    assert device["qp_type"] == "UD" and device["path_mtu_B"] == 4096  # rxe0 on lo
    assert "completion channel" in device["completions"]
    measured = _ok(rows)
    assert set(measured.transport) == {"verbs-send"} and set(measured.size_B) == {1024, 2048, 4096}
    assert len(measured) == 9 and (measured.validation == "pass").all()
    streams = measured[measured.kernel != "latency"]
    assert streams.method.str.startswith("c loop, UD send").all(), set(streams.method)
    assert streams.method.str.contains("signal 1/4, post list 4, events").all()
    assert (streams.bw_MBps > 0).all()
    too_big = rows[(rows.transport == "verbs-send") & (rows.size_B == 8192)]
    assert (too_big.status == "unsupported: a UD message is one packet: 8192 B is over the path MTU of 4096 B").all()
    writes = rows[rows.transport == "verbs"]
    assert writes.status.str.contains("UD carries SENDs only").all() and len(writes) == 3 * 4


def test_without_a_compiler_verbs_falls_back_with_one_notice(out, tmp_path):
    cache = tmp_path / "empty-cache"
    result = mpiexec(
        2, "run", "-t", "verbs", "-k", "latency", "-m", "8:8", "-i", "10", "-x", "2", "-c", "--timeout", "300",
        "--out", str(out), "--format", "none",
        env={"CC": "/nonexistent/cc", "FABRICBENCH_CACHE_DIR": str(cache)}, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    notices = [line for line in result.stderr.splitlines() if line.startswith("fabricbench: notice: verbs")]
    assert notices == [
        "fabricbench: notice: verbs kernels are timed in Python (python loop): cannot run /nonexistent/cc: "
        "No such file or directory (set CC to a C compiler)"
    ] or (len(notices) == 1 and "C compiler" in notices[0]), result.stderr
    assert "Traceback" not in result.stderr
    rows, meta = read_rows(out)
    assert list(rows.status) == ["ok"] and list(rows.validation) == ["pass"]
    assert rows.method.str.startswith("python loop, write").all()
    assert meta["transports"]["verbs"]["timed_loop"] == "python loop"

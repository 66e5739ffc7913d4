"""The ucx transports' pure parts: what they read from the network, from ucp_ep_print_info, ucx_perftest and
ucx_info, the host's install, and what they send in the peer HELLO. No UCX is opened."""

from __future__ import annotations

import argparse
import math

import pytest

from fabricbench.argtypes import MASK
from fabricbench.control.rendezvous import FieldReader, ProtocolError
from fabricbench.errors import PeerError
from fabricbench.measure.kernels import KERNELS
from fabricbench.transports.ucx.cloop import Lane, find_ucx, lanes_summary, parse_lanes, used_for
from fabricbench.transports.ucx.options import UCX_OPTIONS, UCXUnavailable, resolve_progress
from fabricbench.transports.ucx.transport import (
    check_base,
    check_environment,
    check_lanes,
    decode_blob,
    lane_link,
    lane_records,
    open_refusal,
    ucx_environment,
)
from fabricbench.transports.ucx.ucx_perftest import figures, parse, parse_devices
from fabricbench.transports.ucx.ucx_perftest import test_name as perftest_test

# ucp_ep_print_info of UCX 1.13.1 for two processes on one host, and for a tcp peer
SHM_EP = """#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255] am am_bw#0
#                 lane[1]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]
#                 lane[2]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] rma_bw#0
#
#                tag_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)
#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)
#                  rma_bw: mds rndv_rkey_size 9
"""
TCP_EP = "#                 lane[0]:  1:tcp/veth0.0 md[1]       -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup\n"
RC_EP = """#                 lane[0]:  7:rc_verbs/rxe0:1.0 md[5]   -> md[5]/ib/sysdev[255] rma am rma_bw#0 am_bw#0
#                 lane[1]:  8:ud_verbs/rxe0:1.0 md[5]   -> md[5]/ib/sysdev[255] wireup
"""
PERFTEST_CSV = """+----------+
| API:          protocol layer |
iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
1000,0.484,0.517,0.530,14.76,10.00,1934196,1934100
"""
UCX_INFO_D = """#      Transport: self
#         Device: memory0
#      Transport: tcp
#         Device: lo
#      Transport: tcp
#         Device: eth0
#      Transport: posix
#         Device: memory
#      Transport: rc_verbs
#         Device: rxe0:1
"""


def test_the_lanes_of_an_endpoint_are_its_transports_devices_and_uses():
    lanes = parse_lanes(SHM_EP)
    assert [lane.name for lane in lanes] == ["sysv/memory", "posix/memory", "cma/memory"]
    assert lanes[0].operations == ("am", "am_bw") and lanes[1].operations == () and lanes[2].operations == ("rma_bw",)
    assert lanes_summary(lanes) == "sysv/memory, posix/memory, cma/memory"
    assert used_for(lanes, ("am", "am_bw", "tag")) == "sysv/memory"
    assert used_for(lanes, ("rma", "rma_bw")) == "cma/memory"
    assert used_for(lanes, ("amo",)) == lanes_summary(lanes)  # none marked: every lane
    (tcp,) = parse_lanes(TCP_EP)
    assert tcp == Lane(0, "tcp", "veth0", ("am", "am_bw", "keepalive", "wireup"))
    rc, ud = parse_lanes(RC_EP)
    assert rc.name == "rc_verbs/rxe0:1" and set(rc.operations) == {"rma", "am", "rma_bw", "am_bw"}
    assert ud.name == "ud_verbs/rxe0:1" and ud.operations == ("wireup",)
    assert parse_lanes("no endpoint here") == [] and lanes_summary([]) == "no lanes reported"


def test_a_peers_lanes_are_checked_before_they_are_believed():
    lanes = parse_lanes(RC_EP)
    assert check_lanes(lane_records(lanes), 1) == lanes
    for bad in (None, "rc_verbs", [["rc", "dev"]], [["rc", "dev", "am"]], [["rc verbs", "dev", []]],
                [["", "dev", []]], [["rc", "x" * 65, []]], [["rc", "dev", [1]]], [["rc", "d", []]] * 33):  # fmt: skip
        with pytest.raises(PeerError, match="rank 1's UCX lane record is malformed"):
            check_lanes(bad, 1)


def test_worker_addresses_and_rkeys_are_bounded_hex():
    assert decode_blob("00ff10", 1, "worker address", 16) == b"\x00\xff\x10"
    for bad in (None, 7, "", "0", "zz", "00" * 17):
        with pytest.raises(PeerError, match="rank 1 sent"):
            decode_blob(bad, 1, "worker address", 16)
    assert check_base(0, 1) == 0 and check_base(2**64 - 1, 1) == 2**64 - 1
    for bad in (-1, 2**64, 1.0, True, "0", None):
        with pytest.raises(PeerError, match="buffer address"):
            check_base(bad, 1)


def test_the_ucx_environment_is_recorded_with_secrets_masked_and_checked_when_it_comes_back():
    env = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0", "UCX_IB_PKEY_TOKEN": "s3cret", "PATH": "/bin"}
    found = ucx_environment(env)
    assert found == {"UCX_IB_PKEY_TOKEN": MASK, "UCX_NET_DEVICES": "veth0", "UCX_TLS": "tcp"}
    assert check_environment(found, 1) == found
    for bad in (None, {"PATH": "/bin"}, {"UCX_TLS": 1}, {f"UCX_{i}": "" for i in range(65)}, {"UCX_X": "v" * 257}):
        with pytest.raises(PeerError, match="UCX_\\* environment record is malformed"):
            check_environment(bad, 1)


def test_a_worker_ucx_will_not_open_is_said_with_what_limits_it():
    said = open_refusal("ucp_init: No such device", "1.13.1", {"UCX_TLS": "bogus", "UCX_NET_DEVICES": "eth9"})
    assert said == (
        "UCX 1.13.1 could not open a worker with UCX_TLS=bogus UCX_NET_DEVICES=eth9: ucp_init: No such device "
        "(ucx_info -d lists the transports and devices)"
    )
    assert " with " not in open_refusal("x", "1.13.1", {})


def test_ucx_perftest_final_line_is_read_with_its_megabytes_converted():
    result = parse(PERFTEST_CSV)
    assert result["p50_us"] == 0.484 and result["mean_us"] == 0.530 and result["msg_per_s"] == 1934100
    assert math.isclose(result["MBps"], 10.00 * 2**20 / 1e6)
    latency = figures(KERNELS["latency"], result)
    assert latency["lat_p50_us"] == 0.484 and latency["lat_mean_us"] == 0.530
    assert (
        "bw_MBps" in figures(KERNELS["bw"], result) and "half a round trip" in figures(KERNELS["put"], result)["note"]
    )
    for bad in ("", "iterations,50.0_percentile_lat\n1,2", PERFTEST_CSV.replace("0.484", "x")):
        with pytest.raises(PeerError, match="ucx_perftest printed no result line"):
            parse(bad)
    assert math.isnan(parse(PERFTEST_CSV.replace("0.484", "nan"))["p50_us"])


def test_ucx_perftest_tests_for_each_kernel_and_api():
    assert [perftest_test("latency", api) for api in ("tag", "stream", "am")] == ["tag_lat", "stream_lat", "ucp_am_lat"]
    assert [perftest_test("bw", api) for api in ("tag", "stream", "am")] == ["tag_bw", "stream_bw", "ucp_am_bw"]
    assert [perftest_test(k, "tag") for k in ("put", "put-bw", "get", "get-bw")] == [
        "ucp_put_lat", "ucp_put_bw", "ucp_get", "ucp_get",
    ]  # fmt: skip
    assert perftest_test("bibw", "tag") is None


def test_ucx_info_devices_are_transport_slash_device():
    assert parse_devices(UCX_INFO_D) == ["self/memory0", "tcp/lo", "tcp/eth0", "posix/memory", "rc_verbs/rxe0:1"]
    assert parse_devices("") == []


def _run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    UCX_OPTIONS.add_arguments(parser, "run")
    return parser.parse_args(argv)


def test_the_options_parse_and_travel_in_the_hello():
    settings = UCX_OPTIONS.settings(_run_args("--ucx-api", "am", "--ucx-progress", "wait"), "run")
    assert settings == {"api": "am", "progress": "wait"}
    assert UCX_OPTIONS.settings(_run_args(), "run") == {"api": "tag", "progress": "auto"}
    with pytest.raises(SystemExit):
        _run_args("--ucx-api", "rma")
    payload = UCX_OPTIONS.encode_handshake(settings)
    assert UCX_OPTIONS.decode_handshake(FieldReader(payload, "ucx"), {}) == settings
    for bad in (b"\x03\x00", b"\x00\x04"):
        with pytest.raises(ProtocolError, match="bad ucx API or progress"):
            UCX_OPTIONS.decode_handshake(FieldReader(bad, "ucx"), {})
    serve = argparse.ArgumentParser()
    UCX_OPTIONS.add_arguments(serve, "serve")
    assert UCX_OPTIONS.settings(serve.parse_args([]), "serve") == {}


def test_auto_progress_yields_only_where_the_host_runs_more_ranks_than_cpus():
    assert resolve_progress("auto", 2, 1) == ("yield", "auto: yield (2 ranks on this host, 1 CPU)")
    assert resolve_progress("auto", 2, 2) == ("spin", "auto: spin (2 ranks on this host, 2 CPUs)")
    assert resolve_progress("auto", 4, 2)[0] == "yield"
    for named in ("spin", "yield", "wait"):
        assert resolve_progress(named, 8, 1) == (named, named)


def test_ucx_is_found_by_its_root_where_pkg_config_has_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pkg-config
    (tmp_path / "include" / "ucp" / "api").mkdir(parents=True)
    (tmp_path / "include" / "ucp" / "api" / "ucp.h").write_text("")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libucp.so").write_text("")
    found = find_ucx({"UCX_ROOT": str(tmp_path)})
    assert found.how == f"$UCX_ROOT={tmp_path}" and f"-I{tmp_path}/include" in found.compile_flags
    with pytest.raises(UCXUnavailable, match="holds no UCX"):
        find_ucx({"UCX_HOME": str(tmp_path / "lib")})
    assert find_ucx({}).how == "system paths"


def test_a_ucx_endpoints_link_is_the_one_device_its_bandwidth_lanes_cross(tmp_path):
    net, rdma = tmp_path / "net", tmp_path / "infiniband"
    (net / "veth0").mkdir(parents=True)
    (net / "veth0" / "mtu").write_text("1500\n")
    (rdma / "mlx5_0" / "ports" / "1").mkdir(parents=True)
    (rdma / "mlx5_0" / "ports" / "1" / "rate").write_text("100 Gb/sec (4X EDR)\n")

    def link(*lanes, shaped=None):
        return lane_link(list(lanes), net, rdma, lambda name: shaped)

    tcp = Lane(1, "tcp", "veth0", ("am_bw", "tag"))
    # A veth shaped by a root tbf at 100 Mbit/s: TCP payload of 1448-byte segments in 1514-byte frames.
    assert link(Lane(0, "tcp", "veth0", ("am",)), tcp, shaped=(12.5e6, 0)) == (
        pytest.approx(12.5 * 1448 / 1514),
        "veth0 tbf 100 Mb/s",
    )
    assert link(tcp) == (None, "")  # unshaped: a veth has no rate
    assert link(Lane(0, "rc_verbs", "mlx5_0:1", ("am_bw", "rma_bw"))) == (12500.0, "mlx5_0:1 100 Gb/sec (4X EDR)")
    assert link(Lane(0, "posix", "memory", ("am_bw",))) == (None, "")  # shared memory
    assert link(tcp, Lane(2, "rc_verbs", "mlx5_0:1", ("am_bw",))) == (None, "")  # striped over two devices

"""The RDMA transports' plain data on any machine: the queue-pair record, GIDs, CQ moderation, perftest's output.

Nothing here opens a device or starts a process; the errors users see without RDMA are in
tests/test_verbs_host.py, the real data paths in tests/verbs.
"""

from __future__ import annotations

import math
import os
import types

import pytest

from fabricbench.errors import PeerError
from fabricbench.transports.verbs.perftest import parse_bandwidth, parse_latency, setting
from fabricbench.transports.verbs.rdma import (
    BAD_RKEY_HOOK,
    Endpoint,
    VerbsUnavailable,
    decode_endpoint,
    default_cq_mod,
    encode_endpoint,
    enums_module,
    gid_bytes,
    pick_gid,
)


def test_default_cq_mod_keeps_four_chains_in_flight():
    assert [default_cq_mod(w) for w in (1, 4, 7, 64, 100, 128)] == [1, 1, 1, 16, 25, 32]


# --- pyverbs' two enum layouts, without pyverbs -------------------------------------------------------------------


def test_enum_layout_from_rdma_core_59_is_preferred():
    # rdma-core 59 cannot sit beside this host's 44, so a module table stands in for its layout.
    new = types.ModuleType("pyverbs.libibverbs_enums")
    old = types.ModuleType("pyverbs.enums")
    both = {m.__name__: m for m in (new, old)}
    only_old = {old.__name__: old}

    def importer(table):
        def import_module(name):
            if name not in table:
                raise ImportError(name)
            return table[name]

        return import_module

    assert enums_module(importer(both)) is new
    assert enums_module(importer(only_old)) is old
    with pytest.raises(ImportError):
        enums_module(importer({}))


# --- the queue-pair record ----------------------------------------------------------------------------------------

ENDPOINT = Endpoint(
    lid=0,
    qpn=0x11,
    psn=0xABCDEF,
    gid=gid_bytes("0000:0000:0000:0000:0000:ffff:7f00:0001"),
    mtu=5,
    rkey=0x6F1,
    addr=0x7F00_1234_0000,
    region=65536,
    rd_atomic=16,
)


def test_endpoint_round_trips_through_json():
    import json

    record = json.loads(json.dumps(encode_endpoint(ENDPOINT)))
    assert decode_endpoint(record, "rank 1") == ENDPOINT


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"qpn": 0}, "qpn=0"),
        ({"qpn": 1 << 24}, "qpn="),
        ({"psn": -1}, "psn=-1"),
        ({"mtu": 6}, "mtu=6"),
        ({"rkey": "1777"}, "rkey='1777'"),
        ({"lid": True}, "lid=True"),
        ({"addr": 1.5}, "addr=1.5"),
        ({"region": 0}, "region=0"),
        ({"gid": "zz" * 16}, "not hex"),
        ({"gid": "00" * 15}, "32 hex digits"),
        ({"version": 2}, "version 2"),
        ({"extra": 1}, "unexpected or missing fields extra"),
    ],
)
def test_malformed_endpoint_is_refused(change, words):
    record = encode_endpoint(ENDPOINT) | change
    with pytest.raises(PeerError, match="rank 1") as refused:
        decode_endpoint(record, "rank 1")
    assert words in str(refused.value)


def test_endpoint_with_a_missing_field_or_not_an_object_is_refused():
    record = encode_endpoint(ENDPOINT)
    del record["rkey"]
    with pytest.raises(PeerError, match="missing fields rkey"):
        decode_endpoint(record, "rank 1")
    with pytest.raises(PeerError, match="not an object"):
        decode_endpoint([1, 2], "rank 1")


def test_bad_rkey_hook_corrupts_only_the_rkey(monkeypatch):
    monkeypatch.setitem(os.environ, BAD_RKEY_HOOK, "1")
    corrupted = decode_endpoint(encode_endpoint(ENDPOINT), "rank 1")
    assert corrupted.rkey != ENDPOINT.rkey
    assert corrupted.addr == ENDPOINT.addr and corrupted.qpn == ENDPOINT.qpn


# --- GID choice --------------------------------------------------------------------------------------------------

ROCE_V1, ROCE_V2 = 1, 2


def test_gid_choice_on_an_rxe_table_is_the_ipv4_mapped_roce_v2_gid():
    table = [  # rxe0 on lo, as the VM shows it
        (0, gid_bytes("fe80:0000:0000:0000:0200:00ff:fe00:0000"), ROCE_V2),
        (1, gid_bytes("0000:0000:0000:0000:0000:ffff:7f00:0001"), ROCE_V2),
        (2, gid_bytes("0000:0000:0000:0000:0000:0000:0000:0001"), ROCE_V2),
    ]
    assert pick_gid(table)[0] == 1


def test_gid_choice_prefers_roce_v2_and_skips_empty_slots():
    table = [
        (0, bytes(16), ROCE_V2),
        (1, gid_bytes("0000:0000:0000:0000:0000:ffff:0a00:0001"), ROCE_V1),
        (2, gid_bytes("fe80:0000:0000:0000:0000:0000:0000:0002"), ROCE_V2),
        (3, gid_bytes("0000:0000:0000:0000:0000:ffff:0a00:0001"), ROCE_V2),
    ]
    assert pick_gid(table)[0] == 3
    assert pick_gid(table[:3])[0] == 2
    with pytest.raises(VerbsUnavailable, match="GID table is empty"):
        pick_gid(table[:1])


# --- perftest's output, as captured from perftest 4.5 on rxe0 ------------------------------------------------------

WRITE_LAT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write Latency Test
 Dual-port       : OFF\t\tDevice         : rxe0
 Number of qps   : 1\t\tTransport type : IB
 TX depth        : 1
 Mtu             : 4096[B]
 Link type       : Ethernet
 GID index       : 1
 Max inline data : 0[B]
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   \
99% percentile[usec]   99.9% percentile[usec] \x20
 8       100          3500.32        7614.56      4056.51  \t       4354.98     \t690.06 \t\t7614.56 \t\t7614.56
---------------------------------------------------------------------------------------
"""

WRITE_BW = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 TX depth        : 128
 CQ Moderation   : 1
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      200              37.78              32.24  \t\t   0.000516
---------------------------------------------------------------------------------------
"""


def test_perftest_latency_line_maps_to_the_latency_columns():
    stats = parse_latency(WRITE_LAT)
    assert stats == {
        "lat_min_us": 3500.32,
        "lat_max_us": 7614.56,
        "lat_p50_us": 4056.51,
        "lat_mean_us": 4354.98,
        "lat_stdev_us": 690.06,
        "lat_p99_us": 7614.56,
        "lat_p999_us": 7614.56,
    }
    assert setting(WRITE_LAT, "Max inline data") == "0[B]"
    assert setting(WRITE_LAT, "Device") == "rxe0"


def test_perftest_bandwidth_is_converted_from_mib_to_mb():
    stats = parse_bandwidth(WRITE_BW)
    assert stats["bw_MBps"] == pytest.approx(32.24 * 1.048576)
    assert stats["bw_peak_MBps"] == pytest.approx(37.78 * 1.048576)
    assert stats["msgrate_per_s"] == pytest.approx(516.0)
    # The message rate and the average agree once MiB are counted as MiB: perftest's own consistency.
    assert stats["msgrate_per_s"] * 65536 / 1e6 == pytest.approx(stats["bw_MBps"], rel=0.01)


def test_perftest_inf_becomes_nan_and_garbage_is_refused():
    stats = parse_latency(WRITE_LAT.replace("4056.51", "inf"))
    assert math.isnan(stats["lat_p50_us"])
    with pytest.raises(PeerError, match="no result table"):
        parse_bandwidth("Couldn't connect to 127.0.0.1:18515\n")
    with pytest.raises(PeerError, match="no result table"):
        parse_latency(WRITE_LAT.replace(" 8       100 ", " 8 "))

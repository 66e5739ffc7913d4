"""The switch testbeds of scripts/netns-testbed.sh: a leaf-spine of bridges and a routed dragonfly, their topology
files read back by fabricbench's own reader, traffic crossing (and shaped on) the links between switches.

These need root (ip netns, tc). Traffic goes only to addresses inside the namespaces made here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fabricbench.measure.topology import CROSS_GROUP, CROSS_SWITCH, SAME_SWITCH, read_topology
from support import NETNS, PYTHON, TESTBED, clean_env, run_testbed

LEAF_SPINE, LS_NET = "fbl", "10.213.20"
DRAGONFLY, DF_NET = "fbd", "10.213.21"
# tbf counts whole 1514-byte frames for 1448 bytes of TCP payload: a stream can carry no more than this.
SHAPED_PAYLOAD_MBIT = 100 * 1448 / 1514
PORT = 18790

pytestmark = NETNS

# One ICMP echo by a raw socket (no ping binary on this machine); exit 0 on the reply.
ICMP_ECHO = """
import socket, struct, sys, time
dst = sys.argv[1]
body = struct.pack("!BBHHH", 8, 0, 0, 7, 1) + bytes(56)
total = sum(struct.unpack("!32H", body))
for _ in range(2):
    total = (total & 0xFFFF) + (total >> 16)
packet = body[:2] + struct.pack("!H", ~total & 0xFFFF) + body[4:]
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.settimeout(3)
sock.sendto(packet, (dst, 0))
end = time.monotonic() + 3
while time.monotonic() < end:
    data, (src, _) = sock.recvfrom(2048)
    if src == dst and data[20] == 0:
        sys.exit(0)
sys.exit(1)
"""

# A TCP sink: prints "ready", takes one connection, prints the payload Mbit/s from the connection to EOF (timed
# from accept: a sink scheduled late would find a window's worth of bytes already there, which counted after a
# clock started at the first byte would lift the figure past the shaper's rate).
SINK = """
import socket, sys, time
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
conn, _ = server.accept()
start = time.perf_counter()
buf = bytearray(1 << 20)
got = 0
while True:
    n = conn.recv_into(buf)
    if not n:
        break
    got += n
print(got * 8 / (time.perf_counter() - start) / 1e6)
"""
SOURCE = """
import socket, sys
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sock.sendall(bytes(int(sys.argv[3])))
sock.close()
"""


def in_ns(ns: str, *command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", ns, *command], capture_output=True, text=True, timeout=timeout)


def addresses(prefix: str) -> dict[str, str]:
    return dict(line.split() for line in run_testbed(prefix, "hosts").splitlines())


def ping(src: str, dst_addr: str) -> bool:
    return in_ns(src, PYTHON, "-c", ICMP_ECHO, dst_addr).returncode == 0


def tx_bytes(ns: str, dev: str) -> int:
    return int(in_ns(ns, "cat", f"/sys/class/net/{dev}/statistics/tx_bytes").stdout)


def stream_mbit(src: str, dst: str, dst_addr: str, size: int) -> float:
    """Payload Mbit/s of one TCP stream of SIZE bytes from host SRC to host DST, as the receiver saw it."""
    sink = subprocess.Popen(
        ["ip", "netns", "exec", dst, PYTHON, "-c", SINK, dst_addr, str(PORT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )
    try:
        assert sink.stdout.readline().strip() == "ready", sink.stderr.read()
        sent = in_ns(src, PYTHON, "-c", SOURCE, dst_addr, str(PORT), str(size))
        assert sent.returncode == 0, sent.stderr
        out, err = sink.communicate(timeout=30)
        assert sink.returncode == 0, err
        return float(out)
    finally:
        sink.kill()
        sink.wait()


def namespaces(prefix: str) -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    names = [line.split()[0] for line in listed.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix) and (n[len(prefix) :].isdigit() or n.startswith(prefix + "-"))]


@pytest.fixture(scope="module")
def leaf_spine():
    run_testbed(LEAF_SPINE, "up", "--topology", "leaf-spine", "2", "2", "--net", LS_NET)
    yield addresses(LEAF_SPINE)
    run_testbed(LEAF_SPINE, "down")


def test_leaf_spine_topology_file_names_the_switches(leaf_spine):
    path = run_testbed(LEAF_SPINE, "topology-file").strip()
    assert path.endswith("topology.conf")
    topo = read_topology(path)
    assert topo.switch == {"fbl1": "leaf1", "fbl2": "leaf1", "fbl3": "leaf2", "fbl4": "leaf2"}
    assert topo.parent == {"leaf1": "spine", "leaf2": "spine"}
    assert topo.tier("fbl1", "fbl2") == SAME_SWITCH and topo.hops("fbl1", "fbl2") == 0
    assert topo.tier("fbl1", "fbl3") == CROSS_SWITCH and topo.hops("fbl1", "fbl3") == 2


def test_cross_leaf_ping_crosses_both_trunks(leaf_spine):
    assert ping("fbl1", leaf_spine["fbl2"])  # within leaf1; also teaches the bridges where fbl1 is
    up1, up2 = tx_bytes("fbl-leaf1", "uplink"), tx_bytes("fbl-spine", "l2")
    assert ping("fbl1", leaf_spine["fbl3"])
    # An echo request is 98 bytes on the wire: leaf1 sent it up its trunk, and the spine down leaf2's.
    assert tx_bytes("fbl-leaf1", "uplink") - up1 >= 98
    assert tx_bytes("fbl-spine", "l2") - up2 >= 98


def test_shaped_uplink_slows_only_cross_leaf_streams(leaf_spine):
    run_testbed(LEAF_SPINE, "shape-uplink", "leaf1", "100mbit", "--burst", "32kbit", "--latency", "400ms")
    try:
        status = run_testbed(LEAF_SPINE, "status")
        assert "leaf1 uplink qdisc: qdisc tbf" in status and "spine l1 qdisc: qdisc tbf" in status
        across = stream_mbit("fbl1", "fbl3", leaf_spine["fbl3"], 3_000_000)
        back = stream_mbit("fbl4", "fbl2", leaf_spine["fbl2"], 3_000_000)
        within = stream_mbit("fbl1", "fbl2", leaf_spine["fbl2"], 30_000_000)
    finally:
        run_testbed(LEAF_SPINE, "unshape", "all")
    # Both directions of the trunk carry no more than the shaped rate; a busy machine only pulls them lower.
    assert 0.2 * SHAPED_PAYLOAD_MBIT < across <= 1.05 * SHAPED_PAYLOAD_MBIT
    assert 0.2 * SHAPED_PAYLOAD_MBIT < back <= 1.05 * SHAPED_PAYLOAD_MBIT
    assert within > 5 * max(across, back)
    assert "tbf" not in run_testbed(LEAF_SPINE, "status")


def test_bad_topology_is_one_line_exit_2():
    for args, expected in (
        (("up", "--topology", "ring", "2"), "--topology is leaf-spine or dragonfly"),
        (("up", "--topology", "leaf-spine", "2"), "usage: up N"),
        (("up", "--topology", "dragonfly", "4", "5", "1"), "G*S must be at most 16"),
    ):
        result = subprocess.run([TESTBED, *args, "--prefix", "fbx"], capture_output=True, text=True, timeout=30)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and expected in result.stderr, result.stderr
    assert not namespaces("fbx")


def test_down_removes_every_namespace_and_the_topology_file(leaf_spine):
    path = run_testbed(LEAF_SPINE, "topology-file").strip()
    assert sorted(namespaces(LEAF_SPINE)) == sorted(
        ["fbl1", "fbl2", "fbl3", "fbl4", "fbl-leaf1", "fbl-leaf2", "fbl-spine"]
    )
    run_testbed(LEAF_SPINE, "down")
    assert namespaces(LEAF_SPINE) == []
    assert not Path(path).exists()


@pytest.fixture(scope="module")
def dragonfly():
    run_testbed(DRAGONFLY, "up", "--topology", "dragonfly", "2", "2", "1", "--net", DF_NET)
    yield addresses(DRAGONFLY)
    run_testbed(DRAGONFLY, "down")


def test_dragonfly_routes_between_groups(dragonfly):
    # g1s1 holds fbd1, g1s2 fbd2, g2s1 fbd3, g2s2 fbd4; the global link joins g1s2 and g2s1.
    global_before = tx_bytes("fbd-g1s2", "g2")
    for src, dst in (("fbd1", "fbd4"), ("fbd4", "fbd1"), ("fbd2", "fbd3"), ("fbd1", "fbd2")):
        assert ping(src, dragonfly[dst]), f"{src} -> {dst}"
    assert tx_bytes("fbd-g1s2", "g2") - global_before >= 2 * 98

    topo = read_topology(run_testbed(DRAGONFLY, "topology-file").strip())
    assert topo.group == {"g1s1": "g1", "g1s2": "g1", "g2s1": "g2", "g2s2": "g2"}
    assert [topo.tier("fbd1", h) for h in ("fbd2", "fbd3")] == [CROSS_SWITCH, CROSS_GROUP]
    tree = read_topology(str(Path(run_testbed(DRAGONFLY, "topology-file").strip()).with_suffix(".conf")))
    assert tree.parent == {"g1s1": "g1", "g1s2": "g1", "g2s1": "g2", "g2s2": "g2", "g1": "root", "g2": "root"}
    assert [tree.tier("fbd1", h) for h in ("fbd2", "fbd3")] == [CROSS_SWITCH, CROSS_GROUP]


def test_shape_global_puts_tbf_on_both_ends(dragonfly):
    run_testbed(DRAGONFLY, "shape-global", "1", "2", "50mbit")
    status = run_testbed(DRAGONFLY, "status")
    assert "g1s2 g2 qdisc: qdisc tbf" in status and "g2s1 g1 qdisc: qdisc tbf" in status
    assert "g1s1 l2 qdisc: qdisc tbf" not in status
    run_testbed(DRAGONFLY, "unshape", "g1", "g2")
    assert "tbf" not in run_testbed(DRAGONFLY, "status")

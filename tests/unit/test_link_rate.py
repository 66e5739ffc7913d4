"""What a link can carry, from what the hardware reports: an RDMA port's speed and width (transports.link_rate),
a NIC's sysfs speed and the route to a peer (transports.tcp_link). Fake sysfs trees stand in for devices."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fabricbench.transports.tcp.link import NO_RATE, link_rate, nic_rate_Mbps, payload_rate, route_interface, shaper
from fabricbench.transports.verbs.link_rate import link_rate_MBps, port_data_Gbps, port_label, software_device

# --- RDMA ports ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speed", "width", "MBps"),
    [
        (1, 1, 250.0),  # 1X SDR: 2.5 Gb/s signalling, 8b/10b, 2 Gb/s of data
        (4, 2, 4000.0),  # 4X QDR: 32 Gb/s of data
        (8, 2, 5000.0),  # 4X FDR10: 10.3125 Gb/s a lane, 64b/66b: 40 Gb/s
        (16, 2, 14.0625 * 64 / 66 * 4 * 125),  # 4X FDR: 54.5 Gb/s
        (32, 2, 12500.0),  # 4X EDR: 100 Gb/s
        (64, 2, 53.125 * 64 / 66 * 4 * 125),  # 4X HDR: 206 Gb/s of signalling data, above its 200 Gb/s
        (128, 16, 106.25 * 64 / 66 * 2 * 125),  # 2X NDR
        (256, 2, 212.5 * 64 / 66 * 4 * 125),  # 4X XDR (active_speed_ex)
        (32, 8, 3 * 12500.0),  # 12X EDR
        (2, 4, 4000.0),  # 8X DDR: 5 Gb/s, 8b/10b, 8 lanes: 32 Gb/s
    ],
)
def test_an_infiniband_port_carries_its_lanes_data_rate(speed, width, MBps):
    assert port_data_Gbps(speed, width, ethernet=False) * 125 == pytest.approx(MBps)


@pytest.mark.parametrize(
    ("speed", "width", "gbit"),
    [(4, 1, 10), (4, 2, 40), (32, 1, 25), (64, 1, 50), (32, 2, 100), (64, 2, 200), (16, 2, 56), (128, 2, 400)],
)
def test_an_ethernet_port_carries_the_speed_it_was_translated_from(speed, width, gbit):
    # mlx5 reports 10GbE as 1X QDR: the wire carries 10 Gb/s, not QDR's 8 Gb/s of data.
    assert port_data_Gbps(speed, width, ethernet=True) == pytest.approx(gbit)


def test_a_port_carries_its_data_rate_less_each_packets_headers():
    # 4X EDR, 4096-byte packets: 100 Gb/s of data, 26 header bytes a packet (LRH, BTH, ICRC, VCRC).
    assert link_rate_MBps(32, 2, 4096, ethernet=False) == pytest.approx(12500 * 4096 / 4122)
    # 100GbE RoCE v2, 1024-byte packets: 82 bytes a packet on the wire (Ethernet 38, IPv4, UDP, BTH, ICRC).
    assert link_rate_MBps(32, 2, 1024, ethernet=True) == pytest.approx(12500 * 1024 / 1106)


def test_no_rate_for_an_unknown_speed_width_or_mtu():
    assert link_rate_MBps(3, 2, 4096, ethernet=False) is None
    assert link_rate_MBps(32, 3, 4096, ethernet=False) is None
    assert link_rate_MBps(0, 0, 1024, ethernet=True) is None
    assert link_rate_MBps(32, 2, 0, ethernet=True) is None  # no pair, no path MTU


def test_port_label_names_the_device_port_width_and_speed():
    assert port_label("mlx5_0", 1, 64, 2) == "mlx5_0 port 1, 4X HDR"
    assert port_label("bnxt_re0", 2, 5, 7) == "bnxt_re0 port 2, width 7 speed 5"


def _rdma_device(sysfs: Path, name: str, device: Path | None = None, parent: str | None = None) -> None:
    base = sysfs / "class" / "infiniband" / name
    base.mkdir(parents=True)
    if device is not None:
        device.mkdir(parents=True, exist_ok=True)
        (base / "device").symlink_to(device)
    if parent is not None:
        (base / "parent").write_text(parent + "\n")


def test_software_devices_are_told_from_sysfs(tmp_path):
    pci = tmp_path / "devices" / "pci0000:00" / "0000:3b:00.0"
    _rdma_device(tmp_path, "mlx5_0", pci)
    _rdma_device(tmp_path, "soft0", parent="eth0")  # rxe, named otherwise: its own parent attribute
    _rdma_device(tmp_path, "iw_lo", tmp_path / "devices" / "virtual" / "net" / "lo")  # siw over lo
    _rdma_device(tmp_path, "nodev")
    _rdma_device(tmp_path, "rxe0", pci)
    _rdma_device(tmp_path, "siw_eth0", pci)  # siw's device is its NIC's
    assert not software_device("mlx5_0", tmp_path)
    for name in ("soft0", "iw_lo", "nodev", "rxe0", "siw_eth0", "not_in_sysfs"):
        assert software_device(name, tmp_path), name


# --- NICs ---------------------------------------------------------------------------------------------------------


def _nic(net: Path, name: str, speed: str | None, driver: str | None = "mlx5_core", device: bool = True) -> None:
    base = net / name
    base.mkdir(parents=True)
    if device:
        pci = net.parent / "devices" / name
        pci.mkdir(parents=True)
        (base / "device").symlink_to(pci)
        if driver:
            (net.parent / "drivers" / driver).mkdir(parents=True, exist_ok=True)
            (pci / "driver").symlink_to(net.parent / "drivers" / driver)
    if speed is not None:
        (base / "speed").write_text(speed + "\n")


def test_a_real_nic_carries_its_reported_speed(tmp_path):
    net = tmp_path / "net"
    _nic(net, "eth2", "25000")
    _nic(net, "eth3", "-1")  # link down or speed unknown
    _nic(net, "eth4", None)  # no speed file
    _nic(net, "eth5", "10000", driver="virtio_net")  # the hypervisor's figure
    _nic(net, "lo", None, device=False)
    _nic(net, "br0", "10000", device=False)  # a bridge reports its ports' speed but is no wire
    assert nic_rate_Mbps("eth2", net) == 25000
    for name in ("eth3", "eth4", "eth5", "lo", "br0", "absent"):
        assert nic_rate_Mbps(name, net) is None, name


# `tc -j qdisc show dev veth0` with the testbed's tbf, and with tc-tbf's overhead option.
TBF = [{"kind": "tbf", "handle": "8061:", "root": True, "options": {"rate": 12500000, "burst": 4087, "lat": 400000}}]
TBF_OVERHEAD = [{"kind": "tbf", "root": True, "options": {"rate": 12500000, "overhead": 24}}]


def test_only_a_root_tbf_is_a_shaper_of_every_flow():
    assert shaper(TBF) == (12500000.0, 0) and shaper(TBF_OVERHEAD) == (12500000.0, 24)
    assert shaper([{"kind": "noqueue", "root": True, "options": {}}]) is None
    assert shaper([{"kind": "htb", "root": True, "options": {"r2q": 10}}]) is None  # its filters pick the flows
    assert shaper([{"kind": "tbf", "parent": "1:10", "options": {"rate": 1000}}]) is None
    assert shaper([]) is None


def test_a_links_tcp_payload_is_its_nics_or_a_lower_shapers():
    # 25GbE, 1448-byte segments with timestamps: 1500-byte packets, 1538 bytes on the wire. A bound.
    assert payload_rate("eth2", 25000, None, 1448, True) == (pytest.approx(3125 * 1448 / 1538), "eth2 25 Gb/s", True)
    # Without timestamps the MSS is 1460 in the same 1500-byte packet.
    assert payload_rate("eth2", 25000, None, 1460, False)[0] == pytest.approx(3125 * 1460 / 1538)
    # tbf counts the 1514-byte frame: the 95.6 Mbit/s of payload measured through 100 Mbit/s. No bound: its burst.
    shaped = payload_rate("veth0", None, (12.5e6, 0), 1448, True)
    assert shaped == (pytest.approx(12.5 * 1448 / 1514), "veth0 tbf 100 Mb/s", False)
    assert payload_rate("veth0", None, (12.5e6, 24), 1448, True)[0] == pytest.approx(12.5 * 1448 / 1538)
    assert payload_rate("eth2", 25000, (12.5e6, 0), 1448, True)[1] == "eth2 tbf 100 Mb/s"  # the lower one
    assert payload_rate("eth2", 1000, (1.25e9, 0), 1448, True)[1:] == ("eth2 1 Gb/s", True)
    assert payload_rate("veth0", None, None, 1448, True) == NO_RATE


ROUTES = """Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth1\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0
eth2\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth3\t0000010A\t00000000\t0001\t0\t0\t5\t0000FFFF\t0\t0\t0
eth4\t0002010A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""


@pytest.mark.skipif(socket.htonl(1) == 1, reason="the table's words are little-endian here")
def test_route_interface_takes_the_longest_prefix_then_the_lowest_metric():
    assert route_interface("10.1.2.3", ROUTES) == "eth2"  # 10.1/16 over 10/8; eth3's metric is higher; eth4 is down
    assert route_interface("10.9.0.1", ROUTES) == "eth1"
    assert route_interface("192.0.2.7", ROUTES) == "eth0"  # the default route
    assert route_interface("10.1.2.3", ROUTES.splitlines()[0]) is None


def test_a_link_to_this_host_has_no_rate(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            assert link_rate(client) == NO_RATE and link_rate(accepted) == NO_RATE
            assert link_rate(client, tmp_path, str(tmp_path / "no-route-table")) == NO_RATE


class _Connected:
    """A connected socket's addresses, as link_rate asks them."""

    family = socket.AF_INET

    def getsockopt(self, level, option, size=0):  # TCP_MAXSEG; tcp_info's options byte: timestamps
        return bytes([0, 0, 0, 0, 0, 1, 0, 0]) if size else 1448

    def getsockname(self):
        return ("10.1.0.5", 40000)

    def getpeername(self):
        return ("10.1.2.3", 50000)


@pytest.mark.skipif(socket.htonl(1) == 1, reason="the table's words are little-endian here")
def test_a_link_through_a_real_nic_has_its_rate_only_where_the_route_and_sysfs_agree(tmp_path, monkeypatch):
    from fabricbench.transports.tcp import link as tcp_link

    net, routes = tmp_path / "net", tmp_path / "route"
    _nic(net, "eth2", "25000")
    (net / "eth2" / "ifindex").write_text("7\n")
    routes.write_text(ROUTES)
    monkeypatch.setattr(tcp_link, "_is_local", lambda address: False)
    monkeypatch.setattr(tcp_link, "_interface_with", lambda address: {"10.1.0.5": "eth2"}.get(address))
    monkeypatch.setattr(tcp_link.socket, "if_nametoindex", lambda name: 7)
    assert link_rate(_Connected(), net, str(routes)) == (pytest.approx(3125 * 1448 / 1538), "eth2 25 Gb/s", True)
    routes.write_text(ROUTES.replace("eth2", "eth9"))  # the bytes leave through another interface
    assert link_rate(_Connected(), net, str(routes)) == NO_RATE
    routes.write_text(ROUTES)
    monkeypatch.setattr(tcp_link.socket, "if_nametoindex", lambda name: 3)  # sysfs shows another namespace's eth2
    assert link_rate(_Connected(), net, str(routes)) == NO_RATE


# --- MPI ----------------------------------------------------------------------------------------------------------


def test_an_mpi_runs_metadata_names_the_nic_its_library_was_told_to_use_and_no_rate():
    from fabricbench.transports.mpi.transport import told_link

    assert told_link({"UCX_NET_DEVICES": "mlx5_0:1", "FI_PROVIDER": "", "PATH": "/bin"}) == (
        "not known: UCX_NET_DEVICES=mlx5_0:1 named to the MPI library, which picks each pair's path; no link_MBps"
    )
    assert told_link({}).startswith("not known: no NIC was named to the MPI library (UCX_NET_DEVICES, FI_PROVIDER")


MPICH_UCX = "MPICH Version:      5.0.2\nMPICH Device:       ch4:ucx ofi\n"


@pytest.mark.parametrize(
    ("environ", "library", "expected"),
    [
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0"}, MPICH_UCX, "veth0"),  # the netns testbed's own settings
        ({"UCX_TLS": "rc,ud", "UCX_NET_DEVICES": "mlx5_0:1"}, MPICH_UCX, "mlx5_0:1"),
        ({"UCX_TLS": "tcp,sm", "UCX_NET_DEVICES": "veth0"}, MPICH_UCX, None),  # shared memory between namespaces
        ({"UCX_TLS": "^sm", "UCX_NET_DEVICES": "veth0"}, MPICH_UCX, None),
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0,veth1"}, MPICH_UCX, None),  # UCX stripes over both
        ({"UCX_NET_DEVICES": "veth0"}, MPICH_UCX, None),  # every transport UCX has
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0", "MPICH_CH4_NETMOD": "ofi"}, MPICH_UCX, None),
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "veth0"}, "MPICH Device: ch4:ofi\n", None),
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth1", "OMPI_MCA_pml": "ucx"}, "Open MPI v5.0.5", "eth1"),
        ({"UCX_TLS": "tcp", "UCX_NET_DEVICES": "eth1"}, "Open MPI v5.0.5", None),  # ob1's BTLs pick their own
    ],
)
def test_the_device_an_mpi_over_ucx_was_told_to_take_between_hosts(environ, library, expected):
    from fabricbench.transports.mpi.transport import told_device

    assert told_device(environ, library) == expected

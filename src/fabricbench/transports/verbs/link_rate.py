"""What an RDMA port can carry, from what ibv_query_port and sysfs report: pure functions, tested without a device.

The verbs transport sets a case's ``link_MBps`` from them (the payload its path MTU's packets carry: link_payload),
and the row's ``link_pct`` is its figure against it. Only hardware makes it a bound (a windowed row's figure above it
refused: ``rows.refuse_impossible``): a software device's port (SoftRoCE rxe, soft-iWARP siw) reports a nominal
rate with no wire behind it, and a loopback rxe runs faster than it.
"""

from __future__ import annotations

from pathlib import Path

from fabricbench.transports.link_payload import infiniband_MBps, roce_MBps

# enum ibv_port_speed (active_speed; from XDR on, active_speed_ex): one lane's name, signalling rate in Gb/s and
# the share of it that is data: 8b/10b encoding up to QDR, 64b/66b from FDR10 on.
LANE_SPEEDS = {
    1: ("SDR", 2.5, 8 / 10),
    2: ("DDR", 5.0, 8 / 10),
    4: ("QDR", 10.0, 8 / 10),
    8: ("FDR10", 10.3125, 64 / 66),
    16: ("FDR", 14.0625, 64 / 66),
    32: ("EDR", 25.78125, 64 / 66),
    64: ("HDR", 53.125, 64 / 66),
    128: ("NDR", 106.25, 64 / 66),
    256: ("XDR", 212.5, 64 / 66),
}
# ibv_devinfo's rate per lane of each speed, in Gb/s. A RoCE or iWARP port's Ethernet speed is reported as the
# nearest of these times a width (10GbE as 1X QDR, 40GbE as 4X QDR, 100GbE as 4X EDR), and it is that Ethernet
# speed, not QDR's 8 Gb/s of data per lane, that the wire carries.
NOMINAL_LANE_GBPS = {1: 2.5, 2: 5.0, 4: 10.0, 8: 10.0, 16: 14.0, 32: 25.0, 64: 50.0, 128: 100.0, 256: 200.0}
LANES = {1: 1, 2: 4, 4: 8, 8: 12, 16: 2}  # enum ibv_port_width (active_width): lanes
SOFTWARE_NAMES = ("rxe", "siw")  # SoftRoCE and soft-iWARP, as `rdma link add NAME type rxe|siw` names them
SYSFS = "/sys"


def port_data_Gbps(active_speed: int, active_width: int, *, ethernet: bool) -> float | None:
    """The data rate of one direction of an RDMA port, Gb/s, before packet headers; None for a speed or width this
    table does not know.

    ``active_speed``: ibv_port_attr's active_speed_ex where it is set (XDR and later), else active_speed;
    ``ethernet``: the port's link layer is Ethernet (RoCE, iWARP), whose speeds are reported in InfiniBand terms
    and are the MAC's rate. InfiniBand: each lane's signalling rate times its encoding's share of data, times the
    lanes.
    """
    lanes = LANES.get(active_width)
    if lanes is None or active_speed not in LANE_SPEEDS:
        return None
    _, signalling_gbps, data_share = LANE_SPEEDS[active_speed]
    return (NOMINAL_LANE_GBPS[active_speed] if ethernet else signalling_gbps * data_share) * lanes


def link_rate_MBps(active_speed: int, active_width: int, mtu: int, *, ethernet: bool) -> float | None:
    """The RDMA payload one direction of a port carries in packets of ``mtu`` bytes (the path MTU), MB/s (10^6
    B/s): link_payload's InfiniBand or RoCE formula; None where the rate or the MTU is unknown."""
    data = port_data_Gbps(active_speed, active_width, ethernet=ethernet)
    if data is None or mtu < 1:
        return None
    return roce_MBps(data, mtu) if ethernet else infiniband_MBps(data, mtu)


def port_label(device: str, port: int, active_speed: int, active_width: int) -> str:
    """How a refused figure's note names the port: ``mlx5_0 port 1, 4X HDR``."""
    name = LANE_SPEEDS.get(active_speed, (f"speed {active_speed}",))[0]
    lanes = LANES.get(active_width)
    return f"{device} port {port}, {f'{lanes}X' if lanes else f'width {active_width}'} {name}"


def software_device(name: str, sysfs: str | Path = SYSFS) -> bool:
    """Whether RDMA device NAME has no hardware behind it (rxe, siw), from sysfs under ``sysfs``.

    Software: rxe's own ``parent`` attribute (the netdev it runs over) is there; or no ``device`` stands behind
    the class device, or a virtual one (siw over lo or a veth); or the name is rxe's or siw's. A device sysfs
    does not show is taken for software, so that its rate is not trusted.
    """
    base = Path(sysfs) / "class" / "infiniband" / name
    if name.startswith(SOFTWARE_NAMES) or (base / "parent").exists():
        return True
    device = base / "device"
    return not device.exists() or "virtual" in device.resolve().parts

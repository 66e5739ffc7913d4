"""The link under one named device, for the transports that learn a device's name rather than open it themselves:
UCX's lanes (``ucx/transport.py``) and an MPI library told which NIC to take (``mpi/transport.py``).

A netdev carries TCP payload by link_payload's formula (its NIC's speed, or a root tbf on it; segments of its MTU
less the IPv4, TCP and timestamp headers); an RDMA device's port, by its sysfs ``rate`` (the data rate after
encoding, before packet headers). A figure from here is a reference (a share of the link), never a bound: the
library's own headers are not taken off, and it may move bytes another way (shared memory, a second lane).
"""

from __future__ import annotations

from pathlib import Path

from fabricbench.transports.link_payload import tcp_packet_B
from fabricbench.transports.tcp.link import NET_CLASS, nic_rate_Mbps, payload_rate, shaper_on

RDMA_CLASS = "/sys/class/infiniband"


def device_link(
    device: str, net_class: str | Path = NET_CLASS, rdma_class: str | Path = RDMA_CLASS, shaped=shaper_on
) -> tuple[float | None, str]:
    """(MB/s, label) of the link under ``device``: a netdev ("veth0") or an RDMA device's port ("mlx5_0:1");
    (None, "") for anything else (a virtual netdev without a speed or shaper, a name sysfs does not hold)."""
    netdev = Path(net_class) / device
    try:
        if netdev.is_dir():
            mtu = int((netdev / "mtu").read_text())
            found = payload_rate(device, nic_rate_Mbps(device, net_class), shaped(device), mtu - tcp_packet_B(0), True)
            return found[:2]
        name, _, port = device.partition(":")
        if port.isdigit():  # an RDMA device's port: "100 Gb/sec (4X EDR)"
            said = (Path(rdma_class) / name / "ports" / port / "rate").read_text().split()
            return float(said[0]) * 125, f"{device} {' '.join(said)}"
    except (OSError, ValueError, IndexError):
        pass
    return None, ""

"""What one direction of a link carries of a benchmark's payload: one formula per link kind, pure functions.

A link reports a signalling rate (PCIe's GT/s, InfiniBand's lane rate) or a MAC rate (Ethernet's Mb/s); what a
benchmark's messages can move over it is less by the line encoding and by every packet's headers. Each function
returns that payload limit in MB/s (10^6 B/s), with full-sized packets back to back: so 100 % of it is reachable in
principle, and a figure above it did not cross the link (a rate the hardware reports makes it a refusal:
``rows.refuse_impossible``). The same formulas, with their sources, are in docs/checks/link.md.
"""

from __future__ import annotations

# Per frame on an Ethernet wire beyond its IP packet: header 14, FCS 4, preamble and start delimiter 8, and the
# inter-frame gap 12 (IEEE 802.3). The reported speed (10000 Mb/s) is the MAC's, after 64b/66b encoding.
ETHERNET_WIRE_B = 14 + 4 + 8 + 12
# What a Linux qdisc (tbf) counts of a frame beyond its IP packet: the 14-byte header only, plus any ``overhead``
# it was given (tc-tbf's ``overhead``).
ETHERNET_HEADER_B = 14
IP_B = {4: 20, 6: 40}
TCP_B = 20
TCP_TIMESTAMPS_B = 12  # the timestamp option, aligned, on every segment where it was negotiated
# InfiniBand per packet: LRH 8, BTH 12, ICRC 4, VCRC 2 (no GRH within a subnet); the lane rate is taken after
# its encoding (8b/10b to QDR, 64b/66b from FDR on: verbs/link_rate.py).
INFINIBAND_B = 8 + 12 + 4 + 2
# RoCE v2 over IPv4 per packet: the Ethernet wire's 38, IPv4 20, UDP 8, BTH 12, ICRC 4. RoCE v1 (GRH 40 instead of
# IP and UDP) and IPv6 carry more, so this is the highest a RoCE port can carry.
ROCE_B = ETHERNET_WIRE_B + IP_B[4] + 8 + 12 + 4
# PCIe per generation: GT/s per lane and the share of the line that is data (8b/10b, 128b/130b; from 6.0 on, FLIT
# mode's 256-byte flit holds 236 bytes of TLPs beside its DLP, CRC and FEC bytes).
PCIE_LANE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130)}
PCIE_LANE[6] = (64.0, 236 / 256)
# PCIe per write TLP up to 5.0: framing and sequence number (STP 1 + sequence 2 + END 1 to 2.0; the 4-byte STP
# token with the sequence number from 3.0), a 4-DW header (64-bit addresses) and the LCRC: 24 bytes either way.
# In FLIT mode (6.0) a TLP is its 16-byte header: the flit's own bytes are in PCIE_LANE's share.
PCIE_TLP_B = {**dict.fromkeys(range(1, 6), 24), 6: 16}
PCIE_MAX_PAYLOAD_B = 256  # the Max_Payload_Size GPUs and their root ports usually settle on, when none is read
# NVLink's published data rate per link and direction in GB/s (10^9 B/s), by generation; packet headers are not
# taken off, so the figure is a bound, not a reachable 100 %.
NVLINK_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}


def tcp_packet_B(mss: int, *, ip_version: int = 4, timestamps: bool = True) -> int:
    """The IP packet that carries one full TCP segment of ``mss`` payload bytes (TCP_MAXSEG, options excluded)."""
    return mss + IP_B[ip_version] + TCP_B + (TCP_TIMESTAMPS_B if timestamps else 0)


def tcp_over_ethernet_MBps(mac_Mbps: float, mss: int, *, ip_version: int = 4, timestamps: bool = True) -> float:
    """TCP payload over an Ethernet port of ``mac_Mbps`` (sysfs ``speed``): mac × mss / (IP packet + 38)."""
    packet = tcp_packet_B(mss, ip_version=ip_version, timestamps=timestamps)
    return mac_Mbps / 8 * mss / (packet + ETHERNET_WIRE_B)


def tcp_through_shaper_MBps(
    rate_Bps: float, mss: int, *, overhead: int = 0, ip_version: int = 4, timestamps: bool = True
) -> float:
    """TCP payload through a token-bucket shaper of ``rate_Bps`` (tc's bytes/s), which counts each frame's IP
    packet, its 14-byte header and its ``overhead``: rate × mss / (IP packet + 14 + overhead). 100 Mbit/s with a
    1448-byte MSS: 12.5e6 × 1448 / 1514 B/s."""
    packet = tcp_packet_B(mss, ip_version=ip_version, timestamps=timestamps)
    return rate_Bps / 1e6 * mss / (packet + ETHERNET_HEADER_B + overhead)


def infiniband_MBps(data_Gbps: float, mtu: int) -> float:
    """RDMA payload over an InfiniBand port whose lanes carry ``data_Gbps`` after encoding, in packets of ``mtu``
    bytes (the path MTU): data × mtu / (mtu + 26)."""
    return data_Gbps * 1e3 / 8 * mtu / (mtu + INFINIBAND_B)


def roce_MBps(ethernet_Gbps: float, mtu: int) -> float:
    """RDMA payload over a RoCE port of ``ethernet_Gbps`` (its Ethernet MAC rate), in packets of ``mtu`` bytes (the
    path MTU, 1024 on a 1500-byte Ethernet MTU): ethernet × mtu / (mtu + 82)."""
    return ethernet_Gbps * 1e3 / 8 * mtu / (mtu + ROCE_B)


def pcie_MBps(generation: int | None, width: int, max_payload: int = PCIE_MAX_PAYLOAD_B) -> float | None:
    """DMA write payload over a PCIe link: GT/s × encoding × lanes / 8 × payload / (payload + TLP overhead);
    None for a generation this table does not know."""
    if generation not in PCIE_LANE or width < 1:
        return None
    gts, data_share = PCIE_LANE[generation]
    return gts * 1e3 * data_share * width / 8 * max_payload / (max_payload + PCIE_TLP_B[generation])


def pcie_generation(gts: float) -> int | None:
    """The generation whose lane rate is ``gts`` (sysfs current_link_speed: "16.0 GT/s PCIe"), or None."""
    return next((gen for gen, (rate, _) in PCIE_LANE.items() if abs(rate - gts) < 0.01), None)


def device_memory_copy_MBps(clock_kHz: float, bus_bits: int) -> float:
    """Bytes one device-to-device copy moves, MB/s: the memory's rate (2 transfers a clock on DDR and HBM, over
    ``bus_bits``: what CUDA's memoryClockRate and memoryBusWidth report) halved, as each byte copied is read and
    written once."""
    return 2 * clock_kHz * 1e3 * bus_bits / 8 / 1e6 / 2


def nvlink_MBps(generation: int, links: int) -> float | None:
    """One direction of ``links`` NVLinks of a generation between two GPUs, MB/s; None for one this table does
    not know."""
    rate = NVLINK_LINK_GBPS.get(generation)
    return rate * 1e3 * links if rate and links > 0 else None

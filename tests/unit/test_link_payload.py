"""The payload formula of each link kind (transports.link_payload), against published and measured figures."""

from __future__ import annotations

import pytest

from fabricbench.transports import link_payload as lp


def test_tcp_through_a_100mbit_tbf_is_the_payload_of_its_1514_byte_frames():
    # The figure tests/test_netns.py measures: 95.6 Mbit/s of payload through tbf rate 100mbit, MTU 1500.
    assert lp.tcp_through_shaper_MBps(12.5e6, 1448) * 8 == pytest.approx(100 * 1448 / 1514)
    assert lp.tcp_packet_B(1448) == 1500 and lp.tcp_packet_B(1460, timestamps=False) == 1500


def test_tcp_over_10gbe_is_the_well_known_9_4_gbit():
    # 10 Gb/s × 1448 / 1538: the 9.41 Gb/s iperf3 reads between two 10GbE hosts with timestamps.
    assert lp.tcp_over_ethernet_MBps(10_000, 1448) * 8 / 1e3 == pytest.approx(9.415, abs=1e-3)
    # Jumbo frames: 8948-byte segments in 9000-byte packets.
    assert lp.tcp_over_ethernet_MBps(10_000, 8948) == pytest.approx(1250 * 8948 / 9038)
    assert lp.tcp_over_ethernet_MBps(10_000, 1428, ip_version=6) == pytest.approx(1250 * 1428 / 1538)


def test_rdma_packets_carry_their_mtu_less_the_headers():
    assert lp.infiniband_MBps(100.0, 4096) == pytest.approx(12500 * 4096 / 4122)  # 4X EDR: 12 421 MB/s
    assert lp.roce_MBps(100.0, 4096) == pytest.approx(12500 * 4096 / 4178)
    assert lp.roce_MBps(10.0, 1024) < lp.roce_MBps(10.0, 4096) < 1250


@pytest.mark.parametrize(
    ("generation", "width", "GBps"),
    [
        (3, 16, 8 * 128 / 130 * 2 * 256 / 280),  # 15.75 GB/s of line, 14.4 GB/s of payload
        (4, 16, 16 * 128 / 130 * 2 * 256 / 280),  # 28.8 GB/s: H2D copies on Gen4 x16 read 25-27
        (5, 16, 32 * 128 / 130 * 2 * 256 / 280),  # 57.6 GB/s
        (2, 8, 5 * 0.8 * 1 * 256 / 280),  # 8b/10b
        (6, 16, 64 * 236 / 256 * 2 * 256 / 272),  # FLIT mode: 16-byte headers, the flit's own overhead
    ],
)
def test_pcie_carries_its_lanes_data_less_each_tlps_framing(generation, width, GBps):
    assert lp.pcie_MBps(generation, width) / 1e3 == pytest.approx(GBps)


def test_pcie_reads_its_generation_from_the_lane_rate_and_refuses_the_unknown():
    assert lp.pcie_generation(16.0) == 4 and lp.pcie_generation(2.5) == 1 and lp.pcie_generation(3.0) is None
    assert lp.pcie_MBps(7, 16) is None and lp.pcie_MBps(4, 0) is None
    assert lp.pcie_MBps(4, 16, 512) > lp.pcie_MBps(4, 16)  # a larger Max_Payload_Size wastes less on headers


def test_a_device_to_device_copy_reads_and_writes_each_byte():
    # H100 SXM's HBM3 as CUDA reports it: 2619 MHz, 5120 bits: 3.35 TB/s of memory, 1.68 TB/s of copy.
    assert lp.device_memory_copy_MBps(2_619_000, 5120) / 1e6 == pytest.approx(3.352 / 2, rel=1e-3)


def test_nvlink_is_its_links_published_rate():
    assert lp.nvlink_MBps(4, 18) == 450_000.0  # H100: 450 GB/s each way
    assert lp.nvlink_MBps(5, 18) == 900_000.0
    assert lp.nvlink_MBps(9, 4) is None and lp.nvlink_MBps(4, 0) is None

"""``--format nccl``'s pure parts: the device lines of a GPU run, from what the ranks reported."""

from __future__ import annotations

from fabricbench.report.nccl import device_lines


def test_device_lines_follow_nccl_tests_printf():
    ranks = [{"pid": 4242, "host": "gpu01"}, {"pid": 4243, "host": "gpu01"}]
    gpus = [
        {"index": 0, "bus_id": "00000000:3B:00.0", "name": "NVIDIA H100 80GB HBM3"},
        {"index": 1, "bus_id": "00000000:5E:00.0", "name": "NVIDIA H100 80GB HBM3"},
    ]
    assert device_lines(ranks, gpus) == [
        "# Using devices",
        "#  Rank  0 Group  0 Pid   4242 on      gpu01 device  0 [0x3b] NVIDIA H100 80GB HBM3",
        "#  Rank  1 Group  0 Pid   4243 on      gpu01 device  1 [0x5e] NVIDIA H100 80GB HBM3",
    ]
    assert device_lines(ranks, []) == []  # host memory: no devices to list


def test_what_a_rank_reported_is_sanitised_and_a_non_number_is_minus_one():
    """A rank's host or GPU name holding escapes stays one line; a pid, index or bus id that is no number does not
    raise while the table is printed."""
    ranks = [{"pid": "42x", "host": "evil\x1b[2J\nhost"}]
    gpus = [{"index": "²", "bus_id": "zz", "name": "H100\r\n#  Rank 9 forged" + "x" * 500}]
    (_, line) = device_lines(ranks, gpus)
    assert "\n" not in line and "\x1b" not in line and "\r" not in line
    assert "Pid     -1 on " in line and "device -1 [0x-1]" in line and "evil\\x1b[2J\\nhost" in line
    assert len(line) < 200

"""--format osu prints OSU's layout, which OSU-scraping regexes read back exactly."""

from __future__ import annotations

import re

from support import fabricbench, read_rows

# What scripts that parse osu_latency / osu_bw output use.
OSU_TITLE = re.compile(r"^# OSU MPI[ _]?(?P<title>.+) v(?P<version>\d+\.\d+)$")
OSU_LINE = re.compile(r"^(?P<size>\d+)\s+(?P<value>\d+\.\d{2})$")


def _printed(value: str, exact: float) -> bool:
    """The printed two decimals are the table's value rounded (the CSV keeps 9 digits)."""
    return abs(float(value) - exact) <= 0.005 + 1e-9


OSU_COLLECTIVE = re.compile(r"^(\d+)\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+)$")


def _blocks(text: str) -> dict[str, list[str]]:
    blocks, title = {}, None
    for line in text.splitlines():
        match = OSU_TITLE.match(line)
        if match:
            title = match["title"]
            blocks[title] = []
        elif title and not line.startswith("#"):
            blocks[title].append(line)
    return blocks


def test_osu_text_round_trips(out):
    result = fabricbench(
        "run", "-k", "latency,bw,allreduce", "-m", "0:1K", "-i", "20", "-x", "2", "--format", "osu", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    rows, _ = read_rows(out)
    assert "# Size       Avg Latency(us)" in result.stdout
    assert "# Size      Bandwidth (MB/s)" in result.stdout
    blocks = _blocks(result.stdout)
    assert set(blocks) == {"Latency Test", "Bandwidth Test", "Allreduce Latency Test"}

    latency = rows[rows.kernel == "latency"].set_index("size_B")
    parsed = [OSU_LINE.match(line) for line in blocks["Latency Test"]]
    assert all(parsed) and len(parsed) == len(latency)
    for match in parsed:
        assert _printed(match["value"], latency.lat_mean_us[int(match["size"])])

    bw = rows[rows.kernel == "bw"].set_index("size_B")
    for line in blocks["Bandwidth Test"]:
        match = OSU_LINE.match(line)
        assert match and _printed(match["value"], bw.bw_MBps[int(match["size"])])

    allreduce = rows[(rows.kernel == "allreduce") & (rows.status == "ok")].set_index("size_B")
    data = [line for line in blocks["Allreduce Latency Test"] if not line.startswith("#")]
    assert len(data) == len(allreduce)
    for line in data:
        size, avg, low, high, iters = OSU_COLLECTIVE.match(line).groups()
        row = allreduce.loc[int(size)]
        assert _printed(avg, row.lat_rank_avg_us) and _printed(low, row.lat_rank_min_us)
        assert _printed(high, row.lat_rank_max_us) and int(iters) == 20

"""--format osu prints OSU's layout, which OSU-scraping regexes read back exactly."""

from __future__ import annotations

import re

from conftest import fabricbench, read_rows

# What scripts that parse osu_latency / osu_bw output use.
OSU_TITLE = re.compile(r"^# OSU MPI[ _]?(?P<title>.+) v(?P<version>\d+\.\d+)$")
OSU_LINE = re.compile(r"^(?P<size>\d+)\s+(?P<value>\d+\.\d{2})$")
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
        assert float(match["value"]) == round(latency.lat_mean_us[int(match["size"])], 2)

    bw = rows[rows.kernel == "bw"].set_index("size_B")
    for line in blocks["Bandwidth Test"]:
        match = OSU_LINE.match(line)
        assert match and float(match["value"]) == round(bw.bw_MBps[int(match["size"])], 2)

    allreduce = rows[(rows.kernel == "allreduce") & (rows.status == "ok")].set_index("size_B")
    data = [line for line in blocks["Allreduce Latency Test"] if not line.startswith("#")]
    assert len(data) == len(allreduce)
    for line in data:
        size, avg, low, high, iters = OSU_COLLECTIVE.match(line).groups()
        row = allreduce.loc[int(size)]
        assert (float(avg), float(low), float(high), int(iters)) == (
            round(row.lat_rank_avg_us, 2),
            round(row.lat_rank_min_us, 2),
            round(row.lat_rank_max_us, 2),
            20,
        )

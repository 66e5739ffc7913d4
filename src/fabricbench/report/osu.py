"""OSU Micro-Benchmarks' text layout, for scripts that already scrape it.

Headers and columns follow OSU 7.4: size ``%-10d``, values ``%20.2f``.
One comment line before OSU's title says that fabricbench made the table;
every other line is as OSU prints it. A transport that is not MPI keeps the
layout but names itself in the title.
"""

from __future__ import annotations

from fabricbench import __version__
from fabricbench.kernels import get_kernel
from fabricbench.transports import transport_class

OSU_VERSION = "v7.4"


def header(transport: str, kernel_name: str, window: int, pairs: int) -> str:
    kernel = get_kernel(kernel_name)
    cls = transport_class(transport)
    library = cls.osu_name or f"fabricbench {transport}"
    lines = [
        f"# fabricbench {__version__} made this table, in the text layout of OSU Micro-Benchmarks {OSU_VERSION}",
        f"# OSU {kernel.osu_title.format(lib=library)} {OSU_VERSION}",
        *cls.osu_header_lines(kernel),
    ]
    if _message_rate(kernel):
        lines.append(f"# [ pairs: {pairs} ] [ window size: {window} ]")
    if kernel.osu_datatype:
        lines.append(f"# Datatype: {kernel.osu_datatype}.")
    lines.append(column_header(kernel_name))
    return "\n".join(lines)


def _message_rate(kernel) -> bool:
    """osu_mbw_mr's layout: windows on every pair at once, reported as MB/s and messages/s."""
    return kernel.windowed and kernel.pattern == "pairs"


def column_header(kernel_name: str) -> str:
    kernel = get_kernel(kernel_name)
    if _message_rate(kernel):
        return "# Size                  MB/s        Messages/s"
    if kernel.windowed:
        return "# Size      Bandwidth (MB/s)"
    if kernel.collective:
        return "# Size       Avg Latency(us)     Min Latency(us)     Max Latency(us)  Iterations"
    if kernel.sample == "op":  # one one-sided operation, as osu_put_latency and osu_get_latency
        return "# Size          Latency (us)"
    return "# Size       Avg Latency(us)"


def line(row: dict) -> str:
    if not str(row.get("status", "")).startswith("ok"):
        return f"# {row['status']}"
    kernel = get_kernel(row["kernel"])
    size = f"{row['size_B']:<10d}"
    if _message_rate(kernel):
        return f"{size}{row['bw_MBps']:20.2f}{row['msgrate_per_s']:20.2f}"
    if kernel.windowed:
        return f"{size}{row['bw_MBps']:20.2f}"
    if kernel.collective:
        return (
            f"{size}{row['lat_rank_avg_us']:20.2f}{row['lat_rank_min_us']:20.2f}"
            f"{row['lat_rank_max_us']:20.2f}{row['iterations']:12d}"
        )
    return f"{size}{row['lat_mean_us']:20.2f}"

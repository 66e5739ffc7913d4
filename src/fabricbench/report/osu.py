"""OSU Micro-Benchmarks' text layout, for scripts that already scrape it.

Headers and columns follow OSU 7.4: size ``%-10d``, values ``%20.2f``.
Non-MPI transports keep the layout but name themselves in the title.
"""

from __future__ import annotations

from fabricbench.kernels import get_kernel

OSU_VERSION = "v7.4"
FLOAT_TYPES = {"allreduce", "reduce_scatter"}


def header(transport: str, kernel_name: str, window: int, pairs: int) -> str:
    kernel = get_kernel(kernel_name)
    who = "MPI" if transport in ("mpi", "mpi-rma") else f"fabricbench {transport}"
    lines = [f"# OSU {who}{'' if kernel.osu_title.startswith('_') else ' '}{kernel.osu_title} {OSU_VERSION}"]
    if kernel.name in ("put", "get", "put-bw", "get-bw"):
        lines += ["# Window creation: MPI_Win_allocate", "# Synchronization: MPI_Win_flush"]
    if kernel.name == "msgrate":
        lines.append(f"# [ pairs: {pairs} ] [ window size: {window} ]")
    if kernel.name != "barrier":
        lines.append(f"# Datatype: {'MPI_FLOAT' if kernel.name in FLOAT_TYPES else 'MPI_CHAR'}.")
    lines.append(column_header(kernel_name))
    return "\n".join(lines)


def column_header(kernel_name: str) -> str:
    kernel = get_kernel(kernel_name)
    if kernel.name == "msgrate":
        return "# Size                  MB/s        Messages/s"
    if kernel.windowed:
        return "# Size      Bandwidth (MB/s)"
    if kernel.name in ("put", "get"):
        return "# Size          Latency (us)"
    if kernel.collective:
        return "# Size       Avg Latency(us)     Min Latency(us)     Max Latency(us)  Iterations"
    return "# Size       Avg Latency(us)"


def line(row: dict) -> str:
    if not str(row.get("status", "")).startswith("ok"):
        return f"# {row['status']}"
    kernel = get_kernel(row["kernel"])
    size = f"{row['size_B']:<10d}"
    if kernel.name == "msgrate":
        return f"{size}{row['bw_MBps']:20.2f}{row['msgrate_per_s']:20.2f}"
    if kernel.windowed:
        return f"{size}{row['bw_MBps']:20.2f}"
    if kernel.collective:
        return (
            f"{size}{row['lat_rank_avg_us']:20.2f}{row['lat_rank_min_us']:20.2f}"
            f"{row['lat_rank_max_us']:20.2f}{row['iterations']:12d}"
        )
    return f"{size}{row['lat_mean_us']:20.2f}"

"""The tidy table's layout: its columns and their kinds, its schema version, and the files a run folder holds.

The writers (results.py) and the reader's check (table_cells.py) both follow it.
"""

from __future__ import annotations

# Units are in the names: µs, MB/s with MB = 10^6 bytes, GB/s with GB = 10^9 bytes.
COLUMNS = [
    "run_id",
    "label",
    "repeat",
    "transport",
    "kernel",
    "method",
    "buffer",
    "placement",
    "size_B",
    "ranks",
    "pairs",
    "schedule",
    "src_rank",
    "dst_rank",
    "src_host",
    "dst_host",
    "tier",
    "hops",
    "src_gpu",
    "dst_gpu",
    "canary",
    "congestor",
    "canaries",
    "congestors",
    "tier_pairs",
    "window",
    "iterations",
    "warmup",
    "sample",
    "lat_min_us",
    "lat_p50_us",
    "lat_mean_us",
    "lat_p90_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_max_us",
    "lat_stdev_us",
    "lat_rank_min_us",
    "lat_rank_avg_us",
    "lat_rank_max_us",
    "bw_MBps",
    "bw_peak_MBps",
    "msgrate_per_s",
    "bw_win_p50_MBps",
    "bw_win_p90_MBps",
    "bw_win_p99_MBps",
    "link",
    "link_MBps",
    "link_pct",
    "algbw_GBps",
    "busbw_GBps",
    "bw_p1_MBps",
    "bw_p50_MBps",
    "bw_p99_MBps",
    "aggregate_MBps",
    "rank_spread",
    "congestor_MBps",
    "cif_mean",
    "cif_p99",
    "compute_us",
    "pure_comm_us",
    "pure_comm_min_us",
    "pure_comm_max_us",
    "init_us",
    "test_us",
    "wait_us",
    "overlap_pct",
    "topology_us",
    "validation",
    "wrong_elements",
    "status",
    "note",
]
UNIT_SUFFIXES = ("_us", "_MBps", "_GBps", "_per_s", "_pct")  # a measured column's name ends in its unit (_pct: %)
# Ratios without a unit: the congestion impact factors (above 1 is worse) and the slowest canary rank's mean over
# the fastest's.
RATIOS = {"cif_mean", "cif_p99", "rank_spread"}
NUMERIC = {c for c in COLUMNS if c.endswith(UNIT_SUFFIXES)} | RATIOS
INTEGER = {"size_B", "ranks", "pairs", "window", "iterations", "warmup", "repeat"}
INTEGER |= {"src_rank", "dst_rank", "hops", "src_gpu", "dst_gpu", "canaries", "congestors", "tier_pairs"}
INTEGER |= {"wrong_elements"}
# The table's and its metadata's layout; compare migrates older ones (analysis/load.py).
# 1: every table written before schema_version existed; 2: metadata says os_release, not kernel;
# 3: rows carry their repeat index (run --repeat) and, for a pair of an all-pairs kernel, its schedule, ranks and hosts;
# 4: a GPU pair's row (cuda-copy peer) carries its source and destination GPU;
# 5: a congestion row carries its canary test and congestor pattern, their rank counts, the canary's bandwidth
#    percentiles and per-rank spread, the congestors' throughput and the congestion impact factors;
# 6: an all-pairs row carries its pair's tier in the topology (measure.topology.TIERS) and the switch-to-switch
#    links between its hosts (hops), both blank without a topology or where it has no route.
# 7: a bisection row carries its tier (or ``all``), that tier's pairs over every matching, its per-pair rate's 1st
#    percentile and its aggregate over both directions.
# 8: a windowed row of one pair carries the percentiles of its windows' bandwidths (bw_win_p50/p90/p99_MBps, each
#    window's bytes over its time, smallest first: OSU's -z tail bandwidths).
# 9: a non-blocking collective's row (--method nonblocking, OSU's osu_i*) carries, beside its overall time in the
#    latency columns, the dummy compute, the MPI_Test calls within it, the start and the wait (means over ranks),
#    the pure communication (its mean, least and most over ranks) and the overlap in %.
# 10: a neighbourhood collective's row carries the time MPI_Dist_graph_create_adjacent took to make its graph
#    communicator (the ranks' mean: OSU's "Time took to create topology graph").
# 11: a collective's row says whether it was measured out of place or in place (placement; --placement) and, where
#    it was checked, how many elements were wrong over every rank (wrong_elements, nccl-tests' #wrong).
# 12: a row whose path is known carries that link (link), the payload one direction of it carries (link_MBps,
#    transports.link_payload's formula per link kind) and, with a bandwidth of one pair, its share of it (link_pct).
SCHEMA_VERSION = 12
CSV_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
# Where a run spools the rows kept in Parquet only (measure.results.CSV_SIZE_ROWS) as it measures them: whole Parquet
# files, made into results.parquet with the CSV's rows when the run ends; a run that did not end leaves them.
PARTS_NAME = "results.parts"
PARQUET_ONLY_ROWS = "parquet_only_rows"  # in metadata.json: how many of the run's rows results.csv does not hold
META_NAME = "metadata.json"
# The columns that name a row's two ends where a size has a row per pair of ranks or GPUs: the console shows them
# first, with these headers and widths, in a table of a pattern whose rows carry them.
ROW_ENDS = {"src_rank": ("src", 5), "dst_rank": ("dst", 5), "src_gpu": ("src GPU", 8), "dst_gpu": ("dst GPU", 8)}
MEASURED = "ok"  # a measured row's status; every other status says why its size was not measured
PREVIOUS_RUNS = "previous_runs"  # in metadata.json: the metadata of the earlier runs of an --append folder
# Columns an older table may lack, with the value a row without them means: schema 1 may lack the first six,
# schema 2 lacks the repeat index (one run: repeat 0) and the all-pairs columns (no pair rows then), schema 3 the
# GPU-pair columns (no GPU pair rows then), schema 4 the congestion columns (no congestion rows then), schema 5 the
# tier and hops of a pair (no topology then), schema 6 the bisection columns (no bisection rows then), schema 8 the
# non-blocking figures (no non-blocking rows then).
OPTIONAL = {
    "run_id": "",
    "label": "",
    "buffer": "host",
    "method": "",
    "validation": "",
    "sample": "",
    "repeat": 0,
    "schedule": "",
    "src_rank": "",
    "dst_rank": "",
    "src_host": "",
    "dst_host": "",
    "tier": "",
    "hops": "",
    "src_gpu": "",
    "dst_gpu": "",
    "canary": "",
    "congestor": "",
    "canaries": "",
    "congestors": "",
    "tier_pairs": "",
    "placement": "",  # schema 10 and before: not recorded (out of place, but nccl's --in-place, said in method)
    "wrong_elements": "",
    "link": "",  # schema 11 and before: not recorded
}
# Measured columns an older table may lack (schema 4 and before: the congestion figures; schema 6 and before: the
# bisection figures; schema 7 and before: the window bandwidth percentiles): NaN in its rows.
OPTIONAL_NUMERIC = ("bw_p50_MBps", "bw_p99_MBps", "rank_spread", "congestor_MBps", "cif_mean", "cif_p99")
OPTIONAL_NUMERIC += ("bw_p1_MBps", "aggregate_MBps")
OPTIONAL_NUMERIC += ("bw_win_p50_MBps", "bw_win_p90_MBps", "bw_win_p99_MBps")  # schema 7 and before: NaN
# Schema 8 and before: the non-blocking collectives' figures (NONBLOCKING_COLUMNS).
NONBLOCKING_COLUMNS = ("compute_us", "pure_comm_us", "pure_comm_min_us", "pure_comm_max_us", "init_us", "test_us")
NONBLOCKING_COLUMNS += ("wait_us", "overlap_pct")
OPTIONAL_NUMERIC += NONBLOCKING_COLUMNS
OPTIONAL_NUMERIC += ("topology_us",)  # schema 9 and before: no neighbourhood rows
OPTIONAL_NUMERIC += ("link_MBps", "link_pct")  # schema 11 and before: no link recorded


def is_measured(status: object) -> bool:
    """Whether a row's status says it was measured (``ok``), not why it was not (``unsupported: ...``)."""
    return str(status).startswith(MEASURED)

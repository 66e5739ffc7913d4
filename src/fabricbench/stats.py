"""Per-iteration samples to statistics. Pure functions, no network.

Percentiles use the nearest-rank rule osu_latency uses for ``-z``:
``sorted[round(N * p / 100) - 1]``, so the figures line up with OSU's.
"""

from __future__ import annotations

import numpy as np

PERCENTILES = (50.0, 90.0, 99.0, 99.9)
UNSTABLE_CV = 0.10  # flagged when the block medians' stdev is above 10 % of their median (pyperf warns at 10 %)


def nearest_rank(sorted_values: np.ndarray, percent: float) -> float:
    count = len(sorted_values)
    index = min(max(int(round(count * percent / 100.0)) - 1, 0), count - 1)
    return float(sorted_values[index])


def latency_stats(samples_ns: np.ndarray, divisor: int = 1) -> dict[str, float]:
    """min, p50, mean, p90, p99, p99.9, max and stdev in µs of one rank's samples.

    ``divisor`` turns a round trip into a one-way latency (2 for ping-pong).
    """
    if len(samples_ns) == 0:
        return {}
    values = np.sort(samples_ns.astype(np.float64)) / (1000.0 * divisor)
    p50, p90, p99, p999 = (nearest_rank(values, p) for p in PERCENTILES)
    return {
        "lat_min_us": float(values[0]),
        "lat_p50_us": p50,
        "lat_mean_us": float(values.mean()),
        "lat_p90_us": p90,
        "lat_p99_us": p99,
        "lat_p999_us": p999,
        "lat_max_us": float(values[-1]),
        "lat_stdev_us": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
    }


def across_ranks(means_us: np.ndarray) -> dict[str, float]:
    """OSU's Min/Avg/Max columns: taken over the ranks' means, not over iterations."""
    if len(means_us) == 0:
        return {}
    return {
        "lat_rank_min_us": float(means_us.min()),
        "lat_rank_avg_us": float(means_us.mean()),
        "lat_rank_max_us": float(means_us.max()),
    }


def bandwidth_MBps(nbytes, seconds):
    """MB/s with MB = 10^6 bytes, as OSU and IMB report (scalars or arrays)."""
    return np.asarray(nbytes, dtype=np.float64) / np.asarray(seconds, dtype=np.float64) / 1e6


def stability_note(samples_ns: np.ndarray) -> str:
    """Say so when the result drifts during the run, as pyperf warns of unstable runs.

    Single iterations are always spiky, so their spread says little. The
    samples are cut into 5 to 20 consecutive blocks of at least 10; when the
    standard deviation of the block medians is more than UNSTABLE_CV of their
    median, the machine or the fabric changed under the measurement.
    """
    blocks = min(20, len(samples_ns) // 10)
    if blocks < 5:
        return ""
    usable = samples_ns[: blocks * (len(samples_ns) // blocks)].astype(np.float64)
    medians = np.median(usable.reshape(blocks, -1), axis=1)
    centre = float(np.median(medians))
    spread = float(medians.std(ddof=1)) / centre if centre > 0 else 0.0
    if spread > UNSTABLE_CV:
        return f"unstable: block medians vary by {100 * spread:.0f}%"
    return ""

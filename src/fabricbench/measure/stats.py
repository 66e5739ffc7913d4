"""Per-iteration samples to statistics. Pure functions, no network.

Percentiles use the nearest-rank rule osu_latency uses for ``-z``:
``sorted[round(N * p / 100) - 1]``, so the figures line up with OSU's.
"""

from __future__ import annotations

import math

from fabricbench.lazy import np

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


WINDOW_PERCENTILES = {50.0: "bw_win_p50_MBps", 90.0: "bw_win_p90_MBps", 99.0: "bw_win_p99_MBps"}


def window_bandwidths(samples_ns: np.ndarray, window_bytes: int) -> dict[str, float]:
    """OSU's -z tail bandwidths of one initiator's windows: each window's bytes over its time in MB/s, smallest
    first, by the nearest rank (so P99 is near the fastest window, as OSU sorts them)."""
    if len(samples_ns) == 0 or (samples_ns <= 0).any():
        return {}  # a window timed at 0 ns has no rate; the row's bandwidth says so
    rates = np.sort(bandwidth_MBps(window_bytes, samples_ns.astype(np.float64) / 1e9))
    return {column: nearest_rank(rates, percent) for percent, column in WINDOW_PERCENTILES.items()}


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


# Repeated runs (run --repeat, compared by ``compare``): the percentile bootstrap, in numpy. The seed is fixed so
# that the same tables always print the same intervals.
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 16
CONFIDENCE = 0.95


def _resampled_medians(values: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The median of each of ``resamples`` resamples of ``values``, drawn with replacement."""
    picks = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(values[picks], axis=1)


def _tails(confidence: float) -> tuple[float, float]:
    return (1 - confidence) / 2, (1 + confidence) / 2


def bootstrap_median(
    values, confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """(median, low, high): the median of ``values`` (NaN dropped) and its percentile-bootstrap interval.

    NaNs when nothing is left. With few values the interval is close to their range.
    """
    clean = np.asarray(values, dtype=np.float64)
    clean = clean[~np.isnan(clean)]
    if not len(clean):
        return math.nan, math.nan, math.nan
    medians = _resampled_medians(clean, np.random.default_rng(seed), resamples)
    low, high = np.quantile(medians, _tails(confidence))
    return float(np.median(clean)), float(low), float(high)


def bootstrap_ratio(
    base, other, confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """(ratio, low, high): median(other) / median(base) and the percentile-bootstrap interval of that ratio,
    each side resampled apart (two runs' repeats are not paired). NaNs without values or with a zero median."""
    base = np.asarray(base, dtype=np.float64)
    other = np.asarray(other, dtype=np.float64)
    base, other = base[~np.isnan(base)], other[~np.isnan(other)]
    if not len(base) or not len(other) or np.median(base) == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    below = _resampled_medians(base, rng, resamples)
    above = _resampled_medians(other, rng, resamples)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = above / below
    ratios = ratios[np.isfinite(ratios)]
    if not len(ratios):
        return math.nan, math.nan, math.nan
    low, high = np.quantile(ratios, _tails(confidence))
    return float(np.median(other) / np.median(base)), float(low), float(high)


def significant(low: float, high: float) -> bool:
    """A ratio differs from 1 when its whole interval lies on one side of 1."""
    return bool(low > 1 or high < 1)

"""``fabricbench model``: Hockney's T(n) = α + n/β fitted to finished runs, and allreduce projected to scale.

Each (input, transport, buffer) is one series. Its ``latency`` rows give one-way times (the p50 of
half a round trip); its ``bw`` rows give the time per message in a stream, size / bw, whose intercept
is the per-message gap of a pipelined stream rather than a latency. Each kernel is fitted on its own
by least squares on relative error, cut into segments where one line does not fit (the eager to
rendezvous switch, a cache edge, a shaper's burst), with intervals from a seeded bootstrap over the
(size, time) points of each segment. The projection takes α from the latency fit's first segment
(small messages) and β from the bw fit's last segment (the streaming rate of large messages; the
latency fit's last one when there are no bw rows).

The fitting and the formulas are pure numpy (tests/unit); pandas reads the runs and matplotlib is
imported only when the plots are drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import cycle

import numpy as np

from fabricbench.collectives import allreduce as allreduce_op
from fabricbench.errors import UsageError
from fabricbench.measure.formatting import format_size
from fabricbench.measure.kernels import Pairing, get_kernel
from fabricbench.measure.topology import CROSS_GROUP, CROSS_SWITCH, SAME_SWITCH
from fabricbench.terminal import printable

RESAMPLES = 1000  # bootstrap resamples per segment
MAX_SEGMENTS = 3  # segments per fit: enough for an eager/rendezvous switch and one cache edge
MIN_SEGMENT_SIZES = 4  # distinct sizes in a segment when a fit is cut (two parameters, two points to spare)
MIN_FIT_SIZES = 3  # distinct sizes for any fit at all
TIER_PAIRS = 10_000  # the most pairs of one tier, kernel and size a tier's fit takes (tier_rows)
# Fits better than this RMS relative error count as exact: more segments cannot be told from noise below it.
RELATIVE_ERROR_FLOOR = 1e-3
# A segment is kept when it leaves at most this share of the squared error: on 23 sizes of pure 3 % noise the
# best cut left less than a third in 0.3 % of 300 trials (a half: 3 %); a real change of regime leaves far less.
CUT_GAIN = 1 / 3
DEFAULT_RANKS = [2**k for k in range(1, 17)] + [100_000]
# Which columns are fitted: the typical figures (p50 latency, a stream's average rate), or the best ones (the
# fastest sample, the best window), which a busy or shared machine moves far less.
STATISTICS = {"typical": ("lat_p50_us", "bw_MBps"), "best": ("lat_min_us", "bw_peak_MBps")}
# The one-pair kernels Hockney's model is fitted to: a ping-pong's one-way time, and a stream's time per message.
FITTED = ("latency", "bw")
PING_PONG, STREAM = FITTED
# One-sided kernels (mpi-rma, verbs), fitted and printed where a series has them: a put or get times a completed
# one-sided operation (the write or read and its flush, about a round trip), not a one-way message, so it gives no α
# for the projection; a put or get stream's rate is a stream's, so a series without bw takes its β from it.
ONE_SIDED, ONE_SIDED_STREAMS = ("put", "get"), ("put-bw", "get-bw")
ALGORITHMS = ("ring", "recursive-doubling", "double-binary-tree")
MODEL_CSV, PROJECTION_CSV, MEASURED_CSV = "model.csv", "projection.csv", "allreduce_vs_model.csv"
CONGESTION_CSV = "congestion_projection.csv"
TIER_CSV, HIERARCHICAL_CSV = "tier_model.csv", "hierarchical_projection.csv"
FLAT_RING, HIERARCHICAL = "ring", "hierarchical"  # the two allreduces projected on a fat-tree
FIT_PNG, PROJECTION_PNG = "fit.png", "projection.png"


@dataclass(frozen=True)
class Segment:
    """One line of a piecewise Hockney fit: α in µs, β in GB/s (10⁹ B/s), each with its 95 % bootstrap interval."""

    size_min: int
    size_max: int
    sizes: int
    alpha_us: float
    alpha_lo_us: float
    alpha_hi_us: float
    beta_GBps: float
    beta_lo_GBps: float
    beta_hi_GBps: float
    rms_rel_err: float

    @property
    def n_half_B(self) -> float:
        """The size at which half of β is reached: α·β (bytes; none when α ≤ 0 or β is unbounded)."""
        if self.alpha_us <= 0 or not math.isfinite(self.beta_GBps):
            return math.nan
        return self.alpha_us * self.beta_GBps * 1e3  # µs × 10³ B/µs

    def time_us(self, size: np.ndarray | float) -> np.ndarray | float:
        return self.alpha_us + np.asarray(size, dtype=float) / (self.beta_GBps * 1e3)


def _beta_GBps(seconds_per_byte_us: float) -> float:
    """β in GB/s from the fitted slope in µs per byte; a slope of 0 or below is an unbounded rate."""
    return 1e-3 / seconds_per_byte_us if seconds_per_byte_us > 0 else math.inf


def fit_line(sizes: np.ndarray, times_us: np.ndarray) -> tuple[float, float, float]:
    """α (µs), slope (µs per byte) and the sum of squared relative residuals of T = α + slope·n.

    Least squares on relative error, (α + slope·n − T)/T: small messages weigh as much as large ones,
    so α comes from the small sizes and β from the large, as on the log-log plot people read.
    """
    scale = float(sizes.max()) or 1.0  # sizes in units of the largest keep the system well conditioned
    design = np.column_stack([1.0 / times_us, sizes / scale / times_us])
    (alpha, slope), *_ = np.linalg.lstsq(design, np.ones_like(times_us), rcond=None)
    residual = design @ np.array([alpha, slope]) - 1.0
    return float(alpha), float(slope / scale), float(residual @ residual)


def bootstrap(
    sizes: np.ndarray, times_us: np.ndarray, resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float, float, float]:
    """95 % intervals of α (µs) and of the slope (µs per byte): the points resampled with replacement.

    Resamples that hold a single distinct size fix no line and are dropped; with fewer than 2 usable
    ones the intervals are NaN.
    """
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(sizes), np.full(len(sizes), 1.0 / len(sizes)), size=resamples).astype(float)
    x = sizes / (float(sizes.max()) or 1.0)
    weight = 1.0 / times_us**2
    # The normal equations of the relative-error fit, one 2 x 2 system per resample.
    s00, s01, s11 = counts @ weight, counts @ (weight * x), counts @ (weight * x * x)
    b0, b1 = counts @ (1.0 / times_us), counts @ (x / times_us)
    det = s00 * s11 - s01 * s01
    usable = det > 1e-9 * s00 * s11
    if usable.sum() < 2:
        return math.nan, math.nan, math.nan, math.nan
    alpha = (s11 * b0 - s01 * b1)[usable] / det[usable]
    slope = (s00 * b1 - s01 * b0)[usable] / det[usable] / (float(sizes.max()) or 1.0)
    a_lo, a_hi = np.percentile(alpha, [2.5, 97.5])
    s_lo, s_hi = np.percentile(slope, [2.5, 97.5])
    return float(a_lo), float(a_hi), float(s_lo), float(s_hi)


def _groups(sizes: np.ndarray) -> list[int]:
    """Indices where each distinct size starts in sorted ``sizes``, and the end: breakpoints fall only there."""
    starts = [0] + [i for i in range(1, len(sizes)) if sizes[i] != sizes[i - 1]]
    return [*starts, len(sizes)]


def segment_bounds(
    sizes: np.ndarray,
    times_us: np.ndarray,
    max_segments: int = MAX_SEGMENTS,
    min_sizes: int = MIN_SEGMENT_SIZES,
) -> list[tuple[int, int]]:
    """Where to cut a fit: (start, end) point indices of each segment of sorted ``sizes``.

    For each count of segments the cuts with the least total squared relative error are found
    exactly (dynamic programming over the distinct sizes, at least ``min_sizes`` in a segment).
    The count kept is the one with the least error × (1/CUT_GAIN)^(m − 1): each segment beyond the
    first must leave at most CUT_GAIN of the error, on average. The best of many possible cuts
    always lowers the error a little, on noise alone too, while a real change of regime (a jump
    in α, a new slope) removes most of it.
    """
    bounds = _groups(sizes)
    k = len(bounds) - 1
    cost: dict[tuple[int, int], float] = {}

    def sse(a: int, b: int) -> float:
        if (a, b) not in cost:
            cost[a, b] = fit_line(sizes[bounds[a] : bounds[b]], times_us[bounds[a] : bounds[b]])[2]
        return cost[a, b]

    floor = len(sizes) * RELATIVE_ERROR_FLOOR**2
    # total[m][b]: least error of the first b groups in m segments; back[m][b]: where the last one starts.
    total = {1: {b: sse(0, b) for b in range(min(MIN_FIT_SIZES, k), k + 1)}}
    back: dict[int, dict[int, int]] = {1: dict.fromkeys(total[1], 0)}
    chosen, best = 1, max(total[1][k], floor)
    for m in range(2, max_segments + 1):
        total[m], back[m] = {}, {}
        for b in range(m * min_sizes, k + 1):
            options = [
                (total[m - 1][a] + sse(a, b), a)
                for a in range((m - 1) * min_sizes, b - min_sizes + 1)
                if a in total[m - 1]
            ]
            if options:
                total[m][b], back[m][b] = min(options)
        if k not in total[m]:
            break
        penalised = max(total[m][k], floor) / CUT_GAIN ** (m - 1)
        if penalised < best:
            chosen, best = m, penalised
    cuts, b = [k], k
    for level in range(chosen, 0, -1):
        b = back[level][b]
        cuts.append(b)
    cuts.reverse()
    return [(bounds[a], bounds[b]) for a, b in zip(cuts, cuts[1:], strict=False)]


def fit_hockney(sizes, times_us, resamples: int = RESAMPLES, seed: int = 0) -> list[Segment]:
    """The piecewise fit of T(n) = α + n/β to (size in bytes, time in µs) points, smallest sizes first."""
    sizes = np.asarray(sizes, dtype=float)
    times_us = np.asarray(times_us, dtype=float)
    keep = np.isfinite(sizes) & np.isfinite(times_us) & (times_us > 0) & (sizes >= 0)
    order = np.argsort(sizes[keep], kind="stable")
    sizes, times_us = sizes[keep][order], times_us[keep][order]
    if len(np.unique(sizes)) < MIN_FIT_SIZES:
        return []
    segments = []
    for start, end in segment_bounds(sizes, times_us):
        x, t = sizes[start:end], times_us[start:end]
        alpha, slope, sse = fit_line(x, t)
        a_lo, a_hi, s_lo, s_hi = bootstrap(x, t, resamples, seed)
        segments.append(
            Segment(
                size_min=int(x[0]),
                size_max=int(x[-1]),
                sizes=len(np.unique(x)),
                alpha_us=alpha,
                alpha_lo_us=a_lo,
                alpha_hi_us=a_hi,
                beta_GBps=_beta_GBps(slope),
                beta_lo_GBps=_beta_GBps(s_hi) if not math.isnan(s_hi) else math.nan,
                beta_hi_GBps=_beta_GBps(s_lo) if not math.isnan(s_lo) else math.nan,
                rms_rel_err=math.sqrt(sse / len(x)),
            )
        )
    return segments


def allreduce_time_us(algorithm: str, ranks: int, size_B: float, alpha_us: float, beta_GBps: float) -> float:
    """The time of one allreduce of ``size_B`` bytes on ``ranks`` ranks, from Hockney's α (µs) and β (GB/s).

    ring: 2(N−1)·α + 2(N−1)/N · n/β (reduce-scatter then allgather, N−1 steps each, n/N bytes a step);
    recursive-doubling: ⌈log2 N⌉·(α + n/β) (the whole vector exchanged at each of ⌈log2 N⌉ steps);
    double-binary-tree: 2⌈log2 N⌉·α + 2·n/β (NCCL's two trees, each carrying half the vector, reduced
    up and broadcast down, pipelined so the depth costs α per level and every rank sends and receives
    the vector once each way). Ideal links: no contention, no reduction cost, every hop α and β.
    """
    per_byte_us = 1.0 / (beta_GBps * 1e3)
    steps = math.ceil(math.log2(ranks))
    if algorithm == "ring":
        return 2 * (ranks - 1) * alpha_us + 2 * (ranks - 1) / ranks * size_B * per_byte_us
    if algorithm == "recursive-doubling":
        return steps * (alpha_us + size_B * per_byte_us)
    if algorithm == "double-binary-tree":
        return 2 * steps * alpha_us + 2 * size_B * per_byte_us
    raise ValueError(f"unknown algorithm {algorithm!r}")


def busbw_GBps(ranks: int, size_B: float, time_us: float) -> float:
    """nccl-tests' bus bandwidth of an allreduce: algbw (n/T) × 2(N−1)/N, in GB/s."""
    return size_B / time_us / 1e3 * 2 * (ranks - 1) / ranks


def project(alpha_us: float, beta_GBps: float, size_B: int, ranks: list[int]) -> list[dict]:
    """One row per (algorithm, ranks): the projected time in µs and the bus bandwidth in GB/s."""
    rows = []
    for algorithm in ALGORITHMS:
        for count in ranks:
            time_us = allreduce_time_us(algorithm, count, size_B, alpha_us, beta_GBps)
            rows.append(
                {
                    "algorithm": algorithm,
                    "ranks": count,
                    "size_B": size_B,
                    "time_us": time_us,
                    "busbw_GBps": busbw_GBps(count, size_B, time_us),
                }
            )
    return rows


def congested_parameters(rows: list[dict]) -> list[dict]:
    """α and β of each phase of one congestion run (isolated first, then each congestor pattern): α the canaries'
    mean one-way rr-latency (µs), β their mean rr-bw rate (GB/s, what a rank sends to its two neighbours per
    second). [] without both canary tests measured isolated; a congestor lacking either keeps the isolated one,
    said in ``from``."""
    from fabricbench.run.patterns import Congestion, kernels_of

    congested = kernels_of(Congestion)
    by = {(r.get("canary"), r.get("congestor")): r for r in rows if r.get("kernel") in congested}
    base_alpha = _positive(by.get(("rr-latency", "none"), {}).get("lat_mean_us"))
    base_beta = _positive(by.get(("rr-bw", "none"), {}).get("bw_MBps")) / 1e3
    if math.isnan(base_alpha) or math.isnan(base_beta):
        return []
    congestors = list(dict.fromkeys(c for (_, c) in by if c and c != "none"))
    out = [{"congestor": "none", "alpha_us": base_alpha, "beta_GBps": base_beta, "from": "isolated canaries"}]
    for congestor in congestors:
        alpha = _positive(by.get(("rr-latency", congestor), {}).get("lat_mean_us"))
        beta = _positive(by.get(("rr-bw", congestor), {}).get("bw_MBps")) / 1e3
        kept = [name for name, value in (("alpha", alpha), ("beta", beta)) if math.isnan(value)]
        out.append(
            {
                "congestor": congestor,
                "alpha_us": base_alpha if math.isnan(alpha) else alpha,
                "beta_GBps": base_beta if math.isnan(beta) else beta,
                "from": "congested canaries" + (f" (isolated {' and '.join(kept)})" if kept else ""),
            }
        )
    return out


def _positive(value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if value > 0 and math.isfinite(value) else math.nan


def alpha_beta(
    ping_pong: list[Segment] | None, stream: list[Segment] | None, stream_name: str = STREAM
) -> tuple[float, str, float, str]:
    """(α, where from, β, where from) of a series' fits: α from the latency fit's first segment, β from the stream's
    last (the latency fit's last without a stream); NaN where the fit is missing. ``stream_name``: the kernel the
    stream's fit is of, as the lines name it (bw, or a one-sided stream).

    A last segment whose time does not grow with size (slope 0 or below: an unbounded β) says nothing of the rate:
    on a loaded host a few noisy sizes do that. β then comes from the latency fit's last segment, and says so.
    """
    alpha, alpha_from = math.nan, "no latency fit"
    if ping_pong:
        alpha, alpha_from = ping_pong[0].alpha_us, "latency, first segment"
    beta, beta_from = math.nan, "no bw or latency fit"
    if stream:
        beta, beta_from = stream[-1].beta_GBps, f"{stream_name}, last segment"
    if ping_pong and not 0 < beta < math.inf:
        flat = f" ({stream_name}'s last segment has no positive slope)" if stream else ""
        beta, beta_from = ping_pong[-1].beta_GBps, f"latency, last segment{flat}"
    return alpha, alpha_from, beta, beta_from


@dataclass(frozen=True)
class TierFit:
    """α and β of one tier of an all-pairs run: every pair of the tier's points fitted together."""

    tier: str
    pairs: int
    alpha_us: float
    alpha_from: str
    beta_GBps: float
    beta_from: str
    fits: dict[str, list[Segment]]


def fit_tiers(rows, statistic: str = "typical", seed: int = 0) -> list[TierFit]:
    """Each tier's fit (nearest tier first) from the measured all-pairs rows of one series (a DataFrame with
    ``tier``): the latency kernel's one-way times and the bw kernel's times per message, every pair pooled."""
    from fabricbench.measure.topology import TIERS

    mesh = [k for k in rows["kernel"].unique() if get_kernel(k).pairing is Pairing.MESH]
    out = []
    for tier in TIERS:
        chosen = rows[(rows["tier"] == tier) & rows["kernel"].isin(mesh)]
        if chosen.empty:
            continue
        fits: dict[str, list[Segment]] = {}
        for kernel in mesh:
            segments = fit_hockney(*_points(chosen, kernel, statistic), seed=seed)
            if segments:
                fits[STREAM if get_kernel(kernel).windowed else PING_PONG] = segments
        alpha, alpha_from, beta, beta_from = alpha_beta(fits.get(PING_PONG), fits.get(STREAM))
        pairs = len(chosen[["src_host", "dst_host"]].drop_duplicates())
        out.append(TierFit(tier, pairs, alpha, alpha_from, beta, beta_from, fits))
    return out


def tree_allreduce_us(
    algorithm: str,
    hosts: int,
    per_switch: int,
    size_B: float,
    same: tuple[float, float],
    cross: tuple[float, float],
    oversubscription: float,
) -> float:
    """An allreduce of ``size_B`` bytes on ``hosts`` hosts of a two-level fat-tree, ``per_switch`` under each leaf,
    from the same-switch (α µs, β GB/s) and the cross-switch α; a leaf's uplinks carry ``per_switch`` host links'
    worth over ``oversubscription``, shared evenly by the flows crossing them.

    With k = per_switch (or every host, when fewer), L = ⌈hosts / k⌉ leaves, s = oversubscription:

    ring (flat, ranks in switch order, as NCCL orders its ring): 2(N−1) steps, each ending when its cross-switch
    message lands: 2(N−1)·α_x + 2(N−1)/N · n/β_r, where one flow crosses each leaf's uplinks per direction, so
    β_r = min(β_s, k·β_s/s).
    hierarchical (reduce-scatter within the leaf, allreduce of each n/k shard across the leaves, allgather within
    the leaf; Jia et al. 2018, "Highly Scalable Deep Learning Training System with Mixed-Precision", §3.3, and
    Horovod's hierarchical allreduce), each phase a ring (Thakur, Rabenseifner and Gropp 2005: (p−1)·α +
    (p−1)/p · n/β for a reduce-scatter or an allgather): 2(k−1)·α_s + 2(k−1)/k · n/β_s + 2(L−1)·α_x +
    2(L−1)/L · (n/k)/β_x, where the k shards' rings cross the uplinks at once, β_x = min(β_s, β_s/s).
    """
    alpha_s, beta_s = same
    alpha_x = cross[0]
    k = min(per_switch, hosts)
    leaves = math.ceil(hosts / k)
    per_byte_s = 1.0 / (beta_s * 1e3)  # µs per byte
    if leaves == 1:
        return allreduce_time_us(FLAT_RING, hosts, size_B, alpha_s, beta_s)
    if algorithm == FLAT_RING:
        beta_ring = min(beta_s, k * beta_s / oversubscription)
        return 2 * (hosts - 1) * alpha_x + 2 * (hosts - 1) / hosts * size_B / (beta_ring * 1e3)
    if algorithm == HIERARCHICAL:
        beta_x = min(beta_s, beta_s / oversubscription)
        within = 2 * (k - 1) * alpha_s + 2 * (k - 1) / k * size_B * per_byte_s
        across = 2 * (leaves - 1) * alpha_x + 2 * (leaves - 1) / leaves * size_B / k / (beta_x * 1e3)
        return within + across
    raise ValueError(f"unknown algorithm {algorithm!r}")


@dataclass(frozen=True)
class TreeModel:
    """What the fat-tree projection uses: same-switch α and β, cross-switch α (and β where measured), the
    oversubscription and the hosts under a leaf, each with where it came from."""

    same: TierFit
    cross: TierFit
    oversubscription: float
    oversubscription_from: str
    per_switch: int
    per_switch_from: str


def tree_model(
    tiers: list[TierFit], per_switch: int | None, per_switch_from: str, oversubscription: float | None
) -> TreeModel:
    """The fat-tree model of a series' tiers; UsageError, one line, naming what is missing."""
    found = {t.tier: t for t in tiers}
    same = found.get(SAME_SWITCH)
    cross = found.get(CROSS_SWITCH) or found.get(CROSS_GROUP)
    for tier, fit in ((SAME_SWITCH, same), (CROSS_SWITCH, cross)):
        if fit is None:
            raise UsageError(f"a fat-tree projection needs {tier} pairs; the run has {', '.join(found) or 'none'}")
        if not (fit.alpha_us > 0 and 0 < fit.beta_GBps < math.inf):
            raise UsageError(
                f"a fat-tree projection needs {fit.tier} alpha and beta above 0: alpha {_g(fit.alpha_us)} us "
                f"({fit.alpha_from}), beta {_g(fit.beta_GBps)} GB/s ({fit.beta_from}); measure from 1 B"
            )
    if not per_switch:
        raise UsageError("no hosts per switch: the run's metadata has no topology; give --hosts-per-switch")
    if oversubscription is None:
        oversubscription, source = same.beta_GBps / cross.beta_GBps, f"measured: {same.tier} beta / {cross.tier} beta"
    else:
        source = "--oversubscription"
    return TreeModel(same, cross, oversubscription, source, per_switch, per_switch_from)


def project_tree(m: TreeModel, size_B: int, hosts: list[int]) -> list[dict]:
    """One row per (algorithm, hosts) of the fat-tree projection: time in µs and bus bandwidth in GB/s."""
    rows = []
    for algorithm in (FLAT_RING, HIERARCHICAL):
        for count in hosts:
            time_us = tree_allreduce_us(
                algorithm,
                count,
                m.per_switch,
                size_B,
                (m.same.alpha_us, m.same.beta_GBps),
                (m.cross.alpha_us, m.cross.beta_GBps),
                m.oversubscription,
            )
            rows.append(
                {
                    "algorithm": algorithm,
                    "hosts": count,
                    "hosts_per_switch": m.per_switch,
                    "switches": math.ceil(count / min(m.per_switch, count)),
                    "oversubscription": m.oversubscription,
                    "size_B": size_B,
                    "time_us": time_us,
                    "busbw_GBps": busbw_GBps(count, size_B, time_us),
                }
            )
    return rows


def hosts_per_switch(metadata: dict) -> int | None:
    """The most hosts under one switch among the run's hosts, from metadata.json's topology; None without one."""
    placed = ((metadata.get("topology") or {}).get("hosts")) or {}
    counts: dict[str, int] = {}
    for where in placed.values():
        switch = where.get("switch") if isinstance(where, dict) else None
        if isinstance(switch, str):
            counts[switch] = counts.get(switch, 0) + 1
    return max(counts.values()) if counts else None


# --- the command ---------------------------------------------------------------------------------------------------


@dataclass
class Model:
    """One series' fits and the α and β its projection uses (NaN where a fit is missing)."""

    name: str
    transport: str
    fits: dict[str, list[Segment]]
    alpha_us: float
    beta_GBps: float
    alpha_from: str
    beta_from: str
    allreduce: list[dict]
    points: dict[str, tuple[np.ndarray, np.ndarray]]
    congestion: list[dict] = ()  # congested_parameters of the series' congestion rows
    tiers: list[TierFit] = ()  # fit_tiers of the series' all-pairs rows
    per_switch: int | None = None  # hosts under a leaf, from the run's topology

    @property
    def usable(self) -> bool:
        return self.alpha_us > 0 and 0 < self.beta_GBps < math.inf


def _points(rows, kernel: str, statistic: str) -> tuple[np.ndarray, np.ndarray]:
    """(size in bytes, time in µs) of a kernel's measured rows: latency's one-way time, or bw's time per message."""
    latency, bandwidth = STATISTICS[statistic]
    chosen = rows[rows["kernel"] == kernel]
    if get_kernel(kernel).windowed:
        chosen = chosen[chosen[bandwidth] > 0]
        return chosen["size_B"].to_numpy(float), (chosen["size_B"] / chosen[bandwidth]).to_numpy(float)  # B/(B/µs)
    return chosen["size_B"].to_numpy(float), chosen[latency].to_numpy(float)


def tier_rows(run, statistic: str, seed: int = 0):
    """The all-pairs rows a series' per-tier fits take, from a run's pairs read as matrices (``run``: a
    load.PairRun) with only the column ``statistic`` asks of each kernel, and its topology's tiers: every pair of a
    (tier, kernel, size) up to TIER_PAIRS of them, and past that TIER_PAIRS drawn at random with ``seed`` (as many
    pin a tier's alpha and beta down; every pair of a large fabric would make its bootstrap take days). None
    without a topology: the fits are by tier."""
    import pandas as pd

    from fabricbench.measure.topology import TIERS
    from fabricbench.measure.verdict import tier_matrix

    if run.topology is None:
        return pd.DataFrame()
    latency, bandwidth = STATISTICS[statistic]
    draw = np.random.default_rng(seed)
    found = []
    for key in run.table.counts:
        run_id, transport, kernel, _, size = key
        column = bandwidth if get_kernel(kernel).windowed else latency
        buffer = sorted(run.table.buffers.get(key, {"host"}))[0]
        for group in run.table.groups([key], column):
            tiers = tier_matrix(group.hosts, run.topology)[0]
            measured = ~np.isnan(group.values)
            for code, tier in enumerate(TIERS):
                src, dst = np.nonzero(measured & (tiers == code))
                if len(src) > TIER_PAIRS:
                    chosen = np.sort(draw.choice(len(src), TIER_PAIRS, replace=False))
                    src, dst = src[chosen], dst[chosen]
                hosts = np.array(group.hosts, dtype=object)
                found.append(
                    pd.DataFrame(
                        {
                            "run_id": run_id,
                            "transport": transport,
                            "buffer": buffer,
                            "kernel": kernel,
                            "size_B": size,
                            "tier": tier,
                            "src_host": hosts[src],
                            "dst_host": hosts[dst],
                            column: group.values[src, dst],
                        }
                    )  # fmt: skip
                )
    return pd.concat(found, ignore_index=True) if found else pd.DataFrame()


def build_models(paths: list[str], seed: int = 0, statistic: str = "typical") -> list[Model]:
    """Every (input, transport, buffer) of ``paths`` fitted; inputs are read and checked as compare reads them.
    The one-pair rows make the series' fits; the all-pairs rows with a tier make its per-tier fits."""
    import pandas as pd

    from fabricbench.analysis import load

    models = []
    for path in paths:
        frame, metadata = load.read_run(path, pairs=False)
        # An in-place collective is a kernel of its own (load.by_placement): its allreduce is not the model's.
        measured = load.by_placement(frame[load.comparable(frame) & frame["size_B"].notna()])
        pairs = tier_rows(load.read_pairs(path), statistic, seed)
        usable = pd.concat([measured[measured["src_host"] == ""], pairs], ignore_index=True)
        label = metadata.get("label") or load.path_name(path)
        for (transport, buffer), both in usable.groupby(["transport", "buffer"], sort=False):
            rows = both[both["src_host"] == ""]
            present = set(rows["kernel"])
            fitted = [*FITTED, *(k for k in (*ONE_SIDED, *ONE_SIDED_STREAMS) if k in present)]
            points = {k: _points(rows, k, statistic) for k in fitted}
            fits = {k: fit_hockney(*points[k], seed=seed) for k in points}
            fits = {k: v for k, v in fits.items() if v}
            name = next((k for k in (STREAM, *ONE_SIDED_STREAMS) if k in fits), STREAM)
            alpha, alpha_from, beta, beta_from = alpha_beta(fits.get(PING_PONG), fits.get(name), name)
            if not fits.get(PING_PONG) and any(k in fits for k in ONE_SIDED):
                alpha_from = "no latency fit (a put or get times a completed one-sided operation, not a message)"
            column = STATISTICS[statistic][0]  # allreduce's time per operation, as the latency rows are read
            measured_allreduce = rows[(rows["kernel"] == allreduce_op.SPEC.name) & (rows[column] > 0)]
            allreduce = [
                {"ranks": int(r.ranks), "size_B": int(r.size_B), "measured_us": float(getattr(r, column))}
                for r in measured_allreduce.itertuples()
            ]
            name = f"{label} {transport}" + (f" ({buffer} buffers)" if buffer != "host" else "")
            congested = congested_parameters(rows.to_dict("records"))
            tiers = fit_tiers(both[both["src_host"] != ""], statistic, seed)
            model = Model(
                name,
                transport,
                fits,
                alpha,
                beta,
                alpha_from,
                beta_from,
                allreduce,
                points,
                congested,
                tiers,
                hosts_per_switch(metadata),
            )
            models.append(model)
    return models


def _g(value: float) -> str:
    if math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _time(us: float) -> str:
    """µs as people read durations: 12.3 us, 4.56 ms, 7.89 s."""
    if us >= 1e6:
        return f"{us / 1e6:.4g} s"
    return f"{us / 1e3:.4g} ms" if us >= 1e3 else f"{us:.4g} us"


def _parse_ranks(text: list[str] | None) -> list[int]:
    if not text:
        return DEFAULT_RANKS
    ranks = []
    for item in text:
        if not item.isascii() or not item.isdigit() or not 2 <= int(item) <= 10**8:
            raise UsageError(f"--project-ranks takes whole numbers from 2 to 100000000, got {item!r}")
        ranks.append(int(item))
    return sorted(set(ranks))


def model(
    paths: list[str],
    size: int,
    ranks_text: list[str] | None,
    out: str | None,
    seed: int = 0,
    statistic: str = "typical",
    per_switch: int | None = None,
    oversubscription: float | None = None,
) -> int:
    """Print each series' fits, the projection of allreduce at ``size`` and its error against measured rows, and
    where the series has all-pairs rows by tier, each tier's fit and the fat-tree projection."""
    ranks = _parse_ranks(ranks_text)
    if size <= 0:
        raise UsageError("--size must be at least 1 byte")
    if per_switch is not None and per_switch < 1:
        raise UsageError("--hosts-per-switch must be at least 1")
    if oversubscription is not None and not (math.isfinite(oversubscription) and oversubscription > 0):
        raise UsageError("--oversubscription must be a ratio above 0, e.g. 3 for 3:1")
    models = build_models(paths, seed, statistic)
    print(
        f"model: T(n) = alpha + n/beta, least squares on relative error; 95 % intervals from {RESAMPLES} "
        f"bootstrap resamples (seed {seed}); alpha in us, beta in GB/s (10^9 B/s), n1/2 = alpha*beta in bytes; "
        f"{statistic} figures: latency {STATISTICS[statistic][0]}, bw {STATISTICS[statistic][1]}"
    )
    fit_rows, projection_rows, measured_rows, congestion_rows = [], [], [], []
    tier_rows, tree_rows = [], []
    for m in models:
        print(f"\n{printable(m.name)}")  # the run's label, from its metadata
        if m.congestion:
            congestion_rows += _print_congestion(m, size, ranks)
        if m.tiers:
            found = _print_tiers(m, size, ranks, per_switch, oversubscription)
            tier_rows += found[0]
            tree_rows += found[1]
            if not m.fits:
                continue
        if not m.fits:
            print(f"  no fit: fewer than {MIN_FIT_SIZES} measured sizes of {', '.join(m.points)}")
        for kernel, segments in m.fits.items():
            intercept = "gap" if get_kernel(kernel).windowed else "alpha"  # a stream's intercept: a per-message gap
            for s in segments:
                sizes = f"{format_size(s.size_min)}-{format_size(s.size_max)} ({s.sizes} sizes)"
                print(
                    f"  {kernel:<8} {sizes:<28} {intercept} {_g(s.alpha_us)} [{_g(s.alpha_lo_us)}, "
                    f"{_g(s.alpha_hi_us)}]  beta {_g(s.beta_GBps)} [{_g(s.beta_lo_GBps)}, {_g(s.beta_hi_GBps)}]  "
                    f"n1/2 {_g(s.n_half_B)}  rms {100 * s.rms_rel_err:.2g} %"
                )
                fit_rows.append({"series": m.name, "transport": m.transport, "kernel": kernel} | vars(s))
                fit_rows[-1]["n_half_B"] = s.n_half_B
        if not m.usable:
            print(f"  no projection: alpha {_g(m.alpha_us)} ({m.alpha_from}), beta {_g(m.beta_GBps)} ({m.beta_from})")
            continue
        n_half = m.alpha_us * m.beta_GBps * 1e3
        print(
            f"  model: alpha {_g(m.alpha_us)} us ({m.alpha_from}), beta {_g(m.beta_GBps)} GB/s ({m.beta_from}), "
            f"n1/2 {_g(n_half)} B"
        )
        rows = project(m.alpha_us, m.beta_GBps, size, ranks)
        projection_rows += [{"series": m.name, "alpha_us": m.alpha_us, "beta_GBps": m.beta_GBps} | r for r in rows]
        _print_projection(rows, size, ranks)
        if m.allreduce:
            print("  measured allreduce against the model (error = model / measured - 1):")
            for point in m.allreduce:
                errors = []
                for algorithm in ALGORITHMS:
                    predicted = allreduce_time_us(algorithm, point["ranks"], point["size_B"], m.alpha_us, m.beta_GBps)
                    error = predicted / point["measured_us"] - 1
                    errors.append(f"{algorithm} {_time(predicted)} ({100 * error:+.0f} %)")
                    measured_rows.append(
                        {"series": m.name, "algorithm": algorithm, **point, "model_us": predicted, "error": error}
                    )
                print(
                    f"    {format_size(point['size_B']):>9} on {point['ranks']} ranks: measured "
                    f"{_time(point['measured_us'])}; {', '.join(errors)}"
                )
    if out:
        written = _write(
            out, models, fit_rows, projection_rows, measured_rows, size, congestion_rows, tier_rows, tree_rows
        )
        print(f"\nwritten: {', '.join(str(p) for p in written)}")
    return 0


def _print_congestion(m: Model, size: int, ranks: list[int]) -> list[dict]:
    """The allreduce projection with α and β from the congestion run's isolated canaries and from each congestor's
    congested ones: the ring's time per rank count, and congested / isolated. Returns the rows for the CSV."""
    print("  congestion: alpha from the canaries' rr-latency mean (one-way), beta from their rr-bw mean rate")
    for p in m.congestion:
        name, alpha, beta = printable(p["congestor"]), _g(p["alpha_us"]), _g(p["beta_GBps"])
        print(f"    {name:<12} alpha {alpha} us, beta {beta} GB/s ({p['from']})")
    base = m.congestion[0]
    rows = []
    for p in m.congestion:
        for r in project(p["alpha_us"], p["beta_GBps"], size, ranks):
            isolated = allreduce_time_us(r["algorithm"], r["ranks"], size, base["alpha_us"], base["beta_GBps"])
            rows.append({"series": m.name, "congestor": p["congestor"], **r, "vs_isolated": r["time_us"] / isolated})
    congestors = [p["congestor"] for p in m.congestion]
    print(f"  ring allreduce of {format_size(size)}, projected with each phase's alpha and beta (x: / isolated)")
    print(f"  {'ranks':>8}" + "".join(f"{('isolated' if c == 'none' else printable(c)):>24}" for c in congestors))
    ring = {(r["congestor"], r["ranks"]): r for r in rows if r["algorithm"] == "ring"}
    for count in ranks:
        cells = []
        for c in congestors:
            r = ring[c, count]
            ratio = "" if c == "none" else f" ({r['vs_isolated']:.2f}x)"
            cells.append(f"{_time(r['time_us']) + ratio:>24}")
        print(f"  {count:>8}" + "".join(cells))
    return rows


def _print_tiers(
    m: Model, size: int, hosts: list[int], per_switch: int | None, oversubscription: float | None
) -> tuple[list[dict], list[dict]]:
    """Each tier's α and β, then the flat ring and the hierarchical allreduce on a fat-tree of each host count
    (or the one line saying what the projection lacks). Returns the rows of the two CSVs."""
    print("  by tier (all-pairs rows, every pair of a tier fitted together):")
    tier_rows = []
    for t in m.tiers:
        print(
            f"    {t.tier:<13} {t.pairs:>4} pairs  alpha {_g(t.alpha_us)} us ({t.alpha_from}), "
            f"beta {_g(t.beta_GBps)} GB/s ({t.beta_from})"
        )
        tier_rows.append(
            {"series": m.name, "tier": t.tier, "pairs": t.pairs, "alpha_us": t.alpha_us, "beta_GBps": t.beta_GBps}
            | {"alpha_from": t.alpha_from, "beta_from": t.beta_from}
        )
    chosen = per_switch or m.per_switch
    source = "--hosts-per-switch" if per_switch else "the run's topology"
    try:
        tree = tree_model(m.tiers, chosen, source, oversubscription)
    except UsageError as exc:
        print(f"  no fat-tree projection: {exc}")
        return tier_rows, []
    rows = project_tree(tree, size, hosts)
    print(
        f"  fat-tree: {tree.per_switch} hosts a leaf ({tree.per_switch_from}), oversubscription "
        f"{tree.oversubscription:.3g}:1 ({tree.oversubscription_from}); alpha {_g(tree.same.alpha_us)} us and "
        f"beta {_g(tree.same.beta_GBps)} GB/s within a leaf, alpha {_g(tree.cross.alpha_us)} us across"
    )
    print(f"  allreduce of {format_size(size)} on N hosts: time and bus bandwidth (GB/s); x: ring / hierarchical")
    print(f"  {'hosts':>8}{'leaves':>8}" + "".join(f"{a:>28}" for a in (FLAT_RING, HIERARCHICAL)) + f"{'x':>9}")
    by = {(r["algorithm"], r["hosts"]): r for r in rows}
    for count in hosts:
        flat, hier = by[FLAT_RING, count], by[HIERARCHICAL, count]
        cells = "".join(f"{_time(r['time_us']):>16} {_g(r['busbw_GBps']):>10}  " for r in (flat, hier))
        print(f"  {count:>8}{flat['switches']:>8}{cells}{flat['time_us'] / hier['time_us']:>8.3g}x")
    same, cross = tree.same, tree.cross
    extra = {"alpha_same_us": same.alpha_us, "beta_same_GBps": same.beta_GBps, "cross_tier": cross.tier}
    extra |= {"alpha_cross_us": cross.alpha_us, "beta_cross_GBps": cross.beta_GBps}
    return tier_rows, [{"series": m.name} | r | extra for r in rows]


def _print_projection(rows: list[dict], size: int, ranks: list[int]) -> None:
    print(f"  allreduce of {format_size(size)}, projected: time and bus bandwidth (GB/s)")
    header = "".join(f"{a:>28}" for a in ALGORITHMS)
    print(f"  {'ranks':>8}{header}")
    by_key = {(r["algorithm"], r["ranks"]): r for r in rows}
    for count in ranks:
        cells = "".join(
            f"{_time(by_key[a, count]['time_us']):>16} {_g(by_key[a, count]['busbw_GBps']):>10}" + " "
            for a in ALGORITHMS
        )
        print(f"  {count:>8}{cells}")


def _write(
    out: str,
    models: list[Model],
    fits: list[dict],
    projection: list[dict],
    measured: list[dict],
    size: int,
    congestion: list[dict] = (),
    tiers: list[dict] = (),
    tree: list[dict] = (),
):
    """model.csv, projection.csv, allreduce_vs_model.csv (when there are measured rows), congestion_projection.csv
    (when a congestion run was given), tier_model.csv and hierarchical_projection.csv (when an all-pairs run with
    tiers was), fit.png, projection.png."""
    import pandas as pd

    from fabricbench.measure.results import prepare_out_dir

    folder = prepare_out_dir(out)
    written = []
    for name, rows in (
        (MODEL_CSV, fits),
        (PROJECTION_CSV, projection),
        (MEASURED_CSV, measured),
        (CONGESTION_CSV, congestion),
        (TIER_CSV, tiers),
        (HIERARCHICAL_CSV, tree),
    ):
        if rows:
            pd.DataFrame(rows).to_csv(folder / name, index=False)
            written.append(folder / name)
    if fits:
        written.append(_fit_plot(models, folder / FIT_PNG))
    if projection:
        written.append(_projection_plot(projection, size, folder / PROJECTION_PNG))
    return written


def _figure(panels: int, width: float = 6.4, height: float = 4.6):
    """A matplotlib figure on the Agg canvas (no display); matplotlib is imported here and nowhere else in model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width * panels, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.subplots(1, panels, squeeze=False)[0]


def _fit_plot(models: list[Model], path):
    """One panel per series: measured times per message against size, and each fitted segment's line (log-log)."""
    from fabricbench.analysis.plots import MARKERS  # matplotlib is loaded by now (_figure)

    fitted = [m for m in models if m.fits]
    figure, axes = _figure(len(fitted))
    for ax, m in zip(axes, fitted, strict=True):
        for (kernel, (sizes, times)), marker in zip(m.points.items(), cycle(MARKERS), strict=False):
            windowed = get_kernel(kernel).windowed
            what = f"{kernel}: size / rate" if windowed else f"{kernel}: time per operation"
            what = {PING_PONG: "one-way latency p50", STREAM: "bw: size / bw"}.get(kernel, what)
            shown = sizes > 0  # a log axis has no 0 B
            if not shown.any():
                continue
            (points,) = ax.plot(sizes[shown], times[shown], marker, fillstyle="none", label=what)
            for s in m.fits.get(kernel, []):
                line = np.geomspace(max(s.size_min, 1), max(s.size_max, 1), 50)
                ax.plot(line, s.time_us(line), "-", color=points.get_color(), alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("message size (B)")
        ax.set_ylabel("time per message (µs)")
        ax.set_title(f"{m.name}: Hockney fit α + n/β per segment")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize="small")
    figure.savefig(path, dpi=110)
    return path


def _projection_plot(rows: list[dict], size: int, path):
    """Projected allreduce time and bus bandwidth against the rank count: a colour per series, a style per algorithm."""
    figure, (time_ax, busbw_ax) = _figure(2)
    styles = dict(zip(ALGORITHMS, ("-", "--", ":"), strict=True))
    series = list(dict.fromkeys(r["series"] for r in rows))
    for number, name in enumerate(series):
        for algorithm in ALGORITHMS:
            mine = [r for r in rows if r["series"] == name and r["algorithm"] == algorithm]
            ranks = [r["ranks"] for r in mine]
            label = f"{name}, {algorithm}"
            style = dict(color=f"C{number}", linestyle=styles[algorithm], label=label)
            time_ax.plot(ranks, [r["time_us"] / 1e6 for r in mine], **style)
            busbw_ax.plot(ranks, [r["busbw_GBps"] for r in mine], **style)
    time_ax.set_yscale("log")
    time_ax.set_ylabel("allreduce time (s)")
    busbw_ax.set_ylabel("bus bandwidth (GB/s, GB = 10⁹ B)")
    for ax in (time_ax, busbw_ax):
        ax.set_xscale("log", base=10)
        ax.set_xlabel("ranks")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(f"allreduce of {format_size(size)}, projected from α and β")
    busbw_ax.legend(fontsize="small")
    figure.savefig(path, dpi=110)
    return path

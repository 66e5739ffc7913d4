"""``fabricbench compare``: finished runs side by side, ratios against a baseline, plots.

It reads tables that are already on disk, so it is rank-free: pandas is
imported here (this module is imported only by the subcommand) and MPI never
is. ``load`` reads the inputs into series, this module divides every series by
its baseline at the same (kernel, size) and prints the result, and ``plots``
draws it. Across runs a series is divided by the first run's series of its own
transport and buffer (``baselines``); within one run, by the run's first series.
Sizes or kernels that not every series holds are listed, never dropped silently.
"""

from __future__ import annotations

import math
import sys

import pandas as pd

from fabricbench.analysis.load import KEY, SCALING, Series, comparable, shown_metrics, split_series
from fabricbench.errors import UsageError
from fabricbench.measure.formatting import format_size, format_sizes, short_name
from fabricbench.measure.results import prepare_out_dir
from fabricbench.measure.schema import NUMERIC, is_measured
from fabricbench.measure.stats import CONFIDENCE, bootstrap_median, bootstrap_ratio, significant
from fabricbench.measure.verdict import host_list
from fabricbench.terminal import printable_lines

DEFAULT_METRICS = ["lat_p50_us", "bw_MBps", "busbw_GBps"]
CONSOLE_UNITS = {"_us": " us", "_MBps": " MB/s", "_GBps": " GB/s", "_per_s": "/s"}
CI_TITLE = "95% CI"
MIN_REPEATS = 3  # repeats a value needs for its interval, and each side for a ratio's verdict
NO_INTERVAL = (math.nan, math.nan, math.nan)  # (value, low, high) where no interval is given
CONSOLE_WIDTH = 120  # the console's blocks are cut to fit this many columns
VERDICTS = {True: "significant", False: "not significant"}
SAMPLE_MEANING = {
    "rtt/2": "latency is half a round trip",
    "window": "latency is the time of one window of messages",
    "op": "latency is the time of one operation",
}


def parse_metrics(names: list[str] | None) -> list[str]:
    """Column names from ``--metric`` (full column names or short ones such as p99, bw, busbw)."""
    if not names:
        return DEFAULT_METRICS
    known = {c: c for c in NUMERIC} | {short_name(c): c for c in NUMERIC}
    metrics = []
    for name in names:
        if name not in known:
            choices = ", ".join(sorted(short_name(c) for c in NUMERIC))
            raise UsageError(f"unknown metric {name!r}; known: {choices} (or their column names)")
        if known[name] not in metrics:
            metrics.append(known[name])
    return metrics


def kernel_metrics(tidy: pd.DataFrame, metrics: list[str]) -> dict[str, list[str]]:
    """For each kernel, in order of first appearance, the wanted metrics that hold values."""
    measured = tidy[comparable(tidy)]
    chosen = {}
    for kernel, rows in measured.groupby("kernel", sort=False):
        chosen[kernel] = [m for m in metrics if m in rows.columns and rows[m].notna().any()]
    return {k: v for k, v in chosen.items() if v}


def repeated(tidy: pd.DataFrame) -> bool:
    """Whether some series measured a (kernel, size) more than once (run --repeat)."""
    return bool(tidy[comparable(tidy)].duplicated([*KEY, "letter"]).any())


def over_repeats(tidy: pd.DataFrame, metrics: list[str]) -> tuple[pd.DataFrame, dict]:
    """One row per (kernel, size, series), its metrics the medians over repeats, and the repeats' values.

    A (kernel, size) is compared when any repeat of it is; its row's other
    columns are those of its first such repeat. The values come back by
    (kernel, size, letter) and metric, for the intervals; ``repeats`` counts them.
    """
    ok = comparable(tidy)
    keys = [*KEY, "letter"]
    measured = tidy[ok]
    values = {key: {m: group[m].to_numpy(dtype=float) for m in metrics} for key, group in measured.groupby(keys)}
    first = tidy.assign(_ok=ok).sort_values("_ok", ascending=False, kind="stable")
    one = first.drop_duplicates(keys).drop(columns="_ok").sort_index().copy()
    medians = measured.groupby(keys)[metrics].median()
    counts = measured.groupby(keys).size()
    index = pd.MultiIndex.from_frame(one[keys])
    for metric in metrics:
        one[metric] = medians[metric].reindex(index).to_numpy()
    one["repeats"] = counts.reindex(index).fillna(0).astype(int).to_numpy()
    return one, values


def add_intervals(table: pd.DataFrame, values: dict, metrics: list[str]) -> None:
    """Each median's 95 % bootstrap interval, each ratio's, and whether the ratio is significant: its
    interval excludes 1 (when both sides have MIN_REPEATS repeats; else the verdict is empty)."""
    for metric in metrics:
        low, high, ratio_low, ratio_high, verdict = [], [], [], [], []
        for kernel, size, letter, base in zip(
            table["kernel"], table["size_B"], table["letter"], table["baseline"], strict=True
        ):
            size = math.nan if pd.isna(size) else float(size)
            mine = values.get((kernel, size, letter), {}).get(metric, [])
            # One or two repeats give their own range, not an interval: none is shown below MIN_REPEATS.
            _, lo, hi = bootstrap_median(mine) if len(mine) >= MIN_REPEATS else NO_INTERVAL
            low.append(lo)
            high.append(hi)
            theirs = values.get((kernel, size, base), {}).get(metric, [])
            compared = letter != base and min(len(mine), len(theirs)) >= MIN_REPEATS
            _, lo, hi = bootstrap_ratio(theirs, mine) if compared else NO_INTERVAL
            ratio_low.append(lo)
            ratio_high.append(hi)
            verdict.append(VERDICTS[significant(lo, hi)] if compared and not math.isnan(lo) else "")
        at = table.columns.get_loc(metric) + 1
        table.insert(at, f"{metric}_high", high)
        table.insert(at, f"{metric}_low", low)
        table[f"{metric}_ratio_low"] = ratio_low
        table[f"{metric}_ratio_high"] = ratio_high
        table[f"{metric}_significance"] = verdict


def kind(s: Series) -> tuple[str, str]:
    """What a series measured: its transport and buffer. Runs are compared kind with kind."""
    return s.transport, s.buffer


def baselines(series: list[Series], holders: set[str]) -> dict[str, str]:
    """For one kernel held by the series lettered ``holders``: each holder's letter -> the letter its ratios divide
    by. With several runs a series is divided by the first series of its own kind (transport, buffer) that holds
    the kernel, so run B's tcp is compared with run A's tcp, never with A's mpi; that first series is its kind's
    baseline. A series whose kind no other input holds is divided by its own run's first series, or where it is
    that itself, by the first series overall. Within one run every series is divided by the run's first."""
    held = [s for s in series if s.letter in holders]
    several_runs = len({(s.source, s.run_id) for s in held}) > 1
    chosen = {}
    for s in held:
        same = [t for t in held if kind(t) == kind(s)]
        if several_runs and len(same) > 1:
            chosen[s.letter] = same[0].letter
            continue
        first_of_run = next(t for t in held if (t.source, t.run_id) == (s.source, s.run_id))
        chosen[s.letter] = first_of_run.letter if first_of_run is not s else held[0].letter
    return chosen


def comparison_table(tidy: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The tidy comparison: one row per (kernel, size, series), values and ratios to the baseline.

    Each series' baseline for a kernel is chosen by ``baselines`` among the
    series that measured it, so runs are still compared where they overlap. The
    ``baseline`` column says which series each ratio divides by. With repeats (run
    --repeat) the values are medians over repeats, with their intervals, and
    each ratio says whether it is significant (add_intervals).
    """
    by_repeat = None
    if repeated(tidy):
        tidy, by_repeat = over_repeats(tidy, metrics)
    compared = comparable(tidy)
    columns = [
        "kernel", "size_B", "series", "letter", "transport", "buffer", "method", "run_id", "source",
        "status", "validation", "sample",
    ]  # fmt: skip
    table = tidy[columns].copy()
    firsts = tidy.drop_duplicates("letter").sort_values("letter")
    series = [Series(r.letter, r.series, r.source, r.run_id, r.transport, r.buffer, {}) for r in firsts.itertuples()]
    chosen = {
        (kernel, letter): base
        for kernel, letters in tidy[compared].groupby("kernel")["letter"]
        for letter, base in baselines(series, set(letters)).items()
    }
    keys = pd.Series(list(zip(table["kernel"], table["letter"], strict=True)), index=table.index, dtype=object)
    # A row not compared (unsupported, failed) names the kernel's first measured series, as nothing divides it.
    first = table["kernel"].map(tidy[compared].groupby("kernel")["letter"].min())
    table.insert(4, "baseline", keys.map(chosen).fillna(first).fillna(""))
    for metric in metrics:
        values = tidy[metric] if metric in tidy.columns else pd.Series(math.nan, index=tidy.index)
        table[metric] = values.where(compared)
    base = table[compared][[*KEY, "letter", *metrics]].rename(columns={"letter": "baseline"})
    table = table.merge(base, on=[*KEY, "baseline"], how="left", suffixes=("", "_base"))
    for metric in metrics:
        table[f"{metric}_ratio"] = table[metric] / table.pop(f"{metric}_base")
    if by_repeat is not None:
        table.insert(table.columns.get_loc("sample") + 1, "repeats", tidy["repeats"].to_numpy())
        add_intervals(table, by_repeat, metrics)
    table["size_B"] = table["size_B"].astype("Int64")
    return table


def _cell(value: float) -> str:
    if pd.isna(value):
        return "-"
    return f"{value:.2f}" if abs(value) >= 1 or value == 0 else f"{value:.3g}"


def _ratio(value: float) -> str:
    if pd.isna(value) or math.isinf(value):
        return "-"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}" if value >= 0.1 else f"{value:.3g}"


def _header_unit(metric: str) -> str:
    for suffix, unit in CONSOLE_UNITS.items():
        if metric.endswith(suffix):
            return short_name(metric) + unit
    return metric


def _series_lines(s: Series) -> list[str]:
    """A series' legend: its name, transport and input, then where it ran (on a line of its own where one line
    would pass CONSOLE_WIDTH)."""
    meta = s.metadata
    facts = [f"run {s.run_id}" if s.run_id and s.run_id != s.name else "", meta.get("mpi_vendor", "")]
    if meta.get("hosts"):
        facts.append("hosts " + host_list(meta["hosts"], 40))
    about = ", ".join(f for f in facts if f)
    line = f"#   {s.letter} = {s.name}: {s.transport} from {s.source}"
    if not about:
        return [line]
    if len(line) + len(about) + 3 <= CONSOLE_WIDTH:
        return [f"{line} ({about})"]
    return [line, f"#       ({about})"]


def _headline(series: list[Series], table: pd.DataFrame) -> list[str]:
    """What is divided by what: one baseline A within a run, each kind's first series across runs."""
    if len(series) == 1:
        return ["# fabricbench compare: 1 series, nothing to divide by; values only"]
    runs = len({(s.source, s.run_id) for s in series})
    pairs = table.loc[table["baseline"].ne("") & table["letter"].ne(table["baseline"]), ["letter", "baseline"]]
    ratios = list(dict.fromkeys(f"{x}/{b}" for x, b in zip(pairs["letter"], pairs["baseline"], strict=True)))
    if runs == 1 or all(r.endswith("/A") for r in ratios):
        others = ", ".join(s.letter for s in series[1:])
        head = f"# fabricbench compare: {len(series)} series; A is the baseline, ratios are X/A for X in {others}"
        return [head]
    return [
        f"# fabricbench compare: {len(series)} series from {runs} runs; each is divided by the first run's series of"
        " its kind",
        "# (its transport and buffer; a kind only one run holds, by its own run's first series)",
        "# ratios: " + ", ".join(ratios),
    ]


def _groups(rows: pd.DataFrame) -> list[tuple[str, list[str]]]:
    """A kernel's compared rows as (baseline, [the baseline and the letters divided by it]), by baseline letter."""
    pairs = rows[["letter", "baseline"]].drop_duplicates()
    groups = []
    for base, letters in pairs.groupby("baseline", sort=True)["letter"]:
        others = sorted(letter for letter in letters if letter != base)
        groups.append((base, [base, *others]))
    return groups


def _metric_columns(metric: str, base: str, letters: list[str], repeats: bool, value_ci: bool) -> list[tuple]:
    """One metric's columns for one group: (title, width, what fills it), what being (kind, letter) with kind one of
    value, value_ci, ratio, ratio_ci, verdict."""
    unit = _header_unit(metric)
    width = max(11, len(unit) + 3)
    columns = []
    for letter in letters:
        columns.append((f"{letter} {unit}", width, ("value", letter)))
        if repeats and value_ci:
            columns.append((f"{letter} {CI_TITLE}", 19, ("value_ci", letter)))
    ratio_width = max(9, len(short_name(metric)) + 6)
    for letter in letters[1:]:
        columns.append((f"{letter}/{base} {short_name(metric)}", ratio_width, ("ratio", letter)))
        if repeats:
            columns += [
                (f"{letter}/{base} {CI_TITLE}", 15, ("ratio_ci", letter)),
                (f"{letter}/{base}", 17, ("verdict", letter)),
            ]
    return columns


def _chunks(metrics: list[str], base: str, letters: list[str], repeats: bool) -> tuple[list[list], bool]:
    """The group's metrics packed into blocks of columns that fit CONSOLE_WIDTH with the size column, a metric to
    a block where they do not fit together; a metric too wide alone loses its values' intervals (comparison.csv
    keeps them). The blocks as (metric, columns) lists, and whether intervals were left out."""
    blocks, dropped = [], False
    for metric in metrics:
        columns = _metric_columns(metric, base, letters, repeats, value_ci=True)
        if 10 + sum(c[1] for c in columns) > CONSOLE_WIDTH and repeats:
            columns = _metric_columns(metric, base, letters, repeats, value_ci=False)
            dropped = True
        used = 10 + sum(c[1] for _, cols in blocks[-1] for c in cols) if blocks else CONSOLE_WIDTH + 1
        if used + sum(c[1] for c in columns) <= CONSOLE_WIDTH:
            blocks[-1].append((metric, columns))
        else:
            blocks.append([(metric, columns)])
    return blocks, dropped


def _cells(by_size: pd.DataFrame, metric: str, size, what: tuple[str, str]) -> str:
    kind_of, letter = what
    key = (size, letter)
    if kind_of == "value":
        return _cell(by_size[metric].get(key, math.nan))
    if kind_of == "value_ci":
        return _interval(by_size, metric, key, _cell)
    if kind_of == "ratio":
        return _ratio(by_size[f"{metric}_ratio"].get(key, math.nan))
    if kind_of == "ratio_ci":
        return _interval(by_size, f"{metric}_ratio", key, _ratio)
    return by_size[f"{metric}_significance"].get(key, "") or "-"


def report(series: list[Series], table: pd.DataFrame, chosen: dict[str, list[str]], notes: list[str]) -> str:
    """The console comparison: a legend, blocks per kernel (one per baseline, cut to fit CONSOLE_WIDTH), then
    everything not compared."""
    lines = _headline(series, table)
    lines += [line for s in series for line in _series_lines(s)]
    lines.append(
        "# a ratio below 1 means faster than its baseline for times (us), above 1 means faster for rates (MB/s, GB/s)"
    )
    with_repeats = "repeats" in table.columns
    if with_repeats:
        lines += _repeats_lines(series, table)
    compared = table[comparable(table)]
    needed = min(2, len(series))
    by_letter = {s.letter: s for s in series}
    left_out = False
    for kernel, metrics in chosen.items():
        rows = compared[compared["kernel"] == kernel]
        groups = _groups(rows)
        for base, letters in groups:
            mine = rows[rows["letter"].isin(letters)]
            holders = mine.groupby("size_B")["letter"].nunique()
            sizes = sorted(holders[holders >= needed].index)
            if not sizes:
                continue
            samples = [s for s in mine["sample"].unique() if s in SAMPLE_MEANING]
            about = [SAMPLE_MEANING[samples[0]]] if len(samples) == 1 else []
            kinds = {kind(by_letter[letter]) for letter in letters}
            if len(groups) > 1 and len(kinds) == 1:
                transport, buffer = kinds.pop()
                about.insert(0, f"{transport} {buffer}" if len({s.buffer for s in series}) > 1 else transport)
            if len(groups) == 1 and base != series[0].letter:
                about.append(f"baseline here is {base}: {series[0].letter} has no {kernel}")
            title = f"# {kernel}" + (f": {', '.join(letters)}" if len(groups) > 1 else "")
            title += f" ({'; '.join(about)})" if about else ""
            blocks, dropped = _chunks(metrics, base, letters, with_repeats)
            left_out = left_out or dropped
            by_size = mine.set_index(["size_B", "letter"])
            for block in blocks:
                columns = [("size", 10, None)] + [c for _, cols in block for c in cols]
                shown = "" if len(blocks) == 1 else f" [{', '.join(short_name(m) for m, _ in block)}]"
                lines += ["", title + shown]
                head = "".join(f"{title:>{width}}" for title, width, _ in columns)
                lines.append("#" + head[1:])
                for size in sizes:
                    cells = [f"{format_size(size):>10}"]
                    for metric, cols in block:
                        cells += [f"{_cells(by_size, metric, size, what):>{width}}" for _, width, what in cols]
                    lines.append("".join(cells))
    if left_out:
        lines.append(
            f"# values' {CI_TITLE} left out where a block would pass {CONSOLE_WIDTH} columns: comparison.csv holds "
            "them (METRIC_low, METRIC_high)"
        )
    lines += _not_compared(series, table)
    lines += [f"# note: {note}" for note in notes]
    return printable_lines(lines)  # labels, vendors, hosts and statuses come from the inputs' files


def _interval(by_size: pd.DataFrame, column: str, key: tuple, form) -> str:
    """``low-high`` of a value's or ratio's interval, each end as ``form`` writes it; "-" without one."""
    low, high = by_size[f"{column}_low"].get(key, math.nan), by_size[f"{column}_high"].get(key, math.nan)
    return "-" if pd.isna(low) or pd.isna(high) else f"{form(low)}-{form(high)}"


def _repeats_lines(series: list[Series], table: pd.DataFrame) -> list[str]:
    """How repeated runs are summarised, and how many repeats each series holds."""
    counts = table[comparable(table)].groupby("letter")["repeats"]
    fewest, most = counts.min(), counts.max()
    spans = {s.letter: (fewest[s.letter], most[s.letter]) for s in series if s.letter in fewest}
    held = ", ".join(f"{letter} {low}" + (f"-{high}" if high != low else "") for letter, (low, high) in spans.items())
    lines = [
        f"# repeats: {held}; values are medians over repeats with {CONFIDENCE:.0%} bootstrap intervals ({CI_TITLE})",
        f"# a ratio is significant when its {CONFIDENCE:.0%} bootstrap interval excludes 1",
    ]
    if (counts.min() < MIN_REPEATS).any():
        lines.append(
            f"# a value has an interval, and a ratio is called significant or not, only where both sides have "
            f"{MIN_REPEATS} repeats or more"
        )
    return lines


def _not_compared(series: list[Series], table: pd.DataFrame) -> list[str]:
    """Kernels and sizes not every series holds, and rows that were not measured or failed."""
    names = {s.letter: s.name for s in series}
    everyone = frozenset(names)
    compared = table[comparable(table)]
    lines = []
    missing: dict[frozenset, list[str]] = {}
    for kernel, rows in compared.groupby("kernel", sort=False):
        holders = rows.groupby("size_B")["letter"].agg(frozenset)
        for held_by, sizes in holders.groupby(holders, sort=False):
            if held_by != everyone:
                missing.setdefault(held_by, []).append(f"{kernel} {format_sizes(list(sizes.index))}")
    if missing:
        lines.append("")
    for held_by, parts in sorted(missing.items(), key=lambda item: sorted(item[0])):
        lacking = sorted(everyone - held_by)
        if len(held_by) == 1:
            (letter,) = held_by
            who = f"only in {letter} ({names[letter]})"
        elif len(lacking) == 1:
            who = f"missing from {lacking[0]} ({names[lacking[0]]})"
        else:
            who = f"only in {', '.join(sorted(held_by))}"
        lines.append(f"# {who}: {'; '.join(parts)}")
    failed = table[~comparable(table)]
    for (letter, kernel, status), rows in failed.groupby(["letter", "kernel", "status"], sort=False):
        why = "failed validation" if is_measured(status) else status
        sizes = [float(s) for s in rows["size_B"]] if rows["size_B"].notna().all() else []
        lines.append(f"# not compared, {letter} ({names[letter]}): {kernel} {format_sizes(sizes)}: {why}")
    return lines


def all_pairs_apart(tidy: pd.DataFrame, out_dir, series: list[Series], paths: list[str]) -> tuple[pd.DataFrame, bool]:
    """The all-pairs rows are drawn as heatmaps with --out, not compared size by size: each input's measured pairs
    as matrices (load.read_pairs: a group at a time, never a frame of them), ordered and judged by the topology
    its metadata keeps, and cuda-copy's GPU pairs (one per source and destination GPU, in the frame). The rows left
    to compare, and whether there were any pairs to draw."""
    from fabricbench.analysis.load import path_name, read_pairs

    gpus = tidy["src_gpu"].notna()
    runs = [(path, read_pairs(path)) for path in paths]
    runs = [(path, run) for path, run in runs if run.table.counts]
    count = int(gpus.sum()) + sum(sum(run.table.counts.values()) for _, run in runs)
    if not count:
        return tidy, False
    if out_dir:
        from fabricbench.analysis.heatmaps import write_gpu_heatmap, write_heatmaps

        def named(path: str, run, group) -> str:
            """The series a group's panel is named after: its input's, run's and transport's (an input of pair rows
            alone has none: its label, and its run where it holds several)."""
            mine = [s for s in series if s.source == path and s.transport == group.key[0]]
            mine = [s for s in mine if s.run_id == group.run_id] or mine
            if mine:
                return mine[0].name
            several = len({key[0] for key in run.table.counts}) > 1
            return (run.metadata.get("label") or path_name(path)) + (f" run {group.run_id}" if several else "")

        groups = ((named(path, run, g), g, run.topology) for path, run in runs for g in run.table.groups())
        written = write_heatmaps(groups, out_dir)
        if gpus.any():
            written.append(write_gpu_heatmap(tidy[gpus], out_dir))
        print(f"# wrote {', '.join(p.name for p in written)} in {out_dir}/ (all-pairs matrices)", file=sys.stderr)
    else:
        print(f"# {count:,} all-pairs rows: --out DIR draws their heatmaps", file=sys.stderr)
    return tidy[~gpus].reset_index(drop=True), True


def congestion_apart(tidy: pd.DataFrame, out_dir) -> tuple[pd.DataFrame, bool]:
    """The congestion kernel's rows (one per canary test and congestor) are shown as GPCNeT's key results per
    series, and drawn with --out as impact-factor bars beside the isolated and congested figures, not compared
    size by size: the rows left to compare, and whether there were any."""
    from fabricbench.run.patterns import kernels_of
    from fabricbench.run.patterns.congestion import Congestion, key_results

    rows = tidy["kernel"].isin(kernels_of(Congestion))
    if not rows.any():
        return tidy, False
    written = None
    if out_dir:  # drawn before anything is printed, as compare's other files
        from fabricbench.analysis.plots import write_congestion_plot

        written = write_congestion_plot(tidy[rows], out_dir)
    for (letter, name), group in tidy[rows].groupby(["letter", "series"], sort=False):
        lines = key_results(group.to_dict("records"))
        print(printable_lines([f"# {letter} ({name})" + ("" if lines else ": no congested row measured"), *lines]))
    if written:
        print(f"# wrote {written.name} in {out_dir}/ (congestion impact)", file=sys.stderr)
    else:
        print(f"# {int(rows.sum())} congestion rows: --out DIR draws their impact factors", file=sys.stderr)
    return tidy[~rows].reset_index(drop=True), True


def compare(paths: list[str], out: str | None = None, metric_names: list[str] | None = None) -> int:
    """The subcommand: print the comparison, and write CSV and PNGs when asked."""
    metrics = parse_metrics(metric_names)
    out_dir = prepare_out_dir(out) if out else None
    series, tidy, notes = split_series(paths)
    tidy, drawn = all_pairs_apart(tidy, out_dir, series, paths)
    tidy, congested = congestion_apart(tidy, out_dir)
    drawn = drawn or congested
    chosen = kernel_metrics(tidy, metrics)
    if not chosen and drawn:
        return 0
    if not chosen:
        raise UsageError(f"no measured values for {', '.join(metrics)} in these inputs")
    table = comparison_table(tidy, shown_metrics(chosen))
    text = report(series, table, chosen, notes)
    files = []
    if out_dir:  # the files first: a console that cannot be written to (a full disk behind stdout) keeps them
        table.to_csv(out_dir / "comparison.csv", index=False)
        # Imported here: plots imports matplotlib, needed only for --out.
        from fabricbench.analysis.plots import write_plots

        plots = write_plots(series, table, chosen, out_dir)
        if (tidy[SCALING] != "").any():
            from fabricbench.analysis.plots import write_scaling_plot

            plots.append(write_scaling_plot(series, tidy, out_dir))
        files = ["comparison.csv", *(p.name for p in plots)]
    print(text, flush=True)
    if files:
        print(f"# wrote {', '.join(files)} in {out_dir}/", file=sys.stderr)
    return 0

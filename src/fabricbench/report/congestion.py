"""The congestion kernel on the console: a line per (canary test, congestor), and GPCNeT's key-results table.

GPCNeT ends with its "key results": the congestion impact factor of each canary test, mean and 99th percentile.
Here a column pair per congestor pattern, so each pattern's effect reads on its own; ``mix`` (the four at once,
a quarter of the congestors each) is GPCNeT's own congested phase.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricbench.measure.congestion import CANARY_TITLES, CANARY_UNITS, NONE
from fabricbench.measure.formatting import given
from fabricbench.measure.schema import is_measured

# (header, width) of a congestion line; the figures are µs for a time test, MB/s for rr-bw (the unit column).
LAYOUT = (
    ("canary", 12),
    ("congestor", 12),
    ("iters", 7),
    ("mean", 11),
    ("p50", 11),
    ("p99", 11),
    ("unit", 6),
    ("rank spread", 12),
    ("cong. MB/s", 12),
    ("CIF avg", 9),
    ("CIF 99%", 9),
    ("valid", 6),
)


def _cell(value, width: int, digits: int = 2) -> str:
    if not given(value):
        return f"{'-':>{width}}"
    return f"{value:>{width}.{digits}f}"


def _factor(value, width: int) -> str:
    """An impact factor: three figures where it is small, so 0.004x does not read 0.00x."""
    if not given(value):
        return f"{'-':>{width}}"
    text = f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"
    return f"{text + 'x':>{width}}"


def header() -> str:
    names = "".join(f"{name:>{width}}" for name, width in LAYOUT)
    return f"#{names[1:]}"


def figures(row: dict) -> tuple[float, float, float]:
    """A row's (mean, p50, p99) in its canary's unit: µs, or MB/s for rr-bw (p99: the rate 99 % of samples reach)."""
    if row.get("canary") == "rr-bw":
        return row.get("bw_MBps"), row.get("bw_p50_MBps"), row.get("bw_p99_MBps")
    return row.get("lat_mean_us"), row.get("lat_p50_us"), row.get("lat_p99_us")


def line(row: dict) -> str:
    if not is_measured(row.get("status", "")):
        which = f"{row['canary']} with {row.get('congestor', '')}: " if row.get("canary") else ""
        return f"# {which}{row['status']}"
    mean, p50, p99 = figures(row)
    cells = [
        f"{row.get('canary', ''):>12}",
        f"{row.get('congestor', ''):>12}",
        f"{row.get('iterations', 0):>7d}",
        _cell(mean, 11),
        _cell(p50, 11),
        _cell(p99, 11),
        f"{CANARY_UNITS.get(row.get('canary', ''), ''):>6}",
        _cell(row.get("rank_spread"), 12),
        _cell(row.get("congestor_MBps"), 12, 1),
        _factor(row.get("cif_mean"), 9),
        _factor(row.get("cif_p99"), 9),
        f"{row.get('validation', ''):>6}",
    ]
    # The note names the congestors' calls, the same on every row of a congestor: the table has it, not the line.
    note = str(row.get("note") or "")
    note = "" if note.startswith("congestors:") else note
    return "".join(cells) + (f"  ({note})" if note else "")


def key_results(rows: Iterable[dict]) -> list[str]:
    """GPCNeT's key-results table from a run's congestion rows: per canary test, the impact factor of each
    congestor pattern (mean and 99 %); [] when no congested row was measured. Rows of several transports or
    repeats each get their own table, in the order they came."""
    tables: dict[tuple, dict[tuple[str, str], dict]] = {}
    for row in rows:
        if row.get("kernel") != "congestion" or not is_measured(row.get("status", "")):
            continue
        key = (row.get("transport", ""), row.get("repeat", 0))
        tables.setdefault(key, {})[(row.get("canary", ""), row.get("congestor", ""))] = row
    out: list[str] = []
    for (transport, _), found in tables.items():
        canaries = list(dict.fromkeys(canary for canary, _ in found))
        congestors = [c for c in dict.fromkeys(congestor for _, congestor in found) if c != NONE]
        if not congestors:
            continue
        first = max(len(f"{CANARY_TITLES.get(c, c)} ({_size(found, c)})") for c in canaries) + 2
        out.append(f"# Congestion impact factor on {transport} (GPCNeT's key results): congested / isolated time,")
        out.append("# isolated / congested bandwidth; 1.00x is no effect, above is worse; avg and 99th percentile")
        out.append("# " + " " * (first - 2) + "".join(f"{name:>20}" for name in congestors))
        out.append("# " + f"{'canary test':<{first - 2}}" + "".join(f"{'avg':>10}{'99%':>10}" for _ in congestors))
        for canary in canaries:
            title = f"{CANARY_TITLES.get(canary, canary)} ({_size(found, canary)})"
            cells = []
            for congestor in congestors:
                row = found.get((canary, congestor), {})
                cells += [_factor(row.get("cif_mean"), 10), _factor(row.get("cif_p99"), 10)]
            out.append(f"  {title:<{first - 2}}" + "".join(cells))
    return out


def _size(found: dict, canary: str) -> str:
    size = next((row.get("size_B") for (name, _), row in found.items() if name == canary), None)
    return f"{int(size)} B" if given(size) else "?"

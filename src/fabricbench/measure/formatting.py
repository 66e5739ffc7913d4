"""Byte counts and column names as people read them, in every text fabricbench prints or draws.

It sits in measure/, the lowest layer that prints a byte count (memory's refusals), so report/ and analysis/
above it import it downward: one copy of each formatter for the whole package.
"""

from __future__ import annotations

import math

from fabricbench.measure.schema import NUMERIC, UNIT_SUFFIXES

BINARY_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def _in_unit(count: float, largest: str) -> tuple[float, str]:
    """``count`` bytes in the largest binary unit it reaches, up to ``largest``: (value, unit), "B" below 1 KiB."""
    names = [unit for unit, _ in BINARY_UNITS]
    for unit, scale in BINARY_UNITS[names.index(largest) :]:
        if count >= scale:
            return count / scale, unit
    return count, "B"


def format_size(size: float) -> str:
    """A message size as people read one: 512 B, 1 KiB, 4 MiB (up to GiB, four significant digits)."""
    value, unit = _in_unit(size, "GiB")
    return f"{value:.4g} {unit}"


def format_sizes(sizes: list[float]) -> str:
    """A sorted size list, with runs of doublings shortened to ``1 B-32 B (6 sizes)``."""
    if not sizes or any(math.isnan(s) for s in sizes):
        return "all sizes"
    runs: list[list[float]] = []
    for size in sorted(sizes):
        if runs and size == (runs[-1][-1] * 2 or 1):
            runs[-1].append(size)
        else:
            runs.append([size])
    parts = []
    for run in runs:
        if len(run) == 1:
            parts.append(format_size(run[0]))
        else:
            parts.append(f"{format_size(run[0])}-{format_size(run[-1])} ({len(run)} sizes)")
    return ", ".join(parts)


def format_bytes(count: float) -> str:
    """An amount of memory as a person reads it: 512 B, 64.0 MiB, 21.3 GiB (up to TiB, one decimal)."""
    value, unit = _in_unit(count, "TiB")
    return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"


def _without_unit(column: str) -> str:
    name = column.removeprefix("lat_")
    suffix = next((suffix for suffix in UNIT_SUFFIXES if name.endswith(suffix)), "")
    return name[: len(name) - len(suffix)]


# Names two measured columns would share without their units (link_MBps and link_pct): those keep their units.
_SHARED = {name for name in map(_without_unit, NUMERIC) if sum(_without_unit(c) == name for c in NUMERIC) > 1}


def short_name(column: str) -> str:
    """``lat_p50_us`` -> ``p50``, ``busbw_GBps`` -> ``busbw``: what ``compare --metric`` also accepts, and what
    headers and plot files are called; the full name where two measured columns would share the short one."""
    name = _without_unit(column)
    return column if name in _SHARED else name


def given(value) -> bool:
    """A table cell that holds a value: not missing, empty or NaN."""
    return value is not None and value != "" and not (isinstance(value, float) and math.isnan(value))

"""``fabricbench check``: a run against a thresholds file, for schedulers and health checks.

The thresholds file is TOML: an array of ``[[threshold]]`` tables, each naming the transports,
kernels and message sizes it covers and one or more limits, ``min_<column>`` or ``max_<column>`` on a
numeric column of the tidy table (``min_bw_MBps``, ``max_lat_p50_us``, ``min_busbw_GBps``, ...). Every
measured row a threshold covers is held to each of its limits; each failing row, pair of an
all-pairs kernel, or host gets one line saying what was expected and what was measured. Exit 0
when everything passes, 1 when anything fails (a threshold that covers no measured row fails too,
unless it says ``optional = true``), 2 for a malformed file, naming its line and field.

Parsing and judging are pure functions on plain rows (tests/unit); pandas is imported only to read
the run, and the run a check starts is a child process (``fabricbench run``).
"""

from __future__ import annotations

import difflib
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fabricbench.argtypes import byte_size
from fabricbench.errors import UsageError
from fabricbench.lazy import np
from fabricbench.measure.congestion import CANARIES, CONGESTORS, MIX, NONE
from fabricbench.measure.formatting import format_size
from fabricbench.measure.schema import NUMERIC, is_measured
from fabricbench.measure.topology import TIERS, Topology
from fabricbench.measure.verdict import (
    LISTED,
    METRICS,
    PairGroup,
    RowPairs,
    host_list,
    is_pair_row,
    judged_text,
    slow_host,
    summary_lines,
    tier_matrix,
)
from fabricbench.measure.verdict import verdict as pairs_verdict
from fabricbench.terminal import LINE, printable, printable_lines

FIELDS = ("transport", "kernel", "size", "buffer", "canary", "congestor", "tier", "optional", "name")
# Limits on what the all-pairs verdict (measure.verdict) finds in the covered pairs rather than on a column:
# max_slow_uplinks = 0 fails a run whose verdict, judged by the run's topology, names a slow uplink or global link;
# max_slow_links and max_slow_hosts its slow links and hosts (by tier with a topology, else over all pairs).
VERDICT_COUNTS = ("slow_uplinks", "slow_links", "slow_hosts")
PEERS_WIDTH = 40  # the most characters of a host's failing peers, folded, on its line
BLOCK_SHARE = 0.75  # the share of the pairs between two groups (or switches) that fail for check to name the block
MIN_BLOCK = 4  # the fewest failing pairs named as a block rather than one by one
JUNIT_LINES = 100_000  # the most lines under one JUnit failure: every failing host, and pairs up to this
BUFFERS = ("host", "cuda")  # what the buffer column holds: host memory, or a GPU's (-d cuda)
BOUNDS = ("min", "max")
# The signals a run ends by: check passes its exit code on instead of judging a cut run.
STOPPED = {129, 130, 141, 143}
RunOut = Callable[[list[str]], str | None]  # run's words -> their --out (None: the run names its own folder)
_HEADER = re.compile(r"\s*\[\[\s*threshold\s*\]\]")
_size = byte_size("size")
# Bounds on a thresholds file, checked before and after tomllib reads it: tomllib recurses once per bracket
# (50,000 nested arrays end in RecursionError) and reads numbers of any length (a 400-digit one is past what
# float() takes). A [[threshold]] table's list of names is 4 deep; no limit needs more than 40 digits.
MAX_DEPTH = 16
MAX_DIGITS = 40
# What the pre-scan stops at: a comment, a string's opening quotes, a bracket, a run of decimal digits, a line break.
_SCAN = re.compile(r"#|\"\"\"|'''|\"|'|[\[\]{}]|[0-9][0-9_]*|\n")
_CLOSE = {
    '"': re.compile(r'(?:[^"\\\n]|\\.)*"'),
    "'": re.compile(r"[^'\n]*'"),
    '"""': re.compile(r"(?:[^\\]|\\.)*?\"\"\"", re.DOTALL),
    "'''": re.compile(r".*?'''", re.DOTALL),
}


@dataclass(frozen=True)
class Limit:
    """``min_bw_MBps = 100``: the column, which side of the value passes, and the value."""

    bound: str
    column: str
    value: float

    @property
    def name(self) -> str:
        return f"{self.bound}_{self.column}"

    @property
    def expected(self) -> str:
        return f"{'>=' if self.bound == 'min' else '<='} {_number(self.value)}"

    def passes(self, measured: float) -> bool:
        return measured >= self.value if self.bound == "min" else measured <= self.value


@dataclass(frozen=True)
class Threshold:
    """One ``[[threshold]]`` table: what it covers and its limits; ``index`` counts from 1, ``line`` 0 if unknown."""

    index: int
    line: int
    transports: tuple[str, ...]
    kernels: tuple[str, ...]
    size_min: int | None = None
    size_max: int | None = None
    buffer: str | None = None
    limits: tuple[Limit, ...] = ()
    optional: bool = False
    name: str = ""
    canaries: tuple[str, ...] = ()  # the congestion kernel's rows of these canary tests only (): all
    congestors: tuple[str, ...] = ()  # and of these congestor patterns only
    tiers: tuple[str, ...] = ()  # the pairs of these tiers only (measure.topology.TIERS; a run with --topology)

    def covers(self, row: dict) -> bool:
        size = row.get("size_B")
        if row.get("transport") not in self.transports or row.get("kernel") not in self.kernels:
            return False
        if self.canaries and row.get("canary") not in self.canaries:
            return False
        if self.congestors and row.get("congestor") not in self.congestors:
            return False
        if self.tiers and row.get("tier") not in self.tiers:
            return False
        if self.buffer is not None and row.get("buffer", "host") != self.buffer:
            return False
        if size is None or (isinstance(size, float) and math.isnan(size)):
            return self.size_min is None and self.size_max is None
        return (self.size_min is None or size >= self.size_min) and (self.size_max is None or size <= self.size_max)

    def covers_pairs(self, key: tuple, buffers: set[str]) -> bool:
        """Whether it covers a group of pair rows: its (run, transport, kernel, schedule, size) ``key`` and the
        buffer kinds of its rows (a group has no canary test or congestor; its tiers are chosen pair by pair)."""
        _, transport, kernel, _, size = key
        if transport not in self.transports or kernel not in self.kernels or self.canaries or self.congestors:
            return False
        if self.buffer is not None and self.buffer not in buffers:
            return False
        return (self.size_min is None or size >= self.size_min) and (self.size_max is None or size <= self.size_max)

    @property
    def where(self) -> str:
        place = f"threshold {self.index}" + (f", line {self.line}" if self.line else "")
        return f"{self.name} ({place})" if self.name else place

    @property
    def scope(self) -> str:
        """``tcp,mpi pairs-bw 64 KiB-4 MiB``: what the threshold covers, as its lines say it."""
        if self.size_min is None and self.size_max is None:
            sizes = "every size"
        elif self.size_min == self.size_max:
            sizes = format_size(self.size_min)
        else:
            low = format_size(self.size_min) if self.size_min is not None else ""
            high = format_size(self.size_max) if self.size_max is not None else ""
            sizes = f"{low or '0 B'}-{high}" if high else f"{low} and up"
        buffer = f" {self.buffer} buffers" if self.buffer else ""
        tests = f" canary {','.join(self.canaries)}" if self.canaries else ""
        tests += f" with {','.join(self.congestors)}" if self.congestors else ""
        tests += f" {','.join(self.tiers)} pairs" if self.tiers else ""
        return f"{','.join(self.transports)} {','.join(self.kernels)} {sizes}{buffer}{tests}"


@dataclass
class Verdict:
    """What check prints, in order, and whether it passed: lines start with ``ok``, ``warn`` or ``FAIL``."""

    lines: list[str] = field(default_factory=list)
    failures: int = 0
    warnings: int = 0
    rows_checked: int = 0

    def add(self, level: str, text: str, indent: bool = False, counts: bool = True) -> None:
        """One line; ``counts`` False for a summary whose failures are the lines under it."""
        self.lines.append(f"{'  ' if indent else ''}{level:<4} {text}")
        if not counts:
            return
        if level == "FAIL":
            self.failures += 1
        elif level == "warn":
            self.warnings += 1


def _number(value: float) -> str:
    return f"{value:.4g}"


# --- parsing -------------------------------------------------------------------------------------------------------


class _Lines:
    """Where tables and fields sit in the file's text: tomllib parses without positions, so they are found here."""

    def __init__(self, text: str, tables: int):
        self.text = text.splitlines()
        headers = [number for number, line in enumerate(self.text, 1) if _HEADER.match(line)]
        # Only a file written as [[threshold]] headers maps table k to its header line.
        self.headers = headers if len(headers) == tables else []

    def table(self, index: int) -> int:
        return self.headers[index - 1] if self.headers else 0

    def field(self, index: int, name: str) -> int:
        if not self.headers:
            return 0
        start = self.headers[index - 1]
        end = self.headers[index] - 1 if index < len(self.headers) else len(self.text)
        pattern = re.compile(rf"\s*(\"|'|){re.escape(name)}\1\s*=")
        for number in range(start + 1, end + 1):
            if pattern.match(self.text[number - 1]):
                return number
        return start

    def top_level(self, name: str) -> int:
        pattern = re.compile(rf"\s*(\[+\s*)?(\"|'|){re.escape(name)}\2\s*[=\].]")
        return next((n for n, line in enumerate(self.text, 1) if pattern.match(line)), 0)


def _names(value: object, what: str, known: Iterable[str]) -> tuple[str, ...]:
    """A name or a list of names, each one of ``known``; raises ValueError saying what is wrong."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"must be a {what} name or a list of them, got {value!r}")
    known = list(known)
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return tuple(dict.fromkeys(names))


def parse_size(value: object) -> tuple[int | None, int | None]:
    """``size``: bytes (8), a byte count ("64K", "1M") or a range "MIN:MAX" with either end left open."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"must be a byte count of 0 or more, got {value}")
        return value, value
    if not isinstance(value, str):
        raise ValueError(f"must be a byte count (8, 64K, 1M) or a range MIN:MAX, got {value!r}")
    try:
        if ":" not in value:
            return _size(value), _size(value)
        low, high = value.split(":", 1)
        size_min = _size(low) if low.strip() else None
        size_max = _size(high) if high.strip() else None
    except UsageError:
        raise ValueError(f"must be a byte count (8, 64K, 1M) or a range MIN:MAX, got {value!r}") from None
    if size_min is not None and size_max is not None and size_min > size_max:
        raise ValueError(f"range {value!r} runs backwards: its minimum is above its maximum")
    return size_min, size_max


def _limit(name: str, value: object) -> Limit:
    bound, _, column = name.partition("_")
    if bound not in BOUNDS or column not in NUMERIC and not (bound == "max" and column in VERDICT_COUNTS):
        raise KeyError(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"must be a number of 0 or more, got {value!r}")
    return Limit(bound, column, float(value))


def _unknown_field(name: str) -> str:
    limits = sorted(f"{bound}_{column}" for bound in BOUNDS for column in NUMERIC)
    limits += [f"max_{count}" for count in VERDICT_COUNTS]
    close = difflib.get_close_matches(name, [*FIELDS, *limits], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"unknown field{hint}; a threshold has {', '.join(FIELDS)} and limits min_ or max_ a numeric column, "
        "e.g. min_bw_MBps, max_lat_p50_us, min_busbw_GBps, or max_slow_uplinks"
    )


def scan_bounds(text: str) -> tuple[int, str] | None:
    """The first line of TOML ``text`` past MAX_DEPTH brackets open at once or a number of more than MAX_DIGITS
    digits, and what is past; None when within both. A linear scan that skips comments and strings, so tomllib
    is never handed what it would recurse or compute on without end."""
    depth, line, at = 0, 1, 0
    while found := _SCAN.search(text, at):
        token, at = found.group(), found.end()
        if token == "\n":
            line += 1
        elif token == "#":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end
        elif token in _CLOSE:
            closed = _CLOSE[token].match(text, at)  # unclosed: tomllib refuses it; the scan goes on at the line's end
            end = closed.end() if closed else text.find("\n", at) % (len(text) + 1)
            line += text.count("\n", at, end)
            at = end
        elif token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return line, f"arrays or tables nested more than {MAX_DEPTH} deep"
        elif token in "]}":
            depth = max(0, depth - 1)
        elif len(token) - token.count("_") > MAX_DIGITS:
            return line, f"a number of more than {MAX_DIGITS} digits"
    return None


def value_bounds(data: object) -> str | None:
    """What in parsed TOML is past the bounds (tables nested by dotted keys, a hexadecimal number of any length),
    or None; walked with a stack, not by recursion."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"arrays or tables nested more than {MAX_DEPTH} deep"
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_DIGITS:
            return f"a number of more than {MAX_DIGITS} digits"
    return None


def parse_thresholds(text: str, source: str, transports: Iterable[str], kernels: Iterable[str]) -> list[Threshold]:
    """The thresholds in TOML ``text``; a UsageError names ``source``, the line and the field of any fault."""
    import tomllib

    past = scan_bounds(text)
    if past:
        raise UsageError(f"{source}: line {past[0]}: {past[1]}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its words end with "(at line L, column C)"
        raise UsageError(f"{source}: not valid TOML: {exc}") from None
    except (RecursionError, ValueError) as exc:  # what the scan missed: nesting or digits it could not see
        raise UsageError(f"{source}: not valid TOML: {str(exc).splitlines()[0][:200]}") from None
    past = value_bounds(data)
    if past:
        raise UsageError(f"{source}: {past}")
    tables = data.get("threshold")
    lines = _Lines(text, len(tables) if isinstance(tables, list) else 0)

    def fault(line: int, what: str) -> UsageError:
        return UsageError(f"{source}{f': line {line}' if line else ''}: {what}")

    for key in data:
        if key != "threshold":
            raise fault(lines.top_level(key), f"{key!r}: unknown table or key; the file holds [[threshold]] tables")
    if tables is None:
        raise fault(0, "holds no [[threshold]] table: a check with nothing to check")
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise fault(lines.top_level("threshold"), "'threshold' must be an array of tables: write [[threshold]]")
    transports, kernels = list(transports), list(kernels)
    found = []
    for index, table in enumerate(tables, 1):
        where = f"threshold {index}"
        values: dict = {}
        limits = []
        for name, value in table.items():
            try:
                if name == "transport":
                    values["transports"] = _names(value, "transport", transports)
                elif name == "kernel":
                    values["kernels"] = _names(value, "kernel", kernels)
                elif name == "size":
                    values["size_min"], values["size_max"] = parse_size(value)
                elif name == "canary":
                    values["canaries"] = _names(value, "canary test", CANARIES)
                elif name == "tier":
                    values["tiers"] = _names(value, "tier", TIERS)
                elif name == "congestor":
                    values["congestors"] = _names(value, "congestor pattern", [*CONGESTORS, MIX, NONE])
                elif name in ("buffer", "name"):
                    if not isinstance(value, str) or not value:
                        raise ValueError(f"must be a non-empty string, got {value!r}")
                    if name == "buffer" and value not in BUFFERS:
                        raise ValueError(
                            f"must be one of {', '.join(BUFFERS)} (the table's buffer column), got {value!r}"
                        )
                    values[name] = value
                elif name == "optional":
                    if not isinstance(value, bool):
                        raise ValueError(f"must be true or false, got {value!r}")
                    values[name] = value
                else:
                    limits.append(_limit(name, value))
            except ValueError as exc:
                raise fault(lines.field(index, name), f"{where}, field {name!r}: {exc}") from None
            except KeyError:
                raise fault(lines.field(index, name), f"{where}, field {name!r}: {_unknown_field(name)}") from None
        for required in ("transport", "kernel"):
            if required not in table:
                raise fault(lines.table(index), f"{where}: field {required!r} is missing")
        if not limits:
            raise fault(lines.table(index), f"{where}: no limit; give at least one, e.g. min_bw_MBps or max_lat_p50_us")
        found.append(Threshold(index, lines.table(index), limits=tuple(limits), **values))
    if not found:
        raise fault(0, "holds no [[threshold]] table: a check with nothing to check")
    return found


def read_thresholds(path: str) -> list[Threshold]:
    """The thresholds file at ``path``, checked against the transports and kernels this fabricbench has."""
    from fabricbench.measure.kernels import KERNELS
    from fabricbench.transports import TRANSPORTS

    source = Path(path)
    if not source.is_file():
        raise UsageError(f"no thresholds file {path!r}" if not source.exists() else f"{path!r} is not a regular file")
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path!r}: {exc}") from None
    return parse_thresholds(text, path, TRANSPORTS, KERNELS)


# --- judging -------------------------------------------------------------------------------------------------------


def _value(row: dict, column: str) -> float:
    value = row.get(column)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value


def _rank(text: object) -> str:
    """A rank cell as written: CSV gives '3', Parquet may give 3.0."""
    try:
        return str(int(float(text)))
    except (TypeError, ValueError):
        return str(text)


def is_pair(row: dict) -> bool:
    """A row of one (source, destination) pair of ranks of an all-pairs kernel."""
    return bool(row.get("src_host")) and bool(row.get("dst_host")) and not is_gpu_route(row)


def is_gpu_route(row: dict) -> bool:
    """A row of one (source, destination) pair of GPUs in one host (cuda-copy peer)."""
    return str(row.get("src_gpu", "")) not in ("", "nan", "None")


def row_name(row: dict) -> str:
    """``tcp pairs-bw 1 MiB fbh1 -> fbh3 (ranks 0 -> 2, shift)``, or ``cuda-copy peer 64 MiB gpu1 GPU 0 -> GPU 1``:
    which row, pair and repeat a line is about."""
    text = f"{row['transport']} {row['kernel']} {format_size(row['size_B'])}"
    if row.get("buffer", "host") not in ("host", ""):
        text += f" {row['buffer']} buffers"
    if is_pair(row):
        detail = f"ranks {_rank(row.get('src_rank'))} -> {_rank(row.get('dst_rank'))}"
        if row.get("schedule"):
            detail += f", {row['schedule']}"
        text += f" {row['src_host']} -> {row['dst_host']} ({detail})"
    elif is_gpu_route(row):
        text += f" {row.get('src_host', '')} GPU {_rank(row['src_gpu'])} -> GPU {_rank(row.get('dst_gpu'))}"
    elif row.get("canary"):
        text += f" {row['canary']} with {row.get('congestor', '')}"
    if str(row.get("repeat", "0")) not in ("0", "0.0", "", "nan"):
        text += f" repeat {_rank(row['repeat'])}"
    return text


def pair_name(key: tuple, src: int, dst: int, src_host: str, dst_host: str) -> str:
    """``tcp pairs-bw 1 MiB h1 -> h3 (ranks 0 -> 2, isolated)``: one direction of a pair of a group (``key``: its
    transport, kernel, schedule and size), as row_name names a pair's row."""
    transport, kernel, schedule, size = key
    row = {"transport": transport, "kernel": kernel, "size_B": size, "schedule": schedule}
    return row_name(row | {"src_host": src_host, "dst_host": dst_host, "src_rank": src, "dst_rank": dst})


def group_name(key: tuple, runs: int = 1) -> str:
    """``tcp pairs-bw 1 MiB (isolated)``: a group of pair rows (``key``: run, transport, kernel, schedule, size),
    with its run where the table holds ``runs`` of them."""
    run_id, transport, kernel, schedule, size = key
    name = f"{transport} {kernel} {format_size(size)}" + (f" ({schedule})" if schedule else "")
    return name + (f" run {run_id}" if runs > 1 else "")


@dataclass
class PairFindings:
    """One limit on one group of pair rows: how many pairs it held and how many fail, the worst figure, and the
    lines that say which fail: the switches and hosts most of whose peers fail (``hosts``, each named once; how
    many hosts each names in ``named``), the blocks of pairs between two groups or switches failing together
    (``blocks``), then the failing pairs between the others (``pairs``: the first JUNIT_LINES, of ``pairs_count``)."""

    key: tuple
    held: int
    failing: int
    worst: float
    hosts: list[str] = field(default_factory=list)
    named: list[int] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    pairs: list[str] = field(default_factory=list)
    pairs_count: int = 0


def _peers(chosen: np.ndarray, codes: np.ndarray, hosts: int) -> np.ndarray:
    """Each host's peers among the ``chosen`` pairs, both ways: a host x host mask (rank x rank where each rank is a
    host of its own, the common case, with no copy), its diagonal off."""
    if hosts == len(codes):
        either = chosen | chosen.T
        order = np.argsort(codes)
        either = either[np.ix_(order, order)] if (codes[order] != codes).any() else either
    else:
        counts = _block_counts(chosen, codes, hosts)
        either = (counts + counts.T) > 0
    np.fill_diagonal(either, False)
    return either


def _touching(values: np.ndarray, chosen: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The chosen figures of every pair with an end among ``ranks`` (a mask), each pair once."""
    outside = ~ranks
    return np.concatenate(
        [values[ranks][chosen[ranks]], values[np.ix_(outside, ranks)][chosen[np.ix_(outside, ranks)]]]
    )


def pair_findings(
    group: PairGroup, limit: Limit, chosen: np.ndarray, fabric: Topology | None, what: str
) -> PairFindings:
    """The ``chosen`` pairs of a group (a mask: measured, and of the threshold's tiers) held to ``limit``; ``what``
    names the group on its lines.

    A host is named when it has at least two peers and pairs with more than half of them fail (either direction,
    slow_host's rule, as the verdict's): with one peer a slow link and a slow host look alike, and a pair counts
    for both its hosts, so a host whose own link is slow is named and a single slow link names no host. With a
    topology, two or more such hosts under one switch are one line, and past LISTED failing pairs left, the pairs
    between two groups, then two switches, that fail together are a line each (_failing_blocks). The pairs left
    are listed a direction each. Array work on the matrix: its cost grows with the pairs."""
    values = group.values
    with np.errstate(invalid="ignore"):
        failing = chosen & ~(values >= limit.value if limit.bound == "min" else values <= limit.value)
    held = int(chosen.sum())
    pick = np.min if limit.bound == "min" else np.max
    key = (group.run_id, *group.key)
    found = PairFindings(key, held, int(failing.sum()), float(pick(values[chosen])) if held else math.nan)
    if not found.failing:
        return found
    names, codes = np.unique(np.array(group.hosts, dtype=object), return_inverse=True)
    codes = codes.reshape(-1)
    peers = _peers(chosen, codes, len(names))
    bad = _peers(failing, codes, len(names))
    counts, bad_counts = peers.sum(axis=1), bad.sum(axis=1)
    named = (counts >= 2) & slow_host(bad_counts, counts)
    del peers
    under: dict[str, list[int]] = {}
    for host in np.flatnonzero(named).tolist():
        switch = fabric.switch_of(names[host]) if fabric is not None and names[host] in fabric.switch else ""
        under.setdefault(switch, []).append(host)
    for switch, hosts in under.items():
        for these in [[host] for host in hosts] if not switch or len(hosts) < 2 else [hosts]:
            median = float(np.median(_touching(values, chosen, np.isin(codes, these))))
            figure = f"{limit.column} median {_number(median)}, expected {limit.expected}"
            if len(these) == 1:
                host = these[0]
                failing_peers = host_list(names[np.flatnonzero(bad[host])], PEERS_WIDTH)
                line = (
                    f"host {names[host]}: {what}: pairs with {bad_counts[host]:,} of its {counts[host]:,} peers fail "
                    f"({failing_peers}); {figure}"
                )
            else:
                line = (
                    f"hosts under {switch}: {len(these):,} ({host_list(names[h] for h in these)}): {what}: pairs "
                    f"with {int(bad_counts[these].sum()):,} of their {int(counts[these].sum()):,} peers fail; {figure}"
                )
            found.hosts.append(line)
            found.named.append(len(these))
    del bad
    alone = np.isin(codes, np.flatnonzero(named))
    failing[alone, :] = failing[:, alone] = False
    if fabric is not None and int(failing.sum()) > LISTED and all(host in fabric.switch for host in group.hosts):
        _failing_blocks(found, group, chosen, failing, limit, fabric, what)
    rest = np.nonzero(failing)
    found.pairs_count = len(rest[0])
    for src, dst in zip(rest[0][:JUNIT_LINES].tolist(), rest[1][:JUNIT_LINES].tolist(), strict=True):
        name = pair_name(group.key, int(group.ranks[src]), int(group.ranks[dst]), group.hosts[src], group.hosts[dst])
        found.pairs.append(f"{name}: {limit.column} {_number(float(values[src, dst]))}, expected {limit.expected}")
    return found


def _failing_blocks(found: PairFindings, group: PairGroup, chosen, failing, limit: Limit, fabric: Topology, what: str):
    """Name once each block of pairs that fails together: between two groups (cross-group pairs), then between two
    switches, where at least BLOCK_SHARE of the block's pairs (both ways) fail; those pairs are then taken out of
    ``failing`` (in place). A block's figures are read from its own rows and columns: O(its pairs)."""
    _, switch_code, switch_names, group_code, group_names = tier_matrix(group.hosts, fabric)
    for level, code, names in (("groups", group_code, group_names), ("switches", switch_code, switch_names)):
        held, bad = _block_counts(chosen, code, len(names)), _block_counts(failing, code, len(names))
        held, bad = np.triu(held + held.T, 1), np.triu(bad + bad.T, 1)  # each block once, both ways
        members = [np.flatnonzero(code == i) for i in range(len(names))]
        for a, b in np.argwhere((held > 0) & (bad >= BLOCK_SHARE * held) & (bad >= MIN_BLOCK)).tolist():
            there, back = np.ix_(members[a], members[b]), np.ix_(members[b], members[a])
            figures = np.concatenate([group.values[there][chosen[there]], group.values[back][chosen[back]]])
            found.blocks.append(
                f"pairs between {level} {names[a]} and {names[b]}: {int(bad[a, b]):,} of {int(held[a, b]):,} fail "
                f"({what}); {limit.column} median {_number(float(np.median(figures)))}, expected {limit.expected}"
            )
            failing[there] = failing[back] = False


def _block_counts(chosen: np.ndarray, code: np.ndarray, count: int) -> np.ndarray:
    """How many of the ``chosen`` pairs lie between each two of ``count`` blocks of ranks (``code``: each rank's)."""
    order = np.argsort(code, kind="stable")
    starts = np.searchsorted(code[order], np.arange(count))
    rows = np.add.reduceat(chosen[order], starts, axis=0, dtype=np.int32)
    return np.add.reduceat(rows[:, order], starts, axis=1, dtype=np.int64)


def _merged(found: list[dict]) -> dict:
    """The verdicts of several groups, judged one at a time, as one verdict of them all."""
    whole = dict(found[0])
    for kind in ("groups", "slow_links", "slow_hosts", *(("slow_uplinks",) if "slow_uplinks" in whole else ())):
        whole[kind] = [entry for each in found for entry in each[kind]]
    whole["ok"] = all(each["ok"] for each in found)
    return whole


class Judging:
    """One check's inputs, and what is worked out once from them for both the console and the JUnit report: the
    rows that are not all-pairs rows, the all-pairs rows as matrices (``pairs``: a PairTable reading the run's
    table, or RowPairs over the rows given), the run's topology, and per threshold its findings and verdict,
    worked out a group at a time (one matrix held at once; one read of each group per column its limits ask)."""

    def __init__(self, rows: list[dict], fabric: Topology | None = None, pairs=None):
        self.pairs = pairs if pairs is not None else RowPairs(rows)
        self.rows = [row for row in rows if not is_pair_row(row)]
        self.fabric = fabric
        self.runs = len({key[0] for key in (*self.pairs.counts, *self.pairs.failed)})
        self._verdicts: dict[int, dict] = {}
        self._findings: dict[tuple[int, str], list[PairFindings]] = {}

    def keys(self, threshold: Threshold) -> list[tuple]:
        """The groups of pair rows the threshold covers (measured, or failed their check), in key order."""
        every = sorted({*self.pairs.counts, *self.pairs.failed})
        return [key for key in every if threshold.covers_pairs(key, self.pairs.buffers.get(key, {"host"}))]

    def name(self, key: tuple) -> str:
        return group_name(key, self.runs)

    def _chosen(self, threshold: Threshold, group: PairGroup) -> np.ndarray:
        """The pairs of a group the threshold holds: measured, and (``tier``) of its tiers."""
        chosen = ~np.isnan(group.values)
        if threshold.tiers:
            if self.fabric is None:
                return np.zeros_like(chosen)
            codes = tier_matrix(group.hosts, self.fabric)[0]
            chosen &= np.isin(codes, [TIERS.index(tier) for tier in threshold.tiers])
        return chosen

    def _work_out(self, threshold: Threshold) -> None:
        """Its findings under each limit on a column and, with a limit on the verdict's counts, its verdict: each
        group read once per column asked (a limit on the kernel's own figure, min_bw_MBps on pairs-bw, reads the
        matrix the verdict reads), judged, and let go before the next is read."""
        keys = self.keys(threshold)
        limits = [limit for limit in threshold.limits if limit.column not in VERDICT_COUNTS]
        counted = len(limits) < len(threshold.limits)
        columns: dict[str | None, list[Limit]] = {None: []} if counted else {}
        for limit in limits:
            own = all(METRICS[kernel][0] == limit.column for _, _, kernel, _, _ in keys)
            columns.setdefault(None if own else limit.column, []).append(limit)
        for limit in limits:
            self._findings[(threshold.index, limit.name)] = []
        verdicts = []
        for column, mine in columns.items():
            for group in self.pairs.groups(keys, column):
                key = (group.run_id, *group.key)
                chosen = self._chosen(threshold, group)
                for limit in mine:
                    found = pair_findings(group, limit, chosen, self.fabric, self.name(key))
                    self._findings[(threshold.index, limit.name)].append(found)
                if column is None and counted:  # only the chosen tiers' pairs are judged
                    judged = (
                        group
                        if not threshold.tiers
                        else replace(group, values=np.where(chosen, group.values, math.nan))
                    )
                    verdicts.append(pairs_verdict([judged], topology=self.fabric))
                del group, chosen
        if counted:
            self._verdicts[threshold.index] = _merged(verdicts) if verdicts else pairs_verdict([], topology=self.fabric)

    def findings(self, threshold: Threshold, limit: Limit) -> list[PairFindings]:
        """Each covered group's findings under a limit on a column."""
        if (threshold.index, limit.name) not in self._findings:
            self._work_out(threshold)
        return self._findings[(threshold.index, limit.name)]

    def verdict(self, threshold: Threshold) -> dict:
        """The all-pairs verdict on the covered groups (their chosen pairs), by the topology where there is one."""
        if threshold.index not in self._verdicts:
            self._work_out(threshold)
        return self._verdicts[threshold.index]


def _judge_count(judging: Judging, verdict: Verdict, threshold: Threshold, limit: Limit, listed: int = LISTED):
    """A limit on the all-pairs verdict's count of slow uplinks (and global links), links or hosts among the
    covered pairs, judged by the run's topology where it has one: one summary line, then one line per slow part
    (hosts under one switch once), at most ``listed`` of each kind and the count of the rest."""
    head = f"{threshold.where}: {threshold.scope}, {limit.name} {_number(limit.value)}"
    keys = judging.keys(threshold)
    what = limit.column.replace("_", " ")
    if not keys or (limit.column == "slow_uplinks" and judging.fabric is None):
        why = "the run has no topology (run --topology)" if keys else "no all-pairs row"
        part = what.removeprefix("slow ").removesuffix("s")
        verdict.add("warn" if threshold.optional else "FAIL", f"{head}: {why}: no {part} was judged")
        return
    found = judging.verdict(threshold)
    entries = found.get(limit.column, [])
    if limit.passes(len(entries)):
        verdict.add("ok", f"{head}: {len(entries):,} {what} ({judged_text(found)})")
        return
    verdict.add("FAIL", f"{head}: {len(entries):,} {what}, expected {limit.expected}", counts=False)
    alone = {kind: [] for kind in VERDICT_COUNTS} | {limit.column: entries}
    for line in summary_lines({**found, **alone}, judging.fabric, listed):
        if line.startswith("#   "):
            line = line.replace("(verdict.json lists every one)", "(check --junit lists every one)")
            verdict.add("FAIL", line.removeprefix("#   ").removeprefix("slow "), indent=True)


def _judge_limit(judging: Judging, verdict: Verdict, threshold: Threshold, limit: Limit, rows: list[dict]) -> None:
    """One summary line for (threshold, limit), then a line per failing row, and for the pair rows a line per
    switch or host most of whose peers fail and per failing pair between the others, at most LISTED of each and
    the count of the rest (the JUnit report lists every one)."""
    head = f"{threshold.where}: {threshold.scope}, {limit.name} {_number(limit.value)}"
    held = [row for row in rows if not math.isnan(_value(row, limit.column))]
    findings = judging.findings(threshold, limit)
    count = len(held) + sum(found.held for found in findings)
    if not count:
        level = "warn" if threshold.optional else "FAIL"
        verdict.add(level, f"{head}: no valid measured row has {limit.column}")
        return
    failing = [row for row in held if not limit.passes(_value(row, limit.column))]
    failing_pairs = sum(found.failing for found in findings)
    if not failing and not failing_pairs:
        key = min if limit.bound == "min" else max
        worst = key([_value(row, limit.column) for row in held] + [f.worst for f in findings if f.held])
        verdict.add("ok", f"{head}: {count:,} rows pass (worst {_number(worst)})")
        return
    verdict.add("FAIL", f"{head}: {len(failing) + failing_pairs:,} of {count:,} rows fail", counts=False)
    for row in failing[:LISTED]:
        verdict.add(
            "FAIL",
            f"{row_name(row)}: {limit.column} {_number(_value(row, limit.column))}, expected {limit.expected}",
            indent=True,
        )
    _more(verdict, len(failing) - LISTED, "failing rows")
    hosts = [line for found in findings for line in found.hosts]
    named = [count for found in findings for count in found.named]
    for line in hosts[:LISTED]:
        verdict.add("FAIL", line, indent=True)
    _more(verdict, sum(named[LISTED:]), "hosts whose pairs fail")
    blocks = [line for found in findings for line in found.blocks]
    for line in blocks[:LISTED]:
        verdict.add("FAIL", line, indent=True)
    _more(verdict, len(blocks) - LISTED, "blocks of failing pairs")
    pairs = [line for found in findings for line in found.pairs[:LISTED]]
    for line in pairs[:LISTED]:
        verdict.add("FAIL", line, indent=True)
    _more(verdict, sum(found.pairs_count for found in findings) - LISTED, "failing pairs")


def _more(verdict: Verdict, count: int, what: str) -> None:
    if count > 0:
        verdict.add(
            "FAIL", f"and {count:,} more {what} (the JUnit report, check --junit, lists every one)", indent=True
        )


def judge(thresholds: list[Threshold], rows: list[dict], fabric: Topology | None = None, pairs=None) -> Verdict:
    """Every threshold against every row it covers; a threshold covering no measured row fails (warns if optional).
    ``fabric``: the run's topology; ``pairs``: the run's all-pairs rows as a PairTable (None: those among ``rows``);
    both for the limits on the pairs and on the all-pairs verdict (VERDICT_COUNTS)."""
    return _judged(thresholds, Judging(rows, fabric, pairs))


def _judged(thresholds: list[Threshold], judging: Judging) -> Verdict:
    verdict = Verdict()
    checked = 0
    for threshold in thresholds:
        covered = [row for row in judging.rows if threshold.covers(row)]
        measured = [row for row in covered if is_measured(row.get("status", ""))]
        keys = judging.keys(threshold)
        if not measured and not keys:
            level = "warn" if threshold.optional else "FAIL"
            why = "no row" if not covered else f"only rows that were not measured ({covered[0].get('status')})"
            verdict.add(level, f"{threshold.where}: {threshold.scope}: covers {why}; nothing was checked")
            continue
        checked += len(measured) + sum(judging.pairs.counts.get(key, 0) for key in keys)
        for row in measured:
            if row.get("validation") == "fail":
                verdict.add("FAIL", f"{row_name(row)}: received data failed validation; its figures do not stand")
        for key in keys:
            failed = judging.pairs.failed.get(key, 0)
            checked += failed
            if failed:
                listed = judging.pairs.failed_pairs[key]
                shown = ", ".join(f"{a} -> {b}" for _, _, a, b in listed[:3]) + (", ..." if failed > 3 else "")
                verdict.add(
                    "FAIL",
                    f"{judging.name(key)}: {failed:,} pairs' received data failed validation ({shown}); their "
                    "figures do not stand",
                )
        valid = [row for row in measured if row.get("validation") != "fail"]
        for limit in threshold.limits:
            if limit.column in VERDICT_COUNTS:
                _judge_count(judging, verdict, threshold, limit)
            else:
                _judge_limit(judging, verdict, threshold, limit, valid)
    verdict.rows_checked = checked
    return verdict


# --- the JUnit report (check --junit) -----------------------------------------------------------------------------


@dataclass
class Case:
    """One JUnit test case: a row a threshold covers, a group of pair rows held to a limit, or the threshold itself
    where no row stands for what it says (it covers no measured row, no row has a limit's column, a limit on the
    all-pairs verdict). ``failures``: one ``what was measured, what was allowed`` each; ``skipped``: why nothing
    was held to the threshold; ``details``: every line under a failure (each failing host and pair)."""

    name: str
    failures: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # the limits failed (max_lat_p50_us), or what else failed
    skipped: str = ""
    details: list[str] = field(default_factory=list)


def junit_cases(threshold: Threshold, rows: list[dict], fabric: Topology | None = None, judging=None) -> list[Case]:
    """The test cases of one threshold: one per measured row it covers, held to each of its limits on a column the
    row has; one per covered group of pair rows and limit (100 million pairs are not 100 million cases), its
    details every failing host, switch and pair; one per limit on the all-pairs verdict, its details every slow
    part; one for what the text verdict fails as a whole (no covered row, no row with a limit's column). An
    optional threshold's cases skip where the verdict only warns. ``judging``: the check's Judging (made from
    ``rows`` and ``fabric`` when None)."""
    judging = judging or Judging(rows, fabric)
    covered = [row for row in judging.rows if threshold.covers(row)]
    measured = [row for row in covered if is_measured(row.get("status", ""))]
    keys = judging.keys(threshold)
    head = threshold.scope

    def unjudged(name: str, why: str, kind: str) -> Case:
        return Case(name, skipped=why) if threshold.optional else Case(name, [why], [kind])

    if not measured and not keys:
        why = "no row" if not covered else f"only rows that were not measured ({covered[0].get('status')})"
        return [unjudged(head, f"{head}: covers {why}; nothing was checked", "no_row")]
    valid = [row for row in measured if row.get("validation") != "fail"]
    found = []
    columns = [limit for limit in threshold.limits if limit.column not in VERDICT_COUNTS]
    for limit in threshold.limits:
        if limit.column in VERDICT_COUNTS:
            verdict = Verdict()
            _judge_count(judging, verdict, threshold, limit, listed=sys.maxsize)  # every slow part under its line
            level = verdict.lines[0].split()[0]
            first, *rest = (line.strip().split(" ", 1)[1].strip() for line in verdict.lines)
            name = f"{head}: {limit.name}"
            if level == "warn":
                found.append(Case(name, skipped=first))
            else:
                found.append(Case(name, [first] if level == "FAIL" else [], [limit.name], details=rest))
        elif not any(not math.isnan(_value(row, limit.column)) for row in valid) and not any(
            f.held for f in judging.findings(threshold, limit)
        ):
            found.append(unjudged(f"{head}: {limit.column}", f"no valid measured row has {limit.column}", limit.name))
    for key in keys:
        failed = judging.pairs.failed.get(key, 0)
        if failed:
            lines = [
                f"{pair_name(key[1:], *ends)}: received data failed validation"
                for ends in judging.pairs.failed_pairs[key]
            ]
            what = f"{judging.name(key)}: {failed:,} pairs' received data failed validation"
            found.append(Case(f"{judging.name(key)}: validation", [what], ["validation"], details=lines[:JUNIT_LINES]))
    for limit in columns:
        for findings in judging.findings(threshold, limit):
            name = f"{judging.name(findings.key)}: {limit.name}"
            if not findings.held:
                continue
            if findings.failing:
                what = f"{name}: {findings.failing:,} of {findings.held:,} pairs fail, expected {limit.expected}"
                details = findings.hosts + findings.blocks + findings.pairs
                found.append(Case(name, [what], [limit.name], details=details[:JUNIT_LINES]))
            else:
                found.append(Case(name))
    for row in measured:
        name = row_name(row)
        case = Case(name)
        if row.get("validation") == "fail":
            case.failures.append(f"{name}: received data failed validation; its figures do not stand")
            case.kinds.append("validation")
        held = [limit for limit in columns if not math.isnan(_value(row, limit.column))]
        for limit in held:
            value = _value(row, limit.column)
            if not limit.passes(value):
                case.failures.append(f"{name}: {limit.column} {_number(value)}, expected {limit.expected}")
                case.kinds.append(limit.name)
        if not held and not case.failures:
            case.skipped = f"{name}: has no {', '.join(dict.fromkeys(limit.column for limit in columns))}"
        found.append(case)
    return found


def write_junit(
    path: str, thresholds: list[Threshold], rows: list[dict], fabric, source: str, run_code: int, judging=None
) -> None:
    """The JUnit XML report of a check: a test suite per threshold, a test case per row it covers and per group of
    pair rows and limit (``junit_cases``), a failure's message saying what (link, kernel, size) and its measured and
    allowed figures. What comes from the thresholds file or the table passes ``printable``: XML 1.0 cannot hold
    most control characters. ``judging``: the check's Judging, whose findings the console's lines came from."""
    from junitparser import Failure, JUnitXml, Skipped, TestCase, TestSuite

    judging = judging or Judging(rows, fabric)
    report = JUnitXml("fabricbench check")
    groups = []
    for threshold in thresholds:
        limits = ", ".join(f"{limit.name} {limit.expected}" for limit in threshold.limits)
        cases = junit_cases(threshold, rows, fabric, judging)
        groups.append((threshold.where, f"{threshold.where}: {threshold.scope}; {limits}", cases))
    if run_code:
        groups.append(("fabricbench run", "", [Case("the run", [f"the run exited {run_code}"], ["exit_status"])]))
    for name, said, cases in groups:
        suite = TestSuite(printable(name, LINE))
        suite.add_property("thresholds", printable(source, LINE))  # properties come before the cases
        tests = []
        for case in cases:
            test = TestCase(printable(case.name, LINE), classname=printable(f"fabricbench check.{name}", LINE))
            if case.failures:
                failure = Failure(printable("; ".join(case.failures), LINE), ",".join(case.kinds))
                failure.text = printable_lines([*case.failures, *case.details, *([said] if said else [])])
                test.result = [failure]
            elif case.skipped:
                test.result = [Skipped(printable(case.skipped, LINE))]
            tests.append(test)
        suite.add_testcases(tests)  # counts once, not per case
        report.add_testsuite(suite)
    report.update_statistics()
    try:
        report.write(path, pretty=True)
    except OSError as exc:
        raise UsageError(f"cannot write the JUnit report {path!r}: {exc.strerror or exc}") from None


def junit_path(path: str) -> str:
    """``--junit FILE`` checked before anything runs: a file in a folder that exists, not a folder itself."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"--junit {path!r} is a folder; give a file to write the JUnit report to")
    if not target.parent.is_dir():
        raise UsageError(f"--junit {path!r}: no folder {str(target.parent)!r} to write the JUnit report in")
    if not os.access(target.parent, os.W_OK):
        raise UsageError(f"--junit {path!r}: the folder {str(target.parent)!r} is not writable")
    return path


def summary(verdict: Verdict, thresholds: int) -> str:
    outcome = "FAIL" if verdict.failures or not verdict.rows_checked else "pass"
    counts = f"{verdict.rows_checked} rows checked against {thresholds} thresholds"
    if verdict.failures:
        counts = f"{verdict.failures} failing lines; {counts}"
    if verdict.warnings:
        counts += f"; {verdict.warnings} warnings"
    if not verdict.rows_checked:
        counts += ": nothing was checked"
    return f"check: {outcome}: {counts}"


# --- the command ---------------------------------------------------------------------------------------------------


def _read(path: str) -> tuple[list[dict], Topology | None, object]:
    """A finished run's rows but its all-pairs ones, read and migrated as compare reads them; the topology its
    metadata keeps; and its all-pairs rows as matrices (load.read_pairs: a group at a time, never as rows)."""
    from fabricbench.analysis import load

    frame, metadata = load.read_run(path, pairs=False)
    try:
        fabric = Topology.from_metadata(metadata.get("topology"))
    except UsageError as exc:
        raise UsageError(f"{path!r}: {exc}") from None
    return frame.to_dict("records"), fabric, load.read_pairs(path).table


def _start_run(words: list[str], run_out: RunOut) -> tuple[str, int]:
    """Run ``fabricbench run WORDS`` as a child; the folder it wrote and its exit code."""
    from fabricbench.launch import launcher as launch
    from fabricbench.measure.results import RUN_ID_VAR, new_run_id

    if launch.launcher() is not None:
        raise UsageError(
            "check -- run starts its own ranks; under a launcher run `fabricbench run --out DIR`, "
            "then `fabricbench check THRESHOLDS DIR`"
        )
    out = run_out(words)  # bad run options: one line, exit 2, now
    env = dict(os.environ)
    if not out:
        run_id = new_run_id()
        env[RUN_ID_VAR] = run_id  # the run names itself, and its folder, by this id
        out = os.path.join("results", run_id)
    code = subprocess.run([sys.executable, "-m", "fabricbench", "run", *words], env=env).returncode
    return out, code


def check(thresholds_path: str, target: list[str], run_out: RunOut, junit: str | None = None) -> int:
    """``check THRESHOLDS RUN`` or ``check THRESHOLDS -- run ARGS``: print the verdict; 0 pass, 1 fail.

    ``run_out`` reads ``run``'s own words as ``run`` does (the command line's parser, which lives above this
    module) and returns their --out, or None; it raises UsageError for words run would refuse. ``junit``: a file
    to write the verdict to as a JUnit XML report as well (``write_junit``)."""
    words = target[1:] if target[:1] == ["--"] else target
    if not words:
        raise UsageError("check needs a finished run's folder, or -- run ARGS to start one")
    if junit is not None:
        junit_path(junit)  # a bad path stops check before any run starts
    thresholds = read_thresholds(thresholds_path)  # a malformed file stops check before any run starts
    run_code = 0
    if words[0] == "run" and (len(words) > 1 or target[:1] == ["--"]):
        run, run_code = _start_run(words[1:], run_out)
        if run_code < 0:  # killed by a signal: the shell's 128 + N
            return 128 - run_code
        if run_code == 2 or run_code in STOPPED:  # bad input, or stopped: nothing to judge
            return run_code
        if not Path(run).exists():
            print(f"check: FAIL: the run exited {run_code} and left no table in {run}")
            return 1
    elif len(words) == 1:
        run = words[0]
    else:
        raise UsageError(f"check takes one run folder, or -- run ARGS; got {' '.join(words)!r}")
    rows, fabric, pairs = _read(run)
    judging = Judging(rows, fabric, pairs)
    verdict = _judged(thresholds, judging)
    if run_code:
        verdict.add("FAIL", f"the run exited {run_code}")
    if junit is not None:  # first: the report stands even when the console is gone (check ... | head)
        write_junit(junit, thresholds, rows, fabric, thresholds_path, run_code, judging)
    # The lines quote the thresholds file's names and the table's hosts and labels.
    count = len(rows) + sum(pairs.counts.values()) + sum(map(len, pairs.failed.values()))
    print(printable_lines([f"check: {thresholds_path} against {run} ({count:,} rows)", *verdict.lines]))
    print(summary(verdict, len(thresholds)))
    return 1 if verdict.failures or not verdict.rows_checked else 0

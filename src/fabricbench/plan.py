"""The plan: what to run, built once from the command line and shared by all ranks.

A plan is plain data so that it can travel between ranks as JSON.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from fabricbench.errors import UsageError
from fabricbench.kernels import Kernel, get_kernel

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*$")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str) -> int:
    """Bytes from '64', '8K', '4MiB' (binary multiples, as message sizes are)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise UsageError(f"bad message size {text!r}: expected a byte count such as 8, 64K or 4M")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def parse_size_range(text: str) -> tuple[int, int]:
    """OSU's ``-m [min:]max``."""
    lo_text, sep, hi_text = text.partition(":")
    if not sep:
        lo_text, hi_text = "", lo_text
    lo = parse_size(lo_text) if lo_text.strip() else None
    hi = parse_size(hi_text)
    if lo is not None and lo > hi:
        raise UsageError(f"bad size range {text!r}: minimum {lo} is above maximum {hi}")
    return (lo if lo is not None else -1), hi


def sizes_between(lo: int, hi: int) -> list[int]:
    """OSU's sweep: start at lo, then double (0 is followed by 1)."""
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size = size * 2 if size else 1
    return sizes


@dataclass
class Step:
    """One (transport, kernel) sweep."""

    transport: str
    kernel: str
    sizes: list[int]

    @property
    def spec(self) -> Kernel:
        return get_kernel(self.kernel)


@dataclass
class Plan:
    steps: list[Step]
    iterations: int | None = None  # None: OSU's default for the kernel and size
    warmup: int | None = None
    window: int = 64
    max_time: float | None = None  # seconds per size; lowers the iteration count
    validate: bool = False
    timeout: float = 120.0  # seconds without progress before a rank gives up
    out_dir: str = ""
    run_id: str = ""
    label: str = ""
    output_format: str = "table"
    progress: bool = False
    transport_options: dict = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        raw = json.loads(data)
        raw["steps"] = [Step(**s) for s in raw["steps"]]
        return cls(**raw)

    def counts(self, kernel: Kernel, size: int) -> tuple[int, int]:
        """(iterations, warm-up) before any time budget is applied."""
        iterations, warmup = kernel.defaults(size)
        return (
            iterations if self.iterations is None else self.iterations,
            warmup if self.warmup is None else self.warmup,
        )


def kernel_sizes(kernel: Kernel, size_range: tuple[int, int] | None) -> list[int]:
    """The sizes a kernel sweeps: its OSU default, or -m clipped to what it allows."""
    if not kernel.moves_data:
        return [0]
    if size_range is None:
        return sizes_between(kernel.min_size, kernel.max_size)
    lo, hi = size_range
    if lo < 0:
        lo = kernel.min_size
    return sizes_between(max(lo, 0), hi)

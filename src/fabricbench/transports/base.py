"""The contract between the runner and a transport.

A transport connects the ranks and turns (kernel, size) into a Case. A Case
owns its buffers and its timed loop and nothing else: the runner does warm-up,
barriers, time budgets, validation and statistics for every transport alike.
"""

from __future__ import annotations

import numpy as np

from fabricbench.buffers import POISON
from fabricbench.kernels import Kernel

EMPTY = np.empty(0, dtype=np.uint8)


class Case:
    """One kernel at one message size on this rank, buffers written, ready to time."""

    initiator: bool = False  # this rank's samples speak for the row
    method: str = ""  # how the loop is built; recorded in the row
    window: int = 0  # messages per timed iteration for windowed kernels
    pairs: int = 1

    def __init__(self) -> None:
        self.received: np.ndarray = EMPTY  # uint8 view of what this rank received

    def run(self, iterations: int, times: memoryview) -> None:
        """Run ``iterations`` iterations; write each one's duration in ns to ``times[i]``."""
        raise NotImplementedError

    def expected(self) -> np.ndarray:
        """What ``received`` must hold after one iteration (uint8 view)."""
        return EMPTY

    def poison(self) -> None:
        """Overwrite what was received so that validation sees only fresh data."""
        self.received[:] = POISON

    def close(self) -> None:
        """Release what the case allocated or registered."""


class Transport:
    """Connects ranks and builds cases. Subclasses set ``name`` and ``kernels``."""

    name = ""
    kernels: frozenset[str] = frozenset()
    buffer = "host"
    self_timed = False  # a reference tool that times itself: the runner takes its rows from reference_row()

    @classmethod
    def preflight(cls) -> None:
        """Raise a one-line FabricbenchError before any rank starts when the transport cannot work here."""

    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this transport cannot run the kernel, or None when it can."""
        if kernel.name not in self.kernels:
            return f"{self.name} has no {kernel.name} kernel"
        return None

    def case(self, kernel: Kernel, size: int) -> Case:
        raise NotImplementedError

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """A self-timed transport's row for one size, on rank 0 (None elsewhere); every rank calls it."""
        raise NotImplementedError

    def metadata(self) -> dict:
        return {}

    def close(self) -> None:
        """Release connections and devices."""

    def release(self) -> None:
        """On the error path, just before the run is aborted: free local resources, talking to no peer."""

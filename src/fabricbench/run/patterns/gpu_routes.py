"""The GPU-routes pattern (cuda-copy's ``peer``): a phase and a row per ordered pair of GPUs."""

from __future__ import annotations

import socket

from fabricbench.run.patterns.plain import Pattern, Phase, Timed
from fabricbench.transports.base import Case
from fabricbench.transports.capabilities import Routes


class GpuRoutes(Pattern):
    """Every ordered pair of the GPUs on rank 0's host (its transport's ``routes``, capabilities.Routes; cuda-copy
    ``peer``): a phase per route, timed as any copy, one row per route named by its GPUs."""

    columns = ("src_gpu", "dst_gpu", "src_host", "dst_host")
    capability = Routes

    def phases(self) -> list[Phase]:
        self.refuse_lacking()
        return [Phase(self.what, route=route) for route in self.transport.routes(self.kernel)]

    def case(self, phase: Phase) -> Case:
        self.transport.route = phase.route
        try:
            return self.transport.case(self.kernel, self.size)
        finally:
            self.transport.route = None

    def row(self, timed: Timed, warmup: int) -> dict:
        host = socket.gethostname()
        row = super().row(timed, warmup)
        row.update(zip(self.columns, (*timed.phase.route, host, host), strict=True))
        return row

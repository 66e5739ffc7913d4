"""The fan pattern (bw-fan-in, bw-fan-out: OSU's osu_bw_fan_in and osu_bw_fan_out): the ranks grouped by host,
each of the parent host's ranks exchanging windows with its counterpart on every other host at once
(measure.fan); one row per size from the parents' samples."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.control import rank_hosts
from fabricbench.errors import Unsupported
from fabricbench.measure.fan import FanLayout, fan_layout
from fabricbench.measure.rows import bound_rate, measured_row, refuse_impossible
from fabricbench.run.patterns.plain import Pattern, Phase, Timed
from fabricbench.transports.base import Case
from fabricbench.transports.capabilities import FanCases


class Fan(Pattern):
    """One phase: every rank's case from its transport's ``fan_case`` (capabilities.FanCases), the parents timing.

    A parent's iteration moves size x window bytes to or from each of the other hosts, so its rate counts them
    all; the row's bw_MBps sums the parents' rates (osu_mbw_mr's aggregate; OSU's own figure divides the same bytes
    by the parents' mean time). All of it crosses the parent host's link, so a figure above one link is refused.
    """

    capability = FanCases

    def __init__(self, ctrl, transport, kernel, size, plan):
        super().__init__(ctrl, transport, kernel, size, plan)
        self.layout: FanLayout | None = None
        self.hosts: list[str] = []

    def phases(self) -> list[Phase]:
        """Collective: every rank's host; Unsupported on every rank alike where the hosts give no layout."""
        self.refuse_lacking()
        hosts = rank_hosts(self.ctrl)
        found = fan_layout(hosts)
        if isinstance(found, str):
            raise Unsupported(found)
        self.layout, self.hosts = found, hosts
        return [Phase(self.what)]

    def case(self, phase: Phase) -> Case:
        role = self.layout.roles[self.ctrl.rank]
        return self.transport.fan_case(self.kernel, self.size, role.parent, role.peers)

    def row(self, timed: Timed, warmup: int) -> dict:
        layout = self.layout
        # A parent's iteration: a window with each child host, as a window of as many directions.
        kernel = replace(self.kernel, directions=layout.children)
        name, buffer = self.transport.name, self.transport.buffer
        case, samples = timed.case, timed.samples
        row = measured_row(self.plan, name, kernel, self.size, case, warmup, samples, timed.gathered, buffer)
        row["kernel"] = self.kernel.name
        refuse_impossible(row, 1, 1, bound_rate(case), getattr(case, "link_label", ""))
        row.pop("link_pct", None)  # the parent's bytes leave for several hosts: no one link's share to give
        # The pairs exchanging at once: each parent rank with its counterpart on every other host.
        row["pairs"] = layout.ppn * layout.children
        shape = f"{layout.nodes} hosts x {layout.ppn} ranks, the parent {self.hosts[0]}"
        row["note"] = "; ".join(part for part in (shape, row.get("note") or "") if part)
        return row

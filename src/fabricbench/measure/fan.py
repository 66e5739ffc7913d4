"""The fan kernels' pairing (bw-fan-in, bw-fan-out: OSU's congestion programs osu_bw_fan_in and osu_bw_fan_out).

Ranks are grouped into nodes by the host name each reports; every node must hold the same number of ranks (ppn).
Within a node, ranks are numbered by rank order (local rank 0, 1, ...). One node is the parent: rank 0's, so that
rank 0 times the row as in every other kernel (OSU takes the host name first in sort order; the pairing is the
same). Parent local rank l exchanges with local rank l of every other node: fan-in, each of those sends it a
window; fan-out, it sends a window to each. Pure: no ranks, no MPI.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FanRole:
    """One rank's part: a parent (its samples speak for the row) with one child per other node, or a child with
    its one parent."""

    parent: bool
    peers: tuple[int, ...]


@dataclass(frozen=True)
class FanLayout:
    nodes: int  # hosts, the parent's among them
    ppn: int  # ranks per host
    roles: tuple[FanRole, ...]  # by rank

    @property
    def children(self) -> int:
        """The nodes that send to (fan-in) or receive from (fan-out) the parent."""
        return self.nodes - 1


def fan_layout(hosts: list[str]) -> FanLayout | str:
    """The layout for ranks on ``hosts`` (rank r on hosts[r]), or why there is none, in a row's words."""
    if not hosts:
        return "no ranks"
    members: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        members.setdefault(host, []).append(rank)
    if len(members) < 2:
        return f"the fan kernels need ranks on 2 or more hosts; all {len(hosts)} ranks are on {hosts[0]}"
    counts = {host: len(ranks) for host, ranks in members.items()}
    if len(set(counts.values())) > 1:
        found = ", ".join(f"{host}: {n}" for host, n in sorted(counts.items()))
        return f"the fan kernels need the same number of ranks on every host, got {found}"
    parent_host = hosts[0]
    others = sorted(host for host in members if host != parent_host)
    ppn = counts[parent_host]
    roles: list[FanRole | None] = [None] * len(hosts)
    for local, parent in enumerate(members[parent_host]):
        children = tuple(members[host][local] for host in others)
        roles[parent] = FanRole(True, children)
        for child in children:
            roles[child] = FanRole(False, (parent,))
    return FanLayout(len(members), ppn, tuple(roles))

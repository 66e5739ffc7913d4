"""Where each host hangs in the fabric: its switch, its group, and how many switch links lie between two hosts.

Three sources say it, each read into the same ``Topology``:

- Slurm's ``topology.conf`` (``topology/tree``): ``SwitchName=NAME Nodes=HOSTLIST`` for a leaf switch,
  ``SwitchName=NAME Switches=SWITCHLIST`` for one above others; ``scontrol show topology`` prints the same
  ``key=value`` lines (with ``Level`` and ``LinkSpeed`` beside them), so one reader takes both;
- a small TOML map for sites without Slurm: ``[switches.NAME]`` tables with ``hosts = "HOSTLIST"`` and an
  optional ``group = "NAME"`` (a dragonfly's group; a switch without one is its own group).

Host lists are Slurm's hostlist expressions (``node[01-16]``), expanded by ClusterShell's NodeSet.

A pair of hosts is in one of four tiers (``TIERS``): the same host, the same switch, another switch of the same
group, or another group. In a tree the group of a leaf switch is its ancestor just below the root (a pod of a
three-level fat-tree); in a two-level tree (leaf-spine) every leaf hangs off the root itself and all leaves are
one group, so their pairs are ``cross-switch``. ``hops`` counts the switch-to-switch links a message crosses on
the shortest route: 0 within a switch, twice the levels up to the lowest common switch in a tree, and in a
TOML map 1 within a group (a dragonfly's switches are linked all-to-all) and 3 across groups (a local hop to the
switch holding the global link, the global link, a local hop: the minimal route's bound). Pure but for
``from_slurm_job``, which asks ``scontrol`` inside a Slurm job.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fabricbench.errors import UsageError

SAME_HOST, SAME_SWITCH, CROSS_SWITCH, CROSS_GROUP = "same-host", "same-switch", "cross-switch", "cross-group"
TIERS = (SAME_HOST, SAME_SWITCH, CROSS_SWITCH, CROSS_GROUP)  # nearest first
TOML_CROSS_GROUP_HOPS = 3
MAX_SWITCHES = 100_000  # a topology file past this is refused: no real fabric has more switches
MAX_HOSTS = 1_000_000
MAX_BYTES = 16 * 1024 * 1024  # the most of a topology file read
SCONTROL_TIMEOUT_S = 30
SCONTROL_SOURCE = "scontrol show topology"
_KEY_VALUE = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class Topology:
    """Hosts to switches and groups, with each switch's parent (a tree) or none (a TOML map); ``source`` says
    where it came from, for the metadata."""

    source: str
    switch: dict[str, str]  # host -> the switch it hangs off
    group: dict[str, str]  # switch -> its group
    parent: dict[str, str] = field(default_factory=dict)  # switch -> the switch above it (tree only)

    def switch_of(self, host: str) -> str:
        try:
            return self.switch[host]
        except KeyError:
            raise UsageError(f"host {host!r} is not in the topology ({self.source})") from None

    def group_of(self, host: str) -> str:
        return self.group[self.switch_of(host)]

    def check_hosts(self, hosts) -> None:
        """Refuse, in one line, hosts the topology does not place."""
        unknown = sorted({host for host in hosts if host not in self.switch})
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise UsageError(f"the topology ({self.source}) does not place host(s) {shown}")

    def tier(self, a: str, b: str) -> str:
        if a == b:
            return SAME_HOST
        switch_a, switch_b = self.switch_of(a), self.switch_of(b)
        if switch_a == switch_b:
            return SAME_SWITCH
        return CROSS_SWITCH if self.group[switch_a] == self.group[switch_b] else CROSS_GROUP

    def hops(self, a: str, b: str) -> int | None:
        """Switch-to-switch links on the shortest route from a to b; None where no route joins them (two trees)."""
        switch_a, switch_b = self.switch_of(a), self.switch_of(b)
        if switch_a == switch_b:
            return 0
        if not self.parent:
            return 1 if self.group[switch_a] == self.group[switch_b] else TOML_CROSS_GROUP_HOPS
        up_a, up_b = self._ancestors(switch_a), self._ancestors(switch_b)
        common = next((s for s in up_a if s in up_b), None)
        return None if common is None else up_a.index(common) + up_b.index(common)

    def _ancestors(self, switch: str) -> list[str]:
        chain = [switch]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain

    def to_dict(self) -> dict:
        """The plan's JSON form (``from_dict`` reads it back, checked)."""
        return {"source": self.source, "switch": self.switch, "group": self.group, "parent": self.parent}

    @classmethod
    def from_dict(cls, data: object) -> Topology:
        """A topology from a plan's JSON, which may have come over the network: every field checked, one line."""

        def names(value: object, what: str) -> dict[str, str]:
            if (
                not isinstance(value, dict)
                or len(value) > MAX_HOSTS
                or not all(isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items())
            ):
                raise UsageError(f"the plan's topology has a bad {what} map")
            return value

        if not isinstance(data, dict) or set(data) != {"source", "switch", "group", "parent"}:
            raise UsageError("the plan's topology is not a topology")
        source = data["source"]
        if not isinstance(source, str):
            raise UsageError("the plan's topology has a bad source")
        switch, group, parent = (names(data[key], key) for key in ("switch", "group", "parent"))
        missing = sorted(set(switch.values()) - set(group))
        if missing:
            raise UsageError(f"the plan's topology places hosts under switch {missing[0]!r}, which has no group")
        return cls(source, switch, group, parent)

    @classmethod
    def from_metadata(cls, data: object) -> Topology | None:
        """The topology a run's metadata.json keeps (``metadata``), read back for the hosts it places; None for a
        flat fabric (no topology key, or null). A malformed one raises UsageError, one line."""
        if data is None:
            return None
        hosts = data.get("hosts") if isinstance(data, dict) else None
        if not isinstance(hosts, dict) or not all(isinstance(place, dict) for place in hosts.values()):
            raise UsageError("the metadata's topology is not a topology")
        switch = {host: place.get("switch") for host, place in hosts.items()}
        group = {place.get("switch"): place.get("group") for place in hosts.values()}
        if not all(isinstance(name, str) for name in group):
            raise UsageError("the metadata's topology has a bad switch map")
        plan = {"source": data.get("source"), "switch": switch, "group": group, "parent": data.get("parents", {})}
        try:
            return cls.from_dict(plan)
        except UsageError as exc:
            raise UsageError(str(exc).replace("the plan's", "the metadata's")) from None

    def metadata(self, hosts=None) -> dict:
        """What metadata.json keeps: the source, and each (given) host's switch and group."""
        chosen = sorted(set(hosts)) if hosts is not None else sorted(self.switch)
        return {
            "source": self.source,
            "hosts": {host: {"switch": self.switch_of(host), "group": self.group_of(host)} for host in chosen},
            "parents": dict(sorted(self.parent.items())),
        }


def _nodeset(expression: str, where: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # only where a topology is read

    try:
        return list(NodeSet(expression))
    except (NodeSetException, ValueError, OverflowError) as exc:
        raise UsageError(f"{where}: bad host list {expression!r}: {exc}") from None


def parse_slurm(text: str, source: str) -> Topology:
    """Slurm's topology.conf, or ``scontrol show topology``'s output (``source`` names it in every error)."""
    nodes: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    line_of: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source} line {number}"
        pairs = _KEY_VALUE.findall(line)
        if not pairs or " ".join(f"{k}={v}" for k, v in pairs) != " ".join(line.split()):
            raise UsageError(f"{where}: not a list of key=value words: {line[:80]!r}")
        values = {key.lower(): value for key, value in pairs}
        name = values.get("switchname")
        if not name:
            raise UsageError(f"{where}: no SwitchName=")
        if name in line_of:
            raise UsageError(f"{where}: switch {name!r} is defined twice (first on line {line_of[name]})")
        if len(line_of) >= MAX_SWITCHES:
            raise UsageError(f"{where}: more than {MAX_SWITCHES} switches")
        line_of[name] = number
        if values.get("nodes"):
            nodes[name] = _nodeset(values["nodes"], where)
        if values.get("switches"):
            children[name] = _nodeset(values["switches"], where)
        if name not in nodes and name not in children:
            raise UsageError(f"{where}: switch {name!r} has neither Nodes= nor Switches=")
    if not line_of:
        raise UsageError(f"{source}: no switch is defined")
    parent: dict[str, str] = {}
    for name, below in children.items():
        for child in below:
            where = f"{source} line {line_of[name]}"
            if child not in line_of:
                raise UsageError(f"{where}: switch {name!r} names switch {child!r}, which is not defined")
            if child in parent:
                raise UsageError(f"{where}: switch {child!r} is below both {parent[child]!r} and {name!r}")
            parent[child] = name
    for name in line_of:  # a cycle: following parents comes back to the start
        seen, at = {name}, name
        while at in parent:
            at = parent[at]
            if at in seen:
                raise UsageError(f"{source} line {line_of[name]}: switch {name!r} is in a cycle of switches")
            seen.add(at)
    switch: dict[str, str] = {}
    for name, hosts in nodes.items():
        for host in hosts:
            if host in switch:
                raise UsageError(
                    f"{source} line {line_of[name]}: host {host!r} hangs off both {switch[host]!r} and {name!r}"
                )
            switch[host] = name
    group = {}
    for name in line_of:
        chain = [name]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        # the ancestor just below the root; a leaf right under the root (two levels): the root, one group for all
        group[name] = chain[-2] if len(chain) > 2 else chain[-1]
    return Topology(source, switch, group, parent)


def parse_toml(text: str, source: str) -> Topology:
    """The TOML map: ``[switches.NAME]`` with ``hosts = "HOSTLIST"`` and an optional ``group``."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: {exc}") from None
    switches = data.get("switches")
    extra = sorted(set(data) - {"switches"})
    if extra:
        raise UsageError(f"{source}: unknown table or key {extra[0]!r} (a map has only [switches.NAME] tables)")
    if not isinstance(switches, dict) or not switches:
        raise UsageError(f"{source}: no [switches.NAME] table")
    if len(switches) > MAX_SWITCHES:
        raise UsageError(f"{source}: more than {MAX_SWITCHES} switches")
    switch: dict[str, str] = {}
    group: dict[str, str] = {}
    for name, table in switches.items():
        where = f"{source} [switches.{name}]"
        if not isinstance(table, dict):
            raise UsageError(f"{where}: not a table")
        unknown = sorted(set(table) - {"hosts", "group"})
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (keys: hosts, group)")
        hosts, in_group = table.get("hosts"), table.get("group", name)
        if not isinstance(hosts, str) or not hosts:
            raise UsageError(f'{where}: hosts must be a host list such as "node[1-4]"')
        if not isinstance(in_group, str) or not in_group:
            raise UsageError(f"{where}: group must be a name")
        group[name] = in_group
        for host in _nodeset(hosts, where):
            if host in switch:
                raise UsageError(f"{where}: host {host!r} also hangs off {switch[host]!r}")
            switch[host] = name
    return Topology(source, switch, group)


def read_topology(path: str) -> Topology:
    """A topology file: TOML where it ends in .toml, Slurm's topology.conf format otherwise."""
    file = Path(path)
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read topology file {path!r}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(f"topology file {path!r} is larger than {MAX_BYTES // 2**20} MiB")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise UsageError(f"topology file {path!r} is not UTF-8 text") from None
    if file.suffix == ".toml":
        return parse_toml(text, path)
    return parse_slurm(text, path)


def from_slurm_job() -> Topology | None:
    """Inside a Slurm job whose cluster runs ``topology/tree``, what ``scontrol show topology`` says; None outside
    a job, without scontrol, or where it prints no switch (another topology plugin)."""
    if not os.environ.get("SLURM_JOB_ID"):
        return None
    try:
        done = subprocess.run(
            ["scontrol", "show", "topology"], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or "SwitchName=" not in done.stdout:
        return None
    return parse_slurm(done.stdout, SCONTROL_SOURCE)

"""The topology readers: Slurm's topology.conf (and scontrol's lines), the TOML map, tiers and hop counts."""

from __future__ import annotations

import json

import pytest

from fabricbench.errors import UsageError
from fabricbench.measure.topology import (
    CROSS_GROUP,
    CROSS_SWITCH,
    SAME_HOST,
    SAME_SWITCH,
    Topology,
    parse_slurm,
    parse_toml,
    read_topology,
)

LEAF_SPINE = """\
# two leaves of three hosts under one spine
SwitchName=leaf1 Nodes=fbx[1-3]
SwitchName=leaf2 Nodes=fbx[4-6]
SwitchName=spine Switches=leaf[1-2]
"""

FAT_TREE = """\
SwitchName=l1 Nodes=n[01-02]
SwitchName=l2 Nodes=n[03-04]
SwitchName=l3 Nodes=n[05-06]
SwitchName=pod1 Switches=l[1-2]
SwitchName=pod2 Switches=l3
SwitchName=core Switches=pod[1-2]
"""

SCONTROL = """\
SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=fbx[1-3]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=fbx[4-6]
SwitchName=spine Level=1 LinkSpeed=1 Switches=leaf[1-2]
"""

DRAGONFLY = """\
[switches.g1s1]
group = "g1"
hosts = "fbd[1-2]"
[switches.g1s2]
group = "g1"
hosts = "fbd[3-4]"
[switches.g2s1]
group = "g2"
hosts = "fbd[5-6]"
"""


def test_a_leaf_spine_tree_gives_switches_one_group_and_two_hops_across():
    topo = parse_slurm(LEAF_SPINE, "topology.conf")
    assert topo.switch_of("fbx2") == "leaf1" and topo.switch_of("fbx5") == "leaf2"
    assert topo.group_of("fbx1") == topo.group_of("fbx6") == "spine"
    assert topo.tier("fbx1", "fbx1") == SAME_HOST
    assert topo.tier("fbx1", "fbx3") == SAME_SWITCH and topo.hops("fbx1", "fbx3") == 0
    assert topo.tier("fbx1", "fbx4") == CROSS_SWITCH and topo.hops("fbx1", "fbx4") == 2


def test_scontrols_lines_read_as_the_file_does():
    assert parse_slurm(SCONTROL, "scontrol show topology").switch == parse_slurm(LEAF_SPINE, "f").switch
    assert parse_slurm(SCONTROL, "s").parent == parse_slurm(LEAF_SPINE, "f").parent


def test_a_three_level_tree_groups_by_pod():
    topo = parse_slurm(FAT_TREE, "fat")
    assert topo.tier("n01", "n03") == CROSS_SWITCH and topo.hops("n01", "n03") == 2
    assert topo.tier("n01", "n05") == CROSS_GROUP and topo.hops("n01", "n05") == 4
    assert topo.metadata(["n01"])["hosts"] == {"n01": {"switch": "l1", "group": "pod1"}}


def test_a_toml_dragonfly_hops_one_within_a_group_and_three_across():
    topo = parse_toml(DRAGONFLY, "map.toml")
    assert topo.tier("fbd1", "fbd3") == CROSS_SWITCH and topo.hops("fbd1", "fbd3") == 1
    assert topo.tier("fbd1", "fbd5") == CROSS_GROUP and topo.hops("fbd1", "fbd5") == 3
    assert parse_toml('[switches.a]\nhosts = "x[1-2]"\n', "m").group == {"a": "a"}


@pytest.mark.parametrize(
    "text, words",
    [
        ("SwitchName=a Nodes=x[1-\n", "line 1: bad host list"),
        ("SwitchName=a Nodes=x1\nNodes=x2\n", "line 2: no SwitchName="),
        ("SwitchName=a Nodes=x1\nSwitchName=a Nodes=x2\n", "line 2: switch 'a' is defined twice"),
        ("SwitchName=a\n", "line 1: switch 'a' has neither"),
        ("SwitchName=a Nodes=x1\nSwitchName=b Switches=c\n", "line 2: switch 'b' names switch 'c'"),
        ("SwitchName=a Switches=b\nSwitchName=b Switches=a\n", "is in a cycle of switches"),
        ("SwitchName=a Nodes=x1\nSwitchName=b Nodes=x1\n", "line 2: host 'x1' hangs off both 'a' and 'b'"),
        ("SwitchName=a Nodes=x1 junk\n", "line 1: not a list of key=value words"),
        ("# nothing\n", "no switch is defined"),
    ],
)
def test_a_bad_topology_conf_is_one_line_naming_the_line(text, words):
    with pytest.raises(UsageError) as caught:
        parse_slurm(text, "topo.conf")
    message = str(caught.value)
    assert words in message and message.startswith("topo.conf") and "\n" not in message


@pytest.mark.parametrize(
    "text, words",
    [
        ("[switches.a]\nhosts = 3\n", "[switches.a]: hosts must be a host list"),
        ('[switches.a]\nhosts = "x1"\nspeed = 1\n', "unknown key 'speed'"),
        ("[links]\n", "unknown table or key 'links'"),
        ("[switches.a\n", "map.toml:"),
        ('[switches.a]\nhosts = "x1"\n[switches.b]\nhosts = "x1"\n', "host 'x1' also hangs off 'a'"),
    ],
)
def test_a_bad_toml_map_is_one_line(text, words):
    with pytest.raises(UsageError) as caught:
        parse_toml(text, "map.toml")
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_host_the_map_does_not_know_is_named(tmp_path):
    path = tmp_path / "topology.conf"
    path.write_text(LEAF_SPINE)
    topo = read_topology(str(path))
    topo.check_hosts(["fbx1", "fbx6"])
    with pytest.raises(UsageError, match=r"does not place host\(s\) elsewhere"):
        topo.check_hosts(["fbx1", "elsewhere"])
    with pytest.raises(UsageError, match="cannot read topology file"):
        read_topology(str(tmp_path / "missing.conf"))


def test_the_plans_json_form_reads_back_and_a_bad_one_is_one_line():
    topo = parse_slurm(LEAF_SPINE, "topology.conf")
    again = Topology.from_dict(json.loads(json.dumps(topo.to_dict())))
    assert again == topo and again.hops("fbx1", "fbx4") == 2
    for bad in (None, {}, {**topo.to_dict(), "switch": {"fbx1": 3}}, {**topo.to_dict(), "group": {}}):
        with pytest.raises(UsageError, match="the plan's topology"):
            Topology.from_dict(bad)


def test_the_metadata_topology_reads_back_with_its_tiers_and_hops():
    text = "SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n[3-4]\nSwitchName=spine Switches=leaf[1-2]\n"
    kept = parse_slurm(text, "topology.conf").metadata(["n1", "n2", "n3"])
    back = Topology.from_metadata(json.loads(json.dumps(kept)))
    assert back.source == "topology.conf" and back.switch == {"n1": "leaf1", "n2": "leaf1", "n3": "leaf2"}
    assert (back.tier("n1", "n2"), back.tier("n1", "n3"), back.hops("n1", "n3")) == ("same-switch", "cross-switch", 2)
    assert Topology.from_metadata(None) is None


@pytest.mark.parametrize("data", [[1], {"hosts": 3}, {"source": "s", "hosts": {"n1": {"switch": 2, "group": "g"}}}])
def test_a_bad_metadata_topology_is_one_line(data):
    with pytest.raises(UsageError, match="the metadata's topology"):
        Topology.from_metadata(data)

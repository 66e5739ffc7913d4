"""The fan kernels' pairing (measure.fan): hosts into nodes, the parent's ranks and their counterparts."""

from __future__ import annotations

from fabricbench.measure.fan import FanRole, fan_layout


def test_one_rank_per_host_the_first_host_is_the_parent_of_all_others():
    layout = fan_layout(["b", "a", "c"])
    assert (layout.nodes, layout.ppn, layout.children) == (3, 1, 2)
    # Rank 0's host is the parent; the children are the other hosts in name order (a's rank 1, c's rank 2).
    assert layout.roles == (FanRole(True, (1, 2)), FanRole(False, (0,)), FanRole(False, (0,)))


def test_local_rank_l_of_the_parent_meets_local_rank_l_of_every_other_host():
    hosts = ["p", "q", "p", "r", "q", "r"]  # p: 0, 2; q: 1, 4; r: 3, 5
    layout = fan_layout(hosts)
    assert (layout.nodes, layout.ppn) == (3, 2)
    assert layout.roles[0] == FanRole(True, (1, 3))
    assert layout.roles[2] == FanRole(True, (4, 5))
    assert [layout.roles[r] for r in (1, 3, 4, 5)] == [FanRole(False, (0,))] * 2 + [FanRole(False, (2,))] * 2


def test_every_rank_has_a_part_and_every_child_one_parent():
    hosts = [f"h{r % 4}" for r in range(12)]
    layout = fan_layout(hosts)
    parents = [r for r, role in enumerate(layout.roles) if role.parent]
    assert parents == [0, 4, 8]
    children = sorted(c for r in parents for c in layout.roles[r].peers)
    assert children == sorted(set(range(12)) - set(parents))
    for parent in parents:
        for child in layout.roles[parent].peers:
            assert layout.roles[child] == FanRole(False, (parent,))
            assert hosts[child] != hosts[parent]


def test_one_host_is_refused_with_its_name():
    assert fan_layout(["vm", "vm", "vm"]) == "the fan kernels need ranks on 2 or more hosts; all 3 ranks are on vm"


def test_unequal_ranks_per_host_are_refused_with_the_counts():
    why = fan_layout(["a", "a", "b"])
    assert why == "the fan kernels need the same number of ranks on every host, got a: 2, b: 1"


def test_no_ranks_is_refused():
    assert isinstance(fan_layout([]), str)

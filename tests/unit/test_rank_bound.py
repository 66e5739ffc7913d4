"""--np's bound for a self-launched run: what the cores, descriptors and tasks allow (launcher.check_ranks)."""

from __future__ import annotations

import pytest

from fabricbench.errors import UsageError
from fabricbench.launch.launcher import HostLimits, check_ranks, most_ranks


def test_the_cores_bound_eight_ranks_a_core_unless_oversubscribed():
    limits = HostLimits(cores=2, files=None, tasks=None)
    assert most_ranks(limits, oversubscribe=False)[0] == 16
    check_ranks(16, limits, oversubscribe=False)
    with pytest.raises(UsageError, match=r"--np 17 is more .* at most 16 \(2 cores, 8 ranks a core; --oversubscribe"):
        check_ranks(17, limits, oversubscribe=False)
    check_ranks(100000, limits, oversubscribe=True)  # nothing else limits it


def test_the_descriptor_limit_bounds_even_an_oversubscribed_run():
    limits = HostLimits(cores=2, files=1024, tasks=None)
    assert most_ranks(limits, oversubscribe=True)[0] == (1024 - 48) // 4
    with pytest.raises(UsageError, match="at most 244 .*ulimit -n is 1024 open files"):
        check_ranks(100000, limits, oversubscribe=True)


def test_too_few_descriptors_for_two_ranks_says_the_host_cannot_start_any():
    with pytest.raises(UsageError, match=r"^--np 2: this host cannot start local ranks \(ulimit -n is 12 open"):
        check_ranks(2, HostLimits(cores=2, files=12, tasks=None), oversubscribe=False)


def test_a_task_limit_names_where_it_comes_from():
    limits = HostLimits(cores=64, files=None, tasks=400, tasks_from="/sys/fs/cgroup/pids.max leaves 400")
    assert most_ranks(limits, oversubscribe=False) == (
        66,
        "/sys/fs/cgroup/pids.max leaves 400 tasks; the job needs 3 and 6 a rank",
    )
    with pytest.raises(UsageError, match="at most 66 .*pids.max leaves 400 tasks"):
        check_ranks(100, limits, oversubscribe=False)


def test_the_tightest_limit_is_the_one_named():
    limits = HostLimits(cores=1, files=10000, tasks=100000, tasks_from="ulimit -u is 100000")
    assert "cores" in most_ranks(limits, oversubscribe=False)[1]
    assert "ulimit -n" in most_ranks(limits, oversubscribe=True)[1]

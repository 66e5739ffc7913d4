"""hostinfo: the CPUs a rank may use and how many ranks share its host."""

from __future__ import annotations

import os

from fabricbench.hostinfo import ranks_here, this_host, usable_cpus


def test_ranks_here_counts_the_records_that_name_this_host():
    here = this_host()
    records = [{"host": here}, {"host": "elsewhere"}, {"host": here}, {}, {"host": 7}]
    assert ranks_here(records) == 2
    assert ranks_here([]) == 0


def test_usable_cpus_is_the_affinity_mask():
    assert usable_cpus() == len(os.sched_getaffinity(0)) >= 1

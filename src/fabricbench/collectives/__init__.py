"""Collective operations as data: one spec per operation, one module each, as nccl-tests' ``struct testColl``.

A spec says only what differs between collectives: its element type, OSU's
sizes and title, the buffers a rank needs for a message size S on n ranks
(filled, with the expected result), and nccl-tests' bandwidth formulas. The
runner, the rows, the reports and every transport that runs collectives take
what they need from COLLECTIVES, so adding a collective is one module here plus the
transports' calls. The parts every spec is built of are in ``spec``. Sizes are
OSU's: S is the per-rank block (the reduced vector for allreduce and reduce).
"""

from __future__ import annotations

from fabricbench.collectives import (
    allgather,
    allgatherv,
    allreduce,
    alltoall,
    alltoallv,
    alltoallw,
    barrier,
    bcast,
    gather,
    gatherv,
    neighbor,
    reduce,
    reduce_scatter,
    reduce_scatter_block,
    scatter,
    scatterv,
)
from fabricbench.collectives.spec import CollectiveSpec

COLLECTIVES: dict[str, CollectiveSpec] = {
    module.SPEC.name: module.SPEC for module in (allreduce, allgather, alltoall, bcast, reduce, reduce_scatter, barrier)
}
# The rooted collectives and the v-variants, with OSU's counts and displacements (spec.uniform_layout).
COLLECTIVES |= {
    module.SPEC.name: module.SPEC
    for module in (gather, gatherv, scatter, scatterv, allgatherv, alltoallv, alltoallw, reduce_scatter_block)
}
COLLECTIVES.update((spec.name, spec) for spec in neighbor.SPECS)  # on OSU's graph topology

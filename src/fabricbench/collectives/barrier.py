"""Barrier: moves no data, so it has one size (0), nothing to check and no bandwidth."""

from __future__ import annotations

from fabricbench.buffers import nothing
from fabricbench.collectives.spec import CollectiveBuffers, CollectiveSpec


def buffers(size: int, ranks: int, rank: int) -> CollectiveBuffers:
    return CollectiveBuffers(nothing(), nothing(), 0, nothing(), nothing)


SPEC = CollectiveSpec(
    "barrier", "{lib} Barrier Latency Test", None, 0, 0, buffers, None, None, no_in_place="barrier moves no data"
)

"""Gatherv: gather's blocks and result, through MPI_Gatherv with OSU's counts (S bytes from every rank) and
displacements (rank r's block at r·S)."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.collectives import gather

SPEC = replace(gather.SPEC, name="gatherv", osu_title="{lib} Gatherv Latency Test")

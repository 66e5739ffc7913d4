"""Scatterv: scatter's blocks and result, through MPI_Scatterv with OSU's counts (S bytes to every rank) and
displacements (rank r's block at r·S)."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.collectives import scatter

SPEC = replace(scatter.SPEC, name="scatterv", osu_title="{lib} Scatterv Latency Test")

"""Allgatherv: allgather's blocks and result, through MPI_Allgatherv with OSU's counts (S bytes from every rank)
and displacements (rank r's block at r·S)."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.collectives import allgather

SPEC = replace(allgather.SPEC, name="allgatherv", osu_title="{lib} Allgatherv Latency Test")

"""Alltoallv: alltoall's blocks and result, through MPI_Alltoallv with OSU's counts (S bytes to and from every
rank) and displacements (block r at r·S, in elements)."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.collectives import alltoall

SPEC = replace(alltoall.SPEC, name="alltoallv", osu_title="{lib} All-to-Allv Personalized Exchange Latency Test")

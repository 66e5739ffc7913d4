"""Alltoallw: alltoall's blocks and result, through MPI_Alltoallw with OSU's counts (S bytes to and from every
rank), displacements (block r at r·S, in bytes, as MPI_Alltoallw takes them) and one datatype for every block."""

from __future__ import annotations

from dataclasses import replace

from fabricbench.collectives import alltoall

SPEC = replace(alltoall.SPEC, name="alltoallw", osu_title="{lib} All-to-Allw Personalized Exchange Latency Test")

"""``--placement``: whether the collectives are measured out of place, in place or both, as nccl-tests' two blocks.

nccl-tests times every size twice, out of place then in place (one buffer, sent from and received into), and prints
both on its line. fabricbench measures out of place alone by default, as OSU does (whose -l asks for in place), so
that a collective sweep is not doubled; ``--format nccl`` measures both by default, since its lines
have both blocks, and ``--placement`` says otherwise for either. Each placement is a row of its own, its
``placement`` column saying which; the in-place one right after the out-of-place one at each size, both timed the
same way. A transport that includes this option group measures the in-place form; the others' in-place rows say
"unsupported: ...".
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from fabricbench.collectives.spec import IN_PLACE, OUT_OF_PLACE
from fabricbench.errors import UsageError
from fabricbench.measure.plan import NCCL_FORMAT  # the console format whose lines hold both blocks: both unless told
from fabricbench.transports.options import OptionGroup

if TYPE_CHECKING:
    from fabricbench.measure.kernels import Kernel

BOTH = "both"
CHOICES = (OUT_OF_PLACE, IN_PLACE, BOTH)


class PlacementOption(OptionGroup):
    """The collectives' placements (``Plan.transport_options["placement"]``), for the transports with an in-place
    form (mpi's MPI_IN_PLACE, nccl's one buffer)."""

    name = "placement"

    def add_arguments(self, parser: argparse.ArgumentParser, role: str) -> None:
        if role != "run":
            return
        parser.add_argument(
            "--placement",
            choices=list(CHOICES),
            help="collectives out of place (separate send and receive buffers), in place (MPI_IN_PLACE; nccl's one "
            "buffer) or both, a row each with its placement column (default: out-of-place; both with --format nccl, "
            "as nccl-tests)",
        )

    def parse(self, args: argparse.Namespace, role: str) -> dict:
        if role != "run":
            return {}
        chosen = args.placement or (BOTH if getattr(args, "output_format", "") == NCCL_FORMAT else None)
        return {"placement": chosen} if chosen else {}


PLACEMENT = PlacementOption()


def in_place_flags(transport_options: dict) -> tuple[bool, ...]:
    """The placements a plan measures, as in-place flags in the order they run: out of place first."""
    chosen = PLACEMENT.of(transport_options).get("placement", OUT_OF_PLACE)
    if chosen not in CHOICES:
        raise UsageError(f"bad placement {chosen!r}: choose from {', '.join(CHOICES)}")
    return {OUT_OF_PLACE: (False,), IN_PLACE: (True,), BOTH: (False, True)}[chosen]


def placed_kernels(kernel: Kernel, transport_options: dict) -> list[Kernel]:
    """The kernel as each placement measures it: a collective out of place and/or in place (its spec's in-place
    form), in that order; any other kernel as it is."""
    if not kernel.collective:
        return [kernel]
    spec = kernel.collective_spec
    return [
        replace(kernel, collective_spec=spec.placed()) if flag else kernel for flag in in_place_flags(transport_options)
    ]


def in_place_refusal(kernel: Kernel, transport: type) -> str:
    """Why ``transport`` (a class) cannot measure this kernel's placement: "" where it can (out of place, or a
    transport with an in-place form, which includes this option group)."""
    if not kernel.collective or not kernel.collective_spec.in_place or PLACEMENT in transport.option_groups:
        return ""
    return f"{transport.name} measures the collectives out of place only"

"""What a pattern may ask of a transport beyond ``Transport.case``: one small Protocol per capability.

Every transport builds a case for one pair, for concurrent pairs and for all ranks (``Transport.case``). The
other patterns each need one more method, which only the transports that can run them have: a pattern names
its capability (``fabricbench.run.patterns``), and the plan (before any rank starts, on the class) and the
pattern (at run time) refuse a transport without it, in ``missing``'s words, as a row's ``unsupported`` status.

The Protocols are ``runtime_checkable`` and hold methods only, so ``issubclass`` on a transport's class is a
reliable check: the base class defines none of these methods, and a transport has a capability exactly when
its class (or a base of it) defines the method.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from fabricbench.measure.congestion import Role
from fabricbench.measure.kernels import Kernel
from fabricbench.transports.base import Case, Transport


@runtime_checkable
class PairCases(Protocol):
    """The all-pairs kernels (``fabricbench.run.patterns.all_pairs``) and the bisection kernel
    (``fabricbench.run.patterns.bisection``: ``send_to == recv_from``, one partner both ways at once)."""

    def pair_case(self, kernel: Kernel, size: int, send_to: int | None, recv_from: int | None) -> Case | None:
        """An all-pairs kernel's case for one phase: this rank sends to ``send_to`` (its samples time that pair)
        and receives from ``recv_from``; None for either where it has no such part, and returns None when it has
        neither. Raises Unsupported on every rank alike, whatever its part."""


@runtime_checkable
class Routes(Protocol):
    """The GPU-routes kernels (``fabricbench.run.patterns.gpu_routes``): ``case`` builds the route the pattern sets
    in the transport's ``route`` attribute around each call."""

    def routes(self, kernel: Kernel) -> list[tuple[int, int]]:
        """A GPU-routes kernel's (source, destination) GPUs, one phase and one row each, alike on every rank.
        Raises Unsupported on every rank alike where there are none."""


@runtime_checkable
class CongestionCases(Protocol):
    """The congestion kernel (``fabricbench.run.patterns.congestion``)."""

    def congestion_case(self, role: Role) -> Case:
        """The congestion kernel's case for one phase, called on every rank in the same order, so it may make
        collective calls: a canary's timed test (its samples speak for the row), a congestor's pattern run until
        the canaries' leader says stop (``moved_bytes`` and ``active_ns`` set after each run), or nothing for a
        rank with neither part. Raises Unsupported on every rank alike."""

    def congestion_unsupported(self, pattern: str) -> str | None:
        """Why this transport cannot run a congestor pattern (``mix``: all four at once), None when it can: the
        congestion kernel then gives that pattern's rows as unsupported and runs the others."""


@runtime_checkable
class FanCases(Protocol):
    """The fan kernels (``fabricbench.run.patterns.fan``: bw-fan-in, bw-fan-out)."""

    def fan_case(self, kernel: Kernel, size: int, parent: bool, peers: tuple[int, ...]) -> Case:
        """A fan kernel's case: a parent (its samples speak for the row) with its children ``peers``, or a child
        with its one parent. Raises Unsupported on every rank alike."""


@runtime_checkable
class SelfTimed(Protocol):
    """A reference tool that times itself (perftest, fi_pingpong): the runner takes its rows as they come."""

    def reference_row(self, kernel: Kernel, size: int) -> dict | None:
        """A self-timed transport's row for one size, on rank 0 (None elsewhere); every rank calls it."""


# What a transport without a pattern's capability lacks, in its row's ``unsupported`` words.
LACKING = {PairCases: "all-pairs loop", Routes: "GPU routes", CongestionCases: "congestion loops"}


def missing(transport: type[Transport], capability: type | None) -> str | None:
    """Why ``transport`` (its class) cannot run a pattern needing ``capability`` (None: none), or None when it can."""
    if capability is None or issubclass(transport, capability):
        return None
    return f"{transport.name} has no {LACKING[capability]}"

"""Transport registry: names to modules, imported only when a run uses them."""

from __future__ import annotations

from importlib import import_module

from fabricbench.errors import UsageError

TRANSPORTS = {
    "mpi": ("fabricbench.transports.mpi", "MPITransport"),
    "mpi-rma": ("fabricbench.transports.mpi_rma", "MPIRMATransport"),
    "tcp": ("fabricbench.transports.tcp", "TCPTransport"),
    "verbs": ("fabricbench.transports.verbs", "VerbsTransport"),
    "verbs-send": ("fabricbench.transports.verbs", "VerbsSendTransport"),
    "perftest": ("fabricbench.transports.perftest", "PerftestTransport"),
}


def check_transport(name: str) -> None:
    if name not in TRANSPORTS:
        raise UsageError(f"unknown transport {name!r}; known: {', '.join(TRANSPORTS)}")


def open_transport(name: str, ctrl, plan):
    check_transport(name)
    module, cls = TRANSPORTS[name]
    return getattr(import_module(module), cls)(ctrl, plan)


def supported_kernels(name: str) -> frozenset[str]:
    """The kernels a transport runs, without connecting anything."""
    check_transport(name)
    module, cls = TRANSPORTS[name]
    return getattr(import_module(module), cls).kernels


def preflight(name: str) -> None:
    """The transport's own check that it can run here (a missing library, no device), before ranks start."""
    check_transport(name)
    module, cls = TRANSPORTS[name]
    getattr(import_module(module), cls).preflight()

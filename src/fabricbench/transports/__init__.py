"""Transport registry: names to modules, imported only when a run uses them."""

from __future__ import annotations

from importlib import import_module

from fabricbench.errors import UsageError

TRANSPORTS = {
    "mpi": ("fabricbench.transports.mpi", "MPITransport"),
    "mpi-rma": ("fabricbench.transports.mpi_rma", "MPIRMATransport"),
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

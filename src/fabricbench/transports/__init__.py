"""The transport registry: names to modules, and the questions the rest of fabricbench asks of them.

Adding a transport is one line in ``TRANSPORTS`` (in the order the default
sweep and ``doctor`` list them) plus its module. A module is imported when a
name is first looked up; what it imports at that point must stay light
(numpy, the standard library): heavy libraries load when a rank opens it.
"""

from __future__ import annotations

import argparse
from importlib import import_module

from fabricbench.errors import UsageError
from fabricbench.transports.base import Transport

TRANSPORTS = {
    "mpi": ("fabricbench.transports.mpi", "MPITransport"),
    "mpi-rma": ("fabricbench.transports.mpi_rma", "MPIRMATransport"),
    "tcp": ("fabricbench.transports.tcp", "TCPTransport"),
    "verbs": ("fabricbench.transports.verbs", "VerbsTransport"),
    "verbs-send": ("fabricbench.transports.verbs", "VerbsSendTransport"),
    "perftest": ("fabricbench.transports.perftest", "PerftestTransport"),
    "perftest-send": ("fabricbench.transports.perftest", "PerftestSendTransport"),
    "nccl": ("fabricbench.transports.nccl", "NCCLTransport"),
    "cuda-copy": ("fabricbench.transports.cuda_copy", "CudaCopyTransport"),
}


def check_transport(name: str) -> None:
    if name not in TRANSPORTS:
        raise UsageError(f"unknown transport {name!r}; known: {', '.join(TRANSPORTS)}")


def transport_class(name: str) -> type[Transport]:
    """The transport's class, for what it declares; nothing is connected."""
    check_transport(name)
    module, cls = TRANSPORTS[name]
    return getattr(import_module(module), cls)


def open_transport(name: str, ctrl, plan) -> Transport:
    return transport_class(name)(ctrl, plan)


def supported_kernels(name: str) -> frozenset[str]:
    """The kernels a transport runs, without connecting anything."""
    return transport_class(name).kernels


def preflight(name: str, transport_options: dict, ranks: int, local: bool = False) -> None:
    """The transport's own check that it can run here on ``ranks`` ranks (a missing library, no device, a port
    range past 65535), before ranks start; ``local``: every rank runs on this host, so what they will take of
    it (a port) can be checked here too."""
    cls = transport_class(name)
    options = transport_options.get(cls.options_key, {})
    cls.preflight(options, ranks)
    if local:
        cls.preflight_local(options, ranks)


def option_owners() -> dict[str, type[Transport]]:
    """One transport per options key: the one whose argparse group and handshake fields stand for the key."""
    owners: dict[str, type[Transport]] = {}
    for name in TRANSPORTS:
        cls = transport_class(name)
        if cls.options_key:
            owners.setdefault(cls.options_key, cls)
    return owners


def add_arguments(parser: argparse.ArgumentParser, role: str) -> None:
    """Every transport's options on ``run`` or ``serve``."""
    for cls in option_owners().values():
        cls.add_arguments(parser, role)


def transport_options(args: argparse.Namespace, role: str) -> dict:
    """Plan.transport_options from the command line: {options key: that transport's settings}."""
    return {key: cls.options(args, role) for key, cls in option_owners().items()}


def default_suite() -> list[tuple[str, list[str]]]:
    """The main job: what each transport measures when ``run`` is told nothing."""
    suite = []
    for name in TRANSPORTS:
        kernels = list(transport_class(name).default_kernels)
        if kernels:
            suite.append((name, kernels))
    return suite


def natural_transport(kernel: str) -> str:
    """The transport a kernel given without -t runs on: the first registered one that has it."""
    for name in TRANSPORTS:
        if kernel in transport_class(name).kernels:
            return name
    return next(iter(TRANSPORTS))  # no transport has it: that one's row will say "unsupported"

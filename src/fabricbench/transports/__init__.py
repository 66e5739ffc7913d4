"""The transport registry: names to modules, and the questions the rest of fabricbench asks of them.

Adding a transport is one line in ``TRANSPORTS`` (in the order the default
sweep and ``doctor`` list them) plus its folder, ``transports/<fabric>/``. A module is imported when a
name is first looked up (building the command line's parser looks up every
one); what it imports at that point must stay light (the standard library, and
numpy only through ``fabricbench.lazy``): the rest loads when a rank opens it.
"""

from __future__ import annotations

import argparse
from importlib import import_module

from fabricbench.errors import UsageError
from fabricbench.transports.base import Transport
from fabricbench.transports.options import OptionGroup

TRANSPORTS = {
    "mpi": ("fabricbench.transports.mpi.transport", "MPITransport"),
    "mpi-rma": ("fabricbench.transports.mpi.rma", "MPIRMATransport"),
    "tcp": ("fabricbench.transports.tcp.transport", "TCPTransport"),
    "verbs": ("fabricbench.transports.verbs.transport", "VerbsTransport"),
    "verbs-send": ("fabricbench.transports.verbs.transport", "VerbsSendTransport"),
    "perftest": ("fabricbench.transports.verbs.perftest", "PerftestTransport"),
    "perftest-send": ("fabricbench.transports.verbs.perftest", "PerftestSendTransport"),
    "ofi": ("fabricbench.transports.ofi.transport", "OFITransport"),
    "fi-pingpong": ("fabricbench.transports.ofi.fi_pingpong", "FiPingpongTransport"),
    "ucx": ("fabricbench.transports.ucx.transport", "UCXTransport"),
    "ucx-perftest": ("fabricbench.transports.ucx.ucx_perftest", "UCXPerftestTransport"),
    "nccl": ("fabricbench.transports.gpu.nccl", "NCCLTransport"),
    "cuda-copy": ("fabricbench.transports.gpu.cuda_copy", "CudaCopyTransport"),
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
    """The transport's own check that it can run here on ``ranks`` ranks (a missing library, no device), then its
    option groups' (a port range past 65535), before ranks start; ``local``: every rank runs on this host, so
    what they will take of it (a port) can be checked here too."""
    cls = transport_class(name)
    groups = transport_groups(cls)
    settings = {group.name: group.of(transport_options) for group in groups}
    cls.preflight(settings, ranks)
    for group in groups:
        group.preflight(settings[group.name], ranks)
    if local:
        cls.preflight_local(settings, ranks)
        for group in groups:
            group.preflight_local(settings[group.name], ranks)


def transport_groups(cls: type[Transport]) -> list[OptionGroup]:
    """The option groups a transport reads: its own, then those of the places its buffers can be."""
    groups = list(cls.option_groups)
    for place in cls.buffer_places:
        groups += [group for group in place.option_groups if group not in groups]
    return groups


def option_groups() -> dict[str, OptionGroup]:
    """Every option group once, {name: group}: the transports' own in registry order, then their buffer
    places' (so each argparse group keeps its place in --help)."""
    classes = [transport_class(name) for name in TRANSPORTS]
    found: dict[str, OptionGroup] = {}
    for group in [g for cls in classes for g in cls.option_groups] + [
        g for cls in classes for place in cls.buffer_places for g in place.option_groups
    ]:
        found.setdefault(group.name, group)
    return found


def add_arguments(parser: argparse.ArgumentParser, role: str) -> None:
    """Every option group's options on ``run`` or ``serve``, each once: the run-wide ones the groups include
    (--loop), then each group's own."""
    groups = list(option_groups().values())
    for included in dict.fromkeys(g for group in groups for g in group.includes):
        included.add_arguments(parser, role)
    for group in groups:
        group.add_arguments(parser, role)


def transport_options(args: argparse.Namespace, role: str) -> dict:
    """Plan.transport_options from the command line: {group name: that group's settings}."""
    return {name: group.settings(args, role) for name, group in option_groups().items()}


def handshake_sections(names) -> dict[str, OptionGroup]:
    """The option groups that add a section to the peer HELLO for transports ``names``, {name: group} in the
    order the transports first need them: each has handshake_version, encode_handshake and decode_handshake."""
    sections: dict[str, OptionGroup] = {}
    for name in names:
        for group in transport_groups(transport_class(name)):
            if group.handshake_version:
                sections.setdefault(group.name, group)
    return sections


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

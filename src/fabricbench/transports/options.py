"""Option groups: the transports' command-line options, each set declared once and included by the transports
that read it.

A group is the options it adds to ``run`` and ``serve``, how it parses them
into settings (``Plan.transport_options[name]``, plain JSON), the fields it
adds to the peer HELLO (its own section, with its own version) and the checks
its settings need before any rank starts. A transport lists the groups it
includes (``Transport.option_groups``) and reads only their settings; the
registry adds each group to the command line once, whatever includes it.
"""

from __future__ import annotations

import argparse

from fabricbench.control.rendezvous import FieldReader


class OptionGroup:
    """One named set of options, its settings and its HELLO section (override what the group has)."""

    name = ""  # its key in Plan.transport_options, and its section's in the peer HELLO
    # Run-wide groups whose settings are part of this one's (the --loop choice): they add their options once,
    # and their values travel in this group's settings and HELLO section.
    includes: tuple[OptionGroup, ...] = ()
    handshake_version = 0  # version of its section in the peer HELLO; 0: it sends none

    def add_arguments(self, parser: argparse.ArgumentParser, role: str) -> None:
        """Its options on ``run`` (role "run") or ``serve`` (role "serve")."""

    def parse(self, args: argparse.Namespace, role: str) -> dict:
        """Its own settings from the parsed command line, unset ones left out; UsageError if bad."""
        return {}

    def settings(self, args: argparse.Namespace, role: str) -> dict:
        """Plan.transport_options[name]: its own settings and those of the groups it includes."""
        found = self.parse(args, role)
        for included in self.includes:
            found |= included.parse(args, role)
        return found

    def of(self, transport_options: dict) -> dict:
        """Its settings in a plan's transport_options (empty when the plan has none)."""
        return transport_options.get(self.name, {})

    def encode_handshake(self, settings: dict) -> bytes:
        """The fields a ``run --peer`` client sends for this group (rendezvous Fields)."""
        return b""

    def decode_handshake(self, reader: FieldReader, settings: dict) -> dict:
        """The server's ``settings`` with what the client chose, every field checked (ProtocolError)."""
        return settings

    def preflight(self, settings: dict, ranks: int) -> None:
        """Raise a one-line FabricbenchError before any rank starts when these settings cannot work here."""

    def preflight_local(self, settings: dict, ranks: int) -> None:
        """As ``preflight``, for what the ranks will take of a host that runs all of them (a port in use)."""


class LoopChoice(OptionGroup):
    """``--loop``: time the kernels in C or in Python, for every transport that has both loops.

    One choice for the whole run: the groups of the transports that have a C
    loop include this one, so their settings and HELLO sections carry it.
    """

    name = "loop"
    CHOICES = ("auto", "c", "python")  # in the order of their code in the HELLO sections that carry it

    def add_arguments(self, parser: argparse.ArgumentParser, role: str) -> None:
        if role != "run":  # serve takes the client's choice
            return
        parser.add_argument(
            "--loop",
            choices=list(self.CHOICES),
            default="auto",
            help="time the kernels in C (no interpreter cost per call) or in Python (like-for-like with mpi4py), "
            "for the transports that have both, on every rank; auto: C where every rank has it (default)",
        )

    def parse(self, args: argparse.Namespace, role: str) -> dict:
        return {"loop": args.loop} if role == "run" and args.loop != "auto" else {}

    def code(self, settings: dict) -> int:
        """The choice in ``settings`` as its HELLO code."""
        return self.CHOICES.index(settings.get("loop", "auto"))

    def chosen(self, code: int) -> dict | None:
        """The settings a HELLO code stands for ({} for auto), or None for a code that names no choice."""
        if not 0 <= code < len(self.CHOICES):
            return None
        return {} if code == 0 else {"loop": self.CHOICES[code]}


LOOP = LoopChoice()

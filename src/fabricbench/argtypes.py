"""Argument types shared by every subcommand: bad values raise UsageError (one line, exit 2).

Numbers are read as ASCII only: Python's int() and float() also take other scripts' digits
('𝟖' is 8), 'inf', 'nan' and underscores, none of which a command line means.
"""

from __future__ import annotations

import re
import reprlib

from fabricbench.errors import UsageError

MAX_COUNT = 10**9  # iterations or warm-up: a count above this is a typo, and its samples alone need 8 GB
MAX_SECONDS = 86400.0  # one day: the longest --timeout or --max-time, and what a timer can take
MAX_HOST_NAME = 253  # DNS's limit on a whole name; IDNA limits each label to 63
_WHOLE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?", re.ASCII)
_BYTES = re.compile(r"([0-9]{1,20})\s*([kKmMgG]?)(i?[bB])?", re.ASCII)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def names(what: str):
    """A comma list of names; an empty one (``-k ''``, ``-t ,``) says so rather than meaning the default."""

    def parse(text: str) -> list[str]:
        found = [n.strip() for n in text.split(",") if n.strip()]
        if not found:
            raise UsageError(f"no {what} given in {text!r}")
        return found

    return parse


def whole_number(name: str, minimum: int = 1, maximum: int | None = None):
    def parse(text: str) -> int:
        if not _WHOLE.fullmatch(text.strip()):
            raise UsageError(f"{name} must be a whole number, got {text!r}")
        value = int(text)
        if value < minimum:
            raise UsageError(f"{name} must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise UsageError(f"{name} must be at most {maximum}, got {value}")
        return value

    return parse


def seconds(name: str):
    """A number of seconds above 0 and at most a day (no inf or nan: a timer cannot take them)."""

    def parse(text: str) -> float:
        if not _DECIMAL.fullmatch(text.strip()):
            raise UsageError(f"{name} must be a number of seconds, got {text!r}")
        value = float(text)
        if not value > 0:
            raise UsageError(f"{name} must be above 0 seconds, got {text}")
        if value > MAX_SECONDS:
            raise UsageError(f"{name} must be at most {MAX_SECONDS:.0f} seconds (a day), got {text}")
        return value

    return parse


def byte_size(what: str):
    """Bytes from '64', '8K', '4MiB' (binary multiples, as message sizes are)."""

    def parse(text: str) -> int:
        match = _BYTES.fullmatch(text.strip())
        if not match:
            raise UsageError(f"bad {what} {text!r}: expected a byte count such as 8, 64K or 4M")
        return int(match.group(1)) * _UNITS[match.group(2).lower()]

    return parse


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free port)."""
    return whole_number("port", 0, 65535)(text)


def host_name(what: str):
    """A host name or address as the resolver takes it: IDNA's labels of 1 to 63 characters, 253 in all."""

    def parse(text: str) -> str:
        if not text.strip():
            raise UsageError(f"{what} is empty")
        if any(not char.isascii() and char.isdigit() for char in text):
            raise UsageError(f"{what} {reprlib.repr(text)} has digits other than 0-9")
        try:
            encoded = text.encode("idna")
        except UnicodeError:
            raise UsageError(
                f"{what} {reprlib.repr(text)} is not a host name: each dot-separated part is 1 to 63 characters"
            ) from None
        if len(encoded) > MAX_HOST_NAME:
            raise UsageError(f"{what} is {len(encoded)} characters long; a host name has at most {MAX_HOST_NAME}")
        return text

    return parse


def host_and_port(text: str) -> str:
    """``--peer HOST:PORT`` (or [IPv6]:PORT), checked here and returned as given."""
    if not text.strip():
        raise UsageError("--peer is empty: give HOST:PORT of a `fabricbench serve`")
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise UsageError(f"--peer must be HOST:PORT with a port of digits 0-9, got {text!r}")
    host_name("--peer host")(host.strip("[]"))
    whole_number("--peer port", 1, 65535)(port)
    return text

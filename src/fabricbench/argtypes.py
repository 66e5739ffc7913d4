"""Argument types shared by every subcommand: bad values raise UsageError (one line, exit 2).

Numbers are read as ASCII only: Python's int() and float() also take other scripts' digits
('𝟖' is 8), 'inf', 'nan' and underscores, none of which a command line means.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import reprlib
import unicodedata

from fabricbench.errors import UsageError
from fabricbench.terminal import printable

MAX_COUNT = 10**9  # iterations or warm-up: a count above this is a typo, and its samples alone need 8 GB
MAX_SECONDS = 86400.0  # one day: the longest --timeout or --max-time, and what a timer can take
MAX_HOST_NAME = 253  # DNS's limit on a whole name; IDNA limits each label to 63
# The least --timeout (and serve --max-timeout): it bounds a stall, and below a second a busy host's ordinary
# pauses (a descheduled rank, the other rank still starting, a barrier's first call) read as a dead peer.
MIN_TIMEOUT = 1.0
TOKEN_VAR = "FABRICBENCH_TOKEN"  # the shared secret of serve / run --peer, when --token is not given
MASK = "***"  # what a recorded command line or a printed message shows in place of a secret
_secrets: set[str] = set()  # every --token value parsed in this process (secret() adds them)
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


MAX_WHOLE = 2**63 - 1  # the largest count a C loop's int64 can hold: what no option may exceed


def whole_number(name: str, minimum: int = 1, maximum: int | None = None):
    """A whole number of ASCII digits from ``minimum`` to ``maximum`` (at most MAX_WHOLE whatever is given)."""
    top = MAX_WHOLE if maximum is None else min(maximum, MAX_WHOLE)

    def parse(text: str) -> int:
        if not _WHOLE.fullmatch(text.strip()):
            raise UsageError(f"{name} must be a whole number, got {reprlib.repr(text)}")
        if len(text.strip().lstrip("+-")) > 19:
            raise UsageError(f"{name} must be at most {top}, got a number of {len(text.strip().lstrip('+-'))} digits")
        value = int(text)
        if value < minimum:
            raise UsageError(f"{name} must be at least {minimum}, got {value}")
        if value > top:
            raise UsageError(f"{name} must be at most {top}, got {value}")
        return value

    return parse


def decimal(text: str) -> float | None:
    """``text`` as a number when it is one in ASCII digits (8, 0.5, 1e3), else None: float() also reads '5_0'
    and other scripts' digits."""
    return float(text) if _DECIMAL.fullmatch(text.strip()) else None


def seconds(name: str, minimum: float = 0.0):
    """A number of seconds above 0 (at least ``minimum`` when given) and at most a day (no inf or nan: a timer
    cannot take them)."""

    def parse(text: str) -> float:
        if not _DECIMAL.fullmatch(text.strip()):
            raise UsageError(f"{name} must be a number of seconds, got {text!r}")
        value = float(text)
        if not value > 0:
            raise UsageError(f"{name} must be above 0 seconds, got {text}")
        if value < minimum:
            raise UsageError(f"{name} must be at least {minimum:g} s, got {text}")
        if value > MAX_SECONDS:
            raise UsageError(f"{name} must be at most {MAX_SECONDS:.0f} seconds (a day), got {text}")
        return value

    return parse


def byte_size(what: str, minimum: int = 0):
    """Bytes from '64', '8K', '4MiB' (binary multiples, as message sizes are), at least ``minimum``."""

    def parse(text: str) -> int:
        match = _BYTES.fullmatch(text.strip())
        if not match:
            raise UsageError(f"bad {what} {text!r}: expected a byte count such as 8, 64K or 4M")
        value = int(match.group(1)) * _UNITS[match.group(2).lower()]
        if value < minimum:
            raise UsageError(f"{what} must be at least {minimum} B, got {text!r}")
        return value

    return parse


def byte_range(what: str, count_name: str, maximum: int | None = None, beyond: str = "", open_max: bool = False):
    """Byte counts ``MIN:MAX`` as byte_size reads each (``count_name`` names one in its refusal); a count alone is
    MAX (OSU's -m). Returns (MIN, MAX), None for an end left out: MIN may always be, MAX only where ``open_max``.
    Neither end may pass ``maximum``; ``beyond`` says why in the refusal."""
    count = byte_size(count_name)

    def parse(text: str) -> tuple[int | None, int | None]:
        lo_text, sep, hi_text = text.partition(":")
        if not sep:
            lo_text, hi_text = "", lo_text
        lo = count(lo_text) if lo_text.strip() else None
        hi = count(hi_text) if hi_text.strip() or not open_max else None
        if lo is not None and hi is not None and lo > hi:
            raise UsageError(f"bad {what} {text!r}: minimum {lo} is above maximum {hi}")
        if maximum is not None and max(lo or 0, hi or 0) > maximum:
            raise UsageError(f"bad {what} {text!r}: {beyond or 'at most'} ({maximum} B)")
        return lo, hi

    return parse


_PLAIN_DECIMAL = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+", re.ASCII)


def bounded_decimal(name: str, minimum: float, maximum: float, above: bool = False, what: str = "a number"):
    """A plain decimal number (ASCII digits and at most one point: no sign, exponent, inf or nan) from ``minimum``
    (or above it, where ``above``) to ``maximum``; ``what`` names its unit in the refusal."""
    bounds = f"above {minimum:g} and at most {maximum:g}" if above else f"from {minimum:g} to {maximum:g}"

    def parse(text: str) -> float:
        value = float(text) if _PLAIN_DECIMAL.fullmatch(text.strip()) else math.nan
        if not ((value > minimum if above else value >= minimum) and value <= maximum):
            raise UsageError(f"{name} must be {what} {bounds}, got {text!r}")
        return value

    return parse


def nonempty(name: str, hint: str):
    """Text as given, but not empty or blank: ``hint`` says what to give instead."""

    def parse(text: str) -> str:
        if not text.strip():
            raise UsageError(f"{name} is empty: {hint}")
        return text

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
        # A name's characters: letters and their marks (IDNA writes other scripts' names), digits 0-9, '-', '_'
        # and the dots between labels. Anything else ('🙂', a space, a ':') names no host the resolver could find.
        odd = [c for c in text if not (c in "-_." or c.isascii() and c.isalnum() or unicodedata.category(c)[0] in "LM")]
        if odd:
            raise UsageError(
                f"{what} {reprlib.repr(text)} is not a host name or IPv4 address: it holds {odd[0]!r} "
                "(letters, digits 0-9, '-', '_' and '.' only)"
            )
        if all(label.isdigit() for label in text.rstrip(".").split(".")):
            try:
                ipaddress.IPv4Address(text)
            except ValueError:
                raise UsageError(f"{what} {reprlib.repr(text)} is not an IPv4 address (four numbers 0-255)") from None
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


def host_and_port(text: str) -> tuple[str, int]:
    """``--peer HOST:PORT`` (or [IPv6]:PORT) as (host, port), the brackets taken off: a malformed one is a usage
    error (exit 2), not a name the resolver failed to find (exit 3)."""
    if not text.strip():
        raise UsageError("--peer is empty: give HOST:PORT of a `fabricbench serve`")
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise UsageError(f"--peer must be HOST:PORT with a port of digits 0-9, got {reprlib.repr(text)}")
    if host.startswith("[") and host.endswith("]"):
        if host == "[]":
            raise UsageError("--peer host is empty")
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise UsageError(f"--peer {reprlib.repr(text)}: {host} is not an IPv6 address in brackets") from None
    elif ":" in host or "[" in host or "]" in host:
        raise UsageError(
            f"--peer must be HOST:PORT, got {reprlib.repr(text)}: one ':' before the port "
            "(an IPv6 address goes in brackets: [::1]:PORT)"
        )
    else:
        host_name("--peer host")(host)
    return host.strip("[]"), whole_number("--peer port", 1, 65535)(port)


def secret(text: str) -> str:
    """``--token``: the value as given, remembered so that no command line recorded nor line printed holds it."""
    if text:
        _secrets.add(text)
    return text


def secrets_given(argv: list[str]) -> None:
    """Remember every --token value on a command line before it is parsed: an option parsed before --token may
    refuse the same text (``-m SECRET --token=SECRET``) and quote it, and that quote must be masked too."""
    for index, arg in enumerate(argv):
        if arg == "--token" and index + 1 < len(argv):
            secret(argv[index + 1])
        elif arg.startswith("--token="):
            secret(arg.partition("=")[2])


def known_secrets() -> list[str]:
    """The secrets this process must not write: every --token parsed, and $FABRICBENCH_TOKEN; longest first."""
    found = set(_secrets)
    if os.environ.get(TOKEN_VAR):
        found.add(os.environ[TOKEN_VAR])
    return sorted(found, key=len, reverse=True)


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def masked_text(text: str) -> str:
    """An error line with every known secret masked where the line quotes what was given (``{text!r}``, as
    every refusal here quotes input): fabricbench's own words stay whole when a secret is one of them
    ("wrong", "error")."""
    # A quote shows a value as repr or printable() does (a tab as \t, a backslash doubled): each spelling is masked.
    values = sorted({shown for v in known_secrets() for shown in _spellings(v)}, key=len, reverse=True)
    if not values:
        return text

    def mask(quoted: re.Match) -> str:
        words = quoted.group(0)
        for value in values:
            words = words.replace(value, MASK)
        return words

    return _QUOTED.sub(mask, text)


def _spellings(value: str) -> set[str]:
    """``value`` as given, as repr quotes it and as the terminal shows it (terminal.printable)."""
    return {value, repr(value)[1:-1], printable(value, len(value) * 10 + 10)}


def masked_command_line(argv: list[str]) -> list[str]:
    """The command line as the metadata records it: masked from the secrets' values, not from their spelling.

    An argument equal to or holding a secret becomes MASK (``--opt=MASK`` where it has an ``=``), whichever
    option carried it, so a short secret masks more than it must, never less. The value after ``--token``, or
    in ``--token=VALUE``, is masked besides, for a command line this process did not parse.
    """
    values = known_secrets()
    masked = []
    after_token = False
    for arg in argv:
        if after_token or any(value in arg for value in values):
            name, equals, _ = arg.partition("=")
            keep_name = equals and name.startswith("-") and not after_token and not any(v in name for v in values)
            arg = f"{name}={MASK}" if keep_name else MASK
        elif arg.startswith("--token="):
            arg = f"--token={MASK}"
        after_token = arg == "--token"
        masked.append(arg)
    return masked

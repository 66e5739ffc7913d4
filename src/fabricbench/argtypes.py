"""Argument types shared by every subcommand: bad values raise UsageError (one line, exit 2)."""

from __future__ import annotations

from fabricbench.errors import UsageError


def names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def whole_number(name: str, minimum: int = 1):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"{name} must be a whole number, got {text!r}") from None
        if value < minimum:
            raise UsageError(f"{name} must be at least {minimum}, got {value}")
        return value

    return parse


def seconds(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{name} must be a number of seconds, got {text!r}") from None
        if not value > 0:
            raise UsageError(f"{name} must be above 0 seconds, got {text}")
        return value

    return parse


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: any free port)."""
    value = whole_number("port", 0)(text)
    if value > 65535:
        raise UsageError(f"port must be at most 65535, got {value}")
    return value

"""The one sanitiser for text that reaches the terminal from a file or the network.

A results folder's metadata, a table's cells, a thresholds file, a server's refusal, a client's HELLO: any of
them may hold escape sequences (``\\x1b[2J`` clears the screen), a newline that forges a second line, or a
megabyte of text. What is printed of them passes ``printable``: every character a terminal would act on is
shown as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``), so one line stays one line, and the text is cut
to a bound. What is written to disk keeps the raw values: the table is data, only the view is cleaned.
"""

from __future__ import annotations

FIELD = 256  # one field shown from a file or the network: a label, a host, a vendor string
LINE = 4096  # one whole printed line: an error, a log line, a row of a table


def printable(text: object, limit: int = FIELD) -> str:
    """``text`` fit for one terminal line: non-printable characters escaped (\\n, \\x1b), at most ``limit``."""
    escaped = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
    return escaped if len(escaped) <= limit else escaped[: limit - 3] + "..."


def printable_lines(lines: list[str], limit: int = LINE) -> str:
    """Lines built with text from a file or the network, each kept one line (printable), joined for print."""
    return "\n".join(printable(line, limit) for line in lines)

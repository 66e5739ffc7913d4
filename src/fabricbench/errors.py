"""Errors that end a run with a one-line message instead of a traceback."""


class FabricbenchError(Exception):
    """A failure the user can act on; ``exit_code`` is what the process returns."""

    exit_code = 1


class UsageError(FabricbenchError):
    """Bad input: unknown names, bad ranges, too few ranks, unwritable paths."""

    exit_code = 2


class Unsupported(FabricbenchError):
    """A kernel that does not apply to a transport (or a size); the row says why."""

    exit_code = 2


class PeerError(FabricbenchError):
    """A peer died, closed, timed out or sent something we refuse."""

    exit_code = 3


class ConsoleClosed(FabricbenchError):
    """Whoever read the console table (head, less) went away: the run finished its table on disk, and ends as a
    Unix tool does on SIGPIPE, saying nothing (raised with no words)."""

    exit_code = 141


class ConsoleFailed(FabricbenchError):
    """stdout could not be written (a full disk, a closed descriptor): the run finished its table on disk, and
    ends as cat does on a write error."""

    exit_code = 1

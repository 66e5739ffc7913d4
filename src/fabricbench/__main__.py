"""``python -m fabricbench`` and the ``fabricbench`` command.

The CLI's own handlers end a Ctrl-C in one line, but only once cli.py has
been imported; it and the transports' declarations take a noticeable moment
to load, and a Ctrl-C then would print a traceback. Nothing has started by
then, so there is nothing to end: one line, exit 130, as the CLI says it; a
rank of a launched job dies of the signal instead, as it would a moment later.
"""

import os
import signal
import sys

# Variables a launcher sets in every rank (launch.py's list).
_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def entry() -> int:
    try:
        from fabricbench.cli import main
    except KeyboardInterrupt:
        if any(var in os.environ for var in _RANK_VARS):
            # A rank dies of the signal, as one interrupted before MPI is up does (launch.py): a launcher takes
            # a rank ended by a signal, not one that exits, as the end of the job, and ends the others.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        print("fabricbench: interrupted", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())

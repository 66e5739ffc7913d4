"""The control plane between ranks: barriers, agreement and gathering, kept apart from the data path.

A transport moves its data however it likes (MPI, sockets, verbs); the runner
synchronises the ranks through a ``ControlPlane``. Under a launcher that is
MPI (``control.mpi``); between ``serve`` and ``run --peer`` it is one TCP
connection speaking the rendezvous protocol (``control.connection``). Everything
crosses as numbers or JSON bytes; nothing is pickled.
"""

from __future__ import annotations

import json
import socket
from typing import Protocol

from fabricbench.errors import PeerError
from fabricbench.lazy import np


class ControlPlane(Protocol):
    """What the runner, the reporter and the transports may ask of the ranks' control plane."""

    rank: int
    size: int
    local_address: str | None  # the address the other side reached this rank by, where there is one

    def barrier(self) -> None: ...

    def allreduce_max(self, value: float) -> float: ...

    def gather(self, values: np.ndarray) -> np.ndarray | None:
        """Rank 0 gets a (ranks, k) float64 array of every rank's vector; the others None."""
        ...

    def pass_on(self, value: float, send_to: int | None, recv_from: int | None) -> float:
        """Send ``value`` to rank ``send_to`` and return what rank ``recv_from`` sent to this one (NaN where either
        is None): the two ends of a pair trading one number, a message a rank whatever the ranks' count."""
        ...

    def bcast_bytes(self, data: bytes | None) -> bytes: ...

    def gather_json(self, obj: dict) -> list[dict] | None:
        """Rank 0 gets every rank's small JSON object, in rank order; the others None."""
        ...

    def abort(self, code: int) -> None:
        """End every rank now (MPI_Abort, or a closed connection), with ``code``."""
        ...


def allgather_json(ctrl: ControlPlane, record: dict, what: str = "table") -> list[dict]:
    """Every rank's small record, in rank order, on every rank: gathered on rank 0, then broadcast.

    What comes back passed through the network, so its shape is checked
    before use; each field is checked by whoever reads it.
    """
    gathered = ctrl.gather_json(record)
    data = ctrl.bcast_bytes(json.dumps(gathered).encode() if ctrl.rank == 0 else None)
    try:
        table = json.loads(data)
    except (ValueError, RecursionError):
        raise PeerError(f"the {what} broadcast by rank 0 is not JSON") from None
    if not isinstance(table, list) or len(table) != ctrl.size or not all(isinstance(r, dict) for r in table):
        raise PeerError(f"the {what} broadcast by rank 0 is malformed")
    return table


def rank_hosts(ctrl: ControlPlane) -> list[str]:
    """Every rank's host name, in rank order, on every rank: asked of the ranks once per control plane and kept
    on it, since the patterns ask at every size and the answer cannot change."""
    known = getattr(ctrl, "_host_list", None)
    if known is None:
        table = allgather_json(ctrl, {"host": socket.gethostname()}, "host list")
        known = [str(record.get("host", "")) for record in table]
        ctrl._host_list = known
    return known

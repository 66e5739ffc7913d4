"""The control plane of a two-rank run without MPI: one rendezvous connection between ``serve`` and ``run --peer``."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

import numpy as np

from fabricbench.control.rendezvous import (
    BARRIER,
    BYTES,
    JSON,
    VALUE,
    VECTOR,
    FieldReader,
    ProtocolError,
    recv_message,
    send_message,
)

RANKS = 2
_F64 = struct.Struct("!d")


class ConnectionControl:
    """The control plane of a two-rank run over one rendezvous connection (a ControlPlane).

    Rank 0 is the client, rank 1 the server. Every call sends a typed
    message and, where the result needs it, waits for the peer's; every wait
    times out.
    """

    size = RANKS

    def __init__(self, sock: socket.socket, rank: int, timeout: float):
        sock.settimeout(timeout)
        self.sock = sock
        self.rank = rank
        inet = sock.family in (socket.AF_INET, socket.AF_INET6)
        self.local_address = sock.getsockname()[0] if inet else None  # the address the other side reached us by

    def _exchange(self, kind: int, payload: bytes) -> bytes:
        send_message(self.sock, kind, payload)
        return recv_message(self.sock, kind)

    def barrier(self) -> None:
        if self._exchange(BARRIER, b""):
            raise ProtocolError("malformed BARRIER message: it carries a payload")

    def allreduce_max(self, value: float) -> float:
        other = FieldReader(self._exchange(VALUE, _F64.pack(value)), "VALUE message")
        theirs = other.f64()
        other.end()
        return max(value, theirs)

    def pass_on(self, value: float, send_to: int | None, recv_from: int | None) -> float:
        """Send ``value`` to the other rank where ``send_to`` names it, and return what it sent where
        ``recv_from`` does (NaN otherwise)."""
        if send_to is not None:
            send_message(self.sock, VALUE, _F64.pack(value))
        if recv_from is None:
            return float("nan")
        theirs = FieldReader(recv_message(self.sock, VALUE), "VALUE message")
        found = theirs.f64()
        theirs.end()
        return found

    def gather(self, values: np.ndarray) -> np.ndarray | None:
        """Rank 0 gets a (2, k) float64 array: its own vector, then the server's."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        if self.rank != 0:
            send_message(self.sock, VECTOR, values.astype(">f8").tobytes())
            return None
        payload = recv_message(self.sock, VECTOR)
        if len(payload) != values.nbytes:
            raise ProtocolError(f"malformed VECTOR message: {len(payload)} B where {values.nbytes} B were due")
        return np.vstack([values, np.frombuffer(payload, dtype=">f8").astype(np.float64)])

    def bcast_bytes(self, data: bytes | None) -> bytes:
        if self.rank == 0:
            send_message(self.sock, BYTES, data)
            return data
        return recv_message(self.sock, BYTES)

    def gather_json(self, obj: dict) -> list[dict] | None:
        if self.rank != 0:
            send_message(self.sock, JSON, json.dumps(obj).encode())
            return None
        try:
            theirs = json.loads(recv_message(self.sock, JSON))
        except (ValueError, RecursionError):
            raise ProtocolError("malformed JSON message") from None
        if not isinstance(theirs, dict):
            raise ProtocolError("malformed JSON message: not an object")
        return [obj, theirs]

    def abort(self, code: int) -> None:
        """Like MPI_Abort: the peer sees the connection close, this process ends now."""
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def close(self) -> None:
        self.sock.close()

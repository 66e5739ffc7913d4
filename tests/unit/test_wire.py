"""The rendezvous wire format and the two-rank control plane, over socket pairs in one process."""

from __future__ import annotations

import socket
import struct
import threading

import numpy as np
import pytest

from fabricbench.control.connection import ConnectionControl
from fabricbench.control.rendezvous import (
    ERROR,
    HEADER,
    HELLO,
    MAGIC,
    VECTOR,
    VERSION,
    FieldReader,
    Fields,
    Inbox,
    ProtocolError,
    recv_message,
    send_message,
)
from fabricbench.errors import PeerError


def test_fields_round_trip_and_refuse_malformed_payloads():
    payload = Fields().u8(7).u16(513).u32(70000).u64(1 << 40).i64(-1).f64(0.25).text("rxe0").blob(b"\x00gid").payload()
    reader = FieldReader(payload, "test message")
    assert (reader.u8(), reader.u16(), reader.u32(), reader.u64(), reader.i64()) == (7, 513, 70000, 1 << 40, -1)
    assert (reader.f64(), reader.text(), reader.blob()) == (0.25, "rxe0", b"\x00gid")
    reader.end()
    short = FieldReader(payload[:3], "test message")
    short.u8(), short.u16()
    with pytest.raises(ProtocolError, match="malformed test message: truncated at byte 3, needed 7"):
        short.u32()
    extra = FieldReader(Fields().u8(1).u8(2).payload(), "test message")
    extra.u8()
    with pytest.raises(ProtocolError, match="1 unexpected trailing bytes"):
        extra.end()
    with pytest.raises(ProtocolError, match="over the 4 B limit"):
        FieldReader(Fields().text("too long").payload(), "test message").text(max_len=4)


def test_recv_message_checks_type_and_relays_refusals():
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(5)
        send_message(left, ERROR, Fields().text("no such device").payload())
        with pytest.raises(PeerError, match="peer refused: no such device"):
            recv_message(right, HELLO)
        send_message(left, HELLO + 100, b"")
        with pytest.raises(ProtocolError, match="expected a HELLO message, got type 102"):
            recv_message(right, HELLO)
        right.settimeout(0.2)
        with pytest.raises(PeerError, match="timed out after 0.2 s waiting for the peer's HELLO"):
            recv_message(right, HELLO)
        left.close()
        with pytest.raises(PeerError, match="peer closed the connection"):
            recv_message(right, HELLO)


def test_pair_control_matches_the_mpi_control_interface():
    client_sock, server_sock = socket.socketpair()
    results: dict = {}

    def side(sock, rank):
        ctrl = ConnectionControl(sock, rank, timeout=10)
        ctrl.barrier()
        results[rank, "max"] = ctrl.allreduce_max(1.5 if rank else 0.5)
        results[rank, "gather"] = ctrl.gather(np.array([rank, 10.0 + rank]))
        results[rank, "bcast"] = ctrl.bcast_bytes(b"plan" if rank == 0 else None)
        results[rank, "json"] = ctrl.gather_json({"rank": rank})
        ctrl.barrier()

    threads = [threading.Thread(target=side, args=(s, r)) for r, s in enumerate((client_sock, server_sock))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    client_sock.close()
    server_sock.close()
    assert results[0, "max"] == results[1, "max"] == 1.5
    assert results[0, "gather"].tolist() == [[0.0, 10.0], [1.0, 11.0]] and results[1, "gather"] is None
    assert results[0, "bcast"] == results[1, "bcast"] == b"plan"
    assert results[0, "json"] == [{"rank": 0}, {"rank": 1}] and results[1, "json"] is None


def test_pair_control_refuses_a_short_vector():
    left, right = socket.socketpair()
    with left, right:
        send_message(left, VECTOR, struct.pack("!d", 1.0))  # one value where two are due
        with pytest.raises(ProtocolError, match="8 B where 16 B were due"):
            ConnectionControl(right, 0, timeout=5).gather(np.zeros(2))


def test_both_control_planes_have_the_declared_interface():
    import inspect

    from fabricbench.control import ControlPlane
    from fabricbench.control.mpi import MPIControl

    methods = [name for name, value in vars(ControlPlane).items() if callable(value) and not name.startswith("_")]
    assert set(methods) == {"barrier", "allreduce_max", "pass_on", "gather", "bcast_bytes", "gather_json", "abort"}
    for cls in (MPIControl, ConnectionControl):
        for name in methods:
            declared = list(inspect.signature(getattr(ControlPlane, name)).parameters)
            assert list(inspect.signature(getattr(cls, name)).parameters) == declared, (cls, name)


def test_an_inbox_reads_a_message_in_any_pieces_and_checks_the_header_first():
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        inbox = Inbox(right)
        assert inbox.read(HELLO) is None  # nothing there yet: no wait
        frame = HEADER.pack(MAGIC, VERSION, HELLO, 5) + b"hello"
        for i in range(len(frame) - 1):
            left.sendall(frame[i : i + 1])
            assert inbox.read(HELLO) is None
        left.sendall(frame[-1:] + HEADER.pack(MAGIC, VERSION, HELLO, 2) + b"hi")
        assert inbox.read(HELLO) == b"hello"
        assert inbox.read(HELLO) == b"hi"  # it never read past the first message
        left.sendall(HEADER.pack(MAGIC, VERSION, HELLO, 1 << 20))
        with pytest.raises(ProtocolError, match="HELLO message of 1048576 B is over the 65536 B limit"):
            inbox.read(HELLO)  # refused before a byte of the payload is taken
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(HEADER.pack(MAGIC, VERSION, HELLO, 4) + b"ab")
        left.close()  # everything sent is in right's buffer: one read meets the end
        with pytest.raises(PeerError, match="peer closed the connection while we waited for the peer's HELLO"):
            Inbox(right).read(HELLO)

"""The peer handshake and the rendezvous wire format, without a process: every field checked, every refusal worded."""

from __future__ import annotations

import random
import socket

import pytest

from fabricbench.control import peer
from fabricbench.control.peer import decode_hello, encode_hello
from fabricbench.control.rendezvous import (
    ERROR,
    HEADER,
    HELLO,
    MAGIC,
    VERSION,
    Fields,
    ProtocolError,
    Refused,
    recv_message,
    send_message,
)
from fabricbench.plan import Plan, Step
from fabricbench.transports.tcp import LOOPS, TCPTransport
from fabricbench.transports.verbs import VerbsTransport

SERVER = {"tcp": {"address": "10.0.0.2"}, "verbs": {"device": "rxe0"}}


def _plan(**fields) -> Plan:
    base = {"steps": [Step("tcp", "bw", [8, 16])], "run_id": "r1", "timeout": 30.0}
    return Plan(**(base | fields))


def test_a_plan_survives_the_round_trip_and_the_servers_own_options_stay():
    plan = _plan(iterations=50, warmup=5, window=16, max_time=0.5, validate=True)
    decoded, hugepages, version = decode_hello(encode_hello(plan, "off"), SERVER)
    assert [(s.transport, s.kernel, s.sizes) for s in decoded.steps] == [("tcp", "bw", [8, 16])]
    assert (decoded.iterations, decoded.warmup, decoded.window, decoded.max_time) == (50, 5, 16, 0.5)
    assert decoded.validate and decoded.timeout == 30.0 and decoded.run_id == "r1" and hugepages == "off"
    assert version == peer.__version__
    assert decoded.transport_options == SERVER  # the client's own addresses never reach the server
    assert decoded.output_format == "none"


@pytest.mark.parametrize("loop", list(LOOPS))
def test_the_clients_tcp_loop_reaches_the_server(loop):
    tcp = {} if loop == "auto" else {"loop": loop}
    plan = _plan(transport_options={"tcp": tcp | {"port": 1}})
    decoded, _, _ = decode_hello(encode_hello(plan, None), SERVER)
    assert decoded.transport_options == {"tcp": {"address": "10.0.0.2"} | tcp, "verbs": {"device": "rxe0"}}


def test_the_clients_cq_mod_reaches_the_server_and_its_device_stays_the_servers():
    plan = _plan(steps=[Step("verbs", "bw", [8])], transport_options={"verbs": {"cq_mod": 8, "device": "mlx5_9"}})
    decoded, _, _ = decode_hello(encode_hello(plan, None), SERVER)
    assert decoded.transport_options["verbs"] == {"device": "rxe0", "cq_mod": 8}


def test_only_the_transports_in_the_plan_send_a_section():
    both = _plan(steps=[Step("tcp", "bw", [8]), Step("verbs", "latency", [8]), Step("perftest", "bw", [8])])
    assert list(peer._handshake_owners(both)) == ["tcp", "verbs"]  # perftest shares verbs' section


BAD_PLANS = [
    ({"run_id": "bad id!"}, "bad run id"),
    ({"iterations": 0}, "iterations 0 out of range"),
    ({"iterations": 10**10}, "iterations 10000000000 out of range"),
    ({"warmup": -5}, "warm-up -5 out of range"),
    ({"window": 0}, "window 0 out of range"),
    ({"window": 70000}, "window 70000 out of range"),
    ({"max_time": float("inf")}, "bad --max-time"),
    ({"max_time": -1.0}, "bad --max-time"),
    ({"validate": 2}, "bad validate flag 2"),
    ({"timeout": 0.0}, "bad --timeout"),
    ({"timeout": float("nan")}, "bad --timeout"),
    ({"steps": []}, "0 steps; 1 to 64 are allowed"),
    ({"steps": [Step("tcp", "bw", [8])] * 65}, "65 steps; 1 to 64 are allowed"),
    ({"steps": [Step("mpi", "latency", [8])]}, "transport 'mpi' needs MPI; a peer run has none"),
    ({"steps": [Step("tcp", "wobble", [8])]}, "unknown kernel 'wobble'"),
    ({"steps": [Step("tcp", "get", [8])]}, "tcp has no get kernel"),
    ({"steps": [Step("tcp", "bw", [0])]}, "bw size 0 B is outside 1..4194304 B"),
    ({"steps": [Step("tcp", "bw", [])]}, "0 sizes; 1 to 64 are allowed"),
    ({"steps": [Step("tcp", "bw", [8] * 65)]}, "65 sizes; 1 to 64 are allowed"),
    ({"steps": [Step("tcp", "latency", [8])], "transport_options": {"verbs": {"cq_mod": 70000}}}, None),
    ({"steps": [Step("verbs", "bw", [8])], "transport_options": {"verbs": {"cq_mod": 70000}}}, "--cq-mod 70000"),
]


@pytest.mark.parametrize(("fields", "words"), BAD_PLANS)
def test_every_bad_field_is_refused_in_words(fields, words):
    payload = encode_hello(_plan(**fields), None)
    if words is None:  # a transport not in the plan sends nothing, so nothing of it can be wrong
        decode_hello(payload, SERVER)
        return
    with pytest.raises(ProtocolError, match=words.replace("(", r"\(").replace(")", r"\)")):
        decode_hello(payload, SERVER)


def test_an_unknown_transport_is_refused():
    payload = encode_hello(_plan(), None).replace(b"\x00\x03tcp", b"\x00\x03nop", 1)  # the step's transport
    with pytest.raises(ProtocolError, match="unknown transport 'nop'"):
        decode_hello(payload, SERVER)


def test_a_bad_hugepages_code_and_a_bad_tcp_loop_code_are_refused():
    payload = bytearray(encode_hello(_plan(steps=[Step("tcp", "bw", [8])]), None))
    loop_at = len(payload) - 1  # the tcp section is the last field: its one byte is the loop
    payload[loop_at] = 9
    with pytest.raises(ProtocolError, match="bad tcp loop setting"):
        decode_hello(bytes(payload), SERVER)
    fixed = 2 + len(peer.__version__) + 2 + len("r1") + 8 + 8 + 4 + 8 + 1 + 8  # the fields before hugepages
    payload = bytearray(encode_hello(_plan(), None))
    payload[fixed] = 7
    with pytest.raises(ProtocolError, match="bad hugepages setting 7"):
        decode_hello(bytes(payload), SERVER)


def test_a_transport_section_of_another_version_is_refused_naming_both(monkeypatch):
    monkeypatch.setattr(TCPTransport, "handshake_version", 2)
    payload = encode_hello(_plan(), None)
    monkeypatch.setattr(TCPTransport, "handshake_version", 1)
    with pytest.raises(ProtocolError, match="tcp fields are version 2; this server speaks tcp version 1"):
        decode_hello(payload, SERVER)


def test_missing_unexpected_and_repeated_sections_are_refused(monkeypatch):
    monkeypatch.setattr(TCPTransport, "handshake_version", 0)
    without = encode_hello(_plan(), None)
    monkeypatch.undo()
    with pytest.raises(ProtocolError, match="no transport section for tcp"):
        decode_hello(without, SERVER)
    owners = {"tcp": TCPTransport, "verbs": VerbsTransport}
    monkeypatch.setattr(peer, "_handshake_owners", lambda plan: owners)
    extra = encode_hello(_plan(), None)
    monkeypatch.undo()
    with pytest.raises(ProtocolError, match="unexpected transport section 'verbs'"):
        decode_hello(extra, SERVER)


def test_every_truncation_and_trailing_bytes_are_refused():
    payload = encode_hello(_plan(), None)
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError, match="malformed"):
            decode_hello(payload[:cut], SERVER)
    with pytest.raises(ProtocolError, match="unexpected trailing bytes"):
        decode_hello(payload + b"\x00", SERVER)


def test_random_corruption_gives_a_plan_or_a_refusal_and_nothing_else():
    valid = encode_hello(_plan(steps=[Step("tcp", "bw", [8]), Step("tcp", "latency", [1, 2])]), None)
    rng = random.Random(20261130)
    refused = 0
    for _ in range(3000):
        payload = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            payload[rng.randrange(len(payload))] = rng.randrange(256)
        try:
            decode_hello(bytes(payload), SERVER)
        except ProtocolError:
            refused += 1
    assert refused > 1000  # most corruptions are caught; the rest decoded to some other valid plan


def test_a_message_of_another_protocol_version_is_refused_naming_both_versions():
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(5)
        left.sendall(HEADER.pack(MAGIC, VERSION - 1, HELLO, 0))
        with pytest.raises(ProtocolError, match=f"version {VERSION - 1} and this side .* version {VERSION}"):
            recv_message(right, HELLO)


def test_a_refusal_is_read_whatever_the_senders_protocol_version():
    left, right = socket.socketpair()
    with left, right:
        right.settimeout(5)
        words = Fields().text("this server speaks another version").payload()
        left.sendall(HEADER.pack(MAGIC, VERSION + 1, ERROR, len(words)) + words)
        with pytest.raises(Refused, match="this server speaks another version"):
            recv_message(right, HELLO)
        send_message(left, ERROR, Fields().text("no such device").payload())
        with pytest.raises(Refused, match="no such device"):
            recv_message(right, HELLO)

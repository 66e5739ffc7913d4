"""The peer handshake and the rendezvous wire format, without a process: every field checked, every refusal worded."""

from __future__ import annotations

import random
import socket
from dataclasses import replace

import pytest

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
from fabricbench.errors import UsageError
from fabricbench.launch import peer
from fabricbench.launch.peer import decode_hello, encode_hello
from fabricbench.measure import kernels
from fabricbench.measure.plan import Plan, Step
from fabricbench.terminal import printable
from fabricbench.transports.options import LOOP
from fabricbench.transports.tcp.transport import TCP_OPTIONS
from fabricbench.transports.verbs.rdma import RDMA_OPTIONS

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


@pytest.mark.parametrize("loop", LOOP.CHOICES)
def test_the_clients_tcp_loop_reaches_the_server(loop):
    tcp = {} if loop == "auto" else {"loop": loop}
    plan = _plan(transport_options={"tcp": tcp | {"port": 1}})
    decoded, _, _ = decode_hello(encode_hello(plan, None), SERVER)
    assert decoded.transport_options == {"tcp": {"address": "10.0.0.2"} | tcp, "verbs": {"device": "rxe0"}}


def test_the_clients_cq_mod_reaches_the_server_and_its_device_stays_the_servers():
    plan = _plan(steps=[Step("verbs", "bw", [8])], transport_options={"verbs": {"cq_mod": 8, "device": "mlx5_9"}})
    decoded, _, _ = decode_hello(encode_hello(plan, None), SERVER)
    assert decoded.transport_options["verbs"] == {
        "device": "rxe0",
        "cq_mod": 8,
        "qp_type": "rc",
        "post_list": 1,
        "events": False,
    }


def test_the_clients_queue_pair_and_loop_settings_reach_the_server():
    chosen = {"qp_type": "ud", "post_list": 4, "events": True, "loop": "c"}
    plan = _plan(steps=[Step("verbs-send", "bw", [8])], transport_options={"verbs": chosen})
    decoded, _, _ = decode_hello(encode_hello(plan, None), SERVER)
    assert decoded.transport_options["verbs"] == {"device": "rxe0"} | chosen


def test_a_bad_verbs_queue_pair_type_is_refused():
    payload = bytearray(encode_hello(_plan(steps=[Step("verbs", "bw", [8])]), None))
    payload[-7] = 7  # the verbs section ends: cq_mod u32, qp type u8, post list u32, events u8, loop u8
    with pytest.raises(ProtocolError, match="bad verbs queue-pair or loop settings"):
        decode_hello(payload, SERVER)


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
    ({"steps": [Step("tcp", "bw", [2**31])]}, "bw size 2147483648 B is outside 0..1073741824 B"),
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
    payload = encode_hello(_plan(), None).replace(b'"transport":"tcp"', b'"transport":"nop"', 1)  # in the plan
    with pytest.raises(ProtocolError, match="unknown transport 'nop'"):
        decode_hello(payload, SERVER)


def test_a_bad_hugepages_code_and_a_bad_tcp_loop_code_are_refused():
    payload = bytearray(encode_hello(_plan(steps=[Step("tcp", "bw", [8])]), None))
    loop_at = len(payload) - 1  # the tcp section is the last field: its one byte is the loop
    payload[loop_at] = 9
    with pytest.raises(ProtocolError, match="bad tcp loop setting"):
        decode_hello(bytes(payload), SERVER)
    fixed = 2 + len(peer.__version__)  # the client's version comes before hugepages
    payload = bytearray(encode_hello(_plan(), None))
    payload[fixed] = 7
    with pytest.raises(ProtocolError, match="bad hugepages setting 7"):
        decode_hello(bytes(payload), SERVER)


def test_a_transport_section_of_another_version_is_refused_naming_both(monkeypatch):
    monkeypatch.setattr(TCP_OPTIONS, "handshake_version", 2)
    payload = encode_hello(_plan(), None)
    monkeypatch.setattr(TCP_OPTIONS, "handshake_version", 1)
    with pytest.raises(ProtocolError, match="tcp fields are version 2; this server speaks tcp version 1"):
        decode_hello(payload, SERVER)


def test_missing_unexpected_and_repeated_sections_are_refused(monkeypatch):
    monkeypatch.setattr(TCP_OPTIONS, "handshake_version", 0)
    without = encode_hello(_plan(), None)
    monkeypatch.undo()
    with pytest.raises(ProtocolError, match="no transport section for tcp"):
        decode_hello(without, SERVER)
    owners = {"tcp": TCP_OPTIONS, "verbs": RDMA_OPTIONS}
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


# ---- serve's caps, budget, log escaping and token ---------------------------------------------------


def _default_caps() -> peer.Caps:
    """The caps `fabricbench serve` has when given no --max-* option."""
    from fabricbench.cli import build_parser

    args = build_parser().parse_args(["serve"])
    return peer.Caps(
        args.max_timeout, args.max_iterations, args.max_warmup, args.max_window, args.max_bytes, args.max_session
    )


def test_the_default_peer_sweep_of_every_transport_fits_the_default_caps():
    from fabricbench.measure.kernels import get_kernel
    from fabricbench.measure.plan import kernel_sizes
    from fabricbench.transports import supported_kernels

    for transport in ("tcp", "verbs", "verbs-send", "perftest"):
        steps = [Step(transport, k, kernel_sizes(get_kernel(k), None)) for k in sorted(supported_kernels(transport))]
        budget = peer.admit(Plan(steps=steps, run_id="r1"), _default_caps())  # -W 64, --timeout 120: run's defaults
        assert 120 < budget < _default_caps().session


OVER_CAPS = [
    ({"timeout": 86400.0}, "timeout 86400 s is over this server's cap of 300 s (serve --max-timeout)"),
    ({"iterations": 10**9}, "1000000000 iterations is over this server's cap of 1000000 (serve --max-iterations)"),
    ({"warmup": 10**6}, "a warm-up of 1000000 iterations is over this server's cap of 100000 (serve --max-warmup)"),
    ({"window": 65536}, "window 65536 is over this server's cap of 1024 (serve --max-window)"),
    (
        {"window": 1024, "steps": [Step("tcp", "bibw", [4 << 20])]},
        "bibw at 4194304 B with window 1024 needs 8192 MiB per rank, over this server's cap of 512 MiB "
        "(serve --max-bytes)",
    ),
    ({"iterations": 900_000, "steps": [Step("tcp", "bw", [1 << 20])]}, "(serve --max-session)"),
]


@pytest.mark.parametrize(("fields", "words"), OVER_CAPS)
def test_a_plan_over_a_cap_is_refused_naming_the_cap_and_its_option(fields, words):
    plan, _, _ = decode_hello(encode_hello(_plan(**fields), None), SERVER)  # the protocol itself takes it
    with pytest.raises(ProtocolError) as refused:
        peer.admit(plan, _default_caps())
    assert words in str(refused.value)


def test_a_sessions_budget_is_its_timeout_plus_its_slow_link_length_with_slack():
    short = _plan(steps=[Step("tcp", "latency", [8])], iterations=1000, warmup=0, timeout=7.0)
    per_iteration = kernels.SLOW_ROUND_TRIP_S + 2 * (kernels.SLOW_MESSAGE_S + 8 / kernels.SLOW_BYTES_PER_S)
    expected = 7.0 + peer.BUDGET_SLACK * (peer.SLOW_SIZE_SETUP_S + 1000 * per_iteration)
    assert peer.session_budget(short) == pytest.approx(expected)
    longer = _plan(steps=[Step("tcp", "latency", [8, 1 << 20])], iterations=1000, warmup=0, timeout=7.0)
    assert peer.session_budget(longer) > peer.session_budget(short) + 4 * 1000 * 2 * (1 << 20) / 100e6


def _sweep(kernels: list[str], sizes: list[int], transport: str = "tcp", **fields) -> Plan:
    return _plan(steps=[Step(transport, k, sizes) for k in kernels], timeout=120.0, **fields)


ISSUE_SIZES = [1 << i for i in range(3, 21)]  # -m 8:1M


def test_max_time_bounds_the_budget_as_the_runner_bounds_each_sizes_count():
    # run --peer -k latency,bw -m 8:1M -i 100000 --max-time 0.25: about 10 s of work, once a 557,559 s budget.
    capped = _sweep(["latency", "bw"], ISSUE_SIZES, iterations=100_000, max_time=0.25)
    decoded, _, _ = decode_hello(encode_hello(capped, None), SERVER)
    assert peer.admit(decoded, _default_caps()) < 600
    uncapped = _sweep(["latency", "bw"], ISSUE_SIZES, iterations=100_000)
    assert peer.session_budget(uncapped) > 500_000
    # One size: its warm-up (not capped), then at most --max-time of iterations, or one iteration.
    one = _plan(steps=[Step("tcp", "bw", [1 << 20])], iterations=100_000, warmup=3, max_time=0.25, timeout=7.0)
    each = kernels.SLOW_ROUND_TRIP_S + 64 * kernels.SLOW_MESSAGE_S + 64 * (1 << 20) / kernels.SLOW_BYTES_PER_S
    expected = 7.0 + peer.BUDGET_SLACK * (peer.SLOW_SIZE_SETUP_S + 3 * each + 0.25 + each)
    assert peer.session_budget(one) == pytest.approx(expected)
    # Without a warm-up the runner still times one probe iteration to set the count.
    probe = _plan(steps=[Step("tcp", "bw", [1 << 20])], iterations=100_000, warmup=0, max_time=0.25, timeout=7.0)
    assert peer.session_budget(probe) == pytest.approx(
        7.0 + peer.BUDGET_SLACK * (peer.SLOW_SIZE_SETUP_S + 2 * each + 0.25)
    )
    # --max-time lowers nothing below what the iterations themselves take.
    few = _plan(steps=[Step("tcp", "latency", [8])], iterations=10, warmup=0, max_time=60.0, timeout=7.0)
    assert peer.session_budget(few) == pytest.approx(
        peer.session_budget(replace(few, max_time=None))
        + 4 * (kernels.SLOW_ROUND_TRIP_S + 2 * (kernels.SLOW_MESSAGE_S + 8 / kernels.SLOW_BYTES_PER_S))
    )


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"warmup": 100_000}, "a warm-up is not cut short by --max-time"),
        ({"max_time": 86_400.0}, "a day per size bounds nothing"),
    ],
)
def test_a_plan_whose_real_bound_is_over_the_cap_is_still_refused_under_max_time(fields, why):
    plan = _sweep(["latency", "bw"], ISSUE_SIZES, iterations=100_000, **({"max_time": 0.25} | fields))
    with pytest.raises(ProtocolError, match=r"\(serve --max-session\)"):
        peer.admit(plan, _default_caps())


def test_max_time_does_not_bound_a_reference_tool_and_the_pairs_kernels_run_both_directions():
    perftest = _sweep(["bw"], [1 << 20], "perftest", iterations=100_000, max_time=0.25)
    assert peer.session_budget(perftest) == pytest.approx(peer.session_budget(replace(perftest, max_time=None)))
    pair, pairs = (_sweep([k], [1 << 20], iterations=1000, warmup=0) for k in ("bw", "pairs-bw"))
    assert peer.session_budget(pairs) - 120 == pytest.approx(2 * (peer.session_budget(pair) - 120), rel=0.01)
    # The pairs kernels cap only after a warm-up: with none, --max-time changes nothing.
    unwarmed = _sweep(["pairs-bw"], [1 << 20], iterations=1000, warmup=0, max_time=0.25)
    assert peer.session_budget(unwarmed) == pytest.approx(peer.session_budget(pairs))
    warmed = _sweep(["pairs-bw"], [1 << 20], iterations=1000, warmup=1, max_time=0.25)
    assert peer.session_budget(warmed) < peer.session_budget(pairs) / 10


def test_message_bytes_is_size_times_window_times_directions():
    get_kernel = kernels.get_kernel
    assert get_kernel("latency").message_bytes(1024, 2, 64) == 1024
    assert get_kernel("bw").message_bytes(1024, 2, 64) == 64 * 1024
    assert get_kernel("bibw").message_bytes(1024, 2, 64) == 2 * 64 * 1024
    assert get_kernel("allgather").message_bytes(1024, 2, 64) == 2 * 1024  # one block per rank


@pytest.mark.parametrize(
    ("sent", "logged"),
    [
        ("0.9.1", "0.9.1"),
        ("1.0\nfabricbench serve: forged line", "1.0\\nfabricbench serve: forged line"),
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
        ("\u202eevil\x00", "\\u202eevil\\x00"),
        ("x" * 100, "x" * 61 + "..."),
    ],
)
def test_what_a_client_sent_is_logged_printable_and_short(sent, logged):
    assert printable(sent, 64) == logged
    assert printable(sent, 64).isprintable()


def test_the_token_comes_from_the_option_or_the_environment_and_is_never_empty(monkeypatch):
    monkeypatch.delenv(peer.TOKEN_VAR, raising=False)
    assert peer.token_from(None) is None
    assert peer.token_from("s3cret") == b"s3cret"
    monkeypatch.setenv(peer.TOKEN_VAR, "from-env")
    assert peer.token_from(None) == b"from-env" and peer.token_from("given") == b"given"
    monkeypatch.setenv(peer.TOKEN_VAR, "")
    with pytest.raises(UsageError, match="FABRICBENCH_TOKEN is empty"):
        peer.token_from(None)
    with pytest.raises(UsageError, match="--token is empty"):
        peer.token_from("")


def test_the_proof_depends_on_the_token_the_nonce_and_the_hello_and_holds_no_secret():
    hello = encode_hello(_plan(), None)
    proof = peer.token_proof(b"s3cret", b"n" * 32, hello)
    assert len(proof) == 32 and b"s3cret" not in proof
    assert proof == peer.token_proof(b"s3cret", b"n" * 32, hello)
    others = [(b"s3creT", b"n" * 32, hello), (b"s3cret", b"m" * 32, hello), (b"s3cret", b"n" * 32, hello + b"\x00")]
    assert all(peer.token_proof(*args) != proof for args in others)


def test_the_metadata_command_line_never_holds_the_token():
    argv = ["fabricbench", "run", "--peer", "h:1", "--token", "s3cret", "--token=other", "-k", "latency"]
    masked = peer.masked_command_line(argv)  # the spelling too, for a command line this process did not parse
    assert "s3cret" not in masked and "--token=other" not in masked and masked[-2:] == ["-k", "latency"]


def test_listening_on_ipv6_where_the_kernel_has_none_says_ipv6_is_unavailable(monkeypatch):
    import errno

    from fabricbench.control import rendezvous

    real = socket.socket

    def no_ipv6(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(family, *args, **kwargs)

    monkeypatch.setattr(rendezvous.socket, "socket", no_ipv6)
    with pytest.raises(UsageError, match=r"cannot listen on \[::1\]:0: IPv6 is unavailable on this host"):
        rendezvous.listen("::1", 0)
    rendezvous.listen("127.0.0.1", 0).close()  # IPv4 is as it was

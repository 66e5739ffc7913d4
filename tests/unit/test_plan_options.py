"""The plan's own options: their defaults, the one check of every value, the JSON a plan travels as (to the other
ranks, and in a --peer HELLO under a byte cap), and the argument types that parse them, without a process."""

from __future__ import annotations

import json

import pytest

from fabricbench import argtypes
from fabricbench.cli import build_parser
from fabricbench.control.rendezvous import Fields, ProtocolError
from fabricbench.errors import UsageError
from fabricbench.launch import peer
from fabricbench.launch.peer import MAX_PLAN_BYTES, decode_hello, encode_hello
from fabricbench.measure.plan import AllPairsOptions, OsuColumns, Plan, Step
from fabricbench.measure.verdict import DEFAULT_OUTLIER_Z, MIN_EFFECT
from fabricbench.run.planner import build_plan


def _plan(**fields) -> Plan:
    base = {"steps": [Step("tcp", "latency", [8, 64])], "run_id": "r1", "timeout": 30.0}
    return Plan(**(base | fields))


def _json(**changes) -> bytes:
    """A valid plan's JSON with some members replaced: what a rank or a client could send."""
    raw = json.loads(_plan().to_json())
    for name, value in changes.items():
        section, _, member = name.partition("__")
        if member:
            raw[section][member] = value
        else:
            raw[section] = value
    return json.dumps(raw).encode()


def _built(*run_args: str, ranks: int = 2) -> Plan:
    return build_plan(build_parser().parse_args(["run", *run_args]), ranks)


def test_the_options_defaults_are_the_command_lines():
    assert Plan(steps=[]).pairs == AllPairsOptions("isolated", False, DEFAULT_OUTLIER_Z, MIN_EFFECT, False)
    assert Plan(steps=[]).osu == OsuColumns(False, (), "")
    built = _built("-t", "tcp", "-k", "pairs-bw", "-m", "8")
    assert built.pairs == AllPairsOptions() and built.osu == OsuColumns()
    assert (built.window, built.timeout, built.repeat, built.label) == (64, 120.0, 1, "")


def test_run_fills_the_options_it_was_given():
    built = _built("-t", "tcp", "-k", "pairs-bw", "-m", "8", "--outlier-z", "2.5", "--outlier-floor", "50", "--json")
    assert built.pairs == AllPairsOptions("isolated", False, 2.5, 0.5, True)
    assert built.output_format == "none"  # --json: stdout holds the verdict alone
    osu = _built("-t", "mpi", "-k", "allreduce", "-m", "8", "--format", "osu", "--osu-full")
    assert osu.osu == OsuColumns(True, (), "")
    osu = _built("-t", "mpi", "-k", "latency", "-m", "8", "--format", "osu", "--osu-percentiles", "99,50")
    assert osu.osu == OsuColumns(False, (99.0, 50.0), "")


def test_per_node_reaches_every_pattern_that_places_hosts_whichever_kernels_run():
    """--per-node with congestion alone (no all-pairs kernel) places hosts: it was kept only with the all-pairs
    options, which fall back to their defaults when no all-pairs kernel runs."""
    assert _built("-t", "mpi", "-k", "congestion", "--per-node", ranks=10).congestion.per_node is True
    assert _built("-t", "mpi", "-k", "congestion", ranks=10).congestion.per_node is False
    assert _built("-t", "tcp", "-k", "pairs-bw", "--per-node").pairs.per_node is True


def test_a_plan_and_its_options_survive_json():
    plan = _plan(
        iterations=5,
        warmup=0,
        max_time=0.5,
        validate=True,
        osu=OsuColumns(True, (50.0, 99.9), "MPI_CHAR"),
        pairs=AllPairsOptions("shift", True, 3.0, 0.5, True),
        transport_options={"tcp": {"port": 9000}},
        repeat=3,
        ranks=[2, 4],
        steps=[Step("mpi", "allreduce", [4, 8], "MPI_INT"), Step("tcp", "barrier", [0])],
    )
    assert Plan.from_json(plan.to_json()) == plan
    built = _built("-t", "tcp", "-k", "latency,bw,pairs-latency", "-m", "0:64")
    assert Plan.from_json(built.to_json()) == built


def test_an_earlier_plan_without_the_options_reads_with_their_defaults():
    raw = json.loads(_plan().to_json())
    del raw["osu"], raw["pairs"], raw["steps"][0]["datatype"]
    read = Plan.from_json(json.dumps(raw).encode())
    assert read.osu == OsuColumns() and read.pairs == AllPairsOptions() and read.steps[0].datatype == ""


BAD_JSON = [
    (b"{", "the plan is not JSON"),
    (b"\xff\xfe", "the plan is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "the plan is not JSON"),
    (b"[]", "the plan is not a JSON object"),
    (b'{"iterations": 5}', "the plan has no 'steps'"),
    (b'{"steps": {}}', "the plan has no list of steps"),
    (_json(colour="red"), "unknown plan field 'colour'"),
    (_json(steps=[{"transport": "tcp", "kernel": "bw", "sizes": [8], "speed": 1}]), "unknown step field 'speed'"),
    (_json(steps=[{"transport": "tcp", "sizes": [8]}]), "the step has no 'kernel'"),
    (_json(steps=["tcp"]), "the step is not a JSON object"),
    (_json(osu=[]), "the osu columns is not a JSON object"),
    (_json(pairs__colour=1), "unknown all-pairs options field 'colour'"),
    (_json(iterations=0), "iterations 0 out of range 1..1000000000"),
    (_json(iterations=True), "iterations True out of range"),
    (_json(iterations=2.5), "iterations 2.5 out of range"),
    (_json(warmup=-1), "warm-up -1 out of range 0..1000000000"),
    (_json(window=70000), "window 70000 out of range 1..65536"),
    (_json(max_time=0), "bad --max-time 0"),
    (b'{"steps": [], "max_time": Infinity}', "bad --max-time inf"),
    (_json(timeout=0.5), "bad --timeout 0.5: from 1 to 86400 seconds"),
    (b'{"steps": [], "timeout": NaN}', "bad --timeout nan"),
    (_json(validate=1), "bad validate flag 1"),
    (_json(label=7), "bad label 7"),
    (_json(output_format="html"), "bad output format 'html'"),
    (_json(progress="yes"), "bad progress flag 'yes'"),
    (_json(transport_options={"tcp": 1}), "bad transport options"),
    (_json(repeat=1001), "repeat 1001 out of range 1..1000"),
    (_json(ranks=[4, 2]), "bad --ranks [4, 2]"),
    (_json(ranks=[0]), "bad --ranks [0]"),
    (_json(osu__full=1), "bad --osu-full flag 1"),
    (_json(osu__percentiles=[42]), "bad --osu-percentiles (42,): choose from 50, 90, 99, 99.9"),
    (_json(osu__datatype="MPI_BOGUS"), "bad --osu-datatype 'MPI_BOGUS'"),
    (_json(pairs__schedule="ring"), "bad --schedule 'ring': one of isolated, shift"),
    (_json(pairs__per_node="no"), "bad --per-node flag 'no'"),
    (_json(pairs__outlier_z=0), "bad --outlier-z 0: above 0 and at most 100"),
    (_json(pairs__outlier_z=101), "bad --outlier-z 101"),
    (_json(pairs__outlier_floor=-0.1), "bad --outlier-floor -0.1: a fraction from 0 to 10"),
    (_json(pairs__json=0), "bad --json flag 0"),
    (_json(steps=[{"transport": "", "kernel": "bw", "sizes": [8]}]), "bad transport ''"),
    (_json(steps=[{"transport": "tcp", "kernel": ["bw"], "sizes": [8]}]), "bad kernel ['bw']"),
    (_json(steps=[{"transport": "tcp", "kernel": "wobble", "sizes": [8]}]), "unknown kernel 'wobble'"),
    (_json(steps=[{"transport": "tcp", "kernel": "bw", "sizes": 8}]), "bad sizes 8 for bw"),
    (_json(steps=[{"transport": "tcp", "kernel": "bw", "sizes": ["8"]}]), "bw size '8' is not a byte count"),
    (_json(steps=[{"transport": "tcp", "kernel": "bw", "sizes": [2**31]}]), "bw size 2147483648 B is outside"),
    (_json(steps=[{"transport": "tcp", "kernel": "barrier", "sizes": [8]}]), "barrier size 8 B is outside 0..0 B"),
    (_json(steps=[{"transport": "tcp", "kernel": "bw", "sizes": [8], "datatype": "MPI_DOUBLE"}]), "bad datatype"),
]


@pytest.mark.parametrize(("data", "words"), BAD_JSON)
def test_a_bad_plan_is_refused_in_one_line_naming_the_field(data, words):
    with pytest.raises(UsageError) as refused:
        Plan.from_json(data)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_long_value_is_shortened_in_its_refusal():
    with pytest.raises(UsageError) as refused:
        Plan.from_json(_json(steps=[{"transport": "x" * 100_000, "kernel": "bw", "sizes": [8]}]))
    assert len(str(refused.value)) < 100


# ---- the plan in a --peer HELLO ---------------------------------------------------------------------


def test_the_hello_carries_what_the_server_runs_and_nothing_of_the_clients_host_or_console():
    plan = _plan(
        out_dir="/home/me/results",
        label="mine",
        output_format="osu",
        osu=OsuColumns(True, (), ""),
        pairs=AllPairsOptions(outlier_z=2.0, json=True),
        progress=True,
        transport_options={"tcp": {"address": "10.0.0.1", "port": 9000}},
        window=16,
        validate=True,
    )
    decoded, _, _ = decode_hello(encode_hello(plan, None), {"tcp": {"address": "10.0.0.2"}})
    assert (decoded.out_dir, decoded.label, decoded.output_format, decoded.progress) == ("", "", "none", False)
    assert decoded.osu == OsuColumns() and decoded.pairs == AllPairsOptions()
    assert decoded.transport_options == {"tcp": {"address": "10.0.0.2"}}
    assert (decoded.window, decoded.validate, decoded.steps) == (16, True, plan.steps)


def test_a_plan_over_the_hellos_byte_cap_is_refused_before_connecting():
    steps = [Step("tcp", "latency", [10**9 + i for i in range(64)])] * 64  # 64 steps of 64 ten-digit sizes
    with pytest.raises(UsageError, match=f"a --peer run's plan is at most {MAX_PLAN_BYTES} B as JSON; this one is"):
        encode_hello(_plan(steps=steps), None)


def _hello_around(plan_json: bytes) -> bytes:
    return Fields().text(peer.__version__).u8(0).blob(plan_json).u16(0).payload()


def test_a_hello_whose_plan_is_over_the_byte_cap_is_refused_unread():
    padded = _plan().to_json()[:-1] + b',"label":"' + b"x" * MAX_PLAN_BYTES + b'"}'
    with pytest.raises(ProtocolError, match=f"over the {MAX_PLAN_BYTES} B limit"):
        decode_hello(_hello_around(padded), {})


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"timeout": 0.5}, "bad --timeout 0.5"),  # the plan's own check, as run's
        ({"pairs__outlier_z": -1}, "bad --outlier-z -1"),
        ({"repeat": 2}, "no --repeat and no --ranks"),
        ({"ranks": [2]}, "no --repeat and no --ranks"),
        ({"pairs__schedule": "shift"}, "no --schedule shift and no --per-node"),
        ({"pairs__per_node": True}, "no --schedule shift and no --per-node"),
        ({"run_id": ""}, "bad run id ''"),
    ],
)
def test_a_hellos_plan_is_checked_as_runs_then_as_a_peer_runs(changes, words):
    with pytest.raises(ProtocolError, match=words):
        decode_hello(_hello_around(_json(**changes)), {})


# ---- the argument types behind the plan's options ---------------------------------------------------


def test_a_byte_range_takes_either_end_and_refuses_a_backward_or_oversized_one():
    sizes = argtypes.byte_range("size range", "size", 1 << 20, "too big")
    assert sizes("4K") == (None, 4096) and sizes("8:1M") == (8, 1 << 20) and sizes(":16") == (None, 16)
    with pytest.raises(UsageError, match="bad size '': expected a byte count"):
        sizes("8:")
    with pytest.raises(UsageError, match="bad size range '9:3': minimum 9 is above maximum 3"):
        sizes("9:3")
    with pytest.raises(UsageError, match=r"bad size range '2M': too big \(1048576 B\)"):
        sizes("2M")
    either = argtypes.byte_range("range", "size", open_max=True)
    assert either("8:") == (8, None) and either(":") == (None, None) and either("1K:2K") == (1024, 2048)


@pytest.mark.parametrize("text", ["", " ", "-1", "+1", "1e1", "inf", "nan", "1.2.3", "5_0", "\U0001d7d6", "."])
def test_a_bounded_decimal_is_plain_ascii_digits_and_a_point(text):
    with pytest.raises(UsageError, match="--z must be a number above 0 and at most 10, got"):
        argtypes.bounded_decimal("--z", 0, 10, above=True)(text)


def test_a_bounded_decimal_keeps_its_bounds():
    z = argtypes.bounded_decimal("--z", 0, 10, above=True)
    assert (z("10"), z(".5"), z("5."), z(" 3 ")) == (10.0, 0.5, 5.0, 3.0)
    with pytest.raises(UsageError, match="above 0"):
        z("0")
    floor = argtypes.bounded_decimal("--floor", 0, 1000, what="a percentage")
    assert floor("0") == 0.0 and floor("1000") == 1000.0
    with pytest.raises(UsageError, match="--floor must be a percentage from 0 to 1000, got '1000.5'"):
        floor("1000.5")


def test_nonempty_text_says_what_to_give():
    assert argtypes.nonempty("--x", "give a name")("a") == "a"
    with pytest.raises(UsageError, match="--x is empty: give a name"):
        argtypes.nonempty("--x", "give a name")("  ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("h:1", ("h", 1)), ("[::1]:18600", ("::1", 18600)), ("[fe80::1%eth0]:2", ("fe80::1%eth0", 2))],
)
def test_peer_is_parsed_once_into_host_and_port(text, expected):
    assert argtypes.host_and_port(text) == expected
    assert build_parser().parse_args(["run", "--peer", text]).peer == expected

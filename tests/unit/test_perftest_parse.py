"""perftest's tools as the perftest and perftest-send transports run them: the flags, what perftest refuses, and
its output as captured from perftest 4.5 on rxe0 (tests/unit/data/perftest, whose README lists the commands)."""

from __future__ import annotations

import json
import math
import os
import socket
import stat
from dataclasses import asdict
from pathlib import Path

import pytest

from fabricbench.errors import PeerError, Unsupported
from fabricbench.measure.kernels import ATOMIC_KERNELS, get_kernel
from fabricbench.measure.plan import Plan, Step
from fabricbench.transports import supported_kernels, transport_class
from fabricbench.transports.capabilities import SelfTimed
from fabricbench.transports.verbs import perftest
from fabricbench.transports.verbs.perftest import (
    DEFAULT_INLINE,
    Mode,
    flags,
    parse_bandwidth,
    parse_latency,
    refusal,
    refused,
    setting,
)

DATA = Path(__file__).parent / "data" / "perftest"
LATENCY = ("lat_min_us", "lat_max_us", "lat_p50_us", "lat_mean_us", "lat_stdev_us", "lat_p99_us", "lat_p999_us")


def _text(name: str) -> str:
    return (DATA / name).read_text()


# --- the outputs ----------------------------------------------------------------------------------------------------

LATENCY_FIXTURES = {
    "ib_atomic_lat_fetch_and_add.txt": (18.23, 157.69, 19.35, 20.96, 4.07, 157.69, 157.69),
    "ib_atomic_lat_cmp_and_swap.txt": (18.62, 55.17, 20.20, 22.43, 4.41, 55.17, 55.17),
    "ib_send_lat.txt": (11.00, 57.25, 11.77, 13.20, 3.27, 57.25, 57.25),
    "ib_send_lat_ud.txt": (16.00, 113.06, 17.37, 19.24, 4.69, 113.06, 113.06),
    "ib_write_lat_uc.txt": (14.62, 56.21, 15.52, 16.07, 1.59, 56.21, 56.21),
}

BANDWIDTH_FIXTURES = {  # BW peak, BW average (MiB/s as printed), MsgRate (Mpps), bytes
    "ib_atomic_bw_cmp_and_swap.txt": (0.42, 0.23, 0.029995, 8),
    "ib_atomic_bw_post_list.txt": (0.50, 0.26, 0.033740, 8),
    "ib_send_bw_ud.txt": (1.96, 1.22, 0.020009, 64),
    "ib_send_bw_ud_bidirectional.txt": (3.79, 2.42, 0.039658, 64),
    "ib_send_bw_post_list_events.txt": (42.10, 33.67, 0.008620, 4096),
}


@pytest.mark.parametrize(("name", "expected"), LATENCY_FIXTURES.items())
def test_atomic_send_and_uc_latency_tables_map_to_the_latency_columns(name, expected):
    assert parse_latency(_text(name)) == dict(zip(LATENCY, expected, strict=True))


@pytest.mark.parametrize(("name", "expected"), BANDWIDTH_FIXTURES.items())
def test_atomic_and_send_bandwidth_tables_are_converted_from_mib(name, expected):
    peak, average, mpps, size = expected
    stats = parse_bandwidth(_text(name))
    assert stats["bw_MBps"] == pytest.approx(average * 1.048576)
    assert stats["bw_peak_MBps"] == pytest.approx(peak * 1.048576)
    assert stats["msgrate_per_s"] == pytest.approx(mpps * 1e6)
    # perftest's own consistency, once its MiB are counted as MiB (two decimals of MB/sec: a loose tolerance).
    assert stats["msgrate_per_s"] * size / 1e6 == pytest.approx(stats["bw_MBps"], rel=0.05)


def test_a_failed_clock_estimate_prints_inf_and_minus_nan_and_both_become_nan():
    text = _text("ib_send_lat_inf.txt")
    assert "Correlation coefficient" in text and "-nan" in text
    stats = parse_latency(text)
    assert set(stats) == set(LATENCY) and all(math.isnan(value) for value in stats.values())


def test_the_banner_says_what_perftest_used():
    assert setting(_text("ib_send_lat_ud.txt"), "Max inline data") == "0[B]"
    assert setting(_text("ib_send_lat_ud.txt"), "Connection type") == "UD"
    assert setting(_text("ib_send_bw_post_list_events.txt"), "Post List") == "4"
    assert "Test with events" in _text("ib_send_bw_post_list_events.txt")
    assert setting(_text("ib_atomic_bw_cmp_and_swap.txt"), "CQ Moderation") == "4"
    # The atomics (and READ) print no inline size: their method column carries none.
    assert setting(_text("ib_atomic_lat_fetch_and_add.txt"), "Max inline data") == ""
    assert "Atomic CMP_AND_SWAP Latency Test" in _text("ib_atomic_lat_cmp_and_swap.txt")


REFUSAL_FIXTURES = {
    "ib_send_bw_ud_over_mtu_server.txt": "Max message size in UD cannot be greater than MTU",
    "ib_write_bw_post_list_not_multiple.txt": "Post list size must be a multiple of CQ moderation",
    "ib_write_lat_events.txt": "Events feature not available on WRITE verb",
    "ib_read_lat_uc.txt": "UC connection not possible in READ/ATOMIC verbs",
    "ib_atomic_bw_ud.txt": "UD connection only possible in SEND verb",
}


@pytest.mark.parametrize(("name", "words"), REFUSAL_FIXTURES.items())
def test_perftests_refusals_are_recognised_in_its_own_words(name, words):
    assert refused(_text(name)) == words
    with pytest.raises(PeerError, match="no result table"):
        parse_latency(_text(name))


def test_a_result_is_no_refusal():
    assert refused(_text("ib_send_bw_ud.txt")) == refused(_text("ib_atomic_lat_fetch_and_add.txt")) == ""


# --- flags and refusals -----------------------------------------------------------------------------------------------


def _k(name: str):
    return get_kernel(name)


def test_the_atomics_are_ib_atomic_lat_and_ib_atomic_bw_with_their_operation():
    assert set(ATOMIC_KERNELS) <= supported_kernels("perftest")
    assert perftest.TOOLS["fop"] == perftest.TOOLS["cas"] == "ib_atomic_lat"
    assert perftest.TOOLS["fop-rate"] == perftest.TOOLS["cas-rate"] == "ib_atomic_bw"
    rc = Mode()
    assert flags("ib_atomic_lat", _k("fop"), rc, 16, DEFAULT_INLINE) == ["-A", "FETCH_AND_ADD"]
    assert flags("ib_atomic_lat", _k("cas"), rc, 16, DEFAULT_INLINE) == ["-A", "CMP_AND_SWAP"]
    assert flags("ib_atomic_bw", _k("cas-rate"), rc, 16, 0) == ["-A", "CMP_AND_SWAP", "-t", "16", "-Q", "4"]


def test_perftest_send_mirrors_verbs_send():
    assert supported_kernels("perftest-send") == supported_kernels("verbs-send") == {"latency", "bw", "bibw"}
    cls = transport_class("perftest-send")
    assert issubclass(cls, SelfTimed) and [group.name for group in cls.option_groups] == ["verbs"]
    assert set(cls.tools.values()) == {"ib_send_lat", "ib_send_bw"}
    assert supported_kernels("perftest") >= supported_kernels("verbs")


def test_the_verbs_options_become_perftests_flags():
    ud = Mode(qp_type="ud", post_list=4, events=True)
    assert flags("ib_send_bw", _k("bw"), ud, 64, DEFAULT_INLINE) == ["-c", "UD", "-t", "64", "-Q", "4", "-l", "4", "-e"]
    assert flags("ib_send_bw", _k("bibw"), Mode(qp_type="uc"), 16, 64) == ["-b", "-c", "UC", "-t", "16", "-Q", "4",
                                                                        "-I", "64"]  # fmt: skip
    # The post list and the window's tx depth are for the bandwidth tools only, as perftest wants.
    assert flags("ib_send_lat", _k("latency"), ud, 64, 0) == ["-c", "UD", "-e", "-I", "0"]
    # --inline at its default leaves perftest its own (220 WRITE, 236 SEND, 188 UD); READ and atomics take no -I.
    assert flags("ib_write_lat", _k("latency"), Mode(), 64, DEFAULT_INLINE) == []
    assert flags("ib_read_lat", _k("get"), Mode(events=True), 64, 0) == ["-e"]
    assert flags("ib_atomic_bw", _k("fop-rate"), Mode(), 64, 0) == ["-A", "FETCH_AND_ADD", "-t", "64", "-Q", "16"]


def test_inlines_default_is_the_command_lines():
    from fabricbench.cli import build_parser

    assert build_parser().parse_args(["run"]).inline == DEFAULT_INLINE


def test_cq_moderation_follows_the_run_and_fits_a_post_list():
    assert Mode().cq_moderation(64) == 16  # the verbs default: a quarter of the window
    assert Mode(post_list=32).cq_moderation(64) == 16  # a multiple of it: kept
    assert Mode(post_list=4).cq_moderation(64) == 4  # not: the post list, as perftest's -l without -Q
    assert Mode(cq_mod=8, post_list=4).cq_moderation(64) == 8  # --cq-mod as given (perftest then refuses)


REFUSED = [
    ("perftest", "get", 8, Mode(qp_type="uc"), "ib_read_lat -c UC: UC connection not possible in READ/ATOMIC verbs"),
    ("perftest", "fop", 8, Mode(qp_type="uc"), "ib_atomic_lat -c UC: UC connection not possible in READ/ATOMIC verbs"),
    ("perftest", "cas-rate", 8, Mode(qp_type="ud"), "ib_atomic_bw -c UD: UD connection only possible in SEND verb"),
    ("perftest", "latency", 8, Mode(qp_type="ud"), "ib_write_lat -c UD: UD connection only possible in SEND verb"),
    ("perftest", "bw", 8, Mode(events=True), "ib_write_bw -e: Events feature not available on WRITE verb"),
    (
        "perftest-send",
        "bw",
        64,
        Mode(post_list=4, cq_mod=8),
        "ib_send_bw -l 4 -Q 8: Post list size must be a multiple of CQ moderation",
    ),
]


@pytest.mark.parametrize(("transport", "kernel", "size", "mode", "words"), REFUSED)
def test_what_perftest_refuses_is_said_in_its_words(transport, kernel, size, mode, words):
    tool = transport_class(transport).tools[kernel]
    assert refusal(tool, _k(kernel), size, mode) == words
    assert any(words.endswith(line) for line in REFUSAL_FIXTURES.values())  # what perftest itself printed


def test_what_perftest_runs_is_not_refused():
    assert refusal("ib_write_lat", _k("latency"), 8, Mode(qp_type="uc")) is None
    assert refusal("ib_write_bw", _k("bw"), 8, Mode(qp_type="uc", post_list=4)) is None
    assert refusal("ib_read_lat", _k("get"), 8, Mode(events=True)) is None
    assert refusal("ib_atomic_bw", _k("fop-rate"), 8, Mode(events=True, post_list=4)) is None
    assert refusal("ib_send_bw", _k("bibw"), 4096, Mode(qp_type="ud"), path_mtu=4096) is None
    assert refusal("ib_send_lat", _k("latency"), 8, Mode(events=True), path_mtu=1024) is None  # MTU: UD only
    assert refusal("ib_send_lat", _k("latency"), 4097, Mode(qp_type="ud")) is None  # MTU unknown: perftest decides
    assert refusal("ib_send_lat", _k("latency"), 4097, Mode(qp_type="ud"), path_mtu=4096) == (
        "ib_send_lat -c UD -s 4097: Max message size in UD cannot be greater than MTU (4096 B)"
    )


def test_rank_0s_settings_are_checked_when_they_arrive():
    assert Mode.decode(asdict(Mode(qp_type="ud", post_list=4, events=True, cq_mod=8))) == Mode("ud", 4, True, 8)
    for bad in (None, {}, asdict(Mode()) | {"qp_type": "xrc"}, asdict(Mode()) | {"post_list": 0},
                asdict(Mode()) | {"events": 1}, asdict(Mode()) | {"cq_mod": 10**6}):  # fmt: skip
        with pytest.raises(PeerError, match="malformed perftest settings"):
            Mode.decode(bad)


# --- reference_row with fake tools and a fake second rank ------------------------------------------------------------


class FakeCtrl:
    """One rank of two; ``peer(record)`` is what the other rank contributes to each allgather."""

    size = 2
    local_address = "127.0.0.1"

    def __init__(self, rank: int, peer):
        self.rank, self.peer, self.table = rank, peer, None
        self.gathers = []

    def gather_json(self, record):
        self.gathers.append(record)
        other = self.peer(record)
        self.table = [record, other] if self.rank == 0 else [other, record]
        return self.table

    def bcast_bytes(self, data):
        return json.dumps(self.table).encode()

    def barrier(self):
        pass


def _peer(mode: Mode, refused_line: str = "", port: int = 18515):
    def answer(record):
        if "host" in record:
            return {"host": socket.gethostname(), "address": None} | ({"mode": asdict(mode)} if "mode" not in record
                                                                        else {})  # fmt: skip
        if "mtu" in record:
            return {"mtu": 4096}
        return {"port": port, "refused": refused_line}

    return answer


@pytest.fixture
def fake_tools(tmp_path, monkeypatch):
    """perftest's tools as scripts: each prints FAKE_OUTPUT and exits FAKE_RC; a device directory that is not empty."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in {*perftest.TOOLS.values(), *perftest.SEND_TOOLS.values()}:
        script = bin_dir / tool
        script.write_text(
            '#!/bin/sh\n[ "$1" = --version ] && { echo "Version: 6.06"; exit 0; }\n'
            'echo "$0 $*" >> "$FAKE_LOG"\ncat "$FAKE_OUTPUT"\nexit "${FAKE_RC:-0}"\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    devices = tmp_path / "infiniband"
    (devices / "rxe0").mkdir(parents=True)
    monkeypatch.setattr(perftest, "SYSFS_DEVICES", str(devices))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "calls.log"))
    monkeypatch.setattr(perftest, "local_mtu", lambda settings: 4096)
    return tmp_path / "calls.log"


def _transport(cls_name: str, rank: int, options: dict, peer):
    plan = Plan(steps=[Step("perftest", "bw", [8])], run_id="r1", window=16, iterations=10, timeout=30.0,
                transport_options={"verbs": options})  # fmt: skip
    return getattr(perftest, cls_name)(FakeCtrl(rank, peer), plan)


def test_the_client_row_names_the_flags_and_what_perftest_used(fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_OUTPUT", str(DATA / "ib_atomic_bw_post_list.txt"))
    client = _transport("PerftestTransport", 0, {"inline": 220, "post_list": 4, "device": "rxe0"}, _peer(Mode()))
    row = client.reference_row(_k("fop-rate"), 8)
    assert row["method"] == "ib_atomic_bw -A FETCH_AND_ADD -t 16 -Q 4 -l 4"
    assert row["status"] == "ok" and row["window"] == 16 and row["msgrate_per_s"] == pytest.approx(33740.0)
    # No -s for the atomics (perftest makes them 8 B); -n is the iterations' windows; the server's port last.
    assert fake_tools.read_text().split()[1:] == ["-d", "rxe0", "-F", "-n", "160", "-A", "FETCH_AND_ADD", "-t", "16",
                                                  "-Q", "4", "-l", "4", "-p", "18515", "127.0.0.1"]  # fmt: skip

    monkeypatch.setenv("FAKE_OUTPUT", str(DATA / "ib_send_bw_ud.txt"))
    sender = _transport("PerftestSendTransport", 0, {"inline": 220, "qp_type": "ud"}, _peer(Mode()))
    assert sender.reference_row(_k("bw"), 64)["method"] == "ib_send_bw -c UD -t 16 -Q 4, inline 0[B]"


def test_what_perftest_refuses_is_unsupported_on_every_rank_before_a_server_starts(fake_tools):
    for rank in (0, 1):
        writer = _transport("PerftestTransport", rank, {"inline": 220, "qp_type": "ud"}, _peer(Mode(qp_type="ud")))
        with pytest.raises(Unsupported, match="perftest refuses ib_read_lat -c UD: UD connection only possible"):
            writer.reference_row(_k("get"), 8)
        sender = _transport("PerftestSendTransport", rank, {"inline": 220, "qp_type": "ud"}, _peer(Mode(qp_type="ud")))
        with pytest.raises(Unsupported, match=r"-s 8192: Max message size in UD cannot be greater than MTU \(4096 B\)"):
            sender.reference_row(_k("bw"), 8192)
    assert not fake_tools.exists()  # no tool ran


def test_the_servers_settings_are_rank_0s(fake_tools):
    """Under serve the server has no --qp-type of its own: it takes the client's, so both run the same test."""
    server = _transport("PerftestSendTransport", 1, {"inline": 220}, _peer(Mode(qp_type="ud", events=True)))
    assert server.mode == Mode(qp_type="ud", events=True)


def test_a_refusal_only_perftest_knows_is_unsupported_on_both_ranks(fake_tools, monkeypatch):
    monkeypatch.setenv("FAKE_OUTPUT", str(DATA / "ib_send_bw_ud_over_mtu_server.txt"))
    monkeypatch.setenv("FAKE_RC", "1")
    monkeypatch.setattr(perftest, "local_mtu", lambda settings: None)  # no pyverbs: the MTU is perftest's to check
    server = _transport("PerftestSendTransport", 1, {"inline": 220}, _peer(Mode(qp_type="ud")))
    with pytest.raises(Unsupported, match="refuses ib_send_bw: Max message size in UD cannot be greater than MTU"):
        server.reference_row(_k("bw"), 8192)
    assert server.ctrl.gathers[-1]["refused"] == "Max message size in UD cannot be greater than MTU"
    words = "Max message size in UD cannot be greater than MTU"
    client = _transport("PerftestSendTransport", 0, {"inline": 220, "qp_type": "ud"}, _peer(Mode(), words))
    with pytest.raises(Unsupported, match=words):
        client.reference_row(_k("bw"), 8192)
    assert len(fake_tools.read_text().splitlines()) == 1  # the server only; no client ran


def test_a_server_that_fails_otherwise_is_an_error(fake_tools, monkeypatch):
    bad = fake_tools.parent / "bad.txt"
    bad.write_text(" Couldn't open device\n")
    monkeypatch.setenv("FAKE_OUTPUT", str(bad))
    monkeypatch.setenv("FAKE_RC", "1")
    server = _transport("PerftestTransport", 1, {"inline": 220}, _peer(Mode()))
    with pytest.raises(PeerError, match="ib_write_lat server exited \\(1\\): Couldn't open device"):
        server.reference_row(_k("latency"), 8)


def test_a_failed_clock_estimate_gives_a_row_without_figures_that_says_why(fake_tools, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_OUTPUT", str(DATA / "ib_send_lat_inf.txt"))  # real: r^2 < 0.9, then inf and -nan
    client = _transport("PerftestSendTransport", 0, {"inline": 64}, _peer(Mode()))
    row = client.reference_row(_k("latency"), 8)
    assert row["method"] == "ib_send_lat -I 64, inline 0[B]"  # asked for 64, rxe gave none
    assert math.isnan(row["lat_p50_us"]) and row["note"].startswith("no figures: perftest's CPU clock estimate failed")
    # The same failure in a bandwidth tool prints 0.00 (it counts 0 MHz): not a figure either. The warning is
    # put before a real table here; perftest prints it first, as in the latency output above.
    zeros = tmp_path / "bw.txt"
    warning = _text("ib_send_lat_inf.txt").splitlines()[1]
    zeros.write_text(warning + "\n" + _text("ib_send_bw_ud.txt").replace("1.96               1.22", "0.00  0.00"))
    monkeypatch.setenv("FAKE_OUTPUT", str(zeros))
    row = client.reference_row(_k("bw"), 64)
    assert math.isnan(row["bw_MBps"]) and math.isnan(row["msgrate_per_s"]) and row["status"] == "ok"
    assert row["note"].startswith("no figures")

"""libfabric's fi_pingpong as the fi-pingpong transport runs it: the flags a plan's settings become, fi_info's
answer, and fi_pingpong's output as captured from libfabric 1.17 (tests/unit/data/fi_pingpong, whose README
lists the commands)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fabricbench import transports
from fabricbench.cli import build_parser
from fabricbench.errors import PeerError
from fabricbench.measure.plan import MAX_MESSAGE_SIZE
from fabricbench.transports.capabilities import SelfTimed
from fabricbench.transports.ofi.fi_pingpong import (
    NO_MATCH,
    Result,
    byte_size,
    command,
    count,
    data_error,
    figures,
    first_match,
    lookup,
    method_flags,
    parse,
    version,
)

DATA = Path(__file__).parent / "data" / "fi_pingpong"
INT_MAX = 2**31 - 1  # fi_pingpong's -S: a C int


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _settings(*flags: str) -> dict:
    """The ofi settings a ``fabricbench run`` command line gives the transport."""
    return transports.transport_options(build_parser().parse_args(["run", *flags]), "run")["ofi"]


# --- the output -------------------------------------------------------------------------------------------------------

CAPTURED = {  # size, #sent, total (binary, truncated as printed), time, MB/sec, usec/xfer, Mxfers/sec
    "tcp_rdm_tagged_8.txt": (8, 1000, 15 * 1024, 1.25, 0.01, 624.16, 0.00),
    "shm_rdm_tagged_4096.txt": (4096, 10000, 78 * 2**20, 0.30, 274.78, 14.91, 0.07),
    "tcp_msg_msg_8_checked.txt": (8, 100, 1.5 * 1024, 0.01, 0.13, 63.06, 0.02),
    "shm_rdm_msg_0.txt": (0, 100, 0, 0.50, 0.00, 2485.62, 0.00),
}


@pytest.mark.parametrize(("name", "expected"), CAPTURED.items())
def test_the_line_under_the_header_is_read_with_its_suffixes(name, expected):
    assert parse(_text(name)) == Result(*expected)


def test_the_server_prints_the_same_table():
    server = parse(_text("shm_rdm_tagged_4096_server.txt"))
    assert (server.size, server.sent, server.usec_per_xfer) == (4096, 10000, 14.81)


def test_counts_are_decimal_and_sizes_binary_as_fi_pingpong_prints_them():
    assert [count(text) for text in ("100", "1k", "10k", "10m", "2b")] == [100, 1000, 10_000, 10**7, 2 * 10**9]
    assert [byte_size(text) for text in ("0", "8", "4k", "1.5k", "78m", "1g")] == [0, 8, 4096, 1536, 78 << 20, 1 << 30]


def test_usec_per_xfer_is_half_a_round_trip_and_mb_is_ten_to_the_sixth_bytes():
    """fi_pingpong's MB/sec is both directions' bytes (iterations x size x 2) over the loop's time, and that time
    is usec/xfer x iterations x 2: so MB/sec = size / usec/xfer in bytes per µs, MB = 10^6 B, not MiB."""
    result = parse(_text("shm_rdm_tagged_4096.txt"))
    exact_bytes = result.sent * result.size * 2
    assert byte_size("78m") <= exact_bytes < byte_size("79m")  # "total" is the same bytes, truncated to MiB
    seconds = result.usec_per_xfer * result.sent * 2 / 1e6
    assert seconds == pytest.approx(result.seconds, abs=0.005)  # usec/xfer: elapsed / iterations / 2
    rounding = 0.005 / result.usec_per_xfer  # usec/xfer is printed to 2 decimals
    assert exact_bytes / seconds / 1e6 == pytest.approx(result.mb_per_s, rel=rounding)
    assert exact_bytes / seconds / 2**20 != pytest.approx(result.mb_per_s, rel=0.01)


def test_the_row_takes_usec_per_xfer_as_the_mean_and_says_what_it_is():
    found = figures(parse(_text("shm_rdm_tagged_4096.txt")), validate=False)
    assert found["lat_mean_us"] == 14.91
    assert found["note"].startswith("fi_pingpong's mean, half a round trip: loop time / iterations / 2")
    assert "its MB/sec 274.78 (ping and pong bytes, MB = 10^6 B)" in found["note"] and "-c" not in found["note"]
    checked = figures(parse(_text("tcp_msg_msg_8_checked.txt")), validate=True)
    assert checked["lat_mean_us"] == 63.06 and "-c checks each message inside the loop" in checked["note"]


def test_a_loop_under_the_clocks_tick_has_no_figure():
    """gettimeofday counts whole µs: a loop timed at 0 prints usec/xfer 0.00, MB/sec inf (nan at 0 B) and
    Mxfers/sec inf. Derived from a real line; neither 0 µs nor inf is a time."""
    real = _text("tcp_rdm_tagged_8.txt")
    zero = real.replace("1.25s      0.01     624.16       0.00", "0.00s       inf       0.00        inf")
    result = parse(zero)
    assert result.usec_per_xfer == 0 and math.isinf(result.mb_per_s) and math.isinf(result.mxfers_per_s)
    found = figures(result, validate=True)
    assert math.isnan(found["lat_mean_us"]) and found["note"].startswith("no figure: fi_pingpong printed usec/xfer 0 ")
    empty = parse(_text("shm_rdm_msg_0.txt").replace("0.00    2485.62", "-nan       -nan"))
    assert math.isnan(empty.mb_per_s) and math.isnan(figures(empty, validate=False)["lat_mean_us"])


def test_output_without_a_result_line_is_an_error_in_its_last_words():
    with pytest.raises(PeerError, match="fi_pingpong printed no result line: .*ctrl/read: no data or remote conn"):
        parse(_text("shm_msg_refused.txt"))
    with pytest.raises(PeerError, match=r"printed no result line: fi_getinfo\(\): .*ret=-61 \(No data available\)"):
        parse(_text("shm_msg_refused_server.txt"))
    with pytest.raises(PeerError, match="no result line: bytes"):  # the header alone (cut short)
        parse(_text("tcp_rdm_tagged_8.txt").splitlines()[0])


def test_counts_that_disagree_are_an_error():
    text = _text("tcp_rdm_tagged_8.txt").replace("=1k", "+3 ")
    with pytest.raises(PeerError, match=r"counted pongs other than its pings \(#sent 1k, #ack \+3\)"):
        parse(text)


def test_corrupt_data_is_named_in_fi_pingpongs_words():
    # What -c prints on a mismatch (util/pingpong.c, pp_check_buf: "Error at iteration=%d size=%d byte=%d").
    assert data_error("Error at iteration=3 size=8 byte=0\n") == (
        "-c found corrupt data: Error at iteration=3 size=8 byte=0"
    )
    assert data_error(_text("tcp_msg_msg_8_checked.txt")) == data_error(_text("shm_msg_refused.txt")) == ""


# --- the flags --------------------------------------------------------------------------------------------------------


def test_the_ofi_options_become_fi_pingpongs_flags():
    assert method_flags(_settings(), validate=False) == ["-e", "rdm", "-m", "tagged"]  # -p: fi_pingpong's choice
    chosen = _settings("--ofi-provider", "tcp", "--ofi-endpoint", "msg", "--ofi-messages", "msg", "--ofi-domain", "lo")
    assert method_flags(chosen, validate=True) == ["-p", "tcp", "-e", "msg", "-m", "msg", "-c"]
    # The domain is the host's own (serve keeps the server's), so it is in the command, not in the method.
    assert command(chosen, True, 8, 100) == [
        "fi_pingpong", "-p", "tcp", "-e", "msg", "-m", "msg", "-c", "-d", "lo", "-I", "100", "-S", "8",
    ]  # fmt: skip
    assert command(_settings("--ofi-provider", "verbs;ofi_rxm"), False, 0, 1)[1:3] == ["-p", "verbs;ofi_rxm"]


def test_every_size_fabricbench_sweeps_fits_fi_pingpongs_int():
    """fi_pingpong reads -S into an int and refuses more than INT_MAX, so no size needs refusing for that."""
    assert MAX_MESSAGE_SIZE <= INT_MAX


# --- fi_info: what fi_pingpong will open ------------------------------------------------------------------------------


def test_fi_info_is_asked_for_the_same_endpoint():
    assert lookup(_settings()) == ["fi_info", "-t", "FI_EP_RDM", "-c", "FI_TAGGED"]
    chosen = _settings("--ofi-provider", "shm", "--ofi-endpoint", "msg", "--ofi-messages", "msg", "--ofi-domain", "x")
    assert lookup(chosen) == ["fi_info", "-t", "FI_EP_MSG", "-c", "FI_MSG", "-p", "shm", "-d", "x"]


def test_fi_infos_first_entry_names_the_provider_and_its_largest_message():
    shm = _text("fi_info_shm_rdm_tagged.txt")
    assert first_match(shm) == {"provider": "shm", "domain": "shm", "max_msg_size": 2**64 - 1}
    tcp = _text("fi_info_rdm_tagged_first_two.txt")
    assert first_match(tcp) == {"provider": "tcp;ofi_rxm", "domain": "eth0", "max_msg_size": 2**64 - 1}
    assert first_match(tcp + shm)["provider"] == "tcp;ofi_rxm" and first_match(shm + tcp)["provider"] == "shm"


def test_no_match_is_told_apart_from_an_answer_that_cannot_be_read():
    assert first_match(_text("fi_info_no_match.txt")) is None and NO_MATCH in _text("fi_info_no_match.txt")
    assert first_match("") is None and NO_MATCH not in ""


def test_libfabrics_version_comes_from_fi_info():
    assert version(_text("fi_info_version.txt")) == "1.17.0"
    assert version("") == "unknown"


def test_fi_pingpong_is_registered_after_ofi_with_the_ofi_options():
    names = list(transports.TRANSPORTS)
    assert names.index("fi-pingpong") == names.index("ofi") + 1  # the reference right after what it checks
    cls = transports.transport_class("fi-pingpong")
    assert cls.kernels == {"latency"} and issubclass(cls, SelfTimed) and not cls.default_kernels
    assert [group.name for group in cls.option_groups] == ["ofi"]
    assert "ofi" in transports.handshake_sections(["fi-pingpong"])  # serve takes the client's provider and calls

"""The ofi transport's pure parts: what it reads from the network, from libfabric's survey, from the host's
install, and what it sends in the peer HELLO. No libfabric is opened."""

from __future__ import annotations

import argparse

import pytest

from fabricbench.argtypes import MASK
from fabricbench.control.rendezvous import FieldReader, ProtocolError
from fabricbench.errors import PeerError, UsageError
from fabricbench.transports.ofi.cloop import (
    Found,
    find_libfabric,
    mapped_libfabric,
    mr_mode_words,
    no_match,
    parse_survey,
    survey_lines,
    version_text,
)
from fabricbench.transports.ofi.options import OFI_OPTIONS, OFIUnavailable
from fabricbench.transports.ofi.transport import (
    check_environment,
    check_key,
    decode_address,
    fi_environment,
    open_hint,
    provider_link,
)

SURVEY = (
    "tcp;ofi_rxm\t192.0.2.0/24\teth0\trdm\t1\t0\t0\t64\t\n"
    "tcp;ofi_rxm\t192.0.2.0/24\teth0\trdm\t1\t0\t0\t64\t\n"  # fi_getinfo lists a provider once per address
    "shm\tshm\tshm\trdm\t1\t1\t0\t4096\tFI_MR_VIRT_ADDR\n"
    "cxi\tcxi\tcxi0\trdm\t1\t1\t1\t192\tFI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY\n"
    "a line cut short\n"
)


def test_the_survey_is_one_record_per_provider_domain_and_endpoint():
    records = parse_survey(SURVEY)
    assert [r["provider"] for r in records] == ["tcp;ofi_rxm", "shm", "cxi"]
    assert records[0]["mr_mode"] == "none" and records[0]["inject_size_B"] == 64
    assert records[2]["FI_HMEM"] and records[2]["FI_ATOMIC"] and records[2]["FI_RMA"]
    lines = survey_lines(records)
    assert lines[1] == "shm rdm, domain shm, fabric shm: FI_RMA, FI_ATOMIC, inject 4096 B, MR mode FI_MR_VIRT_ADDR"
    assert lines[2].startswith("cxi rdm, domain cxi0, fabric cxi: FI_RMA, FI_ATOMIC, FI_HMEM, inject 192 B")


def test_mr_modes_and_versions_read_as_their_names():
    assert mr_mode_words(0) == "none"
    assert mr_mode_words((1 << 2) | (1 << 9)) == "FI_MR_LOCAL | FI_MR_ENDPOINT"
    assert version_text((1 << 16) | 17) == "1.17"


def test_a_refusal_names_what_was_asked_for():
    assert no_match({}) == "no provider with RDM endpoints and tagged messages"
    said = no_match({"provider": "cxi", "domain": "cxi0", "endpoint": "msg", "messages": "msg"})
    assert said == 'no provider "cxi" on domain "cxi0" with MSG endpoints and untagged messages'


def test_a_peer_address_is_checked_before_use():
    assert decode_address("0a0b", 1) == b"\x0a\x0b"
    for bad in (None, "", "zz", 7, "00" * 257):
        with pytest.raises(PeerError):
            decode_address(bad, 1)


def test_a_peer_rma_key_is_two_unsigned_64_bit_numbers():
    assert check_key({"key": 5, "base": 2**64 - 1}, 1) == (5, 2**64 - 1)
    for bad in ({"key": -1, "base": 0}, {"key": 1}, {"key": True, "base": 0}, {"key": 2**64, "base": 0}, [1, 2]):
        with pytest.raises(PeerError):
            check_key(bad, 1)


def test_each_ranks_fi_environment_is_small_and_checked():
    found = fi_environment({"FI_PROVIDER": "cxi", "FI_CXI_RX_MATCH_MODE": "hybrid", "PATH": "/bin"})
    assert found == {"FI_CXI_RX_MATCH_MODE": "hybrid", "FI_PROVIDER": "cxi"}
    assert len(fi_environment({f"FI_X{i}": "v" * 1000 for i in range(100)})) == 64
    # a job's key is recorded as set, never its value
    masked = fi_environment({"FI_OPX_UUID": "0123-secret", "FI_CXI_AUTH_KEY": "7", "FI_PSM3_UUID": "x"})
    assert set(masked.values()) == {MASK} and len(masked) == 3
    assert check_environment(found, 1) is found
    for bad in ([], {"PATH": "/bin"}, {"FI_X": 1}, {f"FI_{i}": "" for i in range(65)}):
        with pytest.raises(PeerError):
            check_environment(bad, 1)


def _install(root, lib="lib"):
    (root / "include" / "rdma").mkdir(parents=True)
    (root / "include" / "rdma" / "fabric.h").write_text("")
    (root / lib).mkdir()
    (root / lib / "libfabric.so.1").write_text("")
    return root


def test_libfabric_is_found_under_a_root_given_or_crays_newest(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pkg-config
    root = _install(tmp_path / "opt" / "libfabric", lib="lib64")
    found = find_libfabric({"FI_ROOT": str(root)}, cray_glob=str(tmp_path / "none"))
    assert found.how == f"$FI_ROOT={root}"
    assert found.compile_flags == (f"-I{root}/include",)
    assert found.link_flags == (f"-L{root}/lib64", f"-Wl,-rpath,{root}/lib64", "-lfabric")
    with pytest.raises(OFIUnavailable, match=r"\$LIBFABRIC_ROOT=/nowhere holds no libfabric"):
        find_libfabric({"LIBFABRIC_ROOT": "/nowhere"})
    cray = tmp_path / "cray"
    _install(cray / "1.15.2")
    _install(cray / "1.20.1")
    none = str(tmp_path / "no-header")
    picked = find_libfabric({}, cray_glob=str(cray / "*"), system_header=none)
    assert picked.how == str(cray / "1.20.1") and picked.compile_flags == (f"-I{cray}/1.20.1/include",)
    assert find_libfabric({}, cray_glob=str(cray / "none"), system_header=none) == Found(
        "system paths", (), ("-lfabric",)
    )


def test_the_libfabric_files_mapped_are_read_from_proc(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0\n"
        "7f02-7f03 r-xp 0 08:01 2 /venv/lib/mpich/libfabric.so.1\n"
        "7f04-7f05 r-xp 0 08:01 3 /usr/lib/libc.so.6\n"
    )
    assert mapped_libfabric(str(maps)) == {
        "/usr/lib/x86_64-linux-gnu/libfabric.so.1.20.0",
        "/venv/lib/mpich/libfabric.so.1",
    }
    assert mapped_libfabric(str(tmp_path / "missing")) == set()


def _parsed(role, *argv):
    parser = argparse.ArgumentParser()
    OFI_OPTIONS.add_arguments(parser, role)
    return OFI_OPTIONS.settings(parser.parse_args(list(argv)), role)


def test_the_hello_carries_the_clients_choice_and_keeps_the_servers_domain():
    client = _parsed("run", "--ofi-provider", "verbs;ofi_rxm", "--ofi-endpoint", "msg", "--ofi-progress", "wait")
    assert client == {"provider": "verbs;ofi_rxm", "endpoint": "msg", "messages": "tagged", "progress": "wait"}
    server = _parsed("serve", "--ofi-domain", "mlx5_0")
    decoded = OFI_OPTIONS.decode_handshake(FieldReader(OFI_OPTIONS.encode_handshake(client), "hello"), server)
    assert decoded == client | {"domain": "mlx5_0"}
    default = OFI_OPTIONS.decode_handshake(FieldReader(OFI_OPTIONS.encode_handshake({}), "hello"), {})
    assert "provider" not in default and default["endpoint"] == "rdm"


@pytest.mark.parametrize("payload", [b"\x00\x00\x09\x00\x00", b"\x00\x00\x00\x00\x07\x00", b"\x00\x03tcp\x00\x00"])
def test_a_hello_section_out_of_range_or_cut_short_is_refused(payload):
    with pytest.raises(ProtocolError):
        OFI_OPTIONS.decode_handshake(FieldReader(payload, "hello"), {})


def test_a_blank_or_outlandish_provider_name_is_a_usage_error():
    with pytest.raises(UsageError, match="--ofi-provider is empty"):
        _parsed("run", "--ofi-provider", " ")
    with pytest.raises(UsageError, match="at most 128 printable"):
        _parsed("run", "--ofi-provider", "x" * 200)


def test_a_verbs_domain_that_does_not_open_names_rdma_cms_need():
    said = "fi_domain: No data available"
    assert "set FI_VERBS_IFACE" in open_hint(said, "verbs;ofi_rxm", {})
    assert open_hint(said, "verbs;ofi_rxm", {"FI_VERBS_IFACE": "ib0"}) == ""  # told already: nothing to add
    assert open_hint(said, "tcp;ofi_rxm", {}) == "" and open_hint("fi_enable: Invalid argument", "verbs", {}) == ""


def test_a_providers_link_speed_is_a_rows_link_unless_its_netdev_is_virtual(tmp_path):
    (tmp_path / "eth2" / "device").mkdir(parents=True)  # a NIC: a device behind the class entry
    (tmp_path / "veth0").mkdir()  # a veth: none
    assert provider_link(200_000_000_000, "cxi0", tmp_path) == (25_000.0, "cxi0 200 Gb/s, as the provider reports it")
    assert provider_link(25_000_000_000, "eth2", tmp_path)[0] == 3125.0
    assert provider_link(10_000_000_000, "veth0", tmp_path) == (None, "")
    assert provider_link(0, "eth0", tmp_path) == (None, "")  # libfabric 1.17's tcp provider: no nic attributes

"""What the verbs loops and queue pair types can time, and what they say when they cannot: no device needed."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from fabricbench.measure.kernels import get_kernel
from fabricbench.transports.verbs import cloop as verbs_cloop
from fabricbench.transports.verbs.transport import VerbsSendTransport, VerbsTransport, _c_only_settings


def _transport(cls, qp_type="rc", c_loop=True, events=False, post_list=1, atomics=True, mtu=4096):
    """The attributes _mode_unsupported reads, as an opened transport has them."""
    fake = SimpleNamespace(
        two_sided=cls.two_sided,
        cloop=object() if c_loop else None,
        qp_type=qp_type,
        events=events,
        post_list=post_list,
        atomics=atomics,
        pair_mtu=mtu,
        loop_why="no C compiler found",
    )
    return lambda kernel, size=8: cls._mode_unsupported(fake, get_kernel(kernel), size)


def test_rc_in_c_times_every_kernel():
    writes, sends = _transport(VerbsTransport), _transport(VerbsSendTransport)
    for kernel in ("latency", "bw", "bibw", "get", "fop", "cas", "fop-rate", "cas-rate"):
        assert writes(kernel) is None
    for kernel in ("latency", "bw", "bibw"):
        assert sends(kernel, 1 << 20) is None


def test_uc_carries_writes_and_sends_only():
    writes = _transport(VerbsTransport, "uc")
    assert writes("latency") is None and writes("bw") is None
    assert _transport(VerbsSendTransport, "uc")("bibw") is None
    assert writes("get") == "RDMA READ needs a reliable connection (--qp-type rc); UC carries WRITEs and SENDs only"
    assert writes("cas-rate").startswith("RDMA atomics needs a reliable connection")


def test_ud_carries_sends_of_one_packet():
    sends = _transport(VerbsSendTransport, "ud", mtu=1024)
    assert sends("latency", 1024) is None
    assert sends("bw", 2048) == "a UD message is one packet: 2048 B is over the path MTU of 1024 B"
    assert _transport(VerbsTransport, "ud")("latency").endswith("UD carries SENDs only")


def test_the_python_loop_names_what_only_c_times_and_why_it_fell_back():
    python = _transport(VerbsTransport, c_loop=False)
    assert python("latency") is None and python("bw") is None
    assert python("fop") == (
        "RDMA atomics is timed by the C loop only, and this run uses the Python loop (no C compiler found)"
    )
    assert _transport(VerbsSendTransport, "ud", c_loop=False)("latency").startswith("--qp-type ud is timed by")
    assert _transport(VerbsTransport, events=True, c_loop=False)("bw").startswith("--events is timed by")


def test_a_device_without_atomics_says_so():
    assert _transport(VerbsTransport, atomics=False)("fop") == (
        "the RDMA device reports no atomic operations (atomic_cap is IBV_ATOMIC_NONE)"
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, ""),
        ({"qp_type": "rc", "post_list": 1, "events": False}, ""),
        ({"qp_type": "uc"}, "--qp-type uc"),
        ({"events": True}, "--events"),
        ({"post_list": 8}, "--post-list"),
    ],
)
def test_the_settings_only_the_c_loop_takes(options, named):
    assert _c_only_settings(options) == named


def test_provider_is_the_kernel_driver_else_the_name(tmp_path):
    (tmp_path / "mlx5_0" / "device").mkdir(parents=True)
    os.symlink("../../../bus/pci/drivers/mlx5_core", tmp_path / "mlx5_0" / "device" / "driver")
    (tmp_path / "rxe0").mkdir()
    assert verbs_cloop.provider("mlx5_0", str(tmp_path)) == "mlx5_core"
    assert verbs_cloop.provider("rxe0", str(tmp_path)) == "rxe"
    assert verbs_cloop.provider("siw_lo", str(tmp_path)) == "siw_lo"


def test_the_c_signatures_name_every_function_the_source_defines():
    source = verbs_cloop.SOURCE.read_text()
    for name in verbs_cloop.SIGNATURES:
        assert f" {name}(" in source or f"*{name}(" in source, name

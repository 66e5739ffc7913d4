"""The ofi transport's source address: the control connection's own, as the C loop compares it with a domain's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fabricbench.transports.ofi.transport import source_address


@pytest.mark.parametrize(
    ("local", "expected"),
    [
        ("10.213.7.1", "10.213.7.1"),
        ("::ffff:10.213.7.1", "10.213.7.1"),  # a dual-stack listener's view of an IPv4 peer
        ("fe80::1%veth0", "fe80::1"),
        ("2001:db8::1", "2001:db8::1"),
        (None, ""),  # MPI's control plane has none
        ("", ""),
    ],
)
def test_source_address_is_the_plain_address_the_control_connection_uses(local, expected):
    assert source_address(SimpleNamespace(local_address=local)) == expected


def test_a_control_plane_without_the_attribute_has_no_source_address():
    assert source_address(object()) == ""

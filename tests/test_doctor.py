"""``fabricbench doctor`` on a host without RDMA or GPU: every transport listed, each with a verdict and a fix."""

from __future__ import annotations

import json

from fabricbench.transports import TRANSPORTS
from support import fabricbench

FIXES = ("apt-get install", "softroce", "dnf install", "pip install")  # every reason says how to get what is missing


def test_doctor_lists_every_transport_with_a_reason_and_the_fix():
    result = fabricbench("doctor", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert list(found["transports"]) == list(TRANSPORTS)
    verdicts = found["transports"]
    assert verdicts["mpi"]["available"] and verdicts["mpi"]["needs_launcher"]
    assert verdicts["mpi"]["details"]["library"] and verdicts["mpi"]["details"]["mpi4py"]
    assert verdicts["mpi"]["details"]["launcher"].endswith(("mpiexec", "mpirun"))
    assert verdicts["tcp"]["available"] and verdicts["tcp"]["details"]["timed loop"].startswith("c loop")
    for name in ("verbs", "verbs-send", "perftest"):  # no RDMA device on this host (the VM test covers one)
        verdict = verdicts[name]
        assert not verdict["available"], verdict
        assert any(fix in verdict["reason"].lower() for fix in FIXES), verdict["reason"]


def test_doctor_table_says_the_same_in_one_line_per_transport():
    found = json.loads(fabricbench("doctor", "--json").stdout)
    result = fabricbench("doctor")
    assert result.returncode == 0 and not result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.startswith("  ")}
    assert set(lines) == set(TRANSPORTS)
    for name, verdict in found["transports"].items():
        status = "ok" if verdict["available"] else f"unavailable: {verdict['reason']}"
        assert lines[name].rstrip().endswith(status), lines[name]
    assert f"library: {found['transports']['mpi']['details']['library']}" in result.stdout

"""tests/verbs on a real SoftRoCE device, from a host whose kernel has no rdma_rxe: how CI runs the verbs tests.

scripts/softroce-vm.sh boots Debian's kernel under QEMU, brings up rxe0 and
runs ``pytest tests/verbs`` inside; its exit status is the tests'. It installs
what it needs (QEMU included) on first use and caches the kernel and venvs.
The run starts with the session, beside the host tests (softroce_run.py; conftest.py
starts it and runs this test last); this test waits for it and checks what it says.
"""

from __future__ import annotations

import pytest

import softroce_run


def test_verbs_tests_pass_on_softroce_in_the_vm():
    reason = softroce_run.skip_reason()
    if reason:
        pytest.skip(reason)
    run = softroce_run.current
    assert run is not None, "conftest.py did not start the SoftRoCE VM run for this session"
    result = run.wait()
    output = result.stdout + result.stderr
    assert result.returncode == 0, (
        f"softroce-vm.sh exited {result.returncode} after {result.elapsed:.0f} s:\n{output[-6000:]}"
    )
    summary = [line for line in result.stdout.splitlines() if " passed" in line]
    assert summary, output[-6000:]
    # Inside the VM there is a device: nothing may be skipped or fail there.
    assert "skipped" not in summary[-1] and "failed" not in summary[-1], summary[-1]
    print(f"SoftRoCE VM: {summary[-1].strip()} ({result.elapsed:.0f} s including boot, beside the host tests)")

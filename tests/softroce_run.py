"""The SoftRoCE VM run (scripts/softroce-vm.sh: tests/verbs in a QEMU guest) in the background, beside the host tests.

The VM's guest runs on one emulated vCPU and takes minutes; the host tests leave the machine's other core to it.
conftest.py starts it when collection has selected tests/test_softroce_vm.py (which then waits for it and checks
its result) and stops it when the session ends, however it ends.

The run is a child of pytest in a session of its own, so a terminal's Ctrl-C reaches pytest alone and pytest's
own signal handling is left as it is; the session's end stops the VM, and should pytest die without that
(SIGKILL), the kernel sends the script SIGTERM (PR_SET_PDEATHSIG), on which it stops the VM itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from support import REPO

SCRIPT = REPO / "scripts" / "softroce-vm.sh"
TEST_FILE = "test_softroce_vm.py"
REQUIRE_VM = os.environ.get("FABRICBENCH_REQUIRE_VM") == "1"
VM_TIMEOUT = 2100  # seconds: set-up on a fresh machine (packages, kernel, venvs) plus the emulated run
STOP_WAIT_S = 30  # the script's own SIGTERM trap stops QEMU; after this long it is killed
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def skip_reason() -> str | None:
    """Why the VM cannot run here, or None. The runner installs QEMU and the rest itself where it can (root
    with apt, as in CI)."""
    can_install = os.geteuid() == 0 and shutil.which("apt-get") is not None
    if shutil.which("qemu-system-x86_64") is None and not can_install and not REQUIRE_VM:
        return (
            "qemu-system-x86_64 is not installed and cannot be installed here (needs root and apt), "
            "so the SoftRoCE VM tests did not run; FABRICBENCH_REQUIRE_VM=1 makes this a failure"
        )
    return None


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec only calls into it


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when pytest dies, so a killed session leaves no VM behind."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    elapsed: float


class VMRun:
    """One softroce-vm.sh run started now; its output goes to files, as nothing reads pipes while tests run."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fabricbench-vm-run."))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "FABRICBENCH_TEST_"))}
        self.started = time.monotonic()
        with open(self.dir / "stdout", "wb") as out, open(self.dir / "stderr", "wb") as err:
            self.proc = subprocess.Popen(
                [str(SCRIPT)], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                start_new_session=True, preexec_fn=_die_with_parent,
            )  # fmt: skip
        self.outcome: Outcome | None = None

    def _read(self, name: str) -> str:
        return (self.dir / name).read_text(errors="replace")

    def wait(self) -> Outcome:
        """Wait for the run, up to VM_TIMEOUT from its start; on a timeout it is stopped and says 124."""
        if self.outcome is None:
            try:
                returncode = self.proc.wait(timeout=max(1.0, VM_TIMEOUT - (time.monotonic() - self.started)))
            except subprocess.TimeoutExpired:
                self.stop()
                returncode = 124
            elapsed = time.monotonic() - self.started
            self.outcome = Outcome(returncode, self._read("stdout"), self._read("stderr"), elapsed)
        return self.outcome

    def stop(self) -> None:
        """Stop the run if it is still going: the script's TERM trap stops the VM (vng and QEMU run in a
        process group of their own under timeout(1)); what else is left in the script's group (its output
        relays, a set-up step) is killed."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_WAIT_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# The run of this session, started by conftest.py's pytest_collection_finish; None when the VM test is not selected.
current: VMRun | None = None

"""``fabricbench doctor``: what can run on this host, and for what cannot, why and the fix.

As ``ompi_info``, ``ucx_info -d`` and ``ibv_devinfo`` do for their stacks, it
asks every registered transport (``Transport.doctor``, in the words its
preflight uses) and prints what each found: the MPI library and launcher, the
C loops built, RDMA devices with their ports. It starts no rank and always
exits 0; ``--json`` gives the same for scripts.
"""

from __future__ import annotations

import json
import platform
import socket
import sys

from fabricbench import __version__
from fabricbench.terminal import printable_lines
from fabricbench.transports import TRANSPORTS, transport_class
from fabricbench.transports.base import Diagnosis


def diagnose() -> dict:
    """Every transport's verdict: {"host", "fabricbench", "python", "transports": {name: {...}}}."""
    verdicts = {}
    for name in TRANSPORTS:
        cls = transport_class(name)
        try:
            found = cls.doctor()
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            found = Diagnosis(False, f"the check itself failed: {type(exc).__name__}: {exc}")
        verdicts[name] = {
            "available": found.available,
            "needs_launcher": cls.needs_launcher,
            "reason": found.reason,
            "details": found.details,
        }
    return {
        "host": socket.gethostname(),
        "fabricbench": __version__,
        "python": platform.python_version(),
        "transports": verdicts,
    }


def _lines(value, indent: int) -> list[str]:
    """Nested details as indented ``key: value`` lines; a list of records as ``- `` items."""
    pad = "#" + " " * indent
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                out += [f"{pad}{key}:", *_lines(item, indent + 2)]
            else:
                out.append(f"{pad}{key}: {item if item not in (None, '') else '-'}")
        return out
    if isinstance(value, list):
        out = []
        for item in value:
            nested = _lines(item, indent + 2)
            out += [f"{pad}- {nested[0][indent + 3 :]}", *nested[1:]] if nested else []
        return out
    return [f"{pad}{value}"]


def report(found: dict) -> str:
    """The console form: one table line per transport, then what each found."""
    lines = [f"# fabricbench {found['fabricbench']} doctor on {found['host']} (Python {found['python']})"]
    width = max(len(name) for name in found["transports"]) + 2
    lines.append(f"# {'transport':<{width}}{'launcher':<10}status")
    for name, verdict in found["transports"].items():
        launcher = "needed" if verdict["needs_launcher"] else "-"
        status = "ok" if verdict["available"] else f"unavailable: {verdict['reason']}"
        lines.append(f"  {name:<{width}}{launcher:<10}{status}")
    shown: dict[str, str] = {}
    for name, verdict in found["transports"].items():
        if not verdict["details"]:
            continue
        text = json.dumps(verdict["details"], sort_keys=True)
        lines += ["", f"# {name}"]
        if text in shown:  # transports that share a library (mpi, mpi-rma) found the same
            lines.append(f"#   as {shown[text]}")
            continue
        shown[text] = name
        lines += _lines(verdict["details"], 3)
    return printable_lines(lines)  # what the libraries and /sys said, one line each


def doctor(as_json: bool = False) -> int:
    found = diagnose()
    print(json.dumps(found, indent=2, default=str) if as_json else report(found), file=sys.stdout, flush=True)
    return 0

"""The UCX transports' options: the two-sided API and how completions are waited for.

Shared by ``ucx`` (fabricbench's C loops) and ``ucx-perftest`` (UCX's own
ucx_perftest), so both measure the same calls. Plain data, no UCX: the CLI,
the peer HELLO and ``doctor`` read it on hosts without UCX. Which UCX
transports and devices are used is UCX's own setting, UCX_TLS and
UCX_NET_DEVICES in each rank's environment, as for every UCX program; the
rows and metadata say what each side had and what UCX chose.

On ``serve`` both options are the client's, carried in the HELLO's "ucx"
section, since both sides must make the same calls.
"""

from __future__ import annotations

import ipaddress
import os
import re

from fabricbench.argtypes import MASK
from fabricbench.control.rendezvous import FieldReader, Fields, ProtocolError
from fabricbench.errors import FabricbenchError, UsageError
from fabricbench.transports.options import OptionGroup

APIS = ("tag", "stream", "am")  # --ucx-api, in the order of their code in the HELLO section
# --ucx-progress, in the order of their code in the HELLO section: busy ucp_worker_progress; arm the worker and wait on
# its fd; sched_yield where a progress call found nothing; auto: yield where this host runs more ranks than this rank
# has CPUs (there a spinning rank keeps its peer off the CPU for a whole time slice per message), else spin.
PROGRESS = ("spin", "wait", "yield", "auto")
INSTALL_HINT = "Debian/Ubuntu: apt-get install libucx-dev ucx-utils; RHEL/Fedora: dnf install ucx-devel ucx"
BIN_HINT = "Debian/Ubuntu: apt-get install ucx-utils; RHEL/Fedora: dnf install ucx"


def resolve_progress(progress: str, local_ranks: int, cpus: int) -> tuple[str, str]:
    """--ucx-progress as this rank runs it, and the words that say how it was chosen: auto yields where this host
    runs more ranks than this rank has CPUs, as the verbs loop's --spin auto (there a rank spinning in
    ucp_worker_progress keeps its peer off the CPU until the scheduler's tick, so every message waits that long;
    docs/fabrics/ucx.md has the figures), and spins elsewhere; a named choice is kept."""
    if progress != "auto":
        return progress, progress
    chosen = "yield" if local_ranks > cpus else "spin"
    return chosen, f"auto: {chosen} ({local_ranks} ranks on this host, {cpus} CPU{'s' * (cpus != 1)})"


class UCXUnavailable(FabricbenchError):
    """No UCX, or none of its transports matches what was asked: nothing to measure, said in one line."""

    exit_code = 2


class UCXOptions(OptionGroup):
    name = "ucx"
    handshake_version = 1

    def add_arguments(self, parser, role: str) -> None:
        if role != "run":  # serve takes the client's choices
            return
        group = parser.add_argument_group(
            "ucx and ucx-perftest transports (UCX's UCP; its transports and devices: UCX_TLS, UCX_NET_DEVICES)"
        )
        group.add_argument(
            "--ucx-api",
            choices=APIS,
            default="tag",
            help="two-sided calls: tag (ucp_tag_send_nbx/ucp_tag_recv_nbx, as MPI over UCX uses them; default), "
            "stream (ucp_stream_send_nbx/ucp_stream_recv_nbx) or am (ucp_am_send_nbx to a receive handler)",
        )
        group.add_argument(
            "--ucx-progress",
            choices=PROGRESS,
            default="auto",
            help="waiting for completions: spin, busy ucp_worker_progress; yield, sched_yield where a progress "
            "call found nothing; wait, ucp_worker_arm and a wait on the worker's event descriptor (ucp_worker_wait's "
            "way, with a deadline); auto (default): yield where this host runs more ranks than this rank has CPUs, "
            "else spin",
        )

        group.add_argument(
            "--ucx-sockaddr",
            metavar="IPV4",
            help="connect through a UCP listener on this address, where the pair's first rank runs (UCX's "
            "client-server set-up: rdma_cm on an RDMA device, so rc_verbs needs no ud_verbs; tcp elsewhere), "
            "instead of from the worker addresses the ranks exchange (default)",
        )

    def parse(self, args, role: str) -> dict:
        if role != "run":
            return {}
        chosen = {"api": args.ucx_api, "progress": args.ucx_progress}
        if args.ucx_sockaddr is not None:
            try:
                address = ipaddress.IPv4Address(args.ucx_sockaddr)
            except ValueError:
                raise UsageError(f"--ucx-sockaddr {args.ucx_sockaddr!r}: not an IPv4 address") from None
            if getattr(args, "peer", None):
                raise UsageError(
                    "--ucx-sockaddr needs ranks under a launcher: a --peer run connects from worker addresses"
                )
            chosen["sockaddr"] = str(address)
        return chosen

    def encode_handshake(self, settings: dict) -> bytes:
        fields = Fields().u8(APIS.index(settings.get("api", "tag")))
        return fields.u8(PROGRESS.index(settings.get("progress", "auto"))).payload()

    def decode_handshake(self, reader: FieldReader, settings: dict) -> dict:
        """The client's API and progress, each checked."""
        api, progress = reader.u8(), reader.u8()
        if api >= len(APIS) or progress >= len(PROGRESS):
            raise ProtocolError("bad ucx API or progress setting")
        return settings | {"api": APIS[api], "progress": PROGRESS[progress]}


UCX_OPTIONS = UCXOptions()


# The UCX_* variables a rank records (and checks in another rank's record): how many, how long, which masked.
UCX_ENV_PREFIX = "UCX_"
MAX_ENV = 64
MAX_ENV_CHARS = 256
SECRET_NAMES = re.compile(r"UUID|KEY|TOKEN|SECRET|PASS|AUTH|CRED", re.IGNORECASE)


def ucx_environment(environ=os.environ) -> dict[str, str]:
    """This rank's UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...), at most MAX_ENV, each cut at MAX_ENV_CHARS;
    the values of any that name a key or a secret masked."""
    found = sorted((k, v) for k, v in environ.items() if k.startswith(UCX_ENV_PREFIX))
    return {k[:MAX_ENV_CHARS]: MASK if SECRET_NAMES.search(k) else v[:MAX_ENV_CHARS] for k, v in found[:MAX_ENV]}

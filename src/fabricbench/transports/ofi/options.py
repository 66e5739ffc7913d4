"""The libfabric (OFI) transports' options: the provider, domain, endpoint type, message calls and progress.

Shared by ``ofi`` (fabricbench's C loops) and ``fi-pingpong`` (libfabric's
own ping-pong), so both measure the same provider. Plain data, no libfabric:
the CLI, the peer HELLO and ``doctor`` read it on hosts without libfabric.

On ``serve`` only the domain is the server's own (its NIC); the provider,
endpoint type, calls and progress are the client's, carried in the HELLO's
"ofi" section, since both sides must open the same kind of endpoint.
"""

from __future__ import annotations

from fabricbench.argtypes import nonempty
from fabricbench.control.rendezvous import FieldReader, Fields, ProtocolError
from fabricbench.errors import FabricbenchError, UsageError
from fabricbench.transports.options import OptionGroup

ENDPOINTS = ("rdm", "msg")  # --ofi-endpoint, in the order of their code in the HELLO section
MESSAGES = ("tagged", "msg")  # --ofi-messages: fi_tsend/fi_trecv or fi_send/fi_recv
PROGRESS = ("spin", "wait")  # --ofi-progress: busy-poll fi_cq_read, or block in fi_cq_sread
MAX_NAME = 128  # a provider or domain name from the network, at most this many characters
INSTALL_HINT = "Debian/Ubuntu: apt-get install libfabric-dev; RHEL/Fedora: dnf install libfabric-devel"
BIN_HINT = "Debian/Ubuntu: apt-get install libfabric-bin; RHEL/Fedora: dnf install libfabric (or fabtests)"


class OFIUnavailable(FabricbenchError):
    """No libfabric, or no provider that matches what was asked: nothing to measure, said in one line."""

    exit_code = 2


def _name(flag: str, example: str):
    """A provider or domain name: not blank, printable, at most MAX_NAME characters (it travels in the HELLO)."""
    check = nonempty(flag, f"give a name such as {example}, or leave {flag} out")

    def parse(text: str) -> str:
        text = check(text)
        if len(text) > MAX_NAME or not text.isprintable():
            raise UsageError(f"{flag}: a name of at most {MAX_NAME} printable characters, such as {example}")
        return text

    return parse


class OFIOptions(OptionGroup):
    name = "ofi"
    handshake_version = 1

    def add_arguments(self, parser, role: str) -> None:
        if role == "serve":
            group = parser.add_argument_group("ofi and fi-pingpong transports, on this host")
            group.add_argument(
                "--ofi-domain", type=_name("--ofi-domain", "cxi0"), help="libfabric domain here, e.g. cxi0"
            )
            return
        group = parser.add_argument_group("ofi and fi-pingpong transports (libfabric)")
        group.add_argument(
            "--ofi-provider",
            type=_name("--ofi-provider", "tcp"),
            help="libfabric provider: tcp, shm, verbs;ofi_rxm, cxi (Slingshot), efa, opx, psm3, ... "
            "(default: fi_getinfo's first choice for the endpoint asked for)",
        )
        group.add_argument(
            "--ofi-domain",
            type=_name("--ofi-domain", "cxi0"),
            help="libfabric domain, e.g. cxi0, eth0, mlx5_0 (default: any)",
        )
        group.add_argument(
            "--ofi-endpoint",
            choices=ENDPOINTS,
            default="rdm",
            help="endpoint type: rdm, reliable datagrams (default; cxi and efa have only these), or msg, connected",
        )
        group.add_argument(
            "--ofi-messages",
            choices=MESSAGES,
            default="tagged",
            help="two-sided calls: tagged (fi_tsend/fi_trecv, as MPI over OFI uses them; default) or msg "
            "(fi_send/fi_recv)",
        )
        group.add_argument(
            "--ofi-progress",
            choices=PROGRESS,
            default="spin",
            help="waiting for completions: spin, busy-polling fi_cq_read (default), or wait, blocking in fi_cq_sread",
        )

    def parse(self, args, role: str) -> dict:
        given = {"domain": args.ofi_domain}
        if role == "run":
            given |= {
                "provider": args.ofi_provider,
                "endpoint": args.ofi_endpoint,
                "messages": args.ofi_messages,
                "progress": args.ofi_progress,
            }
        return {key: value for key, value in given.items() if value is not None}

    def encode_handshake(self, settings: dict) -> bytes:
        fields = Fields().text(settings.get("provider", ""))
        fields.u8(ENDPOINTS.index(settings.get("endpoint", "rdm")))
        fields.u8(MESSAGES.index(settings.get("messages", "tagged")))
        return fields.u8(PROGRESS.index(settings.get("progress", "spin"))).payload()

    def decode_handshake(self, reader: FieldReader, settings: dict) -> dict:
        """The client's provider, endpoint type, calls and progress, each checked; the domain stays the server's."""
        provider = reader.text(MAX_NAME)
        endpoint, messages, progress = reader.u8(), reader.u8(), reader.u8()
        if not provider.isprintable():
            raise ProtocolError("bad ofi provider name")
        if endpoint >= len(ENDPOINTS) or messages >= len(MESSAGES) or progress >= len(PROGRESS):
            raise ProtocolError("bad ofi endpoint, message or progress setting")
        chosen = {"endpoint": ENDPOINTS[endpoint], "messages": MESSAGES[messages], "progress": PROGRESS[progress]}
        return settings | chosen | ({"provider": provider} if provider else {})


OFI_OPTIONS = OFIOptions()

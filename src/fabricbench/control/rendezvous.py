"""Rendezvous: the small binary protocol fabricbench speaks over TCP without MPI.

Peers that have no launcher to introduce them (``fabricbench serve`` and
``run --peer``, the tcp transport's data links, an RDMA queue-pair exchange)
meet over one TCP connection and trade typed messages on it.

Every message is a 12-byte header and a payload::

    magic b"FBRV" | version u16 | message type u16 | payload length u32   (network byte order)

The header keeps this layout in every version, and so does an ERROR
message's payload (one text field), so a peer of another version is told so
in words and can read a refusal from any version. A payload is a sequence of struct-packed fields written
by ``Fields`` and read back, length-checked, by ``FieldReader``. Nothing
received is unpickled or evaluated; every length is checked against a limit
before anything is read, and every blocking call has a timeout. ``Inbox``
reads the same frames from a non-blocking socket, for a server that holds
many handshakes at once.

Message types below 64 belong to fabricbench's handshake, control plane and
links; a transport may use 64 and up for its own exchange.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import struct
from functools import partialmethod

from fabricbench import __version__
from fabricbench.errors import FabricbenchError, PeerError, UsageError

MAGIC = b"FBRV"
VERSION = 5  # 5: the HELLO carries the plan as JSON; since 4 a CHALLENGE and a PROOF (the token's HMAC) follow it
HEADER = struct.Struct("!4sHHI")
MAX_PAYLOAD = 64 * 1024  # the default limit on one message; the handshake and control plane stay far below
MAX_TEXT = 1024

# Message types.
ERROR = 1  # payload: text; the sender refuses and closes
HELLO = 2  # client -> server: what to run
ACCEPT = 3  # server -> client: agreed, the session starts
CHALLENGE = 4  # server -> client: a fresh nonce for the PROOF
PROOF = 5  # client -> server: HMAC of the nonce and the HELLO under the token, or nothing
BARRIER = 16  # control plane: empty
VALUE = 17  # control plane: one f64
VECTOR = 18  # control plane: f64 values
BYTES = 19  # control plane: opaque bytes (a broadcast)
JSON = 20  # control plane: one JSON object (a gather)
LINK = 32  # a data connection says which rank opened it
NAMES = {ERROR: "ERROR", HELLO: "HELLO", ACCEPT: "ACCEPT", CHALLENGE: "CHALLENGE", PROOF: "PROOF"}
NAMES |= {BARRIER: "BARRIER", VALUE: "VALUE", VECTOR: "VECTOR", BYTES: "BYTES", JSON: "JSON", LINK: "LINK"}


class ProtocolError(PeerError):
    """The peer sent something that is not a valid message of this protocol."""


class Refused(PeerError):
    """The peer answered with an ERROR message: it read us and said no."""

    def __init__(self, reason: str):
        super().__init__(f"peer refused: {reason}")
        self.reason = reason


def _name(kind: int) -> str:
    return NAMES.get(kind, f"type {kind}")


class Fields:
    """Builds a payload from struct-packed fields (the writer side of FieldReader)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def _pack(self, fmt: str, value) -> Fields:
        try:
            self._parts.append(struct.pack(fmt, value))
        except struct.error as exc:
            raise UsageError(f"value {value!r} does not fit the protocol field: {exc}") from None
        return self

    def blob(self, data: bytes) -> Fields:
        self.u32(len(data))
        self._parts.append(bytes(data))
        return self

    def text(self, value: str) -> Fields:
        data = value.encode()
        if len(data) > MAX_TEXT:
            raise UsageError(f"text field of {len(data)} B is over the {MAX_TEXT} B limit")
        self.u16(len(data))
        self._parts.append(data)
        return self

    def payload(self) -> bytes:
        return b"".join(self._parts)


class FieldReader:
    """Reads fields back from a payload; anything short, long or malformed is a ProtocolError."""

    def __init__(self, payload: bytes, what: str):
        self._data = memoryview(payload)
        self._pos = 0
        self.what = what

    def _take(self, nbytes: int) -> memoryview:
        end = self._pos + nbytes
        if end > len(self._data):
            raise ProtocolError(f"malformed {self.what}: truncated at byte {len(self._data)}, needed {end}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def _unpack(self, fmt: str):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def blob(self, max_len: int = MAX_PAYLOAD) -> bytes:
        length = self.u32()
        if length > max_len:
            raise ProtocolError(f"malformed {self.what}: field of {length} B is over the {max_len} B limit")
        return self._take(length).tobytes()

    def text(self, max_len: int = MAX_TEXT) -> str:
        length = self.u16()
        if length > max_len:
            raise ProtocolError(f"malformed {self.what}: text of {length} B is over the {max_len} B limit")
        try:
            return self._take(length).tobytes().decode()
        except UnicodeDecodeError:
            raise ProtocolError(f"malformed {self.what}: text is not UTF-8") from None

    def end(self) -> None:
        if self._pos != len(self._data):
            raise ProtocolError(f"malformed {self.what}: {len(self._data) - self._pos} unexpected trailing bytes")


# The fixed-width fields, in network byte order, written once for both sides: Fields.u8(value) appends one and
# returns the builder, FieldReader.u8() reads one back.
FIXED_FIELDS = {"u8": "!B", "u16": "!H", "u32": "!I", "u64": "!Q", "i64": "!q", "f64": "!d"}
for _field, _format in FIXED_FIELDS.items():
    setattr(Fields, _field, partialmethod(Fields._pack, _format))
    setattr(FieldReader, _field, partialmethod(FieldReader._unpack, _format))


def _receive_failed(waiting_for: str, sock: socket.socket, exc: OSError | None = None) -> PeerError:
    """The one line for a receive that ended without its bytes (``exc`` None: the peer closed)."""
    if isinstance(exc, TimeoutError):
        return PeerError(f"timed out after {sock.gettimeout():g} s waiting for {waiting_for}")
    if exc is None or isinstance(exc, ConnectionError):
        return PeerError(f"peer closed the connection while we waited for {waiting_for}")
    return PeerError(f"connection lost while we waited for {waiting_for}: {exc.strerror or exc}")


def _recv_exact(sock: socket.socket, nbytes: int, waiting_for: str) -> bytes:
    buf = bytearray(nbytes)
    view = memoryview(buf)
    got = 0
    try:
        while got < nbytes:
            n = sock.recv_into(view[got:])
            if not n:
                raise _receive_failed(waiting_for, sock)
            got += n
    except OSError as exc:
        raise _receive_failed(waiting_for, sock, exc) from None
    return bytes(buf)


def send_message(sock: socket.socket, kind: int, payload: bytes = b"") -> None:
    """Send one framed message (the socket's own timeout applies)."""
    try:
        sock.sendall(HEADER.pack(MAGIC, VERSION, kind, len(payload)) + payload)
    except TimeoutError:
        raise PeerError(f"timed out after {sock.gettimeout():g} s sending {_name(kind)}") from None
    except ConnectionError:
        raise PeerError(f"peer closed the connection while we sent {_name(kind)}") from None
    except OSError as exc:
        raise PeerError(f"connection lost sending {_name(kind)}: {exc.strerror or exc}") from None


def _check_header(header: bytes, max_payload: int) -> tuple[int, int]:
    """(message type, payload length) from a header, or ProtocolError before any payload is read."""
    magic, version, kind, length = HEADER.unpack(header)
    if magic != MAGIC:
        raise ProtocolError(f"not a fabricbench peer: bad magic {magic!r} (expected {MAGIC!r})")
    if length > max_payload:
        raise ProtocolError(f"{_name(kind)} message of {length} B is over the {max_payload} B limit")
    if version != VERSION and kind != ERROR:
        raise ProtocolError(
            f"the peer speaks rendezvous protocol version {version} and this side (fabricbench {__version__}) "
            f"version {VERSION}: run the same fabricbench version on both sides"
        )
    return kind, length


def _check_kind(kind: int, payload: bytes, expect: int) -> bytes:
    if kind == ERROR:
        raise Refused(FieldReader(payload, "ERROR message").text())
    if kind != expect:
        raise ProtocolError(f"expected a {_name(expect)} message, got {_name(kind)}")
    return payload


def recv_message(sock: socket.socket, expect: int, max_payload: int = MAX_PAYLOAD) -> bytes:
    """Receive one message of type ``expect`` and return its payload.

    An ERROR message from the peer raises Refused with the peer's words; a
    bad magic, version, type or length raises ProtocolError before the
    payload is read.
    """
    waiting_for = f"the peer's {_name(expect)}"
    kind, length = _check_header(_recv_exact(sock, HEADER.size, waiting_for), max_payload)
    return _check_kind(kind, _recv_exact(sock, length, waiting_for), expect)


class Inbox:
    """One message at a time from a non-blocking socket, in whatever pieces it arrives.

    A server that holds many handshakes at once reads each when it is
    readable. It never reads past the message it waits for, and checks the
    header before it takes the payload, so a peer holds at most a header and
    ``max_payload`` bytes of the server's memory.
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()
        self._header: tuple[int, int] | None = None  # (type, length) once the header is in

    def read(self, expect: int, max_payload: int = MAX_PAYLOAD) -> bytes | None:
        """The payload once the whole message is in, else None; reads only what is there now."""
        waiting_for = f"the peer's {_name(expect)}"
        while True:
            need = HEADER.size if self._header is None else self._header[1]
            if len(self._buf) < need:
                try:
                    chunk = self.sock.recv(need - len(self._buf))
                except BlockingIOError:
                    return None
                except OSError as exc:
                    raise _receive_failed(waiting_for, self.sock, exc) from None
                if not chunk:
                    raise _receive_failed(waiting_for, self.sock)
                self._buf += chunk
                continue
            if self._header is None:
                self._header = _check_header(bytes(self._buf), max_payload)
                self._buf.clear()
                continue
            kind, payload = self._header[0], bytes(self._buf)
            self._header = None
            self._buf.clear()
            return _check_kind(kind, payload, expect)


def refuse(sock: socket.socket, message: str) -> None:
    """Tell the peer why we stop, if it is still listening; never raises."""
    with contextlib.suppress(OSError, FabricbenchError):
        words = message.encode()[:MAX_TEXT].decode(errors="ignore")
        send_message(sock, ERROR, Fields().text(words).payload())


def connect(host: str, port: int, timeout: float, source: str | None = None) -> socket.socket:
    """A TCP connection to host:port with TCP_NODELAY and ``timeout`` on every call."""
    target = host_port(host, port)
    try:
        sock = socket.create_connection((host, port), timeout, (source, 0) if source else None)
    except socket.gaierror as exc:
        raise PeerError(f"cannot resolve {host!r}: {exc.strerror}") from None
    except TimeoutError:
        raise PeerError(f"cannot reach {target}: timed out after {timeout:g} s") from None
    except OSError as exc:
        raise PeerError(f"cannot reach {target}: {(exc.strerror or str(exc)).lower()}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def host_port(address: str, port: int) -> str:
    """HOST:PORT as a log line or an error names it: an IPv6 address in brackets, [::1]:PORT."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def listen(address: str, port: int, backlog: int = 16) -> socket.socket:
    """A listening socket on address:port (port 0: any free port); a busy port is a UsageError.

    An address with a ':' is IPv6: ``::`` listens on both families at once (a dual-stack socket, IPV6_V6ONLY
    off), ``::1`` on IPv6 loopback; a host without IPv6 refuses it in words saying so.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host_port(address, port)}: IPv6 is unavailable on this host "
            f"({(exc.strerror or str(exc)).lower()}); give an IPv4 address such as 127.0.0.1 or 0.0.0.0"
        ) from None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # allow restarts over TIME_WAIT, not sharing
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # "::" takes IPv4 clients too
        sock.bind((address, port))
        sock.listen(backlog)
    except (OSError, OverflowError) as exc:
        sock.close()
        if isinstance(exc, OverflowError):
            reason = "no such port"
        elif exc.errno == errno.EADDRINUSE:
            reason = "address already in use"
        elif family == socket.AF_INET6 and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            reason = "no interface here has that IPv6 address (is IPv6 enabled on it?)"
        elif isinstance(exc, socket.gaierror):  # a name no resolver knows: quoted, as every refusal quotes input
            raise UsageError(f"cannot listen on {address!r}: {(exc.strerror or str(exc)).lower()}") from None
        else:
            reason = (exc.strerror or str(exc)).lower()
        raise UsageError(f"cannot listen on {host_port(address, port)}: {reason}") from None
    return sock


def accept(listener: socket.socket, timeout: float | None, waiting_for: str) -> tuple[socket.socket, str]:
    """The next connection (``timeout`` None waits for ever) with TCP_NODELAY; the caller sets its timeout."""
    listener.settimeout(timeout)
    try:
        sock, addr = listener.accept()
    except TimeoutError:
        raise PeerError(f"timed out after {timeout:g} s waiting for {waiting_for}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, host_port(addr[0], addr[1])

"""The cases of a fabric whose C loop holds one endpoint handle (ofi, ucx): ping-pong and windows.

Both loops export ``fb_pingpong(handle, size, iterations, initiator, times)`` and ``fb_stream(handle, size,
window, iterations, sending, receiving, ack, times)`` over one registered buffer: the send half at offset 0,
the receive half at ``transport.region``. A transport using these cases has ``lib``, ``handle``, ``memory``,
``region``, ``rank``, ``ranks``, ``window``, ``require_success(code)``, ``case_method(calls)`` (the row's method
for these calls) and ``message_calls(size)`` (the calls a two-sided message of that size makes).
"""

from __future__ import annotations

from fabricbench.buffers import POISON, nothing, pattern, times_address
from fabricbench.measure.kernels import Kernel, partner_of
from fabricbench.transports.base import Case


def send_seed(rank: int) -> int:
    """The pattern seed of what ``rank`` sends."""
    return rank + 1


class HandleCase(Case):
    """This rank's part of one kernel at one size: data written, the receive half poisoned."""

    def __init__(self, transport, kernel: Kernel, size: int, calls: str):
        super().__init__()
        role = partner_of(kernel, transport.rank, transport.ranks)
        self.active = role is not None
        self.peer, self.initiator = role if role else (-1, False)
        self.size = size
        self.kernel = kernel
        self.transport = transport
        self.method = transport.case_method(calls)
        if not self.active:
            return
        region = transport.region
        transport.memory[:size] = pattern(size, send_seed(transport.rank))
        transport.memory[region : region + size] = POISON
        self.received = transport.memory[region : region + size]

    def expected(self):
        return pattern(len(self.received), send_seed(self.peer))

    def require_success(self, code: int) -> None:
        self.transport.require_success(code)

    def close(self) -> None:
        self.received = nothing()


class HandlePingPong(HandleCase):
    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size, transport.message_calls(size))

    def run(self, iterations: int, times: memoryview) -> None:
        if self.active:
            t = self.transport
            self.require_success(
                t.lib.fb_pingpong(t.handle, self.size, iterations, int(self.initiator), times_address(times))
            )


class HandleStream(HandleCase):
    """bw: the initiator sends a window and waits for the 4-byte ack; bibw: both send a window at once."""

    def __init__(self, transport, kernel, size):
        super().__init__(transport, kernel, size, f"{transport.message_calls(size)}, window {transport.window}")
        both = kernel.directions == 2
        self.window = transport.window
        self.window_holds_transit = not both  # bibw's peer window may land before our stamp
        self.sending = self.active and (self.initiator or both)
        self.receiving = self.active and (both or not self.initiator)
        if self.active and not self.receiving:
            self.received = nothing()  # a one-way sender gets nothing back

    def run(self, iterations: int, times: memoryview) -> None:
        if self.active:
            t = self.transport
            ack = int(self.kernel.directions == 1)
            self.require_success(
                t.lib.fb_stream(
                    t.handle, self.size, self.window, iterations, int(self.sending), int(self.receiving), ack,
                    times_address(times),
                )
            )  # fmt: skip

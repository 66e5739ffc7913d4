"""One RC queue pair between two ranks, through pyverbs: device choice, memory, completions, connection.

This is the set-up half of the verbs transports; their timed loops live in
``transports/verbs/transport.py``. Everything opened here is closed by ``Link.close``,
on every path out, including a failure half-way through opening.
"""

from __future__ import annotations

import contextlib
import errno
import secrets
import time

from fabricbench.buffers import PAGE, aligned
from fabricbench.errors import PeerError, UsageError
from fabricbench.lazy import np
from fabricbench.transports.verbs.rdma import (
    GID_TYPES,
    LINK_LAYERS,
    MTU_BYTES,
    CompletionError,
    Endpoint,
    VerbsUnavailable,
    gid_bytes,
    gid_text,
    pick_gid,
    wc_status_text,
)

# perftest's queue-pair timers: 4.096 µs * 2^14 (67 ms) per retry, 7 retries, RNR retries for ever.
QP_TIMEOUT, RETRY_COUNT, RNR_RETRY, MIN_RNR_TIMER = 14, 7, 7, 12
HOP_LIMIT = 255  # perftest's; the kernel's default of 1 stops at the first router
MAX_READS = 16  # outstanding RDMA READs asked for (capped by both devices)
MARKERS = 250  # values of a flag or last byte: 1..250, never 0 and never POISON
# An idle WRITE target or READ source looks at the end-of-run flag first after 0.2 ms, then ever less often, up
# to every 20 ms: its wake-ups take the CPU that the device's own work (rxe runs in the kernel) and the timed
# side need, as perftest's passive side, blocked on its socket, does not.
PASSIVE_POLL_S, PASSIVE_POLL_MAX_S = 0.0002, 0.02
ATOMIC_OFFSET = 8  # the atomics' 8-byte target, this far into the flag page (_verbsloop.c's ATOMIC_OFFSET)


def device_names(verbs) -> list[str]:
    """The RDMA devices libibverbs sees, or VerbsUnavailable saying how to get one."""
    try:
        found = verbs.get_device_list()
    except verbs.PyverbsError:
        found = []
    names = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in found]
    if not names:
        raise VerbsUnavailable(
            "no RDMA device found (load the NIC's driver; for SoftRoCE run scripts/softroce.sh up, "
            "or scripts/softroce-vm.sh where the kernel has no rdma_rxe)"
        )
    return names


def survey_devices(verbs) -> list[dict]:
    """Every device and port as ``doctor`` shows them: state, link layer, active MTU and the GID perftest would pick."""
    found = []
    for name in device_names(verbs):
        context = verbs.Context(name=name)
        try:
            attr = context.query_device()
            ports = []
            for number in range(1, attr.phys_port_cnt + 1):
                port = context.query_port(number)
                entries = [
                    (entry.gid_index, gid_bytes(entry.gid_str()), entry.gid_type)
                    for entry in context.query_gid_table(port.gid_tbl_len * attr.phys_port_cnt)
                    if entry.port_num == number
                ]
                try:
                    index, gid, gid_type = pick_gid(entries)
                    chosen = f"{index}: {gid_text(gid)} ({GID_TYPES.get(gid_type, gid_type)})"
                except VerbsUnavailable:
                    chosen = "none"
                ports.append(
                    {
                        "port": number,
                        "state": _port_state(port.state),
                        "link_layer": LINK_LAYERS.get(port.link_layer, str(port.link_layer)),
                        "active_mtu_B": MTU_BYTES.get(port.active_mtu),
                        "lid": port.lid,
                        "gid": chosen,
                    }
                )
            found.append({"device": name, "firmware": attr.fw_version, "ports": ports})
        finally:
            context.close()
    return found


class Completions:
    """One completion queue, polled in batches: ``poll(limit)`` returns how many work requests completed.

    An extended CQ (ibv_create_cq_ex) is read in place, so polling builds no
    Python object per completion; a provider without one falls back to
    ibv_poll_cq, where pyverbs builds a WC object per completion. A failed
    completion raises CompletionError naming libibverbs' status string and
    ``operation`` (a failed completion carries no valid opcode of its own).
    """

    def __init__(self, verbs, context, depth: int):
        self.operation = "work request"
        try:
            self.cq = verbs.CQEX(context, verbs.CqInitAttrEx(cqe=depth))
            self.kind = "extended CQ (ibv_start_poll/ibv_end_poll)"
            self.poll = self._extended_poller(self.cq, verbs.PollCqAttr())
        except verbs.PyverbsError:
            self.cq = verbs.CQ(context, depth, None, None, 0)
            self.kind = "ibv_poll_cq"
            self.poll = self._plain_poller(self.cq)

    def _fail(self, status: int, vendor_error: int):
        raise CompletionError(
            f"{self.operation} completion failed: {wc_status_text(status)} "
            f"(status {int(status)}, vendor error {int(vendor_error):#x})"
        )

    def _extended_poller(self, cq, attr):
        """One ibv_start_poll/ibv_end_poll per completion, never ibv_next_poll.

        Providers disagree on what an empty ibv_next_poll leaves behind (rxe
        ends the batch itself, so the documented ibv_end_poll after it skips a
        slot), so batches of one are the form every provider gets right.
        """
        start, end, vendor_error, fail = cq.start_poll, cq.end_poll, cq.read_vendor_err, self._fail

        def poll(limit: int) -> int:
            count = 0
            while count < limit:
                empty = start(attr)
                if empty:
                    if empty != errno.ENOENT:
                        raise CompletionError(f"polling the completion queue failed: errno {empty}")
                    break
                status = cq.status
                if status:
                    vendor = vendor_error()
                    end()
                    fail(status, vendor)
                end()
                count += 1
            return count

        return poll

    def _plain_poller(self, cq):
        read, fail = cq.poll, self._fail

        def poll(limit: int) -> int:
            count, completions = read(limit)
            for completion in completions:
                if completion.status:
                    fail(completion.status, completion.vendor_err)
            return count

        return poll


class Port:
    """The device, port and GID this rank uses, chosen through pyverbs as perftest chooses them.

    The C loop's queue pair (verbs_cloop.CLink) opens the device again in C and
    needs only the choice; the pyverbs loop's Link builds on the context opened
    here. Everything opened is closed by ``close``, on every path out,
    including a failure half-way through opening.
    """

    def __init__(self, verbs, settings: dict):
        self.v = verbs
        self._opened: list = []  # pyverbs objects, in the order they were created
        try:
            self._open_port(settings.get("device"), settings.get("port"))
            self._choose_gid(settings.get("gid_index"))
        except BaseException:
            self.close()
            raise

    def _keep(self, obj):
        self._opened.append(obj)
        return obj

    def _open_port(self, device: str | None, port: int | None) -> None:
        """perftest's choice: the named device or the first one, on the named port or its first active one."""
        v = self.v
        names = device_names(v)
        if device and device not in names:
            raise UsageError(f"no RDMA device {device!r}; found: {', '.join(names)}")
        seen = []
        for name in [device] if device else names:
            context = v.Context(name=name)
            attr = context.query_device()
            if port and port > attr.phys_port_cnt:
                context.close()
                raise UsageError(f"{name} has {attr.phys_port_cnt} port(s); port {port} does not exist")
            for number in [port] if port else range(1, attr.phys_port_cnt + 1):
                port_attr = context.query_port(number)
                if port_attr.state == v.e.IBV_PORT_ACTIVE:
                    self.context = self._keep(context)
                    self.device, self.device_attr, self.port, self.port_attr = name, attr, number, port_attr
                    return
                seen.append(f"{name} port {number} is {_port_state(port_attr.state)}")
            context.close()
        raise VerbsUnavailable(f"no active RDMA port: {'; '.join(seen)}")

    def _choose_gid(self, index: int | None) -> None:
        """RoCE and rxe address by GID (GRH always); InfiniBand by LID, with a GRH only for an explicit --gid-index."""
        link_layer = self.port_attr.link_layer
        self.ethernet = link_layer == self.v.e.IBV_LINK_LAYER_ETHERNET
        self.link_layer = LINK_LAYERS.get(link_layer, str(link_layer))
        self.use_grh = self.ethernet or index is not None
        if index is None and not self.ethernet:
            index = 0
        if index is None:
            entries = [
                (entry.gid_index, gid_bytes(entry.gid_str()), entry.gid_type)
                for entry in self.context.query_gid_table(self.port_attr.gid_tbl_len * self.device_attr.phys_port_cnt)
                if entry.port_num == self.port
            ]
            self.gid_index, self.gid, gid_type = pick_gid(entries)
        else:
            if index >= self.port_attr.gid_tbl_len:
                size = self.port_attr.gid_tbl_len
                raise UsageError(f"--gid-index {index} is past the {size} GIDs of {self.device} port {self.port}")
            try:
                entry = self.context.query_gid_ex(self.port, index)
            except self.v.PyverbsError:
                raise UsageError(f"GID index {index} of {self.device} port {self.port} is empty") from None
            self.gid_index, self.gid, gid_type = index, gid_bytes(entry.gid_str()), entry.gid_type
        self.gid_type = GID_TYPES.get(gid_type, str(gid_type))

    def _allocate(self, region: int) -> None:
        """The memory both loops register: a send half and a receive half of ``region`` bytes (whole pages), then
        the flag page: [0] written by the peer, [1] what this rank writes, [8:16] the atomics' target."""
        self.region = -(-max(region, 1) // PAGE) * PAGE
        self.memory = aligned(2 * self.region + PAGE)
        self.memory[:] = 0  # touched before registration, so every page is backed
        self.send_region = self.memory[: self.region]
        self.recv_region = self.memory[self.region : 2 * self.region]
        self.flags = memoryview(self.memory[2 * self.region :])
        self.atomic_target = self.memory[2 * self.region + ATOMIC_OFFSET : 2 * self.region + ATOMIC_OFFSET + 8]
        self.runs_signalled = self.runs_seen = 0

    def wait_done(self) -> None:
        """Sleep-poll until the peer signals the end of this run: nothing here is timed, so give the CPU away,
        waking less often the longer the run lasts (the end is seen at most about half the run late)."""
        self.runs_seen = marker = self.runs_seen % MARKERS + 1
        flags, pause = self.flags, PASSIVE_POLL_S
        while flags[0] != marker:
            time.sleep(pause)
            pause = min(pause * 1.5, PASSIVE_POLL_MAX_S)

    def port_metadata(self) -> dict:
        """The device, port and addressing, as ``metadata.json`` records them."""
        attr, port = self.device_attr, self.port_attr
        return {
            "device": self.device,
            "firmware": attr.fw_version,
            "port": self.port,
            "link_layer": self.link_layer,
            "active_mtu_B": MTU_BYTES.get(port.active_mtu),
            "active_speed": _describe("speed_to_str", port.active_speed),
            "active_width": _describe("width_to_str", port.active_width),
            "lid": port.lid,
            "gid_index": self.gid_index,
            "gid": gid_text(self.gid),
            "gid_type": self.gid_type,
            "grh": self.use_grh,
            "hop_limit": HOP_LIMIT if self.use_grh else None,
        }

    def close(self) -> None:
        """Destroy what was opened, newest first; safe to call twice."""
        while self._opened:
            obj = self._opened.pop()
            with contextlib.suppress(Exception):  # one failed destroy must not keep the rest
                obj.close()


class Link(Port):
    """This rank's end of an RC queue pair through pyverbs: registered memory, CQs and the QP on a chosen Port.

    The registered memory has two halves of ``region`` bytes: the first is
    what this rank sends (and what the peer may READ), the second is where
    the peer's WRITEs and SENDs land. A page after them carries the end-of-run
    flag: a rank whose CPU takes no part in a transfer (a WRITE's target, a
    READ's source) sleep-polls it instead of returning to the control plane at
    once, where an MPI barrier would busy-poll and take the CPU the transfer
    needs when ranks share CPUs.
    """

    def __init__(self, verbs, settings: dict, region: int, send_depth: int, recv_depth: int):
        self.memory = np.empty(0, dtype=np.uint8)
        super().__init__(verbs, settings)
        try:
            self._open(settings, region, send_depth, recv_depth)
        except BaseException:
            self.close()
            raise

    def _open(self, settings: dict, region: int, send_depth: int, recv_depth: int) -> None:
        v, e = self.v, self.v.e
        self.pd = self._keep(v.PD(self.context))
        self._allocate(region)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.mr = self._keep(v.MR(self.pd, self.memory.nbytes, access, address=self.memory.ctypes.data))
        depth_limit = self.device_attr.max_cqe
        self.send_cq = Completions(v, self.context, min(send_depth + 1, depth_limit))
        self._keep(self.send_cq.cq)
        self.recv_cq = Completions(v, self.context, min(recv_depth + 1, depth_limit))
        self._keep(self.recv_cq.cq)
        self.qp = self._create_qp(send_depth, recv_depth, settings.get("inline", 220))
        self.psn = secrets.randbelow(1 << 24)
        self.rd_atomic = max(1, min(MAX_READS, self.device_attr.max_qp_rd_atom, self.device_attr.max_qp_init_rd_atom))
        self.path_mtu = self.port_attr.active_mtu
        self.reads = self.rd_atomic

    def _create_qp(self, send_depth: int, recv_depth: int, inline: int):
        """An RC QP asking for ``inline`` bytes of inline data, halving the request until the device accepts it."""
        v, e = self.v, self.v.e
        while True:
            cap = v.QPCap(
                max_send_wr=send_depth, max_recv_wr=recv_depth, max_send_sge=1, max_recv_sge=1, max_inline_data=inline
            )
            init = v.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.send_cq.cq, rcq=self.recv_cq.cq, cap=cap, sq_sig_all=0)
            try:
                qp = self._keep(v.QP(self.pd, init))
                break
            except v.PyverbsError:
                if inline == 0:
                    raise
                inline //= 2
        granted = qp.query(e.IBV_QP_CAP)[1].cap.max_inline_data
        self.max_inline = min(inline, granted) if granted else inline
        return qp

    def endpoint(self) -> Endpoint:
        return Endpoint(
            lid=self.port_attr.lid,
            qpn=self.qp.qp_num,
            psn=self.psn,
            gid=self.gid,
            mtu=self.port_attr.active_mtu,
            rkey=self.mr.rkey,
            addr=self.mr.buf,
            region=self.region,
            rd_atomic=self.rd_atomic,
        )

    def connect(self, remote: Endpoint) -> None:
        """RESET to RTS against the peer's record; the path MTU is the smaller of the two active MTUs."""
        v, e = self.v, self.v.e
        if remote.region < self.region:
            raise UsageError(f"the peer registered {remote.region} B per half, this rank needs {self.region} B")
        self.remote = remote
        self.path_mtu = min(self.port_attr.active_mtu, remote.mtu)
        self.reads = reads = min(self.rd_atomic, remote.rd_atomic)
        attr = v.QPAttr(port_num=self.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        attr.path_mtu = self.path_mtu
        attr.dest_qp_num = remote.qpn
        attr.rq_psn = remote.psn
        attr.sq_psn = self.psn
        attr.max_rd_atomic = reads
        attr.max_dest_rd_atomic = reads
        attr.min_rnr_timer, attr.timeout = MIN_RNR_TIMER, QP_TIMEOUT
        attr.retry_cnt, attr.rnr_retry = RETRY_COUNT, RNR_RETRY
        if self.use_grh:
            route = v.GlobalRoute(dgid=v.GID(gid_text(remote.gid)), sgid_index=self.gid_index, hop_limit=HOP_LIMIT)
            attr.ah_attr = v.AHAttr(port_num=self.port, is_global=1, gr=route, dlid=remote.lid)
        else:
            attr.ah_attr = v.AHAttr(port_num=self.port, is_global=0, dlid=remote.lid)
        try:
            self.qp.to_rts(attr)
        except v.PyverbsError as exc:
            raise PeerError(f"the queue pair on {self.device} did not connect to the peer's: {exc}") from None
        done = v.SGE(self.mr.buf + 2 * self.region + 1, 1, self.mr.lkey)
        inline = e.IBV_SEND_INLINE if self.max_inline else 0
        self.done_wr = v.SendWR(
            opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[done], send_flags=e.IBV_SEND_SIGNALED | inline
        )
        self.done_wr.set_wr_rdma(remote.rkey, remote.addr + 2 * remote.region)

    def signal_done(self, relax) -> None:
        """Tell a waiting peer this run's transfers are complete (its data has landed): one 1-byte WRITE."""
        self.runs_signalled = self.runs_signalled % MARKERS + 1
        self.flags[1] = self.runs_signalled
        self.qp.post_send(self.done_wr)
        while not self.send_cq.poll(1):
            relax()

    def send_wr(self, opcode, size: int, signaled: bool, inline: bool, next_wr=None):
        """A work request for ``size`` bytes: WRITE/SEND from the send half, READ into the receive half."""
        v, e = self.v, self.v.e
        reading = opcode == e.IBV_WR_RDMA_READ
        local = self.mr.buf + (self.region if reading else 0)
        flags = (e.IBV_SEND_SIGNALED if signaled else 0) | (e.IBV_SEND_INLINE if inline else 0)
        wr = v.SendWR(
            opcode=opcode, num_sge=1, sg=[v.SGE(local, size, self.mr.lkey)], send_flags=flags, next_wr=next_wr
        )
        if opcode != e.IBV_WR_SEND:
            target = self.remote.addr + (0 if reading else self.remote.region)
            wr.set_wr_rdma(self.remote.rkey, target)
        return wr

    def recv_chain(self, length: int) -> list:
        """``length`` linked receive requests for the whole receive half; posting ``chain[length - r]`` posts r."""
        v = self.v
        chain = [v.RecvWR(num_sge=1, sg=[v.SGE(self.mr.buf + self.region, self.region, self.mr.lkey)])]
        for _ in range(length - 1):
            sge = v.SGE(self.mr.buf + self.region, self.region, self.mr.lkey)
            chain.append(v.RecvWR(num_sge=1, sg=[sge], next_wr=chain[-1]))
        chain.reverse()
        return chain

    def metadata(self) -> dict:
        return self.port_metadata() | {
            "path_mtu_B": MTU_BYTES.get(self.path_mtu),
            "max_inline_B": self.max_inline,
            "max_rd_atomic": self.reads,
            "completion_queue": self.send_cq.kind,
            "registered_B": int(self.memory.nbytes),
        }

    def close(self) -> None:
        """Destroy the QP, CQs, MR, PD and device context, newest first; safe to call twice."""
        super().close()
        self.flags = None
        self.memory = self.send_region = self.recv_region = np.empty(0, dtype=np.uint8)


def _port_state(state: int) -> str:
    from pyverbs.device import port_state_to_str

    return port_state_to_str(state)


def _describe(helper: str, value: int) -> str:
    """pyverbs' own words for a port speed or width, where this pyverbs has them."""
    import pyverbs.device

    function = getattr(pyverbs.device, helper, None)
    return function(value) if function else str(value)

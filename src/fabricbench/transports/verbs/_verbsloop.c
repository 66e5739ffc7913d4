/* The verbs transports' queue pair and timed loops, outside the interpreter.
 *
 * Through pyverbs every post and every poll costs the interpreter a call and
 * a Python object, a visible part of an RDMA round trip. Here the resources
 * are built as perftest builds them (device context, PD, MR over the caller's
 * buffer, CQs, an optional completion channel, an RC, UC or UD queue pair)
 * and the loops post and poll with plain libibverbs calls. verbs_cloop.py
 * compiles this file against the host's libibverbs on first use and calls it
 * through ctypes, which releases the GIL for each call, so the runner's
 * watchdog thread keeps running while a loop spins.
 *
 * The loops follow perftest's:
 * - write latency (ib_write_lat): post a signalled WRITE, spin on the last
 *   byte of the receive half until the peer's WRITE changes it; the send
 *   completion is reaped while spinning, off the round trip's path;
 * - send latency (ib_send_lat): SEND, wait for the peer's message on the
 *   receive CQ, give the receive back;
 * - read and atomic latency (ib_read_lat, ib_atomic_lat): one operation and
 *   its completion, a full round trip;
 * - streams (ib_write_bw, ib_send_bw, ib_atomic_bw, -b): one sample is one
 *   window of WRs posted in calls of `post_list`, every `cq_mod`-th
 *   signalled, and drained: the sample ends when the window's last
 *   completion is reaped, so it always contains the transit of its bytes and
 *   no sample can be shorter than the link allows.
 * Stamps are fb_runtime.h's (CLOCK_MONOTONIC in ns), one per iteration into
 * times[i]. Every function returns 0, or -1 with one line in the link's error
 * text (fb_error).
 */
#define _GNU_SOURCE

/* First, so that a host without rdma-core's headers fails on this line and the builder names the package. */
#include <infiniband/verbs.h>

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_verbscodes.h"
#include "fb_runtime.h"

#define QKEY 0x11111111u /* perftest's UD Q_Key */
#define GRH_BYTES 40     /* a UD receive buffer holds the packet's GRH before the payload */
#define BATCH 16         /* completions reaped per ibv_poll_cq call, receives reposted per call */
#define MAX_READS 16     /* outstanding RDMA READs and atomics asked for (capped by both devices) */
#define ATOMIC_OFFSET 8  /* the atomics' target: bytes into the flag page after the two halves */
#define ACK_ID 1         /* wr_id of a UD stream's flow-control message: an empty SEND per window received */
/* perftest's queue-pair timers: 4.096 us * 2^14 per retry, 7 retries, RNR retries for ever. */
#define QP_TIMEOUT 14
#define RETRY_COUNT 7
#define RNR_RETRY 7
#define MIN_RNR_TIMER 12
#define HOP_LIMIT 255

struct fb_endpoint { /* what this side tells the peer, read by verbs_cloop.Endpoint */
    uint32_t qpn;
    uint32_t rkey;
    uint64_t addr;
    uint32_t max_inline;
    uint32_t rd_atomic;
    uint32_t atomics; /* 1 when the device can do RDMA atomics */
};

struct fb_link {
    struct ibv_context *context;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_comp_channel *channel;
    struct ibv_cq *send_cq, *recv_cq;
    struct ibv_qp *qp;
    struct ibv_ah *ah;
    char *buf;
    uint64_t region;
    int qp_type, port, yield, timeout_ms, send_depth;
    uint32_t max_inline, rd_atomic, remote_qpn, remote_rkey;
    uint64_t remote_addr, remote_region;
    int64_t acks; /* an unreliable stream's flow-control messages received (see fb_stream) */
    int acking;   /* inside such a stream: an empty message is one of them, not data */
    struct ibv_recv_wr recv_wrs[BATCH]; /* linked: posting &recv_wrs[BATCH - n] gives n receives back */
    struct ibv_sge recv_sge;
    char error[256];
};

static const char *op_name(int op)
{
    switch (op) {
    case OP_WRITE: return "RDMA WRITE";
    case OP_SEND: return "SEND";
    case OP_READ: return "RDMA READ";
    case OP_FOP: return "ATOMIC FETCH AND ADD";
    case OP_CAS: return "ATOMIC COMPARE AND SWAP";
    default: return "RECV";
    }
}

#define OP_RECV (-1)

/* `what` failed with `code` (0: errno's): the link's error text; -1. */
static int fail(struct fb_link *l, const char *what, int code)
{
    return FB_FAIL(l, "%s: %s", what, strerror(code ? code : errno));
}

const char *fb_error(struct fb_link *l) { return l->error; }

/* Yield the CPU between polls (--spin yield), or busy-poll. */
void fb_set_yield(struct fb_link *l, int yield) { l->yield = yield; }

static void relax(const struct fb_link *l)
{
    if (l->yield)
        sched_yield();
}

int fb_post_receives(struct fb_link *l, int count);

/* Reap up to `limit` completions from `cq` without waiting; -1 with the error text on a failed one. Every
 * receive reaped is given back at once. What is returned counts data only: a UD stream's flow-control messages
 * are counted in `l->acks` when they arrive, and their own send completions only free their slot. */
static int reap(struct fb_link *l, struct ibv_cq *cq, int limit, int op)
{
    struct ibv_wc wc[BATCH];
    int n = ibv_poll_cq(cq, limit < BATCH ? limit : BATCH, wc), data = 0;
    if (n < 0)
        return FB_FAIL(l, "polling the completion queue failed (%d)", n);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS)
            return FB_FAIL(l, "%s completion failed: %s (status %d, vendor error 0x%x)",
                           op_name(op), ibv_wc_status_str(wc[i].status), (int)wc[i].status, wc[i].vendor_err);
        if (cq == l->recv_cq && l->acking && wc[i].byte_len == (l->qp_type == QP_UD ? GRH_BYTES : 0))
            l->acks++;
        else if (wc[i].wr_id != ACK_ID)
            data++;
    }
    if (cq == l->recv_cq && n > 0 && fb_post_receives(l, n))
        return -1;
    return data;
}

/* Completions of `cq`, at least one unless `limit` is 0: busy-polled, or with a completion channel armed and
 * waited on (perftest's -e). The channel wait is bounded by the link's timeout. */
static int wait_cq(struct fb_link *l, struct ibv_cq *cq, int limit, int op)
{
    int64_t acks = l->acks; /* a flow-control message is something to wake for, too */
    for (;;) {
        int n = reap(l, cq, limit, op);
        if (n != 0 || limit == 0 || l->acks != acks)
            return n;
        if (!l->channel) {
            relax(l);
            continue;
        }
        if (ibv_req_notify_cq(cq, 0))
            return fail(l, "ibv_req_notify_cq", 0);
        n = reap(l, cq, limit, op); /* what arrived before the arming */
        if (n != 0 || l->acks != acks)
            return n;
        struct pollfd ready = {.fd = l->channel->fd, .events = POLLIN};
        int got = poll(&ready, 1, l->timeout_ms);
        if (got == 0)
            return FB_FAIL(l, "no %s completion within %d s", op_name(op), l->timeout_ms / 1000);
        if (got < 0 && errno != EINTR)
            return fail(l, "poll on the completion channel", 0);
        if (got > 0) {
            struct ibv_cq *event_cq;
            void *context;
            if (ibv_get_cq_event(l->channel, &event_cq, &context))
                return fail(l, "ibv_get_cq_event", 0);
            ibv_ack_cq_events(event_cq, 1);
        }
    }
}

void fb_close(struct fb_link *l)
{
    if (!l)
        return;
    if (l->qp)
        ibv_destroy_qp(l->qp);
    if (l->ah)
        ibv_destroy_ah(l->ah);
    if (l->send_cq)
        ibv_destroy_cq(l->send_cq);
    if (l->recv_cq)
        ibv_destroy_cq(l->recv_cq);
    if (l->channel)
        ibv_destroy_comp_channel(l->channel);
    if (l->mr)
        ibv_dereg_mr(l->mr);
    if (l->pd)
        ibv_dealloc_pd(l->pd);
    if (l->context)
        ibv_close_device(l->context);
    free(l);
}

static struct ibv_context *open_device(const char *name)
{
    int count = 0;
    struct ibv_device **list = ibv_get_device_list(&count);
    struct ibv_context *context = NULL;
    if (!list)
        return NULL;
    for (int i = 0; i < count; i++) {
        if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
            context = ibv_open_device(list[i]);
            break;
        }
    }
    ibv_free_device_list(list);
    return context;
}

/* An RC, UC or UD queue pair asking for `inline_bytes` of inline data, halving the request until the device
 * accepts it (as the pyverbs Link does). */
static struct ibv_qp *create_qp(struct fb_link *l, int send_depth, int recv_depth, uint32_t inline_bytes)
{
    static const enum ibv_qp_type types[] = {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
    for (;;) {
        struct ibv_qp_init_attr init = {
            .send_cq = l->send_cq,
            .recv_cq = l->recv_cq,
            .cap = {.max_send_wr = (uint32_t)send_depth, .max_recv_wr = (uint32_t)recv_depth,
                    .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = inline_bytes},
            .qp_type = types[l->qp_type],
            .sq_sig_all = 0,
        };
        struct ibv_qp *qp = ibv_create_qp(l->pd, &init);
        if (qp) {
            /* The granted inline size: what the device reports back, never more than was asked for. */
            l->max_inline = init.cap.max_inline_data < inline_bytes ? init.cap.max_inline_data : inline_bytes;
            return qp;
        }
        if (inline_bytes == 0)
            return NULL;
        inline_bytes /= 2;
    }
}

/* Everything for one end of the link, over the caller's `length` bytes at `buf` (two halves of `region` bytes
 * and a flag page); NULL with the reason in `error` when a step fails. */
struct fb_link *fb_open(const char *device, int port, int qp_type, void *buf, uint64_t length, uint64_t region,
                        int send_depth, int recv_depth, int inline_bytes, int events, int yield, int timeout_ms,
                        struct fb_endpoint *out, char *error, int error_size)
{
    struct fb_link *l = calloc(1, sizeof *l);
    struct ibv_device_attr attr;
    const char *step = "";
    if (!l) {
        fb_fail(error, (size_t)error_size, "out of memory");
        return NULL;
    }
    l->buf = buf;
    l->region = region;
    l->qp_type = qp_type;
    l->port = port;
    l->yield = yield;
    l->timeout_ms = timeout_ms;
    l->send_depth = send_depth;
    if (!(l->context = open_device(device))) {
        step = "ibv_open_device";
        goto failed;
    }
    if (ibv_query_device(l->context, &attr)) {
        step = "ibv_query_device";
        goto failed;
    }
    if (!(l->pd = ibv_alloc_pd(l->context))) {
        step = "ibv_alloc_pd";
        goto failed;
    }
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (attr.atomic_cap != IBV_ATOMIC_NONE)
        access |= IBV_ACCESS_REMOTE_ATOMIC;
    if (!(l->mr = ibv_reg_mr(l->pd, buf, length, access))) {
        step = "ibv_reg_mr";
        goto failed;
    }
    if (events && !(l->channel = ibv_create_comp_channel(l->context))) {
        step = "ibv_create_comp_channel";
        goto failed;
    }
    int max_cqe = attr.max_cqe;
    l->send_cq = ibv_create_cq(l->context, send_depth + 1 < max_cqe ? send_depth + 1 : max_cqe, NULL, l->channel, 0);
    l->recv_cq = ibv_create_cq(l->context, recv_depth + 1 < max_cqe ? recv_depth + 1 : max_cqe, NULL, l->channel, 0);
    if (!l->send_cq || !l->recv_cq) {
        step = "ibv_create_cq";
        goto failed;
    }
    if (!(l->qp = create_qp(l, send_depth, recv_depth, (uint32_t)inline_bytes))) {
        step = "ibv_create_qp";
        goto failed;
    }
    struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)port};
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (qp_type == QP_UD) {
        init.qkey = QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        init.qp_access_flags = access;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (ibv_modify_qp(l->qp, &init, mask)) {
        step = "ibv_modify_qp to INIT";
        goto failed;
    }
    l->rd_atomic = MAX_READS;
    if ((uint32_t)attr.max_qp_rd_atom < l->rd_atomic)
        l->rd_atomic = (uint32_t)attr.max_qp_rd_atom;
    if ((uint32_t)attr.max_qp_init_rd_atom < l->rd_atomic)
        l->rd_atomic = (uint32_t)attr.max_qp_init_rd_atom;
    if (l->rd_atomic < 1)
        l->rd_atomic = 1;
    l->recv_sge = (struct ibv_sge){.addr = (uintptr_t)buf + region, .length = (uint32_t)region, .lkey = l->mr->lkey};
    for (int i = 0; i < BATCH; i++) {
        l->recv_wrs[i] = (struct ibv_recv_wr){.sg_list = &l->recv_sge, .num_sge = 1,
                                              .next = i + 1 < BATCH ? &l->recv_wrs[i + 1] : NULL};
    }
    *out = (struct fb_endpoint){.qpn = l->qp->qp_num, .rkey = l->mr->rkey, .addr = (uintptr_t)buf,
                                .max_inline = l->max_inline, .rd_atomic = l->rd_atomic,
                                .atomics = attr.atomic_cap != IBV_ATOMIC_NONE};
    return l;
failed:
    fb_fail(error, (size_t)error_size, "%s failed on %s: %s", step, device, strerror(errno ? errno : EINVAL));
    fb_close(l);
    return NULL;
}

/* INIT to RTR to RTS against the peer's record (RC and UC), or an address handle to it (UD). */
int fb_connect(struct fb_link *l, uint32_t remote_qpn, uint32_t remote_psn, uint32_t psn, int remote_lid,
               const uint8_t *remote_gid, int use_grh, int gid_index, int path_mtu, int rd_atomic,
               uint32_t remote_rkey, uint64_t remote_addr, uint64_t remote_region)
{
    struct ibv_ah_attr ah = {.dlid = (uint16_t)remote_lid, .port_num = (uint8_t)l->port, .is_global = use_grh};
    if (use_grh) {
        memcpy(ah.grh.dgid.raw, remote_gid, 16);
        ah.grh.sgid_index = (uint8_t)gid_index;
        ah.grh.hop_limit = HOP_LIMIT;
    }
    l->remote_qpn = remote_qpn;
    l->remote_rkey = remote_rkey;
    l->remote_addr = remote_addr;
    l->remote_region = remote_region;
    struct ibv_qp_attr rtr = {.qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)path_mtu};
    int mask = IBV_QP_STATE;
    if (l->qp_type != QP_UD) {
        rtr.dest_qp_num = remote_qpn;
        rtr.rq_psn = remote_psn;
        rtr.ah_attr = ah;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (l->qp_type == QP_RC) {
            rtr.max_dest_rd_atomic = (uint8_t)rd_atomic;
            rtr.min_rnr_timer = MIN_RNR_TIMER;
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
    }
    if (ibv_modify_qp(l->qp, &rtr, mask))
        return fail(l, "ibv_modify_qp to RTR", 0);
    struct ibv_qp_attr rts = {.qp_state = IBV_QPS_RTS, .sq_psn = psn};
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (l->qp_type == QP_RC) {
        rts.timeout = QP_TIMEOUT;
        rts.retry_cnt = RETRY_COUNT;
        rts.rnr_retry = RNR_RETRY;
        rts.max_rd_atomic = (uint8_t)rd_atomic;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    if (ibv_modify_qp(l->qp, &rts, mask))
        return fail(l, "ibv_modify_qp to RTS", 0);
    if (l->qp_type == QP_UD && !(l->ah = ibv_create_ah(l->pd, &ah)))
        return fail(l, "ibv_create_ah", 0);
    return 0;
}

/* `count` receives for the whole receive half. */
int fb_post_receives(struct fb_link *l, int count)
{
    struct ibv_recv_wr *bad;
    while (count > 0) {
        int now = count < BATCH ? count : BATCH;
        int code = ibv_post_recv(l->qp, &l->recv_wrs[BATCH - now], &bad);
        if (code)
            return fail(l, "ibv_post_recv", code);
        count -= now;
    }
    return 0;
}

/* A work request of `op` for `size` bytes: WRITE and SEND from the send half into the peer's receive half (a
 * SEND lands wherever the peer's receive points), READ from the peer's send half into our receive half, an
 * atomic on the peer's flag page with the fetched value into our receive half. */
static void build_wr(struct fb_link *l, int op, uint64_t size, struct ibv_sge *sge, struct ibv_send_wr *wr,
                     int signalled)
{
    static const enum ibv_wr_opcode opcodes[] = {IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ,
                                                 IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP};
    int lands_here = op == OP_READ || op == OP_FOP || op == OP_CAS;
    *sge = (struct ibv_sge){.addr = (uintptr_t)l->buf + (lands_here ? l->region : 0), .length = (uint32_t)size,
                            .lkey = l->mr->lkey};
    *wr = (struct ibv_send_wr){.sg_list = sge, .num_sge = 1, .opcode = opcodes[op]};
    wr->send_flags = signalled ? IBV_SEND_SIGNALED : 0;
    if ((op == OP_WRITE || op == OP_SEND) && size <= l->max_inline)
        wr->send_flags |= IBV_SEND_INLINE;
    if (op == OP_WRITE) {
        wr->wr.rdma.remote_addr = l->remote_addr + l->remote_region;
        wr->wr.rdma.rkey = l->remote_rkey;
    } else if (op == OP_READ) {
        wr->wr.rdma.remote_addr = l->remote_addr;
        wr->wr.rdma.rkey = l->remote_rkey;
    } else if (op == OP_FOP || op == OP_CAS) {
        wr->wr.atomic.remote_addr = l->remote_addr + 2 * l->remote_region + ATOMIC_OFFSET;
        wr->wr.atomic.rkey = l->remote_rkey;
        wr->wr.atomic.compare_add = 1; /* fetch-and-add adds 1; compare-and-swap's operands are set per post */
    } else if (l->qp_type == QP_UD) {
        wr->wr.ud.ah = l->ah;
        wr->wr.ud.remote_qpn = l->remote_qpn;
        wr->wr.ud.remote_qkey = QKEY;
    }
}

static inline int post(struct fb_link *l, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    int code = ibv_post_send(l->qp, wr, &bad);
    return code ? fail(l, "ibv_post_send", code) : 0;
}

/* Keep the send queue from overflowing: reap until fewer than its depth of sends are outstanding. */
static int make_room(struct fb_link *l, int64_t *outstanding, int op)
{
    while (*outstanding >= l->send_depth) {
        int n = wait_cq(l, l->send_cq, BATCH, op);
        if (n < 0)
            return -1;
        *outstanding -= n;
    }
    return 0;
}

/* Wait for every outstanding send completion. */
static int drain(struct fb_link *l, int64_t *outstanding, int op)
{
    while (*outstanding > 0) {
        int n = wait_cq(l, l->send_cq, (int)*outstanding, op);
        if (n < 0)
            return -1;
        *outstanding -= n;
    }
    return 0;
}

/* Spin until the peer's WRITE puts `value` in `byte`, reaping our own WRITEs' completions meanwhile: off the round
 * trip's path, and a failed WRITE (whose answer then never comes) shows here instead of as a hang. */
static int spin_for(struct fb_link *l, volatile uint8_t *byte, uint8_t value, int64_t *outstanding)
{
    while (*byte != value) {
        if (*outstanding) {
            int n = reap(l, l->send_cq, 1, OP_WRITE);
            if (n < 0)
                return -1;
            *outstanding -= n;
        }
        relax(l);
    }
    return 0;
}

/* ib_write_lat: each side's `*marker` is the last byte of its previous message; message k ends in k % 250 + 1. */
int fb_write_latency(struct fb_link *l, uint64_t size, int64_t iterations, int initiator, uint8_t *marker,
                     int64_t *times)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    build_wr(l, OP_WRITE, size, &sge, &wr, 1);
    volatile uint8_t *mine = (volatile uint8_t *)(l->buf + size - 1);
    volatile uint8_t *theirs = (volatile uint8_t *)(l->buf + l->region + size - 1);
    uint8_t value = *marker;
    int64_t outstanding = 0, before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        value = (uint8_t)(value % 250 + 1);
        if (!initiator && spin_for(l, theirs, value, &outstanding))
            return -1;
        if (make_room(l, &outstanding, OP_WRITE))
            return -1;
        *mine = value;
        if (post(l, &wr))
            return -1;
        outstanding++;
        if (initiator) {
            if (spin_for(l, theirs, value, &outstanding))
                return -1;
            fb_stamp(times, i, &before);
        }
    }
    *marker = value;
    return drain(l, &outstanding, OP_WRITE);
}

/* ib_send_lat: the initiator sends and waits for the answer; the other side waits, then answers. */
int fb_send_latency(struct fb_link *l, uint64_t size, int64_t iterations, int initiator, int64_t *times)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    build_wr(l, OP_SEND, size, &sge, &wr, 1);
    int64_t outstanding = 0, before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (initiator && (make_room(l, &outstanding, OP_SEND) || post(l, &wr)))
            return -1;
        outstanding += initiator;
        if (wait_cq(l, l->recv_cq, 1, OP_RECV) < 0)
            return -1;
        if (!initiator && (make_room(l, &outstanding, OP_SEND) || post(l, &wr)))
            return -1;
        outstanding += !initiator;
        int n = reap(l, l->send_cq, BATCH, OP_SEND);
        if (n < 0)
            return -1;
        outstanding -= n;
        if (initiator)
            fb_stamp(times, i, &before);
    }
    return drain(l, &outstanding, OP_SEND);
}

/* ib_read_lat and ib_atomic_lat: one READ or atomic and its completion. `*counter` is the value the peer's
 * atomic target holds before the next operation (compare-and-swap compares against it and swaps in the next). */
int fb_op_latency(struct fb_link *l, int op, uint64_t size, int64_t iterations, uint64_t *counter, int64_t *times)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    build_wr(l, op, size, &sge, &wr, 1);
    uint64_t value = *counter;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (op == OP_CAS) {
            wr.wr.atomic.compare_add = value;
            wr.wr.atomic.swap = value + 1;
        }
        if (post(l, &wr))
            return -1;
        if (wait_cq(l, l->send_cq, 1, op) < 0)
            return -1;
        value++;
        fb_stamp(times, i, &before);
    }
    if (op == OP_FOP || op == OP_CAS)
        *counter = value;
    return 0;
}

/* Reap what has come: up to the window's `chains` send completions (`*done` so far) and up to `expected`
 * messages from the peer (`*received` so far); when nothing has come, wait: busy, or on the completion channel. */
static int progress(struct fb_link *l, int op, int64_t chains, int64_t *done, int64_t expected, int64_t *received)
{
    int n;
    int64_t acks = l->acks;
    if ((n = reap(l, l->send_cq, chains > *done ? (int)(chains - *done) : BATCH, op)) < 0)
        return -1;
    *done += n;
    int busy = n;
    if (*received < expected || l->acking) {
        if ((n = reap(l, l->recv_cq, BATCH, OP_RECV)) < 0)
            return -1;
        *received += n;
        busy |= n;
    }
    if (busy || l->acks != acks)
        return 0;
    if (!l->channel) {
        relax(l);
        return 0;
    }
    /* With a channel, wait on what this side still lacks: its window's completions, else the peer's messages. */
    if (*done < chains) {
        if ((n = wait_cq(l, l->send_cq, (int)(chains - *done), op)) < 0)
            return -1;
        *done += n;
    } else {
        if ((n = wait_cq(l, l->recv_cq, BATCH, OP_RECV)) < 0)
            return -1;
        *received += n;
    }
    return 0;
}

/* Streams: on a sending side, `window` WRs of `op` per sample, posted in calls of `post_list`, every
 * `cq_mod`-th signalled, and drained before the sample ends; `receiving`: take `window` messages per iteration
 * from the peer meanwhile (a receive-only side waits for each iteration's). `*counter` as in fb_op_latency.
 *
 * UD and UC SENDs have no flow control: a receiver that falls behind drops what finds no receive posted (there
 * is no RNR retry), and would then wait for ever. So there, as osu_bw's window and ack, the receiver answers each
 * whole window with an empty SEND, and the sender's sample ends with it: no window is sent before the last one
 * was received. */
int fb_stream(struct fb_link *l, int op, uint64_t size, int window, int cq_mod, int post_list, int sending,
              int receiving, int64_t iterations, uint64_t *counter, int64_t *times)
{
    struct ibv_sge *sges = calloc((size_t)window, sizeof *sges);
    struct ibv_send_wr *wrs = calloc((size_t)window, sizeof *wrs);
    int rc = -1, acked = l->qp_type == QP_UD || (l->qp_type == QP_UC && op == OP_SEND);
    if (!sges || !wrs) {
        FB_FAIL(l, "out of memory for %d work requests", window);
        goto out;
    }
    for (int k = 0; k < window; k++) {
        build_wr(l, op, size, &sges[k], &wrs[k], (k + 1) % cq_mod == 0);
        wrs[k].next = (k + 1) % post_list ? &wrs[k + 1] : NULL;
    }
    struct ibv_send_wr ack = {.wr_id = ACK_ID, .num_sge = 0, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    if (l->qp_type == QP_UD) {
        ack.wr.ud.ah = l->ah;
        ack.wr.ud.remote_qpn = l->remote_qpn;
        ack.wr.ud.remote_qkey = QKEY;
    }
    int64_t chains = sending ? window / cq_mod : 0; /* signalled completions per window */
    int64_t expected = receiving ? iterations * window : 0, received = 0, answered = 0;
    uint64_t value = *counter;
    l->acks = 0;
    l->acking = acked;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i <= iterations; i++) { /* the last round only takes the peer's remaining windows */
        int64_t done = 0, due = i == iterations ? expected : (sending ? 0 : (i + 1) * window);
        int64_t want = i < iterations ? chains : 0;
        if (want) {
            if (op == OP_CAS) {
                for (int k = 0; k < window; k++) {
                    wrs[k].wr.atomic.compare_add = value + (uint64_t)k;
                    wrs[k].wr.atomic.swap = value + (uint64_t)k + 1;
                }
            }
            for (int k = 0; k < window; k += post_list) {
                if (post(l, &wrs[k]))
                    goto out;
            }
            value += (uint64_t)window;
        }
        while (done < want || received < due || (acked && want && l->acks <= i)) {
            if (progress(l, op, want, &done, expected, &received))
                goto out;
            for (; acked && answered < received / window; answered++) { /* the peer's whole windows */
                if (post(l, &ack))
                    goto out;
            }
        }
        if (want)
            fb_stamp(times, i, &before);
    }
    if (op == OP_FOP || op == OP_CAS)
        *counter = value;
    rc = 0;
out:
    l->acking = 0;
    free(sges);
    free(wrs);
    return rc;
}

/* Tell a waiting peer this run's transfers are complete: one 1-byte WRITE of `marker` into its flag page. */
int fb_signal_done(struct fb_link *l, uint8_t marker)
{
    uint8_t *flag = (uint8_t *)l->buf + 2 * l->region + 1;
    *flag = marker;
    struct ibv_sge sge = {.addr = (uintptr_t)flag, .length = 1, .lkey = l->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED | (l->max_inline ? IBV_SEND_INLINE : 0)};
    wr.wr.rdma.remote_addr = l->remote_addr + 2 * l->remote_region;
    wr.wr.rdma.rkey = l->remote_rkey;
    if (post(l, &wr))
        return -1;
    return wait_cq(l, l->send_cq, 1, OP_WRITE) < 0 ? -1 : 0;
}

/* One post and one poll that finds the completion, on a loopback-connected QP: what a round of the loop costs
 * outside the network (benchmarks/verbs_reference.py). times[i]: ns of the post, then of the poll. */
int fb_loop_cost(struct fb_link *l, int64_t rounds, int64_t *post_ns, int64_t *poll_ns, int64_t *empty_ns)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    build_wr(l, OP_WRITE, 8, &sge, &wr, 1);
    for (int64_t i = 0; i < rounds; i++) {
        int64_t start = fb_now_ns();
        if (post(l, &wr))
            return -1;
        fb_stamp(post_ns, i, &start);
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL); /* the completion arrives; then time the poll that finds it */
        start = fb_now_ns();
        int n = reap(l, l->send_cq, 1, OP_WRITE);
        fb_stamp(poll_ns, i, &start);
        if (n != 1)
            return FB_FAIL(l, "the loopback WRITE did not complete within 0.2 ms");
        start = fb_now_ns();
        if (reap(l, l->send_cq, 1, OP_WRITE) < 0)
            return -1;
        fb_stamp(empty_ns, i, &start);
    }
    return 0;
}

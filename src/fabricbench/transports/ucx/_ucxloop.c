/* The ucx transport's worker, endpoint and timed loops: UCP calls in C.
 *
 * UCX's Python bindings (ucx-py) are asyncio-driven and add a coroutine per
 * message, far more than a 1 µs shared-memory round trip, so everything UCP is
 * done here: the context (which reads UCX_TLS, UCX_NET_DEVICES and every other
 * UCX_* variable, as any UCX program does), the worker and its address, the
 * endpoint to the peer's address, the registered buffer and its packed remote
 * key, and the loops. ucx/cloop.py compiles this file against the host's
 * libucp on first use and calls it through ctypes, which releases the GIL for
 * each call, so the runner's watchdog keeps running while a loop spins.
 *
 * The loops follow ucx_perftest's UCP tests:
 * - ping-pong (tag_lat, stream_lat, ucp_am_lat): the initiator sends and
 *   waits for the reply, the other side replies to each message; one sample
 *   is one round trip. Tagged: ucp_tag_send_nbx/ucp_tag_recv_nbx; stream:
 *   ucp_stream_send_nbx/ucp_stream_recv_nbx (WAITALL, a message's whole
 *   length); active messages: ucp_am_send_nbx to a handler that copies an
 *   eager message into the receive half or fetches a rendezvous one there
 *   with ucp_am_recv_data_nbx;
 * - bandwidth (osu_bw): a window of sends, then a 4-byte tagged
 *   acknowledgement from the receiver once it has the whole window; bibw:
 *   both sides stream a window at once, no acknowledgement;
 * - RMA: ucp_put_nbx into, or ucp_get_nbx from, the peer's registered region
 *   through its unpacked rkey; a put sample ends with ucp_ep_flush_nbx (the
 *   data is in the peer's memory, as ucx_perftest's put tests flush), a get
 *   sample when its requests complete (the data is here). One operation per
 *   sample, or a window (-bw). The target only drives progress until the
 *   origin's tagged DONE message.
 * The acknowledgement and DONE messages are tagged whatever the API measured
 * (a stream's bytes would mix with the data's). Progress is busy
 * ucp_worker_progress (--ucx-progress spin); or, where a call finds nothing to
 * do, sched_yield (yield: a rank that shares its CPU with its peer hands it
 * over instead of spinning out its time slice, as the verbs loop's --spin
 * yield), or ucp_worker_arm and a poll of the worker's event descriptor, the
 * wait ucp_worker_wait does, in slices so the deadline holds (wait). Every
 * wait has the link's deadline. Stamps are fb_runtime.h's, one per iteration into times[i].
 * Every function returns 0, or -1 with one line in the link's error text.
 */
#define _GNU_SOURCE

/* First, so that a host without UCX's headers fails on this line and the builder names the package. */
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_ucxcodes.h"
#include "fb_runtime.h"

#define ACK_BYTES 4          /* osu_bw's acknowledgement */
#define TAG_DATA 0x1
#define TAG_ACK 0x2
#define TAG_DONE 0x3
#define AM_DATA 1            /* the active-message handler's id */
#define SPINS_PER_CLOCK 4096 /* empty progress calls between two looks at the deadline */
#define WAIT_SLICE_MS 100    /* one poll's longest wait; the caller's deadline bounds the whole */
#define MAX_WINDOW 4096

struct fb_ucx {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h ep;
    ucp_listener_h listener;        /* client-server set-up (--ucx-sockaddr): the listening side's */
    ucp_conn_request_h conn_request; /* the first connection request the listener got */
    ucp_mem_h memh;
    ucp_rkey_h rkey;
    ucp_address_t *address;
    size_t address_len;
    void *packed_rkey;
    size_t packed_rkey_len;
    uint64_t remote_base;
    char *buf;
    uint64_t bytes, region;
    int api, wait, yield, timeout_ms, efd;
    ucs_status_t peer_status;   /* UCS_OK until a receive of an active message's data fails */
    uint64_t am_arrived;        /* active messages whose data is in the receive half */
    uint64_t am_expected;       /* active messages this side has waited for, all calls together: a count to
                                 * reach, not a number per call, since the peer's next messages may come early */
    void *requests[MAX_WINDOW + 2];
    char error[256];
};

static int fail(struct fb_ucx *l, const char *what, ucs_status_t status)
{
    return FB_FAIL(l, "%s: %s", what, ucs_status_string(status));
}

const char *fb_error(struct fb_ucx *l) { return l->error; }

const char *fb_version(void) { return ucp_get_version_string(); }

static void on_am_data(void *request, ucs_status_t status, size_t length, void *user_data)
{
    (void)length;
    if (status == UCS_OK)
        ((struct fb_ucx *)user_data)->am_arrived++;
    else
        ((struct fb_ucx *)user_data)->peer_status = status;
    ucp_request_free(request);
}

/* An active message for the receive half: an eager one's data is copied there now; a rendezvous one is fetched
 * there with ucp_am_recv_data_nbx, and counted when that completes. */
static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data, size_t length,
                          const ucp_am_recv_param_t *param)
{
    struct fb_ucx *l = arg;
    (void)header;
    (void)header_length;
    char *into = l->buf + l->region;
    if (length > l->region)
        length = l->region;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        memcpy(into, data, length);
        l->am_arrived++;
        return UCS_OK;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = on_am_data, .user_data = l};
    ucs_status_ptr_t request = ucp_am_recv_data_nbx(l->worker, data, into, length, &p);
    if (UCS_PTR_IS_ERR(request))
        l->peer_status = UCS_PTR_STATUS(request);
    else if (request == NULL)
        l->am_arrived++;
    return UCS_OK;
}

void fb_close(struct fb_ucx *l)
{
    if (!l)
        return;
    if (l->rkey)
        ucp_rkey_destroy(l->rkey);
    if (l->ep) {
        /* Closed with force: the peer may already be gone, and a flush would wait for it. */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t request = ucp_ep_close_nbx(l->ep, &p);
        int64_t deadline = fb_now_ns() + 1000000000LL;
        if (UCS_PTR_IS_PTR(request)) {
            while (ucp_request_check_status(request) == UCS_INPROGRESS && fb_now_ns() < deadline)
                ucp_worker_progress(l->worker);
            ucp_request_free(request);
        }
    }
    if (l->listener)
        ucp_listener_destroy(l->listener);
    if (l->packed_rkey)
        ucp_rkey_buffer_release(l->packed_rkey);
    if (l->memh)
        ucp_mem_unmap(l->context, l->memh);
    if (l->address)
        ucp_worker_release_address(l->worker, l->address);
    if (l->worker)
        ucp_worker_destroy(l->worker);
    if (l->context)
        ucp_cleanup(l->context);
    free(l);
}

/* The context (UCX_* variables read here), worker, its address, and `buf` (`bytes` long: the send half, the
 * receive half at `region`, then the control messages) registered for remote reads and writes with its rkey
 * packed. NULL with one line in `error` where UCX refuses (a UCX_TLS that matches no transport here). */
struct fb_ucx *fb_open(int api, int wait, void *buf, uint64_t bytes, uint64_t region, int timeout_ms, char *error,
                       int error_len)
{
    struct fb_ucx *l = calloc(1, sizeof *l);
    ucp_config_t *config = NULL;
    ucs_status_t status;
    if (!l) {
        snprintf(error, (size_t)error_len, "out of memory");
        return NULL;
    }
    l->api = api, l->wait = wait, l->buf = buf, l->bytes = bytes, l->region = region, l->timeout_ms = timeout_ms;
    l->efd = -1;
    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        fail(l, "ucp_config_read", status);
        goto failed;
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_AM | UCP_FEATURE_RMA
                                       | (wait ? UCP_FEATURE_WAKEUP : 0),
                           .mt_workers_shared = 0};
    status = ucp_init(&params, config, &l->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        fail(l, "ucp_init", status);
        goto failed;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((status = ucp_worker_create(l->context, &wp, &l->worker)) != UCS_OK) {
        fail(l, "ucp_worker_create", status);
        goto failed;
    }
    if ((status = ucp_worker_get_address(l->worker, &l->address, &l->address_len)) != UCS_OK) {
        fail(l, "ucp_worker_get_address", status);
        goto failed;
    }
    if (wait && (status = ucp_worker_get_efd(l->worker, &l->efd)) != UCS_OK) {
        fail(l, "ucp_worker_get_efd", status);
        goto failed;
    }
    ucp_am_handler_param_t am = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB
                                               | UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
                                 .id = AM_DATA, .cb = on_am, .arg = l, .flags = UCP_AM_FLAG_WHOLE_MSG};
    if ((status = ucp_worker_set_am_recv_handler(l->worker, &am)) != UCS_OK) {
        fail(l, "ucp_worker_set_am_recv_handler", status);
        goto failed;
    }
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                                             | UCP_MEM_MAP_PARAM_FIELD_PROT,
                               .address = buf, .length = bytes,
                               .prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE
                                       | UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE};
    if ((status = ucp_mem_map(l->context, &mp, &l->memh)) != UCS_OK) {
        fail(l, "ucp_mem_map", status);
        goto failed;
    }
    if ((status = ucp_rkey_pack(l->context, l->memh, &l->packed_rkey, &l->packed_rkey_len)) != UCS_OK) {
        fail(l, "ucp_rkey_pack", status);
        goto failed;
    }
    return l;
failed:
    snprintf(error, (size_t)error_len, "%s", l->error);
    fb_close(l);
    return NULL;
}

/* Whether an idle progress call yields the CPU (--ucx-progress yield); set before the first exchange. */
void fb_set_yield(struct fb_ucx *l, int yield) { l->yield = yield; }

/* This worker's address into `out` (at most `capacity` bytes): its length, or -1 where it does not fit. */
int fb_address(struct fb_ucx *l, uint8_t *out, int capacity)
{
    if (l->address_len > (size_t)capacity)
        return FB_FAIL(l, "the worker address is %zu B, over the %d B the control plane carries", l->address_len,
                       capacity);
    memcpy(out, l->address, l->address_len);
    return (int)l->address_len;
}

/* This side's packed rkey into `out` and the registered buffer's address into `*base`: the rkey's length, or
 * -1 where it does not fit. */
int fb_rkey(struct fb_ucx *l, uint8_t *out, int capacity, uint64_t *base)
{
    if (l->packed_rkey_len > (size_t)capacity)
        return FB_FAIL(l, "the packed rkey is %zu B, over the %d B the control plane carries", l->packed_rkey_len,
                       capacity);
    memcpy(out, l->packed_rkey, l->packed_rkey_len);
    *base = (uint64_t)(uintptr_t)l->buf;
    return (int)l->packed_rkey_len;
}

/* An endpoint to the peer's worker `address` (`length` bytes, checked by the caller). No peer error handling
 * (UCP_ERR_HANDLING_MODE_NONE, as MPI and ucx_perftest open theirs): in UCX 1.13 only tcp and the verbs
 * transports handle a peer's failure, and asking for it leaves shared memory out of the lanes. A peer that dies
 * ends a wait at the link's deadline instead. */
int fb_connect(struct fb_ucx *l, const uint8_t *address, int length)
{
    (void)length;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = (const ucp_address_t *)address};
    ucs_status_t status = ucp_ep_create(l->worker, &ep, &l->ep);
    if (status != UCS_OK) {
        l->ep = NULL;
        return fail(l, "ucp_ep_create", status);
    }
    return 0;
}

/* Client-server set-up (--ucx-sockaddr), as UCX's own client-server example: one side listens on an IPv4
 * address, the other creates its endpoint to that address and port, and UCX's connection manager (rdma_cm on an
 * RDMA device, tcp sockets elsewhere) carries the wire-up, so rc_verbs needs no ud_verbs beside it. Error handling
 * is UCP_ERR_HANDLING_MODE_PEER, which client-server endpoints ask for. */
static int expired(struct fb_ucx *l, int64_t *deadline);
static void progress(struct fb_ucx *l);

static int ipv4(struct fb_ucx *l, const char *ip, int port, struct sockaddr_in *out)
{
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, ip, &out->sin_addr) != 1)
        return FB_FAIL(l, "not an IPv4 address: %.64s", ip);
    return 0;
}

static void on_conn_request(ucp_conn_request_h request, void *arg)
{
    struct fb_ucx *l = arg;
    if (l->conn_request)
        ucp_listener_reject(l->listener, request); /* one peer per link */
    else
        l->conn_request = request;
}

/* A listener on `ip`, on a port the system picks: the port, or -1. */
int fb_listen(struct fb_ucx *l, const char *ip)
{
    struct sockaddr_in at;
    if (ipv4(l, ip, 0, &at))
        return -1;
    ucp_listener_params_t params = {
        .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        .sockaddr = {.addr = (const struct sockaddr *)&at, .addrlen = sizeof at},
        .conn_handler = {.cb = on_conn_request, .arg = l}};
    ucs_status_t status = ucp_listener_create(l->worker, &params, &l->listener);
    if (status != UCS_OK) {
        l->listener = NULL;
        return fail(l, "ucp_listener_create", status);
    }
    ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
    if ((status = ucp_listener_query(l->listener, &attr)) != UCS_OK)
        return fail(l, "ucp_listener_query", status);
    return ntohs(((const struct sockaddr_in *)&attr.sockaddr)->sin_port);
}

/* The listening side's endpoint, from the first connection request (progress until it comes, or the deadline). */
int fb_accept(struct fb_ucx *l)
{
    int64_t deadline = 0;
    while (!l->conn_request) {
        progress(l);
        if (expired(l, &deadline))
            return FB_FAIL(l, "no connection request within %d s", l->timeout_ms / 1000);
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .conn_request = l->conn_request, .err_mode = UCP_ERR_HANDLING_MODE_PEER};
    ucs_status_t status = ucp_ep_create(l->worker, &ep, &l->ep);
    if (status != UCS_OK) {
        l->ep = NULL;
        return fail(l, "ucp_ep_create from a connection request", status);
    }
    return 0;
}

/* The other side's endpoint to the listener at `ip`:`port`. */
int fb_connect_sockaddr(struct fb_ucx *l, const char *ip, int port)
{
    struct sockaddr_in at;
    if (ipv4(l, ip, port, &at))
        return -1;
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR
                                        | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                          .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
                          .sockaddr = {.addr = (const struct sockaddr *)&at, .addrlen = sizeof at},
                          .err_mode = UCP_ERR_HANDLING_MODE_PEER};
    ucs_status_t status = ucp_ep_create(l->worker, &ep, &l->ep);
    if (status != UCS_OK) {
        l->ep = NULL;
        return fail(l, "ucp_ep_create to a socket address", status);
    }
    return 0;
}

/* The peer's packed rkey (`length` bytes) unpacked on the endpoint, and the base address of its buffer. */
int fb_set_remote(struct fb_ucx *l, const uint8_t *packed, int length, uint64_t base)
{
    (void)length;
    ucs_status_t status = ucp_ep_rkey_unpack(l->ep, packed, &l->rkey);
    if (status != UCS_OK) {
        l->rkey = NULL;
        return fail(l, "ucp_ep_rkey_unpack", status);
    }
    l->remote_base = base;
    return 0;
}

/* What ucp_ep_print_info says of the endpoint (its lanes: transport/device each), into `out`: bytes written. */
int fb_describe(struct fb_ucx *l, char *out, int capacity)
{
    char *text = NULL;
    size_t size = 0;
    FILE *stream = open_memstream(&text, &size);
    if (!stream)
        return FB_FAIL(l, "open_memstream failed");
    ucp_ep_print_info(l->ep, stream);
    fclose(stream);
    int used = (int)(size < (size_t)capacity ? size : (size_t)capacity - 1);
    memcpy(out, text, (size_t)used);
    out[used] = '\0';
    free(text);
    return used;
}

/* Whether the deadline (set on the first look) has passed. */
static int expired(struct fb_ucx *l, int64_t *deadline)
{
    int64_t now = fb_now_ns();
    if (!*deadline) {
        *deadline = now + (int64_t)l->timeout_ms * 1000000LL;
        return 0;
    }
    return now > *deadline;
}

/* One round of progress: busy; or where it found nothing, yield the CPU (yield) or arm the worker and wait on its
 * descriptor (wait). */
static void progress(struct fb_ucx *l)
{
    if (ucp_worker_progress(l->worker))
        return;
    if (l->yield)
        sched_yield();
    if (!l->wait)
        return;
    if (ucp_worker_arm(l->worker) == UCS_OK) {
        struct pollfd fd = {.fd = l->efd, .events = POLLIN};
        poll(&fd, 1, WAIT_SLICE_MS);
    }
}

/* Progress until `*done` says so; the peer's failure or the deadline ends it with a line naming `what`. */
#define WAIT_UNTIL(l, condition, what)                                                                  \
    do {                                                                                                \
        int64_t deadline_ = 0;                                                                          \
        unsigned idle_ = 0;                                                                             \
        while (!(condition)) {                                                                          \
            progress(l);                                                                                \
            if ((l)->peer_status != UCS_OK)                                                             \
                return fail(l, "an active message's data", (l)->peer_status);                         \
            if ((l->wait || ++idle_ % SPINS_PER_CLOCK == 0) && expired(l, &deadline_))                  \
                return FB_FAIL(l, "no %s completion within %d s", what, (l)->timeout_ms / 1000);         \
        }                                                                                               \
    } while (0)

/* A request done (NULL: completed at once), freed: 0, or -1 naming `what` with its status. */
static int finish(struct fb_ucx *l, ucs_status_ptr_t request, const char *what)
{
    if (request == NULL)
        return 0;
    if (UCS_PTR_IS_ERR(request))
        return fail(l, what, UCS_PTR_STATUS(request));
    WAIT_UNTIL(l, ucp_request_check_status(request) != UCS_INPROGRESS, what);
    ucs_status_t status = ucp_request_check_status(request);
    ucp_request_free(request);
    return status == UCS_OK ? 0 : fail(l, what, status);
}

/* Every request in l->requests[0..n) done, in order. */
static int finish_all(struct fb_ucx *l, int n, const char *what)
{
    int code = 0;
    for (int i = 0; i < n; i++) {
        if (code == 0)
            code = finish(l, l->requests[i], what);
        else if (UCS_PTR_IS_PTR(l->requests[i]))
            ucp_request_free(l->requests[i]); /* UCX completes it on its own; we only drop our reference */
        l->requests[i] = NULL;
    }
    return code;
}

static char *send_half(struct fb_ucx *l) { return l->buf; }
static char *recv_half(struct fb_ucx *l) { return l->buf + l->region; }
static char *control(struct fb_ucx *l) { return l->buf + 2 * l->region; }

static const ucp_request_param_t CONTIG = {.op_attr_mask = 0};

static ucs_status_ptr_t send_tagged(struct fb_ucx *l, const void *at, size_t size, ucp_tag_t tag)
{
    return ucp_tag_send_nbx(l->ep, at, size, tag, &CONTIG);
}

static ucs_status_ptr_t recv_tagged(struct fb_ucx *l, void *at, size_t size, ucp_tag_t tag)
{
    return ucp_tag_recv_nbx(l->worker, at, size, tag, (ucp_tag_t)-1, &CONTIG);
}

/* One data message of the measured API from the send half. */
static ucs_status_ptr_t send_data(struct fb_ucx *l, size_t size)
{
    if (l->api == API_STREAM)
        return ucp_stream_send_nbx(l->ep, send_half(l), size, &CONTIG);
    if (l->api == API_AM)
        return ucp_am_send_nbx(l->ep, AM_DATA, NULL, 0, send_half(l), size, &CONTIG);
    return send_tagged(l, send_half(l), size, TAG_DATA);
}

/* One data message of the measured API into the receive half: a request to finish. Active messages have none:
 * their handler counts them (am_arrived), so NULL. */
static ucs_status_ptr_t recv_data(struct fb_ucx *l, size_t size)
{
    if (l->api == API_STREAM) {
        size_t length = 0;
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_STREAM_RECV_FLAG_WAITALL};
        return ucp_stream_recv_nbx(l->ep, recv_half(l), size, &length, &p);
    }
    if (l->api == API_AM)
        return NULL;
    return recv_tagged(l, recv_half(l), size, TAG_DATA);
}

/* `count` data messages received: for active messages, the handler's count reaching `count` more than all
 * those waited for before. */
static int finish_recv(struct fb_ucx *l, int count)
{
    if (l->api == API_AM) {
        l->am_expected += (uint64_t)count;
        WAIT_UNTIL(l, l->am_arrived >= l->am_expected, "active message");
        return 0;
    }
    return finish_all(l, count, "receive");
}

/* Ping-pong: the initiator sends and waits for the reply, the other side replies to each message; one sample is
 * one round trip. Each side posts its receive before its send. */
int fb_pingpong(struct fb_ucx *l, uint64_t size, int64_t iterations, int initiator, int64_t *times)
{
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        l->requests[0] = recv_data(l, size);
        if (initiator) {
            if (finish(l, send_data(l, size), "send") || finish_recv(l, 1))
                return -1;
            fb_stamp(times, i, &before);
        } else {
            if (finish_recv(l, 1) || finish(l, send_data(l, size), "send"))
                return -1;
        }
    }
    return 0;
}

/* Streams: `window` messages per sample. bw: the sender waits for its window's completions and the receiver's
 * tagged acknowledgement (`ack`); bibw: both sides send and receive a window, no acknowledgement. */
int fb_stream(struct fb_ucx *l, uint64_t size, int window, int64_t iterations, int sending, int receiving, int ack,
              int64_t *times)
{
    if (window < 1 || window > MAX_WINDOW)
        return FB_FAIL(l, "a window of %d messages: 1 to %d", window, MAX_WINDOW);
    int acked = ack && sending && !receiving, acking = ack && receiving && !sending;
    void **receives = l->requests;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        ucs_status_ptr_t ack_request = NULL;
        void *posted[MAX_WINDOW];
        int n = 0;
        if (receiving)
            for (int w = 0; w < window; w++)
                posted[w] = recv_data(l, size);
        if (acked)
            ack_request = recv_tagged(l, control(l), ACK_BYTES, TAG_ACK);
        if (sending)
            for (int w = 0; w < window; w++) {
                ucs_status_ptr_t r = send_data(l, size);
                if (UCS_PTR_IS_ERR(r))
                    return fail(l, "send", UCS_PTR_STATUS(r));
                if (r)
                    l->requests[n++] = r;
            }
        if (finish_all(l, n, "send"))
            return -1;
        if (receiving) {
            if (l->api != API_AM)
                for (int w = 0; w < window; w++)
                    receives[w] = posted[w];
            if (finish_recv(l, window))
                return -1;
        }
        if (acking && finish(l, send_tagged(l, control(l) + ACK_BYTES, ACK_BYTES, TAG_ACK), "acknowledgement"))
            return -1;
        if (acked && finish(l, ack_request, "acknowledgement"))
            return -1;
        fb_stamp(times, i, &before);
    }
    return 0;
}

/* RMA latency (window 0: one operation per sample) or bandwidth (a window per sample) on the origin: puts from
 * the send half into the peer's receive half, then ucp_ep_flush_nbx; gets from the peer's send half into the
 * receive half, each request finished. The target only calls fb_wait_done. */
int fb_rma(struct fb_ucx *l, int op, uint64_t size, int window, int64_t iterations, int64_t *times)
{
    int per_sample = window > 0 ? window : 1;
    if (per_sample > MAX_WINDOW)
        return FB_FAIL(l, "a window of %d operations: 1 to %d", window, MAX_WINDOW);
    if (!l->rkey)
        return FB_FAIL(l, "no remote key for the peer's memory");
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        int n = 0;
        for (int w = 0; w < per_sample; w++) {
            ucs_status_ptr_t r = op == OP_GET
                                     ? ucp_get_nbx(l->ep, recv_half(l), size, l->remote_base, l->rkey, &CONTIG)
                                     : ucp_put_nbx(l->ep, send_half(l), size, l->remote_base + l->region, l->rkey,
                                                   &CONTIG);
            if (UCS_PTR_IS_ERR(r))
                return fail(l, op == OP_GET ? "ucp_get_nbx" : "ucp_put_nbx", UCS_PTR_STATUS(r));
            if (r)
                l->requests[n++] = r;
        }
        if (finish_all(l, n, op == OP_GET ? "get" : "put"))
            return -1;
        if (op == OP_PUT && finish(l, ucp_ep_flush_nbx(l->ep, &CONTIG), "ucp_ep_flush_nbx"))
            return -1;
        fb_stamp(times, i, &before);
    }
    return 0;
}

/* The origin's end of an RMA run: one tagged DONE message, once every operation has completed. */
int fb_signal_done(struct fb_ucx *l)
{
    return finish(l, send_tagged(l, control(l) + 2 * ACK_BYTES, 1, TAG_DONE), "DONE message");
}

/* The target's end: drive progress (a transport without hardware RMA, tcp among them, moves data only while the
 * target progresses) until the origin's DONE message arrives. */
int fb_wait_done(struct fb_ucx *l)
{
    return finish(l, recv_tagged(l, control(l) + 3 * ACK_BYTES, 1, TAG_DONE), "DONE message");
}

/* Both sides meet: a tagged 1-byte exchange, so the endpoint's lanes are wired up before anything is timed or
 * described. */
int fb_handshake(struct fb_ucx *l)
{
    ucs_status_ptr_t r = recv_tagged(l, control(l) + 5 * ACK_BYTES, 1, TAG_DONE);
    if (finish(l, send_tagged(l, control(l) + 4 * ACK_BYTES, 1, TAG_DONE), "handshake send"))
        return -1;
    return finish(l, r, "handshake receive");
}

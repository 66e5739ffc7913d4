/* The ofi transport's endpoint and timed loops: libfabric (OFI) calls in C.
 *
 * libfabric has no maintained Python binding, and an interpreter call per
 * post and poll would be a visible part of a 2 µs round trip, so everything
 * libfabric is done here: fi_getinfo with the run's hints, the fabric,
 * domain, completion queue, address vector or connection, memory
 * registration, and the loops. ofi_cloop.py compiles this file against the
 * host's libfabric on first use and calls it through ctypes, which releases
 * the GIL for each call, so the runner's watchdog keeps running while a loop
 * spins.
 *
 * The loops follow fabtests' (pingpong, bandwidth, rma):
 * - ping-pong: tagged (fi_tsend/fi_trecv) or untagged (fi_send/fi_recv)
 *   messages; fi_inject / fi_tinject at or below the provider's inject size
 *   (no completion to reap), else a send whose completion is reaped while
 *   waiting for the reply, off the round trip's path. Each side keeps one
 *   receive posted ahead of the message it is for;
 * - bandwidth (osu_bw): a window of sends, then a 4-byte acknowledgement
 *   from the receiver once it has the whole window; one sample is one window
 *   and its ack, so a sample holds the transit of all its bytes. bibw: both
 *   sides stream a window at once, no ack (osu_bibw);
 * - RMA: fi_write (with FI_DELIVERY_COMPLETE where the provider takes it,
 *   the analogue of MPI_Win_flush) or fi_read, one per sample (latency) or a
 *   window per sample (-bw), every completion reaped before the sample ends.
 *   The target's CPU only drives progress until the origin's DONE message.
 * One completion queue serves sends and receives; completions are reaped by
 * busy-polling fi_cq_read (--ofi-progress spin) or blocking in fi_cq_sread
 * (wait). Every wait has the link's deadline. Stamps are fb_runtime.h's
 * (CLOCK_MONOTONIC in ns), one per iteration into times[i]. Every function
 * returns 0, or -1 with one line in the link's error text (fb_error).
 */
#define _GNU_SOURCE

/* First, so that a host without libfabric's headers fails on this line and the builder names the package. */
#include <rdma/fabric.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_oficodes.h"
#include "fb_runtime.h"

#define API_VERSION FI_VERSION(1, 9)
#define BATCH 16                /* completions reaped per fi_cq_read call */
#define NAME_BYTES 256          /* the largest endpoint address this side takes */
#define CONTROL_BYTES 64        /* the acknowledgement and DONE messages' own buffer, after the two halves */
#define ACK_BYTES 4             /* osu_bw's acknowledgement */
#define TAG_DATA 0x1
#define TAG_ACK 0x2
#define TAG_DONE 0x3
#define REQUESTED_KEY 0xFB0F1
#define SPINS_PER_CLOCK 4096    /* empty polls between two looks at the deadline */
#define WAIT_SLICE_MS 100       /* one fi_cq_sread's longest wait; the caller's deadline bounds the whole */

struct fb_ofi_info { /* what fb_open reports, read by ofi_cloop.OFIInfo */
    char provider[64];
    char fabric[128];
    char domain[128];
    uint64_t inject_size;
    uint64_t max_msg_size;
    uint64_t tx_size;
    uint64_t rx_size;
    uint64_t link_speed;   /* bits/s of the NIC's link as the provider reports it (nic->link_attr); 0: none */
    uint32_t rma;          /* 1 when the provider granted FI_RMA */
    uint32_t mr_mode;
    uint32_t version;      /* fi_version() of the library loaded */
    uint32_t name_len;     /* this side's address: the endpoint's, or (msg) the listener's; 0 for a msg client */
    uint32_t source_matched; /* 1 when the domain is the one with fb_open's `source` address */
    uint8_t name[NAME_BYTES];
};

struct fb_ofi {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_eq *eq;
    struct fid_pep *pep;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_mr *mr;
    void *desc;
    fi_addr_t peer;
    char *buf;
    uint64_t bytes, region;
    int endpoint, tagged, wait, timeout_ms, depth, delivery;
    uint64_t inject_size, remote_key, remote_base;
    uint64_t tx_posted, tx_done, rx_posted, rx_done;
    struct fi_context2 *tx_ctx, *rx_ctx; /* one per operation in flight (providers that ask for FI_CONTEXT) */
    char error[256];
};

/* `what` failed with libfabric's error `code` (either sign): the link's error text; -1. */
static int fail(struct fb_ofi *l, const char *what, int code)
{
    return FB_FAIL(l, "%s: %s", what, fi_strerror(code < 0 ? -code : code));
}

const char *fb_error(struct fb_ofi *l) { return l->error; }

uint32_t fb_version(void) { return fi_version(); }

/* Set `name` to `value` where the environment libfabric reads has no `name` (1: set, 0: left as it was). This
 * library's own setenv: opened in a namespace of its own (dlmopen), libfabric reads that namespace's copy of the
 * environment, which the interpreter's later changes never reach. */
int fb_default_env(const char *name, const char *value)
{
    if (getenv(name))
        return 0;
    return setenv(name, value, 0) == 0;
}

/* The hints for the run's endpoint: the provider's name and domain where given, the message calls, FI_RMA when
 * `rma`, and every memory-registration mode these loops honour (local descriptors, virtual addresses, provider
 * keys, registrations bound to the endpoint). */
static struct fi_info *make_hints(const char *provider, const char *domain, int endpoint, int tagged, int rma, int wait)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return NULL;
    hints->ep_attr->type = endpoint == EP_MSG ? FI_EP_MSG : FI_EP_RDM;
    hints->caps = (tagged ? FI_TAGGED : FI_MSG) | (rma ? FI_RMA : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->addr_format = FI_FORMAT_UNSPEC;
    (void)wait;
    if (provider && *provider)
        hints->fabric_attr->prov_name = strdup(provider);
    if (domain && *domain)
        hints->domain_attr->name = strdup(domain);
    return hints;
}

/* Whether `info`'s source address is the IP address `source` (text). Only providers addressed by IP say so
 * (tcp, sockets, udp: one domain per interface, each with that interface's address); any other address
 * format, or no source address, is no match. */
static int has_source(const struct fi_info *info, const char *source)
{
    const struct sockaddr *sa = info->src_addr;
    unsigned char want[sizeof(struct in6_addr)];
    int ip = info->addr_format == FI_SOCKADDR || info->addr_format == FI_SOCKADDR_IN
             || info->addr_format == FI_SOCKADDR_IN6;
    if (!ip || !sa || info->src_addrlen < sizeof(struct sockaddr_in))
        return 0;
    if (sa->sa_family == AF_INET && inet_pton(AF_INET, source, want) == 1)
        return !memcmp(&((const struct sockaddr_in *)sa)->sin_addr, want, sizeof(struct in_addr));
    if (sa->sa_family == AF_INET6 && info->src_addrlen >= sizeof(struct sockaddr_in6)
        && inet_pton(AF_INET6, source, want) == 1)
        return !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr, want, sizeof(struct in6_addr));
    return 0;
}

static int named(const struct fi_info *info, const char *domain)
{
    return !domain || !*domain || (info->domain_attr->name && !strcmp(info->domain_attr->name, domain));
}

static int same_provider(const struct fi_info *a, const struct fi_info *b)
{
    const char *x = a->fabric_attr->prov_name, *y = b->fabric_attr->prov_name;
    return !strcmp(x ? x : "", y ? y : "");
}

/* The entry of fi_getinfo's `list` to open, NULL where none is on `domain`.
 * - The domain: the providers addressed by IP (tcp, udp, sockets) list a domain per interface whatever the
 *   hints' domain name says, so the name is checked here; the first entry on `domain` is the choice.
 * - With a `source` (the address the peer reached this side's control connection by), the first entry of that
 *   same provider, on `domain`, whose source address is `source`: such a provider lists its interfaces in its
 *   own order (fastest link, then lowest address), so on a host with two networks its first choice may be one
 *   the peer cannot reach. `*matched` says whether one had it; where none does (cxi, efa, shm are not
 *   addressed by IP) the first choice stands. */
static const struct fi_info *pick(const struct fi_info *list, const char *domain, const char *source, int *matched)
{
    const struct fi_info *first = list;
    *matched = 0;
    while (first && !named(first, domain))
        first = first->next;
    if (!first || !source || !*source)
        return first;
    for (const struct fi_info *i = first; i; i = i->next) {
        if (same_provider(i, first) && named(i, domain) && has_source(i, source)) {
            *matched = 1;
            return i;
        }
    }
    return first;
}

/* fi_getinfo for the run, with FI_RMA where the provider has it: `*rma` says whether it was granted, `*matched`
 * whether the domain is the one with address `source` (see pick). -FI_ENODATA where no entry is on `domain`. */
static int get_info(const char *provider, const char *domain, const char *source, int endpoint, int tagged,
                    int wait, struct fi_info **out, int *rma, int *matched)
{
    int code = -FI_ENODATA;
    for (int with_rma = 1; with_rma >= 0; with_rma--) {
        struct fi_info *hints = make_hints(provider, domain, endpoint, tagged, with_rma, wait), *list = NULL;
        if (!hints)
            return -FI_ENOMEM;
        code = fi_getinfo(API_VERSION, NULL, NULL, 0, hints, &list);
        fi_freeinfo(hints);
        if (code == 0) {
            const struct fi_info *chosen = pick(list, domain, source, matched);
            *out = chosen ? fi_dupinfo(chosen) : NULL;
            fi_freeinfo(list);
            if (!chosen) {
                code = -FI_ENODATA;
                continue;
            }
            if (!*out)
                return -FI_ENOMEM;
            *rma = with_rma;
            return 0;
        }
    }
    return code;
}

/* Give a shm endpoint a name of this run's own. shm names its region in /dev/shm after the process id
 * ("<pid>:<domain>:<endpoint>" in libfabric 1.17) and refuses to open (fi_enable: EBUSY) where a file of that
 * name exists and a process with the id in it lives. A rank killed before closing leaves its file behind; once
 * the id is reused (pid_max is 32768 on many hosts), the new rank holding it could not open shm at all. The
 * clock in the name makes it unique however ids repeat. 0, or -FI_ENOMEM. */
static int own_shm_name(struct fi_info *info)
{
    const char *prov = info->fabric_attr->prov_name;
    char name[64];
    struct timespec now;
    if (!prov || strcmp(prov, "shm") || info->addr_format != FI_ADDR_STR)
        return 0;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(name, sizeof name, "fi_shm://fabricbench-%ld-%lld%09ld", (long)getpid(), (long long)now.tv_sec,
             now.tv_nsec);
    char *copy = strdup(name);
    if (!copy)
        return -FI_ENOMEM;
    free(info->src_addr);
    info->src_addr = copy;
    info->src_addrlen = strlen(copy) + 1;
    return 0;
}

static void describe(const struct fi_info *info, struct fb_ofi_info *out, int rma)
{
    snprintf(out->provider, sizeof out->provider, "%s", info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "");
    snprintf(out->fabric, sizeof out->fabric, "%s", info->fabric_attr->name ? info->fabric_attr->name : "");
    snprintf(out->domain, sizeof out->domain, "%s", info->domain_attr->name ? info->domain_attr->name : "");
    out->inject_size = info->tx_attr->inject_size;
    out->max_msg_size = info->ep_attr->max_msg_size;
    out->tx_size = info->tx_attr->size;
    out->rx_size = info->rx_attr->size;
    out->link_speed = info->nic && info->nic->link_attr ? (uint64_t)info->nic->link_attr->speed : 0;
    out->rma = (uint32_t)rma;
    out->mr_mode = (uint32_t)info->domain_attr->mr_mode;
    out->version = fi_version();
}

/* What fi_getinfo chooses for these settings, without opening anything: 0 with `out` filled, or the negative
 * libfabric error (fi_strerror names it). */
int fb_probe(const char *provider, const char *domain, int endpoint, int tagged, int wait, struct fb_ofi_info *out)
{
    struct fi_info *info = NULL;
    int rma = 0, matched = 0, code = get_info(provider, domain, NULL, endpoint, tagged, wait, &info, &rma, &matched);
    if (code)
        return code;
    memset(out, 0, sizeof *out);
    describe(info, out, rma);
    fi_freeinfo(info);
    return 0;
}

/* Every provider fi_getinfo returns here, one line each, for doctor: provider, fabric, domain, endpoint type,
 * FI_RMA, FI_ATOMIC and FI_HMEM (0/1), inject size, and the MR mode as fi_tostr writes it, tab-separated. Returns
 * the bytes written, or the negative libfabric error. */
int fb_survey(char *out, int capacity)
{
    struct fi_info *list = NULL;
    int code = fi_getinfo(API_VERSION, NULL, NULL, 0, NULL, &list), used = 0;
    if (code)
        return code;
    out[0] = '\0';
    for (struct fi_info *i = list; i && used < capacity - 1; i = i->next) {
        const char *type = i->ep_attr->type == FI_EP_RDM ? "rdm" : i->ep_attr->type == FI_EP_MSG ? "msg"
                         : i->ep_attr->type == FI_EP_DGRAM ? "dgram" : "other";
        uint64_t mr_mode = (uint64_t)i->domain_attr->mr_mode;
        int n = snprintf(out + used, (size_t)(capacity - used), "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%zu\t%s\n",
                         i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "",
                         i->fabric_attr->name ? i->fabric_attr->name : "",
                         i->domain_attr->name ? i->domain_attr->name : "", type, !!(i->caps & FI_RMA),
                         !!(i->caps & FI_ATOMIC), !!(i->caps & FI_HMEM), i->tx_attr->inject_size,
                         fi_tostr(&mr_mode, FI_TYPE_MR_MODE));
        if (n < 0 || n >= capacity - used)
            break;
        used += n;
    }
    fi_freeinfo(list);
    return used;
}

void fb_close(struct fb_ofi *l)
{
    if (!l)
        return;
#define CLOSE(member)                        \
    if (l->member)                           \
        fi_close(&l->member->fid)
    CLOSE(mr);
    CLOSE(ep);
    CLOSE(pep);
    CLOSE(av);
    CLOSE(cq);
    CLOSE(eq);
    CLOSE(domain);
    CLOSE(fabric);
#undef CLOSE
    if (l->info)
        fi_freeinfo(l->info);
    free(l->tx_ctx);
    free(l->rx_ctx);
    free(l);
}

/* The endpoint's completion queue (and, for RDM, address vector) bound, the endpoint enabled, then the memory
 * registered: after the endpoint exists, since FI_MR_ENDPOINT binds the registration to it. */
static int finish_endpoint(struct fb_ofi *l, struct fi_info *info, int rma)
{
    int code;
    if (l->av && (code = fi_ep_bind(l->ep, &l->av->fid, 0)))
        return fail(l, "fi_ep_bind (address vector)", code);
    if (l->eq && (code = fi_ep_bind(l->ep, &l->eq->fid, 0)))
        return fail(l, "fi_ep_bind (event queue)", code);
    if ((code = fi_ep_bind(l->ep, &l->cq->fid, FI_TRANSMIT | FI_RECV)))
        return fail(l, "fi_ep_bind (completion queue)", code);
    if ((code = fi_enable(l->ep)))
        return fail(l, "fi_enable", code);
    uint64_t mr_mode = (uint64_t)info->domain_attr->mr_mode;
    if (!rma && !(mr_mode & FI_MR_LOCAL))
        return 0; /* nothing needs a registration */
    uint64_t access = FI_SEND | FI_RECV | (rma ? FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE : 0);
    if ((code = fi_mr_reg(l->domain, l->buf, l->bytes, access, 0, REQUESTED_KEY, 0, &l->mr, NULL)))
        return fail(l, "fi_mr_reg", code);
    if (mr_mode & FI_MR_ENDPOINT) {
        if ((code = fi_mr_bind(l->mr, &l->ep->fid, 0)))
            return fail(l, "fi_mr_bind", code);
        if ((code = fi_mr_enable(l->mr)))
            return fail(l, "fi_mr_enable", code);
    }
    l->desc = fi_mr_desc(l->mr);
    return 0;
}

/* Open this side: fi_getinfo with the run's hints (on the domain with address `source` where the provider has
 * one: see pick), fabric, domain, one completion queue, and for RDM the
 * endpoint with its address vector, for a MSG listener (`listen`) its passive endpoint. `buf` holds the send
 * half, the receive half (`region` bytes each) and CONTROL_BYTES; `depth` operations may be in flight each way. */
struct fb_ofi *fb_open(const char *provider, const char *domain, const char *source, int endpoint, int tagged,
                       int wait, int listen, void *buf, uint64_t bytes, uint64_t region, int depth, int timeout_ms,
                       struct fb_ofi_info *out, char *error, int error_bytes)
{
    struct fb_ofi *l = calloc(1, sizeof *l);
    int code, rma = 0, matched = 0;
    if (!l) {
        fb_fail(error, (size_t)error_bytes, "out of memory");
        return NULL;
    }
    memset(out, 0, sizeof *out);
    l->buf = buf;
    l->bytes = bytes;
    l->region = region;
    l->endpoint = endpoint;
    l->tagged = tagged;
    l->wait = wait;
    l->timeout_ms = timeout_ms;
    l->depth = depth;
    l->delivery = 1;
    l->tx_ctx = calloc((size_t)depth, sizeof *l->tx_ctx);
    l->rx_ctx = calloc((size_t)depth, sizeof *l->rx_ctx);
    if (!l->tx_ctx || !l->rx_ctx) {
        fail(l, "allocating operation contexts", FI_ENOMEM);
        goto failed;
    }
    if ((code = get_info(provider, domain, source, endpoint, tagged, wait, &l->info, &rma, &matched))) {
        fail(l, "fi_getinfo", code);
        goto failed;
    }
    if ((code = own_shm_name(l->info))) {
        fail(l, "naming the shm endpoint", code);
        goto failed;
    }
    describe(l->info, out, rma);
    out->source_matched = (uint32_t)matched;
    l->inject_size = l->info->tx_attr->inject_size;
    if ((code = fi_fabric(l->info->fabric_attr, &l->fabric, NULL))) {
        fail(l, "fi_fabric", code);
        goto failed;
    }
    if ((code = fi_domain(l->fabric, l->info, &l->domain, NULL))) {
        fail(l, "fi_domain", code);
        goto failed;
    }
    struct fi_cq_attr cq_attr = {
        .size = (size_t)(2 * depth + 8),
        .format = FI_CQ_FORMAT_TAGGED,
        .wait_obj = wait ? FI_WAIT_UNSPEC : FI_WAIT_NONE,
    };
    if ((code = fi_cq_open(l->domain, &cq_attr, &l->cq, NULL))) {
        fail(l, wait ? "fi_cq_open with a wait object (--ofi-progress wait)" : "fi_cq_open", code);
        goto failed;
    }
    size_t name_len = NAME_BYTES;
    if (endpoint == EP_RDM) {
        struct fi_av_attr av_attr = {.type = l->info->domain_attr->av_type, .count = 2};
        if ((code = fi_av_open(l->domain, &av_attr, &l->av, NULL))) {
            fail(l, "fi_av_open", code);
            goto failed;
        }
        if ((code = fi_endpoint(l->domain, l->info, &l->ep, NULL))) {
            fail(l, "fi_endpoint", code);
            goto failed;
        }
        if (finish_endpoint(l, l->info, rma))
            goto failed;
        if ((code = fi_getname(&l->ep->fid, out->name, &name_len))) {
            fail(l, "fi_getname", code);
            goto failed;
        }
        out->name_len = (uint32_t)name_len;
    } else {
        struct fi_eq_attr eq_attr = {.size = 8, .wait_obj = FI_WAIT_UNSPEC};
        if ((code = fi_eq_open(l->fabric, &eq_attr, &l->eq, NULL))) {
            fail(l, "fi_eq_open", code);
            goto failed;
        }
        if (listen) {
            if ((code = fi_passive_ep(l->fabric, l->info, &l->pep, NULL))) {
                fail(l, "fi_passive_ep", code);
                goto failed;
            }
            if ((code = fi_pep_bind(l->pep, &l->eq->fid, 0)) || (code = fi_listen(l->pep))) {
                fail(l, "fi_listen", code);
                goto failed;
            }
            if ((code = fi_getname(&l->pep->fid, out->name, &name_len))) {
                fail(l, "fi_getname (listener)", code);
                goto failed;
            }
            out->name_len = (uint32_t)name_len;
        }
    }
    return l;
failed:
    fb_fail(error, (size_t)error_bytes, "%s", l->error);
    fb_close(l);
    return NULL;
}

/* Wait for one connection-manager event of kind `expected` on the event queue, within the link's timeout. */
static int wait_event(struct fb_ofi *l, uint32_t expected, struct fi_eq_cm_entry *entry, const char *what)
{
    uint32_t event = 0;
    ssize_t n = fi_eq_sread(l->eq, &event, entry, sizeof *entry, l->timeout_ms, 0);
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry err = {0};
        fi_eq_readerr(l->eq, &err, 0);
        return FB_FAIL(l, "%s failed: %s", what, fi_strerror(err.err));
    }
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT)
        return FB_FAIL(l, "%s: no answer within %d s", what, l->timeout_ms / 1000);
    if (n < 0)
        return fail(l, what, (int)n);
    if (event != expected)
        return FB_FAIL(l, "%s: unexpected connection event %u", what, event);
    return 0;
}

/* Join the peer whose address is `name`: for RDM an entry in the address vector; for MSG the listener accepts
 * the peer's connection request, the other side connects to the listener's address. */
int fb_connect(struct fb_ofi *l, const uint8_t *name, uint32_t name_len, int listen)
{
    int code;
    if (l->endpoint == EP_RDM) {
        int inserted = fi_av_insert(l->av, name, 1, &l->peer, 0, NULL);
        if (inserted != 1)
            return fail(l, "fi_av_insert of the peer's address", inserted < 0 ? inserted : FI_EINVAL);
        return 0;
    }
    struct fi_eq_cm_entry entry;
    int rma = !!(l->info->caps & FI_RMA);
    if (listen) {
        if (wait_event(l, FI_CONNREQ, &entry, "waiting for the peer's connection request"))
            return -1;
        code = fi_endpoint(l->domain, entry.info, &l->ep, NULL);
        fi_freeinfo(entry.info);
        if (code)
            return fail(l, "fi_endpoint (accepted)", code);
        if (finish_endpoint(l, l->info, rma))
            return -1;
        if ((code = fi_accept(l->ep, NULL, 0)))
            return fail(l, "fi_accept", code);
    } else {
        if ((code = fi_endpoint(l->domain, l->info, &l->ep, NULL)))
            return fail(l, "fi_endpoint", code);
        if (finish_endpoint(l, l->info, rma))
            return -1;
        if ((code = fi_connect(l->ep, name, NULL, 0)))
            return fail(l, "fi_connect", code);
    }
    (void)name_len;
    return wait_event(l, FI_CONNECTED, &entry, "connecting to the peer");
}

/* This side's RMA target: the registration's key and the base the peer addresses (its virtual address under
 * FI_MR_VIRT_ADDR, else 0). -1 where the provider's keys are raw (FI_MR_RAW), which these loops do not carry. */
int fb_local_key(struct fb_ofi *l, uint64_t *key, uint64_t *base)
{
    if (!l->mr)
        return FB_FAIL(l, "no memory registration for RMA");
    *key = fi_mr_key(l->mr);
    if (*key == FI_KEY_NOTAVAIL)
        return FB_FAIL(l, "the provider's memory keys are raw (FI_MR_RAW), which fabricbench does not carry");
    *base = (l->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)l->buf : 0;
    return 0;
}

void fb_set_remote(struct fb_ofi *l, uint64_t key, uint64_t base)
{
    l->remote_key = key;
    l->remote_base = base;
}

/* Reap what the completion queue holds (at most BATCH), counting sends/RMA and receives apart. In wait mode it
 * blocks up to the timeout for the first one. Returns the number reaped, or -1. */
static int reap(struct fb_ofi *l)
{
    struct fi_cq_tagged_entry done[BATCH];
    ssize_t n = l->wait ? fi_cq_sread(l->cq, done, BATCH, NULL, WAIT_SLICE_MS) : fi_cq_read(l->cq, done, BATCH);
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT)
        return 0; /* nothing yet: the caller keeps the deadline */
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry err = {0};
        char detail[128] = "";
        if (fi_cq_readerr(l->cq, &err, 0) > 0)
            snprintf(detail, sizeof detail, "%s", fi_cq_strerror(l->cq, err.prov_errno, err.err_data, NULL, 0));
        return FB_FAIL(l, "%s completion failed: %s (%s)", (err.flags & FI_RECV) ? "receive"
                       : (err.flags & FI_RMA) ? "RMA" : "send", fi_strerror(err.err), detail);
    }
    if (n < 0)
        return fail(l, "fi_cq_read", (int)n);
    for (ssize_t i = 0; i < n; i++) {
        if (done[i].flags & FI_RECV)
            l->rx_done++;
        else
            l->tx_done++;
    }
    return (int)n;
}

/* Whether the link's timeout has passed since the first call for this `*deadline` (0 until then: that call
 * sets it). */
static int expired(const struct fb_ofi *l, int64_t *deadline)
{
    int64_t now = fb_now_ns();
    if (!*deadline) {
        *deadline = now + (int64_t)l->timeout_ms * 1000000LL;
        return 0;
    }
    return now > *deadline;
}

/* Reap until `tx` sends/RMA and `rx` receives have completed in all, within the link's deadline. */
static int wait_for(struct fb_ofi *l, uint64_t tx, uint64_t rx, const char *what)
{
    int64_t deadline = 0;
    unsigned idle = 0;
    while (l->tx_done < tx || l->rx_done < rx) {
        int n = reap(l);
        if (n < 0)
            return -1;
        if (n == 0 && (l->wait || ++idle % SPINS_PER_CLOCK == 0) && expired(l, &deadline))
            return FB_FAIL(l, "no %s completion within %d s", what, l->timeout_ms / 1000);
    }
    return 0;
}

/* A call that said FI_EAGAIN: the queue is full until completions are reaped. Reap once, within the deadline. */
static int retry(struct fb_ofi *l, int64_t *deadline, const char *what)
{
    if (reap(l) < 0)
        return -1;
    if (expired(l, deadline))
        return FB_FAIL(l, "%s: the provider's queue stayed full for %d s", what, l->timeout_ms / 1000);
    return 0;
}

/* Post one receive of `size` bytes at `at` for messages tagged `tag`. */
static int post_recv(struct fb_ofi *l, char *at, uint64_t size, uint64_t tag)
{
    int64_t deadline = 0;
    for (;;) {
        void *context = &l->rx_ctx[l->rx_posted % (uint64_t)l->depth];
        ssize_t code = l->tagged ? fi_trecv(l->ep, at, size, l->desc, l->peer, tag, 0, context)
                                 : fi_recv(l->ep, at, size, l->desc, l->peer, context);
        if (code == 0) {
            l->rx_posted++;
            return 0;
        }
        if (code != -FI_EAGAIN)
            return fail(l, l->tagged ? "fi_trecv" : "fi_recv", (int)code);
        if (retry(l, &deadline, "posting a receive"))
            return -1;
    }
}

/* Send `size` bytes from `at` tagged `tag`: injected (no completion) at or below the inject size, else posted
 * with a completion to reap. At most `depth` sends are left in flight. */
static int post_send(struct fb_ofi *l, const char *at, uint64_t size, uint64_t tag)
{
    int64_t deadline = 0;
    int inject = size <= l->inject_size;
    if (!inject && l->tx_posted - l->tx_done >= (uint64_t)l->depth && wait_for(l, l->tx_posted - l->depth + 1, 0, "send"))
        return -1;
    for (;;) {
        ssize_t code;
        if (inject)
            code = l->tagged ? fi_tinject(l->ep, at, size, l->peer, tag) : fi_inject(l->ep, at, size, l->peer);
        else {
            void *context = &l->tx_ctx[l->tx_posted % (uint64_t)l->depth];
            code = l->tagged ? fi_tsend(l->ep, at, size, l->desc, l->peer, tag, context)
                             : fi_send(l->ep, at, size, l->desc, l->peer, context);
        }
        if (code == 0) {
            if (!inject)
                l->tx_posted++;
            return 0;
        }
        if (code != -FI_EAGAIN)
            return fail(l, inject ? (l->tagged ? "fi_tinject" : "fi_inject") : (l->tagged ? "fi_tsend" : "fi_send"),
                        (int)code);
        if (retry(l, &deadline, "sending"))
            return -1;
    }
}

static char *send_half(struct fb_ofi *l) { return l->buf; }
static char *recv_half(struct fb_ofi *l) { return l->buf + l->region; }
static char *control(struct fb_ofi *l) { return l->buf + 2 * l->region; }

/* Ping-pong (fabtests' pingpong, osu_latency): the initiator sends and waits for the reply, the other side
 * replies to each message; one sample is one round trip. */
int fb_pingpong(struct fb_ofi *l, uint64_t size, int64_t iterations, int initiator, int64_t *times)
{
    if (iterations <= 0)
        return 0;
    if (post_recv(l, recv_half(l), size, TAG_DATA))
        return -1;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (initiator) {
            if (post_send(l, send_half(l), size, TAG_DATA) || wait_for(l, 0, l->rx_posted, "receive"))
                return -1;
            if (i + 1 < iterations && post_recv(l, recv_half(l), size, TAG_DATA))
                return -1;
            fb_stamp(times, i, &before);
        } else {
            if (wait_for(l, 0, l->rx_posted, "receive"))
                return -1;
            if (i + 1 < iterations && post_recv(l, recv_half(l), size, TAG_DATA))
                return -1;
            if (post_send(l, send_half(l), size, TAG_DATA))
                return -1;
        }
    }
    return wait_for(l, l->tx_posted, 0, "send"); /* the last sends' completions, before the buffers change */
}

/* Streams: `window` messages per sample. bw: the sender waits for its window's completions and the receiver's
 * acknowledgement (`ack`); bibw: both sides send and receive a window, no acknowledgement. */
int fb_stream(struct fb_ofi *l, uint64_t size, int window, int64_t iterations, int sending, int receiving, int ack,
              int64_t *times)
{
    if (iterations <= 0)
        return 0;
    int acked = ack && sending && !receiving, acking = ack && receiving && !sending;
    if (receiving)
        for (int w = 0; w < window; w++)
            if (post_recv(l, recv_half(l), size, TAG_DATA))
                return -1;
    if (acked && post_recv(l, control(l), ACK_BYTES, TAG_ACK))
        return -1;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (sending)
            for (int w = 0; w < window; w++)
                if (post_send(l, send_half(l), size, TAG_DATA))
                    return -1;
        if (wait_for(l, sending ? l->tx_posted : 0, l->rx_posted, receiving ? "receive" : "acknowledgement"))
            return -1;
        if (i + 1 < iterations) {
            if (receiving)
                for (int w = 0; w < window; w++)
                    if (post_recv(l, recv_half(l), size, TAG_DATA))
                        return -1;
            if (acked && post_recv(l, control(l), ACK_BYTES, TAG_ACK))
                return -1;
        }
        if (acking && post_send(l, control(l) + ACK_BYTES, ACK_BYTES, TAG_ACK))
            return -1;
        fb_stamp(times, i, &before);
    }
    return wait_for(l, l->tx_posted, 0, "send");
}

/* One RMA operation of `size` bytes between this side's halves and the peer's: WRITE from the send half into the
 * peer's receive half, READ from the peer's send half into the receive half. A WRITE asks for delivery
 * completion where the provider takes it (the data is in the peer's memory when it completes); the flag is
 * dropped, and the link says so, where the provider refuses it. */
static int post_rma(struct fb_ofi *l, int op, uint64_t size)
{
    int64_t deadline = 0;
    for (;;) {
        void *context = &l->tx_ctx[l->tx_posted % (uint64_t)l->depth];
        ssize_t code;
        if (op == OP_READ) {
            code = fi_read(l->ep, recv_half(l), size, l->desc, l->peer, l->remote_base, l->remote_key, context);
        } else if (l->delivery) {
            struct iovec iov = {.iov_base = send_half(l), .iov_len = size};
            struct fi_rma_iov rma = {.addr = l->remote_base + l->region, .len = size, .key = l->remote_key};
            struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &l->desc, .iov_count = 1, .addr = l->peer,
                                     .rma_iov = &rma, .rma_iov_count = 1, .context = context};
            code = fi_writemsg(l->ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE);
            if (code == -FI_EBADFLAGS || code == -FI_ENOSYS || code == -FI_EOPNOTSUPP) {
                l->delivery = 0;
                continue;
            }
        } else {
            code = fi_write(l->ep, send_half(l), size, l->desc, l->peer, l->remote_base + l->region, l->remote_key,
                            context);
        }
        if (code == 0) {
            l->tx_posted++;
            return 0;
        }
        if (code != -FI_EAGAIN)
            return fail(l, op == OP_READ ? "fi_read" : "fi_write", (int)code);
        if (retry(l, &deadline, "posting an RMA operation"))
            return -1;
    }
}

/* RMA latency (window 0: one operation and its completion per sample) or bandwidth (a window of operations, all
 * completed, per sample), on the origin; the target only calls fb_wait_done. */
int fb_rma(struct fb_ofi *l, int op, uint64_t size, int window, int64_t iterations, int64_t *times)
{
    int per_sample = window > 0 ? window : 1;
    int64_t before = fb_now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        for (int w = 0; w < per_sample; w++)
            if (post_rma(l, op, size))
                return -1;
        if (wait_for(l, l->tx_posted, 0, op == OP_READ ? "RDMA READ" : "RDMA WRITE"))
            return -1;
        fb_stamp(times, i, &before);
    }
    return 0;
}

/* Whether WRITEs complete on delivery (1) or, where the provider refused that flag, on transmission (0). */
int fb_delivery_complete(struct fb_ofi *l) { return l->delivery; }

/* The origin's end of an RMA run: one DONE message, once every operation has completed. */
int fb_signal_done(struct fb_ofi *l)
{
    if (post_send(l, control(l) + 2 * ACK_BYTES, 1, TAG_DONE))
        return -1;
    return wait_for(l, l->tx_posted, 0, "DONE message");
}

/* The target's end: drive progress (a provider with manual progress moves RMA data only while its target polls)
 * until the origin's DONE message arrives. */
int fb_wait_done(struct fb_ofi *l)
{
    if (post_recv(l, control(l) + 3 * ACK_BYTES, 1, TAG_DONE))
        return -1;
    return wait_for(l, 0, l->rx_posted, "DONE message");
}

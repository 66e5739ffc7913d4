/* ofi_reference.c: the smallest program that makes fabricbench's ofi calls, for benchmarks/ofi_reference.py.
 *
 * One process forks two: the parent sends first (the initiator), the child answers. They trade fi_getname
 * addresses over a socketpair, which also carries a barrier before each warm-up and each timed loop; no MPI,
 * no Python, no ctypes, no dlmopen. Each allocates and fills its own buffer after the fork, as two ranks do.
 * The socketpair is read by polling (MSG_DONTWAIT), never by sleeping in read(): a process woken by its
 * partner's write is placed on the writer's CPU (a synchronous wake-up), which on a busy 2-core host put the
 * two busy-polling processes on one CPU for whole runs; fabricbench's ranks meet in MPI barriers that poll.
 * The libfabric calls are _ofiloop.c's, with the same hints:
 * - fi_getinfo(1.9) for an RDM endpoint with FI_TAGGED and FI_RMA (FI_TAGGED alone where RMA is refused), mode
 *   FI_CONTEXT | FI_CONTEXT2, the same MR modes and FI_THREAD_DOMAIN; fabric, domain, one completion queue
 *   (FI_CQ_FORMAT_TAGGED, 2 x depth + 8 entries, no wait object), an address vector of 2, the endpoint bound to
 *   both and enabled, the buffer registered where the provider needs it (FI_MR_LOCAL) or RMA was granted;
 * - ping-pong: fi_tinject at or below the inject size, else fi_tsend (its completion reaped while waiting for
 *   the reply); one fi_trecv posted ahead of the message it is for; fi_cq_read busy-polled, 16 entries a call;
 * - bw: a window of sends, then a 4-byte acknowledgement from the receiver once it has the whole window (which
 *   posts the next window's receives first); one sample is one window and its acknowledgement.
 * Both processes busy-poll throughout, as fabricbench's two ranks do with --ofi-progress spin.
 *
 * Per size: a barrier, the warm-up, a barrier, the timed loop with one CLOCK_MONOTONIC stamp per iteration (as
 * _ofiloop.c stamps them). The parent prints, tab-separated, one line per size:
 *   latency SIZE ITERATIONS P50_US MEAN_US     one way (half the round trip); P50 is the nearest-rank median,
 *                                              as fabricbench's lat_p50_us
 *   bw      SIZE ITERATIONS MEAN_MBPS P50_MBPS  MB = 10^6 B; MEAN: all windows' bytes over their whole time, as
 *                                              fabricbench's bw_MBps; P50: one window's bytes over the median
 *                                              window
 * each followed by CPU_PARENT CPU_CHILD, where the two were when the timed loop ended (sched_getcpu), and lines
 * starting with '#' saying what fi_getinfo chose.
 *
 * Build: cc -O2 -o ofi_reference ofi_reference.c -lfabric
 * Usage: ofi_reference -p PROVIDER -k latency|bw -s SIZE[,SIZE...] -i ITERATIONS -x WARMUP [-w WINDOW] [-t SECONDS]
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH 16
#define ACK_BYTES 4
#define CONTROL_BYTES 64
#define TAG_DATA 0x1
#define TAG_ACK 0x2
#define REQUESTED_KEY 0xFB0F1
#define NAME_BYTES 256
#define MAX_SIZES 64
#define EXTRA_DEPTH 4 /* ofi.py: operations in flight beyond the window */

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_cq *cq;
static struct fid_av *av;
static struct fid_ep *ep;
static struct fid_mr *mr;
static void *desc;
static fi_addr_t peer;
static char *buf;
static uint64_t region, inject_size;
static int depth;
static uint64_t tx_posted, tx_done, rx_posted, rx_done;
static struct fi_context2 *tx_ctx, *rx_ctx;
static int side; /* 0: the parent, initiator; 1: the child */

static void die(const char *what, long code)
{
    fprintf(stderr, "ofi_reference (%s): %s: %s\n", side ? "child" : "parent", what, fi_strerror((int)(code < 0 ? -code : code)));
    exit(2);
}

#define CHECK(call)                          \
    do {                                     \
        long code_ = (long)(call);           \
        if (code_)                           \
            die(#call, code_);               \
    } while (0)

static inline int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void reap(void)
{
    struct fi_cq_tagged_entry done[BATCH];
    ssize_t n = fi_cq_read(cq, done, BATCH);
    if (n == -FI_EAGAIN)
        return;
    if (n < 0) {
        struct fi_cq_err_entry err = {0};
        if (n == -FI_EAVAIL && fi_cq_readerr(cq, &err, 0) > 0)
            die("a completion failed", err.err);
        die("fi_cq_read", n);
    }
    for (ssize_t i = 0; i < n; i++) {
        if (done[i].flags & FI_RECV)
            rx_done++;
        else
            tx_done++;
    }
}

static void wait_for(uint64_t tx, uint64_t rx)
{
    while (tx_done < tx || rx_done < rx)
        reap();
}

static void post_recv(char *at, uint64_t size, uint64_t tag)
{
    for (;;) {
        ssize_t code = fi_trecv(ep, at, size, desc, peer, tag, 0, &rx_ctx[rx_posted % (uint64_t)depth]);
        if (code == 0) {
            rx_posted++;
            return;
        }
        if (code != -FI_EAGAIN)
            die("fi_trecv", code);
        reap();
    }
}

static void post_send(const char *at, uint64_t size, uint64_t tag)
{
    int inject = size <= inject_size;
    if (!inject && tx_posted - tx_done >= (uint64_t)depth)
        wait_for(tx_posted - depth + 1, 0);
    for (;;) {
        ssize_t code = inject ? fi_tinject(ep, at, size, peer, tag)
                              : fi_tsend(ep, at, size, desc, peer, tag, &tx_ctx[tx_posted % (uint64_t)depth]);
        if (code == 0) {
            if (!inject)
                tx_posted++;
            return;
        }
        if (code != -FI_EAGAIN)
            die(inject ? "fi_tinject" : "fi_tsend", code);
        reap();
    }
}

static char *send_half(void) { return buf; }
static char *recv_half(void) { return buf + region; }
static char *control(void) { return buf + 2 * region; }

static void pingpong(uint64_t size, int64_t iterations, int64_t *times)
{
    if (iterations <= 0)
        return;
    post_recv(recv_half(), size, TAG_DATA);
    int64_t before = now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (side == 0) {
            post_send(send_half(), size, TAG_DATA);
            wait_for(0, rx_posted);
            if (i + 1 < iterations)
                post_recv(recv_half(), size, TAG_DATA);
            int64_t now = now_ns();
            times[i] = now - before;
            before = now;
        } else {
            wait_for(0, rx_posted);
            if (i + 1 < iterations)
                post_recv(recv_half(), size, TAG_DATA);
            post_send(send_half(), size, TAG_DATA);
        }
    }
    wait_for(tx_posted, 0);
}

static void stream(uint64_t size, int window, int64_t iterations, int64_t *times)
{
    if (iterations <= 0)
        return;
    int sending = side == 0;
    if (sending)
        post_recv(control(), ACK_BYTES, TAG_ACK);
    else
        for (int w = 0; w < window; w++)
            post_recv(recv_half(), size, TAG_DATA);
    int64_t before = now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (sending) {
            for (int w = 0; w < window; w++)
                post_send(send_half(), size, TAG_DATA);
            wait_for(tx_posted, rx_posted);
            if (i + 1 < iterations)
                post_recv(control(), ACK_BYTES, TAG_ACK);
        } else {
            wait_for(0, rx_posted);
            if (i + 1 < iterations)
                for (int w = 0; w < window; w++)
                    post_recv(recv_half(), size, TAG_DATA);
            post_send(control() + ACK_BYTES, ACK_BYTES, TAG_ACK);
        }
        int64_t now = now_ns();
        times[i] = now - before;
        before = now;
    }
    wait_for(tx_posted, 0);
}

static struct fi_info *hints_for(const char *provider, int rma)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        die("fi_allocinfo", FI_ENOMEM);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | (rma ? FI_RMA : 0);
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->addr_format = FI_FORMAT_UNSPEC;
    hints->fabric_attr->prov_name = strdup(provider);
    return hints;
}

static void open_endpoint(const char *provider, uint64_t bytes)
{
    int rma = 1, code = -FI_ENODATA;
    for (; rma >= 0; rma--) {
        struct fi_info *hints = hints_for(provider, rma);
        code = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info);
        fi_freeinfo(hints);
        if (code == 0)
            break;
    }
    if (code)
        die("fi_getinfo", code);
    inject_size = info->tx_attr->inject_size;
    CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
    CHECK(fi_domain(fabric, info, &domain, NULL));
    struct fi_cq_attr cq_attr = {.size = (size_t)(2 * depth + 8), .format = FI_CQ_FORMAT_TAGGED,
                                 .wait_obj = FI_WAIT_NONE};
    CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
    struct fi_av_attr av_attr = {.type = info->domain_attr->av_type, .count = 2};
    CHECK(fi_av_open(domain, &av_attr, &av, NULL));
    CHECK(fi_endpoint(domain, info, &ep, NULL));
    CHECK(fi_ep_bind(ep, &av->fid, 0));
    CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
    CHECK(fi_enable(ep));
    uint64_t mr_mode = (uint64_t)info->domain_attr->mr_mode;
    if (rma || (mr_mode & FI_MR_LOCAL)) {
        uint64_t access = FI_SEND | FI_RECV | (rma ? FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE : 0);
        CHECK(fi_mr_reg(domain, buf, bytes, access, 0, REQUESTED_KEY, 0, &mr, NULL));
        if (mr_mode & FI_MR_ENDPOINT) {
            CHECK(fi_mr_bind(mr, &ep->fid, 0));
            CHECK(fi_mr_enable(mr));
        }
        desc = fi_mr_desc(mr);
    }
    if (side == 0)
        printf("# provider %s, domain %s, inject %zu B, FI_RMA %d, libfabric %u.%u\n", info->fabric_attr->prov_name,
               info->domain_attr->name, info->tx_attr->inject_size, rma, FI_MAJOR(fi_version()),
               FI_MINOR(fi_version()));
}

static void close_endpoint(void)
{
    if (mr)
        fi_close(&mr->fid);
    fi_close(&ep->fid);
    fi_close(&av->fid);
    fi_close(&cq->fid);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
}

static int link_fd;

static void exactly(ssize_t (*io)(int, void *, size_t), void *at, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t got = io(link_fd, (char *)at + done, n - done);
        if (got <= 0) {
            fprintf(stderr, "ofi_reference: the other process is gone\n");
            exit(2);
        }
        done += (size_t)got;
    }
}

static ssize_t write_some(int fd, void *at, size_t n) { return write(fd, at, n); }

/* A read that polls: the process never sleeps, so no wake-up moves it onto its partner's CPU. */
static ssize_t read_some(int fd, void *at, size_t n)
{
    for (;;) {
        ssize_t got = recv(fd, at, n, MSG_DONTWAIT);
        if (got >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return got;
    }
}

static void barrier(void)
{
    char byte = 0;
    exactly(write_some, &byte, 1);
    exactly(read_some, &byte, 1);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank percentile (fabricbench's measure/stats.py): sorted[round(N p / 100) - 1]. */
static int64_t nearest_rank(int64_t *sorted, int64_t n, double percent)
{
    int64_t index = (int64_t)(n * percent / 100.0 + 0.5) - 1;
    return sorted[index < 0 ? 0 : index >= n ? n - 1 : index];
}

static void usage(void)
{
    fprintf(stderr, "usage: ofi_reference -p PROVIDER -k latency|bw -s SIZE[,SIZE...] -i ITERATIONS -x WARMUP "
                    "[-w WINDOW] [-t SECONDS]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *provider = NULL, *kind = NULL;
    uint64_t sizes[MAX_SIZES];
    int nsizes = 0, window = 64, timeout = 120, opt;
    int64_t iterations = 1000, warmup = 100;
    while ((opt = getopt(argc, argv, "p:k:s:i:x:w:t:")) != -1) {
        switch (opt) {
        case 'p': provider = optarg; break;
        case 'k': kind = optarg; break;
        case 's':
            for (char *part = strtok(optarg, ","); part && nsizes < MAX_SIZES; part = strtok(NULL, ","))
                sizes[nsizes++] = strtoull(part, NULL, 10);
            break;
        case 'i': iterations = atoll(optarg); break;
        case 'x': warmup = atoll(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 't': timeout = atoi(optarg); break;
        default: usage();
        }
    }
    int latency = kind && !strcmp(kind, "latency");
    if (!provider || !kind || (!latency && strcmp(kind, "bw")) || !nsizes || iterations < 1 || warmup < 0 || window < 1)
        usage();
    region = 8;
    for (int s = 0; s < nsizes; s++)
        region = sizes[s] > region ? sizes[s] : region;
    depth = window + EXTRA_DEPTH;
    int64_t count = iterations > warmup ? iterations : warmup;
    int64_t *times = calloc((size_t)count, sizeof *times);
    tx_ctx = calloc((size_t)depth, sizeof *tx_ctx);
    rx_ctx = calloc((size_t)depth, sizeof *rx_ctx);
    uint64_t bytes = 2 * region + CONTROL_BYTES;
    if (!times || !tx_ctx || !rx_ctx)
        die("allocating", FI_ENOMEM);

    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair))
        die("socketpair", FI_EOTHER);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        die("fork", FI_EOTHER);
    side = child == 0;
    link_fd = pair[side];
    close(pair[!side]);
    alarm((unsigned)timeout);
    if (posix_memalign((void **)&buf, 4096, bytes))
        die("allocating", FI_ENOMEM);
    for (uint64_t b = 0; b < bytes; b++)
        buf[b] = (char)(b % 251);

    open_endpoint(provider, bytes);
    uint8_t mine[NAME_BYTES], theirs[NAME_BYTES];
    size_t name_len = sizeof mine;
    CHECK(fi_getname(&ep->fid, mine, &name_len));
    uint32_t len = (uint32_t)name_len, their_len = 0;
    exactly(write_some, &len, sizeof len);
    exactly(write_some, mine, name_len);
    exactly(read_some, &their_len, sizeof their_len);
    if (their_len > NAME_BYTES)
        die("the peer's address is too long", FI_EINVAL);
    exactly(read_some, theirs, their_len);
    if (fi_av_insert(av, theirs, 1, &peer, 0, NULL) != 1)
        die("fi_av_insert", FI_EINVAL);

    for (int s = 0; s < nsizes; s++) {
        uint64_t size = sizes[s];
        barrier();
        if (latency)
            pingpong(size, warmup, times);
        else
            stream(size, window, warmup, times);
        barrier();
        if (latency)
            pingpong(size, iterations, times);
        else
            stream(size, window, iterations, times);
        int cpu = sched_getcpu(), other = -1;
        if (side == 1)
            exactly(write_some, &cpu, sizeof cpu);
        else
            exactly(read_some, &other, sizeof other);
        if (side == 0) {
            int64_t total = 0;
            for (int64_t i = 0; i < iterations; i++)
                total += times[i];
            qsort(times, (size_t)iterations, sizeof *times, cmp_i64);
            int64_t median = nearest_rank(times, iterations, 50.0);
            if (latency)
                printf("latency\t%llu\t%lld\t%.4f\t%.4f\t%d\t%d\n", (unsigned long long)size,
                       (long long)iterations, median / 2000.0, total / 2000.0 / (double)iterations, cpu, other);
            else {
                double moved = (double)size * window;
                printf("bw\t%llu\t%lld\t%.3f\t%.3f\t%d\t%d\n", (unsigned long long)size, (long long)iterations,
                       moved * iterations / (double)total * 1e3, moved / (double)median * 1e3, cpu, other);
            }
            fflush(stdout);
        }
    }
    barrier();
    close_endpoint();
    if (side == 1)
        _exit(0);
    int status = 0;
    if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        die("the child failed", FI_EOTHER);
    return 0;
}

/* ucx_reference.c: the smallest program that makes fabricbench's ucx calls, for benchmarks/ucx_reference.py.
 *
 * One process forks two: the parent sends first (the initiator), the child answers. The child executes the
 * program anew (-F FD: the socket it inherited), as a launcher's ranks are each an exec: the kernel places a
 * process on the least busy CPU at exec, while a forked child starts on its parent's CPU and, two busy-polling
 * processes on a loaded host, may stay there for whole runs. They trade worker addresses over a socketpair,
 * which also carries a barrier before each warm-up and each timed loop (read by polling with MSG_DONTWAIT, so
 * neither sleeps in read() and is woken onto its partner's CPU); no MPI, no Python, no ctypes, no dlmopen. Each allocates and fills its own buffer after the fork, as two ranks do. The
 * UCP calls are _ucxloop.c's (--ucx-api tag, --ucx-progress spin), with the same parameters:
 * - ucp_init from ucp_config_read (UCX_TLS and the rest of the environment), a single-threaded worker, an
 *   endpoint to the peer's address with no error handling, the buffer mapped with ucp_mem_map;
 * - ping-pong: ucp_tag_recv_nbx posted, then ucp_tag_send_nbx; each request progressed with busy
 *   ucp_worker_progress until ucp_request_check_status says done, then freed;
 * - bw: the receiver posts a window of receives, the sender sends a window and waits for every send, then
 *   a 4-byte tagged acknowledgement from the receiver once it has the whole window; one sample is one window
 *   and its acknowledgement.
 *
 * Per size: a barrier, the warm-up, a barrier, the timed loop with one CLOCK_MONOTONIC stamp per iteration (as
 * _ucxloop.c stamps them). The parent prints, tab-separated, one line per size:
 *   latency SIZE ITERATIONS P50_US MEAN_US     one way (half the round trip); P50 the nearest-rank median
 *   bw      SIZE ITERATIONS MEAN_MBPS P50_MBPS  MB = 10^6 B; MEAN: all windows' bytes over their whole time;
 *                                              P50: one window's bytes over the median window
 * each followed by CPU_PARENT CPU_CHILD, where the two were when the timed loop ended (sched_getcpu),
 * and a first line starting with '#' naming the UCX version and the endpoint's lanes (ucp_ep_print_info).
 *
 * -Y: where ucp_worker_progress finds nothing, sched_yield (fabricbench's --ucx-progress yield), instead of busy
 * progress (spin).
 *
 * -S IPV4: connect as fabricbench's --ucx-sockaddr does instead (UCX's client-server set-up): the parent listens
 * there with ucp_listener_create on a port the system picks and sends the port over the socketpair, the child
 * creates its endpoint to that address, the parent its own from the connection request; both endpoints ask for
 * peer error handling, and the first ping-pong, not a barrier, follows the connection on both sides.
 *
 * Build: cc -O2 -o ucx_reference ucx_reference.c -lucp -lucs
 * Usage: ucx_reference -k latency|bw -s SIZE[,SIZE...] -i ITERATIONS -x WARMUP [-w WINDOW] [-S IPV4] [-Y]
 *        (-F FD: the child)
 */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ACK_BYTES 4
#define TAG_DATA 0x1
#define TAG_ACK 0x2
#define MAX_SIZES 64
#define MAX_WINDOW 4096

static ucp_worker_h worker;
static ucp_ep_h ep;
static int sock;
static int yielding; /* -Y */
static const ucp_request_param_t contig = {.op_attr_mask = 0};

static void die(const char *what, ucs_status_t status)
{
    fprintf(stderr, "ucx_reference: %s: %s\n", what, ucs_status_string(status));
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void put_all(const void *data, size_t n)
{
    const char *p = data;
    while (n) {
        ssize_t k = write(sock, p, n);
        if (k <= 0 && errno != EINTR) {
            perror("ucx_reference: write");
            exit(1);
        }
        if (k > 0)
            p += k, n -= (size_t)k;
    }
}

static void get_all(void *data, size_t n)
{
    char *p = data;
    while (n) {
        ssize_t k = recv(sock, p, n, MSG_DONTWAIT);
        if (k == 0) {
            fprintf(stderr, "ucx_reference: the other process ended\n");
            exit(1);
        }
        if (k > 0)
            p += k, n -= (size_t)k;
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            perror("ucx_reference: recv");
            exit(1);
        }
    }
}

static void barrier(void)
{
    char token = 1;
    put_all(&token, 1);
    get_all(&token, 1);
}

/* One progress call; with -Y, the CPU given up where it found nothing (_ucxloop.c's progress(), yield). */
static void progress(void)
{
    if (!ucp_worker_progress(worker) && yielding)
        sched_yield();
}

static void finish(ucs_status_ptr_t request, const char *what)
{
    if (request == NULL)
        return;
    if (UCS_PTR_IS_ERR(request))
        die(what, UCS_PTR_STATUS(request));
    while (ucp_request_check_status(request) == UCS_INPROGRESS)
        progress();
    ucs_status_t status = ucp_request_check_status(request);
    ucp_request_free(request);
    if (status != UCS_OK)
        die(what, status);
}

static void pingpong(char *send, char *recv, size_t size, int64_t iterations, int initiator, int64_t *times)
{
    int64_t before = now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, recv, size, TAG_DATA, (ucp_tag_t)-1, &contig);
        if (initiator) {
            finish(ucp_tag_send_nbx(ep, send, size, TAG_DATA, &contig), "send");
            finish(r, "receive");
            int64_t t = now_ns();
            times[i] = t - before;
            before = t;
        } else {
            finish(r, "receive");
            finish(ucp_tag_send_nbx(ep, send, size, TAG_DATA, &contig), "send");
        }
    }
}

static void stream(char *send, char *recv, char *control, size_t size, int window, int64_t iterations,
                   int sender, int64_t *times)
{
    static void *posted[MAX_WINDOW];
    int64_t before = now_ns();
    for (int64_t i = 0; i < iterations; i++) {
        if (sender) {
            ucs_status_ptr_t ack = ucp_tag_recv_nbx(worker, control, ACK_BYTES, TAG_ACK, (ucp_tag_t)-1, &contig);
            int n = 0;
            for (int w = 0; w < window; w++) {
                ucs_status_ptr_t r = ucp_tag_send_nbx(ep, send, size, TAG_DATA, &contig);
                if (UCS_PTR_IS_ERR(r))
                    die("send", UCS_PTR_STATUS(r));
                if (r)
                    posted[n++] = r;
            }
            for (int w = 0; w < n; w++)
                finish(posted[w], "send");
            finish(ack, "acknowledgement");
            int64_t t = now_ns();
            times[i] = t - before;
            before = t;
        } else {
            for (int w = 0; w < window; w++)
                posted[w] = ucp_tag_recv_nbx(worker, recv, size, TAG_DATA, (ucp_tag_t)-1, &contig);
            for (int w = 0; w < window; w++)
                finish(posted[w], "receive");
            finish(ucp_tag_send_nbx(ep, control + ACK_BYTES, ACK_BYTES, TAG_ACK, &contig), "acknowledgement");
        }
    }
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void lanes_line(void)
{
    char *text = NULL, line[512] = "";
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ucp_ep_print_info(ep, f);
    fclose(f);
    for (char *at = text; at && (at = strstr(at, "lane[")) != NULL; at++) {
        char *colon = strchr(at, ':');
        if (!colon)
            break;
        char name[96] = "";
        sscanf(colon + 1, " %*d:%95s", name);
        char *dot = strrchr(name, '.');
        if (dot)
            *dot = '\0';
        if (strlen(line) + strlen(name) + 3 < sizeof line)
            strcat(strcat(line, *line ? ", " : ""), name);
    }
    free(text);
    printf("# UCX %s, lanes %s\n", ucp_get_version_string(), line);
}

static ucp_conn_request_h conn_request; /* -S: the first connection request the parent's listener got */

static void on_conn_request(ucp_conn_request_h request, void *arg)
{
    (void)arg;
    if (!conn_request)
        conn_request = request;
}

int main(int argc, char **argv)
{
    const char *kind = "latency", *size_list = "8";
    int64_t iterations = 1000, warmup = 100;
    int window = 16, opt, inherited = -1;
    const char *listen_at = NULL;
    while ((opt = getopt(argc, argv, "k:s:i:x:w:F:S:Y")) != -1) {
        switch (opt) {
        case 'k': kind = optarg; break;
        case 's': size_list = optarg; break;
        case 'i': iterations = atoll(optarg); break;
        case 'x': warmup = atoll(optarg); break;
        case 'w': window = atoi(optarg); break;
        case 'F': inherited = atoi(optarg); break;
        case 'S': listen_at = optarg; break;
        case 'Y': yielding = 1; break;
        default:
            fprintf(stderr, "usage: ucx_reference -k latency|bw -s SIZES -i ITERATIONS -x WARMUP [-w WINDOW] [-S IPV4] "
                            "[-Y]\n");
            return 2;
        }
    }
    size_t sizes[MAX_SIZES], largest = ACK_BYTES;
    int count = 0;
    char *copy = strdup(size_list);
    for (char *part = strtok(copy, ","); part && count < MAX_SIZES; part = strtok(NULL, ","))
        sizes[count++] = strtoull(part, NULL, 10);
    for (int s = 0; s < count; s++)
        largest = sizes[s] > largest ? sizes[s] : largest;
    int bw = !strcmp(kind, "bw");
    if (window < 1 || window > MAX_WINDOW || iterations < 1)
        return 2;

    int pair[2];
    pid_t child = 0;
    int initiator = inherited < 0;
    if (initiator) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair))
            return 1;
        child = fork();
        if (child == 0) {
            char fd[16], **args = calloc((size_t)argc + 3, sizeof *args);
            close(pair[0]);
            snprintf(fd, sizeof fd, "%d", pair[1]);
            for (int a = 0; a < argc; a++)
                args[a] = argv[a];
            args[argc] = "-F", args[argc + 1] = fd;
            execv("/proc/self/exe", args);
            perror("ucx_reference: execv");
            _exit(1);
        }
        sock = pair[0];
        close(pair[1]);
    } else {
        sock = inherited;
    }

    ucp_config_t *config;
    ucp_context_h context;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK)
        die("ucp_config_read", status);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                           .features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_AM | UCP_FEATURE_RMA,
                           .mt_workers_shared = 0};
    if ((status = ucp_init(&params, config, &context)) != UCS_OK)
        die("ucp_init", status);
    ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE, .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((status = ucp_worker_create(context, &wp, &worker)) != UCS_OK)
        die("ucp_worker_create", status);

    size_t bytes = 2 * largest + 64;
    char *buffer;
    if (posix_memalign((void **)&buffer, 4096, bytes))
        return 1;
    memset(buffer, initiator ? 0xA5 : 0x5A, bytes);
    ucp_mem_h memh;
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = buffer, .length = bytes};
    if ((status = ucp_mem_map(context, &mp, &memh)) != UCS_OK)
        die("ucp_mem_map", status);

    ucp_address_t *address = NULL;
    ucp_listener_h listener = NULL;
    if (listen_at) {
        struct sockaddr_in at = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, listen_at, &at.sin_addr) != 1) {
            fprintf(stderr, "ucx_reference: -S %s: not an IPv4 address\n", listen_at);
            return 2;
        }
        ucp_ep_params_t ep_params = {.err_mode = UCP_ERR_HANDLING_MODE_PEER};
        if (initiator) {
            ucp_listener_params_t lp = {
                .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
                .sockaddr = {.addr = (const struct sockaddr *)&at, .addrlen = sizeof at},
                .conn_handler = {.cb = on_conn_request, .arg = NULL}};
            if ((status = ucp_listener_create(worker, &lp, &listener)) != UCS_OK)
                die("ucp_listener_create", status);
            ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
            if ((status = ucp_listener_query(listener, &attr)) != UCS_OK)
                die("ucp_listener_query", status);
            uint64_t port = ntohs(((const struct sockaddr_in *)&attr.sockaddr)->sin_port);
            put_all(&port, sizeof port);
            while (!conn_request)
                progress();
            ep_params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
            ep_params.conn_request = conn_request;
        } else {
            uint64_t port;
            get_all(&port, sizeof port);
            at.sin_port = htons((uint16_t)port);
            ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR
                                   | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
            ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
            ep_params.sockaddr.addr = (const struct sockaddr *)&at;
            ep_params.sockaddr.addrlen = sizeof at;
        }
        if ((status = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK)
            die("ucp_ep_create", status);
    } else {
        size_t length;
        if ((status = ucp_worker_get_address(worker, &address, &length)) != UCS_OK)
            die("ucp_worker_get_address", status);
        uint64_t n = length;
        put_all(&n, sizeof n);
        put_all(address, length);
        uint64_t peer_length;
        get_all(&peer_length, sizeof peer_length);
        if (peer_length > (1 << 16))
            return 1;
        void *peer = malloc(peer_length);
        get_all(peer, peer_length);
        ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer};
        if ((status = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK)
            die("ucp_ep_create", status);
        barrier();
    }
    int64_t wire_up;
    pingpong(buffer, buffer + largest, 1, 1, initiator, &wire_up); /* the endpoint's lanes wired up */
    if (initiator)
        lanes_line();

    int64_t *times = malloc(sizeof(int64_t) * (size_t)(iterations > warmup ? iterations : warmup + 1));
    for (int s = 0; s < count; s++) {
        size_t size = sizes[s];
        char *send = buffer, *recv = buffer + largest, *control = buffer + 2 * largest;
        barrier();
        if (bw)
            stream(send, recv, control, size, window, warmup, initiator, times);
        else
            pingpong(send, recv, size, warmup, initiator, times);
        barrier();
        if (bw)
            stream(send, recv, control, size, window, iterations, initiator, times);
        else
            pingpong(send, recv, size, iterations, initiator, times);
        int cpu = sched_getcpu(), other = -1;
        if (!initiator) {
            put_all(&cpu, sizeof cpu);
            continue;
        }
        get_all(&other, sizeof other);
        int64_t total = 0;
        for (int64_t i = 0; i < iterations; i++)
            total += times[i];
        qsort(times, (size_t)iterations, sizeof *times, by_value);
        int64_t median = times[(iterations + 1) / 2 - 1];
        if (bw) {
            double moved = (double)size * window;
            printf("bw\t%zu\t%lld\t%.3f\t%.3f\t%d\t%d\n", size, (long long)iterations,
                   moved * iterations / total * 1e3, moved / median * 1e3, cpu, other);
        } else {
            printf("latency\t%zu\t%lld\t%.4f\t%.4f\t%d\t%d\n", size, (long long)iterations, median / 2e3,
                   (double)total / iterations / 2e3, cpu, other);
        }
        fflush(stdout);
    }
    barrier();
    ucp_request_param_t close_params = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t closing = ucp_ep_close_nbx(ep, &close_params);
    if (UCS_PTR_IS_PTR(closing)) {
        while (ucp_request_check_status(closing) == UCS_INPROGRESS)
            ucp_worker_progress(worker);
        ucp_request_free(closing);
    }
    ucp_mem_unmap(context, memh);
    if (address)
        ucp_worker_release_address(worker, address);
    if (listener)
        ucp_listener_destroy(listener);
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    if (initiator) {
        int code;
        waitpid(child, &code, 0);
        return WIFEXITED(code) ? WEXITSTATUS(code) : 1;
    }
    return 0;
}

/* The mpi and mpi-rma transports' timed loops, outside the interpreter.
 *
 * A Python loop adds the interpreter's cost to every MPI call, and for small
 * messages that cost is a visible part of what gets reported. Each loop here
 * makes exactly the MPI calls, in the same order and with the same barriers,
 * as the Python loop it replaces (PingPong, Window and Collective in mpi.py,
 * OneSided in mpi/rma.py, whose Python loop covers lock/flush Put and Get), which follow the OSU Micro-Benchmarks. The
 * congestion kernel's loops (fb_canary, fb_congestor: GPCNeT's canary tests
 * and congestor patterns) have no Python twin: mpi_congestion.py runs them in
 * C only.
 *
 * A plain C library, not a Python extension: it must link the very MPI that
 * mpi4py loaded, so mpi_cloop.py builds it with that MPI's compiler wrapper on
 * first use and calls it through ctypes, which releases the GIL for the call
 * (the runner's watchdog thread keeps running). Handles cross as Fortran
 * integers (mpi4py's py2f()) and are converted with MPI_Comm_f2c/MPI_Win_f2c,
 * which works whether the MPI's C handles are integers (MPICH) or pointers
 * (Open MPI).
 *
 * Stamps are fb_runtime.h's (CLOCK_MONOTONIC in ns); each iteration's duration
 * goes to times[i] (at least `iterations` entries), on the ranks that time. Requests are built before the timed region and freed
 * after it, on every path. Every function returns 0, an MPI error code (as the
 * handle's error handler lets them return; mpi4py sets MPI_ERRORS_RETURN), or
 * FB_UNSUPPORTED.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, also under a strict -std=c99/c11 */

#include <limits.h>
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>

#include <mpi.h>

#include "_mpicodes.h"
#include "fb_runtime.h"

#define FB_UNSUPPORTED (-1)
#define FB_MAX_THREADS 128 /* osu_latency_mt's most threads a side */

/* MPI-4's persistent collectives (MPI_Allreduce_init and the rest): an MPI-4 library has them, and so has Open MPI 5,
 * which declares every one of them in its mpi.h although its MPI_VERSION still says 3.1. */
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define FB_PERSISTENT_COLLECTIVES 1
#else
#define FB_PERSISTENT_COLLECTIVES 0
#endif

enum { TAG = 11, ACK_TAG = 12 }; /* mpi.py's tags: data, and the bandwidth window's ack */

/* fb_collective's datatype codes (its operations' are _mpicodes.h's). */
enum { BYTES, FLOATS, CHARS, INTS }; /* mpi/transport.py's C_TYPES: MPI_BYTE, MPI_FLOAT, MPI_CHAR, MPI_INT */

/* Every function keeps its first error in `err` and leaves through `out`, where it frees what it built. */
#define TRY(call)                                 \
    do {                                          \
        if ((err = (call)) != MPI_SUCCESS)        \
            goto out;                             \
    } while (0)

/* Samples back to back, each timed from the previous stamp, so that nothing between two samples goes untimed. */
#define TIMED_BACK_TO_BACK(operation)                        \
    do {                                                     \
        int64_t last = fb_now_ns();                          \
        for (long long i = 0; i < iterations; i++) {         \
            operation;                                       \
            fb_stamp(times, i, &last);                       \
        }                                                    \
    } while (0)

/* One operation per sample, timed alone, then an untimed barrier, as OSU's collectives; none after a barrier,
 * which is one (osu_barrier): `separate` is false there. */
#define TIMED_ALONE(operation)                               \
    do {                                                     \
        for (long long i = 0; i < iterations; i++) {         \
            int64_t start = fb_now_ns();                     \
            operation;                                       \
            fb_stamp(times, i, &start);                      \
            if (separate)                                    \
                TRY(MPI_Barrier(comm));                      \
        }                                                    \
    } while (0)

/* osu_mbw_mr: every window starts after an untimed barrier of all ranks, so that the pairs send together; a sample
 * is the window alone. Otherwise windows run back to back, as osu_bw's. */
#define WINDOWS_TIMED(operation)                             \
    do {                                                     \
        if (synchronized) {                                  \
            for (long long i = 0; i < iterations; i++) {     \
                TRY(MPI_Barrier(comm));                      \
                int64_t start = fb_now_ns();                 \
                operation;                                   \
                fb_stamp(times, i, &start);                  \
            }                                                \
        } else {                                             \
            TIMED_BACK_TO_BACK(operation);                   \
        }                                                    \
    } while (0)

/* The answering side of a window: the same barrier first when synchronized, no stamps. */
#define WINDOWS_UNTIMED(operation)                           \
    do {                                                     \
        for (long long i = 0; i < iterations; i++) {         \
            if (synchronized)                                \
                TRY(MPI_Barrier(comm));                      \
            operation;                                       \
        }                                                    \
    } while (0)

/* The side that only answers: the same calls, no stamps. */
#define UNTIMED(operation)                                   \
    do {                                                     \
        for (long long i = 0; i < iterations; i++) {         \
            operation;                                       \
        }                                                    \
    } while (0)

/* MPI counts are int: a larger size is an error, never a silent truncation. */
static int as_count(long long n, int *count)
{
    if (n < 0 || n > INT_MAX)
        return MPI_ERR_COUNT;
    *count = (int)n;
    return MPI_SUCCESS;
}

/* Frees every request still allocated: the persistent ones, and any that a failed iteration left active. */
static void release(MPI_Request *requests, int n)
{
    for (int r = 0; r < n; r++) {
        if (requests[r] != MPI_REQUEST_NULL)
            MPI_Request_free(&requests[r]);
    }
}

/* `n` requests, each MPI_REQUEST_NULL, so that release() may free whatever a failed loop left; NULL when out of
 * memory. */
static MPI_Request *null_requests(int n)
{
    MPI_Request *requests = malloc((size_t)n * sizeof *requests);
    for (int r = 0; requests != NULL && r < n; r++)
        requests[r] = MPI_REQUEST_NULL;
    return requests;
}

int fb_pingpong(MPI_Fint comm_handle, int peer, int initiator, int persistent, void *send_buf, void *recv_buf,
                long long size, long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    /* The reply's receive first: the initiator posts it with its send, one Startall and one Waitall a round trip. */
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request *recv = &requests[0], *send = &requests[1];
    int count, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    if (persistent) {
        TRY(MPI_Recv_init(recv_buf, count, MPI_BYTE, peer, TAG, comm, recv));
        TRY(MPI_Send_init(send_buf, count, MPI_BYTE, peer, TAG, comm, send));
        if (initiator)
            TIMED_BACK_TO_BACK(TRY(MPI_Startall(2, requests)); TRY(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE)));
        else
            UNTIMED(TRY(MPI_Start(recv)); TRY(MPI_Wait(recv, MPI_STATUS_IGNORE));
                    TRY(MPI_Start(send)); TRY(MPI_Wait(send, MPI_STATUS_IGNORE)));
    } else if (initiator) {
        TIMED_BACK_TO_BACK(TRY(MPI_Send(send_buf, count, MPI_BYTE, peer, TAG, comm));
                           TRY(MPI_Recv(recv_buf, count, MPI_BYTE, peer, TAG, comm, MPI_STATUS_IGNORE)));
    } else {
        UNTIMED(TRY(MPI_Recv(recv_buf, count, MPI_BYTE, peer, TAG, comm, MPI_STATUS_IGNORE));
                TRY(MPI_Send(send_buf, count, MPI_BYTE, peer, TAG, comm)));
    }
out:
    release(requests, 2);
    return err;
}

int fb_window(MPI_Fint comm_handle, int peer, int initiator, int both_ways, int persistent, int synchronized,
              void *send_buf, void *recv_buf, void *ack_buf, long long size, int window, long long iterations,
              int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    int timed = initiator || both_ways; /* the one-way receiver only answers */
    int receives = (!initiator || both_ways) ? window : 0;
    int sends = timed ? window : 0;
    /* Receives before sends, as osu_bibw posts them; one way, the ack's request last. */
    int total = receives + sends + !both_ways;
    MPI_Request *requests, *ack;
    int count, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    if (window < 1 || window > (INT_MAX - 1) / 2)
        return MPI_ERR_COUNT;
    requests = null_requests(total);
    if (requests == NULL)
        return MPI_ERR_NO_MEM;
    ack = &requests[total - 1];
    if (persistent) {
        for (int r = 0; r < receives; r++)
            TRY(MPI_Recv_init(recv_buf, count, MPI_BYTE, peer, TAG, comm, &requests[r]));
        for (int s = receives; s < receives + sends; s++)
            TRY(MPI_Send_init(send_buf, count, MPI_BYTE, peer, TAG, comm, &requests[s]));
        if (!both_ways)
            TRY(initiator ? MPI_Recv_init(ack_buf, 1, MPI_BYTE, peer, ACK_TAG, comm, ack)
                          : MPI_Send_init(ack_buf, 1, MPI_BYTE, peer, ACK_TAG, comm, ack));
        if (timed) /* the sender pre-posts the ack's receive with its window: two calls a window */
            WINDOWS_TIMED(TRY(MPI_Startall(total, requests));
                          TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE)));
        else
            WINDOWS_UNTIMED(TRY(MPI_Startall(window, requests));
                            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
                            TRY(MPI_Start(ack)); TRY(MPI_Wait(ack, MPI_STATUS_IGNORE)));
    } else if (both_ways) {
        WINDOWS_TIMED(
            for (int r = 0; r < window; r++)
                TRY(MPI_Irecv(recv_buf, count, MPI_BYTE, peer, TAG, comm, &requests[r]));
            for (int s = window; s < 2 * window; s++)
                TRY(MPI_Isend(send_buf, count, MPI_BYTE, peer, TAG, comm, &requests[s]));
            TRY(MPI_Waitall(2 * window, requests, MPI_STATUSES_IGNORE)));
    } else if (initiator) {
        WINDOWS_TIMED(
            for (int s = 0; s < window; s++)
                TRY(MPI_Isend(send_buf, count, MPI_BYTE, peer, TAG, comm, &requests[s]));
            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
            TRY(MPI_Recv(ack_buf, 1, MPI_BYTE, peer, ACK_TAG, comm, MPI_STATUS_IGNORE)));
    } else {
        WINDOWS_UNTIMED(
            for (int r = 0; r < window; r++)
                TRY(MPI_Irecv(recv_buf, count, MPI_BYTE, peer, TAG, comm, &requests[r]));
            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
            TRY(MPI_Send(ack_buf, 1, MPI_BYTE, peer, ACK_TAG, comm)));
    }
out:
    release(requests, total);
    free(requests);
    return err;
}

/* The v-variants' arguments, as OSU 7.4 sets them: every rank's block holds `count` elements of `type` and block r
 * starts at r * count (MPI_Alltoallw: r * count * the type's size, in bytes, and `type` for every block). */
typedef struct {
    int *counts, *displs, *byte_displs;
    MPI_Datatype *types;
} Layout;

static int is_v_variant(int op)
{
    return op == OP_GATHERV || op == OP_SCATTERV || op == OP_ALLGATHERV || op == OP_ALLTOALLV || op == OP_ALLTOALLW;
}

static void layout_free(Layout *layout)
{
    free(layout->counts);
    free(layout->displs);
    free(layout->byte_displs);
    free(layout->types);
}

/* Fills `layout` for `op` on `comm` (nothing for an operation that takes no counts); a displacement past INT_MAX
 * is MPI_ERR_COUNT. The caller frees it with layout_free, on every path. */
static int layout_of(MPI_Comm comm, int op, MPI_Datatype type, int count, Layout *layout)
{
    int ranks, type_size, err;
    if (!is_v_variant(op))
        return MPI_SUCCESS;
    if ((err = MPI_Comm_size(comm, &ranks)) != MPI_SUCCESS || (err = MPI_Type_size(type, &type_size)) != MPI_SUCCESS)
        return err;
    if ((long long)ranks * count * type_size > INT_MAX)
        return MPI_ERR_COUNT;
    layout->counts = malloc((size_t)ranks * sizeof *layout->counts);
    layout->displs = malloc((size_t)ranks * sizeof *layout->displs);
    layout->byte_displs = malloc((size_t)ranks * sizeof *layout->byte_displs);
    layout->types = malloc((size_t)ranks * sizeof *layout->types);
    if (!layout->counts || !layout->displs || !layout->byte_displs || !layout->types)
        return MPI_ERR_NO_MEM;
    for (int r = 0; r < ranks; r++) {
        layout->counts[r] = count;
        layout->displs[r] = r * count;
        layout->byte_displs[r] = r * count * type_size;
        layout->types[r] = type;
    }
    return MPI_SUCCESS;
}

#if FB_PERSISTENT_COLLECTIVES
/* The MPI-4 persistent form of collective `op`, built once: each sample is then one MPI_Start and one MPI_Wait. */
static int collective_init(MPI_Comm comm, int op, MPI_Datatype type, void *send_buf, void *recv_buf, int count,
                           int root, const Layout *v, MPI_Request *request)
{
    switch (op) {
    case OP_GATHER:
        return MPI_Gather_init(send_buf, count, type, recv_buf, count, type, root, comm, MPI_INFO_NULL, request);
    case OP_GATHERV:
        return MPI_Gatherv_init(send_buf, count, type, recv_buf, v->counts, v->displs, type, root, comm,
                                MPI_INFO_NULL, request);
    case OP_SCATTER:
        return MPI_Scatter_init(send_buf, count, type, recv_buf, count, type, root, comm, MPI_INFO_NULL, request);
    case OP_SCATTERV:
        return MPI_Scatterv_init(send_buf, v->counts, v->displs, type, recv_buf, count, type, root, comm,
                                 MPI_INFO_NULL, request);
    case OP_ALLGATHERV:
        return MPI_Allgatherv_init(send_buf, count, type, recv_buf, v->counts, v->displs, type, comm, MPI_INFO_NULL,
                                   request);
    case OP_ALLTOALLV:
        return MPI_Alltoallv_init(send_buf, v->counts, v->displs, type, recv_buf, v->counts, v->displs, type, comm,
                                  MPI_INFO_NULL, request);
    case OP_ALLTOALLW:
        return MPI_Alltoallw_init(send_buf, v->counts, v->byte_displs, v->types, recv_buf, v->counts,
                                  v->byte_displs, v->types, comm, MPI_INFO_NULL, request);
    case OP_ALLREDUCE:
        return MPI_Allreduce_init(send_buf, recv_buf, count, type, MPI_SUM, comm, MPI_INFO_NULL, request);
    case OP_ALLGATHER:
        return MPI_Allgather_init(send_buf, count, type, recv_buf, count, type, comm, MPI_INFO_NULL, request);
    case OP_ALLTOALL:
        return MPI_Alltoall_init(send_buf, count, type, recv_buf, count, type, comm, MPI_INFO_NULL, request);
    case OP_BCAST:
        return MPI_Bcast_init(send_buf, count, type, root, comm, MPI_INFO_NULL, request);
    case OP_REDUCE:
        return MPI_Reduce_init(send_buf, recv_buf, count, type, MPI_SUM, root, comm, MPI_INFO_NULL, request);
    case OP_REDUCE_SCATTER:
    case OP_REDUCE_SCATTER_BLOCK: /* the same call; the block's size is the caller's (see collectives/) */
        return MPI_Reduce_scatter_block_init(send_buf, recv_buf, count, type, MPI_SUM, comm, MPI_INFO_NULL, request);
    case OP_BARRIER:
        return MPI_Barrier_init(comm, MPI_INFO_NULL, request);
    default:
        return MPI_ERR_ARG;
    }
}
#endif

/* `mode`: COLL_PERSISTENT, and COLL_SEND_IN_PLACE or COLL_RECV_IN_PLACE where this rank passes MPI_IN_PLACE for
 * that buffer (the collective's in-place form; mpi/transport.py says which, by the collective and the rank). */
int fb_collective(MPI_Fint comm_handle, int op, int mode, int datatype, void *send_buf, void *recv_buf,
                  long long count, int root, long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    int persistent = mode & COLL_PERSISTENT;
    if (mode & COLL_SEND_IN_PLACE)
        send_buf = MPI_IN_PLACE;
    if (mode & COLL_RECV_IN_PLACE)
        recv_buf = MPI_IN_PLACE;
    MPI_Request request = MPI_REQUEST_NULL;
    Layout v = {NULL, NULL, NULL, NULL}; /* the v-variants' counts and displacements, built before timing */
    MPI_Datatype type = datatype == FLOATS ? MPI_FLOAT
                        : datatype == CHARS ? MPI_CHAR
                        : datatype == INTS  ? MPI_INT
                                            : MPI_BYTE;
    int separate = op != OP_BARRIER; /* the untimed barrier between samples */
    int n, err = as_count(count, &n);
    if (err != MPI_SUCCESS)
        return err;
    if (datatype < BYTES || datatype > INTS)
        return MPI_ERR_TYPE;
    TRY(layout_of(comm, op, type, n, &v));
    if (persistent) {
#if FB_PERSISTENT_COLLECTIVES
        TRY(collective_init(comm, op, type, send_buf, recv_buf, n, root, &v, &request));
        TIMED_ALONE(TRY(MPI_Start(&request)); TRY(MPI_Wait(&request, MPI_STATUS_IGNORE)));
#else
        err = FB_UNSUPPORTED;
        goto out;
#endif
    } else {
        /* One loop per operation, so that the timed region holds the call and nothing else. */
        switch (op) {
        case OP_ALLREDUCE:
            TIMED_ALONE(TRY(MPI_Allreduce(send_buf, recv_buf, n, type, MPI_SUM, comm)));
            break;
        case OP_ALLGATHER:
            TIMED_ALONE(TRY(MPI_Allgather(send_buf, n, type, recv_buf, n, type, comm)));
            break;
        case OP_ALLTOALL:
            TIMED_ALONE(TRY(MPI_Alltoall(send_buf, n, type, recv_buf, n, type, comm)));
            break;
        case OP_BCAST:
            TIMED_ALONE(TRY(MPI_Bcast(send_buf, n, type, root, comm)));
            break;
        case OP_REDUCE:
            TIMED_ALONE(TRY(MPI_Reduce(send_buf, recv_buf, n, type, MPI_SUM, root, comm)));
            break;
        case OP_REDUCE_SCATTER:
        case OP_REDUCE_SCATTER_BLOCK: /* the same call; the block's size is the caller's (see collectives/) */
            TIMED_ALONE(TRY(MPI_Reduce_scatter_block(send_buf, recv_buf, n, type, MPI_SUM, comm)));
            break;
        case OP_BARRIER:
            TIMED_ALONE(TRY(MPI_Barrier(comm)));
            break;
        case OP_GATHER:
            TIMED_ALONE(TRY(MPI_Gather(send_buf, n, type, recv_buf, n, type, root, comm)));
            break;
        case OP_GATHERV:
            TIMED_ALONE(TRY(MPI_Gatherv(send_buf, n, type, recv_buf, v.counts, v.displs, type, root, comm)));
            break;
        case OP_SCATTER:
            TIMED_ALONE(TRY(MPI_Scatter(send_buf, n, type, recv_buf, n, type, root, comm)));
            break;
        case OP_SCATTERV:
            TIMED_ALONE(TRY(MPI_Scatterv(send_buf, v.counts, v.displs, type, recv_buf, n, type, root, comm)));
            break;
        case OP_ALLGATHERV:
            TIMED_ALONE(TRY(MPI_Allgatherv(send_buf, n, type, recv_buf, v.counts, v.displs, type, comm)));
            break;
        case OP_ALLTOALLV:
            TIMED_ALONE(
                TRY(MPI_Alltoallv(send_buf, v.counts, v.displs, type, recv_buf, v.counts, v.displs, type, comm)));
            break;
        case OP_ALLTOALLW:
            TIMED_ALONE(TRY(MPI_Alltoallw(send_buf, v.counts, v.byte_displs, v.types, recv_buf, v.counts,
                                          v.byte_displs, v.types, comm)));
            break;
        default:
            err = MPI_ERR_ARG;
            goto out;
        }
    }
out:
    release(&request, 1); /* before the layout: a persistent request holds on to its arrays */
    layout_free(&v);
    return err;
}

/* fb_pingpong_mt: osu_latency_mt. Rank `initiator` runs `threads` sender threads, its peer `threads` receiver
 * threads (each side's own count, OSU's -t SENDERS:RECEIVERS); thread k takes iterations k, k + threads, ... of the
 * run. A sender thread's iteration is MPI_Send then MPI_Recv, stamped alone into times[i]; a receiver's MPI_Recv then
 * MPI_Send. With one sender thread every message is tagged 1 and every answer 2, so that any receiver thread may
 * take any message (OSU's tags); with more, both are tagged with the iteration, so that each reaches its own
 * thread. Thread k has its own buffers: bufs[2k] to send from, bufs[2k + 1] to receive into. MPI must run at
 * MPI_THREAD_MULTIPLE (FB_UNSUPPORTED otherwise). */
typedef struct {
    MPI_Comm comm;
    int peer, initiator, first, stride, senders, count, err;
    void *send_buf, *recv_buf;
    long long iterations;
    int64_t *times;
} mt_part;

static void *mt_thread(void *arg)
{
    mt_part *p = arg;
    int err = MPI_SUCCESS;
    for (long long i = p->first; i < p->iterations && err == MPI_SUCCESS; i += p->stride) {
        int ping = p->senders > 1 ? (int)(i % 32768) : 1, pong = p->senders > 1 ? ping : 2;
        if (p->initiator) {
            int64_t start = fb_now_ns();
            err = MPI_Send(p->send_buf, p->count, MPI_BYTE, p->peer, ping, p->comm);
            if (err == MPI_SUCCESS)
                err = MPI_Recv(p->recv_buf, p->count, MPI_BYTE, p->peer, pong, p->comm, MPI_STATUS_IGNORE);
            fb_stamp(p->times, i, &start);
        } else {
            err = MPI_Recv(p->recv_buf, p->count, MPI_BYTE, p->peer, ping, p->comm, MPI_STATUS_IGNORE);
            if (err == MPI_SUCCESS)
                err = MPI_Send(p->send_buf, p->count, MPI_BYTE, p->peer, pong, p->comm);
        }
    }
    p->err = err;
    return NULL;
}

int fb_pingpong_mt(MPI_Fint comm_handle, int peer, int initiator, int threads, int senders, void **bufs,
                   long long size, long long iterations, int64_t *times)
{
    pthread_t ids[FB_MAX_THREADS];
    mt_part parts[FB_MAX_THREADS];
    int provided, started = 0, count, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    if (threads < 1 || threads > FB_MAX_THREADS || senders < 1)
        return MPI_ERR_ARG;
    if ((err = MPI_Query_thread(&provided)) != MPI_SUCCESS)
        return err;
    if (provided != MPI_THREAD_MULTIPLE)
        return FB_UNSUPPORTED;
    for (int k = 0; k < threads; k++) {
        parts[k] = (mt_part){MPI_Comm_f2c(comm_handle), peer, initiator, k, threads, senders, count, MPI_SUCCESS,
                             bufs[2 * k], bufs[2 * k + 1], iterations, times};
        if (pthread_create(&ids[k], NULL, mt_thread, &parts[k]) != 0) {
            err = MPI_ERR_OTHER;
            break;
        }
        started++;
    }
    for (int k = 0; k < started; k++) {
        pthread_join(ids[k], NULL);
        if (err == MPI_SUCCESS)
            err = parts[k].err;
    }
    return err;
}

/* fb_pingpong_synced: osu_latency_mp's loop, a barrier of `comm` before every round trip, each round trip stamped
 * alone (the barrier untimed). */
int fb_pingpong_synced(MPI_Fint comm_handle, int peer, int initiator, void *send_buf, void *recv_buf, long long size,
                       long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    int count, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    for (long long i = 0; i < iterations; i++) {
        TRY(MPI_Barrier(comm));
        if (initiator) {
            int64_t start = fb_now_ns();
            TRY(MPI_Send(send_buf, count, MPI_BYTE, peer, TAG, comm));
            TRY(MPI_Recv(recv_buf, count, MPI_BYTE, peer, TAG, comm, MPI_STATUS_IGNORE));
            fb_stamp(times, i, &start);
        } else {
            TRY(MPI_Recv(recv_buf, count, MPI_BYTE, peer, TAG, comm, MPI_STATUS_IGNORE));
            TRY(MPI_Send(send_buf, count, MPI_BYTE, peer, TAG, comm));
        }
    }
out:
    return err;
}

/* osu_latency_mp's forked processes: `n` children of this rank that wait, touching nothing (no MPI, no Python),
 * until they are killed; their ids in pids. Returns how many were forked. */
int fb_fork_idle(int n, int *pids)
{
    int forked = 0;
    for (; forked < n; forked++) {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            for (;;)
                pause();
        }
        pids[forked] = (int)pid;
    }
    return forked;
}

/* fb_rma_sync: OSU's one-sided tests (osu_put_latency, osu_get_latency, osu_put_bw, osu_get_bw, osu_put_bibw,
 * osu_acc_latency, osu_get_acc_latency, osu_fop_latency, osu_cas_latency) under each synchronisation OSU's -s names.
 * One operation is `op` (_mpicodes.h's RMA_OP_*): Put, Get, Accumulate and Get_accumulate of `size` bytes as
 * MPI_SIGNED_CHAR (OSU's MPI_CHAR; MPI defines MPI_SUM on the signed char type), Fetch_and_op (MPI_SUM) and
 * Compare_and_swap of one element of `atomic_type` (C_TYPES' code: OSU's -T MPI_CHAR as MPI_SIGNED_CHAR, MPI_INT,
 * MPI_FLOAT; BYTES: an MPI_INT64_T, an RDMA atomic's 8 bytes). A sample is `per_epoch` operations (a window, or 1)
 * and what closes them:
 *
 *   lock          lock (shared; exclusive for Get_accumulate, as OSU), operations, unlock
 *   flush         operations, flush, inside one lock for the whole loop (opened by one untimed operation)
 *   flush_local   as flush, with MPI_Win_flush_local
 *   lock_all      lock_all, operations, unlock_all
 *   pscw          round trip (latency): start, operations, complete, then post and wait for the peer's;
 *                 both ways (bibw): post, start, operations, complete, wait on both sides;
 *                 one way (bw): start, operations, complete; the target posts and waits
 *   fence         round trip: fence, operations, fence, then a fence around the peer's; both ways: fence,
 *                 operations, fence on both sides; one way: fence, operations, fence; the target fences twice
 *
 * A round trip's sample is halved (OSU divides by 2 there), rounded down to the nanosecond. The initiator times;
 * the target of pscw and fence makes its part of every sample untimed, and of the passive ones nothing. */
typedef struct {
    int op;
    void *origin, *result, *compare;
    int count;
    MPI_Datatype type;
    int peer;
    MPI_Aint disp;
    MPI_Win win;
} rma_call;

static int rma_once(const rma_call *c)
{
    switch (c->op) {
    case RMA_OP_PUT:
        return MPI_Put(c->origin, c->count, c->type, c->peer, c->disp, c->count, c->type, c->win);
    case RMA_OP_GET:
        return MPI_Get(c->result, c->count, c->type, c->peer, c->disp, c->count, c->type, c->win);
    case RMA_OP_ACC:
        return MPI_Accumulate(c->origin, c->count, c->type, c->peer, c->disp, c->count, c->type, MPI_SUM, c->win);
    case RMA_OP_GET_ACC:
        return MPI_Get_accumulate(c->origin, c->count, c->type, c->result, c->count, c->type, c->peer, c->disp,
                                  c->count, c->type, MPI_SUM, c->win);
    case RMA_OP_FOP:
        return MPI_Fetch_and_op(c->origin, c->result, c->type, c->peer, c->disp, MPI_SUM, c->win);
    case RMA_OP_CAS:
        return MPI_Compare_and_swap(c->origin, c->compare, c->result, c->type, c->peer, c->disp, c->win);
    default:
        return MPI_ERR_ARG;
    }
}

/* `n` operations, the first error returned. */
static int rma_ops(const rma_call *c, int n)
{
    int err = MPI_SUCCESS;
    for (int k = 0; k < n && err == MPI_SUCCESS; k++)
        err = rma_once(c);
    return err;
}

/* One sample's epoch of an active synchronisation, on either side. `mine`: this side's operations (0 for a one-way
 * target). */
static int rma_active_epoch(const rma_call *c, int sync, int round_trip, int both_ways, int initiator, int mine,
                            MPI_Group peer_group)
{
    int err;
    if (sync == RMA_SYNC_FENCE) {
        if (round_trip && !initiator) { /* the initiator's epoch, then ours */
            if ((err = MPI_Win_fence(0, c->win)) || (err = MPI_Win_fence(0, c->win)))
                return err;
            if ((err = rma_ops(c, mine)))
                return err;
            return MPI_Win_fence(0, c->win);
        }
        if ((err = MPI_Win_fence(0, c->win)) || (err = rma_ops(c, mine)) || (err = MPI_Win_fence(0, c->win)))
            return err;
        return round_trip ? MPI_Win_fence(0, c->win) : MPI_SUCCESS;
    }
    /* post/start/complete/wait */
    if (both_ways) {
        if ((err = MPI_Win_post(peer_group, 0, c->win)) || (err = MPI_Win_start(peer_group, 0, c->win)))
            return err;
        if ((err = rma_ops(c, mine)) || (err = MPI_Win_complete(c->win)))
            return err;
        return MPI_Win_wait(c->win);
    }
    if (round_trip && !initiator) {
        if ((err = MPI_Win_post(peer_group, 0, c->win)) || (err = MPI_Win_wait(c->win)))
            return err;
        if ((err = MPI_Win_start(peer_group, 0, c->win)) || (err = rma_ops(c, mine)))
            return err;
        return MPI_Win_complete(c->win);
    }
    if (!initiator) /* one way's target */
        return (err = MPI_Win_post(peer_group, 0, c->win)) ? err : MPI_Win_wait(c->win);
    if ((err = MPI_Win_start(peer_group, 0, c->win)) || (err = rma_ops(c, mine)) || (err = MPI_Win_complete(c->win)))
        return err;
    if (round_trip && ((err = MPI_Win_post(peer_group, 0, c->win)) || (err = MPI_Win_wait(c->win))))
        return err;
    return MPI_SUCCESS;
}

int fb_rma_sync(MPI_Fint win_handle, int peer, int initiator, int op, int sync, int round_trip, int both_ways,
                int atomic_type, void *origin_buf, void *result_buf, void *compare_buf, long long size, long long disp, int per_epoch,
                long long iterations, int64_t *times)
{
    rma_call c = {op, origin_buf, result_buf, compare_buf, 0, MPI_SIGNED_CHAR, peer, (MPI_Aint)disp,
                  MPI_Win_f2c(win_handle)};
    int passive = sync == RMA_SYNC_LOCK || sync == RMA_SYNC_FLUSH || sync == RMA_SYNC_FLUSH_LOCAL
                  || sync == RMA_SYNC_LOCK_ALL;
    int lock_type = op == RMA_OP_GET_ACC ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED;
    int mine = (initiator || round_trip || both_ways) ? per_epoch : 0;
    int locked = 0, err = MPI_SUCCESS, unlocked;
    MPI_Group window_group = MPI_GROUP_NULL, peer_group = MPI_GROUP_NULL;
    if (op == RMA_OP_FOP || op == RMA_OP_CAS) {
        c.type = atomic_type == CHARS  ? MPI_SIGNED_CHAR
                 : atomic_type == INTS   ? MPI_INT
                 : atomic_type == FLOATS ? MPI_FLOAT
                                         : MPI_INT64_T;
        c.count = 1;
    } else if ((err = as_count(size, &c.count)) != MPI_SUCCESS) {
        return err;
    }
    if (per_epoch < 1 || atomic_type < BYTES || atomic_type > INTS || op < RMA_OP_PUT || op > RMA_OP_CAS || sync < RMA_SYNC_LOCK || sync > RMA_SYNC_FENCE)
        return MPI_ERR_ARG;
    if (passive) {
        if (!initiator)
            return MPI_SUCCESS; /* the target does nothing while it is timed, which is the point of RMA */
        switch (sync) {
        case RMA_SYNC_LOCK:
            TIMED_BACK_TO_BACK(TRY(MPI_Win_lock(lock_type, peer, 0, c.win)); TRY(rma_ops(&c, per_epoch));
                               TRY(MPI_Win_unlock(peer, c.win)));
            break;
        case RMA_SYNC_LOCK_ALL:
            TIMED_BACK_TO_BACK(TRY(MPI_Win_lock_all(0, c.win)); TRY(rma_ops(&c, per_epoch));
                               TRY(MPI_Win_unlock_all(c.win)));
            break;
        default:
            TRY(MPI_Win_lock(lock_type, peer, 0, c.win));
            locked = 1;
            /* One untimed operation opens the epoch: a library may take the lock lazily (as fb_rma). */
            TRY(rma_once(&c));
            TRY(MPI_Win_flush(peer, c.win));
            if (sync == RMA_SYNC_FLUSH)
                TIMED_BACK_TO_BACK(TRY(rma_ops(&c, per_epoch)); TRY(MPI_Win_flush(peer, c.win)));
            else
                TIMED_BACK_TO_BACK(TRY(rma_ops(&c, per_epoch)); TRY(MPI_Win_flush_local(peer, c.win)));
        }
        goto out;
    }
    if (sync == RMA_SYNC_PSCW) {
        TRY(MPI_Win_get_group(c.win, &window_group));
        TRY(MPI_Group_incl(window_group, 1, &peer, &peer_group));
    }
    if (initiator) {
        int64_t last = fb_now_ns();
        for (long long i = 0; i < iterations; i++) {
            TRY(rma_active_epoch(&c, sync, round_trip, both_ways, 1, mine, peer_group));
            fb_stamp(times, i, &last);
            if (round_trip)
                times[i] /= 2;
        }
    } else {
        UNTIMED(TRY(rma_active_epoch(&c, sync, round_trip, both_ways, 0, mine, peer_group)));
    }
out:
    if (locked) {
        unlocked = MPI_Win_unlock(peer, c.win);
        err = err != MPI_SUCCESS ? err : unlocked;
    }
    if (peer_group != MPI_GROUP_NULL)
        MPI_Group_free(&peer_group);
    if (window_group != MPI_GROUP_NULL)
        MPI_Group_free(&window_group);
    return err;
}

/* The congestion kernel (mpi_congestion.py). Codes of the canary tests and congestor patterns, and the tags of the
 * ring's two directions and of the start/stop messages between the canary leader and each group's first rank. */
enum { RR_LATENCY, RR_BW, CANARY_ALLREDUCE };
enum { ALL_TO_ALL, INCAST, PUT_INCAST, GET_BCAST };
enum { FROM_LEFT = 21, FROM_RIGHT = 22, STARTED_TAG = 23, STOP_TAG = 24 };

/* One canary rank's samples of `test` on `comm` (the canaries, ranked in ring order; `left` and `right` its
 * neighbours there, equal with two canaries). rr-latency: one receive from and one send to each neighbour, then
 * Waitall. rr-bw: a barrier, then `window` receives from and sends to each neighbour (the receives of one direction
 * share its buffer, as osu_bibw's), then Waitall. allreduce: MPI_Allreduce of size/8 int64 sums. Samples back to
 * back. A message is tagged by the side it arrives from, so that with two canaries each lands where it belongs.
 *
 * `congested`: congestors run meanwhile. Then the leader (the only canary with `n_firsts` > 0) first receives
 * "started" from every group's first rank on `signal_handle` (a Dup of the transport's communicator), the canaries
 * meet at a barrier, sample, meet again, and the leader sends "stop" to every first rank: every sample is taken
 * while every group runs. In the isolated phase nothing waits. */
int fb_canary(MPI_Fint comm_handle, MPI_Fint signal_handle, int test, int left, int right, void *send_left,
              void *send_right, void *recv_left, void *recv_right, long long size, int window, int congested,
              const int *firsts, int n_firsts, void *signal_buf, long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle), signal = MPI_Comm_f2c(signal_handle);
    int per_side = test == RR_BW ? window : 1;
    int total = 4 * per_side; /* receives from left, from right, then sends to left, to right */
    MPI_Request *requests, *from_left, *from_right, *to_left, *to_right;
    int count, err = as_count(test == CANARY_ALLREDUCE ? size / 8 : size, &count);
    if (err != MPI_SUCCESS)
        return err;
    if (per_side < 1 || per_side > INT_MAX / 4)
        return MPI_ERR_COUNT;
    requests = null_requests(total);
    if (requests == NULL)
        return MPI_ERR_NO_MEM;
    from_left = requests, from_right = from_left + per_side, to_left = from_right + per_side;
    to_right = to_left + per_side;
    if (congested) {
        for (int g = 0; g < n_firsts; g++)
            TRY(MPI_Recv(signal_buf, 1, MPI_BYTE, firsts[g], STARTED_TAG, signal, MPI_STATUS_IGNORE));
        TRY(MPI_Barrier(comm));
    }
    switch (test) {
    case RR_LATENCY:
        TIMED_BACK_TO_BACK(TRY(MPI_Irecv(recv_left, count, MPI_BYTE, left, FROM_LEFT, comm, from_left));
                           TRY(MPI_Irecv(recv_right, count, MPI_BYTE, right, FROM_RIGHT, comm, from_right));
                           TRY(MPI_Isend(send_left, count, MPI_BYTE, left, FROM_RIGHT, comm, to_left));
                           TRY(MPI_Isend(send_right, count, MPI_BYTE, right, FROM_LEFT, comm, to_right));
                           TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE)));
        break;
    case RR_BW:
        TIMED_BACK_TO_BACK(
            TRY(MPI_Barrier(comm));
            for (int w = 0; w < window; w++) {
                TRY(MPI_Irecv(recv_left, count, MPI_BYTE, left, FROM_LEFT, comm, &from_left[w]));
                TRY(MPI_Irecv(recv_right, count, MPI_BYTE, right, FROM_RIGHT, comm, &from_right[w]));
            }
            for (int w = 0; w < window; w++) {
                TRY(MPI_Isend(send_left, count, MPI_BYTE, left, FROM_RIGHT, comm, &to_left[w]));
                TRY(MPI_Isend(send_right, count, MPI_BYTE, right, FROM_LEFT, comm, &to_right[w]));
            }
            TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE)));
        break;
    case CANARY_ALLREDUCE:
        TIMED_BACK_TO_BACK(TRY(MPI_Allreduce(send_left, recv_left, count, MPI_INT64_T, MPI_SUM, comm)));
        break;
    default:
        err = MPI_ERR_ARG;
        goto out;
    }
    if (congested) {
        TRY(MPI_Barrier(comm));
        for (int g = 0; g < n_firsts; g++)
            TRY(MPI_Send(signal_buf, 1, MPI_BYTE, firsts[g], STOP_TAG, signal));
    }
out:
    release(requests, total);
    free(requests);
    return err;
}

/* One iteration of a congestor pattern on `comm` (the group, its first rank 0). */
static int congest_once(int pattern, MPI_Comm comm, MPI_Win win, int rank, int n, void *send_buf, void *recv_buf,
                        int count, long long size, MPI_Request *requests)
{
    int err = MPI_SUCCESS;
    switch (pattern) {
    case ALL_TO_ALL:
        return MPI_Alltoall(send_buf, count, MPI_BYTE, recv_buf, count, MPI_BYTE, comm);
    case INCAST:
        if (rank > 0)
            return MPI_Send(send_buf, count, MPI_BYTE, 0, TAG, comm);
        for (int i = 1; i < n; i++) {
            err = MPI_Irecv((char *)recv_buf + (i - 1) * size, count, MPI_BYTE, i, TAG, comm, &requests[i - 1]);
            if (err != MPI_SUCCESS)
                return err;
        }
        return MPI_Waitall(n - 1, requests, MPI_STATUSES_IGNORE);
    case PUT_INCAST: /* the first rank is only the target */
        if (rank > 0 && (err = MPI_Put(send_buf, count, MPI_BYTE, 0, (MPI_Aint)(rank - 1) * size, count, MPI_BYTE,
                                       win)) == MPI_SUCCESS)
            err = MPI_Win_flush(0, win);
        return err;
    case GET_BCAST:
        if (rank > 0 && (err = MPI_Get(recv_buf, count, MPI_BYTE, 0, 0, count, MPI_BYTE, win)) == MPI_SUCCESS)
            err = MPI_Win_flush(0, win);
        return err;
    default:
        return MPI_ERR_ARG;
    }
}

/* A congestor rank's part: `pattern` again and again on `comm` until the canary leader says stop.
 *
 * The group agrees after its first iteration and then after every `agree_every`-th (iterations 1, 1 + k,
 * 1 + 2k, ...): the first rank tests its receive of "stop" (posted when the call begins) and an MPI_Allreduce
 * (MAX) of that flag gives every rank the same answer, so all leave after the same iteration and no collective,
 * message or flush is left half done. The first agreement also proves that every rank of the group has finished
 * an iteration: the first rank then sends "started" to the leader. One-sided patterns hold one shared lock on the
 * first rank's window for the whole call.
 *
 * stats[0]: the iterations this rank finished after its first, up to the agreement that stopped it; stats[1]: the ns
 * from the end of its first iteration (its entry into the first agreement) to the end of the agreement that stopped
 * it. That span holds every canary sample on every rank of the group, by causality: each rank enters the first
 * agreement before it can end anywhere, before "started" is sent; and it leaves the last one after the first rank
 * has received "stop", sent after the last sample. */
int fb_congestor(MPI_Fint comm_handle, MPI_Fint signal_handle, MPI_Fint win_handle, int pattern, int leader,
                 void *send_buf, void *recv_buf, void *signal_buf, long long size, int agree_every,
                 long long *stats)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle), signal = MPI_Comm_f2c(signal_handle);
    MPI_Win win = MPI_Win_f2c(win_handle);
    MPI_Request stop = MPI_REQUEST_NULL, *requests = NULL;
    int one_sided = pattern == PUT_INCAST || pattern == GET_BCAST;
    int rank, n = 0, locked = 0, stop_seen = 0, decision = 0, unlocked;
    long long done = 0, started_ns = 0;
    int count, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    if (agree_every < 1)
        return MPI_ERR_ARG;
    TRY(MPI_Comm_rank(comm, &rank));
    TRY(MPI_Comm_size(comm, &n));
    requests = null_requests(n);
    if (requests == NULL)
        return MPI_ERR_NO_MEM;
    if (rank == 0)
        TRY(MPI_Irecv((char *)signal_buf + 1, 1, MPI_BYTE, leader, STOP_TAG, signal, &stop));
    if (one_sided && rank > 0) {
        TRY(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        locked = 1;
    }
    for (;;) {
        TRY(congest_once(pattern, comm, win, rank, n, send_buf, recv_buf, count, size, requests));
        if (done++ % agree_every)
            continue;
        if (done == 1)
            started_ns = fb_now_ns();
        if (rank == 0 && !stop_seen)
            TRY(MPI_Test(&stop, &stop_seen, MPI_STATUS_IGNORE));
        TRY(MPI_Allreduce(&stop_seen, &decision, 1, MPI_INT, MPI_MAX, comm));
        if (done == 1) {
            if (rank == 0)
                TRY(MPI_Send(signal_buf, 1, MPI_BYTE, leader, STARTED_TAG, signal));
        } else if (decision) {
            stats[1] = fb_now_ns() - started_ns;
            stats[0] = done - 1;
            break;
        }
    }
out:
    if (stop != MPI_REQUEST_NULL) { /* only on an error: the stop message never came */
        MPI_Cancel(&stop);
        MPI_Wait(&stop, MPI_STATUS_IGNORE);
    }
    if (locked) {
        unlocked = MPI_Win_unlock(0, win);
        err = err != MPI_SUCCESS ? err : unlocked;
    }
    release(requests, n);
    free(requests);
    return err;
}

int fb_persistent_collectives(void)
{
    return FB_PERSISTENT_COLLECTIVES;
}

/* ---- Neighbourhood and non-blocking collectives (fb_neighbor, fb_icollective) ----
 *
 * A neighbourhood collective runs on a distributed graph communicator (MPI_Dist_graph_create_adjacent, made by
 * mpi/transport.py), whose in- and out-neighbours this side asks of MPI: every block is `count` elements, block l
 * of the receive buffer from in-neighbour l, block i of the send buffer to out-neighbour i. */

/* The counts, displacements and types of the v and w forms: every block alike, in neighbour order. */
struct blocks {
    int in, out;
    int *send_counts, *send_displs, *recv_counts, *recv_displs;
    MPI_Aint *send_bytes, *recv_bytes; /* the w form's displacements are in bytes */
    MPI_Datatype *send_types, *recv_types;
};

static void blocks_free(struct blocks *b)
{
    free(b->send_counts), free(b->send_displs), free(b->recv_counts), free(b->recv_displs);
    free(b->send_bytes), free(b->recv_bytes), free(b->send_types), free(b->recv_types);
}

/* `b` for `count` elements of `type` per neighbour of graph communicator `comm`; zeroed first, so that
 * blocks_free may follow any return. */
static int blocks_of(MPI_Comm comm, MPI_Datatype type, int count, struct blocks *b)
{
    int weighted, size, err;
    *b = (struct blocks){0};
    if ((err = MPI_Dist_graph_neighbors_count(comm, &b->in, &b->out, &weighted)) != MPI_SUCCESS)
        return err;
    if ((err = MPI_Type_size(type, &size)) != MPI_SUCCESS)
        return err;
    int in = b->in > 0 ? b->in : 1, out = b->out > 0 ? b->out : 1; /* malloc(0) may answer NULL */
    b->send_counts = malloc(out * sizeof(int)), b->send_displs = malloc(out * sizeof(int));
    b->recv_counts = malloc(in * sizeof(int)), b->recv_displs = malloc(in * sizeof(int));
    b->send_bytes = malloc(out * sizeof(MPI_Aint)), b->recv_bytes = malloc(in * sizeof(MPI_Aint));
    b->send_types = malloc(out * sizeof(MPI_Datatype)), b->recv_types = malloc(in * sizeof(MPI_Datatype));
    if (!b->send_counts || !b->send_displs || !b->recv_counts || !b->recv_displs || !b->send_bytes ||
        !b->recv_bytes || !b->send_types || !b->recv_types)
        return MPI_ERR_NO_MEM;
    if ((long long)count * (b->in > b->out ? b->in : b->out) > INT_MAX)
        return MPI_ERR_COUNT;
    for (int i = 0; i < b->out; i++) {
        b->send_counts[i] = count, b->send_displs[i] = i * count;
        b->send_bytes[i] = (MPI_Aint)i * count * size, b->send_types[i] = type;
    }
    for (int l = 0; l < b->in; l++) {
        b->recv_counts[l] = count, b->recv_displs[l] = l * count;
        b->recv_bytes[l] = (MPI_Aint)l * count * size, b->recv_types[l] = type;
    }
    return MPI_SUCCESS;
}

static MPI_Datatype datatype_of(int code)
{
    return code == FLOATS ? MPI_FLOAT : code == CHARS ? MPI_CHAR : code == INTS ? MPI_INT : MPI_BYTE;
}

/* One blocking neighbourhood collective. */
static int neighbor_call(int op, MPI_Comm comm, MPI_Datatype type, void *send, void *recv, int n,
                         const struct blocks *b)
{
    switch (op) {
    case OP_NEIGHBOR_ALLGATHER:
        return MPI_Neighbor_allgather(send, n, type, recv, n, type, comm);
    case OP_NEIGHBOR_ALLGATHERV:
        return MPI_Neighbor_allgatherv(send, n, type, recv, b->recv_counts, b->recv_displs, type, comm);
    case OP_NEIGHBOR_ALLTOALL:
        return MPI_Neighbor_alltoall(send, n, type, recv, n, type, comm);
    case OP_NEIGHBOR_ALLTOALLV:
        return MPI_Neighbor_alltoallv(send, b->send_counts, b->send_displs, type, recv, b->recv_counts,
                                      b->recv_displs, type, comm);
    case OP_NEIGHBOR_ALLTOALLW:
        return MPI_Neighbor_alltoallw(send, b->send_counts, b->send_bytes, b->send_types, recv, b->recv_counts,
                                      b->recv_bytes, b->recv_types, comm);
    default:
        return MPI_ERR_ARG;
    }
}

/* osu_neighbor_*: one blocking neighbourhood collective per sample, timed alone, then an untimed barrier. */
int fb_neighbor(MPI_Fint comm_handle, int op, int datatype, void *send_buf, void *recv_buf, long long count,
                long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    MPI_Datatype type = datatype_of(datatype);
    struct blocks b;
    int separate = 1;
    int n, err = as_count(count, &n);
    if (err != MPI_SUCCESS)
        return err;
    TRY(blocks_of(comm, type, n, &b));
    TIMED_ALONE(TRY(neighbor_call(op, comm, type, send_buf, recv_buf, n, &b)));
out:
    blocks_free(&b);
    return err;
}

/* Starts the non-blocking form of collective `op` (fb_collective's and the neighbourhood codes). */
static int start_nonblocking(int op, MPI_Comm comm, MPI_Datatype type, void *send, void *recv, int n, int root,
                             const struct blocks *b, const Layout *v, MPI_Request *request)
{
    switch (op) {
    case OP_GATHER:
        return MPI_Igather(send, n, type, recv, n, type, root, comm, request);
    case OP_GATHERV:
        return MPI_Igatherv(send, n, type, recv, v->counts, v->displs, type, root, comm, request);
    case OP_SCATTER:
        return MPI_Iscatter(send, n, type, recv, n, type, root, comm, request);
    case OP_SCATTERV:
        return MPI_Iscatterv(send, v->counts, v->displs, type, recv, n, type, root, comm, request);
    case OP_ALLGATHERV:
        return MPI_Iallgatherv(send, n, type, recv, v->counts, v->displs, type, comm, request);
    case OP_ALLTOALLV:
        return MPI_Ialltoallv(send, v->counts, v->displs, type, recv, v->counts, v->displs, type, comm, request);
    case OP_ALLTOALLW:
        return MPI_Ialltoallw(send, v->counts, v->byte_displs, v->types, recv, v->counts, v->byte_displs, v->types,
                              comm, request);
    case OP_ALLREDUCE:
        return MPI_Iallreduce(send, recv, n, type, MPI_SUM, comm, request);
    case OP_ALLGATHER:
        return MPI_Iallgather(send, n, type, recv, n, type, comm, request);
    case OP_ALLTOALL:
        return MPI_Ialltoall(send, n, type, recv, n, type, comm, request);
    case OP_BCAST:
        return MPI_Ibcast(send, n, type, root, comm, request);
    case OP_REDUCE:
        return MPI_Ireduce(send, recv, n, type, MPI_SUM, root, comm, request);
    case OP_REDUCE_SCATTER:
    case OP_REDUCE_SCATTER_BLOCK: /* the same call, as in fb_collective; the block's size is the caller's */
        return MPI_Ireduce_scatter_block(send, recv, n, type, MPI_SUM, comm, request);
    case OP_BARRIER:
        return MPI_Ibarrier(comm, request);
    case OP_NEIGHBOR_ALLGATHER:
        return MPI_Ineighbor_allgather(send, n, type, recv, n, type, comm, request);
    case OP_NEIGHBOR_ALLGATHERV:
        return MPI_Ineighbor_allgatherv(send, n, type, recv, b->recv_counts, b->recv_displs, type, comm, request);
    case OP_NEIGHBOR_ALLTOALL:
        return MPI_Ineighbor_alltoall(send, n, type, recv, n, type, comm, request);
    case OP_NEIGHBOR_ALLTOALLV:
        return MPI_Ineighbor_alltoallv(send, b->send_counts, b->send_displs, type, recv, b->recv_counts,
                                       b->recv_displs, type, comm, request);
    case OP_NEIGHBOR_ALLTOALLW:
        return MPI_Ineighbor_alltoallw(send, b->send_counts, b->send_bytes, b->send_types, recv, b->recv_counts,
                                       b->recv_bytes, b->recv_types, comm, request);
    default:
        return MPI_ERR_ARG;
    }
}

/* The dummy compute: a small dense float kernel, run in passes until `target_ns` have passed in them. The arrays
 * are volatile so that no pass can be optimised away. */
enum { COMPUTE_DIM = 32 };
static volatile float compute_m[COMPUTE_DIM][COMPUTE_DIM], compute_v[COMPUTE_DIM];

static void compute_for(int64_t target_ns)
{
    int64_t spent = 0;
    while (spent < target_ns) {
        int64_t begin = fb_now_ns();
        for (int r = 0; r < COMPUTE_DIM; r++) {
            float sum = compute_v[r];
            for (int c = 0; c < COMPUTE_DIM; c++)
                sum += compute_m[r][c] * compute_m[c][r];
            compute_v[r] = sum * 0.5f;
        }
        spent += fb_now_ns() - begin;
    }
}

/* The compute of one sample: `target_ns` of it, cut into `tests` parts each followed by an MPI_Test of `request`
 * (none: one part, no test). Returns the ns spent in MPI_Test, or -1 when a test failed (its code in *err). */
static int64_t compute_and_test(int64_t target_ns, int tests, MPI_Request *request, int *err)
{
    int64_t testing = 0;
    int done;
    if (tests <= 0) {
        compute_for(target_ns);
        return 0;
    }
    for (int t = 0; t < tests; t++) {
        compute_for(target_ns / tests);
        int64_t begin = fb_now_ns();
        if ((*err = MPI_Test(request, &done, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return -1;
        testing += fb_now_ns() - begin;
    }
    return testing;
}

/* osu_i*: the non-blocking form of `op`, as OSU's non-blocking collectives time it, in two loops of `iterations`.
 *
 * 1. Pure communication: start, MPI_Wait, each sample timed alone, then an untimed barrier (none for ibarrier).
 *    Its mean on this rank is the compute's length.
 * 2. Overlap: start, compute for that long (testing `tests` times within it), MPI_Wait; each sample (the overall
 *    time) timed alone into times[i], then an untimed barrier. Within it the start, the compute and the wait are
 *    timed apart.
 *
 * figures[] gets this rank's means in ns: 0 pure communication, 1 compute (its tests included, as OSU's), 2 the
 * tests, 3 the wait, 4 the start. `op` may be a neighbourhood code where `comm` is a graph communicator. */
int fb_icollective(MPI_Fint comm_handle, int op, int datatype, void *send_buf, void *recv_buf, long long count,
                   int root, int tests, long long iterations, int64_t *times, double *figures)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    MPI_Datatype type = datatype_of(datatype);
    MPI_Request request = MPI_REQUEST_NULL;
    struct blocks b = {0};
    Layout v = {NULL, NULL, NULL, NULL}; /* the v-variants' counts and displacements, built before timing */
    int neighborhood = op >= OP_NEIGHBOR_ALLGATHER && op <= OP_NEIGHBOR_ALLTOALLW;
    int64_t pure = 0, compute = 0, testing = 0, waiting = 0, starting = 0;
    int n, err = as_count(count, &n);
    if (err != MPI_SUCCESS)
        return err;
    for (int f = 0; f < 5; f++)
        figures[f] = 0.0;
    if (iterations <= 0)
        return MPI_SUCCESS;
    if (neighborhood)
        TRY(blocks_of(comm, type, n, &b));
    else
        TRY(layout_of(comm, op, type, n, &v));
    for (long long i = 0; i < iterations; i++) {
        int64_t begin = fb_now_ns();
        TRY(start_nonblocking(op, comm, type, send_buf, recv_buf, n, root, &b, &v, &request));
        TRY(MPI_Wait(&request, MPI_STATUS_IGNORE));
        pure += fb_now_ns() - begin;
        if (op != OP_BARRIER)
            TRY(MPI_Barrier(comm));
    }
    int64_t target = pure / iterations;
    TRY(MPI_Barrier(comm));
    for (long long i = 0; i < iterations; i++) {
        int64_t begin = fb_now_ns();
        TRY(start_nonblocking(op, comm, type, send_buf, recv_buf, n, root, &b, &v, &request));
        int64_t started = fb_now_ns();
        int64_t tested = compute_and_test(target, tests, &request, &err);
        if (tested < 0)
            goto out;
        int64_t computed = fb_now_ns();
        TRY(MPI_Wait(&request, MPI_STATUS_IGNORE));
        int64_t end = fb_now_ns();
        times[i] = end - begin;
        starting += started - begin, compute += computed - started, testing += tested, waiting += end - computed;
        TRY(MPI_Barrier(comm));
    }
    figures[0] = (double)pure / iterations, figures[1] = (double)compute / iterations;
    figures[2] = (double)testing / iterations, figures[3] = (double)waiting / iterations;
    figures[4] = (double)starting / iterations;
out:
    if (request != MPI_REQUEST_NULL) { /* only on an error: a started collective cannot be cancelled, so wait */
        MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    blocks_free(&b);
    layout_free(&v);
    return err;
}

/* ---- Fan-in and fan-out bandwidth (fb_fan): OSU's congestion programs osu_bw_fan_in, osu_bw_fan_out ----
 *
 * A parent rank exchanges a window of `window` messages of `size` bytes with each of its `npeers` children at
 * once, then one 1-byte ack per child: fan-in, every child sends its window to the parent, which acks each child;
 * fan-out, the parent sends a window to every child, and each child acks. A sample is one parent iteration, back
 * to back. A child (`parent` false) has one peer, its parent, and only answers. In fan-in the parent receives
 * child p's window in recv_buf + p * size, so that each child's bytes can be checked apart. */
int fb_fan(MPI_Fint comm_handle, int fan_in, int parent, int *peers, int npeers, void *send_buf, void *recv_buf,
           void *ack_buf, long long size, int window, long long iterations, int64_t *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    int count, total, err = as_count(size, &count);
    MPI_Request *requests;
    if (err != MPI_SUCCESS)
        return err;
    if (window < 1 || npeers < 1 || (!parent && npeers != 1) || window > INT_MAX / npeers)
        return MPI_ERR_COUNT;
    total = window * npeers;
    requests = null_requests(total);
    if (requests == NULL)
        return MPI_ERR_NO_MEM;
    char *slots = recv_buf;
    if (parent && fan_in) {
        TIMED_BACK_TO_BACK(
            for (int p = 0; p < npeers; p++)
                for (int w = 0; w < window; w++)
                    TRY(MPI_Irecv(slots + (size_t)p * (size_t)size, count, MPI_BYTE, peers[p], TAG, comm,
                                  &requests[p * window + w]));
            TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE));
            for (int p = 0; p < npeers; p++)
                TRY(MPI_Send(ack_buf, 1, MPI_BYTE, peers[p], ACK_TAG, comm)));
    } else if (parent) {
        TIMED_BACK_TO_BACK(
            for (int w = 0; w < window; w++)
                for (int p = 0; p < npeers; p++)
                    TRY(MPI_Isend(send_buf, count, MPI_BYTE, peers[p], TAG, comm, &requests[w * npeers + p]));
            TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE));
            for (int p = 0; p < npeers; p++)
                TRY(MPI_Recv(ack_buf, 1, MPI_BYTE, peers[p], ACK_TAG, comm, MPI_STATUS_IGNORE)));
    } else if (fan_in) {
        for (long long i = 0; i < iterations; i++) {
            for (int w = 0; w < window; w++)
                TRY(MPI_Isend(send_buf, count, MPI_BYTE, peers[0], TAG, comm, &requests[w]));
            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
            TRY(MPI_Recv(ack_buf, 1, MPI_BYTE, peers[0], ACK_TAG, comm, MPI_STATUS_IGNORE));
        }
    } else {
        for (long long i = 0; i < iterations; i++) {
            for (int w = 0; w < window; w++)
                TRY(MPI_Irecv(recv_buf, count, MPI_BYTE, peers[0], TAG, comm, &requests[w]));
            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
            TRY(MPI_Send(ack_buf, 1, MPI_BYTE, peers[0], ACK_TAG, comm));
        }
    }
out:
    release(requests, total);
    free(requests);
    return err;
}

/* The mpi and mpi-rma transports' timed loops, outside the interpreter.
 *
 * A Python loop adds the interpreter's cost to every MPI call, and for small
 * messages that cost is a visible part of what gets reported. Each loop here
 * makes exactly the MPI calls, in the same order and with the same barriers,
 * as the Python loop it replaces (PingPong, Window and Collective in mpi.py,
 * OneSided in mpi_rma.py), which follow the OSU Micro-Benchmarks.
 *
 * A plain C library, not a Python extension: it must link the very MPI that
 * mpi4py loaded, so mpi_cloop.py builds it with that MPI's compiler wrapper on
 * first use and calls it through ctypes, which releases the GIL for the call
 * (the runner's watchdog thread keeps running). Handles cross as Fortran
 * integers (mpi4py's py2f()) and are converted with MPI_Comm_f2c/MPI_Win_f2c,
 * which works whether the MPI's C handles are integers (MPICH) or pointers
 * (Open MPI).
 *
 * Stamps are CLOCK_MONOTONIC in ns, the clock of time.perf_counter_ns; each
 * iteration's duration goes to times[i] (at least `iterations` entries), on
 * the ranks that time. Requests are built before the timed region and freed
 * after it, on every path. Every function returns 0, an MPI error code (as the
 * handle's error handler lets them return; mpi4py sets MPI_ERRORS_RETURN), or
 * FB_UNSUPPORTED.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, also under a strict -std=c99/c11 */

#include <limits.h>
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#define FB_UNSUPPORTED (-1)

enum { TAG = 11, ACK_TAG = 12 }; /* mpi.py's tags: data, and the bandwidth window's ack */

/* fb_collective's op and datatype codes. */
enum { ALLREDUCE, ALLGATHER, ALLTOALL, BCAST, REDUCE, REDUCE_SCATTER, BARRIER };
enum { BYTES, FLOATS, CHARS, INTS }; /* mpi.py's C_TYPES: MPI_BYTE, MPI_FLOAT, MPI_CHAR, MPI_INT */

static inline long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Every function keeps its first error in `err` and leaves through `out`, where it frees what it built. */
#define TRY(call)                                 \
    do {                                          \
        if ((err = (call)) != MPI_SUCCESS)        \
            goto out;                             \
    } while (0)

/* Samples back to back, each timed from the previous stamp, so that nothing between two samples goes untimed. */
#define TIMED_BACK_TO_BACK(operation)                        \
    do {                                                     \
        long long last = now_ns();                           \
        for (long long i = 0; i < iterations; i++) {         \
            operation;                                       \
            long long now = now_ns();                        \
            times[i] = now - last;                           \
            last = now;                                      \
        }                                                    \
    } while (0)

/* One operation per sample, timed alone, then an untimed barrier, as OSU's collectives. */
#define TIMED_ALONE(operation)                               \
    do {                                                     \
        for (long long i = 0; i < iterations; i++) {         \
            long long start = now_ns();                      \
            operation;                                       \
            times[i] = now_ns() - start;                     \
            TRY(MPI_Barrier(comm));                          \
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

int fb_pingpong(MPI_Fint comm_handle, int peer, int initiator, int persistent, void *send_buf, void *recv_buf,
                long long size, long long iterations, long long *times)
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

int fb_window(MPI_Fint comm_handle, int peer, int initiator, int both_ways, int persistent, void *send_buf,
              void *recv_buf, void *ack_buf, long long size, int window, long long iterations, long long *times)
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
    requests = malloc((size_t)total * sizeof *requests);
    if (requests == NULL)
        return MPI_ERR_NO_MEM;
    for (int r = 0; r < total; r++)
        requests[r] = MPI_REQUEST_NULL;
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
            TIMED_BACK_TO_BACK(TRY(MPI_Startall(total, requests));
                               TRY(MPI_Waitall(total, requests, MPI_STATUSES_IGNORE)));
        else
            UNTIMED(TRY(MPI_Startall(window, requests)); TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
                    TRY(MPI_Start(ack)); TRY(MPI_Wait(ack, MPI_STATUS_IGNORE)));
    } else if (both_ways) {
        TIMED_BACK_TO_BACK(
            for (int r = 0; r < window; r++)
                TRY(MPI_Irecv(recv_buf, count, MPI_BYTE, peer, TAG, comm, &requests[r]));
            for (int s = window; s < 2 * window; s++)
                TRY(MPI_Isend(send_buf, count, MPI_BYTE, peer, TAG, comm, &requests[s]));
            TRY(MPI_Waitall(2 * window, requests, MPI_STATUSES_IGNORE)));
    } else if (initiator) {
        TIMED_BACK_TO_BACK(
            for (int s = 0; s < window; s++)
                TRY(MPI_Isend(send_buf, count, MPI_BYTE, peer, TAG, comm, &requests[s]));
            TRY(MPI_Waitall(window, requests, MPI_STATUSES_IGNORE));
            TRY(MPI_Recv(ack_buf, 1, MPI_BYTE, peer, ACK_TAG, comm, MPI_STATUS_IGNORE)));
    } else {
        UNTIMED(
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

#if MPI_VERSION >= 4
/* The MPI-4 persistent form of collective `op`, built once: each sample is then one MPI_Start and one MPI_Wait. */
static int collective_init(MPI_Comm comm, int op, MPI_Datatype type, void *send_buf, void *recv_buf, int count,
                           int root, MPI_Request *request)
{
    switch (op) {
    case ALLREDUCE:
        return MPI_Allreduce_init(send_buf, recv_buf, count, type, MPI_SUM, comm, MPI_INFO_NULL, request);
    case ALLGATHER:
        return MPI_Allgather_init(send_buf, count, type, recv_buf, count, type, comm, MPI_INFO_NULL, request);
    case ALLTOALL:
        return MPI_Alltoall_init(send_buf, count, type, recv_buf, count, type, comm, MPI_INFO_NULL, request);
    case BCAST:
        return MPI_Bcast_init(send_buf, count, type, root, comm, MPI_INFO_NULL, request);
    case REDUCE:
        return MPI_Reduce_init(send_buf, recv_buf, count, type, MPI_SUM, root, comm, MPI_INFO_NULL, request);
    case REDUCE_SCATTER:
        return MPI_Reduce_scatter_block_init(send_buf, recv_buf, count, type, MPI_SUM, comm, MPI_INFO_NULL, request);
    case BARRIER:
        return MPI_Barrier_init(comm, MPI_INFO_NULL, request);
    default:
        return MPI_ERR_ARG;
    }
}
#endif

int fb_collective(MPI_Fint comm_handle, int op, int persistent, int datatype, void *send_buf, void *recv_buf,
                  long long count, int root, long long iterations, long long *times)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_handle);
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Datatype type = datatype == FLOATS ? MPI_FLOAT
                        : datatype == CHARS ? MPI_CHAR
                        : datatype == INTS  ? MPI_INT
                                            : MPI_BYTE;
    int n, err = as_count(count, &n);
    if (err != MPI_SUCCESS)
        return err;
    if (datatype < BYTES || datatype > INTS)
        return MPI_ERR_TYPE;
    if (persistent) {
#if MPI_VERSION >= 4
        TRY(collective_init(comm, op, type, send_buf, recv_buf, n, root, &request));
        TIMED_ALONE(TRY(MPI_Start(&request)); TRY(MPI_Wait(&request, MPI_STATUS_IGNORE)));
#else
        return FB_UNSUPPORTED;
#endif
    } else {
        /* One loop per operation, so that the timed region holds the call and nothing else. */
        switch (op) {
        case ALLREDUCE:
            TIMED_ALONE(TRY(MPI_Allreduce(send_buf, recv_buf, n, type, MPI_SUM, comm)));
            break;
        case ALLGATHER:
            TIMED_ALONE(TRY(MPI_Allgather(send_buf, n, type, recv_buf, n, type, comm)));
            break;
        case ALLTOALL:
            TIMED_ALONE(TRY(MPI_Alltoall(send_buf, n, type, recv_buf, n, type, comm)));
            break;
        case BCAST:
            TIMED_ALONE(TRY(MPI_Bcast(send_buf, n, type, root, comm)));
            break;
        case REDUCE:
            TIMED_ALONE(TRY(MPI_Reduce(send_buf, recv_buf, n, type, MPI_SUM, root, comm)));
            break;
        case REDUCE_SCATTER:
            TIMED_ALONE(TRY(MPI_Reduce_scatter_block(send_buf, recv_buf, n, type, MPI_SUM, comm)));
            break;
        case BARRIER:
            TIMED_ALONE(TRY(MPI_Barrier(comm)));
            break;
        default:
            return MPI_ERR_ARG;
        }
    }
out:
    release(&request, 1);
    return err;
}

int fb_rma(MPI_Fint win_handle, int target, int put, void *local_buf, long long size, int window,
           long long iterations, long long *times)
{
    MPI_Win win = MPI_Win_f2c(win_handle);
    int per_flush = window > 0 ? window : 1; /* latency (window 0): one operation a flush */
    int count, unlocked, err = as_count(size, &count);
    if (err != MPI_SUCCESS)
        return err;
    /* One passive-target epoch for the whole loop, as osu_put_latency; the target does nothing meanwhile. */
    err = MPI_Win_lock(MPI_LOCK_SHARED, target, 0, win);
    if (err != MPI_SUCCESS)
        return err;
    if (put)
        TIMED_BACK_TO_BACK(
            for (int w = 0; w < per_flush; w++)
                TRY(MPI_Put(local_buf, count, MPI_BYTE, target, 0, count, MPI_BYTE, win));
            TRY(MPI_Win_flush(target, win)));
    else
        TIMED_BACK_TO_BACK(
            for (int w = 0; w < per_flush; w++)
                TRY(MPI_Get(local_buf, count, MPI_BYTE, target, 0, count, MPI_BYTE, win));
            TRY(MPI_Win_flush(target, win)));
out:
    unlocked = MPI_Win_unlock(target, win);
    return err != MPI_SUCCESS ? err : unlocked;
}

int fb_persistent_collectives(void)
{
    return MPI_VERSION >= 4;
}

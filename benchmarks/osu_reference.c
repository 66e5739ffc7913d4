/* osu_reference: the timing loops of OSU Micro-Benchmarks 7.4, written plainly in C, as the yardstick that
 * benchmarks/mpi_overhead.py holds fabricbench's MPI loops against in the same run.
 *
 * Why a program of our own and not OSU itself: the machines this runs on have no OSU build, and OSU's sources may
 * not be copied. This follows the loops as documented in shared/notes/reference-tools.md and as OSU 7.4 times them,
 * nothing more: no options, no validation, no GPU buffers.
 *
 * Build (mpi_overhead.py does this in a temporary directory, with fabricbench's own wrapper):
 *     mpicc -O2 -Wall -o osu_reference benchmarks/osu_reference.c
 * Run, on an even number of ranks (2 or 4):
 *     mpiexec -n 2 ./osu_reference [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [KERNELS ...]
 * KERNELS is a comma list of the kernels below; the sizes double from MIN to MAX (0 is followed by 1), as OSU's -m
 * does. Each group of four arguments runs every kernel at every size with those iteration and warm-up counts. Rank
 * 0 prints "# library FIRST LINE OF MPI_Get_library_version" and "# thread level LEVEL" (what MPI_Query_thread
 * says), then one line per kernel and size, "KERNEL SIZE VALUE". The kernels, the OSU program each follows, its
 * figure and the column of fabricbench's results.csv that holds the same quantity:
 *   latency    osu_latency. Rank 0 stamps every round trip (MPI_Wtime before the Send, after the Recv) and sums
 *              them after the warm-up; us one way: the sum over 2 x ITERATIONS.             fabricbench: lat_mean_us
 *   bw         osu_bw. Rank 0 stamps every window (W = 64 Isend, Waitall, Recv of a 4-byte ack; the receiver W
 *              Irecv, Waitall, Send of the ack) and sums them; MB/s, MB = 10^6 B.               fabricbench: bw_MBps
 *   bibw       osu_bibw. Both sides post W Irecv, then W Isend, then wait for all; rank 0 stamps each window;
 *              MB/s counting both directions.                                               fabricbench: bw_MBps
 *   msgrate    osu_mbw_mr. pairs = N/2, rank r < pairs sends to r + pairs. Per iteration every rank meets at a
 *              barrier, then again, then each sender stamps its window (W Isend, Waitall, Recv of a 1-byte ack;
 *              the receiver W Irecv, Waitall, Send of the ack) and sums its windows; messages/s over all pairs.
 *                                                                                     fabricbench: msgrate_per_s
 *   allreduce, allgather, alltoall, bcast, reduce, reduce_scatter
 *              osu_allreduce, osu_allgather, osu_alltoall, osu_bcast, osu_reduce, osu_reduce_scatter. One barrier,
 *              then per iteration: MPI_Wtime, the operation, MPI_Wtime, an untimed barrier; each rank's mean over
 *              the iterations after the warm-up, then the mean of the ranks' means (OSU reduces SUM and divides by
 *              the rank count: its Avg column); us.                                  fabricbench: lat_rank_avg_us
 *   gather, gatherv, scatter, scatterv, allgatherv, alltoallv, alltoallw
 *              osu_gather, osu_gatherv, osu_scatter, osu_scatterv, osu_allgatherv, osu_alltoallv, osu_alltoallw:
 *              the same loop, SIZE bytes (MPI_CHAR) a rank's block, root 0; the v-variants with OSU's counts (SIZE
 *              from every rank) and displacements (rank r's block at r x SIZE; osu_alltoallw's in bytes, MPI_CHAR
 *              for every block), set before the size's first iteration.            fabricbench: lat_rank_avg_us
 *   reduce_scatter_block
 *              osu_reduce_scatter_block: the same loop; SIZE is the float32 vector, and the call is
 *              MPI_Reduce_scatter_block with SIZE/4/N floats a block (OSU's portion), as fabricbench's
 *              reduce_scatter_block.                                                fabricbench: lat_rank_avg_us
 *   barrier    osu_barrier. Per iteration: MPI_Wtime, MPI_Barrier, MPI_Wtime, and nothing else (no second barrier);
 *              the ranks' means averaged as above; us. It runs once per group, at size 0, whatever MIN:MAX says,
 *              as fabricbench's barrier has one row, size_B 0.                         fabricbench: lat_rank_avg_us
 *   put, get   osu_put_latency, osu_get_latency with their defaults, MPI_Win_allocate and lock/flush: a window of
 *              SIZE bytes per size, written before timing; rank 0 locks the target shared once, then per
 *              iteration MPI_Wtime, MPI_Put (MPI_Get) of SIZE bytes, MPI_Win_flush, MPI_Wtime, summed after the
 *              warm-up; us per operation.                                                fabricbench: lat_mean_us
 *
 * Where this differs from OSU 7.4 on purpose, and why:
 * - Point-to-point kernels (latency, bw, bibw, put, get) run between rank 0 and rank N/2, as fabricbench's do
 *   (measure.kernels.partner_of); OSU's run between ranks 0 and 1 and want exactly 2 ranks. At 2 ranks that is the
 *   same pair; at 4 the other ranks wait in the size's barrier (and, for put and get, take part in the window's
 *   collective allocation and free).
 * - allreduce, reduce, reduce_scatter and reduce_scatter_block sum float32 elements (MPI_FLOAT), fabricbench's
 *   default element
 *   (collectives.spec.FLOAT32); OSU's default is MPI_CHAR (-T picks another). Their sizes start at 4 B, a whole
 *   float32; a size that is no multiple of 4 is not run.
 * - reduce_scatter: SIZE is each rank's block, as fabricbench's size_B is, and the call is
 *   MPI_Reduce_scatter_block with SIZE/4 floats a block, fabricbench's call; OSU's osu_reduce_scatter calls
 *   MPI_Reduce_scatter with recvcounts that split SIZE over the ranks (a block of SIZE/N).
 * - msgrate's figure is the sum of each sender's own rate (messages over its own summed time), as fabricbench's
 *   msgrate_per_s sums its initiators' rates; OSU divides all pairs' messages by the senders' mean time. The two are
 *   one figure at one pair (2 ranks) and differ at more pairs only by how far the senders' times differ.
 * - Buffers: one page-aligned send and one receive buffer per kernel and group, large enough for the group's
 *   largest size times N, written once before anything is timed (bytes 1..251, or small integers as float32, so no
 *   page is the shared zero page and no float is a denormal); OSU allocates and fills 'a'/'b' per size. put and get
 *   use that send buffer as their local buffer; OSU allocates one per size.
 * - Only OSU's default paths: no validation, no -f/-z statistics, no graphs or PAPI, no device buffers; rank 0
 *   prints one figure a line.
 * - MPI starts as OSU starts it, MPI_Init; --thread-multiple asks MPI_Init_thread for MPI_THREAD_MULTIPLE instead,
 *   as mpi4py does by default, to tell what the thread level costs apart from what a loop costs.
 */
#define _POSIX_C_SOURCE 200112L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64 /* osu_bw's default window, and fabricbench's -W default */
#define PAGE 4096
#define TAG 100
#define ACK_TAG 101
#define BW_ACK 4   /* osu_bw's ack: 4 MPI_CHAR */
#define MBW_ACK 1  /* osu_mbw_mr's ack: 1 MPI_CHAR */
#define SLACK 64   /* every buffer holds at least this much, for the acks of the 1 B sizes */

typedef struct {
    int rank, ranks, peer;    /* peer: rank N/2 for rank 0, rank 0 for rank N/2, -1 for the others */
    int pairs, partner;       /* msgrate: N/2 pairs; rank r < pairs sends to r + pairs, its partner */
    long iterations, warmup;
    char *send, *recv;        /* page-aligned and written, large enough for every size of the group */
    float *fsend, *frecv;     /* the same memory as float32 vectors, for the reductions */
} Context;

/* Bytes 1..251 that differ by seed: never zero, so no page of a buffer is the kernel's shared zero page. */
static void fill_bytes(char *buf, size_t nbytes, int seed) {
    for (size_t i = 0; i < nbytes; i++) buf[i] = (char)((i + 31u * (unsigned)seed) % 251 + 1);
}

/* Small integers as floats: sums stay exact and no value is a denormal, which would slow the reduction down. */
static void fill_floats(float *buf, size_t count, int seed) {
    for (size_t i = 0; i < count; i++) buf[i] = (float)(i % 17 + (size_t)seed + 1);
}

static char *page_aligned(size_t nbytes) {
    void *buf = NULL;
    if (posix_memalign(&buf, PAGE, nbytes ? nbytes : 1) != 0) {
        fprintf(stderr, "osu_reference: cannot allocate %zu bytes\n", nbytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return buf;
}

/* The mean of every rank's value, on rank 0 (OSU's Reduce of SUM, divided by the rank count). */
static double ranks_mean(const Context *c, double mine) {
    double sum = 0.0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum / c->ranks;
}

/* osu_latency: one barrier, then warm-up and timed round trips in one loop; rank 0 times each round trip. */
static double latency(const Context *c, int size) {
    double total = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->peer < 0) return 0.0;
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        if (c->rank == 0) {
            double start = MPI_Wtime();
            MPI_Send(c->send, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD);
            MPI_Recv(c->recv, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= c->warmup) total += MPI_Wtime() - start;
        } else {
            MPI_Recv(c->recv, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(c->send, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD);
        }
    }
    return total * 1e6 / (2.0 * c->iterations);
}

/* osu_bw (W Isend, Waitall, a 4-byte ack; the receiver W Irecv, Waitall, the ack) and osu_bibw (both sides post W
 * Irecv, then W Isend, then wait for the sends and the receives). Rank 0 stamps each window and sums them. */
static double window(const Context *c, int size, int both_ways) {
    MPI_Request sends[WINDOW], recvs[WINDOW];
    double total = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->peer < 0) return 0.0;
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double start = c->rank == 0 ? MPI_Wtime() : 0.0;
        if (both_ways) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(c->recv, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, &recvs[w]);
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(c->send, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, &sends[w]);
            MPI_Waitall(WINDOW, sends, MPI_STATUSES_IGNORE);
            MPI_Waitall(WINDOW, recvs, MPI_STATUSES_IGNORE);
        } else if (c->rank == 0) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(c->send, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, &sends[w]);
            MPI_Waitall(WINDOW, sends, MPI_STATUSES_IGNORE);
            MPI_Recv(c->recv, BW_ACK, MPI_CHAR, c->peer, ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(c->recv, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, &recvs[w]);
            MPI_Waitall(WINDOW, recvs, MPI_STATUSES_IGNORE);
            MPI_Send(c->send, BW_ACK, MPI_CHAR, c->peer, ACK_TAG, MPI_COMM_WORLD);
        }
        if (c->rank == 0 && i >= c->warmup) total += MPI_Wtime() - start;
    }
    return (double)size * WINDOW * c->iterations * (both_ways ? 2 : 1) / total / 1e6;
}

/* osu_mbw_mr: every pair at once. Per iteration all ranks meet at a barrier, and again; each sender stamps its
 * window (W Isend, Waitall, a 1-byte ack) and sums its windows. The figure: the senders' rates (W x ITERATIONS over
 * each one's summed time), added up, in messages/s; fabricbench's msgrate_per_s adds up its initiators' rates. */
static double msgrate(const Context *c, int size) {
    MPI_Request requests[WINDOW];
    double total = 0.0, rate = 0.0, sum = 0.0;
    int sender = c->rank < c->pairs;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        if (sender) {
            double start = MPI_Wtime();
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(c->send, size, MPI_CHAR, c->partner, TAG, MPI_COMM_WORLD, &requests[w]);
            MPI_Waitall(WINDOW, requests, MPI_STATUSES_IGNORE);
            MPI_Recv(c->recv, MBW_ACK, MPI_CHAR, c->partner, ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= c->warmup) total += MPI_Wtime() - start;
        } else {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(c->recv, size, MPI_CHAR, c->partner, TAG, MPI_COMM_WORLD, &requests[w]);
            MPI_Waitall(WINDOW, requests, MPI_STATUSES_IGNORE);
            MPI_Send(c->send, MBW_ACK, MPI_CHAR, c->partner, ACK_TAG, MPI_COMM_WORLD);
        }
    }
    if (sender) rate = (double)WINDOW * c->iterations / total;
    MPI_Reduce(&rate, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum;
}

/* OSU's collectives: one barrier, then each operation timed alone with an untimed barrier after it; each rank's
 * mean, then the mean of the ranks' means. osu_barrier times MPI_Barrier alone, with no barrier after it. Returns
 * the figure on rank 0. */
static double collective(const Context *c, const char *kernel, int size) {
    double total = 0.0;
    int floats = size / (int)sizeof(float), barrier = !strcmp(kernel, "barrier");
    int *counts = malloc(c->ranks * sizeof *counts), *displs = malloc(c->ranks * sizeof *displs);
    int *bytes = malloc(c->ranks * sizeof *bytes);
    MPI_Datatype *types = malloc(c->ranks * sizeof *types);
    if (!counts || !displs || !bytes || !types) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int r = 0; r < c->ranks; r++) { /* OSU's v-variants: SIZE from every rank, rank r's block at r x SIZE */
        counts[r] = size;
        displs[r] = bytes[r] = r * size; /* MPI_CHAR: elements are bytes */
        types[r] = MPI_CHAR;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double start = MPI_Wtime();
        if (!strcmp(kernel, "allreduce"))
            MPI_Allreduce(c->fsend, c->frecv, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "reduce"))
            MPI_Reduce(c->fsend, c->frecv, floats, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "reduce_scatter"))
            MPI_Reduce_scatter_block(c->fsend, c->frecv, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "bcast"))
            MPI_Bcast(c->send, size, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "alltoall"))
            MPI_Alltoall(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "allgather"))
            MPI_Allgather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "gather"))
            MPI_Gather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "gatherv"))
            MPI_Gatherv(c->send, size, MPI_CHAR, c->recv, counts, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "scatter"))
            MPI_Scatter(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "scatterv"))
            MPI_Scatterv(c->send, counts, displs, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "allgatherv"))
            MPI_Allgatherv(c->send, size, MPI_CHAR, c->recv, counts, displs, MPI_CHAR, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "alltoallv"))
            MPI_Alltoallv(c->send, counts, displs, MPI_CHAR, c->recv, counts, displs, MPI_CHAR, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "alltoallw"))
            MPI_Alltoallw(c->send, counts, bytes, types, c->recv, counts, bytes, types, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "reduce_scatter_block"))
            MPI_Reduce_scatter_block(c->fsend, c->frecv, floats / c->ranks, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
            MPI_Barrier(MPI_COMM_WORLD);
        double stop = MPI_Wtime();
        if (i >= c->warmup) total += stop - start;
        if (!barrier) MPI_Barrier(MPI_COMM_WORLD);
    }
    free(counts);
    free(displs);
    free(bytes);
    free(types);
    return ranks_mean(c, total * 1e6 / c->iterations);
}

/* osu_put_latency and osu_get_latency with MPI_Win_allocate and lock/flush: a window per size, written before
 * timing; rank 0 locks the target shared once, then stamps each Put (Get) + Win_flush and sums them. */
static double one_sided(const Context *c, int size, int put) {
    char *memory = NULL;
    MPI_Win win;
    double total = 0.0;
    MPI_Win_allocate(size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &memory, &win);
    fill_bytes(memory, (size_t)size, 202);
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == 0 && c->peer >= 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, c->peer, 0, win);
        for (long i = 0; i < c->warmup + c->iterations; i++) {
            double start = MPI_Wtime();
            if (put)
                MPI_Put(c->send, size, MPI_CHAR, c->peer, 0, size, MPI_CHAR, win);
            else
                MPI_Get(c->send, size, MPI_CHAR, c->peer, 0, size, MPI_CHAR, win);
            MPI_Win_flush(c->peer, win);
            double stop = MPI_Wtime();
            if (i >= c->warmup) total += stop - start;
        }
        MPI_Win_unlock(c->peer, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    return total * 1e6 / c->iterations;
}

static const char *KERNELS[] = {"latency", "bw",     "bibw",           "msgrate", "allreduce", "allgather", "alltoall",
                                "bcast",   "reduce", "reduce_scatter", "barrier", "put",       "get",
                                "gather",  "gatherv", "scatter", "scatterv", "allgatherv", "alltoallv", "alltoallw",
                                "reduce_scatter_block"};

static int known(const char *kernel) {
    for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; i++)
        if (!strcmp(kernel, KERNELS[i])) return 1;
    return 0;
}

static int reduction(const char *kernel) {
    return !strcmp(kernel, "allreduce") || !strcmp(kernel, "reduce") || !strcmp(kernel, "reduce_scatter") ||
           !strcmp(kernel, "reduce_scatter_block");
}

/* One kernel at one size: its figure (on rank 0), or 0 and *skip set for a size it does not run. */
static double measure(const Context *c, const char *kernel, long size, int *skip) {
    *skip = 0;
    if (!strcmp(kernel, "latency")) return latency(c, (int)size);
    if (!strcmp(kernel, "bw") || !strcmp(kernel, "bibw")) return window(c, (int)size, !strcmp(kernel, "bibw"));
    if (!strcmp(kernel, "msgrate")) return msgrate(c, (int)size);
    if (!strcmp(kernel, "put") || !strcmp(kernel, "get")) {
        *skip = size == 0; /* fabricbench's put and get sweep from 1 B */
        return *skip ? 0.0 : one_sided(c, (int)size, !strcmp(kernel, "put"));
    }
    if (reduction(kernel) && (size < (long)sizeof(float) || size % (long)sizeof(float))) {
        *skip = 1; /* no whole float32 element: fabricbench says unsupported */
        return 0.0;
    }
    return collective(c, kernel, (int)size);
}

/* One group: KERNELS MIN:MAX ITERATIONS WARMUP. Returns 0, or 2 for an argument that does not parse. */
static int run_group(Context *c, char *kernels, const char *sizes, const char *iterations, const char *warmup) {
    long lo, hi;
    char *end, *save = NULL;
    lo = strtol(sizes, &end, 10);
    if (*end != ':' || lo < 0) return 2;
    hi = strtol(end + 1, &end, 10);
    if (*end || hi < lo || hi > (1L << 30)) return 2;
    c->iterations = strtol(iterations, &end, 10);
    if (*end || c->iterations < 1) return 2;
    c->warmup = strtol(warmup, &end, 10);
    if (*end || c->warmup < 0) return 2;
    for (char *k = kernels; *k; k++)
        if (*k == ',') *k = ' ';
    for (char *kernel = strtok_r(kernels, " ", &save); kernel; kernel = strtok_r(NULL, " ", &save)) {
        if (!known(kernel)) return 2;
        /* Every buffer holds a block per rank (alltoall, allgather, reduce_scatter), written once, before anything
         * is timed. */
        size_t nbytes = (size_t)hi * (size_t)c->ranks + SLACK;
        c->send = page_aligned(nbytes);
        c->recv = page_aligned(nbytes);
        c->fsend = (float *)c->send;
        c->frecv = (float *)c->recv;
        if (reduction(kernel)) {
            fill_floats(c->fsend, nbytes / sizeof(float), c->rank);
            fill_floats(c->frecv, nbytes / sizeof(float), c->ranks);
        } else {
            fill_bytes(c->send, nbytes, c->rank + 1);
            fill_bytes(c->recv, nbytes, c->ranks + 1);
        }
        /* barrier moves no data: one figure, at size 0, as fabricbench's one row */
        long first = strcmp(kernel, "barrier") ? lo : 0, last = strcmp(kernel, "barrier") ? hi : 0;
        for (long size = first; size <= last; size = size ? size * 2 : 1) {
            int skip;
            double value = measure(c, kernel, size, &skip);
            if (!skip && c->rank == 0) {
                printf("%s %ld %.6f\n", kernel, size, value);
                fflush(stdout);
            }
        }
        free(c->send);
        free(c->recv);
    }
    return 0;
}

static const char *thread_level(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "single";
    case MPI_THREAD_FUNNELED: return "funneled";
    case MPI_THREAD_SERIALIZED: return "serialized";
    default: return "multiple";
    }
}

int main(int argc, char **argv) {
    Context c;
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    int length, code = 0, first = 1, provided;
    if (argc > 1 && !strcmp(argv[1], "--thread-multiple")) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        first = 2;
    } else {
        MPI_Init(&argc, &argv);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.ranks);
    c.peer = c.rank == 0 ? c.ranks / 2 : (c.rank == c.ranks / 2 ? 0 : -1);
    c.pairs = c.ranks / 2;
    c.partner = c.rank < c.pairs ? c.rank + c.pairs : c.rank - c.pairs;
    if (c.ranks < 2 || c.ranks % 2 || argc < first + 4 || (argc - first) % 4) {
        if (c.rank == 0)
            fprintf(stderr,
                    "usage: mpiexec -n 2 %s [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [...]"
                    " (an even number of ranks)\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    MPI_Get_library_version(library, &length);
    library[strcspn(library, "\n")] = '\0';
    MPI_Query_thread(&provided);
    if (c.rank == 0) printf("# library %s\n# thread level %s\n", library, thread_level(provided));
    for (int a = first; a < argc && !code; a += 4) {
        code = run_group(&c, argv[a], argv[a + 1], argv[a + 2], argv[a + 3]);
        if (code && c.rank == 0)
            fprintf(stderr, "osu_reference: bad group: %s %s %s %s\n", argv[a], argv[a + 1], argv[a + 2], argv[a + 3]);
    }
    MPI_Finalize();
    return code;
}

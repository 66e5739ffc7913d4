/* osu_reference: the timing loops of OSU Micro-Benchmarks 7.4, written plainly in C, as the yardstick that
 * benchmarks/mpi_overhead.py holds fabricbench's MPI loops against in the same run.
 *
 * Why a program of our own and not OSU itself: the machines this runs on have no OSU build, and OSU's sources may
 * not be copied. This follows the loops as documented in shared/notes/reference-tools.md, nothing more: no options,
 * no validation, no GPU buffers.
 *
 * Build (mpi_overhead.py does this in a temporary directory, with fabricbench's own wrapper):
 *     mpicc -O2 -Wall -o osu_reference benchmarks/osu_reference.c
 * Run, on 2 or more ranks:
 *     mpiexec -n 2 ./osu_reference [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [KERNELS ...]
 * KERNELS is a comma list of latency, bw, bibw, allreduce, bcast, alltoall, allgather, put; the sizes double from
 * MIN to MAX (0 is followed by 1), as OSU's -m does. Each group of four arguments runs every kernel at every size
 * with those iteration and warm-up counts. Rank 0 prints "# library FIRST LINE OF MPI_Get_library_version" and
 * "# thread level LEVEL" (what MPI_Query_thread says), then one line per kernel and size, "KERNEL SIZE VALUE":
 *   latency    one-way latency in us: the round trips' total over 2 x ITERATIONS (osu_latency)
 *   bw, bibw   MB/s, MB = 10^6 bytes; bibw counts both directions (osu_bw, osu_bibw)
 *   allreduce, bcast, alltoall, allgather
 *              us per operation: each rank's mean over the iterations, averaged over the ranks (OSU's Avg column)
 *   put        us per MPI_Put + MPI_Win_flush (osu_put_latency, MPI_Win_allocate, lock/flush), from 1 B
 * Point-to-point kernels run between rank 0 and rank N/2, as fabricbench's do. MPI starts as OSU starts it,
 * MPI_Init; --thread-multiple asks MPI_Init_thread for MPI_THREAD_MULTIPLE instead, as mpi4py does by default, to
 * tell what the thread level costs apart from what a loop costs.
 */
#define _POSIX_C_SOURCE 200112L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64 /* osu_bw's default window, and fabricbench's -W default */
#define PAGE 4096
#define TAG 1
#define ACK_TAG 2

typedef struct {
    int rank, ranks, peer;    /* peer: rank N/2 for rank 0, rank 0 for rank N/2, -1 for the others */
    long iterations, warmup;
    char *send, *recv;        /* page-aligned and written, large enough for every size of the group */
    float *fsend, *frecv;     /* the same memory as float32 vectors, for allreduce */
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

/* osu_bw (W Isend, Waitall, a 1-byte ack; the receiver W Irecv, Waitall, the ack) and osu_bibw (both sides post W
 * Irecv, then W Isend, then wait for the sends and the receives). Rank 0 times each window. */
static double window(const Context *c, int size, int both_ways) {
    MPI_Request sends[WINDOW], recvs[WINDOW];
    char ack = 1;
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
            MPI_Recv(&ack, 1, MPI_CHAR, c->peer, ACK_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(c->recv, size, MPI_CHAR, c->peer, TAG, MPI_COMM_WORLD, &recvs[w]);
            MPI_Waitall(WINDOW, recvs, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_CHAR, c->peer, ACK_TAG, MPI_COMM_WORLD);
        }
        if (c->rank == 0 && i >= c->warmup) total += MPI_Wtime() - start;
    }
    return (double)size * WINDOW * c->iterations * (both_ways ? 2 : 1) / total / 1e6;
}

/* OSU's collectives: each operation timed alone, an untimed barrier after it; each rank's mean, then the mean of
 * the ranks' means (OSU reduces SUM and divides by the rank count). Returns 0 on the ranks other than 0. */
static double collective(const Context *c, const char *kernel, int size) {
    double total = 0.0, mean_us, sum_us = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double start = MPI_Wtime();
        if (!strcmp(kernel, "allreduce"))
            MPI_Allreduce(c->fsend, c->frecv, size / (int)sizeof(float), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "bcast"))
            MPI_Bcast(c->send, size, MPI_CHAR, 0, MPI_COMM_WORLD);
        else if (!strcmp(kernel, "alltoall"))
            MPI_Alltoall(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD);
        else
            MPI_Allgather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD);
        double stop = MPI_Wtime();
        if (i >= c->warmup) total += stop - start;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    mean_us = total * 1e6 / c->iterations;
    MPI_Reduce(&mean_us, &sum_us, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum_us / c->ranks;
}

/* osu_put_latency with MPI_Win_allocate and lock/flush: a window per size, written before timing; rank 0 locks
 * the target shared once, then Put + Win_flush per operation, one timer from the end of the warm-up to the end. */
static double put(const Context *c, int size) {
    char *memory = NULL;
    MPI_Win win;
    double start = 0.0, end = 0.0;
    MPI_Win_allocate(size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &memory, &win);
    fill_bytes(memory, (size_t)size, 202);
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == 0 && c->peer >= 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, c->peer, 0, win);
        for (long i = 0; i < c->warmup + c->iterations; i++) {
            if (i == c->warmup) start = MPI_Wtime();
            MPI_Put(c->send, size, MPI_CHAR, c->peer, 0, size, MPI_CHAR, win);
            MPI_Win_flush(c->peer, win);
        }
        end = MPI_Wtime();
        MPI_Win_unlock(c->peer, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    return (end - start) * 1e6 / c->iterations;
}

static int known(const char *kernel) {
    static const char *names[] = {"latency", "bw", "bibw", "allreduce", "bcast", "alltoall", "allgather", "put"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(kernel, names[i])) return 1;
    return 0;
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
        /* Every buffer holds a block per rank (alltoall, allgather), written once, before anything is timed. */
        size_t nbytes = (size_t)hi * (size_t)c->ranks;
        c->send = page_aligned(nbytes);
        c->recv = page_aligned(nbytes);
        c->fsend = (float *)c->send;
        c->frecv = (float *)c->recv;
        if (!strcmp(kernel, "allreduce")) {
            fill_floats(c->fsend, nbytes / sizeof(float), c->rank);
            fill_floats(c->frecv, nbytes / sizeof(float), c->ranks);
        } else {
            fill_bytes(c->send, nbytes, c->rank + 1);
            fill_bytes(c->recv, nbytes, c->ranks + 1);
        }
        for (long size = lo; size <= hi; size = size ? size * 2 : 1) {
            double value;
            if (!strcmp(kernel, "latency"))
                value = latency(c, (int)size);
            else if (!strcmp(kernel, "bw") || !strcmp(kernel, "bibw"))
                value = window(c, (int)size, !strcmp(kernel, "bibw"));
            else if (!strcmp(kernel, "put") && size == 0)
                continue; /* fabricbench's put sweeps from 1 B */
            else if (!strcmp(kernel, "put"))
                value = put(c, (int)size);
            else if (!strcmp(kernel, "allreduce") && size < (long)sizeof(float))
                continue; /* no whole float32 element: OSU skips the size */
            else
                value = collective(c, kernel, (int)size);
            if (c->rank == 0) {
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
    if (c.ranks < 2 || argc < first + 4 || (argc - first) % 4) {
        if (c.rank == 0)
            fprintf(stderr, "usage: mpiexec -n 2 %s [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [...]\n",
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

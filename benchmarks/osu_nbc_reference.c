/* osu_nbc_reference: the timing loops of OSU Micro-Benchmarks 7.4's non-blocking collectives (osu_i*) and its
 * neighbourhood collectives (osu_neighbor_*, osu_ineighbor_*), written plainly in C, as the yardstick that
 * benchmarks/mpi_overhead.py holds fabricbench's --method nonblocking and neighbourhood loops against in the same
 * run. A program of its own beside osu_reference.c (same command line, same output), for the same reasons: no OSU
 * build on these machines, and OSU's sources may not be copied; this follows the loops as OSU 7.4 times them.
 *
 * Build:  mpicc -O2 -Wall -o osu_nbc_reference benchmarks/osu_nbc_reference.c
 * Run:    mpiexec -n 4 ./osu_nbc_reference [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [KERNELS ...]
 * Output: "# library ...", "# thread level ...", then "KERNEL SIZE VALUE" a line (rank 0), VALUE in us.
 *
 * Kernels:
 *   iallreduce, iallgather, ialltoall, ibcast, ireduce, ireduce_scatter, ibarrier, igather, igatherv, iscatter,
 *   iscatterv, iallgatherv, ialltoallv, ialltoallw (SIZE a rank's block, at r * SIZE, as fabricbench's),
 *   ireduce_scatter_block (SIZE the float32 vector, SIZE/4/N floats a block, OSU's portion), ineighbor_allgather,
 *   ineighbor_allgatherv, ineighbor_alltoall, ineighbor_alltoallv, ineighbor_alltoallw
 *              osu_i*. Two loops of WARMUP + ITERATIONS. First the pure communication: MPI_Wtime, start, MPI_Wait,
 *              MPI_Wtime, an untimed barrier (none for ibarrier); its mean after the warm-up on this rank is the
 *              dummy compute's length. A barrier. Then per iteration: MPI_Wtime, start, the dummy compute for that
 *              long (no MPI_Test in it: OSU's default), MPI_Wait, MPI_Wtime, an untimed barrier. The figure: the
 *              second loop's mean per rank, averaged over the ranks (OSU's Overall).
 *                                                                               fabricbench: lat_rank_avg_us
 *   neighbor_allgather, neighbor_allgatherv, neighbor_alltoall, neighbor_alltoallv, neighbor_alltoallw
 *              osu_neighbor_*: one barrier, then each operation timed alone with an untimed barrier after it; the
 *              ranks' means averaged.                                           fabricbench: lat_rank_avg_us
 * The neighbourhood is OSU's default: a periodic ring, radius 1 (sources and destinations: the rank before, then
 * the rank after), made with MPI_Dist_graph_create_adjacent, weights 1, no reordering; it needs 3 ranks or more.
 *
 * Where this differs from OSU 7.4 on purpose, as osu_reference.c does: the reductions sum float32 (fabricbench's
 * default element) from 4 B; ireduce_scatter is MPI_Ireduce_scatter_block with SIZE a rank's block; buffers are
 * written once per kernel and group; no validation, -f, -z, -t; the dummy compute is a small float matrix kernel of
 * this file's own, run in passes timed with MPI_Wtime until the target has passed, as OSU's is.
 */
#define _POSIX_C_SOURCE 200112L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096
#define SLACK 64
#define DIM 25

typedef struct {
    int rank, ranks;
    long iterations, warmup;
    char *send, *recv;
    MPI_Comm graph;                 /* the ring, for the neighbourhood kernels (MPI_COMM_NULL below 3 ranks) */
    int counts[2], displs[2];       /* the v and w forms: a block per neighbour */
    MPI_Aint bytes[2];
    MPI_Datatype types[2];
    int *vcounts, *vdispls;         /* the v-variants (igatherv, iscatterv, iallgatherv, ialltoallv, ialltoallw): */
    int *vbytes;                    /* a block per rank, SIZE bytes at r * SIZE, as fabricbench's */
    MPI_Datatype *vtypes;
} Context;

static float mat[DIM][DIM], vec[DIM];

/* One pass of the dummy compute. */
static void compute_pass(void) {
    for (int r = 0; r < DIM; r++) {
        float sum = vec[r];
        for (int c = 0; c < DIM; c++) sum += mat[r][c] * mat[c][r];
        vec[r] = sum * 0.5f;
    }
}

/* The dummy compute: passes until `seconds` have passed in them. */
static void compute_for(double seconds) {
    double spent = 0.0;
    while (spent < seconds) {
        double start = MPI_Wtime();
        compute_pass();
        spent += MPI_Wtime() - start;
    }
}

static void fill_bytes(char *buf, size_t nbytes, int seed) {
    for (size_t i = 0; i < nbytes; i++) buf[i] = (char)((i + 31u * (unsigned)seed) % 251 + 1);
}

static void fill_floats(float *buf, size_t count, int seed) {
    for (size_t i = 0; i < count; i++) buf[i] = (float)(i % 17 + (size_t)seed + 1);
}

static char *page_aligned(size_t nbytes) {
    void *buf = NULL;
    if (posix_memalign(&buf, PAGE, nbytes ? nbytes : 1) != 0) {
        fprintf(stderr, "osu_nbc_reference: cannot allocate %zu bytes\n", nbytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return buf;
}

static double ranks_mean(const Context *c, double mine) {
    double sum = 0.0;
    MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    return sum / c->ranks;
}

static int reduction(const char *kernel) {
    return !strcmp(kernel, "allreduce") || !strcmp(kernel, "reduce") || !strcmp(kernel, "reduce_scatter") ||
           !strcmp(kernel, "reduce_scatter_block");
}

/* The v and w forms' arrays for `count` elements of `type` a block. */
static void set_blocks(Context *c, int count, MPI_Datatype type) {
    int size;
    MPI_Type_size(type, &size);
    for (int i = 0; i < 2; i++) {
        c->counts[i] = count, c->displs[i] = i * count;
        c->bytes[i] = (MPI_Aint)i * count * size, c->types[i] = type;
    }
}

/* The v-variants' arrays for SIZE bytes a rank's block. */
static void set_layout(Context *c, int size) {
    for (int r = 0; r < c->ranks; r++) {
        c->vcounts[r] = size, c->vdispls[r] = r * size, c->vbytes[r] = r * size, c->vtypes[r] = MPI_CHAR;
    }
}

/* Starts the non-blocking collective `op` (its name without the "i"). */
static void start(Context *c, const char *op, int size, MPI_Request *request) {
    int floats = size / (int)sizeof(float);
    float *fs = (float *)c->send, *fr = (float *)c->recv;
    if (!strcmp(op, "gather"))
        MPI_Igather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "gatherv"))
        MPI_Igatherv(c->send, size, MPI_CHAR, c->recv, c->vcounts, c->vdispls, MPI_CHAR, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "scatter"))
        MPI_Iscatter(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "scatterv"))
        MPI_Iscatterv(c->send, c->vcounts, c->vdispls, MPI_CHAR, c->recv, size, MPI_CHAR, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "allgatherv"))
        MPI_Iallgatherv(c->send, size, MPI_CHAR, c->recv, c->vcounts, c->vdispls, MPI_CHAR, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "alltoallv"))
        MPI_Ialltoallv(c->send, c->vcounts, c->vdispls, MPI_CHAR, c->recv, c->vcounts, c->vdispls, MPI_CHAR,
                       MPI_COMM_WORLD, request);
    else if (!strcmp(op, "alltoallw"))
        MPI_Ialltoallw(c->send, c->vcounts, c->vbytes, c->vtypes, c->recv, c->vcounts, c->vbytes, c->vtypes,
                       MPI_COMM_WORLD, request);
    else if (!strcmp(op, "reduce_scatter_block")) /* SIZE is the vector: SIZE/4/N floats a block, OSU's portion */
        MPI_Ireduce_scatter_block(fs, fr, floats / c->ranks, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "allreduce"))
        MPI_Iallreduce(fs, fr, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "reduce"))
        MPI_Ireduce(fs, fr, floats, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "reduce_scatter"))
        MPI_Ireduce_scatter_block(fs, fr, floats, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "allgather"))
        MPI_Iallgather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "alltoall"))
        MPI_Ialltoall(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "bcast"))
        MPI_Ibcast(c->send, size, MPI_CHAR, 0, MPI_COMM_WORLD, request);
    else if (!strcmp(op, "barrier"))
        MPI_Ibarrier(MPI_COMM_WORLD, request);
    else if (!strcmp(op, "neighbor_allgather"))
        MPI_Ineighbor_allgather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, c->graph, request);
    else if (!strcmp(op, "neighbor_allgatherv"))
        MPI_Ineighbor_allgatherv(c->send, size, MPI_CHAR, c->recv, c->counts, c->displs, MPI_CHAR, c->graph, request);
    else if (!strcmp(op, "neighbor_alltoall"))
        MPI_Ineighbor_alltoall(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, c->graph, request);
    else if (!strcmp(op, "neighbor_alltoallv"))
        MPI_Ineighbor_alltoallv(c->send, c->counts, c->displs, MPI_CHAR, c->recv, c->counts, c->displs, MPI_CHAR,
                                c->graph, request);
    else
        MPI_Ineighbor_alltoallw(c->send, c->counts, c->bytes, c->types, c->recv, c->counts, c->bytes, c->types,
                                c->graph, request);
}

/* One blocking neighbourhood collective. */
static void neighbor(Context *c, const char *op, int size) {
    if (!strcmp(op, "neighbor_allgather"))
        MPI_Neighbor_allgather(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, c->graph);
    else if (!strcmp(op, "neighbor_allgatherv"))
        MPI_Neighbor_allgatherv(c->send, size, MPI_CHAR, c->recv, c->counts, c->displs, MPI_CHAR, c->graph);
    else if (!strcmp(op, "neighbor_alltoall"))
        MPI_Neighbor_alltoall(c->send, size, MPI_CHAR, c->recv, size, MPI_CHAR, c->graph);
    else if (!strcmp(op, "neighbor_alltoallv"))
        MPI_Neighbor_alltoallv(c->send, c->counts, c->displs, MPI_CHAR, c->recv, c->counts, c->displs, MPI_CHAR,
                               c->graph);
    else
        MPI_Neighbor_alltoallw(c->send, c->counts, c->bytes, c->types, c->recv, c->counts, c->bytes, c->types,
                               c->graph);
}

/* osu_i*: the pure communication, then the overall time with the dummy compute; the ranks' mean overall. */
static double nonblocking(Context *c, const char *op, int size) {
    MPI_Request request;
    double pure = 0.0, overall = 0.0;
    int barrier = !strcmp(op, "barrier");
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double begin = MPI_Wtime();
        start(c, op, size, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        double end = MPI_Wtime();
        if (i >= c->warmup) pure += end - begin;
        if (!barrier) MPI_Barrier(MPI_COMM_WORLD);
    }
    double target = pure / c->iterations;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double begin = MPI_Wtime();
        start(c, op, size, &request);
        compute_for(target);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        double end = MPI_Wtime();
        if (i >= c->warmup) overall += end - begin;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    return ranks_mean(c, overall * 1e6 / c->iterations);
}

/* osu_neighbor_*: each operation timed alone, an untimed barrier after it; the ranks' mean. */
static double blocking_neighbor(Context *c, const char *op, int size) {
    double total = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (long i = 0; i < c->warmup + c->iterations; i++) {
        double begin = MPI_Wtime();
        neighbor(c, op, size);
        double end = MPI_Wtime();
        if (i >= c->warmup) total += end - begin;
        MPI_Barrier(MPI_COMM_WORLD);
    }
    return ranks_mean(c, total * 1e6 / c->iterations);
}

static const char *KERNELS[] = {
    "iallreduce",          "iallgather",          "ialltoall",          "ibcast",
    "ireduce",             "ireduce_scatter",     "ibarrier",           "neighbor_allgather",
    "neighbor_allgatherv", "neighbor_alltoall",   "neighbor_alltoallv", "neighbor_alltoallw",
    "ineighbor_allgather", "ineighbor_allgatherv", "ineighbor_alltoall", "ineighbor_alltoallv",
    "ineighbor_alltoallw", "igather",          "igatherv",           "iscatter",
    "iscatterv",           "iallgatherv",         "ialltoallv",         "ialltoallw",
    "ireduce_scatter_block"};

static int known(const char *kernel) {
    for (size_t i = 0; i < sizeof KERNELS / sizeof KERNELS[0]; i++)
        if (!strcmp(kernel, KERNELS[i])) return 1;
    return 0;
}

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
        int is_nonblocking = kernel[0] == 'i';
        const char *op = is_nonblocking ? kernel + 1 : kernel;
        int is_neighbor = !strncmp(op, "neighbor_", 9), barrier = !strcmp(op, "barrier");
        if (is_neighbor && c->graph == MPI_COMM_NULL) return 3;
        size_t nbytes = (size_t)hi * (size_t)c->ranks + SLACK;
        c->send = page_aligned(nbytes);
        c->recv = page_aligned(nbytes);
        if (reduction(op)) {
            fill_floats((float *)c->send, nbytes / sizeof(float), c->rank);
            fill_floats((float *)c->recv, nbytes / sizeof(float), c->ranks);
        } else {
            fill_bytes(c->send, nbytes, c->rank + 1);
            fill_bytes(c->recv, nbytes, c->ranks + 1);
        }
        for (long size = barrier ? 0 : lo; size <= (barrier ? 0 : hi); size = size ? size * 2 : 1) {
            if (reduction(op) && (size < (long)sizeof(float) || size % (long)sizeof(float))) continue;
            set_blocks(c, (int)size, MPI_CHAR);
            set_layout(c, (int)size);
            double value = is_nonblocking ? nonblocking(c, op, (int)size) : blocking_neighbor(c, op, (int)size);
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
    for (int r = 0; r < DIM; r++) {
        vec[r] = (float)r;
        for (int col = 0; col < DIM; col++) mat[r][col] = (float)(r + col) / DIM;
    }
    c.vcounts = malloc(c.ranks * sizeof(int)), c.vdispls = malloc(c.ranks * sizeof(int));
    c.vbytes = malloc(c.ranks * sizeof(int)), c.vtypes = malloc(c.ranks * sizeof(MPI_Datatype));
    c.graph = MPI_COMM_NULL;
    if (c.ranks >= 3) {
        int around[2] = {(c.rank + c.ranks - 1) % c.ranks, (c.rank + 1) % c.ranks}, weights[2] = {1, 1};
        MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, around, weights, 2, around, weights, MPI_INFO_NULL, 0,
                                       &c.graph);
    }
    if (c.ranks < 2 || argc < first + 4 || (argc - first) % 4) {
        if (c.rank == 0)
            fprintf(stderr, "usage: mpiexec -n 4 %s [--thread-multiple] KERNELS MIN:MAX ITERATIONS WARMUP [...]\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    MPI_Get_library_version(library, &length);
    library[strcspn(library, "\n")] = '\0';
    MPI_Query_thread(&provided);
    if (c.rank == 0) printf("# library %s\n# thread level %s\n", library, provided == MPI_THREAD_MULTIPLE ?
                            "multiple" : provided == MPI_THREAD_SERIALIZED ? "serialized" :
                            provided == MPI_THREAD_FUNNELED ? "funneled" : "single");
    for (int a = first; a < argc && !code; a += 4) {
        code = run_group(&c, argv[a], argv[a + 1], argv[a + 2], argv[a + 3]);
        if (code && c.rank == 0)
            fprintf(stderr, "osu_nbc_reference: bad group (or a neighbourhood below 3 ranks): %s %s %s %s\n",
                    argv[a], argv[a + 1], argv[a + 2], argv[a + 3]);
    }
    if (c.graph != MPI_COMM_NULL) MPI_Comm_free(&c.graph);
    MPI_Finalize();
    return code;
}

/* barrier_reference: the whole MPI job a 10-iteration barrier run is held to by benchmarks/startup.py.
 *
 * OSU's osu_barrier brings its option parsing and reporting; this is the least a C program can do for the same
 * figure: MPI_Init, WARMUP untimed and ITERATIONS timed MPI_Barrier calls, rank 0 prints the mean, MPI_Finalize.
 * What a whole run of it takes is the start-up and tear-down of MPI itself, which any MPI benchmark pays.
 *
 * Build: mpicc -O2 -Wall -o barrier_reference benchmarks/barrier_reference.c
 * Run:   mpiexec -n 8 ./barrier_reference [ITERATIONS [WARMUP]]   (default 10 and 100, fabricbench's -i 10)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long iterations = argc > 1 ? atol(argv[1]) : 10;
    long warmup = argc > 2 ? atol(argv[2]) : 100;
    double timed = 0.0;
    for (long i = 0; i < warmup + iterations; i++) {
        double start = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        if (i >= warmup) timed += MPI_Wtime() - start;
    }
    if (rank == 0) printf("barrier %.2f us\n", timed / (double)iterations * 1e6);
    MPI_Finalize();
    return 0;
}

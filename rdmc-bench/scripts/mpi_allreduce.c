/*
 * mpi_allreduce: MPI_Allreduce (MPI_SUM over MPI_FLOAT) timed the way
 * `rdmc-bench allreduce-member` times rdmc's allreduce, for rdmc-bench/scripts/allreduce_netlab.sh.
 *
 * Usage: mpi_allreduce SIZE RUNS WARMUP   (SIZE in bytes, a multiple of 4)
 *
 * Every rank holds small integers ((rank * 7 + i) % 13), so the sum is exact
 * in any order and is checked on every rank. A run is: MPI_Barrier,
 * timestamp, MPI_Allreduce, timestamp; the run's time is the slowest rank's
 * (an MPI_MAX reduce). Rank 0 prints one JSON line: the median, every run's
 * time, and whether every result was exact.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nodes;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes);
    if (argc != 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_allreduce SIZE RUNS WARMUP\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long long size = atoll(argv[1]);
    int runs = atoi(argv[2]), warmup = atoi(argv[3]);
    if (size < 0 || size % 4 != 0 || runs < 1 || warmup < 0) {
        if (rank == 0) fprintf(stderr, "mpi_allreduce: bad arguments\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int count = (int)(size / 4);
    float *mine = malloc((size_t)count * sizeof(float) + 1);
    float *out = malloc((size_t)count * sizeof(float) + 1);
    float *want = malloc((size_t)count * sizeof(float) + 1);
    double *times = malloc((size_t)runs * sizeof(double));
    if (!mine || !out || !want || !times) {
        fprintf(stderr, "mpi_allreduce: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < count; i++) {
        mine[i] = (float)((rank * 7 + i) % 13);
        float s = 0;
        for (int r = 0; r < nodes; r++) s += (float)((r * 7 + i) % 13);
        want[i] = s;
    }
    int exact = 1;
    for (int run = 0; run < warmup + runs; run++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(mine, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double mine_t = MPI_Wtime() - t0, slowest = 0;
        int ok = 1, all_ok = 1;
        for (int i = 0; i < count; i++)
            if (out[i] != want[i]) { ok = 0; break; }
        MPI_Reduce(&mine_t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
        if (run >= warmup && rank == 0) {
            times[run - warmup] = slowest;
            exact &= all_ok;
        }
    }
    if (rank == 0) {
        double *sorted = malloc((size_t)runs * sizeof(double));
        for (int r = 0; r < runs; r++) sorted[r] = times[r];
        qsort(sorted, (size_t)runs, sizeof(double), cmp);
        printf("{\"system\":\"mpi\",\"experiment\":\"allreduce\",\"nodes\":%d,\"size\":%lld,"
               "\"dtype\":\"f32\",\"op\":\"sum\",\"runs\":%d,\"seconds\":%.6f,\"all\":[",
               nodes, size, runs, sorted[runs / 2]);
        for (int r = 0; r < runs; r++) printf("%s%.6f", r ? "," : "", times[r]);
        printf("],\"exact\":%s}\n", exact ? "true" : "false");
        free(sorted);
    }
    free(mine); free(out); free(want); free(times);
    MPI_Finalize();
    return 0;
}

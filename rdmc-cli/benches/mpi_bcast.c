/*
 * mpi_bcast: MPI_Bcast benchmark, the peer rdmc is compared with.
 *
 *   mpi_bcast SIZE [RUNS [WARMUP]]      (defaults: RUNS 5, WARMUP 1)
 *
 * Rank 0 fills SIZE bytes with a pattern that depends on the run number; every
 * run is: MPI_Barrier, timestamp, MPI_Bcast, timestamp; the run's time is the
 * maximum over ranks (MPI_Reduce with MPI_MAX), i.e. from the common start to
 * the last receiver done. Every rank checks every received byte of every run;
 * any mismatch makes the program print an error and exit with status 1 (via
 * MPI_Abort, so all ranks stop). Rank 0 prints one JSON line:
 *
 *   {"system":"mpi","nodes":N,"size":S,"runs":R,"seconds":MEDIAN,"all":[...],
 *    "ranks":[[T0,T1,...],...]}
 *
 * "ranks" holds, per measured run, each rank's own time from the barrier's end
 * to its MPI_Bcast returning (rank 0's is when its part of the sending ended).
 *
 * Build: mpicc -O2 -o mpi_bcast mpi_bcast.c
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Byte i of run r: cheap, position dependent, different for every run. */
static inline unsigned char pattern(uint64_t i, int run) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + (uint64_t)(run + 1) * 0xBF58476D1CE4E5B9ull;
    return (unsigned char)(x >> 56);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long long parse_count(const char *s, const char *what) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || v < 0) goto bad;
    /* Optional binary suffix: 8M = 8 MiB. */
    if (*end == 'k' || *end == 'K') { v <<= 10; end++; }
    else if (*end == 'm' || *end == 'M') { v <<= 20; end++; }
    else if (*end == 'g' || *end == 'G') { v <<= 30; end++; }
    if (*end != '\0') goto bad;
    return v;
bad:
    fprintf(stderr, "mpi_bcast: bad %s '%s'\n", what, s);
    exit(2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nodes;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes);

    if (argc < 2 || argc > 4) {
        if (rank == 0) fprintf(stderr, "usage: mpi_bcast SIZE [RUNS [WARMUP]]\n");
        MPI_Finalize();
        return 2;
    }
    long long size = parse_count(argv[1], "size");
    int runs = argc > 2 ? (int)parse_count(argv[2], "runs") : 5;
    int warmup = argc > 3 ? (int)parse_count(argv[3], "warmup") : 1;
    if (runs < 1 || size > (long long)INT32_MAX) {
        if (rank == 0) fprintf(stderr, "mpi_bcast: need RUNS >= 1 and SIZE < 2 GiB\n");
        MPI_Finalize();
        return 2;
    }

    unsigned char *buf = malloc(size ? (size_t)size : 1);
    double *times = malloc(sizeof(double) * (size_t)runs);
    /* Rank 0: every rank's own time of every run, run-major. */
    double *rank_times = malloc(sizeof(double) * (size_t)runs * (size_t)nodes);
    if (!buf || !times || !rank_times) {
        fprintf(stderr, "mpi_bcast: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    for (int r = -warmup; r < runs; r++) {
        int run = r + warmup; /* distinct pattern for every run, warm-up included */
        if (rank == 0)
            for (long long i = 0; i < size; i++) buf[i] = pattern((uint64_t)i, run);
        else
            memset(buf, 0, (size_t)size);

        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
        double mine = MPI_Wtime() - t0, slowest = 0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0 && rank == 0) times[r] = slowest;
        if (r >= 0)
            MPI_Gather(&mine, 1, MPI_DOUBLE, rank_times + (size_t)r * (size_t)nodes, 1,
                       MPI_DOUBLE, 0, MPI_COMM_WORLD);

        if (rank != 0)
            for (long long i = 0; i < size; i++)
                if (buf[i] != pattern((uint64_t)i, run)) {
                    fprintf(stderr,
                            "mpi_bcast: rank %d run %d: byte %lld is %u, expected %u\n",
                            rank, run, i, buf[i], pattern((uint64_t)i, run));
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
    }
    /* Nobody reports success before every rank has verified every run. */
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        double *sorted = malloc(sizeof(double) * (size_t)runs);
        memcpy(sorted, times, sizeof(double) * (size_t)runs);
        qsort(sorted, (size_t)runs, sizeof(double), cmp_double);
        double median = runs % 2 ? sorted[runs / 2]
                                 : (sorted[runs / 2 - 1] + sorted[runs / 2]) / 2;
        printf("{\"system\":\"mpi\",\"nodes\":%d,\"size\":%lld,\"runs\":%d,\"seconds\":%.6f,\"all\":[",
               nodes, size, runs, median);
        for (int r = 0; r < runs; r++) printf("%s%.6f", r ? "," : "", times[r]);
        printf("],\"ranks\":[");
        for (int r = 0; r < runs; r++) {
            printf("%s[", r ? "," : "");
            for (int k = 0; k < nodes; k++)
                printf("%s%.6f", k ? "," : "", rank_times[(size_t)r * (size_t)nodes + k]);
            printf("]");
        }
        printf("]}\n");
        fflush(stdout);
        free(sorted);
    }
    free(buf);
    free(rank_times);
    free(times);
    MPI_Finalize();
    return 0;
}

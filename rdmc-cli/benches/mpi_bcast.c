/*
 * mpi_bcast: MPI_Bcast benchmark, the peer rdmc is compared with.
 *
 *   mpi_bcast SIZE [RUNS [WARMUP]]      (defaults: RUNS 5, WARMUP 1)
 *   mpi_bcast --overlap M SIZE [RUNS [WARMUP]]
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
 * With --overlap M (overlapping senders, the RDMC paper's Fig. 10): every
 * rank is the root of its own communicator (MPI_Comm_dup of MPI_COMM_WORLD,
 * one per rank), and a run is M rounds of: MPI_Ibcast of SIZE bytes on every
 * communicator at once, then MPI_Waitall. Each rank holds one buffer per
 * root, which sends the same bytes every round (filled before the timed
 * part, as rdmc's senders send a payload made beforehand); every received
 * byte is checked after each run (the pattern depends on the run and the
 * root; the buffers are cleared before each run). The time and JSON line are as above ("senders": N,
 * "messages": M added).
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

/* Rank 0 prints the JSON line of the runs' times. */
/* Rank 0's JSON line; `rank_times` (every rank's own time of every run,
 * run-major) may be NULL. */
static void print_times(int nodes, long long size, int runs, const double *times,
                        int messages, const double *rank_times) {
    double *sorted = malloc(sizeof(double) * (size_t)runs);
    memcpy(sorted, times, sizeof(double) * (size_t)runs);
    qsort(sorted, (size_t)runs, sizeof(double), cmp_double);
    double median = runs % 2 ? sorted[runs / 2] : (sorted[runs / 2 - 1] + sorted[runs / 2]) / 2;
    printf("{\"system\":\"mpi\",\"nodes\":%d,\"size\":%lld,\"runs\":%d,", nodes, size, runs);
    if (messages > 0) printf("\"senders\":%d,\"messages\":%d,", nodes, messages);
    printf("\"seconds\":%.6f,\"all\":[", median);
    for (int r = 0; r < runs; r++) printf("%s%.6f", r ? "," : "", times[r]);
    printf("]");
    if (rank_times) {
        printf(",\"ranks\":[");
        for (int r = 0; r < runs; r++) {
            printf("%s[", r ? "," : "");
            for (int k = 0; k < nodes; k++)
                printf("%s%.6f", k ? "," : "", rank_times[(size_t)r * (size_t)nodes + k]);
            printf("]");
        }
        printf("]");
    }
    printf("}\n");
    fflush(stdout);
    free(sorted);
}

/* --overlap: every rank the root of its own communicator, M rounds of
 * MPI_Ibcast on all of them at once. Returns the exit status. */
static int overlap(int rank, int nodes, long long size, int messages, int runs, int warmup) {
    MPI_Comm *comms = malloc(sizeof(MPI_Comm) * (size_t)nodes);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)nodes);
    unsigned char **bufs = malloc(sizeof(unsigned char *) * (size_t)nodes);
    double *times = malloc(sizeof(double) * (size_t)runs);
    if (!comms || !reqs || !bufs || !times) {
        fprintf(stderr, "mpi_bcast: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int r = 0; r < nodes; r++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[r]);
        bufs[r] = malloc(size ? (size_t)size : 1);
        if (!bufs[r]) {
            fprintf(stderr, "mpi_bcast: rank %d: out of memory\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(bufs[r], 0, (size_t)size);
    }
    for (int k = -warmup; k < runs; k++) {
        int run = k + warmup;
        /* Like rdmc's senders, a root sends the same bytes every round:
         * filled (and the other buffers cleared) before the timed part. */
        for (int r = 0; r < nodes; r++) {
            if (r == rank)
                for (long long i = 0; i < size; i++) bufs[r][i] = pattern((uint64_t)i, run * nodes + r);
            else
                memset(bufs[r], 0, (size_t)size);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int m = 0; m < messages; m++) {
            for (int r = 0; r < nodes; r++)
                MPI_Ibcast(bufs[r], (int)size, MPI_BYTE, r, comms[r], &reqs[r]);
            MPI_Waitall(nodes, reqs, MPI_STATUSES_IGNORE);
        }
        double mine = MPI_Wtime() - t0, slowest = 0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (k >= 0 && rank == 0) times[k] = slowest;
        for (int r = 0; r < nodes; r++) {
            int tag = run * nodes + r;
            for (long long i = 0; i < size; i++)
                if (bufs[r][i] != pattern((uint64_t)i, tag)) {
                    fprintf(stderr, "mpi_bcast: rank %d run %d root %d: byte %lld is %u, expected %u\n",
                            rank, run, r, i, bufs[r][i], pattern((uint64_t)i, tag));
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) print_times(nodes, size, runs, times, messages, NULL);
    for (int r = 0; r < nodes; r++) {
        MPI_Comm_free(&comms[r]);
        free(bufs[r]);
    }
    free(comms);
    free(reqs);
    free(bufs);
    free(times);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nodes;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes);

    int messages = 0; /* 0: one MPI_Bcast from rank 0; else --overlap M */
    if (argc >= 3 && strcmp(argv[1], "--overlap") == 0) {
        messages = (int)parse_count(argv[2], "message count");
        if (messages < 1) {
            if (rank == 0) fprintf(stderr, "mpi_bcast: --overlap needs M >= 1\n");
            MPI_Finalize();
            return 2;
        }
        argv += 2;
        argc -= 2;
    }
    if (argc < 2 || argc > 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_bcast [--overlap M] SIZE [RUNS [WARMUP]]\n");
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

    if (messages > 0) {
        int rc = overlap(rank, nodes, size, messages, runs, warmup);
        MPI_Finalize();
        return rc;
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

    if (rank == 0) print_times(nodes, size, runs, times, 0, rank_times);
    free(buf);
    free(rank_times);
    free(times);
    MPI_Finalize();
    return 0;
}

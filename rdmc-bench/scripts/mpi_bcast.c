/*
 * mpi_bcast: MPI_Bcast benchmark, the peer rdmc is compared with.
 *
 *   mpi_bcast SIZE [RUNS [WARMUP]]      (defaults: RUNS 5, WARMUP 1)
 *   mpi_bcast --overlap M SIZE [RUNS [WARMUP]]
 *   mpi_bcast --burst M SIZE [RUNS [WARMUP]]
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
 * With --burst M (small messages in a burst, the RDMC paper's Fig. 7): a run
 * is M MPI_Bcast calls of SIZE bytes from rank 0, back to back, timed as
 * rdmc's bench members time theirs: from rank 0 calling its first MPI_Bcast
 * to the last rank's last MPI_Bcast returning, on CLOCK_MONOTONIC (one clock,
 * as the lab's ranks share one machine; a barrier's exit skew makes the
 * per-rank times above useless for microsecond messages). --burst 1 is one
 * message's latency. Rank 0 fills the
 * buffer once per run (a pattern of the run) and stamps each message's index
 * into its first 4 bytes (when SIZE >= 4); a receiver checks the stamp of
 * every message as it arrives and every byte of the last one after the run.
 * The JSON line is as above with "burst": M added.
 *
 * With --cosmos FILE (the Cosmos-like storage trace of `rdmc-bench --only
 * cosmos`, the same workload file its members run): one communicator per
 * group of the file (MPI_Comm_split, the group's first member its rank 0,
 * the root), and every write an MPI_Ibcast of its size on its group's
 * communicator; a replica checks the bytes, then acknowledges the write to
 * the root with a 0-byte message (every write's bytes are the first SIZE
 * bytes of one pseudo-random payload every rank makes beforehand, as rdmc's
 * bench members do), so a write is done when its root has
 * both acknowledgements (what rdmc's `delivered()` gives). A root keeps at
 * most the file's window of writes in flight, in trace order; a replica
 * posts its receives in trace order, at most the window ahead (the
 * earliest unfinished write of the trace is always posted by its root and
 * its replicas, so this cannot deadlock). One run, no warm-up, as rdmc's;
 * rank 0 prints {"system":"mpi","experiment":"cosmos","seconds":SPAN,
 * "writes":W,"latencies":[...]}: the span from a barrier to the last
 * write's acknowledgement, and every write's time from its Ibcast to its
 * second acknowledgement.
 *
 * Build: mpicc -O2 -o mpi_bcast mpi_bcast.c
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    if (messages < 0) printf("\"burst\":%d,", -messages);
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

/* CLOCK_MONOTONIC in seconds: the clock of rdmc's bench members. */
static double mono_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --burst: M MPI_Bcast of SIZE bytes from rank 0 back to back per run.
 * Returns the exit status. */
static int burst(int rank, int nodes, long long size, int messages, int runs, int warmup) {
    unsigned char *buf = malloc(size ? (size_t)size : 1);
    double *times = malloc(sizeof(double) * (size_t)runs);
    if (!buf || !times) {
        fprintf(stderr, "mpi_bcast: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int k = -warmup; k < runs; k++) {
        int run = k + warmup;
        if (rank == 0)
            for (long long i = 0; i < size; i++) buf[i] = pattern((uint64_t)i, run);
        else
            memset(buf, 0, (size_t)size);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = mono_seconds();
        for (int m = 0; m < messages; m++) {
            uint32_t stamp = (uint32_t)m;
            if (rank == 0 && size >= 4) memcpy(buf, &stamp, 4);
            MPI_Bcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
            if (rank != 0 && size >= 4 && memcmp(buf, &stamp, 4) != 0) {
                fprintf(stderr, "mpi_bcast: rank %d run %d: message %d has another's stamp\n",
                        rank, run, m);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        double done = mono_seconds(), last = 0;
        MPI_Reduce(&done, &last, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (k >= 0 && rank == 0) times[k] = last - t0;
        if (rank != 0)
            for (long long i = size >= 4 ? 4 : 0; i < size; i++)
                if (buf[i] != pattern((uint64_t)i, run)) {
                    fprintf(stderr, "mpi_bcast: rank %d run %d: byte %lld is %u, expected %u\n",
                            rank, run, i, buf[i], pattern((uint64_t)i, run));
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        print_times(nodes, size, runs, times, -messages, NULL);
    }
    free(buf);
    free(times);
    return 0;
}

/* --cosmos: the workload file's groups and writes. */
#define COSMOS_MAX_MEMBERS 16
typedef struct { int members[COSMOS_MAX_MEMBERS]; int count; } CosmosGroup;
typedef struct { int group; long long size; } CosmosWrite;


static int cosmos_read(const char *path, int *window, CosmosGroup **groups, int *ngroups,
                       CosmosWrite **writes, int *nwrites) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int gcap = 64, wcap = 256;
    *groups = malloc(sizeof(CosmosGroup) * (size_t)gcap);
    *writes = malloc(sizeof(CosmosWrite) * (size_t)wcap);
    *ngroups = 0, *nwrites = 0, *window = 1;
    while (fgets(line, sizeof line, f)) {
        char *tok = strtok(line, " \t\n");
        if (!tok || tok[0] == '#') continue;
        if (strcmp(tok, "window") == 0) {
            *window = atoi(strtok(NULL, " \t\n"));
        } else if (strcmp(tok, "group") == 0) {
            int id = atoi(strtok(NULL, " \t\n"));
            if (id != *ngroups) { fclose(f); return -2; }
            if (*ngroups == gcap) *groups = realloc(*groups, sizeof(CosmosGroup) * (size_t)(gcap *= 2));
            CosmosGroup *g = &(*groups)[(*ngroups)++];
            g->count = 0;
            while ((tok = strtok(NULL, " \t\n")) && g->count < COSMOS_MAX_MEMBERS)
                g->members[g->count++] = atoi(tok);
        } else if (strcmp(tok, "write") == 0) {
            if (*nwrites == wcap) *writes = realloc(*writes, sizeof(CosmosWrite) * (size_t)(wcap *= 2));
            CosmosWrite *w = &(*writes)[(*nwrites)++];
            w->group = atoi(strtok(NULL, " \t\n"));
            w->size = atoll(strtok(NULL, " \t\n"));
            if (w->group < 0 || w->group >= *ngroups || w->size < 0) { fclose(f); return -3; }
        }
    }
    fclose(f);
    return *window >= 1 ? 0 : -4;
}

/* What a posted request is for. */
enum { COSMOS_BCAST_ROOT, COSMOS_BCAST_REPLICA, COSMOS_ACK_RECV, COSMOS_ACK_SEND };
typedef struct { int kind, write; } CosmosOp;

static int cosmos(int rank, int nodes, const char *path) {
    int window, ngroups, nwrites;
    CosmosGroup *groups;
    CosmosWrite *writes;
    int rc = cosmos_read(path, &window, &groups, &ngroups, &writes, &nwrites);
    if (rc != 0) {
        fprintf(stderr, "mpi_bcast: rank %d: cannot read workload %s (%d)\n", rank, path, rc);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* One communicator per group; the member's position is its rank there. */
    MPI_Comm *comms = malloc(sizeof(MPI_Comm) * (size_t)ngroups);
    int *my_pos = malloc(sizeof(int) * (size_t)ngroups);
    for (int g = 0; g < ngroups; g++) {
        int pos = -1;
        for (int k = 0; k < groups[g].count; k++)
            if (groups[g].members[k] == rank) pos = k;
        if (groups[g].members[0] >= nodes) MPI_Abort(MPI_COMM_WORLD, 2);
        my_pos[g] = pos;
        MPI_Comm_split(MPI_COMM_WORLD, pos >= 0 ? g : MPI_UNDEFINED, pos, &comms[g]);
    }
    /* This rank's writes as root and as replica, in trace order. */
    int *mine_root = malloc(sizeof(int) * (size_t)nwrites), nroot = 0;
    int *mine_rep = malloc(sizeof(int) * (size_t)nwrites), nrep = 0;
    for (int w = 0; w < nwrites; w++) {
        int pos = my_pos[writes[w].group];
        if (pos == 0) mine_root[nroot++] = w;
        else if (pos > 0) mine_rep[nrep++] = w;
    }
    int cap = 4 * window * 4 + 8;
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * (size_t)cap);
    CosmosOp *ops = malloc(sizeof(CosmosOp) * (size_t)cap);
    int *done_idx = malloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++) reqs[i] = MPI_REQUEST_NULL;
    unsigned char **bufs = calloc((size_t)nwrites, sizeof(unsigned char *));
    int *acks = calloc((size_t)nwrites, sizeof(int));
    double *started = calloc((size_t)nwrites, sizeof(double));
    double *latency = calloc((size_t)nwrites, sizeof(double));
    int root_next = 0, root_inflight = 0, root_done = 0;
    int rep_next = 0, rep_inflight = 0, rep_done = 0, sends_pending = 0;
    char dummy = 0;
#define COSMOS_SLOT(k, w)                                                       \
    ({ int s_ = 0; while (s_ < cap && reqs[s_] != MPI_REQUEST_NULL) s_++;      \
       if (s_ == cap) { fprintf(stderr, "mpi_bcast: out of request slots\n");  \
                        MPI_Abort(MPI_COMM_WORLD, 1); }                         \
       ops[s_].kind = (k); ops[s_].write = (w); s_; })
    /* The payload every write is a prefix of, made before the timing. */
    long long largest = 1;
    for (int w = 0; w < nwrites; w++)
        if (writes[w].size > largest) largest = writes[w].size;
    unsigned char *payload = malloc((size_t)largest);
    if (!payload) MPI_Abort(MPI_COMM_WORLD, 1);
    for (long long i = 0; i < largest; i++) payload[i] = pattern((uint64_t)i, 1000);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    while (root_done < nroot || rep_done < nrep || sends_pending > 0) {
        while (root_next < nroot && root_inflight < window) {
            int w = mine_root[root_next++];
            long long size = writes[w].size;
            unsigned char *b = payload; /* the root only reads it */
            started[w] = MPI_Wtime();
            int comm_size = groups[writes[w].group].count;
            int s = COSMOS_SLOT(COSMOS_BCAST_ROOT, w);
            MPI_Ibcast(b, (int)size, MPI_BYTE, 0, comms[writes[w].group], &reqs[s]);
            for (int k = 1; k < comm_size; k++) {
                int a = COSMOS_SLOT(COSMOS_ACK_RECV, w);
                MPI_Irecv(&dummy, 0, MPI_BYTE, groups[writes[w].group].members[k], w,
                          MPI_COMM_WORLD, &reqs[a]);
            }
            root_inflight++;
        }
        while (rep_next < nrep && rep_inflight < window) {
            int w = mine_rep[rep_next++];
            long long size = writes[w].size;
            unsigned char *b = malloc(size ? (size_t)size : 1);
            if (!b) MPI_Abort(MPI_COMM_WORLD, 1);
            memset(b, 0, size ? (size_t)size : 1);
            bufs[w] = b;
            int s = COSMOS_SLOT(COSMOS_BCAST_REPLICA, w);
            MPI_Ibcast(b, (int)size, MPI_BYTE, 0, comms[writes[w].group], &reqs[s]);
            rep_inflight++;
        }
        int outcount = 0;
        MPI_Waitsome(cap, reqs, &outcount, done_idx, MPI_STATUSES_IGNORE);
        if (outcount == MPI_UNDEFINED) break;
        for (int j = 0; j < outcount; j++) {
            CosmosOp op = ops[done_idx[j]];
            int w = op.write;
            int g = writes[w].group;
            switch (op.kind) {
            case COSMOS_BCAST_ROOT:
                break;
            case COSMOS_ACK_RECV:
                if (++acks[w] == groups[g].count - 1) {
                    latency[w] = MPI_Wtime() - started[w];
                    root_inflight--;
                    root_done++;
                }
                break;
            case COSMOS_BCAST_REPLICA: {
                if (writes[w].size > 0 && memcmp(bufs[w], payload, (size_t)writes[w].size) != 0) {
                    fprintf(stderr, "mpi_bcast: rank %d: write %d differs\n", rank, w);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
                free(bufs[w]);
                bufs[w] = NULL;
                int s = COSMOS_SLOT(COSMOS_ACK_SEND, w);
                MPI_Isend(&dummy, 0, MPI_BYTE, groups[g].members[0], w, MPI_COMM_WORLD, &reqs[s]);
                sends_pending++;
                rep_inflight--;
                rep_done++;
                break;
            }
            case COSMOS_ACK_SEND:
                sends_pending--;
                break;
            }
        }
    }
#undef COSMOS_SLOT
    double end = MPI_Wtime(), last;
    MPI_Reduce(&end, &last, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    /* Every write's latency, at its root: summed into rank 0 (one root each). */
    double *all = rank == 0 ? calloc((size_t)nwrites, sizeof(double)) : NULL;
    MPI_Reduce(latency, all, nwrites, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long long bytes = 0;
        for (int w = 0; w < nwrites; w++) bytes += writes[w].size * (groups[writes[w].group].count - 1);
        printf("{\"system\":\"mpi\",\"experiment\":\"cosmos\",\"nodes\":%d,\"writes\":%d,"
               "\"groups\":%d,\"window\":%d,\"replica_bytes\":%lld,\"seconds\":%.6f,\"latencies\":[",
               nodes, nwrites, ngroups, window, bytes, last - t0);
        for (int w = 0; w < nwrites; w++) printf("%s%.6f", w ? "," : "", all[w]);
        printf("]}\n");
        fflush(stdout);
        free(all);
    }
    for (int g = 0; g < ngroups; g++)
        if (comms[g] != MPI_COMM_NULL) MPI_Comm_free(&comms[g]);
    free(comms); free(my_pos); free(mine_root); free(mine_rep); free(reqs); free(ops);
    free(done_idx); free(bufs); free(payload); free(acks); free(started); free(latency);
    free(groups); free(writes);
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nodes;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nodes);

    if (argc >= 3 && strcmp(argv[1], "--cosmos") == 0) {
        int rc = cosmos(rank, nodes, argv[2]);
        MPI_Finalize();
        return rc;
    }
    int messages = 0; /* 0: one MPI_Bcast from rank 0; else --overlap/--burst M */
    int bursts = 0;
    if (argc >= 3 && (strcmp(argv[1], "--overlap") == 0 || strcmp(argv[1], "--burst") == 0)) {
        bursts = strcmp(argv[1], "--burst") == 0;
        messages = (int)parse_count(argv[2], "message count");
        if (messages < 1) {
            if (rank == 0) fprintf(stderr, "mpi_bcast: %s needs M >= 1\n", argv[1]);
            MPI_Finalize();
            return 2;
        }
        argv += 2;
        argc -= 2;
    }
    if (argc < 2 || argc > 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_bcast [--overlap M | --burst M] SIZE [RUNS [WARMUP]] | mpi_bcast --cosmos FILE\n");
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

    if (messages > 0 && bursts) {
        int rc = burst(rank, nodes, size, messages, runs, warmup);
        MPI_Finalize();
        return rc;
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

/* How long io_init takes, launching the daemon and attaching to one, and how
 * long the first io_write after it takes (bench/init.sh runs it).
 *
 *   init_bench RANK RANKS HOLD_SECONDS [BYTES [DELAY_SECONDS]]
 *
 * Calls io_init with a buffer of BYTES (default 64 MiB) as node rank RANK of
 * RANKS, waits DELAY_SECONDS (default 0: a program computes before its first
 * checkpoint), writes it once, waits HOLD_SECONDS (so that a daemon it
 * launched stays up for others to attach to), and finalizes. Prints one line:
 * "init_ms X first_write_ms Y". No MPI: each run is one process. */
#include <io.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: init_bench RANK RANKS HOLD_SECONDS [BYTES [DELAY_SECONDS]]\n");
        return 2;
    }
    const unsigned rank = (unsigned)atoi(argv[1]), ranks = (unsigned)atoi(argv[2]);
    const double hold = atof(argv[3]);
    const size_t len = argc > 4 ? (size_t)strtoull(argv[4], NULL, 10) : (size_t)64 << 20;
    const double delay = argc > 5 ? atof(argv[5]) : 0;
    char* buf = malloc(len);
    if (!buf)
        return 1;
    memset(buf, (int)rank + 1, len); /* its pages exist before the clock starts */
    const double t0 = now();
    if (io_init(buf, len, rank, ranks, NULL, 1) != 0) {
        fprintf(stderr, "init_bench: io_init: %s\n", io_last_error());
        return 1;
    }
    const double t1 = now();
    if (delay > 0)
        usleep((useconds_t)(delay * 1e6));
    const double t1w = now();
    if (io_write(len) != 0) {
        fprintf(stderr, "init_bench: io_write: %s\n", io_last_error());
        return 1;
    }
    const double t2 = now();
    printf("init_ms %.3f first_write_ms %.3f\n", (t1 - t0) * 1e3, (t2 - t1w) * 1e3);
    fflush(stdout);
    if (hold > 0)
        usleep((useconds_t)(hold * 1e6));
    if (io_finalize() != 0) {
        fprintf(stderr, "init_bench: io_finalize: %s\n", io_last_error());
        return 1;
    }
    free(buf);
    return 0;
}

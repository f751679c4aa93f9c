/* One simulated node of a job for bench/commit.sh: one rank that launches
 * its own daemon and writes VERSIONS versions of BYTES each, then finalizes,
 * which waits until the newest version is complete job-wide.
 *
 *   commit_sim VERSIONS BYTES
 *
 * The node's name, the job's node count and the run's name come from the
 * environment (IOFWD_NODE, IOFWD_NODES, IOFWD_RUN), as on a real node. No
 * MPI: bench/commit.sh starts one process per simulated node. */
#include <io.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: commit_sim VERSIONS BYTES\n");
        return 2;
    }
    const long versions = atol(argv[1]);
    const size_t len = (size_t)strtoull(argv[2], NULL, 10);
    char* buf = malloc(len ? len : 1);
    if (!buf || versions < 1 || len == 0)
        return 2;
    if (io_init_run(buf, len, 0, 1, 0, NULL, NULL, 1) != 0) {
        fprintf(stderr, "commit_sim: io_init: %s\n", io_last_error());
        return 1;
    }
    for (long v = 0; v < versions; ++v) {
        memset(buf, (int)(v & 0xff), len);
        uint64_t version = 0;
        if (io_write_version(len, &version) != 0 || io_wait(version) != 0) {
            fprintf(stderr, "commit_sim: version %ld: %s\n", v, io_last_error());
            return 1;
        }
    }
    if (io_finalize() != 0) {
        fprintf(stderr, "commit_sim: io_finalize: %s\n", io_last_error());
        return 1;
    }
    free(buf);
    return 0;
}

/* iofwd for MPI programs: io_init from a communicator.
 *
 *   #include <io_mpi.h>      (after mpi.h is found: compile with mpicc)
 *   io_init_comm(MPI_COMM_WORLD, buf, len, NULL, 1);
 *   ... io_write(len) ...
 *   io_finalize();
 *
 * io_init_comm is collective over `comm`: call it from every rank of the
 * communicator, after MPI_Init. It finds each rank's node-local rank and the
 * node's ranks (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED), counts the
 * nodes, and gives the run a name that rank 0 makes and broadcasts, so that
 * every node's daemon numbers this run's versions alike, whenever it starts
 * (IOFWD_NODES need not be set). It returns on no rank before every rank's
 * io_init_run has returned, so that a restart's io_latest answers the same on
 * every rank.
 *
 * On a job of several nodes, io_finalize then becomes collective over `comm`
 * too: once this rank's data is durable it waits (MPI_Ibarrier, at most
 * IOFWD_FINALIZE_TIMEOUT seconds, default 60) for every rank, and checks that
 * the newest version this rank wrote is complete on every node.
 *
 * Everything here is inline: the library itself does not depend on MPI, and
 * the MPI your program uses is the one these calls go to.
 */
#ifndef IOFWD_IO_MPI_H
#define IOFWD_IO_MPI_H

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include <mpi.h>

#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A nonblocking barrier over `comm`, polled with short sleeps so that a rank
 * waiting here leaves the core to the daemon and to the others; at most
 * timeout_s seconds (0: no bound). */
static inline int io_mpi_wait_all_(MPI_Comm comm, double timeout_s)
{
    MPI_Request req;
    double until;
    int done = 0;
    if (MPI_Ibarrier(comm, &req) != MPI_SUCCESS)
        return EIO;
    until = MPI_Wtime() + timeout_s;
    for (;;) {
        struct timespec pause = {0, 1000000};
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return EIO;
        if (done)
            break;
        if (timeout_s > 0 && MPI_Wtime() > until)
            return ETIMEDOUT; /* a rank never came; the request stays */
        nanosleep(&pause, NULL);
    }
    return 0;
}

/* io_finalize's barrier (io_set_barrier), on a private copy of the
 * communicator. */
static inline int io_mpi_barrier_(void *ctx, double timeout_s)
{
    MPI_Comm *comm = (MPI_Comm *)ctx;
    int rc = io_mpi_wait_all_(*comm, timeout_s);
    if (rc != 0)
        return rc; /* the copy stays with its pending request */
    MPI_Comm_free(comm);
    free(comm);
    return 0;
}

/* io_init for the ranks of `comm` (see above). Returns what io_init_run
 * returns; collective, so every rank must call it. */
static inline int io_init_comm(MPI_Comm comm, void *buffer, uint64_t len, char **daemon_args,
                               int blocking)
{
    int rank = 0, local_rank = 0, local_size = 1, leader, nodes = 0, rc;
    char run[64] = "";
    MPI_Comm node, *copy;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    leader = local_rank == 0;
    MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, comm);
    if (rank == 0 && io_new_run_name(run, sizeof run) != 0)
        run[0] = '\0'; /* every rank then falls back to the environment */
    MPI_Bcast(run, (int)sizeof run, MPI_CHAR, 0, comm);

    /* Collective, so before anything that can fail on one rank only. */
    copy = (MPI_Comm *)malloc(sizeof *copy);
    if (!copy) {
        MPI_Comm unused; /* the others go through the same collectives */
        MPI_Comm_dup(comm, &unused);
        MPI_Comm_free(&unused);
        if (nodes > 1)
            io_mpi_wait_all_(comm, 0);
        return ENOMEM;
    }
    MPI_Comm_dup(comm, copy);
    rc = io_init_run(buffer, len, (uint32_t)local_rank, (uint32_t)local_size, (uint32_t)nodes,
                     run[0] ? run : NULL, daemon_args, blocking);
    if (rc == 0 && nodes > 1)
        rc = io_set_barrier(io_mpi_barrier_, copy);
    else {
        MPI_Comm_free(copy);
        free(copy);
    }
    /* Every rank, failed or not: when one returns, every node's daemon has
     * taken the job, and with it completed what its journal held of an
     * earlier run (a version its ranks were told was durable before their
     * daemon died). io_latest then answers alike on every rank: without this
     * barrier a rank of one node could restart from a version that another
     * node's daemon completes a moment later. Polled with sleeps, as
     * io_finalize's: the ranks of a node that is still launching its daemon
     * leave it the cores. One node's daemon has claimed before it answers
     * any rank. */
    if (nodes > 1)
        io_mpi_wait_all_(comm, 0);
    return rc;
}

#ifdef __cplusplus
}
#endif

#endif /* IOFWD_IO_MPI_H */

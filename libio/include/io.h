/* iofwd: asynchronous checkpoint forwarding for MPI codes.
 *
 * A rank hands its checkpoint buffer to the node's daemon (iod) with
 * io_write(); the daemon pulls the bytes over UCX, lets io_write() return,
 * and makes them durable in the store while the rank computes.
 * io_finalize() returns once everything the rank wrote is durable.
 *
 * Every call returns 0 or an errno-style code (EINVAL, ECONNRESET, ...);
 * io_last_error() says in words what went wrong. Calls from several threads
 * of one process are serialised.
 */
#ifndef IOFWD_IO_H
#define IOFWD_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define IO_API __attribute__((visibility("default")))
#else
#define IO_API
#endif

/* Initialises the library for this process. Call once, after MPI_Init.
 *
 *   buffer, len   the memory io_write() will hand over (any size, 64-bit);
 *                 registered with UCX until io_finalize()
 *   rank, ranks   this process's rank among the job's ranks on this node
 *                 (e.g. from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED))
 *   daemon_args   argv (NULL-terminated) to start iod with when none serves
 *                 this job on the node; NULL for the built iod and its
 *                 defaults (configured through IOFWD_* variables)
 *   blocking      1: wait asleep on file descriptors; 0: busy-poll (lowest
 *                 latency, one core spinning while waiting)
 *
 * Exactly one process per node launches the daemon; the others attach. Waits
 * at most IOFWD_LAUNCH_TIMEOUT seconds (default 30) for it. */
IO_API int io_init(void *buffer, uint64_t len, uint32_t rank, uint32_t ranks,
                   char **daemon_args, int blocking);

/* io_init for a job that spans several nodes (each with its own daemon),
 * told explicitly instead of through the environment. io_init_comm (io_mpi.h)
 * calls it with what it learns from a communicator.
 *
 *   nodes   the job's nodes; 0: IOFWD_NODES, else SLURM_STEP_NUM_NODES (or
 *           SLURM_NNODES) inside an srun step, else 1
 *   run     this run's name, the same string on every node and new for every
 *           run (io_new_run_name); NULL: IOFWD_RUN, else "slurm-<job>.<step>"
 *           inside an srun step, else none
 *
 * With a run name, every node numbers the run's versions from one record in
 * the store, whenever its daemon starts. Without one, each daemon numbers
 * from what it finds in the store when its first rank connects: nodes that
 * start apart can disagree, and io_finalize then fails (EIO) saying so. */
IO_API int io_init_run(void *buffer, uint64_t len, uint32_t rank, uint32_t ranks, uint32_t nodes,
                       const char *run, char **daemon_args, int blocking);

/* Writes a new run name into out (at most size bytes, NUL included; 48
 * suffice): the time and 64 random bits, e.g. "20261123T164512-3f9a2b7c01d4e5f6".
 * One rank makes it and passes it to the others. EINVAL if size is too small. */
IO_API int io_new_run_name(char *out, size_t size);

/* Makes io_finalize, once this rank's data is durable, call barrier(ctx,
 * timeout_s) to wait for every rank of the job (0 when all arrived, an errno
 * value such as ETIMEDOUT otherwise), and then check at once that the newest
 * version this rank wrote is complete on every node. io_init_comm sets an
 * MPI barrier on its communicator; without a barrier io_finalize waits for
 * the other nodes' records in the store (at most IOFWD_FINALIZE_TIMEOUT
 * seconds, default 60). NULL removes it. Call after io_init; io_finalize
 * forgets it. */
IO_API int io_set_barrier(int (*barrier)(void *ctx, double timeout_s), void *ctx);

/* Hands [0, len) of the buffer to the daemon as a new version. Returns once the
 * daemon holds the bytes: the buffer may then be reused. All or nothing: on
 * error no part of this version is stored. 0 < len <= the length given to
 * io_init(). */
IO_API int io_write(uint64_t len);

/* Like io_write(), and reports the version number the write created. */
IO_API int io_write_version(uint64_t len, uint64_t *version);

/* Blocks until `version` of this process's data is durable in the store.
 * Errors: the version could not be made durable (the store's errno, e.g.
 * ENOSPC), or ENOENT for a version this process did not write. A version the
 * daemon already said is durable (every one of this run up to it is) is
 * answered without asking it: 0 even if the daemon has gone since, as the
 * data is durable. io_test() likewise. */
IO_API int io_wait(uint64_t version);

/* Where `version` of this process's data is, without blocking. */
enum io_state {
    IO_STATE_UNKNOWN = 0,   /* not written by this process in this run */
    IO_STATE_PULLING = 1,   /* being pulled (io_write has not returned) */
    IO_STATE_FLUSHING = 2,  /* in daemon memory, on its way to the store */
    IO_STATE_DURABLE = 3,
    IO_STATE_FAILED = 4     /* could not be made durable; io_wait says why */
};
IO_API int io_test(uint64_t version, int *state);

/* When the daemon began writing `version` of this process's data to the store
 * and when that version was durable there, in seconds of this node's
 * CLOCK_MONOTONIC clock (clock_gettime: comparable between the processes of
 * one node, not between nodes). The version's flush throughput is its bytes
 * over *durable - *start; a checkpoint's, on a node, all its ranks' bytes over
 * the earliest start to the latest durable time. EINVAL for a version that is
 * not durable (yet: call io_wait first), ENOENT for one this process did not
 * write in this run. */
IO_API int io_flush_span(uint64_t version, double *start, double *durable);

/* Reads this process's data of `version` back into `buffer` (at most `len`
 * bytes; EFBIG if the version is larger) and checks its crc32c: EBADMSG, with
 * the object and version named in io_last_error(), when the bytes are
 * damaged. A version the daemon still holds whole in its memory is served
 * from there; otherwise it is read from the store once durable. A version
 * from an earlier run is found through its job-wide COMPLETE record. On
 * success *size (if not NULL) is the version's length. */
IO_API int io_read(uint64_t version, void *buffer, uint64_t len, uint64_t *size);

/* The newest version that is complete for the whole job (every rank on every
 * node durable). Works before io_init too, in a new job restarting under the
 * same job name (IOFWD_JOB, IOFWD_STORE). ENOENT when there is none.
 * A restart asks after io_init_comm (or after io_init and a barrier over the
 * job): a version whose daemon died after answering it durable from its
 * node's journal is completed when that node's next daemon takes the job. */
IO_API int io_latest(uint64_t *version);

/* Like io_latest, but reads every object of each candidate version and skips
 * versions that fail their checksums (io_last_error() names them), falling
 * back to the previous complete one. */
IO_API int io_latest_verified(uint64_t *version);

/* The version number the next io_write() of this process will create (versions
 * continue after those already in the store for this job). */
IO_API int io_next_version(uint64_t *version);

/* Waits until everything this process wrote is durable, releases UCX, and, in
 * the process that launched the daemon, waits for the daemon to exit. Returns
 * an error if any version could not be made durable or the daemon failed. On
 * a job of several nodes it also confirms that the newest version this rank
 * wrote is complete on every node (see io_set_barrier): EIO, saying which
 * nodes have it, when it is not. */
IO_API int io_finalize(void);

/* The text of an error code returned by these calls. */
IO_API const char *io_strerror(int code);

/* What the last failing call of this process said: which call, rank, daemon
 * and object, what happened, what to try. Empty if nothing failed. */
IO_API const char *io_last_error(void);

/* The UCX transports that carry this rank's data to the daemon (e.g.
 * "cma, posix"); "none" before io_init(). */
IO_API const char *io_provider_name(void);

/* Where the daemon stores this job's data (e.g. "directory /scratch/ckpt/myjob");
 * "none" before io_init(). */
IO_API const char *io_store_location(void);

/* The name of this node in the store ("none" before io_init()). */
IO_API const char *io_node_name(void);

/* The pid of the daemon serving this process (0 before io_init()), for tools
 * that watch its CPU time and memory. */
IO_API int io_daemon_pid(void);

#ifdef __cplusplus
}
#endif

#endif /* IOFWD_IO_H */

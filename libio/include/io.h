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

/* Hands [0, len) of the buffer to the daemon as a new version. Returns once the
 * daemon holds the bytes: the buffer may then be reused. All or nothing: on
 * error no part of this version is stored. 0 < len <= the length given to
 * io_init(). */
IO_API int io_write(uint64_t len);

/* Like io_write(), and reports the version number the write created. */
IO_API int io_write_version(uint64_t len, uint64_t *version);

/* The version number the next io_write() of this process will create (versions
 * continue after those already in the store for this job). */
IO_API int io_next_version(uint64_t *version);

/* Waits until everything this process wrote is durable, releases UCX, and, in
 * the process that launched the daemon, waits for the daemon to exit. Returns
 * an error if any version could not be made durable or the daemon failed. */
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

#ifdef __cplusplus
}
#endif

#endif /* IOFWD_IO_H */

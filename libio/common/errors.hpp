#pragma once
// Error codes of the iofwd runtime, shared by the client library and the daemon.
//
// Two categories: iofwd::errc for the runtime's own conditions, and one that
// carries ucs_status_t values from UCX. Both convert to an errno value for the
// C API (to_errno), so a C caller can branch on the code while the message in
// words says what happened.
#include <cstdint>
#include <string>
#include <system_error>

#include <ucs/type/status.h>

namespace iofwd {

enum class errc : int {
    not_initialized = 1,   // a call before io_init or after io_finalize
    already_initialized,   // io_init twice
    invalid_argument,      // bad length, bad rank, bad option
    too_large,             // a length over the registered buffer or a limit
    daemon_gone,           // the daemon's control connection broke
    daemon_launch_failed,  // iod died or exited during start without saying why
    daemon_timeout,        // no daemon became ready in time
    daemon_failed,         // the daemon exited with an error
    protocol_error,        // a malformed message
    version_mismatch,      // the peer speaks another protocol version
    permission_denied,     // a peer of another user
    rank_in_use,           // two clients claim the same node-local rank
    rank_mismatch,         // clients disagree on the number of ranks
    peer_gone,             // (daemon side) the rank's process went away
    store_error,           // the store could not make the data durable
    corrupt,               // stored bytes do not match their checksum
    not_found,             // no such object / version
    shutting_down,         // the daemon is stopping and takes no new work
    exists,                // (store) the name is taken: an exclusive create lost
    incomplete,            // a version this rank wrote is not complete job-wide
    unsafe_path,           // (store) another user's, writable by others, a symlink, not a file
    job_finishing,         // the daemon still finishes the previous job; try again shortly
    newer_format,          // (store) a job kept in a layout newer than this iofwd reads
};

const std::error_category& runtime_category() noexcept;
std::error_code make_error_code(errc e) noexcept;

// ucs_status_t (a negative number) as an error_code; UCS_OK maps to success.
const std::error_category& ucx_category() noexcept;
std::error_code make_ucx_error(ucs_status_t status) noexcept;

// The errno-style value the C API returns for an error code (0 for success).
int to_errno(const std::error_code& ec) noexcept;

// The same as std::error_code(errno, std::system_category()), spelled short.
inline std::error_code last_system_error() noexcept
{
    return {errno, std::system_category()};
}

}  // namespace iofwd

template <>
struct std::is_error_code_enum<iofwd::errc> : std::true_type {};

#pragma once
// Finding the node's daemon, or starting it: exactly one process per session
// launches iod, even when every rank arrives at once.
//
// The election is an flock on the session's lock file. A rank that gets the
// lock starts iod with posix_spawn and hands it the locked descriptor, so the
// lock belongs to the daemon from then on and the kernel drops it when the
// daemon dies. Ranks that find the lock taken wait for the socket to accept,
// and take over the election if the lock comes free (a daemon that died, or
// one finishing its exit), all within one deadline.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <system_error>

#include "fd.hpp"
#include "rendezvous.hpp"

namespace iofwd::client {

struct daemon_link {
    unique_fd control;  // connected control socket
    pid_t child = -1;   // the daemon, when this process launched it
};

// daemon_args: argv to start iod with (NULL for the built iod). Returns a
// sentence in `why` on failure (with the daemon's own words when it failed to
// start).
std::error_code attach_or_launch(const runtime_paths& paths, char** daemon_args,
                                 std::chrono::milliseconds timeout, daemon_link& out,
                                 std::string& why);

// Waits for a child to exit (at most `timeout`, 0 for no limit); its exit status in `status`.
std::error_code wait_child(pid_t pid, std::chrono::milliseconds timeout, int& status);

}  // namespace iofwd::client

#pragma once
// A rank's UCX worker address and packed remote keys come from the rank, and
// UCX 1.13 unpacks them with no length in hand: it reads as far as the bytes
// themselves say and aborts the process on some malformed ones (an assertion
// in address unpacking), which would lose every rank's data in flight. So
// before the daemon's own UCX sees them, a sacrificial child process (iod
// --check-peer-fd, spawned before the daemon's UCX exists) creates an endpoint
// to the address and unpacks the key on it, with a UCX of its own. If the
// child dies doing so, the peer's bytes are refused and a new child is started
// for the next one. Lives on the event-loop thread; each check is one round
// trip (about a millisecond) at CONNECT.
#include <sys/types.h>

#include <cstddef>
#include <span>
#include <string>
#include <system_error>

#include "fd.hpp"

namespace iofwd::iod {

class peer_check final {
public:
    peer_check() = default;
    peer_check(const peer_check&) = delete;
    peer_check& operator=(const peer_check&) = delete;
    ~peer_check();

    // Starts the child. Call before this process initialises UCX.
    std::error_code start(std::string& why);
    // True when UCX can take `address` (and `rkey`, if not empty, on an
    // endpoint to it); false with `why` otherwise.
    bool usable(std::span<const std::byte> address, std::span<const std::byte> rkey,
                std::string& why);

private:
    std::error_code spawn(std::string& why);
    void stop();

    unique_fd sock_;
    pid_t child_ = -1;
};

// The child's side: answers checks on `fd` until it closes. Returns the exit
// status.
int run_peer_check(int fd);

}  // namespace iofwd::iod

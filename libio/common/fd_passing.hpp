#pragma once
// File descriptors sent along with bytes over a Unix stream socket
// (SCM_RIGHTS): the daemon hands a rank its mailbox this way (mailbox.hpp).
#include <sys/types.h>

#include <cstddef>
#include <span>
#include <vector>

#include "fd.hpp"

namespace iofwd {

// sendmsg of `bytes` with `fds` (at most 4) attached; retries EINTR. Returns
// what sendmsg returns (bytes sent, or -1 and errno).
ssize_t send_with_fds(int sock, std::span<const std::byte> bytes, std::span<const int> fds);

// One recvmsg into `buf` with `flags` (MSG_CMSG_CLOEXEC is added); descriptors
// that came with the bytes are appended to `fds`. Returns what recvmsg returns.
ssize_t receive_with_fds(int sock, std::span<std::byte> buf, int flags, std::vector<unique_fd>& fds);

}  // namespace iofwd

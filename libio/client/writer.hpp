#pragma once
// The rank's side of every write: checkpoint versions (io_write) and the MPI
// shim's forwarded files (FILE_*). A small write goes into the daemon's
// mailbox (shared memory) and returns without a round trip; otherwise it is
// announced on the control connection and its bytes travel inline (up to
// IOFWD_EAGER_LIMIT and 64 KiB), are pushed as UCX rendezvous active
// messages that the daemon reads itself (one per staging chunk), or are got
// by the daemon with a key we send. A write returns once the daemon holds every byte, and the
// caller's memory is its own again only once UCX is done with every chunk.
#include <chrono>
#include <cstdint>
#include <array>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "connection.hpp"
#include "fd.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace iofwd::client {

class writer final {
public:
    writer(connection& conn, std::string& why) : conn_(conn), why_(why) {}
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    ~writer() { close(); }

    struct setup {
        const proto::accept_msg* accept = nullptr;
        std::vector<unique_fd> fds;  // what came with ACCEPT: the mailbox and its doorbell
        ucx::worker* worker = nullptr;
        const ucx::context* context = nullptr;
        int efd = -1;
        bool blocking = true;
        bool push = false;  // large writes are pushed (else the daemon gets them)
        std::uint32_t rank = 0;  // node-local: where each write's first chunk goes
        std::uint64_t eager_limit = 0;  // IOFWD_EAGER_LIMIT: through the mailbox or inline
        std::chrono::milliseconds silence{60'000};  // IOFWD_DAEMON_TIMEOUT
    };
    // After ACCEPT: the mailbox, and an endpoint to each of the daemon's pullers.
    std::error_code open(setup s);
    // Lets go of the endpoint and the mailbox.
    void close();

    // Version `version` of [buffer, buffer + len) (registered as `memh`).
    std::error_code write(const void* buffer, std::uint64_t len, ucp_mem_h memh,
                          std::uint64_t& version);
    // The version the next write will create (while known).
    std::uint64_t next_version() const noexcept { return next_version_; }
    // The newest version this rank wrote (0: none).
    std::uint64_t last_written() const noexcept { return last_written_; }
    // Whether a write of `len` bytes travels inside its request whatever
    // happens: the daemon then never reads the caller's buffer. (A larger
    // one the mailbox may take goes over UCX when the mailbox is full.)
    bool travels_inline(std::uint64_t len) const noexcept { return len <= inline_limit(); }
    bool has_mailbox() const noexcept { return static_cast<bool>(mailbox_); }
    // What the daemon said is durable through the mailbox
    // (mailbox::writer::durable_through); 0 without one.
    std::uint64_t durable_through() const noexcept { return mailbox_.durable_through(); }
    // Faults in the mailbox's pages (mailbox::writer::prefault): from any
    // thread, beside write().
    std::error_code prefault_mailbox(const std::stop_token& stop,
                                     const std::function<void()>& between) const
    {
        return mailbox_.prefault(stop, between);
    }

    // The shim's files; `file` is the caller's nonzero number for it.
    std::error_code file_open(std::uint64_t file, const std::string& path);
    std::error_code file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                               std::uint64_t len, std::vector<proto::file_run> runs = {});
    std::error_code file_sync(std::uint64_t file, std::uint32_t flags);
    std::error_code file_drain(const std::string& path);

private:
    // A small write through the mailbox: `put` writes the record (given its
    // cookie; sets whether to ring). False: take the socket instead.
    bool mail(std::uint64_t len, const std::function<bool(std::uint64_t, bool&)>& put);
    // A pushed write: its chunks' headers (UCX reads them until each send
    // completes) and send requests.
    struct push_state {
        std::vector<std::array<std::byte, proto::push_header_size>> headers;
        std::vector<void*> requests;
    };
    // Posts [data, data + len) of write `cookie` as rendezvous active
    // messages, one per daemon chunk, dealt over the pullers in turn so that
    // they copy at once; memh may be null (UCX registers).
    std::error_code push(std::uint64_t cookie, const void* data, std::uint64_t len, ucp_mem_h memh,
                         push_state& out);
    // Waits until every send of `p` completed (the daemon read the bytes or
    // refused them); cancels them if the daemon is gone or silent.
    std::error_code wait_pushed(push_state& p);
    // Bytes a write request announces and the rank then pushes.
    struct push_source {
        const void* data;
        std::uint64_t len;
        ucp_mem_h memh;  // null: UCX registers them itself
    };
    // Sends `request`, pushes `src` (when given) as its chunks, and returns
    // the daemon's answer once UCX is done with every chunk.
    std::error_code exchange(proto::message request, std::uint64_t cookie,
                             const push_source* src, proto::message& answer);
    // Sends a FILE_* request (pushing `src`, when given) and waits for its
    // FILE_DONE or WRITE_DONE.
    std::error_code file_request(proto::message m, std::uint64_t cookie, const std::string& what,
                                 const push_source* src = nullptr);
    std::error_code fail(std::error_code ec, std::string why);
    void close_daemon_eps();

    connection& conn_;
    std::string& why_;
    bool open_ = false;
    const proto::accept_msg* accept_ = nullptr;
    ucx::worker* worker_ = nullptr;
    const ucx::context* context_ = nullptr;
    int efd_ = -1;
    bool blocking_ = true;
    std::uint64_t eager_limit_ = 0;
    // What a request carries inline, and what goes through the mailbox.
    std::uint64_t inline_limit() const noexcept
    {
        return std::min<std::uint64_t>(eager_limit_, proto::max_eager);
    }
    std::uint64_t mail_limit() const noexcept
    {
        return std::min<std::uint64_t>(eager_limit_, mailbox_.max_length());
    }
    std::chrono::milliseconds silence_{60'000};
    std::vector<ucx::endpoint> daemon_eps_;  // to push writes to, a puller each
    std::size_t home_ep_ = 0;                // where each write's first chunk goes
    // Small writes go through the daemon's mailbox while the rank's next
    // version number is known (an io_write that failed on the socket leaves
    // it to the daemon's next WRITE_DONE).
    mailbox::writer mailbox_;
    unique_fd doorbell_;
    bool version_known_ = false;
    std::uint64_t next_version_ = 0;
    std::uint64_t last_written_ = 0;
    std::chrono::steady_clock::time_point socket_checked_{};  // last look for a dead daemon
};

}  // namespace iofwd::client

#pragma once
// The rank's control connection to its daemon: framed messages over the
// session's Unix socket, and the wait for an answer.
//
// While it waits it keeps progressing the rank's UCX worker (UCX 1.13 serves
// the daemon's read of user memory only while the owner progresses), asleep
// on the worker's event fd and the socket in blocking mode, spinning in
// polling mode. No wait lasts forever: a daemon that says nothing for half of
// IOFWD_DAEMON_TIMEOUT is sent a heartbeat (PING), and one that answers
// nothing at all for the whole of it is declared dead (errc::daemon_timeout).
//
// A failure leaves its sentence in the `why` string given at construction
// (the client's one sentence for io_last_error); once the connection is
// broken every later request fails at once with broken_error().
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "fd.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace iofwd::client {

class connection final {
public:
    explicit connection(std::string& why) : why_(why) {}
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    // A connected socket to the daemon (made non-blocking here); `worker`
    // (may be empty until UCX exists) is progressed while waiting, asleep on
    // `efd` (-1: none) when `blocking`.
    void attach(unique_fd control, std::chrono::milliseconds silence);
    void use_worker(ucx::worker* worker, int efd, bool blocking) noexcept;
    // For messages: the daemon's pid, its socket and its log.
    void describe(std::uint32_t daemon_pid, std::string socket, std::string log);
    // Closes the socket and forgets what was read; usable again after attach.
    void reset();

    std::uint64_t next_cookie() noexcept { return next_cookie_++; }

    std::error_code send(const proto::message& m);
    // When a blocking wait polls before it sleeps on the socket and UCX.
    enum class polling {
        // For a moment after UCX last did something.
        after_activity,
        // From the start too: the daemon is getting our bytes over UCX right
        // now, and replies to it must go out at once.
        moving,
        // Never: the daemon reads pushed bytes itself and UCX traffic is only
        // its acknowledgements; polling would take a core from its copy.
        never,
    };
    // The next message from the daemon. timeout 0: as long as the daemon
    // lives and answers heartbeats.
    std::error_code receive(proto::message& out, std::chrono::milliseconds timeout,
                            polling poll = polling::after_activity);
    // Sends a QUERY and returns its answer (a VERSION_STATE or the error).
    std::error_code query(std::uint64_t version, bool wait, proto::version_state_msg& out);
    // An answer that is not the one `request` expects: the daemon's ERROR, or
    // a protocol error that leaves the connection unusable.
    std::error_code unexpected(const proto::message& m, const std::string& request);
    // The daemon's ERROR as the result of a request (cookie 0: the
    // connection is over).
    std::error_code daemon_error(const proto::error_msg& e);

    // A look at the socket without reading or waiting: nothing there, a
    // message waiting, the daemon gone, or interrupted.
    enum class state { quiet, unread, gone, unknown };
    state peek() const;

    // Broken: every later request fails at once, saying why the first time.
    std::error_code broken() const noexcept { return broken_; }
    void set_broken(std::error_code ec) noexcept { broken_ = ec; }
    std::error_code broken_error();
    // Descriptors that came with the daemon's messages (ACCEPT), taken once.
    // Any that come later are closed as they arrive.
    std::vector<unique_fd> take_fds()
    {
        fds_taken_ = true;
        return std::exchange(fds_, {});
    }
    void drop_fds() { fds_.clear(); }
    std::size_t fds() const noexcept { return fds_.size(); }

    std::uint32_t daemon_pid() const noexcept { return daemon_pid_; }
    const std::string& log() const noexcept { return log_; }

private:
    bool try_parse(proto::message& out, std::error_code& ec);
    // The ERROR a daemon sent before it closed the connection (empty text: none).
    proto::error_msg closing_words();
    std::error_code fail(std::error_code ec, std::string why);
    // "the daemon (pid N, socket S)" for messages, without the pid before ACCEPT.
    std::string daemon_name() const;

    std::string& why_;
    unique_fd control_;
    std::vector<std::byte> rx_;
    std::vector<unique_fd> fds_;
    bool fds_taken_ = false;
    std::error_code broken_;
    std::uint64_t next_cookie_ = 1;
    std::chrono::milliseconds silence_{60'000};
    ucx::worker* worker_ = nullptr;
    int efd_ = -1;
    bool blocking_ = true;
    std::uint32_t daemon_pid_ = 0;
    std::string socket_;
    std::string log_;
};

}  // namespace iofwd::client

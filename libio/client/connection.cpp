#include "connection.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "errors.hpp"
#include "fd_passing.hpp"

namespace iofwd::client {

using clock = std::chrono::steady_clock;

void connection::attach(unique_fd control, std::chrono::milliseconds silence)
{
    control_ = std::move(control);
    ::fcntl(control_.get(), F_SETFL, ::fcntl(control_.get(), F_GETFL) | O_NONBLOCK);
    rx_.clear();
    fds_.clear();
    fds_taken_ = false;
    broken_ = {};
    silence_ = silence;
}

void connection::use_worker(ucx::worker* worker, int efd, bool blocking) noexcept
{
    worker_ = worker;
    efd_ = efd;
    blocking_ = blocking;
}

std::string connection::daemon_name() const
{
    // Before ACCEPT the daemon's pid is not known yet; its socket is.
    if (daemon_pid_ == 0)
        return fmt::format("the daemon at {}", socket_);
    return fmt::format("the daemon (pid {}, socket {})", daemon_pid_, socket_);
}

void connection::describe(std::uint32_t daemon_pid, std::string socket, std::string log)
{
    daemon_pid_ = daemon_pid;
    socket_ = std::move(socket);
    log_ = std::move(log);
}

void connection::reset()
{
    control_.reset();
    rx_.clear();
    fds_.clear();
    fds_taken_ = false;
    worker_ = nullptr;
    efd_ = -1;
}

std::error_code connection::fail(std::error_code ec, std::string why)
{
    why_ = std::move(why);
    return ec;
}

std::error_code connection::send(const proto::message& m)
{
    const auto bytes = proto::encode(m);
    const auto blocked_since = clock::now();
    std::size_t off = 0;
    while (off < bytes.size()) {
        const ssize_t n = ::send(control_.get(), bytes.data() + off, bytes.size() - off,
                                 MSG_NOSIGNAL);
        if (n > 0) {
            off += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The daemon reads nothing: bounded like any wait on it.
            if (clock::now() - blocked_since > silence_) {
                broken_ = errc::daemon_timeout;
                return fail(errc::daemon_timeout,
                            fmt::format("{} has read nothing of {} for {} s: "
                                        "it is stopped (SIGSTOP?) or hung; see its log {}",
                                        daemon_name(), proto::to_string(proto::type_of(m)),
                                        silence_.count() / 1000.0, log_));
            }
            pollfd p{control_.get(), POLLOUT, 0};
            ::poll(&p, 1, 100);
            continue;
        }
        const auto ec = last_system_error();
        // A daemon that dropped this connection on purpose said why first.
        if (auto said = closing_words(); !said.text.empty()) {
            broken_ = said.code();
            return fail(said.code(),
                        fmt::format("{} closed the connection: {}",
                                    daemon_name(), said.text));
        }
        broken_ = errc::daemon_gone;
        return fail(errc::daemon_gone,
                    fmt::format("cannot send {} to {}: {}; it has "
                                "exited or was killed, see {}",
                                proto::to_string(proto::type_of(m)), daemon_name(),
                                ec.message(), log_));
    }
    return {};
}

std::error_code connection::receive(proto::message& out, std::chrono::milliseconds timeout,
                                polling poll)
{
    const auto start = clock::now();
    const auto deadline = start + timeout;
    // How long a blocking wait keeps polling after UCX last did something.
    static constexpr auto spin_window = std::chrono::milliseconds(2);
    // While the daemon moves our bytes, the request just sent counts as
    // activity: expect UCX traffic soon.
    auto last_activity = poll == polling::moving ? clock::now() : clock::time_point{};
    // A daemon that says nothing for half the allowed silence is asked
    // whether it is there (PING); one that does not answer that either is
    // stopped or hung: the wait ends instead of lasting forever.
    const auto silence = silence_;
    auto heard = start;
    bool pinged = false;
    for (;;) {
        std::error_code ec;
        if (try_parse(out, ec)) {
            if (!ec && std::holds_alternative<proto::pong_msg>(out)) {
                heard = clock::now();
                pinged = false;
                continue;
            }
            return ec;
        }
        std::byte buf[4096];
        // Descriptors come only with ACCEPT; any others are closed unused.
        const ssize_t n = receive_with_fds(control_.get(), buf, MSG_DONTWAIT, fds_);
        if (fds_taken_)
            fds_.clear();
        if (n > 0) {
            rx_.insert(rx_.end(), buf, buf + n);
            heard = clock::now();
            pinged = false;
            continue;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            const std::string how = n == 0 ? "closed the connection" : std::strerror(errno);
            broken_ = errc::daemon_gone;
            return fail(errc::daemon_gone,
                        fmt::format("{} {}: it exited or was "
                                    "killed; its log is {}",
                                    daemon_name(), how, log_));
        }
        if (worker_ && worker_->drain() > 0 && poll != polling::never)
            last_activity = clock::now();
        const auto now = clock::now();
        if (now - heard >= silence) {
            broken_ = errc::daemon_timeout;
            return fail(errc::daemon_timeout,
                        fmt::format("{} has answered nothing for {} s, not even "
                                    "a heartbeat: it is stopped (SIGSTOP?), hung or starved of "
                                    "CPU; see its log {} (IOFWD_DAEMON_TIMEOUT)",
                                    daemon_name(), silence.count() / 1000.0, log_));
        }
        if (!pinged && now - heard >= silence / 2 && daemon_pid_ != 0) {
            pinged = true;
            if (auto sec = send(proto::ping_msg{}))
                return sec;
        }
        // Sleep at most until the deadline or the next look at the silence.
        auto wake = heard + (pinged ? silence : silence / 2);
        if (timeout.count() > 0) {
            if (now >= deadline)
                return fail(errc::daemon_timeout,
                            fmt::format("no answer from {} within {} ms",
                                        daemon_name(), timeout.count()));
            wake = std::min(wake, deadline);
        }
        const int wait_ms = static_cast<int>(std::max<std::int64_t>(
            1, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()));
        // Busy-poll; in blocking mode too while UCX was busy in the last
        // moments (the daemon is pulling from us: sleeping between its
        // requests stalls our replies). Hand the core over each round: on a
        // node with more processes than cores the daemon must get to run.
        if (worker_ && (!blocking_ || now - last_activity < spin_window)) {
            sched_yield();
            continue;
        }
        if (worker_ && efd_ >= 0) {
            const ucs_status_t st = worker_->arm();
            if (st == UCS_ERR_BUSY)
                continue;
        }
        pollfd fds[2] = {{control_.get(), POLLIN, 0}, {efd_, POLLIN, 0}};
        const int nfds = (worker_ && efd_ >= 0) ? 2 : 1;
        if (::poll(fds, static_cast<nfds_t>(nfds), wait_ms) < 0 && errno != EINTR)
            return fail(last_system_error(), "poll on the control socket failed");
    }
}

bool connection::try_parse(proto::message& out, std::error_code& ec)
{
    std::size_t used = 0;
    std::string why;
    if ((ec = proto::decode_frame(rx_, out, used, why))) {
        broken_ = ec;
        fail(ec, fmt::format("bad message from the daemon: {}", why));
        return true;
    }
    if (used == 0)
        return false;
    rx_.erase(rx_.begin(), rx_.begin() + static_cast<std::ptrdiff_t>(used));
    return true;
}

proto::error_msg connection::closing_words()
{
    // Whatever is still readable: an ERROR with cookie 0 ends a connection.
    for (;;) {
        std::byte buf[4096];
        const ssize_t n = receive_with_fds(control_.get(), buf, MSG_DONTWAIT, fds_);
        if (fds_taken_)
            fds_.clear();
        if (n <= 0)
            break;
        rx_.insert(rx_.end(), buf, buf + n);
    }
    proto::message m;
    std::error_code ec;
    while (try_parse(m, ec) && !ec)
        if (auto* e = std::get_if<proto::error_msg>(&m); e && e->cookie == 0)
            return *e;
    return {};
}

std::error_code connection::query(std::uint64_t version, bool wait, proto::version_state_msg& out)
{
    if (broken_)
        return broken_error();
    const std::uint64_t cookie = next_cookie();
    if (auto ec = send(proto::query_msg{cookie, version, wait ? 1u : 0u}))
        return ec;
    proto::message m;
    if (auto ec = receive(m, std::chrono::milliseconds(0)))
        return ec;
    if (auto* st = std::get_if<proto::version_state_msg>(&m); st && st->cookie == cookie) {
        out = *st;
        return {};
    }
    return unexpected(m, "QUERY");
}

std::error_code connection::unexpected(const proto::message& m, const std::string& request)
{
    if (auto* e = std::get_if<proto::error_msg>(&m))
        return daemon_error(*e);
    broken_ = errc::protocol_error;
    return fail(errc::protocol_error, fmt::format("the daemon answered {} with {}", request,
                                                  proto::to_string(proto::type_of(m))));
}

std::error_code connection::daemon_error(const proto::error_msg& e)
{
    if (e.cookie == 0)
        broken_ = e.code();
    return fail(e.code(), fmt::format("the daemon says: {}", e.text));
}

std::error_code connection::broken_error()
{
    static constexpr std::string_view lead = "the connection to the daemon is broken: ";
    if (why_.starts_with(lead))
        return broken_;
    return fail(broken_, std::string(lead) + why_);
}

connection::state connection::peek() const
{
    char c;
    const ssize_t n = ::recv(control_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return state::unread;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return state::quiet;
    if (n < 0 && errno == EINTR)
        return state::unknown;
    return state::gone;
}

}  // namespace iofwd::client

#include "mailbox_intake.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include "errors.hpp"
#include "log.hpp"
#include "session.hpp"

namespace asio = boost::asio;

namespace iofwd::iod {
namespace {

// Small writes come in bursts: waiting a moment awake after a record spares
// the rank a doorbell (a wakeup of this process, several microseconds) each.
constexpr auto linger = std::chrono::microseconds(20);

inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

void mailbox_intake::open(std::uint64_t bytes, unique_fd& memfd, int& doorbell)
{
    std::string why;
    if (mailbox::reader::create(bytes, reader_, memfd, why)) {
        log_warn("{}: no mailbox: {}", s_.who(), why);
        return;
    }
    const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        log_warn("{}: no mailbox: eventfd failed: {}", s_.who(), std::strerror(errno));
        memfd.reset();
        reader_.discard();
        return;
    }
    doorbell_.emplace(s_.loop(), efd);
    doorbell = efd;
    wait_doorbell();
}

void mailbox_intake::wait_doorbell()
{
    doorbell_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [self = s_.shared_from_this(), this](boost::system::error_code ec) {
                              if (ec || !doorbell_)
                                  return;
                              std::uint64_t rings = 0;
                              if (::read(doorbell_->native_handle(), &rings, sizeof rings) < 0 &&
                                  errno != EAGAIN)
                                  log_warn("{}: reading its doorbell: {}", s_.who(),
                                           std::strerror(errno));
                              progress();
                              if (doorbell_)
                                  wait_doorbell();
                          });
}

bool mailbox_intake::admit(proto::message& m)
{
    // The rank published its mailbox records before it sent this: they go
    // first (progress() dispatches what waits here).
    if (deferred_.empty() && take())
        return true;
    // A rank has one request out at a time, plus heartbeats.
    static constexpr std::size_t max_waiting = 16;
    if (deferred_.size() >= max_waiting) {
        s_.fail(errc::protocol_error,
                fmt::format("{} requests sent without waiting for answers", max_waiting));
        return false;
    }
    deferred_.push_back(std::move(m));
    return false;
}

bool mailbox_intake::take()
{
    if (!reader_)
        return true;
    for (;;) {
        reader_.set_asleep(false);  // awake: the rank need not ring
        bool took = false;
        while (!s_.writes().busy()) {
            mailbox::reader::record r;
            std::string why;
            auto got = reader_.next(r, why, reader_.max_length());
            if (got == mailbox::reader::result::empty)
                break;
            if (got == mailbox::reader::result::record)
                why = s_.mail_problem(r);
            if (got == mailbox::reader::result::bad || !why.empty()) {
                reader_.discard();
                s_.fail(errc::protocol_error, fmt::format("{}: {}", s_.who(), why));
                return false;
            }
            s_.writes().announced(r.cookie);
            s_.start_mail(r);
            took = true;
        }
        // A record waits for staging (or for an overlapping file write):
        // staged() goes on.
        if (s_.writes().busy())
            return false;
        if (took) {
            const auto until = std::chrono::steady_clock::now() + linger;
            while (!reader_.pending() && std::chrono::steady_clock::now() < until)
                cpu_relax();
            if (reader_.pending())
                continue;
        }
        // Going back to sleep: ring from now on; then look once more, since a
        // record published just before is not rung for.
        reader_.set_asleep(true);
        if (!reader_.pending())
            return true;
    }
}

void mailbox_intake::staged(std::uint64_t end)
{
    if (end)
        reader_.release(end);
    post_progress();
}

void mailbox_intake::post_progress()
{
    if (!reader_ || posted_)
        return;
    posted_ = true;
    asio::post(s_.loop(), [self = s_.shared_from_this(), this] {
        posted_ = false;
        progress();
    });
}

void mailbox_intake::progress()
{
    if (!take())
        return;
    while (!deferred_.empty() && s_.open()) {
        proto::message m = std::move(deferred_.front());
        deferred_.pop_front();
        s_.dispatch(m);
        if (!take())
            return;
    }
    s_.mail_drained();
}

void mailbox_intake::close()
{
    reader_.freeze();
    deferred_.clear();
    if (doorbell_) {
        boost::system::error_code ignored;
        doorbell_->close(ignored);
        doorbell_.reset();
    }
    post_progress();
}

}  // namespace iofwd::iod

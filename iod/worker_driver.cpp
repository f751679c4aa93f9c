#include "worker_driver.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "log.hpp"

namespace iofwd::iod {

namespace asio = boost::asio;

namespace {
constexpr auto stuck_after = std::chrono::milliseconds(10);
constexpr auto poll_interval = std::chrono::milliseconds(1);
}  // namespace

std::error_code worker_driver::start(std::string& why)
{
    int fd = -1;
    if (auto ec = worker_.event_fd(fd)) {
        why = fmt::format("UCX gives no event fd: {}", ec.message());
        return ec;
    }
    efd_.emplace(loop_, fd);
    pump();  // and waits on the fd
    return {};
}

worker_driver::~worker_driver()
{
    if (efd_)
        efd_->release();  // UCX owns the event fd
}

void worker_driver::stop()
{
    stopped_ = true;
    boost::system::error_code ignored;
    if (efd_)
        efd_->cancel(ignored);
    if (poll_timer_)
        poll_timer_->cancel();
}

bool worker_driver::progressing(unsigned did)
{
    if (did > 0) {
        quiet_since_.reset();
        stuck_ = false;
        return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!quiet_since_)
        quiet_since_ = now;  // idle time before this does not count
    if (!stuck_ && now - *quiet_since_ > stuck_after) {
        stuck_ = true;
        if (!said_stuck_) {
            said_stuck_ = true;
            log_info("a UCX worker reports work it does not progress (a peer that died "
                     "mid-transfer?): polled every {} ms while that lasts, not spun (said "
                     "once per worker)",
                     poll_interval.count());
        }
    }
    return !stuck_;
}

void worker_driver::poll_later()
{
    if (poll_pending_)
        return;  // the poll pending does what this one would
    if (!poll_timer_)
        poll_timer_.emplace(loop_);
    poll_pending_ = true;
    poll_timer_->expires_after(poll_interval);
    poll_timer_->async_wait([this](boost::system::error_code ec) {
        poll_pending_ = false;
        if (ec || stopped_)
            return;
        // A spin parked here goes on (it pumps once nothing is busy).
        if (spinning_)
            spin();
        else
            pump();
        resume_waiting();
    });
}

void worker_driver::pump()
{
    // Bounded: a transport that keeps reporting events (a peer dying mid-
    // transfer) must not keep the loop from everything else it serves.
    unsigned did = 0;
    const int rounds = stuck_ ? 1 : 64;  // polled: one look is enough
    for (int round = 0; round < rounds; ++round) {
        did += worker_.drain();
        const ucs_status_t st = worker_.arm();
        if (st != UCS_ERR_BUSY) {
            // Armed: no event pending (operations may still be, which is
            // what spin() is for); or an error, after which the fd is all
            // there is to wait on.
            if (st != UCS_OK)
                log_error("ucp_worker_arm failed: {}", ucs_status_string(st));
            quiet_since_.reset();
            stuck_ = false;
            resume_waiting();
            return;
        }
    }
    if (progressing(did)) {
        kick();
        resume_waiting();
    } else {
        poll_later();
    }
}

void worker_driver::resume_waiting()
{
    // Stuck, the worker is not armed and its fd would stay readable: the
    // poll takes over until it is armed again or progresses.
    if (!waiting_ && !stuck_ && !stopped_ && efd_)
        wait_events();
}

void worker_driver::wait_events()
{
    waiting_ = true;
    efd_->async_wait(asio::posix::stream_descriptor::wait_read,
                     [this](boost::system::error_code ec) {
                         waiting_ = false;
                         if (!ec && !stopped_)
                             pump();  // and waits again unless stuck
                     });
}

void worker_driver::kick()
{
    if (kick_pending_)
        return;
    kick_pending_ = true;
    asio::post(loop_, [this] {
        kick_pending_ = false;
        if (!stopped_)
            pump();
    });
}

void worker_driver::busy_begin()
{
    if (++busy_ == 1 && !spinning_) {
        spinning_ = true;
        asio::post(loop_, [this] { spin(); });
    }
}

void worker_driver::busy_end()
{
    if (busy_ > 0)
        --busy_;
}

void worker_driver::spin()
{
    if (stopped_ || busy_ == 0) {
        spinning_ = false;
        if (!stopped_)
            pump();  // re-arm before sleeping on the event fd again
        return;
    }
    if (!progressing(worker_.drain(64))) {
        poll_later();
        return;
    }
    // Re-posting lets sockets and other completions run in between.
    asio::post(loop_, [this] { spin(); });
}

}  // namespace iofwd::iod

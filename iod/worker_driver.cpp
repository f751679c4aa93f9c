#include "worker_driver.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "log.hpp"

namespace iofwd::iod {

namespace asio = boost::asio;

std::error_code worker_driver::start(std::string& why)
{
    int fd = -1;
    if (auto ec = worker_.event_fd(fd)) {
        why = fmt::format("UCX gives no event fd: {}", ec.message());
        return ec;
    }
    efd_.emplace(loop_, fd);
    pump();
    wait_events();
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
}

void worker_driver::pump()
{
    // Bounded: a transport that keeps reporting events (a peer dying mid-
    // transfer) must not keep the loop from everything else it serves.
    for (int round = 0; round < 64; ++round) {
        worker_.drain();
        const ucs_status_t st = worker_.arm();
        if (st == UCS_OK)
            return;
        if (st != UCS_ERR_BUSY) {
            log_error("ucp_worker_arm failed: {}", ucs_status_string(st));
            return;
        }
    }
    kick();
}

void worker_driver::wait_events()
{
    efd_->async_wait(asio::posix::stream_descriptor::wait_read,
                     [this](boost::system::error_code ec) {
                         if (ec || stopped_)
                             return;
                         pump();
                         wait_events();
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
    worker_.drain(64);
    // Re-posting lets sockets and other completions run in between.
    asio::post(loop_, [this] { spin(); });
}

}  // namespace iofwd::iod

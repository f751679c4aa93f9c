#pragma once
// Drives one UCX worker from an Asio event loop: asleep on the worker's event
// fd while nothing is outstanding, progressing it without sleeping while
// operations are (a cross-process read is many small events, and a wakeup
// per event costs more than the copy), and polling it every millisecond
// while UCX reports work it does not do (a peer that died mid-transfer). The
// daemon's loop drives its worker with one, and each puller its own worker on
// its own thread.
#include <chrono>
#include <optional>
#include <string>
#include <system_error>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ucx.hpp"

namespace iofwd::iod {

class worker_driver final {
public:
    worker_driver(boost::asio::io_context& loop, ucx::worker& w) : loop_(loop), worker_(w) {}
    ~worker_driver();
    worker_driver(const worker_driver&) = delete;
    worker_driver& operator=(const worker_driver&) = delete;

    // Watches the worker's event fd from now on. All calls, and every UCX
    // callback of the worker, happen on the loop's thread.
    std::error_code start(std::string& why);
    // No more progress.
    void stop();
    // Progresses soon: after posting an operation.
    void kick();
    // Operations that complete only while the worker is progressed: the
    // driver spins (re-posting itself between rounds) while any are counted.
    void busy_begin();
    void busy_end();

private:
    // Progresses until UCX is armed (then waits on the event fd), for a
    // bounded number of rounds (then comes back), or finds it stuck.
    void pump();
    void wait_events();
    void resume_waiting();
    void spin();
    // `did` events were progressed: false once rounds have found work
    // reported and none done for stuck_after in a row (sends pending for
    // good to a peer that died mid-transfer, a receive from it that never
    // ends): then the driver polls every poll_interval instead of spinning a
    // core for the rest of its life. The first progress, or the worker
    // armed, ends that.
    bool progressing(unsigned did);
    // After poll_interval, spin() if a spin is parked, else pump(); one
    // poll at a time serves both.
    void poll_later();

    boost::asio::io_context& loop_;
    ucx::worker& worker_;
    std::optional<boost::asio::posix::stream_descriptor> efd_;
    unsigned busy_ = 0;
    bool kick_pending_ = false;
    bool spinning_ = false;
    bool stopped_ = false;
    // Since when rounds have found nothing to do though UCX was not armed.
    std::optional<std::chrono::steady_clock::time_point> quiet_since_;
    bool stuck_ = false;
    bool said_stuck_ = false;  // once per driver: it may come and go
    std::optional<boost::asio::steady_timer> poll_timer_;
    bool poll_pending_ = false;
    bool waiting_ = false;  // on the event fd
};

}  // namespace iofwd::iod

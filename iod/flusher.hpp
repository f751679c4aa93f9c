#pragma once
// Worker threads that do the store's blocking work (writes, fsync, commits)
// so that the event loop keeps pulling while earlier data is flushed. A job
// runs on a worker; its completion handler runs back on the event loop.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>

namespace iofwd::iod {

class flusher final {
public:
    // `on_idle` runs on the loop each time the last submitted job's handler
    // has run.
    flusher(boost::asio::io_context& loop, unsigned threads, std::function<void()> on_idle = {});
    flusher(const flusher&) = delete;
    flusher& operator=(const flusher&) = delete;
    // Finishes the queued jobs, then joins the threads.
    ~flusher();

    using work = std::function<std::error_code()>;
    using done = std::function<void(std::error_code)>;
    // Both from the event loop's thread only.
    void submit(work w, done d);
    bool busy() const noexcept { return outstanding_ > 0; }

private:
    void run();

    boost::asio::io_context& loop_;
    std::function<void()> on_idle_;
    unsigned outstanding_ = 0;  // submitted, handler not run yet (loop thread)
    std::mutex mutex_;
    std::condition_variable cv_;
    std::deque<std::pair<work, done>> jobs_;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace iofwd::iod

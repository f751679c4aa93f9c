#include "flusher.hpp"

#include <boost/asio/post.hpp>

namespace iofwd::iod {

flusher::flusher(boost::asio::io_context& loop, unsigned threads, std::function<void()> on_idle)
    : loop_(loop), on_idle_(std::move(on_idle))
{
    if (threads == 0)
        threads = 1;
    for (unsigned i = 0; i < threads; ++i)
        threads_.emplace_back([this] { run(); });
}

flusher::~flusher()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
        t.join();
}

void flusher::submit(work w, done d)
{
    ++outstanding_;
    {
        std::lock_guard lock(mutex_);
        jobs_.emplace_back(std::move(w), std::move(d));
    }
    cv_.notify_one();
}

void flusher::run()
{
    for (;;) {
        std::pair<work, done> job;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (jobs_.empty())
                return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        const std::error_code ec = job.first();
        boost::asio::post(loop_, [this, d = std::move(job.second), ec] {
            d(ec);
            if (--outstanding_ == 0 && on_idle_)
                on_idle_();
        });
    }
}

}  // namespace iofwd::iod

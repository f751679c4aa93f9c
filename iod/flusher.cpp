#include "flusher.hpp"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "procfs.hpp"

namespace iofwd::iod {

flusher::flusher(boost::asio::io_context& loop, unsigned threads, std::string name,
                 std::function<void()> on_idle)
    : loop_(loop), on_idle_(std::move(on_idle))
{
    if (threads == 0)
        threads = 1;
    for (unsigned i = 0; i < threads; ++i)
        threads_.emplace_back([this, n = fmt::format("{}-{}", name, i)] {
            name_this_thread(n.c_str());
            run();
        });
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

void flusher::submit(std::uint64_t order, work w, done d, const void* key)
{
    ++outstanding_;
    {
        std::lock_guard lock(mutex_);
        // Mostly at the end: a short walk back past the younger ones.
        auto at = jobs_.end();
        while (at != jobs_.begin() && std::prev(at)->order > order)
            --at;
        jobs_.insert(at, queued_job{order, std::move(w), std::move(d), key});
    }
    cv_.notify_one();
}

std::size_t flusher::queued() const
{
    std::lock_guard lock(mutex_);
    return jobs_.size();
}

void flusher::run()
{
    for (;;) {
        queued_job job;
        {
            std::unique_lock lock(mutex_);
            // The first job whose key is not running already.
            auto next = jobs_.end();
            cv_.wait(lock, [&] {
                next = std::find_if(jobs_.begin(), jobs_.end(), [&](const queued_job& j) {
                    return !j.key || std::find(busy_.begin(), busy_.end(), j.key) == busy_.end();
                });
                return next != jobs_.end() || (stopping_ && jobs_.empty());
            });
            if (next == jobs_.end())
                return;
            job = std::move(*next);
            jobs_.erase(next);
            if (job.key)
                busy_.push_back(job.key);
        }
        running_.fetch_add(1, std::memory_order_relaxed);
        const std::error_code ec = job.w();
        running_.fetch_sub(1, std::memory_order_relaxed);
        if (job.key) {
            {
                std::lock_guard lock(mutex_);
                busy_.erase(std::find(busy_.begin(), busy_.end(), job.key));
            }
            cv_.notify_all();  // a job of that key may go now
        }
        boost::asio::post(loop_, [this, d = std::move(job.d), ec] {
            d(ec);
            if (--outstanding_ == 0 && on_idle_)
                on_idle_();
        });
    }
}

flush_policy::flush_policy(boost::asio::io_context& loop, unsigned threads, staging& slots,
                           std::function<void()> on_busy, std::function<void()> on_idle)
    : loop_(loop), slots_(slots), on_busy_(std::move(on_busy)), on_idle_(std::move(on_idle)),
      // One: a batch at a time (start_appends).
      journal_pool_(loop, 1, "iod-journal", [this] { became_idle(); }),
      pool_(loop, threads, "iod-flush", [this] { became_idle(); })
{
}

void flush_policy::acquire(staging::waiter w, std::uint64_t bytes)
{
    slots_.acquire(std::move(w), bytes);
    if (slots_.short_of_slots())
        release(nullptr);
}

void flush_policy::flush(const void* owner, std::uint64_t order, bool hold, flusher::work w,
                         flusher::done d, const void* key)
{
    if (hold && !slots_.short_of_slots()) {
        held_.push_back({owner, order, std::move(w), std::move(d), key});
        return;
    }
    release(owner);  // the owner's earlier chunks first
    pool_.submit(order, std::move(w), std::move(d), key);
}

void flush_policy::release(const void* owner)
{
    std::vector<held> go;
    std::erase_if(held_, [&](held& h) {
        if (owner && h.owner != owner)
            return false;
        go.push_back(std::move(h));
        return true;
    });
    for (auto& h : go)
        pool_.submit(h.order, std::move(h.work), std::move(h.done), h.key);
}

void flush_policy::commit(std::uint64_t order, flusher::work w, flusher::done d)
{
    pool_.submit(order, std::move(w), std::move(d));
}

void flush_policy::append(flusher::work write, flusher::work durable, flusher::done d)
{
    {
        std::lock_guard lock(appends_mutex_);
        appends_.push_back({std::move(write), std::move(durable), std::move(d), {}});
    }
    if (!appending_)
        start_appends();
}

void flush_policy::start_appends()
{
    appending_ = true;
    {
        std::lock_guard lock(appends_mutex_);
        std::swap(appends_, batch_);
    }
    journal_pool_.submit(
        [this] {
            // The appends that came while these were written join them
            // before the fdatasync: the ranks of a node write the same
            // version at about the same time, and the second rank's part
            // (handed over a crc32c after the first) waited a whole sync
            // for the next batch. A few rounds at most, so that a stream
            // of appends cannot put off the first one's sync for long.
            std::size_t written = 0;
            for (int round = 0;; ++round) {
                for (; written < batch_.size(); ++written)
                    batch_[written].ec = batch_[written].write();
                std::lock_guard lock(appends_mutex_);
                if (round == late_rounds || appends_.empty())
                    break;
                std::move(appends_.begin(), appends_.end(), std::back_inserter(batch_));
                appends_.clear();
            }
            // The first durable() of each journal syncs its records; the
            // rest find them done.
            for (auto& a : batch_)
                if (!a.ec)
                    a.ec = a.durable();
            return std::error_code{};
        },
        [this](std::error_code) {
            std::swap(batch_, answering_);
            appending_ = false;
            // The next batch is written while these answers go out.
            if (!appends_empty())
                start_appends();
            for (auto& a : answering_)
                a.done(a.ec);
            answering_.clear();
        });
}

bool flush_policy::appends_empty() const
{
    std::lock_guard lock(appends_mutex_);
    return appends_.empty();
}

void flush_policy::pull_started()
{
    disturbed_.store(true, std::memory_order_relaxed);
    ++pulls_;
    if (on_busy_)
        on_busy_();
}

void flush_policy::pull_finished()
{
    if (pulls_ > 0 && --pulls_ == 0)
        boost::asio::post(loop_, [this] { became_idle(); });  // after the pull's own handling
}

void flush_policy::became_idle()
{
    if (idle() && on_idle_)
        on_idle_();
}

}  // namespace iofwd::iod

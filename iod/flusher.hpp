#pragma once
// Worker threads that do the store's blocking work (writes, fsync, commits)
// so that the event loop keeps pulling while earlier data is flushed. A job
// runs on a worker; its completion handler runs back on the event loop.
//
// flush_policy puts the daemon's data flushes on such threads and decides
// when each runs; it also keeps the count of pulls in flight, so that it
// knows when the data path is idle (nothing pulled, held or flushed).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>

#include "staging.hpp"

namespace iofwd::iod {

class flusher final {
public:
    // `on_idle` runs on the loop each time the last submitted job's handler
    // has run.
    // `name`: its threads' (name_this_thread), with each one's number.
    flusher(boost::asio::io_context& loop, unsigned threads, std::string name,
            std::function<void()> on_idle = {});
    flusher(const flusher&) = delete;
    flusher& operator=(const flusher&) = delete;
    // Finishes the queued jobs, then joins the threads.
    ~flusher();

    using work = std::function<std::error_code()>;
    using done = std::function<void(std::error_code)>;
    // Both from the event loop's thread only. Jobs run by `order`, lowest
    // first, and in the order submitted among equals: a version's parts
    // carry the time the version first arrived on the node, so that on a
    // slow store the oldest version is completed first, not one rank's
    // versions after another (transfer::order_flushes). Jobs of one
    // non-null `key` never run at once: a thread skips to the next job
    // while one of its key runs (the buffered writes of one file, which
    // the kernel serializes on the file's lock anyway, spinning a second
    // writer on a core the pulls need).
    void submit(std::uint64_t order, work w, done d, const void* key = nullptr);
    // For a pool whose jobs all run in the order submitted.
    void submit(work w, done d) { submit(0, std::move(w), std::move(d)); }
    bool busy() const noexcept { return outstanding_ > 0; }
    // For iofwd status: jobs waiting for a thread, jobs running now.
    std::size_t queued() const;
    unsigned running() const noexcept { return running_.load(std::memory_order_relaxed); }
    unsigned threads() const noexcept { return static_cast<unsigned>(threads_.size()); }

private:
    void run();

    boost::asio::io_context& loop_;
    std::function<void()> on_idle_;
    unsigned outstanding_ = 0;  // submitted, handler not run yet (loop thread)
    std::atomic<unsigned> running_{0};
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    struct queued_job {
        std::uint64_t order;
        work w;
        done d;
        const void* key;
    };
    std::deque<queued_job> jobs_;     // sorted by order, stable
    std::vector<const void*> busy_;  // the keys of the jobs running now
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

// The data path's flushes and the rules for them, on the event loop's thread:
//  - a write's chunks may be held back while the same write is still being
//    pulled and staging has free slots: on a node with few cores a flush
//    (crc32c, store write) beside the pull of the same write's later chunks
//    slows the pull the rank is blocked in by a third or more, and
//    postponing it by the pull's few milliseconds costs the time to durable
//    little;
//  - a pull that has to wait for a slot lets every held flush go (they are
//    what frees slots);
//  - commits and fsyncs go to the same threads, never held;
//  - appends to the node's journal go to a thread of their own: the rank
//    waits for its append, which must not queue behind the object writes
//    and fsyncs of the versions before it (with back-to-back small
//    versions, half the answers waited for one, 2 ms against 0.4);
//  - and go there in batches: the appends made while one batch is being
//    written and synced wait, then go together, all written before one
//    fdatasync and answered in one trip back to the loop (back-to-back
//    4 KiB versions had a fdatasync and two thread hand-offs per part);
//    those made while the batch is still being written join it before
//    its fdatasync.
class flush_policy final {
public:
    // `on_busy` runs when a pull starts (the daemon reports progress while
    // data moves); `on_idle` each time the data path has become idle.
    flush_policy(boost::asio::io_context& loop, unsigned threads, staging& slots,
                 std::function<void()> on_busy, std::function<void()> on_idle);

    // A staging slot for a pull (staging::acquire).
    void acquire(staging::waiter w, std::uint64_t bytes = UINT64_MAX);
    // Starts the store write of staged bytes of `owner` (a transfer), or,
    // with `hold` and while staging has free slots, keeps it until
    // release(owner).
    // `order` and `key` as in flusher::submit.
    void flush(const void* owner, std::uint64_t order, bool hold, flusher::work w,
               flusher::done d, const void* key = nullptr);
    // Starts the held flushes of `owner` (nullptr: of everyone).
    void release(const void* owner);
    // A commit or an fsync: never held; queued by `order`.
    void commit(std::uint64_t order, flusher::work w, flusher::done d);
    // An append to the node's journal, in the order submitted: `write`
    // puts the record in the file, `durable` waits until it is synced; a
    // batch runs every write, then every durable whose write succeeded,
    // then each `d` with its append's error.
    void append(flusher::work write, flusher::work durable, flusher::done d);

    // Pulls in flight: counted so that retention waits for none.
    void pull_started();
    void pull_finished();
    // Nothing pulled, held or being flushed.
    bool idle() const noexcept
    {
        return pulls_ == 0 && held_.empty() && !appending_ && appends_empty() && !pool_.busy() &&
               !journal_pool_.busy();
    }
    // Whether a pull started since clear_disturbed(): read by the retention
    // thread, which pauses between versions when one did.
    bool disturbed() const noexcept { return disturbed_.load(std::memory_order_relaxed); }
    void clear_disturbed() noexcept { disturbed_.store(false, std::memory_order_relaxed); }
    // For iofwd status: the flush threads and their queue, the flushes held.
    const flusher& pool() const noexcept { return pool_; }
    std::size_t held_count() const noexcept { return held_.size(); }

private:
    void became_idle();
    void start_appends();
    bool appends_empty() const;

    boost::asio::io_context& loop_;
    staging& slots_;
    std::function<void()> on_busy_;
    std::function<void()> on_idle_;
    struct held {
        const void* owner;
        std::uint64_t order;
        flusher::work work;
        flusher::done done;
        const void* key;
    };
    std::vector<held> held_;
    struct journal_append {
        flusher::work write;
        flusher::work durable;
        flusher::done done;
        std::error_code ec;
    };
    // Swapped from one to the next, each keeping its capacity: waiting
    // (loop thread; the journal thread takes those that come while its
    // batch is written, hence the mutex), in flight (the journal thread's
    // until its handler runs), answered (loop thread).
    static constexpr int late_rounds = 4;
    mutable std::mutex appends_mutex_;
    std::vector<journal_append> appends_;
    std::vector<journal_append> batch_;
    std::vector<journal_append> answering_;
    bool appending_ = false;
    unsigned pulls_ = 0;
    std::atomic<bool> disturbed_{false};
    flusher journal_pool_;
    flusher pool_;  // last: its threads stop first
};

}  // namespace iofwd::iod

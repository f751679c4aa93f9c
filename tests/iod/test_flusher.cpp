#include <catch2/catch.hpp>

#include <chrono>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/executor_work_guard.hpp>

#include "flusher.hpp"

using iofwd::iod::flusher;
using iofwd::iod::flush_policy;

namespace {

// A latch's wait, 20 s at most (a test that goes wrong fails, not hangs):
// whether it opened.
bool opened(std::latch& l)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!l.try_wait()) {
        if (std::chrono::steady_clock::now() > until)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Runs the loop in steps of 10 ms until `done` or `until`.
template <typename Pred>
void run_until(boost::asio::io_context& loop, std::chrono::steady_clock::time_point until,
               Pred done)
{
    while (!done() && std::chrono::steady_clock::now() < until)
        loop.run_for(std::chrono::milliseconds(10));
}

}  // namespace

TEST_CASE("the flusher runs jobs by order, lowest first, in the order submitted among equals",
          "[flusher]")
{
    boost::asio::io_context loop;
    auto keep = boost::asio::make_work_guard(loop);
    std::latch started(1), go(1);
    std::mutex m;
    std::vector<std::string> ran;
    unsigned done = 0;
    {
        flusher pool(loop, 1, "test-flush");
        auto job = [&](std::string name) {
            return [&, name] {
                std::lock_guard lock(m);
                ran.push_back(name);
                return std::error_code{};
            };
        };
        auto count = [&](std::error_code) { ++done; };
        // The one thread is held in the first job while the others queue.
        pool.submit(50, [&] {
            {
                std::lock_guard lock(m);
                ran.push_back("first");
            }
            started.count_down();
            opened(go);
            return std::error_code{};
        }, count);
        REQUIRE(opened(started));
        pool.submit(30, job("30"), count);
        pool.submit(10, job("10a"), count);
        pool.submit(20, job("20"), count);
        pool.submit(10, job("10b"), count);
        pool.submit(job("fifo"), count);  // order 0
        go.count_down();
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        run_until(loop, until, [&] { return done >= 6; });
    }
    CHECK(done == 6);
    CHECK(ran == std::vector<std::string>{"first", "fifo", "10a", "10b", "20", "30"});
}

TEST_CASE("the flusher never runs two jobs of one key at once, and runs other jobs meanwhile",
          "[flusher]")
{
    // Two threads. Job A1 (key a) holds its thread; A2 (key a) comes next
    // by order, but must wait for A1: the second thread takes B (key b) and
    // the unkeyed job instead, then A2 once A1 has ended.
    boost::asio::io_context loop;
    auto keep = boost::asio::make_work_guard(loop);
    std::latch a1_started(1), a1_go(1);
    std::mutex m;
    std::vector<std::string> ran;
    bool a_running = false, overlap = false;
    unsigned done = 0;
    int key_a = 0, key_b = 0;
    {
        flusher pool(loop, 2, "test-flush");
        auto count = [&](std::error_code) { ++done; };
        auto job = [&](std::string name) {
            return [&, name] {
                std::lock_guard lock(m);
                ran.push_back(name);
                return std::error_code{};
            };
        };
        pool.submit(1, [&] {
            {
                std::lock_guard lock(m);
                ran.push_back("a1");
                a_running = true;
            }
            a1_started.count_down();
            opened(a1_go);
            std::lock_guard lock(m);
            a_running = false;
            return std::error_code{};
        }, count, &key_a);
        REQUIRE(opened(a1_started));
        pool.submit(2, [&] {
            std::lock_guard lock(m);
            overlap = overlap || a_running;
            ran.push_back("a2");
            return std::error_code{};
        }, count, &key_a);
        pool.submit(3, job("b"), count, &key_b);
        pool.submit(4, job("none"), count);
        // b and the unkeyed job run on the second thread while a1 holds
        // the first; a2 does not.
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        run_until(loop, until, [&] { return done >= 2; });
        {
            std::lock_guard lock(m);
            CHECK(ran == std::vector<std::string>{"a1", "b", "none"});
        }
        a1_go.count_down();
        run_until(loop, until, [&] { return done >= 4; });
    }
    CHECK(done == 4);
    CHECK_FALSE(overlap);
    CHECK(ran == std::vector<std::string>{"a1", "b", "none", "a2"});
}

TEST_CASE("an append to the journal does not wait for the flushes and commits before it",
          "[flusher]")
{
    // The one flush thread is held in an object's commit; an append
    // submitted after it runs, and its handler with it, meanwhile: the rank
    // waits for the append only.
    boost::asio::io_context loop;
    auto keep = boost::asio::make_work_guard(loop);
    iofwd::iod::staging slots;
    std::latch commit_started(1), commit_go(1);
    bool appended = false, committed = false;
    {
        flush_policy data(loop, 1, slots, {}, {});
        data.commit(1, [&] {
            commit_started.count_down();
            opened(commit_go);
            return std::error_code{};
        }, [&](std::error_code) { committed = true; });
        REQUIRE(opened(commit_started));
        data.append([] { return std::error_code{}; }, [] { return std::error_code{}; },
                    [&](std::error_code) { appended = true; });
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        run_until(loop, until, [&] { return appended; });
        CHECK(appended);
        CHECK_FALSE(committed);
        CHECK_FALSE(data.idle());
        commit_go.count_down();
        run_until(loop, until, [&] { return committed; });
        CHECK(committed);
        CHECK(data.idle());
    }
}

TEST_CASE("appends made while a batch is in the journal go together, each with its own error",
          "[flusher]")
{
    // The first append's write (or its durable) is held; three more come
    // meanwhile. While the write is held they join its batch before its
    // sync; while the durable is, they go as the next batch. Either way
    // every write, then the durables of the writes that succeeded (the
    // first syncs them all in store::journal), then each handler with its
    // own append's error.
    const bool hold_write = GENERATE(true, false);
    INFO((hold_write ? "the first write held" : "the first durable held"));
    boost::asio::io_context loop;
    auto keep = boost::asio::make_work_guard(loop);
    iofwd::iod::staging slots;
    std::latch first_started(1), first_go(1);
    std::mutex m;
    std::vector<std::string> ran;
    std::vector<std::pair<int, std::error_code>> answers;
    auto note = [&](std::string what) {
        std::lock_guard lock(m);
        ran.push_back(std::move(what));
    };
    auto hold = [&] {
        first_started.count_down();
        opened(first_go);
    };
    const auto refused = std::make_error_code(std::errc::no_buffer_space);
    const auto sync_failed = std::make_error_code(std::errc::io_error);
    {
        flush_policy data(loop, 2, slots, {}, {});
        auto append = [&](int k, std::error_code write_ec, std::error_code durable_ec) {
            data.append(
                [&, k, write_ec] {
                    note("w" + std::to_string(k));
                    if (k == 1 && hold_write)
                        hold();
                    return write_ec;
                },
                [&, k, durable_ec] {
                    note("d" + std::to_string(k));
                    if (k == 1 && !hold_write)
                        hold();
                    return durable_ec;
                },
                [&, k](std::error_code ec) { answers.emplace_back(k, ec); });
        };
        append(1, {}, {});
        REQUIRE(opened(first_started));
        append(2, {}, {});
        append(3, refused, {});
        append(4, {}, sync_failed);
        CHECK_FALSE(data.idle());
        first_go.count_down();
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        run_until(loop, until, [&] { return answers.size() >= 4; });
        CHECK(data.idle());
    }
    if (hold_write)
        CHECK(ran == std::vector<std::string>{"w1", "w2", "w3", "w4", "d1", "d2", "d4"});
    else
        CHECK(ran == std::vector<std::string>{"w1", "d1", "w2", "w3", "w4", "d2", "d4"});
    REQUIRE(answers.size() == 4);
    CHECK(answers[0] == std::pair<int, std::error_code>{1, {}});
    CHECK(answers[1] == std::pair<int, std::error_code>{2, {}});
    CHECK(answers[2] == std::pair<int, std::error_code>{3, refused});
    CHECK(answers[3] == std::pair<int, std::error_code>{4, sync_failed});
}

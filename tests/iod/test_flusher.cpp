#include <catch2/catch.hpp>

#include <chrono>
#include <latch>
#include <mutex>
#include <string>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/executor_work_guard.hpp>

#include "flusher.hpp"

using iofwd::iod::flusher;

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
        flusher pool(loop, 1);
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
            go.wait();
            return std::error_code{};
        }, count);
        started.wait();
        pool.submit(30, job("30"), count);
        pool.submit(10, job("10a"), count);
        pool.submit(20, job("20"), count);
        pool.submit(10, job("10b"), count);
        pool.submit(job("fifo"), count);  // order 0
        go.count_down();
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (done < 6 && std::chrono::steady_clock::now() < until)
            loop.run_for(std::chrono::milliseconds(10));
    }
    CHECK(done == 6);
    CHECK(ran == std::vector<std::string>{"first", "fifo", "10a", "10b", "20", "30"});
}

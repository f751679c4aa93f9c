// What the benchmark reads of the daemon in /proc: its CPU, by thread.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "procfs.hpp"

namespace {

// CPU seconds the calling thread has used.
double thread_seconds()
{
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

TEST_CASE("a process's CPU is read by thread, threads of one name summed", "[procfs]")
{
    // Two threads named as the daemon names its pullers, each burning CPU
    // until the kernel has counted a few 10 ms ticks of it, then waiting.
    std::atomic<int> burnt{0};
    std::atomic<bool> done{false};
    const auto burner = [&](const char* name) {
        iofwd::name_this_thread(name);
        const double start = thread_seconds();
        while (thread_seconds() - start < 0.1) {
        }
        ++burnt;
        while (!done)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    std::thread a(burner, "test-burn-0"), b(burner, "test-burn-1");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (burnt < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto by_name = iofwd::thread_cpu_seconds(::getpid());
    const double total = iofwd::process_cpu_seconds(::getpid());
    done = true;
    a.join();
    b.join();
    REQUIRE(burnt == 2);
    INFO("threads read: " << by_name.size());
    // One entry for both, the number dropped; none under either full name.
    REQUIRE(by_name.contains("test-burn"));
    CHECK_FALSE(by_name.contains("test-burn-0"));
    CHECK_FALSE(by_name.contains("test-burn-1"));
    // 0.2 s burnt between them, counted in ticks (10 ms here): at least 0.15.
    CHECK(by_name.at("test-burn") >= 0.15);
    double sum = 0;
    for (const auto& [name, s] : by_name)
        sum += s;
    CHECK(sum <= total + 0.05);  // a tick or two apart at most
}

TEST_CASE("thread names are read whole, with spaces and parentheses; a pid that does not "
          "exist reads as nothing",
          "[procfs]")
{
    // A name that looks like the fields after it ("R 1"), one that ends in
    // digits without a dash (kept), and one with a parenthesis and a number
    // after a dash (dropped).
    const char* names[] = {"x) R 1 (y-7", "test2026"};
    std::atomic<int> named{0};
    std::atomic<bool> done{false};
    std::vector<std::thread> threads;
    for (const char* n : names)
        threads.emplace_back([&, n] {
            iofwd::name_this_thread(n);
            ++named;
            while (!done)
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (named < 2 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto by_name = iofwd::thread_cpu_seconds(::getpid());
    done = true;
    for (auto& t : threads)
        t.join();
    REQUIRE(named == 2);
    CHECK(by_name.contains("x) R 1 (y"));
    CHECK(by_name.contains("test2026"));
    for (const auto& [name, s] : by_name) {
        INFO(name);
        CHECK(s >= 0);
    }
    // Above the kernel's largest pid (4,194,304): no such process, ever.
    CHECK(iofwd::thread_cpu_seconds(0x7ffffff0).empty());
    CHECK(iofwd::process_cpu_seconds(0x7ffffff0) == 0);
    CHECK_FALSE(iofwd::has_thread_named(0x7ffffff0, "iod"));
}

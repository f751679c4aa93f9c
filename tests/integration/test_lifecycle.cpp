// The checkpoint lifecycle with real processes: restart after the whole job
// was killed, damaged data named and skipped, retention, and the job-wide
// commit across two simulated nodes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "io.h"

#include "fixture.hpp"
#include "store/layout.hpp"

using namespace test;

namespace {

double monotonic_now()
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Waits (bounded) for `p` and checks its exit code (the test goes on).
void check_exit(process& p, int code)
{
    const auto st = p.wait(scaled(120s));
    INFO(p.output());
    REQUIRE(st.has_value());
    CHECK(exit_code(*st) == code);
}

// SIGKILLs every daemon named in a log.
void kill_daemons(const std::string& log)
{
    for (const pid_t pid : daemon_pids(log))
        ::kill(pid, SIGKILL);
}

}  // namespace

TEST_CASE("after the whole job is killed in version 4, a new job restarts from version 3",
          "[lifecycle][restart]")
{
    cluster c;
    c.unpacked();
    {
        auto r0 = c.rank(0, 2, {"--size", "300000", "--versions", "4"});
        auto r1 = c.rank(1, 2, {"--size", "300000", "--versions", "4", "--stall-at", "3"});
        // Rank 0 has written version 4; rank 1 is stuck before it.
        REQUIRE(wait_until([&] { return has_line(r0, "write 3 0 4 ") && has_line(r1, "stalled"); },
                           60s));
        // Versions 1 to 3 are committed job-wide (a rank's versions may
        // commit out of order: two flusher threads); version 4 is half
        // written (rank 0's part in the store, rank 1's never).
        REQUIRE(wait_until([&] {
            return exists(c.store() + "/itest/v00000001/COMPLETE") &&
                   exists(c.store() + "/itest/v00000002/COMPLETE") &&
                   exists(c.store() + "/itest/v00000003/COMPLETE");
        }, 30s));
        REQUIRE(wait_until([&] { return exists(c.store() + "/itest/v00000004/nodeA.r0000"); }, 30s));
        r0.signal(SIGKILL);
        r1.signal(SIGKILL);
        kill_daemons(c.log());
    }
    CHECK(exists(c.store() + "/itest/v00000003/COMPLETE"));
    CHECK_FALSE(exists(c.store() + "/itest/v00000004/COMPLETE"));

    // Before any io_init, a new job already sees version 3.
    auto probe = c.rank(0, 2, {"--latest-only"});
    check_exit(probe, 0);
    CHECK(has_line(probe, "latest 0 3"));

    auto n0 = c.rank(0, 2, {"--size", "300000", "--versions", "2", "--restart"});
    auto n1 = c.rank(1, 2, {"--size", "300000", "--versions", "2", "--restart"});
    check_exit(n0, 0);
    check_exit(n1, 0);
    CHECK(has_line(n0, "restart 0 3 1"));
    CHECK(has_line(n1, "restart 0 3 1"));
    // The new versions continue after the half-written one: 5 and 6.
    CHECK(has_line(n0, "write 1 0 6 "));
    std::string out;
    const int verified = c.verify(5, 2, out);
    INFO(out);
    CHECK(verified == 0);
    CHECK(out.find("version 4: incomplete") != std::string::npos);
}

TEST_CASE("a flipped bit is named by io_read and skipped by io_latest_verified",
          "[lifecycle][corrupt]")
{
    // Unpacked: it flips a byte of version 3's own object.
    cluster c;
    c.unpacked();
    {
        auto r0 = c.rank(0, 2, {"--size", "100000", "--versions", "3"});
        auto r1 = c.rank(1, 2, {"--size", "100000", "--versions", "3"});
        check_exit(r0, 0);
        check_exit(r1, 0);
    }
    const std::string victim = c.store() + "/itest/v00000003/nodeA.r0001";
    {
        std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(4242);
        char byte = 0;
        f.read(&byte, 1);
        byte ^= 0x10;
        f.seekp(4242);
        f.write(&byte, 1);
    }
    auto p = c.rank(1, 2, {"--size", "100000", "--versions", "0", "--probe", "3"});
    auto other = c.rank(0, 2, {"--size", "100000", "--versions", "0"});
    check_exit(other, 0);
    const auto st = p.wait(60s);
    REQUIRE(st.has_value());
    INFO(p.output());
    CHECK(has_line(p, "latest 0 3"));        // the record is intact
    CHECK(has_line(p, "verified 0 2"));      // but its bytes are not
    CHECK(p.output().find("skipped damaged versions: version 3: object "
                          "itest/v00000003/nodeA.r0001 fails its checksum") != std::string::npos);
    CHECK(has_line(p, "read 74 0"));         // EBADMSG
    CHECK(p.output().find("io_read: version 3: object itest/v00000003/nodeA.r0001 fails its "
                          "checksum") != std::string::npos);
}

TEST_CASE("retention keeps exactly the newest K complete versions", "[lifecycle][retention]")
{
    cluster c;
    c.unpacked();
    auto r0 = c.rank(0, 1, {"--size", "50000", "--versions", "5", "--pause-ms", "50"},
                     {{"IOFWD_KEEP", "2"}});
    check_exit(r0, 0);
    for (int v = 1; v <= 3; ++v)
        CHECK_FALSE(exists(c.store() + "/itest/v0000000" + std::to_string(v)));
    CHECK(exists(c.store() + "/itest/v00000004/COMPLETE"));
    CHECK(exists(c.store() + "/itest/v00000005/COMPLETE"));
    CHECK(removed_by_retention(c.log(), 2) == std::vector<std::uint64_t>{1, 2, 3});
    std::string out;
    CHECK(c.verify(2, 1, out) == 0);
}

TEST_CASE("retention counts only versions whose COMPLETE record reads", "[lifecycle][retention]")
{
    // Versions 1-3; then version 3's record is torn. The next run writes
    // versions 4 and 5 and keeps 3: versions 5, 4 and 2, which a restart
    // can take, not 5, 4 and the torn 3, which would cost version 2. Each
    // of its retention runs passes 3 over, and the log says so once.
    cluster c;
    c.unpacked();
    {
        auto r = c.rank(0, 1, {"--size", "50000", "--versions", "3"});
        check_exit(r, 0);
    }
    std::ofstream(c.store() + "/itest/v00000003/COMPLETE", std::ios::trunc) << "torn";
    auto r = c.rank(0, 1, {"--size", "50000", "--versions", "2", "--pause-ms", "50"},
                    {{"IOFWD_KEEP", "3"}});
    check_exit(r, 0);
    const auto log = c.log();
    INFO(log);
    CHECK(removed_by_retention(log, 3) == std::vector<std::uint64_t>{1});
    const std::string said =
        "retention (keep 3) of job itest: version 3 is not counted among the versions kept, and "
        "is left in the store: itest/v00000003/COMPLETE: not an iofwd COMPLETE record (first "
        "line); check it with `iofwd verify itest`, then restore its record or remove it with "
        "`iofwd rm itest 3`\n";
    const auto at = log.find(said);
    CHECK(at != std::string::npos);
    CHECK(log.find(said, at + 1) == std::string::npos);
    CHECK_FALSE(exists(c.store() + "/itest/v00000001"));
    for (const char* v : {"v00000002", "v00000003", "v00000004", "v00000005"})
        CHECK(exists(c.store() + "/itest/" + v + "/COMPLETE"));
    auto probe = c.rank(0, 1, {"--size", "50000", "--versions", "0", "--probe", "2"});
    check_exit(probe, 0);
    CHECK(has_line(probe, "read 0 50000"));
}

TEST_CASE("retention keeps exactly the newest K complete versions when they are packed",
          "[lifecycle][retention]")
{
    // Version 1 as objects (the journal's first run fills it); then
    // versions 2 to 8 in packs of bucket 2 (up to 9): the bucket stays for
    // the versions kept, 7 and 8, and retires 2 to 6 by its mark.
    cluster c;
    fill_journal(c, 1);
    auto env = small_journal;
    env.insert({{"IOFWD_KEEP", "2"}, {"IOFWD_PACK_VERSIONS", "8"}});
    auto r0 = c.rank(0, 1, {"--size", "5000", "--versions", "7", "--pause-ms", "50"}, env);
    check_exit(r0, 0);
    INFO("log:\n" << c.log());
    CHECK(removed_by_retention(c.log(), 2) == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6});
    CHECK(exists(c.store() + "/itest/packs/b00000002/RETIRED.v00000006"));
    CHECK_FALSE(exists(c.store() + "/itest/v00000001"));
    // The packs that held only retired versions went with the mark; those
    // left hold 7 or 8, and together both.
    std::vector<std::uint64_t> held;
    for (const auto& e : std::filesystem::directory_iterator(c.store() + "/itest/packs/b00000002"))
        if (const auto n = e.path().filename().string(); const auto p = iofwd::store::parse_pack_name(n)) {
            INFO("pack " << n);
            CHECK(p->last >= 7);
            for (auto v = p->first; v <= p->last; ++v)
                held.push_back(v);
        }
    CHECK(std::count(held.begin(), held.end(), 7) == 1);
    CHECK(std::count(held.begin(), held.end(), 8) == 1);
    std::string out;
    CHECK(c.verify(2, 1, out) == 0);
    INFO("verify:\n" << out);
    CHECK(out.find("/itest: 2 complete versions, 0 incomplete, 2 objects") != std::string::npos);
    // The next run reads the newest, and finds 5 gone.
    auto r1 = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "8"}, small_journal);
    check_exit(r1, 0);
    CHECK(has_line(r1, "latest 0 8"));
    CHECK(has_line(r1, "read 0 5000"));
    auto r2 = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "5"}, small_journal);
    check_exit(r2, 0);
    INFO("probe 5:\n" << r2.output());
    CHECK(has_line(r2, "read 2 0"));  // ENOENT
}

TEST_CASE("retention runs while the job lives, not only when its ranks leave",
          "[lifecycle][retention]")
{
    // Versions back to back: retention waits a second after each run
    // (job::start_prune), on a timer. The rank then waits at its gate,
    // connected: the versions older than the newest go in that time, not
    // at its goodbye.
    cluster c;
    auto env = small_journal;
    env.insert({"IOFWD_KEEP", "1"});
    auto r0 = c.rank(0, 1, {"--size", "5000", "--versions", "6", "--wait", "--gate-at", "6",
                            gate(c)},
                     env);
    const bool all_gone = wait_until(
        [&] { return removed_by_retention(c.log(), 1).size() == 5; },
        std::chrono::seconds(20));
    INFO("log:\n" << c.log() << "rank:\n" << r0.output());
    CHECK(has_line(r0, "gated 6"));
    CHECK(all_gone);
    CHECK(r0.running());  // still connected: this was not its goodbye
    open_gate(c);
    check_exit(r0, 0);
    CHECK(removed_by_retention(c.log(), 1) == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
    auto probe = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "6"}, env);
    check_exit(probe, 0);
    CHECK(has_line(probe, "latest 0 6"));
    CHECK(has_line(probe, "read 0 5000"));
}

TEST_CASE("retention goes on past what a flush killed mid-write left behind",
          "[lifecycle][retention-crash]")
{
    cluster c;
    c.unpacked();
    {
        auto r = c.rank(0, 1, {"--size", "50000", "--versions", "2"});
        check_exit(r, 0);
    }
    c.crash_mid_write(c.store() + "/itest/v00000003");
    REQUIRE(temporaries(c.store()).size() == 1);
    CHECK_FALSE(exists(c.store() + "/itest/v00000003/COMPLETE"));

    auto r = c.rank(0, 1, {"--size", "50000", "--versions", "2"}, {{"IOFWD_KEEP", "1"}});
    check_exit(r, 0);
    const auto log = c.log();
    INFO(log);
    CHECK(removed_by_retention(log, 1) == std::vector<std::uint64_t>{1, 2, 3, 4});
    CHECK(log.find("retention (keep 1) of job itest stopped") == std::string::npos);
    // Versions 1 to 4 are gone, the half-written 3 with its temporary.
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(c.store() + "/itest"))
        left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    // Beside it the claim, the node's journal and the finished jobs'
    // summaries, which retention keeps.
    CHECK(left == std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports",
                                           "v00000005"});
    CHECK(exists(c.store() + "/itest/v00000005/COMPLETE"));
    CHECK(temporaries(c.store()).empty());
    std::string out;
    CHECK(c.verify(1, 1, out) == 0);
    INFO(out);
}

TEST_CASE("two nodes commit a version together; if one dies first it is complete nowhere",
          "[lifecycle][nodes]")
{
    cluster c;
    c.unpacked();
    const std::map<std::string, std::string> a{{"IOFWD_NODES", "2"}, {"IOFWD_NODE", "nodeA"},
                                               {"IOFWD_SESSION", "sa"},
                                               {"IOFWD_FINALIZE_TIMEOUT", "2"}};
    const std::map<std::string, std::string> b{{"IOFWD_NODES", "2"}, {"IOFWD_NODE", "nodeB"},
                                               {"IOFWD_SESSION", "sb"}};
    // Like an MPI job's barrier after io_init: both nodes' daemons have chosen
    // the first version before anyone writes.
    const std::string go = c.runtime_dir() + "/go";
    auto ra = c.rank(0, 1, {"--size", "70000", "--versions", "2", "--go-file", go}, a);
    auto rb = c.rank(0, 1, {"--size", "70000", "--versions", "2", "--stall-at", "1",
                            "--go-file", go}, b);
    REQUIRE(wait_until([&] {
        return count(read_file(c.runtime_dir() + "/sa.log"), "connect job") == 1 &&
               count(read_file(c.runtime_dir() + "/sb.log"), "connect job") == 1;
    }, 30s));
    std::FILE* f = std::fopen(go.c_str(), "w");
    REQUIRE(f);
    std::fclose(f);
    REQUIRE(wait_until([&] { return has_line(rb, "stalled"); }, 60s));
    // Node A makes both versions durable; node B dies (after version 1 is
    // committed everywhere) before writing version 2. A's io_finalize must
    // not claim success for a version that is complete nowhere.
    check_exit(ra, 1);
    CHECK(has_line(ra, "finalize 5 "));
    CHECK(ra.output().find("version 2 of job itest is durable on this node but not complete "
                           "job-wide: version 2 has the manifests of 1 node (nodeA), the job has "
                           "2 nodes") != std::string::npos);
    REQUIRE(wait_until([&] { return exists(c.store() + "/itest/v00000001/COMPLETE"); }, 30s));
    const std::string log_b = read_file(c.runtime_dir() + "/sb.log");
    rb.signal(SIGKILL);
    kill_daemons(log_b);

    CHECK(exists(c.store() + "/itest/v00000001/nodeA.manifest"));
    CHECK(exists(c.store() + "/itest/v00000001/nodeB.manifest"));
    CHECK(exists(c.store() + "/itest/v00000001/COMPLETE"));
    CHECK(exists(c.store() + "/itest/v00000002/nodeA.manifest"));
    CHECK_FALSE(exists(c.store() + "/itest/v00000002/COMPLETE"));
    const auto record = read_file(c.store() + "/itest/v00000001/COMPLETE");
    CHECK(record.find("nodes 2\nnode nodeA ranks 1 ") != std::string::npos);
    CHECK(record.find("\nnode nodeB ranks 1 ") != std::string::npos);

    auto probe = c.rank(0, 1, {"--latest-only"});
    check_exit(probe, 0);
    CHECK(has_line(probe, "latest 0 1"));
    std::string out;
    CHECK(c.verify(1, 2, out) == 0);
    INFO(out);
}

TEST_CASE("a barrier set for one io_init is not called after the next", "[lifecycle][barrier-reinit]")
{
    // io_init_comm's barrier frees its context once passed: an io_init
    // after io_finalize must not call it. One rank of a job said to have
    // two nodes, so that io_finalize uses the barrier (and then finds the
    // version complete on one node only: EIO, both times).
    cluster c;
    auto r = c.rank(0, 1, {"--size", "70000", "--versions", "1", "--barrier", "--again"},
                    {{"IOFWD_NODES", "2"}, {"IOFWD_FINALIZE_TIMEOUT", "1"}});
    check_exit(r, 1);
    CHECK(has_line(r, "barrier 1 0 "));
    CHECK(has_line(r, "finalize 5 "));
    CHECK(has_line(r, "again init 0"));
    CHECK(has_line(r, "again finalize 5"));
    CHECK_FALSE(has_line(r, "barrier 2 "));
}

TEST_CASE("io_wait and io_test follow a version to durable", "[lifecycle][wait]")
{
    cluster c;
    for (const auto& [k, v] : c.env)
        ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::byte> buf(3 << 20);
    auto d = c.daemon();
    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    std::uint64_t v = 0;
    const double before = monotonic_now();
    REQUIRE(io_write_version(buf.size(), &v) == 0);
    int state = -1;
    REQUIRE(io_test(v, &state) == 0);
    CHECK((state == IO_STATE_FLUSHING || state == IO_STATE_DURABLE));
    CHECK(io_wait(v) == 0);
    const double after = monotonic_now();
    REQUIRE(io_test(v, &state) == 0);
    CHECK(state == IO_STATE_DURABLE);
    REQUIRE(io_test(v + 7, &state) == 0);
    CHECK(state == IO_STATE_UNKNOWN);
    CHECK(io_wait(v + 7) == ENOENT);
    // The flush lies inside the write-to-wait window, on the caller's clock.
    double start = 0, durable = 0;
    REQUIRE(io_flush_span(v, &start, &durable) == 0);
    CHECK(before <= start);
    CHECK(start <= durable);
    CHECK(durable <= after);
    CHECK(io_flush_span(v + 7, &start, &durable) == ENOENT);
    CHECK(io_flush_span(v, nullptr, &durable) == EINVAL);
    std::vector<std::byte> back(buf.size());
    std::uint64_t size = 0;
    CHECK(io_read(v, back.data(), back.size(), &size) == 0);
    CHECK(size == buf.size());
    CHECK(back == buf);
    CHECK(io_read(v, back.data(), 10, &size) == EFBIG);
    CHECK(io_finalize() == 0);
    for (const auto& [k, v2] : c.env)
        ::unsetenv(k.c_str());
    d.signal(SIGTERM);
    CHECK(d.wait(10s).has_value());
}

TEST_CASE("a second concurrent job under the same name is refused in words", "[lifecycle][claim]")
{
    cluster c;
    auto first = c.rank(0, 1, {"--size", "4096", "--versions", "1", "--stall-at", "0"});
    REQUIRE(wait_until([&] { return has_line(first, "stalled"); }, 30s));
    // Another job (its own session) with the same job name on the same node.
    auto second = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_SESSION", "other"}});
    check_exit(second, 1);
    CHECK(has_line(second, "init 98"));  // EADDRINUSE
    CHECK(second.output().find("job 'itest' on node nodeA is being written by another daemon") !=
          std::string::npos);
    // The daemon launched for the refused rank does not linger.
    CHECK(wait_until([&] {
        return read_file(c.runtime_dir() + "/other.log").find("exit status 0") != std::string::npos;
    }, 10s));
}

TEST_CASE("a claim an iofwd command holds for a moment delays the job, not refuses it",
          "[lifecycle][claim-held]")
{
    // The claim's flock taken as iofwd ls, rm, keep and gc take it.
    cluster c;
    {
        auto first = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        check_exit(first, 0);
    }
    const std::string claim = c.store() + "/itest/.nodeA.claim";
    const int fd = ::open(claim.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    // Free once the first run's daemon has exited.
    REQUIRE(wait_until([&] { return ::flock(fd, LOCK_EX | LOCK_NB) == 0; }, scaled(20s)));
    SECTION("held a moment longer than the daemon's first try: the job goes on")
    {
        // Each try opens the claim file: the first open seen is the
        // daemon's first try.
        const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        REQUIRE(watch >= 0);
        REQUIRE(::inotify_add_watch(watch, claim.c_str(), IN_OPEN) >= 0);
        auto next = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        char events[4096];
        const bool tried = wait_until([&] { return ::read(watch, events, sizeof events) > 0; },
                                      scaled(20s));
        ::close(watch);
        REQUIRE(tried);
        // Past the open, in its flock (the daemon tries every 50 ms).
        std::this_thread::sleep_for(100ms);
        ::close(fd);
        check_exit(next, 0);
        CHECK(c.log().find("job 'itest' on node nodeA: its claim was held by someone else (an "
                           "iofwd command?); taken after ") != std::string::npos);
        CHECK(has_line(next, "write 0 0 2 "));
        std::string out;
        CHECK(c.verify(2, 1, out) == 0);
    }
    SECTION("held for longer: refused in words")
    {
        auto next = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        check_exit(next, 1);
        ::close(fd);
        CHECK(has_line(next, "init 98"));  // EADDRINUSE
        CHECK(next.output().find("job 'itest' on node nodeA is being written by another daemon "
                                 "in directory " + c.store() + " right now (or an iofwd command "
                                 "held its claim for over 1000 ms)") != std::string::npos);
    }
    SECTION("held on: the job's next rank is refused at once, and the claim taken once free")
    {
        // One daemon for all three ranks: it remembers the refusal. Each
        // try of the claim opens and closes its file; opens and closes
        // alternate, so inotify coalesces none of them. Started once the
        // first run's daemon, which let the claim go, has let the session's
        // lock go too (a process of its may hold it a moment longer).
        const std::string lock = c.runtime_dir() + "/s.lock";
        REQUIRE(wait_until(
            [&] {
                const int l = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
                const bool free = l >= 0 && ::flock(l, LOCK_EX | LOCK_NB) == 0;
                if (l >= 0)
                    ::close(l);
                return free;
            },
            scaled(20s)));
        auto d = c.daemon();
        REQUIRE(wait_until([&] { return count(c.log(), "ready:") == 2 || !d.running(); },
                           scaled(20s)));
        REQUIRE(d.running());
        const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        REQUIRE(watch >= 0);
        REQUIRE(::inotify_add_watch(watch, claim.c_str(), IN_OPEN | IN_CLOSE) >= 0);
        const auto opens = [&] {
            int n = 0;
            alignas(inotify_event) char events[8192];
            for (ssize_t got; (got = ::read(watch, events, sizeof events)) > 0;)
                for (ssize_t at = 0; at < got;) {
                    const auto* e = reinterpret_cast<const inotify_event*>(events + at);
                    n += (e->mask & IN_OPEN) != 0;
                    at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
                }
            return n;
        };
        auto first = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        check_exit(first, 1);
        const int patient = opens();
        INFO("log:\n" << c.log());
        CHECK(patient >= 5);  // every 50 ms for a second
        auto second = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        check_exit(second, 1);
        CHECK(has_line(second, "init 98"));
        CHECK(opens() == 1);
        ::close(fd);
        auto third = c.rank(0, 1, {"--size", "4096", "--versions", "1"});
        check_exit(third, 0);
        CHECK(opens() >= 1);
        ::close(watch);
        CHECK(c.log().find("taken after") == std::string::npos);
        CHECK(has_line(third, "write 0 0 2 "));
        d.signal(SIGTERM);
        REQUIRE(d.wait(scaled(20s)).has_value());
        std::string out;
        CHECK(c.verify(2, 1, out) == 0);
    }
}

TEST_CASE("io_read of a version still in daemon memory is served from there", "[lifecycle][staged]")
{
    cluster c;
    for (const auto& [k, v] : c.env)
        ::setenv(k.c_str(), v.c_str(), 1);
    // A slow disk: every pwrite takes a second, so version 1 (three 1 MiB
    // chunks + 5 bytes) is still whole in staging when we read it.
    auto d = c.daemon({"--chunk-size", "1M", "--staging-size", "8M"},
                      {{"IOFWD_FAULT", "pwrite:DELAY"}});
    std::vector<std::byte> buf((2 << 20) + 5);
    for (std::size_t i = 0; i < buf.size(); ++i)
        buf[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    std::uint64_t v = 0;
    const double before = monotonic_now();
    REQUIRE(io_write_version(buf.size(), &v) == 0);
    double start = 0, durable = 0;
    CHECK(io_flush_span(v, &start, &durable) == EINVAL);  // not durable yet
    CHECK(std::string(io_last_error()).find("version 1 of rank 0 is not durable (not yet)") !=
          std::string::npos);
    std::vector<std::byte> back(buf.size() + 100);
    std::uint64_t size = 0;
    REQUIRE(io_read(v, back.data(), back.size(), &size) == 0);
    CHECK(size == buf.size());
    CHECK(std::memcmp(back.data(), buf.data(), buf.size()) == 0);
    CHECK(c.log().find("read of version 1 served from staging memory (2.0 MiB)") != std::string::npos);
    int state = -1;
    REQUIRE(io_test(v, &state) == 0);
    CHECK(state == IO_STATE_FLUSHING);
    CHECK(io_read(v, back.data(), 10, &size) == EFBIG);
    // Once durable, the same read comes from the store.
    CHECK(io_wait(v) == 0);
    const double after = monotonic_now();
    // Its flush span holds the slow writes (each a second late), inside
    // the write-to-wait window.
    REQUIRE(io_flush_span(v, &start, &durable) == 0);
    CHECK(before <= start);
    CHECK(durable - start >= 1.0);
    CHECK(durable <= after);
    std::fill(back.begin(), back.end(), std::byte{0});
    REQUIRE(io_read(v, back.data(), back.size(), &size) == 0);
    CHECK(std::memcmp(back.data(), buf.data(), buf.size()) == 0);
    CHECK(count(c.log(), "served from staging memory") == 1);
    CHECK(io_finalize() == 0);
    for (const auto& [k, v2] : c.env)
        ::unsetenv(k.c_str());
    d.signal(SIGTERM);
    CHECK(d.wait(20s).has_value());
}

TEST_CASE("a long flush shows progress in the log; the log level and IOFWD_LOG are honoured",
          "[lifecycle][progress]")
{
    cluster c;
    // Each store write a second late: a 3 MiB version in 1 MiB chunks flushes
    // for about 3 s, and the daemon says how far it got every second.
    const std::map<std::string, std::string> slow{{"IOFWD_FAULT", "pwrite:DELAY"},
                                                  {"IOFWD_CHUNK_SIZE", "1M"},
                                                  {"IOFWD_PROGRESS_INTERVAL", "1"}};
    auto r = c.rank(0, 1, {"--size", std::to_string(3 << 20), "--versions", "1"}, slow);
    check_exit(r, 0);
    const auto log = c.log();
    INFO(log);
    CHECK(count(log, "progress: itest/v00000001/nodeA.r0000 (rank 0): ") >= 2);
    CHECK(log.find("of 3 MiB in the store, 3 MiB pulled") != std::string::npos);

    // warn: only warnings and errors; IOFWD_LOG: a file of the user's choice,
    // also for a daemon a rank launched.
    cluster q;
    const std::string elsewhere = q.tmp / "my.log";
    auto r2 = q.rank(0, 1, {"--size", "70000", "--versions", "2"},
                     {{"IOFWD_LOG", elsewhere}, {"IOFWD_LOG_LEVEL", "warn"}});
    check_exit(r2, 0);
    CHECK(count(read_file(elsewhere), "iod[") == 0);  // nothing at info level
    auto r3 = q.rank(0, 1, {"--size", "70000", "--versions", "1"}, {{"IOFWD_LOG", elsewhere}});
    check_exit(r3, 0);
    CHECK(count(read_file(elsewhere), "connect job itest") == 1);
}

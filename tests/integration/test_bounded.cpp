// Nothing waits forever: a daemon that stops answering, a rank that skips
// io_finalize, a job that died half-connected on a shared daemon, a CONNECT
// that claims absurd sizes, settings that make no sense, and the staging
// a pushing rank's claims hold (one that pushes nothing, one killed at the
// worst moment).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "fixture.hpp"
#include "pattern.hpp"
#include "procfs.hpp"

using namespace test;
using clock_type = std::chrono::steady_clock;

namespace {

// The daemon's resident memory in KiB (VmRSS), 0 if it is gone.
long rss_kib(pid_t pid)
{
    const auto status = read_file("/proc/" + std::to_string(pid) + "/status");
    const auto at = status.find("VmRSS:");
    return at == std::string::npos ? 0 : std::atol(status.c_str() + at + 6);
}

}  // namespace

TEST_CASE("a stopped daemon ends io_write and io_finalize with ETIMEDOUT within the bound",
          "[bounded][stopped-daemon]")
{
    cluster c;
    auto d = c.daemon();
    const std::map<std::string, std::string> quick{{"IOFWD_DAEMON_TIMEOUT", "2"}};
    // Writes of 2 MiB (past the eager limit) go through a request and an
    // answer, not the mailbox. The daemon is stopped once the rank's io_init
    // has returned, the rank at its gate (the log's "connect" line comes
    // before ACCEPT is sent: a stop there would time out io_init instead).
    auto r = c.rank(0, 1, {"--size", "2097152", "--versions", "2", "--go-file", gate(c)}, quick);
    REQUIRE(wait_until([&] { return has_line(r, "init 0"); }, 20s));
    d.signal(SIGSTOP);
    open_gate(c);
    const auto stopped = clock_type::now();
    const auto st = r.wait(15s);
    const auto elapsed = clock_type::now() - stopped;
    d.signal(SIGCONT);
    INFO(r.output());
    REQUIRE(st.has_value());
    CHECK(exit_code(*st) == 1);
    CHECK(has_line(r, "write 0 110 "));  // ETIMEDOUT
    CHECK(r.output().find("has answered nothing for 2 s, not even a heartbeat") !=
          std::string::npos);
    // Within the bound (2 s of silence).
    CHECK(elapsed < scaled(4s));
    // io_finalize after that does not wait either.
    CHECK(has_line(r, "finalize 110 "));
}

TEST_CASE("a rank that skips io_finalize holds the launching rank only until the bound",
          "[bounded][skip-finalize]")
{
    cluster c;
    const std::map<std::string, std::string> bound{{"IOFWD_FINALIZE_TIMEOUT", "2"}};
    // Rank 0 launches the daemon; rank 1 attaches, writes, and then never
    // calls io_finalize (as a rank stuck in MPI_Finalize after an error).
    auto r0 = c.rank(0, 2, {"--size", "65536", "--versions", "2", "--go-file", gate(c)}, bound);
    REQUIRE(wait_until([&] { return has_line(r0, "init 0"); }, 20s));
    auto r1 = c.rank(1, 2, {"--size", "65536", "--versions", "2", "--skip-finalize"}, bound);
    REQUIRE(wait_until([&] { return has_line(r1, "skipped"); }, 20s));
    open_gate(c);
    const auto start = clock_type::now();
    const auto st = r0.wait(20s);
    INFO(r0.output() << c.log());
    REQUIRE(st.has_value());
    CHECK(clock_type::now() - start < scaled(8s));
    CHECK(exit_code(*st) == 1);
    CHECK(has_line(r0, "finalize 110 "));
    CHECK(r0.output().find("serving 1 other rank of this node that had not called io_finalize") !=
          std::string::npos);
    // The daemon goes on alone, and exits once that rank is gone.
    REQUIRE(r1.running());
    r1.signal(SIGKILL);
    CHECK(wait_until([&] { return count(c.log(), "exit status") == 1; }, 20s));
}

TEST_CASE("a shared daemon forgets a job whose ranks died half-connected", "[bounded][forget]")
{
    cluster c;
    c.unpacked();
    auto d = c.daemon();
    // Job A: rank 0 of 2 connects and is killed before rank 1 ever comes.
    auto a0 = c.rank(0, 2, {"--size", "4096", "--versions", "1", "--stall-at", "0"},
                     {{"IOFWD_JOB", "jobA"}});
    REQUIRE(wait_until([&] { return has_line(a0, "stalled"); }, 20s));
    a0.signal(SIGKILL);
    REQUIRE(wait_until([&] { return count(c.log(), "disconnect job jobA") == 1; }, 20s));
    // Job B, and then job A again, are served.
    for (const char* job : {"jobB", "jobA"}) {
        INFO(job);
        auto b0 = c.rank(0, 2, {"--size", "4096", "--versions", "2"}, {{"IOFWD_JOB", job}});
        auto b1 = c.rank(1, 2, {"--size", "4096", "--versions", "2"}, {{"IOFWD_JOB", job}});
        const auto s0 = b0.wait(30s), s1 = b1.wait(30s);
        INFO(b0.output() << b1.output() << c.log());
        REQUIRE(s0.has_value());
        REQUIRE(s1.has_value());
        CHECK(exit_code(*s0) == 0);
        CHECK(exit_code(*s1) == 0);
    }
    CHECK(exists(c.store() + "/jobB/v00000002/COMPLETE"));
    CHECK(exists(c.store() + "/jobA/v00000002/COMPLETE"));
    CHECK(d.running());
}

TEST_CASE("a CONNECT claiming 2^32 ranks is refused in words without a large allocation",
          "[bounded][huge-ranks]")
{
    cluster c;
    auto d = c.daemon();
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "huge-ranks"});
    REQUIRE(peer.wait(20s).has_value());
    INFO(peer.output());
    CHECK(peer.output().find("answer ERROR") != std::string::npos);
    CHECK(peer.output().find("4294967295 ranks on one node is more than the limit of 65536") !=
          std::string::npos);
    CHECK(rss_kib(d.pid()) < 512 * 1024);
    // And it goes on serving a real rank.
    auto r = c.rank(0, 1, {"--size", "70000", "--versions", "1"});
    const auto st = r.wait(30s);
    REQUIRE(st.has_value());
    CHECK(exit_code(*st) == 0);
}

TEST_CASE("a bad value of any setting is refused at io_init, naming the variable",
          "[bounded][config]")
{
    cluster c;
    const std::pair<const char*, const char*> bad[] = {
        {"IOFWD_EAGER_LIMIT", "abc"},        {"IOFWD_EAGER_LIMIT", "2000000000"},
        {"IOFWD_LAUNCH_TIMEOUT", "-1"},      {"IOFWD_FINALIZE_TIMEOUT", "abc"},
        {"IOFWD_HUGEPAGES", "10000000"},     {"IOFWD_DAEMON_TIMEOUT", "0"},
        {"IOFWD_NODES", "0"},                {"IOFWD_RUN", "../etc"},
        {"IOFWD_RUNTIME_LOG_AGE", "soon"},
    };
    for (const auto& [name, value] : bad) {
        INFO(name << "=" << value);
        auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{name, value}});
        const auto st = r.wait(20s);
        REQUIRE(st.has_value());
        CHECK(exit_code(*st) == 1);
        CHECK(has_line(r, "init 22"));
        CHECK(r.output().find(std::string(name) + "='" + value + "' is not ") != std::string::npos);
    }
    // A variable iofwd does not know is named, with the nearest one.
    auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_STAGIN_SIZE", "1G"}});
    const auto st = r.wait(20s);
    REQUIRE(st.has_value());
    CHECK(exit_code(*st) == 0);
    CHECK(r.output().find("iofwd: warning: IOFWD_STAGIN_SIZE is not an iofwd setting (did you "
                          "mean IOFWD_STAGING_SIZE?)") != std::string::npos);
}

TEST_CASE("a CONNECT whose UCX address would abort UCX leaves the daemon serving",
          "[bounded][bad-address]")
{
    cluster c;
    c.unpacked();
    auto d = c.daemon();
    for (int i = 0; i < 3; ++i) {
        auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "bad-address"});
        REQUIRE(peer.wait(20s).has_value());
        INFO(peer.output() << c.log());
        CHECK(peer.output().find("answer ERROR") != std::string::npos);
        CHECK(peer.output().find("UCX cannot use them: the process that tried") !=
              std::string::npos);
        REQUIRE(d.running());
    }
    // Every check after the first had a new checker; real ranks are served,
    // their bytes over UCX (past the eager limit), not through mailboxes.
    const std::map<std::string, std::string> over_ucx{{"IOFWD_EAGER_LIMIT", "64K"}};
    auto r0 = c.rank(0, 2, {"--size", "1048576", "--versions", "2"}, over_ucx);
    auto r1 = c.rank(1, 2, {"--size", "70000", "--versions", "2"}, over_ucx);
    const auto s0 = r0.wait(30s), s1 = r1.wait(30s);
    REQUIRE(s0.has_value());
    REQUIRE(s1.has_value());
    CHECK(exit_code(*s0) == 0);
    CHECK(exit_code(*s1) == 0);
    CHECK(exists(c.store() + "/itest/v00000002/COMPLETE"));
}

TEST_CASE("a live daemon fuzzed over its socket with valid-then-mutated sessions keeps serving",
          "[bounded][fuzz-daemon]")
{
    cluster c;
    auto d = c.daemon();
    // IOFWD_TEST_FUZZ_SECONDS (30) and IOFWD_TEST_FUZZ_SEED (the clock) to reproduce a run.
    const char* secs = std::getenv("IOFWD_TEST_FUZZ_SECONDS");
    std::vector<std::string> argv = {build_path("IOFWD_TEST_DAEMON_FUZZ"), c.socket(),
                                     secs ? secs : "30", c.tmp.path()};
    if (const char* seed = std::getenv("IOFWD_TEST_FUZZ_SEED"))
        argv.emplace_back(seed);
    auto fuzz = c.run(argv);
    const auto st = fuzz.wait(600s);
    REQUIRE(st.has_value());
    INFO(fuzz.output());
    CHECK(exit_code(*st) == 0);
    CHECK(fuzz.output().find("connections ") != std::string::npos);
    REQUIRE(d.running());
    // A real checkpoint afterwards, every byte checked. Under a job name of
    // its own: sessions of the fuzz's job "itest" (4 ranks) that happened to
    // cover every rank of a version made it complete, legitimately.
    const std::map<std::string, std::string> job = {{"IOFWD_JOB", "afterfuzz"}};
    auto r0 = c.rank(0, 2, {"--size", "3000000", "--versions", "2"}, job);
    auto r1 = c.rank(1, 2, {"--size", "70000", "--versions", "2"}, job);
    const auto s0 = r0.wait(60s), s1 = r1.wait(60s);
    INFO(r0.output() << r1.output());
    REQUIRE(s0.has_value());
    REQUIRE(s1.has_value());
    CHECK(exit_code(*s0) == 0);
    CHECK(exit_code(*s1) == 0);
    std::string out;
    CHECK(c.verify(2, 2, out, "afterfuzz") == 0);
    CHECK(d.running());
}

TEST_CASE("a slot a stalled pull held goes back once its process has exited, and not before",
          "[bounded][stalled-pull]")
{
    // One staging slot. A peer asks for a write the daemon is to get from it
    // and never progresses UCX: UCX 1.13 emulates the get with the peer's
    // CPU, so the pull never ends, and it is not cancelled when the peer
    // hangs up. Before: the slot stayed held for the daemon's life, and
    // every later write waited for it forever.
    cluster c;
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "1M"}, {"IOFWD_CHUNK_SIZE", "1M"}});
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "stall-get", "600"});
    const bool hung_up = wait_until([&] { return has_line(peer, "hung up"); }, scaled(20s));
    INFO("peer:\n" << peer.output() << "log:\n" << c.log());
    REQUIRE(hung_up);
    // (A UCX that gets without the peer's CPU would never orphan the pull.)
    REQUIRE(wait_until([&] { return count(c.log(), "pulls never completed") == 1; }, scaled(20s)));
    CHECK(c.log().find(fmt::format("rank 0 version 1: 1 pulls never completed after the rank "
                                   "went away; their staging slots stay reserved while its "
                                   "process (pid {}) lives",
                                   peer.pid())) != std::string::npos);
    // A real rank now: its write waits for the one slot, which UCX could
    // still write into while the peer lives.
    const std::map<std::string, std::string> job = {{"IOFWD_JOB", "afterstall"}};
    auto r0 = c.rank(0, 1, {"--size", "1048576", "--versions", "2"}, job);
    REQUIRE(wait_until([&] { return has_line(r0, "writing 0"); }, scaled(20s)));
    std::this_thread::sleep_for(2s);
    CHECK(r0.running());
    CHECK(count(c.log(), "staging slots returned") == 0);
    CHECK(count(c.log(), "flushed afterstall") == 0);
    // The peer dies: the slot goes back, and the rank's versions go through.
    REQUIRE(peer.running());
    peer.signal(SIGKILL);
    REQUIRE(peer.wait(scaled(10s)).has_value());
    REQUIRE(wait_until([&] { return count(c.log(), "staging slots returned") == 1; },
                       scaled(20s)));
    const auto s0 = r0.wait(scaled(60s));
    INFO("rank 0:\n" << r0.output() << "log:\n" << c.log());
    REQUIRE(s0.has_value());
    CHECK(exit_code(*s0) == 0);
    CHECK(c.log().find("rank 0 version 1: 1 staging slots returned: the rank's process has "
                       "exited") != std::string::npos);
    CHECK(count(c.log(), "please report this") == 0);
    std::string out;
    CHECK(c.verify(2, 1, out, "afterstall") == 0);
    CHECK(d.running());
}

TEST_CASE("a stalled pull holds half of staging at most, and other ranks are served while "
          "its process lives",
          "[bounded][stalled-share]")
{
    // Eight slots; a peer asks for a write of eight chunks and never
    // progresses UCX. Before: all eight pulls went to UCX at once, were
    // orphaned together, and every later write waited for the peer's exit.
    cluster c;
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "8M"}, {"IOFWD_CHUNK_SIZE", "1M"}});
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "stall-get", "600", "8"});
    const bool hung_up = wait_until([&] { return has_line(peer, "hung up"); }, scaled(20s));
    const bool orphaned =
        wait_until([&] { return count(c.log(), "pulls never completed") == 1; }, scaled(20s));
    INFO("peer:\n" << peer.output() << "log:\n" << c.log());
    REQUIRE(hung_up);
    REQUIRE(orphaned);
    CHECK(c.log().find("rank 0 version 1: 4 pulls never completed after the rank went away") !=
          std::string::npos);
    // A real rank, while the peer lives: served from the other four slots.
    const std::map<std::string, std::string> job = {{"IOFWD_JOB", "besidestall"}};
    auto r0 = c.rank(0, 1, {"--size", "3000000", "--versions", "2"}, job);
    const auto s0 = r0.wait(scaled(60s));
    INFO("rank 0:\n" << r0.output());
    REQUIRE(s0.has_value());
    CHECK(exit_code(*s0) == 0);
    CHECK(peer.running());
    CHECK(count(c.log(), "staging slots returned") == 0);
    std::string out;
    CHECK(c.verify(2, 1, out, "besidestall") == 0);
    // Its exit still gives the four slots back.
    peer.signal(SIGKILL);
    REQUIRE(peer.wait(scaled(10s)).has_value());
    const bool returned =
        wait_until([&] { return count(c.log(), "staging slots returned") == 1; }, scaled(20s));
    INFO("log, after the kill:\n" << c.log());
    REQUIRE(returned);
    CHECK(c.log().find("rank 0 version 1: 4 staging slots returned") != std::string::npos);
    CHECK(d.running());
}

TEST_CASE("a daemon out of descriptors keeps its connections queued, says so once, and serves "
          "them when some are free",
          "[bounded][fd-limit]")
{
    // A hard limit the daemon cannot raise, a little above what it opens
    // to start (about 45 descriptors here).
    cluster c;
    ::mkdir(c.runtime_dir().c_str(), 0700);
    auto d = c.run({"/usr/bin/prlimit", "--nofile=72:72", build_path("IOFWD_TEST_IOD"), "--log",
                    c.runtime_dir() + "/s.log"});
    REQUIRE(wait_until([&] { return count(c.log(), "ready:") > 0 || !d.running(); }, scaled(20s)));
    REQUIRE(d.running());
    // Connections that say nothing: each holds a descriptor of the daemon.
    std::vector<int> held;
    for (int i = 0; i < 60; ++i) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, c.socket().c_str(), sizeof addr.sun_path - 1);
        REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
        held.push_back(fd);
    }
    REQUIRE(wait_until(
        [&] { return count(c.log(), "cannot accept a connection: Too many open files") > 0; },
        scaled(20s)));
    // Before: accept() failed again at once, forever, a line each time.
    std::this_thread::sleep_for(3s);
    INFO(c.log());
    CHECK(count(c.log(), "cannot accept a connection") == 1);
    CHECK(d.running());
    for (const int fd : held)
        ::close(fd);
    REQUIRE(wait_until([&] { return count(c.log(), "accepting connections again after") == 1; },
                       scaled(20s)));
    // And a real rank is served.
    const std::map<std::string, std::string> job = {{"IOFWD_JOB", "afterlimit"}};
    auto r0 = c.rank(0, 1, {"--size", "1048576", "--versions", "2"}, job);
    const auto s0 = r0.wait(scaled(60s));
    INFO(r0.output());
    REQUIRE(s0.has_value());
    CHECK(exit_code(*s0) == 0);
    std::string out;
    CHECK(c.verify(2, 1, out, "afterlimit") == 0);
    CHECK(d.running());
}

TEST_CASE("a rank killed mid-push leaves the daemon idle, not spinning",
          "[bounded][idle-after-kill]")
{
    // Pushed chunks are read by the pullers; when the rank dies in the
    // middle, UCX 1.13 keeps reporting work for it that it never does.
    // Before: each puller then spun a core for the rest of the daemon's life.
    cluster c;
    c.unpacked();
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "4M"}, {"IOFWD_CHUNK_SIZE", "1M"}});
    const std::map<std::string, std::string> push = {{"IOFWD_PULL", "push"}};
    for (std::size_t k = 1; k <= 3; ++k) {
        auto r = c.rank(0, 1, {"--size", std::to_string(1 << 30), "--versions", "3"}, push);
        REQUIRE(wait_until([&] { return has_line(r, "writing 1"); }, scaled(60s)));
        std::this_thread::sleep_for(100ms);
        r.signal(SIGKILL);
        REQUIRE(r.wait(scaled(10s)).has_value());
        INFO(c.log());
        REQUIRE(wait_until([&] { return count(c.log(), "the partial version is discarded") == k; },
                           scaled(20s)));
    }
    std::this_thread::sleep_for(2s);
    const double before = iofwd::process_cpu_seconds(d.pid());
    std::this_thread::sleep_for(3s);
    const double used = iofwd::process_cpu_seconds(d.pid()) - before;
    INFO("daemon CPU in 3 s: " << used << " s\n" << c.log());
    CHECK(before > 0);  // read at all
    CHECK(used < 1.5);  // under half a core
    // And it still serves.
    auto r = c.rank(0, 1, {"--size", "1048576", "--versions", "2"},
                    {{"IOFWD_PULL", "push"}, {"IOFWD_JOB", "afterkill"}});
    const auto s = r.wait(scaled(60s));
    REQUIRE(s.has_value());
    CHECK(exit_code(*s) == 0);
    std::string out;
    CHECK(c.verify(2, 1, out, "afterkill") == 0);
}

namespace {

// The daemon's staging as its STATUS_REPLY says it, through the raw peer.
// (It waits up to 10 s: at a job's end the daemon's loop writes the job's
// summary into the store, and every store write is late in one test.)
std::string staging_of(cluster& c)
{
    auto p = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "status"});
    const auto st = p.wait(20s);
    INFO(p.output());
    CHECK(st.has_value());
    return p.output();
}

std::string staging_line(std::uint64_t used, unsigned waiting)
{
    return "staging used " + std::to_string(used) + " total 8388608 chunk 1048576 stalled 0 waiting " +
           std::to_string(waiting) + "\n";
}

}  // namespace

TEST_CASE("a rank that announces a pushed write and pushes nothing holds its claims' "
          "slots, not the data path, until it goes",
          "[bounded][claims]")
{
    // The daemon posts where a pushed write's chunks go before they come
    // (iod/chunk_claims.hpp), four ahead with two pullers. A claim counts
    // as a pull only once a puller takes it: before, a rank that announced
    // a write and never pushed kept the data path busy for good, and
    // retention never ran. The peer is rank 1 of 2: versions 1 and 2 of
    // one chunk, then version 3 of eight chunks announced and never pushed.
    cluster c;
    c.unpacked();
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "8M"}, {"IOFWD_CHUNK_SIZE", "1M"},
                           {"IOFWD_KEEP", "1"}});
    auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", "2", "--gate-at", "2", gate(c)});
    REQUIRE(wait_until([&] { return has_line(r0, "gated 2"); }, 30s));
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "push-then-announce", "2",
                       "8"});
    const bool announced =
        wait_until([&] { return has_line(peer, "announced 8 chunks of 1048576 bytes"); }, 30s);
    INFO("peer:\n" << peer.output() << "log:\n" << c.log());
    REQUIRE(announced);
    CHECK(has_line(peer, "answer WRITE_DONE version 1"));
    CHECK(has_line(peer, "answer WRITE_DONE version 2"));
    // Rank 0's version 2 after the announce: the version completes, and
    // retention has one to remove, only while the claims are posted.
    open_gate(c);
    require_exit(r0, 0);
    const bool removed = wait_until(
        [&] { return removed_by_retention(c.log(), 1) == std::vector<std::uint64_t>{1}; },
        20s);
    INFO("log:\n" << c.log());
    CHECK(removed);
    CHECK(!exists(c.store() + "/itest/v00000001"));
    CHECK(exists(c.store() + "/itest/v00000002/COMPLETE"));
    REQUIRE(peer.running());
    CHECK(staging_of(c) == staging_line(4u << 20, 0));
    // Its process goes: the claims are taken back, every slot is free.
    peer.signal(SIGKILL);
    REQUIRE(peer.wait(10s).has_value());
    REQUIRE(wait_until(
        [&] {
            return count(c.log(), "rank 1 went away after 0 of 8388608 bytes of version 3") == 1;
        },
        20s));
    CHECK(staging_of(c) == staging_line(0, 0));
    CHECK(count(c.log(), "please report this") == 0);
    CHECK(d.running());
}

TEST_CASE("a rank killed while its claim is posted and its next slot is first in line "
          "gives every slot back",
          "[bounded][claims]")
{
    // The moment a review of the claims found: staging short, a pushing
    // rank's write holds one claim and waits for the next slot. The rank
    // dies; taking back the claim frees a slot that goes straight to the
    // write's own request, which then ends the write (the session lets go
    // of it) in the middle of the failure's own bookkeeping. The transfer
    // must outlive that (under AddressSanitizer a use after free before).
    // Rank 0's 7 MiB write holds seven of eight slots while every store
    // write of its chunks is three seconds late (one at a time: 21 s).
    cluster c;
    c.unpacked();
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "8M"}, {"IOFWD_CHUNK_SIZE", "1M"},
                           {"IOFWD_FAULT", "pwrite:DELAY3"}});
    constexpr std::size_t size = 7u << 20;
    auto r0 = c.rank(0, 2, {"--size", std::to_string(size), "--versions", "1"});
    const bool written = wait_until([&] { return has_line(r0, "write 0 0 1 "); }, 30s);
    INFO("rank 0:\n" << r0.output() << "log:\n" << c.log());
    REQUIRE(written);
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "push-then-announce", "0",
                       "8"});
    REQUIRE(wait_until([&] { return has_line(peer, "announced 8 chunks of 1048576 bytes"); },
                       30s));
    INFO("peer:\n" << peer.output() << "log:\n" << c.log());
    // Set up as meant: every slot held, the peer's second one asked for.
    REQUIRE(staging_of(c) == staging_line(8u << 20, 1));
    peer.signal(SIGKILL);
    REQUIRE(peer.wait(10s).has_value());
    REQUIRE(wait_until(
        [&] {
            return count(c.log(), "rank 1 went away after 0 of 8388608 bytes of version 1") == 1;
        },
        20s));
    REQUIRE(d.running());
    CHECK(staging_of(c).ends_with(" waiting 0\n"));
    // Rank 0's version is durable, byte for byte, and all of staging free.
    require_exit(r0, 0);
    const auto stored = read_file(c.store() + "/itest/v00000001/nodeA.r0000");
    std::string expected(size, '\0');
    example::fill_pattern(reinterpret_cast<std::byte*>(expected.data()), size,
                          example::pattern_seed("nodeA", 0, 1));
    CHECK(stored.size() == size);
    CHECK(stored == expected);
    CHECK(staging_of(c) == staging_line(0, 0));
    CHECK(count(c.log(), "please report this") == 0);
    CHECK(d.running());
}

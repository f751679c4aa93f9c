// The C API used wrongly, in this very process: clear codes, no crash.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/mman.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fixture.hpp"
#include "io.h"
#include "pattern.hpp"
#include "procfs.hpp"
#include "../support/spare_huge_page.h"

using namespace test;

TEST_CASE("calls out of order and bad lengths return the documented codes", "[api]")
{
    // Unpacked: it reads each version's objects and manifest below.
    cluster c;
    c.unpacked();
    for (const auto& [k, v] : c.env)
        ::setenv(k.c_str(), v.c_str(), 1);

    CHECK(io_write(10) == ENOTCONN);
    CHECK(std::string(io_last_error()).find("call io_init first") != std::string::npos);
    CHECK(io_finalize() == ENOTCONN);
    std::vector<std::byte> buf(1 << 16);
    example::fill_pattern(buf.data(), buf.size(), example::pattern_seed("nodeA", 0, 1));
    CHECK(io_init(nullptr, 10, 0, 1, nullptr, 1) == EINVAL);
    CHECK(io_init(buf.data(), 0, 0, 1, nullptr, 1) == EINVAL);
    CHECK(io_init(buf.data(), buf.size(), 2, 2, nullptr, 1) == EINVAL);
    CHECK(std::string(io_last_error()).find("rank 2 is not below ranks 2") != std::string::npos);

    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    CHECK(std::string(io_provider_name()) != "none");
    CHECK(std::string(io_node_name()) == "nodeA");
    CHECK(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == EALREADY);
    CHECK(io_write(0) == EINVAL);
    CHECK(io_write(buf.size() + 1) == EFBIG);
    CHECK(std::string(io_last_error()).find("io_init registered 65536 bytes") != std::string::npos);
    std::uint64_t v = 0;
    CHECK(io_write_version(buf.size(), &v) == 0);
    CHECK(v == 1);
    // Two threads writing at once are serialised by the library: both
    // succeed, with distinct consecutive versions holding the same bytes.
    std::uint64_t va = 0, vb = 0;
    int ra = -1, rb = -1;
    {
        std::thread a([&] { ra = io_write_version(buf.size(), &va); });
        std::thread b([&] { rb = io_write_version(buf.size(), &vb); });
        a.join();
        b.join();
    }
    CHECK(ra == 0);
    CHECK(rb == 0);
    CHECK(std::min(va, vb) == 2);
    CHECK(std::max(va, vb) == 3);
    CHECK(io_finalize() == 0);
    CHECK(io_finalize() == ENOTCONN);
    CHECK(io_write(1) == ENOTCONN);
    CHECK(std::string(io_strerror(ECONNRESET)).size() > 0);

    for (const auto& [k, v2] : c.env)
        ::unsetenv(k.c_str());
    // All three versions hold the buffer's bytes (the pattern of version 1),
    // each complete with its manifest.
    for (const char* v : {"v00000001", "v00000002", "v00000003"}) {
        const auto stored = read_file(c.store() + "/itest/" + v + "/nodeA.r0000");
        CHECK(stored.size() == buf.size());
        CHECK(std::memcmp(stored.data(), buf.data(), buf.size()) == 0);
        CHECK(exists(c.store() + "/itest/" + v + "/nodeA.manifest"));
    }
}

namespace {

// The daemon that wrote its pid last in the cluster's log, killed; returns
// once it is gone or a zombie (io_init launched it: this process is its
// parent).
void kill_newest_daemon(const cluster& c)
{
    const auto pids = daemon_pids(c.log());
    REQUIRE(!pids.empty());
    REQUIRE(::kill(pids.back(), SIGKILL) == 0);
    const std::string stat = fmt::format("/proc/{}/stat", pids.back());
    REQUIRE(wait_until(
        [&] {
            const std::string text = exists(stat) ? read_file(stat) : std::string();
            const auto paren = text.rfind(')');
            return paren == std::string::npos || text.compare(paren, 3, ") Z") == 0;
        },
        std::chrono::seconds(10)));
}

void set_env(const std::map<std::string, std::string>& env, bool on)
{
    for (const auto& [k, v] : env)
        if (on)
            ::setenv(k.c_str(), v.c_str(), 1);
        else
            ::unsetenv(k.c_str());
}

}  // namespace

TEST_CASE("the daemon writes the format of a job it takes, and refuses a newer one in words",
          "[api]")
{
    cluster c;
    auto env = c.env;
    env["IOFWD_PACK_VERSIONS"] = "4";
    set_env(env, true);
    std::vector<std::byte> buf(1 << 12);
    example::fill_pattern(buf.data(), buf.size(), example::pattern_seed("nodeA", 0, 1));
    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    REQUIRE(io_write(buf.size()) == 0);
    CHECK(io_finalize() == 0);
    // Written at the claim of a daemon that packs, before any pack.
    CHECK(read_file(c.store() + "/itest/FORMAT") == "iofwd-job-format 3\n");
    CHECK(std::filesystem::exists(c.store() + "/itest/packs/b00000001/COMPLETE.v00000001"));
    set_env(env, false);

    // As a newer iofwd would leave it: refused before a version is
    // numbered, so nothing of the job is written over or beside it.
    const auto listing = [](const std::string& dir) {
        std::vector<std::string> names;
        for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
            names.push_back(e.path().string());
        std::sort(names.begin(), names.end());
        return names;
    };
    const auto before = listing(c.store() + "/itest");
    {
        std::ofstream out(c.store() + "/itest/FORMAT", std::ios::trunc);
        out << "iofwd-job-format 4\n";
    }
    // A daemon that does not pack refuses it too.
    set_env(c.env, true);
    CHECK(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == EPROTONOSUPPORT);
    CHECK_THAT(std::string(io_last_error()),
               Catch::Contains("job itest is kept in store format 4 (itest/FORMAT), newer than "
                               "format 3, the newest this iofwd reads"));
    set_env(c.env, false);
    CHECK(listing(c.store() + "/itest") == before);
    CHECK(read_file(c.store() + "/itest/FORMAT") == "iofwd-job-format 4\n");
}

TEST_CASE("io_wait and io_test on a version the mailbox says is durable ask the daemon nothing",
          "[api]")
{
    // Versions 2 to 4 of 4 KiB, each waited for: durable in the node's
    // journal (filled by a first run), and the daemon says so through the
    // rank's mailbox. Then the daemon is killed: io_wait and io_test on
    // those still succeed, from the mailbox. io_flush_span always asks, and
    // a version this rank never wrote is not taken as durable: both fail.
    // Unpacked: its log lines are the object's.
    cluster c;
    c.unpacked();
    fill_journal(c, 1);
    auto env = c.env;
    env.insert(small_journal.begin(), small_journal.end());
    set_env(env, true);
    std::vector<std::byte> buf(4096);
    example::fill_pattern(buf.data(), buf.size(), example::pattern_seed("nodeA", 0, 2));
    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    std::uint64_t v = 0;
    for (int i = 0; i < 3; ++i)
        REQUIRE(io_write_version(buf.size(), &v) == 0);
    REQUIRE(v == 4);
    for (std::uint64_t k = 2; k <= 4; ++k)
        REQUIRE(io_wait(k) == 0);
    // Through the journal: each logged as such once its object is
    // committed after the answer.
    auto through_journal = [&](std::uint64_t k) {
        const std::string log = c.log();
        const auto at = log.find(fmt::format("flushed itest/v{:08}/nodeA.r0000 (", k));
        return at != std::string::npos &&
               log.substr(at, log.find('\n', at) - at).ends_with("in the journal first)");
    };
    const bool journaled = wait_until(
        [&] { return through_journal(2) && through_journal(3) && through_journal(4); }, 10s);
    INFO("log:\n" << c.log());
    CHECK(journaled);
    kill_newest_daemon(c);
    for (std::uint64_t k = 2; k <= 4; ++k)
        CHECK(io_wait(k) == 0);
    int state = -1;
    CHECK(io_test(3, &state) == 0);
    CHECK(state == IO_STATE_DURABLE);
    CHECK(io_wait(5) == ECONNRESET);
    CHECK(std::string(io_last_error()).find("exited or was killed") != std::string::npos);
    CHECK(io_wait(1) == ECONNRESET);  // the first run's
    double start = 0, durable = 0;
    CHECK(io_flush_span(4, &start, &durable) == ECONNRESET);
    CHECK(io_finalize() == ECONNRESET);
    set_env(env, false);
}

TEST_CASE("a version that failed stops what the mailbox says is durable", "[api]")
{
    // Without the journal, on one flush thread, the daemon's first store
    // write (version 1's object) fails once: version 1 fails, 2 and 3 are
    // durable, each
    // written and waited for in turn. The daemon never says in the mailbox
    // that a version after the failed one is durable: once it is killed,
    // io_test on 2 and 3 must ask, and fails. Unpacked: a packing daemon
    // writes the job's FORMAT first.
    cluster c;
    c.unpacked();
    auto env = c.env;
    env["IOFWD_JOURNAL_MAX"] = "0";
    env["IOFWD_FLUSH_THREADS"] = "1";
    env["IOFWD_FAULT"] = "pwrite:EIO:0:once";
    set_env(env, true);
    std::vector<std::byte> buf(4096);
    example::fill_pattern(buf.data(), buf.size(), example::pattern_seed("nodeA", 0, 1));
    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    std::vector<int> waited;
    for (std::uint64_t k = 1; k <= 3; ++k) {
        std::uint64_t v = 0;
        REQUIRE(io_write_version(buf.size(), &v) == 0);
        REQUIRE(v == k);
        waited.push_back(io_wait(k));
    }
    INFO("log:\n" << c.log());
    REQUIRE(waited == std::vector<int>{EIO, 0, 0});
    kill_newest_daemon(c);
    for (std::uint64_t k = 2; k <= 3; ++k) {
        int state = -1;
        INFO("version " << k);
        CHECK(io_test(k, &state) == ECONNRESET);
        CHECK(state == -1);
    }
    CHECK(io_finalize() == ECONNRESET);
    set_env(env, false);
}

namespace {

// AnonHugePages of this process's mappings that overlap [begin, end), in kB.
long huge_kb(const std::byte* begin, const std::byte* end)
{
    const auto bytes = iofwd::huge_page_bytes(begin, static_cast<std::uint64_t>(end - begin));
    return bytes ? static_cast<long>(*bytes >> 10) : -1;
}

std::string first_line(const char* path)
{
    std::string text = read_file(path);
    return text.substr(0, text.find('\n'));
}

}  // namespace

TEST_CASE("a buffer's pages become 2 MiB pages after io_init, within it, or never",
          "[huge-pages]")
{
    const std::string thp = first_line("/sys/kernel/mm/transparent_hugepage/enabled");
    if (thp.find("[never]") != std::string::npos) {
        WARN("transparent huge pages are off on this machine: nothing to test");
        return;
    }
    // 8 MiB on 2 MiB boundaries, touched (4 KiB pages) before io_init, as a
    // program's data are; inaccessible pages on both sides, so that no
    // other mapping merges with it.
    constexpr std::size_t huge = 2u << 20, len = 8u << 20, total = len + 3 * huge;
    void* map = ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(map != MAP_FAILED);
    auto* buf = reinterpret_cast<std::byte*>(
        (reinterpret_cast<std::uintptr_t>(map) + 2 * huge - 1) & ~std::uintptr_t(huge - 1));
    REQUIRE(::mprotect(buf, len, PROT_READ | PROT_WRITE) == 0);
    constexpr int madv_collapse = 25;  // Linux 6.1
    if (::madvise(buf, 0, madv_collapse) != 0) {
        WARN("this kernel cannot collapse pages (MADV_COLLAPSE, Linux 6.1): nothing to test");
        ::munmap(map, total);
        return;
    }
    // khugepaged collapses madvised ranges too, on its own (a scan every
    // few seconds): what it did meanwhile is counted here.
    const auto khugepaged = [] {
        return std::atol(
            read_file("/sys/kernel/mm/transparent_hugepage/khugepaged/pages_collapsed").c_str());
    };
    for (const char* mode : {"init", "1", "0"}) {
        INFO("IOFWD_HUGEPAGES=" << mode);
        cluster c;
        for (const auto& [k, v] : c.env)
            ::setenv(k.c_str(), v.c_str(), 1);
        ::setenv("IOFWD_HUGEPAGES", mode, 1);
        // 4 KiB pages, whatever the system's default: dropped, then
        // written anew without huge pages allowed.
        ::madvise(buf, len, MADV_NOHUGEPAGE);
        ::madvise(buf, len, MADV_DONTNEED);
        std::memset(buf, 2, len);
        REQUIRE(huge_kb(buf, buf + len) == 0);
        const long by_khugepaged = khugepaged();
        REQUIRE(io_init(buf, len, 0, 1, nullptr, 1) == 0);
        const long want = std::string_view(mode) == "0" ? 0 : static_cast<long>(len >> 10);
        // Collapsed as asked; or not, when the kernel has no 2 MiB page to
        // give (asked afterwards, with a collapse of the test's own).
        const auto check_collapsed = [&](bool all) {
            if (!all && !spare_huge_page()) {
                WARN("the kernel has no free 2 MiB page (a collapse fails with ENOMEM): "
                     "IOFWD_HUGEPAGES=" << mode << " not checked");
                return;
            }
            CHECK(huge_kb(buf, buf + len) == want);
        };
        std::uint64_t v = 0;
        if (std::string_view(mode) == "init") {
            check_collapsed(huge_kb(buf, buf + len) == want);
        } else if (want > 0) {
            // A write at once, beside the thread's collapse; then the rest
            // (well under a second for 8 MiB), which a write that left the
            // thread waiting would stop.
            CHECK(io_write_version(len, &v) == 0);
            CHECK(io_wait(v) == 0);
            check_collapsed(wait_until([&] { return huge_kb(buf, buf + len) == want; }, 5s));
        } else {
            std::this_thread::sleep_for(500ms);
            CHECK(huge_kb(buf, buf + len) == 0);
        }
        if (khugepaged() != by_khugepaged)
            WARN("khugepaged collapsed pages meanwhile: this round cannot tell its work from "
                 "iofwd's");
        // The bytes are the program's, whatever their pages.
        CHECK(io_write_version(len, &v) == 0);
        CHECK(io_wait(v) == 0);
        for (std::uint64_t version = 1; version <= v; ++version) {
            const auto stored = read_file(
                fmt::format("{}/itest/v{:08d}/nodeA.r0000", c.store(), version));
            REQUIRE(stored.size() == len);
            CHECK(std::memcmp(stored.data(), buf, len) == 0);
        }
        CHECK(io_finalize() == 0);
        for (const auto& [k, v2] : c.env)
            ::unsetenv(k.c_str());
        ::unsetenv("IOFWD_HUGEPAGES");
    }
    ::munmap(map, total);
}

// What the daemon gathers of a job for its summary (iod/job_summary.hpp):
// per-rank totals over every version, a line each for the newest only.
#include "job_summary.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include "store/report.hpp"

using iofwd::iod::job_summary;

TEST_CASE("a summary keeps totals of every version and lines of the newest only",
          "[job-summary]")
{
    job_summary s;
    s.start("climate", "", "node-3", 2, 1);
    // "20261124T021621.123Z-4711": when it started, and this process.
    CHECK(s.key().size() == 20 + 1 + std::to_string(::getpid()).size());
    CHECK(s.key().substr(8, 1) == "T");
    CHECK(s.key().ends_with("Z-" + std::to_string(::getpid())));
    const std::uint64_t n = iofwd::store::report_detail_limit + 50;
    for (std::uint64_t v = 1; v <= n; ++v) {
        // Rank 0 waits 2 us and is durable after 10; rank 1 writes through
        // its mailbox (staged as it arrives) and is durable after 4.
        const std::uint64_t t = v * 1'000'000;
        s.durable(0, v, 100, {t, t + 2000, t + 3000, t + 10'000});
        if (v % 2 == 0)
            s.durable(1, v, 10, {t, t, t + 1000, t + 4000});
    }
    CHECK(s.versions() == n + n / 2);
    CHECK(s.bytes() == n * 100 + n / 2 * 10);
    const auto r = s.report(3);
    CHECK(r.job == "climate");
    CHECK(r.key == s.key());
    CHECK(r.ranks == 2);
    CHECK(r.lost_versions == 3);
    CHECK(r.pid == static_cast<std::uint32_t>(::getpid()));
    CHECK(r.end >= r.start);
    CHECK(r.detail.size() == iofwd::store::report_detail_limit);
    CHECK(r.detail_dropped == n + n / 2 - iofwd::store::report_detail_limit);
    CHECK(r.detail.back().version == n);
    REQUIRE(r.per_rank.size() == 2);
    CHECK(r.per_rank[0].versions == n);
    CHECK(r.per_rank[0].bytes == n * 100);
    CHECK(r.per_rank[0].blocked == iofwd::store::report_times{2 * n, 2, 2});
    CHECK(r.per_rank[0].durable == iofwd::store::report_times{10 * n, 10, 10});
    CHECK(r.per_rank[1].versions == n / 2);
    CHECK(r.per_rank[1].blocked == iofwd::store::report_times{0, 0, 0});
    CHECK(r.per_rank[1].durable == iofwd::store::report_times{4 * (n / 2), 4, 4});
    // The summary's text stays small: a line per kept version.
    CHECK(iofwd::store::format_report(r).size() < 40 * iofwd::store::report_detail_limit);

    const auto recent = s.recent(3);
    REQUIRE(recent.size() == 3);
    CHECK(recent[2].rank == 1);
    CHECK(recent[2].version == n);
    CHECK(recent[2].blocked == 0);
    CHECK(recent[2].latency == 4000);
    CHECK(recent[2].flush == 3000);
    CHECK(recent[1].rank == 0);
    CHECK(recent[1].blocked == 2000);

    // A new job forgets the last one's.
    s.start("next", "run-2", "node-3", 1, 1);
    CHECK(s.key() == "run-2");
    CHECK(s.versions() == 0);
    CHECK(s.report(0).detail.empty());
}

// A job's summary (store/report.hpp): its name in the layout, its JSON
// round trip, and what a summary that does not check out is refused for.
#include <catch2/catch.hpp>

#include "errors.hpp"
#include "store/layout.hpp"
#include "store/report.hpp"

using namespace iofwd;
using namespace iofwd::store;

namespace {

node_report sample()
{
    node_report r;
    r.job = "climate";
    r.run = "slurm-4711.0";
    r.key = "slurm-4711.0";
    r.node = "node-3";
    r.ranks = 2;
    r.nodes = 4;
    r.start = 1795492260.441;
    r.end = 1795492262.5;
    r.pid = 4242;
    r.cpu_user = 0.25;
    r.cpu_system = 0.5;
    r.peak_rss_bytes = 300ull << 20;
    r.store_ops = {40, 41, 42, 3, 4, 5, 60, 7, 8, 9, 1, 12, 13};
    r.puller_bytes = {3ull << 30, (2ull << 30) + 100};
    r.lost_versions = 1;
    r.per_rank = {{0, 2, 5ull << 30, {300, 200, 150}, {9000, 5000, 4500}},
                  {1, 1, 100, {0, 0, 0}, {700, 700, 700}}};
    r.detail_dropped = 7;
    r.detail = {{0, 8, 5ull << 29, 100, 4000}, {1, 8, 100, 0, 700}, {0, 9, 5ull << 29, 200, 5000}};
    return r;
}

// `text` with its first `from` replaced by `to`.
std::string edit(std::string text, const std::string& from, const std::string& to)
{
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("a summary lives under its job's reports, a directory per run", "[report]")
{
    CHECK(report_object("climate", "slurm-4711.0", "node-3") ==
          "climate/reports/slurm-4711.0/node-3.json");
    CHECK_FALSE(parse_version_dir(reports_dir));
}

TEST_CASE("a summary round-trips through its JSON", "[report]")
{
    const auto r = sample();
    const auto text = format_report(r);
    CHECK(text.rfind("{\"format\":\"iofwd-job-summary\",\"format_version\":1,\"job\":\"climate\"",
                     0) == 0);
    CHECK(text.find("\"detail\":[[0,8,2684354560,100,4000],[1,8,100,0,700],"
                    "[0,9,2684354560,200,5000]]") != std::string::npos);
    CHECK(text.find("\"store_ops\":{\"created\":40,\"writes\":41,\"commits\":42,\"reads\":3,"
                    "\"stats\":4,\"lists\":5,\"listed\":60,\"removes\":7,\"arrives\":8,"
                    "\"arrival_reads\":9,\"claims\":1,\"arrival_entries\":12,\"arrival_keys\":13},\"puller_bytes\":[3221225472,2147483748]}") !=
          std::string::npos);
    CHECK(text.back() == '\n');
    // A summary of a daemon from before the counts: read, with none.
    {
        auto older = sample();
        older.store_ops = {};
        older.puller_bytes = {};
        const auto without = edit(format_report(older),
                                  ",\"store_ops\":{\"created\":0,\"writes\":0,\"commits\":0,"
                                  "\"reads\":0,\"stats\":0,\"lists\":0,\"listed\":0,"
                                  "\"removes\":0,\"arrives\":0,\"arrival_reads\":0,"
                                  "\"claims\":0,\"arrival_entries\":0,\"arrival_keys\":0},\"puller_bytes\":[]",
                                  "");
        node_report back;
        std::string why;
        REQUIRE_FALSE(parse_report(without, back, why));
        CHECK(back == older);
    }
    // One from before the count of arrivals read: read, with 0.
    {
        node_report back;
        std::string why;
        REQUIRE_FALSE(parse_report(edit(text, ",\"arrival_entries\":12,\"arrival_keys\":13", ""),
                                   back, why));
        auto want = r;
        want.store_ops.arrival_entries = 0;
        want.store_ops.arrival_keys = 0;
        CHECK(back == want);
    }
    node_report back;
    std::string why;
    REQUIRE_FALSE(parse_report(text, back, why));
    CHECK(back == r);
}

TEST_CASE("a summary that does not check out is refused, saying why", "[report]")
{
    const auto text = format_report(sample());
    std::string sixty_five_ones;  // more pullers than a daemon may have
    for (int i = 0; i < 65; ++i)
        sixty_five_ones += "1,";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {text.substr(0, text.size() / 2), "not JSON"},
        {edit(text, "\"format_version\":1", "\"format_version\":2"),
         "format 'iofwd-job-summary' version 2, not 'iofwd-job-summary' version 1"},
        {edit(text, "\"ranks\":2", "\"ranks\":3"), "per_rank lists 2 ranks of 3"},
        {edit(text, "\"ranks\":2", "\"ranks\":-2"), "'ranks' of the summary is not a whole number"},
        {edit(text, "\"ranks\":2", "\"ranks\":65537"), "from 0 to 65536"},
        {edit(text, "\"job\":\"climate\",", ""), "the summary has no 'job'"},
        {edit(text, "{\"rank\":1,", "{\"rank\":0,"), "per_rank has rank 0 where rank 1 belongs"},
        {edit(text, "\"total\":300", "\"total\":30"),
         "blocked_us of rank 0: median 150 and max 200 do not fit within total 30"},
        {edit(text, "[1,8,100,0,700]", "[2,8,100,0,700]"), "names rank 2 of 2"},
        {edit(text, "[1,8,100,0,700]", "[1,8,100,0]"), "is not 5 whole numbers"},
        {edit(text, "\"detail_limit\":10000", "\"detail_limit\":2"),
         "'detail' of the summary is not a list of at most 2 entries"},
        {edit(text, "\"start\":", "\"start\":\"x\",\"was\":"),
         "'start' of the summary is not a number"},
        {edit(text, "\"arrives\":8", "\"arrives\":-8"), "'arrives' of store_ops"},
        {edit(text, "[3221225472,", "[-1,"), "an entry of 'puller_bytes' of daemon is not a whole number"},
        {edit(text, "\"puller_bytes\":[", "\"puller_bytes\":[" + sixty_five_ones),
         "'puller_bytes' of daemon is not a list of at most 64 entries"},
    };
    for (const auto& [t, words] : bad) {
        node_report out = sample();
        out.job = "untouched";
        std::string why;
        CHECK(parse_report(t, out, why) == errc::corrupt);
        INFO(t);
        CHECK(why.find(words) != std::string::npos);
        CHECK(out.job == "untouched");
    }
}

TEST_CASE("the median of an even count is the mean of the middle two", "[report]")
{
    CHECK(median({}) == 0);
    CHECK(median({7}) == 7);
    CHECK(median({9, 1, 5}) == 5);
    CHECK(median({10, 1, 4, 8}) == 6);
}

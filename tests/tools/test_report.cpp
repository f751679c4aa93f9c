// The job summaries the daemon writes into the store (store/report.hpp) and
// iofwd report over them, after real jobs of real ranks: versions and bytes
// per rank exactly, times consistent (until durable never shorter than
// blocked; a write through the mailbox never blocks), the newest run by
// default and another by --run, a shared daemon's summary of a job it
// forgets, gnuplot's PNG, and a job without summaries.
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "fixture.hpp"
#include "iofwd_run.hpp"

using namespace test;

namespace {

void run_job(cluster& c, unsigned ranks, const std::string& size, const std::string& versions,
             const std::map<std::string, std::string>& extra = {})
{
    std::vector<process> procs;
    for (unsigned r = 0; r < ranks; ++r)
        procs.push_back(c.rank(r, ranks, {"--size", size, "--versions", versions}, extra));
    for (auto& p : procs)
        require_exit(p, 0);
}

}  // namespace

TEST_CASE("report: versions, bytes and times per rank and node after a real job",
          "[tools][report]")
{
    cluster c;
    c.unpacked();
    const auto before = std::chrono::system_clock::now();
    // The staging resident before the daemon answers: its peak memory then
    // holds all of it, which the check below counts on (faulted in the
    // background, a job of 50 ms on a busy machine ended with 193 MiB).
    // Writes past the eager limit, so that the pullers read them (counted
    // below), not the ranks' mailboxes.
    run_job(c, 2, "100000", "3", {{"IOFWD_STAGING_PREFAULT", "1"}, {"IOFWD_EAGER_LIMIT", "64K"}});
    const auto after = std::chrono::system_clock::now();

    auto j = run_iofwd(c, {"report", "itest", "--json"});
    INFO(j.out + j.err);
    CHECK(j.code == 0);
    CHECK(j.err.empty());
    CHECK(py(c, j.out, "d['store'], d['job'], len(d['runs']), d['run'] == d['runs'][0], "
                       "repr(d['run_name']), d['plot']") ==
          "dir:" + c.store() + " itest 1 True '' None\n");
    CHECK(py(c, j.out, "[(n['node'], n['object'] == 'itest/reports/' + d['run'] + '/nodeA.json', "
                       "n['ranks'], n['versions'], n['bytes'], n['lost_versions'], "
                       "n['detail_kept'], n['detail_dropped']) for n in d['nodes']]") ==
          "[('nodeA', True, 2, 6, 600000, 0, 6, 0)]\n");
    CHECK(py(c, j.out, "[(k['rank'], k['versions'], k['bytes']) for k in "
                       "d['nodes'][0]['per_rank']]") ==
          "[(0, 3, 300000), (1, 3, 300000)]\n");
    // Until durable is never shorter than blocked, per rank and node, for
    // the median, the maximum and the total; every maximum at least its median.
    CHECK(py(c, j.out,
             "all(x['durable_us'][k] >= x['blocked_us'][k] and "
             "x['durable_us']['max'] >= x['durable_us']['median'] > 0 and "
             "x['blocked_us']['max'] >= x['blocked_us']['median'] "
             "for x in d['nodes'] + d['nodes'][0]['per_rank'] for k in ('median', 'max', "
             "'total'))") == "True\n");
    const auto epoch = [](auto t) {
        return std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count());
    };
    CHECK(py(c, j.out, "(lambda n: (" + epoch(before) + " <= n['start'] <= n['end'] <= " +
                           epoch(after) + " + 1, n['seconds'] >= 0, n['cpu_user_seconds'] >= 0, "
                           "n['cpu_system_seconds'] >= 0, n['peak_rss_bytes'] >= 256 << 20, "
                           "n['start_utc'][-1]))(d['nodes'][0])") ==
          "(True, True, True, True, True, 'Z')\n");

    // What the daemon asked of the store: per version two ranks' objects, the
    // manifest and COMPLETE (each created and committed), one arrival and,
    // the only node, the look at the arrivals (its own). Nothing listed or read.
    CHECK(py(c, j.out, "[d['nodes'][0]['store_ops'][k] for k in ('created', 'writes', "
                       "'commits', 'reads', 'stats', 'lists', 'listed', 'removes', 'arrives', "
                       "'arrival_reads', 'claims', 'arrival_entries')]") ==
          "[12, 12, 12, 0, 0, 0, 0, 0, 3, 3, 0, 3]\n");
    // What each of the two pullers read: every write is one pushed chunk,
    // which goes to the rank's own puller (rank mod pullers).
    CHECK(py(c, j.out, "d['nodes'][0]['puller_bytes']") == "[300000, 300000]\n");

    // The stored summary: a line per rank version, times as the daemon saw them.
    const std::string key = py(c, j.out, "d['run']").substr(0, py(c, j.out, "d['run']").size() - 1);
    const std::string stored = read_file(c.store() + "/itest/reports/" + key + "/nodeA.json");
    CHECK(py(c, stored, "d['format'], d['format_version'], d['job'], d['key'] == '" + key +
                            "', d['node'], d['ranks'], d['nodes'], d['detail_columns'], "
                            "sorted(tuple(r[:3]) for r in d['detail']), "
                            "all(r[4] >= r[3] for r in d['detail'])") ==
          "iofwd-job-summary 1 itest True nodeA 2 1 ['rank', 'version', 'bytes', 'blocked_us', "
          "'durable_us'] [(0, 1, 100000), (0, 2, 100000), (0, 3, 100000), (1, 1, 100000), "
          "(1, 2, 100000), (1, 3, 100000)] True\n");

    // In words: a line per rank and a total per node, then the daemon's costs.
    auto t = run_iofwd(c, {"report", "itest"});
    INFO(t.out);
    CHECK(t.code == 0);
    CHECK(t.err.empty());
    const std::string time = R"( +(\d+ us|[0-9.]+ ms|[0-9.]+ s))";
    CHECK(std::regex_match(
        t.out,
        std::regex("job itest run " + key + " in directory " + c.store() +
                   ": 1 node, 2 ranks, 6 rank versions, 585.9 KiB\n"
                   "NODE              RANK VERSIONS       BYTES BLOCKED MEDIAN        MAX "
                   "DURABLE MEDIAN        MAX\n"
                   "nodeA                0        3   293.0 KiB" + time + time + time + time + "\n"
                   "nodeA                1        3   293.0 KiB" + time + time + time + time + "\n"
                   "nodeA              all        6   585.9 KiB" + time + time + time + time + "\n"
                   "NODE             START                    SECONDS   CPU USER    CPU SYS  "
                   "PEAK MEMORY STORE OPS  LOST\n"
                   R"(nodeA            \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +[0-9.]+ +[0-9.]+ +[0-9.]+ )"
                   R"( +[0-9.]+ MiB +30 +0\n)")));

    // The plot: gnuplot draws a PNG (the command fails when gnuplot does).
    const std::string png = c.tmp / "versions.png";
    auto p = run_iofwd(c, {"report", "itest", "--plot", png});
    CHECK(p.code == 0);
    CHECK(p.err.empty());
    CHECK(p.out.size() > t.out.size());
    CHECK(p.out.substr(p.out.size() - ("plot: " + png + "\n").size()) == "plot: " + png + "\n");
    CHECK(read_file(png).substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
    const std::string nowhere = c.tmp / "no/such/dir/versions.png";
    auto bad = run_iofwd(c, {"report", "itest", "--plot", nowhere});
    CHECK(bad.code == 1);
    CHECK(bad.out.empty());
    CHECK(bad.err.find("iofwd report: gnuplot exited with status 1 drawing " + nowhere + ": ") ==
          0);
    CHECK(bad.err.find("cannot open file") != std::string::npos);

    // Nothing takes the summaries for a version: ls lists the versions
    // alone, gc leaves them, verify finds all intact.
    auto ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls.out, "[(v['version'], v['state']) for v in d['versions']], d['leftovers']") ==
          "[(1, 'complete'), (2, 'complete'), (3, 'complete')] []\n");
    auto gc = run_iofwd(c, {"gc", "itest"});
    CHECK(gc.code == 0);
    CHECK(gc.out.find("gc: 0 versions and 0 leftovers removed\n") != std::string::npos);
    CHECK(exists(c.store() + "/itest/reports/" + key + "/nodeA.json"));
    CHECK(run_iofwd(c, {"verify", "itest"}).code == 0);
}

TEST_CASE("report: the newest run by default, another by --run; mailbox writes never block",
          "[tools][report]")
{
    cluster c;
    // Small writes go through the rank's mailbox: the rank never waits.
    run_job(c, 1, "1000", "2");
    run_job(c, 1, "1000", "1", {{"IOFWD_RUN", "r7"}});
    auto j = run_iofwd(c, {"report", "itest", "--json"});
    CHECK(j.code == 0);
    CHECK(py(c, j.out, "d['run'], d['run_name'], len(d['runs']), d['runs'][0], "
                       "[(n['versions'], n['bytes']) for n in d['nodes']]") ==
          "r7 r7 2 r7 [(1, 1000)]\n");
    const auto first = py(c, j.out, "d['runs'][1]");
    const std::string key = first.substr(0, first.size() - 1);
    CHECK(std::regex_match(key, std::regex(R"(\d{8}T\d{6}\.\d{3}Z-\d+)")));
    auto older = run_iofwd(c, {"report", "itest", "--run", key, "--json"});
    CHECK(older.code == 0);
    CHECK(py(c, older.out, "d['run'], repr(d['run_name']), [(k['rank'], k['versions'], "
                           "k['bytes'], k['blocked_us']['total'], k['blocked_us']['max'], "
                           "k['durable_us']['median'] > 0) for k in d['nodes'][0]['per_rank']]") ==
          key + " '' [(0, 2, 2000, 0, 0, True)]\n");
    auto text = run_iofwd(c, {"report", "itest"});
    CHECK(text.out.find("job itest run r7 in directory " + c.store() +
                        ": 1 node, 1 rank, 1 rank version, 1000 B\n"
                        "runs, newest first: r7, " + key + " (choose one with --run)\n") == 0);

    auto none = run_iofwd(c, {"report", "itest", "--run", "r8"});
    CHECK(none.code == 2);
    CHECK(none.out.empty());
    CHECK(none.err == "iofwd report: job itest has no run 'r8' (its runs, newest first: r7, " +
                          key + ")\n");

    // A summary that does not read back is named, the others still shown.
    std::filesystem::create_directories(c.store() + "/itest/reports/bad");
    std::ofstream(c.store() + "/itest/reports/bad/nodeA.json") << "{\"format\": 1";
    auto damaged = run_iofwd(c, {"report", "itest"});
    CHECK(damaged.code == 1);
    CHECK(damaged.err == "iofwd report: itest/reports/bad/nodeA.json is not a job summary: not "
                         "JSON\n");
    CHECK(damaged.out.find("job itest run r7 in directory ") == 0);

    // Without summaries, it says so in words.
    std::filesystem::remove_all(c.store() + "/itest/reports");
    auto empty = run_iofwd(c, {"report", "itest"});
    CHECK(empty.code == 1);
    CHECK(empty.out.empty());
    CHECK(empty.err == "iofwd report: job itest has no summaries in directory " + c.store() +
                           ": a daemon writes one, itest/reports/<run>/<node>.json, when the job "
                           "ends on its node\n");
}

TEST_CASE("report: a shared daemon writes the summary of a job it forgets", "[tools][report]")
{
    cluster c;
    auto d = c.daemon();
    run_job(c, 1, "5000", "1", {});  // a job of one rank: over, summarised at its end
    // Job half says it has two ranks on the node; only rank 0 ever comes.
    {
        auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", "2"}, {{"IOFWD_JOB", "half"}});
        require_exit(r0, 0);
    }
    CHECK_FALSE(exists(c.store() + "/half/reports"));
    // Another job's rank: the daemon forgets job half, writing its summary.
    {
        auto other = c.rank(0, 1, {"--size", "5000", "--versions", "1"}, {{"IOFWD_JOB", "next"}});
        require_exit(other, 0);
    }
    auto j = run_iofwd(c, {"report", "half", "--json"});
    INFO(c.log());
    CHECK(j.code == 0);
    // Rank 1 never wrote versions 1 and 2: lost, and counted in the summary.
    CHECK(py(c, j.out, "[(n['node'], n['ranks'], n['lost_versions'], [(k['rank'], k['versions'], "
                       "k['bytes']) for k in n['per_rank']]) for n in d['nodes']]") ==
          "[('nodeA', 2, 2, [(0, 2, 10000), (1, 0, 0)])]\n");
    CHECK(run_iofwd(c, {"report", "itest", "--json"}).code == 0);
    CHECK(run_iofwd(c, {"report", "next", "--json"}).code == 0);
    // Each written once: at its job's end (itest, next) or when forgotten (half).
    for (const char* job : {"itest", "half", "next"})
        CHECK(count(c.log(), std::string("job ") + job + ": summary " + job + "/reports/") == 1);
    d.signal(SIGTERM);
    require_exit(d, 1);  // the versions lost exit the daemon with status 1
    CHECK(count(c.log(), "job next: summary next/reports/") == 1);
}

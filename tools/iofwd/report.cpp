// iofwd report JOB [--run R] [--json] [--plot FILE]: the summaries the
// daemons wrote when the job ended on their nodes (store/report.hpp), one
// run's (the newest by default) as a table per rank and node, and with
// --plot the time each version kept its rank blocked and took to be durable,
// drawn by gnuplot as a PNG.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "store/catalog.hpp"
#include "store/layout.hpp"
#include "store/report.hpp"

extern char** environ;

namespace iofwd::tool {
namespace {

struct report_args {
    store_options store;
    std::string job, run, plot;
};

struct summary {
    std::string object;
    store::node_report r;
};

// A node's totals over its ranks; medians over its versions with a line.
struct node_totals {
    std::uint64_t versions = 0, bytes = 0;
    store::report_times blocked, durable;
};

node_totals totals_of(const store::node_report& r)
{
    node_totals t;
    std::vector<std::uint64_t> blocked, durable;
    for (const auto& k : r.per_rank) {
        t.versions += k.versions;
        t.bytes += k.bytes;
        t.blocked.total += k.blocked.total;
        t.blocked.max = std::max(t.blocked.max, k.blocked.max);
        t.durable.total += k.durable.total;
        t.durable.max = std::max(t.durable.max, k.durable.max);
    }
    for (const auto& v : r.detail) {
        blocked.push_back(v.blocked_us);
        durable.push_back(v.durable_us);
    }
    t.blocked.median = store::median(std::move(blocked));
    t.durable.median = store::median(std::move(durable));
    return t;
}

// The names under `dir` of the store (errc::not_found: none).
std::vector<std::string> names_under(store::backend& st, const std::string& dir)
{
    std::vector<std::string> names;
    if (auto ec = st.list(dir + "/", names); ec && ec != errc::not_found)
        throw failure(damaged, fmt::format("cannot list {}: {}", dir, store::failure(st, dir, ec)));
    return names;
}

// One summary, read and checked; false (named on stderr, and `status` 1)
// when it does not read back.
bool read_summary(store::backend& st, const std::string& object, summary& out, int& status)
{
    std::string text, why;
    if (auto ec = store::read_all(st, object, text)) {
        fmt::print(stderr, "iofwd report: cannot read {}: {}\n", object,
                   store::failure(st, object, ec));
        status = damaged;
        return false;
    }
    if (store::parse_report(text, out.r, why)) {
        fmt::print(stderr, "iofwd report: {} is not a job summary: {}\n", object, why);
        status = damaged;
        return false;
    }
    out.object = object;
    return true;
}

// Every node's summary of run `key`.
std::vector<summary> read_run(store::backend& st, const std::string& job, const std::string& key,
                              int& status)
{
    const std::string dir = fmt::format("{}/{}/{}", job, store::reports_dir, key);
    std::vector<summary> out;
    for (const auto& n : names_under(st, dir))
        if (summary s;
            n.ends_with(store::report_suffix) && read_summary(st, dir + "/" + n, s, status))
            out.push_back(std::move(s));
    return out;
}

// The job's runs with a summary, newest first: each run's start is read
// from one of its summaries (a run's nodes start within moments).
std::vector<std::string> runs_of(store::backend& st, const std::string& job, int& status)
{
    const std::string dir = fmt::format("{}/{}", job, store::reports_dir);
    std::vector<std::pair<double, std::string>> runs;
    for (const auto& key : names_under(st, dir)) {
        for (const auto& n : names_under(st, dir + "/" + key))
            if (summary s; n.ends_with(store::report_suffix) &&
                           read_summary(st, dir + "/" + key + "/" + n, s, status)) {
                runs.emplace_back(s.r.start, key);
                break;
            }
    }
    std::sort(runs.rbegin(), runs.rend());
    std::vector<std::string> keys;
    for (auto& r : runs)
        keys.push_back(std::move(r.second));
    return keys;
}

std::string us(std::uint64_t micro)
{
    return human_seconds(static_cast<double>(micro) / 1e6);
}

// A string for a gnuplot script, in single quotes.
std::string gnuplot_quote(const std::string& s)
{
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
}

// Draws blocked and durable time per version of `chosen` into `file` with
// gnuplot; throws when there is nothing to draw or gnuplot fails.
void plot(const std::vector<const summary*>& chosen, const std::string& job,
          const std::string& key, const std::string& file)
{
    std::size_t points = 0;
    std::uint64_t first = UINT64_MAX, last = 0;
    for (const auto* s : chosen)
        for (const auto& v : s->r.detail) {
            ++points;
            first = std::min(first, v.version);
            last = std::max(last, v.version);
        }
    if (points == 0)
        throw failure(damaged, fmt::format("nothing to plot: run {} of job {} has no version "
                                           "with a line of its own",
                                           key, job));
    std::string tmp = (std::getenv("TMPDIR") && *std::getenv("TMPDIR") ? std::getenv("TMPDIR")
                                                                        : "/tmp");
    tmp += "/iofwd-plot-XXXXXX";
    if (!::mkdtemp(tmp.data()))
        throw failure(damaged, fmt::format("cannot make a temporary directory for gnuplot: {}",
                                           std::strerror(errno)));
    const std::string data = tmp + "/versions.dat", script = tmp + "/plot.gp",
                      log = tmp + "/gnuplot.log";
    struct cleanup {
        std::vector<std::string> files;
        std::string dir;
        ~cleanup()
        {
            for (const auto& f : files)
                ::unlink(f.c_str());
            ::rmdir(dir.c_str());
        }
    } clean{{data, script, log}, tmp};
    {
        std::ofstream d(data);
        d << "# version blocked_ms durable_ms (node rank)\n";
        for (const auto* s : chosen)
            for (const auto& v : s->r.detail)
                d << fmt::format("{} {:.3f} {:.3f} # {} {}\n", v.version,
                                 static_cast<double>(v.blocked_us) / 1e3,
                                 static_cast<double>(v.durable_us) / 1e3, s->r.node, v.rank);
        std::ofstream g(script);
        // The style of bench/plot.gp.
        g << "set terminal pngcairo size 1000,620 font ',11'\n"
          << "set output " << gnuplot_quote(file) << "\n"
          << "set xlabel 'version'\n"
          << "set xtics " << std::max<std::uint64_t>(1, (last - first + 9) / 10) << "\n"
          << "set offsets graph 0.02, graph 0.02, graph 0.05, 0\n"
          << "set yrange [0:*]\n"
          << "set ylabel 'milliseconds'\n"
          << "set grid\n"
          << "set key left top\n"
          << "set title "
          << gnuplot_quote(fmt::format("iofwd: job {} run {}, per version", job, key))
          << " noenhanced\n"
          << "plot " << gnuplot_quote(data)
          << " using 1:3 with points pt 7 ps 0.8 title 'until durable', \\\n"
          << "     " << gnuplot_quote(data)
          << " using 1:2 with points pt 5 ps 0.8 title 'blocked in io\\_write'\n";
        if (!d || !g)
            throw failure(damaged, fmt::format("cannot write gnuplot's input in {}", tmp));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(script.c_str()), nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0)
        throw failure(damaged, fmt::format("cannot run gnuplot: {} (Debian: apt-get install "
                                           "gnuplot-nox)",
                                           std::strerror(rc)));
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        std::ifstream in(log);
        std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        // Its words, without the blank lines around them.
        const auto first = said.find_first_not_of('\n');
        said = first == std::string::npos
                   ? std::string()
                   : said.substr(first, said.find_last_not_of('\n') - first + 1);
        throw failure(damaged,
                      fmt::format("gnuplot {} drawing {}: {}",
                                  WIFEXITED(wstatus)
                                      ? fmt::format("exited with status {}", WEXITSTATUS(wstatus))
                                      : fmt::format("was killed by signal {}", WTERMSIG(wstatus)),
                                  file, said.empty() ? "it said nothing" : said));
    }
}

int run(const report_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    int status = ok;
    const auto runs = runs_of(*st, a.job, status);
    if (runs.empty())
        throw failure(damaged,
                      fmt::format("job {} has no summaries in {}: a daemon writes one, "
                                  "{}/{}/<run>/<node>.json, when the job ends on its node",
                                  a.job, st->describe(), a.job, store::reports_dir));
    std::string key = runs.front();
    if (!a.run.empty()) {
        if (std::find(runs.begin(), runs.end(), a.run) == runs.end())
            throw failure(bad_argument, fmt::format("job {} has no run '{}' (its runs, newest "
                                                    "first: {})",
                                                    a.job, a.run, fmt::join(runs, ", ")));
        key = a.run;
    }
    const auto all = read_run(*st, a.job, key, status);
    std::vector<const summary*> chosen;
    for (const auto& s : all)
        chosen.push_back(&s);
    std::sort(chosen.begin(), chosen.end(),
              [](const summary* x, const summary* y) { return x->r.node < y->r.node; });
    if (!a.plot.empty())
        plot(chosen, a.job, key, a.plot);

    if (a.store.json) {
        using ordered = nlohmann::ordered_json;
        ordered nodes = ordered::array();
        for (const auto* s : chosen) {
            const auto& r = s->r;
            const auto t = totals_of(r);
            ordered ranks = ordered::array();
            for (const auto& k : r.per_rank)
                ranks.push_back(store::rank_json(k));
            nodes.push_back({{"node", r.node},
                             {"object", s->object},
                             {"pid", r.pid},
                             {"start", r.start},
                             {"end", r.end},
                             {"start_utc", utc_time(static_cast<std::int64_t>(r.start))},
                             {"end_utc", utc_time(static_cast<std::int64_t>(r.end))},
                             {"seconds", r.end - r.start},
                             {"cpu_user_seconds", r.cpu_user},
                             {"cpu_system_seconds", r.cpu_system},
                             {"peak_rss_bytes", r.peak_rss_bytes},
                             {"store_ops", store::ops_json(r.store_ops)},
                             {"puller_bytes", r.puller_bytes},
                             {"lost_versions", r.lost_versions},
                             {"ranks", r.ranks},
                             {"versions", t.versions},
                             {"bytes", t.bytes},
                             {"blocked_us", store::times_json(t.blocked)},
                             {"durable_us", store::times_json(t.durable)},
                             {"detail_kept", r.detail.size()},
                             {"detail_dropped", r.detail_dropped},
                             {"per_rank", std::move(ranks)}});
        }
        print_json_ordered({{"store", st->location()},
                            {"job", a.job},
                            {"run", key},
                            {"run_name", chosen.front()->r.run},
                            {"runs", runs},
                            {"plot", a.plot.empty() ? ordered(nullptr) : ordered(a.plot)},
                            {"nodes", std::move(nodes)}});
        return status;
    }

    std::uint64_t ranks = 0, versions = 0, bytes = 0;
    for (const auto* s : chosen) {
        const auto t = totals_of(s->r);
        ranks += s->r.ranks;
        versions += t.versions;
        bytes += t.bytes;
    }
    fmt::print("job {} run {} in {}: {} node{}, {} rank{}, {} rank version{}, {}\n", a.job,
               key, st->describe(), chosen.size(), chosen.size() == 1 ? "" : "s", ranks,
               ranks == 1 ? "" : "s", versions, versions == 1 ? "" : "s", human_bytes(bytes));
    if (runs.size() > 1)
        fmt::print("runs, newest first: {} (choose one with --run)\n", fmt::join(runs, ", "));
    const auto row = [](const std::string& node, const std::string& rank, std::uint64_t v,
                        std::uint64_t b, const store::report_times& blocked,
                        const store::report_times& durable) {
        fmt::print("{:<16} {:>5} {:>8} {:>11} {:>14} {:>10} {:>14} {:>10}\n", node, rank, v,
                   human_bytes(b), us(blocked.median), us(blocked.max), us(durable.median),
                   us(durable.max));
    };
    fmt::print("{:<16} {:>5} {:>8} {:>11} {:>14} {:>10} {:>14} {:>10}\n", "NODE", "RANK",
               "VERSIONS", "BYTES", "BLOCKED MEDIAN", "MAX", "DURABLE MEDIAN", "MAX");
    for (const auto* s : chosen) {
        for (const auto& k : s->r.per_rank)
            row(s->r.node, std::to_string(k.rank), k.versions, k.bytes, k.blocked, k.durable);
        const auto t = totals_of(s->r);
        row(s->r.node, "all", t.versions, t.bytes, t.blocked, t.durable);
    }
    fmt::print("{:<16} {:<20}  {:>10} {:>10} {:>10} {:>12} {:>9} {:>5}\n", "NODE", "START",
               "SECONDS", "CPU USER", "CPU SYS", "PEAK MEMORY", "STORE OPS", "LOST");
    for (const auto* s : chosen) {
        const auto& r = s->r;
        fmt::print("{:<16} {:<20}  {:>10.2f} {:>10.2f} {:>10.2f} {:>12} {:>9} {:>5}\n", r.node,
                   utc_time(static_cast<std::int64_t>(r.start)), r.end - r.start, r.cpu_user,
                   r.cpu_system, human_bytes(r.peak_rss_bytes), r.store_ops.metadata(),
                   r.lost_versions);
        if (r.detail_dropped)
            fmt::print("  (node {}: medians over its newest {} rank versions; {} older ones "
                       "count in the totals and maxima only)\n",
                       r.node, r.detail.size(), r.detail_dropped);
    }
    if (!a.plot.empty())
        fmt::print("plot: {}\n", a.plot);
    return status;
}

}  // namespace

void add_report(CLI::App& app, int& status)
{
    auto args = std::make_shared<report_args>();
    auto* cmd = add_job_command(app, "report",
                                "the job's summaries, which the daemons write when the job ends "
                                "on their nodes: per rank and node the versions, bytes, time "
                                "blocked in io_write and until durable (median, max), and each "
                                "daemon's CPU time and peak memory",
                                args->store, args->job);
    cmd->add_option("--run", args->run,
                    "the run to show (its name, or the key iofwd report lists); default: the "
                    "newest")
        ->type_name("RUN");
    cmd->add_option("--plot", args->plot,
                    "also draw blocked and durable time per version into FILE, a PNG (gnuplot)")
        ->type_name("FILE");
    cmd->callback([args, &status] { status = run(*args); });
}

}  // namespace iofwd::tool

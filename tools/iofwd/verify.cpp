// iofwd verify JOB [VERSION]: every object's size and CRC-32C against its
// manifest and the COMPLETE record, read by a few threads, with a progress
// bar on a terminal. Exit status 0 only when everything checked is intact.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "format.hpp"
#include "store/verify.hpp"

namespace iofwd::tool {
namespace {

struct verify_args {
    store_options store;
    std::string job, version;
    unsigned threads = 4;
};

const char* problem_name(store::problem p)
{
    switch (p) {
    case store::problem::record: return "record";
    case store::problem::missing: return "missing";
    case store::problem::unreadable: return "unreadable";
    case store::problem::size: return "size";
    case store::problem::checksum: return "checksum";
    case store::problem::content: return "content";
    }
    return "?";
}

nlohmann::json damage_json(const store::damage& d)
{
    return {{"object", d.object},
            {"problem", problem_name(d.kind)},
            {"expected", d.expected},
            {"found", d.found}};
}

// A bar redrawn on stderr at most ten times a second, when it is a terminal.
class progress_bar {
public:
    explicit progress_bar(std::string label) : label_(std::move(label)), on_(::isatty(2) == 1) {}
    ~progress_bar() { wipe(); }
    // Before the results are printed.
    void wipe()
    {
        if (on_ && drawn_)
            std::fputs("\r\033[K", stderr);
        drawn_ = false;
    }
    void update(std::uint64_t done, std::uint64_t total)
    {
        if (!on_)
            return;
        const auto now = std::chrono::steady_clock::now();
        if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100))
            return;
        last_ = now;
        drawn_ = true;
        const double f = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
        const int width = 30, filled = static_cast<int>(f * width);
        fmt::print(stderr, "\r{} [{}{}] {:3.0f}% {} of {}", label_, std::string(filled, '#'),
                   std::string(width - filled, '.'), f * 100, human_bytes(done),
                   human_bytes(total));
        std::fflush(stderr);
    }

private:
    std::string label_;
    bool on_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point last_{};
};

int run(const verify_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    std::vector<std::uint64_t> versions;
    if (!a.version.empty())
        versions.push_back(parse_version(*st, a.job, a.version));
    if (a.threads == 0 || a.threads > 64)
        throw failure(bad_argument, fmt::format("--threads {} is not from 1 to 64", a.threads));

    progress_bar bar("verify " + a.job);
    store::verify_options opts;
    opts.threads = a.threads;
    opts.progress = [&bar](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
    store::verify_report report;
    std::string why;
    const auto ec = store::verify_job(*st, a.job, versions, opts, report, why);
    bar.wipe();
    if (ec)
        throw failure(damaged, why);

    // Records of buckets that do not read: the versions only they said are
    // complete are in no list, so they are named here.
    std::vector<std::string> damaged_buckets;
    if (versions.empty())
        if (auto bec = store::damaged_bucket_records(*st, a.job, damaged_buckets))
            throw failure(damaged, fmt::format("cannot read the bucket records of job {}: {}",
                                               a.job, store::failure(*st, a.job, bec)));
    report.damaged += damaged_buckets.size();
    std::size_t complete = 0, intact = 0, incomplete = 0;
    for (const auto& v : report.versions) {
        complete += v.state != store::version_state::incomplete;
        intact += v.intact();
        incomplete += v.state == store::version_state::incomplete;
    }
    // A version asked for by number must be there whole.
    const bool all_intact = report.damaged == 0 && (a.version.empty() || incomplete == 0);
    if (a.store.json) {
        nlohmann::json out = {{"store", st->location()},
                              {"job", a.job},
                              {"intact", all_intact},
                              {"objects", report.objects},
                              {"bytes", report.bytes},
                              {"damaged", report.damaged},
                              {"damaged_buckets", damaged_buckets},
                              {"versions", nlohmann::json::array()}};
        for (const auto& v : report.versions) {
            // A version whose objects fail is damaged, whatever its records say.
            const auto state = v.state == store::version_state::complete && !v.intact()
                                   ? store::version_state::damaged
                                   : v.state;
            nlohmann::json jv = {{"version", v.version},
                                 {"state", store::state_name(state)},
                                 {"intact", v.intact()},
                                 {"why", v.why},
                                 {"objects", v.objects.size()},
                                 {"damage", nlohmann::json::array()}};
            if (v.state == store::version_state::damaged)
                jv["damage"].push_back(damage_json(v.what));
            for (const auto& o : v.objects)
                if (!o.intact)
                    jv["damage"].push_back(damage_json(o.what));
            out["versions"].push_back(std::move(jv));
        }
        print_json(out);
        return all_intact ? ok : damaged;
    }
    for (const auto& v : report.versions) {
        if (v.state == store::version_state::incomplete) {
            fmt::print("version {}: incomplete ({}), not checked\n", v.version, v.why);
            continue;
        }
        if (v.state == store::version_state::damaged) {
            fmt::print("version {}: DAMAGED {}: expected {}, found {}\n", v.version, v.what.object,
                       v.what.expected, v.what.found);
            continue;
        }
        std::uint64_t bytes = 0;
        for (const auto& o : v.objects)
            bytes += o.size;
        if (v.intact()) {
            fmt::print("version {}: intact ({} object{}, {})\n", v.version, v.objects.size(),
                       v.objects.size() == 1 ? "" : "s", human_bytes(bytes));
            continue;
        }
        for (const auto& o : v.objects)
            if (!o.intact)
                fmt::print("version {}: DAMAGED {}: expected {}, found {}\n", v.version,
                           o.what.object, o.what.expected, o.what.found);
    }
    for (const auto& d : damaged_buckets)
        fmt::print("bucket record DAMAGED: {}\n", d);
    fmt::print("job {}: {} of {} complete version{} intact, {} damaged object{} or record{}; {} "
               "object{}, {} checked\n",
               a.job, intact, complete, complete == 1 ? "" : "s", report.damaged,
               report.damaged == 1 ? "" : "s", report.damaged == 1 ? "" : "s", report.objects,
               report.objects == 1 ? "" : "s", human_bytes(report.bytes));
    return all_intact ? ok : damaged;
}

}  // namespace

void add_verify(CLI::App& app, int& status)
{
    auto args = std::make_shared<verify_args>();
    auto* cmd = add_job_command(
        app, "verify", "check every object's size and CRC-32C against its manifest and the "
                       "COMPLETE record (every version, or VERSION); exit status 0 only if all "
                       "is intact",
        args->store, args->job);
    cmd->add_option("VERSION", args->version, "only this version");
    cmd->add_option("--threads", args->threads, "objects read at once (default 4)")
        ->type_name("N");
    cmd->callback([args, &status] { status = run(*args); });
}

}  // namespace iofwd::tool

// iofwd ls [JOB]: the jobs of a store, or a job's versions with their state,
// time, nodes, ranks and bytes, and what crashes left behind.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "store/catalog.hpp"
#include "store/inventory.hpp"
#include "store/layout.hpp"

namespace iofwd::tool {
namespace {

struct ls_args {
    store_options store;
    std::string job;
};

nlohmann::json version_json(const store::version_entry& v)
{
    return {{"version", v.version},
            {"state", store::state_name(v.state)},
            {"time", v.time},
            {"time_utc", utc_time(v.time)},
            {"nodes", v.nodes},
            {"ranks", v.ranks},
            {"bytes", v.bytes},
            {"dead", v.dead},
            {"journaled_by", v.journaled_by},
            {"arriving", v.arriving},
            {"waiting", !v.waiting.empty()},
            {"waits_for", v.waits_for},
            {"why", v.why}};
}

int list_store(store::backend& st, const ls_args& a)
{
    std::vector<std::string> jobs;
    if (auto ec = store::list_jobs(st, jobs))
        throw failure(damaged, fmt::format("cannot list {}: {}", st.describe(), ec.message()));
    nlohmann::json out = {{"store", st.location()}, {"jobs", nlohmann::json::array()}};
    if (!a.store.json)
        fmt::print("{}: {} job{}\n", st.describe(), jobs.size(), jobs.size() == 1 ? "" : "s");
    if (!a.store.json && !jobs.empty())
        fmt::print("{:<24} {:>8} {:>8} {:>8}  {}\n", "JOB", "VERSIONS", "COMPLETE", "LATEST",
                   "LATEST AT");
    int status = ok;
    for (const auto& job : jobs) {
        std::vector<std::uint64_t> all, complete;
        auto ec = store::job_versions(st, job, all);
        if (!ec)
            ec = store::complete_versions(st, job, complete);
        if (ec == errc::not_found || ec == std::errc::not_a_directory)
            continue;  // not a job's directory
        // A job whose FORMAT this iofwd cannot read is named, and the
        // others listed (the listing read it).
        if (std::string why; ec && store::check_format(st, job, why)) {
            status = damaged;
            out["jobs"].push_back({{"job", job}, {"refused", why}});
            if (!a.store.json)
                fmt::print("{:<24} not read: {}\n", job, why);
            continue;
        }
        if (ec)
            throw failure(damaged, fmt::format("cannot list job {}: {}", job,
                                               store::failure(st, job, ec)));
        // When the newest complete version was written, as `iofwd ls JOB`
        // says it (a packed one has no COMPLETE record of its own).
        std::int64_t when = 0;
        if (store::version_entry newest;
            !complete.empty() && !store::inspect_version(st, job, complete.back(), newest))
            when = newest.time;
        out["jobs"].push_back({{"job", job},
                               {"versions", all.size()},
                               {"complete", complete.size()},
                               {"newest_complete", complete.empty() ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(complete.back())},
                               {"time", when},
                               {"time_utc", utc_time(when)}});
        if (!a.store.json)
            fmt::print("{:<24} {:>8} {:>8} {:>8}  {}\n", job, all.size(), complete.size(),
                       complete.empty() ? std::string("-") : std::to_string(complete.back()),
                       utc_time(when));
    }
    if (a.store.json)
        print_json(out);
    return status;
}

int list_job(store::backend& st, const ls_args& a)
{
    require_job(st, a.job);
    store::job_entry j;
    std::string why;
    if (auto ec = store::inspect_job(st, a.job, j, why))
        throw failure(damaged, why);
    if (a.store.json) {
        nlohmann::json out = {{"store", st.location()},
                              {"job", j.job},
                              {"live_nodes", j.live_nodes},
                              {"journal_problem", j.journal_problem},
                              {"versions", nlohmann::json::array()},
                              {"leftovers", j.leftovers},
                              {"damaged_buckets", j.damaged_buckets},
                              {"skipped", nlohmann::json::array()}};
        for (const auto& k : j.skipped)
            out["skipped"].push_back(
                {{"version", k.version}, {"node", k.node}, {"bucket", k.bucket}});
        for (const auto& v : j.versions)
            out["versions"].push_back(version_json(v));
        print_json(out);
        return ok;
    }
    std::size_t counts[3] = {};
    for (const auto& v : j.versions)
        ++counts[static_cast<int>(v.state)];
    fmt::print("job {} in {}: {} version{}, {} complete, {} incomplete, {} damaged\n", j.job,
               st.describe(), j.versions.size(), j.versions.size() == 1 ? "" : "s",
               counts[static_cast<int>(store::version_state::complete)],
               counts[static_cast<int>(store::version_state::incomplete)],
               counts[static_cast<int>(store::version_state::damaged)]);
    if (!j.live_nodes.empty())
        fmt::print("live: {}\n", store::describe_live(j.job, j.live_nodes));
    if (!j.journal_problem.empty())
        fmt::print("journals: {} (no incomplete version is called dead)\n", j.journal_problem);
    fmt::print("{:>8}  {:<10}  {:<20}  {:>5}  {:>5}  {:>10}  {}\n", "VERSION", "STATE", "TIME",
               "NODES", "RANKS", "BYTES", "NOTE");
    for (const auto& v : j.versions) {
        std::string note = v.why;
        if (v.dead)
            note += "; can never complete (no live daemon claims the job): iofwd gc removes it";
        else if (!v.journaled_by.empty())
            note += fmt::format("; node {}'s journal holds parts of it, which the node's next "
                                "daemon commits when the job runs there again",
                                fmt::join(v.journaled_by, ", "));
        else if (!v.arriving.empty())
            note += fmt::format("; node {}'s manifest of it has yet to arrive at its bucket, "
                                "which the node's next daemon does when the job runs there again",
                                fmt::join(v.arriving, ", "));
        else if (!v.waiting.empty())
            note += "; " + v.waiting;
        auto line = fmt::format("{:>8}  {:<10}  {:<20}  {:>5}  {:>5}  {:>10}  {}", v.version,
                                store::state_name(v.state), utc_time(v.time), v.nodes, v.ranks,
                                human_bytes(v.bytes), note);
        fmt::print("{}\n", line.substr(0, line.find_last_not_of(' ') + 1));
    }
    if (!j.skipped.empty()) {
        fmt::print("skipped versions (a node will never have them: never complete):\n");
        for (const auto& k : j.skipped)
            fmt::print("  version {}: skipped by node {} (bucket {})\n", k.version, k.node,
                       k.bucket);
    }
    if (!j.damaged_buckets.empty()) {
        fmt::print("damaged bucket records (the versions only they said are complete are not "
                   "listed; iofwd verify exits 1):\n");
        for (const auto& d : j.damaged_buckets)
            fmt::print("  {}\n", d);
    }
    if (!j.leftovers.empty()) {
        fmt::print("{}\n", j.live_nodes.empty()
                              ? "crash leftovers (never committed; iofwd gc removes them):"
                              : "uncommitted objects (writes in progress of the live daemon, or "
                                "crash leftovers):");
        for (const auto& l : j.leftovers)
            fmt::print("  {}\n", l);
    }
    return ok;
}

}  // namespace

void add_ls(CLI::App& app, int& status)
{
    auto args = std::make_shared<ls_args>();
    auto* cmd = add_job_command(app, "ls",
                                "list the jobs of a store, or a job's versions: state (complete, "
                                "incomplete, damaged), time, nodes, ranks, bytes, and crash "
                                "leftovers",
                                args->store, args->job, false, "the job whose versions to list");
    cmd->callback([args, &status] {
        auto st = open_store(args->store);
        status = args->job.empty() ? list_store(*st, *args) : list_job(*st, *args);
    });
}

}  // namespace iofwd::tool

#include "common.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "store/inventory.hpp"

namespace iofwd::tool {

void add_store_options(CLI::App& cmd, store_options& o)
{
    cmd.add_option("--store", o.store,
                   "the store: a directory, dir:PATH, or rados:POOL (default: IOFWD_STORE, "
                   "else ./iofwd-store)")
        ->type_name("LOCATION");
    cmd.add_option("--ceph-conf", o.ceph_conf, "ceph.conf of a rados store's cluster [IOFWD_CEPH_CONF]")
        ->type_name("PATH");
    cmd.add_option("--ceph-user", o.ceph_user, "Ceph client name [IOFWD_CEPH_USER]")
        ->type_name("NAME");
    cmd.add_option("--ceph-keyring", o.ceph_keyring,
                   "keyring with that client's key [IOFWD_CEPH_KEYRING]")
        ->type_name("PATH");
    add_json_option(cmd, o.json);
}

CLI::App* add_job_command(CLI::App& app, const std::string& name, const std::string& help,
                          store_options& o, std::string& job, bool job_required,
                          const std::string& job_help)
{
    auto* cmd = app.add_subcommand(name, help);
    add_store_options(*cmd, o);
    auto* positional = cmd->add_option("JOB", job, job_help);
    if (job_required)
        positional->required();
    return cmd;
}

void add_json_option(CLI::App& cmd, bool& json)
{
    cmd.add_flag("--json", json, "print the result as JSON (fields: see the manual)");
}

std::unique_ptr<store::backend> open_store(const store_options& o)
{
    store::set_ceph_options(o.ceph_conf, o.ceph_user, o.ceph_keyring);
    std::string location = o.store, why;
    if (location.empty() && config::get_text("IOFWD_STORE", location, why))
        throw failure(bad_argument, why);
    // A path (or dir:PATH) must exist; "TYPE:..." is for store::open to judge.
    const auto colon = location.find(':');
    const bool typed = colon != std::string::npos && location[0] != '/' &&
                       location.find('/') > colon && !location.starts_with("dir:");
    if (!typed) {
        const std::string path = location.starts_with("dir:") ? location.substr(4) : location;
        struct stat st {};
        if (!path.empty() && ::stat(path.c_str(), &st) != 0)
            throw failure(bad_argument,
                          fmt::format("store {} does not exist ({}: {}); give --store or "
                                      "IOFWD_STORE",
                                      location, path, std::strerror(errno)));
    }
    std::unique_ptr<store::backend> st;
    if (store::open(location, st, why))
        throw failure(bad_argument, fmt::format("cannot open store {}: {}", location, why));
    return st;
}

void require_job(store::backend& st, const std::string& job)
{
    std::vector<std::uint64_t> versions;
    const auto ec = store::job_versions(st, job, versions);
    if (!ec)
        return;
    // The listing read the job's FORMAT when there: its words, when it is why.
    if (std::string why; ec != errc::not_found && store::check_format(st, job, why))
        throw failure(damaged, fmt::format("cannot read job {} in {}: {}", job, st.describe(),
                                           why));
    if (ec != errc::not_found)
        throw failure(damaged, fmt::format("cannot list job {} in {}: {}", job, st.describe(),
                                           store::failure(st, job, ec)));
    std::vector<std::string> jobs;
    store::list_jobs(st, jobs);
    throw failure(bad_argument,
                  jobs.empty() ? fmt::format("job '{}' is not in {}: the store holds no jobs", job,
                                             st.describe())
                               : fmt::format("job '{}' is not in {} (its jobs: {})", job,
                                             st.describe(), fmt::join(jobs, ", ")));
}

std::uint64_t parse_number(const std::string& text, const std::string& what)
{
    std::uint64_t n = 0;
    if (!config::parse_count(text, n))
        throw failure(bad_argument, fmt::format("{} '{}' is not a whole number", what, text));
    return n;
}

std::uint64_t parse_version(store::backend& st, const std::string& job, const std::string& text)
{
    std::string digits = text;
    if (digits.starts_with("v"))
        digits.erase(0, 1);  // as a version directory names it: v00000003
    std::uint64_t v = 0;
    if (!config::parse_count(digits, v))
        throw failure(bad_argument,
                      fmt::format("version '{}' is not a version number (iofwd ls {} lists them)",
                                  text, job));
    std::vector<std::uint64_t> versions;
    store::job_versions(st, job, versions);
    if (!std::binary_search(versions.begin(), versions.end(), v))
        throw failure(bad_argument, fmt::format("version {} of job {} is not in {} (its versions: "
                                                "{})",
                                                v, job, st.describe(), number_ranges(versions)));
    return v;
}

std::string utc_time(std::int64_t seconds)
{
    if (seconds <= 0)
        return "-";
    const std::time_t t = static_cast<std::time_t>(seconds);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string human_rate(std::uint64_t bytes, double seconds)
{
    if (seconds <= 0)
        return "-";
    return human_bytes(static_cast<std::uint64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}

double parse_seconds_arg(const std::string& text, const std::string& what, double min, double max)
{
    double s = 0;
    if (!config::parse_seconds(text, s) || s < min || s > max)
        throw failure(bad_argument, fmt::format("{} '{}' is not a number of seconds from {} to {}",
                                                what, text, min, max));
    return s;
}

void print_json(const nlohmann::json& j)
{
    std::cout << j.dump(2) << '\n';
}

void print_json_ordered(const nlohmann::ordered_json& j)
{
    std::cout << j.dump(2) << '\n';
}

}  // namespace iofwd::tool

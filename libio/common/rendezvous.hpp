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
#include <cstdint>
#include <string>
#include <system_error>

namespace iofwd {

struct runtime_paths {
    std::string dir;
    std::string session;
    std::string socket;
    std::string lock;
    std::string log;
};

// IOFWD_NODE, else the short host name. Names the node in the store.
std::string default_node_name();

// IOFWD_SESSION, else "<node>-<parent pid>".
std::string default_session(const std::string& node);

// IOFWD_JOB, else the name of the running program.
std::string default_job_name();

// Any string made usable as a name: unsafe characters become '_'.
std::string sanitize_name(std::string s);

// IOFWD_RUNTIME_DIR, else $XDG_RUNTIME_DIR/iofwd, else /tmp/iofwd-<uid>. The
// directory is created mode 0700 if missing, and refused (with a sentence in
// `why`) if it belongs to another user or others can write to it.
std::error_code prepare_runtime_dir(std::string& out, std::string& why);

// Paths for a session; sessions with names too long for a socket path are
// shortened to a hash.
runtime_paths paths_for(const std::string& dir, const std::string& session);

// Names must be safe as file names: letters, digits, '.', '_', '-'; not empty,
// not starting with '.'.
bool valid_name(const std::string& name);

// Environment helpers: the variable's value, or `fallback` when unset or empty.
std::string env_or(const char* name, const std::string& fallback);

}  // namespace iofwd

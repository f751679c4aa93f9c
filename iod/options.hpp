#pragma once
// iod's configuration: the settings table's defaults, then IOFWD_* environment
// variables, then the command line; the settings' names, types, ranges and help are config.hpp's,
// shared with the client. `iod --help` prints them.
#include <cstdint>
#include <string>
#include <system_error>

namespace iofwd::iod {

// The fields of IOFWD_* settings start empty: parse_options gives each the
// default of the settings table (config.cpp) first, so that a default is
// written once. The others say their own.
struct options {
    std::string store;
    std::string node;          // default: IOFWD_NODE or the short host name
    std::string session;       // default: IOFWD_SESSION or the node name
    std::string runtime_dir;   // default: see rendezvous.hpp
    std::uint64_t staging_bytes = 0;
    std::uint64_t chunk_bytes = 0;
    bool staging_prefault = false;  // fault all staging in before start (else in the background)
    unsigned flush_threads = 0;
    unsigned pull_threads = 0;   // pullers (UCX workers on threads) for pushed chunks; 0: the loop
    std::uint64_t mailbox_bytes = 0;  // per rank, for writes up to the eager limit; 0: none
    std::uint64_t journal_max = 0;    // versions up to this go through the journal; 0: none
    std::uint64_t journal_bytes = 0;  // the journal file's size
    unsigned pack_versions = 0;  // versions per bucket of packs (docs/small-versions.md); 0: off
    double pack_wait = 0;        // seconds a batch waits for the next version
    double pack_age = 0;         // seconds a batch waits at most (at least pack_wait)
    unsigned keep = 0;           // complete versions to keep; 0: all
    bool auto_exit = false;
    double idle_timeout = -1;  // seconds; <0: 300 with --auto-exit, else never
    std::string log;           // empty: stderr
    std::string log_level;
    double progress_interval = 0;  // seconds between progress lines of a long flush; 0: none
    bool store_group = false;  // the directory store readable by the group (0750/0640)
    std::string ceph_conf;     // for a rados: store
    std::string ceph_user;
    std::string ceph_keyring;
    std::string transports;    // UCX_TLS for the daemon's UCX
    std::string net_devices;   // UCX_NET_DEVICES
    std::string port_range;    // UCX_TCP_PORT_RANGE, e.g. 13000-13100
    int ready_fd = -1;         // set by the launching rank
    int lock_fd = -1;          // set by the launching rank
    int runtime_fd = -1;       // the runtime directory, opened by the launching rank

    bool operator==(const options&) const = default;
};

enum class parse_result { run, exit_ok, exit_error };

// Fills `out`; on --help/--version prints to stdout and returns exit_ok; on a
// bad option prints a sentence to stderr, puts it in `*why` too (when given)
// and returns exit_error.
parse_result parse_options(int argc, char** argv, options& out, std::string* why = nullptr);

// The descriptor of --ready-fd in argv (-1 when absent or not a number): the
// launching rank waits on it even when the other options are bad.
int ready_fd_in(int argc, char** argv);

}  // namespace iofwd::iod

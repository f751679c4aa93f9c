#pragma once
// What every integration test starts from: a private runtime directory, store
// and session, and helpers to run real ranks (rank_client), a real iod, and
// the verifier against them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "process.hpp"

namespace test {

struct cluster {
    temp_dir tmp;
    std::map<std::string, std::string> env;
    int outputs = 0;

    cluster();
    // Kills any daemon of this test still alive, so none outlives its test.
    ~cluster();
    std::string runtime_dir() const { return tmp / "rt"; }
    std::string store() const { return tmp / "store"; }
    std::string socket() const { return runtime_dir() + "/s.sock"; }
    std::string log() const { return read_file(runtime_dir() + "/s.log"); }

    // For a test of the unpacked layout (a version's own directory, its
    // objects, manifests and COMPLETE record, and the log lines of that
    // path): small versions go into packs when IOFWD_PACK_VERSIONS is on,
    // so every process the test starts has it off. The packed path has
    // tests of its own (packs-*).
    void unpacked();
    // For a test of packs: every process the test starts packs in buckets
    // of `versions` (IOFWD_PACK_VERSIONS, 64 by default).
    void packed(unsigned versions);
    process rank(unsigned r, unsigned n, std::vector<std::string> args = {},
                 const std::map<std::string, std::string>& extra = {});
    // A daemon started by hand for session "s" (not auto-exiting).
    process daemon(std::vector<std::string> args = {},
                   const std::map<std::string, std::string>& extra = {});
    // A version left half written: a rank writes 3 MiB to a daemon whose
    // every store write is a second late (IOFWD_FAULT=pwrite:DELAY), and the
    // daemon is SIGKILLed once the temporary of its object is in
    // `version_dir`, which then holds that and nothing else.
    void crash_mid_write(const std::string& version_dir);
    // Runs the verifier; its output in `out`; returns its exit code.
    int verify(long versions, long ranks, std::string& out, const std::string& job = "itest");
    process run(std::vector<std::string> argv, const std::map<std::string, std::string>& extra = {});
};

// A journal small enough to fill with zeros quickly (IOFWD_JOURNAL_SIZE).
extern const std::map<std::string, std::string> small_journal;
// A first run of `ranks` ranks of nodeA makes the job's directory, version
// 1, and fills the node's journal with zeros, once: held at its gate until
// the journal is whole. Returns when its daemon is gone. Unless the
// cluster is unpacked(), its daemon packs, and so writes the job's FORMAT:
// a daemon after it counts no store call for that (IOFWD_FAULT's counts).
void fill_journal(cluster& c, unsigned ranks,
                  const std::map<std::string, std::string>& journal_env = small_journal,
                  std::uintmax_t journal_bytes = 1u << 20);
// A daemon with `fault` (IOFWD_FAULT) and `env`, ready before any rank
// looks for it.
process faulty_daemon(cluster& c, const std::string& fault,
                      const std::map<std::string, std::string>& env);
// A daemon whose first `passing` store writes pass (the journal's record of
// the next version, by default; a daemon that packs writes the job's FORMAT
// at its claim first, one more) and every later one hangs for 30 s (an
// object's bytes).
process stalling_daemon(cluster& c, unsigned passing = 1,
                        const std::map<std::string, std::string>& env = small_journal);

// Another user of the node, for the security tests: `cmd` run as uid 65534
// (setpriv), which needs root (require_root fails the test without it), and
// a directory that user may write in (as /tmp is).
std::vector<std::string> as_nobody(std::vector<std::string> cmd);
void require_root();
std::string public_dir(const cluster& c, const std::string& name);
// That user's fake daemon (stranger fake-daemon: takes every connection
// for `seconds` and says what it read) listening at the session's socket in
// the test's own runtime directory, which it made (a mistake, or a socket
// handed over): the directory passes its checks, the peer's credentials do not.
process stranger_at_socket(cluster& c, const std::string& seconds);

// The pids of the daemons that wrote a log ("... iod[PID] ..." lines).
std::vector<pid_t> daemon_pids(const std::string& log);
// The versions of `job` that the daemons' retention (keep `keep`) says it
// removed ("removed versions 1-3, 5 of job J", one line a run), sorted; a
// version removed twice is there twice. A line that does not read fails
// the test.
std::vector<std::uint64_t> removed_by_retention(const std::string& log, unsigned keep,
                                                const std::string& job = "itest");
// Occurrences of `needle` in `hay`.
std::size_t count(const std::string& hay, const std::string& needle);
// A line of p's output starts with `prefix`.
bool has_line(const process& p, const std::string& prefix);
// Waits (at most 120 s) for `p` and requires its exit code.
void require_exit(process& p, int code);
// The gate a rank started with --go-file waits at after io_init (or with
// --gate-at before a write): its path in the test's runtime directory, and
// opening it (the file made). `name` tells a second gate from the first.
std::string gate(const cluster& c, const std::string& name = "go");
void open_gate(const cluster& c, const std::string& name = "go");
// The files under `dir` (recursively) that a store writer left uncommitted
// (".NAME.tmp-..."), as paths.
std::vector<std::string> temporaries(const std::string& dir);

}  // namespace test

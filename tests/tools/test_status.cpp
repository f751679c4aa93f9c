// iofwd status against real daemons: one mid-job with ranks and a slowed
// disk (IOFWD_FAULT=pwrite:DELAY: every store write a second late), one
// stopped with SIGSTOP, one killed (its socket left behind), none at all,
// and another user's process at a session's socket. Outputs, exit statuses
// and the --json fields (read back by python3) are asserted exactly; pids
// come from the processes and the daemon's log, and what changes from one
// moment to the next (uptime, ages, rates) is matched by pattern.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>

#include "fd.hpp"
#include "fixture.hpp"
#include "iofwd_run.hpp"

using namespace test;

namespace {

std::string header(cluster& c, int answering, int silent, int stale)
{
    return "iofwd daemons of uid " + std::to_string(::geteuid()) +
           " on node nodeA (runtime directory " + c.runtime_dir() + "): " +
           std::to_string(answering) + " answering, " + std::to_string(silent) +
           " not answering, " + std::to_string(stale) + " stale socket" +
           (stale == 1 ? "" : "s") + "\n";
}

std::string nobody_here(cluster& c)
{
    return "no iofwd daemon of uid " + std::to_string(::geteuid()) +
           " on node nodeA (runtime directory " + c.runtime_dir() + ")\n";
}

// The one daemon of the test's log.
pid_t the_daemon(cluster& c)
{
    const auto pids = daemon_pids(c.log());
    REQUIRE(pids.size() == 1);
    return pids[0];
}

bool matches(const std::string& text, const std::string& pattern)
{
    return std::regex_search(text, std::regex(pattern));
}

}  // namespace

TEST_CASE("status: no daemon", "[tools][status]")
{
    cluster c;
    auto s = run_iofwd(c, {"status"});
    CHECK(s.code == 0);
    CHECK(s.err.empty());
    CHECK(s.out == nobody_here(c));
    auto j = run_iofwd(c, {"status", "--json"});
    CHECK(j.code == 0);
    CHECK(py(c, j.out, "d['node'], d['uid'], d['runtime_dir'], d['daemons']") ==
          "nodeA " + std::to_string(::geteuid()) + " " + c.runtime_dir() + " []\n");
}

TEST_CASE("status: a daemon mid-job, its ranks, and a version flushing with bytes done",
          "[tools][status]")
{
    cluster c;
    // Every store write two seconds late, 1 MiB chunks, one flush thread:
    // the 4 MiB version reaches the store a MiB every two seconds, a window
    // that a poll (`iofwd status` and python, 0.2 s here, more on a busy
    // machine) does not miss.
    const std::map<std::string, std::string> slow{{"IOFWD_FAULT", "pwrite:DELAY2"},
                                                  {"IOFWD_CHUNK_SIZE", "1M"},
                                                  {"IOFWD_FLUSH_THREADS", "1"}};
    const std::string size = std::to_string(4 << 20);
    auto r0 = c.rank(0, 2, {"--size", size, "--versions", "1"}, slow);
    auto r1 = c.rank(1, 2, {"--size", size, "--versions", "1", "--stall-at", "0"}, slow);
    REQUIRE(wait_until([&] { return has_line(r0, "finalizing") && has_line(r1, "stalled"); },
                       60s));
    const pid_t daemon = the_daemon(c);

    // A snapshot taken while exactly the first MiB is in the store.
    const std::string flushed = "d['daemons'][0]['daemon']['transfers'][0]['flushed'] if "
                                "d['daemons'] and d['daemons'][0]['daemon'] and "
                                "d['daemons'][0]['daemon']['transfers'] else -1";
    std::string doc;
    REQUIRE(wait_until(
        [&] {
            auto s = run_iofwd(c, {"status", "--json"});
            if (s.code != 0 || py(c, s.out, flushed) != "1048576\n")
                return false;
            doc = s.out;
            return true;
        },
        30s));
    CHECK(py(c, doc, "[(x['session'], x['state'], x['pid'], x['why'], x['socket']) for x in "
                     "d['daemons']]") ==
          "[('s', 'answering', " + std::to_string(daemon) + ", '', '" + c.socket() + "')]\n");
    CHECK(py(c, doc, "(lambda x: (x['pid'], x['iod_version'], x['node'], x['store'], "
                     "x['uptime_seconds'] > 0))(d['daemons'][0]['daemon'])") ==
          "(" + std::to_string(daemon) + ", '0.1.0', 'nodeA', 'directory " + c.store() +
              "', True)\n");
    CHECK(py(c, doc, "d['daemons'][0]['daemon']['job']") ==
          "{'connected': 2, 'died': 0, 'finished': 0, 'name': 'itest', 'nodes': 1, 'ranks': 2, "
          "'run': ''}\n");
    CHECK(py(c, doc, "d['daemons'][0]['daemon']['versions']") ==
          "{'durable': 0, 'durable_bytes': 0, 'flushing': 1, 'pulling': 0, 'recent_rate': 0.0}\n");
    // Rank 0 said BYE and waits for its version; rank 1 stalls before writing.
    CHECK(py(c, doc, "[(k['rank'], k['pid'], k['state'], k['files'], k['versions'], k['bytes']) "
                     "for k in d['daemons'][0]['daemon']['ranks']], "
                     "d['daemons'][0]['daemon']['connections']") ==
          "[(0, " + std::to_string(r0.pid()) + ", 'bye', False, 0, 0), (1, " +
              std::to_string(r1.pid()) + ", 'serving', False, 0, 0)] 2\n");
    CHECK(py(c, doc, "[(t['object'], t['rank'], t['version'], t['length'], t['pulled'], "
                     "t['flushed'], t['seconds'] >= 1, t['flush_rate'] > 0) for t in "
                     "d['daemons'][0]['daemon']['transfers']], "
                     "d['daemons'][0]['daemon']['transfers_total']") ==
          "[('itest/v00000001/nodeA.r0000', 0, 1, 4194304, 4194304, 1048576, True, True)] 1\n");
    // Its first chunk's slot went back when its MiB was written; the second
    // chunk is being written, the last two wait for the one thread.
    CHECK(py(c, doc, "d['daemons'][0]['daemon']['staging']") ==
          "{'chunk': 1048576, 'stalled': 0, 'total': 268435456, 'used': 3145728, 'waiting': 0}\n");
    CHECK(py(c, doc, "d['daemons'][0]['daemon']['flush']") ==
          "{'catalog_pending': 0, 'held': 0, 'queued': 2, 'retention': 'idle', 'running': 1, "
          "'threads': 1}\n");
    CHECK(py(c, doc, "d['daemons'][0]['daemon']['errors'], d['daemons'][0]['daemon']['recent']") ==
          "{'lost_versions': 0, 'manifest_error': None} []\n");

    // The same in words, while the version is still on its way.
    auto text = run_iofwd(c, {"status"});
    INFO(text.out);
    CHECK(text.code == 0);
    CHECK(text.err.empty());
    CHECK(text.out.find(header(c, 1, 0, 0) + "session s: iod 0.1.0 (pid " +
                        std::to_string(daemon) + ") on node nodeA, up ") == 0);
    CHECK(text.out.find("\n  store      directory " + c.store() +
                        "\n"
                        "  job        itest: 2 ranks on this node (2 connected, 0 finished, 0 "
                        "died), 1 node\n"
                        "  versions   0 pulling, 1 flushing, 0 durable (0 B)\n") !=
          std::string::npos);
    CHECK(text.out.find("\n  errors     none\n"
                        "    RANK      PID  STATE      VERSIONS       BYTES\n"
                        "       0 " + std::string(8 - std::to_string(r0.pid()).size(), ' ') +
                        std::to_string(r0.pid()) +
                        "  bye               0         0 B\n"
                        "       1 " + std::string(8 - std::to_string(r1.pid()).size(), ' ') +
                        std::to_string(r1.pid()) + "  serving           0         0 B\n") !=
          std::string::npos);
    CHECK(matches(text.out, R"(\n  flushes    1 of 1 threads busy, [0-2] queued, 0 held; 0 )"
                            R"(manifests to write; retention idle\n)"));
    CHECK(matches(text.out, R"(\n  itest/v00000001/nodeA.r0000 +0 +1 +4 MiB +4 MiB +[1-3] MiB )"
                            R"(+[0-9.]+ KiB/s +[0-9.]+ s\n)"));

    // The stalled rank dies; rank 0's version lands and the daemon exits
    // with the job.
    r1.signal(SIGKILL);
    require_exit(r0, 0);
    REQUIRE(wait_until([&] { return ::kill(daemon, 0) != 0; }, 30s));
    auto after = run_iofwd(c, {"status"});
    CHECK(after.code == 0);
    CHECK(after.out == nobody_here(c));
}

TEST_CASE("status: staging held by a read UCX never ended, until its rank's process exits",
          "[tools][status]")
{
    // One staging slot; a peer that asks the daemon to get 1 MiB from it,
    // never progresses UCX and hangs up (bounded stalled-pull has the rest).
    cluster c;
    auto d = c.daemon({}, {{"IOFWD_STAGING_SIZE", "1M"}, {"IOFWD_CHUNK_SIZE", "1M"}});
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "stall-get", "600"});
    REQUIRE(wait_until([&] { return count(c.log(), "pulls never completed") == 1; }, 30s));
    auto j = run_iofwd(c, {"status", "--json"});
    CHECK(j.code == 0);
    CHECK(py(c, j.out, "d['daemons'][0]['daemon']['staging']") ==
          "{'chunk': 1048576, 'stalled': 1048576, 'total': 1048576, 'used': 1048576, "
          "'waiting': 0}\n");
    auto s = run_iofwd(c, {"status"});
    CHECK(s.code == 0);
    CHECK(s.out.find("  staging    1 MiB used of 1 MiB (1 MiB chunks), 1 MiB held by reads UCX "
                     "never ended (back when their ranks' processes exit)\n") !=
          std::string::npos);
    INFO(s.out);
    peer.signal(SIGKILL);
    REQUIRE(peer.wait(10s).has_value());
    REQUIRE(wait_until([&] { return count(c.log(), "staging slots returned") == 1; }, 30s));
    auto after = run_iofwd(c, {"status", "--json"});
    CHECK(py(c, after.out, "d['daemons'][0]['daemon']['staging']") ==
          "{'chunk': 1048576, 'stalled': 0, 'total': 1048576, 'used': 0, 'waiting': 0}\n");
    CHECK(d.running());
}

TEST_CASE("status: a stopped daemon is reported as not answering, within the bound",
          "[tools][status]")
{
    cluster c;
    auto d = c.daemon();
    const pid_t daemon = the_daemon(c);
    REQUIRE(::kill(daemon, SIGSTOP) == 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto s = run_iofwd(c, {"status", "--timeout", "1"});
    const auto took = std::chrono::steady_clock::now() - t0;
    auto j = run_iofwd(c, {"status", "--json"});  // the default bound, 2 s
    ::kill(daemon, SIGCONT);
    CHECK(s.code == 1);
    CHECK(s.err.empty());
    CHECK(s.out == header(c, 0, 1, 0) + "session s: NOT ANSWERING (pid " +
                       std::to_string(daemon) + "): no answer within 1 s (stopped, or hung?)\n");
    CHECK(took >= 1s);
    CHECK(took < scaled(20s));
    CHECK(j.code == 1);
    CHECK(py(c, j.out, "[(x['session'], x['state'], x['pid'], x['why'], x['daemon']) for x in "
                       "d['daemons']]") ==
          "[('s', 'not_answering', " + std::to_string(daemon) +
              ", 'no answer within 2 s (stopped, or hung?)', None)]\n");

    // Running again, it answers (and was not disturbed by the requests it
    // found when it woke).
    auto again = run_iofwd(c, {"status"});
    CHECK(again.code == 0);
    CHECK(again.out.find(header(c, 1, 0, 0) + "session s: iod 0.1.0 (pid " +
                         std::to_string(daemon) + ") on node nodeA, up ") == 0);
    CHECK(again.out.find("\n  job        none yet\n") != std::string::npos);
    d.signal(SIGTERM);
    require_exit(d, 0);
}

TEST_CASE("status: a dead session's socket is a leftover, not an error; gc removes it",
          "[tools][status]")
{
    cluster c;
    auto killed = c.daemon();
    killed.signal(SIGKILL);
    REQUIRE(killed.wait(30s).has_value());
    REQUIRE(exists(c.socket()));
    // A live daemon of another session beside it.
    const std::string t_log = c.runtime_dir() + "/t.log";
    auto live = c.run({build_path("IOFWD_TEST_IOD"), "--session", "t", "--log", t_log});
    REQUIRE(wait_until([&] { return read_file(t_log).find("ready:") != std::string::npos; }, 20s));
    const auto t_pids = daemon_pids(read_file(t_log));
    REQUIRE(t_pids.size() == 1);

    const std::string stale = "session s: stale socket " + c.socket() +
                              ": no process holds its session's lock: a finished session's "
                              "leftover (iofwd gc removes it)\n";
    auto s = run_iofwd(c, {"status"});
    INFO(s.out);
    CHECK(s.code == 0);
    CHECK(s.err.empty());
    CHECK(s.out.find(header(c, 1, 0, 1) + stale + "session t: iod 0.1.0 (pid " +
                     std::to_string(t_pids[0]) + ") on node nodeA, up ") == 0);
    auto j = run_iofwd(c, {"status", "--json"});
    CHECK(j.code == 0);
    CHECK(py(c, j.out, "[(x['session'], x['state'], x['daemon'] is None) for x in d['daemons']]") ==
          "[('s', 'stale_socket', True), ('t', 'answering', False)]\n");

    auto gc = run_iofwd(c, {"gc"});
    CHECK(gc.code == 0);
    CHECK_FALSE(exists(c.socket()));
    auto after = run_iofwd(c, {"status"});
    CHECK(after.code == 0);
    CHECK(after.out.find(header(c, 1, 0, 0) + "session t: ") == 0);
    live.signal(SIGTERM);
    require_exit(live, 0);
}

TEST_CASE("status never sends anything to another user's process at a session's socket",
          "[tools][status]")
{
    require_root();
    cluster c;
    auto fake = stranger_at_socket(c, "8");
    // The session looks live: this test holds its lock, as a daemon would.
    const std::string lock_path = c.runtime_dir() + "/s.lock";
    iofwd::unique_fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(lock.get() >= 0);
    REQUIRE(::flock(lock.get(), LOCK_EX | LOCK_NB) == 0);

    auto s = run_iofwd(c, {"status"});
    CHECK(s.code == 1);
    CHECK(s.err.empty());
    CHECK(s.out == header(c, 0, 1, 0) + "session s: REFUSED: the process serving " + c.socket() +
                       " (pid " + std::to_string(fake.pid()) +
                       ") belongs to uid 65534, not to you (uid 0): refusing to hand it "
                       "anything\n");
    REQUIRE(fake.wait(20s).has_value());
    INFO(fake.output());
    CHECK(has_line(fake, "connections 1 bytes 0"));
}

TEST_CASE("status --watch: a snapshot every interval until interrupted", "[tools][status]")
{
    cluster c;
    auto d = c.daemon();
    const pid_t daemon = the_daemon(c);
    const std::string iofwd = build_path("IOFWD_TEST_IOFWD");

    // Without a terminal: one snapshot after another, each under its time.
    auto w = c.run({iofwd, "status", "--watch", "0.2"});
    REQUIRE(wait_until([&] { return count(w.output(), "== ") >= 3; }, 30s));
    w.signal(SIGINT);
    require_exit(w, 0);
    const auto out = w.output();
    INFO(out);
    const std::string answering = header(c, 1, 0, 0) + "session s: iod 0.1.0 (pid " +
                                  std::to_string(daemon) + ") on node nodeA, up ";
    CHECK(out.rfind("== ", 0) == 0);
    CHECK(count(out, answering) == count(out, "== "));
    CHECK(matches(out, R"(^== \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n)"));

    // --json: one document per line.
    auto jw = c.run({iofwd, "status", "--watch", "0.2", "--json"});
    REQUIRE(wait_until([&] { return count(jw.output(), "\n") >= 2; }, 30s));
    jw.signal(SIGTERM);
    require_exit(jw, 0);
    const std::string lines = c.tmp / "watch.jsonl";
    std::ofstream(lines) << jw.output();
    auto check = c.run({"/usr/bin/python3", "-c",
                        "import json, sys; docs = [json.loads(l) for l in open(sys.argv[1])]; "
                        "print(len(docs) >= 2, {x['state'] for d in docs for x in d['daemons']})",
                        lines});
    require_exit(check, 0);
    CHECK(check.output() == "True {'answering'}\n");

    // On a terminal (script(1) gives it one): redrawn from the top of a
    // cleared screen until interrupted.
    auto tty = c.run({"/usr/bin/script", "-qec",
                      "timeout --preserve-status -s INT 1 " + iofwd + " status --watch 0.2",
                      "/dev/null"});
    require_exit(tty, 0);
    INFO(tty.output());
    CHECK(count(tty.output(), "\x1b[H\x1b[2J") >= 2);
    CHECK(count(tty.output(), "\x1b[H\x1b[2J") == count(tty.output(), "(every 0.2 s; interrupt "
                                                                       "to stop)"));
    CHECK(tty.output().find("== ") == std::string::npos);
    d.signal(SIGTERM);
    require_exit(d, 0);
}

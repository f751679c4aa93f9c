// Launching the daemon: a daemon that cannot start is reported with the
// errno of the cause and its own sentence; launches clean the runtime
// directory of what finished sessions left.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "fixture.hpp"

using namespace test;

namespace {

// io_init of one rank that cannot get a daemon: its "init <errno>" line and
// io_last_error.
std::string failed_init(cluster& c, const std::map<std::string, std::string>& extra,
                        std::vector<std::string> prefix = {})
{
    std::vector<std::string> argv = std::move(prefix);
    for (const auto& a : {build_path("IOFWD_TEST_RANK_CLIENT"), std::string("--rank"),
                          std::string("0"), std::string("--ranks"), std::string("1"),
                          std::string("--size"), std::string("4096")})
        argv.push_back(a);
    auto r = c.run(argv, extra);
    const auto st = r.wait(30s);
    REQUIRE(st.has_value());
    CHECK(exit_code(*st) == 1);
    return r.output();
}

// Files in `dir` by suffix: ".lock", ".sock", ".log", "other".
std::map<std::string, int> runtime_files(const std::string& dir)
{
    std::map<std::string, int> n{{".lock", 0}, {".sock", 0}, {".log", 0}, {"other", 0}};
    DIR* d = ::opendir(dir.c_str());
    REQUIRE(d);
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..")
            continue;
        const auto dot = name.rfind('.');
        const std::string suffix = dot == std::string::npos ? "" : name.substr(dot);
        ++n[n.count(suffix) ? suffix : "other"];
    }
    ::closedir(d);
    return n;
}

}  // namespace

TEST_CASE("a daemon that cannot start is reported with the errno of the cause and its words",
          "[launch][start-errno]")
{
    cluster c;
    SECTION("ENOENT: the store's path leads through a directory that is not there")
    {
        // A scratch file system that is not mounted: the link points nowhere.
        REQUIRE(::symlink((c.tmp / "unmounted/scratch").c_str(), (c.tmp / "scratch").c_str()) ==
                0);
        const std::string store = c.tmp / "scratch/ckpt";
        const auto out = failed_init(c, {{"IOFWD_STORE", store}});
        INFO(out);
        CHECK(out.rfind("init 2\n", 0) == 0);
        CHECK(out.find("error io_init: the daemon could not start: cannot create store directory " +
                       store + ": No such file or directory (log " + c.runtime_dir() +
                       "/s.log)") != std::string::npos);
    }
    SECTION("EINVAL: a bad value for the daemon")
    {
        const auto out = failed_init(c, {{"IOFWD_STAGING_SIZE", "lots"}});
        INFO(out);
        CHECK(out.rfind("init 22\n", 0) == 0);
        CHECK(out.find("the daemon could not start: IOFWD_STAGING_SIZE='lots' is not a size") !=
              std::string::npos);
    }
    SECTION("EACCES: a store the user may not create")
    {
        if (::geteuid() != 0)
            FAIL("this case runs the rank as uid 65534 through setpriv and needs root");
        // uid 65534 with a runtime directory of its own, asking for a store
        // inside a directory only root may write to.
        ::chmod(c.tmp.path().c_str(), 0755);
        const std::string pub = c.tmp / "pub", locked = c.tmp / "locked";
        REQUIRE(::mkdir(pub.c_str(), 0777) == 0);
        REQUIRE(::chmod(pub.c_str(), 0777) == 0);
        REQUIRE(::mkdir(locked.c_str(), 0755) == 0);
        const auto out = failed_init(c,
                                     {{"IOFWD_STORE", locked + "/ckpt"},
                                      {"IOFWD_RUNTIME_DIR", pub + "/rt"}},
                                     {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                      "--clear-groups"});
        INFO(out);
        CHECK(out.rfind("init 13\n", 0) == 0);
        CHECK(out.find("the daemon could not start: cannot create store directory " + locked +
                       "/ckpt: Permission denied") != std::string::npos);
    }
    SECTION("ENOENT: no iod where IOFWD_IOD says")
    {
        const std::string iod = c.tmp / "no/iod";
        const auto out = failed_init(c, {{"IOFWD_IOD", iod}});
        INFO(out);
        CHECK(out.rfind("init 2\n", 0) == 0);
        CHECK(out.find("cannot start daemon '" + iod + "'") != std::string::npos);
        CHECK(out.find(": No such file or directory (set IOFWD_IOD to the iod binary)") !=
              std::string::npos);
    }
}

TEST_CASE("thirty runs, each its own session, leave a bounded runtime directory",
          "[launch][runtime-gc]")
{
    cluster c;
    auto run = [&](int i, const std::map<std::string, std::string>& extra) {
        auto e = extra;
        e["IOFWD_SESSION"] = "job" + std::to_string(i);
        auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, e);
        const auto st = r.wait(30s);
        REQUIRE(st.has_value());
        INFO(r.output());
        REQUIRE(exit_code(*st) == 0);
    };
    // With the default age (an hour) every finished session's log stays, so
    // that a failed job's log can be read; its lock file and socket go.
    for (int i = 1; i <= 15; ++i)
        run(i, {});
    auto n = runtime_files(c.runtime_dir());
    CHECK(n[".log"] == 15);
    CHECK(n[".lock"] == 1);  // the last run's: it launched after the cleaning
    CHECK(n[".sock"] == 0);  // a daemon that exits removes its own
    CHECK(n["other"] == 0);
    // Logs older than the age go, except the newest 8 of finished sessions.
    for (int i = 16; i <= 30; ++i)
        run(i, {{"IOFWD_RUNTIME_LOG_AGE", "0"}});
    n = runtime_files(c.runtime_dir());
    CHECK(n[".log"] == 9);  // the newest 8 finished ones and the last run's
    CHECK(n[".lock"] == 1);
    CHECK(n[".sock"] == 0);
    CHECK(n["other"] == 0);
    for (int i = 22; i <= 30; ++i)
        CHECK(exists(c.runtime_dir() + "/job" + std::to_string(i) + ".log"));
}

namespace {

// The value of `name` in the environment process `pid` started with;
// "(unset)" without it. (glibc's loader cuts GLIBC_TUNABLES there after its
// first tunable, having read them all.)
std::string env_of(pid_t pid, const std::string& name)
{
    const std::string all = read_file("/proc/" + std::to_string(pid) + "/environ");
    for (std::size_t at = 0; at < all.size();) {
        const std::size_t end = std::min(all.find('\0', at), all.size());
        const std::string entry = all.substr(at, end - at);
        if (entry.compare(0, name.size() + 1, name + "=") == 0)
            return entry.substr(name.size() + 1);
        at = end + 1;
    }
    return "(unset)";
}

}  // namespace

TEST_CASE("a launched daemon gets its malloc setting, unless the user chose one",
          "[launch][daemon-malloc]")
{
    cluster c;
    const std::string ours = "glibc.malloc.tcache_count=128";
    for (const auto& [inherited, expected] : std::vector<std::pair<std::string, std::string>>{
             {"", ours},
             // The user's other tunables come after it (what the loader
             // leaves in /proc is the first).
             {"glibc.malloc.arena_max=8", ours},
             // The user's own depth stands.
             {"glibc.malloc.tcache_count=7", "glibc.malloc.tcache_count=7"}}) {
        DYNAMIC_SECTION("the rank's GLIBC_TUNABLES: '" << inherited << "'")
        {
            auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1", "--go-file", gate(c)},
                            {{"GLIBC_TUNABLES", inherited}});
            REQUIRE(wait_until([&] { return count(c.log(), "ready:") > 0 || !r.running(); }, 20s));
            const auto pids = daemon_pids(c.log());
            REQUIRE(pids.size() == 1);
            CHECK(env_of(pids[0], "GLIBC_TUNABLES") == expected);
            open_gate(c);
            const auto st = r.wait(30s);
            REQUIRE(st.has_value());
            CHECK(exit_code(*st) == 0);
        }
    }
}

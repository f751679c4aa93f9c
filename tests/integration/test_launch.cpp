// Launching the daemon: a daemon that cannot start is reported with the
// errno of the cause and its own sentence.
#include <catch2/catch.hpp>

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

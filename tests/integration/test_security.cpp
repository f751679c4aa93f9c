// Another user on the same node, as an attacker would act: real processes of
// uid 65534 (setpriv), a real symlink flipper, a real fake daemon. Needs root
// to switch users; without it these tests fail, saying so.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "fixture.hpp"

using namespace test;

namespace {

std::vector<std::string> as_nobody(std::vector<std::string> cmd)
{
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return argv;
}

void require_root()
{
    if (::geteuid() != 0)
        FAIL("these tests act as another user through setpriv and need root");
}

// A directory that uid 65534 may write in (as /tmp is).
std::string public_dir(const cluster& c, const std::string& name)
{
    ::chmod(c.tmp.path().c_str(), 0755);
    const std::string dir = c.tmp / name;
    REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    return dir;
}

}  // namespace

TEST_CASE("a runtime path another user flips between directories is never used",
          "[security][runtime-race]")
{
    require_root();
    cluster c;
    const std::string pub = public_dir(c, "pub");
    // Root's own directory, which passes every check, and the attacker's, with
    // a fake daemon listening where the session's socket would be.
    const std::string good = c.tmp / "good";
    REQUIRE(::mkdir(good.c_str(), 0700) == 0);
    const std::string evil = pub + "/evil";
    auto mk = c.run(as_nobody({"/bin/mkdir", "-m", "700", evil}));
    REQUIRE(mk.wait(10s).has_value());
    auto fake = c.run(as_nobody({build_path("IOFWD_TEST_STRANGER"), "fake-daemon",
                                 evil + "/s.sock", "12"}));
    REQUIRE(wait_until([&] { return has_line(fake, "listening"); }, 10s));
    const std::string link = pub + "/rt";
    auto flipper = c.run(as_nobody({build_path("IOFWD_TEST_STRANGER"), "flip", link, good, evil,
                                    "10"}));
    REQUIRE(wait_until([&] { return exists(link); }, 10s));
    int refused = 0;
    for (int i = 0; i < 20; ++i) {
        auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"},
                        {{"IOFWD_RUNTIME_DIR", link}, {"IOFWD_LAUNCH_TIMEOUT", "2"}});
        const auto st = r.wait(20s);
        REQUIRE(st.has_value());
        INFO(r.output());
        CHECK(exit_code(*st) == 1);
        if (has_line(r, "init 13") &&
            r.output().find("is a symlink or not a directory; refusing it") != std::string::npos)
            ++refused;
    }
    CHECK(refused == 20);
    REQUIRE(flipper.wait(20s).has_value());
    REQUIRE(fake.wait(20s).has_value());
    INFO(fake.output() << flipper.output());
    CHECK(has_line(flipper, "flips "));
    // Not one byte reached the fake daemon, and nothing was stored.
    CHECK(has_line(fake, "connections 0 bytes 0"));
    CHECK_FALSE(exists(c.store() + "/itest"));
}

TEST_CASE("a rank never sends anything to a daemon of another user", "[security][peer-uid]")
{
    require_root();
    cluster c;
    const std::string pub = public_dir(c, "pub");
    auto fake = c.run(as_nobody({build_path("IOFWD_TEST_STRANGER"), "fake-daemon",
                                 pub + "/s.sock", "8"}));
    REQUIRE(wait_until([&] { return has_line(fake, "listening"); }, 10s));
    // The fake daemon's socket ends up at the session's path in root's own
    // runtime directory (a mistake, or a socket handed over): the directory
    // passes its checks, the peer's credentials do not.
    REQUIRE(::mkdir(c.runtime_dir().c_str(), 0700) == 0);
    REQUIRE(::rename((pub + "/s.sock").c_str(), c.socket().c_str()) == 0);
    auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_LAUNCH_TIMEOUT", "3"}});
    const auto st = r.wait(20s);
    REQUIRE(st.has_value());
    INFO(r.output());
    CHECK(exit_code(*st) == 1);
    CHECK(has_line(r, "init 13"));
    CHECK(r.output().find("belongs to uid 65534, not to you (uid 0): refusing to hand it "
                          "anything") != std::string::npos);
    REQUIRE(fake.wait(20s).has_value());
    INFO(fake.output());
    CHECK(has_line(fake, "connections 1 bytes 0"));
}

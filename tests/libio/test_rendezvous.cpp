#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "errors.hpp"
#include "process.hpp"
#include "rendezvous.hpp"

using namespace iofwd;

TEST_CASE("the runtime directory is created private and refused when others can write it",
          "[rendezvous]")
{
    test::temp_dir tmp;
    const std::string dir = tmp / "rt";
    ::setenv("IOFWD_RUNTIME_DIR", dir.c_str(), 1);
    std::string out, why;
    REQUIRE_FALSE(prepare_runtime_dir(out, why));
    CHECK(out == dir);
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);

    ::chmod(dir.c_str(), 0777);
    CHECK(prepare_runtime_dir(out, why) == errc::permission_denied);
    CHECK(why.find("writable by others") != std::string::npos);
    ::unsetenv("IOFWD_RUNTIME_DIR");
}

TEST_CASE("session paths fit a socket address even for long names", "[rendezvous]")
{
    const auto p = paths_for("/tmp/x", "node-1-1234");
    CHECK(p.socket == "/tmp/x/node-1-1234.sock");
    CHECK(p.lock == "/tmp/x/node-1-1234.lock");
    const auto q = paths_for("/tmp/x", std::string(300, 'a'));
    CHECK(q.socket.size() < 108);
    CHECK(q.session != std::string(300, 'a'));
    CHECK(paths_for("/tmp/x", "a/b").session == "a_b");
}

TEST_CASE("names usable in the store are checked", "[rendezvous]")
{
    CHECK(valid_name("job-1.v2_x"));
    CHECK_FALSE(valid_name(""));
    CHECK_FALSE(valid_name(".hidden"));
    CHECK_FALSE(valid_name("a/b"));
    CHECK_FALSE(valid_name("a b"));
}

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>

#include "errors.hpp"
#include "process.hpp"
#include "rendezvous.hpp"

using namespace iofwd;

namespace {

// IOFWD_RUNTIME_DIR for one test case.
struct runtime_env {
    explicit runtime_env(const std::string& dir) { ::setenv("IOFWD_RUNTIME_DIR", dir.c_str(), 1); }
    ~runtime_env() { ::unsetenv("IOFWD_RUNTIME_DIR"); }
};

}  // namespace

TEST_CASE("the runtime directory is created private and refused when others can write it",
          "[rendezvous]")
{
    test::temp_dir tmp;
    const std::string dir = tmp / "rt";
    runtime_env env(dir);
    runtime_paths p;
    std::string why;
    REQUIRE_FALSE(open_runtime("s", p, why));
    CHECK(p.dir == dir);
    CHECK(p.socket == dir + "/s.sock");
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);

    ::chmod(dir.c_str(), 0777);
    CHECK(open_runtime("s", p, why) == errc::permission_denied);
    CHECK(why.find("writable by others") != std::string::npos);
}

TEST_CASE("a symlink at the runtime path is refused, and files in it are reached by descriptor",
          "[rendezvous]")
{
    test::temp_dir tmp;
    const std::string real = tmp / "real", link = tmp / "rt";
    REQUIRE(::mkdir(real.c_str(), 0700) == 0);
    REQUIRE(::symlink(real.c_str(), link.c_str()) == 0);
    runtime_env env(link);
    runtime_paths p;
    std::string why;
    CHECK(open_runtime("s", p, why) == errc::permission_denied);
    CHECK(why.find("is a symlink or not a directory") != std::string::npos);

    // Opened, then the path is swapped for a symlink to another directory:
    // the session's files still land in the directory that was checked.
    REQUIRE(::unlink(link.c_str()) == 0);
    REQUIRE(::mkdir(link.c_str(), 0700) == 0);
    REQUIRE_FALSE(open_runtime("s", p, why));
    REQUIRE(::rename(link.c_str(), (tmp / "moved").c_str()) == 0);
    REQUIRE(::symlink(real.c_str(), link.c_str()) == 0);
    unique_fd lock;
    REQUIRE_FALSE(open_runtime_file(p, p.lock_name, O_RDWR | O_CREAT, lock, why));
    CHECK(test::exists(tmp / "moved/s.lock"));
    CHECK_FALSE(test::exists(real + "/s.lock"));

    // A symlink or a FIFO planted in place of a session file is refused.
    REQUIRE(::symlink("/etc/passwd", (tmp / "moved/s.log").c_str()) == 0);
    unique_fd log;
    CHECK(open_runtime_file(p, p.log_name, O_WRONLY | O_APPEND, log, why) ==
          errc::permission_denied);
    CHECK(why.find("is a symlink") != std::string::npos);
    REQUIRE(::mkfifo((tmp / "moved/x.lock").c_str(), 0600) == 0);
    CHECK(open_runtime_file(p, "x.lock", O_RDWR, log, why) == errc::permission_denied);
    CHECK(why.find("not a regular file") != std::string::npos);
}

TEST_CASE("session paths fit a socket address even for long names", "[rendezvous]")
{
    test::temp_dir tmp;
    runtime_env env(tmp / "rt");
    runtime_paths p, q, r;
    std::string why;
    REQUIRE_FALSE(open_runtime("node-1-1234", p, why));
    CHECK(p.socket == tmp / "rt/node-1-1234.sock");
    CHECK(p.lock == tmp / "rt/node-1-1234.lock");
    CHECK(p.socket_via() == fmt::format("/proc/self/fd/{}/node-1-1234.sock", p.dir_fd->get()));
    REQUIRE_FALSE(open_runtime(std::string(300, 'a'), q, why));
    CHECK(q.socket_via().size() < 108);
    CHECK(q.session != std::string(300, 'a'));
    REQUIRE_FALSE(open_runtime("a/b", r, why));
    CHECK(r.session == "a_b");
}

TEST_CASE("names usable in the store are checked", "[rendezvous]")
{
    CHECK(valid_name("job-1.v2_x"));
    CHECK_FALSE(valid_name(""));
    CHECK_FALSE(valid_name(".hidden"));
    CHECK_FALSE(valid_name("a/b"));
    CHECK_FALSE(valid_name("a b"));
}

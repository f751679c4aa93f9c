#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>

#include "process.hpp"
#include "runtime_gc.hpp"

using namespace iofwd;

namespace {

struct runtime_dir {
    test::temp_dir tmp;
    runtime_paths paths;
    runtime_dir()
    {
        ::setenv("IOFWD_RUNTIME_DIR", (tmp / "rt").c_str(), 1);
        std::string why;
        REQUIRE_FALSE(open_runtime("cleaner", paths, why));
        ::unsetenv("IOFWD_RUNTIME_DIR");
    }
    std::string operator/(const std::string& name) const { return paths.dir + "/" + name; }

    void file(const std::string& name, long age_s = 0) const
    {
        const int fd = ::open((*this / name).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
        REQUIRE(fd >= 0);
        ::close(fd);
        age(name, age_s);
    }
    void age(const std::string& name, long age_s) const
    {
        timespec t[2]{};
        ::clock_gettime(CLOCK_REALTIME, &t[0]);
        t[0].tv_sec -= age_s;
        t[1] = t[0];
        REQUIRE(::utimensat(AT_FDCWD, (*this / name).c_str(), t, AT_SYMLINK_NOFOLLOW) == 0);
    }
    // A socket file as a dead daemon leaves it: bound, nobody listening.
    void socket(const std::string& name) const
    {
        const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        const std::string path = *this / name;
        REQUIRE(path.size() < sizeof a.sun_path);
        std::strcpy(a.sun_path, path.c_str());
        REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
        ::close(s);
    }
    // Holds the session's lock as its daemon would, until destroyed.
    unique_fd hold(const std::string& session) const
    {
        unique_fd fd(::open((*this / (session + ".lock")).c_str(), O_RDWR | O_CREAT, 0600));
        REQUIRE(fd);
        REQUIRE(::flock(fd.get(), LOCK_EX | LOCK_NB) == 0);
        return fd;
    }
    bool has(const std::string& name) const
    {
        struct stat st {};
        return ::lstat((*this / name).c_str(), &st) == 0;
    }
};

// One cleaning of `d`: logs kept `age_s` seconds, the newest `keep` always.
runtime_gc_report clean(const runtime_dir& d, long age_s, std::size_t keep, bool dry_run = false)
{
    runtime_gc_policy policy;
    policy.log_age = std::chrono::seconds(age_s);
    policy.keep_logs = keep;
    policy.dry_run = dry_run;
    runtime_gc_report r;
    std::string why;
    REQUIRE_FALSE(runtime_gc(d.paths, policy, r, why));
    return r;
}

std::map<std::string, gc_action> actions(const runtime_gc_report& r)
{
    std::map<std::string, gc_action> m;
    for (const auto& e : r.entries)
        m[e.name] = e.action;
    return m;
}

}  // namespace

TEST_CASE("finished sessions lose lock and socket, keep a young log; live ones keep everything",
          "[runtime-gc]")
{
    runtime_dir d;
    const auto live = d.hold("live");
    d.socket("live.sock");
    d.file("live.log", 7 * 86400);
    d.file("done.lock");
    d.socket("done.sock");
    d.file("done.log", 60);
    d.file("old.log", 7200);  // its lock file went in an earlier cleaning

    const auto r = clean(d, 3600, 0);
    const auto a = actions(r);
    CHECK(a.size() == 7);
    CHECK(a.at("live.lock") == gc_action::kept_live);
    CHECK(a.at("live.sock") == gc_action::kept_live);
    CHECK(a.at("live.log") == gc_action::kept_live);
    CHECK(a.at("done.lock") == gc_action::removed);
    CHECK(a.at("done.sock") == gc_action::removed);
    CHECK(a.at("done.log") == gc_action::kept_young);
    CHECK(a.at("old.log") == gc_action::removed);
    CHECK(r.removed == 3);
    CHECK(r.kept == 4);
    CHECK(d.has("live.lock"));
    CHECK(d.has("live.sock"));
    CHECK(d.has("live.log"));
    CHECK_FALSE(d.has("done.lock"));
    CHECK_FALSE(d.has("done.sock"));
    CHECK(d.has("done.log"));
    CHECK_FALSE(d.has("old.log"));
    CHECK_FALSE(d.has("old.lock"));  // the lock taken to remove it went too
    // The live daemon still holds the lock of the file at the path.
    struct stat held {}, there {};
    REQUIRE(::fstat(live.get(), &held) == 0);
    REQUIRE(::stat((d / "live.lock").c_str(), &there) == 0);
    CHECK(held.st_ino == there.st_ino);
}

TEST_CASE("the newest logs of finished sessions stay whatever their age", "[runtime-gc]")
{
    runtime_dir d;
    for (int i = 0; i < 12; ++i)
        d.file("job" + std::to_string(i) + ".log", 86400 + 100 * (12 - i));  // job11 newest
    const auto r = clean(d, 0, 8);
    for (int i = 0; i < 12; ++i) {
        INFO(i);
        CHECK(d.has("job" + std::to_string(i) + ".log") == (i >= 4));
    }
    CHECK(r.removed == 4);
    CHECK(actions(r).at("job4.log") == gc_action::kept_newest);
}

TEST_CASE("only regular files and sockets of ours with a session's name are touched",
          "[runtime-gc]")
{
    runtime_dir d;
    d.file("target.txt");
    REQUIRE(::symlink((d / "target.txt").c_str(), (d / "evil.log").c_str()) == 0);
    REQUIRE(::symlink((d / "target.txt").c_str(), (d / "evil.lock").c_str()) == 0);
    REQUIRE(::mkfifo((d / "fifo.sock").c_str(), 0600) == 0);
    REQUIRE(::mkdir((d / "dir.log").c_str(), 0700) == 0);
    d.file("notes.txt", 86400);
    d.file(".hidden.log", 86400);
    // A session with one odd file: none of its files is removed.
    d.file("mixed.lock");
    REQUIRE(::mkfifo((d / "mixed.sock").c_str(), 0600) == 0);
    d.file("theirs.log", 86400);
    const bool root = ::geteuid() == 0;
    if (root)
        REQUIRE(::chown((d / "theirs.log").c_str(), 65534, 65534) == 0);
    const auto r = clean(d, 0, 0);
    const auto a = actions(r);
    for (const char* name : {"evil.log", "evil.lock", "fifo.sock", "dir.log", "mixed.lock",
                             "mixed.sock"}) {
        INFO(name);
        CHECK(a.at(name) == gc_action::ignored);
        CHECK(d.has(name));
    }
    CHECK(d.has("target.txt"));
    CHECK(d.has("notes.txt"));
    CHECK(d.has(".hidden.log"));
    CHECK(a.count("notes.txt") == 0);
    CHECK(a.count(".hidden.log") == 0);
    if (root) {
        CHECK(a.at("theirs.log") == gc_action::ignored);
        CHECK(d.has("theirs.log"));
        for (const auto& e : r.entries)
            if (e.name == "theirs.log")
                CHECK(e.reason == "belongs to uid 65534");
    }
    for (const auto& e : r.entries)
        if (e.name == "evil.log")
            CHECK(e.reason == "a symlink");
}

TEST_CASE("a dry run decides the same and removes nothing", "[runtime-gc]")
{
    runtime_dir d;
    d.file("done.lock");
    d.socket("done.sock");
    d.file("done.log", 7200);
    const auto r = clean(d, 3600, 0, true);
    CHECK(r.removed == 3);
    CHECK(d.has("done.lock"));
    CHECK(d.has("done.sock"));
    CHECK(d.has("done.log"));
}

TEST_CASE("a session lock is only ever held on the file at its path", "[runtime-gc]")
{
    runtime_dir d;
    const auto sp = session_paths(d.paths, "s");
    unique_fd first;
    bool held = false;
    std::string why;
    REQUIRE_FALSE(try_lock_session(sp, first, held, why));
    REQUIRE(held);
    // Someone else's attempt fails while it is held.
    unique_fd second;
    REQUIRE_FALSE(try_lock_session(sp, second, held, why));
    CHECK_FALSE(held);
    CHECK_FALSE(second);
    // A cleaner removed the file while holding it: the next taker gets the
    // lock of a new file at the path, not of the removed one.
    REQUIRE(::unlink(sp.lock.c_str()) == 0);
    first.reset();
    REQUIRE_FALSE(try_lock_session(sp, second, held, why));
    CHECK(held);
    struct stat mine {}, there {};
    REQUIRE(::fstat(second.get(), &mine) == 0);
    REQUIRE(::stat(sp.lock.c_str(), &there) == 0);
    CHECK(mine.st_ino == there.st_ino);
}

// Another user on the same node, as an attacker would act: real processes of
// uid 65534 (setpriv), a real symlink flipper, a real fake daemon. Needs root
// to switch users; without it these tests fail, saying so.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstring>

#include "pattern.hpp"

#include "fixture.hpp"

using namespace test;

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
    auto fake = stranger_at_socket(c, "8");
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

TEST_CASE("a store another user made, or that others can write, is refused in words",
          "[security][store-owner]")
{
    require_root();
    cluster c;
    const std::string pub = public_dir(c, "pub");
    // The attacker made the store (0777) where the root job runs, and
    // planted a version there.
    const std::string store = pub + "/iofwd-store";
    auto mk = c.run(as_nobody({"/bin/sh", "-c",
                               "mkdir -m 777 " + store + " && mkdir -m 777 " + store +
                                   "/itest && mkdir " + store + "/itest/v00000001 && "
                                   "echo planted > " + store + "/itest/v00000001/COMPLETE"}));
    REQUIRE(mk.wait(10s).has_value());
    REQUIRE(exists(store + "/itest/v00000001/COMPLETE"));
    auto r = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_STORE", store}});
    auto st = r.wait(30s);
    REQUIRE(st.has_value());
    INFO(r.output());
    CHECK(exit_code(*st) == 1);
    CHECK(has_line(r, "init 13"));  // EACCES, the daemon's cause
    CHECK(r.output().find("store directory " + store + " belongs to uid 65534, not to you") !=
          std::string::npos);
    // The restart side: io_latest refuses the store too, rather than reading it.
    auto probe = c.rank(0, 1, {"--latest-only"}, {{"IOFWD_STORE", store}});
    st = probe.wait(30s);
    REQUIRE(st.has_value());
    INFO(probe.output());
    CHECK(has_line(probe, "latest 13 "));

    // Root's own store, but a job directory inside it that another user owns
    // (made while the store was open to all), or that is world-writable.
    const std::string mine = c.tmp / "mine";
    REQUIRE(::mkdir(mine.c_str(), 0777) == 0);
    REQUIRE(::chmod(mine.c_str(), 0777) == 0);
    auto mk2 = c.run(as_nobody({"/bin/mkdir", "-m", "755", mine + "/itest"}));
    REQUIRE(mk2.wait(10s).has_value());
    REQUIRE(::chmod(mine.c_str(), 0700) == 0);
    auto r2 = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_STORE", mine}});
    st = r2.wait(30s);
    REQUIRE(st.has_value());
    INFO(r2.output());
    CHECK(exit_code(*st) == 1);
    CHECK(r2.output().find(mine + "/itest belongs to uid 65534, not to you") != std::string::npos);
    REQUIRE(::chmod(mine.c_str(), 0755) == 0);
    REQUIRE(::rmdir((mine + "/itest").c_str()) == 0);
    REQUIRE(::mkdir((mine + "/itest").c_str(), 0777) == 0);
    REQUIRE(::chmod((mine + "/itest").c_str(), 0777) == 0);
    auto r3 = c.rank(0, 1, {"--size", "4096", "--versions", "1"}, {{"IOFWD_STORE", mine}});
    st = r3.wait(30s);
    REQUIRE(st.has_value());
    INFO(r3.output());
    CHECK(exit_code(*st) == 1);
    CHECK(r3.output().find(mine + "/itest is writable by others (mode 777)") != std::string::npos);
}

TEST_CASE("checkpoints are private: directories 0700 and objects 0600", "[security][store-modes]")
{
    cluster c;
    c.unpacked();
    auto r = c.rank(0, 1, {"--size", "70000", "--versions", "2"});
    const auto st = r.wait(30s);
    REQUIRE(st.has_value());
    REQUIRE(exit_code(*st) == 0);
    auto mode = [](const std::string& p) {
        struct stat s {};
        REQUIRE(::lstat(p.c_str(), &s) == 0);
        return s.st_mode & 07777;
    };
    CHECK(mode(c.store()) == 0700);
    CHECK(mode(c.store() + "/itest") == 0700);
    CHECK(mode(c.store() + "/itest/v00000001") == 0700);
    CHECK(mode(c.store() + "/itest/v00000001/nodeA.r0000") == 0600);
    CHECK(mode(c.store() + "/itest/v00000001/nodeA.manifest") == 0600);
    CHECK(mode(c.store() + "/itest/v00000001/COMPLETE") == 0600);
    // For a group that must read them, on request.
    cluster g;
    auto rg = g.rank(0, 1, {"--size", "70000", "--versions", "1"}, {{"IOFWD_STORE_SHARE", "group"}});
    const auto sg = rg.wait(30s);
    REQUIRE(sg.has_value());
    REQUIRE(exit_code(*sg) == 0);
    CHECK(mode(g.store() + "/itest/v00000001") == 0750);
    CHECK(mode(g.store() + "/itest/v00000001/nodeA.r0000") == 0640);
}

TEST_CASE("a version directory copied to a new number is not that version",
          "[security][copied-version]")
{
    cluster c;
    c.unpacked();
    auto r = c.rank(0, 1, {"--size", "70000", "--versions", "4"});
    auto st = r.wait(30s);
    REQUIRE(st.has_value());
    REQUIRE(exit_code(*st) == 0);
    auto cp = c.run({"/bin/cp", "-a", c.store() + "/itest/v00000004", c.store() + "/itest/v00000005"});
    REQUIRE(cp.wait(10s).has_value());
    REQUIRE(exists(c.store() + "/itest/v00000005/COMPLETE"));
    auto probe = c.rank(0, 1, {"--size", "70000", "--versions", "0", "--probe", "5"});
    st = probe.wait(30s);
    REQUIRE(st.has_value());
    INFO(probe.output());
    CHECK(has_line(probe, "latest 0 4"));
    CHECK(has_line(probe, "verified 0 4"));
    CHECK(has_line(probe, "read 74 "));  // EBADMSG: not version 5's
    CHECK(probe.output().find("is the record of job itest version 4, not of job itest version 5") !=
          std::string::npos);
}

TEST_CASE("a FIFO named like a record or object never blocks a reader", "[security][fifo]")
{
    // Unpacked: the FIFOs take the names of a version's own records.
    cluster c;
    c.unpacked();
    auto r = c.rank(0, 1, {"--size", "70000", "--versions", "2"});
    auto st = r.wait(30s);
    REQUIRE(st.has_value());
    REQUIRE(exit_code(*st) == 0);
    // A newer "version" whose record is a FIFO, and version 2's manifest
    // replaced by one.
    REQUIRE(::mkdir((c.store() + "/itest/v00000009").c_str(), 0700) == 0);
    REQUIRE(::mkfifo((c.store() + "/itest/v00000009/COMPLETE").c_str(), 0600) == 0);
    const std::string manifest2 = c.store() + "/itest/v00000002/nodeA.manifest";
    REQUIRE(::unlink(manifest2.c_str()) == 0);
    REQUIRE(::mkfifo(manifest2.c_str(), 0600) == 0);
    auto probe = c.rank(0, 1, {"--size", "70000", "--versions", "0", "--probe", "2"});
    st = probe.wait(20s);
    REQUIRE(st.has_value());
    INFO(probe.output());
    CHECK(has_line(probe, "latest 0 1"));
    CHECK(has_line(probe, "verified 0 1"));
    CHECK(has_line(probe, "read 74 "));
    CHECK(probe.output().find("is a FIFO, not a regular file") != std::string::npos);
    std::string out;
    const int rc = c.verify(1, 1, out);
    INFO(out);
    CHECK(rc != 0);  // version 2 is damaged now, and said so; nothing blocked
}

TEST_CASE("a process of the same user cannot push bytes into another rank's write",
          "[security][forged-push]")
{
    // The attacker is admitted as a rank is (same uid, the job's other
    // rank), learns its own session's name from ACCEPT and pushes chunks
    // naming the sessions around it for the first cookies, before the
    // victim announces its write: were the names to follow each other, the
    // victim's write would adopt the attacker's bytes.
    cluster c;
    c.unpacked();
    auto d = c.daemon();
    // (The victim's 1 MiB pushed, not copied into its mailbox.)
    const std::map<std::string, std::string> push{{"IOFWD_PULL", "push"},
                                                  {"IOFWD_EAGER_LIMIT", "64K"}};
    auto victim = c.rank(0, 2, {"--size", "1048576", "--versions", "1", "--go-file", gate(c),
                                "--skip-finalize"},
                         push);
    REQUIRE(wait_until([&] { return has_line(victim, "init 0"); }, 20s));
    auto attacker = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "forge-push"});
    REQUIRE(wait_until([&] { return has_line(attacker, "pushed ") || !attacker.running(); }, 20s));
    INFO("attacker: " << attacker.output());
    REQUIRE(has_line(attacker, "pushed "));
    unsigned pushed = 0, pullers = 0;
    REQUIRE(std::sscanf(attacker.output().c_str(), "pushed %u to %u pullers", &pushed,
                        &pullers) == 2);
    CHECK(pushed == 4 * 2 * 8 * pullers);  // distances x sides x cookies x pullers
    // Every forged chunk reached the daemon, and was refused, before the
    // victim announces its write (the log counts them at powers of two:
    // 128 with the default 2 pullers).
    INFO("log:\n" << c.log());
    REQUIRE(std::has_single_bit(pushed));
    REQUIRE(wait_until(
        [&] {
            return c.log().find(std::to_string(pushed) + " pushed chunks named no session") !=
                   std::string::npos;
        },
        20s));
    open_gate(c);
    REQUIRE(wait_until([&] { return has_line(victim, "skipped"); }, 30s));
    INFO(victim.output() << "\nlog:\n" << c.log());
    CHECK(has_line(victim, "write 0 0 1 "));
    REQUIRE(attacker.wait(20s).has_value());
    INFO("attacker at the end: " << attacker.output());
    // The victim's object holds its own bytes (the job's other rank never
    // writes, so the version is not complete: the object is what counts).
    const std::string object = c.store() + "/itest/v00000001/nodeA.r0000";
    REQUIRE(wait_until([&] { return exists(object); }, 20s));
    std::vector<std::byte> expected(1 << 20);
    example::fill_pattern(expected.data(), expected.size(), example::pattern_seed("nodeA", 0, 1));
    const auto stored = read_file(object);
    REQUIRE(stored.size() == expected.size());
    CHECK(std::memcmp(stored.data(), expected.data(), expected.size()) == 0);
    REQUIRE(d.running());
    victim.signal(SIGKILL);
    CHECK(victim.wait(10s).has_value());
    d.signal(SIGTERM);
    CHECK(d.wait(10s).has_value());
}

TEST_CASE("a chunk pushed three times is received once, the doubles refused",
          "[security][repeat-push]")
{
    // The daemon posts where each chunk of a pushed write goes as soon as
    // it has the slot, and the puller a chunk reaches takes that claim at
    // once (iod/chunk_claims.hpp). A rank that pushes a chunk again, to
    // another puller and to the same, must not have two received into one
    // slot, nor one counted twice (the write would then end with a chunk
    // missing, or never): one is taken, the others refused, and the version
    // is the bytes sent.
    cluster c;
    c.unpacked();
    auto d = c.daemon();
    auto peer = c.run({build_path("IOFWD_TEST_RAW_PEER"), c.socket(), "repeat-push"});
    REQUIRE(peer.wait(30s).has_value());
    INFO("peer: " << peer.output() << "\nlog:\n" << c.log());
    REQUIRE(has_line(peer, "answer WRITE_DONE version 1"));
    CHECK(has_line(peer, "finished 1 versions"));
    CHECK((c.log().find("pushed twice: refused") != std::string::npos ||
           c.log().find("that is not one of write 1's") != std::string::npos));
    const std::string object = c.store() + "/itest/v00000001/nodeA.r0000";
    REQUIRE(wait_until([&] { return exists(object); }, 20s));
    unsigned long long chunk = 0;
    REQUIRE(std::sscanf(peer.output().c_str(), "pushed 4 chunks of %llu bytes", &chunk) == 1);
    const auto stored = read_file(object);
    REQUIRE(stored.size() == 2 * chunk);
    bool same = true;
    for (std::size_t i = 0; i < stored.size() && same; ++i)
        same = static_cast<unsigned char>(stored[i]) == i % 251;
    CHECK(same);
    REQUIRE(d.running());
    d.signal(SIGTERM);
    CHECK(d.wait(10s).has_value());
}

// The order of a forwarded file's writes (iod/files.hpp): a write that
// overlaps one in flight waits for it, waiting writes keep their order, and
// when_idle runs once nothing is in flight or waiting; a write's runs take
// its bytes in order.
#include "files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

using iofwd::iod::forwarded_file;
using iofwd::unique_fd;

namespace {

forwarded_file::runs span(std::uint64_t offset, std::uint64_t length)
{
    return forwarded_file::one_run(offset, length);
}

forwarded_file::runs list(std::vector<iofwd::proto::file_run> runs)
{
    return std::make_shared<const std::vector<iofwd::proto::file_run>>(std::move(runs));
}

struct journal {
    std::vector<std::string> events;
    std::function<void()> note(std::string what)
    {
        return [this, what = std::move(what)] { events.push_back(what); };
    }
};

}  // namespace

TEST_CASE("writes that do not overlap start at once", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.submit(span(0, 100), j.note("a"));
    f.submit(span(100, 100), j.note("b"));  // adjacent, not overlapping
    f.submit(span(1000, 1), j.note("c"));
    CHECK(j.events == std::vector<std::string>{"a", "b", "c"});
    CHECK_FALSE(f.idle());
}

TEST_CASE("an overlapping write waits for the one in flight, then starts", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    const auto a = span(0, 100), b = span(99, 10);  // one byte in common
    f.submit(a, j.note("a"));
    f.submit(b, j.note("b"));
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(a);
    CHECK(j.events == std::vector<std::string>{"a", "b"});
    f.finished(b);
    CHECK(f.idle());
}

TEST_CASE("interleaved run lists go side by side; one shared byte makes a write wait",
          "[files]")
{
    // Two ranks' columns of the same rows: 8 bytes of each 16.
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    const auto a = list({{0, 8}, {16, 8}, {32, 8}});
    const auto b = list({{8, 8}, {24, 8}, {40, 8}});
    const auto d = list({{47, 1}, {200, 1}});  // b's last byte
    f.submit(a, j.note("a"));
    f.submit(b, j.note("b"));
    CHECK(j.events == std::vector<std::string>{"a", "b"});
    f.submit(d, j.note("d"));
    CHECK(j.events == std::vector<std::string>{"a", "b"});
    f.finished(b);
    CHECK(j.events == std::vector<std::string>{"a", "b", "d"});
}

TEST_CASE("waiting writes keep their order, even one that overlaps nothing", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    const auto a = span(0, 10), b = span(5, 10), c = span(500, 10), d = span(505, 10);
    f.submit(a, j.note("a"));
    f.submit(b, j.note("b"));  // waits for a
    f.submit(c, j.note("c"));  // overlaps nothing, but b waits before it
    f.submit(d, j.note("d"));  // overlaps c
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(a);
    // b starts; c may start beside it; d waits for c.
    CHECK(j.events == std::vector<std::string>{"a", "b", "c"});
    f.finished(c);
    CHECK(j.events == std::vector<std::string>{"a", "b", "c", "d"});
}

TEST_CASE("when_idle runs at once on an idle file, else after the last write", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.when_idle(j.note("idle 1"));
    CHECK(j.events == std::vector<std::string>{"idle 1"});
    const auto a = span(0, 10), b = span(0, 10);
    f.submit(a, j.note("a"));
    f.submit(b, j.note("b"));  // the same range again: waits
    f.when_idle(j.note("idle 2"));
    f.finished(a);
    CHECK(j.events == std::vector<std::string>{"idle 1", "a", "b"});
    f.finished(b);
    CHECK(j.events == std::vector<std::string>{"idle 1", "a", "b", "idle 2"});
    CHECK(f.idle());
}

TEST_CASE("finishing a write that is not in flight changes nothing", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    const auto a = span(0, 10), b = span(0, 5);
    f.submit(a, j.note("a"));
    f.submit(b, j.note("b"));
    f.finished(b);  // b never started: a is still in flight
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(a);
    CHECK(j.events == std::vector<std::string>{"a", "b"});
}

TEST_CASE("a write's stream fills its runs in order, whatever pieces it comes in", "[files]")
{
    char name[] = "/tmp/iofwd-files-XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    forwarded_file f(name, unique_fd(fd), unique_fd{});
    // 10 bytes over three runs with holes; written in pieces that cross runs.
    const auto runs = list({{2, 3}, {8, 1}, {12, 6}});
    auto w = f.writer(runs);
    const std::string stream = "ABCDEFGHIJ";
    const auto piece = [&](std::size_t at, std::size_t n) {
        return std::as_bytes(std::span(stream.data() + at, n));
    };
    CHECK_FALSE(w->write_at(piece(0, 4), 0));   // runs 1 and 2
    CHECK_FALSE(w->write_staged(piece(6, 4), 6, 0));  // the end of run 3
    CHECK_FALSE(w->write_at(piece(4, 2), 4));   // the start of run 3
    std::string got(18, '?');
    REQUIRE(::pread(fd, got.data(), got.size(), 0) == 18);
    std::string want(18, '\0');
    want.replace(2, 3, "ABC");
    want.replace(8, 1, "D");
    want.replace(12, 6, "EFGHIJ");
    CHECK(got == want);
    // A stream byte beyond the runs is a bug the writer refuses.
    CHECK(w->write_at(piece(0, 1), 10));
    ::unlink(name);
}

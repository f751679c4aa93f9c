// The order of a forwarded file's writes (iod/files.hpp): a write that
// overlaps one in flight waits for it, waiting writes keep their order, and
// when_idle runs once nothing is in flight or waiting.
#include "files.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using iofwd::iod::forwarded_file;
using iofwd::unique_fd;

namespace {

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
    f.submit(0, 100, j.note("a"));
    f.submit(100, 100, j.note("b"));  // adjacent, not overlapping
    f.submit(1000, 1, j.note("c"));
    CHECK(j.events == std::vector<std::string>{"a", "b", "c"});
    CHECK_FALSE(f.idle());
}

TEST_CASE("an overlapping write waits for the one in flight, then starts", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.submit(0, 100, j.note("a"));
    f.submit(99, 10, j.note("b"));  // one byte in common with a
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(0, 100);
    CHECK(j.events == std::vector<std::string>{"a", "b"});
    f.finished(99, 10);
    CHECK(f.idle());
}

TEST_CASE("waiting writes keep their order, even one that overlaps nothing", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.submit(0, 10, j.note("a"));
    f.submit(5, 10, j.note("b"));     // waits for a
    f.submit(500, 10, j.note("c"));   // overlaps nothing, but b waits before it
    f.submit(505, 10, j.note("d"));   // overlaps c
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(0, 10);
    // b starts; c may start beside it; d waits for c.
    CHECK(j.events == std::vector<std::string>{"a", "b", "c"});
    f.finished(500, 10);
    CHECK(j.events == std::vector<std::string>{"a", "b", "c", "d"});
}

TEST_CASE("when_idle runs at once on an idle file, else after the last write", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.when_idle(j.note("idle 1"));
    CHECK(j.events == std::vector<std::string>{"idle 1"});
    f.submit(0, 10, j.note("a"));
    f.submit(0, 10, j.note("b"));  // the same range again: waits
    f.when_idle(j.note("idle 2"));
    f.finished(0, 10);
    CHECK(j.events == std::vector<std::string>{"idle 1", "a", "b"});
    f.finished(0, 10);
    CHECK(j.events == std::vector<std::string>{"idle 1", "a", "b", "idle 2"});
    CHECK(f.idle());
}

TEST_CASE("finishing a range that is not in flight changes nothing", "[files]")
{
    forwarded_file f("/nowhere", unique_fd{}, unique_fd{});
    journal j;
    f.submit(0, 10, j.note("a"));
    f.submit(0, 5, j.note("b"));
    f.finished(0, 5);  // b never started: a is still in flight
    CHECK(j.events == std::vector<std::string>{"a"});
    f.finished(0, 10);
    CHECK(j.events == std::vector<std::string>{"a", "b"});
}

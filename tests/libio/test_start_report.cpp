#include <catch2/catch.hpp>

#include <cerrno>

#include "start_report.hpp"

using namespace iofwd;

TEST_CASE("a daemon's start line round-trips its errno and sentence", "[start-report]")
{
    start_report r;
    REQUIRE(parse_start_line(start_ready_line(), r));
    CHECK(r.ready);

    REQUIRE(parse_start_line(start_error_line(ENOENT, "cannot create store directory /x: No such "
                                                      "file or directory"),
                             r));
    CHECK_FALSE(r.ready);
    CHECK(r.code == ENOENT);
    CHECK(r.why == "cannot create store directory /x: No such file or directory");

    // One line whatever the sentence holds; an impossible code becomes EIO.
    CHECK(start_error_line(EACCES, "two\nlines") == "error 13: two lines\n");
    CHECK(start_error_line(0, "x") == "error 5: x\n");
    CHECK(start_error_line(-2, "x") == "error 5: x\n");
    CHECK(start_error_line(5000, "") == "error 5: no reason given\n");
}

TEST_CASE("anything else on the ready descriptor is not a start line", "[start-report]")
{
    start_report r{false, 77, "untouched"};
    for (const char* bad : {"", "\n", "ready", "ready\nready\n", "readyx\n", "error: old form\n",
                            "error 0: zero\n", "error 4096: too big\n", "error -1: negative\n",
                            "error 2 no colon\n", "error 2: \n", "error x: word\n",
                            "error 99999999999999: overflow\n"}) {
        INFO(bad);
        CHECK_FALSE(parse_start_line(bad, r));
        CHECK(r.code == 77);
        CHECK(r.why == "untouched");
    }
}

// The version table (iod/version_table.hpp): a version's states, the waits
// on it, QUERY's answers, and durable_through.
#include "version_table.hpp"

#include <catch2/catch.hpp>

#include <cerrno>

#include "errors.hpp"

using iofwd::iod::version_table;
namespace proto = iofwd::proto;
using state = proto::version_state_t;

namespace {

proto::version_state_msg as_state(const std::optional<proto::message>& m)
{
    REQUIRE(m.has_value());
    REQUIRE(std::holds_alternative<proto::version_state_msg>(*m));
    return std::get<proto::version_state_msg>(*m);
}

}  // namespace

TEST_CASE("a version goes from pulling to flushing to durable", "[version-table]")
{
    version_table t;
    t.pulling(7, 4096, {}, 40);
    auto s = as_state(t.query({11, 7, 0}, 0));
    CHECK(s.cookie == 11);
    CHECK(s.version == 7);
    CHECK(s.state == state::pulling);
    CHECK(s.size == 4096);
    t.flushing(7, 90);
    CHECK(as_state(t.query({12, 7, 0}, 0)).state == state::flushing);
    t.durable(7, 0xdeadbeef, 100, 250);
    s = as_state(t.query({13, 7, 0}, 0));
    CHECK(s.state == state::durable);
    CHECK(s.crc32c == 0xdeadbeef);
    CHECK(s.flush_start_ns == 100);
    CHECK(s.durable_ns == 250);
    CHECK(t.durable_count() == 1);
    CHECK(t.durable_bytes() == 4096);
    // When it arrived and was staged: the rank's wait, for the job's summary.
    REQUIRE(t.find(7) != nullptr);
    CHECK(t.find(7)->arrived_ns == 40);
    CHECK(t.find(7)->staged_ns == 90);
}

TEST_CASE("a version nobody wrote is unknown", "[version-table]")
{
    version_table t;
    const auto s = as_state(t.query({1, 3, 1}, 0));
    CHECK(s.state == state::unknown);
    CHECK(s.size == 0);
}

TEST_CASE("a wait on a version on its way is answered when it ends", "[version-table]")
{
    version_table t;
    t.pulling(1, 10, {}, 0);
    CHECK_FALSE(t.query({21, 1, 1}, 0).has_value());  // kept
    t.flushing(1, 0);
    CHECK_FALSE(t.query({22, 1, 1}, 0).has_value());  // kept too
    CHECK(t.answer_waits(2, 0).empty());               // another version: nothing
    t.durable(1, 5, 1, 2);
    const auto answers = t.answer_waits(1, 0);
    REQUIRE(answers.size() == 2);
    CHECK(as_state(answers[0]).cookie == 21);
    CHECK(as_state(answers[1]).cookie == 22);
    CHECK(as_state(answers[1]).state == state::durable);
    CHECK(t.answer_waits(1, 0).empty());  // answered once
}

TEST_CASE("a wait on a failed version gets the failure in words", "[version-table]")
{
    version_table t;
    t.pulling(4, 10, {}, 0);
    CHECK_FALSE(t.query({31, 4, 1}, 3).has_value());
    const std::error_code full(ENOSPC, std::generic_category());
    t.failed(4, full, "the disk is full");
    const auto answers = t.answer_waits(4, 3);
    REQUIRE(answers.size() == 1);
    REQUIRE(std::holds_alternative<proto::error_msg>(answers[0]));
    const auto& e = std::get<proto::error_msg>(answers[0]);
    CHECK(e.cookie == 31);
    CHECK(e.code() == std::errc::no_space_on_device);
    CHECK(e.text == "version 4 of rank 3 could not be made durable: the disk is full");
    // Without waiting, its state says failed.
    CHECK(as_state(t.query({32, 4, 0}, 3)).state == state::failed);
    CHECK(t.durable_count() == 0);
}

TEST_CASE("a forgotten version (io_write failed) never existed", "[version-table]")
{
    version_table t;
    t.pulling(9, 10, {}, 0);
    t.forget(9);
    CHECK(as_state(t.query({41, 9, 1}, 0)).state == state::unknown);
    CHECK(t.find(9) == nullptr);
    CHECK(t.in_flight(9) == nullptr);
}

TEST_CASE("durable_through: every version from the first up to it is durable", "[version-table]")
{
    version_table t;
    t.first_version(5);
    CHECK(t.durable_through() == 4);
    for (std::uint64_t v = 5; v <= 9; ++v)
        t.pulling(v, 4096, {}, 0);
    // Out of order: 6 durable before 5 says nothing yet.
    t.durable(6, 1, 0, 1);
    CHECK(t.durable_through() == 4);
    t.journaled(5, 1, 0, 1);
    CHECK(t.durable_through() == 6);
    // A version that failed stops it, and so does one io_write failed for.
    t.failed(7, std::make_error_code(std::errc::io_error), "disk");
    t.durable(8, 1, 0, 1);
    CHECK(t.durable_through() == 6);
    version_table u;
    u.first_version(1);
    u.pulling(1, 10, {}, 0);
    u.pulling(2, 10, {}, 0);
    u.forget(1);
    u.durable(2, 1, 0, 1);
    CHECK(u.durable_through() == 0);
}

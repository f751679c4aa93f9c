#include <catch2/catch.hpp>

#include <cerrno>

#include <fmt/format.h>

#include "errors.hpp"
#include "format.hpp"

using namespace iofwd;

TEST_CASE("runtime errors map to the documented errno values", "[errors]")
{
    CHECK(to_errno({}) == 0);
    CHECK(to_errno(errc::not_initialized) == ENOTCONN);
    CHECK(to_errno(errc::already_initialized) == EALREADY);
    CHECK(to_errno(errc::invalid_argument) == EINVAL);
    CHECK(to_errno(errc::too_large) == EFBIG);
    CHECK(to_errno(errc::daemon_gone) == ECONNRESET);
    CHECK(to_errno(errc::daemon_timeout) == ETIMEDOUT);
    CHECK(to_errno(errc::protocol_error) == EPROTO);
    CHECK(to_errno(errc::permission_denied) == EACCES);
    CHECK(to_errno(errc::corrupt) == EBADMSG);
    CHECK(to_errno(std::error_code(ENOSPC, std::system_category())) == ENOSPC);
    CHECK(to_errno(make_ucx_error(UCS_ERR_NO_MEMORY)) == ENOMEM);
    CHECK(to_errno(make_ucx_error(UCS_ERR_CONNECTION_RESET)) == ECONNRESET);
}

TEST_CASE("categories have short names and messages in words", "[errors]")
{
    CHECK(std::string(runtime_category().name()) == "iofwd");
    CHECK(std::string(ucx_category().name()) == "ucx");
    CHECK(make_error_code(errc::daemon_gone).message() == "the iod daemon went away");
    CHECK_FALSE(make_ucx_error(UCS_OK));
    CHECK(make_ucx_error(UCS_ERR_UNREACHABLE).message() == ucs_status_string(UCS_ERR_UNREACHABLE));
    CHECK(fmt::format("{}", make_error_code(errc::corrupt)) ==
          "stored data fails its checksum (iofwd:" + std::to_string(int(errc::corrupt)) + ")");
}

TEST_CASE("byte counts parse and print in binary units", "[format]")
{
    std::uint64_t v = 0;
    CHECK(parse_bytes("4096", v));
    CHECK(v == 4096);
    CHECK(parse_bytes("64K", v));
    CHECK(v == 65536);
    CHECK(parse_bytes("256MiB", v));
    CHECK(v == (256ull << 20));
    CHECK(parse_bytes("1G", v));
    CHECK(v == (1ull << 30));
    CHECK_FALSE(parse_bytes("", v));
    CHECK_FALSE(parse_bytes("M", v));
    CHECK_FALSE(parse_bytes("12Q", v));
    CHECK_FALSE(parse_bytes("99999999999999999999", v));
    CHECK_FALSE(parse_bytes("99999999999T", v));
    CHECK(human_bytes(512) == "512 B");
    CHECK(human_bytes(64ull << 20) == "64 MiB");
    CHECK(human_bytes(3ull << 29) == "1.5 GiB");
}

TEST_CASE("durations print in the unit that reads", "[format]")
{
    CHECK(human_seconds(25.4e-6) == "25 us");
    CHECK(human_seconds(0.01234) == "12.34 ms");
    CHECK(human_seconds(3.214) == "3.21 s");
    CHECK(human_seconds(125) == "2 min 5 s");
}

TEST_CASE("version lists print as ranges", "[format]")
{
    CHECK(number_ranges({}) == "none");
    CHECK(number_ranges({7}) == "7");
    CHECK(number_ranges({1, 2, 3, 5}) == "1-3, 5");
    CHECK(number_ranges({1, 3, 4, 9, 10, 11}) == "1, 3-4, 9-11");
    // Unsorted or repeated: each run as it comes, nothing dropped.
    CHECK(number_ranges({5, 1, 2, 2}) == "5, 1-2, 2");
    // Past the runs asked for, the rest counted.
    CHECK(number_ranges({1, 2, 4, 6, 7, 9}, 2) == "1-2, 4 and 3 more");
    CHECK(number_ranges({1, 2, 4}, 2) == "1-2, 4");
    CHECK(number_ranges({1, 3}, 0) == "1 and 1 more");  // one run at least
}

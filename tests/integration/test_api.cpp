// The C API used wrongly, in this very process: clear codes, no crash.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "io.h"
#include "pattern.hpp"

using namespace test;

TEST_CASE("calls out of order and bad lengths return the documented codes", "[api]")
{
    cluster c;
    for (const auto& [k, v] : c.env)
        ::setenv(k.c_str(), v.c_str(), 1);

    CHECK(io_write(10) == ENOTCONN);
    CHECK(std::string(io_last_error()).find("call io_init first") != std::string::npos);
    CHECK(io_finalize() == ENOTCONN);
    std::vector<std::byte> buf(1 << 16);
    example::fill_pattern(buf.data(), buf.size(), example::pattern_seed("nodeA", 0, 1));
    CHECK(io_init(nullptr, 10, 0, 1, nullptr, 1) == EINVAL);
    CHECK(io_init(buf.data(), 0, 0, 1, nullptr, 1) == EINVAL);
    CHECK(io_init(buf.data(), buf.size(), 2, 2, nullptr, 1) == EINVAL);
    CHECK(std::string(io_last_error()).find("rank 2 is not below ranks 2") != std::string::npos);

    REQUIRE(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == 0);
    CHECK(std::string(io_provider_name()) != "none");
    CHECK(std::string(io_node_name()) == "nodeA");
    CHECK(io_init(buf.data(), buf.size(), 0, 1, nullptr, 1) == EALREADY);
    CHECK(io_write(0) == EINVAL);
    CHECK(io_write(buf.size() + 1) == EFBIG);
    CHECK(std::string(io_last_error()).find("io_init registered 65536 bytes") != std::string::npos);
    std::uint64_t v = 0;
    CHECK(io_write_version(buf.size(), &v) == 0);
    CHECK(v == 1);
    // Two threads writing at once are serialised by the library: both
    // succeed, with distinct consecutive versions holding the same bytes.
    std::uint64_t va = 0, vb = 0;
    int ra = -1, rb = -1;
    {
        std::thread a([&] { ra = io_write_version(buf.size(), &va); });
        std::thread b([&] { rb = io_write_version(buf.size(), &vb); });
        a.join();
        b.join();
    }
    CHECK(ra == 0);
    CHECK(rb == 0);
    CHECK(std::min(va, vb) == 2);
    CHECK(std::max(va, vb) == 3);
    CHECK(io_finalize() == 0);
    CHECK(io_finalize() == ENOTCONN);
    CHECK(io_write(1) == ENOTCONN);
    CHECK(std::string(io_strerror(ECONNRESET)).size() > 0);

    for (const auto& [k, v2] : c.env)
        ::unsetenv(k.c_str());
    // All three versions hold the buffer's bytes (the pattern of version 1),
    // each complete with its manifest.
    for (const char* v : {"v00000001", "v00000002", "v00000003"}) {
        const auto stored = read_file(c.store() + "/itest/" + v + "/nodeA.r0000");
        CHECK(stored.size() == buf.size());
        CHECK(std::memcmp(stored.data(), buf.data(), buf.size()) == 0);
        CHECK(exists(c.store() + "/itest/" + v + "/nodeA.manifest"));
    }
}

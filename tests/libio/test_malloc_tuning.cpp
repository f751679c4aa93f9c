#include <catch2/catch.hpp>

#include <fmt/format.h>

#include "malloc_tuning.hpp"

using namespace iofwd;

TEST_CASE("the daemon's malloc setting is added to the tunables it inherits", "[malloc-tuning]")
{
    const std::string ours = fmt::format("glibc.malloc.tcache_count={}", daemon_tcache_count);
    CHECK(daemon_glibc_tunables(nullptr) == ours);
    CHECK(daemon_glibc_tunables("") == ours);
    // The user's other tunables stay, after it.
    CHECK(daemon_glibc_tunables("glibc.malloc.arena_max=2") == ours + ":glibc.malloc.arena_max=2");
    CHECK(daemon_glibc_tunables("glibc.malloc.arena_max=2:glibc.malloc.tcache_count_x=1") ==
          ours + ":glibc.malloc.arena_max=2:glibc.malloc.tcache_count_x=1");
}

TEST_CASE("a cache depth set already is left alone", "[malloc-tuning]")
{
    // The user's choice, anywhere in the list, stands.
    CHECK_FALSE(daemon_glibc_tunables("glibc.malloc.tcache_count=7"));
    CHECK_FALSE(daemon_glibc_tunables("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0"));
}

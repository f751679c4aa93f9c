// Where the shim puts a write through a file view (mpi_shim/file_view.hpp).
// The expected offsets are those MPI-IO gives the same views (MPI 4.0,
// 13.3: the view tiles the file with the filetype from the displacement).
#include "file_view.hpp"

#include <catch2/catch.hpp>

using iofwd::shim::file_view;

TEST_CASE("the default view is one byte per byte", "[file-view]")
{
    const file_view v;
    std::int64_t at = -1;
    REQUIRE(v.file_range(0, 10, at));
    CHECK(at == 0);
    REQUIRE(v.file_range(12345, 1 << 20, at));
    CHECK(at == 12345);
}

TEST_CASE("a displacement and a larger etype scale the offset", "[file-view]")
{
    file_view v;
    v.disp = 1000;
    v.etype_size = 8;
    v.tile_size = 8;
    v.tile_extent = 8;
    std::int64_t at = -1;
    REQUIRE(v.file_range(3, 16, at));
    CHECK(at == 1000 + 3 * 8);
    // Not a whole number of etypes: MPI-IO would write part of one.
    CHECK_FALSE(v.file_range(3, 12, at));
}

TEST_CASE("a strided filetype: each tile holds one run with a gap around it", "[file-view]")
{
    // A filetype of 8 bytes at byte 8 of each 32 (lb 0, extent 32).
    file_view v;
    v.disp = 100;
    v.tile_size = 8;
    v.tile_extent = 32;
    v.tile_lb = 8;
    std::int64_t at = -1;
    REQUIRE(v.file_range(0, 8, at));
    CHECK(at == 100 + 8);
    REQUIRE(v.file_range(8, 8, at));  // the second tile
    CHECK(at == 100 + 32 + 8);
    REQUIRE(v.file_range(10, 4, at));  // inside the second tile
    CHECK(at == 100 + 32 + 8 + 2);
    // Across a tile's end: the bytes are not contiguous in the file.
    CHECK_FALSE(v.file_range(4, 8, at));
}

TEST_CASE("an unusable view maps nothing", "[file-view]")
{
    file_view v;
    v.usable = false;
    std::int64_t at = -1;
    CHECK_FALSE(v.file_range(0, 1, at));
    CHECK(at == -1);
}

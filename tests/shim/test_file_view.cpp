// Where the shim puts a write through a file view (mpi_shim/file_view.hpp),
// from the filetype's pieces. The expected runs are where MPI-IO puts the
// same bytes (MPI 4.0, 14.3: the view tiles the file with the filetype from
// the displacement); tests/shim/test_flatten.cpp checks the pieces of real
// MPI types against MPI-IO itself.
#include "file_view.hpp"

#include <catch2/catch.hpp>

using iofwd::proto::file_run;
using iofwd::shim::file_view;

namespace {

std::vector<file_run> runs_of(const file_view& v, std::int64_t begin, std::int64_t bytes,
                              std::int64_t expect_covered, std::size_t max_runs = 1000)
{
    std::vector<file_run> out;
    CHECK(v.runs(begin, bytes, out, max_runs) == expect_covered);
    return out;
}

}  // namespace

TEST_CASE("the default view is one byte per byte", "[file-view]")
{
    const file_view v;
    CHECK(runs_of(v, 0, 10, 10) == std::vector<file_run>{{0, 10}});
    CHECK(runs_of(v, 12345, 1 << 20, 1 << 20) == std::vector<file_run>{{12345, 1 << 20}});
    CHECK(runs_of(v, 5, 0, 0).empty());
}

TEST_CASE("a displacement and a larger etype: one straight run", "[file-view]")
{
    const file_view v(1000, 8, {{0, 8}}, 8);
    CHECK(v.etype_size() == 8);
    // Offset 3 in etypes is byte 24 of the view.
    CHECK(runs_of(v, 3 * 8, 16, 16) == std::vector<file_run>{{1024, 16}});
}

TEST_CASE("a strided filetype: one run per tile, with the gaps left alone", "[file-view]")
{
    // 8 bytes at byte 8 of each 32, from byte 100 on.
    const file_view v(100, 1, {{8, 8}}, 32);
    CHECK(runs_of(v, 0, 24, 24) == std::vector<file_run>{{108, 8}, {140, 8}, {172, 8}});
    // Starting inside a tile and ending inside another.
    CHECK(runs_of(v, 4, 8, 8) == std::vector<file_run>{{112, 4}, {140, 4}});
}

TEST_CASE("pieces that touch across tiles merge into one run", "[file-view]")
{
    // 4 bytes at 0 and 4 at 12 of each 16: the second piece of a tile and the
    // first of the next touch.
    const file_view v(0, 1, {{0, 4}, {12, 4}}, 16);
    CHECK(runs_of(v, 0, 16, 16) == std::vector<file_run>{{0, 4}, {12, 8}, {28, 4}});
    CHECK(runs_of(v, 0, 24, 24) == std::vector<file_run>{{0, 4}, {12, 8}, {28, 8}, {44, 4}});
}

TEST_CASE("a filetype whose tiles overlap: the list stops before going back", "[file-view]")
{
    // 8 bytes in a tile of extent 4 (a resized type): tile 1 starts inside tile 0.
    const file_view v(0, 1, {{0, 8}}, 4);
    CHECK(runs_of(v, 0, 16, 8) == std::vector<file_run>{{0, 8}});
    // The caller goes on from where the list stopped.
    CHECK(runs_of(v, 8, 8, 8) == std::vector<file_run>{{4, 8}});
}

TEST_CASE("the list stops at its limit and says how far it got", "[file-view]")
{
    const file_view v(0, 1, {{0, 1}}, 2);  // every other byte
    CHECK(runs_of(v, 0, 10, 3, 3) == std::vector<file_run>{{0, 1}, {2, 1}, {4, 1}});
    CHECK(runs_of(v, 3, 2, 2, 3) == std::vector<file_run>{{6, 1}, {8, 1}});
}

TEST_CASE("a far tile whose offset would pass 2^63 is left to MPI-IO, not wrapped", "[file-view]")
{
    // Found by review: 64 bytes in each tile of 2^40, written at byte 2^30
    // of the view (tile 2^24): 2^24 x 2^40 wrapped to 0 and the bytes went
    // to the start of the file, where MPI-IO fails the write.
    const std::int64_t tile = std::int64_t{1} << 40;
    const file_view v(0, 1, {{0, 64}}, tile);
    CHECK(runs_of(v, (std::int64_t{1} << 22) * 64, 64, 64) ==
          std::vector<file_run>{{std::uint64_t{1} << 62, 64}});
    CHECK(runs_of(v, (std::int64_t{1} << 23) * 64, 64, 0).empty());
    CHECK(runs_of(v, (std::int64_t{1} << 24) * 64, 64, 0).empty());
    // The last tile that fits ends the list that reaches past it.
    const std::int64_t last = (INT64_MAX - 64) / tile;
    CHECK(runs_of(v, last * 64, 128, 64) ==
          std::vector<file_run>{{static_cast<std::uint64_t>(last * tile), 64}});
    // A displacement near the end: the straight view is left alone too.
    const file_view far(INT64_MAX - 10, 1, {{0, 1}}, 1);
    CHECK(runs_of(far, 0, 10, 10) ==
          std::vector<file_run>{{static_cast<std::uint64_t>(INT64_MAX - 10), 10}});
    CHECK(runs_of(far, 0, 11, 0).empty());
}

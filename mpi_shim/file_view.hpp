#pragma once
// Where a write through an MPI file view lands in the file (MPI 4.0, 14.3:
// from the displacement on, the file is tiled with the filetype; the write's
// bytes, a stream counted in etypes from the view's start, fill the
// filetype's pieces in type map order, tile after tile). The filetype comes
// here already flattened into its pieces (flatten.hpp does that with MPI's
// own type introspection); no MPI here, so that the arithmetic is tested on
// its own (tests/shim/test_file_view.cpp).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol.hpp"

namespace iofwd::shim {

// A piece of a datatype's type map: `length` bytes `disp` bytes from its origin.
struct block {
    std::int64_t disp = 0;
    std::int64_t length = 0;
    bool operator==(const block&) const = default;
};

class file_view {
public:
    // The default view: displacement 0, etype and filetype MPI_BYTE.
    file_view() = default;
    // A view whose filetype has these pieces (type map order, none empty) and
    // this extent; `etype_size` is the etype's size in bytes.
    file_view(std::int64_t disp, std::int64_t etype_size, std::vector<block> pieces,
              std::int64_t extent);

    std::int64_t etype_size() const noexcept { return etype_size_; }
    // Byte for byte the default view: from byte 0, no gaps.
    bool plain() const noexcept { return disp_ == 0 && dense_; }

    // Appends to `out` the file runs that view bytes [begin, begin + bytes)
    // go to (`begin` counted in bytes: an offset in etypes times the etype's
    // size), touching runs merged into one. It stops early, before a piece
    // that would not come after the runs already listed (a filetype may
    // repeat or overlap bytes: the caller sends what it has and goes on from
    // there, so the later byte still lands last), when `out` holds
    // `max_runs`, or before a run whose end would pass the largest file
    // offset (2^63 - 1; the caller then leaves the write to MPI-IO).
    // Returns the view bytes it covered (0 for a negative `begin`).
    std::int64_t runs(std::int64_t begin, std::int64_t bytes, std::vector<proto::file_run>& out,
                      std::size_t max_runs) const;

private:
    std::int64_t disp_ = 0;
    std::int64_t etype_size_ = 1;
    std::vector<block> pieces_{{0, 1}};
    std::vector<std::int64_t> starts_{0};  // view bytes before each piece, within a tile
    std::int64_t tile_size_ = 1;           // the filetype's size
    std::int64_t tile_extent_ = 1;
    bool dense_ = true;  // one piece at 0 filling the extent: the file is one straight run
};

}  // namespace iofwd::shim

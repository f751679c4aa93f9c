#pragma once
// Where a write through an MPI file view lands in the file, for the views the
// shim forwards today: the etype is a run of bytes, and the filetype holds one
// contiguous run of `tile_size` bytes, `tile_lb` into each `tile_extent` bytes
// of the file, from `disp` on (the default view: one byte per byte). No MPI
// here, so that the arithmetic is tested on its own (tests/shim/test_view.cpp).
#include <cstdint>

namespace iofwd::shim {

struct file_view {
    bool usable = true;  // false: a view the shim cannot map (writes go to MPI-IO)
    std::int64_t disp = 0;
    std::int64_t etype_size = 1;
    std::int64_t tile_size = 1;
    std::int64_t tile_extent = 1;
    std::int64_t tile_lb = 0;

    // The file byte of view offset `offset` (in etypes) when `bytes` from
    // there lie contiguously in the file; false when they do not (or the
    // view is not usable, or `bytes` is not a whole number of etypes).
    bool file_range(std::int64_t offset, std::int64_t bytes, std::int64_t& at) const noexcept
    {
        if (!usable || bytes % etype_size != 0)
            return false;
        const std::int64_t b = offset * etype_size;
        const std::int64_t tile = b / tile_size;
        const std::int64_t within = b % tile_size;
        const bool dense = tile_extent == tile_size && tile_lb == 0;
        if (!dense && within + bytes > tile_size)
            return false;  // it would cross into the next tile's gap
        at = disp + tile * tile_extent + tile_lb + within;
        return true;
    }
};

}  // namespace iofwd::shim

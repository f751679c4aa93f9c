#include "file_view.hpp"

#include <algorithm>

namespace iofwd::shim {

file_view::file_view(std::int64_t disp, std::int64_t etype_size, std::vector<block> pieces,
                     std::int64_t extent)
    : disp_(disp), etype_size_(etype_size), pieces_(std::move(pieces)), tile_extent_(extent)
{
    starts_.clear();
    tile_size_ = 0;
    for (const auto& p : pieces_) {
        starts_.push_back(tile_size_);
        tile_size_ += p.length;
    }
    dense_ = pieces_.size() == 1 && pieces_[0].disp == 0 && pieces_[0].length == extent;
}

std::int64_t file_view::runs(std::int64_t begin, std::int64_t bytes,
                             std::vector<proto::file_run>& out, std::size_t max_runs) const
{
    if (bytes <= 0 || begin < 0 || tile_size_ <= 0)
        return 0;
    // Appends [at, at + n) to `out`, onto the last run when it touches it;
    // false when it would not come after it, or when `out` is full.
    auto add = [&](std::int64_t at, std::int64_t n) {
        const auto start = static_cast<std::uint64_t>(at);
        if (!out.empty()) {
            auto& last = out.back();
            const std::uint64_t end = last.offset + last.length;
            if (start == end) {
                last.length += static_cast<std::uint64_t>(n);
                return true;
            }
            if (start < end)
                return false;
        }
        if (out.size() >= max_runs)
            return false;
        out.push_back({start, static_cast<std::uint64_t>(n)});
        return true;
    };
    if (dense_) {
        std::int64_t end = 0;
        if (__builtin_add_overflow(disp_, begin, &end) || __builtin_add_overflow(end, bytes, &end))
            return 0;
        return add(end - bytes, bytes) ? bytes : 0;
    }
    std::int64_t tile = begin / tile_size_;
    std::int64_t within = begin % tile_size_;
    auto i = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), within) -
                                      starts_.begin() - 1);
    std::int64_t done = 0;
    while (done < bytes) {
        const block& p = pieces_[i];
        const std::int64_t into = within - starts_[i];
        const std::int64_t n = std::min(p.length - into, bytes - done);
        // Far tiles of a wide filetype can pass the largest offset: the
        // list stops there and the caller leaves the whole write to MPI-IO,
        // which says so (the offset would wrap).
        std::int64_t at = 0;
        if (__builtin_mul_overflow(tile, tile_extent_, &at) ||
            __builtin_add_overflow(at, disp_, &at) || __builtin_add_overflow(at, p.disp, &at) ||
            __builtin_add_overflow(at, into, &at) || __builtin_add_overflow(at, n, &at) || at < n)
            break;
        if (!add(at - n, n))
            break;
        done += n;
        within += n;
        if (within == starts_[i] + p.length && ++i == pieces_.size()) {
            i = 0;
            ++tile;
            within = 0;
        }
    }
    return done;
}

}  // namespace iofwd::shim

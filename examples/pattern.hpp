#pragma once
// The bytes the checkpoint example writes: a stream that depends on the node,
// the node-local rank, the version and the offset, so the verifier can
// recompute every byte and a swapped rank, version or block is caught.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace example {

inline std::uint64_t pattern_seed(std::string_view node, std::uint32_t rank, std::uint64_t version)
{
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : node)
        h = (h ^ c) * 1099511628211ull;
    return h ^ (std::uint64_t{rank} << 40) ^ (version * 0x9e3779b97f4a7c15ull);
}

inline std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t index)
{
    std::uint64_t z = seed + index * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Fills `n` bytes that start at byte `offset` of the stream.
inline void fill_pattern(std::byte* p, std::size_t n, std::uint64_t seed, std::uint64_t offset = 0)
{
    for (std::size_t i = 0; i < n;) {
        const std::uint64_t pos = offset + i;
        const std::uint64_t w = pattern_word(seed, pos / 8);
        const std::size_t skip = pos % 8;
        const std::size_t take = (8 - skip) < (n - i) ? (8 - skip) : (n - i);
        std::memcpy(p + i, reinterpret_cast<const std::byte*>(&w) + skip, take);
        i += take;
    }
}

}  // namespace example

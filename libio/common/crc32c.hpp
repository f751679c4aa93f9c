#pragma once
// CRC-32C (Castagnoli), the checksum iofwd stores with every object.
// Uses the CPU's crc32 instruction when present (SSE4.2), a table otherwise.
#include <cstddef>
#include <cstdint>
#include <span>

namespace iofwd {

// Continues a checksum: crc32c(b, crc32c(a)) == crc32c of a followed by b.
// Start with 0.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0) noexcept;

// The checksum of A followed by B, from crc(A), crc(B) and B's length: lets
// chunks that finish out of order be checksummed independently.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) noexcept;

}  // namespace iofwd

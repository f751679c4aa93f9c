#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "crc32c.hpp"

using iofwd::crc32c;
using iofwd::crc32c_combine;

namespace {
std::span<const std::byte> bytes(std::string_view s)
{
    return std::as_bytes(std::span(s.data(), s.size()));
}
}  // namespace

TEST_CASE("crc32c matches the published check values", "[crc32c]")
{
    CHECK(crc32c(bytes("123456789")) == 0xe3069283u);
    CHECK(crc32c(bytes("")) == 0u);
    std::vector<std::byte> zeros(32, std::byte{0});
    CHECK(crc32c(zeros) == 0x8a9136aau);  // RFC 3720 B.4
    std::vector<std::byte> ones(32, std::byte{0xff});
    CHECK(crc32c(ones) == 0x62a8ab43u);
}

TEST_CASE("crc32c continues across pieces, at any alignment", "[crc32c]")
{
    std::vector<std::byte> data(10007);
    for (std::size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
    const auto whole = crc32c(data);
    for (std::size_t cut : {0u, 1u, 3u, 8u, 13u, 4096u, 10006u}) {
        const auto a = crc32c(std::span(data).first(cut));
        CHECK(crc32c(std::span(data).subspan(cut), a) == whole);
    }
}

TEST_CASE("crc32c_combine equals the checksum of the concatenation", "[crc32c]")
{
    std::vector<std::byte> data(1 << 20);
    for (std::size_t i = 0; i < data.size(); ++i)
        data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
    const auto whole = crc32c(data);
    for (std::size_t cut : {1u, 100u, 65536u, 500000u, (1u << 20) - 1}) {
        const auto a = crc32c(std::span(data).first(cut));
        const auto b = crc32c(std::span(data).subspan(cut));
        CHECK(crc32c_combine(a, b, data.size() - cut) == whole);
    }
    // Folding many chunks, as the daemon does.
    std::uint32_t folded = 0;
    const std::size_t chunk = 12345;
    for (std::size_t off = 0; off < data.size(); off += chunk) {
        const auto n = std::min(chunk, data.size() - off);
        const auto c = crc32c(std::span(data).subspan(off, n));
        folded = off == 0 ? c : crc32c_combine(folded, c, n);
    }
    CHECK(folded == whole);
    CHECK(crc32c_combine(whole, 0, 0) == whole);
}

TEST_CASE("large buffers (three interleaved streams) agree with small pieces (one stream)",
          "[crc32c]")
{
    // Pieces of 4000 bytes never take the three-stream path; the whole does.
    for (std::size_t size : {std::size_t{96 * 1024}, std::size_t{96 * 1024 + 13},
                             std::size_t{(1 << 20) + 8191}, std::size_t{3 << 20}}) {
        std::vector<std::byte> data(size);
        for (std::size_t i = 0; i < size; ++i)
            data[i] = static_cast<std::byte>((i * 40503u + (i >> 9)) & 0xff);
        std::uint32_t pieces = 0;
        for (std::size_t off = 0; off < size; off += 4000)
            pieces = crc32c(std::span(data).subspan(off, std::min<std::size_t>(4000, size - off)),
                            pieces);
        CHECK(crc32c(data) == pieces);
        // And starting mid-buffer, misaligned.
        std::uint32_t tail = 0;
        for (std::size_t off = 5; off < size; off += 4000)
            tail = crc32c(std::span(data).subspan(off, std::min<std::size_t>(4000, size - off)), tail);
        CHECK(crc32c(std::span(data).subspan(5)) == tail);
    }
}

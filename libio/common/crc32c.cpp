#include "crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace iofwd {
namespace {

constexpr std::uint32_t poly = 0x82f63b78;  // Castagnoli, bit-reversed

constexpr std::array<std::uint32_t, 256> make_table()
{
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        t[i] = c;
    }
    return t;
}
constexpr auto table = make_table();

std::uint32_t update_table(std::uint32_t c, const unsigned char* p, std::size_t n) noexcept
{
    while (n--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t update_hw(std::uint32_t c, const unsigned char* p,
                                                          std::size_t n) noexcept
{
    std::uint64_t c64 = c;
    while (n && (reinterpret_cast<std::uintptr_t>(p) & 7)) {
        c64 = _mm_crc32_u8(static_cast<std::uint32_t>(c64), *p++);
        --n;
    }
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
    }
    std::uint32_t c32 = static_cast<std::uint32_t>(c64);
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
const bool have_hw = __builtin_cpu_supports("sse4.2");
#endif

// Multiplication of two polynomials modulo the CRC polynomial, in the
// bit-reversed representation the CRC uses (bit 31 is x^0).
std::uint32_t mul_mod(std::uint32_t a, std::uint32_t b) noexcept
{
    std::uint32_t product = 0;
    for (std::uint32_t bit = 1u << 31; bit; bit >>= 1) {
        if (a & bit)
            product ^= b;
        b = (b & 1) ? (b >> 1) ^ poly : b >> 1;
    }
    return product;
}

// powers[k] = x^(2^k) mod P, so x^(8n) is a product of at most 64 of them.
const std::array<std::uint32_t, 64> powers = [] {
    std::array<std::uint32_t, 64> p{};
    p[0] = 1u << 30;  // x^1
    for (std::size_t k = 1; k < p.size(); ++k)
        p[k] = mul_mod(p[k - 1], p[k - 1]);
    return p;
}();

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) noexcept
{
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    std::uint32_t c = ~crc;
#if defined(__x86_64__)
    if (have_hw)
        return ~update_hw(c, p, data.size());
#endif
    return ~update_table(c, p, data.size());
}

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) noexcept
{
    // crc(A||B) = crc_a * x^(8 len_b) + crc_b  (mod P)
    std::uint32_t shift = 1u << 31;  // x^0
    for (unsigned k = 3; len_b; len_b >>= 1, ++k)
        if (len_b & 1)
            shift = mul_mod(powers[k], shift);
    return mul_mod(shift, crc_a) ^ crc_b;
}

}  // namespace iofwd

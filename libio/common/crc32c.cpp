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

// x^(8n) mod P for a byte count n: shifting a CRC register past n zero bytes
// is a multiplication by it.
std::uint32_t shift_for(std::uint64_t n) noexcept
{
    std::uint32_t shift = 1u << 31;  // x^0
    for (unsigned k = 3; n; n >>= 1, ++k)
        if (n & 1)
            shift = mul_mod(powers[k], shift);
    return shift;
}

#if defined(__x86_64__)
// Three independent streams over adjacent strides keep the crc32 unit busy
// (its latency is three times its throughput); their registers are joined by
// shifting, since the register update is linear.
constexpr std::size_t stride = 32 * 1024;
const std::uint32_t shift_1 = shift_for(stride);
const std::uint32_t shift_2 = shift_for(2 * stride);

__attribute__((target("sse4.2"))) std::uint32_t update_hw3(std::uint32_t c, const unsigned char* p,
                                                           std::size_t n) noexcept
{
    while (n >= 3 * stride) {
        std::uint64_t c0 = c, c1 = 0, c2 = 0;
        for (std::size_t i = 0; i < stride; i += 8) {
            std::uint64_t w0, w1, w2;
            std::memcpy(&w0, p + i, 8);
            std::memcpy(&w1, p + stride + i, 8);
            std::memcpy(&w2, p + 2 * stride + i, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c = mul_mod(shift_2, static_cast<std::uint32_t>(c0)) ^
            mul_mod(shift_1, static_cast<std::uint32_t>(c1)) ^ static_cast<std::uint32_t>(c2);
        p += 3 * stride;
        n -= 3 * stride;
    }
    return update_hw(c, p, n);
}
#endif

}  // namespace

std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc) noexcept
{
    const auto* p = reinterpret_cast<const unsigned char*>(data.data());
    std::uint32_t c = ~crc;
#if defined(__x86_64__)
    if (have_hw)
        return ~update_hw3(c, p, data.size());
#endif
    return ~update_table(c, p, data.size());
}

std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t len_b) noexcept
{
    // crc(A||B) = crc_a * x^(8 len_b) + crc_b  (mod P)
    return mul_mod(shift_for(len_b), crc_a) ^ crc_b;
}

}  // namespace iofwd

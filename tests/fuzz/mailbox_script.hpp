#pragma once
// The language the mailbox harness reads its input in: what a hostile rank
// does to the shared memory, interleaved with what the daemon does with its
// reader. Shared by the harness (reading) and the corpus generator (writing
// seeds), so that the two cannot disagree.
//
//   byte 0    capacity: 256 + 64 * (b % 64) bytes of records
//   byte 1    the max_length the daemon passes to next(), by b % 4:
//             0 its reader's max_length() (as iod does), 1 one MiB (as the unit
//             tests do), 2 UINT64_MAX, 3 b / 4 (0..63: most records too long)
//   then ops, one byte each (b % op_count) followed by its operands:
//     poke    u16 offset, u8 n, n bytes   the rank writes raw bytes anywhere in the
//                                         mapping (header page included; offset
//                                         modulo its size, cut at its end)
//     tail    u64                         the rank stores any tail
//     advance u8 k                        the rank publishes 64 k bytes more (tail += 64 k)
//     put     u8 kind, u8 cookie, u16 length, u8 seed
//                                         the rank's real writer: kind 0 a version,
//                                         1 a file write; length modulo max + 1
//     next                                the daemon takes one record
//     release                             the daemon gives back what it took
//     freeze                              the rank is gone
//     drain                               next() until empty or bad
// Numbers are little-endian; operands missing at the end of the input read as
// zero. After the last op the daemon drains the mailbox.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace iofwd::fuzz::mailbox_script {

enum class op : std::uint8_t { poke, tail, advance, put, next, release, freeze, drain };
inline constexpr unsigned op_count = 8;

inline constexpr std::size_t min_capacity = 256;
inline constexpr std::size_t capacity_step = 64;
inline constexpr unsigned capacity_steps = 64;

// Where the layout (libio/common/mailbox.cpp) keeps the rank's tail and the
// daemon's head, as tests/libio/test_mailbox.cpp spells them too.
inline constexpr std::size_t tail_at = 64;
inline constexpr std::size_t head_at = 128;
// A record's head: u32 magic, u32 length, u64 cookie, u64 version or offset,
// u64 file; and the magics that say which kind of record it is.
inline constexpr std::uint32_t version_magic = 0x5243524d;  // "MRCR"
inline constexpr std::uint32_t file_magic = 0x4c49464d;     // "MFIL"
inline constexpr std::uint32_t pad_magic = 0x4441504d;      // "MPAD"

// Writes a script; the corpus generator's side.
class builder final {
public:
    // capacity: min_capacity + capacity_step * k, k < capacity_steps.
    builder(std::size_t capacity, std::uint8_t max_length_mode)
    {
        bytes_.push_back(static_cast<std::uint8_t>((capacity - min_capacity) / capacity_step));
        bytes_.push_back(max_length_mode);
    }
    builder& poke(std::uint16_t offset, std::span<const std::uint8_t> b)
    {
        code(op::poke);
        num(offset, 2);
        bytes_.push_back(static_cast<std::uint8_t>(b.size()));
        bytes_.insert(bytes_.end(), b.begin(), b.begin() + (b.size() & 0xff));
        return *this;
    }
    builder& tail(std::uint64_t v) { return code(op::tail), num(v, 8), *this; }
    builder& advance(std::uint8_t k) { return code(op::advance), num(k, 1), *this; }
    builder& put(bool file, std::uint8_t cookie, std::uint16_t length, std::uint8_t seed)
    {
        code(op::put);
        num(file ? 1 : 0, 1);
        num(cookie, 1);
        num(length, 2);
        num(seed, 1);
        return *this;
    }
    builder& next() { return code(op::next), *this; }
    builder& release() { return code(op::release), *this; }
    builder& freeze() { return code(op::freeze), *this; }
    builder& drain() { return code(op::drain), *this; }
    const std::vector<std::uint8_t>& bytes() const { return bytes_; }

private:
    void code(op o) { bytes_.push_back(static_cast<std::uint8_t>(o)); }
    void num(std::uint64_t v, int n)
    {
        for (int i = 0; i < n; ++i)
            bytes_.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    }
    std::vector<std::uint8_t> bytes_;
};

// Reads one; the harness's side.
class cursor final {
public:
    explicit cursor(std::span<const std::uint8_t> in) : in_(in) {}
    bool done() const { return pos_ >= in_.size(); }
    std::uint64_t num(int n)
    {
        std::uint64_t v = 0;
        for (int i = 0; i < n; ++i)
            v |= static_cast<std::uint64_t>(byte()) << (8 * i);
        return v;
    }
    std::uint8_t byte() { return pos_ < in_.size() ? in_[pos_++] : 0; }
    // Up to n bytes, fewer at the end of the input.
    std::span<const std::uint8_t> take(std::size_t n)
    {
        const auto got = in_.subspan(pos_, std::min(n, in_.size() - pos_));
        pos_ += got.size();
        return got;
    }

private:
    std::span<const std::uint8_t> in_;
    std::size_t pos_ = 0;
};

}  // namespace iofwd::fuzz::mailbox_script

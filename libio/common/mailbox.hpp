#pragma once
// The mailbox: small writes a rank hands to the daemon through shared memory,
// with no round trip: new versions (io_write) and the MPI shim's file writes.
//
// The daemon creates it for each rank that asks (a sealed memfd it passes
// over the control socket with ACCEPT). The rank copies a write's bytes into
// the next record and publishes it; from then on the bytes are in memory the
// daemon holds, so io_write returns at once. The daemon stages the records in
// order, before it acts on anything the rank sends on the socket afterwards,
// and gives their space back as each is staged.
//
// Layout: a header page, then `capacity` bytes of records. Each record is a
// 32-byte head (kind, length, cookie, version or file offset, file) and its
// bytes, padded to 64; a record never wraps: a pad record fills the rest of
// the area instead.
// `tail` (written by the rank) and `head` (by the daemon) count bytes ever
// published and released. When the daemon's `asleep` word is set the rank
// writes the daemon's eventfd after publishing. `durable_through` (by the
// daemon) is the rank's newest version that every version of its run up to
// it is durable, so that io_wait and io_test on one of those ask nothing
// (below the run's first version: none yet; 0 from an older daemon).
//
// The daemon never trusts what the rank wrote: it reads `tail` once, checks it
// against its own copy of `head`, and rejects a record that does not fit.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <system_error>

#include "fd.hpp"
#include "mapping.hpp"

namespace iofwd::mailbox {

inline constexpr std::size_t header_bytes = 4096;
inline constexpr std::size_t record_head = 32;
inline constexpr std::size_t alignment = 64;
// The largest area of records either side accepts (1 TiB): far above any
// setting, and small enough that the header and the area never wrap.
inline constexpr std::size_t max_capacity = std::size_t{1} << 40;

struct layout;  // the header page, shared by both sides

// The area of records for a mailbox that is to hold `bytes` of writes: room
// besides for 64 records' heads and padding, so that writes of a multiple of
// 64 bytes fill it as a user counts (four 1 MiB writes in a 4 MiB mailbox,
// not three).
constexpr std::size_t area_for(std::size_t bytes) noexcept
{
    return bytes + 64 * alignment;
}

// The daemon's side: creates the memory, reads records.
class reader final {
public:
    reader() = default;
    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;
    ~reader();

    // A new mailbox with `capacity` bytes of records (a multiple of 64);
    // `memfd` is what to pass to the rank.
    static std::error_code create(std::size_t capacity, reader& out, unique_fd& memfd,
                                  std::string& why);

    struct record {
        bool to_file = false;     // bytes of a file the shim forwards, not a version
        std::uint64_t cookie = 0;
        std::uint64_t version = 0;  // a version's number
        std::uint64_t file = 0;     // a file write's file and offset
        std::uint64_t offset = 0;
        // The bytes, in the mailbox: read them once (the rank can still
        // write there) and before release(end); `keep` keeps them mapped
        // until then, even after the reader is gone.
        std::span<const std::byte> data;
        std::shared_ptr<const void> keep;
        std::uint64_t end = 0;  // release(end) once staged
    };
    enum class result { empty, record, bad };
    explicit operator bool() const noexcept { return s_ != nullptr; }
    // The largest write one record can carry (as writer::max_length).
    std::size_t max_length() const noexcept;
    // The next record after the ones already taken: its head copied out and
    // checked (the rank cannot change it afterwards), its bytes where they
    // are. `bad`: `why` says what was wrong.
    result next(record& out, std::string& why, std::uint64_t max_length);
    // Gives the space of every record up to `end` back to the rank.
    void release(std::uint64_t end) noexcept;
    // Records published and not yet taken by next().
    bool pending() const noexcept;
    // Whether the rank must signal after publishing: set before the daemon
    // goes back to sleep (then it looks at pending() once more), cleared
    // while it is taking records anyway.
    void set_asleep(bool asleep) noexcept;
    // From now on read only what was published so far (the rank is gone).
    void freeze() noexcept;
    // Nothing more is read (the rank broke the format; the session ends).
    void discard() noexcept;
    // Tells the rank that every version of its run up to `version` is
    // durable (version_table::durable_through); never less than a value
    // published before.
    void publish_durable(std::uint64_t version) noexcept;

private:
    // The end of what the rank published: its tail, or where it was frozen.
    std::uint64_t published(std::memory_order order) const noexcept;

    std::shared_ptr<const mapping> map_;  // shared with the records taken
    layout* s_ = nullptr;  // in map_
    std::size_t capacity_ = 0;
    std::uint64_t taken_ = 0;  // our position: bytes read
    std::uint64_t frozen_ = UINT64_MAX;  // UINT64_MAX: not frozen
};

// The rank's side: maps what the daemon passed, writes records.
class writer final {
public:
    writer() = default;
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    writer(writer&& o) noexcept;
    writer& operator=(writer&& o) noexcept;
    ~writer();

    // Maps the daemon's memfd, whose mailbox must hold `capacity` bytes.
    static std::error_code open(int memfd, std::size_t capacity, writer& out, std::string& why);

    explicit operator bool() const noexcept { return s_ != nullptr; }
    // Faults in the whole mailbox (MADV_POPULATE_WRITE), which open() does
    // not: 3.4 ms per 4 MiB on the test VM, done off io_init's path (on the
    // client's thread after it), a step of 256 KiB at a time, each after
    // `between` returns, until `stop`. Safe beside put(); without it, or on a
    // kernel without the advice (before 5.14: EINVAL), the first writes
    // fault the pages they use.
    std::error_code prefault(const std::stop_token& stop = {},
                             const std::function<void()>& between = {}) const;
    // The largest write one record can carry.
    std::size_t max_length() const noexcept;
    // What the daemon said is durable (reader::publish_durable); 0 without
    // a mailbox. The rank's own memory: it only ever informs the rank.
    std::uint64_t durable_through() const noexcept;
    // Copies `data` into a new record and publishes it; false when there is
    // not room right now (the caller uses the socket). `wake`: the daemon
    // asked to be signalled.
    bool put(std::uint64_t cookie, std::uint64_t version, std::span<const std::byte> data,
             bool& wake) noexcept;
    // The same for bytes of a file the shim forwards (FILE_WRITE).
    bool put_file(std::uint64_t cookie, std::uint64_t file, std::uint64_t offset,
                  std::span<const std::byte> data, bool& wake) noexcept;

private:
    bool put_record(std::uint32_t kind, std::uint64_t cookie, std::uint64_t where,
                    std::uint64_t file, std::span<const std::byte> data, bool& wake) noexcept;

    mapping map_;
    layout* s_ = nullptr;  // in map_
    std::size_t capacity_ = 0;
    // Where the next record goes, kept here and only ever copied out: the
    // shared `tail` is in memory others can write, and a record placed by
    // a tail someone moved (unaligned, near the end of the area) would be
    // written past the area.
    std::uint64_t tail_ = 0;
};

}  // namespace iofwd::mailbox

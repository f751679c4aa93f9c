#include "mailbox.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>

#include <fmt/format.h>

#include "errors.hpp"

namespace iofwd::mailbox {

namespace {

constexpr std::uint64_t magic = 0x786f626c69616d49;  // "Imailbox"
constexpr std::uint32_t record_magic = 0x5243524d;   // "MRCR": a new version
constexpr std::uint32_t file_magic = 0x4c49464d;     // "MFIL": bytes of a shim file
constexpr std::uint32_t pad_magic = 0x4441504d;      // "MPAD"

struct record_header {
    std::uint32_t magic;
    std::uint32_t length;
    std::uint64_t cookie;
    std::uint64_t where;  // the version, or the offset in the file
    std::uint64_t file;   // the rank's number for the file (file records)
};
static_assert(sizeof(record_header) == record_head);

constexpr std::uint64_t aligned(std::uint64_t n) noexcept
{
    return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

struct layout {
    std::uint64_t magic;
    std::uint64_t capacity;
    alignas(64) std::atomic<std::uint64_t> tail;  // written by the rank
    alignas(64) std::atomic<std::uint64_t> head;  // written by the daemon
    alignas(64) std::atomic<std::uint32_t> asleep;
    // Written by the daemon: reader::publish_durable.
    alignas(64) std::atomic<std::uint64_t> durable_through;
};
static_assert(sizeof(layout) <= header_bytes);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

namespace {

std::byte* area(layout* s) noexcept { return reinterpret_cast<std::byte*>(s) + header_bytes; }

// What either side takes as a mailbox's area: room for records (at least
// four of the smallest, whole ones only) and never so large that the header
// and the area wrap.
bool usable_capacity(std::size_t capacity) noexcept
{
    return capacity >= 4 * alignment && capacity % alignment == 0 && capacity <= max_capacity;
}

// Half the area: a record always fits, wherever the last one ended.
std::size_t max_record_length(std::size_t capacity) noexcept
{
    return capacity / 2 - record_head;
}

}  // namespace

reader::~reader() = default;

std::size_t reader::max_length() const noexcept
{
    return s_ ? max_record_length(capacity_) : 0;
}

std::error_code reader::create(std::size_t capacity, reader& out, unique_fd& memfd,
                               std::string& why)
{
    if (!usable_capacity(capacity)) {
        why = fmt::format("a mailbox of {} bytes (at least {}, at most {}, and a multiple of {})",
                          capacity, 4 * alignment, max_capacity, alignment);
        return make_error_code(errc::invalid_argument);
    }
    unique_fd fd(::memfd_create("iofwd-mailbox", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) {
        const auto ec = last_system_error();
        why = fmt::format("memfd_create for a rank's mailbox failed: {}", ec.message());
        return ec;
    }
    const std::size_t total = header_bytes + capacity;
    if (::ftruncate(fd.get(), static_cast<off_t>(total)) != 0 ||
        // The rank cannot shrink it under our feet (a read would fault).
        ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("sizing a rank's mailbox ({} bytes) failed: {}", total, ec.message());
        return ec;
    }
    // Not populated here: the rank faults the pages in (they are allocated
    // and zeroed then, 3.4 ms per 4 MiB on the test VM, on the rank's CPU
    // and not on the daemon's loop, where 64 ranks connecting would wait
    // for each other's; writer::prefault); the daemon's reads map them as
    // they come, 0.2 ms per 4 MiB on the first pass through the ring.
    mapping m;
    if (auto ec = mapping::map(total, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), m)) {
        why = fmt::format("mapping a rank's mailbox ({} bytes) failed: {}", total, ec.message());
        return ec;
    }
    auto* s = new (m.get()) layout{};
    s->magic = magic;
    s->capacity = capacity;
    s->asleep.store(1);
    out.map_ = std::make_shared<const mapping>(std::move(m));
    out.s_ = s;
    out.capacity_ = capacity;
    out.taken_ = 0;
    out.frozen_ = UINT64_MAX;
    memfd = std::move(fd);
    return {};
}

reader::result reader::next(record& out, std::string& why, std::uint64_t max_length)
{
    if (!s_)
        return result::empty;
    const std::uint64_t tail = published(std::memory_order_acquire);
    while (taken_ != tail) {
        const std::uint64_t pos = taken_ % capacity_;
        const std::uint64_t room = capacity_ - pos;
        if (tail < taken_ || tail - taken_ > capacity_ || tail % alignment) {
            why = fmt::format("its mailbox's tail {} is impossible (records taken up to {}, "
                              "{} bytes)",
                              tail, taken_, capacity_);
            return result::bad;
        }
        record_header h;
        std::memcpy(&h, area(s_) + pos, sizeof h);
        if (h.magic == pad_magic) {
            if (tail - taken_ < room) {
                why = fmt::format("a pad record at {} runs past what was published ({})", taken_,
                                  tail);
                return result::bad;
            }
            taken_ += room;
            continue;
        }
        const std::uint64_t need = aligned(record_head + h.length);
        if ((h.magic != record_magic && h.magic != file_magic) || h.length == 0 ||
            h.length > max_length || need > room || need > tail - taken_ || h.cookie == 0) {
            why = fmt::format("a mailbox record at {} is malformed (magic {:08x}, {} bytes, "
                              "cookie {}; at most {} bytes, {} published)",
                              taken_, h.magic, h.length, h.cookie, max_length, tail - taken_);
            return result::bad;
        }
        const std::byte* p = area(s_) + pos + record_head;
        out.to_file = h.magic == file_magic;
        out.cookie = h.cookie;
        out.version = out.to_file ? 0 : h.where;
        out.offset = out.to_file ? h.where : 0;
        out.file = out.to_file ? h.file : 0;
        out.data = std::span<const std::byte>(p, h.length);
        out.keep = map_;
        taken_ += need;
        out.end = taken_;
        return result::record;
    }
    return result::empty;
}

void reader::release(std::uint64_t end) noexcept
{
    if (s_)
        s_->head.store(end, std::memory_order_release);
}

std::uint64_t reader::published(std::memory_order order) const noexcept
{
    // Once frozen, what the rank does to its tail no longer counts: a tail
    // it moved back (even below what was taken) must not make records
    // "pending" forever.
    return frozen_ != UINT64_MAX ? frozen_ : s_->tail.load(order);
}

bool reader::pending() const noexcept
{
    return s_ && published(std::memory_order_seq_cst) != taken_;
}

void reader::set_asleep(bool asleep) noexcept
{
    if (s_)
        s_->asleep.store(asleep ? 1 : 0, std::memory_order_seq_cst);
}

void reader::publish_durable(std::uint64_t version) noexcept
{
    if (s_)
        s_->durable_through.store(version, std::memory_order_release);
}

void reader::freeze() noexcept
{
    if (s_ && frozen_ == UINT64_MAX)
        frozen_ = s_->tail.load(std::memory_order_acquire);
}

void reader::discard() noexcept { frozen_ = taken_; }

writer::writer(writer&& o) noexcept
    : map_(std::move(o.map_)), s_(std::exchange(o.s_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)), tail_(std::exchange(o.tail_, 0))
{
}

writer& writer::operator=(writer&& o) noexcept
{
    if (this != &o) {
        map_ = std::move(o.map_);
        s_ = std::exchange(o.s_, nullptr);
        capacity_ = std::exchange(o.capacity_, 0);
        tail_ = std::exchange(o.tail_, 0);
    }
    return *this;
}

writer::~writer() = default;

std::error_code writer::prefault(const std::stop_token& stop,
                                 const std::function<void()>& between) const
{
    std::size_t failed_at = 0;
    return populate_for_write(map_.get(), map_.size(), 256u << 10, stop, between, failed_at);
}

std::error_code writer::open(int memfd, std::size_t capacity, writer& out, std::string& why)
{
    struct stat st{};
    if (::fstat(memfd, &st) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("the daemon's mailbox: fstat failed: {}", ec.message());
        return ec;
    }
    // ACCEPT's size must be one the daemon can have made (and not wrap
    // header_bytes + capacity), and the memory must be sealed against
    // shrinking (a write there would fault).
    if (!usable_capacity(capacity)) {
        why = fmt::format("ACCEPT describes a mailbox of {} bytes (at least {}, at most {}, and "
                          "a multiple of {})",
                          capacity, 4 * alignment, max_capacity, alignment);
        return make_error_code(errc::protocol_error);
    }
    const int seals = ::fcntl(memfd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        why = "the daemon's mailbox is not sealed against shrinking";
        return make_error_code(errc::protocol_error);
    }
    const std::size_t total = header_bytes + capacity;
    if (static_cast<std::uint64_t>(st.st_size) != total) {
        why = fmt::format("the daemon's mailbox holds {} bytes, ACCEPT said {}", st.st_size, total);
        return make_error_code(errc::protocol_error);
    }
    // Not populated here: prefault() does it off io_init's path.
    mapping m;
    if (auto ec = mapping::map(total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, m)) {
        why = fmt::format("mapping the daemon's mailbox failed: {}", ec.message());
        return ec;
    }
    auto* s = static_cast<layout*>(m.get());
    if (s->magic != magic || s->capacity != capacity) {
        why = "the daemon's mailbox has an unknown layout";
        return make_error_code(errc::protocol_error);
    }
    const std::uint64_t tail = s->tail.load(std::memory_order_acquire);
    if (tail % alignment) {
        why = fmt::format("the daemon's mailbox starts at {}, not a record boundary", tail);
        return make_error_code(errc::protocol_error);
    }
    out = writer{};
    out.map_ = std::move(m);
    out.s_ = s;
    out.capacity_ = capacity;
    out.tail_ = tail;
    return {};
}

std::uint64_t writer::durable_through() const noexcept
{
    return s_ ? s_->durable_through.load(std::memory_order_acquire) : 0;
}

std::size_t writer::max_length() const noexcept
{
    return s_ ? max_record_length(capacity_) : 0;
}

bool writer::put(std::uint64_t cookie, std::uint64_t version, std::span<const std::byte> data,
                 bool& wake) noexcept
{
    return put_record(record_magic, cookie, version, 0, data, wake);
}

bool writer::put_file(std::uint64_t cookie, std::uint64_t file, std::uint64_t offset,
                      std::span<const std::byte> data, bool& wake) noexcept
{
    return put_record(file_magic, cookie, offset, file, data, wake);
}

bool writer::put_record(std::uint32_t kind, std::uint64_t cookie, std::uint64_t where,
                        std::uint64_t file, std::span<const std::byte> data, bool& wake) noexcept
{
    wake = false;
    if (!s_ || data.empty() || data.size() > max_length())
        return false;
    const std::uint64_t tail = tail_;
    const std::uint64_t head = s_->head.load(std::memory_order_acquire);
    // A head ahead of the tail or more than a lap behind is not the
    // daemon's: refuse, and the write takes the socket instead.
    if (head > tail || tail - head > capacity_)
        return false;
    const std::uint64_t pos = tail % capacity_;
    const std::uint64_t room = capacity_ - pos;
    const std::uint64_t need = aligned(record_head + data.size());
    const std::uint64_t pad = need > room ? room : 0;
    if (tail - head + pad + need > capacity_)
        return false;
    std::byte* base = area(s_);
    if (pad) {
        const record_header p{pad_magic, 0, 0, 0, 0};
        std::memcpy(base + pos, &p, sizeof p);
    }
    std::byte* at = base + (pad ? 0 : pos);
    const record_header h{kind, static_cast<std::uint32_t>(data.size()), cookie, where, file};
    std::memcpy(at, &h, sizeof h);
    std::memcpy(at + record_head, data.data(), data.size());
    tail_ = tail + pad + need;
    s_->tail.store(tail_, std::memory_order_release);
    // Pairs with the daemon's set_asleep(true) and its look at pending()
    // afterwards: one of the two sides sees the other's store.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    wake = s_->asleep.load(std::memory_order_relaxed) != 0;
    return true;
}

}  // namespace iofwd::mailbox

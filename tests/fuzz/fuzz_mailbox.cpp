// libFuzzer harness: the daemon's side of a rank's mailbox (mailbox::reader)
// against a rank that writes anything into the shared memory.
//
// The input is a script (mailbox_script.hpp): raw bytes poked anywhere in the
// mapping, tails stored, records put with the real writer, interleaved with
// the daemon's next(), release(), freeze() and a final drain. The harness
// keeps its own account of how far the reader has read and checks, at every
// next(), what mailbox.hpp promises:
//  - the result is record, empty or bad, nothing else;
//  - a record carries 1..max_length bytes (the max_length passed) and a
//    nonzero cookie, lies inside the area without wrapping, after the
//    previous record (only a pad record in between) and within what the rank
//    published (and before the tail it froze at); its fields and bytes are
//    exactly those of the record's head and body in the shared memory;
//  - a tail that is behind the reader, more than the area ahead or not
//    aligned is bad; a tail the reader has reached is empty;
//  - after empty nothing is pending; bad says why, and after discard()
//    nothing more is ever read.
// Accesses out of bounds: before reader::create and before writer::open the
// harness reserves a hole in the address space in front of a PROT_NONE page,
// where the kernel places that side's mapping; the bytes between the end of
// the area and the end of its last page are poisoned for ASan. A read (or the
// writer's write) past the area then faults or is reported.
//
// IOFWD_FUZZ_TRACE=1 in the environment prints what each next() returned, to
// read a finding or check that a seed does what its name says.
#include <sys/mman.h>
#include <unistd.h>

#include <sanitizer/asan_interface.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "check.hpp"
#include "fd.hpp"
#include "mailbox.hpp"
#include "mailbox_script.hpp"

using namespace iofwd;
namespace ms = iofwd::fuzz::mailbox_script;
using mailbox::reader;
using mailbox::writer;

namespace {

const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
const bool trace = std::getenv("IOFWD_FUZZ_TRACE") != nullptr;

constexpr std::uint64_t round_up(std::uint64_t n, std::uint64_t to)
{
    return (n + to - 1) / to * to;
}

std::uint64_t load64(const std::byte* p)
{
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

std::uint32_t load32(const std::byte* p)
{
    std::uint32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// A hole in the address space for one side's mapping (the reader's, or the
// writer's), followed by a PROT_NONE page. Made just before reader::create
// or writer::open, whose mmap the kernel then places at the top of the
// highest gap that fits: this hole.
class guard final {
public:
    explicit guard(std::size_t total) : total_(total), mapped_(round_up(total, page))
    {
        void* p = ::mmap(nullptr, mapped_ + page, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return;
        hole_ = static_cast<std::byte*>(p);
        ::munmap(hole_, mapped_);
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    // Destroyed after its side (declared before it), which has unmapped the
    // hole by then.
    ~guard()
    {
        if (armed_)
            ASAN_UNPOISON_MEMORY_REGION(hole_ + total_, mapped_ - total_);
        if (hole_)
            ::munmap(hole_ + mapped_, page);
    }

    // After that side's mapping and the harness's own view exist: when the
    // mapping in the hole shows the bytes the view writes, it is that
    // side's; then the slack behind the area is poisoned.
    bool arm(std::byte* view)
    {
        if (!hole_ || view == hole_ || ::msync(hole_, mapped_, MS_ASYNC) != 0)
            return false;
        static std::uint64_t nonce = 0x9e3779b97f4a7c15ull;
        ++nonce;
        constexpr std::size_t at = mailbox::header_bytes - 8;  // unused by the layout
        std::memcpy(view + at, &nonce, sizeof nonce);
        if (load64(hole_ + at) != nonce)
            return false;
        if (mapped_ > total_)
            ASAN_POISON_MEMORY_REGION(hole_ + total_, mapped_ - total_);
        armed_ = true;
        return true;
    }

private:
    std::size_t total_;
    std::size_t mapped_;
    std::byte* hole_ = nullptr;
    bool armed_ = false;
};

// The harness's own view of the shared memory: what the hostile rank writes
// through, and where it checks what the reader copied out.
class view final {
public:
    view(int fd, std::size_t total) : total_(total)
    {
        void* p = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        FUZZ_CHECK(p != MAP_FAILED, "mapping the mailbox a second time failed");
        p_ = static_cast<std::byte*>(p);
    }
    view(const view&) = delete;
    view& operator=(const view&) = delete;
    ~view() { ::munmap(p_, total_); }
    std::byte* get() const { return p_; }
    std::byte* area() const { return p_ + mailbox::header_bytes; }
    std::uint64_t tail() const { return load64(p_ + ms::tail_at); }
    void set_tail(std::uint64_t v) { std::memcpy(p_ + ms::tail_at, &v, sizeof v); }

private:
    std::byte* p_;
    std::size_t total_;
};

std::vector<std::byte> pattern(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 131 + seed * 17 + 5) & 0xff);
    return v;
}

// What the harness knows of the reader.
struct account {
    std::uint64_t taken = 0;             // bytes it has consumed (records and pads)
    std::uint64_t last_end = 0;          // the end of the last record it returned
    std::uint64_t frozen = UINT64_MAX;   // the tail it froze at (UINT64_MAX: none, as the reader)
    bool discarded = false;
};

class harness final {
public:
    harness(reader& r, view& v, std::size_t capacity, std::uint64_t max_length)
        : r_(r), v_(v), capacity_(capacity), max_length_(max_length)
    {
    }

    reader::result next()
    {
        const std::uint64_t taken = a_.taken;
        // Once frozen, the frozen position is what the reader goes by,
        // whatever the rank does to its tail afterwards.
        const std::uint64_t visible = a_.discarded              ? taken
                                      : a_.frozen != UINT64_MAX ? a_.frozen
                                                                : v_.tail();
        const bool impossible = visible != taken && (visible < taken ||
                                                     visible - taken > capacity_ ||
                                                     visible % mailbox::alignment != 0);
        reader::record rec;
        std::string why;
        const auto got = r_.next(rec, why, max_length_);
        if (trace)
            fmt::print(stderr, "next() with {} taken, tail {}: {} {}\n", taken, visible,
                       got == reader::result::record  ? "record of"
                       : got == reader::result::empty ? "empty"
                                                      : "bad:",
                       got == reader::result::record ? std::to_string(rec.data.size()) + " bytes"
                                                     : why);
        switch (got) {
        case reader::result::empty: empty(visible); break;
        case reader::result::record: record(rec, visible); break;
        case reader::result::bad: bad(why); break;
        default:
            FUZZ_CHECK(false, "next() returned {}", static_cast<int>(got));
        }
        FUZZ_CHECK(!impossible || got == reader::result::bad,
                   "a tail of {} with {} taken ({} bytes) was not refused: result {}", visible,
                   taken, capacity_, static_cast<int>(got));
        FUZZ_CHECK(visible != taken || got == reader::result::empty,
                   "nothing published beyond {}, yet next() returned {}", taken,
                   static_cast<int>(got));
        return got;
    }

    void drain()
    {
        // Each record or pad takes at least `alignment` bytes of at most a
        // lap's worth published: a drain that goes on longer loops.
        for (std::size_t i = 0; i <= capacity_ / mailbox::alignment + 2; ++i)
            if (next() != reader::result::record)
                return;
        FUZZ_CHECK(false, "a drain of a {}-byte mailbox did not end", capacity_);
    }

    void release() { r_.release(a_.last_end); }

    void freeze()
    {
        r_.freeze();
        if (!a_.discarded && a_.frozen == UINT64_MAX)
            a_.frozen = v_.tail();
    }

private:
    void empty(std::uint64_t visible)
    {
        FUZZ_CHECK(!r_.pending(), "empty, yet pending (taken {}, visible tail {})", a_.taken,
                   visible);
        if (visible != a_.taken) {
            // Only pad records were left: the reader went past them to the
            // start of the next lap.
            FUZZ_CHECK(visible > a_.taken && visible - a_.taken <= capacity_ &&
                           visible % capacity_ == 0,
                       "empty at a tail of {} with {} taken ({} bytes)", visible, a_.taken,
                       capacity_);
            FUZZ_CHECK(load32(v_.area() + a_.taken % capacity_) == ms::pad_magic,
                       "empty at a tail of {} with {} taken, and no pad record at {}", visible,
                       a_.taken, a_.taken);
        }
        a_.taken = visible;
    }

    void record(const reader::record& rec, std::uint64_t visible)
    {
        FUZZ_CHECK(!a_.discarded, "a record after discard()");
        const std::uint64_t length = rec.data.size();
        FUZZ_CHECK(length >= 1 && length <= max_length_, "a record of {} bytes (max_length {})",
                   length, max_length_);
        FUZZ_CHECK(rec.cookie != 0, "a record with cookie 0");
        const std::uint64_t need = round_up(mailbox::record_head + length, mailbox::alignment);
        FUZZ_CHECK(rec.end % mailbox::alignment == 0 && rec.end > a_.taken && rec.end <= visible &&
                       rec.end - a_.taken <= capacity_ && rec.end - need >= a_.taken,
                   "a record of {} bytes ending at {}: {} taken before, tail {}, {} bytes", length,
                   rec.end, a_.taken, visible, capacity_);
        const std::uint64_t start = rec.end - need;
        const std::uint64_t pos = start % capacity_;
        FUZZ_CHECK(pos + need <= capacity_, "a record of {} bytes at {} of a {}-byte area",
                   length, pos, capacity_);
        if (start != a_.taken)
            FUZZ_CHECK(pos == 0 && load32(v_.area() + a_.taken % capacity_) == ms::pad_magic,
                       "a record at {} after {} taken, not behind a pad record", start, a_.taken);

        const std::byte* head = v_.area() + pos;
        const std::uint32_t magic = load32(head);
        FUZZ_CHECK(magic == (rec.to_file ? ms::file_magic : ms::version_magic),
                   "a record (to_file {}) whose head says {:08x}", rec.to_file, magic);
        FUZZ_CHECK(load32(head + 4) == length && load64(head + 8) == rec.cookie,
                   "a record of {} bytes, cookie {}, from a head that says {} bytes, cookie {}",
                   length, rec.cookie, load32(head + 4), load64(head + 8));
        if (rec.to_file)
            FUZZ_CHECK(rec.offset == load64(head + 16) && rec.file == load64(head + 24) &&
                           rec.version == 0,
                       "a file record: offset {} file {} version {}", rec.offset, rec.file,
                       rec.version);
        else
            FUZZ_CHECK(rec.version == load64(head + 16) && rec.file == 0 && rec.offset == 0,
                       "a version record: version {} file {} offset {}", rec.version, rec.file,
                       rec.offset);
        FUZZ_CHECK(std::memcmp(rec.data.data(), head + mailbox::record_head, length) == 0,
                   "a record's {} bytes differ from the shared memory's", length);
        FUZZ_CHECK(rec.keep != nullptr, "a record that does not keep its mailbox mapped");
        a_.taken = rec.end;
        a_.last_end = rec.end;
    }

    void bad(const std::string& why)
    {
        FUZZ_CHECK(!a_.discarded, "bad after discard(): {}", why);
        FUZZ_CHECK(!why.empty(), "bad without a reason");
        // What iod does: the session ends, nothing more is read.
        r_.discard();
        a_.discarded = true;
        FUZZ_CHECK(!r_.pending(), "pending after discard()");
    }

    reader& r_;
    view& v_;
    std::size_t capacity_;
    std::uint64_t max_length_;
    account a_;
};

std::uint64_t max_length_for(std::uint8_t mode, const reader& r)
{
    switch (mode % 4) {
    case 0: return r.max_length();
    case 1: return 1u << 20;
    case 2: return UINT64_MAX;
    default: return mode / 4;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    ms::cursor in({data, size});
    const std::size_t capacity =
        ms::min_capacity + ms::capacity_step * (in.byte() % ms::capacity_steps);
    const std::uint8_t mode = in.byte();
    const std::size_t total = mailbox::header_bytes + capacity;

    guard g(total);
    reader r;
    unique_fd memfd;
    std::string why;
    auto ec = reader::create(capacity, r, memfd, why);
    FUZZ_CHECK(!ec, "a {}-byte mailbox: {}", capacity, why);
    view v(memfd.get(), total);
    const bool armed = g.arm(v.get());
    if (trace)
        fmt::print(stderr, "a {}-byte mailbox, {}in front of a guard page\n", capacity,
                   armed ? "" : "not ");
    // The rank's side goes in front of a guard page too: what the hostile
    // rank pokes (a tail, a head) must not make the writer write past it.
    guard gw(total);
    writer w;
    ec = writer::open(memfd.get(), capacity, w, why);
    FUZZ_CHECK(!ec, "the rank's side of a {}-byte mailbox: {}", capacity, why);
    const bool writer_armed = gw.arm(v.get());

    if (!armed || !writer_armed) {
        static bool told = false;
        if (!told)
            fmt::print(stderr, "fuzz_mailbox: the {} mapping is not in front of a guard page this "
                               "time; accesses past it may go unnoticed\n",
                       armed ? "writer's" : "reader's");
        told = true;
    }
    harness h(r, v, capacity, max_length_for(mode, r));
    std::uint64_t version = 1;
    while (!in.done()) {
        switch (static_cast<ms::op>(in.byte() % ms::op_count)) {
        case ms::op::poke: {
            const std::size_t at = in.num(2) % total;
            const auto bytes = in.take(in.byte());
            std::memcpy(v.get() + at, bytes.data(), std::min(bytes.size(), total - at));
            break;
        }
        case ms::op::tail: v.set_tail(in.num(8)); break;
        case ms::op::advance: v.set_tail(v.tail() + mailbox::alignment * in.byte()); break;
        case ms::op::put: {
            const bool file = in.byte() & 1;
            const std::uint64_t cookie = in.byte();
            const std::size_t length = in.num(2) % (w.max_length() + 1);
            const auto seed = in.byte();
            const auto bytes = pattern(length, seed);
            bool wake = false;
            if (file)
                (void)w.put_file(cookie, cookie + 1, 4096u * seed, bytes, wake);
            else if (w.put(cookie, version, bytes, wake))
                ++version;
            break;
        }
        case ms::op::next: h.next(); break;
        case ms::op::release: h.release(); break;
        case ms::op::freeze: h.freeze(); break;
        case ms::op::drain: h.drain(); break;
        }
    }
    h.drain();
    return 0;
}

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <stop_token>
#include <vector>

#include "errors.hpp"
#include "mailbox.hpp"

using namespace iofwd;
using mailbox::reader;
using mailbox::writer;

namespace {

std::vector<std::byte> pattern(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 131 + seed * 17 + 5) & 0xff);
    return v;
}

// A record's bytes, as they are in the mailbox now.
std::vector<std::byte> bytes_of(const reader::record& rec)
{
    return {rec.data.begin(), rec.data.end()};
}

struct pair {
    reader r;
    writer w;
    unique_fd memfd;
    std::size_t capacity;

    explicit pair(std::size_t cap) : capacity(cap)
    {
        std::string why;
        REQUIRE_FALSE(reader::create(cap, r, memfd, why));
        REQUIRE_FALSE(writer::open(memfd.get(), cap, w, why));
    }
    // The shared memory as a stranger sees it, to break the format.
    std::byte* raw()
    {
        void* p = ::mmap(nullptr, mailbox::header_bytes + capacity, PROT_READ | PROT_WRITE,
                         MAP_SHARED, memfd.get(), 0);
        REQUIRE(p != MAP_FAILED);
        mapped = p;
        return static_cast<std::byte*>(p);
    }
    ~pair()
    {
        if (mapped)
            ::munmap(mapped, mailbox::header_bytes + capacity);
    }
    void* mapped = nullptr;
};

// Offsets of the layout's fields (mailbox.cpp): tail at 64, head at 128.
constexpr std::size_t tail_at = 64;
constexpr std::size_t head_at = 128;

}  // namespace

TEST_CASE("mailbox records arrive in order with their exact bytes, across wrap-arounds",
          "[mailbox]")
{
    pair p(4096);
    std::uint64_t cookie = 1, version = 10, expect_cookie = 1, expect_version = 10;
    unsigned seed = 0, expect_seed = 0;
    std::vector<std::size_t> lengths;
    // Many more records than fit at once, of awkward lengths: pads happen.
    for (int round = 0; round < 300; ++round) {
        const std::size_t n = 1 + (round * 397) % 1500;
        const auto data = pattern(n, seed);
        bool wake = false;
        if (p.w.put(cookie, version, data, wake)) {
            ++cookie;
            ++version;
            ++seed;
            lengths.push_back(n);
            continue;
        }
        // Full: the daemon takes everything, then there is room again.
        reader::record rec;
        std::string why;
        std::uint64_t end = 0;
        while (p.r.next(rec, why, 1 << 20) == reader::result::record) {
            REQUIRE(!lengths.empty());
            CHECK(rec.cookie == expect_cookie++);
            CHECK(rec.version == expect_version++);
            CHECK(bytes_of(rec) == pattern(lengths.front(), expect_seed++));
            lengths.erase(lengths.begin());
            end = rec.end;
        }
        CHECK(why.empty());
        CHECK(lengths.empty());
        CHECK_FALSE(p.r.pending());
        p.r.release(end);
        REQUIRE(p.w.put(cookie, version, data, wake));
        ++cookie;
        ++version;
        ++seed;
        lengths.push_back(n);
    }
    CHECK(expect_cookie > 100);  // the area was reused many times over
}

TEST_CASE("a mailbox's pages are allocated by prefault(), not when it is opened", "[mailbox]")
{
    // io_init leaves the 3.4 ms of faulting a 4 MiB mailbox in to its
    // thread; neither side's open() may do it on the way.
    pair p(8 << 20);
    std::byte* raw = p.raw();
    const std::size_t pages = (mailbox::header_bytes + p.capacity) / 4096;
    const auto resident = [&] {
        // Of the shared memory, not of this mapping: mincore reports the
        // memfd's pages that exist.
        std::vector<unsigned char> v(pages);
        REQUIRE(::mincore(raw, pages * 4096, v.data()) == 0);
        std::size_t n = 0;
        for (auto c : v)
            n += c & 1;
        return n;
    };
    // The header page the daemon wrote (a 2 MiB page, were shared memory
    // given huge pages).
    CHECK(resident() <= 512);
    // Stopped before it begins: nothing more.
    std::stop_source stopped;
    stopped.request_stop();
    CHECK_FALSE(p.w.prefault(stopped.get_token()));
    CHECK(resident() <= 512);
    CHECK_FALSE(p.w.prefault());
    CHECK(resident() == pages);
    // Records go on as before.
    bool wake = false;
    REQUIRE(p.w.put(1, 1, pattern(5000, 7), wake));
    reader::record rec;
    std::string why;
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK(bytes_of(rec) == pattern(5000, 7));
}

TEST_CASE("a mailbox of 4 MiB holds four 1 MiB writes at once, not five", "[mailbox]")
{
    // What the daemon creates for IOFWD_MAILBOX_SIZE=4M (the records' heads
    // and padding have room of their own).
    pair p(mailbox::area_for(4 << 20));
    REQUIRE(p.w.max_length() >= (1u << 20));
    bool wake = false;
    for (unsigned k = 1; k <= 4; ++k) {
        INFO("write " << k);
        CHECK(p.w.put(k, k, pattern(1 << 20, k), wake));
    }
    CHECK_FALSE(p.w.put(5, 5, pattern(1 << 20, 5), wake));
    // The first taken and given back: the fifth fits, at the start again.
    reader::record rec;
    std::string why;
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK(bytes_of(rec) == pattern(1 << 20, 1));
    p.r.release(rec.end);
    CHECK(p.w.put(5, 5, pattern(1 << 20, 5), wake));
    for (unsigned k = 2; k <= 5; ++k) {
        INFO("record " << k);
        REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
        CHECK(rec.version == k);
        CHECK(bytes_of(rec) == pattern(1 << 20, k));
    }
}

TEST_CASE("a mailbox refuses what does not fit and says when to ring", "[mailbox]")
{
    pair p(1024);
    CHECK(p.w.max_length() == 512 - mailbox::record_head);
    bool wake = false;
    CHECK_FALSE(p.w.put(1, 1, pattern(p.w.max_length() + 1, 0), wake));
    CHECK_FALSE(p.w.put(1, 1, {}, wake));
    // A new mailbox's daemon is asleep: the first record rings.
    REQUIRE(p.w.put(1, 1, pattern(400, 1), wake));
    CHECK(wake);
    p.r.set_asleep(false);
    REQUIRE(p.w.put(2, 2, pattern(400, 2), wake));
    CHECK_FALSE(wake);
    // 2 x 448 bytes used of 1024: a third does not fit until one is released.
    CHECK_FALSE(p.w.put(3, 3, pattern(400, 3), wake));
    reader::record rec;
    std::string why;
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK(bytes_of(rec) == pattern(400, 1));
    CHECK_FALSE(p.w.put(3, 3, pattern(400, 3), wake));  // taken, not yet released
    p.r.release(rec.end);
    CHECK(p.w.put(3, 3, pattern(400, 3), wake));
}

TEST_CASE("the daemon tells the rank through the mailbox what is durable", "[mailbox]")
{
    pair p(1024);
    CHECK(p.w.durable_through() == 0);
    p.r.publish_durable(41);
    CHECK(p.w.durable_through() == 41);
    p.r.publish_durable(42);
    CHECK(p.w.durable_through() == 42);
    CHECK(mailbox::writer{}.durable_through() == 0);
}

TEST_CASE("a frozen mailbox yields only what was published before", "[mailbox]")
{
    pair p(4096);
    bool wake = false;
    REQUIRE(p.w.put(1, 1, pattern(100, 1), wake));
    p.r.freeze();
    REQUIRE(p.w.put(2, 2, pattern(100, 2), wake));
    reader::record rec;
    std::string why;
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK(rec.cookie == 1);
    CHECK(p.r.next(rec, why, 1 << 20) == reader::result::empty);
    CHECK_FALSE(p.r.pending());
}

TEST_CASE("the daemon rejects a mailbox the rank broke, with a reason", "[mailbox]")
{
    reader::record rec;
    std::string why;
    bool wake = false;

    SECTION("a tail beyond the area")
    {
        pair p(4096);
        std::uint64_t bad = 3 * 4096;
        std::memcpy(p.raw() + tail_at, &bad, sizeof bad);
        CHECK(p.r.next(rec, why, 1 << 20) == reader::result::bad);
        CHECK_THAT(why, Catch::Contains("impossible"));
    }
    SECTION("a record longer than the daemon takes")
    {
        pair p(4096);
        REQUIRE(p.w.put(1, 1, pattern(1000, 1), wake));
        CHECK(p.r.next(rec, why, 999) == reader::result::bad);
        CHECK_THAT(why, Catch::Contains("malformed"));
    }
    SECTION("a record overwritten with garbage")
    {
        pair p(4096);
        REQUIRE(p.w.put(1, 1, pattern(100, 1), wake));
        std::memset(p.raw() + mailbox::header_bytes, 0x5a, mailbox::record_head);
        CHECK(p.r.next(rec, why, 1 << 20) == reader::result::bad);
        CHECK_THAT(why, Catch::Contains("malformed"));
        p.r.discard();
        CHECK_FALSE(p.r.pending());
        CHECK(p.r.next(rec, why, 1 << 20) == reader::result::empty);
    }
    SECTION("a length that runs past what was published")
    {
        pair p(4096);
        REQUIRE(p.w.put(1, 1, pattern(100, 1), wake));
        std::uint32_t huge = 2000;  // published: one 192-byte record
        std::memcpy(p.raw() + mailbox::header_bytes + 4, &huge, sizeof huge);
        CHECK(p.r.next(rec, why, 1 << 20) == reader::result::bad);
    }
}

TEST_CASE("a rank's writer places records by its own tail, not the one in shared memory",
          "[mailbox]")
{
    // Found by the mailbox fuzzer: the writer read back the shared tail, and
    // one moved to 8 bytes before the end of the area (with the head beside
    // it) made it write a 32-byte pad head past the area.
    constexpr std::size_t cap = 4096;
    reader::record rec;
    std::string why;
    bool wake = false;
    pair p(cap);
    std::byte* raw = p.raw();
    REQUIRE(p.w.put(1, 1, pattern(100, 1), wake));  // 192 bytes: the writer's tail

    SECTION("a tail moved under the writer is put back, and the record goes at the writer's")
    {
        const std::uint64_t moved = cap - 8;
        std::memcpy(raw + tail_at, &moved, sizeof moved);
        REQUIRE(p.w.put(2, 2, pattern(100, 2), wake));
        std::uint64_t tail = 0;
        std::memcpy(&tail, raw + tail_at, sizeof tail);
        CHECK(tail == 2 * 192);
        REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
        CHECK(bytes_of(rec) == pattern(100, 1));
        REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
        CHECK(rec.cookie == 2);
        CHECK(bytes_of(rec) == pattern(100, 2));
        CHECK(p.r.next(rec, why, 1 << 20) == reader::result::empty);
    }
    SECTION("a head that is not the daemon's is refused, and nothing is written")
    {
        const std::vector<std::byte> before(raw, raw + mailbox::header_bytes + cap);
        for (const std::uint64_t head : {std::uint64_t{cap - 8}, std::uint64_t{1} << 40}) {
            std::memcpy(raw + head_at, &head, sizeof head);
            CHECK_FALSE(p.w.put(2, 2, pattern(100, 2), wake));
            CHECK(std::memcmp(raw + mailbox::header_bytes, before.data() + mailbox::header_bytes,
                              cap) == 0);
        }
        const std::uint64_t head = 0;
        std::memcpy(raw + head_at, &head, sizeof head);
        CHECK(p.w.put(2, 2, pattern(100, 2), wake));
    }
}

TEST_CASE("a rank that moves its tail back cannot keep a discarded or frozen mailbox pending",
          "[mailbox]")
{
    // Found by the mailbox fuzzer: a tail set below what the daemon had
    // taken made pending() true forever after discard(), so the session
    // never ended and the daemon never exited.
    reader::record rec;
    std::string why;
    bool wake = false;
    pair p(1024);
    REQUIRE(p.w.put(1, 1, pattern(100, 1), wake));
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    const std::uint64_t zero = 0;
    std::memcpy(p.raw() + tail_at, &zero, sizeof zero);
    CHECK(p.r.next(rec, why, 1 << 20) == reader::result::bad);
    CHECK_THAT(why, Catch::Contains("impossible"));
    p.r.discard();
    CHECK_FALSE(p.r.pending());
    CHECK(p.r.next(rec, why, 1 << 20) == reader::result::empty);

    // Frozen with the tail already behind: bad once, then nothing after discard.
    pair q(1024);
    REQUIRE(q.w.put(1, 1, pattern(100, 1), wake));
    REQUIRE(q.r.next(rec, why, 1 << 20) == reader::result::record);
    std::memcpy(q.raw() + tail_at, &zero, sizeof zero);
    q.r.freeze();
    CHECK(q.r.next(rec, why, 1 << 20) == reader::result::bad);
    q.r.discard();
    CHECK_FALSE(q.r.pending());
    // Whatever the rank writes to its tail afterwards.
    const std::uint64_t later = 192;
    std::memcpy(q.raw() + tail_at, &later, sizeof later);
    CHECK_FALSE(q.r.pending());
    CHECK(q.r.next(rec, why, 1 << 20) == reader::result::empty);
}

TEST_CASE("a rank maps only the mailbox ACCEPT describes", "[mailbox]")
{
    reader r;
    unique_fd memfd;
    std::string why;
    REQUIRE_FALSE(reader::create(4096, r, memfd, why));
    writer w;
    CHECK(writer::open(memfd.get(), 8192, w, why) == errc::protocol_error);
    CHECK_FALSE(w);
    CHECK(reader::create(100, r, memfd, why) == errc::invalid_argument);
}

TEST_CASE("a rank refuses a mailbox whose size wraps or that could shrink", "[mailbox]")
{
    // Found by review: a size in ACCEPT near 2^64 wrapped header + area to a
    // page, every check passed, and the first record was written past it.
    std::string why;
    writer w;
    SECTION("a size that wraps the header and the area")
    {
        unique_fd fd(::memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));
        REQUIRE(fd);
        const std::size_t capacity = SIZE_MAX - mailbox::header_bytes + 256 + 1;  // total: 256
        REQUIRE(::ftruncate(fd.get(), 256) == 0);
        REQUIRE(::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
        CHECK(writer::open(fd.get(), capacity, w, why) == errc::protocol_error);
        CHECK_THAT(why, Catch::Contains("at most"));
        CHECK_FALSE(w);
    }
    SECTION("memory that is not sealed against shrinking")
    {
        // A real mailbox's layout, in a memfd without the seals.
        reader r;
        unique_fd sealed;
        REQUIRE_FALSE(reader::create(4096, r, sealed, why));
        unique_fd fd(::memfd_create("unsealed", MFD_CLOEXEC));
        REQUIRE(fd);
        const std::size_t total = mailbox::header_bytes + 4096;
        std::vector<std::byte> image(total);
        REQUIRE(::pread(sealed.get(), image.data(), total, 0) == static_cast<ssize_t>(total));
        REQUIRE(::pwrite(fd.get(), image.data(), total, 0) == static_cast<ssize_t>(total));
        CHECK(writer::open(fd.get(), 4096, w, why) == errc::protocol_error);
        CHECK_THAT(why, Catch::Contains("not sealed"));
        CHECK_FALSE(w);
        CHECK_FALSE(writer::open(sealed.get(), 4096, w, why));
        CHECK(w);
    }
}

TEST_CASE("a record taken stays readable until staged, after its reader is gone", "[mailbox]")
{
    // The daemon does not copy a record out: the write it starts reads the
    // bytes where they are, later, and may outlive the session (the rank
    // died) and so the reader that mapped them.
    reader::record rec;
    auto expect = pattern(1000, 4);
    {
        pair p(4096);
        bool wake = false;
        REQUIRE(p.w.put(9, 3, expect, wake));
        std::string why;
        REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
        CHECK(rec.keep);
        // Not a copy: what is in the mailbox now is what is read (the first
        // record's bytes follow its head at the start of the area).
        p.raw()[mailbox::header_bytes + mailbox::record_head] = std::byte{0xee};
        expect[0] = std::byte{0xee};
        CHECK(bytes_of(rec) == expect);
    }
    REQUIRE(rec.data.size() == 1000);
    CHECK(bytes_of(rec) == expect);
}

TEST_CASE("a mailbox carries file writes (file, offset) beside new versions", "[mailbox]")
{
    pair p(4096);
    bool wake = false;
    REQUIRE(p.w.put(1, 7, pattern(300, 1), wake));
    REQUIRE(p.w.put_file(2, 5, 123456789012ull, pattern(200, 2), wake));
    reader::record rec;
    std::string why;
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK_FALSE(rec.to_file);
    CHECK(rec.version == 7);
    CHECK(bytes_of(rec) == pattern(300, 1));
    REQUIRE(p.r.next(rec, why, 1 << 20) == reader::result::record);
    CHECK(rec.to_file);
    CHECK(rec.cookie == 2);
    CHECK(rec.file == 5);
    CHECK(rec.offset == 123456789012ull);
    CHECK(rec.version == 0);
    CHECK(bytes_of(rec) == pattern(200, 2));
}

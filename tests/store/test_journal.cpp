// The node's journal of small versions (store/journal.hpp) on a real file:
// what replay finds after appends, torn records, a new generation, a full
// journal, appends from several threads, records written and then waited for
// once (write/durable), and a failing fdatasync.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "fault_guard.hpp"
#include "fd.hpp"
#include "process.hpp"
#include "store/catalog.hpp"
#include "store/inventory.hpp"
#include "store/journal.hpp"
#include "store/layout.hpp"
#include "store/pack.hpp"
#include "sys.hpp"

using namespace iofwd;
using store::journal;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 13 + seed * 7 + 1) & 0xff);
    return v;
}

unique_fd open_file(const std::string& path)
{
    unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    REQUIRE(fd);
    return fd;
}

// A journal on `path`, prepared, waited for (10 s at most).
std::unique_ptr<journal> ready_journal(const std::string& path, std::uint64_t capacity)
{
    auto j = std::make_unique<journal>(open_file(path), capacity);
    j->prepare();
    REQUIRE(test::wait_until([&] { return j->ready(); }, std::chrono::seconds(10)));
    return j;
}

std::error_code append(journal& j, std::uint64_t version, std::uint32_t rank,
                       const std::vector<std::byte>& data)
{
    return j.append({"job", "node7", version, rank, 8, 2, version + 1000}, data, crc32c(data));
}

std::vector<journal::record> replay(const std::string& path, std::uint64_t capacity)
{
    journal j(open_file(path), capacity);
    std::vector<journal::record> out;
    REQUIRE(!j.replay(out));
    return out;
}

void flip_byte(const std::string& path, std::uint64_t offset)
{
    unique_fd fd = open_file(path);
    unsigned char b = 0;
    REQUIRE(::pread(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
    b ^= 0x5a;
    REQUIRE(::pwrite(fd.get(), &b, 1, static_cast<off_t>(offset)) == 1);
}

// A prepared journal at `path` (zeros, generation 0) with one record of an
// older layout written by hand after its header: magic, generation 0,
// version, size, rank, the bytes' crc32c, then the 32-bit fields the layout
// has before the names' lengths (`fields`: none for "IOJR", ranks and nodes
// for "IOJ2"), the lengths of "job" and "node7", the names, and the bytes.
void write_old_record(const std::string& path, std::uint32_t magic, std::uint64_t version,
                      std::uint32_t rank, const std::vector<std::uint32_t>& fields,
                      const std::vector<std::byte>& data)
{
    auto j = ready_journal(path, 1u << 20);
    std::vector<std::byte> h(journal::block + journal::block);
    auto put = [&](std::size_t at, auto v) { std::memcpy(h.data() + at, &v, sizeof v); };
    put(0, magic);
    put(8, std::uint64_t{0});
    put(16, version);
    put(24, std::uint64_t{data.size()});
    put(32, rank);
    put(36, crc32c(data));
    std::size_t at = 40;
    for (const auto f : fields) {
        put(at, f);
        at += 4;
    }
    put(at, std::uint16_t{3});
    put(at + 2, std::uint16_t{5});
    at += 4;
    std::memcpy(h.data() + at, "jobnode7", 8);
    put(4, crc32c(std::span<const std::byte>(h.data() + 8, at - 8 + 8)));
    std::memcpy(h.data() + journal::block, data.data(), data.size());
    unique_fd fd = open_file(path);
    REQUIRE(::pwrite(fd.get(), h.data(), h.size(), journal::header_bytes) ==
            static_cast<ssize_t>(h.size()));
}

}  // namespace

TEST_CASE("journal: replay gives back every appended record exactly", "[journal]")
{
    // Also with every write short (a record's header, bytes and padding
    // go in one pwritev, continued where each short one stopped), and
    // with the first one interrupted (EINTR: tried again).
    const std::string writes = GENERATE(as<std::string>{}, "whole", "short", "interrupted");
    INFO("pwrites: " << writes);
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const std::vector<std::size_t> sizes{1, 4096, 4097, 65536, 300000, 0};
    {
        auto j = ready_journal(path, 4u << 20);
        test::fault_guard guard;
        if (writes != "whole") {
            sys::fault f;
            f.which = sys::call::pwrite;
            f.short_io = writes == "short";
            f.error = writes == "interrupted" ? EINTR : 0;
            f.repeat = writes == "short";
            sys::inject(f);
        }
        for (std::size_t i = 0; i < sizes.size(); ++i)
            REQUIRE(!append(*j, 10 + i, static_cast<std::uint32_t>(i), bytes_of(sizes[i], i)));
        CHECK(j->unsettled() == sizes.size());
    }
    const auto found = replay(path, 4u << 20);
    REQUIRE(found.size() == sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
        CHECK(found[i].job == "job");
        CHECK(found[i].node == "node7");
        CHECK(found[i].version == 10 + i);
        CHECK(found[i].rank == i);
        CHECK(found[i].ranks == 8);
        CHECK(found[i].nodes == 2);
        CHECK(found[i].bucket == 10 + i + 1000);
        CHECK(found[i].data == bytes_of(sizes[i], i));
        CHECK(found[i].crc32c == crc32c(bytes_of(sizes[i], i)));
    }
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK(static_cast<std::uint64_t>(st.st_size) == 4u << 20);  // filled once, never grown
}

TEST_CASE("journal: a daemon set to a smaller journal still replays every record",
          "[journal]")
{
    // Found by review: replay stopped at the new daemon's size, and the
    // journal was then started over, so lowering IOFWD_JOURNAL_SIZE between
    // a crash and the restart lost records of versions answered durable.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    {
        auto j = ready_journal(path, 1u << 20);
        for (std::uint64_t v = 1; v <= 5; ++v)
            REQUIRE(!append(*j, v, 0, bytes_of(100000, static_cast<unsigned>(v))));
    }
    const auto found = replay(path, 64u << 10);
    REQUIRE(found.size() == 5);
    for (std::uint64_t v = 1; v <= 5; ++v) {
        CHECK(found[v - 1].version == v);
        CHECK(found[v - 1].data == bytes_of(100000, static_cast<unsigned>(v)));
    }
}

TEST_CASE("journal: a record of an older iofwd, without ranks and nodes, is read as such",
          "[journal]")
{
    // The layout before the node's ranks and the job's nodes were kept:
    // magic "IOJR", the names right after the lengths at 40 and 42. A daemon
    // that died with such records is followed by one of this version.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const auto data = bytes_of(100, 5);
    write_old_record(path, 0x524a4f49, 5, 3, {}, data);
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].job == "job");
    CHECK(found[0].node == "node7");
    CHECK(found[0].version == 5);
    CHECK(found[0].rank == 3);
    CHECK(found[0].ranks == 0);
    CHECK(found[0].nodes == 0);
    CHECK(found[0].data == data);
}

TEST_CASE("journal: a record without a bucket keeps the layout an older iofwd reads",
          "[journal]")
{
    // Packs off: the record is "IOJ2", names at 52, as before buckets.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const auto data = bytes_of(300, 2);
    {
        auto j = ready_journal(path, 1u << 20);
        REQUIRE(!j->append({"job", "node7", 4, 1, 2, 1, 0}, data, crc32c(data)));
    }
    unique_fd fd = open_file(path);
    char head[60] = {};
    REQUIRE(::pread(fd.get(), head, sizeof head, journal::header_bytes) ==
            static_cast<ssize_t>(sizeof head));
    CHECK(std::string(head, 4) == "IOJ2");
    CHECK(std::string(head + 52, 8) == "jobnode7");
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 4);
    CHECK(found[0].bucket == 0);
    CHECK(found[0].data == data);
}

TEST_CASE("journal: a record of an older iofwd, without the bucket, is read with bucket 0",
          "[journal]")
{
    // The layout before versions were packed: magic "IOJ2", ranks and nodes
    // at 40 and 44, the names' lengths at 48 and 50, the names from 52.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const auto data = bytes_of(300, 6);
    write_old_record(path, 0x324a4f49, 9, 1, {4, 3}, data);
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].job == "job");
    CHECK(found[0].node == "node7");
    CHECK(found[0].version == 9);
    CHECK(found[0].rank == 1);
    CHECK(found[0].ranks == 4);
    CHECK(found[0].nodes == 3);
    CHECK(found[0].bucket == 0);
    CHECK(found[0].data == data);
}

TEST_CASE("journal: nothing is taken before it is prepared, or larger than it",
          "[journal]")
{
    test::temp_dir tmp;
    journal fresh(open_file(tmp / "j"), 1u << 20);
    CHECK(append(fresh, 1, 0, bytes_of(100, 1)) == std::errc::no_buffer_space);
    auto j = ready_journal(tmp / "k", 1u << 20);
    CHECK(append(*j, 1, 0, bytes_of(1u << 20, 1)) == std::errc::no_buffer_space);
    CHECK(j->unsettled() == 0);
    CHECK(j->append({std::string(256, 'j'), "n", 1, 0, 1, 1}, bytes_of(8, 1), 0) ==
          errc::invalid_argument);
    CHECK(replay(tmp / "k", 1u << 20).empty());
}

TEST_CASE("journal: a torn record ends the journal there", "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    {
        auto j = ready_journal(path, 1u << 20);
        for (unsigned v = 1; v <= 3; ++v)
            REQUIRE(!append(*j, v, 0, bytes_of(5000, v)));
    }
    const std::uint64_t second = journal::header_bytes + journal::footprint(5000);
    const std::uint64_t third = second + journal::footprint(5000);
    // The whole record after it is not taken, but said (before 2026-12-07
    // it went silently): damage on the disk would lose it.
    std::string what, said;
    SECTION("its bytes")
    {
        flip_byte(path, second + journal::block + 4999);
        what = "the bytes of version 2 rank 0";
    }
    SECTION("its header")
    {
        flip_byte(path, second + 20);  // the version
        what = "its header";
    }
    SECTION("the last record: nothing follows it")
    {
        flip_byte(path, third + journal::block + 4999);
    }
    journal j(open_file(path), 1u << 20);
    std::vector<journal::record> found;
    REQUIRE(!j.replay(found));
    if (what.empty()) {
        REQUIRE(found.size() == 2);
        CHECK(found[1].data == bytes_of(5000, 2));
        CHECK(j.damage().empty());
        return;
    }
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 1);
    CHECK(found[0].data == bytes_of(5000, 1));
    CHECK(j.damage() ==
          fmt::format("the record at byte {} ({}) does not read, and 1 whole record header of "
                      "this generation follows it (version 3): not replayed, as after a torn "
                      "append; a crash that cut appends off out of order leaves such records, "
                      "never answered durable, and damage on the disk loses parts that were",
                      second, what));
}

TEST_CASE("journal: a record that claims more than any record may hold ends the journal there",
          "[journal]")
{
    // A damaged or planted journal: the second record's header, its
    // checksum made right, says 1 TiB, and the file is made that long
    // (sparse). Replay held every record in memory: the daemon's claim and
    // iofwd ls died of bad_alloc. It ends the journal there instead.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    {
        auto j = ready_journal(path, 1u << 20);
        for (unsigned v = 1; v <= 2; ++v)
            REQUIRE(!append(*j, v, 0, bytes_of(5000, v)));
    }
    const std::uint64_t second = journal::header_bytes + journal::footprint(5000);
    {
        unique_fd fd = open_file(path);
        std::vector<std::byte> h(journal::block);
        REQUIRE(::pread(fd.get(), h.data(), h.size(), static_cast<off_t>(second)) ==
                static_cast<ssize_t>(h.size()));
        const std::uint64_t huge = std::uint64_t{1} << 40;
        std::memcpy(h.data() + 24, &huge, sizeof huge);
        // The header's checksum: from the generation to the end of the
        // names ("job", "node7") after the 60 bytes of fixed fields.
        const std::uint32_t crc = crc32c(std::span<const std::byte>(h.data() + 8, 60 - 8 + 8));
        std::memcpy(h.data() + 4, &crc, sizeof crc);
        REQUIRE(::pwrite(fd.get(), h.data(), h.size(), static_cast<off_t>(second)) ==
                static_cast<ssize_t>(h.size()));
        REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(huge + (4u << 20))) == 0);
    }
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 1);
    CHECK(found[0].data == bytes_of(5000, 1));
}

TEST_CASE("journal: whole records behind a torn one are not found, and gone after a reset",
          "[journal]")
{
    // Two appends at once, the second on the disk and the first not (a
    // crash): neither was answered, and neither may come back after the
    // next daemon, which starts the journal over, writes where the first was.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    {
        auto j = ready_journal(path, 1u << 20);
        REQUIRE(!append(*j, 1, 0, bytes_of(100, 1)));
        REQUIRE(!append(*j, 2, 1, bytes_of(100, 2)));
    }
    flip_byte(path, journal::header_bytes + 40);  // the first one's job length
    {
        journal again(open_file(path), 1u << 20);
        std::vector<journal::record> out;
        REQUIRE(!again.replay(out));
        CHECK(out.empty());
        REQUIRE(!again.reset());
        again.prepare();
        REQUIRE(again.ready());
        REQUIRE(!append(again, 3, 0, bytes_of(100, 3)));
    }
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 3);
}

TEST_CASE("journal: a reset forgets every record, older ones are never taken for new",
          "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    {
        auto j = ready_journal(path, 1u << 20);
        for (unsigned v = 1; v <= 3; ++v)
            REQUIRE(!append(*j, v, 0, bytes_of(100, v)));
        CHECK(j->reset() == std::errc::device_or_resource_busy);  // appends not settled
        for (unsigned v = 1; v <= 3; ++v)
            j->settled();
        REQUIRE(!j->reset());
        CHECK(replay(path, 1u << 20).empty());
        // One new record where the first old one was; the old second and
        // third follow it in the file, of the generation before.
        REQUIRE(!append(*j, 9, 2, bytes_of(100, 9)));
    }
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 9);
    CHECK(found[0].rank == 2);
    // A journal opened again continues the generation its header says.
    {
        journal again(open_file(path), 1u << 20);
        std::vector<journal::record> out;
        REQUIRE(!again.replay(out));
        REQUIRE(!again.reset());
    }
    CHECK(replay(path, 1u << 20).empty());
}

TEST_CASE("journal: full of unsettled records it takes no more; settled, it starts over",
          "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const std::uint64_t capacity = journal::header_bytes + 4 * journal::footprint(4096);
    auto j = ready_journal(path, capacity);
    for (unsigned v = 1; v <= 4; ++v)
        REQUIRE(!append(*j, v, 0, bytes_of(4096, v)));
    CHECK(append(*j, 5, 0, bytes_of(4096, 5)) == std::errc::no_buffer_space);
    for (unsigned v = 1; v <= 3; ++v)
        j->settled();
    CHECK(append(*j, 5, 0, bytes_of(4096, 5)) == std::errc::no_buffer_space);
    auto found = replay(path, capacity);
    REQUIRE(found.size() == 4);  // version 4 is not settled: still there
    j->settled();
    REQUIRE(!append(*j, 5, 0, bytes_of(4096, 5)));
    found = replay(path, capacity);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 5);
    CHECK(found[0].data == bytes_of(4096, 5));
}

TEST_CASE("journal: past half and every record settled, it starts over before it fills",
          "[journal]")
{
    // A burst that met the end with records unsettled would go past the
    // journal; between bursts, with none unsettled, it starts over early.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    const std::uint64_t capacity = journal::header_bytes + 8 * journal::footprint(4096);
    auto j = ready_journal(path, capacity);
    for (unsigned v = 1; v <= 4; ++v)
        REQUIRE(!append(*j, v, 0, bytes_of(4096, v)));
    // Half: not past it. Settled, the next append goes after them.
    for (unsigned v = 1; v <= 4; ++v)
        j->settled();
    REQUIRE(!append(*j, 5, 0, bytes_of(4096, 5)));
    CHECK(replay(path, capacity).size() == 5);
    // Past half, one unsettled: it goes on where it is.
    REQUIRE(!append(*j, 6, 0, bytes_of(4096, 6)));
    CHECK(replay(path, capacity).size() == 6);
    // Past half and all settled: the next record is the first of the next
    // generation, and the journal holds the whole of a burst again.
    j->settled();
    j->settled();
    REQUIRE(!append(*j, 7, 0, bytes_of(4096, 7)));
    auto found = replay(path, capacity);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 7);
    for (unsigned v = 8; v <= 14; ++v)
        REQUIRE(!append(*j, v, 0, bytes_of(4096, v)));
    found = replay(path, capacity);
    REQUIRE(found.size() == 8);
    CHECK(found.back().data == bytes_of(4096, 14));
}

TEST_CASE("journal: appends from several threads are all durable and all found",
          "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    constexpr unsigned threads = 4, each = 40;
    {
        auto j = ready_journal(path, 8u << 20);
        std::vector<std::thread> ts;
        std::vector<int> failures(threads, 0);
        for (unsigned t = 0; t < threads; ++t)
            ts.emplace_back([&, t] {
                for (unsigned i = 0; i < each; ++i)
                    if (append(*j, i + 1, t, bytes_of(1000 + t * 3000 + i, t * 100 + i)))
                        ++failures[t];
            });
        for (auto& t : ts)
            t.join();
        CHECK(failures == std::vector<int>(threads, 0));
    }
    const auto found = replay(path, 8u << 20);
    REQUIRE(found.size() == threads * each);
    std::vector<unsigned> next(threads, 1);
    for (const auto& r : found) {
        REQUIRE(r.rank < threads);
        // One thread's records are in its order; each is exactly its bytes.
        CHECK(r.version == next[r.rank]++);
        CHECK(r.data == bytes_of(1000 + r.rank * 3000 + (r.version - 1),
                                 r.rank * 100 + static_cast<unsigned>(r.version - 1)));
    }
}

TEST_CASE("journal: a failed fdatasync fails its appends until the journal starts over",
          "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    auto j = ready_journal(path, 1u << 20);
    REQUIRE(!append(*j, 1, 0, bytes_of(100, 1)));
    sys::fault f;
    f.which = sys::call::fdatasync;
    f.error = EIO;
    sys::inject(f);
    CHECK(append(*j, 2, 0, bytes_of(100, 2)) == std::errc::io_error);
    sys::inject(std::nullopt);
    // Version 1 is not settled: the journal cannot start over, and takes
    // nothing after the failure.
    CHECK(append(*j, 3, 0, bytes_of(100, 3)) == std::errc::no_buffer_space);
    j->settled();
    REQUIRE(!append(*j, 4, 0, bytes_of(100, 4)));
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 1);
    CHECK(found[0].version == 4);
}

TEST_CASE("journal: records written together are made durable by one fdatasync, or fail together",
          "[journal]")
{
    test::temp_dir tmp;
    const auto path = tmp / "j";
    auto j = ready_journal(path, 1u << 20);
    auto write = [&](std::uint64_t v) {
        const auto data = bytes_of(100, static_cast<unsigned>(v));
        std::uint64_t seq = 0;
        REQUIRE(!j->write({"job", "node7", v, 0, 8, 2, 0}, data, crc32c(data), seq));
        return seq;
    };
    // Every fdatasync after the first fails: the three records need one,
    // waited for in the order written (as flush_policy does): the first
    // wait's fdatasync covers all three.
    sys::fault f;
    f.which = sys::call::fdatasync;
    f.error = EIO;
    f.after = 1;
    sys::inject(f);
    const std::uint64_t s1 = write(1), s2 = write(2), s3 = write(3);
    CHECK(j->unsettled() == 3);
    CHECK(!j->durable(s1));
    CHECK(!j->durable(s2));
    CHECK(!j->durable(s3));
    sys::inject(std::nullopt);
    CHECK(j->unsettled() == 3);

    // A failed fdatasync fails every record it was to cover, the earlier
    // ones waited for after it too.
    const std::uint64_t s4 = write(4), s5 = write(5);
    f.after = 0;
    sys::inject(f);
    CHECK(j->durable(s5) == std::errc::io_error);
    sys::inject(std::nullopt);
    CHECK(j->durable(s4) == std::errc::io_error);
    CHECK(j->unsettled() == 3);

    // The file holds all five (the fault failed the call, the pages are
    // there): replay reads them; the journal took 4 and 5 as not written.
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 5);
    for (std::uint64_t v = 1; v <= 5; ++v) {
        CHECK(found[v - 1].version == v);
        CHECK(found[v - 1].data == bytes_of(100, static_cast<unsigned>(v)));
    }
}

TEST_CASE("journal: a record written and not yet waited for keeps it from starting over",
          "[journal]")
{
    // Even if its count of unsettled records were wrong (one settled()
    // too many): a new generation would answer the record durable with no
    // fdatasync, in a generation replay never reads.
    test::temp_dir tmp;
    const auto path = tmp / "j";
    auto j = ready_journal(path, 1u << 20);
    const auto data = bytes_of(100, 1);
    std::uint64_t seq = 0;
    REQUIRE(!j->write({"job", "node7", 1, 0, 8, 2, 0}, data, crc32c(data), seq));
    j->settled();
    CHECK(j->reset() == std::errc::device_or_resource_busy);
    // Nor does a write that finds it past half full start it over (it would
    // with every record settled and none awaited): it is refused instead.
    const auto big = bytes_of(600000, 2);
    std::uint64_t seq2 = 0;
    REQUIRE(!j->write({"job", "node7", 2, 0, 8, 2, 0}, big, crc32c(big), seq2));
    j->settled();
    std::uint64_t seq3 = 0;
    CHECK(j->write({"job", "node7", 3, 0, 8, 2, 0}, data, crc32c(data), seq3) ==
          std::errc::no_buffer_space);
    REQUIRE(!j->durable(seq));
    REQUIRE(!j->durable(seq2));
    const auto found = replay(path, 1u << 20);
    REQUIRE(found.size() == 2);
    CHECK(found[0].data == data);
    CHECK(found[1].data == big);
}

TEST_CASE("journal: a fill that fails leaves it unused and says why", "[journal]")
{
    // The file may not grow past 256 KiB (as on a full disk): the zeros
    // stop there.
    test::temp_dir tmp;
    rlimit old {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 256u << 10;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    journal j(open_file(tmp / "j"), 1u << 20);
    std::vector<journal::record> out;
    REQUIRE(!j.replay(out));
    j.prepare();
    test::wait_until([&] { return !j.fill_error().empty(); }, std::chrono::seconds(10));
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
    CHECK(j.fill_error().find("filling it with zeros at 262144: File too large") == 0);
    CHECK_FALSE(j.ready());
    CHECK(append(j, 1, 0, bytes_of(100, 1)) == std::errc::no_buffer_space);
}

TEST_CASE("journal: a tool finds the versions a crashed node's next daemon would commit, and "
          "only those",
          "[journal]")
{
    // What iofwd gc, rm and ls keep (store::journaled_versions): a version
    // whose every rank of the node is in the journal or committed, not yet
    // complete; not one the claim would leave incomplete or find settled.
    test::temp_dir tmp;
    std::unique_ptr<store::backend> st;
    std::string why;
    REQUIRE_FALSE(store::open(tmp / "store", st, why));
    const std::string job = "itest";
    std::unique_ptr<store::claim> claim;
    REQUIRE_FALSE(st->claim_job(job, "nodeA", claim));
    unique_fd fd;
    REQUIRE_FALSE(st->open_journal(job, "nodeA", fd));
    journal j(std::move(fd), 1u << 20);
    j.prepare();
    REQUIRE(test::wait_until([&] { return j.ready(); }, std::chrono::seconds(10)));
    const auto data = bytes_of(100, 1);
    const auto put = [&](const std::string& name) {
        REQUIRE_FALSE(st->put(name, std::as_bytes(std::span(data))));
    };
    const auto add = [&](const std::string& of_job, std::uint64_t version, std::uint32_t rank) {
        REQUIRE_FALSE(j.append({of_job, "nodeA", version, rank, 2, 2, 0}, data, crc32c(data)));
    };
    // Version 1 complete: its records are settled. Version 2: both ranks.
    // Version 3: rank 0 only, rank 1 never committed: the claim leaves it
    // incomplete. Version 4: rank 0 journaled, rank 1 committed as its
    // object (too large for the journal). A record of another job.
    put(store::complete_object(job, 1));
    for (const std::uint32_t rank : {0u, 1u}) {
        add(job, 1, rank);
        add(job, 2, rank);
    }
    add(job, 3, 0);
    add(job, 4, 0);
    put(store::data_object(job, 4, "nodeA", 1));
    add("other", 5, 0);
    add("other", 5, 1);
    // Version 6: its records disagree on the node's ranks; version 7: a
    // rank beyond any node's.
    REQUIRE_FALSE(j.append({job, "nodeA", 6, 0, 2, 2, 0}, data, crc32c(data)));
    REQUIRE_FALSE(j.append({job, "nodeA", 6, 1, 3, 2, 0}, data, crc32c(data)));
    REQUIRE_FALSE(j.append({job, "nodeA", 7, 0, 1, 1, 0}, data, crc32c(data)));
    REQUIRE_FALSE(j.append({job, "nodeA", 7, 1u << 16, 1, 1, 0}, data, crc32c(data)));
    claim.reset();  // as after the daemon's death

    std::vector<store::journaled_version> found;
    REQUIRE_FALSE(store::journaled_versions(*st, job, {"nodeA", "nodeB"}, found, why));
    std::vector<std::uint64_t> versions;
    for (const auto& v : found) {
        CHECK(v.nodes == std::vector<std::string>{"nodeA"});
        versions.push_back(v.version);
    }
    CHECK(versions == std::vector<std::uint64_t>{2, 4, 7});
    // Only read: nodeB, which has no journal, still has none.
    std::vector<std::string> nodes;
    REQUIRE_FALSE(st->journal_nodes(job, nodes));
    CHECK(nodes == std::vector<std::string>{"nodeA"});
    // A node whose claim file was removed (taken for a stale lock) is
    // still held, by its journal, and its journal started over: it holds
    // nothing after.
    REQUIRE(::unlink((tmp / "store/itest/.nodeA.claim").c_str()) == 0);
    store::job_hold hold;
    std::vector<std::string> live;
    REQUIRE_FALSE(store::hold_job(*st, job, hold, live, why));
    CHECK(hold.nodes == std::vector<std::string>{"nodeA"});
    REQUIRE_FALSE(store::discard_journals(*st, job, hold, why));
    REQUIRE_FALSE(store::journaled_versions(*st, job, hold.nodes, found, why));
    CHECK(found.empty());
}

TEST_CASE("journal: what removing versions would change for a node's next daemon", "[journal]")
{
    // What iofwd rm asks before it removes versions (store::journals_reviving):
    // a record of a version in its own directory is settled only while no
    // newer version than it is complete; a packed record also once its
    // version is older than every complete one.
    test::temp_dir tmp;
    std::unique_ptr<store::backend> st;
    std::string why;
    REQUIRE_FALSE(store::open(tmp / "store", st, why));
    const std::string job = "itest";
    const auto data = bytes_of(100, 1);
    for (const std::uint64_t v : {1u, 2u, 5u})
        REQUIRE_FALSE(st->put(store::complete_object(job, v), std::as_bytes(std::span(data))));
    // Version 3 complete through bucket 3's record: nodeC's pack of it.
    {
        std::vector<std::byte> pack;
        const std::vector<store::pack_input> parts{{3, 0, 1, data}};
        REQUIRE_FALSE(store::build_pack(job, "nodeC", parts, pack, why));
        REQUIRE_FALSE(st->put(store::pack_object(job, 3, "nodeC", 3, 3), pack));
        std::uint64_t offset = 0, length = 0;
        std::uint32_t crc = 0;
        REQUIRE_FALSE(store::parse_pack_trailer(std::span(pack).last(store::pack_trailer_size),
                                                pack.size(), offset, length, crc, why));
        std::uint64_t complete = 0;
        REQUIRE_FALSE(
            store::try_complete_bucket(*st, job, 3, {"nodeC", 1, 3, 3, crc}, 1, complete, why));
        REQUIRE(complete == 3);
    }
    // Crashed daemons' journals: nodeA holds versions 2 and 3; nodeB 4
    // (removed before: settled while 5 is complete) and 6 (not complete:
    // its next daemon commits it); nodeC 3 in a pack of bucket 3; nodeD 4
    // in a pack of bucket 4 (not complete, newer than the oldest complete:
    // its next daemon commits it).
    const auto journal_of = [&](const std::string& node,
                                const std::vector<journal::origin>& records) {
        std::unique_ptr<store::claim> claim;
        REQUIRE_FALSE(st->claim_job(job, node, claim));
        unique_fd fd;
        REQUIRE_FALSE(st->open_journal(job, node, fd));
        journal j(std::move(fd), 1u << 20);
        j.prepare();
        REQUIRE(test::wait_until([&] { return j.ready(); }, std::chrono::seconds(10)));
        for (const auto& r : records)
            REQUIRE_FALSE(j.append(r, data, crc32c(data)));
    };
    journal_of("nodeA", {{job, "nodeA", 2, 0, 1, 4, 0}, {job, "nodeA", 3, 0, 1, 4, 0}});
    journal_of("nodeB", {{job, "nodeB", 4, 0, 1, 4, 0}, {job, "nodeB", 6, 0, 1, 4, 0}});
    journal_of("nodeC", {{job, "nodeC", 3, 0, 1, 4, 3}});
    journal_of("nodeD", {{job, "nodeD", 4, 0, 1, 4, 4}});
    const std::vector<std::string> nodes{"nodeA", "nodeB", "nodeC", "nodeD", "nodeE"};
    const auto changes = [&](const std::vector<std::uint64_t>& versions) {
        std::vector<store::journal_revival> out;
        REQUIRE_FALSE(store::journals_reviving(*st, job, nodes, versions, out, why));
        std::string said;
        for (const auto& r : out)
            said += fmt::format("{}: {} | {}; ", r.node, fmt::join(r.revived, ","),
                                fmt::join(r.skipped, ","));
        return said;
    };
    // Neither the newest nor every version older than a pending packed
    // one: nothing changes.
    CHECK(changes({2}).empty());
    CHECK(changes({1}).empty());
    CHECK(changes({1, 2}).empty());
    // Version 5 removed: 3 is the newest complete; nodeB's record of 4,
    // removed before, would be put back.
    CHECK(changes({5}) == "nodeB: 4 | ; ");
    // 3 and 5: nodeA's record of 3 too; nodeC's packed record of 3 stays
    // settled by the bucket's mark.
    CHECK(changes({3, 5}) == "nodeA: 3 | ; nodeB: 4 | ; ");
    // 1 to 3: 5 the oldest complete, nodeD's packed 4 would be taken as
    // retired and skipped.
    CHECK(changes({1, 2, 3}) == "nodeD:  | 4; ");
    // Only looked at: nothing changed, nodeE still has no journal.
    std::vector<std::string> journals;
    REQUIRE_FALSE(st->journal_nodes(job, journals));
    CHECK(journals == std::vector<std::string>{"nodeA", "nodeB", "nodeC", "nodeD"});
    // nodeA's journal started over: it holds nothing to put back.
    std::unique_ptr<store::claim> claim;
    REQUIRE_FALSE(st->claim_job(job, "nodeA", claim));
    REQUIRE_FALSE(store::discard_journal(*st, job, "nodeA", why));
    REQUIRE_FALSE(store::discard_journal(*st, job, "nodeE", why));  // none: nothing done
    CHECK(changes({3, 5}) == "nodeB: 4 | ; ");
    REQUIRE_FALSE(st->journal_nodes(job, journals));
    CHECK(journals == std::vector<std::string>{"nodeA", "nodeB", "nodeC", "nodeD"});
}

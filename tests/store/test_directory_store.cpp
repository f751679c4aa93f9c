#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <latch>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "fault_guard.hpp"
#include "process.hpp"
#include "store/backend.hpp"
#include "store/catalog.hpp"
#include "store/counting.hpp"
#include "store/directory.hpp"
#include "store/layout.hpp"
#include "sys.hpp"

using namespace iofwd;

namespace {

std::vector<std::byte> data_of(std::size_t n, unsigned seed)
{
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
    return v;
}

// The first n bytes of object `name`, which must be readable.
std::vector<std::byte> read_back(store::backend& st, const std::string& name, std::size_t n)
{
    std::vector<std::byte> back(n);
    REQUIRE_FALSE(st.read(name, 0, back));
    return back;
}

std::unique_ptr<store::backend> open_store(const test::temp_dir& tmp)
{
    std::unique_ptr<store::backend> st;
    std::string why;
    REQUIRE_FALSE(store::open(tmp / "store", st, why));
    return st;
}

// Version `v` of a one-node ("n"), one-rank job "job": its 4 KiB of bytes
// and its manifest, and with `complete` its COMPLETE record (try_complete).
void put_version(store::backend& st, std::uint64_t v, bool complete)
{
    const auto bytes = data_of(4096, static_cast<unsigned>(v));
    REQUIRE_FALSE(st.put(store::data_object("job", v, "n", 0), bytes));
    const store::manifest m{"job", "n", v, 1, {{0, bytes.size(), 0}}};
    const auto text = store::format_manifest(m);
    REQUIRE_FALSE(st.put(store::manifest_object("job", v, "n"), std::as_bytes(std::span(text))));
    if (!complete)
        return;
    bool completed = false;
    std::string why;
    REQUIRE_FALSE(
        store::try_complete(st, m, crc32c(std::as_bytes(std::span(text))), 1, completed, why));
    REQUIRE(completed);
}

// Disarms the seam even when a CHECK fails halfway.
}  // namespace

TEST_CASE("an object is invisible until commit, then holds exactly the bytes", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const auto bytes = data_of(3 << 20, 1);
    std::unique_ptr<store::object_writer> w;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0000", bytes.size(), w));
    // Written out of order, in two halves, as flusher threads do.
    const std::size_t half = bytes.size() / 2;
    REQUIRE_FALSE(w->write_at(std::span(bytes).subspan(half), half));
    REQUIRE_FALSE(w->write_at(std::span(bytes).first(half), 0));
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names.empty());
    REQUIRE_FALSE(w->commit());
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names == std::vector<std::string>{"n.r0000"});
    std::uint64_t size = 0;
    REQUIRE_FALSE(st->size("job/v00000001/n.r0000", size));
    CHECK(size == bytes.size());
    CHECK(read_back(*st, "job/v00000001/n.r0000", bytes.size()) == bytes);
}

TEST_CASE("an abandoned object leaves nothing behind", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    {
        std::unique_ptr<store::object_writer> w;
        REQUIRE_FALSE(st->create("job/v00000001/n.r0000", 4096, w));
        REQUIRE_FALSE(w->write_at(data_of(4096, 2), 0));
    }
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names.empty());
    // Not even a hidden temporary.
    CHECK(test::read_file(tmp / "store/job/v00000001").empty());
    std::error_code ec;
    CHECK(std::distance(std::filesystem::directory_iterator(tmp / "store/job/v00000001", ec),
                        std::filesystem::directory_iterator()) == 0);
}

TEST_CASE("listing is sorted and a missing name is not_found", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    for (const char* n : {"j/v00000003/a", "j/v00000001/a", "j/v00000002/a"})
        REQUIRE_FALSE(st->put(n, data_of(10, 3)));
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("j/", names));
    CHECK(names == std::vector<std::string>{"v00000001", "v00000002", "v00000003"});
    CHECK(st->list("nope/", names) == errc::not_found);
    std::uint64_t size = 0;
    CHECK(st->size("j/v00000001/zzz", size) == errc::not_found);
    std::vector<std::byte> buf(4);
    CHECK(st->read("j/v00000001/zzz", 0, buf) == errc::not_found);
    REQUIRE_FALSE(st->remove("j/v00000001/a"));
    CHECK(st->size("j/v00000001/a", size) == errc::not_found);
}

TEST_CASE("a full disk during a write fails the object and commits nothing", "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    std::unique_ptr<store::object_writer> w;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0000", 8192, w));
    sys::inject(sys::fault{sys::call::pwrite, ENOSPC, false, 1});
    CHECK_FALSE(w->write_at(data_of(4096, 4), 0));  // the first call passes
    CHECK(w->write_at(data_of(4096, 4), 4096) == std::error_code(ENOSPC, std::system_category()));
    w.reset();
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names.empty());
}

TEST_CASE("IOFWD_FAULT arms several faults, each counting the calls of its own kind",
          "[store][fault]")
{
    test::temp_dir tmp;
    test::fault_guard guard;
    const auto path = tmp.path() + "/f";
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    const char byte = 'x';
    ::setenv("IOFWD_FAULT", "pwrite:EIO:1:once,fsync:ENOSPC:0:once", 1);
    std::string why;
    REQUIRE(sys::inject_from_env(why));
    errno = 0;
    CHECK(sys::fsync(fd) == -1);  // the first fsync
    CHECK(errno == ENOSPC);
    CHECK(sys::pwrite(fd, &byte, 1, 0) == 1);
    CHECK(sys::pwrite(fd, &byte, 1, 0) == -1);  // the second pwrite, once
    CHECK(errno == EIO);
    CHECK(sys::pwrite(fd, &byte, 1, 0) == 1);
    CHECK(sys::fsync(fd) == 0);
    ::close(fd);
    ::setenv("IOFWD_FAULT", "pwrite:EIO,bogus:EIO", 1);
    CHECK_FALSE(sys::inject_from_env(why));
    CHECK(why == "IOFWD_FAULT: 'bogus:EIO' must look like pwrite:ENOSPC[:N[:once]] or "
                 "link@TEXT:EIO[:N[:once]], several separated by commas (calls: pwrite pread "
                 "fsync fdatasync rename open fallocate link)");
    ::unsetenv("IOFWD_FAULT");
}

TEST_CASE("IOFWD_FAULT's link@TEXT counts and fails only the links whose new name holds TEXT",
          "[store][fault]")
{
    test::temp_dir tmp;
    test::fault_guard guard;
    const int dir = ::open(tmp.path().c_str(), O_DIRECTORY | O_RDONLY);
    REQUIRE(dir >= 0);
    const int fd = ::openat(dir, "f", O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    ::close(fd);
    ::setenv("IOFWD_FAULT", "link@+s:EIO:1:once", 1);
    std::string why;
    REQUIRE(sys::inject_from_env(why));
    CHECK(sys::linkat(dir, "f", "a.1=1+s1") == 0);  // the first skip's link: counted
    CHECK(sys::linkat(dir, "f", "a.2=1+m2") == 0);  // not counted
    CHECK(sys::linkat(dir, "f", "a.3=1+m3") == 0);
    errno = 0;
    CHECK(sys::linkat(dir, "f", "a.4=1+s4") == -1);  // the second
    CHECK(errno == EIO);
    CHECK(::faccessat(dir, "a.4=1+s4", F_OK, 0) == -1);
    CHECK(sys::linkat(dir, "f", "a.5=1+s5") == 0);  // once
    ::close(dir);
    for (const char* bad : {"pwrite@x:EIO", "link@:EIO"}) {
        ::setenv("IOFWD_FAULT", bad, 1);
        CHECK_FALSE(sys::inject_from_env(why));
        CHECK(why == fmt::format("IOFWD_FAULT: '{}': @TEXT (only the calls whose new name holds "
                                 "TEXT) applies to link only, with some text",
                                 bad));
    }
    ::unsetenv("IOFWD_FAULT");
}

TEST_CASE("a failing fsync fails the commit and the object stays invisible", "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    std::unique_ptr<store::object_writer> w;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0000", 4096, w));
    REQUIRE_FALSE(w->write_at(data_of(4096, 5), 0));
    sys::inject(sys::fault{sys::call::fsync, EIO});
    CHECK(w->commit() == std::error_code(EIO, std::system_category()));
    w.reset();
    std::uint64_t size = 0;
    CHECK(st->size("job/v00000001/n.r0000", size) == errc::not_found);
}

TEST_CASE("a failing fsync while replacing a record keeps the old bytes", "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const auto old_bytes = data_of(100, 6), new_bytes = data_of(120, 7);
    REQUIRE_FALSE(st->put("job/v00000001/COMPLETE", old_bytes));
    // A second writer of the same name (two daemons writing the same record):
    // the name exists, so the new bytes must be durable before they replace it.
    sys::inject(sys::fault{sys::call::fsync, EIO});
    CHECK(st->put("job/v00000001/COMPLETE", new_bytes) ==
          std::error_code(EIO, std::system_category()));
    sys::inject(std::nullopt);
    CHECK(read_back(*st, "job/v00000001/COMPLETE", old_bytes.size()) == old_bytes);
    std::uint64_t size = 0;
    REQUIRE_FALSE(st->size("job/v00000001/COMPLETE", size));
    CHECK(size == old_bytes.size());
    // Without the fault the replacement goes through.
    REQUIRE_FALSE(st->put("job/v00000001/COMPLETE", new_bytes));
    CHECK(read_back(*st, "job/v00000001/COMPLETE", new_bytes.size()) == new_bytes);
}

// A commit fsyncs the file, the object's directory, and each directory above
// it whose own entry is not known to be durable: the fsync counted by the
// seam shows which. A failure in any of them takes the new name back.
TEST_CASE("a commit makes the directories above a new object durable, once", "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const auto bytes = data_of(4096, 8);
    // First object of a new version directory: file, v00000001, then job
    // (the entry of v00000001). The third fsync fails: nothing is visible.
    sys::inject(sys::fault{sys::call::fsync, EIO, false, 2, false});
    CHECK(st->put("job/v00000001/a", bytes) == std::error_code(EIO, std::system_category()));
    std::uint64_t size = 0;
    CHECK(st->size("job/v00000001/a", size) == errc::not_found);
    // Again, no fault: all three, and v00000001 is known durable from now on.
    REQUIRE_FALSE(st->put("job/v00000001/b", bytes));
    // Next object in the same directory: two fsyncs only; a fault armed for
    // the third call never fires.
    sys::inject(sys::fault{sys::call::fsync, EIO, false, 2, false});
    CHECK_FALSE(st->put("job/v00000001/c", bytes));
    // The fault is still armed: the next fsync (file of d) fails.
    CHECK(st->put("job/v00000001/d", bytes) == std::error_code(EIO, std::system_category()));
    sys::inject(std::nullopt);
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names == std::vector<std::string>{"b", "c"});
    CHECK(read_back(*st, "job/v00000001/c", bytes.size()) == bytes);
}

TEST_CASE("a directory another process removed and this one makes again is made durable again",
          "[store][fault]")
{
    // Found by review: `iofwd rm` (another process) removed a version this
    // daemon had written, the next run numbered it again, and its new
    // directory's entry was taken for durable from before.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const auto bytes = data_of(4096, 10);
    REQUIRE_FALSE(st->put("job/v00000005/a", bytes));
    std::filesystem::remove_all(tmp / "store/job/v00000005");
    // The file, v00000005, then job (the entry of v00000005): a fault armed
    // for the third fsync fires.
    sys::inject(sys::fault{sys::call::fsync, EIO, false, 2, false});
    CHECK(st->put("job/v00000005/b", bytes) == std::error_code(EIO, std::system_category()));
    sys::inject(std::nullopt);
    REQUIRE_FALSE(st->put("job/v00000005/c", bytes));
    CHECK(read_back(*st, "job/v00000005/c", bytes.size()) == bytes);
}

TEST_CASE("bytes written through the page cache are synced before their name is taken",
          "[store][fault]")
{
    // Found by review: the name was taken first and the bytes synced after,
    // so another thread's fsync could make the name durable before them; a
    // power cut then left zeros under it, which a restart's journal replay
    // took for a committed part. With the first fsync held up 2 s, the
    // name must not be there before it returns: once the temporary holds
    // the bytes, and 300 ms later (the old order had renamed it by then).
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const auto bytes = data_of(4096, 9);
    REQUIRE_FALSE(st->put("job/v00000001/a", bytes));  // the directories exist, durable
    const std::string dir = tmp / "store/job/v00000001";
    auto temporary_written = [&] {
        std::error_code e;
        for (const auto& f : std::filesystem::directory_iterator(dir, e))
            if (f.path().filename().string().rfind(".b.tmp-", 0) == 0 &&
                std::filesystem::file_size(f.path(), e) == bytes.size())
                return true;
        return false;
    };
    sys::inject(sys::fault{sys::call::fsync, 0, false, 0, false, 2});
    std::error_code ec = make_error_code(errc::protocol_error);
    std::thread writer([&] { ec = st->put("job/v00000001/b", bytes); });
    const bool written = test::wait_until(temporary_written, std::chrono::seconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::uint64_t size = 0;
    CHECK(written);
    CHECK(st->size("job/v00000001/b", size) == errc::not_found);
    CHECK(temporary_written());
    writer.join();
    sys::inject(std::nullopt);
    CHECK_FALSE(ec);
    CHECK(read_back(*st, "job/v00000001/b", bytes.size()) == bytes);
}

TEST_CASE("short writes and EINTR are retried until every byte is written", "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const auto bytes = data_of(1 << 20, 6);
    for (auto f : {sys::fault{sys::call::pwrite, 0, true, 0, true},
                   sys::fault{sys::call::pwrite, EINTR, false, 0, false}}) {
        std::unique_ptr<store::object_writer> w;
        REQUIRE_FALSE(st->create("job/v00000001/n.r0000", bytes.size(), w));
        sys::inject(f);
        REQUIRE_FALSE(w->write_at(bytes, 0));
        sys::inject(std::nullopt);
        REQUIRE_FALSE(w->commit());
        CHECK(read_back(*st, "job/v00000001/n.r0000", bytes.size()) == bytes);
    }
}

TEST_CASE("a space reservation that fails, at once or late, fails the create and leaves nothing",
          "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    REQUIRE_FALSE(st->put("job/v00000001/before", data_of(4096, 3)));
    for (const unsigned delay_s : {0u, 1u}) {
        INFO("delay " << delay_s);
        sys::inject(sys::fault{sys::call::fallocate, ENOSPC, false, 0, true, delay_s});
        std::unique_ptr<store::object_writer> w;
        const auto start = std::chrono::steady_clock::now();
        CHECK(st->create("job/v00000001/n.r0000", 1 << 20, w) ==
              std::error_code(ENOSPC, std::system_category()));
        CHECK(std::chrono::steady_clock::now() - start >= std::chrono::seconds(delay_s));
        CHECK_FALSE(w);
        sys::inject(std::nullopt);
        // No temporary either: every file in the directory, hidden ones too.
        std::vector<std::string> files;
        for (const auto& e : std::filesystem::directory_iterator(tmp / "store/job/v00000001"))
            files.push_back(e.path().filename());
        CHECK(files == std::vector<std::string>{"before"});
    }
}

TEST_CASE("IOFWD_FAULT arms the seam and rejects malformed specifications", "[store][fault]")
{
    test::fault_guard guard;
    std::string why;
    ::setenv("IOFWD_FAULT", "pwrite:ENOSPC:2", 1);
    CHECK(sys::inject_from_env(why));
    ::setenv("IOFWD_FAULT", "pwrite:NOPE", 1);
    CHECK_FALSE(sys::inject_from_env(why));
    CHECK(why.find("unknown error name") != std::string::npos);
    ::setenv("IOFWD_FAULT", "write", 1);
    CHECK_FALSE(sys::inject_from_env(why));
    ::setenv("IOFWD_FAULT", "pwrite:DELAY4", 1);
    CHECK(sys::inject_from_env(why));
    for (const char* good : {"fallocate:ENOSPC", "fallocate:DELAY2+ENOSPC", "pwrite:DELAY+EIO:3"}) {
        ::setenv("IOFWD_FAULT", good, 1);
        CHECK(sys::inject_from_env(why));
    }
    for (const char* bad : {"pwrite:DELAY0", "pwrite:DELAY61", "pwrite:DELAYx", "pwrite:DELAY99999999999",
                            "fallocate:DELAY2+", "fallocate:DELAY2+SHORT", "fallocate:DELAY61+EIO",
                            "fallocate:DELAY2+DELAY3+EIO", "fallocate:SHORT", "fsync:SHORT"}) {
        INFO(bad);
        ::setenv("IOFWD_FAULT", bad, 1);
        CHECK_FALSE(sys::inject_from_env(why));
    }
    ::unsetenv("IOFWD_FAULT");
}

TEST_CASE("a store location of an unknown type is refused in words", "[store]")
{
    std::unique_ptr<store::backend> st;
    std::string why;
    CHECK(store::open("s3:bucket", st, why) == errc::invalid_argument);
    CHECK(why.find("unknown store type 's3'") != std::string::npos);
}

TEST_CASE("staged writes go direct, padded within the slot, and are trimmed to the exact size",
          "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    // A page-aligned "slot" of 12 KiB holding a 9000-byte object in two pieces.
    auto* slot = static_cast<std::byte*>(std::aligned_alloc(4096, 12288));
    REQUIRE(slot);
    const auto bytes = data_of(9000, 9);
    std::memcpy(slot, bytes.data(), bytes.size());
    std::memset(slot + bytes.size(), 0xEE, 12288 - bytes.size());  // padding must not survive
    std::unique_ptr<store::object_writer> w;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0000", bytes.size(), w));
    REQUIRE_FALSE(w->write_staged(std::span(slot, 4096), 0, 12288));
    REQUIRE_FALSE(w->write_staged(std::span(slot + 4096, 9000 - 4096), 4096, 12288 - 4096));
    REQUIRE_FALSE(w->commit());
    std::uint64_t size = 0;
    REQUIRE_FALSE(st->size("job/v00000001/n.r0000", size));
    CHECK(size == 9000);
    CHECK(read_back(*st, "job/v00000001/n.r0000", 9000) == bytes);

    // An unaligned buffer, or no room to pad, falls back to a plain write.
    std::unique_ptr<store::object_writer> w2;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0001", 5000, w2));
    REQUIRE_FALSE(w2->write_staged(std::span(slot + 1, 5000), 0, 5000));
    REQUIRE_FALSE(w2->commit());
    REQUIRE_FALSE(st->size("job/v00000001/n.r0001", size));
    CHECK(size == 5000);
    const auto back = read_back(*st, "job/v00000001/n.r0001", 5000);
    CHECK(std::memcmp(back.data(), slot + 1, 5000) == 0);
    std::free(slot);
}

TEST_CASE("retention paused after a version goes on where it stopped", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    // Versions 1-4 of a one-node, one-rank job, each complete.
    for (std::uint64_t v = 1; v <= 4; ++v)
        put_version(*st, v, true);
    // Keep 1: versions 1-3 go. Asked to pause, it stops after the first.
    std::vector<std::uint64_t> removed;
    int asked = 0;
    const auto ec = store::prune(*st, "job", 1, removed, [&] { return ++asked > 0; });
    CHECK(ec == std::errc::operation_canceled);
    CHECK(asked == 1);
    CHECK(removed == std::vector<std::uint64_t>{1});
    std::vector<std::uint64_t> complete;
    REQUIRE_FALSE(store::complete_versions(*st, "job", complete));
    CHECK(complete == std::vector<std::uint64_t>{2, 3, 4});
    // Not paused: the rest, and version 4 stays whole.
    removed.clear();
    REQUIRE_FALSE(store::prune(*st, "job", 1, removed, [] { return false; }));
    CHECK(removed == std::vector<std::uint64_t>{2, 3});
    REQUIRE_FALSE(store::complete_versions(*st, "job", complete));
    CHECK(complete == std::vector<std::uint64_t>{4});
    std::vector<std::string> dirs;
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000004"});
    CHECK(read_back(*st, store::data_object("job", 4, "n", 0), 4096) == data_of(4096, 4));
}

TEST_CASE("retention leaves a version still being committed, and every one after it",
          "[store]")
{
    // Versions 1, 3 and 4 complete; version 2's manifest is still on its
    // way (its objects were committed after version 3's, and its manifest
    // is queued behind). Keep 2 would remove 1 and 2; below 2, only 1.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    for (std::uint64_t v : {1, 3, 4})
        put_version(*st, v, true);
    put_version(*st, 2, false);
    std::vector<std::uint64_t> doomed;
    std::vector<store::bucket_span> buckets;
    store::retirement retire;
    REQUIRE_FALSE(store::prune_plan(*st, "job", 2, UINT64_MAX, doomed, buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1, 2});
    REQUIRE_FALSE(store::prune_plan(*st, "job", 2, 2, doomed, buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1});
    CHECK(buckets.empty());
    CHECK(retire.bucket == 0);
    std::vector<std::uint64_t> removed;
    REQUIRE_FALSE(store::prune(*st, "job", 2, removed, {}, 2));
    CHECK(removed == std::vector<std::uint64_t>{1});
    std::vector<std::string> dirs;
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000002", "v00000003", "v00000004"});
    // What a daemon whose commit of version 2 failed asks: are `keep`
    // newer versions complete (then retention wants it gone anyway)?
    CHECK(store::complete_after(*st, "job", 2) == 2);
    CHECK(store::complete_after(*st, "job", 3) == 1);
    CHECK(store::complete_after(*st, "job", 4) == 0);
    CHECK(store::complete_after(*st, "other", 1) == 0);
}

TEST_CASE("retention counts only COMPLETE records that read among the versions kept",
          "[store]")
{
    // Versions 1-5 complete. Version 5's record is damaged (a torn copy,
    // a disk's error) and version 4's is version 2's, copied over it: no
    // restart can take either. Keep 2 must keep 2 and 3, which read, and
    // remove only 1; counted by their names, 4 and 5 were kept and 1-3
    // went.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    for (std::uint64_t v = 1; v <= 5; ++v)
        put_version(*st, v, true);
    const std::string junk = "not a record\n";
    REQUIRE_FALSE(st->put(store::complete_object("job", 5), std::as_bytes(std::span(junk))));
    std::string copied;
    REQUIRE_FALSE(store::read_all(*st, store::complete_object("job", 2), copied));
    REQUIRE_FALSE(st->put(store::complete_object("job", 4), std::as_bytes(std::span(copied))));

    std::vector<std::uint64_t> doomed;
    std::vector<store::bucket_span> buckets;
    store::retirement retire;
    store::prune_notes notes;
    REQUIRE_FALSE(store::prune_plan(*st, "job", 2, UINT64_MAX, doomed, buckets, retire, &notes));
    CHECK(doomed == std::vector<std::uint64_t>{1});
    using passed = std::vector<std::pair<std::uint64_t, std::string>>;
    CHECK(notes.passed_over ==
          passed{{5, "job/v00000005/COMPLETE: not an iofwd COMPLETE record (first line)"},
                 {4, "job/v00000004/COMPLETE is the record of job job version 2, not of job job "
                     "version 4: the directory was copied or moved, it is not that version"}});
    std::vector<std::uint64_t> removed;
    REQUIRE_FALSE(store::prune(*st, "job", 2, removed));
    CHECK(removed == std::vector<std::uint64_t>{1});
    std::vector<std::string> dirs;
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000002", "v00000003", "v00000004", "v00000005"});
    for (std::uint64_t v : {2, 3})
        CHECK(read_back(*st, store::data_object("job", v, "n", 0), 4096) ==
              data_of(4096, static_cast<unsigned>(v)));
    // With fewer readable versions than `keep`, nothing goes.
    REQUIRE_FALSE(store::prune_plan(*st, "job", 3, UINT64_MAX, doomed, buckets, retire));
    CHECK(doomed.empty());
    // Nor are they counted as newer complete versions by a daemon whose
    // manifest found its version gone (job::rank_durable's "superseded").
    CHECK(store::complete_after(*st, "job", 1) == 2);
    // A record whose read fails is no judgement on its version: retention
    // stops there and says why, and removes nothing.
    test::fault_guard guard;
    sys::inject(sys::fault{sys::call::pread, EIO});
    store::prune_notes failed;
    CHECK(store::prune(*st, "job", 1, removed, {}, UINT64_MAX, &failed) ==
          std::errc::io_error);
    CHECK(failed.why == "cannot read job/v00000005/COMPLETE to count version 5 among those "
                        "kept: Input/output error");
    sys::inject(std::nullopt);
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000002", "v00000003", "v00000004", "v00000005"});
}

TEST_CASE("a version's removal waits for COMPLETE's removal and its directory's only",
          "[store][fault]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    for (std::uint64_t v = 1; v <= 4; ++v)
        put_version(*st, v, true);
    auto objects_of = [&](std::uint64_t v) {
        std::vector<std::string> names;
        const auto ec = st->list(store::version_dir("job", v) + "/", names);
        return ec ? std::vector<std::string>{ec.message()} : names;
    };
    const std::vector<std::string> whole{"n.manifest", "n.r0000"};
    std::vector<std::uint64_t> complete;
    {
        // COMPLETE's removal cannot be made durable: nothing after it is
        // touched (a crash could bring COMPLETE back over missing data).
        test::fault_guard guard;
        sys::inject(sys::fault{sys::call::fsync, EIO});
        CHECK(store::remove_version(*st, "job", 1) == std::errc::io_error);
        REQUIRE_FALSE(store::complete_versions(*st, "job", complete));
        CHECK(complete == std::vector<std::uint64_t>{2, 3, 4});  // gone, in memory only
        CHECK(objects_of(1) == whole);
        // Nor on a retry, which finds COMPLETE gone already: its absence
        // must be durable before the objects go.
        CHECK(store::remove_version(*st, "job", 1) == std::errc::io_error);
        CHECK(objects_of(1) == whole);
    }
    REQUIRE_FALSE(store::remove_version(*st, "job", 1));
    {
        // Two fsyncs for a whole version: COMPLETE's removal, the directory's.
        test::fault_guard guard;
        sys::inject(sys::fault{sys::call::fsync, EIO, false, 2});
        REQUIRE_FALSE(store::remove_version(*st, "job", 2));
    }
    std::vector<std::string> dirs;
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000003", "v00000004"});
    // What a crash may leave of a removal: objects and manifest without
    // COMPLETE. Incomplete, never taken for a restart, and removed by the
    // next retention.
    put_version(*st, 2, false);
    REQUIRE_FALSE(store::complete_versions(*st, "job", complete));
    CHECK(complete == std::vector<std::uint64_t>{3, 4});
    std::vector<std::uint64_t> removed;
    REQUIRE_FALSE(store::prune(*st, "job", 1, removed));
    CHECK(removed == std::vector<std::uint64_t>{2, 3});
    REQUIRE_FALSE(st->list("job/", dirs));
    CHECK(dirs == std::vector<std::string>{"v00000004"});
    CHECK(read_back(*st, store::data_object("job", 4, "n", 0), 4096) == data_of(4096, 4));
}

TEST_CASE("put_new takes a free name once and never replaces", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const std::string first = "one", second = "two";
    REQUIRE_FALSE(st->put_new("job/runs/r", std::as_bytes(std::span(first))));
    CHECK(st->put_new("job/runs/r", std::as_bytes(std::span(second))) == errc::exists);
    std::string text;
    REQUIRE_FALSE(store::read_all(*st, "job/runs/r", text));
    CHECK(text == "one");
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list("job/runs/", names));
    CHECK(names == std::vector<std::string>{"r"});  // the loser left no temporary
    std::size_t entries = 0;
    for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(tmp / "store/job/runs"))
        ++entries;
    CHECK(entries == 1);
}

TEST_CASE("every node of a run gets the first version of its record", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    // Versions 1-3 are in the store already (an earlier run).
    const std::string x = "x";
    for (int v = 1; v <= 3; ++v)
        REQUIRE_FALSE(st->put(store::data_object("job", v, "old", 0), std::as_bytes(std::span(x))));
    store::run_record a, b;
    std::string why;
    REQUIRE_FALSE(store::join_run(*st, "job", "run-1", 2, "nodeA", 4, 64, a, why));
    CHECK(a.first_version == 4);
    CHECK(a.pack_versions == 64);
    // Node B starts after A wrote versions 4 and 5: it still begins at 4.
    REQUIRE_FALSE(st->put(store::data_object("job", 4, "nodeA", 0), std::as_bytes(std::span(x))));
    REQUIRE_FALSE(st->put(store::data_object("job", 5, "nodeA", 0), std::as_bytes(std::span(x))));
    REQUIRE_FALSE(store::join_run(*st, "job", "run-1", 2, "nodeB", 6, 0, b, why));
    CHECK(b.first_version == 4);
    // B packs as A does, whatever its own IOFWD_PACK_VERSIONS says.
    CHECK(b.pack_versions == 64);
    // A node that already wrote into the run: the name was used twice.
    CHECK(store::join_run(*st, "job", "run-1", 2, "nodeA", 6, 0, b, why) == errc::exists);
    CHECK(why.find("already written by node nodeA") != std::string::npos);
    // Node B's versions went into a pack of the run's bucket (4): its
    // name used again is refused too, by the pack's name.
    REQUIRE_FALSE(st->put(store::pack_object("job", 4, "nodeB", 4, 5), std::as_bytes(std::span(x))));
    CHECK(store::join_run(*st, "job", "run-1", 2, "nodeB", 6, 0, b, why) == errc::exists);
    CHECK(why == "run run-1 of job job was already written by node nodeB (job/packs/b00000004/"
                 "nodeB.v00000004-00000005); each run needs a name of its own (IOFWD_RUN)");
    // iofwd rm (or retention) freed that pack once its versions were
    // removed: the bucket's mark (and record) still tell, so that the new
    // run's version 4 does not meet the old run's marks and go hidden.
    const std::filesystem::path root = tmp / "store";
    REQUIRE(std::filesystem::remove(root / store::pack_object("job", 4, "nodeB", 4, 5)));
    REQUIRE_FALSE(store::join_run(*st, "job", "run-1", 2, "nodeB", 6, 0, b, why));
    for (const auto& [name, refused] :
         {std::pair{store::bucket_removed_object("job", 4, 4), "REMOVED.v00000004"},
          std::pair{store::bucket_complete_object("job", 4, 5), "COMPLETE.v00000005"}}) {
        REQUIRE_FALSE(st->put(name, {}));
        CHECK(store::join_run(*st, "job", "run-1", 2, "nodeB", 6, 0, b, why) == errc::exists);
        CHECK(why == fmt::format("run run-1 of job job was already written by node nodeB "
                                 "(job/packs/b00000004/{}); each run needs a name of its own "
                                 "(IOFWD_RUN)",
                                 refused));
        REQUIRE(std::filesystem::remove(root / name));
    }
    // Another number of nodes.
    CHECK(store::join_run(*st, "job", "run-1", 3, "nodeC", 6, 0, b, why) == errc::rank_mismatch);
    CHECK(why.find("2 nodes") != std::string::npos);
    // A record copied from another job or run is refused.
    std::string text;
    REQUIRE_FALSE(store::read_all(*st, "job/runs/run-1", text));
    REQUIRE_FALSE(st->put("job/runs/run-2", std::as_bytes(std::span(text))));
    CHECK(store::join_run(*st, "job", "run-2", 2, "nodeC", 6, 0, b, why) == errc::corrupt);
    CHECK(why.find("not of job job run run-2") != std::string::npos);
}

TEST_CASE("commit_state: a version complete, superseded, or naming its manifests", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    auto put_text = [&](const std::string& name, const std::string& text) {
        REQUIRE_FALSE(st->put(name, std::as_bytes(std::span(text))));
    };
    bool yes = true;
    std::string why;
    put_text(store::manifest_object("job", 1, "nodeA"), "m");
    REQUIRE_FALSE(store::commit_state(*st, "job", 1, yes, why));
    CHECK_FALSE(yes);
    CHECK(why == "version 1 has the manifests of 1 node (nodeA)");
    put_text(store::manifest_object("job", 1, "nodeB"), "m");
    REQUIRE_FALSE(store::commit_state(*st, "job", 1, yes, why));
    CHECK_FALSE(yes);
    CHECK(why == "version 1 has the manifests of 2 nodes (nodeA, nodeB)");
    put_text(store::complete_object("job", 1), "c");
    REQUIRE_FALSE(store::commit_state(*st, "job", 1, yes, why));
    CHECK(yes);
    // Version 2 incomplete, version 3 complete: 2 counts as superseded
    // (retention removes versions older than the oldest complete one kept).
    put_text(store::manifest_object("job", 2, "nodeA"), "m");
    REQUIRE_FALSE(store::commit_state(*st, "job", 2, yes, why));
    CHECK_FALSE(yes);
    put_text(store::complete_object("job", 3), "c");
    REQUIRE_FALSE(store::commit_state(*st, "job", 2, yes, why));
    CHECK(yes);
    REQUIRE_FALSE(store::commit_state(*st, "job", 4, yes, why));
    CHECK_FALSE(yes);
    CHECK(why == "version 4 has no node's manifest");
}

TEST_CASE("a writer that died leaves a leftover: named, and removed with its version",
          "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const auto bytes = data_of(5000, 3);
    REQUIRE_FALSE(st->put("job/v00000001/n.r0000", bytes));
    // A writer that never commits and is not destroyed until the test ends:
    // its temporary stays, as after a SIGKILL. (Its destructor, at the end,
    // finds the temporary gone with its version.)
    std::unique_ptr<store::object_writer> w;
    REQUIRE_FALSE(st->create("job/v00000001/n.r0001", bytes.size(), w));
    REQUIRE_FALSE(w->write_at(bytes, 0));

    std::vector<std::string> names, left;
    REQUIRE_FALSE(st->list("job/v00000001/", names));
    CHECK(names == std::vector<std::string>{"n.r0000"});
    REQUIRE_FALSE(st->leftovers("job", left));
    REQUIRE(left.size() == 1);
    CHECK(left[0].rfind("job/v00000001/.n.r0001.tmp-", 0) == 0);
    CHECK(st->remove_leftover("job/v00000001/n.r0000") == errc::invalid_argument);
    std::int64_t when = 0;
    REQUIRE_FALSE(st->modified("job/v00000001/n.r0000", when));
    CHECK(std::abs(when - static_cast<std::int64_t>(::time(nullptr))) < 60);

    // The version goes whole, the temporary with it.
    REQUIRE_FALSE(store::remove_version(*st, "job", 1));
    CHECK_FALSE(std::filesystem::exists(tmp / "store/job/v00000001"));
    REQUIRE_FALSE(st->leftovers("job", left));
    CHECK(left.empty());
}

TEST_CASE("a node's journal is a file of the user's own, never a link planted for it",
          "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    unique_fd fd;
    REQUIRE_FALSE(st->open_journal("job", "nodeA", fd));
    REQUIRE(fd);
    struct stat s {};
    REQUIRE(::fstat(fd.get(), &s) == 0);
    CHECK((s.st_mode & 0777) == 0600);
    CHECK(s.st_size == 0);
    fd.reset();
    const std::string root = tmp / "store";
    // A symlink to a file elsewhere, and a hard link to one, are refused.
    const std::string victim = tmp / "victim";
    { std::ofstream(victim) << "precious"; }
    REQUIRE(::symlink(victim.c_str(), (root + "/job/.nodeB.journal").c_str()) == 0);
    CHECK(st->open_journal("job", "nodeB", fd) == errc::unsafe_path);
    REQUIRE(::link(victim.c_str(), (root + "/job/.nodeC.journal").c_str()) == 0);
    CHECK(st->open_journal("job", "nodeC", fd) == errc::unsafe_path);
    // As when only looked at (read_journal: iofwd ls, gc, rm), and said in
    // words, of the journal itself.
    CHECK(st->read_journal("job", "nodeB", fd) == errc::unsafe_path);
    CHECK(st->read_journal("job", "nodeC", fd) == errc::unsafe_path);
    CHECK(store::failure(*st, store::journal_object("job", "nodeB"), errc::unsafe_path)
              .ends_with(": " + root + "/job/.nodeB.journal is a symlink"));
    CHECK(st->explain(store::journal_object("job", "nodeC")) ==
          root + "/job/.nodeC.journal has 2 hard links (another name of it may be anywhere on "
                 "its file system)");
    CHECK(test::read_file(victim) == "precious");
}

TEST_CASE("a journal only looked at (iofwd ls, gc, rm) is read under the same checks, and "
          "nothing is made",
          "[store]")
{
    // read_journal serves the tools, which take no claim: the file must be
    // the user's own as much as for the daemon, and a node without one
    // must stay without one.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const std::string root = tmp / "store";
    unique_fd fd;
    CHECK(st->read_journal("job", "nodeA", fd) == errc::not_found);  // no job yet
    REQUIRE_FALSE(st->open_journal("job", "nodeA", fd));
    fd.reset();
    CHECK(st->read_journal("job", "nodeZ", fd) == errc::not_found);
    CHECK_FALSE(std::filesystem::exists(root + "/job/.nodeZ.journal"));
    REQUIRE_FALSE(st->read_journal("job", "nodeA", fd));
    CHECK((::fcntl(fd.get(), F_GETFL) & O_ACCMODE) == O_RDONLY);
    fd.reset();

    // Links are refused as by open_journal (above); so is a journal
    // another user could have written: group- or world-writable, or
    // theirs.
    const std::string d = root + "/job/.nodeD.journal";
    { std::ofstream(d) << "records"; }
    REQUIRE(::chmod(d.c_str(), 0620) == 0);
    CHECK(st->read_journal("job", "nodeD", fd) == errc::unsafe_path);
    REQUIRE(::chmod(d.c_str(), 0602) == 0);
    CHECK(st->read_journal("job", "nodeD", fd) == errc::unsafe_path);
    REQUIRE(::chmod(d.c_str(), 0600) == 0);
    CHECK_FALSE(st->read_journal("job", "nodeD", fd));
    fd.reset();
    if (::geteuid() == 0) {
        REQUIRE(::chown(d.c_str(), 65534, 65534) == 0);
        CHECK(st->read_journal("job", "nodeD", fd) == errc::unsafe_path);
        CHECK(st->explain(store::journal_object("job", "nodeD")) ==
              root + "/job/.nodeD.journal belongs to uid 65534, not to you (uid 0)");
    }
    // A FIFO would block a reader that opened it without O_NONBLOCK.
    REQUIRE(::mkfifo((root + "/job/.nodeE.journal").c_str(), 0600) == 0);
    CHECK(st->read_journal("job", "nodeE", fd) == errc::unsafe_path);
}

TEST_CASE("claimants are the nodes that ever claimed a job; a held claim refuses another",
          "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    std::vector<std::string> nodes;
    CHECK(st->claimants("job", nodes) == errc::not_found);
    std::unique_ptr<store::claim> a, b, again;
    REQUIRE_FALSE(st->claim_job("job", "nodeB", b));
    REQUIRE_FALSE(st->claim_job("job", "nodeA", a));
    REQUIRE_FALSE(st->claimants("job", nodes));
    CHECK(nodes == std::vector<std::string>{"nodeA", "nodeB"});
    CHECK(st->claim_job("job", "nodeA", again) == errc::rank_in_use);
    a.reset();
    CHECK_FALSE(st->claim_job("job", "nodeA", again));
    REQUIRE_FALSE(st->claimants("job", nodes));
    CHECK(nodes.size() == 2);  // a released claim's node still claimed once
}

TEST_CASE("an arrival is synced before it counts, and a failed sync fails it", "[store][fault]")
{
    // Found by review: the link that is a node's arrival was never synced;
    // a power cut of the store's host could lose it and leave the count
    // short for good.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const std::string tally = store::arrivals_object("job", 4);
    std::uint64_t count = 7;
    sys::inject(sys::fault{sys::call::fsync, EIO, false, 0, false});
    CHECK(st->arrive(tally, "node01", "n", count) == std::error_code(EIO, std::system_category()));
    CHECK(count == 7);  // not counted
    sys::inject(std::nullopt);
    // Arriving again (a retry) counts it once.
    REQUIRE_FALSE(st->arrive(tally, "node01", "n", count));
    CHECK(count == 1);
}

TEST_CASE("a tally counts each member once, and the last of N to arrive sees N", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const std::string tally = store::arrivals_object("job", 3);
    constexpr int members = 16;
    std::vector<std::uint64_t> counts(members);
    std::vector<std::error_code> errors(members);
    {
        std::latch go(members);
        std::vector<std::jthread> threads;
        for (int i = 0; i < members; ++i)
            threads.emplace_back([&, i] {
                go.arrive_and_wait();
                errors[i] = st->arrive(tally, fmt::format("node{:02}", i),
                                       fmt::format("{}+note", i), counts[i]);
            });
    }
    for (int i = 0; i < members; ++i) {
        CHECK_FALSE(errors[i]);
        CHECK(counts[i] >= 1);
        CHECK(counts[i] <= members);
    }
    // Every arrival sees its own and those before it: someone saw all.
    CHECK(*std::max_element(counts.begin(), counts.end()) == members);
    std::vector<store::backend::arrival> arrived;
    REQUIRE_FALSE(st->arrivals(tally, arrived));
    REQUIRE(arrived.size() == members);
    CHECK(arrived.front() == store::backend::arrival{"node00", "0+note"});
    CHECK(arrived.back() == store::backend::arrival{"node15", "15+note"});
    // A retry counts nobody twice.
    std::uint64_t again = 0;
    REQUIRE_FALSE(st->arrive(tally, "node07", "7+note", again));
    CHECK(again == members);
    // The tally is not a name of the version, and goes with it.
    REQUIRE_FALSE(st->put(store::complete_object("job", 3), std::as_bytes(std::span("c", 1))));
    std::vector<std::string> names;
    REQUIRE_FALSE(st->list(store::version_dir("job", 3) + "/", names));
    CHECK(names == std::vector<std::string>{"COMPLETE"});
    REQUIRE_FALSE(store::remove_version(*st, "job", 3));
    CHECK(st->list(store::version_dir("job", 3) + "/", names) == errc::not_found);
    CHECK(st->arrivals(tally, arrived) == errc::not_found);
    CHECK_FALSE(st->remove_arrivals(tally));  // gone already: no error
}

TEST_CASE("a tally counts an arrival under each of its keys, once per member", "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const std::string tally = store::bucket_arrivals_object("job", 1);
    std::uint64_t most = 0;
    // a holds keys 1-3, b 2-4, c 3: the highest count each saw.
    REQUIRE_FALSE(st->arrive_keyed(tally, "a.1", "n+1", 1, 3, most));
    CHECK(most == 1);
    REQUIRE_FALSE(st->arrive_keyed(tally, "b.2", "n+2", 2, 4, most));
    CHECK(most == 2);
    // The fsync fails: an error, and nothing counted on.
    most = 77;
    sys::inject(sys::fault{sys::call::fsync, EIO, false, 0, false});
    CHECK(st->arrive_keyed(tally, "c.3", "n+3", 3, 3, most) ==
          std::error_code(EIO, std::system_category()));
    CHECK(most == 77);
    sys::inject(std::nullopt);
    // Arriving again counts c once: key 3 has a, b and c.
    REQUIRE_FALSE(st->arrive_keyed(tally, "c.3", "n+3", 3, 3, most));
    CHECK(most == 3);
    REQUIRE_FALSE(st->arrive_keyed(tally, "b.2", "n+2", 2, 4, most));
    CHECK(most == 3);
    // The keys are no arrivals: the tally reads its three members.
    std::vector<store::backend::arrival> arrived;
    REQUIRE_FALSE(st->arrivals(tally, arrived));
    CHECK(arrived == std::vector<store::backend::arrival>{
                         {"a.1", "n+1"}, {"b.2", "n+2"}, {"c.3", "n+3"}});
    const auto dir = std::filesystem::path(tmp / "store") / store::bucket_dir("job", 1) / ".ARRIVED";
    REQUIRE(std::filesystem::is_directory(dir / ".keys"));
    CHECK(std::filesystem::hard_link_count(dir / ".keys" / "c3") == 4);
    CHECK(std::filesystem::hard_link_count(dir / ".keys" / "c4") == 2);
    // Ranges it does not take, and a stranger's file under a key's link.
    CHECK(st->arrive_keyed(tally, "d.5", "n", 5, 4, most) == errc::invalid_argument);
    CHECK(st->arrive_keyed(tally, "d.5", "n", 5, 5 + store::backend::max_keys, most) ==
          errc::invalid_argument);
    { std::ofstream(dir / ".keys" / "5=d.5") << "x"; }
    CHECK(st->arrive_keyed(tally, "d.5", "n", 5, 5, most) == errc::unsafe_path);
    // An arrival without keys (an iofwd from before them) may hold any
    // version: every keyed arrival after it sees the whole count.
    // (d's arrival was counted before its key was refused: a, b, c, d, e.)
    REQUIRE_FALSE(st->arrive(tally, "e.9", "n+9", most));
    CHECK(most == 5);
    REQUIRE_FALSE(st->arrive_keyed(tally, "f.7", "n+7", 7, 7, most));
    CHECK(most == 6);
    // Removed with its keys.
    REQUIRE_FALSE(st->remove_arrivals(tally));
    CHECK_FALSE(std::filesystem::exists(dir));
    CHECK(st->arrivals(tally, arrived) == errc::not_found);
    CHECK_FALSE(st->remove_arrivals(tally));
    // And made anew after.
    REQUIRE_FALSE(st->arrive_keyed(tally, "a.1", "n+1", 1, 1, most));
    CHECK(most == 1);
}

TEST_CASE("a tally whose counted file is full of links counts on in the next", "[store]")
{
    // ext4 takes 65,000 links per file: a bucket of 1,000 nodes' packs of
    // one version each. The seam fails the second arrival's link with
    // EMLINK, as a full file would.
    test::temp_dir tmp;
    auto st = open_store(tmp);
    test::fault_guard guard;
    const std::string tally = store::bucket_arrivals_object("job", 1);
    const auto dir = std::filesystem::path(tmp / "store") / store::bucket_dir("job", 1) / ".ARRIVED";
    std::uint64_t count = 0;
    REQUIRE_FALSE(st->arrive(tally, "a.1", "n", count));
    CHECK(count == 1);
    sys::inject(sys::fault{sys::call::link, EMLINK, false, 0, false});
    REQUIRE_FALSE(st->arrive(tally, "b.1", "n", count));
    CHECK(count == 2);
    CHECK(std::filesystem::hard_link_count(dir / ".count.1") == 2);
    REQUIRE_FALSE(st->arrive(tally, "c.1", "n", count));
    CHECK(count == 3);
    // A retry of b, whose link is to the second file: counted once.
    REQUIRE_FALSE(st->arrive(tally, "b.1", "n", count));
    CHECK(count == 3);
    std::vector<store::backend::arrival> arrived;
    REQUIRE_FALSE(st->arrivals(tally, arrived));
    CHECK(arrived.size() == 3);
    // Keys count on the same way (e's second link is its "keyed" one). a,
    // b and c came without keys: the whole count is the bound.
    std::uint64_t most = 0;
    REQUIRE_FALSE(st->arrive_keyed(tally, "d.1", "n", 1, 1, most));
    CHECK(most == 4);
    sys::inject(sys::fault{sys::call::link, EMLINK, false, 1, false});
    REQUIRE_FALSE(st->arrive_keyed(tally, "e.1", "n", 1, 1, most));
    CHECK(most == 5);
    CHECK(std::filesystem::hard_link_count(dir / ".keys" / "keyed") == 2);
    CHECK(std::filesystem::hard_link_count(dir / ".keys" / "keyed.1") == 2);
    CHECK(std::filesystem::hard_link_count(dir / ".keys" / "c1") == 3);
    // Every link failing: an error (the catalog says why in words), not a loop.
    sys::inject(sys::fault{sys::call::link, EMLINK, false, 0, true});
    CHECK(st->arrive(tally, "f.1", "n", count) == std::errc::too_many_links);
    sys::inject(std::nullopt);
    CHECK(std::filesystem::hard_link_count(dir / ".count.2") == 1);  // new, and the last
    CHECK_FALSE(std::filesystem::exists(dir / ".count.3"));
    // A directory where a counted file belongs is not ours to count, nor
    // to remove.
    const std::string other = store::bucket_arrivals_object("job", 9);
    REQUIRE_FALSE(st->arrive(other, "a.9", "n", count));
    const auto other_dir =
        std::filesystem::path(tmp / "store") / store::bucket_dir("job", 9) / ".ARRIVED";
    std::filesystem::remove(other_dir / ".count");
    std::filesystem::remove(other_dir / "a.9=n");
    std::filesystem::create_directory(other_dir / ".count");
    CHECK(st->arrive(other, "b.9", "n", count) == errc::unsafe_path);
    CHECK(st->remove_arrivals(other) == errc::unsafe_path);
    REQUIRE_FALSE(st->remove_arrivals(tally));
    CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("a tally refuses bad names and notes, a stranger's entry and two notes of one member",
          "[store]")
{
    test::temp_dir tmp;
    auto st = open_store(tmp);
    const std::string tally = store::arrivals_object("job", 1);
    std::uint64_t count = 0;
    const std::vector<std::string> bad_names{"", ".hidden", "a/b", "a\nb", "a=b",
                                             std::string(201, 'n')};
    for (const auto& bad : bad_names)
        CHECK(st->arrive(tally, bad, "", count) == errc::invalid_argument);
    CHECK(st->arrive(tally, "nodeA", "a b", count) == errc::invalid_argument);
    CHECK(st->arrive(tally, "nodeA", "a=b", count) == errc::invalid_argument);
    CHECK(st->arrive(tally, "nodeA", std::string(41, '1'), count) == errc::invalid_argument);
    REQUIRE_FALSE(st->arrive(tally, "nodeA", "1+2", count));
    CHECK(count == 1);
    // A file of the name that is not a link to the counted one (a stale
    // tally copied in by hand) is not counted as that member.
    const auto dir = std::filesystem::path(tmp / "store") / "job" / "v00000001" / ".ARRIVED";
    REQUIRE(std::filesystem::is_directory(dir));
    { std::ofstream(dir / "nodeB=") << "x"; }
    CHECK(st->arrive(tally, "nodeB", "", count) == errc::unsafe_path);
    std::filesystem::remove(dir / "nodeB=");
    // One member with two notes: counted, and refused when read.
    REQUIRE_FALSE(st->arrive(tally, "nodeA", "9+9", count));
    CHECK(count == 2);
    std::vector<store::backend::arrival> arrived;
    CHECK(st->arrivals(tally, arrived) == errc::corrupt);
}

TEST_CASE("the job-wide commit: the last node of N writes COMPLETE from what the nodes brought",
          "[store]")
{
    test::temp_dir tmp;
    store::counting_backend st(open_store(tmp));
    const std::vector<std::string> nodes{"nodeC", "nodeA", "nodeB"};
    auto manifest_of = [](const std::string& node) {
        return store::manifest{"job", node, 5, 1, {{0, 4096, 0x1234}}};
    };
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const auto m = manifest_of(nodes[i]);
        const auto text = store::format_manifest(m);
        REQUIRE_FALSE(st.put(store::manifest_object("job", 5, nodes[i]),
                             std::as_bytes(std::span(text))));
        const auto before = st.counts();
        bool completed = true;
        std::string why;
        REQUIRE_FALSE(store::try_complete(st, m, crc32c(std::as_bytes(std::span(text))), 3,
                                          completed, why));
        const auto cost = st.counts() - before;
        // Every node: one arrival; the last the arrivals and COMPLETE too.
        // No node lists or reads anything of the version.
        CHECK(cost.arrives == 1);
        CHECK(cost.lists == 0);
        CHECK(cost.reads == 0);
        if (i + 1 < nodes.size()) {
            CHECK_FALSE(completed);
            CHECK(cost.metadata() == 1);
        } else {
            CHECK(completed);
            CHECK(cost.arrival_reads == 1);
            CHECK(cost.commits == 1);
            CHECK(cost.metadata() == 4);  // arrive, arrivals, create + commit
        }
    }
    // The record checks out against the manifests the nodes wrote.
    store::version_info info;
    std::string why;
    REQUIRE_FALSE(store::load_version(st, "job", 5, info, why));
    REQUIRE(info.record.nodes.size() == 3);
    CHECK(info.record.nodes[0].node == "nodeA");
    CHECK(info.record.nodes[2].node == "nodeC");
    CHECK(info.manifests[1] == manifest_of("nodeB"));
    // One node's part only: its manifest read, no other.
    const auto before = st.counts();
    REQUIRE_FALSE(store::load_node(st, "job", 5, "nodeB", info, why));
    CHECK((st.counts() - before).reads == 2);  // the record, the manifest
    REQUIRE(info.manifests.size() == 1);
    CHECK(info.manifests[0] == manifest_of("nodeB"));
    // A node the job does not have: refused, in words.
    const auto d = manifest_of("nodeD");
    bool completed = false;
    CHECK(store::try_complete(st, d, 7, 3, completed, why) == errc::rank_mismatch);
    CHECK(why.find("has 4 nodes' manifests (nodeA, nodeB, nodeC, nodeD) but the job has 3 nodes") !=
          std::string::npos);
    CHECK_FALSE(completed);
}

TEST_CASE("a counting store counts each call by kind and passes it on", "[store]")
{
    test::temp_dir tmp;
    store::counting_backend st(open_store(tmp));
    const auto bytes = data_of(100, 2);
    REQUIRE_FALSE(st.put("job/v00000001/a", bytes));
    REQUIRE_FALSE(st.put("job/v00000001/b", bytes));
    std::vector<std::string> names;
    REQUIRE_FALSE(st.list("job/v00000001/", names));
    std::uint64_t size = 0;
    REQUIRE_FALSE(st.size("job/v00000001/a", size));
    CHECK(read_back(st, "job/v00000001/b", 100) == bytes);
    CHECK(st.remove("job/v00000001/a") == std::error_code());
    CHECK(st.size("job/v00000001/a", size) == errc::not_found);
    const auto n = st.counts();
    CHECK(n.created == 2);
    CHECK(n.writes == 2);
    CHECK(n.commits == 2);
    CHECK(n.lists == 1);
    CHECK(n.listed == 2);
    CHECK(n.stats == 2);
    CHECK(n.reads == 1);
    CHECK(n.removes == 1);
    CHECK(n.metadata() == 9);
}

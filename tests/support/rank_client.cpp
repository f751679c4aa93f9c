// A rank without MPI, for the integration tests: io_init, K io_writes of a
// pattern the verifier knows, io_finalize; every step printed as a line:
// --pause-ms M sleeps before every write and before io_finalize.
// --stall-at K prints "stalled" and sleeps (until killed) before write K.
// --restart: after io_init, io_latest_verified, io_read of that version, and
//   a byte-for-byte check against the pattern:  restart <errno> <version> <match>
// --probe V: io_latest, io_latest_verified, io_read(V), each printed as
//   latest <errno> <version> / verified <errno> <version> / read <errno> <size>
// --latest-only: io_latest before any io_init, then exit.
// --skip-finalize: after the writes, no io_finalize: prints "skipped" and
//   sleeps (until killed), as a rank blocked in MPI_Finalize after an error.
// --wait: io_wait after every write:  durable <k> <errno> <milliseconds>
// --go-file PATH: after io_init, waits (at most 60 s) until PATH exists before
//   the first write: a barrier the test opens, like an MPI job's after io_init.
// --list-fds: after the writes, before io_finalize, one line per open
//   descriptor:  fd <n> <what it is, as /proc/self/fd says>
// --gate-at K PATH: before write K, prints "gated K" and waits (at most 60 s)
//   until PATH exists: the test lets that write go when what it checks is done.
//   K equal to the number of versions: after the last write, before --read-back.
//   Given more than once, one gate for each K.
// --barrier: io_set_barrier with the barrier of a job of this one process
//   (it passes at once); each call printed:  barrier <pass> <errno> <milliseconds>
// --read-back: after the writes, io_read of the last version written and a
//   byte-for-byte check:  readback <errno> <size> <match>
// --again: after io_finalize, io_init again (no barrier set) and one more
//   version:  again init <errno> / again write <errno> / again finalize <errno>
//   init <errno>
//   write <k> <errno> <version> <milliseconds>
//   finalize <errno> <milliseconds>
//   error <io_last_error()>
// --size-at K BYTES: write K is BYTES long (at most --size, the buffer's);
//   given again for other writes.
// Exit status 0 when every call returned 0.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io.h"
#include "pattern.hpp"

namespace {

double ms_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A gate the test opens by creating the file: waits at most 60 s, and says
// so when the gate never opened (the order it was to keep is then lost).
void wait_for_file(const std::string& path)
{
    for (int waited = 0; ::access(path.c_str(), F_OK) != 0; ++waited) {
        if (waited == 6000) {
            std::printf("gate timed out %s\n", path.c_str());
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
}

// The barrier of a job of one process: every rank is here at once. It
// says each time it is called, so that a test sees which io_finalize used it.
int lone_barrier(void* ctx, double)
{
    const unsigned pass = ++*static_cast<unsigned*>(ctx);
    std::printf("barrier %u 0 0.000\n", pass);
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    unsigned rank = 0, ranks = 1, versions = 1;
    unsigned long long size = 1 << 20;
    int blocking = 1;
    unsigned pause_ms = 0;
    bool finalize = true;
    long stall_at = -1;
    bool restart = false;
    long long probe = -1;
    bool latest_only = false;
    bool skip_finalize = false;
    std::string go_file;
    bool list_fds = false;
    std::map<long, std::string> gates;  // --gate-at: the write, the file that lets it go
    bool wait_each = false;
    bool barrier = false;
    unsigned barrier_passes = 0;
    bool again = false;
    bool read_back = false;
    std::map<unsigned, unsigned long long> size_at;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto next = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
        if (a == "--rank") rank = static_cast<unsigned>(std::atoi(next()));
        else if (a == "--ranks") ranks = static_cast<unsigned>(std::atoi(next()));
        else if (a == "--size") size = std::strtoull(next(), nullptr, 10);
        else if (a == "--versions") versions = static_cast<unsigned>(std::atoi(next()));
        else if (a == "--poll") blocking = 0;
        else if (a == "--pause-ms") pause_ms = static_cast<unsigned>(std::atoi(next()));
        else if (a == "--no-finalize") finalize = false;
        else if (a == "--stall-at") stall_at = std::atol(next());
        else if (a == "--restart") restart = true;
        else if (a == "--probe") probe = std::atoll(next());
        else if (a == "--latest-only") latest_only = true;
        else if (a == "--skip-finalize") skip_finalize = true;
        else if (a == "--go-file") go_file = next();
        else if (a == "--list-fds") list_fds = true;
        else if (a == "--gate-at") {
            const long k = std::atol(next());
            gates[k] = next();
        }
        else if (a == "--wait") wait_each = true;
        else if (a == "--again") again = true;
        else if (a == "--read-back") read_back = true;
        else if (a == "--barrier") barrier = true;
        else if (a == "--size-at") {
            const auto k = static_cast<unsigned>(std::atoi(next()));
            size_at[k] = std::strtoull(next(), nullptr, 10);
        }
        else {
            std::fprintf(stderr, "rank_client: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    void* mem = nullptr;
    if (posix_memalign(&mem, 4096, size) != 0)
        return 3;
    // Freed on every way out (LeakSanitizer runs these tests too).
    const std::unique_ptr<void, decltype(&std::free)> owner(mem, &std::free);
    auto* buf = static_cast<std::byte*>(mem);

    int failures = 0;
    std::uint64_t last_written = 0;  // the last version written (--read-back)
    if (latest_only) {
        std::uint64_t v = 0;
        const int lrc = io_latest(&v);
        std::printf("latest %d %llu\n", lrc, static_cast<unsigned long long>(v));
        if (lrc)
            std::printf("error %s\n", io_last_error());
        return lrc ? 1 : 0;
    }
    int rc = io_init(buf, size, rank, ranks, nullptr, blocking);
    std::printf("init %d\n", rc);
    if (rc) {
        std::printf("error %s\n", io_last_error());
        return 1;
    }
    const std::string node = io_node_name();
    if (barrier && (rc = io_set_barrier(lone_barrier, &barrier_passes)) != 0) {
        std::printf("error %s\n", io_last_error());
        return 1;
    }
    if (restart) {
        std::uint64_t v = 0, got = 0;
        rc = io_latest_verified(&v);
        int match = 0;
        if (rc == 0)
            rc = io_read(v, buf, size, &got);
        if (rc == 0) {
            std::vector<std::byte> expect(size);
            example::fill_pattern(expect.data(), size, example::pattern_seed(node, rank, v));
            match = got == size && std::memcmp(expect.data(), buf, size) == 0;
        }
        std::printf("restart %d %llu %d\n", rc, static_cast<unsigned long long>(v), match);
        if (rc || !match) {
            std::printf("error %s\n", io_last_error());
            ++failures;
        }
    }
    if (probe >= 0) {
        std::uint64_t v = 0, got = 0;
        rc = io_latest(&v);
        std::printf("latest %d %llu\n", rc, static_cast<unsigned long long>(v));
        rc = io_latest_verified(&v);
        std::printf("verified %d %llu\n", rc, static_cast<unsigned long long>(v));
        std::printf("note %s\n", io_last_error());
        rc = io_read(static_cast<std::uint64_t>(probe), buf, size, &got);
        std::printf("read %d %llu\n", rc, static_cast<unsigned long long>(got));
        if (rc)
            std::printf("error %s\n", io_last_error());
    }
    if (!go_file.empty())
        wait_for_file(go_file);
    for (unsigned k = 0; k < versions; ++k) {
        if (const auto g = gates.find(static_cast<long>(k)); g != gates.end()) {
            std::printf("gated %u\n", k);
            wait_for_file(g->second);
        }
        if (static_cast<long>(k) == stall_at) {
            std::printf("stalled\n");
            std::this_thread::sleep_for(std::chrono::hours(1));
        }
        if (pause_ms)
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
        std::uint64_t next = 0;
        io_next_version(&next);
        const auto at = size_at.find(k);
        const auto length = std::min(size, at == size_at.end() ? size : at->second);
        example::fill_pattern(buf, length, example::pattern_seed(node, rank, next));
        const auto t0 = std::chrono::steady_clock::now();
        std::printf("writing %u\n", k);
        std::uint64_t version = 0;
        rc = io_write_version(length, &version);
        std::printf("write %u %d %llu %.3f\n", k, rc, static_cast<unsigned long long>(version),
                    ms_since(t0));
        if (rc == 0)
            last_written = version;
        if (rc) {
            std::printf("error %s\n", io_last_error());
            ++failures;
            break;
        }
        if (wait_each) {
            rc = io_wait(version);
            std::printf("durable %u %d %.3f\n", k, rc, ms_since(t0));
            if (rc) {
                std::printf("error %s\n", io_last_error());
                ++failures;
                break;
            }
        }
    }
    if (const auto g = gates.find(static_cast<long>(versions)); g != gates.end()) {
        std::printf("gated %u\n", versions);
        wait_for_file(g->second);
    }
    if (read_back && last_written > 0) {
        std::vector<std::byte> back(size), expect(size);
        std::uint64_t got = 0;
        rc = io_read(last_written, back.data(), size, &got);
        example::fill_pattern(expect.data(), size, example::pattern_seed(node, rank, last_written));
        const bool match = rc == 0 && got == size && back == expect;
        std::printf("readback %d %llu %d\n", rc, static_cast<unsigned long long>(got), match);
        if (!match) {
            std::printf("error %s\n", io_last_error());
            ++failures;
        }
    }
    if (list_fds) {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
            std::error_code lec;
            const auto what = std::filesystem::read_symlink(e.path(), lec);
            std::printf("fd %s %s\n", e.path().filename().c_str(), what.c_str());
        }
    }
    if (skip_finalize) {
        std::printf("skipped\n");
        std::this_thread::sleep_for(std::chrono::hours(1));
    }
    if (finalize) {
        if (pause_ms)
            std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
        std::printf("finalizing\n");
        const auto t0 = std::chrono::steady_clock::now();
        rc = io_finalize();
        std::printf("finalize %d %.3f\n", rc, ms_since(t0));
        if (rc) {
            std::printf("error %s\n", io_last_error());
            ++failures;
        }
    }
    if (again) {
        rc = io_init(buf, size, rank, ranks, nullptr, blocking);
        std::printf("again init %d\n", rc);
        std::uint64_t next = 0, version = 0;
        if (rc == 0) {
            io_next_version(&next);
            example::fill_pattern(buf, size, example::pattern_seed(node, rank, next));
            rc = io_write_version(size, &version);
            std::printf("again write %d\n", rc);
            const int frc = io_finalize();
            std::printf("again finalize %d\n", frc);
            rc = rc ? rc : frc;
        }
        if (rc) {
            std::printf("error %s\n", io_last_error());
            ++failures;
        }
    }
    return failures ? 1 : 0;
}

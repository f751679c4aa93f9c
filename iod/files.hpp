#pragma once
// Files the MPI shim writes through the daemon, kept by path: one record per
// file shared by every rank on this node that has it open. The daemon writes
// the pulled bytes at their offsets into the file itself (the path the
// application named), so the result is the file a run without the shim makes.
//
// Order: a write that overlaps one still in flight to the same file waits for
// it, so the bytes that land are the last ones written, as with MPI-IO. A
// write is a list of runs (one, or a file view's pieces): writes whose runs
// interleave without touching (ranks writing through a strided view) go on
// side by side.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "fd.hpp"
#include "protocol.hpp"
#include "store/backend.hpp"

namespace iofwd::iod {

class forwarded_file final {
public:
    // The file opened for writing through the page cache, and with O_DIRECT
    // (empty where the file system has none).
    struct descriptors {
        unique_fd buffered;
        unique_fd direct;
    };

    forwarded_file(std::string path, unique_fd fd, unique_fd direct)
        : path_(std::move(path)),
          fds_(std::make_shared<descriptors>(descriptors{std::move(fd), std::move(direct)}))
    {
    }

    const std::string& path() const noexcept { return path_; }

    // The file bytes one write covers: its runs, in increasing order, disjoint.
    using runs = std::shared_ptr<const std::vector<proto::file_run>>;
    static runs one_run(std::uint64_t offset, std::uint64_t length);
    // Whether a write of these runs goes through the page cache, some of
    // it at least (runs too small or not aligned for O_DIRECT): where the
    // kernel takes the file's lock for each piece.
    static bool through_page_cache(const std::vector<proto::file_run>& r);

    // Runs `start` now, or once no write in flight overlaps `r`.
    void submit(runs r, std::function<void()> start);
    // The write of `r` (the same pointer) ended (its bytes landed or not).
    void finished(const runs& r);
    // Runs `fn` once nothing is in flight or waiting (now, if that is so).
    void when_idle(std::function<void()> fn);
    bool idle() const noexcept { return in_flight_.empty() && deferred_.empty(); }

    // For the flusher: writes byte `offset` of a write's stream where `r`
    // puts it (the first run's bytes first, then the next run's).
    std::unique_ptr<store::object_writer> writer(runs r) const;
    // fsync, on a flusher thread.
    std::error_code sync() const;

    unsigned handles = 0;  // sessions' open handles on it

private:
    struct waiting {
        runs r;
        std::function<void()> start;
    };
    bool overlaps(const runs& r) const;
    void run_ready();

    std::string path_;
    std::shared_ptr<const descriptors> fds_;  // shared with writers on flusher threads
    std::vector<runs> in_flight_;
    std::deque<waiting> deferred_;
    std::vector<std::function<void()>> idle_waiters_;
};

class file_table final {
public:
    // The record for `path`, opening the file for writing when no rank on
    // this node has it open. The file must exist (MPI_File_open created it).
    std::error_code open(const std::string& path, std::shared_ptr<forwarded_file>& out,
                         std::string& why);
    // A handle was closed: forgets the record once nobody holds it and its
    // writes are done.
    void release(const std::shared_ptr<forwarded_file>& f);
    std::shared_ptr<forwarded_file> find(const std::string& path) const;

private:
    std::map<std::string, std::shared_ptr<forwarded_file>> files_;
};

}  // namespace iofwd::iod

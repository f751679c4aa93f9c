#pragma once
// Files the MPI shim writes through the daemon, kept by path: one record per
// file shared by every rank on this node that has it open. The daemon writes
// the pulled bytes at their offsets into the file itself (the path the
// application named), so the result is the file a run without the shim makes.
//
// Order: a write that overlaps one still in flight to the same file waits for
// it, so the bytes that land are the last ones written, as with MPI-IO.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "fd.hpp"
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

    // Runs `start` now, or once no write in flight overlaps [offset, offset+length).
    void submit(std::uint64_t offset, std::uint64_t length, std::function<void()> start);
    // The write [offset, offset+length) ended (its bytes landed or not).
    void finished(std::uint64_t offset, std::uint64_t length);
    // Runs `fn` once nothing is in flight or waiting (now, if that is so).
    void when_idle(std::function<void()> fn);
    bool idle() const noexcept { return ranges_.empty() && deferred_.empty(); }

    // For the flusher: writes [offset, ...) of the file at base + offset.
    std::unique_ptr<store::object_writer> writer(std::uint64_t base) const;
    // fsync, on a flusher thread.
    std::error_code sync() const;

    unsigned handles = 0;  // sessions' open handles on it

private:
    struct range {
        std::uint64_t begin, end;
    };
    struct waiting {
        range r;
        std::function<void()> start;
    };
    bool overlaps(range r) const;
    void run_ready();

    std::string path_;
    std::shared_ptr<const descriptors> fds_;  // shared with writers on flusher threads
    std::vector<range> ranges_;      // in flight
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

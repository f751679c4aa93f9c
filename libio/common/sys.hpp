#pragma once
// The seam around the system calls that make data durable. Production code
// calls these instead of the libc functions; a test, or the IOFWD_FAULT
// environment variable of a real iod, can make one of them fail with a chosen
// errno after a number of successful calls: a full disk (ENOSPC), an I/O
// error (EIO), an interrupted call (EINTR), or a short write.
//
//   IOFWD_FAULT=<call>:<errno name>[:<successful calls before failing>]
//   e.g. IOFWD_FAULT=pwrite:ENOSPC:3   IOFWD_FAULT=fsync:EIO   IOFWD_FAULT=pwrite:SHORT
//   (calls: pwrite (pwritev_all too) pread fsync fdatasync rename open fallocate link)
//   DELAY instead of an errno makes the call succeed one second late (a slow disk),
//   DELAYn n seconds late (1-60); DELAYn+<errno name> fails n seconds late (a
//   full disk found slowly: posix_fallocate of a large file on ext4). Delayed
//   calls are late one after another; calls of the other kinds go on meanwhile.
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace iofwd::sys {

enum class call { pwrite, fsync, rename, open, pread, fdatasync, fallocate, link };

struct fault {
    call which = call::pwrite;
    int error = 0;             // errno to fail with; 0 with `short_io` for a short transfer
    bool short_io = false;     // transfer half the bytes instead of failing
    std::uint64_t after = 0;   // calls that succeed before the fault fires
    bool repeat = true;        // keep failing after the first time
    unsigned delay_s = 0;      // this many seconds late: succeed, or fail with `error`
    // `link` only: the calls whose new name holds this text (empty: all).
    // Others are neither counted nor failed.
    std::string name_holds = {};
};

// Arms (or, with nullopt, disarms) the fault. Thread-safe.
void inject(std::optional<fault> f);
// Arms several faults, each counting the calls of its kind on its own (none:
// disarms). Thread-safe.
void inject(const std::vector<fault>& all);

// Reads IOFWD_FAULT; false and a sentence in `why` when it is set but malformed.
bool inject_from_env(std::string& why);

// Same contracts as the libc calls (-1 and errno on failure).
ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t offset);
ssize_t pread(int fd, void* buf, std::size_t n, off_t offset);
int fsync(int fd);
// fdatasync(2): the node journal's (store/journal.hpp), faulted apart from
// fsync so that a test can fail or delay one and not the other.
int fdatasync(int fd);
// replace = false: fails with EEXIST instead of replacing an existing `to`
// (EINVAL where the file system cannot tell).
int rename(const char* from, const char* to, bool replace = true);
int open(const char* path, int flags, mode_t mode = 0);
// In a directory given by descriptor (faults as rename and open).
int renameat(int dirfd, const char* from, const char* to, bool replace = true);
int openat(int dirfd, const char* name, int flags, mode_t mode = 0);
// posix_fallocate(3): 0 or the error number (not -1 and errno).
int posix_fallocate(int fd, off_t offset, off_t length);
// linkat(2) within one directory, no flags: a tally's arrival (EMLINK when
// the file has as many links as its file system takes).
int linkat(int dirfd, const char* from, const char* to);

// Loops over short transfers and EINTR; -1 and errno on failure.
int pwrite_all(int fd, const void* buf, std::size_t n, off_t offset);
// pwritev(2) of `count` buffers (at most IOV_MAX) in one call where it can,
// faulted as pwrite (SHORT: half the bytes left): a record written from where
// its pieces are, without copying them together first. Modifies `iov` as
// it goes.
int pwritev_all(int fd, struct iovec* iov, int count, off_t offset);
int pread_all(int fd, void* buf, std::size_t n, off_t offset);

}  // namespace iofwd::sys

#include "sys.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <chrono>
#include <thread>
#include <vector>

namespace iofwd::sys {
namespace {

std::atomic<bool> armed{false};
std::mutex fault_mutex;
std::mutex delay_mutex;

// An armed fault and what it has seen: each counts the calls of its kind
// on its own.
struct armed_fault {
    fault f;
    std::uint64_t calls_seen = 0;
    bool fired = false;
};
std::vector<armed_fault> faults;

enum class verdict { pass, fail, shorten };

// `name`: the name a link makes (faults that look at names count only the
// calls whose name holds theirs).
verdict check(call c, std::string_view name = {})
{
    if (!armed.load(std::memory_order_relaxed))
        return verdict::pass;
    std::unique_lock lock(fault_mutex);
    // Every fault of this call counts it; the first due fails it.
    const fault* hit = nullptr;
    for (auto& a : faults) {
        if (a.f.which != c ||
            (!a.f.name_holds.empty() && name.find(a.f.name_holds) == std::string_view::npos) ||
            a.calls_seen++ < a.f.after || (a.fired && !a.f.repeat))
            continue;
        if (!hit) {
            a.fired = true;
            hit = &a.f;
        }
    }
    if (!hit)
        return verdict::pass;
    if (hit->short_io)
        return verdict::shorten;
    const fault f = *hit;
    // Delayed calls are late one at a time, as on a disk that serves one
    // request at a time; calls of the other kinds go on meanwhile (a slow
    // rename does not hold up the journal's appends).
    lock.unlock();
    if (f.delay_s > 0) {
        std::lock_guard one_at_a_time(delay_mutex);
        std::this_thread::sleep_for(std::chrono::seconds(f.delay_s));
        if (f.error == 0)
            return verdict::pass;
    }
    errno = f.error;
    return verdict::fail;
}

bool parse_call(std::string_view s, call& out)
{
    if (s == "pwrite") out = call::pwrite;
    else if (s == "pread") out = call::pread;
    else if (s == "fsync") out = call::fsync;
    else if (s == "fdatasync") out = call::fdatasync;
    else if (s == "rename") out = call::rename;
    else if (s == "open") out = call::open;
    else if (s == "fallocate") out = call::fallocate;
    else if (s == "link") out = call::link;
    else return false;
    return true;
}

// The errno a name stands for; 0 for none of these.
int errno_named(std::string_view s)
{
    static constexpr struct { const char* name; int value; } names[] = {
        {"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EINTR", EINTR}, {"EDQUOT", EDQUOT},
        {"EROFS", EROFS}, {"EACCES", EACCES}, {"ENOENT", ENOENT}, {"EAGAIN", EAGAIN},
        {"EMLINK", EMLINK},
    };
    for (const auto& n : names)
        if (s == n.name)
            return n.value;
    return 0;
}

bool parse_errno(std::string_view s, fault& f)
{
    if (s == "SHORT") {
        f.short_io = true;
        return true;
    }
    if (s.substr(0, 5) == "DELAY") {
        auto digits = s.substr(5);
        if (const auto plus = digits.find('+'); plus != std::string_view::npos) {
            // DELAYn+ENOSPC: the error, n seconds late.
            f.error = errno_named(digits.substr(plus + 1));
            if (f.error == 0)
                return false;
            digits = digits.substr(0, plus);
        }
        if (digits.empty()) {
            f.delay_s = 1;
            return true;
        }
        unsigned n = 0;
        for (const char c : digits) {
            if (c < '0' || c > '9' || n > 60)
                return false;
            n = n * 10 + static_cast<unsigned>(c - '0');
        }
        if (n < 1 || n > 60)
            return false;
        f.delay_s = n;
        return true;
    }
    f.error = errno_named(s);
    return f.error != 0;
}

}  // namespace

void inject(std::optional<fault> f)
{
    std::vector<fault> all;
    if (f)
        all.push_back(*f);
    inject(all);
}

void inject(const std::vector<fault>& all)
{
    std::lock_guard lock(fault_mutex);
    faults.clear();
    for (const auto& f : all)
        faults.push_back({f});
    armed.store(!faults.empty());
}

namespace {

// One fault of IOFWD_FAULT: call[@TEXT]:ERROR[:N[:once]].
bool parse_fault(std::string_view spec, fault& f, std::string& why)
{
    const auto c1 = spec.find(':');
    auto named = c1 == std::string_view::npos ? spec : spec.substr(0, c1);
    const auto at = named.find('@');
    if (at != std::string_view::npos) {
        f.name_holds = std::string(named.substr(at + 1));
        named = named.substr(0, at);
    }
    if (c1 == std::string_view::npos || !parse_call(named, f.which)) {
        why = "IOFWD_FAULT: '" + std::string(spec) +
              "' must look like pwrite:ENOSPC[:N[:once]] or link@TEXT:EIO[:N[:once]], several "
              "separated by commas (calls: pwrite pread fsync fdatasync rename open fallocate "
              "link)";
        return false;
    }
    if (at != std::string_view::npos && (f.which != call::link || f.name_holds.empty())) {
        why = "IOFWD_FAULT: '" + std::string(spec) +
              "': @TEXT (only the calls whose new name holds TEXT) applies to link only, "
              "with some text";
        return false;
    }
    auto rest = spec.substr(c1 + 1);
    const auto c2 = rest.find(':');
    if (!parse_errno(rest.substr(0, c2), f)) {
        why = "IOFWD_FAULT: unknown error name '" + std::string(rest.substr(0, c2)) +
              "' (ENOSPC EIO EINTR EDQUOT EROFS EACCES ENOENT EAGAIN EMLINK SHORT DELAY DELAYn with n 1-60 seconds, DELAYn+errno)";
        return false;
    }
    if (f.short_io && f.which != call::pwrite && f.which != call::pread) {
        why = "IOFWD_FAULT: SHORT applies to pwrite and pread only";
        return false;
    }
    if (c2 != std::string_view::npos) {
        // N, or N:once (the call fails once, the ones after pass).
        std::string n(rest.substr(c2 + 1));
        if (n.ends_with(":once")) {
            n.resize(n.size() - 5);
            f.repeat = false;
        }
        char* end = nullptr;
        f.after = std::strtoull(n.c_str(), &end, 10);
        if (n.empty() || *end) {
            why = "IOFWD_FAULT: '" + n + "' is not a call count";
            return false;
        }
    }
    return true;
}

}  // namespace

bool inject_from_env(std::string& why)
{
    const char* env = std::getenv("IOFWD_FAULT");
    if (!env || !*env)
        return true;
    // Several faults, each counting the calls of its kind on its own. Two
    // due on the same call: the first listed fails it, the other the next
    // call of that kind.
    std::vector<fault> all;
    std::string_view spec(env);
    for (;;) {
        const auto comma = spec.find(',');
        fault f;
        if (!parse_fault(spec.substr(0, comma), f, why))
            return false;
        all.push_back(f);
        if (comma == std::string_view::npos)
            break;
        spec = spec.substr(comma + 1);
    }
    inject(all);
    return true;
}

ssize_t pwrite(int fd, const void* buf, std::size_t n, off_t offset)
{
    switch (check(call::pwrite)) {
    case verdict::fail: return -1;
    case verdict::shorten: return ::pwrite(fd, buf, n > 1 ? n / 2 : n, offset);
    case verdict::pass: break;
    }
    return ::pwrite(fd, buf, n, offset);
}

ssize_t pread(int fd, void* buf, std::size_t n, off_t offset)
{
    switch (check(call::pread)) {
    case verdict::fail: return -1;
    case verdict::shorten: return ::pread(fd, buf, n > 1 ? n / 2 : n, offset);
    case verdict::pass: break;
    }
    return ::pread(fd, buf, n, offset);
}

int fsync(int fd)
{
    if (check(call::fsync) == verdict::fail)
        return -1;
    return ::fsync(fd);
}

int fdatasync(int fd)
{
    if (check(call::fdatasync) == verdict::fail)
        return -1;
    return ::fdatasync(fd);
}

int rename(const char* from, const char* to, bool replace)
{
    if (check(call::rename) == verdict::fail)
        return -1;
    if (!replace)
        return ::renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
    return ::rename(from, to);
}

int open(const char* path, int flags, mode_t mode)
{
    if (check(call::open) == verdict::fail)
        return -1;
    return ::open(path, flags, mode);
}

int renameat(int dirfd, const char* from, const char* to, bool replace)
{
    if (check(call::rename) == verdict::fail)
        return -1;
    return ::renameat2(dirfd, from, dirfd, to, replace ? 0 : RENAME_NOREPLACE);
}

int openat(int dirfd, const char* name, int flags, mode_t mode)
{
    if (check(call::open) == verdict::fail)
        return -1;
    return ::openat(dirfd, name, flags, mode);
}

int posix_fallocate(int fd, off_t offset, off_t length)
{
    if (check(call::fallocate) == verdict::fail)
        return errno;
    return ::posix_fallocate(fd, offset, length);
}

int linkat(int dirfd, const char* from, const char* to)
{
    if (check(call::link, to) == verdict::fail)
        return -1;
    return ::linkat(dirfd, from, dirfd, to, 0);
}

int pwritev_all(int fd, struct iovec* iov, int count, off_t offset)
{
    while (count > 0 && iov->iov_len == 0) {
        ++iov;
        --count;
    }
    while (count > 0) {
        ssize_t w = 0;
        switch (check(call::pwrite)) {
        case verdict::fail: w = -1; break;  // EINTR is retried below
        case verdict::shorten: {
            // Half of what is left (all of it when one byte), as the kernel
            // may stop: within any buffer, not only the first.
            std::size_t total = 0;
            for (int i = 0; i < count; ++i)
                total += iov[i].iov_len;
            std::size_t want = total > 1 ? total / 2 : total;
            std::vector<iovec> cut;
            for (int i = 0; i < count && want > 0; ++i) {
                cut.push_back({iov[i].iov_base, std::min(want, iov[i].iov_len)});
                want -= cut.back().iov_len;
            }
            w = ::pwritev(fd, cut.data(), static_cast<int>(cut.size()), offset);
            break;
        }
        case verdict::pass: w = ::pwritev(fd, iov, count, offset); break;
        }
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        offset += w;
        auto left = static_cast<std::size_t>(w);
        while (count > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            ++iov;
            --count;
        }
        if (count > 0) {
            iov->iov_base = static_cast<char*>(iov->iov_base) + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int pwrite_all(int fd, const void* buf, std::size_t n, off_t offset)
{
    iovec one{const_cast<void*>(buf), n};
    return pwritev_all(fd, &one, 1, offset);
}

int pread_all(int fd, void* buf, std::size_t n, off_t offset)
{
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
        const std::size_t ask = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
        const ssize_t r = pread(fd, p, ask, offset);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = ENODATA;  // the file is shorter than expected
            return -1;
        }
        p += r;
        n -= static_cast<std::size_t>(r);
        offset += r;
    }
    return 0;
}

}  // namespace iofwd::sys

#pragma once
// A memory mapping (mmap) that unmaps itself. Move-only. And faulting a
// range of memory in ahead of its first writes, off the path that waits.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <system_error>
#include <utility>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace iofwd {

class mapping final {
public:
    mapping() noexcept = default;
    mapping(mapping&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), size_(std::exchange(o.size_, 0))
    {
    }
    mapping& operator=(mapping&& o) noexcept
    {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping() { reset(); }

    // mmap(nullptr, size, prot, flags, fd, 0); on failure errno's code and
    // `out` unchanged.
    static std::error_code map(std::size_t size, int prot, int flags, int fd, mapping& out)
    {
        void* p = ::mmap(nullptr, size, prot, flags, fd, 0);
        if (p == MAP_FAILED)
            return {errno, std::system_category()};
        out.reset();
        out.p_ = p;
        out.size_ = size;
        return {};
    }

    void* get() const noexcept { return p_; }
    std::size_t size() const noexcept { return size_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }
    // Unmaps (a failure cannot be acted on: the range stays reserved).
    void reset() noexcept
    {
        if (p_)
            ::munmap(std::exchange(p_, nullptr), std::exchange(size_, 0));
    }

private:
    void* p_ = nullptr;
    std::size_t size_ = 0;
};

// Faults [begin, begin + length) in for writing (MADV_POPULATE_WRITE) a
// step at a time, each up to the next multiple of `step` in the address
// space: each call holds the process's mmap lock, which its other threads'
// mmap calls wait for. `between` runs before each step (to pause for more
// urgent work); `stop` ends it early. A step refused with EINTR or EAGAIN is
// left to the first writes to fault. Another failure (EINVAL: a kernel
// before 5.14) ends it: its error, with `failed_at` the offset it stopped at.
inline std::error_code populate_for_write(void* begin, std::size_t length, std::size_t step,
                                          const std::stop_token& stop,
                                          const std::function<void()>& between,
                                          std::size_t& failed_at)
{
    const auto start = reinterpret_cast<std::uintptr_t>(begin);
    const std::uintptr_t end = start + length;
    for (std::uintptr_t at = start; at < end && !stop.stop_requested();) {
        if (between) {
            between();
            if (stop.stop_requested())
                break;
        }
        const std::uintptr_t next = std::min(end, (at + step) / step * step);
        if (::madvise(reinterpret_cast<void*>(at), next - at, MADV_POPULATE_WRITE) != 0 &&
            errno != EINTR && errno != EAGAIN) {
            failed_at = at - start;
            return {errno, std::system_category()};
        }
        at = next;
    }
    return {};
}

}  // namespace iofwd

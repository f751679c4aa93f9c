#pragma once
// A memory mapping (mmap) that unmaps itself. Move-only.
#include <sys/mman.h>

#include <cstddef>
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

}  // namespace iofwd

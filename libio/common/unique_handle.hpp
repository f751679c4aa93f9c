#pragma once
#include <utility>

namespace iofwd {

// Owns one handle of a C library (UCX, librados): move-only, released once,
// by `Release` (a function object, which may carry what the release needs
// besides the handle). The library's own "null" handle is nullptr.
template <typename H, typename Release>
class unique_handle final {
public:
    unique_handle() noexcept = default;
    explicit unique_handle(H h, Release r = {}) noexcept : h_(h), release_(r) {}
    unique_handle(unique_handle&& o) noexcept
        : h_(std::exchange(o.h_, nullptr)), release_(o.release_)
    {
    }
    unique_handle& operator=(unique_handle&& o) noexcept
    {
        if (this != &o) {
            reset();
            h_ = std::exchange(o.h_, nullptr);
            release_ = o.release_;
        }
        return *this;
    }
    unique_handle(const unique_handle&) = delete;
    unique_handle& operator=(const unique_handle&) = delete;
    ~unique_handle() { reset(); }

    H get() const noexcept { return h_; }
    explicit operator bool() const noexcept { return h_ != nullptr; }
    // The handle, no longer owned.
    H release() noexcept { return std::exchange(h_, nullptr); }
    void reset() noexcept
    {
        if (h_)
            release_(std::exchange(h_, nullptr));
    }
    // Releases the one it has, then owns `h`.
    void reset(H h) noexcept
    {
        reset();
        h_ = h;
    }

private:
    H h_ = nullptr;
    [[no_unique_address]] Release release_{};
};

// The release for a library whose release is one function of the handle:
// unique_handle<rados_completion_t, release_with<rados_aio_release>>.
template <auto Fn>
struct release_with {
    template <typename H>
    void operator()(H h) const noexcept
    {
        Fn(h);
    }
};

}  // namespace iofwd

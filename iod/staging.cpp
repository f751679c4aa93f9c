#include "staging.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "errors.hpp"
#include "log.hpp"

namespace iofwd::iod {

staging::~staging()
{
    mem_ = ucx::memory{};  // deregister before unmapping
    if (base_ && ::munmap(base_, mapped_) != 0)
        log_warn("munmap of staging memory failed: {}", std::strerror(errno));
}

std::error_code staging::init(const ucx::context& ctx, std::uint64_t total, std::uint64_t slot_size)
{
    if (slot_size == 0 || total < slot_size)
        return make_error_code(errc::invalid_argument);
    slots_ = static_cast<std::uint32_t>(total / slot_size);
    slot_size_ = slot_size;
    mapped_ = slot_size_ * slots_;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return last_system_error();
    base_ = static_cast<std::byte*>(p);
    // Huge pages where the kernel allows, then touch every page once: the first
    // touch of a fresh 4 KiB page costs ~10 us here, which must not happen on
    // the data path.
    ::madvise(base_, mapped_, MADV_HUGEPAGE);
    std::memset(base_, 0, mapped_);
    if (auto ec = ucx::memory::map(ctx, base_, mapped_, mem_))
        return ec;
    free_.reserve(slots_);
    for (std::uint32_t i = slots_; i-- > 0;)
        free_.push_back(i);
    return {};
}

void staging::acquire(waiter w)
{
    if (!free_.empty() && waiters_.empty()) {
        const auto i = free_.back();
        free_.pop_back();
        w(slot{i, base_ + std::uint64_t{i} * slot_size_, slot_size_});
        return;
    }
    waiters_.push_back(std::move(w));
}

void staging::release(const slot& s)
{
    if (!waiters_.empty()) {
        auto w = std::move(waiters_.front());
        waiters_.pop_front();
        w(s);
        return;
    }
    free_.push_back(s.index);
}

}  // namespace iofwd::iod

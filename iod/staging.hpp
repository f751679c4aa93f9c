#pragma once
// The daemon's staging memory: one region, mapped, pre-faulted and registered
// with UCX once at start, cut into equal slots. Pulls land in slots; a slot is
// held until its bytes are in the store. The region never grows: when every
// slot is busy, requests wait in arrival order until a flush frees one.
// Used only from the event-loop thread.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <system_error>
#include <vector>

#include "ucx.hpp"

namespace iofwd::iod {

struct slot {
    std::uint32_t index = 0;
    std::byte* data = nullptr;
    std::uint64_t size = 0;
};

class staging final {
public:
    staging() = default;
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    ~staging();

    // total is rounded down to a multiple of slot_size (at least one slot).
    std::error_code init(const ucx::context& ctx, std::uint64_t total, std::uint64_t slot_size);

    using waiter = std::function<void(slot)>;
    // Calls `w` with a free slot, now or later (in the order of the calls).
    void acquire(waiter w);
    void release(const slot& s);
    // Some acquire is waiting for a slot to be released.
    bool short_of_slots() const noexcept { return !waiters_.empty(); }

    ucp_mem_h memh() const noexcept { return mem_.get(); }
    std::uint64_t slot_size() const noexcept { return slot_size_; }
    std::uint64_t total() const noexcept { return slot_size_ * slots_; }

private:
    std::byte* base_ = nullptr;
    std::uint64_t mapped_ = 0;
    std::uint64_t slot_size_ = 0;
    std::uint32_t slots_ = 0;
    ucx::memory mem_;
    std::vector<std::uint32_t> free_;
    std::deque<waiter> waiters_;
};

}  // namespace iofwd::iod

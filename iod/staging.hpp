#pragma once
// The daemon's staging memory: one region, mapped and registered with UCX
// once at start, cut into equal slots. Its pages are faulted in by a thread
// of its own after start (MADV_POPULATE_WRITE, which leaves the bytes alone,
// so pulls may land in the region meanwhile), slot 0 first as slots are
// handed out: the daemon answers its first rank at once instead of after
// touching all of it. A kernel without MADV_POPULATE_WRITE gets the region
// touched before start (as does IOFWD_STAGING_PREFAULT=1). Pulls land in slots; a slot is
// held until its bytes are in the store. The region never grows: when every
// slot is busy, requests wait in arrival order until a flush frees one.
// A write of at most half a slot takes a piece of one instead (a power of
// two, 64 KiB at least): a slot lent to such writes is cut into equal pieces
// and comes back once every piece is free, so many small versions in flight
// do not each hold a whole slot.
// The fault-in pauses while ranks connect (rank_arriving), for a few
// seconds at most. Used only from the event-loop thread, but for
// rank_arriving.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <system_error>
#include <thread>
#include <vector>

#include "mapping.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace iofwd::iod {

struct slot {
    std::uint32_t index = 0;
    std::byte* data = nullptr;
    std::uint64_t size = 0;  // below the slot size: a piece of slot `index`
};

class staging final {
public:
    staging() = default;
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    ~staging();

    // total is rounded down to a multiple of slot_size (at least one slot).
    // `prefault_all`: every page faulted in before it returns.
    std::error_code init(const ucx::context& ctx, std::uint64_t total, std::uint64_t slot_size,
                         bool prefault_all = false);

    using waiter = std::function<void(slot)>;
    // Calls `w` with a free slot, now or later (in the order of the calls);
    // with `bytes` at most half a slot, with a piece of at least that size.
    void acquire(waiter w, std::uint64_t bytes = UINT64_MAX);
    void release(const slot& s);
    // Some acquire is waiting for a slot to be released.
    bool short_of_slots() const noexcept { return !waiters_.empty(); }

    // A rank is connecting: faulting the rest in waits until none has for
    // a while (any thread).
    void rank_arriving() noexcept;

    ucp_mem_h memh() const noexcept { return mem_.get(); }
    std::uint64_t slot_size() const noexcept { return slot_size_; }
    std::uint64_t total() const noexcept { return slot_size_ * slots_; }
    std::uint32_t slot_count() const noexcept { return slots_; }
    // The longest write a rank may announce (a registered buffer, a file
    // write): proto::max_chunks_per_write slots.
    std::uint64_t max_write() const noexcept
    {
        using proto::max_chunks_per_write;
        return slot_size_ > UINT64_MAX / max_chunks_per_write ? UINT64_MAX
                                                               : slot_size_ * max_chunks_per_write;
    }
    // Bytes of the slots in use (a slot cut into pieces counts whole), and
    // the requests waiting for a slot: for iofwd status.
    std::uint64_t used() const noexcept { return slot_size_ * (slots_ - free_.size()); }
    std::size_t waiting() const noexcept { return waiters_.size(); }
    // Bytes of slots held by pulls UCX never completed, their ranks gone
    // (transfer::orphan_pulls): counted in used() too.
    std::uint64_t stalled() const noexcept { return stalled_; }
    void stalled_add(std::uint64_t bytes) noexcept { stalled_ += bytes; }
    void stalled_sub(std::uint64_t bytes) noexcept { stalled_ -= std::min(stalled_, bytes); }

private:
    mapping map_;
    std::byte* base_ = nullptr;  // in map_
    std::uint64_t mapped_ = 0;
    std::uint64_t slot_size_ = 0;
    std::uint32_t slots_ = 0;
    std::uint64_t stalled_ = 0;
    // A whole slot, now or later, for a piece class (internal waiters too).
    void acquire_slot(waiter w);
    void release_slot(std::uint32_t index);
    // Cuts slot `index` into pieces of 2^cls bytes and serves the class's
    // waiting requests from them.
    void carve(std::uint32_t index, unsigned cls);
    void serve_class(unsigned cls);
    // The prefault_ thread's work: the region after slot 0 (see init).
    void fault_in(const std::stop_token& stop);

    ucx::memory mem_;
    std::atomic<std::uint64_t> arrived_ns_{0};  // see rank_arriving
    std::jthread prefault_;  // faults the region in; stops early at shutdown
    std::vector<std::uint32_t> free_;
    std::deque<waiter> waiters_;

    static constexpr unsigned min_class = 16;  // 64 KiB pieces at least
    struct carving {
        unsigned cls = 0;
        std::vector<std::uint32_t> free;  // piece numbers
        std::uint32_t used = 0;
    };
    std::vector<carving> carved_;  // per slot; cls 0: not carved
    struct piece_class {
        std::vector<std::uint32_t> partial;  // carved slots with a free piece
        std::deque<waiter> waiters;
        bool slot_requested = false;          // a whole slot is on its way
    };
    std::vector<piece_class> classes_;  // by log2 of the piece size
};

}  // namespace iofwd::iod

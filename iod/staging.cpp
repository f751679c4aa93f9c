#include "staging.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "errors.hpp"
#include "mapping.hpp"
#include "procfs.hpp"
#include "protocol.hpp"
#include "log.hpp"

namespace iofwd::iod {

staging::~staging()
{
    if (prefault_.joinable()) {
        prefault_.request_stop();
        prefault_.join();
    }
    mem_ = ucx::memory{};  // deregister before unmapping (map_ goes after)
}

void staging::rank_arriving() noexcept
{
    arrived_ns_.store(proto::monotonic_ns(), std::memory_order_relaxed);
}

void staging::fault_in(const std::stop_token& stop)
{
    // In the order the free list hands slots out; at low priority, after the
    // ranks' own start (8 daemons with their ranks on 2 cores otherwise zero
    // their staging first). At most one 2 MiB page per call, and none while
    // ranks are connecting: the call holds the process's mmap lock, which
    // the event loop's mmaps at CONNECT (the rank's mailbox, UCX's segments)
    // wait for, and a thread this low is seldom run on a busy node (64
    // ranks' io_init with 2 GiB of staging took 4-6 s). The pauses end after
    // a few seconds in all, whoever keeps connecting.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
    name_this_thread(staging_fault_in_thread);
    constexpr std::size_t huge_page = 2u << 20;
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    constexpr std::uint64_t quiet_ns = 100'000'000;
    std::uint64_t pause_left_ns = 5'000'000'000;
    const auto pause_while_ranks_connect = [&] {
        for (;;) {
            const std::uint64_t arrived = arrived_ns_.load(std::memory_order_relaxed);
            const std::uint64_t now = proto::monotonic_ns();
            if (pause_left_ns == 0 || stop.stop_requested() ||
                (arrived < now && now - arrived >= quiet_ns))
                break;
            constexpr std::uint64_t nap_ns = 10'000'000;
            std::this_thread::sleep_for(std::chrono::nanoseconds(nap_ns));
            pause_left_ns -= std::min(pause_left_ns, nap_ns);
        }
    };
    const auto start = reinterpret_cast<std::uintptr_t>(base_);
    const std::uintptr_t from = (start + slot_size_) & ~(page - 1);
    if (from >= start + mapped_)
        return;
    std::size_t failed_at = 0;
    if (auto ec = populate_for_write(reinterpret_cast<void*>(from), start + mapped_ - from,
                                     huge_page, stop, pause_while_ranks_connect, failed_at))
        log_warn("staging: faulting it in stopped at byte {} of {}: {}; the rest is faulted "
                 "as writes first reach it",
                 from - start + failed_at, mapped_, ec.message());
}

std::error_code staging::init(const ucx::context& ctx, std::uint64_t total, std::uint64_t slot_size,
                              bool prefault_all)
{
    if (slot_size == 0 || total < slot_size)
        return make_error_code(errc::invalid_argument);
    slots_ = static_cast<std::uint32_t>(total / slot_size);
    slot_size_ = slot_size;
    mapped_ = slot_size_ * slots_;
    if (auto ec = mapping::map(mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, map_))
        return ec;
    base_ = static_cast<std::byte*>(map_.get());
    // Huge pages where the kernel allows, then every page faulted in once:
    // the first touch of a fresh 4 KiB page costs ~10 us here, which must not
    // happen on the data path. Slot 0 now (the first write's), the rest on a
    // thread while the daemon already serves ranks.
    ::madvise(base_, mapped_, MADV_HUGEPAGE);
    if (!prefault_all && ::madvise(base_, slot_size_, MADV_POPULATE_WRITE) == 0) {
        prefault_ = std::jthread([this](std::stop_token stop) { fault_in(stop); });
    } else {
        if (!prefault_all)
            log_info("staging: MADV_POPULATE_WRITE unavailable ({}); touching it all before start",
                     std::strerror(errno));
        std::memset(base_, 0, mapped_);
    }
    if (auto ec = ucx::memory::map(ctx, base_, mapped_, mem_))
        return ec;
    free_.reserve(slots_);
    for (std::uint32_t i = slots_; i-- > 0;)
        free_.push_back(i);
    carved_.assign(slots_, carving{});
    classes_.resize(64);
    return {};
}

void staging::acquire(waiter w, std::uint64_t bytes)
{
    unsigned cls = min_class;
    while (cls < 63 && (std::uint64_t{1} << cls) < bytes)
        ++cls;
    if (bytes == 0 || bytes > slot_size_ / 2 || (std::uint64_t{1} << cls) > slot_size_ / 2) {
        acquire_slot(std::move(w));
        return;
    }
    classes_[cls].waiters.push_back(std::move(w));
    serve_class(cls);
}

void staging::acquire_slot(waiter w)
{
    if (!free_.empty() && waiters_.empty()) {
        const auto i = free_.back();
        free_.pop_back();
        w(slot{i, base_ + std::uint64_t{i} * slot_size_, slot_size_});
        return;
    }
    waiters_.push_back(std::move(w));
}

void staging::serve_class(unsigned cls)
{
    auto& c = classes_[cls];
    const std::uint64_t piece = std::uint64_t{1} << cls;
    while (!c.waiters.empty() && !c.partial.empty()) {
        const std::uint32_t i = c.partial.back();
        auto& k = carved_[i];
        const std::uint32_t n = k.free.back();
        k.free.pop_back();
        ++k.used;
        if (k.free.empty())
            c.partial.pop_back();
        auto w = std::move(c.waiters.front());
        c.waiters.pop_front();
        w(slot{i, base_ + std::uint64_t{i} * slot_size_ + n * piece, piece});
    }
    if (c.waiters.empty() || c.slot_requested)
        return;
    c.slot_requested = true;
    acquire_slot([this, cls](slot s) {
        classes_[cls].slot_requested = false;
        carve(s.index, cls);
    });
}

void staging::carve(std::uint32_t index, unsigned cls)
{
    auto& k = carved_[index];
    k.cls = cls;
    k.used = 0;
    const auto pieces = static_cast<std::uint32_t>(slot_size_ >> cls);
    k.free.clear();
    for (std::uint32_t n = pieces; n-- > 0;)
        k.free.push_back(n);
    classes_[cls].partial.push_back(index);
    serve_class(cls);
    if (k.used == 0) {
        // Its requests were served by pieces freed meanwhile: give it back.
        std::erase(classes_[cls].partial, index);
        k = carving{};
        release_slot(index);
    }
}

void staging::release(const slot& s)
{
    if (s.size == slot_size_) {
        release_slot(s.index);
        return;
    }
    auto& k = carved_[s.index];
    const unsigned cls = k.cls;
    auto& c = classes_[cls];
    const auto n = static_cast<std::uint32_t>(
        (static_cast<std::uint64_t>(s.data - base_) - std::uint64_t{s.index} * slot_size_) >> cls);
    if (k.free.empty())
        c.partial.push_back(s.index);
    k.free.push_back(n);
    --k.used;
    if (!c.waiters.empty()) {
        serve_class(cls);
        return;
    }
    if (k.used == 0) {
        // Every piece is back: the slot is whole again.
        std::erase(c.partial, s.index);
        k = carving{};
        release_slot(s.index);
    }
}

void staging::release_slot(std::uint32_t index)
{
    const slot s{index, base_ + std::uint64_t{index} * slot_size_, slot_size_};
    if (!waiters_.empty()) {
        auto w = std::move(waiters_.front());
        waiters_.pop_front();
        w(s);
        return;
    }
    free_.push_back(index);
}

}  // namespace iofwd::iod

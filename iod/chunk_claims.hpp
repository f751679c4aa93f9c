#pragma once
// Receives posted ahead for a pushed write's chunks: where each chunk goes in
// staging, set by the event loop when it has a slot before the chunk has
// come. The puller the chunk reaches takes its claim and starts the copy at
// once, without the trip through the loop and back that a chunk nobody
// claimed takes (puller.hpp). On a busy node that trip can wait behind the
// other puller's copy for a whole time slice (traced: 1.3-1.7 ms of a
// 64 MiB write, one puller idle meanwhile).
//
// A claim is keyed by the rank's push key (its session's secret), the write's
// cookie and the chunk's offset, and taken only by a chunk of exactly its
// length: whatever else comes goes through the loop, which refuses it there.
// Taken (by a puller) or retracted (by the loop that posted it: its owner),
// never both; a key posted already is not posted again.
//
// A write has at most `ahead` claims posted and not yet taken (twice the
// pullers), and posts none while other writes wait for slots: the slots a
// rank that announces a write and never pushes holds. A claim counts as a
// pull (the data path busy) only once a puller has taken it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <ucp/api/ucp.h>

namespace iofwd::iod {

class chunk_claims final {
public:
    explicit chunk_claims(unsigned ahead) : ahead_(ahead) {}
    unsigned ahead() const noexcept { return ahead_; }

    struct key {
        std::uint64_t sender = 0;
        std::uint64_t cookie = 0;
        std::uint64_t offset = 0;
        bool operator==(const key&) const = default;
    };
    struct claim {
        void* dest = nullptr;
        std::size_t length = 0;
        ucp_mem_h memh = nullptr;
        // Run on the loop: once a puller has taken it (before `done`), and
        // once the receive ended (puller::receive).
        std::function<void()> taken;
        std::function<void(ucs_status_t)> done;
        const void* owner = nullptr;  // who may retract it
    };

    // The loop: the chunk `k` goes to `c` when it comes; false (nothing
    // posted) when a claim of `k` is posted already.
    bool post(const key& k, claim c)
    {
        std::lock_guard lock(m_);
        return claims_.try_emplace(k, std::move(c)).second;
    }
    // A puller: the claim of a chunk `k` of `length` bytes, now its own.
    std::optional<claim> take(const key& k, std::size_t length)
    {
        std::lock_guard lock(m_);
        const auto it = claims_.find(k);
        if (it == claims_.end() || it->second.length != length)
            return std::nullopt;
        claim c = std::move(it->second);
        claims_.erase(it);
        return c;
    }
    // The loop: true when `owner`'s claim of `k` was still posted (now
    // gone, its destination the loop's again); false when a puller took it.
    bool retract(const key& k, const void* owner)
    {
        std::lock_guard lock(m_);
        const auto it = claims_.find(k);
        if (it == claims_.end() || it->second.owner != owner)
            return false;
        claims_.erase(it);
        return true;
    }

private:
    struct hash {
        std::size_t operator()(const key& k) const noexcept
        {
            std::uint64_t h = k.sender * 0x9e3779b97f4a7c15ull;
            h ^= k.cookie + 0x632be59bd9b4e019ull + (h << 6) + (h >> 2);
            h ^= k.offset + 0x8cb92ba72f3d8dd7ull + (h << 6) + (h >> 2);
            return static_cast<std::size_t>(h);
        }
    };
    const unsigned ahead_;
    std::mutex m_;
    std::unordered_map<key, claim, hash> claims_;
};

}  // namespace iofwd::iod

#pragma once
// A small write's bytes, already in the daemon (nothing to pull): its own
// copy of what came on the socket, or a record in the rank's mailbox, which
// `owner` keeps mapped until the bytes are staged (they are read once: a
// rank that breaks the format can still write there meanwhile).
#include <cstddef>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace iofwd::iod {

struct held_bytes {
    std::shared_ptr<const void> owner;
    std::span<const std::byte> bytes;

    static held_bytes own(std::vector<std::byte> v)
    {
        if (v.empty())
            return {};
        auto p = std::make_shared<const std::vector<std::byte>>(std::move(v));
        return {p, std::span<const std::byte>(*p)};
    }
    bool empty() const noexcept { return bytes.empty(); }
};

}  // namespace iofwd::iod

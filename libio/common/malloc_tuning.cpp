#include "malloc_tuning.hpp"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>

namespace iofwd {

std::optional<std::string> daemon_glibc_tunables(const char* inherited)
{
    static constexpr std::string_view name = "glibc.malloc.tcache_count";
    const std::string_view now = inherited ? inherited : "";
    // Tunables are name=value pairs separated by colons.
    for (std::size_t at = 0; at <= now.size();) {
        const std::size_t end = std::min(now.find(':', at), now.size());
        const std::string_view pair = now.substr(at, end - at);
        if (pair.substr(0, pair.find('=')) == name)
            return std::nullopt;
        at = end + 1;
    }
    const std::string ours = fmt::format("{}={}", name, daemon_tcache_count);
    if (now.empty())
        return ours;
    return fmt::format("{}:{}", ours, now);
}

}  // namespace iofwd

#pragma once
// fmt support for the types iofwd prints: std::error_code (fmt 9 has no
// formatter for it) and byte counts in human units.
#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

template <>
struct fmt::formatter<std::error_code> : fmt::formatter<std::string_view> {
    template <typename FormatContext>
    auto format(const std::error_code& ec, FormatContext& ctx) const
    {
        return fmt::format_to(ctx.out(), "{} ({}:{})", ec.message(), ec.category().name(),
                              ec.value());
    }
};

namespace iofwd {

// "64 MiB", "1.5 GiB", "512 B": for logs and summaries, never for parsing.
std::string human_bytes(std::uint64_t n);

// A duration for people: "850 us", "12.34 ms", "3.21 s", "2 min 5 s".
std::string human_seconds(double seconds);

// "1-3, 5" for {1, 2, 3, 5} (sorted, as versions are listed); "none" when empty.
// After `max_runs` runs (one at least) the rest is counted, not listed
// ("1-3, 5 and 40 more"): a log line stays a line.
std::string number_ranges(const std::vector<std::uint64_t>& v,
                          std::size_t max_runs = SIZE_MAX);

// Parses "4096", "64K", "64KiB", "256M", "1G", "1GiB" (binary units) into
// bytes; false on anything else (including overflow).
bool parse_bytes(std::string_view text, std::uint64_t& out);

}  // namespace iofwd

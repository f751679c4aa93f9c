#include "format.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace iofwd {

std::string human_seconds(double seconds)
{
    if (seconds < 1e-3)
        return fmt::format("{:.0f} us", seconds * 1e6);
    if (seconds < 1)
        return fmt::format("{:.2f} ms", seconds * 1e3);
    if (seconds < 120)
        return fmt::format("{:.2f} s", seconds);
    const auto whole = static_cast<std::uint64_t>(seconds);
    return fmt::format("{} min {} s", whole / 60, whole % 60);
}

std::string number_ranges(const std::vector<std::uint64_t>& v, std::size_t max_runs)
{
    if (v.empty())
        return "none";
    const std::size_t most = std::max<std::size_t>(max_runs, 1);
    std::string out;
    for (std::size_t i = 0, runs = 0; i < v.size(); ++runs) {
        if (runs == most) {
            out += fmt::format(" and {} more", v.size() - i);
            break;
        }
        std::size_t j = i;
        while (j + 1 < v.size() && v[j + 1] == v[j] + 1)
            ++j;
        if (!out.empty())
            out += ", ";
        out += j == i ? fmt::format("{}", v[i]) : fmt::format("{}-{}", v[i], v[j]);
        i = j + 1;
    }
    return out;
}

std::string human_bytes(std::uint64_t n)
{
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (n < 1024)
        return fmt::format("{} B", n);
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    if (v == static_cast<double>(static_cast<std::uint64_t>(v)))
        return fmt::format("{} {}", static_cast<std::uint64_t>(v), units[u]);
    return fmt::format("{:.1f} {}", v, units[u]);
}

bool parse_bytes(std::string_view text, std::uint64_t& out)
{
    std::size_t i = 0;
    std::uint64_t value = 0;
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
        return false;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
        const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
            return false;
        value = value * 10 + digit;
    }
    std::string_view suffix = text.substr(i);
    unsigned shift = 0;
    if (!suffix.empty()) {
        switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        case 'B': if (suffix.size() == 1) { shift = 0; break; } return false;
        default: return false;
        }
        suffix.remove_prefix(1);
        if (!(suffix.empty() || suffix == "B" || suffix == "iB" || suffix == "ib" || suffix == "b"))
            return false;
    }
    if (shift && value > (std::numeric_limits<std::uint64_t>::max() >> shift))
        return false;
    out = value << shift;
    return true;
}

}  // namespace iofwd

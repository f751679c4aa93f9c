#include "start_report.hpp"

#include <cerrno>
#include <charconv>

#include <fmt/format.h>

namespace iofwd {
namespace {

constexpr int max_errno = 4095;  // the kernel's own bound (MAX_ERRNO)

}  // namespace

std::string start_ready_line()
{
    return "ready\n";
}

std::string start_error_line(int code, std::string_view why)
{
    std::string text(why);
    for (char& c : text)
        if (c == '\n' || c == '\r')
            c = ' ';
    if (text.empty())
        text = "no reason given";
    return fmt::format("error {}: {}\n", code > 0 && code <= max_errno ? code : EIO, text);
}

bool parse_start_line(std::string_view line, start_report& out)
{
    if (line.size() < 2 || line.back() != '\n' || line.find('\n') != line.size() - 1)
        return false;
    line.remove_suffix(1);
    if (line == "ready") {
        out = {true, 0, {}};
        return true;
    }
    constexpr std::string_view prefix = "error ";
    if (line.substr(0, prefix.size()) != prefix)
        return false;
    line.remove_prefix(prefix.size());
    int code = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), code);
    if (ec != std::errc() || end == line.data() || code < 1 || code > max_errno)
        return false;
    line.remove_prefix(static_cast<std::size_t>(end - line.data()));
    if (line.substr(0, 2) != ": " || line.size() == 2)
        return false;
    out = {false, code, std::string(line.substr(2))};
    return true;
}

}  // namespace iofwd

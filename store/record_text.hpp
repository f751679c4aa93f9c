#pragma once
// Reading the store's small text records (layout.cpp's manifests, COMPLETE
// and run records; pack.cpp's index) a line and a field at a time.
#include <charconv>
#include <span>
#include <string_view>
#include <system_error>

namespace iofwd::store::text {

// The next line of `text` (without its '\n'), taken off the front.
inline bool next_line(std::string_view& text, std::string_view& line)
{
    if (text.empty())
        return false;
    const auto nl = text.find('\n');
    line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    return true;
}

// The whole of `s` as a number, nothing before or after it.
template <typename T>
bool number(std::string_view s, T& out, int base = 10)
{
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
    return ec == std::errc{} && p == s.data() + s.size();
}

// A decimal number as fmt writes it: no sign, no leading zero.
template <typename T>
bool canonical(std::string_view s, T& out)
{
    return !s.empty() && (s.size() == 1 || s[0] != '0') && number(s, out);
}

// "key value" -> value when the key matches.
inline bool field(std::string_view line, std::string_view key, std::string_view& value)
{
    if (line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ')
        return false;
    value = line.substr(key.size() + 1);
    return true;
}

// `s` as exactly out.size() words, each separated by one space.
inline bool words(std::string_view s, std::span<std::string_view> out)
{
    for (std::size_t k = 0; k < out.size(); ++k) {
        const auto sp = s.find(' ');
        if ((k + 1 < out.size()) != (sp != std::string_view::npos))
            return false;
        out[k] = s.substr(0, sp);
        s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
    }
    return true;
}

}  // namespace iofwd::store::text

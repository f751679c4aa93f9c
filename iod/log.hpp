#pragma once
// The daemon's log: one line per event, with a timestamp and the pid, to
// stderr or a file. Thread-safe (flusher threads log too).
#include <string_view>

#include <fmt/format.h>

namespace iofwd::iod {

enum class level { debug, info, warn, error };

// Lines below `least` are not written (IOFWD_LOG_LEVEL; default info).
void log_level(level least);
// "debug", "info", "warn", "error" -> the level; false for anything else.
bool parse_level(std::string_view text, level& out);

// nullptr: stderr. False (a line on stderr, errno set: EACCES for a file that
// is not a regular file of ours) when the file cannot be used.
bool log_open(const char* path);
void log_line(level lv, std::string_view text);

template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args)
{
    log_line(level::debug, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args)
{
    log_line(level::info, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args)
{
    log_line(level::warn, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... args)
{
    log_line(level::error, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace iofwd::iod

#include "log.hpp"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <mutex>

namespace iofwd::iod {
namespace {
std::mutex log_mutex;
int log_fd = STDERR_FILENO;
}  // namespace

void log_open(const char* path)
{
    if (!path)
        return;
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0)
        log_fd = fd;
    else
        std::perror(path);
}

void log_line(level lv, std::string_view text)
{
    timeval tv{};
    gettimeofday(&tv, nullptr);
    tm t{};
    localtime_r(&tv.tv_sec, &t);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &t);
    const char* tag = lv == level::info ? "" : lv == level::warn ? "warning: " : "error: ";
    const std::string line = fmt::format("{}.{:03} iod[{}] {}{}\n", stamp, tv.tv_usec / 1000,
                                         getpid(), tag, text);
    std::lock_guard lock(log_mutex);
    // One write per line so lines from several processes sharing a file stay whole.
    [[maybe_unused]] auto n = ::write(log_fd, line.data(), line.size());
}

}  // namespace iofwd::iod

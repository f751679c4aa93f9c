#include "log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace iofwd::iod {
namespace {
std::mutex log_mutex;
int log_fd = STDERR_FILENO;
std::atomic<level> least{level::info};
}  // namespace

void log_level(level l)
{
    least.store(l, std::memory_order_relaxed);
}

bool parse_level(std::string_view text, level& out)
{
    if (text == "debug") out = level::debug;
    else if (text == "info") out = level::info;
    else if (text == "warn") out = level::warn;
    else if (text == "error") out = level::error;
    else return false;
    return true;
}

bool log_open(const char* path)
{
    if (!path)
        return true;
    // Never through a symlink, never into a FIFO or another user's file.
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                          0600);
    if (fd < 0) {
        const int err = errno;
        std::fprintf(stderr, "iod: cannot open log %s: %s\n", path,
                     err == ELOOP ? "it is a symlink" : std::strerror(err));
        errno = err;
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
        std::fprintf(stderr, "iod: log %s is not a regular file of yours; refusing it\n", path);
        ::close(fd);
        errno = EACCES;
        return false;
    }
    ::fcntl(fd, F_SETFL, O_APPEND);
    log_fd = fd;
    return true;
}

void log_line(level lv, std::string_view text)
{
    if (lv < least.load(std::memory_order_relaxed))
        return;
    timeval tv{};
    gettimeofday(&tv, nullptr);
    tm t{};
    localtime_r(&tv.tv_sec, &t);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &t);
    const char* tag = lv == level::debug  ? "debug: "
                      : lv == level::info ? ""
                      : lv == level::warn ? "warning: "
                                          : "error: ";
    const std::string line = fmt::format("{}.{:03} iod[{}] {}{}\n", stamp, tv.tv_usec / 1000,
                                         getpid(), tag, text);
    std::lock_guard lock(log_mutex);
    // One write per line so lines from several processes sharing a file stay whole.
    [[maybe_unused]] auto n = ::write(log_fd, line.data(), line.size());
}

}  // namespace iofwd::iod

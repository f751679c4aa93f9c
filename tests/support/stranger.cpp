// What another user on the node can do, for the security tests (run it under
// setpriv as that user):
//   stranger fake-daemon SOCKET SECONDS   listen at SOCKET like an iod would, take
//       every connection and read what comes; prints "connections N bytes M"
//   stranger flip LINK TARGET_A TARGET_B SECONDS   point the symlink LINK at A, then
//       at B, and so on, each swap atomic (rename); prints "flips N"
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

int fake_daemon(const char* path, double seconds)
{
    const int ls = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    ::unlink(path);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(ls, 64) != 0) {
        std::perror("bind/listen");
        return 1;
    }
    ::chmod(path, 0777);
    std::printf("listening\n");
    std::fflush(stdout);
    std::vector<pollfd> fds{{ls, POLLIN, 0}};
    long connections = 0, bytes = 0;
    const auto end = clock_type::now() + std::chrono::duration<double>(seconds);
    while (clock_type::now() < end) {
        if (::poll(fds.data(), fds.size(), 50) <= 0)
            continue;
        for (std::size_t i = 0; i < fds.size(); ++i) {
            if (!(fds[i].revents & POLLIN))
                continue;
            if (i == 0) {
                const int c = ::accept(ls, nullptr, nullptr);
                if (c >= 0) {
                    ++connections;
                    fds.push_back({c, POLLIN, 0});
                }
                continue;
            }
            char buf[4096];
            const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n > 0)
                bytes += n;
            else
                fds[i].fd = -1;  // poll ignores it from now on
        }
    }
    std::printf("connections %ld bytes %ld\n", connections, bytes);
    return 0;
}

int flip(const std::string& link, const char* a, const char* b, double seconds)
{
    long flips = 0;
    const std::string tmp = link + ".flip";
    const auto end = clock_type::now() + std::chrono::duration<double>(seconds);
    while (clock_type::now() < end) {
        ::unlink(tmp.c_str());
        if (::symlink(flips % 2 ? b : a, tmp.c_str()) != 0 ||
            ::rename(tmp.c_str(), link.c_str()) != 0) {
            std::perror("flip");
            return 1;
        }
        ++flips;
    }
    std::printf("flips %ld\n", flips);
    return 0;
}

}  // namespace

int main(int argc, char** argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string_view mode = argc > 1 ? argv[1] : "";
    if (mode == "fake-daemon" && argc == 4)
        return fake_daemon(argv[2], std::atof(argv[3]));
    if (mode == "flip" && argc == 6)
        return flip(argv[2], argv[3], argv[4], std::atof(argv[5]));
    std::fprintf(stderr, "usage: stranger fake-daemon SOCKET SECONDS | flip LINK A B SECONDS\n");
    return 2;
}

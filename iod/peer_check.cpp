#include "peer_check.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "errors.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

extern char** environ;

namespace iofwd::iod {
namespace {

// Requests: u32 address length, the address, u32 key length, the key.
// Answers: one line, "ok" or "bad <UCX status>".
bool write_all(int fd, const void* data, std::size_t n)
{
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

bool read_all(int fd, void* data, std::size_t n)
{
    auto* p = static_cast<char*>(data);
    while (n > 0) {
        const ssize_t r = ::read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

bool read_blob(int fd, std::vector<std::byte>& out)
{
    std::uint32_t n = 0;
    if (!read_all(fd, &n, sizeof n) || n > proto::max_blob)
        return false;
    out.resize(n);
    return n == 0 || read_all(fd, out.data(), n);
}

}  // namespace

peer_check::~peer_check()
{
    stop();
}

void peer_check::stop()
{
    sock_.reset();
    if (child_ > 0) {
        ::kill(child_, SIGKILL);
        int status = 0;
        ::waitpid(child_, &status, 0);
        child_ = -1;
    }
}

std::error_code peer_check::spawn(std::string& why)
{
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("socketpair: {}", ec.message());
        return ec;
    }
    unique_fd mine(sv[0]), theirs(sv[1]);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, theirs.get(), 3);
    // UCX's own complaints about a peer's bytes (and its backtrace when it
    // aborts on them) are not the daemon's log: the refusal is, in a line.
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclosefrom_np(&fa, 4);
    char self[] = "/proc/self/exe";
    char flag[] = "--check-peer-fd";
    char three[] = "3";
    char* argv[] = {self, flag, three, nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, self, &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        why = fmt::format("cannot start the peer checker: {}", std::strerror(rc));
        return {rc, std::system_category()};
    }
    sock_ = std::move(mine);
    child_ = pid;
    return {};
}

std::error_code peer_check::start(std::string& why)
{
    return spawn(why);
}

bool peer_check::usable(std::span<const std::byte> address, std::span<const std::byte> rkey,
                        std::string& why)
{
    if (address.size() > proto::max_blob || rkey.size() > proto::max_blob) {
        why = "a worker address or remote key over the protocol's limit";
        return false;
    }
    if (!sock_) {
        std::string ignored;
        if (spawn(ignored)) {
            why = "no peer checker could be started: " + ignored;
            return false;
        }
    }
    std::vector<std::byte> req;
    auto put = [&](std::span<const std::byte> b) {
        const auto n = static_cast<std::uint32_t>(b.size());
        const auto* p = reinterpret_cast<const std::byte*>(&n);
        req.insert(req.end(), p, p + sizeof n);
        req.insert(req.end(), b.begin(), b.end());
    };
    put(address);
    put(rkey);
    char answer[128] = {};
    std::size_t got = 0;
    bool ok = write_all(sock_.get(), req.data(), req.size());
    // One line, within a few seconds: anything else is a checker that died
    // (or hangs) on these bytes.
    while (ok && got < sizeof answer - 1 && (got == 0 || answer[got - 1] != '\n')) {
        pollfd p{sock_.get(), POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0) {
            ok = false;
            break;
        }
        const ssize_t r = ::read(sock_.get(), answer + got, sizeof answer - 1 - got);
        if (r <= 0) {
            ok = false;
            break;
        }
        got += static_cast<std::size_t>(r);
    }
    if (!ok) {
        int status = 0;
        const pid_t pid = child_;
        stop();  // the next check starts a new one
        (void)status;
        why = fmt::format("UCX cannot use them: the process that tried (pid {}) died or hung on "
                          "them",
                          pid);
        return false;
    }
    if (std::strncmp(answer, "ok\n", 3) == 0)
        return true;
    std::string line(answer, got);
    while (!line.empty() && line.back() == '\n')
        line.pop_back();
    why = fmt::format("UCX refuses them ({})", line.rfind("bad ", 0) == 0 ? line.substr(4) : line);
    return false;
}

int run_peer_check(int fd)
{
    ::signal(SIGPIPE, SIG_IGN);
    ucx::context ctx;
    ucx::worker worker;
    if (ucx::context::create(UCP_FEATURE_RMA | UCP_FEATURE_AM, "iod-peer-check", ctx) ||
        ucx::worker::create(ctx, worker))
        return 2;
    std::vector<std::byte> address, rkey;
    while (read_blob(fd, address) && read_blob(fd, rkey)) {
        ucs_status_t st = UCS_ERR_INVALID_PARAM;
        {
            ucx::endpoint ep;
            if (!address.empty())
                st = ucx::endpoint::connect(worker.get(), address, nullptr, nullptr, ep);
            if (st == UCS_OK && !rkey.empty()) {
                ucx::rkey key;
                if (auto ec = ucx::rkey::unpack(ep.get(), rkey, key))
                    st = UCS_ERR_INVALID_PARAM;
            }
        }
        worker.drain();
        const std::string line =
            st == UCS_OK ? std::string("ok\n") : fmt::format("bad {}\n", ucs_status_string(st));
        if (!write_all(fd, line.data(), line.size()))
            break;
    }
    return 0;
}

}  // namespace iofwd::iod

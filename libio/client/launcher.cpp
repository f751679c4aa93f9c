#include "launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "errors.hpp"
#include "iod_binary.hpp"
#include "malloc_tuning.hpp"
#include "runtime_gc.hpp"
#include "start_report.hpp"

extern char** environ;

namespace iofwd::client {
namespace {

using clock = std::chrono::steady_clock;

// The last lines of the daemon's log, for an error message.
std::string log_tail(const runtime_paths& paths)
{
    unique_fd fd;
    std::string ignored;
    if (open_runtime_file(paths, paths.log_name, O_RDONLY, fd, ignored))
        return {};
    std::ifstream in(fmt::format("/proc/self/fd/{}", fd.get()), std::ios::binary | std::ios::ate);
    if (!in)
        return {};
    const auto size = static_cast<std::streamoff>(in.tellg());
    const std::streamoff start = size > 600 ? size - 600 : 0;
    in.seekg(start);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (start > 0)
        if (auto nl = text.find('\n'); nl != std::string::npos)
            text.erase(0, nl + 1);
    while (!text.empty() && text.back() == '\n')
        text.pop_back();
    return text;
}

std::string describe_status(int status)
{
    if (WIFEXITED(status))
        return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                           strsignal(WTERMSIG(status)));
    return "stopped";
}

std::error_code spawn_daemon(const runtime_paths& paths, char** daemon_args, int lock_fd,
                             int ready_fd, int log_fd, int dir_fd, pid_t& out, std::string& why)
{
    std::vector<std::string> args;
    bool has_log = false;
    std::string how = "io_init's daemon_args";
    if (daemon_args && daemon_args[0]) {
        for (char** a = daemon_args; *a; ++a) {
            args.emplace_back(*a);
            has_log = has_log || std::string_view(*a).rfind("--log", 0) == 0;
        }
    } else {
        auto iod = choose_iod();
        args.push_back(std::move(iod.path));
        how = std::move(iod.how);
    }
    for (const char* a : {"--auto-exit", "--session"})
        args.emplace_back(a);
    args.push_back(paths.session);
    // The runtime directory this rank checked, as a descriptor: the daemon
    // uses that very directory (and checks it again), not a path to it.
    args.emplace_back("--runtime-dir");
    args.push_back(paths.dir);
    args.emplace_back("--runtime-fd");
    args.emplace_back("5");
    args.emplace_back("--lock-fd");
    args.emplace_back("3");
    args.emplace_back("--ready-fd");
    args.emplace_back("4");
    (void)has_log;  // the daemon's stderr is the session log; IOFWD_LOG or --log move it
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
    posix_spawn_file_actions_adddup2(&fa, lock_fd, 3);
    posix_spawn_file_actions_adddup2(&fa, ready_fd, 4);
    posix_spawn_file_actions_adddup2(&fa, dir_fd, 5);
    // Nothing else of the rank's (MPI's PMI socket, UCX's fds) leaks into the daemon.
    posix_spawn_file_actions_addclosefrom_np(&fa, 6);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    // Its own session: a Ctrl-C aimed at the job does not kill the daemon
    // halfway through a flush; it exits by itself once the ranks are gone.
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    // The rank's environment, without LD_PRELOAD (the MPI shim, or any tool
    // preloaded into the ranks, has no business inside the daemon) and with
    // the daemon's malloc setting in GLIBC_TUNABLES (malloc_tuning.hpp).
    auto tunables = daemon_glibc_tunables(std::getenv("GLIBC_TUNABLES"));
    if (tunables)
        tunables->insert(0, "GLIBC_TUNABLES=");
    std::vector<char*> env;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0 &&
            !(tunables && std::strncmp(*e, "GLIBC_TUNABLES=", 15) == 0))
            env.push_back(*e);
    if (tunables)
        env.push_back(tunables->data());
    env.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        // posix_spawn's own error (ENOENT, EACCES...) is the cause.
        why = fmt::format("cannot start daemon '{}' ({}): {} (set IOFWD_IOD to the iod binary)",
                          argv[0], how, std::strerror(rc));
        return {rc, std::system_category()};
    }
    out = pid;
    return {};
}

// Reads the daemon's first line on the ready pipe: "ready" or "error: ...".
std::error_code await_ready(int ready_fd, pid_t child, const runtime_paths& paths,
                            clock::time_point deadline, std::string& why)
{
    std::string line;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                 clock::now());
        if (left.count() <= 0) {
            ::kill(child, SIGTERM);
            why = fmt::format("the daemon (pid {}) did not become ready in time; its log {} says: "
                              "{}",
                              child, paths.log, log_tail(paths));
            return make_error_code(errc::daemon_timeout);
        }
        pollfd p{ready_fd, POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(left.count()));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;
        char buf[512];
        const ssize_t r = ::read(ready_fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0) {
            line.append(buf, static_cast<std::size_t>(r));
            if (line.find('\n') == std::string::npos)
                continue;
        }
        start_report report;
        const bool said = parse_start_line(line.substr(0, line.find('\n') + 1), report);
        if (said && report.ready)
            return {};
        int status = 0;
        ::waitpid(child, &status, 0);
        if (said) {
            // The daemon's errno of the cause, and its own sentence.
            why = fmt::format("the daemon could not start: {} (log {})", report.why, paths.log);
            return {report.code, std::system_category()};
        }
        why = fmt::format("the daemon (pid {}) {} while starting; its log {} says: {}", child,
                          describe_status(status), paths.log, log_tail(paths));
        return make_error_code(errc::daemon_launch_failed);
    }
}

}  // namespace

std::error_code attach_or_launch(const runtime_paths& paths, char** daemon_args,
                                 std::chrono::milliseconds timeout, daemon_link& out,
                                 std::string& why)
{
    const auto deadline = clock::now() + timeout;
    auto backoff = std::chrono::milliseconds(1);
    for (;;) {
        unique_fd sock;
        const auto cec = connect_unix(paths.socket_via(), sock);
        if (!cec) {
            // Nothing goes to a daemon before we know it is ours.
            if (auto ec = check_daemon_owner(sock.get(), paths.socket, why))
                return ec;
            out.control = std::move(sock);
            return {};
        }
        if (cec.value() == EACCES || cec.value() == EPERM) {
            why = fmt::format("cannot connect to the daemon's socket {}: {}", paths.socket,
                              cec.message());
            return make_error_code(errc::permission_denied);
        }
        unique_fd lock;
        bool won = false;
        if (auto ec = try_lock_session(paths, lock, won, why))
            return ec;
        if (won) {
            // Nobody serves this session: we launch. First the runtime
            // directory loses what finished sessions left (runtime_gc.hpp;
            // ours is live: we hold its lock). Best effort: a failure here
            // must not stop the job.
            runtime_gc_policy policy;
            std::string gc_why;
            if (!runtime_gc_policy_from_env(policy, gc_why)) {
                runtime_gc_report gc_report;
                runtime_gc(paths, policy, gc_report, gc_why);
            }
            // Move the descriptors above the numbers the child will use, so
            // the dup2s cannot collide.
            int pipefd[2];
            if (::pipe2(pipefd, O_CLOEXEC) != 0) {
                const auto ec = last_system_error();
                why = fmt::format("pipe: {}", ec.message());
                return ec;
            }
            unique_fd ready_r(pipefd[0]);
            unique_fd ready_w(::fcntl(pipefd[1], F_DUPFD_CLOEXEC, 10));
            ::close(pipefd[1]);
            unique_fd lock_hi(::fcntl(lock.get(), F_DUPFD_CLOEXEC, 10));
            if (!ready_w || !lock_hi) {
                const auto ec = last_system_error();
                why = fmt::format("fcntl(F_DUPFD): {}", ec.message());
                return ec;
            }
            ::unlinkat(paths.dir_fd->get(), paths.socket_name.c_str(), 0);  // a dead daemon's
            unique_fd log;
            if (auto ec = open_runtime_file(paths, paths.log_name, O_WRONLY | O_CREAT | O_APPEND,
                                            log, why))
                return ec;
            unique_fd log_hi(::fcntl(log.get(), F_DUPFD_CLOEXEC, 10));
            unique_fd dir_hi(::fcntl(paths.dir_fd->get(), F_DUPFD_CLOEXEC, 10));
            if (!log_hi || !dir_hi) {
                const auto ec = last_system_error();
                why = fmt::format("fcntl(F_DUPFD): {}", ec.message());
                return ec;
            }
            pid_t child = -1;
            if (auto ec = spawn_daemon(paths, daemon_args, lock_hi.get(), ready_w.get(),
                                       log_hi.get(), dir_hi.get(), child, why))
                return ec;
            // The daemon now holds the lock through its copy; ours must go, or a
            // dead daemon's lock would outlive it in this process.
            lock_hi.reset();
            lock.reset();
            ready_w.reset();
            if (auto ec = await_ready(ready_r.get(), child, paths, deadline, why))
                return ec;
            if (auto ec = connect_unix(paths.socket_via(), sock)) {
                why = fmt::format("the daemon (pid {}) said ready but {} refuses connections: {}",
                                  child, paths.socket, ec.message());
                return make_error_code(errc::daemon_launch_failed);
            }
            if (auto ec = check_daemon_owner(sock.get(), paths.socket, why))
                return ec;
            out.control = std::move(sock);
            out.child = child;
            return {};
        }
        if (clock::now() >= deadline) {
            why = fmt::format("no daemon became ready for session {} within {} ms: socket {} "
                              "refuses connections ({}) while lock {} is held; the launching "
                              "rank's daemon may be stuck (see {}), or raise IOFWD_LAUNCH_TIMEOUT",
                              paths.session, timeout.count(), paths.socket, cec.message(),
                              paths.lock, paths.log);
            return make_error_code(errc::daemon_timeout);
        }
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
}

std::error_code wait_child(pid_t pid, std::chrono::milliseconds timeout, int& status)
{
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
        unique_fd guard(pidfd);
        pollfd p{pidfd, POLLIN, 0};
        const int ms = timeout.count() > 0 ? static_cast<int>(timeout.count()) : -1;
        int n;
        do {
            n = ::poll(&p, 1, ms);
        } while (n < 0 && errno == EINTR);
        if (n == 0)
            return make_error_code(errc::daemon_timeout);
    }
    pid_t r;
    do {
        r = ::waitpid(pid, &status, 0);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
        return last_system_error();
    return {};
}

}  // namespace iofwd::client

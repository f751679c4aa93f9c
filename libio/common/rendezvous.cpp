#include "rendezvous.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "errors.hpp"

namespace iofwd {

std::string env_or(const char* name, const std::string& fallback)
{
    const char* v = std::getenv(name);
    return (v && *v) ? std::string(v) : fallback;
}

bool valid_name(const std::string& name)
{
    if (name.empty() || name.size() > 200 || name[0] == '.')
        return false;
    for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
            return false;
    return true;
}

namespace {

// Turns any string into a usable name: unsafe characters become '_'.
std::string sanitize(std::string s)
{
    for (char& c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
            c = '_';
    if (s.empty() || s[0] == '.')
        s.insert(s.begin(), 'x');
    return s;
}

}  // namespace

std::string default_node_name()
{
    if (const char* v = std::getenv("IOFWD_NODE"); v && *v)
        return v;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0)
        return "localhost";
    std::string h(host);
    if (auto dot = h.find('.'); dot != std::string::npos)
        h.resize(dot);
    return sanitize(h);
}

std::string default_session(const std::string& node)
{
    return env_or("IOFWD_SESSION", fmt::format("{}-{}", node, getppid()));
}

std::string default_job_name()
{
    if (const char* v = std::getenv("IOFWD_JOB"); v && *v)
        return v;
    std::ifstream comm("/proc/self/comm");
    std::string name;
    std::getline(comm, name);
    return name.empty() ? std::string("job") : sanitize(name);
}

std::string sanitize_name(std::string s)
{
    return sanitize(std::move(s));
}

namespace {

// Ours, and nobody else may add or replace files in it.
std::error_code check_private_dir(int fd, const std::string& dir, std::string& why)
{
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("cannot stat runtime directory {}: {}", dir, ec.message());
        return ec;
    }
    if (st.st_uid != ::geteuid()) {
        why = fmt::format("runtime directory {} belongs to uid {}, not to you (uid {}); "
                          "set IOFWD_RUNTIME_DIR to a directory of your own",
                          dir, st.st_uid, ::geteuid());
        return make_error_code(errc::permission_denied);
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        why = fmt::format("runtime directory {} is writable by others (mode {:o}); "
                          "refusing to use it (chmod 700 it or set IOFWD_RUNTIME_DIR)",
                          dir, st.st_mode & 07777);
        return make_error_code(errc::permission_denied);
    }
    return {};
}

}  // namespace

std::string runtime_paths::socket_via() const
{
    return fmt::format("/proc/self/fd/{}/{}", dir_fd ? dir_fd->get() : -1, socket_name);
}

std::error_code open_runtime(const std::string& session, runtime_paths& out, std::string& why)
{
    std::string dir;
    if (const char* v = std::getenv("IOFWD_RUNTIME_DIR"); v && *v)
        dir = v;
    else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
        dir = std::string(x) + "/iofwd";
    else
        dir = fmt::format("/tmp/iofwd-{}", ::geteuid());
    while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();

    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        const auto ec = last_system_error();
        why = fmt::format("cannot create runtime directory {}: {}", dir, ec.message());
        return ec;
    }
    // The last component must not be a symlink (another user could point
    // it anywhere between a check and a use): O_NOFOLLOW, then every check
    // on the descriptor.
    auto fd = std::make_shared<unique_fd>(
        ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!*fd) {
        const auto ec = last_system_error();
        struct stat st {};
        if (errno == EACCES && ::lstat(dir.c_str(), &st) == 0 && st.st_uid != ::geteuid()) {
            why = fmt::format("runtime directory {} belongs to uid {}, not to you (uid {}); "
                              "set IOFWD_RUNTIME_DIR to a directory of your own",
                              dir, st.st_uid, ::geteuid());
            return make_error_code(errc::permission_denied);
        }
        why = errno == ELOOP || errno == ENOTDIR
                  ? fmt::format("runtime path {} is a symlink or not a directory; refusing it "
                                "(remove it, or set IOFWD_RUNTIME_DIR to a directory of your own)",
                                dir)
                  : fmt::format("cannot open runtime directory {}: {}", dir, ec.message());
        return errno == ELOOP || errno == ENOTDIR ? make_error_code(errc::permission_denied) : ec;
    }
    return adopt_runtime(fd->release(), dir, session, out, why);
}

std::error_code adopt_runtime(int raw_fd, const std::string& dir, const std::string& session,
                              runtime_paths& out, std::string& why)
{
    auto fd = std::make_shared<unique_fd>(raw_fd);
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        why = fmt::format("runtime directory {} (descriptor {}) is not a directory", dir, raw_fd);
        return make_error_code(errc::invalid_argument);
    }
    ::fcntl(fd->get(), F_SETFD, FD_CLOEXEC);
    if (auto ec = check_private_dir(fd->get(), dir, why))
        return ec;

    runtime_paths d;
    d.dir_fd = std::move(fd);
    d.dir = dir;
    std::string name = sanitize(session);
    // sockaddr_un holds 108 bytes: "/proc/self/fd/N/" + session + ".sock" + NUL.
    if (name.size() > 72) {
        std::uint64_t h = 1469598103934665603ull;
        for (unsigned char c : name)
            h = (h ^ c) * 1099511628211ull;
        name = fmt::format("s{:016x}", h);
    }
    out = session_paths(d, name);
    return {};
}

runtime_paths session_paths(const runtime_paths& dir, const std::string& session)
{
    runtime_paths p;
    p.dir_fd = dir.dir_fd;
    p.dir = dir.dir;
    p.session = session;
    p.socket_name = p.session + ".sock";
    p.lock_name = p.session + ".lock";
    p.log_name = p.session + ".log";
    p.socket = p.dir + "/" + p.socket_name;
    p.lock = p.dir + "/" + p.lock_name;
    p.log = p.dir + "/" + p.log_name;
    return p;
}

std::error_code open_runtime_file(const runtime_paths& p, const std::string& name, int flags,
                                  unique_fd& out, std::string& why)
{
    unique_fd fd(::openat(p.dir_fd->get(), name.c_str(),
                          flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600));
    if (!fd) {
        const auto ec = last_system_error();
        why = errno == ELOOP ? fmt::format("{}/{} is a symlink; refusing to follow it", p.dir, name)
                             : fmt::format("cannot open {}/{}: {}", p.dir, name, ec.message());
        return errno == ELOOP ? make_error_code(errc::permission_denied) : ec;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
        why = fmt::format("{}/{} is not a regular file of yours; refusing it", p.dir, name);
        return make_error_code(errc::permission_denied);
    }
    // Back to blocking: O_NONBLOCK only kept a FIFO from holding the open.
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    out = std::move(fd);
    return {};
}

std::error_code try_lock_session(const runtime_paths& p, unique_fd& out, bool& held,
                                 std::string& why)
{
    // A cleaner removes a lock file only while holding its lock, so after
    // a few rounds the file at the path is one nobody is removing.
    for (int attempt = 0; attempt < 100; ++attempt) {
        unique_fd fd;
        if (auto ec = open_runtime_file(p, p.lock_name, O_RDWR | O_CREAT, fd, why))
            return ec;
        int rc;
        do {
            rc = ::flock(fd.get(), LOCK_EX | LOCK_NB);
        } while (rc != 0 && errno == EINTR);
        if (rc != 0) {
            if (errno != EWOULDBLOCK) {
                const auto ec = last_system_error();
                why = fmt::format("cannot lock {}: {}", p.lock, ec.message());
                return ec;
            }
            held = false;
            return {};
        }
        struct stat mine {}, there {};
        if (::fstat(fd.get(), &mine) == 0 &&
            ::fstatat(p.dir_fd->get(), p.lock_name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
            mine.st_dev == there.st_dev && mine.st_ino == there.st_ino) {
            out = std::move(fd);
            held = true;
            return {};
        }
        // Removed (or replaced) under us: that lock protects nothing.
    }
    why = fmt::format("the lock file {} keeps being replaced", p.lock);
    return make_error_code(errc::rank_in_use);
}

std::error_code runtime_names(const runtime_paths& dir, std::vector<std::string>& out,
                              std::string& why)
{
    // readdir on a descriptor of its own: the shared one keeps its offset.
    unique_fd list_fd(::openat(dir.dir_fd->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    DIR* d = list_fd ? ::fdopendir(list_fd.get()) : nullptr;
    if (!d) {
        const auto ec = last_system_error();
        why = fmt::format("cannot list runtime directory {}: {}", dir.dir, ec.message());
        return ec;
    }
    list_fd.release();  // owned by `d` now
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(d))
        names.emplace_back(e->d_name);
    const int read_errno = errno;
    ::closedir(d);
    if (read_errno != 0) {
        const std::error_code ec(read_errno, std::system_category());
        why = fmt::format("cannot list runtime directory {}: {}", dir.dir, ec.message());
        return ec;
    }
    std::sort(names.begin(), names.end());
    out = std::move(names);
    return {};
}

std::error_code connect_unix(const std::string& path, unique_fd& out, bool wait)
{
    unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (wait ? 0 : SOCK_NONBLOCK), 0));
    if (!fd)
        return last_system_error();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path)
        return std::error_code(ENAMETOOLONG, std::system_category());
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    int rc;
    do {
        rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0)
        return last_system_error();
    out = std::move(fd);
    return {};
}

std::error_code check_daemon_owner(int sock, const std::string& path, std::string& why,
                                   pid_t* pid)
{
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("cannot tell who serves {}: {}", path, ec.message());
        return ec;
    }
    if (pid)
        *pid = cred.pid;
    if (cred.uid != ::geteuid()) {
        why = fmt::format("the process serving {} (pid {}) belongs to uid {}, not to you (uid {}): "
                          "refusing to hand it anything",
                          path, cred.pid, cred.uid, ::geteuid());
        return make_error_code(errc::permission_denied);
    }
    return {};
}

}  // namespace iofwd

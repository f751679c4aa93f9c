#include "rendezvous.hpp"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

std::error_code prepare_runtime_dir(std::string& out, std::string& why)
{
    std::string dir;
    if (const char* v = std::getenv("IOFWD_RUNTIME_DIR"); v && *v)
        dir = v;
    else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
        dir = std::string(x) + "/iofwd";
    else
        dir = fmt::format("/tmp/iofwd-{}", geteuid());

    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        const auto ec = last_system_error();
        why = fmt::format("cannot create runtime directory {}: {}", dir, ec.message());
        return ec;
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("cannot stat runtime directory {}: {}", dir, ec.message());
        return ec;
    }
    if (!S_ISDIR(st.st_mode)) {
        why = fmt::format("runtime path {} is not a directory", dir);
        return std::error_code(ENOTDIR, std::system_category());
    }
    if (st.st_uid != geteuid()) {
        why = fmt::format("runtime directory {} belongs to uid {}, not to you (uid {}); "
                          "set IOFWD_RUNTIME_DIR to a directory of your own",
                          dir, st.st_uid, geteuid());
        return errc::permission_denied;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        why = fmt::format("runtime directory {} is writable by others (mode {:o}); "
                          "refusing to use it (chmod 700 it or set IOFWD_RUNTIME_DIR)",
                          dir, st.st_mode & 07777);
        return errc::permission_denied;
    }
    out = dir;
    return {};
}

runtime_paths paths_for(const std::string& dir, const std::string& session)
{
    runtime_paths p;
    p.dir = dir;
    p.session = sanitize(session);
    // sockaddr_un holds 108 bytes; keep room for ".sock" and the NUL.
    if (dir.size() + 1 + p.session.size() + 6 > sizeof(sockaddr_un::sun_path)) {
        std::uint64_t h = 1469598103934665603ull;
        for (unsigned char c : p.session)
            h = (h ^ c) * 1099511628211ull;
        p.session = fmt::format("s{:016x}", h);
    }
    p.socket = fmt::format("{}/{}.sock", dir, p.session);
    p.lock = fmt::format("{}/{}.lock", dir, p.session);
    p.log = fmt::format("{}/{}.log", dir, p.session);
    return p;
}

}  // namespace iofwd

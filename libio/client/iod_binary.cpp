#include "iod_binary.hpp"

#include <dlfcn.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

namespace iofwd::client {
namespace {

// The real path of the shared object (or program) this code is part of.
std::string own_file()
{
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&choose_iod), &info) == 0 || !info.dli_fname ||
        !*info.dli_fname)
        return {};
    char real[PATH_MAX];
    if (!::realpath(info.dli_fname, real))
        return {};
    return real;
}

bool same_directory(const std::string& a, const std::string& b)
{
    struct stat sa {}, sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

bool in_build_tree(const std::string& dir)
{
    std::string_view dirs = IOFWD_BUILD_LIB_DIRS;
    while (!dirs.empty()) {
        const auto colon = dirs.find(':');
        if (same_directory(dir, std::string(dirs.substr(0, colon))))
            return true;
        dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    }
    return false;
}

}  // namespace

iod_choice choose_iod()
{
    if (const char* v = std::getenv("IOFWD_IOD"); v && *v)
        return {v, "IOFWD_IOD"};
    const std::string self = own_file();
    if (self.empty())
        return {IOFWD_IOD_INSTALL_PATH, "the configured install path"};
    const std::string dir = self.substr(0, self.rfind('/'));
    if (in_build_tree(dir))
        return {IOFWD_BUILD_IOD, fmt::format("the build tree's, for {}", self)};
    const std::string_view rel = IOFWD_IOD_FROM_LIBDIR;
    if (!rel.empty() && rel.front() == '/')
        return {std::string(rel), fmt::format("installed with {}", self)};
    // `dir` is a real path (no symlinks), so resolving ".." by name is exact.
    return {std::filesystem::path(dir + "/" + std::string(rel)).lexically_normal().string(),
            fmt::format("installed with {}", self)};
}

}  // namespace iofwd::client

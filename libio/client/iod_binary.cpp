#include "iod_binary.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "loaded_from.hpp"

namespace iofwd::client {
namespace {

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
    const std::string self = loaded_from(reinterpret_cast<const void*>(&choose_iod));
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

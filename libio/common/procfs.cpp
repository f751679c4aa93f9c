#include "procfs.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace iofwd {

namespace {

// A /proc stat file's command name (between its parentheses) and its user +
// system CPU seconds; false when it cannot be read.
bool read_stat(const std::string& path, std::string& name, double& seconds)
{
    std::ifstream in(path);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    const auto open = all.find('(');
    const auto close = all.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open ||
        close + 2 > all.size())
        return false;
    std::istringstream rest(all.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    int i = 3;
    for (; i <= 15 && rest >> field; ++i) {
        if (i == 14)
            utime = std::stoull(field);
        if (i == 15)
            stime = std::stoull(field);
    }
    if (i <= 15)
        return false;
    name = all.substr(open + 1, close - open - 1);
    seconds = static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    return true;
}

// The /proc directories of process `pid`'s threads alive now; none when it
// is gone, also when it goes while they are listed (never a throw).
std::vector<std::filesystem::path> thread_dirs(int pid)
{
    std::vector<std::filesystem::path> out;
    std::error_code ec;
    std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/task", ec), end;
    for (; !ec && it != end; it.increment(ec))
        out.push_back(it->path());
    return out;
}

}  // namespace

double process_cpu_seconds(int pid)
{
    std::string name;
    double seconds = 0;
    return read_stat("/proc/" + std::to_string(pid) + "/stat", name, seconds) ? seconds : 0;
}

std::map<std::string, double> thread_cpu_seconds(int pid)
{
    std::map<std::string, double> out;
    for (const auto& dir : thread_dirs(pid)) {
        std::string name;
        double seconds = 0;
        if (!read_stat(dir / "stat", name, seconds))
            continue;  // ended meanwhile
        // "iod-pull-0" and "iod-pull-1" count as "iod-pull".
        if (const auto dash = name.rfind('-');
            dash != std::string::npos && dash + 1 < name.size() &&
            name.find_first_not_of("0123456789", dash + 1) == std::string::npos)
            name.erase(dash);
        out[name] += seconds;
    }
    return out;
}

std::uint64_t process_peak_rss(int pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0)
            return std::stoull(line.substr(6)) * 1024;
    return 0;
}

std::optional<std::uint64_t> huge_page_bytes(const void* begin, std::uint64_t length)
{
    const auto lo = reinterpret_cast<std::uintptr_t>(begin), hi = lo + length;
    std::ifstream smaps("/proc/self/smaps");
    if (!smaps)
        return std::nullopt;
    std::string line;
    bool inside = false;
    std::uint64_t kib = 0;
    while (std::getline(smaps, line)) {
        unsigned long a = 0, b = 0, k = 0;
        // A mapping's first line ("a-b perms ..."); then its fields.
        if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2)
            inside = a < hi && b > lo;
        else if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lu kB", &k) == 1)
            kib += k;
    }
    return kib << 10;
}

void name_this_thread(const char* name) noexcept
{
    ::pthread_setname_np(::pthread_self(), name);
}

bool has_thread_named(int pid, std::string_view name)
{
    for (const auto& dir : thread_dirs(pid)) {
        std::ifstream in(dir / "comm");
        std::string comm;
        if (std::getline(in, comm) && comm == name)
            return true;
    }
    return false;
}

}  // namespace iofwd

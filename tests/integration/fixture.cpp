#include "fixture.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

namespace test {

cluster::cluster()
{
    env = {{"IOFWD_RUNTIME_DIR", runtime_dir()},
           {"IOFWD_SESSION", "s"},
           {"IOFWD_STORE", store()},
           {"IOFWD_JOB", "itest"},
           {"IOFWD_NODE", "nodeA"},
           {"IOFWD_LAUNCH_TIMEOUT", "30"},
           {"IOFWD_IOD", build_path("IOFWD_TEST_IOD")}};
}

cluster::~cluster()
{
    // Every daemon that logged into this test's runtime directory.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(runtime_dir(), ec)) {
        if (entry.path().extension() != ".log")
            continue;
        const auto text = read_file(entry.path());
        for (auto pos = text.find("iod["); pos != std::string::npos;
             pos = text.find("iod[", pos + 1)) {
            const pid_t pid = static_cast<pid_t>(std::atoi(text.c_str() + pos + 4));
            if (pid > 0 && read_file("/proc/" + std::to_string(pid) + "/cmdline")
                                   .find(runtime_dir()) != std::string::npos)
                ::kill(pid, SIGKILL);
        }
    }
}

process cluster::run(std::vector<std::string> argv, const std::map<std::string, std::string>& extra)
{
    auto e = env;
    for (const auto& [k, v] : extra)
        e[k] = v;
    return process(std::move(argv), e, tmp / ("out" + std::to_string(outputs++) + ".txt"));
}

process cluster::rank(unsigned r, unsigned n, std::vector<std::string> args,
                      const std::map<std::string, std::string>& extra)
{
    std::vector<std::string> argv = {build_path("IOFWD_TEST_RANK_CLIENT"), "--rank",
                                     std::to_string(r), "--ranks", std::to_string(n)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(std::move(argv), extra);
}

process cluster::daemon(std::vector<std::string> args, const std::map<std::string, std::string>& extra)
{
    std::vector<std::string> argv = {build_path("IOFWD_TEST_IOD"), "--log",
                                     runtime_dir() + "/s.log"};
    argv.insert(argv.end(), args.begin(), args.end());
    ::mkdir(runtime_dir().c_str(), 0700);
    auto p = run(std::move(argv), extra);
    REQUIRE(wait_until([&] { return count(log(), "ready:") > 0 || !p.running(); }, 20s));
    return p;
}

int cluster::verify(long versions, long ranks, std::string& out)
{
    auto p = run({build_path("IOFWD_TEST_VERIFY"), "--store", store(), "--job", "itest",
                  "--expect-versions", std::to_string(versions), "--expect-ranks",
                  std::to_string(ranks)});
    const auto st = p.wait(120s);
    out = p.output();
    REQUIRE(st.has_value());
    return exit_code(*st);
}

double cpu_seconds(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    std::istringstream rest(all.substr(all.rfind(')') + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
        if (i == 14)
            utime = std::stoull(field);
        if (i == 15)
            stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::size_t count(const std::string& hay, const std::string& needle)
{
    std::size_t n = 0;
    for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
        ++n;
    return n;
}

}  // namespace test

#include "fixture.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

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
        for (const pid_t pid : daemon_pids(read_file(entry.path())))
            if (read_file("/proc/" + std::to_string(pid) + "/cmdline").find(runtime_dir()) !=
                std::string::npos)
                ::kill(pid, SIGKILL);
    }
}

void cluster::unpacked()
{
    packed(0);
}

void cluster::packed(unsigned versions)
{
    env["IOFWD_PACK_VERSIONS"] = std::to_string(versions);
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

void cluster::crash_mid_write(const std::string& version_dir)
{
    auto r = rank(0, 1, {"--size", std::to_string(3 << 20), "--versions", "1"},
                  {{"IOFWD_FAULT", "pwrite:DELAY"}, {"IOFWD_CHUNK_SIZE", "1M"}});
    REQUIRE(wait_until([&] { return !temporaries(version_dir).empty(); }, 60s));
    for (const pid_t pid : daemon_pids(log()))
        ::kill(pid, SIGKILL);
    r.signal(SIGKILL);
    REQUIRE(r.wait(30s).has_value());
}

int cluster::verify(long versions, long ranks, std::string& out, const std::string& job)
{
    auto p = run({build_path("IOFWD_TEST_VERIFY"), "--store", store(), "--job", job,
                  "--expect-versions", std::to_string(versions), "--expect-ranks",
                  std::to_string(ranks)});
    const auto st = p.wait(scaled(120s));
    out = p.output();
    REQUIRE(st.has_value());
    const int code = exit_code(*st);
    if (code != 0)  // shown with the failed check that follows
        UNSCOPED_INFO("verify exited " << code << ":\n" << out << "daemon log:\n" << log());
    return code;
}

const std::map<std::string, std::string> small_journal{{"IOFWD_JOURNAL_SIZE", "1M"}};

void fill_journal(cluster& c, unsigned ranks, const std::map<std::string, std::string>& journal_env,
                  std::uintmax_t journal_bytes)
{
    const std::string journal = c.store() + "/itest/.nodeA.journal";
    std::vector<process> rs;
    for (unsigned r = 0; r < ranks; ++r)
        rs.push_back(c.rank(r, ranks, {"--size", "5000", "--versions", "1", "--go-file", gate(c)},
                            journal_env));
    REQUIRE(wait_until([&] {
        std::error_code ec;
        return std::filesystem::file_size(journal, ec) == journal_bytes;
    }, 20s));
    std::this_thread::sleep_for(500ms);  // its fdatasync, after the last zeros
    open_gate(c);
    for (auto& r : rs) {
        const auto s = r.wait(60s);
        INFO("first run:\n" << r.output() << "log:\n" << c.log());
        REQUIRE(s.has_value());
        REQUIRE(exit_code(*s) == 0);
    }
    REQUIRE(wait_until([&] { return count(c.log(), "exit status 0") == 1; }, 20s));
    std::filesystem::remove(gate(c));
    // The daemon has let go of the session when its process is gone.
    for (const pid_t pid : daemon_pids(c.log()))
        REQUIRE(wait_until([&] { return ::kill(pid, 0) != 0; }, 10s));
}

process faulty_daemon(cluster& c, const std::string& fault,
                      const std::map<std::string, std::string>& env)
{
    auto extra = env;
    extra["IOFWD_FAULT"] = fault;
    const auto ready_before = count(c.log(), "ready:");
    auto d = c.daemon({}, extra);
    REQUIRE(wait_until(
        [&] { return count(c.log(), "ready:") == ready_before + 1 || !d.running(); }, 20s));
    REQUIRE(d.running());
    return d;
}

process stalling_daemon(cluster& c, unsigned passing,
                        const std::map<std::string, std::string>& env)
{
    return faulty_daemon(c, "pwrite:DELAY30:" + std::to_string(passing), env);
}

std::vector<std::string> as_nobody(std::vector<std::string> cmd)
{
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups"};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    return argv;
}

void require_root()
{
    if (::geteuid() != 0)
        FAIL("these tests act as another user through setpriv and need root");
}

std::string public_dir(const cluster& c, const std::string& name)
{
    ::chmod(c.tmp.path().c_str(), 0755);
    const std::string dir = c.tmp / name;
    REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
    REQUIRE(::chmod(dir.c_str(), 0777) == 0);
    return dir;
}

process stranger_at_socket(cluster& c, const std::string& seconds)
{
    const std::string pub = public_dir(c, "pub");
    auto fake = c.run(as_nobody({build_path("IOFWD_TEST_STRANGER"), "fake-daemon",
                                 pub + "/s.sock", seconds}));
    REQUIRE(wait_until([&] { return has_line(fake, "listening"); }, 10s));
    REQUIRE(::mkdir(c.runtime_dir().c_str(), 0700) == 0);
    REQUIRE(::rename((pub + "/s.sock").c_str(), c.socket().c_str()) == 0);
    return fake;
}

std::vector<pid_t> daemon_pids(const std::string& log)
{
    std::vector<pid_t> pids;
    for (auto pos = log.find("iod["); pos != std::string::npos; pos = log.find("iod[", pos + 1)) {
        const pid_t pid = static_cast<pid_t>(std::atoi(log.c_str() + pos + 4));
        if (pid > 0 && std::find(pids.begin(), pids.end(), pid) == pids.end())
            pids.push_back(pid);
    }
    return pids;
}

std::vector<std::uint64_t> removed_by_retention(const std::string& log, unsigned keep,
                                                const std::string& job)
{
    const std::string head = "retention (keep " + std::to_string(keep) + "): removed version";
    const std::string tail = " of job " + job;
    std::vector<std::uint64_t> out;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
        const auto at = line.find(head);
        if (at == std::string::npos || !line.ends_with(tail))
            continue;
        std::string list = line.substr(at + head.size());
        list = list.substr(0, list.size() - tail.size());
        if (list.starts_with("s"))
            list.erase(0, 1);
        INFO("retention line: " << line);
        if (list.find(" more") != std::string::npos)
            FAIL("the line lists 64 runs of versions and counts the rest: this test wrote too "
                 "many versions with gaps to read them back");
        REQUIRE_FALSE(list.empty());
        std::istringstream items(list);
        for (std::string item; std::getline(items, item, ',');) {
            unsigned long long first = 0, last = 0;
            char dash = 0;
            std::istringstream one(item);
            REQUIRE(one >> first);
            if (one >> dash) {
                REQUIRE(dash == '-');
                REQUIRE(one >> last);
            } else {
                last = first;
            }
            REQUIRE((one >> std::ws).eof());  // nothing after the item
            REQUIRE(first <= last);
            for (auto v = first; v <= last; ++v)
                out.push_back(v);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::size_t count(const std::string& hay, const std::string& needle)
{
    std::size_t n = 0;
    for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
        ++n;
    return n;
}

bool has_line(const process& p, const std::string& prefix)
{
    const auto out = p.output();
    return out.rfind(prefix, 0) == 0 || out.find("\n" + prefix) != std::string::npos;
}

void require_exit(process& p, int code)
{
    const auto st = p.wait(std::chrono::seconds(120));
    INFO(p.output());
    REQUIRE(st.has_value());
    REQUIRE(exit_code(*st) == code);
}

std::string gate(const cluster& c, const std::string& name)
{
    return c.runtime_dir() + "/" + name;
}

void open_gate(const cluster& c, const std::string& name)
{
    std::FILE* f = std::fopen(gate(c, name).c_str(), "w");
    if (!f)
        throw std::runtime_error("cannot create " + gate(c, name));
    std::fclose(f);
}

std::vector<std::string> temporaries(const std::string& dir)
{
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
        if (e.path().filename().string().find(".tmp-") != std::string::npos)
            found.push_back(e.path().string());
    return found;
}

}  // namespace test

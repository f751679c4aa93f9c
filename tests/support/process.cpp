#include "process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace test {

std::chrono::milliseconds scaled(std::chrono::milliseconds bound)
{
    static const long factor = [] {
        const char* v = std::getenv("IOFWD_TEST_TIME_SCALE");
        const long f = v ? std::strtol(v, nullptr, 10) : 1;
        return f > 0 ? f : 1;
    }();
    return bound * factor;
}


temp_dir::temp_dir()
{
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/iofwd-test-XXXXXX";
    if (!::mkdtemp(tmpl.data()))
        throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
}

temp_dir::~temp_dir()
{
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

process::process(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
                 std::string output_file)
    : out_(std::move(output_file))
{
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e; ++e) {
        const std::string kv(*e);
        const auto eq = kv.find('=');
        vars[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    for (const auto& [k, v] : env) {
        if (v.empty())
            vars.erase(k);
        else
            vars[k] = v;
    }
    std::vector<std::string> envs;
    for (const auto& [k, v] : vars)
        envs.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : envs)
        envp.push_back(s.data());
    envp.push_back(nullptr);
    for (auto& s : argv)
        args.push_back(s.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group, so that mpiexec and its ranks can be signalled together.
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    const int rc = posix_spawn(&pid_, args[0], &fa, &attr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
        throw std::runtime_error(std::string("posix_spawn ") + argv[0] + ": " + std::strerror(rc));
}

process::process(process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)), reaped_(o.reaped_), status_(o.status_), out_(o.out_)
{
}

process::~process()
{
    if (pid_ > 0 && !reaped_) {
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
    }
}

std::optional<int> process::wait(std::chrono::milliseconds timeout)
{
    if (reaped_)
        return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
        if (r == pid_) {
            reaped_ = true;
            return status_;
        }
        if (std::chrono::steady_clock::now() >= deadline)
            return std::nullopt;
        std::this_thread::sleep_for(5ms);
    }
}

bool process::running()
{
    return !wait(0ms).has_value();
}

void process::signal(int sig)
{
    if (pid_ > 0 && !reaped_)
        ::kill(pid_, sig);
}

std::string process::output() const
{
    return read_file(out_);
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout)
{
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        if (pred())
            return true;
        if (std::chrono::steady_clock::now() >= deadline)
            return pred();
        std::this_thread::sleep_for(10ms);
    }
}

std::string read_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool exists(const std::string& path)
{
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

std::string build_path(const char* env_name)
{
    const char* v = std::getenv(env_name);
    if (!v || !*v)
        throw std::runtime_error(std::string("environment variable ") + env_name +
                                 " is not set (run the tests through meson test)");
    return v;
}

int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return -WTERMSIG(status);
    return -1000;
}

}  // namespace test

#pragma once
// Real child processes for the integration tests: spawn with extra
// environment, capture output to a file, wait with a deadline, signal.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace test {

using namespace std::chrono_literals;

// A bound on how long something real takes (a wait, an elapsed time),
// stretched by IOFWD_TEST_TIME_SCALE (a whole number, default 1): the
// sanitizer builds run the same tests several times slower.
std::chrono::milliseconds scaled(std::chrono::milliseconds bound);

class temp_dir {
public:
    temp_dir();
    ~temp_dir();
    const std::string& path() const { return path_; }
    std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

class process {
public:
    // argv[0] is a path. env: variables to set (empty value: unset).
    process(std::vector<std::string> argv, const std::map<std::string, std::string>& env,
            std::string output_file);
    process(process&&) noexcept;
    process& operator=(process&&) = delete;
    ~process();  // SIGKILLs a child still running

    pid_t pid() const { return pid_; }
    // The exit status (as from waitpid) or nullopt when the deadline passed.
    std::optional<int> wait(std::chrono::milliseconds timeout);
    void signal(int sig);
    std::string output() const;
    bool running();

private:
    pid_t pid_ = -1;
    bool reaped_ = false;
    int status_ = 0;
    std::string out_;
};

// Polls `pred` every 10 ms until true or the deadline; returns the last value.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

std::string read_file(const std::string& path);
bool exists(const std::string& path);
// Paths of the built programs (set by meson through the environment).
std::string build_path(const char* env_name);
// Exit code of a status, -signal for a signal.
int exit_code(int status);

}  // namespace test

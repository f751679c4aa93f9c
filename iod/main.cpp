// iod: the iofwd per-node daemon. See `iod --help` and README.md.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "daemon.hpp"
#include "errors.hpp"
#include "log.hpp"
#include "options.hpp"
#include "peer_check.hpp"
#include "start_report.hpp"
#include "sys.hpp"

int main(int argc, char** argv)
{
    using namespace iofwd::iod;
    // The daemon's sacrificial checker of peers' UCX addresses (peer_check.hpp).
    if (argc == 3 && std::string(argv[1]) == "--check-peer-fd")
        return run_peer_check(std::atoi(argv[2]));
    // The launching rank waits for one line on --ready-fd (start_report.hpp):
    // "ready", or the errno of what kept the daemon from starting and why.
    auto fail_start = [](int ready_fd, int code, const std::string& why) {
        if (ready_fd >= 0) {
            const std::string line = iofwd::start_error_line(code, why);
            [[maybe_unused]] auto n = ::write(ready_fd, line.data(), line.size());
        }
        return 2;
    };
    options opts;
    std::string why;
    switch (parse_options(argc, argv, opts, &why)) {
    case parse_result::exit_ok: return 0;
    case parse_result::exit_error: return fail_start(ready_fd_in(argc, argv), EINVAL, why);
    case parse_result::run: break;
    }
    ::signal(SIGPIPE, SIG_IGN);
    // Every connection holds descriptors (its socket, its mailbox's, UCX's):
    // a node's 128 ranks and their shim files can outgrow a soft limit of
    // 1024. The hard limit is what the site allows.
    if (rlimit nofile{};
        ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &nofile);
    }
    const int ready_fd = opts.ready_fd;
    if (level lv{}; parse_level(opts.log_level, lv))
        log_level(lv);
    if (!log_open(opts.log.empty() ? nullptr : opts.log.c_str())) {
        const int code = errno;
        return fail_start(ready_fd, code,
                          fmt::format("cannot use the log file {}: {}", opts.log,
                                      code == ELOOP ? "it is a symlink" : std::strerror(code)));
    }
    auto start_failed = [&](std::error_code ec, const std::string& text) {
        log_error("cannot start: {}", text);
        return fail_start(ready_fd, iofwd::to_errno(ec), text);
    };
    if (!iofwd::sys::inject_from_env(why))
        return start_failed(iofwd::make_error_code(iofwd::errc::invalid_argument), why);

    boost::asio::io_context loop(1);
    int status = 0;
    {
        iofwd::iod::daemon d(loop, opts);
        if (auto ec = d.start(why))
            return start_failed(ec, why);
        loop.run();
        status = d.exit_status();
    }
    return status;
}

// iod: the iofwd per-node daemon. See `iod --help` and README.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>
#include <fmt/format.h>

#include "daemon.hpp"
#include "log.hpp"
#include "options.hpp"
#include "peer_check.hpp"
#include "sys.hpp"

int main(int argc, char** argv)
{
    using namespace iofwd::iod;
    // The daemon's sacrificial checker of peers' UCX addresses (peer_check.hpp).
    if (argc == 3 && std::string(argv[1]) == "--check-peer-fd")
        return run_peer_check(std::atoi(argv[2]));
    options opts;
    switch (parse_options(argc, argv, opts)) {
    case parse_result::exit_ok: return 0;
    case parse_result::exit_error: return 2;
    case parse_result::run: break;
    }
    ::signal(SIGPIPE, SIG_IGN);
    const int ready_fd = opts.ready_fd;
    if (level lv{}; parse_level(opts.log_level, lv))
        log_level(lv);
    if (!log_open(opts.log.empty() ? nullptr : opts.log.c_str())) {
        if (ready_fd >= 0) {
            const std::string line = "error: cannot use the log file " + opts.log + "\n";
            [[maybe_unused]] auto n = ::write(ready_fd, line.data(), line.size());
        }
        return 2;
    }

    auto fail_start = [&](const std::string& why) {
        log_error("cannot start: {}", why);
        if (ready_fd >= 0) {
            // The launching rank reads this and puts it in its error message.
            const std::string line = "error: " + why + "\n";
            [[maybe_unused]] auto n = ::write(ready_fd, line.data(), line.size());
        }
        return 2;
    };
    std::string why;
    if (!iofwd::sys::inject_from_env(why))
        return fail_start(why);

    boost::asio::io_context loop(1);
    int status = 0;
    {
        iofwd::iod::daemon d(loop, opts);
        if (auto ec = d.start(why))
            return fail_start(why);
        loop.run();
        status = d.exit_status();
    }
    return status;
}

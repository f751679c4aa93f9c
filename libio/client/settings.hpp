#pragma once
// The client's settings, read once at io_init from the IOFWD_* variables
// (config.hpp defines and checks them) and from what the program passed.
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>

namespace iofwd::client {

enum class pull_mode { automatic, push, get };
// IOFWD_HUGEPAGES: whether the buffer's pages already there are collapsed
// into 2 MiB pages on a thread after io_init, in io_init, or not at all.
enum class huge_pages_mode { background, init, off };

struct settings {
    std::uint32_t nodes = 1;  // the job's nodes
    std::string run;          // the run's name; empty: unnamed
    std::uint64_t eager_limit = 1024 * 1024;
    huge_pages_mode huge_pages = huge_pages_mode::background;
    std::string transports;  // IOFWD_TRANSPORTS: UCX's to the daemon (UCX_TLS syntax)
    pull_mode pull = pull_mode::automatic;
    std::chrono::milliseconds launch_timeout{30'000};
    std::chrono::milliseconds daemon_timeout{60'000};    // silence before the daemon counts as dead
    std::chrono::milliseconds finalize_timeout{60'000};  // 0: no limit
    std::string job;    // the job's name in the store: IOFWD_JOB, else the program's
    std::string store;  // IOFWD_STORE, passed on to a daemon the rank launches
    std::string log;    // IOFWD_LOG: where that daemon logs (empty: the runtime directory)
};

// Reads the environment. `nodes` and `run` from the program win over it
// (0 and empty: IOFWD_NODES, else SLURM_STEP_NUM_NODES (or SLURM_NNODES)
// inside an srun step, else 1; IOFWD_RUN, else slurm-<job>.<step> inside a step). A bad value is
// errc::invalid_argument with a sentence in `why`.
std::error_code load_settings(std::uint32_t nodes, const std::string& run, settings& out,
                              std::string& why);

// The store and the job before io_init (a restart asking io_latest first):
// IOFWD_STORE, else ./iofwd-store; IOFWD_JOB, else the program's name.
std::string default_store();

// Sentences about IOFWD_* variables that are not iofwd settings, printed to
// stderr once per process (by the node's first rank only when `speak`).
void warn_unknown_settings(bool speak);

}  // namespace iofwd::client

#include "settings.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "config.hpp"
#include "errors.hpp"
#include "rendezvous.hpp"

namespace iofwd::client {
namespace {

std::chrono::milliseconds ms(double seconds)
{
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

bool in_srun_step()
{
    const char* step = std::getenv("SLURM_STEP_ID");
    return step && *step;
}

}  // namespace

std::error_code load_settings(std::uint32_t nodes, const std::string& run, settings& out,
                              std::string& why)
{
    settings s;
    std::uint64_t n = 0;
    if (auto ec = config::get_count("IOFWD_NODES", n, why))
        return ec;
    if (nodes) {
        s.nodes = nodes;
    } else if (n) {
        s.nodes = static_cast<std::uint32_t>(n);
    } else if (in_srun_step()) {
        // The step's nodes; SLURM_NNODES (the allocation's) only where Slurm
        // does not set the step's. Outside a step (hydra inside an
        // allocation) neither says how many nodes the job's ranks are on.
        for (const char* name : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}) {
            const char* v = std::getenv(name);
            if (!v || !*v)
                continue;
            if (!config::parse_count(v, n) || n == 0 || n > 100000) {
                why = fmt::format("{}='{}' is not a number of nodes", name, v);
                return make_error_code(errc::invalid_argument);
            }
            s.nodes = static_cast<std::uint32_t>(n);
            break;
        }
    }
    if (s.nodes > 100000) {
        why = fmt::format("{} nodes is not a plausible job", s.nodes);
        return make_error_code(errc::invalid_argument);
    }
    if (!run.empty()) {
        s.run = run;
        if (!valid_name(s.run)) {
            why = fmt::format("run name '{}' is not usable: letters, digits, '.', '_', '-', at "
                              "most 200, not starting with '.'",
                              run);
            return make_error_code(errc::invalid_argument);
        }
    } else {
        if (auto ec = config::get_text("IOFWD_RUN", s.run, why))
            return ec;
        const char* job = std::getenv("SLURM_JOB_ID");
        if (s.run.empty() && job && *job && in_srun_step())
            s.run = sanitize_name(fmt::format("slurm-{}.{}", job, std::getenv("SLURM_STEP_ID")));
    }
    if (auto ec = config::get_bytes("IOFWD_EAGER_LIMIT", s.eager_limit, why))
        return ec;
    std::string huge;
    if (auto ec = config::get_text("IOFWD_HUGEPAGES", huge, why))
        return ec;
    s.huge_pages = huge == "init" ? huge_pages_mode::init
                   : huge == "0"  ? huge_pages_mode::off
                                  : huge_pages_mode::background;
    if (auto ec = config::get_text("IOFWD_TRANSPORTS", s.transports, why))
        return ec;
    std::string pull;
    if (auto ec = config::get_text("IOFWD_PULL", pull, why))
        return ec;
    s.pull = pull == "push" ? pull_mode::push : pull == "get" ? pull_mode::get : pull_mode::automatic;
    double t = 0;
    if (auto ec = config::get_seconds("IOFWD_LAUNCH_TIMEOUT", t, why))
        return ec;
    s.launch_timeout = ms(t);
    if (auto ec = config::get_seconds("IOFWD_DAEMON_TIMEOUT", t, why))
        return ec;
    s.daemon_timeout = ms(t);
    if (auto ec = config::get_seconds("IOFWD_FINALIZE_TIMEOUT", t, why))
        return ec;
    s.finalize_timeout = ms(t);
    // Read by the launcher's cleaning of the runtime directory (runtime_gc),
    // which must not fail a launch: a bad value is refused here instead.
    if (auto ec = config::get_seconds("IOFWD_RUNTIME_LOG_AGE", t, why))
        return ec;
    if (auto ec = config::get_text("IOFWD_STORE", s.store, why))
        return ec;
    if (s.store.empty())
        s.store = default_store();
    if (auto ec = config::get_text("IOFWD_LOG", s.log, why))
        return ec;
    s.job = default_job_name();
    // The settings read elsewhere (rendezvous.hpp, the launcher), checked
    // here so that a bad value stops io_init rather than a later call.
    for (const char* name : {"IOFWD_JOB", "IOFWD_NODE", "IOFWD_SESSION", "IOFWD_RUNTIME_DIR",
                             "IOFWD_IOD"}) {
        std::string ignored;
        if (auto ec = config::get_text(name, ignored, why))
            return ec;
    }
    out = std::move(s);
    return {};
}

std::string default_store()
{
    return env_or("IOFWD_STORE", "iofwd-store");
}

void warn_unknown_settings(bool speak)
{
    static std::once_flag once;
    if (!speak)
        return;
    std::call_once(once, [] {
        for (const auto& w : config::unknown_in_environment())
            std::fprintf(stderr, "iofwd: warning: %s\n", w.c_str());
    });
}

}  // namespace iofwd::client

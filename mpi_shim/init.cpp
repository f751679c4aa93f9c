// MPI_Init, MPI_Init_thread and MPI_Finalize, and the Fortran 2008 bindings
// that MPICH routes straight to PMPI_ (the mpif.h and `use mpi` bindings call
// the C MPI_Init, which the shim already wraps).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "errors.hpp"
#include "rendezvous.hpp"
#include "shim.hpp"

namespace iofwd::shim {
namespace {

config read_config()
{
    config cfg;
    const std::string list = env_or("IOFWD_SHIM_PREFIXES", "");
    std::size_t at = 0;
    while (at <= list.size()) {
        const std::size_t colon = std::min(list.find(':', at), list.size());
        std::string p = list.substr(at, colon - at);
        at = colon + 1;
        if (p.empty())
            continue;
        if (p[0] != '/') {
            char cwd[4096];
            if (::getcwd(cwd, sizeof cwd))
                p = std::string(cwd) + "/" + p;
        }
        while (p.size() > 1 && p.back() == '/')
            p.pop_back();
        cfg.prefixes.push_back(p);
    }
    const std::string v = env_or("IOFWD_SHIM_VERBOSE", "0");
    cfg.verbose = !v.empty() && v != "0";
    cfg.trace = v == "2";
    return cfg;
}

}  // namespace

state& shared()
{
    static state s;
    return s;
}

void warn_once(const std::string& key, const std::string& text)
{
    static std::mutex m;
    static std::set<std::string> said;
    std::lock_guard lock(m);
    if (said.insert(key).second)
        std::fprintf(stderr, "iofwd shim (rank %d): %s\n", shared().world_rank, text.c_str());
}

agreement agree(MPI_Comm comm, bool first, bool second)
{
    int here[2] = {first ? 1 : 0, second ? 1 : 0}, everywhere[2] = {0, 0};
    if (PMPI_Allreduce(here, everywhere, 2, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return {};
    return {everywhere[0] == 1, everywhere[1] == 1, true};
}

int mpi_error_class(std::error_code ec)
{
    switch (to_errno(ec)) {
    case ENOSPC: return MPI_ERR_NO_SPACE;
    case EDQUOT: return MPI_ERR_QUOTA;
    case EACCES:
    case EPERM: return MPI_ERR_ACCESS;
    case ENOENT: return MPI_ERR_NO_SUCH_FILE;
    case EROFS: return MPI_ERR_READ_ONLY;
    default: return MPI_ERR_IO;
    }
}

void attach()
{
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    if (s.attached)
        return;
    s.cfg = read_config();
    PMPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
    // From here every rank takes part in the same collectives, whether it
    // has prefixes or not: ranks launched with different environments must
    // not leave the others waiting.
    const bool wanted = !s.cfg.prefixes.empty();
    // The ranks of this job on this node share one daemon; the job's nodes
    // are counted here, as io_init_comm does, rather than taken from the
    // environment (IOFWD_NODES, Slurm's), which a launcher may not set.
    MPI_Comm node = MPI_COMM_NULL;
    int rank = 0, ranks = 1, nodes = 0;
    if (PMPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        PMPI_Comm_rank(node, &rank);
        PMPI_Comm_size(node, &ranks);
        PMPI_Comm_free(&node);
        int leader = rank == 0 ? 1 : 0;
        if (PMPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            nodes = 0;
    }
    std::error_code ec;
    if (wanted) {
        const bool blocking = env_or("IOFWD_SHIM_POLL", "0") == "0";
        iofwd::client::run_info run;
        run.nodes = static_cast<std::uint32_t>(std::max(nodes, 0));
        ec = s.conn.init_files(static_cast<std::uint32_t>(rank),
                               static_cast<std::uint32_t>(ranks), blocking, run);
    }
    // Every rank forwards or none does: what the shim adds to collective
    // calls (the barrier and agreement of MPI_File_open) must happen on all
    // of them. A rank without prefixes, or that cannot reach its daemon,
    // turns forwarding off for the job.
    const agreement all = agree(MPI_COMM_WORLD, wanted, wanted && !ec);
    if (!wanted) {
        if (s.cfg.verbose && s.world_rank == 0)
            std::fprintf(stderr, "iofwd shim: IOFWD_SHIM_PREFIXES is empty; nothing is "
                                 "forwarded\n");
        return;
    }
    if (ec) {
        // Without a daemon the program still runs, through MPI-IO alone.
        warn_once("attach", fmt::format("cannot reach the iofwd daemon ({}): {}; every file "
                                        "goes through MPI-IO unforwarded, on every rank",
                                        ec.message(), s.conn.why()));
        return;
    }
    if (!all.second) {
        s.conn.detach();
        warn_once("attach", !all.reached
                                ? "the ranks could not agree to forward (MPI_Allreduce failed); "
                                  "every file goes through MPI-IO unforwarded, on every rank"
                            : all.first
                                ? "another rank could not reach its iofwd daemon; every file "
                                  "goes through MPI-IO unforwarded, on every rank"
                                : "IOFWD_SHIM_PREFIXES is empty on another rank (its "
                                  "environment differs from this one's); every file goes "
                                  "through MPI-IO unforwarded, on every rank");
        return;
    }
    s.attached = true;
    if (s.cfg.verbose)
        std::fprintf(stderr, "iofwd shim (rank %d): attached to iod pid %u on %s as node rank "
                             "%d/%d\n",
                     s.world_rank, s.conn.daemon_info().daemon_pid,
                     s.conn.daemon_info().node.c_str(), rank, ranks);
}

int detach()
{
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    if (!s.attached)
        return MPI_SUCCESS;
    s.attached = false;
    // Returns once everything this rank forwarded is durable.
    if (auto ec = s.conn.finalize()) {
        std::fprintf(stderr, "iofwd shim (rank %d): MPI_Finalize: not everything written "
                             "through the daemon is durable: %s (%s)\n",
                     s.world_rank, s.conn.why().c_str(), ec.message().c_str());
        return mpi_error_class(ec);
    }
    if (s.cfg.verbose) {
        const auto& c = s.stats;
        std::fprintf(stderr,
                     "iofwd shim (rank %d): %llu files, %llu writes (%llu bytes) forwarded "
                     "(%llu through file views, %llu from non-contiguous memory), "
                     "%.3f s blocked in them; %llu calls on matching files went to MPI-IO\n",
                     s.world_rank, static_cast<unsigned long long>(c.files),
                     static_cast<unsigned long long>(c.writes),
                     static_cast<unsigned long long>(c.bytes),
                     static_cast<unsigned long long>(c.through_views),
                     static_cast<unsigned long long>(c.packed), c.write_seconds,
                     static_cast<unsigned long long>(c.passed));
    }
    return MPI_SUCCESS;
}

}  // namespace iofwd::shim

using namespace iofwd::shim;

extern "C" {

int MPI_Init(int* argc, char*** argv)
{
    const int rc = IOFWD_NEXT(MPI_Init)(argc, argv);
    if (rc == MPI_SUCCESS)
        attach();
    return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided)
{
    const int rc = IOFWD_NEXT(MPI_Init_thread)(argc, argv, required, provided);
    if (rc == MPI_SUCCESS)
        attach();
    return rc;
}

int MPI_Finalize(void)
{
    // Durable first: MPI_Finalize may be the last thing the process does.
    const int shim_rc = detach();
    const int rc = IOFWD_NEXT(MPI_Finalize)();
    return rc != MPI_SUCCESS ? rc : shim_rc;
}

// `use mpi_f08`: MPICH's bindings call PMPI_Init/PMPI_Finalize directly.
// The optional ierror arrives as a NULL pointer when absent.
void mpi_init_f08_(int* ierror);
void mpi_init_thread_f08_(int* required, int* provided, int* ierror);
void mpi_finalize_f08_(int* ierror);

void mpi_init_f08_(int* ierror)
{
    static void (*next)(int*) = nullptr;
    resolve_next(next, "mpi_init_f08_")(ierror);
    int initialized = 0;
    PMPI_Initialized(&initialized);
    if (initialized)
        attach();
}

void mpi_init_thread_f08_(int* required, int* provided, int* ierror)
{
    static void (*next)(int*, int*, int*) = nullptr;
    resolve_next(next, "mpi_init_thread_f08_")(required, provided, ierror);
    int initialized = 0;
    PMPI_Initialized(&initialized);
    if (initialized)
        attach();
}

void mpi_finalize_f08_(int* ierror)
{
    const int shim_rc = detach();
    static void (*next)(int*) = nullptr;
    resolve_next(next, "mpi_finalize_f08_")(ierror);
    if (ierror && *ierror == MPI_SUCCESS)
        *ierror = shim_rc;
}

}  // extern "C"

// The checkpoint example: every rank fills its buffer with a pattern that
// depends on its rank and the version, hands it to iofwd with io_write, and
// "computes" (refills) while the daemon flushes. Rank 0 prints a summary.
//
//   mpiexec -n 4 ./checkpoint [--size 64M] [--versions 3] [--store DIR] [--poll]
//                             [--restart] [--sim-nodes K] [--plain-init] [--stagger S]
//   then: ./verify --store DIR --job checkpoint
//
// --restart first finds the newest version complete for the whole job
// (io_latest), reads this rank's part back (io_read, checksum-verified),
// checks every byte against the pattern, then continues with new versions.
// --sim-nodes K splits the ranks into K simulated nodes, each with its own
// daemon, to show the job-wide commit on one machine. --plain-init uses io_init
// (node-local rank and size from MPI, the nodes and the run's name from
// IOFWD_NODES and IOFWD_RUN) instead of io_init_comm; --stagger S makes the
// ranks of the last node wait S seconds before they initialise, as a node
// that starts late would.
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io_mpi.h"
#include "pattern.hpp"

namespace {

struct args {
    std::uint64_t size = 64ull << 20;
    unsigned versions = 3;
    bool blocking = true;
    bool restart = false;
    int sim_nodes = 0;
    bool plain_init = false;
    double stagger = 0;
};

bool parse_size(const char* s, std::uint64_t& out)
{
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s)
        return false;
    switch (*end) {
    case 'K': case 'k': v <<= 10; ++end; break;
    case 'M': case 'm': v <<= 20; ++end; break;
    case 'G': case 'g': v <<= 30; ++end; break;
    default: break;
    }
    if (*end == 'i')
        ++end;
    if (*end == 'B')
        ++end;
    out = v;
    return *end == '\0' && v > 0;
}

void usage(int rank)
{
    if (rank == 0)
        std::fputs("usage: checkpoint [--size BYTES(K/M/G)] [--versions N] [--store DIR] [--poll]\n"
                   "                  [--restart] [--sim-nodes K] [--plain-init] [--stagger S]\n"
                   "  Writes N versions of a BYTES buffer per rank through iofwd.\n"
                   "  --restart: resume from the newest complete version, verified.\n"
                   "  --sim-nodes K: K simulated nodes, each with its own daemon.\n"
                   "  --plain-init: io_init (IOFWD_NODES, IOFWD_RUN) instead of io_init_comm.\n"
                   "  --stagger S: the last node's ranks start S seconds late.\n"
                   "  The job name in the store is IOFWD_JOB (default: checkpoint).\n",
                   stderr);
}

// The job ends on the first rank's error. hydra's mpiexec tears every
// process down as soon as MPI_Abort reaches it, and a line a rank wrote to
// stderr just before may still be on its way through the node's proxy: the
// one second lets the reason reach the user's terminal with the abort.
[[noreturn]] void abort_job()
{
    std::fflush(stderr);
    sleep(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::exit(1);
}

double now()
{
    return MPI_Wtime();
}

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string human(double bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g %s", bytes, units[u]);
    return buf;
}

}  // namespace

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);

    args a;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == "--size" && i + 1 < argc && parse_size(argv[i + 1], a.size)) {
            ++i;
        } else if (arg == "--versions" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
            a.versions = static_cast<unsigned>(std::atoi(argv[++i]));
        } else if (arg == "--store" && i + 1 < argc) {
            setenv("IOFWD_STORE", argv[++i], 1);
        } else if (arg == "--poll") {
            a.blocking = false;
        } else if (arg == "--restart") {
            a.restart = true;
        } else if (arg == "--sim-nodes" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
            a.sim_nodes = std::atoi(argv[++i]);
        } else if (arg == "--plain-init") {
            a.plain_init = true;
        } else if (arg == "--stagger" && i + 1 < argc && std::atof(argv[i + 1]) > 0) {
            a.stagger = std::atof(argv[++i]);
        } else {
            usage(world_rank);
            MPI_Finalize();
            return arg == "--help" ? 0 : 2;
        }
    }
    if (!std::getenv("IOFWD_JOB"))
        setenv("IOFWD_JOB", "checkpoint", 1);

    void* mem = nullptr;
    if (posix_memalign(&mem, 4096, a.size) != 0) {
        std::fprintf(stderr, "rank %d: cannot allocate %s\n", world_rank, human(a.size).c_str());
        abort_job();
    }
    auto* buffer = static_cast<std::byte*>(mem);

    // io_init_comm finds this rank's place on its node and the number of
    // nodes, and names the run so that every node's daemon numbers its
    // versions alike. --sim-nodes splits the ranks itself and tells iofwd
    // the same through io_init_run.
    double t_init = now();
    double split_s = 0;  // the simulated nodes' own MPI_Comm_split
    int rc = 0, nodes = 1, local_rank = 0, local_size = 1;
    if (a.sim_nodes > 0) {
        const int color = world_rank % a.sim_nodes;
        MPI_Comm node;
        MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &node);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_size(node, &local_size);
        MPI_Comm_free(&node);
        // On real nodes the node is the machine: what io_init is timed for
        // starts after the simulation's split (MPI's own collective, 0.2-0.3 s
        // with 16 ranks on 2 cores here).
        split_s = now() - t_init;
        t_init = now();
        char host[200] = "node";
        gethostname(host, sizeof host - 1);
        char name[256];
        std::snprintf(name, sizeof name, "%s-sim%d", host, color);
        setenv("IOFWD_NODE", name, 1);
        nodes = std::min(a.sim_nodes, world_size);
        char run[64] = "";
        if (world_rank == 0)
            io_new_run_name(run, sizeof run);
        MPI_Bcast(run, sizeof run, MPI_CHAR, 0, MPI_COMM_WORLD);
        rc = io_init_run(buffer, a.size, static_cast<std::uint32_t>(local_rank),
                         static_cast<std::uint32_t>(local_size), static_cast<std::uint32_t>(nodes),
                         run, nullptr, a.blocking ? 1 : 0);
    } else {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local_rank);
        MPI_Comm_size(node, &local_size);
        // The node holding the last world rank starts late (--stagger).
        int node_last = world_rank, last = world_rank;
        MPI_Allreduce(MPI_IN_PLACE, &node_last, 1, MPI_INT, MPI_MAX, node);
        MPI_Comm_free(&node);
        MPI_Allreduce(MPI_IN_PLACE, &last, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        int leader = local_rank == 0 ? 1 : 0;
        MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (a.stagger > 0 && node_last == last)
            usleep(static_cast<useconds_t>(a.stagger * 1e6));
        if (a.plain_init)
            rc = io_init(buffer, a.size, static_cast<std::uint32_t>(local_rank),
                         static_cast<std::uint32_t>(local_size), nullptr, a.blocking ? 1 : 0);
        else
            rc = io_init_comm(MPI_COMM_WORLD, buffer, a.size, nullptr, a.blocking ? 1 : 0);
    }
    // io_init_comm returns once every rank's daemon has taken the job; with
    // io_init or io_init_run the program waits for that itself before a
    // restart asks for the newest complete version: a node's daemon
    // completes what its journal held of the run before when its first rank
    // connects, and every rank must find the same version.
    if (a.restart && (a.sim_nodes > 0 || a.plain_init))
        MPI_Barrier(MPI_COMM_WORLD);
    if (rc != 0) {
        std::fprintf(stderr, "rank %d: io_init failed: %s\n  %s\n", world_rank, io_strerror(rc),
                     io_last_error());
        abort_job();
    }
    const double init_s = now() - t_init;
    const std::string node_name = io_node_name();
    // Which daemon serves this rank: its binary, while it surely runs.
    const int daemon_pid = io_daemon_pid();
    std::string daemon_exe = "?";
    {
        char link[64], target[4096];
        std::snprintf(link, sizeof link, "/proc/%d/exe", daemon_pid);
        const ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0)
            daemon_exe.assign(target, static_cast<std::size_t>(n));
    }

    std::uint64_t restarted_from = 0;
    if (a.restart) {
        std::uint64_t latest = 0;
        rc = io_latest_verified(&latest);
        if (rc != 0) {
            std::fprintf(stderr, "rank %d: nothing to restart from: %s\n  %s\n", world_rank,
                         io_strerror(rc), io_last_error());
            abort_job();
        }
        std::uint64_t got = 0;
        rc = io_read(latest, buffer, a.size, &got);
        if (rc != 0 || got != a.size) {
            std::fprintf(stderr, "rank %d: io_read of version %llu failed: %s\n  %s\n",
                         world_rank, static_cast<unsigned long long>(latest), io_strerror(rc),
                         io_last_error());
            abort_job();
        }
        std::vector<std::byte> expect(a.size);
        example::fill_pattern(expect.data(), a.size,
                              example::pattern_seed(node_name, local_rank, latest));
        if (std::memcmp(expect.data(), buffer, a.size) != 0) {
            std::fprintf(stderr, "rank %d: version %llu read back differs from what was written\n",
                         world_rank, static_cast<unsigned long long>(latest));
            abort_job();
        }
        restarted_from = latest;
        // Every rank resumes from one version, or the job is not one state.
        unsigned long long mine = latest, lowest = 0, highest = 0;
        MPI_Allreduce(&mine, &lowest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        MPI_Allreduce(&mine, &highest, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        if (lowest != highest) {
            if (world_rank == 0)
                std::fprintf(stderr, "ranks restarted from different versions (v%llu to v%llu)\n",
                             lowest, highest);
            abort_job();
        }
    }

    std::vector<double> blocked;
    std::uint64_t first_version = 0, last_version = 0;
    double t_first = 0;
    for (unsigned k = 0; k < a.versions; ++k) {
        // The pattern depends on the version this write will create.
        std::uint64_t next = 0;
        io_next_version(&next);
        example::fill_pattern(buffer, a.size, example::pattern_seed(node_name, local_rank, next));
        const double t0 = now();
        if (k == 0)
            t_first = t0;
        std::uint64_t version = 0;
        rc = io_write_version(a.size, &version);
        const double t1 = now();
        if (rc != 0) {
            std::fprintf(stderr, "rank %d: io_write failed: %s\n  %s\n", world_rank,
                         io_strerror(rc), io_last_error());
            abort_job();
        }
        blocked.push_back(t1 - t0);
        if (!first_version)
            first_version = version;
        last_version = version;
    }
    const double t_fin = now();
    rc = io_finalize();
    const double t_end = now();
    if (rc != 0) {
        std::fprintf(stderr, "rank %d: io_finalize failed: %s\n  %s\n", world_rank,
                     io_strerror(rc), io_last_error());
        abort_job();
    }

    // Gather the figures on rank 0.
    const double my_median = median(blocked);
    const double my_max = *std::max_element(blocked.begin(), blocked.end());
    const double my_durable = t_end - t_first;
    const double my_fin = t_end - t_fin;
    double med_max = 0, max_max = 0, durable_max = 0, fin_max = 0, init_max = 0;
    MPI_Reduce(&my_median, &med_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&my_max, &max_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&my_durable, &durable_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&my_fin, &fin_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&init_s, &init_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    double split_max = 0;
    MPI_Reduce(&split_s, &split_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (world_rank == 0) {
        const double total = static_cast<double>(a.size) * a.versions * world_size;
        std::printf("iofwd checkpoint example\n");
        std::printf("  ranks              %d (%d on node %s), %s each, %s\n", world_size,
                    local_size, node_name.c_str(), human(static_cast<double>(a.size)).c_str(),
                    a.blocking ? "blocking waits" : "busy-polling");
        std::printf("  transport          %s\n", io_provider_name());
        std::printf("  data               %s in %u versions (v%llu..v%llu)\n",
                    human(total).c_str(), a.versions,
                    static_cast<unsigned long long>(first_version),
                    static_cast<unsigned long long>(last_version));
        if (a.sim_nodes > 0)
            std::printf("  io_init            %.3f s (daemon launch or attach; the simulated nodes' "
                        "MPI_Comm_split before it %.3f s)\n",
                        init_max, split_max);
        else
            std::printf("  io_init            %.3f s (daemon launch or attach)\n", init_max);
        std::printf("  blocked in write   median %.2f ms, max %.2f ms per call (%.2f GB/s per rank)\n",
                    med_max * 1e3, max_max * 1e3,
                    med_max > 0 ? static_cast<double>(a.size) / med_max / 1e9 : 0.0);
        std::printf("  until durable      %.3f s from the first write (io_finalize waited %.3f s)\n",
                    durable_max, fin_max);
        if (a.restart)
            std::printf("  restart            from v%llu, complete job-wide, every rank's bytes read back and verified\n",
                        static_cast<unsigned long long>(restarted_from));
        std::printf("  nodes              %d (each with its own daemon)\n", nodes);
        std::printf("  daemon             pid %d, %s (rank 0's)\n", daemon_pid,
                    daemon_exe.c_str());
        std::printf("  store              %s\n", io_store_location());
        std::fflush(stdout);
    }
    std::free(mem);
    MPI_Finalize();
    return 0;
}

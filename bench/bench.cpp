// iofwd benchmark: for each size, how long a rank is blocked in io_write, how
// long until the data is durable, what the daemon costs in CPU and memory,
// next to the alternatives and the hardware limits, all in one run:
//   limit   process_vm_readv of the same size between two ranks (what cma does),
//           into 4 KiB pages; lim 2M: the same into 2 MiB pages (both buffers
//           then on 2 MiB pages, as io_init sets up rank 0's and the daemon
//           its staging): the fastest one copy can be, which one rank's
//           io_write is to beat by reading its chunks on several cores
//   ucx     a plain UCX get of another rank's registered user memory
//   ucx rtt a plain UCX round trip: a message of the size (up to 64 KiB) to
//           another rank and a short answer back, both ranks polling
//   warm    io_write up to 64 KiB timed like ucx rtt: the mean of back-to-back
//           calls (the io_write column is one call after a barrier)
//   solo    with several writers, above 64 KiB: rank 0's io_write while the
//           others wait (they write the same version after it): one pull
//           with nothing beside it, the figure to hold against the limit
//   posix   every rank: write + fsync of its buffer into its own file
//   mpiio   MPI_File_write_at_all + MPI_File_sync into one shared file
// and, beside iofwd's time until durable, its flush alone: from the daemon's
// first write to the store to the last rank durable (io_flush_span).
// Medians over --reps repetitions; the per-repetition figure is the slowest
// rank's. Prints a table, then the daemon's CPU by thread, then each of the
// goals set for iofwd against this run's figures, writes a CSV, and plots
// bandwidth against size.
//
//   mpiexec -n 2 bench [--sizes 4K,1M,64M] [--reps 5] [--writers N] [--store DIR|rados:POOL]
//                      [--dir DIR] [--csv FILE] [--iofwd-only]
// --dir: where the POSIX and MPI-IO baselines write (default: the store when it
// is a directory, else bench-out).
// --writers N: only the first N ranks call io_write (the others still take
// part in the baselines); 0 means all.
// --iofwd-only: iofwd's own figures (io_write, warm, durable, flush) without solo,
// limit, ucx and the POSIX and MPI-IO baselines: for a remote store, where the
// figure to compare is the store's own (bench/ceph.sh compares it with `rados
// bench`), and the local disk's baselines would only add noise.
//
// About 720 lines, one program: every phase (iofwd, the baselines, the
// limits) runs in the same processes and repetitions so that their figures
// can be compared pair by pair.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "format.hpp"
#include "io.h"
#include "procfs.hpp"
#include "ucx.hpp"

namespace {

struct options {
    std::vector<std::uint64_t> sizes = {4096, 65536, 1u << 20, 16u << 20, 64u << 20, 256u << 20};
    int reps = 5;
    int writers = 0;  // ranks that io_write (0: all)
    std::string store = "bench-out/store";
    std::string dir;  // where the POSIX and MPI-IO baselines write (default: the store, if a directory)
    std::string csv = "bench-out/bench.csv";
    bool iofwd_only = false;
};

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    const auto n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Waits for a nonblocking collective without spinning: on a node with as
// many ranks as cores, a rank spinning in MPI would take the core the daemon
// needs, and the benchmark would measure MPICH's polling, not iofwd.
// `longest`: the pause between tests grows to it. The barriers before timed
// sections keep 50 us, so that ranks leave them together; collecting results
// waits up to 1 ms, since 64 ranks waking every 50 us on 2 cores spent the
// cores on the scheduler, away from the ranks still working.
void wait_politely(MPI_Request& r, useconds_t longest = 50)
{
    int done = 0;
    for (useconds_t pause = std::min<useconds_t>(20, longest);;
         pause = std::min(pause * 2, longest)) {
        MPI_Test(&r, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        usleep(pause);
    }
}

// Waits until the thread io_init leaves behind has put the buffer's whole
// 2 MiB pages on huge pages (IOFWD_HUGEPAGES=1, the default), so that the
// data path is timed as it runs from then on; gives up when nothing has
// changed for 5 s (a kernel that cannot collapse, pages it refuses).
// Returns the seconds it waited.
double wait_for_huge_pages(const void* buffer, std::uint64_t length)
{
    const char* mode = std::getenv("IOFWD_HUGEPAGES");
    if (mode && std::strcmp(mode, "1") != 0)
        return 0;  // 0: none wanted; init: made within io_init
    constexpr std::uint64_t huge = 2u << 20;
    const auto b = reinterpret_cast<std::uintptr_t>(buffer);
    const auto first = (b + huge - 1) & ~(huge - 1), last = (b + length) & ~(huge - 1);
    const std::uint64_t want = last > first ? last - first : 0;
    const double start = MPI_Wtime();
    double changed = start;
    const auto huge_now = [&] { return iofwd::huge_page_bytes(buffer, length).value_or(0); };
    for (std::uint64_t have = huge_now(), before = have; have < want; have = huge_now()) {
        if (have != before) {
            before = have;
            changed = MPI_Wtime();
        }
        if (MPI_Wtime() - changed > 5)
            break;
        usleep(10000);
    }
    return MPI_Wtime() - start;
}

void barrier()
{
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    wait_politely(r);
}

double reduce(double mine, MPI_Op op, MPI_Comm comm)
{
    double out = 0;
    MPI_Request r;
    MPI_Iallreduce(&mine, &out, 1, MPI_DOUBLE, op, comm, &r);
    wait_politely(r, 1000);
    return out;
}

double slowest(double mine)
{
    return reduce(mine, MPI_MAX, MPI_COMM_WORLD);
}

// The flush of a version: on each node, from the daemon's first write of any
// of the node's ranks to the last one durable (io_flush_span, one clock per
// node); the slowest node's. Non-writers pass no span.
double flush_span(bool writer, std::uint64_t version, MPI_Comm node)
{
    double start = 1e300, durable = -1e300;
    if (writer && io_flush_span(version, &start, &durable)) {
        std::fprintf(stderr, "bench: io_flush_span: %s\n", io_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    start = reduce(start, MPI_MIN, node);
    durable = reduce(durable, MPI_MAX, node);
    return slowest(durable > start ? durable - start : 0);
}

// Sizes up to `small_max` are timed as the mean of `small_iters` back-to-back
// operations after `small_warm` unmeasured ones: one is a few microseconds,
// below what a single timing shows reliably.
constexpr std::uint64_t small_max = 64u << 10;
constexpr int small_warm = 20, small_iters = 200;
// Back-to-back io_writes are versions the store keeps: fewer of them.
constexpr int small_burst = 40;

// A plain UCX get of rank 0's registered buffer by rank 1, rank 0 progressing
// its worker meanwhile (UCX 1.13 emulates the get over active messages).
struct ucx_pair {
    iofwd::ucx::context ctx;
    iofwd::ucx::worker worker;
    iofwd::ucx::memory mem;
    ucp_ep_h ep = nullptr;
    iofwd::ucx::rkey rkey;
    std::uint64_t remote = 0;
    bool ok = false;
    // Round trip: rank 0's handler notes each message and the endpoint to
    // answer on; rank 1 counts the answers.
    static constexpr unsigned am_ping = 7, am_pong = 8;
    unsigned arrived = 0;
    ucp_ep_h reply_ep = nullptr;

    static ucs_status_t on_am(void* arg, const void*, size_t, void*, size_t,
                              const ucp_am_recv_param_t* param)
    {
        auto* self = static_cast<ucx_pair*>(arg);
        ++self->arrived;
        if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
            self->reply_ep = param->reply_ep;
        return UCS_OK;  // eager data only: nothing is kept
    }

    bool handle(unsigned id)
    {
        ucp_am_handler_param_t h{};
        h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG;
        h.id = id;
        h.cb = &ucx_pair::on_am;
        h.arg = this;
        return ucp_worker_set_am_recv_handler(worker.get(), &h) == UCS_OK;
    }

    void send_and_wait(ucp_ep_h to, unsigned id, const void* data, std::size_t len, bool reply)
    {
        ucp_request_param_t param{};
        if (reply) {
            param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
            param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
        }
        wait(ucp_am_send_nbx(to, id, nullptr, 0, data, len, &param));
    }

    // Progresses until a posted operation is done. A failed baseline
    // transfer ends the run: its peer would otherwise wait for a message
    // that never comes.
    void wait(ucs_status_ptr_t req)
    {
        ucs_status_t st = UCS_PTR_STATUS(req);
        if (UCS_PTR_IS_PTR(req)) {
            while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS)
                worker.progress();
            ucp_request_free(req);
        }
        if (st != UCS_OK) {
            std::fprintf(stderr, "bench: UCX baseline transfer failed: %s\n",
                         ucs_status_string(st));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }

    void setup(int rank, std::byte* buf, std::uint64_t len)
    {
        using namespace iofwd;
        ok = !ucx::context::create(UCP_FEATURE_RMA | UCP_FEATURE_AM, "bench", ctx) &&
             !ucx::worker::create(ctx, worker) && !ucx::memory::map(ctx, buf, len, mem) &&
             handle(am_ping) && handle(am_pong);
        std::vector<std::byte> addr, key;
        if (ok && rank == 0)
            ok = !worker.address(addr) && !mem.pack_rkey(key);
        int all_ok = 0, mine = ok ? 1 : 0;
        MPI_Allreduce(&mine, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        ok = all_ok != 0;
        if (!ok)
            return;
        std::uint64_t sizes[3] = {addr.size(), key.size(), reinterpret_cast<std::uint64_t>(buf)};
        MPI_Bcast(sizes, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        addr.resize(sizes[0]);
        key.resize(sizes[1]);
        remote = sizes[2];
        MPI_Bcast(addr.data(), static_cast<int>(addr.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Bcast(key.data(), static_cast<int>(key.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 1) {
            ucp_ep_params_t p{};
            p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
            p.address = reinterpret_cast<const ucp_address_t*>(addr.data());
            ok = ucp_ep_create(worker.get(), &p, &ep) == UCS_OK &&
                 !ucx::rkey::unpack(ep, key, rkey);
        }
    }

    // Rank 1: time to get `len` bytes; rank 0: progress until rank 1 is done.
    // Small sizes: the mean of `small_iters` gets.
    double get(int rank, std::byte* local, std::uint64_t len)
    {
        double t = 0;
        if (rank == 1) {
            ucp_request_param_t param{};
            param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMH;
            param.memh = mem.get();
            const int warm = len <= small_max ? small_warm : 0;
            const int iters = len <= small_max ? small_iters : 1;
            double t0 = MPI_Wtime();
            for (int i = 0; i < warm + iters; ++i) {
                if (i == warm)
                    t0 = MPI_Wtime();
                wait(ucp_get_nbx(ep, local, len, remote, rkey.get(), &param));
            }
            t = (MPI_Wtime() - t0) / iters;
            int done = 1;
            MPI_Send(&done, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
        } else if (rank == 0) {
            int done = 0, flag = 0;
            MPI_Request r;
            MPI_Irecv(&done, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &r);
            while (!flag) {
                worker.progress();
                MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
            }
        }
        return t;
    }

    // Rank 1: the mean round trip of a `len`-byte message (up to small_max)
    // to rank 0 and an 8-byte answer; rank 0 answers each at once.
    double rtt(int rank, const std::byte* data, std::uint64_t len)
    {
        constexpr int warm = small_warm, iters = small_iters;
        double t = 0;
        const std::uint64_t answer = 1;
        if (rank == 1) {
            arrived = 0;
            double t0 = MPI_Wtime();
            for (int i = 0; i < warm + iters; ++i) {
                if (i == warm)
                    t0 = MPI_Wtime();
                send_and_wait(ep, am_ping, data, len, true);
                while (arrived <= static_cast<unsigned>(i))
                    worker.progress();
            }
            t = (MPI_Wtime() - t0) / iters;
        } else if (rank == 0) {
            arrived = 0;
            for (unsigned i = 0; i < warm + iters; ++i) {
                while (arrived <= i)
                    worker.progress();
                send_and_wait(reply_ep, am_pong, &answer, sizeof answer, false);
            }
        }
        return t;
    }
};

void write_or_abort(std::uint64_t size, std::uint64_t& version)
{
    if (io_write_version(size, &version)) {
        std::fprintf(stderr, "bench: io_write: %s\n", io_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void wait_or_abort(std::uint64_t version)
{
    if (io_wait(version)) {
        std::fprintf(stderr, "bench: io_wait: %s\n", io_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

std::vector<std::uint64_t> parse_sizes(const std::string& list)
{
    std::vector<std::uint64_t> out;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
        std::uint64_t v = 0;
        if (!iofwd::parse_bytes(item, v) || v == 0)
            return {};
        out.push_back(v);
    }
    return out;
}

struct row {
    std::uint64_t size = 0;
    double write_s = 0, durable_s = 0, limit_s = 0, ucx_s = 0, posix_s = 0, mpiio_s = 0;
    // The daemon's flush: from its first write to the store to the last rank
    // durable (the span `rados bench` times: its data is in memory already).
    double flush_s = 0;
    double rtt_s = 0;  // 0: not measured (above 64 KiB)
    double warm_s = 0;  // io_write back to back; 0: not measured (above 64 KiB)
    double solo_s = 0;  // rank 0's io_write alone; 0: not measured
    // Median over repetitions of one rank's io_write bandwidth (solo where
    // measured) over the limit's in the same repetition: paired, so a slow
    // phase of a shared machine that hits both cancels out. 0: no limit
    // measured (one rank).
    double pull_vs_limit = 0;
    double limit2m_s = 0;        // the limit into 2 MiB pages
    double pull_vs_limit2m = 0;  // as pull_vs_limit, against it
    double daemon_cpu_s = 0, daemon_cpu_per_gib = 0;
    std::uint64_t daemon_rss = 0;
    std::uint64_t parts = 0;  // one rank's version each
    // The daemon's CPU seconds by thread name over the size's repetitions,
    // and the rest of its figure (threads that ended meanwhile).
    std::map<std::string, double> daemon_thread_cpu_s;
    double daemon_rest_cpu_s = 0;
    std::string daemon_ended;  // the names gone since the size began
};

// The kernel counts CPU time in 10 ms ticks: the daemon's CPU over a size is
// shown from five of them on (a few ticks over a few KiB would print as
// hundreds of seconds per GiB).
constexpr double cpu_shown_s = 0.05;

// Where the daemon's CPU went, by thread, per part (one rank's version):
// which thread to look at when the cpu column moves. Only the sizes whose
// cpu column is printed.
void print_thread_cpu(const std::vector<row>& rows)
{
    bool header = false;
    for (const auto& r : rows) {
        if (r.daemon_cpu_s < cpu_shown_s || r.parts == 0)
            continue;
        if (!header)
            fmt::print("daemon CPU by thread, per part (one rank's version; threads of one name "
                       "summed;\n rest: the process's figure less its threads', the threads that "
                       "ended during the size and a tick or two between the readings):\n");
        header = true;
        std::vector<std::pair<double, std::string>> by;
        for (const auto& [name, s] : r.daemon_thread_cpu_s)
            if (s > 0)
                by.emplace_back(s, name);
        if (r.daemon_rest_cpu_s > 0)
            by.emplace_back(r.daemon_rest_cpu_s,
                            r.daemon_ended.empty() ? "rest" : "rest (ended: " + r.daemon_ended + ")");
        std::sort(by.rbegin(), by.rend());
        const auto per_part = [&](double s) { return s / static_cast<double>(r.parts); };
        std::string line;
        for (const auto& [s, name] : by)
            if (per_part(s) >= 0.5e-6)  // what prints as 0 us
                line += fmt::format("{}{} {}", line.empty() ? "" : ", ", name,
                                    iofwd::human_seconds(per_part(s)));
        fmt::print("{:>9}: {} parts, all {}: {}\n", iofwd::human_bytes(r.size), r.parts,
                   iofwd::human_seconds(per_part(r.daemon_cpu_s)), line);
    }
}

// The goals set for iofwd's data path, each against this run's figures: a
// line per goal saying met or missed, and by how much.
void print_goals(const std::vector<row>& rows, int ranks, int writers)
{
    auto verdict = [](bool ok) { return ok ? "met" : "MISSED"; };
    auto size_name = [](std::uint64_t s) { return iofwd::human_bytes(s); };
    fmt::print("goals, from this run:\n");

    // One rank's pull against a limit measured beside it, 64 MiB and up.
    auto pull_goal = [&](double row::*ratio, double at_least, const char* goal, bool percent) {
        std::string figures;
        bool ok = true, any = false;
        for (const auto& r : rows)
            if (r.size >= (64u << 20) && r.*ratio > 0) {
                any = true;
                ok = ok && r.*ratio >= at_least;
                figures += percent ? fmt::format(" {} {:.0f}%", size_name(r.size), r.*ratio * 100)
                                   : fmt::format(" {} {:.2f}x", size_name(r.size), r.*ratio);
            }
        if (any)
            fmt::print("  io_write >= {}, 64 MiB and up, one rank:{}  {}\n", goal, figures,
                       verdict(ok));
        else
            fmt::print("  io_write >= {}: not measured (needs 2 ranks and a size >= 64 MiB)\n", goal);
    };
    pull_goal(&row::pull_vs_limit, 0.85, "85% of the limit", true);
    pull_goal(&row::pull_vs_limit2m, 1.2, "1.2x one copy on 2 MiB pages", false);

    for (const auto& r : rows)
        if (r.size == 4096 && r.warm_s > 0 && r.rtt_s > 0)
            fmt::print("  4 KiB io_write <= 2x a UCX round trip: {:.1f} us against {:.1f} us = {:.1f}x  {}\n",
                       r.warm_s * 1e6, r.rtt_s * 1e6, r.warm_s / r.rtt_s,
                       verdict(r.warm_s <= 2 * r.rtt_s));

    // The same bytes only when every rank writes through iofwd; otherwise
    // bandwidths are compared.
    std::string durable;
    bool durable_ok = true;
    for (const auto& r : rows) {
        if (r.durable_s <= 0 || r.posix_s <= 0)
            continue;
        const double io_bw = static_cast<double>(r.size) * writers / r.durable_s;
        const double posix_bw = static_cast<double>(r.size) * ranks / r.posix_s;
        const double x = posix_bw / io_bw;
        durable_ok = durable_ok && x <= 1.1;
        durable += fmt::format(" {} {:.2f}x", size_name(r.size), x);
    }
    if (durable.empty())
        fmt::print("  time until durable <= 1.1x POSIX: not measured (no POSIX baseline)\n");
    else
        fmt::print("  time until durable <= 1.1x POSIX write+fsync:{}  {}\n", durable,
                   verdict(durable_ok));

    bool blocked_any = false;
    for (const auto& r : rows)
        if (r.size == (256u << 20) && ranks >= 2 && writers >= 2 && r.write_s > 0 &&
            r.posix_s > 0 && r.mpiio_s > 0) {
            blocked_any = true;
            const double px = r.posix_s / r.write_s, mi = r.mpiio_s / r.write_s;
            fmt::print("  blocked in io_write >= 5x shorter than both baselines, 256 MiB x {} ranks:"
                       " POSIX {:.1f}x, MPI-IO {:.1f}x  {}\n",
                       writers, px, mi, verdict(px >= 5 && mi >= 5));
        }
    if (!blocked_any)
        fmt::print("  blocked 5x shorter at 256 MiB: not measured (needs 256M in --sizes, 2 writers"
                   " and the baselines)\n");
}

}  // namespace

int main(int argc, char** argv)
{
    // The UCX baseline reads in pieces of the daemon's default chunk (16 MiB),
    // as the daemon does, not UCX's default 512 KiB. Before MPI_Init: UCX
    // reads its settings once per process.
    ::setenv("UCX_CMA_SEG_SIZE", "16M", 0);
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const bool has = i + 1 < argc;
        if (a == "--sizes" && has) o.sizes = parse_sizes(argv[++i]);
        else if (a == "--reps" && has) o.reps = std::max(1, std::atoi(argv[++i]));
        else if (a == "--store" && has) o.store = argv[++i];
        else if (a == "--writers" && has) o.writers = std::max(0, std::atoi(argv[++i]));
        else if (a == "--dir" && has) o.dir = argv[++i];
        else if (a == "--csv" && has) o.csv = argv[++i];
        else if (a == "--iofwd-only") o.iofwd_only = true;
        else {
            if (rank == 0)
                std::fputs("usage: mpiexec -n R bench [--sizes 4K,1M,64M] [--reps N] [--writers N]"
                           " [--store DIR|rados:POOL] [--dir DIR] [--csv FILE] [--iofwd-only]\n", stderr);
            MPI_Finalize();
            return a == "--help" ? 0 : 2;
        }
    }
    if (o.sizes.empty()) {
        if (rank == 0)
            std::fputs("bench: --sizes wants a list like 4K,1M,64M\n", stderr);
        MPI_Finalize();
        return 2;
    }
    if (!std::getenv("IOFWD_JOB"))
        setenv("IOFWD_JOB", "bench", 1);
    if (o.dir.empty())
        o.dir = o.store.find(':') == std::string::npos ? o.store : "bench-out";
    ::mkdir(o.dir.c_str(), 0755);
    setenv("IOFWD_STORE", o.store.c_str(), 1);
    // Every repetition is a version: a few runs of 64 ranks at 16 MiB left
    // 73 GB in bench-out/store and a full disk. The newest two are kept,
    // as bench/run.sh always asked, unless the caller says otherwise.
    setenv("IOFWD_KEEP", "2", 0);
    const std::uint64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
    std::byte* buf = nullptr;
    std::byte* peer = nullptr;
    std::byte* peer2m = nullptr;  // rank 1's, on 2 MiB pages: lim 2M copies into it
    constexpr std::size_t huge = 2u << 20;
    if (posix_memalign(reinterpret_cast<void**>(&buf), 4096, max_size) ||
        posix_memalign(reinterpret_cast<void**>(&peer), 4096, max_size) ||
        (rank == 1 && posix_memalign(reinterpret_cast<void**>(&peer2m), huge, max_size))) {
        std::fprintf(stderr, "bench: cannot allocate 3 x %s\n", iofwd::human_bytes(max_size).c_str());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::memset(buf, rank + 1, max_size);  // touch every page before timing
    std::memset(peer, 0, max_size);
    if (peer2m) {
        ::madvise(peer2m, max_size, MADV_HUGEPAGE);
        std::memset(peer2m, 0, max_size);
    }

    // The baselines' UCX pair exists before iofwd's (the daemon is spawned by
    // io_init; nothing here forks).
    ucx_pair pair;
    if (ranks >= 2 && !o.iofwd_only)
        pair.setup(rank, rank == 0 ? buf : peer, max_size);

    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int local = 0, local_n = 1;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_n);
    // All ranks start io_init together; the slowest one's time is what a
    // job waits for (one rank launches the daemon, the others attach).
    barrier();
    const auto cpu_seconds = [] {
        rusage u{};
        ::getrusage(RUSAGE_THREAD, &u);  // io_init's own work is on the calling thread
        return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
    };
    const double init_cpu = cpu_seconds();
    const double init_start = MPI_Wtime();
    int rc = io_init(buf, max_size, static_cast<std::uint32_t>(local),
                     static_cast<std::uint32_t>(local_n), nullptr, 1);
    if (rc) {
        std::fprintf(stderr, "bench: io_init: %s\n", io_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // Without spinning: with more ranks than cores, ranks done with io_init
    // and polling in MPICH's reduce took the cores from the ones still in it
    // and from the daemon answering them (a node has a core per rank).
    const double init_s = MPI_Wtime() - init_start;
    // The ranks' own CPU in io_init (their threads, not the daemon's): with
    // more ranks than cores, its sum over the cores bounds the slowest.
    const double init_cpu_s = cpu_seconds() - init_cpu;
    const double init_max = slowest(init_s);
    const double init_cpu_sum = reduce(init_cpu_s, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        std::printf("io_init: %d ranks (%d on this node), the slowest took %.0f ms; the ranks' "
                    "CPU in it %.0f ms each on average, %.2f s in all over %ld cores\n",
                    ranks, local_n, init_max * 1e3, init_cpu_sum / ranks * 1e3, init_cpu_sum,
                    ::sysconf(_SC_NPROCESSORS_ONLN));
    // The buffer's 2 MiB pages: made by default on a thread after io_init
    // (timed above as a program gets it); the data path is timed once that
    // is done, as in a program that computes before its first checkpoint.
    const double huge_wait = slowest(wait_for_huge_pages(buf, max_size));
    if (rank == 0 && huge_wait > 0)
        std::printf("the buffers on 2 MiB pages %.0f ms after io_init (its thread)\n",
                    huge_wait * 1e3);
    // And the daemon's staging, faulted in on a thread of its own after it
    // starts (2 GiB take seconds here), which takes a core meanwhile: the
    // first size's figures would otherwise be timed beside it.
    const int daemon = io_daemon_pid();
    const double fault_wait = slowest([&] {
        const double start = MPI_Wtime();
        while (daemon > 0 && iofwd::has_thread_named(daemon, iofwd::staging_fault_in_thread) &&
               MPI_Wtime() - start < 60)
            usleep(10'000);
        return MPI_Wtime() - start;
    }());
    if (rank == 0 && fault_wait >= 0.01)
        std::printf("the daemon's staging faulted in %.0f ms later\n", fault_wait * 1e3);
    barrier();
    pid_t pid0 = getpid();
    std::uint64_t addr0 = reinterpret_cast<std::uint64_t>(buf);
    MPI_Bcast(&pid0, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(&addr0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

    const int writers = o.writers > 0 ? std::min(o.writers, ranks) : ranks;
    const bool writer = rank < writers;
    std::vector<row> rows;
    for (const auto size : o.sizes) {
        row r;
        r.size = size;
        std::vector<double> w, d, fl, lim, lim2m, ux, rt, px, mi, wm, so;
        // With several writers, sizes above the small ones also get a solo
        // write per repetition (one more version).
        const bool solo = writers > 1 && size > small_max && !o.iofwd_only;
        const double cpu0 = rank == 0 ? iofwd::process_cpu_seconds(daemon) : 0;
        const auto threads0 =
            rank == 0 ? iofwd::thread_cpu_seconds(daemon) : std::map<std::string, double>{};
        for (int k = 0; k < o.reps; ++k) {
            // iofwd: blocked in io_write, then until durable.
            barrier();
            const double t0 = MPI_Wtime();
            double t1 = t0, t2 = t0;
            std::uint64_t version = 0;
            if (writer) {
                write_or_abort(size, version);
                t1 = MPI_Wtime();
                wait_or_abort(version);
                t2 = MPI_Wtime();
            }
            w.push_back(slowest(t1 - t0));
            d.push_back(slowest(t2 - t0));
            fl.push_back(flush_span(writer, version, node));

            // warm: small writes back to back, each a version, as ucx rtt is
            // timed; then wait until all of them are durable, and with every
            // rank writing until the last is complete (its manifest and
            // COMPLETE written), so that the next figures start from an idle
            // daemon.
            if (size <= small_max) {
                barrier();
                double t = 0;
                std::uint64_t first = 0, v = 0;
                if (writer) {
                    double s0 = MPI_Wtime();
                    for (int i = 0; i < small_warm + small_burst; ++i) {
                        if (i == small_warm)
                            s0 = MPI_Wtime();
                        write_or_abort(size, v);
                        if (i == 0)
                            first = v;
                    }
                    t = (MPI_Wtime() - s0) / small_burst;
                    for (std::uint64_t k = first; k <= v; ++k)
                        wait_or_abort(k);
                }
                if (writers == ranks && rank == 0) {
                    std::uint64_t latest = 0;
                    const double give_up = MPI_Wtime() + 60;
                    while ((io_latest(&latest) != 0 || latest < v) && MPI_Wtime() < give_up)
                        usleep(1000);
                    if (latest < v) {
                        std::fprintf(stderr, "bench: version %llu not complete after 60 s\n",
                                     static_cast<unsigned long long>(v));
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                }
                wm.push_back(slowest(t));
            }

            // solo: rank 0 writes alone; the other writers write the same
            // version once its io_write has returned, so that versions stay
            // aligned across ranks.
            if (solo) {
                barrier();
                double t = 0;
                std::uint64_t v = 0;
                if (rank == 0) {
                    const double s0 = MPI_Wtime();
                    write_or_abort(size, v);
                    t = MPI_Wtime() - s0;
                }
                barrier();
                if (writer && rank != 0)
                    write_or_abort(size, v);
                if (writer)
                    wait_or_abort(v);
                so.push_back(slowest(t));
            }

            if (o.iofwd_only)
                continue;

            // limit, lim 2M: rank 1 copies rank 0's buffer with
            // process_vm_readv, into 4 KiB pages, then into 2 MiB pages.
            if (ranks >= 2) {
                auto copy = [&](std::byte* into) {
                    barrier();
                    double t = 0;
                    if (rank == 1) {
                        const double s0 = MPI_Wtime();
                        for (std::uint64_t off = 0; off < size;) {
                            iovec l{into + off, static_cast<std::size_t>(size - off)};
                            iovec rv{reinterpret_cast<void*>(addr0 + off), l.iov_len};
                            const ssize_t n = process_vm_readv(pid0, &l, 1, &rv, 1, 0);
                            if (n <= 0)
                                break;
                            off += static_cast<std::uint64_t>(n);
                        }
                        t = MPI_Wtime() - s0;
                    }
                    return slowest(t);
                };
                lim.push_back(copy(peer));
                lim2m.push_back(copy(peer2m));
                barrier();
                if (pair.ok)
                    ux.push_back(slowest(pair.get(rank, peer, size)));
                if (pair.ok && size <= small_max) {
                    barrier();
                    rt.push_back(slowest(pair.rtt(rank, buf, size)));
                }
            }

            // posix: write + fsync, one file per rank.
            barrier();
            {
                const std::string path = fmt::format("{}/posix.{}", o.dir, rank);
                const double s0 = MPI_Wtime();
                const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                std::uint64_t off = 0;
                while (fd >= 0 && off < size) {
                    const ssize_t n = ::write(fd, buf + off, static_cast<std::size_t>(size - off));
                    if (n <= 0)
                        break;
                    off += static_cast<std::uint64_t>(n);
                }
                if (fd >= 0) {
                    ::fsync(fd);
                    ::close(fd);
                }
                px.push_back(slowest(MPI_Wtime() - s0));
                ::unlink(path.c_str());
            }

            // mpiio: one shared file, collective write, sync.
            barrier();
            {
                const std::string path = o.dir + "/mpiio.shared";
                const double s0 = MPI_Wtime();
                MPI_File fh;
                MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_CREATE | MPI_MODE_WRONLY,
                              MPI_INFO_NULL, &fh);
                for (std::uint64_t off = 0; off < size;) {
                    const int n = static_cast<int>(std::min<std::uint64_t>(size - off, 1u << 30));
                    MPI_File_write_at_all(fh, static_cast<MPI_Offset>(rank * size + off),
                                          buf + off, n, MPI_BYTE, MPI_STATUS_IGNORE);
                    off += static_cast<std::uint64_t>(n);
                }
                MPI_File_sync(fh);
                MPI_File_close(&fh);
                mi.push_back(slowest(MPI_Wtime() - s0));
                barrier();
                if (rank == 0)
                    ::unlink(path.c_str());
            }
        }
        // One rank's pull: solo when several write, else the io_write itself.
        const std::vector<double>& one = so.empty() ? w : so;
        auto paired = [&](const std::vector<double>& limit) {
            std::vector<double> ratios;
            for (std::size_t k = 0; k < limit.size() && k < one.size(); ++k)
                if (one[k] > 0)
                    ratios.push_back(limit[k] / one[k]);
            return median(ratios);
        };
        r.solo_s = median(so);
        r.pull_vs_limit = paired(lim);
        r.pull_vs_limit2m = paired(lim2m);
        r.limit2m_s = median(lim2m);
        r.write_s = median(w);
        r.durable_s = median(d);
        r.flush_s = median(fl);
        r.limit_s = median(lim);
        r.ucx_s = median(ux);
        r.rtt_s = median(rt);
        r.warm_s = median(wm);
        r.posix_s = median(px);
        r.mpiio_s = median(mi);
        if (rank == 0) {
            const int per_rep =
                1 + (size <= small_max ? small_warm + small_burst : 0) + (solo ? 1 : 0);
            const double gib =
                static_cast<double>(size) * writers * o.reps * per_rep / (1ull << 30);
            // The threads first: read after them, the process's figure holds
            // at least what they add up to.
            const auto threads1 = iofwd::thread_cpu_seconds(daemon);
            r.daemon_cpu_s = iofwd::process_cpu_seconds(daemon) - cpu0;
            r.daemon_cpu_per_gib = r.daemon_cpu_s / gib;
            r.parts = static_cast<std::uint64_t>(writers) * o.reps * per_rep;
            double threads_s = 0;
            for (const auto& [name, s] : threads1) {
                const auto before = threads0.find(name);
                const double used = s - (before == threads0.end() ? 0 : before->second);
                r.daemon_thread_cpu_s[name] = used;
                threads_s += used;
            }
            r.daemon_rest_cpu_s = std::max(0.0, r.daemon_cpu_s - threads_s);
            for (const auto& [name, ignored] : threads0)
                if (!r.daemon_thread_cpu_s.contains(name))
                    r.daemon_ended += (r.daemon_ended.empty() ? "" : ", ") + name;
            r.daemon_rss = iofwd::process_peak_rss(daemon);
        }
        rows.push_back(r);
    }

    if (rank == 0) {
        auto gbs = [](std::uint64_t bytes, double s) { return s > 0 ? bytes / s / 1e9 : 0.0; };
        fmt::print("iofwd benchmark: {} ranks ({} writing through iofwd), {} repetitions (medians; "
                   "slowest rank each), transport {}\n", ranks, writers, o.reps, io_provider_name());
        fmt::print("{:>9} | {:>10} {:>9} {:>7} {:>7} {:>6} {:>7} | {:>10} {:>9} {:>10} {:>9} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9} | {:>8} {:>9}\n",
                   "size", "io_write", "GB/s/rk", "solo", "of lim", "of 2M", "warm", "durable", "GB/s agg", "flush", "GB/s agg", "limit",
                   "lim 2M", "ucx get", "ucx rtt", "posix", "mpiio", "cpu s/GiB", "daemon rss");
        std::ofstream csv(o.csv);
        csv << "size,writers,io_write_s,durable_s,limit_s,ucx_get_s,posix_s,mpiio_s,"
               "daemon_cpu_s_per_gib,daemon_peak_rss,ranks,ucx_rtt_s,io_write_of_limit,"
               "io_write_warm_s,io_write_solo_s,flush_s,limit_2m_s,io_write_of_limit_2m\n";
        for (const auto& r : rows) {
            const std::uint64_t agg = r.size * static_cast<std::uint64_t>(ranks);
            const std::uint64_t agg_io = r.size * static_cast<std::uint64_t>(writers);
            const std::string rtt = r.rtt_s > 0 ? fmt::format("{:.1f}us", r.rtt_s * 1e6) : "-";
            const std::string warm = r.warm_s > 0 ? fmt::format("{:.1f}us", r.warm_s * 1e6) : "-";
            const std::string cpu =
                r.daemon_cpu_s >= cpu_shown_s ? fmt::format("{:.3f}", r.daemon_cpu_per_gib) : "-";
            const std::string of_lim =
                r.pull_vs_limit > 0 ? fmt::format("{:.0f}%", r.pull_vs_limit * 100) : "-";
            const std::string of_2m =
                r.pull_vs_limit2m > 0 ? fmt::format("{:.2f}x", r.pull_vs_limit2m) : "-";
            // A figure not measured (solo with one writer; the baselines with
            // --iofwd-only or one rank) prints as "-".
            auto base = [&](std::uint64_t bytes, double s) {
                return s > 0 ? fmt::format("{:.2f}GB", gbs(bytes, s)) : std::string("-");
            };
            fmt::print("{:>9} | {:>8.3f}ms {:>9.2f} {:>7} {:>7} {:>6} {:>7} | {:>8.3f}ms {:>9.2f} {:>8.3f}ms {:>9.2f} | {:>9} {:>9} {:>9} "
                       "{:>9} | {:>9} {:>9} | {:>8} {:>10}\n",
                       iofwd::human_bytes(r.size), r.write_s * 1e3, gbs(r.size, r.write_s), base(r.size, r.solo_s), of_lim, of_2m, warm,
                       r.durable_s * 1e3, gbs(agg_io, r.durable_s), r.flush_s * 1e3, gbs(agg_io, r.flush_s),
                       base(r.size, r.limit_s), base(r.size, r.limit2m_s),
                       base(r.size, r.ucx_s), rtt, base(agg, r.posix_s), base(agg, r.mpiio_s),
                       cpu, iofwd::human_bytes(r.daemon_rss));
            csv << fmt::format("{},{},{:.9f},{:.9f},{:.9f},{:.9f},{:.9f},{:.9f},{:.4f},{},{},{:.9f},{:.4f},{:.9f},{:.9f},{:.9f},{:.9f},{:.4f}\n",
                               r.size, writers, r.write_s, r.durable_s, r.limit_s, r.ucx_s, r.posix_s,
                               r.mpiio_s, r.daemon_cpu_per_gib, r.daemon_rss, ranks, r.rtt_s,
                               r.pull_vs_limit, r.warm_s, r.solo_s, r.flush_s, r.limit2m_s,
                               r.pull_vs_limit2m);
        }
        fmt::print("(io_write GB/s/rk: one rank's bytes over its blocked time; solo: rank 0's io_write"
                   " while the other ranks wait (with several writers);\n of lim: one rank's io_write bandwidth"
                   " (solo where measured) over the limit's in the same repetition (median of the ratios);\n"
                   " of 2M: the same against lim 2M;"
                   " warm: one io_write of"
                   " the size, the mean of 40 back to back (as ucx rtt is timed), up to 64 KiB;\n durable: the writers'"
                   " bytes, posix and mpiio: all ranks' bytes, over the time until durable;\n flush: the daemon's"
                   " first write to the store to the last rank durable (io_flush_span; the slowest node), and the\n"
                   " writers' bytes over it; limit:"
                   " process_vm_readv of one rank's buffer; lim 2M: the same into 2 MiB pages;\n ucx get: a plain UCX get of it;"
                   " ucx rtt: a plain"
                   " UCX message of the size and an answer, both ranks polling, up to 64 KiB)\n");
        print_thread_cpu(rows);
        print_goals(rows, ranks, writers);
        fmt::print("csv: {}\n", o.csv);
    }
    rc = io_finalize();
    if (rc && rank == 0)
        std::fprintf(stderr, "bench: io_finalize: %s\n", io_last_error());
    MPI_Comm_free(&node);
    MPI_Finalize();
    return rc ? 1 : 0;
}

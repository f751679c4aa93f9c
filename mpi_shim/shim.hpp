#pragma once
// The MPI shim's shared state: its configuration, the connection to the
// node's daemon, and how a wrapper reaches the next definition of the MPI
// function it wraps.
//
// The shim defines MPI_Init, MPI_Finalize and the MPI_File_* calls; preloaded
// (LD_PRELOAD), they stand in front of the MPI library's. Each one calls on
// to the next definition in the search order (dlsym(RTLD_NEXT)), so another
// PMPI-based tool preloaded after the shim still sees every call.
#include <mpi.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

#include "client.hpp"

namespace iofwd::shim {

// The next definition of `name` after the shim, looked up once.
template <typename F>
F resolve_next(F& cache, const char* name)
{
    if (!cache) {
        void* p = ::dlsym(RTLD_NEXT, name);
        if (!p) {
            std::fprintf(stderr,
                         "iofwd shim: %s has no definition after the shim (%s); the shim "
                         "must be preloaded into a program linked with MPI\n",
                         name, ::dlerror());
            std::abort();
        }
        cache = reinterpret_cast<F>(p);
    }
    return cache;
}

// NEXT(MPI_File_write_at)(args...): the next MPI_File_write_at, typed like PMPI_'s.
#define IOFWD_NEXT(fn)                                                                \
    ([]() {                                                                           \
        static decltype(&P##fn) cached = nullptr;                                     \
        return ::iofwd::shim::resolve_next(cached, #fn);                              \
    }())

struct config {
    std::vector<std::string> prefixes;  // IOFWD_SHIM_PREFIXES, absolute, no trailing '/'
    bool verbose = false;               // IOFWD_SHIM_VERBOSE
    bool trace = false;                 // IOFWD_SHIM_VERBOSE=2: a line per forwarded write
};

struct counters {
    std::uint64_t files = 0;             // files opened with forwarding
    std::uint64_t writes = 0;            // writes forwarded
    std::uint64_t bytes = 0;
    std::uint64_t through_views = 0;     // of them, through a file view other than the default
    std::uint64_t packed = 0;            // of them, from non-contiguous memory (packed first)
    double write_seconds = 0;            // time ranks spent blocked in forwarded writes
    std::uint64_t passed = 0;            // calls on matching files handed to MPI-IO instead
};

struct state {
    std::mutex mutex;  // serialises every use of the connection
    config cfg;
    client::client conn;
    bool attached = false;
    int world_rank = 0;
    counters stats;
};

state& shared();

// Attaches to (or launches) the node's daemon after MPI is initialised;
// detaches at MPI_Finalize once everything forwarded is durable. Both are
// idempotent; detach returns MPI_SUCCESS or an MPI error class.
void attach();
int detach();

// `path` names a file under one of the prefixes (after making it absolute);
// `out` is the absolute path.
bool matches(const config& cfg, const char* filename, std::string& out);

// For a file name under the prefixes: waits until every write to it that
// this node's daemon holds has landed, and returns true with the absolute
// path in `path`.
bool drain_if_forwarded(const char* filename, std::string& path);

// Whether every rank of `comm` has each of two conditions, in one
// MPI_Allreduce (a collective: every rank of `comm` calls it, whatever it
// holds). `reached` is false when the reduction itself failed; the two are
// then false as well.
struct agreement {
    bool first = false;
    bool second = false;
    bool reached = false;
};
agreement agree(MPI_Comm comm, bool first, bool second);

// An MPI error class for an error the daemon or the connection reported.
int mpi_error_class(std::error_code ec);

// Says `text` on stderr, once per `key` per process.
void warn_once(const std::string& key, const std::string& text);

}  // namespace iofwd::shim

// Keeps MPI_Finalize of MPICH 4.0.x (ch4:ucx) from hanging over UCX's tcp
// transport, in every process that loads libiofwd or the MPI shim.
//
// The hang, found on the simulated cluster and reproduced without iofwd:
//  - UCX 1.13's tcp transport completes a flush of an endpoint only when the
//    peer answers a PUT request it sends, and the peer answers only while it
//    progresses its worker; a closed endpoint keeps its socket open, so the
//    request is not refused, it just waits;
//  - MPICH 4.0.2's finalize closes every endpoint (flush mode), progresses
//    until its own closes are done, then blocks in a PMI barrier (a read() on
//    PMI_FD) without progressing UCX.
// A rank whose closes finished early sits in that barrier while a peer's
// close waits for its answer: both wait forever. Any skew makes it likelier
// (the rank that launched iod waits for the daemon to exit in io_finalize),
// and the more pairs of ranks exchanged data, the likelier: measured on 4
// nodes x 2 ranks, an alltoall then MPI_Finalize hung 10 runs in 10.
//
// The remedy: while a process that has begun closing its endpoints
// (ucp_disconnect_nb, which only MPICH's finalize calls) reads from PMI_FD,
// the read waits in 1 ms polls of that descriptor and progresses every UCX
// worker the process still has in between, so peers' flushes are answered.
// Outside that moment each interposed call is a pass-through to the next
// definition (dlsym RTLD_NEXT). These symbols are exported by libiofwd.so and
// by the shim (exports.map), so they take precedence over libc's and UCX's.
#include <dlfcn.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <ucp/api/ucp.h>

#define IOFWD_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace {

std::mutex workers_mutex;
std::vector<ucp_worker_h>& workers()
{
    static std::vector<ucp_worker_h> w;  // alive, in this process
    return w;
}
std::atomic<bool> closing{false};

template <typename F>
F next(const char* name)
{
    return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

int pmi_fd()
{
    static const int fd = [] {
        const char* v = std::getenv("PMI_FD");
        return v && *v ? std::atoi(v) : -1;
    }();
    return fd;
}

}  // namespace

IOFWD_INTERPOSE ucs_status_t ucp_worker_create(ucp_context_h context,
                                               const ucp_worker_params_t* params,
                                               ucp_worker_h* worker)
{
    static const auto real = next<decltype(&ucp_worker_create)>("ucp_worker_create");
    const ucs_status_t st = real(context, params, worker);
    if (st == UCS_OK) {
        std::lock_guard lock(workers_mutex);
        workers().push_back(*worker);
    }
    return st;
}

IOFWD_INTERPOSE void ucp_worker_destroy(ucp_worker_h worker)
{
    static const auto real = next<decltype(&ucp_worker_destroy)>("ucp_worker_destroy");
    {
        std::lock_guard lock(workers_mutex);
        std::erase(workers(), worker);
    }
    real(worker);
}

IOFWD_INTERPOSE ucs_status_ptr_t ucp_disconnect_nb(ucp_ep_h ep)
{
    static const auto real = next<decltype(&ucp_disconnect_nb)>("ucp_disconnect_nb");
    closing.store(true, std::memory_order_relaxed);
    return real(ep);
}

IOFWD_INTERPOSE ssize_t read(int fd, void* buf, size_t count)
{
    static const auto real = next<decltype(&read)>("read");
    if (closing.load(std::memory_order_relaxed) && fd >= 0 && fd == pmi_fd()) {
        static const auto progress = next<decltype(&ucp_worker_progress)>("ucp_worker_progress");
        pollfd p{fd, POLLIN, 0};
        for (;;) {
            {
                std::lock_guard lock(workers_mutex);
                for (ucp_worker_h w : workers())
                    while (progress(w) != 0) {
                    }
            }
            const int r = ::poll(&p, 1, 1);
            if (r > 0 || (r < 0 && errno != EINTR))
                break;
        }
    }
    return real(fd, buf, count);
}

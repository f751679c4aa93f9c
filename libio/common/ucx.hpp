#pragma once
// Move-only owners of the UCX handles iofwd uses, and the few calls on them.
// Every fallible call returns std::error_code (ucx category) and sets its
// output only on success.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

namespace iofwd::ucx {

class context final {
public:
    context() noexcept = default;
    context(context&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    context& operator=(context&& o) noexcept;
    ~context();

    // features: UCP_FEATURE_* bits. `name` shows up in UCX's own logs.
    // `shared_workers`: workers of this context run on different threads
    // (UCX then locks what they share, e.g. the registration cache).
    static std::error_code create(std::uint64_t features, const char* name, context& out,
                                  bool shared_workers = false);
    ucp_context_h get() const noexcept { return h_; }

private:
    ucp_context_h h_ = nullptr;
};

class worker final {
public:
    worker() noexcept = default;
    worker(worker&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    worker& operator=(worker&& o) noexcept;
    ~worker();

    static std::error_code create(const context& ctx, worker& out);
    ucp_worker_h get() const noexcept { return h_; }

    // Progresses until there is nothing left to do right now, or `limit`
    // rounds did something (a caller that must stay responsive asks again).
    // Returns how many rounds did something.
    unsigned drain(unsigned limit = 4096) noexcept
    {
        unsigned busy = 0;
        while (busy < limit && ucp_worker_progress(h_) != 0)
            ++busy;
        return busy;
    }
    unsigned progress() noexcept { return ucp_worker_progress(h_); }

    // The event fd (needs UCP_FEATURE_WAKEUP) and the arm step before sleeping
    // on it: an empty error means armed, UCS_ERR_BUSY (as an error) means
    // events are pending and the caller must progress again first.
    std::error_code event_fd(int& out) const;
    ucs_status_t arm() noexcept { return ucp_worker_arm(h_); }

    std::error_code address(std::vector<std::byte>& out) const;

private:
    ucp_worker_h h_ = nullptr;
};

// A registered memory region (ucp_mem_map of memory the caller owns).
class memory final {
public:
    memory() noexcept = default;
    memory(memory&& o) noexcept
        : ctx_(std::exchange(o.ctx_, nullptr)), h_(std::exchange(o.h_, nullptr))
    {
    }
    memory& operator=(memory&& o) noexcept;
    ~memory();

    static std::error_code map(const context& ctx, void* address, std::size_t length,
                               memory& out);
    ucp_mem_h get() const noexcept { return h_; }
    std::error_code pack_rkey(std::vector<std::byte>& out) const;

private:
    ucp_context_h ctx_ = nullptr;
    ucp_mem_h h_ = nullptr;
};

class rkey final {
public:
    rkey() noexcept = default;
    rkey(rkey&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
    rkey& operator=(rkey&& o) noexcept;
    ~rkey();

    static std::error_code unpack(ucp_ep_h ep, std::span<const std::byte> packed, rkey& out);
    ucp_rkey_h get() const noexcept { return h_; }

private:
    ucp_rkey_h h_ = nullptr;
};

// An endpoint of `w` to the worker at `address`, as the daemon and the ranks
// open them to each other. Error mode NONE: in UCX 1.13 PEER rules out the
// shared-memory transports (posix, sysv, cma) and leaves tcp, ~10x slower
// here; a dead peer is seen by its control socket closing instead.
// `on_error` may be null.
ucs_status_t connect(ucp_worker_h w, std::span<const std::byte> address,
                     ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h& out);
// Closes `ep` at once: operations still on it are cancelled and complete
// through progress; the close itself is not waited for.
void close_now(ucp_ep_h ep);

// Names of the UCX transports an endpoint uses, e.g. "cma/memory, posix/memory",
// read from UCX's own description of the endpoint.
std::string endpoint_transports(ucp_ep_h ep);

// A completion for a non-blocking request: `status` is written when done.
// Returns true when the request completed immediately (ptr was NULL or error).
bool request_finished(ucs_status_ptr_t ptr, ucs_status_t& status) noexcept;

}  // namespace iofwd::ucx

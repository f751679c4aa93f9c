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

#include "unique_handle.hpp"

namespace iofwd::ucx {

namespace detail {
struct unmap_memory {
    ucp_context_h ctx = nullptr;
    void operator()(ucp_mem_h h) const noexcept;  // logs a failure
};
struct force_close {
    void operator()(ucp_ep_h h) const noexcept;
};
}  // namespace detail

class context final {
public:
    // features: UCP_FEATURE_* bits. `name` shows up in UCX's own logs.
    // `shared_workers`: workers of this context run on different threads
    // (UCX then locks what they share, e.g. the registration cache).
    // `transports` (UCX_TLS syntax), when not empty, replaces UCX_TLS for
    // this context only: a rank's MPI keeps its own.
    static std::error_code create(std::uint64_t features, const char* name, context& out,
                                  bool shared_workers = false, const std::string& transports = {});
    ucp_context_h get() const noexcept { return h_.get(); }

private:
    iofwd::unique_handle<ucp_context_h, iofwd::release_with<ucp_cleanup>> h_;
};

class worker final {
public:
    static std::error_code create(const context& ctx, worker& out);
    ucp_worker_h get() const noexcept { return h_.get(); }

    // Progresses until there is nothing left to do right now, or `limit`
    // rounds did something (a caller that must stay responsive asks again).
    // Returns how many rounds did something.
    unsigned drain(unsigned limit = 4096) noexcept
    {
        unsigned busy = 0;
        while (busy < limit && ucp_worker_progress(h_.get()) != 0)
            ++busy;
        return busy;
    }
    unsigned progress() noexcept { return ucp_worker_progress(h_.get()); }

    // The event fd (needs UCP_FEATURE_WAKEUP) and the arm step before sleeping
    // on it: an empty error means armed, UCS_ERR_BUSY (as an error) means
    // events are pending and the caller must progress again first.
    std::error_code event_fd(int& out) const;
    ucs_status_t arm() noexcept { return ucp_worker_arm(h_.get()); }

    std::error_code address(std::vector<std::byte>& out) const;

private:
    iofwd::unique_handle<ucp_worker_h, iofwd::release_with<ucp_worker_destroy>> h_;
};

// A registered memory region (ucp_mem_map of memory the caller owns).
class memory final {
public:
    static std::error_code map(const context& ctx, void* address, std::size_t length,
                               memory& out);
    ucp_mem_h get() const noexcept { return h_.get(); }
    std::error_code pack_rkey(std::vector<std::byte>& out) const;

private:
    ucp_context_h ctx_ = nullptr;
    iofwd::unique_handle<ucp_mem_h, detail::unmap_memory> h_;
};

class rkey final {
public:
    static std::error_code unpack(ucp_ep_h ep, std::span<const std::byte> packed, rkey& out);
    ucp_rkey_h get() const noexcept { return h_.get(); }

private:
    iofwd::unique_handle<ucp_rkey_h, iofwd::release_with<ucp_rkey_destroy>> h_;
};

// An endpoint of a worker to the worker at a peer's address, as the daemon
// and the ranks open them to each other. Error mode NONE: in UCX 1.13 PEER
// rules out the shared-memory transports (posix, sysv, cma) and leaves tcp,
// ~10x slower here; a dead peer is seen by its control socket closing
// instead.
//
// One way to close it, close(): `flush` lets what is posted on it finish,
// `force` cancels it (the cancelled operations complete through progress).
// Destroying an open endpoint closes it by force without waiting.
class endpoint final {
public:
    // `on_error` may be null. On failure `out` is left closed.
    static ucs_status_t connect(ucp_worker_h w, std::span<const std::byte> address,
                                ucp_err_handler_cb_t on_error, void* arg, endpoint& out);
    ucp_ep_h get() const noexcept { return h_.get(); }
    explicit operator bool() const noexcept { return static_cast<bool>(h_); }

    enum class mode { flush, force };
    // Closes it (the handle is gone either way). Returns the close's request
    // when it did not finish at once (then `done`, when given, is called
    // with `user_data` as it finishes, and the caller frees the request
    // there, or waits for it and frees it), nullptr otherwise.
    void* close(mode how, ucp_send_nbx_callback_t done = nullptr, void* user_data = nullptr) noexcept;

private:
    iofwd::unique_handle<ucp_ep_h, detail::force_close> h_;
};

// Names of the UCX transports an endpoint uses, e.g. "cma/memory, posix/memory",
// read from UCX's own description of the endpoint.
std::string endpoint_transports(ucp_ep_h ep);

// A completion for a non-blocking request: `status` is written when done.
// Returns true when the request completed immediately (ptr was NULL or error).
bool request_finished(ucs_status_ptr_t ptr, ucs_status_t& status) noexcept;

}  // namespace iofwd::ucx

#pragma once
// A puller: a UCX worker of its own, driven by a thread of its own, that
// copies the chunks ranks push (active-message rendezvous, which UCX
// completes with a cma read of the rank's memory inside the receive). Every
// rank is given every puller and spreads its chunks over them, so one rank's
// write is copied on several cores at once, and two ranks' writes share them,
// where the event loop alone would copy chunk after chunk.
//
// Only UCX work runs here: which slot a chunk goes into, the flushes and the
// answers to the rank stay on the daemon's event loop, which hands work over
// with receive() / release() and hears back through the loop; or, for a
// chunk it had a slot for before the chunk came, with a claim the puller
// takes when the chunk arrives (chunk_claims.hpp).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <ucp/api/ucp.h>

#include "chunk_claims.hpp"
#include "protocol.hpp"
#include "pushed_chunk.hpp"
#include "ucx.hpp"
#include "worker_driver.hpp"

namespace iofwd::iod {

// The header of a pushed chunk, from an active-message callback's arguments;
// false (logged) for a chunk to refuse: a malformed header, or bytes not sent
// by rendezvous.
bool decode_push(const void* header, std::size_t header_length, std::size_t length,
                 const ucp_am_recv_param_t* param, proto::push_header& out);


class puller final {
public:
    // A chunk pushed to this puller, on the daemon's loop. The puller holds
    // `desc` until receive() or release() is called with it.
    using arrival =
        std::function<void(puller&, const proto::push_header&, std::size_t length, void* desc)>;

    // `claims`: where the loop posts receives ahead (null: none).
    puller(boost::asio::io_context& loop, unsigned index, arrival on_arrival,
           chunk_claims* claims = nullptr);
    puller(const puller&) = delete;
    puller& operator=(const puller&) = delete;
    // Stops the thread; chunks not received by then are dropped with the worker.
    ~puller();

    // Creates the worker (on `ctx`, created for shared workers) and starts
    // the thread. On failure `why` says what.
    std::error_code start(const ucx::context& ctx, std::string& why);

    // Where a rank sends its pushes to reach this puller.
    const std::vector<std::byte>& address() const noexcept { return address_; }

    // A rank (its session `sender`) that pushes to this puller: an endpoint
    // to its worker, which UCX pairs with the one the rank opens to us. Its
    // chunks then belong to an endpoint the daemon owns. (One UCX makes by
    // itself for the rank's connection is freed as soon as a read through it
    // fails, when the rank dies; any later call with the rank's chunks, even
    // giving them back, would then touch freed memory.)
    // `who` names the rank in messages (never `sender`, its secret).
    void connect(std::uint64_t sender, std::vector<std::byte> rank_address, std::string who);
    // After every call about `sender` made so far: closes its endpoint.
    // Chunks of it handed over later are dropped, never given to UCX.
    void disconnect(std::uint64_t sender);

    // Copies the pushed chunk `desc` of `sender` into [dest, dest + length)
    // (registered as `memh`) on the puller's thread; `done` runs on the loop
    // (UCS_ERR_CANCELED: `sender` was disconnected).
    void receive(std::uint64_t sender, void* desc, void* dest, std::size_t length,
                 ucp_mem_h memh, std::function<void(ucs_status_t)> done);
    // Gives a pushed chunk back unread: the rank's send of it fails.
    void release(std::uint64_t sender, void* desc);
    // The bytes of the chunks received whole so far (any thread).
    std::uint64_t bytes_read() const noexcept { return bytes_read_.load(std::memory_order_relaxed); }

private:
    struct receive_op;
    static ucs_status_t on_push(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param);
    static void receive_done(void* request, ucs_status_t status, std::size_t length,
                             void* user_data);
    void finish(receive_op* op, ucs_status_t st);

    boost::asio::io_context& loop_;  // the daemon's
    unsigned index_;
    arrival on_arrival_;
    chunk_claims* claims_;
    boost::asio::io_context io_;     // the puller's own
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> keep_;
    ucx::worker worker_;
    worker_driver driver_{io_, worker_};
    std::vector<std::byte> address_;
    // The puller's thread only:
    std::unordered_map<std::uint64_t, ucx::endpoint> eps_;  // connected senders
    std::unordered_set<std::uint64_t> closed_;         // disconnected senders
    std::atomic<std::uint64_t> bytes_read_{0};
    std::thread thread_;
};

}  // namespace iofwd::iod

#pragma once
// A puller: a UCX worker of its own, driven by a thread of its own, that
// copies the chunks ranks push (active-message rendezvous, which UCX
// completes with a cma read of the rank's memory inside the receive). Each
// rank is given one puller, so two ranks' bytes are copied on two cores at
// once, where the event loop alone would copy them one after the other.
//
// Only UCX work runs here: which slot a chunk goes into, the flushes and the
// answers to the rank stay on the daemon's event loop, which hands work over
// with receive() / release() and hears back through the loop.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <ucp/api/ucp.h>

#include "protocol.hpp"
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

    puller(boost::asio::io_context& loop, unsigned index, arrival on_arrival);
    puller(const puller&) = delete;
    puller& operator=(const puller&) = delete;
    // Stops the thread; chunks not received by then are dropped with the worker.
    ~puller();

    // Creates the worker (on `ctx`, created for shared workers) and starts
    // the thread. On failure `why` says what.
    std::error_code start(const ucx::context& ctx, std::string& why);

    unsigned index() const noexcept { return index_; }
    // Where a rank sends its pushes to reach this puller.
    const std::vector<std::byte>& address() const noexcept { return address_; }

    // Copies the pushed chunk `desc` into [dest, dest + length) (registered
    // as `memh`) on the puller's thread; `done` runs on the loop.
    void receive(void* desc, void* dest, std::size_t length, ucp_mem_h memh,
                 std::function<void(ucs_status_t)> done);
    // Gives a pushed chunk back unread: the rank's send of it fails.
    void release(void* desc);

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
    boost::asio::io_context io_;     // the puller's own
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> keep_;
    ucx::worker worker_;
    worker_driver driver_{io_, worker_};
    std::vector<std::byte> address_;
    std::thread thread_;
};

}  // namespace iofwd::iod

#pragma once
// The daemon's side of one rank's mailbox (mailbox.hpp): small writes the
// rank copied into shared memory and did not wait for. Their records are
// taken in order, one at a time, each started as a write (a version or a
// forwarded file's range) through the session; the next waits until the
// previous one is staged. Messages the rank sends on the socket afterwards
// wait behind the records it published before them (io_wait, io_test and BYE
// must see those writes), in a bounded queue; a heartbeat never waits.
//
// The daemon sleeps on the rank's doorbell (an eventfd) only after telling
// the rank so: the rank rings only then. A record the rank broke ends the
// session with a protocol error; after the rank is gone, what it published
// before is still taken, nothing after.
#include <cstdint>
#include <deque>
#include <optional>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/posix/stream_descriptor.hpp>

#include "fd.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"

namespace iofwd::iod {

class session;

class mailbox_intake final {
public:
    explicit mailbox_intake(session& s) : s_(s) {}

    // At CONNECT, when the rank asked for one and the daemon has them: a
    // mailbox of `bytes`, `memfd` and the doorbell's descriptor for ACCEPT.
    // Without one (logged) the rank's small writes take the socket.
    void open(std::uint64_t bytes, unique_fd& memfd, int& doorbell);
    explicit operator bool() const noexcept { return static_cast<bool>(reader_); }
    // Records published and not yet taken.
    bool pending() const noexcept { return reader_.pending(); }

    // A message read from the socket: false when it must wait behind the
    // mailbox (kept, and dispatched by progress()); true to dispatch it now.
    // A rank that sends too many without waiting for answers is dropped.
    bool admit(proto::message& m);
    // Takes records, then dispatches the messages that waited for them.
    void progress();
    // The write from the mailbox up to `end` is staged (end 0: a write
    // that did not come from the mailbox): its space goes back to the rank,
    // and the records behind it may go on (on the loop, soon).
    void staged(std::uint64_t end);
    // Every version of the rank's run up to `version` is durable: the rank's
    // io_wait and io_test on one ask nothing (mailbox::reader::publish_durable).
    void publish_durable(std::uint64_t version) noexcept { reader_.publish_durable(version); }
    // The socket closed: what the rank published so far is still taken,
    // nothing later; messages waiting are dropped.
    void close();
    // Starts a write for each record, in order, one at a time; true when
    // every record the rank published is taken.
    bool take();

private:
    void post_progress();
    void wait_doorbell();

    session& s_;
    mailbox::reader reader_;
    std::optional<boost::asio::posix::stream_descriptor> doorbell_;
    std::deque<proto::message> deferred_;  // read from the socket, waiting for the mailbox
    bool posted_ = false;
};

}  // namespace iofwd::iod

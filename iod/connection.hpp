#pragma once
// A rank's control socket, framed: reads one message after another (the
// header, then the payload, each bounded and decoded by protocol.hpp) and
// hands them to its owner; writes the owner's messages in order from a queue.
//
// Closing is orderly: close_after_queue() lets what is queued (an ERROR that
// says why) go out before the socket closes, while reading stops at once;
// close() closes now unless such a last write is still under way.
// Loop thread only. The owner is kept alive by every operation in flight.
#include <cstddef>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/local/stream_protocol.hpp>

#include "protocol.hpp"

namespace iofwd::iod {

class connection final {
public:
    using socket_type = boost::asio::local::stream_protocol::socket;

    // What the connection tells its owner, on the loop.
    class owner {
    public:
        virtual ~owner() = default;
        // A whole, well-formed message.
        virtual void received(proto::message m) = 0;
        // A message that does not decode: `why` says what is wrong with it.
        virtual void malformed(std::error_code ec, std::string why) = 0;
        // The peer closed the connection, or reading or writing failed.
        virtual void lost(std::string why) = 0;
    };

    explicit connection(socket_type sock);

    // Starts reading; `o` must outlive every call it gets.
    void start(std::weak_ptr<owner> o);
    // Queues `m` (nothing once the socket is closed).
    void send(const proto::message& m);
    // The first message on the connection, with file descriptors
    // (SCM_RIGHTS). False, and `why`, when it could not be sent (the rank is
    // gone); the caller treats that as a lost connection.
    bool send_with_fds(const proto::message& m, std::initializer_list<int> fds, std::string& why);
    // Reads nothing more; closes once what is queued is written.
    void close_after_queue();
    // Closes now, unless closing after the queue with a write under way
    // (then the write's end closes it).
    void close();

    // Messages can still be sent.
    bool open() const noexcept { return open_; }
    // close_after_queue() was called.
    bool closing() const noexcept { return close_after_write_; }

private:
    void read_header();
    void read_payload();
    void write_next();
    std::shared_ptr<owner> lock_owner() const;

    socket_type sock_;
    std::weak_ptr<owner> owner_;
    std::vector<std::byte> in_;
    proto::header header_;
    std::deque<std::vector<std::byte>> out_;
    bool writing_ = false;
    bool open_ = true;
    bool close_after_write_ = false;
};

}  // namespace iofwd::iod

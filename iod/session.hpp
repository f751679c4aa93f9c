#pragma once
// One rank's control connection to the daemon: reads and answers its
// messages, owns the UCX endpoint to the rank and the transfers of its
// versions. A session outlives its socket while versions the rank handed over
// are still being flushed.
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <ucp/api/ucp.h>

#include "mailbox.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace iofwd::iod {

class daemon;
class forwarded_file;
class puller;
class transfer;

class session final : public std::enable_shared_from_this<session> {
public:
    using socket_type = boost::asio::local::stream_protocol::socket;

    session(daemon& d, socket_type sock, std::uint64_t id, int peer_pid);
    ~session();

    void start();
    // The daemon is stopping: refuse new writes; once idle, say so and close.
    void shut_down();

    std::uint64_t id() const noexcept { return id_; }
    bool admitted() const noexcept { return admitted_; }
    std::uint32_t rank() const noexcept { return hello_.rank; }
    bool busy() const noexcept { return active_ > 0 || mailbox_.pending(); }
    // Nothing left to do: the connection is over, every transfer finished and
    // every write the rank left in its mailbox was taken.
    bool done() const noexcept { return ended_ && active_ == 0 && !mailbox_.pending(); }
    // Called by the daemon when something it waits on for FINISHED changed.
    void maybe_finish();
    // The writes of this rank still on their way (pulled or being flushed).
    void each_transfer(const std::function<void(const transfer&)>& fn) const;
    // A chunk the rank pushed (proto::push_header) through `via` (its
    // puller; nullptr: the loop's worker); the status goes back to UCX
    // (UCS_INPROGRESS: kept).
    ucs_status_t pushed(puller* via, std::uint64_t cookie, std::uint64_t offset,
                        std::uint64_t length, void* desc);

private:
    void read_header();
    void read_payload();
    // A message read from the socket: answered, queued behind the mailbox, or
    // dispatched.
    void received(proto::message m);
    void dispatch(proto::message& m);
    void on_connect(proto::connect_msg& m);
    void on_write_req(proto::write_req_msg& m);
    // A new version of the rank's buffer: its bytes inline (`data`), or
    // pulled; from the mailbox when mail_end > 0 (see take_mail).
    void begin_write(std::uint64_t cookie, std::uint64_t length, std::vector<std::byte> data,
                     std::uint64_t mail_end);
    // The mailbox (mailbox.hpp): sets it up at CONNECT, or leaves it off.
    void open_mailbox(proto::accept_msg& a, unique_fd& memfd);
    // Starts a version for each record, in order, one at a time; true when
    // every record the rank published is staged. A message read from the
    // socket waits for that, since the rank published those records first.
    bool take_mail();
    // take_mail, and then the socket message that was waiting for it.
    void mail_progress();
    // The write being pulled is in staging (or was given up): its mailbox
    // space (mail_end > 0) goes back, and the records behind it may go on.
    void staged(std::uint64_t mail_end);
    void post_mail_progress();
    void wait_mail();
    void on_bye();
    void on_query(const proto::query_msg& m);
    void on_read_req(const proto::read_req_msg& m);
    // The MPI shim's file writes (files.hpp).
    void on_file_open(const proto::file_open_msg& m);
    void on_file_write(proto::file_write_msg& m);
    void start_file_write(std::shared_ptr<forwarded_file> f, proto::file_write_msg m,
                          std::uint64_t mail_end);
    // A file write from the mailbox (take_mail).
    void begin_file_write(mailbox::reader::record& r);
    // What is wrong with a record from the mailbox; empty: nothing.
    std::string mail_problem(const mailbox::reader::record& r) const;
    void on_file_sync(const proto::file_sync_msg& m);
    void on_file_drain(const proto::file_drain_msg& m);
    // Once `f` has nothing in flight: fsync it if `durable`, let go of this
    // session's handle if `release`, then done(first error, why).
    void settle_file(std::shared_ptr<forwarded_file> f, bool durable, bool release,
                     std::function<void(std::error_code, std::string)> done);
    struct file_handle;
    // The rank closed the file (or went away): its writes finish and are
    // fsynced in the background, then the handle is released. A failure is
    // answered to `cookie`, or with cookie 0 kept for BYE.
    void close_file(file_handle h, std::uint64_t cookie);
    void close_all_files();
    // Keeps the first failure the rank hears of at BYE (FINISHED or ERROR).
    void remember_failure(std::error_code ec, const std::string& why);
    // A request that needs an admitted rank and a nonzero cookie; false (and
    // the connection dropped) otherwise.
    bool well_formed(const char* request, std::uint64_t cookie);
    void answer_waits(std::uint64_t version);
    void send(const proto::message& m);
    // The first message on the connection, with file descriptors (SCM_RIGHTS).
    void send_with_fds(const proto::message& m, std::initializer_list<int> fds);
    void write_next();
    // Pushed chunks that came before their WRITE_REQ/FILE_WRITE: handed to
    // the transfer when it starts, released when the write is refused.
    void adopt_early(std::uint64_t cookie);
    void release_early(std::uint64_t cookie);
    // Ends the connection: with an ERROR first when `ec` is set.
    void fail(std::error_code ec, std::string why);
    void socket_closed(std::string why);
    void close_endpoint(bool force);
    void finish_closing();
    std::string who() const;

    static void ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
    static void ep_closed(void* request, ucs_status_t status, void* user_data);

    daemon& d_;
    socket_type sock_;
    std::uint64_t id_;
    int peer_pid_;

    std::vector<std::byte> in_;
    proto::header header_;
    std::deque<std::vector<std::byte>> out_;
    bool writing_ = false;
    bool socket_open_ = true;
    bool close_after_write_ = false;

    bool admitted_ = false;
    proto::connect_msg hello_;
    ucp_ep_h ep_ = nullptr;
    bool ep_failed_ = false;
    puller* puller_ = nullptr;  // copies this rank's pushed chunks (nullptr: the loop)
    bool puller_closed_ = false;
    ucx::rkey rkey_;

    // What became of each version this rank wrote through this connection,
    // and the io_wait calls waiting on one.
    struct version_record {
        proto::version_state_t state = proto::version_state_t::pulling;
        std::uint64_t size = 0;
        std::uint32_t crc32c = 0;
        std::error_code error;
        std::string why;
        // When durable: its flush began and ended (proto::monotonic_ns()).
        std::uint64_t flush_start_ns = 0;
        std::uint64_t durable_ns = 0;
    };
    std::map<std::uint64_t, version_record> versions_;
    std::multimap<std::uint64_t, std::uint64_t> waits_;  // version -> cookie
    std::map<std::uint64_t, std::weak_ptr<transfer>> staged_;  // versions still in flight

    std::uint64_t next_version_ = 1;
    std::shared_ptr<transfer> pulling_;  // the version io_write waits for
    std::uint64_t pulling_cookie_ = 0;
    bool pulling_mail_ = false;          // pulling_ came from the mailbox

    mailbox::reader mailbox_;
    std::optional<boost::asio::posix::stream_descriptor> mail_efd_;  // the rank's doorbell
    std::deque<proto::message> deferred_;  // read from the socket, waiting for the mailbox
    bool mail_posted_ = false;
    bool close_files_later_ = false;  // the socket closed with file writes in the mailbox
    bool file_write_waiting_ = false;    // a FILE_WRITE waits for its WRITE_DONE
    std::uint64_t last_cookie_ = 0;      // of the last write announced
    struct early_chunk {
        std::uint64_t cookie, offset, length;
        void* desc;
    };
    std::vector<early_chunk> early_;
    ucx::rkey file_rkey_;                // the key of the file write being pulled

    // Files this rank writes through the daemon, by its numbers for them, and
    // the first failure of a write it no longer waited for.
    struct file_handle {
        std::shared_ptr<forwarded_file> file;
        std::error_code error;
        std::string why;
    };
    std::map<std::uint64_t, file_handle> files_;
    unsigned active_ = 0;                // transfers not yet committed or abandoned
    std::uint64_t versions_durable_ = 0;
    std::uint64_t bytes_durable_ = 0;
    std::error_code durable_error_;
    std::string durable_why_;

    bool bye_ = false;
    bool finishing_ = false;
    bool ended_ = false;
    boost::asio::steady_timer close_timer_;
};

}  // namespace iofwd::iod

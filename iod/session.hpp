#pragma once
// One rank's connection to the daemon, from CONNECT to FINISHED. It owns the
// rank's UCX endpoint and puts together the parts that do the work, one
// concern each:
//   connection        framing of the control socket and the send queue
//   mailbox_intake    the small writes the rank leaves in shared memory
//   write_path        the one way a write starts: into staging, WRITE_DONE
//   checkpoint_writes versions: WRITE_REQ, QUERY, READ_REQ, the version table
//   file_writes       the MPI shim's forwarded files: FILE_*
// A session outlives its socket while what the rank handed over is still
// being flushed. Loop thread only.
//
// Its life is one state, changed only by enter() (session.cpp):
//
//   greeting --CONNECT--> serving --BYE--> bye --all durable--> finishing
//      |                     |               |                     |
//      |                     |               |        endpoint closed: FINISHED
//      |                     |               |                     v
//      +---------------------+---------------+---socket lost--> gone   finished
//
// finished and gone are ended: nothing more is read; the session is done
// once its writes and the records left in its mailbox are taken and landed.
// A connection whose first message is STATUS (iofwd status) is no rank's:
// it gets the daemon's STATUS_REPLY and goes from greeting to gone.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/steady_timer.hpp>

#include <ucp/api/ucp.h>

#include "checkpoint_writes.hpp"
#include "connection.hpp"
#include "file_writes.hpp"
#include "mailbox_intake.hpp"
#include "protocol.hpp"
#include "pushed_chunk.hpp"
#include "transfer.hpp"
#include "ucx.hpp"
#include "write_path.hpp"

namespace iofwd::iod {

class daemon;
class puller;

class session final : public std::enable_shared_from_this<session>, public connection::owner {
public:
    // `id` numbers connections for humans; `push_key` names the session in
    // its pushed chunks (daemon::new_push_key) and is told to the rank only.
    session(daemon& d, connection::socket_type sock, std::uint64_t id, std::uint64_t push_key,
            int peer_pid);
    ~session() override;

    void start();
    // The daemon is stopping: refuse new writes; once idle, say so and close.
    void shut_down();

    std::uint64_t id() const noexcept { return id_; }
    std::uint64_t push_key() const noexcept { return push_key_; }
    // CONNECT was accepted (whatever happened since).
    bool admitted() const noexcept { return hello_.has_value(); }
    std::uint32_t rank() const noexcept { return hello_ ? hello_->rank : 0; }
    // Work in flight: writes, syncs, or records still in the mailbox.
    bool busy() const noexcept { return active_ > 0 || intake_.pending(); }
    // Ended, and nothing of it left to do.
    bool done() const noexcept { return ended() && active_ == 0 && !intake_.pending(); }
    bool ended() const noexcept { return state_ == state::finished || state_ == state::gone; }
    // Answers FINISHED once the rank said BYE and everything it wrote is
    // durable (daemon::settle calls it).
    void maybe_finish();
    // The writes of this rank still on their way (pulled or being flushed).
    void each_transfer(const std::function<void(const transfer&)>& fn) const;
    // This rank's line of a STATUS_REPLY; false for a connection that is no
    // admitted rank's.
    bool describe(proto::status_rank& out) const;
    // A chunk the rank pushed (proto::push_header) through one of the
    // daemon's pullers (p.via; nullptr: the loop's worker); the status goes
    // back to UCX (UCS_INPROGRESS: kept).
    ucs_status_t pushed(pushed_chunk p, std::uint64_t cookie, std::uint64_t offset,
                        std::uint64_t length);

    // connection::owner
    void received(proto::message m) override;
    void malformed(std::error_code ec, std::string why) override;
    void lost(std::string why) override;

    // For the session's parts.
    daemon& owner() noexcept { return d_; }
    boost::asio::io_context& loop() noexcept;
    const proto::connect_msg& hello() const noexcept { return *hello_; }
    std::string who() const;
    void send(const proto::message& m) { conn_.send(m); }
    bool open() const noexcept { return conn_.open(); }
    // Ends the connection with an ERROR saying why.
    void fail(std::error_code ec, std::string why);
    // A request needs an admitted rank and a nonzero cookie (may_ask), no
    // BYE before it (well_formed), and for a write no other write being
    // staged (may_write); false, and the connection dropped, otherwise.
    bool may_ask(const char* request, std::uint64_t cookie);
    bool well_formed(const char* request, std::uint64_t cookie);
    bool may_write(const char* request, std::uint64_t cookie);
    void dispatch(proto::message& m);
    write_path& writes() noexcept { return writes_; }
    file_writes& files() noexcept { return files_; }
    transfer_resources resources() noexcept;
    // Where a write's bytes come from: the rank's endpoint, `rkey` and
    // `address` for a get, or its pushes through the pullers.
    transfer::source source(bool push, ucp_rkey_h rkey, std::uint64_t address) const;
    ucp_rkey_h rank_key() const noexcept { return rkey_.get(); }
    std::error_code unpack_key(std::span<const std::byte> packed, ucx::rkey& out) const;
    // Gives a pushed chunk of this rank back unread.
    void give_back(pushed_chunk p);
    // Work in flight that done() waits for.
    void work_begun() noexcept { ++active_; }
    void work_done() noexcept { --active_; }
    // Tells the daemon that something FINISHED or the exit may wait on changed.
    void changed();
    // Keeps the first failure the rank hears of at BYE (FINISHED or ERROR).
    void remember_failure(std::error_code ec, const std::string& why);
    // The mailbox's side of the write path.
    void mail_staged(std::uint64_t end) { intake_.staged(end); }
    // Every version of the rank's run up to `version` is durable: said
    // through the mailbox, when the rank has one (mailbox_intake).
    void mail_durable(std::uint64_t version) { intake_.publish_durable(version); }
    std::string mail_problem(const mailbox::reader::record& r) const;
    void start_mail(mailbox::reader::record& r);
    // Every record taken and the messages behind them dispatched.
    void mail_drained();

private:
    enum class state { greeting, serving, bye, finishing, finished, gone };
    // The only place the state changes; a transition not in the diagram
    // above is a bug (logged, and ignored).
    void enter(state next);

    void on_connect(proto::connect_msg& m);
    void on_bye();
    void on_status();
    void close_endpoint(bool force);
    // The endpoint's close, still under way, given back to UCX: it goes on
    // inside UCX and its callback never runs. UCX 1.13 aborts the daemon
    // (an assertion in ucp_worker_destroy) over a close request never
    // given back when the worker goes.
    void release_close_request() noexcept;
    void finish_closing();

    static void ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
    static void ep_closed(void* request, ucs_status_t status, void* user_data);

    daemon& d_;
    connection conn_;
    std::uint64_t id_;
    std::uint64_t push_key_;
    int peer_pid_;
    state state_ = state::greeting;

    std::optional<proto::connect_msg> hello_;
    ucx::endpoint ep_;
    bool ep_failed_ = false;  // UCX reported an error on it: its close is forced
    // The rank pushes to the daemon's pullers (each connected to it until
    // close_endpoint) or, without pullers, to the loop's worker.
    bool pullers_connected_ = false;
    ucx::rkey rkey_;

    mailbox_intake intake_{*this};
    write_path writes_{*this};
    checkpoint_writes checkpoints_{*this};
    file_writes files_{*this};
    // The socket closed with file writes still in the mailbox: the files
    // close once those are taken.
    bool close_files_later_ = false;

    unsigned active_ = 0;  // work in flight (see busy)
    std::error_code durable_error_;
    std::string durable_why_;
    boost::asio::steady_timer close_timer_;
    // The endpoint's flushing close while it is under way, and what its
    // callback (ep_closed) is handed.
    void* close_request_ = nullptr;
    std::weak_ptr<session>* close_weak_ = nullptr;
};

}  // namespace iofwd::iod

#pragma once
// The daemon: one Asio event loop that accepts ranks on a Unix socket, drives
// UCX from its event fd (asleep when idle, never spinning), keeps the
// registry of connections (sessions) and the job they belong to, and exits
// when that follows from what happened (settle()).
//
// Who owns what: the daemon owns the loop's UCX worker, the staging memory,
// the pullers (UCX workers on threads of their own), the data flushes and
// their policy (flusher.hpp), the job's bookkeeping (job.hpp) and the
// sessions. A session owns its rank's endpoint and the transfers of its
// writes; a transfer sees only transfer_resources.
#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "chunk_claims.hpp"
#include "fd.hpp"
#include "files.hpp"
#include "flusher.hpp"
#include "job.hpp"
#include "options.hpp"
#include "peer_check.hpp"
#include "protocol.hpp"
#include "puller.hpp"
#include "rendezvous.hpp"
#include "staging.hpp"
#include "store/backend.hpp"
#include "transfer.hpp"
#include "ucx.hpp"
#include "worker_driver.hpp"

namespace iofwd::iod {

class session;

class daemon final {
public:
    daemon(boost::asio::io_context& loop, options opts);
    daemon(const daemon&) = delete;
    daemon& operator=(const daemon&) = delete;
    ~daemon();

    // Takes the session lock, opens the store, sets up UCX and the staging
    // memory, and listens. On failure `why` says what and what to do.
    std::error_code start(std::string& why);
    // 0: everything accepted is durable; 1: some version was lost.
    int exit_status() const noexcept { return job_ && job_->lost_versions() ? 1 : 0; }

    // For sessions.
    const options& opts() const noexcept { return opts_; }
    boost::asio::io_context& loop() noexcept { return loop_; }
    ucx::worker& worker() noexcept { return worker_; }
    const staging& stage() const noexcept { return staging_; }
    flush_policy& flushes() noexcept { return *flushes_; }
    store::backend& store() noexcept { return *store_; }
    file_table& files() noexcept { return files_; }
    iod::job& job() noexcept { return *job_; }
    // Whether a rank's UCX address and key are safe to hand to UCX.
    peer_check& peers() noexcept { return peer_check_; }
    // What a session's transfers use.
    transfer_resources resources() noexcept
    {
        return {loop_, worker_, driver_, staging_, *flushes_};
    }
    // Progresses UCX soon: after posting an operation.
    void kick() { driver_.kick(); }
    worker_driver& driver() noexcept { return driver_; }
    // The threads that copy pushed chunks; none when the loop's worker does
    // (--pull-threads 0).
    const std::vector<std::unique_ptr<puller>>& pullers() const noexcept { return pullers_; }
    chunk_claims& claims() noexcept { return claims_; }
    bool shutting_down() const noexcept { return shutting_down_; }
    // A rank's CONNECT on session `s` (job::admit, unless shutting down).
    std::error_code admit(const session& s, const proto::connect_msg& m,
                          std::uint64_t& first_version, std::string& why);
    // The connection of `s` ended: `clean` after its BYE.
    void session_ended(const session& s, bool clean);
    // Something a session, the job or the data path waits on changed: once
    // the loop is done with the current event, settle() works out what
    // follows (see there). Cheap; call it after every such event.
    void changed();
    // A rank's CONNECT arrived (admitted or not): the daemon is not idle,
    // and one launched for ranks that were all refused exits.
    void rank_arrived();
    // A rank was admitted: the staging's fault-in waits for the others.
    void rank_admitted() noexcept { staging_.rank_arriving(); }
    // The answer to STATUS (iofwd status): the job, its ranks, the writes on
    // their way, staging, the flush queue, errors. In status.cpp.
    proto::status_reply_msg status() const;

private:
    std::error_code take_lock(std::string& why);
    std::error_code listen(std::string& why);
    // A random name for a new session's pushed chunks, not 0 and not
    // another session's (an error: the kernel gave no random bytes).
    std::error_code new_push_key(std::uint64_t& out) const;
    void accept_next();
    void on_signal(int signo);
    static ucs_status_t on_push(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param);
    // A pushed chunk for session h.session, from `via` (nullptr: the loop's
    // worker): UCS_INPROGRESS when taken, else why it is refused.
    ucs_status_t pushed(puller* via, const proto::push_header& h, std::size_t length, void* desc);
    // The one place where what follows from events is decided: sessions that
    // are done are forgotten, sessions whose rank waits for FINISHED get it
    // when everything they wrote is durable, and the daemon exits when its
    // job is over and all is written (or it was told to stop).
    void settle();
    void arm_idle_timer();
    // Every --progress-interval while writes are on their way: a log line for
    // each that has been running longer than that.
    void arm_progress();
    void report_progress();
    void stop();

    boost::asio::io_context& loop_;
    options opts_;
    runtime_paths paths_;
    unique_fd lock_;
    std::unique_ptr<store::backend> store_;
    peer_check peer_check_;  // started before UCX, so its child copies no UCX state
    ucx::context context_;
    ucx::worker worker_;
    worker_driver driver_{loop_, worker_};
    // Receives posted ahead for pushed chunks: outlives the pullers and
    // the sessions' transfers, which take and retract them.
    chunk_claims claims_{2 * opts_.pull_threads};
    // Destroyed before the context and the staging memory they use.
    staging staging_;
    std::vector<std::unique_ptr<puller>> pullers_;
    std::unique_ptr<flush_policy> flushes_;
    std::unique_ptr<iod::job> job_;
    std::optional<boost::asio::local::stream_protocol::acceptor> acceptor_;
    boost::asio::signal_set signals_;
    boost::asio::steady_timer idle_timer_;
    boost::asio::steady_timer progress_timer_;
    // accept() failed for want of a resource (descriptors, memory): the
    // connection stays queued, so accepting again at once would spin and
    // fill the log; it is retried after a pause instead.
    boost::asio::steady_timer accept_retry_;
    std::uint64_t accept_failures_ = 0;  // in a row (logged on the 1st, 101st...)
    bool progress_armed_ = false;
    bool idle_armed_ = false;
    // A rank's connection came: its CONNECT, or one that ended without being
    // a status request.
    bool rank_arrived_ = false;
    std::uint64_t started_ns_ = proto::monotonic_ns();
    std::map<std::uint64_t, std::shared_ptr<session>> sessions_;
    // The same sessions by the name their pushed chunks carry: a random
    // number, so that no other process of the user can guess another
    // rank's and push bytes into its writes.
    std::unordered_map<std::uint64_t, session*> pushers_;
    std::uint64_t unknown_pushes_ = 0;  // chunks that named none of them
    file_table files_;  // files the MPI shim writes through us
    std::uint64_t next_session_id_ = 1;
    bool settle_posted_ = false;
    bool shutting_down_ = false;
    bool stopped_ = false;
};

}  // namespace iofwd::iod

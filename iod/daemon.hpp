#pragma once
// The daemon: one Asio event loop that accepts ranks on a Unix socket, drives
// UCX from its event fd (asleep when idle, never spinning), and keeps the
// job's bookkeeping: which ranks are connected, which versions of the node
// are complete (their manifest written), and when to exit.
#include <atomic>
#include <cstdint>
#include <map>
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

#include "fd.hpp"
#include "files.hpp"
#include "flusher.hpp"
#include "store/layout.hpp"
#include "options.hpp"
#include "peer_check.hpp"
#include "protocol.hpp"
#include "puller.hpp"
#include "rendezvous.hpp"
#include "staging.hpp"
#include "store/backend.hpp"
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
    int exit_status() const noexcept { return lost_versions_ ? 1 : 0; }

    // For sessions and transfers.
    const options& opts() const noexcept { return opts_; }
    boost::asio::io_context& loop() noexcept { return loop_; }
    ucx::worker& worker() noexcept { return worker_; }
    staging& stage() noexcept { return staging_; }
    flusher& flush() noexcept { return *flusher_; }
    store::backend& store() noexcept { return *store_; }
    file_table& files() noexcept { return files_; }
    // Whether a rank's UCX address and key are safe to hand to UCX.
    peer_check& peers() noexcept { return peer_check_; }
    // Progresses UCX soon: after posting an operation.
    void kick() { driver_.kick(); }
    // Pulls in flight (retention waits while there are any). `loop_worker`:
    // a pull on the loop's own worker, which the loop then progresses without
    // sleeping (a get of user memory is many active-message fragments, and a
    // wakeup per fragment costs more than the copy); a puller spins its own.
    void pull_started(bool loop_worker = true);
    void pull_finished(bool loop_worker = true);
    // The puller that copies the pushed chunks of node-local rank `rank`, or
    // nullptr when the loop's worker does (--pull-threads 0).
    puller* puller_for(std::uint32_t rank) noexcept;
    // Gives a pushed chunk of session `sender` back unread, on the worker it
    // came in on (`via`: its puller, nullptr for the loop's worker).
    void release_pushed(puller* via, std::uint64_t sender, void* desc);
    // Staging slots for pulls: like stage().acquire, and a pull that has to
    // wait for a slot lets every held-back flush go (see flush_staged).
    void acquire_slot(staging::waiter w, std::uint64_t bytes = UINT64_MAX);
    // Starts the store write of staged bytes of `owner` (a transfer), or, with
    // `hold` and while staging has free slots, keeps it until
    // release_flushes(owner). On a node with few cores a flush (crc32c, store
    // write) running beside the pull of the same write's later chunks slows the
    // pull the rank is blocked in by a third or more; postponing it by the
    // pull's few milliseconds costs the time to durable little.
    void flush_staged(const void* owner, bool hold, flusher::work w, flusher::done d);
    void release_flushes(const void* owner);

    std::error_code admit(session& s, const proto::connect_msg& m, std::uint64_t& first_version,
                          std::string& why);
    void rank_durable(const std::string& job, std::uint32_t ranks, std::uint64_t version,
                      std::uint32_t rank, const store::manifest_entry& entry);
    // A version io_write had already returned for could not be made durable.
    void version_failed(std::error_code ec);
    // Catalog work a rank's FINISHED waits for: not a retention still waiting
    // for the store to be free of data (the daemon's exit does wait for it).
    bool manifests_pending() const noexcept { return manifests_pending_ > (prune_job_ ? 1u : 0u); }
    std::error_code manifest_error() const noexcept { return manifest_error_; }
    bool shutting_down() const noexcept { return shutting_down_; }
    void session_ended(session& s, bool clean);
    // The job's node-local ranks other than `rank` that are still connected
    // (for FINISHED: what the daemon goes on serving).
    std::uint32_t unfinished_ranks(std::uint32_t rank) const;
    void check_exit();

private:
    // ended: said BYE; died: its connection closed without one.
    enum class rank_state { absent, connected, ended, died };
    struct pending_version {
        std::vector<std::optional<store::manifest_entry>> entries;
        std::uint32_t count = 0;
    };

    std::error_code take_lock(std::string& why);
    // The newest version of `job` in the store (0: none) and the job's claim
    // for this node.
    std::error_code claim_store(const std::string& job, std::uint64_t& last,
                                std::unique_ptr<store::claim>& claim, std::string& why);
    std::error_code listen(std::string& why);
    void accept_next();
    void on_signal(int signo);
    static ucs_status_t on_push(void* arg, const void* header, std::size_t header_length,
                                void* data, std::size_t length, const ucp_am_recv_param_t* param);
    // A pushed chunk for session h.session, from `via` (nullptr: the loop's
    // worker): UCS_INPROGRESS when taken, else why it is refused.
    ucs_status_t pushed(puller* via, const proto::push_header& h, std::size_t length, void* desc);
    // Versions of the job that some node-local rank wrote and another never
    // will (the job is over), logged and forgotten; those a rank that said BYE
    // left out count as lost (every rank must write every version), those of
    // a rank that died only as discarded. Returns how many were lost.
    std::size_t abandon_partial_versions();
    void arm_idle_timer();
    void stop();
    bool job_over() const;
    // Retention of `job` after a version completed, on the retention thread
    // once no data is being pulled or flushed.
    void prune(const std::string& job);
    void start_prune();
    // A catalog or retention job finished: sessions waiting for it may finish.
    void catalog_done();

    boost::asio::io_context& loop_;
    options opts_;
    runtime_paths paths_;
    unique_fd lock_;
    std::unique_ptr<store::backend> store_;
    peer_check peer_check_;  // started before UCX, so its child copies no UCX state
    ucx::context context_;
    ucx::worker worker_;
    worker_driver driver_{loop_, worker_};
    // Destroyed before the context and the staging memory they use.
    staging staging_;
    std::vector<std::unique_ptr<puller>> pullers_;
    std::unique_ptr<flusher> flusher_;
    // Manifests and COMPLETE records, one version at a time, and retention on
    // a thread of its own: their small serial store round trips never hold a
    // thread the next version's data needs, and a version's commit never
    // waits behind the removal of an old one.
    std::unique_ptr<flusher> catalog_;
    std::unique_ptr<flusher> retention_;
    std::optional<boost::asio::local::stream_protocol::acceptor> acceptor_;
    boost::asio::signal_set signals_;
    boost::asio::steady_timer idle_timer_;
    // Every --progress-interval while writes are on their way: a log line for
    // each that has been running longer than that.
    boost::asio::steady_timer progress_timer_;
    bool progress_armed_ = false;
    void arm_progress();
    void report_progress();
    std::map<std::uint64_t, std::shared_ptr<session>> sessions_;
    file_table files_;  // files the MPI shim writes through us
    std::uint64_t next_session_id_ = 1;

    std::string job_;
    std::string run_;  // its run's name (connect_msg::run); empty: unnamed
    std::unique_ptr<store::claim> job_claim_;
    std::uint32_t ranks_ = 0;
    std::uint32_t nodes_ = 1;
    std::vector<rank_state> ranks_state_;
    std::uint64_t first_version_ = 1;
    std::map<std::uint64_t, pending_version> versions_;
    unsigned manifests_pending_ = 0;  // catalog and retention jobs not done
    std::optional<std::string> prune_job_;  // retention wanted, not started yet
    bool pruning_ = false;
    std::atomic<bool> retention_pause_{false};  // a pull started since retention did
    std::error_code manifest_error_;
    std::uint64_t lost_versions_ = 0;

    unsigned pulls_active_ = 0;
    struct held_flush {
        const void* owner;
        flusher::work work;
        flusher::done done;
    };
    std::vector<held_flush> held_flushes_;
    bool shutting_down_ = false;
    bool stopped_ = false;
};

}  // namespace iofwd::iod

#pragma once
// The per-process client behind the C API: connection to the node's daemon,
// the UCX worker that serves the daemon's pulls of our buffer, and the
// request/answer exchanges of io_init, io_write and io_finalize.
//
// While it waits for an answer it keeps progressing its UCX worker (UCX 1.13
// serves a get of user memory only while the target progresses), asleep on
// the worker's event fd and the control socket in blocking mode, spinning in
// polling mode.
#include <sys/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "errors.hpp"
#include "fd.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"
#include "rendezvous.hpp"
#include "settings.hpp"
#include "store/backend.hpp"
#include "ucx.hpp"

namespace iofwd::client {

// The job's nodes and the run's name (connect_msg::run); 0 and empty: from
// the environment (default_nodes, default_run_name).
struct run_info {
    std::uint32_t nodes = 0;
    std::string run;
};

// A new run name: the UTC time and 64 random bits ("20261123T164512-3f9a...").
std::error_code new_run_name(std::string& out);

class client final {
public:
    client() = default;
    client(const client&) = delete;
    client& operator=(const client&) = delete;
    ~client();

    std::error_code init(void* buffer, std::uint64_t len, std::uint32_t rank,
                         std::uint32_t ranks, char** daemon_args, bool blocking,
                         const run_info& run = {});
    // Called by finalize once this rank's data is durable, to wait until every
    // rank of the job is (io_init_comm: a barrier on its communicator); then
    // the job-wide commit is checked at once instead of awaited.
    using barrier_fn = int (*)(void* ctx, double timeout_s);
    void set_barrier(barrier_fn fn, void* ctx) noexcept
    {
        barrier_ = fn;
        barrier_ctx_ = ctx;
    }
    std::error_code write(std::uint64_t len, std::uint64_t& version);
    std::error_code finalize();
    // finalize, without waiting for a daemon this process launched to exit
    // (it goes on alone): for a process that stops using iofwd early.
    std::error_code detach();
    std::error_code wait(std::uint64_t version, proto::version_state_msg& out);
    std::error_code test(std::uint64_t version, proto::version_state_t& out);
    // The daemon's first write of a durable version and its commit (monotonic ns).
    std::error_code flush_span(std::uint64_t version, std::uint64_t& start_ns,
                               std::uint64_t& durable_ns);
    std::error_code read(std::uint64_t version, std::span<std::byte> out, std::uint64_t& size);
    std::error_code latest(bool verify, std::uint64_t& version);

    // For the MPI shim: a connection with no registered buffer, over which
    // files are written (protocol.hpp: FILE_*). `file` is the caller's
    // nonzero number for an open file; writes return once the daemon holds
    // the bytes.
    // `run.nodes`: the job's nodes when the caller knows them (the shim
    // counts them over MPI_COMM_WORLD), else 0 for the environment's.
    std::error_code init_files(std::uint32_t rank, std::uint32_t ranks, bool blocking,
                               const run_info& run = {});
    std::error_code file_open(std::uint64_t file, const std::string& path);
    std::error_code file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                               std::uint64_t len);
    std::error_code file_sync(std::uint64_t file, std::uint32_t flags);
    std::error_code file_drain(const std::string& path);

    // A call refused before it reached the client: `why` becomes the sentence
    // for io_last_error.
    std::error_code reject(errc e, std::string why)
    {
        return fail(make_error_code(e), std::move(why));
    }

    bool initialized() const noexcept { return initialized_; }
    // The sentence for the last failure (without the call's name).
    const std::string& why() const noexcept { return why_; }
    const proto::accept_msg& daemon_info() const noexcept { return accept_; }
    std::uint64_t next_version() const noexcept { return next_version_; }
    std::string context() const;

private:
    std::error_code send(const proto::message& m);
    // When a blocking wait polls before it sleeps on the socket and UCX.
    enum class polling {
        // For a moment after UCX last did something.
        after_activity,
        // From the start too: the daemon is getting our bytes over UCX right
        // now, and replies to it must go out at once.
        moving,
        // Never: the daemon reads pushed bytes itself and UCX traffic is only
        // its acknowledgements; polling would take a core from its copy.
        never,
    };
    // Next message from the daemon, progressing UCX while waiting. timeout 0:
    // no limit (the daemon's death still ends the wait at once).
    std::error_code receive(proto::message& out, std::chrono::milliseconds timeout,
                            polling poll = polling::after_activity);
    bool try_parse(proto::message& out, std::error_code& ec);
    // The ERROR a daemon sent before it closed the connection (empty text: none).
    proto::error_msg closing_words();
    std::error_code fail(std::error_code ec, std::string why);
    // The error for any request once the connection is broken (said once).
    std::error_code broken_error();
    std::error_code daemon_error(const proto::error_msg& e);
    // An answer that is not the one `request` expects: the daemon's ERROR, or
    // a protocol error that leaves the connection unusable.
    std::error_code unexpected(const proto::message& m, const std::string& request);
    // After FINISHED: the newest version this rank wrote is complete on every
    // node (store::committed), waiting for the other nodes up to the commit
    // timeout (after the barrier, if one is set, only briefly).
    std::error_code confirm_commit(std::string& why);
    // Sends a QUERY and returns its answer (a VERSION_STATE or an error).
    std::error_code query(std::uint64_t version, bool wait, proto::version_state_msg& out);
    // The store holding this job: the daemon's when initialised, else IOFWD_STORE.
    std::error_code open_store(std::string& job);
    // io_read of a version still in daemon memory; `served` false when the
    // daemon no longer holds all of it.
    std::error_code read_staged(std::uint64_t version, std::span<std::byte> out, bool& served,
                                std::uint64_t& size);
    void release();
    // A look at the control socket without reading or waiting: nothing
    // there, a message waiting, the daemon gone, or interrupted.
    enum class control_state { quiet, unread, gone, unknown };
    control_state peek_control() const;
    // A small write through the mailbox: `put` writes the record (given its
    // cookie; sets whether to ring). False: take the socket instead.
    bool mail(std::uint64_t len, const std::function<bool(std::uint64_t, bool&)>& put);
    void close_daemon_ep();
    // A pushed write: its chunks' headers (UCX reads them until each send
    // completes) and send requests.
    struct push_state {
        std::vector<std::array<std::byte, proto::push_header_size>> headers;
        std::vector<void*> requests;
    };
    // Posts [data, data + len) of write `cookie` as rendezvous active
    // messages, one per daemon chunk; memh may be null (UCX registers).
    std::error_code push(std::uint64_t cookie, const void* data, std::uint64_t len, ucp_mem_h memh,
                         push_state& out);
    // Waits until every send of `p` completed (the daemon read the bytes or
    // refused them); cancels them if the daemon is gone.
    std::error_code wait_pushed(push_state& p);
    // Bytes a write request announces and the rank then pushes.
    struct push_source {
        const void* data;
        std::uint64_t len;
        ucp_mem_h memh;  // null: UCX registers them itself
    };
    // Sends `request`, pushes `src` (when given) as its chunks, and returns
    // the daemon's answer once UCX is done with every chunk.
    std::error_code exchange(proto::message request, std::uint64_t cookie,
                             const push_source* src, proto::message& answer);
    // Sends a FILE_* request (pushing `src`, when given) and waits for its
    // FILE_DONE or WRITE_DONE.
    std::error_code file_request(proto::message m, std::uint64_t cookie, const std::string& what,
                                 const push_source* src = nullptr);

    bool wait_for_daemon_ = true;  // finalize waits for the daemon we launched
    bool initialized_ = false;
    bool blocking_ = true;
    bool files_only_ = false;
    std::uint64_t eager_limit_ = 0;  // writes up to this size go inline (IOFWD_EAGER_LIMIT)
    void* buffer_ = nullptr;
    std::uint64_t length_ = 0;
    std::uint32_t rank_ = 0;
    std::uint32_t ranks_ = 0;
    runtime_paths paths_;
    pid_t child_ = -1;

    unique_fd control_;
    std::vector<std::byte> rx_;
    std::vector<unique_fd> passed_fds_;  // came with the daemon's messages (ACCEPT)
    // Small writes go through the daemon's mailbox (mailbox.hpp) while the
    // rank's next version number is known (an io_write that failed on the
    // socket leaves it to the daemon's next WRITE_DONE).
    mailbox::writer mailbox_;
    unique_fd doorbell_;
    bool version_known_ = false;
    std::chrono::steady_clock::time_point socket_checked_{};  // last look for a dead daemon
    std::error_code broken_;  // the connection is unusable from now on
    ucx::context context_;
    ucx::worker worker_;
    int efd_ = -1;
    ucx::memory memory_;
    ucp_ep_h daemon_ep_ = nullptr;  // to push writes to the daemon (connect_flag_push)
    proto::accept_msg accept_;
    std::uint64_t next_cookie_ = 1;
    std::uint64_t next_version_ = 0;
    std::uint64_t last_written_ = 0;  // the newest version this rank wrote (0: none)
    settings settings_;
    barrier_fn barrier_ = nullptr;
    void* barrier_ctx_ = nullptr;
    std::string job_;
    std::unique_ptr<store::backend> store_;
    std::string store_uri_;
    std::string why_;
};

}  // namespace iofwd::client

#pragma once
// The per-process client behind the C API: io_init and io_finalize, and the
// parts that do the rest, one concern each:
//   launcher    finding the node's daemon or starting it
//   settings    the IOFWD_* configuration, read once at io_init
//   connection  the control socket and the wait for an answer
//   writer      io_write and the shim's file writes (mailbox, pushes)
//   reader      io_read, io_latest, and the job-wide commit at io_finalize
// The client owns the UCX context and worker that serve the daemon's reads
// of the registered buffer.
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "connection.hpp"
#include "errors.hpp"
#include "protocol.hpp"
#include "reader.hpp"
#include "rendezvous.hpp"
#include "settings.hpp"
#include "ucx.hpp"
#include "writer.hpp"

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
    using barrier_fn = reader::barrier_fn;
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
    // Both answered here, without asking the daemon, for a version its
    // mailbox says is durable (known_durable); `out` then holds the version
    // and its state only.
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
    // `len` bytes at `data` to [offset, offset+len), or, with `runs`, to
    // those runs in order (protocol.hpp's FILE_WRITE says what they must be).
    std::error_code file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                               std::uint64_t len, std::vector<proto::file_run> runs = {});
    std::error_code file_sync(std::uint64_t file, std::uint32_t flags);
    // For the MPI shim, after a file write from the program's own memory
    // (an array it is likely to write again; not a buffer the shim packed):
    // the range's whole 2 MiB pages, if at least two, are collapsed into
    // huge pages on a thread at nice 19 (MADV_COLLAPSE, which leaves a
    // range the program keeps off huge pages alone), so that the daemon
    // reads the next write of it about 1.4x as fast (a pull from 4 KiB pages
    // is slower than one from 2 MiB pages). Best effort; IOFWD_HUGEPAGES=0
    // turns it off.
    void offer_huge_pages(const void* data, std::uint64_t len);
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
    std::uint64_t next_version() const noexcept { return writer_.next_version(); }
    std::string context() const;

private:
    // A version of this run, written by this rank, that the daemon said
    // is durable through the mailbox.
    bool known_durable(std::uint64_t version) const noexcept;
    std::error_code fail(std::error_code ec, std::string why);
    // Sends CONNECT and takes the answer, trying a daemon again that died
    // between accepting and answering (or one still finishing the last job).
    std::error_code connect(const proto::connect_msg& hello, char** daemon_args,
                            proto::message& answer);
    // A checked request needs io_init and a connection that is not broken.
    std::error_code ready(const char* what);
    std::error_code query(std::uint64_t version, bool wait, proto::version_state_msg& out);
    reader::place here() const;
    void release();

    std::string why_;
    connection conn_{why_};
    writer writer_{conn_, why_};
    reader reader_{conn_, why_};

    bool wait_for_daemon_ = true;  // finalize waits for the daemon we launched
    bool initialized_ = false;
    bool blocking_ = true;
    bool files_only_ = false;
    void* buffer_ = nullptr;
    std::uint64_t length_ = 0;
    std::uint32_t rank_ = 0;
    std::uint32_t ranks_ = 0;
    runtime_paths paths_;
    pid_t child_ = -1;
    ucx::context context_;
    ucx::worker worker_;
    int efd_ = -1;
    ucx::memory memory_;
    // Work io_init leaves to a thread of low priority, started at its end
    // (client.cpp): faults in the mailbox, then copies the buffer's touched
    // pages into huge pages. Stopped and joined by release() (in the
    // process that started it: after_init_pid_), before the writer closes.
    std::jthread after_init_;
    pid_t after_init_pid_ = 0;
    // io_write calls the daemon reads the buffer for, under way: the
    // collapse waits while there are any. The thread holds a reference of
    // its own; each io_init that starts one starts a fresh count.
    std::shared_ptr<std::atomic<int>> writing_ = std::make_shared<std::atomic<int>>(0);
    // The pager (offer_huge_pages): a thread of low priority, started at the
    // first range offered, stopped and joined by release() like after_init_.
    // The mutex guards the queue; pager_pid_ and pager_refused_ belong to the
    // caller's thread (the shim serialises its calls).
    std::mutex pager_mutex_;
    std::condition_variable_any pager_cv_;
    std::deque<std::pair<std::uintptr_t, std::size_t>> pager_queue_;  // under pager_mutex_
    std::jthread pager_;
    pid_t pager_pid_ = 0;
    bool pager_refused_ = false;  // no thread to be had, or a kernel that cannot collapse
    proto::accept_msg accept_;
    settings settings_;
    barrier_fn barrier_ = nullptr;
    void* barrier_ctx_ = nullptr;
    std::string job_;
};

}  // namespace iofwd::client

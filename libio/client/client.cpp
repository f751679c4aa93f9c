// io_init and io_finalize (client.hpp). About 690 lines: init is the
// sequence launch or attach, UCX, registration, CONNECT, ACCEPT, and
// finalize the sequence BYE, FINISHED, the job-wide commit, the daemon's
// exit; each is kept whole so that its order reads from top to bottom.
#include "client.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "errors.hpp"
#include "format.hpp"
#include "launcher.hpp"
#include "procfs.hpp"

namespace iofwd::client {
namespace {

using clock = std::chrono::steady_clock;

// Backing the 2 MiB-aligned interior of the buffer with transparent huge
// pages makes the daemon's cma read of it walk one page table entry per
// 2 MiB instead of per 4 KiB: 64-256 MiB read 6.8-7.6 -> 13.4-16.4 GB/s on
// this machine. Pages faulted from now on come huge (MADV_HUGEPAGE); those
// the program has already touched must be copied into huge pages
// (MADV_COLLAPSE, Linux 6.1+), which takes 40-250 ms for 64 MiB here: by
// default on a thread after io_init returns (client::after_init_), else
// within io_init (IOFWD_HUGEPAGES=init). Best effort: refused (old kernel,
// pinned pages, no memory) it changes nothing. IOFWD_HUGEPAGES=0 turns it
// all off.
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
constexpr std::size_t huge_page = 2u << 20;

struct huge_range {
    void* begin = nullptr;
    std::size_t length = 0;
};

// The whole 2 MiB pages of [data, data + len); empty when there are none.
huge_range whole_huge_pages(const void* data, std::uint64_t len)
{
    const auto begin = (reinterpret_cast<std::uintptr_t>(data) + huge_page - 1) & ~(huge_page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(data) + len) & ~(huge_page - 1);
    if (end <= begin)
        return {};
    return {reinterpret_cast<void*>(begin), end - begin};
}

// Whether the kernel knows MADV_COLLAPSE at all (asked with an empty range).
bool kernel_can_collapse(void* at)
{
    return ::madvise(at, 0, MADV_COLLAPSE) == 0;
}

// Asks for huge pages where the buffer will fault; returns the range whose
// pages can be collapsed: empty when the buffer holds no whole 2 MiB page
// or the kernel cannot collapse pages.
huge_range ask_huge_pages(void* buffer, std::uint64_t len)
{
    const huge_range r = whole_huge_pages(buffer, len);
    if (r.length == 0)
        return {};
    ::madvise(r.begin, r.length, MADV_HUGEPAGE);
    if (!kernel_can_collapse(r.begin))
        return {};
    return r;
}

// Collapses `r` a huge page per call (a collapse holds the process's mmap
// lock, which every mmap of the program's other threads waits for), until
// `stop`; a page the kernel was busy with (EAGAIN) is tried once more at the
// end. True when every page is huge now. While `writing` counts io_write
// calls under way, it waits between pages: a collapse beside the daemon's
// read of the same buffer took a core and the buffer's mmap lock from it (a
// 64 MiB write right after io_init took 21 ms against 6).
// Waits while `writing` counts io_write calls under way (see collapse).
void wait_for_writes(const std::atomic<int>* writing, const std::stop_token& stop)
{
    while (writing && writing->load(std::memory_order_acquire) > 0 && !stop.stop_requested())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

bool collapse(huge_range r, const std::stop_token& stop = {},
              const std::atomic<int>* writing = nullptr)
{
    std::vector<std::size_t> again;
    bool all = true;
    for (std::size_t at = 0; at < r.length && !stop.stop_requested(); at += huge_page) {
        wait_for_writes(writing, stop);
        if (stop.stop_requested())
            break;
        if (::madvise(static_cast<char*>(r.begin) + at, huge_page, MADV_COLLAPSE) != 0) {
            if (errno == EAGAIN)
                again.push_back(at);
            else
                all = false;
        }
    }
    for (const std::size_t at : again) {
        wait_for_writes(writing, stop);
        if (stop.stop_requested() ||
            ::madvise(static_cast<char*>(r.begin) + at, huge_page, MADV_COLLAPSE) != 0)
            all = false;
    }
    return all && !stop.stop_requested();
}

// Counts itself in `c` (if any) while it lives.
class counted {
public:
    explicit counted(std::atomic<int>* c) : c_(c)
    {
        if (c_)
            c_->fetch_add(1, std::memory_order_acq_rel);
    }
    ~counted()
    {
        if (c_)
            c_->fetch_sub(1, std::memory_order_acq_rel);
    }
    counted(const counted&) = delete;
    counted& operator=(const counted&) = delete;

private:
    std::atomic<int>* c_;
};

}  // namespace

std::error_code new_run_name(std::string& out)
{
    std::uint64_t bits = 0;
    if (::getrandom(&bits, sizeof bits, 0) != static_cast<ssize_t>(sizeof bits))
        return last_system_error();
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
    out = fmt::format("{}-{:016x}", stamp, bits);
    return {};
}

client::~client()
{
    release();
}

std::string client::context() const
{
    if (!initialized_)
        return "not initialised";
    return fmt::format("rank {}/{} on node {}, daemon pid {}, session {}", rank_, ranks_,
                       accept_.node.empty() ? "?" : accept_.node, accept_.daemon_pid,
                       paths_.session);
}

std::error_code client::fail(std::error_code ec, std::string why)
{
    why_ = std::move(why);
    return ec;
}

void client::release()
{
    // What is not collapsed yet stays as it is. A forked child's copy of a
    // thread is the parent's: detached, not joined.
    for (auto [t, pid] : {std::pair{&after_init_, after_init_pid_}, std::pair{&pager_, pager_pid_}})
        if (t->joinable()) {
            if (::getpid() == pid) {
                t->request_stop();
                t->join();
            } else {
                t->detach();
            }
        }
    if (pager_pid_ == ::getpid()) {
        pager_queue_.clear();  // its thread is joined
        pager_pid_ = 0;
    }
    pager_refused_ = false;  // the next init may have a thread again
    writer_.close();
    memory_ = ucx::memory{};
    conn_.reset();
    worker_ = ucx::worker{};
    context_ = ucx::context{};
    efd_ = -1;
}

reader::place client::here() const
{
    if (initialized_)
        return {accept_.store_uri, job_, accept_.node, rank_};
    return {default_store(), default_job_name(), {}, 0};
}

std::error_code client::init(void* buffer, std::uint64_t len, std::uint32_t rank,
                             std::uint32_t ranks, char** daemon_args, bool blocking,
                             const run_info& run)
{
    if (initialized_)
        return fail(errc::already_initialized,
                    fmt::format("io_init was already called ({}); call io_finalize first",
                                context()));
    if ((!buffer || len == 0) && !files_only_)
        return fail(errc::invalid_argument, "the buffer is NULL or its length is 0");
    if (ranks == 0 || rank >= ranks)
        return fail(errc::invalid_argument,
                    fmt::format("rank {} is not below ranks {} (both node-local)", rank, ranks));

    warn_unknown_settings(rank == 0);
    {
        std::string why;
        if (auto ec = load_settings(run.nodes, run.run, settings_, why))
            return fail(ec, why);
    }
    blocking_ = blocking;
    buffer_ = buffer;
    length_ = len;
    rank_ = rank;
    ranks_ = ranks;

    std::string why;
    if (auto ec = open_runtime(default_session(default_node_name()), paths_, why))
        return fail(ec, why);
    if (!settings_.log.empty())
        paths_.log = settings_.log;  // where a daemon we launch logs (for messages)

    // Pages faulted from now on come huge; those already there are
    // collapsed within io_init (before UCX registers the buffer) or on a
    // thread once io_init is done (at its end).
    huge_range huge_pages;
    if (!files_only_ && settings_.huge_pages != huge_pages_mode::off)
        huge_pages = ask_huge_pages(buffer_, length_);

    // Start (or find) the daemon before UCX exists in this process: the
    // launch never copies a process with registered memory.
    daemon_link link;
    if (auto ec = attach_or_launch(paths_, daemon_args, settings_.launch_timeout, link, why))
        return fail(ec, why);
    conn_.attach(std::move(link.control), settings_.daemon_timeout);
    conn_.describe(0, paths_.socket, paths_.log);
    child_ = link.child;

    auto undo = [&](std::error_code ec, std::string text) {
        release();
        if (child_ > 0) {
            // We started it and cannot use it: it exits on its own once it sees
            // no rank; do not leave a zombie behind.
            int status = 0;
            wait_child(child_, std::chrono::milliseconds(1), status);
        }
        return fail(ec, std::move(text));
    };

    std::uint64_t features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
    if (blocking_)
        features |= UCP_FEATURE_WAKEUP;
    // The daemon's transports, not the job's UCX_TLS: each transport
    // offered costs every rank's worker start-up time (tcp on every network
    // device, both shared-memory kinds), and only node-local ones reach it.
    if (auto ec = ucx::context::create(features, "iofwd-rank", context_, false,
                                       settings_.transports))
        return undo(ec, fmt::format("UCX initialisation failed: {}", ec.message()));
    if (auto ec = ucx::worker::create(context_, worker_))
        return undo(ec, fmt::format("UCX worker creation failed: {}", ec.message()));
    if (blocking_)
        if (auto ec = worker_.event_fd(efd_))
            return undo(ec, fmt::format("UCX gives no event fd: {}", ec.message()));
    conn_.use_worker(&worker_, efd_, blocking_);
    // Whether the daemon will read 2 MiB pages: known within io_init,
    // expected (not yet done) with the thread.
    bool huge = huge_pages.length > 0;
    if (huge && settings_.huge_pages == huge_pages_mode::init)
        huge = collapse(huge_pages);
    if (!files_only_) {
        if (auto ec = ucx::memory::map(context_, buffer_, length_, memory_))
            return undo(ec, fmt::format("registering the {} buffer with UCX failed: {}",
                                        human_bytes(length_), ec.message()));
    }

    proto::connect_msg hello;
    hello.rank = rank_;
    hello.ranks = ranks_;
    hello.pid = static_cast<std::uint32_t>(getpid());
    // How the daemon takes large writes (IOFWD_PULL): `push`, active-message
    // rendezvous that the daemon reads with cma, the rank's CPU out of the
    // copy; `get`, the daemon's get, which UCX 1.13 emulates by copying on the
    // rank's CPU too. Get was faster while every process had a core of its
    // own and the buffer 4 KiB pages (1 writer, 64 MiB: 9 ms against 16);
    // push is faster once the cores are all taken (2 ranks and the daemon on
    // 2 cores, 256 MiB: 108 ms against 131) and, with the buffer on huge
    // pages, always (1 writer, 256 MiB: 25 ms against 36). `auto` (default):
    // push, unless the buffer is not to have huge pages (or the kernel
    // cannot make them) and the node's ranks and the daemon fit in its cores.
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    const bool push = settings_.pull == pull_mode::push ||
                      (settings_.pull == pull_mode::automatic &&
                       (huge || files_only_ || ranks_ + 1 > cores));
    hello.flags = (blocking_ ? proto::connect_flag_blocking : 0) |
                  (files_only_ ? proto::connect_flag_files : 0) |
                  (push ? proto::connect_flag_push : 0) |
                  proto::connect_flag_mailbox;
    hello.buffer_length = length_;
    hello.buffer_address = reinterpret_cast<std::uint64_t>(buffer_);
    hello.job = settings_.job;
    hello.nodes = settings_.nodes;
    hello.run = settings_.run;
    job_ = hello.job;
    if (auto ec = worker_.address(hello.worker_address))
        return undo(ec, fmt::format("UCX worker address: {}", ec.message()));
    if (!files_only_) {
        if (auto ec = memory_.pack_rkey(hello.rkey))
            return undo(ec, fmt::format("packing the remote key: {}", ec.message()));
    }
    proto::message answer;
    if (auto ec = connect(hello, daemon_args, answer))
        return undo(ec, why_);
    if (auto* e = std::get_if<proto::error_msg>(&answer))
        return undo(e->code(), fmt::format("the daemon refused rank {}: {}", rank_, e->text));
    auto* a = std::get_if<proto::accept_msg>(&answer);
    if (!a)
        return undo(errc::protocol_error,
                    fmt::format("the daemon answered CONNECT with {}",
                                proto::to_string(proto::type_of(answer))));
    accept_ = std::move(*a);
    conn_.describe(accept_.daemon_pid, paths_.socket, paths_.log);
    writer::setup w;
    w.accept = &accept_;
    w.fds = conn_.take_fds();
    w.worker = &worker_;
    w.context = &context_;
    w.efd = efd_;
    w.blocking = blocking_;
    w.push = push;
    w.rank = rank_;
    w.eager_limit = settings_.eager_limit;
    w.silence = settings_.daemon_timeout;
    if (auto ec = writer_.open(std::move(w)))
        return undo(ec, why_);
    // After io_init's own work, which it would slow, on the node's spare
    // cores and long before the first checkpoint is written: the mailbox's
    // pages faulted in (3.4 ms per 4 MiB here), then the buffer's pages
    // collapsed. No thread to be had (a limit on processes) is no error: the
    // first small writes fault the mailbox's pages, the buffer's stay as they
    // are.
    const bool collapse_later =
        huge_pages.length > 0 && settings_.huge_pages == huge_pages_mode::background;
    if (writer_.has_mailbox() || collapse_later) {
        try {
            writing_ = std::make_shared<std::atomic<int>>(0);
            // The writer outlives the thread: release() joins it first.
            after_init_ = std::jthread([r = collapse_later ? huge_pages : huge_range{},
                                        w = writing_, mail = &writer_](std::stop_token stop) {
                ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
                name_this_thread("iofwd-init-bg");
                // Out of the way of a write the daemon reads, as the
                // collapse. A failure leaves the pages to the first writes
                // into the mailbox: nothing to report.
                (void)mail->prefault_mailbox(stop, [&] { wait_for_writes(w.get(), stop); });
                if (r.length > 0)
                    collapse(r, stop, w.get());
            });
            after_init_pid_ = ::getpid();
        } catch (const std::system_error&) {
        }
    }
    initialized_ = true;
    return {};
}

std::error_code client::connect(const proto::connect_msg& hello, char** daemon_args,
                                proto::message& answer)
{
    const auto timeout = settings_.launch_timeout;
    const auto give_up = clock::now() + timeout;
    for (auto pause = std::chrono::milliseconds(20);;
         pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
        // A daemon that dies between accepting the connection and answering
        // (killed just now: its socket still took us) is as good as none: try
        // again, and launch one if need be. So is a shared daemon still
        // finishing the previous job's writes. Both within the launch timeout.
        std::error_code ec = conn_.send(hello);
        if (!ec)
            ec = conn_.receive(answer, timeout);
        const bool retry = clock::now() + pause < give_up &&
                           (ec == errc::daemon_gone ||
                            (!ec && std::holds_alternative<proto::error_msg>(answer) &&
                             std::get<proto::error_msg>(answer).code() == errc::job_finishing));
        if (ec && !retry)
            return ec;
        if (!retry)
            return {};
        std::this_thread::sleep_for(pause);
        daemon_link again;
        std::string why;
        if (auto ec = attach_or_launch(paths_, daemon_args, timeout, again, why))
            return fail(ec, why);
        conn_.attach(std::move(again.control), settings_.daemon_timeout);
        if (again.child > 0)
            child_ = again.child;  // the old one exited meanwhile; we started this one
    }
}

std::error_code client::ready(const char* what)
{
    if (!initialized_)
        return fail(errc::not_initialized,
                    fmt::format("{} needs io_init first (or io_finalize was called)", what));
    if (conn_.broken())
        return conn_.broken_error();
    return {};
}

std::error_code client::write(std::uint64_t len, std::uint64_t& version)
{
    if (!initialized_)
        return fail(errc::not_initialized, "call io_init first (or io_finalize was called)");
    if (len == 0)
        return fail(errc::invalid_argument, "a write of 0 bytes");
    if (len > length_)
        return fail(errc::too_large,
                    fmt::format("a write of {} bytes, but io_init registered {} bytes", len,
                                length_));
    if (conn_.broken())
        return conn_.broken_error();
    // Only a write the daemon may read from the buffer itself (one larger
    // than a request carries: the mailbox may turn it down) holds the
    // collapse back, so that back-to-back small writes cannot starve it.
    const counted pause(writer_.travels_inline(len) ? nullptr : writing_.get());
    return writer_.write(buffer_, len, memory_.get(), version);
}

std::error_code client::init_files(std::uint32_t rank, std::uint32_t ranks, bool blocking,
                                  const run_info& run)
{
    files_only_ = true;
    return init(nullptr, 0, rank, ranks, nullptr, blocking, run);
}

std::error_code client::file_open(std::uint64_t file, const std::string& path)
{
    return writer_.file_open(file, path);
}

std::error_code client::file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                                   std::uint64_t len, std::vector<proto::file_run> runs)
{
    // The pager waits while the daemon may read the caller's memory.
    const counted pause(writer_.travels_inline(len) ? nullptr : writing_.get());
    return writer_.file_write(file, offset, data, len, std::move(runs));
}

void client::offer_huge_pages(const void* data, std::uint64_t len)
{
    // A forked child's copy of the client has no thread (and its mutex may
    // have been copied held): it leaves its pages alone.
    if (pager_refused_ || settings_.huge_pages == huge_pages_mode::off ||
        (pager_pid_ != 0 && pager_pid_ != ::getpid()))
        return;
    // The whole 2 MiB pages inside it, at least two (smaller writes gain
    // little).
    const huge_range r = whole_huge_pages(data, len);
    if (r.length < 2 * huge_page)
        return;
    std::lock_guard lock(pager_mutex_);
    if (!pager_.joinable()) {
        if (!kernel_can_collapse(r.begin)) {
            pager_refused_ = true;
            return;
        }
        try {
            pager_ = std::jthread([this, w = writing_](std::stop_token stop) {
                ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
                name_this_thread("iofwd-pager");
                std::unique_lock lock(pager_mutex_);
                while (pager_cv_.wait(lock, stop, [&] { return !pager_queue_.empty(); })) {
                    const auto [b, n] = pager_queue_.front();
                    pager_queue_.pop_front();
                    lock.unlock();
                    // Only MADV_COLLAPSE: no advice that would outlive the
                    // array on its memory, and a range the program keeps
                    // off huge pages (MADV_NOHUGEPAGE) is refused. So is
                    // memory it has unmapped since (ENOMEM); pages already
                    // huge cost a call each.
                    collapse({reinterpret_cast<void*>(b), n}, stop, w.get());
                    lock.lock();
                }
            });
            pager_pid_ = ::getpid();
        } catch (const std::system_error&) {
            pager_refused_ = true;
            return;
        }
    }
    const std::pair range{reinterpret_cast<std::uintptr_t>(r.begin), r.length};
    // A program writes the same arrays again and again: each once in the
    // queue, which stays short.
    if (std::find(pager_queue_.begin(), pager_queue_.end(), range) != pager_queue_.end())
        return;
    if (pager_queue_.size() >= 16)
        pager_queue_.pop_front();
    pager_queue_.push_back(range);
    pager_cv_.notify_one();
}

std::error_code client::file_sync(std::uint64_t file, std::uint32_t flags)
{
    return writer_.file_sync(file, flags);
}

std::error_code client::file_drain(const std::string& path)
{
    return writer_.file_drain(path);
}

std::error_code client::query(std::uint64_t version, bool wait, proto::version_state_msg& out)
{
    if (!initialized_)
        return fail(errc::not_initialized, "call io_init first (or io_finalize was called)");
    return conn_.query(version, wait, out);
}

bool client::known_durable(std::uint64_t version) const noexcept
{
    // Said by the daemon through the mailbox: every version of this run up
    // to durable_through is durable, and asking would only hear so.
    return initialized_ && version >= accept_.next_version && version <= writer_.last_written() &&
           version <= writer_.durable_through();
}

std::error_code client::wait(std::uint64_t version, proto::version_state_msg& out)
{
    if (known_durable(version)) {
        out = proto::version_state_msg{};
        out.version = version;
        out.state = proto::version_state_t::durable;
        return {};
    }
    proto::version_state_msg st;
    if (auto ec = query(version, true, st))
        return ec;
    if (st.state == proto::version_state_t::unknown)
        return fail(errc::not_found,
                    fmt::format("version {} was not written by rank {} through this daemon "
                                "(versions of this run start at {})",
                                version, rank_, accept_.next_version));
    out = st;
    return {};
}

std::error_code client::flush_span(std::uint64_t version, std::uint64_t& start_ns,
                                   std::uint64_t& durable_ns)
{
    proto::version_state_msg st;
    if (auto ec = query(version, false, st))
        return ec;
    using state = proto::version_state_t;
    if (st.state == state::unknown)
        return fail(errc::not_found, fmt::format("version {} was not written by rank {} in this run",
                                                 version, rank_));
    if (st.state != state::durable)
        return fail(errc::invalid_argument,
                    fmt::format("version {} of rank {} is not durable ({}): it has no flush span; "
                                "io_wait for it first",
                                version, rank_, st.state == state::failed ? "it failed" : "not yet"));
    start_ns = st.flush_start_ns;
    durable_ns = st.durable_ns;
    return {};
}

std::error_code client::test(std::uint64_t version, proto::version_state_t& out)
{
    if (known_durable(version)) {
        out = proto::version_state_t::durable;
        return {};
    }
    proto::version_state_msg st;
    if (auto ec = query(version, false, st))
        return ec;
    out = st.state;
    return {};
}

std::error_code client::read(std::uint64_t version, std::span<std::byte> out, std::uint64_t& size)
{
    if (!initialized_)
        return fail(errc::not_initialized, "io_read needs io_init (it reads this rank's data)");
    return reader_.read(here(), version, out, size);
}

std::error_code client::latest(bool verify, std::uint64_t& version)
{
    std::string skipped;
    if (auto ec = reader_.latest(here(), verify, version, skipped))
        return ec;
    why_ = skipped.empty() ? std::string() : "skipped damaged versions: " + skipped;
    return {};
}

std::error_code client::finalize()
{
    if (!initialized_)
        return fail(errc::not_initialized, "io_finalize without a successful io_init");
    std::error_code result;
    std::string why;
    std::uint32_t others = 0;
    if (conn_.broken()) {
        result = conn_.broken();
        why = fmt::format("the connection to the daemon was already broken: {}", why_);
    } else if (auto ec = conn_.send(proto::bye_msg{})) {
        result = ec;
        why = why_;
    } else {
        // However long the flush takes: the wait ends early only if the
        // daemon dies or falls silent (IOFWD_DAEMON_TIMEOUT).
        proto::message m;
        if (auto rec = conn_.receive(m, std::chrono::milliseconds(0))) {
            result = rec;
            why = why_;
        } else if (auto* e = std::get_if<proto::error_msg>(&m)) {
            result = e->code();
            why = fmt::format("the daemon says: {}", e->text);
        } else if (auto* f = std::get_if<proto::finished_msg>(&m)) {
            others = f->others;
        } else {
            result = errc::protocol_error;
            why = fmt::format("the daemon answered BYE with {}",
                              proto::to_string(proto::type_of(m)));
        }
    }
    const std::string ctx = context();
    const std::uint64_t last = writer_.last_written();
    release();
    initialized_ = false;
    // With one node the daemon's own exit status covers the commit; across
    // nodes only the store can tell.
    if (!result && last > 0 && settings_.nodes > 1) {
        if (auto ec = reader_.confirm_commit(here(), last, settings_, barrier_, barrier_ctx_, why))
            result = ec;
    }
    // The barrier belongs to this io_init: io_init_comm's frees its context
    // once passed, and a later io_init must not call it.
    barrier_ = nullptr;
    barrier_ctx_ = nullptr;
    reader_.close_store();
    if (child_ > 0 && !wait_for_daemon_) {
        child_ = -1;  // it exits by itself (after its idle timeout at the latest)
    } else if (child_ > 0) {
        // This rank launched the daemon: it waits for the daemon's exit, which
        // follows the node's other ranks' io_finalize. A rank that never calls
        // it (after an error) would hold this one forever, and through MPI's
        // own finalize the whole job: the wait is bounded, and the daemon is
        // left to finish by itself.
        int status = 0;
        const pid_t child = std::exchange(child_, -1);
        if (auto ec = wait_child(child, settings_.finalize_timeout, status)) {
            if (!result) {
                result = ec;
                why = fmt::format(
                    "the daemon (pid {}) still runs {} s after this rank finished{}: a rank that "
                    "skips io_finalize keeps it serving; it goes on by itself and exits after the "
                    "last rank is gone (IOFWD_FINALIZE_TIMEOUT; see its log {})",
                    child, settings_.finalize_timeout.count() / 1000.0,
                    others ? fmt::format(", serving {} other rank{} of this node that had not "
                                         "called io_finalize",
                                         others, others == 1 ? "" : "s")
                           : std::string(", finishing its work"),
                    paths_.log);
            }
        } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !result) {
            result = errc::daemon_failed;
            why = WIFEXITED(status)
                      ? fmt::format("the daemon (pid {}) exited with status {}: some data could "
                                    "not be made durable; see its log {}",
                                    child, WEXITSTATUS(status), paths_.log)
                      : fmt::format("the daemon (pid {}) was killed by signal {}; see its log {}",
                                    child, WTERMSIG(status), paths_.log);
        }
    }
    if (result)
        return fail(result, fmt::format("{} ({})", why, ctx));
    return {};
}

std::error_code client::detach()
{
    wait_for_daemon_ = false;
    const auto ec = finalize();
    wait_for_daemon_ = true;
    return ec;
}

}  // namespace iofwd::client

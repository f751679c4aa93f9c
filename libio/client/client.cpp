#include "client.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "fd_passing.hpp"
#include "format.hpp"
#include "launcher.hpp"
#include "settings.hpp"
#include "store/catalog.hpp"

namespace iofwd::client {
namespace {

using clock = std::chrono::steady_clock;

// Backs the 2 MiB-aligned interior of the buffer with transparent huge
// pages, now (MADV_COLLAPSE, Linux 6.1+) and for pages faulted later
// (MADV_HUGEPAGE). The daemon's cma read of the buffer then walks one page
// table entry per 2 MiB instead of per 4 KiB: 64-256 MiB read 6.8-7.6 ->
// 13.4-16.4 GB/s on this machine. Best effort: refused (old kernel, pinned
// pages, no memory) it changes nothing. IOFWD_HUGEPAGES=0 turns it off.
// True when the buffer is now backed by huge pages.
bool use_huge_pages(void* buffer, std::uint64_t len)
{
    constexpr std::uintptr_t huge = 2u << 20;
    const auto begin = (reinterpret_cast<std::uintptr_t>(buffer) + huge - 1) & ~(huge - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(buffer) + len) & ~(huge - 1);
    if (end <= begin)
        return false;
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
    return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_COLLAPSE) == 0;
}

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

void client::close_daemon_ep()
{
    if (!daemon_ep_)
        return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t p = ucp_ep_close_nbx(std::exchange(daemon_ep_, nullptr), &param);
    if (UCS_PTR_IS_PTR(p)) {
        const auto deadline = clock::now() + std::chrono::seconds(1);
        while (ucp_request_check_status(p) == UCS_INPROGRESS && clock::now() < deadline)
            worker_.progress();
        if (ucp_request_check_status(p) != UCS_INPROGRESS)
            ucp_request_free(p);
    }
}

void client::release()
{
    close_daemon_ep();
    memory_ = ucx::memory{};
    worker_ = ucx::worker{};
    context_ = ucx::context{};
    control_.reset();
    rx_.clear();
    passed_fds_.clear();
    mailbox_ = mailbox::writer{};
    doorbell_.reset();
    version_known_ = false;
    efd_ = -1;
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
    last_written_ = 0;
    eager_limit_ = std::min<std::uint64_t>(settings_.eager_limit, proto::max_eager);
    buffer_ = buffer;
    length_ = len;
    rank_ = rank;
    ranks_ = ranks;
    broken_ = {};
    next_cookie_ = 1;

    std::string why;
    if (auto ec = open_runtime(default_session(default_node_name()), paths_, why))
        return fail(ec, why);
    if (const char* log = std::getenv("IOFWD_LOG"); log && *log)
        paths_.log = log;  // where a daemon we launch logs (for messages)

    // Start (or find) the daemon before UCX exists in this process: the
    // launch never copies a process with registered memory.
    daemon_link link;
    const auto launch_timeout = settings_.launch_timeout;
    if (auto ec = attach_or_launch(paths_, daemon_args, launch_timeout, link, why))
        return fail(ec, why);
    control_ = std::move(link.control);
    child_ = link.child;
    ::fcntl(control_.get(), F_SETFL, ::fcntl(control_.get(), F_GETFL) | O_NONBLOCK);

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
    if (auto ec = ucx::context::create(features, "iofwd-rank", context_))
        return undo(ec, fmt::format("UCX initialisation failed: {}", ec.message()));
    if (auto ec = ucx::worker::create(context_, worker_))
        return undo(ec, fmt::format("UCX worker creation failed: {}", ec.message()));
    if (blocking_)
        if (auto ec = worker_.event_fd(efd_))
            return undo(ec, fmt::format("UCX gives no event fd: {}", ec.message()));
    bool huge = false;
    if (!files_only_) {
        huge = settings_.huge_pages && use_huge_pages(buffer_, length_);
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
    // push, unless the buffer has 4 KiB pages and the node's ranks and the
    // daemon fit in its cores.
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
    hello.job = default_job_name();
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
    const auto give_up = clock::now() + launch_timeout;
    for (auto pause = std::chrono::milliseconds(20);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
        // A daemon that dies between accepting the connection and answering
        // (killed just now: its socket still took us) is as good as none: try
        // again, and launch one if need be. So is a shared daemon still
        // finishing the last job's writes. Both within the launch timeout.
        std::error_code ec = send(hello);
        if (!ec)
            ec = receive(answer, launch_timeout);
        const bool retry = clock::now() + pause < give_up &&
                           (ec == errc::daemon_gone ||
                            (!ec && std::holds_alternative<proto::error_msg>(answer) &&
                             std::get<proto::error_msg>(answer).code() == errc::job_finishing));
        if (ec && !retry)
            return undo(ec, why_);
        if (!retry)
            break;
        broken_ = {};
        std::this_thread::sleep_for(pause);
        control_.reset();
        rx_.clear();
        passed_fds_.clear();
        daemon_link again;
        if (auto ec = attach_or_launch(paths_, daemon_args, launch_timeout, again, why))
            return undo(ec, why);
        control_ = std::move(again.control);
        if (again.child > 0)
            child_ = again.child;  // the old one exited meanwhile; we started this one
        ::fcntl(control_.get(), F_SETFL, ::fcntl(control_.get(), F_GETFL) | O_NONBLOCK);
    }
    if (auto* e = std::get_if<proto::error_msg>(&answer))
        return undo(e->code(), fmt::format("the daemon refused rank {}: {}", rank_, e->text));
    auto* a = std::get_if<proto::accept_msg>(&answer);
    if (!a)
        return undo(errc::protocol_error,
                    fmt::format("the daemon answered CONNECT with {}",
                                proto::to_string(proto::type_of(answer))));
    accept_ = std::move(*a);
    next_version_ = accept_.next_version;
    version_known_ = true;
    if (accept_.mailbox_bytes) {
        // ACCEPT brought the mailbox's memfd and the daemon's doorbell.
        if (passed_fds_.size() != 2)
            return undo(errc::protocol_error,
                        fmt::format("the daemon offered a mailbox with {} descriptors, not 2",
                                    passed_fds_.size()));
        std::string w;
        if (auto ec = mailbox::writer::open(passed_fds_[0].get(), accept_.mailbox_bytes, mailbox_, w))
            return undo(ec, w);
        doorbell_ = std::move(passed_fds_[1]);
    }
    passed_fds_.clear();
    if (push && !accept_.worker_address.empty()) {
        if (ucs_status_t st =
                ucx::connect(worker_.get(), accept_.worker_address, nullptr, nullptr, daemon_ep_);
            st != UCS_OK) {
            daemon_ep_ = nullptr;
            return undo(make_ucx_error(st), fmt::format("cannot reach the daemon over UCX: {}",
                                                        ucs_status_string(st)));
        }
    }
    initialized_ = true;
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
    if (broken_)
        return broken_error();
    if (version_known_ && mail(len, [&](std::uint64_t cookie, bool& ring) {
            return mailbox_.put(cookie, next_version_,
                                std::span(static_cast<const std::byte*>(buffer_), len), ring);
        })) {
        version = next_version_++;
        last_written_ = version;
        return {};
    }
    const std::uint64_t cookie = next_cookie_++;
    proto::write_req_msg req{cookie, len, {}};
    if (len <= eager_limit_) {
        // Small: the bytes travel in the request; no pull round trip.
        const auto* p = static_cast<const std::byte*>(buffer_);
        req.data.assign(p, p + len);
    }
    const push_source src{buffer_, len, memory_.get()};
    const bool pushed = req.data.empty() && daemon_ep_;
    proto::message m;
    if (auto ec = exchange(std::move(req), cookie, pushed ? &src : nullptr, m)) {
        version_known_ = false;
        return ec;
    }
    if (auto* d = std::get_if<proto::write_done_msg>(&m); d && d->cookie == cookie) {
        version = d->version;
        next_version_ = d->version + 1;
        version_known_ = true;
        last_written_ = version;
        return {};
    }
    version_known_ = false;
    return unexpected(m, fmt::format("WRITE_REQ {}", cookie));
}

client::control_state client::peek_control() const
{
    char c;
    const ssize_t n = ::recv(control_.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return control_state::unread;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return control_state::quiet;
    if (n < 0 && errno == EINTR)
        return control_state::unknown;
    return control_state::gone;
}

bool client::mail(std::uint64_t len, const std::function<bool(std::uint64_t, bool&)>& put)
{
    if (!mailbox_ || len == 0 || len > std::min<std::uint64_t>(eager_limit_, mailbox_.max_length()))
        return false;
    // No round trip: once the record is published the daemon holds the
    // bytes. The socket path instead when the mailbox is full, or when the
    // daemon is gone or said something (it then reports that). Looking
    // costs a system call, a third of the write: at most once per
    // millisecond. A daemon that died in between loses this write as it
    // would have lost it dying just after; the next wait or sync says so.
    const auto now = clock::now();
    if (now - socket_checked_ >= std::chrono::milliseconds(1)) {
        if (peek_control() != control_state::quiet)
            return false;
        socket_checked_ = now;
    }
    bool ring = false;
    if (!put(next_cookie_, ring))
        return false;
    ++next_cookie_;
    if (ring) {
        const std::uint64_t one = 1;
        // Cannot fail short of a bug; the daemon then finds the record
        // when the rank next says anything on the socket.
        [[maybe_unused]] const ssize_t w = ::write(doorbell_.get(), &one, sizeof one);
    }
    return true;
}

std::error_code client::push(std::uint64_t cookie, const void* data, std::uint64_t len,
                             ucp_mem_h memh, push_state& out)
{
    const std::uint64_t chunk = accept_.chunk_bytes ? accept_.chunk_bytes : len;
    out.headers.resize((len + chunk - 1) / chunk);
    for (std::uint64_t off = 0, i = 0; off < len; off += chunk, ++i) {
        proto::encode_push_header(proto::push_header{accept_.session, cookie, off},
                                  *reinterpret_cast<std::byte(*)[proto::push_header_size]>(
                                      out.headers[i].data()));
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_AM_SEND_FLAG_RNDV;
        if (memh) {
            param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
            param.memh = memh;
        }
        const auto* p = static_cast<const std::byte*>(data) + off;
        ucs_status_ptr_t r = ucp_am_send_nbx(daemon_ep_, proto::am_push, out.headers[i].data(),
                                             proto::push_header_size, p,
                                             std::min(chunk, len - off), &param);
        if (UCS_PTR_IS_ERR(r)) {
            const ucs_status_t st = UCS_PTR_STATUS(r);
            broken_ = make_ucx_error(st);
            return fail(broken_, fmt::format("pushing bytes [{}, {}) to the daemon failed: {}",
                                             off, std::min(len, off + chunk),
                                             ucs_status_string(st)));
        }
        if (UCS_PTR_IS_PTR(r))
            out.requests.push_back(r);
    }
    return {};
}

std::error_code client::exchange(proto::message request, std::uint64_t cookie,
                                 const push_source* src, proto::message& answer)
{
    if (auto ec = send(request))
        return ec;
    push_state pushed;
    if (src)
        if (auto ec = push(cookie, src->data, src->len, src->memh, pushed))
            return ec;
    // The bytes are the caller's again only once UCX is done with every chunk.
    const std::error_code ec = receive(answer, std::chrono::milliseconds(0),
                                       src ? polling::never : polling::moving);
    if (!ec)
        return wait_pushed(pushed);
    // The first failure is the one to report.
    const std::string why = why_;
    wait_pushed(pushed);
    why_ = why;
    return ec;
}

std::error_code client::wait_pushed(push_state& p)
{
    ucs_status_t first = UCS_OK;
    bool cancelled = false, stalled = false;
    auto gave_up = clock::now();
    auto last_activity = clock::now();
    while (!p.requests.empty()) {
        if (worker_.drain() > 0)
            last_activity = clock::now();
        std::erase_if(p.requests, [&](void* r) {
            const ucs_status_t st = ucp_request_check_status(r);
            if (st == UCS_INPROGRESS)
                return false;
            if (st != UCS_OK && first == UCS_OK)
                first = st;
            ucp_request_free(r);
            return true;
        });
        if (p.requests.empty())
            break;
        // A daemon that died never reads the rest, nor one that stopped
        // (nothing moved for the allowed silence): give up on them.
        const bool gone = peek_control() == control_state::gone;
        const bool silent = clock::now() - last_activity > settings_.daemon_timeout;
        if ((gone || silent) && !cancelled) {
            stalled = !gone;
            // Force-closing the endpoint completes its outstanding sends
            // (cancelled); a send UCX still holds after a second is left to
            // the worker's destruction.
            cancelled = true;
            broken_ = stalled ? errc::daemon_timeout : errc::daemon_gone;
            close_daemon_ep();
            gave_up = clock::now() + std::chrono::seconds(1);
        }
        if (cancelled && clock::now() > gave_up) {
            p.requests.clear();
            break;
        }
        if (!blocking_ || clock::now() - last_activity < std::chrono::milliseconds(2) || cancelled) {
            sched_yield();
            continue;
        }
        if (efd_ >= 0 && worker_.arm() == UCS_OK) {
            pollfd fd{efd_, POLLIN, 0};
            ::poll(&fd, 1, 10);  // also looks at the socket again every 10 ms
        }
    }
    if (cancelled && stalled)
        return fail(errc::daemon_timeout,
                    fmt::format("the daemon (pid {}) stopped reading our data for {} s (stopped "
                                "or hung; IOFWD_DAEMON_TIMEOUT); see {}",
                                accept_.daemon_pid, settings_.daemon_timeout.count() / 1000.0,
                                paths_.log));
    if (cancelled)
        return fail(errc::daemon_gone,
                    fmt::format("the daemon (pid {}) went away while it read our data; see {}",
                                accept_.daemon_pid, paths_.log));
    if (first != UCS_OK && !broken_)
        return fail(make_ucx_error(first),
                    fmt::format("the daemon did not take a pushed chunk: {}",
                                ucs_status_string(first)));
    return {};
}

std::error_code client::broken_error()
{
    static constexpr std::string_view lead = "the connection to the daemon is broken: ";
    if (why_.starts_with(lead))
        return broken_;
    return fail(broken_, std::string(lead) + why_);
}

std::error_code client::init_files(std::uint32_t rank, std::uint32_t ranks, bool blocking,
                                  const run_info& run)
{
    files_only_ = true;
    return init(nullptr, 0, rank, ranks, nullptr, blocking, run);
}

std::error_code client::file_request(proto::message m, std::uint64_t cookie,
                                     const std::string& what, const push_source* src)
{
    if (!initialized_)
        return fail(errc::not_initialized, "not connected to the daemon");
    if (broken_)
        return broken_error();
    proto::message answer;
    if (auto ec = exchange(std::move(m), cookie, src, answer))
        return ec;
    if (auto* d = std::get_if<proto::file_done_msg>(&answer); d && d->cookie == cookie)
        return {};
    if (auto* d = std::get_if<proto::write_done_msg>(&answer); d && d->cookie == cookie)
        return {};
    return unexpected(answer, what);
}

std::error_code client::file_open(std::uint64_t file, const std::string& path)
{
    const std::uint64_t cookie = next_cookie_++;
    return file_request(proto::file_open_msg{cookie, file, path}, cookie,
                        fmt::format("FILE_OPEN of {}", path));
}

std::error_code client::file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                                   std::uint64_t len)
{
    if (initialized_ && !broken_ && mail(len, [&](std::uint64_t cookie, bool& ring) {
            return mailbox_.put_file(cookie, file, offset,
                                     std::span(static_cast<const std::byte*>(data), len), ring);
        }))
        return {};
    const std::uint64_t cookie = next_cookie_++;
    proto::file_write_msg req{cookie, file, offset, len, 0, {}, {}};
    ucx::memory region;  // registered only while the daemon pulls
    const push_source src{data, len, nullptr};  // UCX registers what it pushes
    const bool pushed = len > eager_limit_ && daemon_ep_;
    if (len <= eager_limit_) {
        const auto* p = static_cast<const std::byte*>(data);
        req.data.assign(p, p + len);
    } else if (!pushed) {
        if (!initialized_)
            return fail(errc::not_initialized, "not connected to the daemon");
        // UCX registers memory it may read; the daemon only reads it.
        if (auto ec = ucx::memory::map(context_, const_cast<void*>(data), len, region))
            return fail(ec, fmt::format("registering {} at {} with UCX failed: {}",
                                        human_bytes(len), data, ec.message()));
        if (auto ec = region.pack_rkey(req.rkey))
            return fail(ec, fmt::format("packing a remote key: {}", ec.message()));
        req.address = reinterpret_cast<std::uint64_t>(data);
    }
    // Pushed: announced by this FILE_WRITE, the chunks follow over UCX.
    return file_request(std::move(req), cookie,
                        fmt::format("FILE_WRITE of {} bytes at {}", len, offset),
                        pushed ? &src : nullptr);
}

std::error_code client::file_sync(std::uint64_t file, std::uint32_t flags)
{
    const std::uint64_t cookie = next_cookie_++;
    return file_request(proto::file_sync_msg{cookie, file, flags}, cookie, "FILE_SYNC");
}

std::error_code client::file_drain(const std::string& path)
{
    const std::uint64_t cookie = next_cookie_++;
    return file_request(proto::file_drain_msg{cookie, path}, cookie,
                        fmt::format("FILE_DRAIN of {}", path));
}

std::error_code client::unexpected(const proto::message& m, const std::string& request)
{
    if (auto* e = std::get_if<proto::error_msg>(&m))
        return daemon_error(*e);
    broken_ = errc::protocol_error;
    return fail(errc::protocol_error, fmt::format("the daemon answered {} with {}", request,
                                                  proto::to_string(proto::type_of(m))));
}

std::error_code client::daemon_error(const proto::error_msg& e)
{
    if (e.cookie == 0)
        broken_ = e.code();
    return fail(e.code(), fmt::format("the daemon says: {}", e.text));
}

std::error_code client::query(std::uint64_t version, bool wait, proto::version_state_msg& out)
{
    if (!initialized_)
        return fail(errc::not_initialized, "call io_init first (or io_finalize was called)");
    if (broken_)
        return broken_error();
    const std::uint64_t cookie = next_cookie_++;
    if (auto ec = send(proto::query_msg{cookie, version, wait ? 1u : 0u}))
        return ec;
    proto::message m;
    if (auto ec = receive(m, std::chrono::milliseconds(0)))
        return ec;
    if (auto* st = std::get_if<proto::version_state_msg>(&m); st && st->cookie == cookie) {
        out = *st;
        return {};
    }
    return unexpected(m, "QUERY");
}

std::error_code client::wait(std::uint64_t version, proto::version_state_msg& out)
{
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
    proto::version_state_msg st;
    if (auto ec = query(version, false, st))
        return ec;
    out = st.state;
    return {};
}

std::error_code client::open_store(std::string& job)
{
    const std::string uri = initialized_ ? accept_.store_uri : env_or("IOFWD_STORE", "iofwd-store");
    job = initialized_ ? job_ : default_job_name();
    if (!store_ || uri != store_uri_) {
        std::string why;
        if (auto ec = store::open(uri, store_, why))
            return fail(ec, why);
        store_uri_ = uri;
    }
    return {};
}

std::error_code client::read(std::uint64_t version, std::span<std::byte> out, std::uint64_t& size)
{
    if (!initialized_)
        return fail(errc::not_initialized, "io_read needs io_init (it reads this rank's data)");
    proto::version_state_msg st;
    if (auto ec = query(version, false, st))
        return ec;
    if (st.state == proto::version_state_t::flushing) {
        if (st.size > out.size())
            return fail(errc::too_large,
                        fmt::format("version {} holds {} bytes, more than the {} byte buffer",
                                    version, st.size, out.size()));
        bool served = false;
        if (auto ec = read_staged(version, out, served, size))
            return ec;
        if (served)
            return {};
    }
    // From the store, once durable.
    if (st.state != proto::version_state_t::unknown && st.state != proto::version_state_t::durable)
        if (auto ec = query(version, true, st))
            return ec;
    std::string job;
    if (auto ec = open_store(job))
        return ec;
    std::uint64_t length = st.size;
    std::uint32_t crc = st.crc32c;
    if (st.state == proto::version_state_t::unknown) {
        // Not written in this run: the version must be complete job-wide.
        store::version_info info;
        std::string why;
        if (auto ec = store::load_version(*store_, job, version, info, why))
            return fail(ec == errc::not_found ? make_error_code(errc::not_found) : ec, why);
        const store::manifest_entry* entry = nullptr;
        for (const auto& m : info.manifests)
            if (m.node == accept_.node && rank_ < m.entries.size())
                entry = &m.entries[rank_];
        if (!entry)
            return fail(errc::not_found,
                        fmt::format("version {} of job {} holds no data for node {} rank {}",
                                    version, job, accept_.node, rank_));
        length = entry->size;
        crc = entry->crc32c;
    }
    const auto name = store::data_object(job, version, accept_.node, rank_);
    std::string why;
    if (auto ec = store::read_checked(*store_, name, length, crc, out, why))
        return fail(ec, fmt::format("version {}: {}", version, why));
    size = length;
    return {};
}

std::error_code client::read_staged(std::uint64_t version, std::span<std::byte> out, bool& served,
                                    std::uint64_t& size)
{
    const std::uint64_t cookie = next_cookie_++;
    if (auto ec = send(proto::read_req_msg{cookie, version}))
        return ec;
    std::uint64_t received = 0;
    for (;;) {
        proto::message m;
        if (auto ec = receive(m, std::chrono::milliseconds(0)))
            return ec;
        if (auto* d = std::get_if<proto::read_data_msg>(&m); d && d->cookie == cookie) {
            if (d->offset > out.size() || d->data.size() > out.size() - d->offset) {
                broken_ = errc::protocol_error;
                return fail(errc::protocol_error,
                            fmt::format("the daemon sent bytes [{}, {}) of version {} for a {} "
                                        "byte buffer",
                                        d->offset, d->offset + d->data.size(), version, out.size()));
            }
            std::memcpy(out.data() + d->offset, d->data.data(), d->data.size());
            received += d->data.size();
            continue;
        }
        if (auto* e = std::get_if<proto::version_state_msg>(&m); e && e->cookie == cookie) {
            served = e->state == proto::version_state_t::flushing;
            if (!served)
                return {};
            const std::uint32_t crc = crc32c(out.first(static_cast<std::size_t>(e->size)));
            if (received != e->size || crc != e->crc32c)
                return fail(errc::corrupt,
                            fmt::format("version {} read from daemon memory: {} of {} bytes, "
                                        "crc32c {:08x}, the daemon says {:08x}",
                                        version, received, e->size, crc, e->crc32c));
            size = e->size;
            return {};
        }
        return unexpected(m, "READ_REQ");
    }
}

std::error_code client::latest(bool verify, std::uint64_t& version)
{
    std::string job;
    if (auto ec = open_store(job))
        return ec;
    std::string skipped, why;
    if (auto ec = store::latest(*store_, job, verify, version, skipped, why))
        return fail(ec, why);
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
    if (broken_) {
        result = broken_;
        why = fmt::format("the connection to the daemon was already broken: {}", why_);
    } else if (auto ec = send(proto::bye_msg{})) {
        result = ec;
        why = why_;
    } else {
        // However long the flush takes: the wait ends early only if the
        // daemon dies or falls silent (IOFWD_DAEMON_TIMEOUT).
        proto::message m;
        if (auto rec = receive(m, std::chrono::milliseconds(0))) {
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
    release();
    initialized_ = false;
    // With one node the daemon's own exit status covers the commit; across
    // nodes only the store can tell.
    if (!result && last_written_ > 0 && settings_.nodes > 1) {
        if (auto ec = confirm_commit(why))
            result = ec;
    }
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

std::error_code client::confirm_commit(std::string& why)
{
    const auto timeout = settings_.finalize_timeout;
    if (barrier_) {
        // Every rank of the job reached this point: every node's manifests
        // are written, and with the last one the COMPLETE record.
        if (const int rc = barrier_(barrier_ctx_, static_cast<double>(timeout.count()) / 1000)) {
            why = fmt::format("the other ranks of the job did not all reach io_finalize within "
                              "{} s (IOFWD_FINALIZE_TIMEOUT): {}; version {} may be incomplete",
                              timeout.count() / 1000, std::strerror(rc), last_written_);
            return rc == ETIMEDOUT ? make_error_code(errc::daemon_timeout)
                                   : std::error_code(rc, std::system_category());
        }
    }
    std::string job;
    if (auto ec = open_store(job)) {
        why = why_;
        return ec;
    }
    // The other nodes' daemons may still be writing their part; a shared
    // file system may show their records a moment late.
    const auto deadline =
        barrier_ || timeout.count() == 0 ? clock::now() + std::chrono::seconds(5) : clock::now() + timeout;
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
        bool yes = false;
        std::string state;
        if (auto ec = store::committed(*store_, job, last_written_, yes, state)) {
            why = fmt::format("cannot tell whether version {} of job {} is complete: {}",
                              last_written_, job, ec.message());
            return ec;
        }
        if (yes)
            return {};
        if (clock::now() >= deadline) {
            why = fmt::format(
                "version {} of job {} is durable on this node but not complete job-wide: {}, "
                "the job has {} nodes; {}",
                last_written_, job, state, settings_.nodes,
                settings_.run.empty()
                    ? "without a run name each node's daemon numbered the versions from what it "
                      "found in the store, so nodes that started apart disagree: use "
                      "io_init_comm, or set IOFWD_RUN to one value per run on every node"
                    : fmt::format("the other nodes did not commit it within {} s "
                                  "(IOFWD_FINALIZE_TIMEOUT); see their daemons' logs",
                                  timeout.count() / 1000));
            return make_error_code(errc::incomplete);
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(250));
    }
}

std::error_code client::send(const proto::message& m)
{
    const auto bytes = proto::encode(m);
    const auto blocked_since = clock::now();
    std::size_t off = 0;
    while (off < bytes.size()) {
        const ssize_t n = ::send(control_.get(), bytes.data() + off, bytes.size() - off,
                                 MSG_NOSIGNAL);
        if (n > 0) {
            off += static_cast<std::size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            // The daemon reads nothing: bounded like any wait on it.
            if (clock::now() - blocked_since > settings_.daemon_timeout) {
                broken_ = errc::daemon_timeout;
                return fail(errc::daemon_timeout,
                            fmt::format("the daemon (pid {}) has read nothing of {} for {} s: "
                                        "it is stopped (SIGSTOP?) or hung; see its log {}",
                                        accept_.daemon_pid, proto::to_string(proto::type_of(m)),
                                        settings_.daemon_timeout.count() / 1000.0, paths_.log));
            }
            pollfd p{control_.get(), POLLOUT, 0};
            ::poll(&p, 1, 100);
            continue;
        }
        const auto ec = last_system_error();
        // A daemon that dropped this connection on purpose said why first.
        if (auto said = closing_words(); !said.text.empty()) {
            broken_ = said.code();
            return fail(said.code(),
                        fmt::format("the daemon (pid {}) closed the connection: {}",
                                    accept_.daemon_pid, said.text));
        }
        broken_ = errc::daemon_gone;
        return fail(errc::daemon_gone,
                    fmt::format("cannot send {} to the daemon (pid {}, socket {}): {}; it has "
                                "exited or was killed, see {}",
                                proto::to_string(proto::type_of(m)), accept_.daemon_pid,
                                paths_.socket, ec.message(), paths_.log));
    }
    return {};
}

proto::error_msg client::closing_words()
{
    // Whatever is still readable: an ERROR with cookie 0 ends a connection.
    for (;;) {
        std::byte buf[4096];
        const ssize_t n = receive_with_fds(control_.get(), buf, MSG_DONTWAIT, passed_fds_);
        if (n <= 0)
            break;
        rx_.insert(rx_.end(), buf, buf + n);
    }
    proto::message m;
    std::error_code ec;
    while (try_parse(m, ec) && !ec)
        if (auto* e = std::get_if<proto::error_msg>(&m); e && e->cookie == 0)
            return *e;
    return {};
}

bool client::try_parse(proto::message& out, std::error_code& ec)
{
    if (rx_.size() < proto::header_size)
        return false;
    proto::header h;
    std::string why;
    if ((ec = proto::decode_header(rx_, h, why))) {
        broken_ = ec;
        fail(ec, fmt::format("bad message from the daemon: {}", why));
        return true;
    }
    if (rx_.size() < proto::header_size + h.length)
        return false;
    const std::span<const std::byte> payload(rx_.data() + proto::header_size, h.length);
    if ((ec = proto::decode_payload(h, payload, out, why))) {
        broken_ = ec;
        fail(ec, fmt::format("bad message from the daemon: {}", why));
        return true;
    }
    rx_.erase(rx_.begin(), rx_.begin() + static_cast<std::ptrdiff_t>(proto::header_size + h.length));
    return true;
}

std::error_code client::receive(proto::message& out, std::chrono::milliseconds timeout,
                                polling poll)
{
    const auto start = clock::now();
    const auto deadline = start + timeout;
    // How long a blocking wait keeps polling after UCX last did something.
    static constexpr auto spin_window = std::chrono::milliseconds(2);
    // While the daemon moves our bytes, the request just sent counts as
    // activity: expect UCX traffic soon.
    auto last_activity = poll == polling::moving ? clock::now() : clock::time_point{};
    // A daemon that says nothing for half the allowed silence is asked
    // whether it is there (PING); one that does not answer that either is
    // stopped or hung: the wait ends instead of lasting forever.
    const auto silence = settings_.daemon_timeout;
    auto heard = start;
    bool pinged = false;
    for (;;) {
        std::error_code ec;
        if (try_parse(out, ec)) {
            if (!ec && std::holds_alternative<proto::pong_msg>(out)) {
                heard = clock::now();
                pinged = false;
                continue;
            }
            return ec;
        }
        std::byte buf[4096];
        // Descriptors come only with ACCEPT; any others are closed unused.
        const ssize_t n = receive_with_fds(control_.get(), buf, MSG_DONTWAIT, passed_fds_);
        if (n > 0) {
            rx_.insert(rx_.end(), buf, buf + n);
            heard = clock::now();
            pinged = false;
            continue;
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            const std::string how = n == 0 ? "closed the connection" : std::strerror(errno);
            broken_ = errc::daemon_gone;
            return fail(errc::daemon_gone,
                        fmt::format("the daemon (pid {}, socket {}) {}: it exited or was "
                                    "killed; its log is {}",
                                    accept_.daemon_pid, paths_.socket, how, paths_.log));
        }
        if (worker_.get() && worker_.drain() > 0 && poll != polling::never)
            last_activity = clock::now();
        const auto now = clock::now();
        if (now - heard >= silence) {
            broken_ = errc::daemon_timeout;
            return fail(errc::daemon_timeout,
                        fmt::format("the daemon (pid {}) has answered nothing for {} s, not even "
                                    "a heartbeat: it is stopped (SIGSTOP?), hung or starved of "
                                    "CPU; see its log {} (IOFWD_DAEMON_TIMEOUT)",
                                    accept_.daemon_pid, silence.count() / 1000.0, paths_.log));
        }
        if (!pinged && now - heard >= silence / 2 && accept_.daemon_pid != 0) {
            pinged = true;
            if (auto sec = send(proto::ping_msg{}))
                return sec;
        }
        // Sleep at most until the deadline or the next look at the silence.
        auto wake = heard + (pinged ? silence : silence / 2);
        if (timeout.count() > 0) {
            if (now >= deadline)
                return fail(errc::daemon_timeout,
                            fmt::format("no answer from the daemon (pid {}) within {} ms",
                                        accept_.daemon_pid, timeout.count()));
            wake = std::min(wake, deadline);
        }
        const int wait_ms = static_cast<int>(std::max<std::int64_t>(
            1, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count()));
        // Busy-poll; in blocking mode too while UCX was busy in the last
        // moments (the daemon is pulling from us: sleeping between its
        // requests stalls our replies). Hand the core over each round: on a
        // node with more processes than cores the daemon must get to run.
        if (worker_.get() && (!blocking_ || now - last_activity < spin_window)) {
            sched_yield();
            continue;
        }
        if (worker_.get() && efd_ >= 0) {
            const ucs_status_t st = worker_.arm();
            if (st == UCS_ERR_BUSY)
                continue;
        }
        pollfd fds[2] = {{control_.get(), POLLIN, 0}, {efd_, POLLIN, 0}};
        const int nfds = (worker_.get() && efd_ >= 0) ? 2 : 1;
        if (::poll(fds, static_cast<nfds_t>(nfds), wait_ms) < 0 && errno != EINTR)
            return fail(last_system_error(), "poll on the control socket failed");
    }
}

}  // namespace iofwd::client

#include "writer.hpp"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

#include "errors.hpp"
#include "format.hpp"

namespace iofwd::client {

using clock = std::chrono::steady_clock;

std::error_code writer::fail(std::error_code ec, std::string why)
{
    why_ = std::move(why);
    return ec;
}

std::error_code writer::open(setup s)
{
    accept_ = s.accept;
    worker_ = s.worker;
    context_ = s.context;
    efd_ = s.efd;
    blocking_ = s.blocking;
    eager_limit_ = s.eager_limit;
    silence_ = s.silence;
    next_version_ = accept_->next_version;
    version_known_ = true;
    last_written_ = 0;
    if (accept_->mailbox_bytes) {
        // ACCEPT brought the mailbox's memfd and the daemon's doorbell.
        if (s.fds.size() != 2)
            return fail(errc::protocol_error,
                        fmt::format("the daemon offered a mailbox with {} descriptors, not 2",
                                    s.fds.size()));
        std::string w;
        if (auto ec = mailbox::writer::open(s.fds[0].get(), accept_->mailbox_bytes, mailbox_, w))
            return fail(ec, w);
        doorbell_ = std::move(s.fds[1]);
    }
    if (s.push) {
        for (const auto& p : accept_->pullers) {
            ucx::endpoint ep;
            if (ucs_status_t st = ucx::endpoint::connect(worker_->get(), p.address, nullptr,
                                                         nullptr, ep);
                st != UCS_OK) {
                close_daemon_eps();
                return fail(make_ucx_error(st), fmt::format("cannot reach the daemon over UCX: {}",
                                                            ucs_status_string(st)));
            }
            daemon_eps_.push_back(std::move(ep));
        }
        // Each write starts at the rank's own puller: a write of one chunk
        // always goes there, and the node's ranks spread over the pullers.
        home_ep_ = daemon_eps_.empty() ? 0 : s.rank % daemon_eps_.size();
    }
    open_ = true;
    return {};
}

void writer::close()
{
    close_daemon_eps();
    mailbox_ = mailbox::writer{};
    doorbell_.reset();
    version_known_ = false;
    open_ = false;
}

std::error_code writer::write(const void* buffer, std::uint64_t len, ucp_mem_h memh,
                              std::uint64_t& version)
{
    if (version_known_ && mail(len, [&](std::uint64_t cookie, bool& ring) {
            return mailbox_.put(cookie, next_version_,
                                std::span(static_cast<const std::byte*>(buffer), len), ring);
        })) {
        version = next_version_++;
        last_written_ = version;
        return {};
    }
    const std::uint64_t cookie = conn_.next_cookie();
    proto::write_req_msg req{cookie, len, {}};
    if (len <= inline_limit()) {
        // Small: the bytes travel in the request; no pull round trip.
        const auto* p = static_cast<const std::byte*>(buffer);
        req.data.assign(p, p + len);
    }
    const push_source src{buffer, len, memh};
    const bool pushed = req.data.empty() && !daemon_eps_.empty();
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
    return conn_.unexpected(m, fmt::format("WRITE_REQ {}", cookie));
}

bool writer::mail(std::uint64_t len, const std::function<bool(std::uint64_t, bool&)>& put)
{
    if (!mailbox_ || len == 0 || len > mail_limit())
        return false;
    // No round trip: once the record is published the daemon holds the
    // bytes. The socket path instead when the mailbox is full, or when the
    // daemon is gone or said something (it then reports that). Looking
    // costs a system call, a third of the write: at most once per
    // millisecond. A daemon that died in between loses this write as it
    // would have lost it dying just after; the next wait or sync says so.
    const auto now = clock::now();
    if (now - socket_checked_ >= std::chrono::milliseconds(1)) {
        if (conn_.peek() != connection::state::quiet)
            return false;
        socket_checked_ = now;
    }
    bool ring = false;
    if (!put(conn_.next_cookie(), ring))
        return false;
    if (ring) {
        const std::uint64_t one = 1;
        // Cannot fail short of a bug; the daemon then finds the record
        // when the rank next says anything on the socket.
        [[maybe_unused]] const ssize_t w = ::write(doorbell_.get(), &one, sizeof one);
    }
    return true;
}

std::error_code writer::push(std::uint64_t cookie, const void* data, std::uint64_t len,
                             ucp_mem_h memh, push_state& out)
{
    const std::uint64_t chunk = accept_->chunk_bytes ? accept_->chunk_bytes : len;
    // ACCEPT's chunk size is the daemon's word: no count that wraps, and no
    // more chunks than a daemon takes in one write (staging.hpp).
    const std::uint64_t chunks = proto::chunks_of(len, chunk);
    if (chunks > proto::max_chunks_per_write)
        return fail(errc::protocol_error,
                    fmt::format("the daemon's chunk size ({} bytes) cuts a write of {} bytes into "
                                "{} chunks, more than {}",
                                chunk, len, chunks, proto::max_chunks_per_write));
    out.headers.resize(chunks);
    for (std::uint64_t off = 0, i = 0; off < len; off += chunk, ++i) {
        proto::encode_push_header(proto::push_header{accept_->session, cookie, off},
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
        ucx::endpoint& ep = daemon_eps_[(home_ep_ + i) % daemon_eps_.size()];
        ucs_status_ptr_t r = ucp_am_send_nbx(ep.get(), proto::am_push, out.headers[i].data(),
                                             proto::push_header_size, p,
                                             std::min(chunk, len - off), &param);
        if (UCS_PTR_IS_ERR(r)) {
            const ucs_status_t st = UCS_PTR_STATUS(r);
            conn_.set_broken(make_ucx_error(st));
            return fail(conn_.broken(), fmt::format("pushing bytes [{}, {}) to the daemon failed: {}",
                                             off, std::min(len, off + chunk),
                                             ucs_status_string(st)));
        }
        if (UCS_PTR_IS_PTR(r))
            out.requests.push_back(r);
    }
    return {};
}

std::error_code writer::exchange(proto::message request, std::uint64_t cookie,
                                 const push_source* src, proto::message& answer)
{
    if (auto ec = conn_.send(request))
        return ec;
    push_state pushed;
    if (src)
        if (auto ec = push(cookie, src->data, src->len, src->memh, pushed))
            return ec;
    // The bytes are the caller's again only once UCX is done with every chunk.
    const std::error_code ec = conn_.receive(answer, std::chrono::milliseconds(0),
                                             src ? connection::polling::never
                                                 : connection::polling::moving);
    if (!ec)
        return wait_pushed(pushed);
    // The first failure is the one to report.
    const std::string why = why_;
    wait_pushed(pushed);
    why_ = why;
    return ec;
}

std::error_code writer::wait_pushed(push_state& p)
{
    ucs_status_t first = UCS_OK;
    bool cancelled = false, stalled = false;
    auto gave_up = clock::now();
    auto last_activity = clock::now();
    while (!p.requests.empty()) {
        if (worker_->drain() > 0)
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
        const bool gone = conn_.peek() == connection::state::gone;
        const bool silent = clock::now() - last_activity > silence_;
        if ((gone || silent) && !cancelled) {
            stalled = !gone;
            // Force-closing the endpoint completes its outstanding sends
            // (cancelled); a send UCX still holds after a second is left to
            // the worker's destruction.
            cancelled = true;
            conn_.set_broken(stalled ? errc::daemon_timeout : errc::daemon_gone);
            close_daemon_eps();
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
        if (efd_ >= 0 && worker_->arm() == UCS_OK) {
            pollfd fd{efd_, POLLIN, 0};
            ::poll(&fd, 1, 10);  // also looks at the socket again every 10 ms
        }
    }
    if (cancelled && stalled)
        return fail(errc::daemon_timeout,
                    fmt::format("the daemon (pid {}) stopped reading our data for {} s (stopped "
                                "or hung; IOFWD_DAEMON_TIMEOUT); see {}",
                                accept_->daemon_pid, silence_.count() / 1000.0,
                                conn_.log()));
    if (cancelled)
        return fail(errc::daemon_gone,
                    fmt::format("the daemon (pid {}) went away while it read our data; see {}",
                                accept_->daemon_pid, conn_.log()));
    if (first != UCS_OK && !conn_.broken())
        return fail(make_ucx_error(first),
                    fmt::format("the daemon did not take a pushed chunk: {}",
                                ucs_status_string(first)));
    return {};
}

void writer::close_daemon_eps()
{
    // Forced: the sends still on them are cancelled; wait (a second at most)
    // for the closes, progressing the worker, so that they complete.
    std::vector<void*> closing;
    for (auto& ep : daemon_eps_)
        if (void* p = ep.close(ucx::endpoint::mode::force))
            closing.push_back(p);
    daemon_eps_.clear();
    const auto deadline = clock::now() + std::chrono::seconds(1);
    for (void* p : closing) {
        while (ucp_request_check_status(p) == UCS_INPROGRESS && clock::now() < deadline)
            worker_->progress();
        // Given back even when still under way (it goes on inside UCX): one
        // never given back makes UCX 1.13 abort the process in
        // ucp_worker_destroy.
        ucp_request_free(p);
    }
}

std::error_code writer::file_request(proto::message m, std::uint64_t cookie,
                                     const std::string& what, const push_source* src)
{
    if (!open_)
        return fail(errc::not_initialized, "not connected to the daemon");
    if (conn_.broken())
        return conn_.broken_error();
    proto::message answer;
    if (auto ec = exchange(std::move(m), cookie, src, answer))
        return ec;
    if (auto* d = std::get_if<proto::file_done_msg>(&answer); d && d->cookie == cookie)
        return {};
    if (auto* d = std::get_if<proto::write_done_msg>(&answer); d && d->cookie == cookie)
        return {};
    return conn_.unexpected(answer, what);
}

std::error_code writer::file_open(std::uint64_t file, const std::string& path)
{
    const std::uint64_t cookie = conn_.next_cookie();
    return file_request(proto::file_open_msg{cookie, file, path}, cookie,
                        fmt::format("FILE_OPEN of {}", path));
}

std::error_code writer::file_write(std::uint64_t file, std::uint64_t offset, const void* data,
                                   std::uint64_t len, std::vector<proto::file_run> runs)
{
    // A mailbox record is one run; a list of them goes in the request.
    if (runs.size() == 1)
        runs.clear();
    if (runs.empty() && open_ && !conn_.broken() && mail(len, [&](std::uint64_t cookie, bool& ring) {
            return mailbox_.put_file(cookie, file, offset,
                                     std::span(static_cast<const std::byte*>(data), len), ring);
        }))
        return {};
    const std::uint64_t cookie = conn_.next_cookie();
    proto::file_write_msg req{cookie, file, offset, len, 0, {}, {}, std::move(runs)};
    ucx::memory region;  // registered only while the daemon pulls
    const push_source src{data, len, nullptr};  // UCX registers what it pushes
    const bool pushed = len > inline_limit() && !daemon_eps_.empty();
    if (len <= inline_limit()) {
        const auto* p = static_cast<const std::byte*>(data);
        req.data.assign(p, p + len);
    } else if (!pushed) {
        if (!open_)
            return fail(errc::not_initialized, "not connected to the daemon");
        // UCX registers memory it may read; the daemon only reads it.
        if (auto ec = ucx::memory::map(*context_, const_cast<void*>(data), len, region))
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

std::error_code writer::file_sync(std::uint64_t file, std::uint32_t flags)
{
    const std::uint64_t cookie = conn_.next_cookie();
    return file_request(proto::file_sync_msg{cookie, file, flags}, cookie, "FILE_SYNC");
}

std::error_code writer::file_drain(const std::string& path)
{
    const std::uint64_t cookie = conn_.next_cookie();
    return file_request(proto::file_drain_msg{cookie, path}, cookie,
                        fmt::format("FILE_DRAIN of {}", path));
}

}  // namespace iofwd::client

// One rank's connection (session.hpp). About 470 lines: on_connect checks a
// peer's CONNECT field by field before UCX sees anything of it, and the
// endpoint's close and FINISHED follow it; the work itself is in the parts
// (checkpoint_writes, file_writes, write_path, mailbox_intake).
#include "session.hpp"

#include <unistd.h>

#include <chrono>

#include <fmt/format.h>

#include "daemon.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "protocol.hpp"
#include "puller.hpp"
#include "staging.hpp"

namespace iofwd::iod {

session::session(daemon& d, connection::socket_type sock, std::uint64_t id,
                 std::uint64_t push_key, int peer_pid)
    : d_(d), conn_(std::move(sock)), id_(id), push_key_(push_key), peer_pid_(peer_pid),
      close_timer_(d.loop().get_executor())
{
}

session::~session()
{
    release_close_request();
    if (ep_)
        close_endpoint(true);
}

std::string session::who() const
{
    if (hello_)
        return fmt::format("rank {}/{} (pid {})", hello_->rank, hello_->ranks, hello_->pid);
    return fmt::format("connection {} (pid {})", id_, peer_pid_);
}

boost::asio::io_context& session::loop() noexcept
{
    return d_.loop();
}

transfer_resources session::resources() noexcept
{
    return d_.resources();
}

void session::changed()
{
    d_.changed();
}

void session::enter(state next)
{
    // The transitions of the diagram in session.hpp, and no others.
    const bool allowed = [&] {
        switch (next) {
        case state::serving: return state_ == state::greeting;
        case state::bye: return state_ == state::serving;
        case state::finishing: return state_ == state::bye;
        case state::finished: return state_ == state::finishing;
        case state::gone: return !ended();
        case state::greeting: return false;
        }
        return false;
    }();
    if (!allowed) {
        log_error("{}: internal error: session state {} -> {} is not a transition",
                  who(), static_cast<int>(state_), static_cast<int>(next));
        return;
    }
    state_ = next;
}

void session::start()
{
    conn_.start(weak_from_this());
}

void session::received(proto::message m)
{
    // A heartbeat is answered at once, even while requests wait.
    if (std::holds_alternative<proto::ping_msg>(m)) {
        send(proto::pong_msg{});
        return;
    }
    if (intake_.admit(m))
        dispatch(m);
}

void session::malformed(std::error_code ec, std::string why)
{
    fail(ec, std::move(why));
}

void session::dispatch(proto::message& m)
{
    switch (proto::type_of(m)) {
    case proto::msg_type::connect: on_connect(std::get<proto::connect_msg>(m)); return;
    case proto::msg_type::write_req:
        checkpoints_.on_write_req(std::get<proto::write_req_msg>(m));
        return;
    case proto::msg_type::bye: on_bye(); return;
    case proto::msg_type::query: checkpoints_.on_query(std::get<proto::query_msg>(m)); return;
    case proto::msg_type::read_req: checkpoints_.on_read_req(std::get<proto::read_req_msg>(m)); return;
    case proto::msg_type::file_open: files_.on_file_open(std::get<proto::file_open_msg>(m)); return;
    case proto::msg_type::file_write: files_.on_file_write(std::get<proto::file_write_msg>(m)); return;
    case proto::msg_type::file_sync: files_.on_file_sync(std::get<proto::file_sync_msg>(m)); return;
    case proto::msg_type::file_drain: files_.on_file_drain(std::get<proto::file_drain_msg>(m)); return;
    case proto::msg_type::status: on_status(); return;
    default:
        fail(errc::protocol_error,
             fmt::format("{} is a message the daemon sends, not one it accepts",
                         proto::to_string(proto::type_of(m))));
    }
}

bool session::may_ask(const char* request, std::uint64_t cookie)
{
    if (!admitted()) {
        fail(errc::protocol_error, fmt::format("{} before CONNECT", request));
        return false;
    }
    if (cookie == 0) {
        fail(errc::protocol_error, fmt::format("{} with cookie 0", request));
        return false;
    }
    return true;
}

bool session::well_formed(const char* request, std::uint64_t cookie)
{
    if (!may_ask(request, cookie))
        return false;
    if (state_ != state::serving) {
        fail(errc::protocol_error, fmt::format("{} after BYE", request));
        return false;
    }
    return true;
}

bool session::may_write(const char* request, std::uint64_t cookie)
{
    if (!well_formed(request, cookie))
        return false;
    if (writes_.busy()) {
        fail(errc::protocol_error, fmt::format("{} {} while write {} is still being pulled",
                                               request, cookie, writes_.current_cookie()));
        return false;
    }
    return true;
}

void session::on_status()
{
    if (state_ != state::greeting) {
        fail(errc::protocol_error,
             "STATUS on a rank's connection (it is asked alone, on a connection of its own)");
        return;
    }
    // Quietly: `iofwd status --watch` asks every few seconds.
    log_debug("status asked by pid {}", peer_pid_);
    send(d_.status());
    conn_.close_after_queue();
    intake_.close();
    enter(state::gone);
    changed();
}

bool session::describe(proto::status_rank& out) const
{
    if (!admitted())
        return false;
    static constexpr auto unreachable = proto::rank_state_t::gone;
    proto::status_rank r;
    r.rank = hello_->rank;
    r.pid = hello_->pid;
    r.flags = hello_->flags;
    r.state = [&] {
        switch (state_) {
        case state::greeting: return unreachable;  // not admitted yet
        case state::serving: return proto::rank_state_t::serving;
        case state::bye: return proto::rank_state_t::bye;
        case state::finishing: return proto::rank_state_t::finishing;
        case state::finished: return proto::rank_state_t::finished;
        case state::gone: return proto::rank_state_t::gone;
        }
        return unreachable;
    }();
    r.versions = checkpoints_.versions().durable_count();
    r.bytes = checkpoints_.versions().durable_bytes();
    out = r;
    return true;
}

void session::on_connect(proto::connect_msg& m)
{
    d_.rank_arrived();
    if (state_ != state::greeting) {
        fail(errc::protocol_error, "CONNECT sent twice on one connection");
        return;
    }
    if (!valid_name(m.job)) {
        fail(errc::invalid_argument,
             fmt::format("job name '{}' is not usable (letters, digits, '.', '_', '-')", m.job));
        return;
    }
    if (!m.run.empty() && !valid_name(m.run)) {
        fail(errc::invalid_argument,
             fmt::format("run name '{}' is not usable (letters, digits, '.', '_', '-')", m.run));
        return;
    }
    const bool files_only = m.flags & proto::connect_flag_files;
    if (m.buffer_length == 0 && !files_only) {
        fail(errc::invalid_argument, "the registered buffer is empty");
        return;
    }
    if (m.buffer_length > d_.stage().max_write()) {
        fail(errc::too_large,
             fmt::format("a registered buffer of {} bytes is more than one write may be here "
                         "({}: {} chunks of {}; a larger IOFWD_CHUNK_SIZE allows more)",
                         m.buffer_length, human_bytes(d_.stage().max_write()),
                         proto::max_chunks_per_write, human_bytes(d_.stage().slot_size())));
        return;
    }
    std::string why;
    if (m.nodes > 100000) {
        fail(errc::invalid_argument, fmt::format("{} nodes is not a plausible job", m.nodes));
        return;
    }
    // UCX must not see the peer's bytes before they are known to be usable.
    if (!d_.peers().usable(m.worker_address, m.rkey, why)) {
        fail(errc::protocol_error,
             fmt::format("the worker address or remote key of connection {} (pid {}): {}", id_,
                         peer_pid_, why));
        return;
    }
    std::uint64_t first = 0;
    if (auto ec = d_.admit(*this, m, first, why)) {
        fail(ec, why);
        return;
    }
    d_.rank_admitted();
    hello_ = std::move(m);
    checkpoints_.first_version(first);
    enter(state::serving);
    const auto& hello = *hello_;

    // A dead rank is detected by its control socket closing, and its endpoint
    // is then force-closed; UCX 1.13 does not cancel every pull still
    // outstanding then (transfer::source_gone).
    ucs_status_t st = ucx::endpoint::connect(d_.worker().get(), hello.worker_address,
                                             &session::ep_error, this, ep_);
    if (st != UCS_OK) {
        fail(make_ucx_error(st),
             fmt::format("cannot reach {} over UCX: {}", who(), ucs_status_string(st)));
        return;
    }
    if (!hello.rkey.empty()) {
        if (auto ec = ucx::rkey::unpack(ep_.get(), hello.rkey, rkey_)) {
            fail(ec, fmt::format("the remote key of {} does not unpack: {}", who(), ec.message()));
            return;
        }
    }
    d_.kick();

    proto::accept_msg a;
    a.daemon_pid = static_cast<std::uint32_t>(getpid());
    a.staging_bytes = d_.stage().total();
    a.chunk_bytes = d_.stage().slot_size();
    a.next_version = checkpoints_.next_version();
    a.node = d_.opts().node;
    a.store = d_.store().describe() + "/" + hello.job;
    a.store_uri = d_.store().location();
    a.transport = ucx::endpoint_transports(ep_.get());
    a.session = push_key_;
    if (hello.flags & proto::connect_flag_push) {
        // The rank spreads its chunks over the pullers, each copying on a
        // thread of its own; without pullers, the loop's worker copies.
        for (const auto& p : d_.pullers()) {
            a.pullers.push_back({p->address()});
            p->connect(push_key_, hello.worker_address, who());
        }
        pullers_connected_ = !d_.pullers().empty();
        if (a.pullers.empty()) {
            a.pullers.emplace_back();
            if (auto ec = d_.worker().address(a.pullers.back().address)) {
                fail(ec, fmt::format("the daemon's UCX worker address: {}", ec.message()));
                return;
            }
        }
    }
    unique_fd memfd;
    int doorbell = -1;
    if ((hello.flags & proto::connect_flag_mailbox) && d_.opts().mailbox_bytes > 0) {
        const auto area = mailbox::area_for(d_.opts().mailbox_bytes);
        intake_.open(area, memfd, doorbell);
        if (intake_)
            a.mailbox_bytes = area;
    }
    log_info("connect job {}{} {} buffer {} transport {} next version {}{}", hello.job,
             hello.run.empty() ? std::string() : " run " + hello.run, who(),
             human_bytes(hello.buffer_length), a.transport, a.next_version,
             memfd ? fmt::format(", mailbox {}", human_bytes(d_.opts().mailbox_bytes))
                   : std::string());
    if (!memfd) {
        send(a);
        return;
    }
    if (!conn_.send_with_fds(a, {memfd.get(), doorbell}, why))
        lost(why);
}

std::string session::mail_problem(const mailbox::reader::record& r) const
{
    return r.to_file ? files_.mail_problem(r) : checkpoints_.mail_problem(r);
}

void session::start_mail(mailbox::reader::record& r)
{
    if (r.to_file)
        files_.from_mail(r);
    else
        checkpoints_.from_mail(r);
}

void session::mail_drained()
{
    if (close_files_later_) {
        close_files_later_ = false;
        files_.close_all();
    }
    if (ended())
        changed();
}

transfer::source session::source(bool push, ucp_rkey_h rkey, std::uint64_t address) const
{
    // The process whose exit frees a pull UCX never completed: the socket's
    // peer, and only when it is the process the CONNECT says it is.
    const int pid = hello_ && static_cast<int>(hello_->pid) == peer_pid_ ? peer_pid_ : 0;
    transfer::source src{ep_.get(), rkey, address, push, push_key_, pid};
    // Claims only where the rank's chunks reach a puller that holds an
    // endpoint to it (pushed()).
    if (push && pullers_connected_)
        src.claims = &d_.claims();
    return src;
}

std::error_code session::unpack_key(std::span<const std::byte> packed, ucx::rkey& out) const
{
    return ucx::rkey::unpack(ep_.get(), packed, out);
}

void session::give_back(pushed_chunk p)
{
    iod::give_back(p, d_.worker(), d_.driver(), push_key_);
}

ucs_status_t session::pushed(pushed_chunk p, std::uint64_t cookie, std::uint64_t offset,
                             std::uint64_t length)
{
    // Only from a worker the rank was given: a puller while they are
    // connected to it (each holds an endpoint to the rank, so the chunk is
    // received or given back there), the loop's worker when there are none.
    const bool given = p.via ? pullers_connected_ : d_.pullers().empty();
    if (!admitted() || ended() || !(hello_->flags & proto::connect_flag_push) || !given)
        return UCS_ERR_CANCELED;
    return writes_.pushed(cookie, offset, length, p);
}

void session::remember_failure(std::error_code ec, const std::string& why)
{
    if (ec && !durable_error_) {
        durable_error_ = ec;
        durable_why_ = why;
    }
}

void session::on_bye()
{
    if (!admitted()) {
        fail(errc::protocol_error, "BYE before CONNECT");
        return;
    }
    if (state_ != state::serving) {
        fail(errc::protocol_error, "BYE sent twice");
        return;
    }
    enter(state::bye);
    files_.close_all();
    maybe_finish();
}

void session::each_transfer(const std::function<void(const transfer&)>& fn) const
{
    checkpoints_.versions().each_in_flight([&](const std::shared_ptr<transfer>& t) { fn(*t); });
    if (writes_.current_is_file())
        fn(*writes_.current());  // a forwarded file's write
}

void session::maybe_finish()
{
    if (state_ != state::bye || !conn_.open() || active_ > 0)
        return;
    // Its versions are all with the job now and it waits for them to
    // complete: once every rank of the node is this far, the node's batch
    // is packed at once, not after a pause.
    d_.job().rank_leaving(rank());
    if (d_.job().catalog_pending())
        return;
    enter(state::finishing);
    // Release the endpoint while the rank still progresses its worker (it is
    // waiting for FINISHED), then answer.
    close_endpoint(false);
}

void session::close_endpoint(bool force)
{
    if (pullers_connected_) {
        pullers_connected_ = false;
        for (const auto& p : d_.pullers())
            p->disconnect(push_key_);
    }
    if (!ep_) {
        finish_closing();
        return;
    }
    rkey_ = ucx::rkey{};
    if (force) {
        // Not waited for: given back at once (the cancelled operations
        // complete through progress).
        if (void* request = ep_.close(ucx::endpoint::mode::force))
            ucp_request_free(request);
        d_.kick();
        return;
    }
    auto* weak = new std::weak_ptr<session>(weak_from_this());
    void* request = ep_.close(ep_failed_ ? ucx::endpoint::mode::force : ucx::endpoint::mode::flush,
                              &session::ep_closed, weak);
    d_.kick();
    if (!request) {
        delete weak;
        finish_closing();
        return;
    }
    close_request_ = request;
    close_weak_ = weak;
    // Do not let a peer that stopped progressing hold FINISHED back forever.
    close_timer_.expires_after(std::chrono::seconds(5));
    close_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
        if (ec)
            return;
        if (auto self = weak.lock()) {
            log_warn("{}: endpoint close did not complete in 5 s; answering anyway", self->who());
            self->release_close_request();
            self->finish_closing();
        }
    });
}

void session::release_close_request() noexcept
{
    if (!close_request_)
        return;
    ucp_request_free(close_request_);
    delete close_weak_;
    close_request_ = nullptr;
    close_weak_ = nullptr;
}

void session::ep_closed(void* request, ucs_status_t, void* user_data)
{
    // Runs on the loop's thread (its worker's progress), as the timer does.
    auto* weak = static_cast<std::weak_ptr<session>*>(user_data);
    ucp_request_free(request);
    if (auto self = weak->lock()) {
        self->close_request_ = nullptr;
        self->close_weak_ = nullptr;
        self->close_timer_.cancel();
        self->finish_closing();
    }
    delete weak;
}

void session::finish_closing()
{
    if (state_ != state::finishing)
        return;
    enter(state::finished);
    remember_failure(d_.job().manifest_error(),
                     "a version manifest could not be written (see the daemon log)");
    const auto& versions = checkpoints_.versions();
    if (conn_.open()) {
        if (durable_error_) {
            send(proto::error_msg::from(durable_error_,
                                        fmt::format("rank {}: not everything it wrote is durable: "
                                                    "{}",
                                                    hello_->rank, durable_why_)));
        } else {
            send(proto::finished_msg{versions.durable_count(), versions.durable_bytes(),
                                     d_.job().unfinished_ranks(hello_->rank)});
        }
        conn_.close_after_queue();
    }
    log_info("bye job {} {}: {} versions, {} durable{}", hello_->job, who(),
             versions.durable_count(), human_bytes(versions.durable_bytes()),
             durable_error_ ? " (with errors)" : "");
    d_.session_ended(*this, true);
}

void session::ep_error(void* arg, ucp_ep_h, ucs_status_t status)
{
    auto* self = static_cast<session*>(arg);
    self->ep_failed_ = true;
    log_warn("{}: UCX endpoint failed: {}", self->who(), ucs_status_string(status));
}

void session::fail(std::error_code ec, std::string why)
{
    log_error("{}: {} ({})", who(), why, ec.message());
    if (conn_.open() && !conn_.closing()) {
        send(proto::error_msg::from(ec, why));
        conn_.close_after_queue();
    }
    lost("dropped after an error");
}

void session::lost(std::string why)
{
    // Writes the rank left in its mailbox are taken (io_write returned for
    // them); nothing it publishes from now on is.
    intake_.close();
    const bool was_open = conn_.open();
    conn_.close();
    if (ended())
        return;
    if (was_open && admitted())
        log_warn("disconnect job {} {} without BYE: {}", hello_->job, who(), why);
    else if (was_open)
        log_info("disconnect {}: {}", who(), why);
    enter(state::gone);
    // The version being pulled is discarded; versions already pulled are kept,
    // and so is one from the mailbox (its bytes are here).
    writes_.source_gone();
    writes_.release_early(0);
    // Files stay open for writes still in the mailbox: closed once those are
    // taken (mail_drained).
    if (intake_.pending() || writes_.file_from_mail())
        close_files_later_ = true;
    else
        files_.close_all();
    if (ep_)
        close_endpoint(true);
    d_.session_ended(*this, false);
}

void session::shut_down()
{
    if (ended() || !conn_.open())
        return;
    if (!intake_.take() || active_ > 0)
        return;  // asked again when the last transfer finishes
    fail(errc::shutting_down, "the daemon is shutting down (signal)");
}

}  // namespace iofwd::iod

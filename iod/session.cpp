#include "session.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "crc32c.hpp"
#include "daemon.hpp"
#include "errors.hpp"
#include "fd_passing.hpp"
#include "format.hpp"
#include "files.hpp"
#include "store/layout.hpp"
#include "log.hpp"
#include "transfer.hpp"

namespace asio = boost::asio;

namespace iofwd::iod {

session::session(daemon& d, socket_type sock, std::uint64_t id, int peer_pid)
    : d_(d), sock_(std::move(sock)), id_(id), peer_pid_(peer_pid),
      close_timer_(sock_.get_executor())
{
}

session::~session()
{
    if (ep_)
        close_endpoint(true);
}

std::string session::who() const
{
    if (admitted_)
        return fmt::format("rank {}/{} (pid {})", hello_.rank, hello_.ranks, hello_.pid);
    return fmt::format("connection {} (pid {})", id_, peer_pid_);
}

void session::start()
{
    read_header();
}

void session::read_header()
{
    in_.resize(proto::header_size);
    asio::async_read(sock_, asio::buffer(in_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                         if (ec) {
                             self->socket_closed(ec == asio::error::eof ? "closed the connection"
                                                                        : ec.message());
                             return;
                         }
                         std::string why;
                         if (auto err = proto::decode_header(self->in_, self->header_, why)) {
                             self->fail(err, why);
                             return;
                         }
                         self->read_payload();
                     });
}

void session::read_payload()
{
    in_.resize(header_.length);
    asio::async_read(sock_, asio::buffer(in_),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                         if (ec) {
                             self->socket_closed(ec == asio::error::eof
                                                     ? "closed the connection mid-message"
                                                     : ec.message());
                             return;
                         }
                         proto::message m;
                         std::string why;
                         if (auto err = proto::decode_payload(self->header_, self->in_, m, why)) {
                             self->fail(err, why);
                             return;
                         }
                         self->received(std::move(m));
                         if (self->socket_open_ && !self->close_after_write_)
                             self->read_header();
                     });
}

void session::received(proto::message m)
{
    // A heartbeat is answered at once, even while requests wait.
    if (std::holds_alternative<proto::ping_msg>(m)) {
        send(proto::pong_msg{});
        return;
    }
    // The rank published its mailbox records before it sent this: they go
    // first (mail_progress dispatches what waits here).
    if (!deferred_.empty() || !take_mail()) {
        // A rank has one request out at a time, plus heartbeats.
        static constexpr std::size_t max_waiting = 16;
        if (deferred_.size() >= max_waiting) {
            fail(errc::protocol_error,
                 fmt::format("{} requests sent without waiting for answers", max_waiting));
            return;
        }
        deferred_.push_back(std::move(m));
        return;
    }
    dispatch(m);
}

void session::dispatch(proto::message& m)
{
    switch (proto::type_of(m)) {
    case proto::msg_type::connect: on_connect(std::get<proto::connect_msg>(m)); return;
    case proto::msg_type::write_req: on_write_req(std::get<proto::write_req_msg>(m)); return;
    case proto::msg_type::bye: on_bye(); return;
    case proto::msg_type::query: on_query(std::get<proto::query_msg>(m)); return;
    case proto::msg_type::read_req: on_read_req(std::get<proto::read_req_msg>(m)); return;
    case proto::msg_type::file_open: on_file_open(std::get<proto::file_open_msg>(m)); return;
    case proto::msg_type::file_write: on_file_write(std::get<proto::file_write_msg>(m)); return;
    case proto::msg_type::file_sync: on_file_sync(std::get<proto::file_sync_msg>(m)); return;
    case proto::msg_type::file_drain: on_file_drain(std::get<proto::file_drain_msg>(m)); return;
    default:
        fail(errc::protocol_error,
             fmt::format("{} is a message the daemon sends, not one it accepts",
                         proto::to_string(proto::type_of(m))));
    }
}

void session::on_connect(proto::connect_msg& m)
{
    if (admitted_) {
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
    if (auto ec = d_.admit(*this, m, next_version_, why)) {
        fail(ec, why);
        return;
    }
    hello_ = std::move(m);
    admitted_ = true;

    // A dead rank is detected by its control socket closing, and its endpoint
    // is then force-closed, which cancels the pulls still outstanding.
    ucs_status_t st =
        ucx::connect(d_.worker().get(), hello_.worker_address, &session::ep_error, this, ep_);
    if (st != UCS_OK) {
        ep_ = nullptr;
        fail(make_ucx_error(st),
             fmt::format("cannot reach {} over UCX: {}", who(), ucs_status_string(st)));
        return;
    }
    if (!hello_.rkey.empty()) {
        if (auto ec = ucx::rkey::unpack(ep_, hello_.rkey, rkey_)) {
            fail(ec, fmt::format("the remote key of {} does not unpack: {}", who(), ec.message()));
            return;
        }
    }
    d_.kick();

    proto::accept_msg a;
    a.daemon_pid = static_cast<std::uint32_t>(getpid());
    a.staging_bytes = d_.stage().total();
    a.chunk_bytes = d_.stage().slot_size();
    a.next_version = next_version_;
    a.node = d_.opts().node;
    a.store = d_.store().describe() + "/" + hello_.job;
    a.store_uri = d_.store().location();
    a.transport = ucx::endpoint_transports(ep_);
    a.session = id_;
    if (hello_.flags & proto::connect_flag_push) {
        // The rank pushes to its puller, which copies on a thread of its own.
        puller_ = d_.puller_for(hello_.rank);
        if (puller_) {
            a.worker_address = puller_->address();
            puller_->connect(id_, hello_.worker_address);
        }
        else if (auto ec = d_.worker().address(a.worker_address)) {
            fail(ec, fmt::format("the daemon's UCX worker address: {}", ec.message()));
            return;
        }
    }
    unique_fd memfd;
    open_mailbox(a, memfd);
    log_info("connect job {}{} {} buffer {} transport {} next version {}{}", hello_.job,
             hello_.run.empty() ? std::string() : " run " + hello_.run, who(),
             human_bytes(hello_.buffer_length), a.transport, next_version_,
             memfd ? fmt::format(", mailbox {}", human_bytes(a.mailbox_bytes)) : std::string());
    if (memfd)
        send_with_fds(a, {memfd.get(), mail_efd_->native_handle()});
    else
        send(a);
}

void session::open_mailbox(proto::accept_msg& a, unique_fd& memfd)
{
    if (!(hello_.flags & proto::connect_flag_mailbox) || d_.opts().mailbox_bytes == 0)
        return;
    // Without one the rank's small writes take the socket: slower, not wrong.
    std::string why;
    if (mailbox::reader::create(d_.opts().mailbox_bytes, mailbox_, memfd, why)) {
        log_warn("{}: no mailbox: {}", who(), why);
        return;
    }
    const int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        log_warn("{}: no mailbox: eventfd failed: {}", who(), std::strerror(errno));
        memfd.reset();
        mailbox_.discard();
        return;
    }
    mail_efd_.emplace(d_.loop(), efd);
    a.mailbox_bytes = d_.opts().mailbox_bytes;
    wait_mail();
}

void session::wait_mail()
{
    mail_efd_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [self = shared_from_this()](boost::system::error_code ec) {
                              if (ec || !self->mail_efd_)
                                  return;
                              std::uint64_t rings = 0;
                              if (::read(self->mail_efd_->native_handle(), &rings, sizeof rings) < 0 &&
                                  errno != EAGAIN)
                                  log_warn("{}: reading its doorbell: {}", self->who(),
                                           std::strerror(errno));
                              self->mail_progress();
                              if (self->mail_efd_)
                                  self->wait_mail();
                          });
}

namespace {

constexpr auto mail_linger = std::chrono::microseconds(20);

inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

}  // namespace

bool session::take_mail()
{
    if (!mailbox_)
        return true;
    for (;;) {
        mailbox_.set_asleep(false);  // awake: the rank need not ring
        bool took = false;
        while (!pulling_ && !file_write_waiting_) {
            mailbox::reader::record r;
            std::string why;
            auto got = mailbox_.next(r, why, mailbox_.max_length());
            if (got == mailbox::reader::result::empty)
                break;
            if (got == mailbox::reader::result::record)
                why = mail_problem(r);
            if (got == mailbox::reader::result::bad || !why.empty()) {
                mailbox_.discard();
                fail(errc::protocol_error, fmt::format("{}: {}", who(), why));
                return false;
            }
            last_cookie_ = std::max(last_cookie_, r.cookie);
            if (r.to_file) {
                begin_file_write(r);
            } else {
                const std::uint64_t length = r.data.size();
                begin_write(r.cookie, length, std::move(r.data), r.end);
            }
            took = true;
        }
        // A record waits for staging (or for an overlapping file write); its
        // pulled() goes on.
        if (pulling_ || file_write_waiting_)
            return false;
        // Small writes come in bursts: waiting a moment awake spares the rank
        // a doorbell (a wakeup of this process, several microseconds) each.
        if (took) {
            const auto until = std::chrono::steady_clock::now() + mail_linger;
            while (!mailbox_.pending() && std::chrono::steady_clock::now() < until)
                cpu_relax();
            if (mailbox_.pending())
                continue;
        }
        // Going back to sleep: ring from now on; then look once more, since a
        // record published just before is not rung for.
        mailbox_.set_asleep(true);
        if (!mailbox_.pending())
            return true;
    }
}

std::string session::mail_problem(const mailbox::reader::record& r) const
{
    const bool files_only = hello_.flags & proto::connect_flag_files;
    if (r.to_file) {
        if (!files_.contains(r.file))
            return fmt::format("a mailbox write to file {}, which is not open", r.file);
        return {};
    }
    if (files_only)
        return "a mailbox write of a version on a connection for files only";
    if (r.data.size() > hello_.buffer_length)
        return fmt::format("a mailbox write of {} bytes; the registered buffer holds {}",
                           r.data.size(), hello_.buffer_length);
    if (r.version != next_version_)
        return fmt::format("a mailbox write for version {}, but its next version is {}",
                           r.version, next_version_);
    return {};
}

void session::begin_file_write(mailbox::reader::record& r)
{
    // Like FILE_WRITE, but the rank does not wait: a failure is reported at
    // the file's next sync (or at the end of the session).
    file_write_waiting_ = true;
    pulling_cookie_ = r.cookie;
    pulling_mail_ = true;
    ++active_;
    auto f = files_.at(r.file).file;
    proto::file_write_msg m{r.cookie, r.file, r.offset, r.data.size(), 0, {}, std::move(r.data)};
    const std::uint64_t mail_end = r.end;
    f->submit(m.offset, m.length, [weak = weak_from_this(), f, m = std::move(m), mail_end]() mutable {
        if (auto self = weak.lock())
            self->start_file_write(f, std::move(m), mail_end);
        else
            f->finished(m.offset, m.length);
    });
}

void session::staged(std::uint64_t mail_end)
{
    if (mail_end)
        mailbox_.release(mail_end);
    post_mail_progress();
}

void session::post_mail_progress()
{
    if (!mailbox_ || mail_posted_)
        return;
    mail_posted_ = true;
    asio::post(d_.loop(), [self = shared_from_this()] {
        self->mail_posted_ = false;
        self->mail_progress();
    });
}

void session::mail_progress()
{
    if (!take_mail())
        return;
    while (!deferred_.empty() && socket_open_) {
        proto::message m = std::move(deferred_.front());
        deferred_.pop_front();
        dispatch(m);
        if (!take_mail())
            return;
    }
    if (close_files_later_) {
        close_files_later_ = false;
        close_all_files();
    }
    if (ended_)
        d_.check_exit();
}

void session::on_write_req(proto::write_req_msg& m)
{
    if (!admitted_) {
        fail(errc::protocol_error, "WRITE_REQ before CONNECT");
        return;
    }
    if (bye_) {
        fail(errc::protocol_error, "WRITE_REQ after BYE");
        return;
    }
    if (pulling_ || file_write_waiting_) {
        fail(errc::protocol_error,
             fmt::format("WRITE_REQ {} while write {} is still being pulled", m.cookie,
                         pulling_cookie_));
        return;
    }
    if (m.cookie == 0) {
        fail(errc::protocol_error, "WRITE_REQ with cookie 0");
        return;
    }
    last_cookie_ = std::max(last_cookie_, m.cookie);
    auto refuse = [&](std::error_code ec, std::string why) {
        log_warn("{}: write refused: {}", who(), why);
        release_early(m.cookie);
        send(proto::error_msg::from(ec, std::move(why), m.cookie));
    };
    if (m.length == 0 || m.length > hello_.buffer_length) {
        refuse(m.length == 0 ? make_error_code(errc::invalid_argument)
                             : make_error_code(errc::too_large),
               fmt::format("write of {} bytes from rank {}: the registered buffer holds {} bytes",
                           m.length, hello_.rank, hello_.buffer_length));
        return;
    }
    if (d_.shutting_down()) {
        refuse(errc::shutting_down, "the daemon is shutting down and takes no new writes");
        return;
    }
    begin_write(m.cookie, m.length, std::move(m.data), 0);
}

void session::begin_write(std::uint64_t cookie, std::uint64_t length, std::vector<std::byte> data,
                          std::uint64_t mail_end)
{
    // From the mailbox (mail_end > 0): io_write has returned already, the
    // bytes are ours; once staged their mailbox space goes back to the rank.
    const bool mail = mail_end > 0;
    const std::uint64_t version = next_version_;
    const std::string object =
        store::data_object(hello_.job, version, d_.opts().node, hello_.rank);
    ++next_version_;
    ++active_;
    pulling_cookie_ = cookie;
    pulling_mail_ = mail;
    const std::uint32_t rank = hello_.rank;
    std::weak_ptr<session> weak = shared_from_this();
    transfer::handlers h;
    versions_[version] = version_record{proto::version_state_t::pulling, length, 0, {}, {}};
    h.pulled = [weak, cookie, version, mail_end] {
        if (auto self = weak.lock()) {
            self->pulling_.reset();
            self->versions_[version].state = proto::version_state_t::flushing;
            if (!mail_end)
                self->send(proto::write_done_msg{cookie, version});
            self->staged(mail_end);
        }
    };
    h.finished = [self = shared_from_this(), cookie, version, rank, object,
                  mail_end](std::error_code ec, const std::string& why,
                            const store::manifest_entry& entry, transfer::flush_span span) {
        --self->active_;
        const bool was_pulling = self->pulling_ && self->pulling_->version() == version;
        // The rank waits in io_write for this version (not for a mailbox one).
        const bool waiting = was_pulling && !mail_end;
        if (was_pulling) {
            self->pulling_.reset();
            self->staged(mail_end);
        }
        self->staged_.erase(version);
        auto& rec = self->versions_[version];
        if (ec) {
            rec.state = proto::version_state_t::failed;
            rec.error = ec;
            rec.why = why;
            log_error("{}: version {} lost: {}", self->who(), version, why);
            if (waiting && self->socket_open_) {
                // io_write is still waiting: it fails, nothing was taken.
                self->send(proto::error_msg::from(ec, why, cookie));
            } else if (ec != errc::peer_gone) {
                // io_write had returned; io_finalize must not claim durability.
                self->remember_failure(ec, why);
            }
            if (!waiting)
                self->d_.version_failed(ec);
        } else {
            rec.state = proto::version_state_t::durable;
            rec.crc32c = entry.crc32c;
            rec.flush_start_ns = span.start_ns;
            rec.durable_ns = span.durable_ns;
            ++self->versions_durable_;
            self->bytes_durable_ += entry.size;
            log_info("flushed {} ({}, crc32c {:08x})", object, human_bytes(entry.size),
                     entry.crc32c);
            self->d_.rank_durable(self->hello_.job, self->hello_.ranks, version, rank, entry);
        }
        if (!waiting || !ec)
            self->answer_waits(version);
        else
            self->versions_.erase(version);  // io_write failed: no such version
        self->maybe_finish();
        self->d_.check_exit();
    };
    auto open = [&st = d_.store(), object](std::uint64_t size,
                                           std::unique_ptr<store::object_writer>& out) {
        return st.create(object, size, out);
    };
    const bool push = data.empty() && (hello_.flags & proto::connect_flag_push);
    pulling_ = std::make_shared<transfer>(
        d_, transfer::source{ep_, rkey_.get(), hello_.buffer_address, push, puller_, id_},
        rank, version, length, object, std::move(open), std::move(h), std::move(data));
    staged_[version] = pulling_;
    pulling_->start();
    if (push)
        adopt_early(cookie);
}

ucs_status_t session::pushed(puller* via, std::uint64_t cookie, std::uint64_t offset,
                             std::uint64_t length, void* desc)
{
    // Only from this rank's own puller: a chunk is received (or given back)
    // on the worker it came in on.
    if (!admitted_ || ended_ || !(hello_.flags & proto::connect_flag_push) || via != puller_)
        return UCS_ERR_CANCELED;
    if (pulling_ && cookie == pulling_cookie_)
        return pulling_->arrived(offset, length, desc);
    if (cookie > last_cookie_ || (file_write_waiting_ && cookie == pulling_cookie_)) {
        // Its announcement is still on the socket. Bounded: a rank has one
        // write in flight, of at most this many chunks.
        static constexpr std::size_t max_early = 1u << 16;
        if (early_.size() >= max_early)
            return UCS_ERR_EXCEEDS_LIMIT;
        early_.push_back({cookie, offset, length, desc});
        return UCS_INPROGRESS;
    }
    return UCS_ERR_CANCELED;  // a write that already ended
}

void session::adopt_early(std::uint64_t cookie)
{
    auto chunks = std::move(early_);
    early_.clear();
    for (auto& c : chunks) {
        if (c.cookie != cookie) {
            early_.push_back(c);
            continue;
        }
        const ucs_status_t st =
            pulling_ ? pulling_->arrived(c.offset, c.length, c.desc) : UCS_ERR_CANCELED;
        if (st != UCS_INPROGRESS)
            d_.release_pushed(puller_, id_, c.desc);
    }
}

void session::release_early(std::uint64_t cookie)
{
    std::erase_if(early_, [&](const early_chunk& c) {
        if (c.cookie != cookie && cookie != 0)
            return false;
        d_.release_pushed(puller_, id_, c.desc);
        return true;
    });
}

void session::on_query(const proto::query_msg& m)
{
    if (!admitted_) {
        fail(errc::protocol_error, "QUERY before CONNECT");
        return;
    }
    if (m.cookie == 0) {
        fail(errc::protocol_error, "QUERY with cookie 0");
        return;
    }
    const auto it = versions_.find(m.version);
    if (it == versions_.end()) {
        send(proto::version_state_msg{m.cookie, m.version, proto::version_state_t::unknown, 0, 0});
        return;
    }
    const auto st = it->second.state;
    if (m.wait && (st == proto::version_state_t::pulling || st == proto::version_state_t::flushing)) {
        waits_.emplace(m.version, m.cookie);
        return;
    }
    if (m.wait && st == proto::version_state_t::failed) {
        send(proto::error_msg::from(it->second.error,
                                    fmt::format("version {} of rank {} could not be made durable: {}",
                                                m.version, hello_.rank, it->second.why),
                                    m.cookie));
        return;
    }
    const auto& rec = it->second;
    send(proto::version_state_msg{m.cookie, m.version, st, rec.size, rec.crc32c,
                                  rec.flush_start_ns, rec.durable_ns});
}

void session::on_read_req(const proto::read_req_msg& m)
{
    if (!admitted_ || m.cookie == 0) {
        fail(errc::protocol_error, admitted_ ? "READ_REQ with cookie 0" : "READ_REQ before CONNECT");
        return;
    }
    const auto rec = versions_.find(m.version);
    proto::version_state_msg end{m.cookie, m.version, proto::version_state_t::unknown, 0, 0};
    if (rec != versions_.end()) {
        end.state = rec->second.state;
        end.size = rec->second.size;
        end.crc32c = rec->second.crc32c;
    }
    const auto it = staged_.find(m.version);
    auto t = it == staged_.end() ? nullptr : it->second.lock();
    if (t && t->fully_staged()) {
        // Straight from staging memory, all of it now: the slots cannot be
        // released before this returns.
        std::uint32_t crc = 0;
        t->for_each_staged([&](std::uint64_t offset, std::span<const std::byte> bytes) {
            for (std::size_t at = 0; at < bytes.size(); at += proto::max_eager) {
                const auto piece = bytes.subspan(at, std::min(proto::max_eager, bytes.size() - at));
                crc = crc32c(piece, crc);
                send(proto::read_data_msg{m.cookie, offset + at, {piece.begin(), piece.end()}});
            }
        });
        end.state = proto::version_state_t::flushing;
        end.size = t->length();
        end.crc32c = crc;
        log_info("{}: read of version {} served from staging memory ({})", who(), m.version,
                 human_bytes(t->length()));
    }
    send(end);
}

bool session::well_formed(const char* request, std::uint64_t cookie)
{
    if (!admitted_) {
        fail(errc::protocol_error, fmt::format("{} before CONNECT", request));
        return false;
    }
    if (cookie == 0) {
        fail(errc::protocol_error, fmt::format("{} with cookie 0", request));
        return false;
    }
    if (bye_) {
        fail(errc::protocol_error, fmt::format("{} after BYE", request));
        return false;
    }
    return true;
}

void session::on_file_open(const proto::file_open_msg& m)
{
    if (!well_formed("FILE_OPEN", m.cookie))
        return;
    if (const auto it = files_.find(m.file); it != files_.end()) {
        fail(errc::protocol_error, fmt::format("FILE_OPEN of file {} ({}) while it is open as {}",
                                               m.file, m.path, it->second.file->path()));
        return;
    }
    std::shared_ptr<forwarded_file> f;
    std::string why;
    if (auto ec = d_.files().open(m.path, f, why)) {
        log_warn("{}: {}", who(), why);
        send(proto::error_msg::from(ec, why, m.cookie));
        return;
    }
    files_[m.file] = file_handle{f, {}, {}};
    log_info("{}: forwarding writes to {}", who(), m.path);
    send(proto::file_done_msg{m.cookie});
}

void session::on_file_write(proto::file_write_msg& m)
{
    if (!well_formed("FILE_WRITE", m.cookie))
        return;
    last_cookie_ = std::max(last_cookie_, m.cookie);
    if (pulling_ || file_write_waiting_) {
        fail(errc::protocol_error,
             fmt::format("FILE_WRITE {} while write {} is still being pulled", m.cookie,
                         pulling_cookie_));
        return;
    }
    const auto it = files_.find(m.file);
    const bool push = m.data.empty() && m.rkey.empty();
    if (push && !(hello_.flags & proto::connect_flag_push)) {
        fail(errc::protocol_error, fmt::format("FILE_WRITE {} with neither inline data nor a "
                                               "remote key on a connection that does not push",
                                               m.cookie));
        return;
    }
    if (it == files_.end()) {
        release_early(m.cookie);
        send(proto::error_msg::from(make_error_code(errc::invalid_argument),
                                    fmt::format("FILE_WRITE to file {}, which is not open",
                                                m.file),
                                    m.cookie));
        return;
    }
    if (d_.shutting_down()) {
        release_early(m.cookie);
        send(proto::error_msg::from(make_error_code(errc::shutting_down),
                                    "the daemon is shutting down and takes no new writes",
                                    m.cookie));
        return;
    }
    file_write_waiting_ = true;
    pulling_cookie_ = m.cookie;
    ++active_;
    auto f = it->second.file;
    const std::uint64_t offset = m.offset;
    const std::uint64_t length = m.length;
    // Behind any write in flight that overlaps it (the rank waits meanwhile).
    f->submit(offset, length, [weak = weak_from_this(), f, m = std::move(m)]() mutable {
        auto self = weak.lock();
        if (!self || self->ended_) {
            // The rank went away before this write began: it never handed it over.
            if (self)
                self->release_early(m.cookie);
            f->finished(m.offset, m.length);
            if (self) {
                --self->active_;
                self->file_write_waiting_ = false;
                self->d_.check_exit();
            }
            return;
        }
        self->start_file_write(f, std::move(m), 0);
    });
}

void session::start_file_write(std::shared_ptr<forwarded_file> f, proto::file_write_msg m,
                               std::uint64_t mail_end)
{
    const std::uint64_t cookie = m.cookie;
    const std::uint64_t id = m.file;
    const std::uint64_t offset = m.offset;
    const std::uint64_t length = m.length;
    const std::string what =
        fmt::format("the write of {} bytes at offset {} to {}", length, offset, f->path());
    const bool push = m.data.empty() && m.rkey.empty();
    transfer::source src{ep_, nullptr, m.address, push, puller_, id_};
    if (m.data.empty() && !push) {
        std::string why;
        std::error_code ec;
        if (!d_.peers().usable(hello_.worker_address, m.rkey, why))
            ec = make_error_code(errc::protocol_error);
        else
            ec = ucx::rkey::unpack(ep_, m.rkey, file_rkey_);
        if (ec) {
            --active_;
            file_write_waiting_ = false;
            f->finished(offset, length);
            send(proto::error_msg::from(
                ec, fmt::format("the remote key for {} does not unpack: {}", what,
                                why.empty() ? ec.message() : why),
                cookie));
            return;
        }
        src.rkey = file_rkey_.get();
    }
    std::weak_ptr<session> weak = shared_from_this();
    transfer::handlers h;
    h.pulled = [weak, cookie, mail_end] {
        if (auto self = weak.lock()) {
            self->file_write_waiting_ = false;
            self->pulling_.reset();
            self->file_rkey_ = ucx::rkey{};
            if (!mail_end)
                self->send(proto::write_done_msg{cookie, 0});
            self->staged(mail_end);
        }
    };
    h.finished = [self = shared_from_this(), f, cookie, id, offset, length, what,
                  mail_end](std::error_code ec, const std::string& why,
                            const store::manifest_entry&, transfer::flush_span) {
        --self->active_;
        const bool was_pulling = self->file_write_waiting_ && self->pulling_cookie_ == cookie;
        if (was_pulling) {
            self->file_write_waiting_ = false;
            self->pulling_.reset();
            self->file_rkey_ = ucx::rkey{};
            self->staged(mail_end);
        }
        f->finished(offset, length);
        if (ec) {
            log_error("{}: {} lost: {}", self->who(), what, why);
            if (was_pulling && !mail_end && self->socket_open_) {
                // The MPI write is still waiting: it fails, nothing was taken.
                self->send(proto::error_msg::from(ec, why, cookie));
            } else if (ec != errc::peer_gone) {
                // Reported at the file's next sync, or at the end of the session.
                const auto h = self->files_.find(id);
                if (h != self->files_.end() && h->second.file == f) {
                    if (!h->second.error) {
                        h->second.error = ec;
                        h->second.why = why;
                    }
                } else {
                    self->remember_failure(ec, why);
                }
            }
        }
        self->maybe_finish();
        self->d_.check_exit();
    };
    auto open = [f, offset](std::uint64_t, std::unique_ptr<store::object_writer>& out) {
        out = f->writer(offset);
        return std::error_code{};
    };
    pulling_ = std::make_shared<transfer>(d_, src, hello_.rank, 0, length, what, std::move(open),
                                          std::move(h), std::move(m.data));
    pulling_->start();
    if (push)
        adopt_early(cookie);
}

void session::settle_file(std::shared_ptr<forwarded_file> f, bool durable, bool release,
                          std::function<void(std::error_code, std::string)> done)
{
    ++active_;
    auto finish = [self = shared_from_this(), f, release,
                   done = std::move(done)](std::error_code ec, std::string why) {
        if (release)
            self->d_.files().release(f);
        --self->active_;
        done(ec, std::move(why));
        self->maybe_finish();
        self->d_.check_exit();
    };
    f->when_idle([this, f, durable, finish = std::move(finish)]() mutable {
        if (!durable) {
            finish({}, {});
            return;
        }
        d_.flush().submit([f] { return f->sync(); },
                          [f, finish = std::move(finish)](std::error_code ec) mutable {
                              finish(ec, ec ? fmt::format("fsync of {} failed: {}", f->path(),
                                                          ec.message())
                                            : std::string());
                          });
    });
}

void session::on_file_sync(const proto::file_sync_msg& m)
{
    if (!well_formed("FILE_SYNC", m.cookie))
        return;
    const auto it = files_.find(m.file);
    if (it == files_.end()) {
        send(proto::error_msg::from(make_error_code(errc::invalid_argument),
                                    fmt::format("FILE_SYNC of file {}, which is not open", m.file),
                                    m.cookie));
        return;
    }
    const bool durable = m.flags & proto::file_sync_durable;
    const bool close = m.flags & proto::file_sync_close;
    auto f = it->second.file;
    const std::uint64_t cookie = m.cookie;
    if (close) {
        // Unless the rank asked for durability too, it does not wait for a
        // close: the answer goes now.
        auto h = std::move(it->second);
        files_.erase(it);
        if (!durable)
            send(proto::file_done_msg{cookie});
        close_file(std::move(h), durable ? cookie : 0);
        return;
    }
    settle_file(f, durable, false, [this, cookie, id = m.file](std::error_code ec, std::string why) {
        // A write that failed since the last sync is this sync's failure.
        if (const auto h = files_.find(id); h != files_.end() && h->second.error) {
            ec = std::exchange(h->second.error, {});
            why = std::move(h->second.why);
        }
        send(ec ? proto::error_msg::from(ec, why, cookie)
                : proto::message(proto::file_done_msg{cookie}));
    });
}

void session::on_file_drain(const proto::file_drain_msg& m)
{
    if (!well_formed("FILE_DRAIN", m.cookie))
        return;
    auto f = d_.files().find(m.path);
    if (!f) {
        send(proto::file_done_msg{m.cookie});
        return;
    }
    ++active_;
    f->when_idle([self = shared_from_this(), cookie = m.cookie] {
        --self->active_;
        self->send(proto::file_done_msg{cookie});
        self->maybe_finish();
    });
}

void session::close_file(file_handle h, std::uint64_t cookie)
{
    remember_failure(h.error, h.why);
    settle_file(h.file, true, true, [this, cookie](std::error_code ec, std::string why) {
        if (ec)
            log_error("{}: {}", who(), why);
        if (cookie)
            send(ec ? proto::error_msg::from(ec, why, cookie)
                    : proto::message(proto::file_done_msg{cookie}));
        else
            remember_failure(ec, why);
    });
}

void session::close_all_files()
{
    for (auto& [id, h] : files_)
        close_file(std::move(h), 0);
    files_.clear();
}

void session::remember_failure(std::error_code ec, const std::string& why)
{
    if (ec && !durable_error_) {
        durable_error_ = ec;
        durable_why_ = why;
    }
}

void session::answer_waits(std::uint64_t version)
{
    auto [first, last] = waits_.equal_range(version);
    std::vector<std::uint64_t> cookies;
    for (auto it = first; it != last; ++it)
        cookies.push_back(it->second);
    waits_.erase(first, last);
    for (auto cookie : cookies)
        on_query(proto::query_msg{cookie, version, 1});
}

void session::on_bye()
{
    if (!admitted_) {
        fail(errc::protocol_error, "BYE before CONNECT");
        return;
    }
    if (bye_) {
        fail(errc::protocol_error, "BYE sent twice");
        return;
    }
    bye_ = true;
    close_all_files();
    maybe_finish();
}

void session::each_transfer(const std::function<void(const transfer&)>& fn) const
{
    bool pulling_seen = false;
    for (const auto& [version, weak] : staged_)
        if (auto t = weak.lock()) {
            pulling_seen = pulling_seen || t == pulling_;
            fn(*t);
        }
    if (pulling_ && !pulling_seen)
        fn(*pulling_);  // a forwarded file's write
}

void session::maybe_finish()
{
    if (!bye_ || finishing_ || !socket_open_ || active_ > 0 || d_.manifests_pending())
        return;
    finishing_ = true;
    // Release the endpoint while the rank still progresses its worker (it is
    // waiting for FINISHED), then answer.
    close_endpoint(false);
}

void session::close_endpoint(bool force)
{
    if (puller_ && !puller_closed_) {
        puller_closed_ = true;
        puller_->disconnect(id_);
    }
    if (!ep_) {
        finish_closing();
        return;
    }
    ucp_ep_h ep = std::exchange(ep_, nullptr);
    rkey_ = ucx::rkey{};
    if (force) {
        ucx::close_now(ep);
        d_.kick();  // the cancelled operations complete through progress
        return;
    }
    ucp_request_param_t param{};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags = ep_failed_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    param.cb.send = &session::ep_closed;
    param.user_data = new std::weak_ptr<session>(weak_from_this());
    ucs_status_ptr_t p = ucp_ep_close_nbx(ep, &param);
    ucs_status_t st = UCS_OK;
    if (ucx::request_finished(p, st)) {
        d_.kick();
        delete static_cast<std::weak_ptr<session>*>(param.user_data);
        finish_closing();
        return;
    }
    d_.kick();
    // Do not let a peer that stopped progressing hold FINISHED back forever.
    close_timer_.expires_after(std::chrono::seconds(5));
    close_timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
        if (ec)
            return;
        if (auto self = weak.lock()) {
            log_warn("{}: endpoint close did not complete in 5 s; answering anyway", self->who());
            self->finish_closing();
        }
    });
}

void session::ep_closed(void* request, ucs_status_t, void* user_data)
{
    auto* weak = static_cast<std::weak_ptr<session>*>(user_data);
    ucp_request_free(request);
    if (auto self = weak->lock()) {
        self->close_timer_.cancel();
        self->finish_closing();
    }
    delete weak;
}

void session::finish_closing()
{
    if (ended_ || !finishing_)
        return;
    ended_ = true;
    remember_failure(d_.manifest_error(),
                     "a version manifest could not be written (see the daemon log)");
    if (socket_open_) {
        if (durable_error_) {
            send(proto::error_msg::from(durable_error_,
                                        fmt::format("rank {}: not everything it wrote is durable: "
                                                    "{}",
                                                    hello_.rank, durable_why_)));
        } else {
            send(proto::finished_msg{versions_durable_, bytes_durable_,
                                     d_.unfinished_ranks(hello_.rank)});
        }
        close_after_write_ = true;
    }
    log_info("bye job {} {}: {} versions, {} durable{}", hello_.job, who(), versions_durable_,
             human_bytes(bytes_durable_), durable_error_ ? " (with errors)" : "");
    d_.session_ended(*this, true);
}

void session::ep_error(void* arg, ucp_ep_h, ucs_status_t status)
{
    auto* self = static_cast<session*>(arg);
    self->ep_failed_ = true;
    log_warn("{}: UCX endpoint failed: {}", self->who(), ucs_status_string(status));
}

void session::send(const proto::message& m)
{
    if (!socket_open_)
        return;
    out_.push_back(proto::encode(m));
    if (!writing_)
        write_next();
}

void session::send_with_fds(const proto::message& m, std::initializer_list<int> fds)
{
    std::vector<std::byte> bytes = proto::encode(m);
    if (writing_ || !out_.empty() || !socket_open_) {
        fail(errc::protocol_error, "descriptors can only go with the first message");
        return;
    }
    const ssize_t n = iofwd::send_with_fds(sock_.native_handle(), bytes, fds);
    if (n <= 0) {
        // A fresh connection's buffer takes a few hundred bytes; anything else
        // means the rank is gone.
        socket_closed(fmt::format("sending {} failed: {}", proto::to_string(proto::type_of(m)),
                                  n < 0 ? std::strerror(errno) : "nothing sent"));
        return;
    }
    if (static_cast<std::size_t>(n) < bytes.size()) {
        out_.emplace_back(bytes.begin() + n, bytes.end());
        write_next();
    }
}

void session::write_next()
{
    if (out_.empty()) {
        writing_ = false;
        if (close_after_write_ && socket_open_) {
            socket_open_ = false;
            boost::system::error_code ignored;
            sock_.shutdown(socket_type::shutdown_both, ignored);
            sock_.close(ignored);
        }
        return;
    }
    writing_ = true;
    asio::async_write(sock_, asio::buffer(out_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                          self->out_.pop_front();
                          if (ec) {
                              self->out_.clear();
                              self->writing_ = false;
                              self->socket_closed(ec.message());
                              return;
                          }
                          self->write_next();
                      });
}

void session::fail(std::error_code ec, std::string why)
{
    log_error("{}: {} ({})", who(), why, ec.message());
    if (socket_open_ && !close_after_write_) {
        send(proto::error_msg::from(ec, why));
        close_after_write_ = true;
        if (!writing_)
            write_next();
    }
    socket_closed("dropped after an error");
}

void session::socket_closed(std::string why)
{
    // Writes the rank left in its mailbox are taken (io_write returned for
    // them); nothing it publishes from now on is.
    mailbox_.freeze();
    deferred_.clear();
    if (mail_efd_) {
        boost::system::error_code ignored;
        mail_efd_->close(ignored);
        mail_efd_.reset();
    }
    const bool was_open = socket_open_;
    if (!close_after_write_ || !writing_) {
        socket_open_ = false;
        boost::system::error_code ignored;
        sock_.close(ignored);
    }
    if (ended_)
        return;
    if (was_open && admitted_)
        log_warn("disconnect job {} {} without BYE: {}", hello_.job, who(), why);
    else if (was_open)
        log_info("disconnect {}: {}", who(), why);
    ended_ = true;
    // The version being pulled is discarded; versions already pulled are kept,
    // and so is one from the mailbox (its bytes are here).
    if (pulling_ && !pulling_mail_)
        pulling_->source_gone();
    post_mail_progress();
    release_early(0);
    // Files stay open for writes still in the mailbox: closed once those are
    // taken (mail_progress).
    if (mailbox_.pending() || (file_write_waiting_ && pulling_mail_))
        close_files_later_ = true;
    else
        close_all_files();
    if (ep_)
        close_endpoint(true);
    d_.session_ended(*this, false);
}

void session::shut_down()
{
    if (ended_ || !socket_open_)
        return;
    if (!take_mail() || active_ > 0)
        return;  // asked again when the last transfer finishes
    fail(errc::shutting_down, "the daemon is shutting down (signal)");
}

}  // namespace iofwd::iod

// The daemon's loop, registry and exit (daemon.hpp). About 460 lines: most
// of it is start(), the start-up sequence (lock, store, UCX, staging,
// pullers, flushers, socket) kept whole so that its order, which matters,
// reads from top to bottom.
#include "daemon.hpp"

#include <ucs/debug/log_def.h>

#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <bit>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "session.hpp"
#include "start_report.hpp"
#include "transfer.hpp"
#include "store/catalog.hpp"
#include "store/counting.hpp"

namespace asio = boost::asio;

namespace iofwd::iod {

daemon::daemon(asio::io_context& loop, options opts)
    : loop_(loop), opts_(std::move(opts)), signals_(loop, SIGTERM, SIGINT), idle_timer_(loop),
      progress_timer_(loop), accept_retry_(loop)
{
}

daemon::~daemon()
{
    pushers_.clear();
    sessions_.clear();
}

namespace {

// UCX 1.13 logs a failed cross-process read (the rank died while its bytes
// were being read) at the fatal level when the endpoint has no peer-failure
// handling, and its default log handler then aborts the process. Peer-failure
// handling is not an option (it rules out the shared-memory transports), and
// a dead rank is an expected event here: its socket closes and its partial
// version is discarded. So that one message is logged as a warning and UCX
// goes on, returning the read's error to the daemon.
ucs_log_func_rc_t ucx_log(const char* file, unsigned line, const char*, ucs_log_level_t level,
                          const ucs_log_component_config_t*, const char* format, va_list ap)
{
    if (level != UCS_LOG_LEVEL_FATAL || !std::strstr(file, "cma_ep.c"))
        return UCS_LOG_FUNC_RC_CONTINUE;
    char text[512];
    va_list copy;
    va_copy(copy, ap);  // the next handler reads `ap` again
    std::vsnprintf(text, sizeof text, format, copy);
    va_end(copy);
    if (!std::strstr(text, "No such process"))
        return UCS_LOG_FUNC_RC_CONTINUE;
    log_warn("UCX ({}:{}): {}; the rank died during a read of its bytes", file, line, text);
    return UCS_LOG_FUNC_RC_STOP;
}

}  // namespace

std::error_code daemon::take_lock(std::string& why)
{
    if (opts_.lock_fd >= 0) {
        // The launching rank took the lock and handed us the descriptor: the
        // lock is ours from now on, and goes with this process.
        lock_.reset(opts_.lock_fd);
        if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
            const auto ec = last_system_error();
            why = fmt::format("--lock-fd {} does not hold the lock of session {}: {}",
                              opts_.lock_fd, paths_.session, ec.message());
            return ec;
        }
        ::fcntl(lock_.get(), F_SETFD, FD_CLOEXEC);
        return {};
    }
    // try_lock_session: a finished session's lock file may be removed by a
    // cleaner (runtime_gc.hpp) between our open and our flock.
    bool held = false;
    if (auto ec = try_lock_session(paths_, lock_, held, why))
        return ec;
    if (!held) {
        why = fmt::format("another iod already serves session {} (lock {} is held)",
                          paths_.session, paths_.lock);
        return make_error_code(errc::rank_in_use);
    }
    return {};
}

std::error_code daemon::listen(std::string& why)
{
    // We hold the session lock, so a socket file here is a dead daemon's.
    ::unlinkat(paths_.dir_fd->get(), paths_.socket_name.c_str(), 0);
    boost::system::error_code ec;
    acceptor_.emplace(loop_);
    // Bound through the directory's descriptor (runtime_paths::socket_via).
    asio::local::stream_protocol::endpoint ep(paths_.socket_via());
    acceptor_->open(ep.protocol(), ec);
    if (!ec)
        acceptor_->bind(ep, ec);
    if (!ec && ::fchmodat(paths_.dir_fd->get(), paths_.socket_name.c_str(), 0600, 0) != 0)
        ec.assign(errno, boost::system::system_category());
    if (!ec)
        acceptor_->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        why = fmt::format("cannot listen on {}: {}", paths_.socket, ec.message());
        return ec;
    }
    return {};
}

std::error_code daemon::start(std::string& why)
{
    {
        // Which binary serves: after an upgrade or a rebuild, the log says
        // whether a job ran the iod installed with its library.
        char exe[4096];
        const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
        log_info("iod {} at {}", IOFWD_VERSION, n > 0 ? std::string(exe, static_cast<std::size_t>(n))
                                                      : std::string("(unknown path)"));
    }
    if (!opts_.runtime_dir.empty())
        ::setenv("IOFWD_RUNTIME_DIR", opts_.runtime_dir.c_str(), 1);
    if (opts_.runtime_fd >= 0) {
        // The launching rank's own checked directory, handed over as is.
        if (auto ec = adopt_runtime(opts_.runtime_fd, opts_.runtime_dir, opts_.session, paths_, why))
            return ec;
    } else if (auto ec = open_runtime(opts_.session, paths_, why)) {
        return ec;
    }
    if (auto ec = take_lock(why))
        return ec;
    store::set_ceph_options(opts_.ceph_conf, opts_.ceph_user, opts_.ceph_keyring);
    std::unique_ptr<store::backend> opened;
    if (auto ec = store::open(opts_.store, opened, why, {opts_.store_group}))
        return ec;
    // Counted, for the job summaries: what each commit costs at scale.
    store_ = std::make_unique<store::counting_backend>(std::move(opened));

    // The daemon's peers are the ranks of its own node: shared memory and
    // cma, never a network transport, whatever UCX_TLS the job set for MPI.
    // A rank's address that offers only tcp is then refused at CONNECT; with
    // tcp enabled, the wireup of an endpoint to a rank that died or never
    // progressed could fail inside UCX 1.13 on an assertion (seen under the
    // daemon fuzzer) and take the daemon with it.
    ::setenv("UCX_TLS", opts_.transports.c_str(), 1);
    if (!opts_.net_devices.empty())
        ::setenv("UCX_NET_DEVICES", opts_.net_devices.c_str(), 1);
    if (!opts_.port_range.empty())
        ::setenv("UCX_TCP_PORT_RANGE", opts_.port_range.c_str(), 1);
    // One cross-process read per staging chunk instead of UCX's 512 KiB
    // pieces (32 system calls per 16 MiB chunk): io_write's bandwidth over
    // process_vm_readv's, paired per repetition, 73 -> 82 % at 64 MiB,
    // 81 -> 91 % at 256 MiB, 84 -> 93 % at 1 GiB (medians of 3-7 runs). A
    // value the user set wins.
    ::setenv("UCX_CMA_SEG_SIZE", std::to_string(opts_.chunk_bytes).c_str(), 0);
    if (auto ec = peer_check_.start(why))
        return ec;
    static const bool log_handler = [] {
        ucs_log_push_handler(&ucx_log);
        return true;
    }();
    (void)log_handler;
    if (auto ec = ucx::context::create(UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                                       "iod", context_, opts_.pull_threads > 0)) {
        why = fmt::format("UCX initialisation failed: {}", ec.message());
        return ec;
    }
    if (auto ec = ucx::worker::create(context_, worker_)) {
        why = fmt::format("UCX worker creation failed: {}", ec.message());
        return ec;
    }
    {
        ucp_am_handler_param_t hp{};
        hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                        UCP_AM_HANDLER_PARAM_FIELD_ARG;
        hp.id = proto::am_push;
        hp.cb = &daemon::on_push;
        hp.arg = this;
        if (ucs_status_t st = ucp_worker_set_am_recv_handler(worker_.get(), &hp); st != UCS_OK) {
            why = fmt::format("cannot set the UCX active-message handler: {}",
                              ucs_status_string(st));
            return make_ucx_error(st);
        }
    }
    if (auto ec = staging_.init(context_, opts_.staging_bytes, opts_.chunk_bytes,
                                opts_.staging_prefault)) {
        why = fmt::format("cannot set up {} of staging memory: {}",
                          human_bytes(opts_.staging_bytes), ec.message());
        return ec;
    }
    for (unsigned i = 0; i < opts_.pull_threads; ++i) {
        pullers_.push_back(std::make_unique<puller>(
            loop_, i, [this](puller& p, const proto::push_header& h, std::size_t length, void* desc) {
                if (pushed(&p, h, length, desc) != UCS_INPROGRESS)
                    p.release(h.session, desc);
            },
            &claims_));
        if (auto ec = pullers_.back()->start(context_, why))
            return ec;
    }
    flushes_ = std::make_unique<flush_policy>(
        loop_, opts_.flush_threads, staging_, [this] { arm_progress(); },
        [this] { job_->data_idle(); });
    job_ = std::make_unique<iod::job>(
        loop_, opts_, *store_, paths_.session, *flushes_, [this] { changed(); }, [this] {
            std::vector<std::uint64_t> bytes;
            for (const auto& p : pullers_)
                bytes.push_back(p->bytes_read());
            return bytes;
        });
    if (auto ec = listen(why))
        return ec;

    signals_.async_wait([this](boost::system::error_code ec, int signo) {
        if (!ec)
            on_signal(signo);
    });
    if (auto ec = driver_.start(why))
        return ec;
    accept_next();
    arm_idle_timer();

    log_info("ready: session {} socket {} store {} staging {} ({} slots of {}) flush threads {} pull threads {}{}",
             paths_.session, paths_.socket, store_->describe(), human_bytes(staging_.total()),
             staging_.total() / staging_.slot_size(), human_bytes(staging_.slot_size()),
             opts_.flush_threads, opts_.pull_threads, opts_.auto_exit ? " auto-exit" : "");
    if (opts_.ready_fd >= 0) {
        const std::string ready = start_ready_line();
        [[maybe_unused]] auto n = ::write(opts_.ready_fd, ready.data(), ready.size());
        ::close(opts_.ready_fd);
        opts_.ready_fd = -1;
    }
    return {};
}

std::error_code daemon::new_push_key(std::uint64_t& out) const
{
    std::uint64_t key = 0;
    do {
        if (::getrandom(&key, sizeof key, 0) != static_cast<ssize_t>(sizeof key))
            return last_system_error();
    } while (key == 0 || pushers_.contains(key));
    out = key;
    return {};
}

void daemon::accept_next()
{
    acceptor_->async_accept([this](boost::system::error_code ec,
                                   asio::local::stream_protocol::socket sock) {
        if (ec == asio::error::operation_aborted || stopped_ || !acceptor_->is_open())
            return;  // closed: shutting down
        if (ec) {
            // Out of descriptors or memory (or anything else accept() may
            // say): the peer waits in the backlog and is taken once the
            // daemon has what it needs. Said on the first failure, then on
            // every 100th (10 s).
            const bool descriptors =
                ec == asio::error::no_descriptors || ec.value() == ENFILE;
            if (accept_failures_++ % 100 == 0)
                log_error("cannot accept a connection: {} (failure {} in a row; retrying every "
                          "100 ms){}",
                          ec.message(), accept_failures_,
                          descriptors ? fmt::format("; the {} open connections hold descriptors",
                                                    sessions_.size())
                                      : std::string());
            accept_retry_.expires_after(std::chrono::milliseconds(100));
            accept_retry_.async_wait([this](boost::system::error_code tec) {
                if (!tec && !stopped_ && !shutting_down_)
                    accept_next();
            });
            return;
        }
        if (accept_failures_ > 0) {
            log_info("accepting connections again after {} failures", accept_failures_);
            accept_failures_ = 0;
        }
        // Tells the peer why in an ERROR and hangs up.
        auto refuse = [&sock](std::error_code why_ec, const std::string& why) {
            const auto bytes = proto::encode(proto::error_msg::from(why_ec, why));
            boost::system::error_code ignored;
            asio::write(sock, asio::buffer(bytes), ignored);
            sock.close(ignored);
        };
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            cred.uid != ::geteuid()) {
            // A process of another user: the runtime directory's mode should
            // have stopped it; refuse it here too.
            log_warn("refused connection from uid {} pid {}: not the job's user (uid {})",
                     cred.uid, cred.pid, ::geteuid());
            refuse(errc::permission_denied,
                   fmt::format("iod serves uid {} only; you are uid {}", ::geteuid(), cred.uid));
        } else if (shutting_down_) {
            boost::system::error_code ignored;
            sock.close(ignored);
        } else {
            // Not idle yet: a connection may be a status request only
            // (rank_arrived() says when a rank came).
            std::uint64_t key = 0;
            if (const auto kec = new_push_key(key)) {
                const std::string why =
                    fmt::format("the daemon has no random number to name the connection: {}",
                                kec.message());
                log_error("refused connection from pid {}: {}", cred.pid, why);
                refuse(kec, why);
            } else {
                const auto id = next_session_id_++;
                auto s = std::make_shared<session>(*this, std::move(sock), id, key, cred.pid);
                sessions_.emplace(id, s);
                pushers_.emplace(key, s.get());
                s->start();
            }
        }
        if (!stopped_ && !shutting_down_)
            accept_next();
    });
}

void daemon::arm_progress()
{
    if (progress_armed_ || opts_.progress_interval <= 0 || stopped_)
        return;
    progress_armed_ = true;
    progress_timer_.expires_after(
        std::chrono::milliseconds(static_cast<std::int64_t>(opts_.progress_interval * 1000)));
    progress_timer_.async_wait([this](boost::system::error_code ec) {
        progress_armed_ = false;
        if (!ec && !stopped_)
            report_progress();
    });
}

void daemon::report_progress()
{
    const std::uint64_t now = proto::monotonic_ns();
    const auto interval_ns = static_cast<std::uint64_t>(opts_.progress_interval * 1e9);
    bool any = false;
    for (const auto& [id, s] : sessions_)
        s->each_transfer([&](const transfer& t) {
            any = true;
            const std::uint64_t age = now - t.started_ns();
            if (age < interval_ns)
                return;
            const double seconds = static_cast<double>(age) / 1e9;
            log_info("progress: {} (rank {}): {} of {} in the store, {} pulled, {}/s over {:.1f} s",
                     t.object(), t.rank(), human_bytes(t.flushed_bytes()), human_bytes(t.length()),
                     human_bytes(t.pulled_bytes()),
                     human_bytes(static_cast<std::uint64_t>(static_cast<double>(t.flushed_bytes()) /
                                                            seconds)),
                     seconds);
        });
    if (any)
        arm_progress();
}

ucs_status_t daemon::on_push(void* arg, const void* header, std::size_t header_length,
                             void* data, std::size_t length, const ucp_am_recv_param_t* param)
{
    auto* self = static_cast<daemon*>(arg);
    proto::push_header h;
    if (!decode_push(header, header_length, length, param, h))
        return UCS_ERR_INVALID_PARAM;
    // Refused (not UCS_INPROGRESS): UCX answers the rank's send itself,
    // within the progress that called this.
    return self->pushed(nullptr, h, length, data);
}

ucs_status_t daemon::pushed(puller* via, const proto::push_header& h, std::size_t length,
                            void* desc)
{
    const auto it = pushers_.find(h.session);
    if (it == pushers_.end()) {
        // Late chunks of a rank that went away, or another process guessing.
        // Said at 1, 2, 4, 8... of them: a flood costs the log nothing.
        ++unknown_pushes_;
        if (std::has_single_bit(unknown_pushes_))
            log_warn("{} pushed chunk{} named no session of this daemon (a rank already gone, "
                     "or a process guessing): refused",
                     unknown_pushes_, unknown_pushes_ == 1 ? "" : "s");
        return UCS_ERR_CANCELED;
    }
    return it->second->pushed(pushed_chunk{via, desc}, h.cookie, h.offset, length);
}

std::error_code daemon::admit(const session& s, const proto::connect_msg& m,
                              std::uint64_t& first_version, std::string& why)
{
    if (shutting_down_) {
        why = "the daemon is shutting down";
        return errc::shutting_down;
    }
    const bool others_active = std::any_of(sessions_.begin(), sessions_.end(), [&](const auto& e) {
        return e.second.get() != &s && e.second->admitted() && !e.second->done();
    });
    return job_->admit(m, others_active, first_version, why);
}

void daemon::session_ended(const session& s, bool clean)
{
    // A rank's connection (a status request never ends this way), even one
    // refused before its CONNECT was read.
    rank_arrived_ = true;
    if (s.admitted())
        job_->rank_ended(s.rank(), clean);
    changed();
}

void daemon::rank_arrived()
{
    rank_arrived_ = true;
    if (idle_armed_) {
        idle_armed_ = false;
        idle_timer_.cancel();
    }
}

void daemon::changed()
{
    if (settle_posted_ || stopped_)
        return;
    settle_posted_ = true;
    boost::asio::post(loop_, [this] {
        settle_posted_ = false;
        settle();
    });
}

void daemon::settle()
{
    if (stopped_)
        return;
    // Ranks waiting for FINISHED whose data is all durable get it (a session
    // ending this way calls changed() again).
    for (auto& [id, s] : std::map(sessions_))
        s->maybe_finish();
    for (auto it = sessions_.begin(); it != sessions_.end();) {
        if (!it->second->done()) {
            ++it;
            continue;
        }
        pushers_.erase(it->second->push_key());
        it = sessions_.erase(it);
    }
    const bool idle = sessions_.empty() && !job_->busy();
    if (shutting_down_) {
        bool busy = job_->busy();
        for (auto& [id, s] : sessions_)
            busy = busy || s->busy();
        if (!busy)
            for (auto& [id, s] : std::map(sessions_))
                s->shut_down();
        if (idle) {
            // The skips whose arrival failed, sent once more before the
            // daemon goes: settle() comes back when they are done.
            job_->retry_skips_at_end();
            if (job_->busy())
                return;
            job_->write_summary();
            stop();
        }
        return;
    }
    if (job_->over() && idle) {
        // Over on this node: what never completed is logged, and the job's
        // summary goes into the store (a shared daemon then waits for the
        // next job).
        job_->close();
        if (job_->busy())
            return;  // its last skips or pack on their way: settle() comes back when done
        job_->write_summary();
    }
    if (opts_.auto_exit && job_->over() && idle) {
        if (job_->lost_versions() == 0)
            log_info("job {}: all {} ranks done, everything durable; exiting", job_->name(),
                     job_->ranks());
        else
            log_error("job {}: all {} ranks done; {} version{} could not be made durable or "
                      "complete (see above); exiting with status 1",
                      job_->name(), job_->ranks(), job_->lost_versions(),
                      job_->lost_versions() == 1 ? "" : "s");
        stop();
        return;
    }
    if (opts_.auto_exit && job_->empty() && idle && rank_arrived_) {
        // Launched for ranks that were all refused: nothing to serve.
        log_info("no rank was admitted (see the refusals above); exiting");
        stop();
        return;
    }
    if (sessions_.empty())
        arm_idle_timer();
}

void daemon::arm_idle_timer()
{
    // Armed once when the daemon has no rank, cancelled only when a rank
    // comes: status requests in between neither cancel nor restart it.
    if (!opts_.auto_exit || opts_.idle_timeout <= 0 || idle_armed_)
        return;
    idle_armed_ = true;
    idle_timer_.expires_after(std::chrono::milliseconds(
        static_cast<std::int64_t>(opts_.idle_timeout * 1000)));
    idle_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec)
            return;  // cancelled by rank_arrived(), which disarmed it
        idle_armed_ = false;
        if (stopped_ || !sessions_.empty() || job_->busy())
            return;  // armed again when the sessions are gone
        log_warn("no rank connected for {} s; exiting (job {}, {} of {} ranks finished)",
                 opts_.idle_timeout, job_->empty() ? "none" : job_->name(), job_->ranks_ended(),
                 job_->ranks());
        job_->write_summary();
        stop();
    });
}

void daemon::on_signal(int signo)
{
    if (shutting_down_) {
        log_warn("second signal {}: exiting now; data not yet durable is lost", signo);
        std::_Exit(1);
    }
    log_info("signal {}: finishing what is in flight, then exiting (send again to abort)", signo);
    shutting_down_ = true;
    job_->finish_batches();
    boost::system::error_code ignored;
    if (acceptor_)
        acceptor_->close(ignored);
    accept_retry_.cancel();
    signals_.async_wait([this](boost::system::error_code ec, int s) {
        if (!ec)
            on_signal(s);
    });
    changed();
}

void daemon::stop()
{
    if (stopped_)
        return;
    stopped_ = true;
    // Unlink first: a rank arriving from now on launches a new daemon.
    ::unlinkat(paths_.dir_fd->get(), paths_.socket_name.c_str(), 0);
    boost::system::error_code ignored;
    if (acceptor_)
        acceptor_->close(ignored);
    idle_timer_.cancel();
    progress_timer_.cancel();
    accept_retry_.cancel();
    signals_.cancel(ignored);
    driver_.stop();
    log_info("exit status {}", exit_status());
    loop_.stop();
}

}  // namespace iofwd::iod

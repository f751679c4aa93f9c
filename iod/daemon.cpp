#include "daemon.hpp"

#include <ucs/debug/log_def.h>

#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "session.hpp"
#include "transfer.hpp"
#include "store/catalog.hpp"

namespace asio = boost::asio;

namespace iofwd::iod {

daemon::daemon(asio::io_context& loop, options opts)
    : loop_(loop), opts_(std::move(opts)), signals_(loop, SIGTERM, SIGINT), idle_timer_(loop),
      progress_timer_(loop)
{
}

daemon::~daemon()
{
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
    if (auto ec = open_runtime_file(paths_, paths_.lock_name, O_RDWR | O_CREAT, lock_, why))
        return ec;
    if (::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0) {
        const auto ec = last_system_error();
        why = errno == EWOULDBLOCK
                  ? fmt::format("another iod already serves session {} (lock {} is held)",
                                paths_.session, paths_.lock)
                  : fmt::format("cannot lock {}: {}", paths_.lock, ec.message());
        return errno == EWOULDBLOCK ? make_error_code(errc::rank_in_use) : ec;
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
    if (auto ec = store::open(opts_.store, store_, why, {opts_.store_group}))
        return ec;

    // The daemon's peers are the ranks of its own node: shared memory and
    // cma, never a network transport, whatever UCX_TLS the job set for MPI.
    // A rank's address that offers only tcp is then refused at CONNECT; with
    // tcp enabled, the wireup of an endpoint to a rank that died or never
    // progressed could fail inside UCX 1.13 on an assertion (seen under the
    // daemon fuzzer) and take the daemon with it.
    ::setenv("UCX_TLS", opts_.transports.empty() ? "self,sm,cma" : opts_.transports.c_str(), 1);
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
    if (auto ec = staging_.init(context_, opts_.staging_bytes, opts_.chunk_bytes)) {
        why = fmt::format("cannot set up {} of staging memory: {}",
                          human_bytes(opts_.staging_bytes), ec.message());
        return ec;
    }
    for (unsigned i = 0; i < opts_.pull_threads; ++i) {
        pullers_.push_back(std::make_unique<puller>(
            loop_, i, [this](puller& p, const proto::push_header& h, std::size_t length, void* desc) {
                if (pushed(&p, h, length, desc) != UCS_INPROGRESS)
                    p.release(h.session, desc);
            }));
        if (auto ec = pullers_.back()->start(context_, why))
            return ec;
    }
    flusher_ = std::make_unique<flusher>(loop_, opts_.flush_threads, [this] { start_prune(); });
    catalog_ = std::make_unique<flusher>(loop_, 1);
    retention_ = std::make_unique<flusher>(loop_, 1);
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
        static constexpr char ready[] = "ready\n";
        [[maybe_unused]] auto n = ::write(opts_.ready_fd, ready, sizeof ready - 1);
        ::close(opts_.ready_fd);
        opts_.ready_fd = -1;
    }
    return {};
}

void daemon::accept_next()
{
    acceptor_->async_accept([this](boost::system::error_code ec,
                                   asio::local::stream_protocol::socket sock) {
        if (ec) {
            if (ec != asio::error::operation_aborted)
                log_error("accept failed: {}", ec.message());
            if (!stopped_ && ec != asio::error::operation_aborted)
                accept_next();
            return;
        }
        ucred cred{};
        socklen_t len = sizeof cred;
        if (::getsockopt(sock.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
            cred.uid != ::geteuid()) {
            // A process of another user: the runtime directory's mode should
            // have stopped it; refuse it here too.
            log_warn("refused connection from uid {} pid {}: not the job's user (uid {})",
                     cred.uid, cred.pid, ::geteuid());
            const auto bytes = proto::encode(proto::error_msg::from(
                errc::permission_denied,
                fmt::format("iod serves uid {} only; you are uid {}", ::geteuid(), cred.uid)));
            boost::system::error_code ignored;
            asio::write(sock, asio::buffer(bytes), ignored);
            sock.close(ignored);
        } else if (shutting_down_) {
            boost::system::error_code ignored;
            sock.close(ignored);
        } else {
            const auto id = next_session_id_++;
            auto s = std::make_shared<session>(*this, std::move(sock), id, cred.pid);
            sessions_.emplace(id, s);
            idle_timer_.cancel();
            s->start();
        }
        if (!stopped_)
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

void daemon::pull_started(bool loop_worker)
{
    arm_progress();
    retention_pause_.store(true, std::memory_order_relaxed);
    ++pulls_active_;
    if (loop_worker)
        driver_.busy_begin();
}

void daemon::pull_finished(bool loop_worker)
{
    if (loop_worker)
        driver_.busy_end();
    if (pulls_active_ > 0 && --pulls_active_ == 0 && prune_job_)
        asio::post(loop_, [this] { start_prune(); });  // after the pull's own handling
}

void daemon::acquire_slot(staging::waiter w, std::uint64_t bytes)
{
    staging_.acquire(std::move(w), bytes);
    if (staging_.short_of_slots())
        release_flushes(nullptr);
}

void daemon::flush_staged(const void* owner, bool hold, flusher::work w, flusher::done d)
{
    if (hold && !staging_.short_of_slots()) {
        held_flushes_.push_back({owner, std::move(w), std::move(d)});
        return;
    }
    release_flushes(owner);  // the owner's earlier chunks first
    flusher_->submit(std::move(w), std::move(d));
}

// nullptr: every owner's.
void daemon::release_flushes(const void* owner)
{
    std::vector<held_flush> go;
    std::erase_if(held_flushes_, [&](held_flush& h) {
        if (owner && h.owner != owner)
            return false;
        go.push_back(std::move(h));
        return true;
    });
    for (auto& h : go)
        flusher_->submit(std::move(h.work), std::move(h.done));
}

bool daemon::job_over() const
{
    if (job_.empty())
        return false;
    for (auto s : ranks_state_)
        if (s != rank_state::ended && s != rank_state::died)
            return false;
    return true;
}

ucs_status_t daemon::on_push(void* arg, const void* header, std::size_t header_length,
                             void* data, std::size_t length, const ucp_am_recv_param_t* param)
{
    auto* self = static_cast<daemon*>(arg);
    proto::push_header h;
    if (!decode_push(header, header_length, length, param, h))
        return UCS_ERR_INVALID_PARAM;
    return self->pushed(nullptr, h, length, data);
}

ucs_status_t daemon::pushed(puller* via, const proto::push_header& h, std::size_t length,
                            void* desc)
{
    const auto it = sessions_.find(h.session);
    if (it == sessions_.end())
        return UCS_ERR_CANCELED;
    return it->second->pushed(via, h.cookie, h.offset, length, desc);
}

puller* daemon::puller_for(std::uint32_t rank) noexcept
{
    return pullers_.empty() ? nullptr : pullers_[rank % pullers_.size()].get();
}

void daemon::release_pushed(puller* via, std::uint64_t sender, void* desc)
{
    if (via)
        via->release(sender, desc);
    else
        ucp_am_data_release(worker_.get(), desc);
}

std::error_code daemon::claim_store(const std::string& job, std::uint64_t& last,
                                    std::unique_ptr<store::claim>& claim, std::string& why)
{
    std::vector<std::string> names;
    if (auto ec = store_->list(job + "/", names); ec && ec != errc::not_found) {
        why = fmt::format("cannot list job {} in {}: {}", job, store_->describe(),
                          store::failure(*store_, job, ec));
        return ec;
    }
    for (const auto& n : names)
        if (auto v = store::parse_version_dir(n))
            last = std::max(last, *v);
    if (auto ec = store_->claim_job(job, opts_.node, claim)) {
        why = ec == errc::rank_in_use
                  ? fmt::format("job '{}' on node {} is being written by another daemon in {} "
                                "right now: give concurrent jobs different names (IOFWD_JOB)",
                                job, opts_.node, store_->describe())
                  : fmt::format("cannot claim job '{}' in {}: {}", job, store_->describe(),
                                store::failure(*store_, job, ec));
        job_.clear();
        return ec;
    }
    return {};
}

std::error_code daemon::admit(session& s, const proto::connect_msg& m, std::uint64_t& first_version,
                              std::string& why)
{
    if (shutting_down_) {
        why = "the daemon is shutting down";
        return errc::shutting_down;
    }
    // A job whose ranks have all gone (or never came) is forgotten when a
    // rank that cannot belong to it connects.
    const bool joinable = !job_.empty() && m.job == job_ && m.run == run_ && m.ranks == ranks_ &&
                          m.nodes == nodes_ && m.rank < ranks_state_.size() &&
                          ranks_state_[m.rank] == rank_state::absent;
    const bool gone =
        std::none_of(ranks_state_.begin(), ranks_state_.end(),
                     [](rank_state r) { return r == rank_state::connected; }) &&
        std::all_of(sessions_.begin(), sessions_.end(),
                    [&](const auto& e) {
                        return e.second.get() == &s || !e.second->admitted() || e.second->done();
                    }) &&
        !manifests_pending_;
    const bool ranks_gone = std::none_of(ranks_state_.begin(), ranks_state_.end(),
                                         [](rank_state r) { return r == rank_state::connected; });
    if (!job_.empty() && ranks_gone && !gone && !joinable) {
        // The last job's ranks are gone but some of its data is still on its
        // way to the store: the next job comes right after (the rank retries).
        why = fmt::format("this daemon is finishing job '{}' (its ranks are gone, its last "
                          "writes are on their way to the store)",
                          job_);
        return errc::job_finishing;
    }
    if (job_.empty() || (gone && !joinable)) {
        // First rank of a job: find where its versions continue in the store,
        // and claim the job there. A job that only writes files through the
        // shim keeps no versions in the store and claims nothing.
        std::uint64_t last = 0;
        job_claim_.reset();
        std::unique_ptr<store::claim> claim;
        if (!(m.flags & proto::connect_flag_files))
            if (auto ec = claim_store(m.job, last, claim, why))
                return ec;
        std::uint64_t first = last + 1;
        if (!m.run.empty() && !(m.flags & proto::connect_flag_files)) {
            // Every node numbers this run's versions from one record.
            store::run_record rec;
            if (auto ec = store::join_run(*store_, m.job, m.run, m.nodes, opts_.node, first, rec,
                                          why)) {
                job_.clear();
                return ec;
            }
            if (rec.first_version != first)
                log_info("run {} of job {}: versions from {}, as its record says", m.run, m.job,
                         rec.first_version);
            first = rec.first_version;
        }
        abandon_partial_versions();
        job_claim_ = std::move(claim);
        job_ = m.job;
        run_ = m.run;
        ranks_ = m.ranks;
        nodes_ = m.nodes;
        ranks_state_.assign(ranks_, rank_state::absent);
        versions_.clear();
        first_version_ = first;
    } else if (m.job != job_) {
        why = fmt::format("this daemon serves job '{}' on session {}; rank {} asked for job '{}' "
                          "(give each job its own IOFWD_SESSION)",
                          job_, paths_.session, m.rank, m.job);
        return errc::invalid_argument;
    } else if (m.run != run_) {
        why = fmt::format("this daemon serves run '{}' of job {}; rank {} belongs to run '{}' "
                          "(give each run its own IOFWD_SESSION, or finish the first)",
                          run_, job_, m.rank, m.run);
        return errc::invalid_argument;
    } else if (m.nodes != nodes_) {
        why = fmt::format("rank {} says the job has {} nodes, earlier ranks said {} (IOFWD_NODES)",
                          m.rank, m.nodes, nodes_);
        return errc::rank_mismatch;
    } else if (m.ranks != ranks_) {
        why = fmt::format("rank {} says the node has {} ranks, earlier ranks said {}", m.rank,
                          m.ranks, ranks_);
        return errc::rank_mismatch;
    }
    if (ranks_state_[m.rank] != rank_state::absent) {
        why = fmt::format("node-local rank {} of job {} is already {}", m.rank, job_,
                          ranks_state_[m.rank] == rank_state::connected ? "connected"
                                                                        : "finished");
        return errc::rank_in_use;
    }
    ranks_state_[m.rank] = rank_state::connected;
    first_version = first_version_;
    return {};
}

void daemon::rank_durable(const std::string& job, std::uint32_t ranks, std::uint64_t version,
                          std::uint32_t rank, const store::manifest_entry& entry)
{
    auto& pv = versions_[version];
    if (pv.entries.empty())
        pv.entries.resize(ranks);
    if (rank >= pv.entries.size() || pv.entries[rank])
        return;
    pv.entries[rank] = entry;
    if (++pv.count < ranks)
        return;

    store::manifest m{job, opts_.node, version, ranks, {}};
    for (const auto& e : pv.entries)
        m.entries.push_back(*e);
    versions_.erase(version);
    const std::string name = store::manifest_object(job, version, opts_.node);
    auto text = std::make_shared<std::string>(store::format_manifest(m));
    ++manifests_pending_;
    store::backend* st = store_.get();
    // Manifest, then (if every node's manifest is there) COMPLETE: one job on
    // the catalog thread. Retention follows as a job of its own.
    struct outcome {
        bool completed = false;
        std::string why;
    };
    auto result = std::make_shared<outcome>();
    const std::uint32_t nodes = nodes_;
    catalog_->submit(
        [st, name, text, job, version, nodes, result]() -> std::error_code {
            if (auto ec = st->put(name, std::as_bytes(std::span(*text)))) {
                result->why = fmt::format("writing manifest {} failed: {}", name, ec.message());
                return ec;
            }
            return store::try_complete(*st, job, version, nodes, result->completed, result->why);
        },
        [this, name, version, result, job](std::error_code ec) {
            if (ec) {
                log_error("version {} of node {}: {}", version, opts_.node, result->why);
                if (!manifest_error_)
                    manifest_error_ = ec;
                ++lost_versions_;
            } else {
                log_info("version {} of node {} complete ({} ranks): {}", version, opts_.node,
                         ranks_, name);
                if (result->completed) {
                    log_info("version {} of job {} complete on all {} nodes: {}", version, job,
                             nodes_, store::complete_object(job, version));
                    prune(job);
                }
            }
            --manifests_pending_;
            catalog_done();
        });
}

std::size_t daemon::abandon_partial_versions()
{
    std::size_t lost = 0;
    for (const auto& [version, pv] : versions_) {
        std::vector<std::uint32_t> missing, died;
        for (std::uint32_t r = 0; r < pv.entries.size(); ++r)
            if (!pv.entries[r])
                (r < ranks_state_.size() && ranks_state_[r] == rank_state::died ? died : missing)
                    .push_back(r);
        if (missing.empty()) {
            log_warn("version {} of job {} on node {}: discarded, rank{} {} died before writing "
                     "it",
                     version, job_, opts_.node, died.size() == 1 ? "" : "s", fmt::join(died, ", "));
            continue;
        }
        ++lost;
        log_error("version {} of job {} on node {}: rank{} {} never wrote it, so the node has no "
                  "manifest for it and it can never be complete; every rank must write every "
                  "version",
                  version, job_, opts_.node, missing.size() == 1 ? "" : "s",
                  fmt::join(missing, ", "));
    }
    lost_versions_ += lost;
    versions_.clear();
    return lost;
}

void daemon::prune(const std::string& job)
{
    if (opts_.keep == 0)
        return;
    if (!prune_job_)
        ++manifests_pending_;  // counted from now: the daemon does not exit before it ran
    prune_job_ = job;
    start_prune();
}

void daemon::start_prune()
{
    // Old versions go while no data is on its way to the store: their removal
    // would compete with a running checkpoint's flush for the store (on Ceph,
    // removal under a flush slowed it by 10-15 %). Checkpoints leave gaps.
    const bool data_busy = pulls_active_ > 0 || !held_flushes_.empty() || flusher_->busy();
    if (!prune_job_ || pruning_ || data_busy)
        return;
    pruning_ = true;
    retention_pause_.store(false, std::memory_order_relaxed);
    const std::string job = *prune_job_;
    prune_job_.reset();
    struct outcome {
        std::vector<std::uint64_t> removed;
        std::error_code ec;
    };
    auto result = std::make_shared<outcome>();
    store::backend* st = store_.get();
    const unsigned keep = opts_.keep;
    retention_->submit(
        [this, st, job, keep, result]() -> std::error_code {
            // A new write pauses it after the version being removed; it goes
            // on when the data is in the store.
            result->ec = store::prune(*st, job, keep, result->removed, [this] {
                return retention_pause_.load(std::memory_order_relaxed);
            });
            return {};
        },
        [this, job, result](std::error_code) {
            pruning_ = false;
            // Versions already removed are reported even when a later one failed.
            for (auto v : result->removed)
                log_info("retention (keep {}): removed version {} of job {}", opts_.keep, v, job);
            if (result->ec == std::errc::operation_canceled)
                prune(job);  // paused: wanted again, starts once the data is in
            else if (result->ec)
                log_error("retention (keep {}) of job {} stopped: {}; older versions stay in the "
                          "store",
                          opts_.keep, job, result->ec.message());
            --manifests_pending_;
            start_prune();  // a version completed while this ran
            catalog_done();
        });
}

void daemon::catalog_done()
{
    for (auto& [id, s] : sessions_)
        s->maybe_finish();
    check_exit();
}

void daemon::version_failed(std::error_code ec)
{
    if (ec != errc::peer_gone)
        ++lost_versions_;
}

void daemon::session_ended(session& s, bool clean)
{
    if (s.admitted() && s.rank() < ranks_state_.size())
        ranks_state_[s.rank()] = clean ? rank_state::ended : rank_state::died;
    boost::asio::post(loop_, [this] { check_exit(); });
}

std::uint32_t daemon::unfinished_ranks(std::uint32_t rank) const
{
    std::uint32_t n = 0;
    for (std::uint32_t r = 0; r < ranks_state_.size(); ++r)
        n += r != rank && ranks_state_[r] == rank_state::connected;
    return n;
}

void daemon::check_exit()
{
    if (stopped_)
        return;
    for (auto it = sessions_.begin(); it != sessions_.end();)
        it = it->second->done() ? sessions_.erase(it) : std::next(it);
    const bool idle = sessions_.empty() && manifests_pending_ == 0;
    if (shutting_down_) {
        bool busy = manifests_pending_ > 0;
        for (auto& [id, s] : sessions_)
            busy = busy || s->busy();
        if (!busy)
            for (auto& [id, s] : std::map(sessions_))
                s->shut_down();
        if (idle)
            stop();
        return;
    }
    if (opts_.auto_exit && job_over() && idle) {
        abandon_partial_versions();
        if (lost_versions_ == 0)
            log_info("job {}: all {} ranks done, everything durable; exiting", job_, ranks_);
        else
            log_error("job {}: all {} ranks done; {} version{} could not be made durable or "
                      "complete (see above); exiting with status 1",
                      job_, ranks_, lost_versions_, lost_versions_ == 1 ? "" : "s");
        stop();
        return;
    }
    if (opts_.auto_exit && job_.empty() && idle && next_session_id_ > 1) {
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
    if (!opts_.auto_exit || opts_.idle_timeout <= 0)
        return;
    idle_timer_.expires_after(std::chrono::milliseconds(
        static_cast<std::int64_t>(opts_.idle_timeout * 1000)));
    idle_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec || stopped_ || !sessions_.empty() || manifests_pending_)
            return;
        log_warn("no rank connected for {} s; exiting (job {}, {} of {} ranks finished)",
                 opts_.idle_timeout, job_.empty() ? "none" : job_,
                 std::count(ranks_state_.begin(), ranks_state_.end(), rank_state::ended), ranks_);
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
    boost::system::error_code ignored;
    if (acceptor_)
        acceptor_->close(ignored);
    signals_.async_wait([this](boost::system::error_code ec, int s) {
        if (!ec)
            on_signal(s);
    });
    check_exit();
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
    signals_.cancel(ignored);
    driver_.stop();
    log_info("exit status {}", exit_status());
    loop_.stop();
}

}  // namespace iofwd::iod

#include "transfer.hpp"

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "crc32c.hpp"
#include "flusher.hpp"
#include "puller.hpp"
#include "worker_driver.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "protocol.hpp"

namespace iofwd::iod {

struct transfer::target {
    std::once_flag once;
    std::error_code create_error;
    std::unique_ptr<store::object_writer> writer;
    std::atomic<std::uint64_t> first_job_ns{0};  // when the first flush job began

    void job_started() noexcept
    {
        std::uint64_t none = 0;
        first_job_ns.compare_exchange_strong(none, proto::monotonic_ns(), std::memory_order_relaxed);
    }

    // Whichever chunk job runs first creates the object; the others wait for
    // it inside call_once. No job ever waits for one queued behind it.
    std::error_code ensure(const opener& open, std::uint64_t size)
    {
        std::call_once(once, [&] { create_error = open(size, writer); });
        return create_error;
    }
};

struct transfer::pull_request {
    std::shared_ptr<transfer> self;
    slot s;
    chunk c;
    // The transfer gave up on this pull (its rank died and UCX never completed
    // it); if UCX completes it after all, only the slot is returned, unless
    // return_orphaned_slots() did already (then `self` is empty too).
    bool orphaned = false;
    bool slot_returned = false;
    bool loop_worker = true;  // done by the loop's worker, not a puller
    bool claim = false;       // posted ahead (chunk_claims), the chunk not yet seen here
    bool counted = true;      // in the flush policy's pulls (a claim: once taken)
};

transfer::transfer(transfer_resources r, source src, std::uint32_t rank, std::uint64_t version,
                   std::uint64_t length, std::string object, opener open, handlers h,
                   held_bytes inline_data)
    : r_(r), src_(src), rank_(rank), version_(version), length_(length),
      object_(std::move(object)), open_(std::move(open)), target_(std::make_shared<target>()), h_(std::move(h)),
      inline_(std::move(inline_data)), from_inline_(!inline_.empty()),
      started_ns_(proto::monotonic_ns()), order_(started_ns_)
{
    // Admission bounds length_ by slots.max_write().
    const std::uint64_t chunks = proto::chunks_of(length_, r_.slots.slot_size());
    crcs_.resize(chunks);
    sizes_.resize(chunks);
    held_.resize(chunks);
    if (src_.push && !from_inline_) {
        announced_.resize(chunks);
        if (src_.claims)
            claim_of_.resize(chunks);
    }
}

ucs_status_t transfer::arrived(std::uint64_t offset, std::uint64_t length, pushed_chunk p)
{
    const std::uint64_t slot = r_.slots.slot_size();
    const bool fits = src_.push && !from_inline_ && offset % slot == 0 && offset < length_ &&
                      length == std::min(slot, length_ - offset);
    if (!fits || announced_[offset / slot]) {
        log_warn("rank {}: a pushed chunk [{}, {}) that is not one of write {}'s ({} bytes in "
                 "chunks of {}): refused",
                 rank_, offset, offset + length, version_, length_, slot);
        return UCS_ERR_INVALID_PARAM;
    }
    if (error_)
        return UCS_ERR_CANCELED;
    const chunk c{static_cast<std::uint32_t>(offset / slot), offset, length};
    if (pull_request* req = claim_of_.empty() ? nullptr : claim_of_[c.index]) {
        // Its claim was posted after the chunk had passed its puller.
        iod::slot s;
        if (!retract_claim(req, s)) {
            // A puller took the claim: the chunk came before, and this one
            // is its double.
            log_warn("rank {}: the chunk [{}, {}) of write {} pushed twice: refused", rank_,
                     offset, offset + length, version_);
            return UCS_ERR_INVALID_PARAM;
        }
        announced_[c.index] = true;
        receive_pushed(s, c, p);
        return UCS_INPROGRESS;
    }
    announced_[c.index] = true;
    pending_.push_back({c, p});
    request_slot();
    return UCS_INPROGRESS;
}

bool transfer::claim_wanted()
{
    if (claim_of_.empty() || error_ || claims_posted_ >= src_.claims->ahead() ||
        r_.slots.short_of_slots())
        return false;
    while (next_claim_ < claim_of_.size() && announced_[next_claim_])
        ++next_claim_;
    return next_claim_ < claim_of_.size();
}

void transfer::post_claim(slot s)
{
    const std::uint64_t size = r_.slots.slot_size();
    const std::uint32_t i = next_claim_++;
    const chunk c{i, i * size, std::min(size, length_ - i * size)};
    auto* req = new pull_request{shared_from_this(), s, c};
    req->loop_worker = false;
    req->claim = true;
    req->counted = false;
    if (!src_.claims->post(claim_key(c.offset),
                           {s.data, static_cast<std::size_t>(c.size), r_.slots.memh(),
                            [req] { claim_taken(req); },
                            [req](ucs_status_t st) { pull_done(req, st); }, this})) {
        // A claim of the same chunk is posted (the rank named a cookie of
        // a write still under way): this write's chunks go through the loop.
        delete req;
        next_claim_ = static_cast<std::uint32_t>(claim_of_.size());  // no more claims
        r_.slots.release(s);
        return;
    }
    ++pulls_in_flight_;
    in_flight_.push_back(req);
    claim_of_[i] = req;
    ++claims_posted_;
}

void transfer::claim_taken(pull_request* req)
{
    // Before its pull_done (both posted by the puller, in this order); an
    // orphan no longer counts.
    if (req->orphaned || req->counted)
        return;
    req->counted = true;
    req->self->pull_begun(false);
}

bool transfer::retract_claim(pull_request* req, slot& s)
{
    claim_of_[req->c.index] = nullptr;
    --claims_posted_;
    if (!src_.claims->retract(claim_key(req->c.offset), this)) {
        announced_[req->c.index] = true;
        return false;  // its pull_done comes from the puller
    }
    s = req->s;
    std::erase(in_flight_, req);
    --pulls_in_flight_;
    delete req;  // never taken: never counted
    return true;
}

void transfer::retract_claims()
{
    auto keep = shared_from_this();  // the requests hold references
    for (pull_request* req : claim_of_) {
        slot s;
        if (req && retract_claim(req, s))
            r_.slots.release(s);
    }
}

void transfer::drop_pending()
{
    for (auto& p : pending_)
        give_back(p.held, r_.worker, r_.driver, src_.sender);
    pending_.clear();
}

bool transfer::fully_staged() const noexcept
{
    return !error_ && all_pulled() && released_ == 0;
}

void transfer::for_each_staged(
    const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const
{
    std::uint64_t offset = 0;
    for (const auto& s : held_) {
        const std::uint64_t n = std::min(s.size, length_ - offset);
        fn(offset, std::span<const std::byte>(s.data, n));
        offset += n;
    }
}

struct transfer::journaling {
    std::shared_ptr<store::journal> log;
    std::string job, node;
    std::uint64_t version;
    std::uint32_t rank, ranks, nodes;
    std::uint64_t bucket;
};

void transfer::journal_into(std::shared_ptr<store::journal> log, std::string job,
                            std::string node, std::uint32_t ranks, std::uint32_t nodes,
                            std::uint64_t bucket)
{
    journal_ = std::make_shared<const journaling>(journaling{
        std::move(log), std::move(job), std::move(node), version_, rank_, ranks, nodes, bucket});
}

void transfer::start()
{
    // The store object is created by the first chunk's flush job, off the
    // path of the answer to the rank and overlapping later pulls.
    request_slot();
}

void transfer::request_slot()
{
    const bool pushed = src_.push && !from_inline_;
    if (error_ || waiting_for_slot_ ||
        (pushed ? pending_.empty() && !claim_wanted() : next_offset_ >= length_))
        return;
    // At most half the slots (two at least) in UCX's hands per transfer,
    // asked for again as each pull ends: UCX can hold them for good
    // (orphan_pulls), and a rank that hangs up and lives on without
    // progressing would otherwise take all of staging with one write. A
    // quarter was measured too: one rank's 256 MiB write then lost a quarter
    // of its speed, its pullers idle while the loop posted the next get.
    if (in_flight_.size() >= std::max<std::size_t>(2, r_.slots.slot_count() / 2))
        return;
    waiting_for_slot_ = true;
    // One slot at a time per transfer: the next request queues behind other
    // ranks' requests, so concurrent writers share the staging memory fairly.
    // A write of one chunk needs only a piece of a slot that size.
    r_.flushes.acquire([self = shared_from_this()](slot s) { self->on_slot(s); },
                    crcs_.size() == 1 ? length_ : UINT64_MAX);
}

void transfer::on_slot(slot s)
{
    waiting_for_slot_ = false;
    if (error_) {
        r_.slots.release(s);
        check_done();
        return;
    }
    if (src_.push && !from_inline_) {
        if (!pending_.empty()) {
            // The next pushed chunk, read from the rank by UCX (cma) into the slot.
            const pushed p = pending_.front();
            pending_.pop_front();
            receive_pushed(s, p.c, p.held);
        } else if (claim_wanted()) {
            // Where the next chunk goes, for its puller to start at once.
            post_claim(s);
        } else {
            r_.slots.release(s);
            return;
        }
        request_slot();
        return;
    }
    chunk c{next_index_++, next_offset_, std::min(s.size, length_ - next_offset_)};
    next_offset_ += c.size;
    if (from_inline_) {
        // The only copy the daemon makes of a mailbox record's bytes.
        std::memcpy(s.data, inline_.bytes.data() + c.offset, c.size);
        // Staged whole: the daemon's bound is its staging, not staging and
        // a copy of every small write until it is durable.
        if (next_offset_ == length_)
            inline_ = {};
        ++pulls_in_flight_;
        on_pulled(s, c, UCS_OK);
        request_slot();
        return;
    }
    pull_into(s, c, [&](ucp_request_param_t& param) {
        param.cb.send = &transfer::get_done;
        return ucp_get_nbx(src_.ep, s.data, c.size, src_.address + c.offset, src_.rkey, &param);
    });
    request_slot();
}

template <typename Post>
void transfer::pull_into(slot s, chunk c, Post&& post)
{
    auto* req = new pull_request{shared_from_this(), s, c};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_MEMH;
    param.user_data = req;
    param.memh = r_.slots.memh();
    ++pulls_in_flight_;
    pull_begun(true);
    ucs_status_t st = UCS_OK;
    if (ucx::request_finished(post(param), st)) {
        delete req;
        pull_ended(true);
        on_pulled(s, c, st);
    } else {
        in_flight_.push_back(req);
        r_.driver.kick();
    }
}

void transfer::pull_begun(bool loop_worker)
{
    r_.flushes.pull_started();
    if (loop_worker)
        r_.driver.busy_begin();
}

void transfer::pull_ended(bool loop_worker)
{
    if (loop_worker)
        r_.driver.busy_end();
    r_.flushes.pull_finished();
}

void transfer::receive_pushed(slot s, chunk c, pushed_chunk p)
{
    if (p.via) {
        receive_via_puller(s, c, p);
        return;
    }
    pull_into(s, c, [&](ucp_request_param_t& param) {
        param.cb.recv_am = &transfer::recv_done;
        return ucp_am_recv_data_nbx(r_.worker.get(), p.desc, s.data, c.size, &param);
    });
}

void transfer::receive_via_puller(slot s, chunk c, pushed_chunk p)
{
    auto* req = new pull_request{shared_from_this(), s, c};
    req->loop_worker = false;
    ++pulls_in_flight_;
    pull_begun(false);
    in_flight_.push_back(req);
    p.via->receive(src_.sender, p.desc, s.data, c.size, r_.slots.memh(),
                      [req](ucs_status_t st) { pull_done(req, st); });
}

void transfer::get_done(void* request, ucs_status_t status, void* user_data)
{
    ucp_request_free(request);
    pull_done(static_cast<pull_request*>(user_data), status);
}

void transfer::pull_done(pull_request* req, ucs_status_t status)
{
    if (req->orphaned) {
        if (req->slot_returned) {
            // Cannot be, by the reasoning of watch_exit; if UCX proves it
            // wrong, the slot may have had another rank's bytes by then.
            if (status == UCS_OK)
                log_error("a pull given up on (its rank's process had exited) completed after "
                          "its staging slot was returned: a write that used the slot since "
                          "may be damaged; please report this");
        } else {
            auto& t = *req->self;
            std::erase(t.orphans_, req);
            if (t.orphans_.empty())
                t.exit_watch_.reset();  // nothing left to wait for
            t.give_back_orphaned(req->s);
        }
        delete req;
        return;
    }
    if (req->counted)
        req->self->pull_ended(req->loop_worker);
    std::erase(req->self->in_flight_, req);
    if (req->claim) {
        // A puller took the claim: the chunk came.
        auto& t = *req->self;
        if (t.claim_of_[req->c.index] == req) {
            t.claim_of_[req->c.index] = nullptr;
            --t.claims_posted_;
        }
        t.announced_[req->c.index] = true;
    }
    auto self = std::move(req->self);
    const slot s = req->s;
    const chunk c = req->c;
    delete req;
    self->on_pulled(s, c, status);
    self->request_slot();  // the cap on pulls in flight may have held it back
}

void transfer::recv_done(void* request, ucs_status_t status, std::size_t, void* user_data)
{
    get_done(request, status, user_data);
}

void transfer::on_pulled(slot s, chunk c, ucs_status_t st)
{
    --pulls_in_flight_;
    if (st != UCS_OK) {
        // Failed first, then the slot back: a release may hand the slot
        // straight to this transfer's own waiting request, which must not
        // read another chunk from a rank whose read just failed.
        fail(make_ucx_error(st),
             fmt::format("pulling bytes [{}, {}) of rank {} version {} failed: {}; the partial "
                         "version is discarded",
                         c.offset, c.offset + c.size, rank_, version_, ucs_status_string(st)));
        r_.slots.release(s);
        check_done();
        return;
    }
    pulled_bytes_ += c.size;
    held_[c.index] = s;
    if (pulled_bytes_ == length_ && !error_ && h_.pulled)
        h_.pulled();

    ++flushes_in_flight_;
    // A write of one chunk is committed by the same job: no trip back to the
    // loop and out to a flusher thread again between its write and its fsync.
    const bool commit = crcs_.size() == 1;
    // And one small enough for the node's journal is made durable there
    // first, on the journal's thread, in a batch (flush_policy::append): the
    // rank is told, then its object is written and committed as any other.
    if (commit && h_.logged && journal_) {
        auto crc = std::make_shared<std::uint32_t>(0);
        // A packed version's bytes leave staging with the append: the pack
        // is written from this copy (a version here is at most
        // IOFWD_JOURNAL_MAX, and the journal bounds how many wait).
        auto packed = journal_->bucket ? std::make_shared<std::vector<std::byte>>() : nullptr;
        auto seq = std::make_shared<std::uint64_t>(0);
        r_.flushes.append(
            [t = target_, jj = journal_, s, c, crc, seq] {
                t->job_started();
                *crc = crc32c({s.data, c.size});
                return jj->log->write({jj->job, jj->node, jj->version, jj->rank, jj->ranks,
                                       jj->nodes, jj->bucket},
                                      {s.data, c.size}, *crc, *seq);
            },
            [jj = journal_, s, c, seq, packed] {
                auto ec = jj->log->durable(*seq);
                if (!ec && packed)
                    packed->assign(s.data, s.data + c.size);
                return ec;
            },
            [self = shared_from_this(), s, c, crc, packed](std::error_code ec) {
                const bool logged = !ec;
                if (ec && ec != std::errc::no_buffer_space) {
                    const auto& jj = *self->journal_;
                    log_warn("node {}'s journal of job {} failed ({}): version {} of rank {} is "
                             "committed without it",
                             jj.node, jj.job, ec.message(), jj.version, jj.rank);
                }
                if (logged && !self->error_)
                    self->h_.logged(*crc,
                                    flush_span{self->target_->first_job_ns.load(),
                                               proto::monotonic_ns()},
                                    packed);
                if (logged && packed && !self->error_) {
                    // Its pack is the job's to write (job::rank_durable).
                    self->on_flushed(s, c, *crc, {}, true);
                    return;
                }
                self->flush_chunk(s, c, true, logged ? crc : nullptr);
            });
        return;
    }
    flush_chunk(s, c, commit, nullptr);
}

void transfer::flush_chunk(slot s, chunk c, bool commit, std::shared_ptr<std::uint32_t> logged)
{
    // The crc32c: computed by the write of an unlogged chunk, known already
    // of a logged one.
    auto crc = logged ? logged : std::make_shared<std::uint32_t>(0);
    auto committing = commit ? std::make_shared<bool>(false) : nullptr;
    r_.flushes.flush(
        this, order_, !all_pulled() && !error_,
        [t = target_, open = &open_, size = length_, s, c, crc, committing,
         jj = logged ? journal_ : nullptr] {
            t->job_started();
            if (auto ec = t->ensure(*open, size))
                return ec;
            if (auto ec = jj ? t->writer->write_staged({s.data, c.size}, c.offset, s.size)
                             : t->writer->write_checksummed({s.data, c.size}, c.offset, s.size,
                                                            *crc))
                return ec;
            if (!committing)
                return std::error_code{};
            *committing = true;
            // A logged part's record is settled later, once the node's
            // manifest lists it (job::rank_durable): a record settled here
            // could be overwritten before that manifest is durable, and
            // a crash then would leave a version answered durable that no
            // restart can complete.
            return t->writer->commit();
        },
        [self = shared_from_this(), s, c, crc, committing](std::error_code ec) {
            self->on_flushed(s, c, *crc, ec, committing && *committing);
        },
        flush_key_);
}

void transfer::on_flushed(slot s, chunk c, std::uint32_t crc, std::error_code ec, bool committed)
{
    --flushes_in_flight_;
    ++released_;
    r_.slots.release(s);
    if (committed) {
        // The only chunk, written and committed by its job (ec: the commit's).
        report_commit(ec, crc);
        return;
    }
    if (ec && target_->create_error) {
        fail(ec, fmt::format("cannot create {}: {}", object_, ec.message()));
    } else if (ec) {
        fail(ec, fmt::format("writing bytes [{}, {}) of {} failed: {}", c.offset,
                             c.offset + c.size, object_, ec.message()));
    } else {
        crcs_[c.index] = crc;
        sizes_[c.index] = c.size;
        flushed_bytes_ += c.size;
    }
    check_done();
}

void transfer::source_gone()
{
    if (all_pulled())
        return;
    const auto keep = shared_from_this();  // fail() may end it
    fail(make_error_code(errc::peer_gone),
         fmt::format("rank {} went away after {} of {} bytes of version {} were pulled; "
                     "the partial version is discarded",
                     rank_, pulled_bytes_, length_, version_));
    if (in_flight_.empty()) {
        // Nothing UCX still owes (a pushed write whose chunks never came):
        // it ends now, or it would hold its session, and the daemon, forever.
        // Posted: the caller (the session, closing) is in the middle of its
        // own bookkeeping, which the end of this transfer changes.
        boost::asio::post(r_.loop, [self = shared_from_this()] { self->check_done(); });
        return;
    }
    // UCX 1.13 does not cancel an emulated get whose target died when the
    // endpoint is closed (error mode NONE): give the pulls a moment, then give
    // up on them so that the version is reported and the daemon can finish.
    grace_ = std::make_unique<boost::asio::steady_timer>(r_.loop, std::chrono::seconds(2));
    grace_->async_wait([self = shared_from_this()](boost::system::error_code ec) {
        if (!ec && !self->in_flight_.empty())
            self->orphan_pulls();
    });
}

void transfer::orphan_pulls()
{
    log_warn("rank {} version {}: {} pulls never completed after the rank went away; their "
             "staging slots stay reserved while its process (pid {}) lives",
             rank_, version_, in_flight_.size(), src_.pid);
    for (auto* req : in_flight_) {
        req->orphaned = true;
        --pulls_in_flight_;
        if (req->counted)
            pull_ended(req->loop_worker);
        r_.slots.stalled_add(req->s.size);
    }
    orphans_ = std::move(in_flight_);
    in_flight_.clear();
    check_done();
    watch_exit();
}

void transfer::watch_exit()
{
    // Opened now, not at accept: a process that has exited cannot get its
    // pid back, so whatever pidfd_open finds under it, the rank is gone once
    // that has exited too (ESRCH: gone already). glibc 2.36 declares
    // pidfd_open without C linkage for C++, hence the syscall.
    const int fd = src_.pid > 0 ? static_cast<int>(::syscall(SYS_pidfd_open, src_.pid, 0)) : -1;
    const int err = errno;
    auto after_exit = [self = shared_from_this()] {
        // What the rank sent before it exited may still be on its way
        // through the loop's worker: let it deliver that first (a puller
        // with an orphaned receive stays busy, so it keeps progressing).
        self->r_.driver.kick();
        self->grace_->expires_after(std::chrono::seconds(2));
        self->grace_->async_wait([self](boost::system::error_code ec) {
            if (!ec)
                self->return_orphaned_slots();
        });
    };
    if (fd < 0 && src_.pid > 0 && err == ESRCH) {
        after_exit();
        return;
    }
    boost::system::error_code ec;
    if (fd >= 0) {
        exit_watch_ = std::make_unique<boost::asio::posix::stream_descriptor>(r_.loop);
        exit_watch_->assign(fd, ec);  // owns fd from here, even on failure
    }
    if (fd < 0 || ec) {
        log_error("rank {} version {}: cannot watch the rank's process (pid {}): {}; its {} "
                  "staging slots stay reserved for the daemon's life",
                  rank_, version_, src_.pid,
                  src_.pid <= 0 ? "its pid is unknown here" : fd < 0 ? std::strerror(err)
                                                                     : ec.message(),
                  orphans_.size());
        exit_watch_.reset();
        return;
    }
    exit_watch_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                            [after_exit](boost::system::error_code e) {
                                if (!e)
                                    after_exit();
                            });
}

void transfer::give_back_orphaned(slot s)
{
    r_.slots.stalled_sub(s.size);
    r_.slots.release(s);
}

void transfer::return_orphaned_slots()
{
    exit_watch_.reset();
    if (orphans_.empty())
        return;
    log_info("rank {} version {}: {} staging slots returned: the rank's process has exited, "
             "so the pulls UCX never completed can no longer write there",
             rank_, version_, orphans_.size());
    auto keep = shared_from_this();  // the requests' references go below
    for (auto* req : orphans_) {
        req->slot_returned = true;
        req->self.reset();
        give_back_orphaned(req->s);
    }
    orphans_.clear();
}

void transfer::fail(std::error_code ec, std::string why)
{
    if (error_)
        return;
    // A slot given back below may go straight to this transfer's own
    // request, which then reports its end: the last reference may go.
    const auto keep = shared_from_this();
    error_ = ec;
    why_ = std::move(why);
    drop_pending();
    retract_claims();
    r_.flushes.release(this);
}

void transfer::check_done()
{
    // A failed transfer does not wait for a slot it asked for: the queued
    // request hands the slot straight back whenever it is served.
    if (reported_ || committing_ || pulls_in_flight_ || flushes_in_flight_ ||
        (waiting_for_slot_ && !error_))
        return;
    if (error_) {
        reported_ = true;
        target_->writer.reset();  // abandons the temporary object
        h_.finished(error_, why_, {}, {});
        return;
    }
    if (flushed_bytes_ != length_)
        return;
    committing_ = true;
    std::uint32_t crc = 0;
    for (std::size_t i = 0; i < crcs_.size(); ++i)
        crc = i == 0 ? crcs_[0] : crc32c_combine(crc, crcs_[i], sizes_[i]);
    r_.flushes.commit(order_, [t = target_] { return t->writer->commit(); },
                      [self = shared_from_this(), crc](std::error_code ec) {
                          self->committing_ = false;
                          self->report_commit(ec, crc);
                      });
}

void transfer::report_commit(std::error_code ec, std::uint32_t crc)
{
    reported_ = true;
    target_->writer.reset();
    if (ec)
        h_.finished(ec, fmt::format("committing {} failed: {}", object_, ec.message()), {}, {});
    else {
        const std::uint64_t now = proto::monotonic_ns();
        const std::uint64_t first = target_->first_job_ns.load(std::memory_order_relaxed);
        // An empty write has no flush job: its flush is its commit.
        h_.finished({}, {}, store::manifest_entry{rank_, length_, crc},
                    flush_span{first ? first : now, now});
    }
}

}  // namespace iofwd::iod

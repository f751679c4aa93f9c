#include "write_path.hpp"

#include "log.hpp"
#include "session.hpp"

namespace iofwd::iod {

void write_path::reserve(std::uint64_t cookie, bool from_mail)
{
    reserved_ = true;
    cookie_ = cookie;
    from_mail_ = from_mail;
    s_.work_begun();
}

void write_path::unreserve()
{
    reserved_ = false;
    s_.work_done();
    s_.changed();
}

std::shared_ptr<transfer> write_path::start(request r)
{
    if (!reserved_) {
        s_.work_begun();
        cookie_ = r.cookie;
        from_mail_ = r.mail_end > 0;
    }
    reserved_ = false;
    const std::uint64_t n = next_serial_++;
    const std::uint64_t cookie = r.cookie;
    const std::uint64_t version = r.version;
    const std::uint64_t mail_end = r.mail_end;
    const bool push = r.src.push && r.data.empty();
    r.src.cookie = cookie;
    key_ = std::move(r.key);

    transfer::handlers h;
    h.pulled = [weak = s_.weak_from_this(), n, cookie, version, mail_end,
                pulled = std::move(r.pulled)] {
        auto self = weak.lock();
        if (!self)
            return;
        auto& w = self->writes();
        if (w.current_serial_ == n) {
            w.current_.reset();
            w.key_ = ucx::rkey{};
        }
        if (pulled)
            pulled();
        if (!mail_end)
            self->send(proto::write_done_msg{cookie, version});
        self->mail_staged(mail_end);
    };
    h.finished = [self = s_.shared_from_this(), n, mail_end, finished = std::move(r.finished)](
                     std::error_code ec, const std::string& why, const store::manifest_entry& entry,
                     transfer::flush_span span) {
        auto& w = self->writes();
        self->work_done();
        // Still waited for: it never got as far as staged.
        const bool was_current = w.current_serial_ == n && w.current_;
        if (was_current)
            w.settled(n, mail_end);
        finished(ec, why, entry, span, was_current && !mail_end);
        self->changed();
    };
    h.logged = std::move(r.logged);
    auto t = std::make_shared<transfer>(s_.resources(), r.src, s_.rank(), version, r.length,
                                        std::move(r.object), std::move(r.open), std::move(h),
                                        std::move(r.data));
    current_ = t;
    current_serial_ = n;
    current_version_ = version;
    if (r.order)
        t->order_flushes(r.order);
    t->serialize_flushes(r.flush_key);
    if (r.journal)
        t->journal_into(std::move(r.journal), std::move(r.journal_job), std::move(r.journal_node),
                        r.journal_ranks, r.journal_nodes, r.journal_bucket);
    if (r.created)
        r.created(t);
    t->start();
    if (push)
        adopt_early(cookie);
    return t;
}

void write_path::settled(std::uint64_t n, std::uint64_t mail_end)
{
    if (current_serial_ == n) {
        current_.reset();
        key_ = ucx::rkey{};
    }
    s_.mail_staged(mail_end);
}

ucs_status_t write_path::pushed(std::uint64_t cookie, std::uint64_t offset, std::uint64_t length,
                                pushed_chunk p)
{
    if (current_ && cookie == cookie_)
        return current_->arrived(offset, length, p);
    if (cookie > last_cookie_ || (reserved_ && cookie == cookie_)) {
        // Its announcement is still on the socket. Bounded: a rank has one
        // write in flight, of at most this many chunks.
        static constexpr std::size_t max_early = 1u << 16;
        if (early_.size() >= max_early)
            return UCS_ERR_EXCEEDS_LIMIT;
        early_.push_back({cookie, offset, length, p});
        return UCS_INPROGRESS;
    }
    return UCS_ERR_CANCELED;  // a write that already ended
}

void write_path::adopt_early(std::uint64_t cookie)
{
    auto chunks = std::move(early_);
    early_.clear();
    for (auto& c : chunks) {
        if (c.cookie != cookie) {
            early_.push_back(c);
            continue;
        }
        const ucs_status_t st =
            current_ ? current_->arrived(c.offset, c.length, c.held) : UCS_ERR_CANCELED;
        if (st != UCS_INPROGRESS)
            s_.give_back(c.held);
    }
}

void write_path::release_early(std::uint64_t cookie)
{
    std::erase_if(early_, [&](const early_chunk& c) {
        if (c.cookie != cookie && cookie != 0)
            return false;
        s_.give_back(c.held);
        return true;
    });
}

void write_path::source_gone()
{
    if (current_ && !from_mail_)
        current_->source_gone();
}

}  // namespace iofwd::iod

#include "file_writes.hpp"

#include <fmt/format.h>

#include "daemon.hpp"
#include "errors.hpp"
#include "files.hpp"
#include "format.hpp"
#include "log.hpp"
#include "protocol.hpp"
#include "session.hpp"
#include "staging.hpp"
#include "transfer.hpp"

namespace iofwd::iod {

void file_writes::on_file_open(const proto::file_open_msg& m)
{
    if (!s_.well_formed("FILE_OPEN", m.cookie))
        return;
    if (const auto it = files_.find(m.file); it != files_.end()) {
        s_.fail(errc::protocol_error, fmt::format("FILE_OPEN of file {} ({}) while it is open as {}",
                                                  m.file, m.path, it->second.file->path()));
        return;
    }
    std::shared_ptr<forwarded_file> f;
    std::string why;
    if (auto ec = s_.owner().files().open(m.path, f, why)) {
        log_warn("{}: {}", s_.who(), why);
        s_.send(proto::error_msg::from(ec, why, m.cookie));
        return;
    }
    files_[m.file] = handle{f, {}, {}};
    log_info("{}: forwarding writes to {}", s_.who(), m.path);
    s_.send(proto::file_done_msg{m.cookie});
}

std::string file_writes::mail_problem(const mailbox::reader::record& r) const
{
    if (!files_.contains(r.file))
        return fmt::format("a mailbox write to file {}, which is not open", r.file);
    if (r.offset + r.data.size() < r.offset)
        return fmt::format("a mailbox write of {} bytes at offset {}: the end overflows",
                           r.data.size(), r.offset);
    return {};
}

void file_writes::on_file_write(proto::file_write_msg& m)
{
    if (!s_.may_write("FILE_WRITE", m.cookie))
        return;
    auto& writes = s_.writes();
    writes.announced(m.cookie);
    const auto it = files_.find(m.file);
    const bool push = m.data.empty() && m.rkey.empty();
    if (push && !(s_.hello().flags & proto::connect_flag_push)) {
        s_.fail(errc::protocol_error, fmt::format("FILE_WRITE {} with neither inline data nor a "
                                                  "remote key on a connection that does not push",
                                                  m.cookie));
        return;
    }
    if (const auto most = s_.owner().stage().max_write(); m.length > most) {
        writes.release_early(m.cookie);
        s_.send(proto::error_msg::from(
            make_error_code(errc::too_large),
            fmt::format("FILE_WRITE of {} bytes: more than one write may be here ({}: {} chunks "
                        "of {})",
                        m.length, human_bytes(most), proto::max_chunks_per_write,
                        human_bytes(s_.owner().stage().slot_size())),
            m.cookie));
        return;
    }
    if (it == files_.end()) {
        writes.release_early(m.cookie);
        s_.send(proto::error_msg::from(make_error_code(errc::invalid_argument),
                                       fmt::format("FILE_WRITE to file {}, which is not open",
                                                   m.file),
                                       m.cookie));
        return;
    }
    if (s_.owner().shutting_down()) {
        writes.release_early(m.cookie);
        s_.send(proto::error_msg::from(make_error_code(errc::shutting_down),
                                       "the daemon is shutting down and takes no new writes",
                                       m.cookie));
        return;
    }
    writes.reserve(m.cookie, false);
    auto f = it->second.file;
    auto runs = m.runs.empty()
                    ? forwarded_file::one_run(m.offset, m.length)
                    : std::make_shared<const std::vector<proto::file_run>>(std::move(m.runs));
    // Behind any write in flight that overlaps it (the rank waits meanwhile).
    f->submit(runs, [weak = s_.weak_from_this(), f, runs, m = std::move(m)]() mutable {
        auto self = weak.lock();
        if (!self || self->ended()) {
            // The rank went away before this write began: it never handed it over.
            f->finished(runs);
            if (self) {
                self->writes().release_early(m.cookie);
                self->writes().unreserve();
            }
            return;
        }
        auto data = held_bytes::own(std::move(m.data));
        self->files().start(f, m, std::move(data), std::move(runs), 0);
    });
}

void file_writes::from_mail(mailbox::reader::record& r)
{
    // Like FILE_WRITE, but the rank does not wait: a failure is reported at
    // the file's next sync (or at the end of the session).
    s_.writes().reserve(r.cookie, true);
    auto f = files_.at(r.file).file;
    proto::file_write_msg m{r.cookie, r.file, r.offset, r.data.size(), 0, {}, {}, {}};
    held_bytes data{std::move(r.keep), r.data};
    const std::uint64_t mail_end = r.end;
    auto runs = forwarded_file::one_run(m.offset, m.length);
    f->submit(runs, [weak = s_.weak_from_this(), f, runs, m = std::move(m),
                     data = std::move(data), mail_end]() mutable {
        if (auto self = weak.lock())
            self->files().start(f, m, std::move(data), std::move(runs), mail_end);
        else
            f->finished(runs);
    });
}

void file_writes::start(std::shared_ptr<forwarded_file> f, const proto::file_write_msg& m,
                        held_bytes data, forwarded_file::runs runs, std::uint64_t mail_end)
{
    const std::uint64_t cookie = m.cookie;
    const std::uint64_t id = m.file;
    const std::uint64_t offset = m.offset;
    const std::uint64_t length = m.length;
    const std::string what =
        runs->size() == 1
            ? fmt::format("the write of {} bytes at offset {} to {}", length, offset, f->path())
            : fmt::format("the write of {} bytes in {} runs from offset {} to {}", length,
                          runs->size(), offset, f->path());
    const bool push = data.empty() && m.rkey.empty();

    write_path::request r;
    r.cookie = cookie;
    r.mail_end = mail_end;
    r.version = 0;
    r.length = length;
    r.object = what;
    r.src = s_.source(push, nullptr, m.address);
    if (data.empty() && !push) {
        // The daemon gets the bytes with the key the rank sent.
        std::string why;
        std::error_code ec;
        if (!s_.owner().peers().usable(s_.hello().worker_address, m.rkey, why))
            ec = make_error_code(errc::protocol_error);
        else
            ec = s_.unpack_key(m.rkey, r.key);
        if (ec) {
            f->finished(runs);
            s_.writes().unreserve();
            s_.send(proto::error_msg::from(
                ec, fmt::format("the remote key for {} does not unpack: {}", what,
                                why.empty() ? ec.message() : why),
                cookie));
            return;
        }
        r.src.rkey = r.key.get();
    }
    r.open = [f, runs](std::uint64_t, std::unique_ptr<store::object_writer>& out) {
        out = f->writer(runs);
        return std::error_code{};
    };
    r.data = std::move(data);
    // Pieces through the page cache take the file's lock in the kernel: two
    // flush threads writing them to one file would spin. Large aligned runs
    // go with O_DIRECT, which file systems write to one file in parallel.
    if (forwarded_file::through_page_cache(*runs))
        r.flush_key = f.get();
    r.finished = [this, f, runs, cookie, id, what](
                     std::error_code ec, const std::string& why, const store::manifest_entry&,
                     transfer::flush_span, bool waiting) {
        if (ec) {
            log_error("{}: {} lost: {}", s_.who(), what, why);
            if (waiting) {
                // The MPI write is still waiting: it fails, nothing was taken.
                s_.send(proto::error_msg::from(ec, why, cookie));
            } else if (ec != errc::peer_gone) {
                // Reported at the file's next sync, or at the end of the session.
                const auto h = files_.find(id);
                if (h != files_.end() && h->second.file == f) {
                    if (!h->second.error) {
                        h->second.error = ec;
                        h->second.why = why;
                    }
                } else {
                    s_.remember_failure(ec, why);
                }
            }
        }
        // Last: a sync waiting for the file to go idle runs from here, and
        // must find this write's failure already recorded.
        f->finished(runs);
    };
    s_.writes().start(std::move(r));
}

void file_writes::settle(std::shared_ptr<forwarded_file> f, bool durable, bool release,
                         std::function<void(std::error_code, std::string)> done)
{
    s_.work_begun();
    auto finish = [self = s_.shared_from_this(), f, release,
                   done = std::move(done)](std::error_code ec, std::string why) {
        if (release)
            self->owner().files().release(f);
        self->work_done();
        done(ec, std::move(why));
        self->changed();
    };
    f->when_idle([this, f, durable, finish = std::move(finish)]() mutable {
        if (!durable) {
            finish({}, {});
            return;
        }
        s_.owner().flushes().commit(proto::monotonic_ns(), [f] { return f->sync(); },
                                    [f, finish = std::move(finish)](std::error_code ec) mutable {
                                        finish(ec, ec ? fmt::format("fsync of {} failed: {}",
                                                                    f->path(), ec.message())
                                                      : std::string());
                                    });
    });
}

void file_writes::on_file_sync(const proto::file_sync_msg& m)
{
    if (!s_.well_formed("FILE_SYNC", m.cookie))
        return;
    const auto it = files_.find(m.file);
    if (it == files_.end()) {
        s_.send(proto::error_msg::from(make_error_code(errc::invalid_argument),
                                       fmt::format("FILE_SYNC of file {}, which is not open",
                                                   m.file),
                                       m.cookie));
        return;
    }
    const bool durable = m.flags & proto::file_sync_durable;
    const std::uint64_t cookie = m.cookie;
    if (m.flags & proto::file_sync_close) {
        // Unless the rank asked for durability too, it does not wait for a
        // close: the answer goes now.
        auto h = std::move(it->second);
        files_.erase(it);
        if (!durable)
            s_.send(proto::file_done_msg{cookie});
        close(std::move(h), durable ? cookie : 0);
        return;
    }
    settle(it->second.file, durable, false,
           [this, cookie, id = m.file](std::error_code ec, std::string why) {
               // A write that failed since the last sync is this sync's failure.
               if (const auto h = files_.find(id); h != files_.end() && h->second.error) {
                   ec = std::exchange(h->second.error, {});
                   why = std::move(h->second.why);
               }
               s_.send(ec ? proto::error_msg::from(ec, why, cookie)
                          : proto::message(proto::file_done_msg{cookie}));
           });
}

void file_writes::on_file_drain(const proto::file_drain_msg& m)
{
    if (!s_.well_formed("FILE_DRAIN", m.cookie))
        return;
    auto f = s_.owner().files().find(m.path);
    if (!f) {
        s_.send(proto::file_done_msg{m.cookie});
        return;
    }
    s_.work_begun();
    f->when_idle([self = s_.shared_from_this(), cookie = m.cookie] {
        self->work_done();
        self->send(proto::file_done_msg{cookie});
        self->changed();
    });
}

void file_writes::close(handle h, std::uint64_t cookie)
{
    s_.remember_failure(h.error, h.why);
    settle(h.file, true, true, [this, cookie](std::error_code ec, std::string why) {
        if (ec)
            log_error("{}: {}", s_.who(), why);
        if (cookie)
            s_.send(ec ? proto::error_msg::from(ec, why, cookie)
                       : proto::message(proto::file_done_msg{cookie}));
        else
            s_.remember_failure(ec, why);
    });
}

void file_writes::close_all()
{
    for (auto& [id, h] : files_)
        close(std::move(h), 0);
    files_.clear();
}

}  // namespace iofwd::iod

#include "checkpoint_writes.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "daemon.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "session.hpp"
#include "store/layout.hpp"
#include "transfer.hpp"

namespace iofwd::iod {

void checkpoint_writes::on_write_req(proto::write_req_msg& m)
{
    if (!s_.may_write("WRITE_REQ", m.cookie))
        return;
    s_.writes().announced(m.cookie);
    auto refuse = [&](std::error_code ec, std::string why) {
        log_warn("{}: write refused: {}", s_.who(), why);
        s_.writes().release_early(m.cookie);
        s_.send(proto::error_msg::from(ec, std::move(why), m.cookie));
    };
    const auto capacity = s_.hello().buffer_length;
    if (m.length == 0 || m.length > capacity) {
        refuse(m.length == 0 ? make_error_code(errc::invalid_argument)
                             : make_error_code(errc::too_large),
               fmt::format("write of {} bytes from rank {}: the registered buffer holds {} bytes",
                           m.length, s_.rank(), capacity));
        return;
    }
    if (s_.owner().shutting_down()) {
        refuse(errc::shutting_down, "the daemon is shutting down and takes no new writes");
        return;
    }
    begin(m.cookie, m.length, held_bytes::own(std::move(m.data)), 0);
}

void checkpoint_writes::from_mail(mailbox::reader::record& r)
{
    const std::uint64_t length = r.data.size();
    begin(r.cookie, length, held_bytes{std::move(r.keep), r.data}, r.end);
}

std::string checkpoint_writes::mail_problem(const mailbox::reader::record& r) const
{
    const auto& hello = s_.hello();
    if (hello.flags & proto::connect_flag_files)
        return "a mailbox write of a version on a connection for files only";
    if (r.data.size() > hello.buffer_length)
        return fmt::format("a mailbox write of {} bytes; the registered buffer holds {}",
                           r.data.size(), hello.buffer_length);
    if (r.version != next_version_)
        return fmt::format("a mailbox write for version {}, but its next version is {}",
                           r.version, next_version_);
    return {};
}

void checkpoint_writes::begin(std::uint64_t cookie, std::uint64_t length, held_bytes data,
                              std::uint64_t mail_end)
{
    const std::uint64_t version = next_version_++;
    const auto& hello = s_.hello();
    daemon& d = s_.owner();
    const std::string object = store::data_object(hello.job, version, d.opts().node, hello.rank);

    write_path::request r;
    r.cookie = cookie;
    r.mail_end = mail_end;
    r.version = version;
    r.length = length;
    r.object = object;
    r.src = s_.source(data.empty() && (hello.flags & proto::connect_flag_push),
                      s_.rank_key(), hello.buffer_address);
    r.open = [&st = d.store(), object](std::uint64_t size,
                                       std::unique_ptr<store::object_writer>& out) {
        return st.create(object, size, out);
    };
    r.data = std::move(data);
    if (const auto& j = d.job().journal(); j && length <= d.opts().journal_max) {
        r.journal = j;
        r.journal_job = hello.job;
        r.journal_node = d.opts().node;
        r.journal_ranks = hello.ranks;
        r.journal_nodes = d.job().nodes();
        r.journal_bucket = d.job().bucket_of(version);
        r.logged = [this, version](std::uint32_t crc, transfer::flush_span span,
                                   transfer::handlers::packed_bytes packed) {
            if (packed)
                packed_[version] = std::move(packed);
            now_durable(version, crc, span.start_ns, span.durable_ns, true);
            send_all(versions_.answer_waits(version, s_.rank()));
        };
    }
    // The rank waits from now until WRITE_DONE; not at all for a write it
    // left in its mailbox.
    const std::uint64_t arrived = proto::monotonic_ns();
    // Its flushes queue behind the older versions of the node's other ranks,
    // not behind this rank's newer ones.
    r.order = d.job().version_arrived(version, arrived);
    r.created = [this, version, length, arrived](const std::shared_ptr<transfer>& t) {
        versions_.pulling(version, length, t, arrived);
    };
    r.pulled = [this, version, arrived, from_mail = mail_end > 0] {
        versions_.flushing(version, from_mail ? arrived : proto::monotonic_ns());
    };
    r.finished = [this, cookie, version, object](std::error_code ec, const std::string& why,
                                         const store::manifest_entry& entry,
                                         transfer::flush_span span, bool waiting) {
        daemon& d = s_.owner();
        const auto* known = versions_.find(version);
        auto packed = packed_.extract(version);
        if (known && known->state == proto::version_state_t::durable) {
            // Durable in the journal, answered already: now its object, or
            // its place in the node's pack.
            versions_.committed(version);
            if (ec) {
                const auto said = fmt::format(
                    "version {} is durable in node {}'s journal, but its object could not be "
                    "committed ({}); the next daemon to claim job {} on the node commits it, "
                    "and until then the version is not complete",
                    version, d.opts().node, why, s_.hello().job);
                log_error("{}: {}", s_.who(), said);
                s_.remember_failure(ec, said);
                d.job().version_failed(ec);
                return;
            }
            if (packed)
                log_debug("version {} of rank {} ({}, crc32c {:08x}) durable in the journal, "
                          "held for the node's pack",
                          version, s_.rank(), human_bytes(entry.size), entry.crc32c);
            else
                log_info("flushed {} ({}, crc32c {:08x}, in the journal first)", object,
                         human_bytes(entry.size), entry.crc32c);
            const job_summary::write_times times{known->arrived_ns, known->staged_ns,
                                                 span.start_ns, known->durable_ns};
            d.job().rank_durable(s_.hello().job, s_.hello().ranks, version, s_.rank(), entry,
                                 times, true, packed ? std::move(packed.mapped()) : nullptr);
            return;
        }
        if (ec) {
            log_error("{}: version {} lost: {}", s_.who(), version, why);
            if (waiting) {
                // io_write is still waiting: it fails, nothing was taken;
                // its number is spent all the same, so with packs on the
                // node skips it.
                versions_.forget(version);
                s_.send(proto::error_msg::from(ec, why, cookie));
                d.job().skip_version(version, fmt::format("a rank's io_write failed: {}", why));
                return;
            }
            versions_.failed(version, ec, why);
            // io_write had returned; io_finalize must not claim durability.
            if (ec != errc::peer_gone)
                s_.remember_failure(ec, why);
            d.job().version_failed(ec, version);
        } else {
            now_durable(version, entry.crc32c, span.start_ns, span.durable_ns, false);
            log_info("flushed {} ({}, crc32c {:08x})", object, human_bytes(entry.size),
                     entry.crc32c);
            const auto* rec = versions_.find(version);
            const job_summary::write_times times{rec->arrived_ns, rec->staged_ns, span.start_ns,
                                                 span.durable_ns};
            d.job().rank_durable(s_.hello().job, s_.hello().ranks, version, s_.rank(), entry,
                                 times);
        }
        send_all(versions_.answer_waits(version, s_.rank()));
    };
    s_.writes().start(std::move(r));
}

void checkpoint_writes::now_durable(std::uint64_t version, std::uint32_t crc,
                                    std::uint64_t flush_start_ns, std::uint64_t durable_ns,
                                    bool journaled)
{
    if (journaled)
        versions_.journaled(version, crc, flush_start_ns, durable_ns);
    else
        versions_.durable(version, crc, flush_start_ns, durable_ns);
    s_.mail_durable(versions_.durable_through());
}

void checkpoint_writes::send_all(std::vector<proto::message> answers)
{
    for (auto& a : answers)
        s_.send(a);
}

void checkpoint_writes::on_query(const proto::query_msg& m)
{
    if (!s_.may_ask("QUERY", m.cookie))
        return;
    if (auto answer = versions_.query(m, s_.rank()))
        s_.send(*answer);
}

void checkpoint_writes::on_read_req(const proto::read_req_msg& m)
{
    if (!s_.may_ask("READ_REQ", m.cookie))
        return;
    proto::version_state_msg end{m.cookie, m.version, proto::version_state_t::unknown, 0, 0};
    if (const auto* rec = versions_.find(m.version)) {
        end.state = rec->state;
        end.size = rec->size;
        end.crc32c = rec->crc32c;
    }
    auto t = versions_.in_flight(m.version);
    if (t && t->fully_staged()) {
        // Straight from staging memory, all of it now: the slots cannot be
        // released before this returns.
        std::uint32_t crc = 0;
        t->for_each_staged([&](std::uint64_t offset, std::span<const std::byte> bytes) {
            for (std::size_t at = 0; at < bytes.size(); at += proto::max_eager) {
                const auto piece = bytes.subspan(at, std::min(proto::max_eager, bytes.size() - at));
                crc = crc32c(piece, crc);
                s_.send(proto::read_data_msg{m.cookie, offset + at, {piece.begin(), piece.end()}});
            }
        });
        end.state = proto::version_state_t::flushing;
        end.size = t->length();
        end.crc32c = crc;
        log_info("{}: read of version {} served from staging memory ({})", s_.who(), m.version,
                 human_bytes(t->length()));
    } else if (const auto held = s_.owner().job().held_part(m.version, s_.rank())) {
        // Durable in the journal, its pack not committed yet: no object of
        // it to read, so the bytes come from the daemon's copy.
        const std::span<const std::byte> bytes(*held);
        for (std::size_t at = 0; at < bytes.size(); at += proto::max_eager) {
            const auto piece = bytes.subspan(at, std::min(proto::max_eager, bytes.size() - at));
            s_.send(proto::read_data_msg{m.cookie, at, {piece.begin(), piece.end()}});
        }
        end.state = proto::version_state_t::flushing;
        end.size = held->size();
        // The crc32c taken when the bytes went into the journal, so that the
        // rank checks the copy too.
        const auto* rec = versions_.find(m.version);
        end.crc32c = rec ? rec->crc32c : crc32c(bytes);
        log_info("{}: read of version {} served from the node's batch of packs ({})", s_.who(),
                 m.version, human_bytes(held->size()));
    }
    s_.send(end);
}

}  // namespace iofwd::iod

#include "reader.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "store/catalog.hpp"

namespace iofwd::client {

using clock = std::chrono::steady_clock;

std::error_code reader::fail(std::error_code ec, std::string why)
{
    why_ = std::move(why);
    return ec;
}

namespace {

// The reader whose store is open, for exit(): librados registers OpenSSL's
// exit handler when it connects, and its messenger threads run on until the
// store is shut down; a store still open when OpenSSL's handler has run
// crashed the process in those threads (seen with 8 ranks on a rados store).
std::mutex open_mutex;
reader* with_store = nullptr;
int exit_handlers = 0;

void close_at_exit()
{
    std::lock_guard lock(open_mutex);
    if (with_store)
        with_store->close_store();
}

}  // namespace

reader::~reader()
{
    std::lock_guard lock(open_mutex);
    if (with_store == this)
        with_store = nullptr;
}

void reader::close_store() noexcept
{
    store_.reset();
    store_uri_.clear();
}

std::error_code reader::open_store(const std::string& uri)
{
    if (!store_ || uri != store_uri_) {
        std::string why;
        if (auto ec = store::open(uri, store_, why))
            return fail(ec, why);
        store_uri_ = uri;
        // Registered after the store's libraries registered theirs, so it
        // runs before them (exit handlers run last first). Once per store
        // opened: a later one may be the first to load librados.
        std::lock_guard lock(open_mutex);
        with_store = this;
        if (exit_handlers < 8 && std::atexit(close_at_exit) == 0)
            ++exit_handlers;
    }
    return {};
}

std::error_code reader::read(const place& at, std::uint64_t version, std::span<std::byte> out,
                             std::uint64_t& size)
{
    proto::version_state_msg st;
    if (auto ec = conn_.query(version, false, st))
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
        if (auto ec = conn_.query(version, true, st))
            return ec;
    if (auto ec = open_store(at.store))
        return ec;
    const std::string& job = at.job;
    std::string why;
    if (st.state == proto::version_state_t::durable) {
        store::bytes_place own{store::data_object(job, version, at.node, at.rank)};
        store::damage found;
        auto ec = store::read_checked(*store_, own, st.size, st.crc32c, out, why, found);
        if (!ec) {
            size = st.size;
            return {};
        }
        // A version of this run the daemon packed (IOFWD_PACK_VERSIONS) has
        // no object of its own: the daemon still has it while its pack is
        // not committed, and the node's pack holds it after. Looked for
        // only when the object is missing, not before every read.
        if (ec != errc::corrupt || found.kind != store::problem::missing)
            return fail(ec, fmt::format("version {}: {}", version, why));
        if (st.size <= out.size()) {
            bool served = false;
            if (auto sec = read_staged(version, out, served, size))
                return sec;
            if (served)
                return {};
        }
        // Its pack is committed, but the bucket may wait for other nodes:
        // the rank's own part, as the daemon reported it durable, is read
        // from the node's pack.
        store::bytes_place packed;
        std::uint64_t packed_size = 0;
        std::uint32_t packed_crc = 0;
        ec = store::find_own_packed(*store_, job, version, at.node, at.rank, packed, packed_size,
                                    packed_crc, why);
        if (!ec && (packed_size != st.size || packed_crc != st.crc32c))
            return fail(errc::corrupt,
                        fmt::format("version {}: pack {} holds {} bytes (crc32c {:08x}) of rank "
                                    "{}, the daemon reported {} bytes (crc32c {:08x}) durable",
                                    version, packed.object, packed_size, packed_crc, at.rank,
                                    st.size, st.crc32c));
        if (!ec) {
            if (auto rec = store::read_checked(*store_, packed, st.size, st.crc32c, out, why))
                return fail(rec, fmt::format("version {}: {}", version, why));
            size = st.size;
            return {};
        }
        if (ec != errc::not_found)
            return fail(ec, fmt::format("version {}: {}", version, why));
    }
    // Not written in this run, or packed: the version must be complete
    // job-wide (in its own directory or in a pack: the catalog says where).
    store::version_info info;
    if (auto ec = store::load_node(*store_, job, version, at.node, info, why))
        return fail(ec == errc::not_found ? make_error_code(errc::not_found) : ec, why);
    const store::manifest_entry* entry = nullptr;
    store::bytes_place place;
    for (std::size_t i = 0; i < info.manifests.size(); ++i)
        if (info.manifests[i].node == at.node && at.rank < info.manifests[i].entries.size()) {
            entry = &info.manifests[i].entries[at.rank];
            place = info.places[i][at.rank];
        }
    if (!entry)
        return fail(errc::not_found,
                    fmt::format("version {} of job {} holds no data for node {} rank {}", version,
                                job, at.node, at.rank));
    if (auto ec = store::read_checked(*store_, place, entry->size, entry->crc32c, out, why))
        return fail(ec, fmt::format("version {}: {}", version, why));
    size = entry->size;
    return {};
}

std::error_code reader::read_staged(std::uint64_t version, std::span<std::byte> out, bool& served,
                                    std::uint64_t& size)
{
    const std::uint64_t cookie = conn_.next_cookie();
    if (auto ec = conn_.send(proto::read_req_msg{cookie, version}))
        return ec;
    std::uint64_t received = 0;
    for (;;) {
        proto::message m;
        if (auto ec = conn_.receive(m, std::chrono::milliseconds(0)))
            return ec;
        if (auto* d = std::get_if<proto::read_data_msg>(&m); d && d->cookie == cookie) {
            if (d->offset > out.size() || d->data.size() > out.size() - d->offset) {
                conn_.set_broken(errc::protocol_error);
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
            // The size first: the daemon's word, checked before it sizes a read
            // (pieces that overlap can add up to more than the buffer).
            const bool fits = e->size <= out.size() && received == e->size;
            const std::uint32_t crc =
                fits ? crc32c(out.first(static_cast<std::size_t>(e->size))) : 0;
            if (!fits || crc != e->crc32c)
                return fail(errc::corrupt,
                            fmt::format("version {} read from daemon memory: {} of {} bytes, "
                                        "crc32c {:08x}, the daemon says {:08x}",
                                        version, received, e->size, crc, e->crc32c));
            size = e->size;
            return {};
        }
        return conn_.unexpected(m, "READ_REQ");
    }
}

std::error_code reader::latest(const place& at, bool verify, std::uint64_t& version,
                               std::string& skipped)
{
    if (auto ec = open_store(at.store))
        return ec;
    std::string why;
    if (auto ec = store::latest(*store_, at.job, verify, version, skipped, why))
        return fail(ec, why);
    return {};
}

std::error_code reader::confirm_commit(const place& at, std::uint64_t version, const settings& s,
                                       barrier_fn barrier, void* barrier_ctx, std::string& why)
{
    const auto timeout = s.finalize_timeout;
    if (barrier) {
        // Every rank of the job reached this point: every node's manifests
        // are written, and with the last one the COMPLETE record.
        if (const int rc = barrier(barrier_ctx, static_cast<double>(timeout.count()) / 1000)) {
            why = fmt::format("the other ranks of the job were not all through io_finalize's "
                              "flush within {} s (IOFWD_FINALIZE_TIMEOUT): {}; a rank died or "
                              "never called io_finalize, or a node's daemon is still writing "
                              "(see the daemons' logs; a slower store needs a longer timeout); "
                              "version {} may be incomplete",
                              timeout.count() / 1000, std::strerror(rc), version);
            return rc == ETIMEDOUT ? make_error_code(errc::daemon_timeout)
                                   : std::error_code(rc, std::system_category());
        }
    }
    const std::string& job = at.job;
    if (auto ec = open_store(at.store)) {
        why = why_;
        return ec;
    }
    // The other nodes' daemons may still be writing their part; a shared
    // file system may show their records a moment late.
    const auto deadline =
        barrier || timeout.count() == 0 ? clock::now() + std::chrono::seconds(5) : clock::now() + timeout;
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
        bool yes = false;
        std::string state;
        // One stat per look; the whole state (a listing) only once, at the end.
        const bool last = clock::now() >= deadline;
        const auto ec = last ? store::commit_state(*store_, job, version, yes, state)
                             : store::committed(*store_, job, version, yes);
        if (ec) {
            why = fmt::format("cannot tell whether version {} of job {} is complete: {}",
                              version, job, ec.message());
            return ec;
        }
        if (yes)
            return {};
        if (last) {
            why = fmt::format(
                "version {} of job {} is durable on this node but not complete job-wide: {}, "
                "the job has {} nodes; {}",
                version, job, state, s.nodes,
                s.run.empty()
                    ? "without a run name each node's daemon numbered the versions from what it "
                      "found in the store, and packed them as its own IOFWD_PACK_VERSIONS says, "
                      "so nodes that started apart, or were set apart, disagree: use "
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

}  // namespace iofwd::client

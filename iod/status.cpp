// daemon::status() (daemon.hpp): the answer to STATUS, put together from
// what each part keeps anyway; it reads, never changes, and costs one pass
// over the sessions and their writes in flight.
#include <unistd.h>

#include <algorithm>

#include "daemon.hpp"
#include "session.hpp"

namespace iofwd::iod {

proto::status_reply_msg daemon::status() const
{
    proto::status_reply_msg r;
    r.daemon_pid = static_cast<std::uint32_t>(::getpid());
    r.iod_version = IOFWD_VERSION;
    r.session = paths_.session;
    r.node = opts_.node;
    r.store = store_->describe();
    r.started_ns = started_ns_;
    if (!job_->empty()) {
        r.job = job_->name();
        r.run = job_->run();
        r.ranks = job_->ranks();
        r.nodes = job_->nodes();
        r.connected = job_->ranks_connected();
        r.finished = job_->ranks_ended();
        r.died = job_->ranks_died();
        r.durable = job_->summary().versions();
        r.durable_bytes = job_->summary().bytes();
        r.recent = job_->summary().recent(proto::max_status_recent);
    }
    for (const auto& [id, s] : sessions_) {
        proto::status_rank k;
        if (!s->describe(k))
            continue;
        ++r.connections;
        if (r.rank_list.size() < proto::max_status_ranks)
            r.rank_list.push_back(k);
        s->each_transfer([&](const transfer& t) {
            if (t.version() != 0)
                ++(t.all_pulled() ? r.flushing : r.pulling);
            ++r.transfers_total;
            if (r.transfers.size() < proto::max_status_transfers)
                r.transfers.push_back({t.object(), t.rank(), t.version(), t.length(),
                                       t.pulled_bytes(), t.flushed_bytes(), t.started_ns()});
        });
    }
    std::sort(r.rank_list.begin(), r.rank_list.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    r.staging_used = staging_.used();
    r.staging_total = staging_.total();
    r.chunk_bytes = staging_.slot_size();
    r.slot_waiters = static_cast<std::uint32_t>(staging_.waiting());
    r.staging_stalled = std::min(staging_.stalled(), r.staging_used);
    const auto& pool = flushes_->pool();
    r.flush_threads = pool.threads();
    r.flush_running = std::min(pool.running(), r.flush_threads);
    r.flush_queued = static_cast<std::uint32_t>(pool.queued());
    r.flush_held = static_cast<std::uint32_t>(flushes_->held_count());
    r.catalog_pending = job_->catalog_jobs();
    r.retention = job_->retention_state();
    r.lost_versions = job_->lost_versions();
    if (const auto ec = job_->manifest_error())
        r.manifest_error = ec.message();
    r.now_ns = proto::monotonic_ns();
    return r;
}

}  // namespace iofwd::iod

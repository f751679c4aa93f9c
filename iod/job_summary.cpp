#include "job_summary.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

namespace iofwd::iod {
namespace {

double wall_now()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

double seconds(const timeval& t)
{
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
}

// "20261124T021621.123Z": a run's name for a run without one.
std::string utc_stamp(double epoch)
{
    const auto whole = static_cast<std::time_t>(epoch);
    std::tm tm{};
    ::gmtime_r(&whole, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%S", &tm);
    const auto ms = static_cast<int>((epoch - static_cast<double>(whole)) * 1000);
    return fmt::format("{}.{:03}Z", buf, std::clamp(ms, 0, 999));
}

std::uint64_t micro(std::uint64_t ns)
{
    return ns / 1000;
}

}  // namespace

void job_summary::start(const std::string& job, const std::string& run, const std::string& node,
                        std::uint32_t ranks, std::uint32_t nodes)
{
    job_ = job;
    run_ = run;
    node_ = node;
    nodes_ = nodes;
    start_ = wall_now();
    ::getrusage(RUSAGE_SELF, &usage_at_start_);
    key_ = run.empty() ? fmt::format("{}-{}", utc_stamp(start_), ::getpid()) : run;
    ranks_.assign(ranks, rank_totals{});
    detail_.clear();
    dropped_ = 0;
    versions_ = 0;
    bytes_ = 0;
}

void job_summary::durable(std::uint32_t rank, std::uint64_t version, std::uint64_t bytes,
                          const write_times& t)
{
    if (rank >= ranks_.size())
        return;
    // Each moment no earlier than the one before: a mailbox write is staged
    // as it arrives, and an empty write has no flush of its own.
    const std::uint64_t staged = std::max(t.staged_ns, t.arrived_ns);
    const std::uint64_t durable = std::max(t.durable_ns, staged);
    const std::uint64_t flush_start = std::clamp(t.flush_start_ns, t.arrived_ns, durable);
    const entry e{rank,           version,           bytes,
                  staged - t.arrived_ns, durable - t.arrived_ns, durable - flush_start,
                  durable};
    auto& k = ranks_[rank];
    ++k.versions;
    k.bytes += bytes;
    k.blocked_ns += e.blocked_ns;
    k.blocked_max_ns = std::max(k.blocked_max_ns, e.blocked_ns);
    k.latency_ns += e.latency_ns;
    k.latency_max_ns = std::max(k.latency_max_ns, e.latency_ns);
    ++versions_;
    bytes_ += bytes;
    detail_.push_back(e);
    if (detail_.size() > store::report_detail_limit) {
        detail_.pop_front();
        ++dropped_;
    }
}

std::vector<proto::status_version> job_summary::recent(std::size_t n) const
{
    std::vector<proto::status_version> out;
    const std::size_t first = detail_.size() > n ? detail_.size() - n : 0;
    for (std::size_t i = first; i < detail_.size(); ++i) {
        const auto& e = detail_[i];
        out.push_back({e.rank, e.version, e.bytes, e.durable_at_ns, e.blocked_ns, e.latency_ns,
                       e.flush_ns});
    }
    return out;
}

store::node_report job_summary::report(std::uint64_t lost_versions) const
{
    store::node_report r;
    r.job = job_;
    r.run = run_;
    r.key = key_;
    r.node = node_;
    r.ranks = static_cast<std::uint32_t>(ranks_.size());
    r.nodes = nodes_;
    r.start = start_;
    r.end = wall_now();
    r.pid = static_cast<std::uint32_t>(::getpid());
    rusage now{};
    ::getrusage(RUSAGE_SELF, &now);
    r.cpu_user = std::max(0.0, seconds(now.ru_utime) - seconds(usage_at_start_.ru_utime));
    r.cpu_system = std::max(0.0, seconds(now.ru_stime) - seconds(usage_at_start_.ru_stime));
    r.peak_rss_bytes = static_cast<std::uint64_t>(now.ru_maxrss) * 1024;  // Linux: KiB
    r.lost_versions = lost_versions;
    r.detail_dropped = dropped_;
    std::vector<std::vector<std::uint64_t>> blocked(ranks_.size()), latency(ranks_.size());
    for (const auto& e : detail_) {
        r.detail.push_back({e.rank, e.version, e.bytes, micro(e.blocked_ns), micro(e.latency_ns)});
        blocked[e.rank].push_back(micro(e.blocked_ns));
        latency[e.rank].push_back(micro(e.latency_ns));
    }
    for (std::uint32_t i = 0; i < ranks_.size(); ++i) {
        const auto& k = ranks_[i];
        store::report_rank out;
        out.rank = i;
        out.versions = k.versions;
        out.bytes = k.bytes;
        out.blocked = {micro(k.blocked_ns), micro(k.blocked_max_ns), store::median(blocked[i])};
        out.durable = {micro(k.latency_ns), micro(k.latency_max_ns), store::median(latency[i])};
        r.per_rank.push_back(out);
    }
    return r;
}

}  // namespace iofwd::iod

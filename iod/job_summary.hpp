#pragma once
// What one job did on this node, gathered while it runs: per rank its durable
// versions, their bytes, how long each io_write kept the rank waiting and how
// long each took to be durable; the newest versions one by one (at most
// store::report_detail_limit of them, so that memory and the summary stay
// bounded however long the job runs); and what the daemon spent (CPU, peak
// memory). It becomes the job's summary in the store (store/report.hpp) and
// the recent versions `iofwd status` lists. Loop thread only.
#include <sys/resource.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "store/report.hpp"

namespace iofwd::iod {

class job_summary final {
public:
    // A write's moments on proto::monotonic_ns()'s clock: its arrival at the
    // daemon, staged (its WRITE_DONE; the arrival for a mailbox write, which
    // the rank does not wait for), its flush's first store write, durable.
    struct write_times {
        std::uint64_t arrived_ns = 0;
        std::uint64_t staged_ns = 0;
        std::uint64_t flush_start_ns = 0;
        std::uint64_t durable_ns = 0;
    };

    // A new job's first rank is admitted: what the last job gathered is
    // forgotten. The summary's key (report.hpp) is `run`, or made from now.
    void start(const std::string& job, const std::string& run, const std::string& node,
               std::uint32_t ranks, std::uint32_t nodes);
    // Version `version` of node-local `rank`, `bytes` long, is durable.
    void durable(std::uint32_t rank, std::uint64_t version, std::uint64_t bytes,
                 const write_times& t);

    const std::string& key() const noexcept { return key_; }
    // Rank versions durable so far, and their bytes.
    std::uint64_t versions() const noexcept { return versions_; }
    std::uint64_t bytes() const noexcept { return bytes_; }
    // The newest `n` durable rank versions, oldest first.
    std::vector<proto::status_version> recent(std::size_t n) const;
    // The summary as of now; `lost_versions`: the job's versions lost on
    // this node.
    store::node_report report(std::uint64_t lost_versions) const;

private:
    struct entry {
        std::uint32_t rank;
        std::uint64_t version, bytes;
        std::uint64_t blocked_ns, latency_ns, flush_ns, durable_at_ns;
    };
    struct rank_totals {
        std::uint64_t versions = 0, bytes = 0;
        std::uint64_t blocked_ns = 0, blocked_max_ns = 0;
        std::uint64_t latency_ns = 0, latency_max_ns = 0;
    };

    std::string job_, run_, key_, node_;
    std::uint32_t nodes_ = 1;
    double start_ = 0;  // seconds since the epoch
    rusage usage_at_start_{};
    std::vector<rank_totals> ranks_;
    std::deque<entry> detail_;  // newest last, at most report_detail_limit
    std::uint64_t dropped_ = 0;
    std::uint64_t versions_ = 0;
    std::uint64_t bytes_ = 0;
};

}  // namespace iofwd::iod

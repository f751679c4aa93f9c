#pragma once
// A job's summary on one node: what the ranks' writes cost them and how long
// each took to be durable, and what the daemon spent. The daemon writes it
// into the store when the job is over on the node (and when a shared daemon
// forgets a job), beside the job's versions:
//
//   <job>/reports/<key>/<node>.json
//
// <key> is the run's name, or, for a run without one, when the daemon took
// the job's first rank, in UTC, and the daemon's pid
// ("20261124T021621.123Z-4711"): a directory per run, a summary per node in
// it, so that reading one run's summaries never lists another's. `reports`
// is not a version directory's name, so nothing that lists versions sees it;
// iofwd report reads it. Summaries are kept: no retention removes them.
//
// A JSON object a person can read and a plot can use:
//   format "iofwd-job-summary", format_version 1, job, run ("" when unnamed),
//   key, node, ranks (of the node), nodes (of the job),
//   start, end (seconds since the epoch: the first rank's admission, the
//   summary), daemon {pid, cpu_user_seconds, cpu_system_seconds (spent during
//   the job), peak_rss_bytes (the daemon's peak since it started),
//   store_ops (what the daemon asked of the store during the job, by kind:
//   counting.hpp's op_counts; absent from summaries of older daemons),
//   puller_bytes (the bytes each puller read out of the ranks during the
//   job; absent from older summaries)},
//   lost_versions,
//   per_rank [{rank, versions, bytes, blocked_us {total, max, median},
//              durable_us {total, max, median}}],
//   detail_limit, detail_dropped, detail_columns, detail [[rank, version,
//   bytes, blocked_us, durable_us], ...]
// Times of a write are the daemon's view, in microseconds from the write's
// arrival: blocked until its WRITE_DONE (0 for a write through the mailbox,
// which the rank does not wait for), durable until it was in the store.
// Totals and maxima are over all of a rank's versions; only the newest
// detail_limit rank versions of the node keep their own line (the
// detail_dropped older ones do not), and the medians are over those: the
// file stays small however many versions the job wrote.
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "store/counting.hpp"

namespace iofwd::store {

// Rank versions of a node with a line of their own in a summary.
inline constexpr std::uint64_t report_detail_limit = 10000;

struct report_times {  // microseconds
    std::uint64_t total = 0;
    std::uint64_t max = 0;
    std::uint64_t median = 0;
    bool operator==(const report_times&) const = default;
};

struct report_rank {
    std::uint32_t rank = 0;
    std::uint64_t versions = 0;
    std::uint64_t bytes = 0;
    report_times blocked;
    report_times durable;
    bool operator==(const report_rank&) const = default;
};

struct report_version {
    std::uint32_t rank = 0;
    std::uint64_t version = 0;
    std::uint64_t bytes = 0;
    std::uint64_t blocked_us = 0;
    std::uint64_t durable_us = 0;
    bool operator==(const report_version&) const = default;
};

struct node_report {
    std::string job;
    std::string run;
    std::string key;
    std::string node;
    std::uint32_t ranks = 0;
    std::uint32_t nodes = 1;
    double start = 0;
    double end = 0;
    std::uint32_t pid = 0;
    double cpu_user = 0;
    double cpu_system = 0;
    std::uint64_t peak_rss_bytes = 0;
    op_counts store_ops;
    // Bytes each of the daemon's pullers read out of the ranks, in puller
    // order (how evenly the pushed writes were spread); empty when the
    // loop's worker read them, or in a summary older than the field.
    std::vector<std::uint64_t> puller_bytes;
    std::uint64_t lost_versions = 0;
    std::vector<report_rank> per_rank;  // one per rank, in rank order
    std::uint64_t detail_limit = report_detail_limit;
    std::uint64_t detail_dropped = 0;
    std::vector<report_version> detail;  // oldest first
    bool operator==(const node_report&) const = default;
};

// The middle of `values` (the mean of the two middle ones for an even
// count); 0 for none.
std::uint64_t median(std::vector<std::uint64_t> values);

// The JSON text above. Medians are written as they are in `r`.
std::string format_report(const node_report& r);
// A per_rank entry and a times object as the text has them (iofwd report
// --json prints the same).
nlohmann::ordered_json rank_json(const report_rank& k);
nlohmann::ordered_json times_json(const report_times& t);
// The store operations of a summary, by kind, as the text has them.
nlohmann::ordered_json ops_json(const op_counts& c);
// Reads it back, checking every field's type and range (ranks in range,
// one per_rank entry per rank, no more detail than its limit). A sentence in
// `why` on failure; `out` untouched then.
std::error_code parse_report(std::string_view text, node_report& out, std::string& why);

}  // namespace iofwd::store

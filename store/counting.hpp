#pragma once
// A backend that passes every call on to another and counts them by kind:
// what a job costs in store operations. The daemon always stores through
// one, and a job's summary (report.hpp) carries the counts of the job, so
// that the cost of a commit can be read off a run at any scale
// (bench/commit.sh sums them over 128 simulated nodes).
#include <atomic>
#include <cstdint>
#include <memory>

#include "store/backend.hpp"

namespace iofwd::store {

// Calls made, each counted once whatever it moved. `listed` is the number
// of names the listings returned, `arrival_entries` the arrivals the reads
// of tallies returned: what those cost grows with them.
struct op_counts {
    std::uint64_t created = 0;   // objects started (create; put counts here too)
    std::uint64_t writes = 0;    // write_at and its kin, one per call
    std::uint64_t commits = 0;   // objects made visible (commit, commit_exclusive)
    std::uint64_t reads = 0;
    std::uint64_t stats = 0;     // size and modified
    std::uint64_t lists = 0;
    std::uint64_t listed = 0;
    std::uint64_t removes = 0;   // remove, remove_lazily, remove_leftover, remove_arrivals
    std::uint64_t arrives = 0;
    std::uint64_t arrival_reads = 0;  // arrivals()
    std::uint64_t claims = 0;         // claim_job, claimants, leftovers (scans)
    std::uint64_t arrival_entries = 0;  // the arrivals those reads returned
    std::uint64_t arrival_keys = 0;     // keys an arrival counted under (arrive_keyed)

    // Everything but the data writes: the operations on names and small
    // objects whose number, not size, makes a commit slow at scale.
    std::uint64_t metadata() const noexcept
    {
        return created + commits + reads + stats + lists + removes + arrives + arrival_reads +
               claims + arrival_keys;
    }
    op_counts operator-(const op_counts& o) const noexcept;
    bool operator==(const op_counts&) const = default;
};

// Every count by name, in the order a job's summary writes them; one
// `added_later` may be missing from an older daemon's summary (read as 0).
struct op_field {
    const char* name;
    std::uint64_t op_counts::*count;
    bool added_later = false;
};
inline constexpr op_field op_fields[] = {
    {"created", &op_counts::created}, {"writes", &op_counts::writes},
    {"commits", &op_counts::commits}, {"reads", &op_counts::reads},
    {"stats", &op_counts::stats},     {"lists", &op_counts::lists},
    {"listed", &op_counts::listed},   {"removes", &op_counts::removes},
    {"arrives", &op_counts::arrives}, {"arrival_reads", &op_counts::arrival_reads},
    {"claims", &op_counts::claims},   {"arrival_entries", &op_counts::arrival_entries, true},
    {"arrival_keys", &op_counts::arrival_keys, true},
};

class counting_backend final : public backend {
public:
    explicit counting_backend(std::unique_ptr<backend> inner) : inner_(std::move(inner)) {}

    op_counts counts() const noexcept;
    backend& inner() noexcept { return *inner_; }

    std::string describe() const override { return inner_->describe(); }
    std::string location() const override { return inner_->location(); }
    std::error_code create(const std::string& name, std::uint64_t size,
                           std::unique_ptr<object_writer>& out) override;
    std::error_code read(const std::string& name, std::uint64_t offset,
                         std::span<std::byte> out) override;
    std::error_code size(const std::string& name, std::uint64_t& out) override;
    std::error_code list(const std::string& prefix, std::vector<std::string>& out) override;
    std::error_code remove(const std::string& name) override;
    std::error_code remove_lazily(const std::string& name) override;
    std::error_code modified(const std::string& name, std::int64_t& out) override;
    std::error_code leftovers(const std::string& dir, std::vector<std::string>& out) override;
    std::error_code remove_leftover(const std::string& name) override;
    std::error_code claim_job(const std::string& job, const std::string& node,
                              std::unique_ptr<claim>& out) override;
    std::error_code claimants(const std::string& job, std::vector<std::string>& out) override;
    std::error_code open_journal(const std::string& job, const std::string& node,
                                 unique_fd& out) override
    {
        return inner_->open_journal(job, node, out);
    }
    std::error_code read_journal(const std::string& job, const std::string& node,
                                 unique_fd& out) override
    {
        return inner_->read_journal(job, node, out);
    }
    std::error_code journal_nodes(const std::string& job, std::vector<std::string>& out) override
    {
        return inner_->journal_nodes(job, out);
    }
    std::error_code arrive(const std::string& tally, const std::string& member,
                           const std::string& note, std::uint64_t& count) override;
    std::error_code arrive_keyed(const std::string& tally, const std::string& member,
                                 const std::string& note, std::uint64_t first,
                                 std::uint64_t last, std::uint64_t& most) override;
    std::error_code arrivals(const std::string& tally, std::vector<arrival>& out) override;
    std::error_code remove_arrivals(const std::string& tally) override;
    std::string explain(const std::string& name) const override { return inner_->explain(name); }

    // Shared with the writers it hands out (flusher threads write at once).
    struct counters {
        std::atomic<std::uint64_t> created{0}, writes{0}, commits{0}, reads{0}, stats{0},
            lists{0}, listed{0}, removes{0}, arrives{0}, arrival_reads{0}, claims{0},
            arrival_entries{0}, arrival_keys{0};
    };

private:
    std::unique_ptr<backend> inner_;
    std::shared_ptr<counters> n_ = std::make_shared<counters>();
};

}  // namespace iofwd::store

#pragma once
// The job a daemon serves on its node, and its bookkeeping:
//  - admission of ranks: the job's claim in the store (one daemon per job
//    and node), where its versions continue, and for a named run the run's
//    record, from which every node numbers the run's versions alike;
//  - which node-local ranks are connected, said BYE or died;
//  - once every rank of the node has a version durable, the node's manifest
//    and, when every node's manifest is there, the job-wide COMPLETE record
//    (on a catalog thread, one version at a time); with IOFWD_PACK_VERSIONS,
//    the node's versions that went through its journal are collected in a
//    batch and committed as one pack per bucket instead, and every version
//    completes through its bucket's record (docs/small-versions.md);
//  - retention of old versions (on a thread of its own, while the data path
//    is idle), and what could not be made durable (the exit status);
//  - the job's summary (job_summary.hpp), written into the store once the
//    job is over on the node.
// Loop thread only, like the rest of the daemon; its store work runs on the
// threads it owns and reports back on the loop.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "flusher.hpp"
#include "job_summary.hpp"
#include "options.hpp"
#include "protocol.hpp"
#include "store/backend.hpp"
#include "store/counting.hpp"
#include "store/journal.hpp"
#include "store/layout.hpp"

namespace iofwd::iod {

class job final {
public:
    // `on_change` runs on the loop whenever catalog or retention work ended
    // (sessions waiting for it may finish, the daemon may exit);
    // `puller_bytes` gives the bytes each puller has read so far, for the
    // summary.
    using byte_counts = std::function<std::vector<std::uint64_t>()>;
    job(boost::asio::io_context& loop, const options& opts, store::backend& store,
        const std::string& session, flush_policy& data, std::function<void()> on_change,
        byte_counts puller_bytes);
    job(const job&) = delete;
    job& operator=(const job&) = delete;
    ~job();

    // A rank's CONNECT. Admitted: `first_version` is where this run's
    // versions start. Refused: the error and a sentence in `why`.
    // `others_active`: a connection of another rank is still admitted and
    // not done (its job cannot be forgotten yet).
    std::error_code admit(const proto::connect_msg& m, bool others_active,
                          std::uint64_t& first_version, std::string& why);
    // An admitted rank's connection ended: `clean` after its BYE.
    void rank_ended(std::uint32_t rank, bool clean);
    // Version `version` of node-local rank `rank` is durable, written at
    // `times` (for the summary); the node's manifest follows once all
    // `ranks` are. `journaled`: its object is committed and its record in
    // the node's journal is settled once the manifest is durable and the
    // node's arrival made too (until then the record is what lets a restart
    // write that manifest and arrive).
    // `packed`: a journaled part's bytes, of which no object was written:
    // they go into the node's pack (bucket_of).
    using packed_bytes = std::shared_ptr<const std::vector<std::byte>>;
    void rank_durable(const std::string& job, std::uint32_t ranks, std::uint64_t version,
                      std::uint32_t rank, const store::manifest_entry& entry,
                      const job_summary::write_times& times, bool journaled = false,
                      packed_bytes packed = nullptr);
    // The bucket of packs `version` belongs to (docs/small-versions.md): 0
    // when the job's versions are not packed. Buckets hold B versions each,
    // k*B+1 .. (k+1)*B, except that a run's first bucket starts at its
    // first version. B is this node's IOFWD_PACK_VERSIONS in a run without
    // a name, and in a named run the one its record holds (every node must
    // use one, or none completes a version).
    std::uint64_t bucket_of(std::uint64_t version) const noexcept;
    // Rank `rank`'s bytes of `version` while they have no object and no
    // committed pack yet (other ranks' parts still to come, a batch
    // waiting, or being written): READ_REQ serves them from here. nullptr
    // otherwise.
    packed_bytes held_part(std::uint64_t version, std::uint32_t rank) const;
    // The node's open batch is committed now, not after a pause: a rank
    // said BYE, or the daemon is stopping. Later versions close at once too,
    // and retention no longer waits for its spacing (start_prune).
    void finish_batches();
    // Node-local rank `rank` said BYE and every version it wrote is with
    // the job: once every rank of the node is (or is gone), finish_batches().
    void rank_leaving(std::uint32_t rank);
    // A version io_write had already returned for could not be made durable.
    // Rank `rank`'s part of `version` failed after its io_write returned:
    // the node will never have the version. Packs on, the node arrives at
    // its bucket with a skip (skip_version), so that a gap does not stop
    // the bucket's later versions.
    void version_failed(std::error_code ec, std::uint64_t version = 0);
    // The node will never have `version` (`why`): its parts held are
    // dropped, and with packs on the node arrives at the version's bucket
    // with a skip (docs/small-versions.md), once; their journal records
    // are settled after that arrival. A skip whose arrival fails is tried
    // again (send_skip).
    void skip_version(std::uint64_t version, const std::string& why);
    // Version `version` of some node-local rank arrived at `now`: returns
    // when the first rank's part of it arrived, the place of every part of
    // the version in the flush queue (flusher::submit).
    std::uint64_t version_arrived(std::uint64_t version, std::uint64_t now);
    // The data path is idle: retention may run now.
    void data_idle() { start_prune(); }

    // Catalog work a rank's FINISHED waits for: not a retention still
    // waiting for the data path to be idle (the daemon's exit does wait).
    bool catalog_pending() const noexcept
    {
        return pending_ > (prune_job_ ? 1u : 0u) || !batch_.empty();
    }
    // Any catalog or retention work not done.
    bool busy() const noexcept { return pending_ > 0 || !batch_.empty(); }
    // The first manifest or pack that failed in the daemon's life; else the
    // first skip of this job (or of the job before, until the next one is
    // admitted) whose arrival failed and that has not arrived since (its
    // bucket's later versions wait for it).
    std::error_code manifest_error() const noexcept;
    // The job is over on the node, or the daemon stops: the skips whose
    // arrival failed are sent once more (retry_skips), once per job.
    void retry_skips_at_end();
    // The node-local ranks other than `rank` still connected.
    std::uint32_t unfinished_ranks(std::uint32_t rank) const;
    // Every rank of the job said BYE or died.
    bool over() const;
    bool empty() const noexcept { return name_.empty(); }
    const std::string& name() const noexcept { return name_; }
    const std::string& run() const noexcept { return run_; }
    std::uint32_t ranks() const noexcept { return ranks_; }
    std::uint32_t nodes() const noexcept { return nodes_; }
    std::uint32_t ranks_ended() const;
    // The node's ranks connected now, gone after BYE, gone without it.
    std::uint32_t ranks_connected() const;
    std::uint32_t ranks_died() const;
    // Retention: 0 idle, 1 wanted (waiting for the data path to be idle, or
    // for retention_spacing after the last), 2 running.
    unsigned retention_state() const noexcept { return pruning_ ? 2 : prune_job_ ? 1 : 0; }
    // Catalog jobs not done (manifests, COMPLETE records).
    unsigned catalog_jobs() const noexcept
    {
        return pending_ - (prune_job_ ? 1u : 0u) - (pruning_ ? 1u : 0u);
    }
    const job_summary& summary() const noexcept { return summary_; }
    // The node's journal of small versions for this job (store/journal.hpp),
    // or nullptr: a store without one, or IOFWD_JOURNAL_MAX=0.
    const std::shared_ptr<store::journal>& journal() const noexcept { return journal_; }
    // Versions some rank wrote and another never will, now that the job is
    // over: logged and forgotten (see abandon_partial_versions).
    void close();
    std::uint64_t lost_versions() const noexcept { return lost_versions_; }
    // Writes the job's summary into the store (store/report.hpp), once per
    // job; a job that writes only files through the MPI shim has none. A
    // small synchronous put on the loop's thread, at the end of a job (its
    // ranks are gone) or when a new job replaces it: a failure is logged
    // and changes nothing else.
    void write_summary();

private:
    // ended: said BYE; died: its connection closed without one.
    enum class rank_state { absent, connected, ended, died };
    struct pending_version {
        std::vector<std::optional<store::manifest_entry>> entries;
        std::uint32_t count = 0;
        // Parts whose journal record stands for them until the node's
        // manifest is durable: settled then, or when the version is
        // abandoned (settle_journaled).
        std::uint32_t journaled = 0;
        // The bytes of parts that have no object (rank_durable's `packed`).
        std::vector<packed_bytes> bytes;
    };
    // Versions whose every part of the node is in `bytes`, to be packed:
    // ascending, each committed with the pack that holds it.
    struct batched_version {
        std::uint32_t ranks = 0;
        std::uint32_t journaled = 0;
        std::vector<packed_bytes> bytes;
    };
    using batch = std::map<std::uint64_t, batched_version>;
    // Commits the open batch (batch_): a pack per run of consecutive
    // versions, then the node's arrival at the bucket.
    void close_batch();
    // A version of the node that is not packed (some part too large for the
    // journal) while packs are on: its packed parts' objects, its manifest,
    // and its arrival at the bucket with it.
    void commit_unpacked(const std::string& job, std::uint64_t version, pending_version pv,
                         std::uint32_t ranks);
    // One catalog job's end for packs or unpacked versions (their records
    // settled by then when it succeeded): logs, starts retention when
    // versions completed.
    struct bucket_outcome {
        std::uint64_t complete = 0;  // try_complete_bucket's
        std::string why;
        bool arriving = false;  // the failure, if any, is the arrival's (the manifest is there)
    };
    void bucket_committed(std::error_code ec, const std::vector<std::uint64_t>& versions,
                          std::uint64_t bucket, const bucket_outcome& result);
    // Sends skip_version's skip of `version` to its bucket (one try).
    void send_skip(std::uint64_t version);
    // The skips whose arrival failed are sent again, each at most
    // skip_tries times in all: after another of the node's parts arrived
    // (the store works again), and once when the job ends
    // (retry_skips_at_end), not after that. The bucket's later versions
    // wait for the skip, which else only the node's next daemon sends.
    void retry_skips();
    void send_failed_skips();
    static constexpr unsigned skip_tries = 3;
    // Logs that a bucket's versions up to `complete` are complete on every
    // node, and applies retention.
    void bucket_advanced(const std::string& job, std::uint64_t bucket, std::uint64_t complete);
    // `n` records of the journal `log` are no longer needed.
    static void settle_journaled(const std::shared_ptr<store::journal>& log, std::uint32_t n);

    // The newest version of `job` in the store (0: none) and the job's claim
    // for this node.
    std::error_code claim_store(const std::string& job, std::uint64_t& last,
                                std::unique_ptr<store::claim>& claim,
                                std::shared_ptr<store::journal>& journal, std::string& why);
    // After the claim: opens the node's journal of `job` and commits the
    // versions its records hold that a daemon before this one reported
    // durable and died before committing; `last` grows to the newest
    // version in it. Refuses the job when that fails (the records would be
    // lost, or their versions numbered again). With a journal and
    // IOFWD_PACK_VERSIONS, packs may be written: the job's FORMAT says so
    // first, unless `formatted` (it is there, and was checked).
    std::error_code recover_journal(const std::string& job, bool formatted, std::uint64_t& last,
                                    std::shared_ptr<store::journal>& out, std::string& why);
    // What recover_journal found of a version newer than the newest
    // complete one: the parts the journal holds (their objects committed by
    // then), and how many ranks the node has and nodes the job.
    struct recovered_version {
        std::uint32_t ranks = 0;
        std::uint32_t nodes = 0;
        std::uint64_t bucket = 0;  // its records', when they were packed
        bool consistent = true;  // every record said the same ranks, nodes and bucket
        std::map<std::uint32_t, store::manifest_entry> entries;
        // A packed version's records' bytes (no object of them was written).
        std::map<std::uint32_t, std::vector<std::byte>> bytes;
    };
    // After the claim and the run's numbering (versions from `first` on are
    // this run's; `named`: the run has a name and a record): completes each
    // recovered version older than `first` whose every rank of the node is
    // in the journal or committed (a few hundred MiB read back at most):
    // the node's manifest, its arrival at the version's tally, COMPLETE
    // when the node is the job's last. Best effort: a version it cannot
    // complete stays incomplete, logged, and the job goes on. True when one
    // became complete job-wide (retention then runs).
    // Packed versions are committed in packs again (complete_packed); a
    // pack that cannot be written refuses the job (errc, `why`): the
    // journal keeps its records for the next claim.
    std::error_code complete_recovered(const std::string& job, std::uint64_t first, bool named,
                                       bool& job_wide, std::string& why);
    // A version a bucket commits whose manifest of the node is there but
    // which no bucket's record completes (the daemon before died between
    // the manifest and its arrival): arrives with the manifest again. Looks
    // at the claim's version directories from the newest down, until one
    // that is complete. Best effort, like complete_from_journal.
    void rearrive_manifests(const std::string& job, std::uint64_t first, bool named,
                            unsigned& completed, bool& job_wide);
    // One version's manifest of the node, when it is there, arriving at
    // its bucket again (or the log says why not): false when the node has
    // no manifest of `v`.
    bool arrive_again(const std::string& job, std::uint64_t v, bool named, unsigned& completed,
                      bool& job_wide);
    // Versions of the newest buckets before `first` that the node has no
    // part of, neither journaled nor with a manifest, below one some node
    // brought: each arrives as a skip, so that the bucket's later versions
    // complete (after complete_packed and rearrive_manifests).
    void skip_gaps(const std::string& job, std::uint64_t first, bool named, bool& job_wide);
    // The packed versions of one bucket found in the journal, ascending:
    // those a pack of the node holds already arrive with it; the rest are
    // packed, a pack per run of consecutive versions whose every rank is in
    // the journal; any other version is committed unpacked
    // (complete_from_journal).
    std::error_code complete_packed(const std::string& job, std::uint64_t bucket,
                                    const std::vector<std::uint64_t>& versions, bool named,
                                    std::uint64_t& budget, unsigned& completed, bool& job_wide,
                                    std::string& why);
    // One version of it; `budget`: the bytes of committed parts it may still
    // read back; `complete`: COMPLETE written. False: left incomplete.
    bool complete_from_journal(const std::string& job, std::uint64_t version,
                               const recovered_version& rv, bool named, std::uint64_t& budget,
                               bool& complete);
    // After the completion: the journal (`j`, recover_journal's) starts over
    // and fills; dropped when IOFWD_JOURNAL_MAX is 0.
    std::error_code start_journal(const std::string& job, std::shared_ptr<store::journal>& j,
                                  std::string& why);
    // Versions some node-local rank wrote and another never will: those a
    // rank that said BYE left out count as lost (every rank must write every
    // version), those of a rank that died only as discarded.
    void abandon_partial_versions();
    // Retention of `job` after a version completed, on the retention thread
    // once the data path is idle.
    void prune(const std::string& job);
    void start_prune();
    void done_one();
    store::op_counts store_ops() const;

    boost::asio::io_context& loop_;
    const options& opts_;
    store::backend& store_;
    std::string session_;
    flush_policy& data_;
    std::function<void()> on_change_;

    std::string name_;
    std::string run_;  // its run's name (connect_msg::run); empty: unnamed
    std::unique_ptr<store::claim> claim_;
    // The job whose claim another holder kept past claim_patience, and
    // when: its next ranks are refused without waiting again.
    std::string claim_refused_;
    std::chrono::steady_clock::time_point claim_refused_at_{};
    std::shared_ptr<store::journal> journal_;  // held with the claim
    std::map<std::uint64_t, recovered_version> recovered_;  // recover_journal's, until complete_recovered
    std::vector<std::uint64_t> claimed_dirs_;  // the version directories claim_store found
    std::uint32_t ranks_ = 0;
    std::uint32_t nodes_ = 1;
    std::vector<rank_state> ranks_state_;
    std::uint64_t first_version_ = 1;
    std::uint32_t pack_versions_ = 0;   // bucket_of's B for this run
    std::map<std::uint64_t, pending_version> versions_;
    std::map<std::uint64_t, std::uint64_t> arrivals_;  // version_arrived, the newest few
    // Versions whose manifest job is queued or running: retention leaves them
    // (and every version after them) alone, for with two flush threads a
    // version's objects may be committed after a newer one's, and its
    // manifest written after the newer versions complete.
    std::multiset<std::uint64_t> committing_;
    unsigned pending_ = 0;                  // catalog and retention jobs not done
    std::optional<std::string> prune_job_;  // retention wanted, not started yet
    bool pruning_ = false;
    // When the last retention ended; the next waits on prune_timer_ for
    // retention_spacing after it (start_prune).
    std::chrono::steady_clock::time_point pruned_at_{};
    boost::asio::steady_timer prune_timer_;
    bool prune_timer_armed_ = false;
    // Why retention passed over a version whose COMPLETE record does not
    // read, each said once in the log (retention runs once a second).
    std::set<std::string> passed_over_told_;
    std::error_code manifest_error_;
    std::uint64_t lost_versions_ = 0;
    bool files_only_ = false;
    batch batch_;                       // the node's versions waiting for their pack
    std::uint64_t batch_bytes_ = 0;     // what batch_'s records take in the journal
    boost::asio::steady_timer batch_timer_;  // closes batch_ after a pause
    std::chrono::steady_clock::time_point batch_opened_;  // when batch_ took its first version
    bool batches_finishing_ = false;    // finish_batches(): no pause any more
    std::set<std::uint32_t> leaving_;   // ranks that said BYE (rank_leaving)
    std::uint64_t closed_up_to_ = 0;    // the newest version a closed batch held
    bool store_journals_ = false;       // the store keeps nodes' journals (recover_journal)
    // Parts without an object from rank_durable until their pack (or
    // object) is committed (held_part).
    std::map<std::uint64_t, std::vector<packed_bytes>> held_;
    // skip_version's, this job's: whether the skip has arrived, and the
    // journal records of the version's parts that came after it, to be
    // settled once it has.
    struct skipped_version {
        bool arrived = false;
        bool sending = false;  // its arrival is under way
        unsigned tries = 0;    // arrivals sent
        std::uint32_t journaled = 0;
        std::string why;       // why the node will never have the version
        std::error_code failed;  // the last try's, until one arrives
        bool holds = false;      // its version is in committing_ (send_skip)
    };
    bool retried_at_end_ = false;  // retry_skips_at_end's once
    std::map<std::uint64_t, skipped_version> skipped_;
    job_summary summary_;
    bool summary_written_ = true;     // nothing to write before the first job
    std::uint64_t lost_before_ = 0;   // lost_versions_ when the job began
    store::op_counts ops_before_;     // the store's counts when the job began
    byte_counts puller_bytes_;
    std::vector<std::uint64_t> pulled_before_;  // puller_bytes_() when the job began
    // Manifests and COMPLETE records, one version at a time, and retention on
    // a thread of its own: their small serial store round trips never hold a
    // thread the next version's data needs, and a version's commit never
    // waits behind the removal of an old one.
    flusher catalog_;
    flusher retention_;
};

}  // namespace iofwd::iod

#include "job.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config.hpp"
#include "crc32c.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "log.hpp"
#include "store/catalog.hpp"
#include "store/pack.hpp"
#include "store/report.hpp"

namespace iofwd::iod {

static_assert(store::manifest_max_nodes == proto::max_nodes);
static_assert(store::journal_max_ranks == proto::max_ranks);
namespace {

// The least time from one retention's end to the next one's start while the
// job's versions keep completing (job::start_prune).
constexpr auto retention_spacing = std::chrono::seconds(1);

// IOFWD_PACK_VERSIONS's default: the settings table's (config.cpp).
unsigned default_pack_versions()
{
    std::uint64_t n = 0;
    if (const auto* v = config::find("IOFWD_PACK_VERSIONS"))
        config::parse_count(v->fallback, n);
    return static_cast<unsigned>(n);
}

// How long a claim held by someone else is tried again before the job is
// refused (claim_store).
constexpr std::chrono::milliseconds claim_patience{1000};
// How long a job refused so is refused at once (its other ranks).
constexpr std::chrono::seconds claim_memory{10};

// Why a job's FORMAT keeps this daemon from taking it (`why`: the store's
// words).
std::string format_refusal(const store::backend& st, const std::string& job,
                           const std::string& why)
{
    return fmt::format("cannot take job {} in {}: {}", job, st.describe(), why);
}

// Writes node `node`'s pack of `inputs` into `bucket` and gives its line of
// the bucket's record. A pack of that name there already is taken when it
// is byte for byte this one (a daemon before wrote it and stopped before
// its arrival, or before its records were settled); another is refused:
// its arrival would not match this one's.
std::error_code write_pack(store::backend& st, const std::string& job, const std::string& node,
                           std::uint64_t bucket, std::span<const store::pack_input> inputs,
                           store::bucket_part& part, std::string& why)
{
    std::vector<std::byte> bytes;
    if (auto ec = store::build_pack(job, node, inputs, bytes, why))
        return ec;
    std::uint64_t index_offset = 0, index_length = 0;
    std::uint32_t index_crc = 0;
    if (auto ec = store::parse_pack_trailer(std::span(bytes).last(store::pack_trailer_size),
                                            bytes.size(), index_offset, index_length, index_crc,
                                            why))
        return ec;
    const std::uint64_t first = inputs.front().version, last = inputs.back().version;
    const std::string name = store::pack_object(job, bucket, node, first, last);
    std::uint64_t size = 0;
    if (auto ec = st.size(name, size); !ec) {
        std::vector<std::byte> there(size == bytes.size() ? size : 0);
        if (size == bytes.size())
            ec = st.read(name, 0, there);
        if (ec || there != bytes) {
            why = fmt::format("{} is there already and is not the pack of these versions{}", name,
                              ec ? fmt::format(" ({})", store::failure(st, name, ec)) : "");
            return ec ? ec : make_error_code(errc::corrupt);
        }
    } else if (ec == errc::not_found) {
        if ((ec = st.put(name, bytes))) {
            why = fmt::format("writing pack {} failed: {}", name, store::failure(st, name, ec));
            return ec;
        }
    } else {
        why = fmt::format("cannot look for {}: {}", name, store::failure(st, name, ec));
        return ec;
    }
    part = {node, inputs.front().ranks, first, last, index_crc, false};
    return {};
}

}  // namespace

job::job(boost::asio::io_context& loop, const options& opts, store::backend& store,
         const std::string& session, flush_policy& data, std::function<void()> on_change,
         byte_counts puller_bytes)
    : loop_(loop), opts_(opts), store_(store), session_(session), data_(data),
      on_change_(std::move(on_change)), prune_timer_(loop), batch_timer_(loop),
      puller_bytes_(std::move(puller_bytes)), catalog_(loop, 1, "iod-catalog"),
      retention_(loop, 1, "iod-retention")
{
}

job::~job() = default;

std::error_code job::claim_store(const std::string& job, std::uint64_t& last,
                                 std::unique_ptr<store::claim>& claim,
                                 std::shared_ptr<store::journal>& journal, std::string& why)
{
    // An iofwd command holds every node's claim for a moment (ls, to see
    // whether a daemon lives) or while it removes versions (rm, keep, gc):
    // a claim held is tried again for up to claim_patience before the job
    // is refused. A job refused so just now is refused at once: each of
    // its ranks would hold the daemon's loop that long again.
    const auto asked = std::chrono::steady_clock::now();
    const bool patient = job != claim_refused_ || asked - claim_refused_at_ > claim_memory;
    std::error_code ec;
    bool waited = false;
    while ((ec = store_.claim_job(job, opts_.node, claim)) == errc::rank_in_use && patient &&
           std::chrono::steady_clock::now() < asked + claim_patience) {
        waited = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!ec && waited)
        log_info("job '{}' on node {}: its claim was held by someone else (an iofwd command?); "
                 "taken after {} ms",
                 job, opts_.node,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - asked)
                     .count());
    if (ec == errc::rank_in_use && patient) {
        claim_refused_ = job;
        claim_refused_at_ = std::chrono::steady_clock::now();
    }
    if (ec) {
        why = ec == errc::rank_in_use
                  ? fmt::format("job '{}' on node {} is being written by another daemon in {} "
                                "right now (or an iofwd command held its claim for over {} ms): "
                                "give concurrent jobs different names (IOFWD_JOB)",
                                job, opts_.node, store_.describe(), claim_patience.count())
                  : fmt::format("cannot claim job '{}' in {}: {}", job, store_.describe(),
                                store::failure(store_, job, ec));
        name_.clear();
        return ec;
    }
    // Listed under the claim: a daemon that held it until just now may have
    // completed a version after a listing made before, which this one
    // would then number again and overwrite.
    std::vector<std::string> names;
    if (auto ec = store_.list(job + "/", names); ec && ec != errc::not_found) {
        why = fmt::format("cannot list job {} in {}: {}", job, store_.describe(),
                          store::failure(store_, job, ec));
        claim.reset();
        name_.clear();
        return ec;
    }
    // A job kept in a newer format may hold versions where this daemon
    // does not look: it would number them again.
    const bool formatted = std::find(names.begin(), names.end(), store::format_name) != names.end();
    if (formatted)
        if (auto ec = store::check_format(store_, job, why)) {
            why = format_refusal(store_, job, why);
            claim.reset();
            name_.clear();
            return ec;
        }
    claimed_dirs_.clear();
    for (const auto& n : names)
        if (auto v = store::parse_version_dir(n)) {
            last = std::max(last, *v);
            claimed_dirs_.push_back(*v);
        }
    std::sort(claimed_dirs_.begin(), claimed_dirs_.end());
    if (std::find(names.begin(), names.end(), store::packs_dir) != names.end()) {
        std::uint64_t packed = 0;
        if (auto ec = store::highest_packed(store_, job, packed)) {
            why = fmt::format("cannot list the packs of job {} in {}: {}", job,
                              store_.describe(), store::failure(store_, job, ec));
            claim.reset();
            name_.clear();
            return ec;
        }
        last = std::max(last, packed);
    }
    if (auto ec = recover_journal(job, formatted, last, journal, why)) {
        name_.clear();
        return ec;
    }
    return {};
}

std::error_code job::recover_journal(const std::string& job, bool formatted, std::uint64_t& last,
                                     std::shared_ptr<store::journal>& out, std::string& why)
{
    out.reset();
    store_journals_ = false;
    recovered_.clear();  // a claim refused before may have left another job's
    unique_fd fd;
    if (auto ec = store_.open_journal(job, opts_.node, fd)) {
        if (ec == std::errc::operation_not_supported)
            return {};  // versions go straight to their objects
        why = fmt::format("cannot open node {}'s journal of job '{}' in {}: {}", opts_.node, job,
                          store_.describe(),
                          store::failure(store_, store::journal_object(job, opts_.node), ec));
        return ec;
    }
    store_journals_ = true;
    // Before any pack: this daemon's (it packs), or the replay's (its
    // records are a packing daemon's, which marked it). A node that packs
    // because a run's record says so finds it marked by the record's
    // creator, which packed. A job marked by an older iofwd is raised to
    // this one's format before this daemon records a bucket the older one
    // would read wrong (layout.hpp).
    if (formatted || opts_.pack_versions != 0)
        if (auto ec = store::mark_format(store_, job, why)) {
            why = format_refusal(store_, job, why);
            return ec;
        }
    auto j = std::make_shared<store::journal>(std::move(fd), opts_.journal_bytes);
    std::vector<store::journal::record> records;
    if (auto ec = j->replay(records)) {
        why = fmt::format("cannot read node {}'s journal of job '{}' in {}: {}", opts_.node, job,
                          store_.describe(), ec.message());
        return ec;
    }
    if (!j->damage().empty())
        log_warn("node {}'s journal of job '{}': {}", opts_.node, job, j->damage());
    if (!records.empty()) {
        // Versions older than the newest complete one are not restored:
        // retention may have removed them since their records were written.
        std::vector<std::uint64_t> complete;
        if (auto ec = store::complete_versions(store_, job, complete); ec && ec != errc::not_found) {
            why = fmt::format("cannot list job {} in {}: {}", job, store_.describe(),
                              store::failure(store_, job, ec));
            return ec;
        }
        // Versions iofwd rm took out of their buckets, or retention
        // retired, are not committed again (looked for only when a packed
        // record is there).
        std::vector<std::uint64_t> removed;
        if (std::any_of(records.begin(), records.end(), [](const auto& r) { return r.bucket; }))
            if (auto ec = store::hidden_versions(store_, job, removed);
                ec && ec != errc::not_found) {
                why = fmt::format("cannot list the packs of job {} in {}: {}", job,
                                  store_.describe(), store::failure(store_, job, ec));
                return ec;
            }
        unsigned restored = 0;
        for (auto& r : records) {
            const auto standing = store::standing(r, job, opts_.node, complete, removed);
            if (standing == store::record_standing::foreign) {
                log_warn("node {}'s journal of job '{}' holds a record of job '{}' node {} "
                         "version {} (a copied file?): ignored",
                         opts_.node, job, r.job, r.node, r.version);
                continue;
            }
            last = std::max(last, r.version);
            if (standing == store::record_standing::settled)
                continue;
            // What the version's manifest needs, kept for complete_recovered.
            auto& rv = recovered_[r.version];
            rv.consistent = rv.entries.empty() || (rv.consistent && rv.ranks == r.ranks &&
                                                   rv.nodes == r.nodes && rv.bucket == r.bucket);
            rv.ranks = r.ranks;
            rv.nodes = r.nodes;
            rv.bucket = r.bucket;
            rv.entries[r.rank] = {r.rank, r.data.size(), r.crc32c};
            if (r.bucket) {
                // No object of it was written: it goes into a pack, or into
                // its object when its version is not packed (complete_packed).
                rv.bytes[r.rank] = std::move(r.data);
                continue;
            }
            const auto name = store::data_object(job, r.version, opts_.node, r.rank);
            std::string ignored;
            if (!store::check_object(store_, name, r.data.size(), r.crc32c, ignored))
                continue;  // committed before the daemon stopped
            if (auto ec = store_.put(name, r.data)) {
                why = fmt::format("cannot restore {} from node {}'s journal: {}", name,
                                  opts_.node, store::failure(store_, name, ec));
                return ec;
            }
            ++restored;
            log_warn("restored {} ({}) from the node's journal: the daemon before stopped after "
                     "reporting it durable and before committing it",
                     name, human_bytes(r.data.size()));
        }
        log_info("node {}'s journal of job '{}': {} records, {} restored", opts_.node, job,
                 records.size(), restored);
    }
    if (records.empty() && opts_.journal_max == 0)
        return {};
    // Every record's object is committed now; the journal starts over once
    // the versions it held are completed (start_journal).
    out = std::move(j);
    return {};
}

std::error_code job::start_journal(const std::string& job, std::shared_ptr<store::journal>& j,
                                   std::string& why)
{
    if (!j)
        return {};
    // Started over even when nothing was found: a daemon that died in the
    // middle of appends can leave a torn record before whole ones of the
    // same generation, which a new record written over the torn one would
    // bring back.
    if (auto ec = j->reset()) {
        why = fmt::format("cannot start node {}'s journal of job '{}' over: {}", opts_.node, job,
                          ec.message());
        return ec;
    }
    if (opts_.journal_max == 0)
        j.reset();
    else
        j->prepare();
    return {};
}

std::error_code job::complete_recovered(const std::string& job, std::uint64_t first, bool named,
                                        bool& job_wide, std::string& why)
{
    unsigned completed = 0;
    job_wide = false;
    // What may be read back of parts committed straight to their objects,
    // on the loop's thread while a rank waits for its ACCEPT: a few seconds
    // at most on a slow disk, well within IOFWD_LAUNCH_TIMEOUT.
    std::uint64_t budget = std::uint64_t{256} << 20;
    std::map<std::uint64_t, std::vector<std::uint64_t>> packed;  // by bucket
    for (const auto& [version, rv] : recovered_) {
        // A version the run's record numbers anew (a named run that began
        // after this node's daemon died) is not this one's to complete.
        if (version >= first)
            continue;
        if (rv.bucket && rv.consistent) {
            packed[rv.bucket].push_back(version);
            continue;
        }
        bool complete = false;
        if (complete_from_journal(job, version, rv, named, budget, complete)) {
            ++completed;
            job_wide = job_wide || complete;
        }
    }
    for (const auto& [bucket, versions] : packed)
        if (auto ec = complete_packed(job, bucket, versions, named, budget, completed, job_wide,
                                      why))
            return ec;
    rearrive_manifests(job, first, named, completed, job_wide);
    skip_gaps(job, first, named, job_wide);
    recovered_.clear();
    claimed_dirs_.clear();
    if (completed)
        log_info("node {}'s journal of job '{}': {} version{} completed on the node", opts_.node,
                 job, completed, completed == 1 ? "" : "s");
    return {};
}

void job::rearrive_manifests(const std::string& job, std::uint64_t first, bool named,
                             unsigned& completed, bool& job_wide)
{
    // Versions past the journal that a bucket commits have only their
    // manifest to say so, and a crash between the manifest and its arrival
    // would keep the bucket's later versions from completing on every
    // node. The catalog's one thread writes a manifest and arrives before
    // the next version's: only the node's newest manifest can lack its
    // arrival. It is looked for from the newest version directory down,
    // until one that is complete, among a few.
    constexpr unsigned look_at_most = 64;
    unsigned looked = 0;
    for (auto it = claimed_dirs_.rbegin(); it != claimed_dirs_.rend(); ++it) {
        const std::uint64_t v = *it;
        if (v >= first)
            continue;  // this run's number
        if (++looked > look_at_most) {
            log_warn("node {}'s manifests of job '{}': none in the newest {} version "
                     "directories; older ones are not looked at again",
                     opts_.node, job, look_at_most);
            return;
        }
        if (arrive_again(job, v, named, completed, job_wide))
            return;
        std::uint64_t size = 0;
        if (!store_.size(store::complete_object(job, v), size))
            return;  // complete, and none of the node's after it
    }
}

bool job::arrive_again(const std::string& job, std::uint64_t v, bool named, unsigned& completed,
                       bool& job_wide)
{
    const auto name = store::manifest_object(job, v, opts_.node);
    std::string text, reason;
    if (auto ec = store::read_all(store_, name, text); ec == errc::not_found) {
        return false;
    } else if (ec) {
        log_warn("version {} of node {}: cannot read {} to see whether it arrived at its "
                 "bucket: {}",
                 v, opts_.node, name, store::failure(store_, name, ec));
        return true;
    }
    if (recovered_.count(v))
        return true;  // the journal's to complete (complete_from_journal)
    store::manifest m;
    if (auto ec = store::parse_manifest(text, m, reason)) {
        log_warn("version {} of node {}: {} does not read ({}); not arriving with it", v,
                 opts_.node, name, reason);
        return true;
    }
    if (m.bucket == 0)
        return true;  // arrives at the version's own tally (or did)
    if (m.job != job || m.node != opts_.node || m.version != v) {
        log_warn("version {} of node {}: {} is the manifest of job {} node {} version {}; "
                 "not arriving with it",
                 v, opts_.node, name, m.job, m.node, m.version);
        return true;
    }
    const auto tally = store::bucket_arrivals_object(job, m.bucket);
    std::vector<store::backend::arrival> arrived;
    if (auto ec = store_.arrivals(tally, arrived); ec && ec != errc::not_found) {
        log_warn("version {} of node {}: cannot read the arrivals of bucket {}: {}", v,
                 opts_.node, m.bucket, store::failure(store_, tally, ec));
        return true;
    }
    // Arrived before the daemon stopped, perhaps not whole (its keys)
    // or without the look its arrival was to make: again, which takes
    // nothing twice and looks when the version's count is full (its
    // numbering was the job's then, named or not); not when the
    // bucket's record completes the version already, and never with
    // another note, which would make the tally refuse every reader.
    const std::uint32_t crc = crc32c(std::as_bytes(std::span(text)));
    const store::bucket_part part{opts_.node, m.ranks, v, v, crc, true};
    const auto member = store::bucket_member(opts_.node, v);
    const auto before = std::find_if(arrived.begin(), arrived.end(),
                                     [&](const auto& a) { return a.member == member; });
    const bool again = before != arrived.end();
    if (again && before->note != store::bucket_note(part)) {
        log_warn("version {} of node {}: its arrival at bucket {} brought '{}', not what "
                 "{} says ('{}'); not arriving with it again",
                 v, opts_.node, m.bucket, before->note, name, store::bucket_note(part));
        return true;
    }
    if (bool recorded = false;
        again && !store::in_bucket(store_, job, v, recorded) && recorded)
        return true;
    if (!again && m.nodes > 1 && !named) {
        log_info("version {} of node {}: not arrived at bucket {} again: a job of several "
                 "nodes without a run name (IOFWD_RUN) may have numbered it anew on another "
                 "node",
                 v, opts_.node, m.bucket);
        return true;
    }
    std::uint64_t complete = 0;
    if (auto ec = store::try_complete_bucket(store_, job, m.bucket, part, m.nodes, complete,
                                             reason)) {
        log_error("version {} of node {}: arriving at bucket {} with its manifest failed: "
                  "{}; the version stays incomplete",
                  v, opts_.node, m.bucket, reason);
        return true;
    }
    job_wide = job_wide || complete >= v;
    const std::string upto =
        complete >= v
            ? fmt::format(": complete on all {} nodes up to version {}", m.nodes, complete)
            : std::string(", waiting for the job's other nodes");
    if (again) {
        log_info("version {} of node {} arrived at bucket {} again with its manifest{}", v,
                 opts_.node, m.bucket, upto);
        return true;
    }
    ++completed;
    log_warn("version {} of node {} arrived at bucket {} with its manifest (the daemon "
             "before stopped after writing it){}",
             v, opts_.node, m.bucket, upto);
    return true;
}

void job::skip_gaps(const std::string& job, std::uint64_t first, bool named, bool& job_wide)
{
    // A version some part of which went past the journal leaves the node
    // nothing to arrive with when the daemon before stopped while flushing
    // it, before its manifest, or when the manifest failed: a gap, and its
    // bucket's later versions, journaled and reported durable or not,
    // would never complete on any node. Each gap below a version some
    // node brought to the bucket is skipped: this node can never have it.
    // A daemon leaves gaps in the buckets it was writing: the newest few
    // of the runs before are looked at, a read of each one's tally.
    constexpr auto look_at_most = static_cast<std::ptrdiff_t>(store::gap_buckets_looked_at);
    std::vector<std::uint64_t> all;
    if (auto ec = store::buckets(store_, job, all)) {
        if (ec != errc::not_found)
            log_warn("job {}: cannot list its buckets to skip the versions node {} never had: "
                     "{}",
                     job, opts_.node, store::failure(store_, job, ec));
        return;
    }
    const auto end = std::lower_bound(all.begin(), all.end(), first);
    for (auto it = end - std::min(end - all.begin(), look_at_most); it != end; ++it) {
        const std::uint64_t bucket = *it;
        const std::uint64_t limit = std::min(it + 1 != all.end() ? *(it + 1) : first, first);
        std::map<std::string, std::vector<store::bucket_part>> parts;
        std::string why;
        if (auto ec = store::bucket_arrivals(store_, job, bucket, parts, why)) {
            log_warn("bucket {} of job {}: {}; not looked at for versions node {} never had",
                     bucket, job, why, opts_.node);
            continue;
        }
        std::uint64_t top = 0;
        for (const auto& [node, list] : parts)
            for (const auto& p : list)
                top = std::max(top, std::min(p.last, limit - 1));
        const auto own = parts.find(opts_.node);
        const std::vector<store::bucket_part> none;
        const auto& held = own != parts.end() ? own->second : none;
        // The job's nodes and the node's ranks then: from the journal, or
        // from a manifest the node brought.
        std::uint32_t nodes = 0, ranks = held.empty() ? 0 : held.front().ranks;
        for (const auto& [v, rv] : recovered_)
            if (rv.bucket == bucket && rv.consistent) {
                nodes = rv.nodes;
                ranks = rv.ranks;
            }
        for (auto p = held.rbegin(); nodes == 0 && p != held.rend(); ++p) {
            store::manifest m;
            std::string text, reason;
            if (p->manifest &&
                !store::read_all(store_, store::manifest_object(job, p->first, opts_.node),
                                 text) &&
                !store::parse_manifest(text, m, reason) && m.bucket == bucket)
                nodes = m.nodes;
        }
        std::vector<std::uint64_t> gaps;
        std::uint64_t v = bucket;
        for (const auto& p : held) {
            for (; v < p.first && v <= top; ++v)
                gaps.push_back(v);
            v = std::max(v, p.last + 1);
        }
        for (; v <= top && top != 0; ++v)
            gaps.push_back(v);
        std::erase_if(gaps, [&](std::uint64_t g) { return recovered_.count(g) > 0; });
        if (gaps.empty())
            continue;
        // A node whose parts there are packs settled out of its journal:
        // what the store says (the bucket's record, another node's
        // manifest), as iofwd gc reads it.
        if (nodes == 0)
            if (auto ec = store::bucket_nodes(store_, job, bucket, parts, nodes, why)) {
                log_warn("bucket {} of job {}: {}; versions {}-{} of node {} are not skipped",
                         bucket, job, why, gaps.front(), gaps.back(), opts_.node);
                continue;
            }
        if (nodes == 0 || ranks == 0) {
            log_warn("bucket {} of job {}: node {} has no part of versions {}-{} and nothing "
                     "says how many nodes and ranks the job had; they are not skipped, and the "
                     "bucket's later versions stay incomplete",
                     bucket, job, opts_.node, gaps.front(), gaps.back());
            continue;
        }
        if (nodes > 1 && !named) {
            log_info("bucket {} of job {}: versions {}-{} of node {} not skipped: a job of "
                     "several nodes without a run name (IOFWD_RUN) may have numbered them anew "
                     "on another node",
                     bucket, job, gaps.front(), gaps.back(), opts_.node);
            continue;
        }
        unsigned arrived = 0;
        for (const auto g : gaps) {
            if (arrive_again(job, g, named, arrived, job_wide))
                continue;  // its manifest is there: it arrived with it, or the log says why not
            std::uint64_t complete = 0;
            if (auto ec = store::try_complete_bucket(store_, job, bucket,
                                                     {opts_.node, ranks, g, g, 0, false, true},
                                                     nodes, complete, why)) {
                log_error("version {} of node {}: its skip could not arrive at bucket {}: {}; "
                          "the bucket's later versions cannot complete",
                          g, opts_.node, bucket, why);
                break;
            }
            job_wide = job_wide || complete > g;
            log_warn("version {} of job {} skipped by node {} in bucket {}: the daemon before "
                     "stopped (or its manifest failed) with no part of it in the node's journal "
                     "and no manifest; {}",
                     g, job, opts_.node, bucket,
                     complete > g ? fmt::format("the bucket is complete on all {} nodes up to "
                                                "version {} without it",
                                                nodes, complete)
                                  : std::string("the bucket's later versions complete without "
                                                "it"));
        }
    }
}

std::error_code job::complete_packed(const std::string& job, std::uint64_t bucket,
                                     const std::vector<std::uint64_t>& versions, bool named,
                                     std::uint64_t& budget, unsigned& completed, bool& job_wide,
                                     std::string& why)
{
    const std::uint32_t nodes = recovered_.at(versions.front()).nodes;
    if (nodes > 1 && !named) {
        log_info("versions {}-{} of node {}: not completed from the node's journal: a job of "
                 "several nodes without a run name (IOFWD_RUN) may have numbered them anew on "
                 "another node",
                 versions.front(), versions.back(), opts_.node);
        return {};
    }
    // An arrival that fails refuses the claim, so that the journal keeps
    // the records: a pack that never arrives would keep the bucket's later
    // versions from completing on every node.
    const auto arrive = [&](const store::bucket_part& part) -> std::error_code {
        std::uint64_t complete = 0;
        std::string reason;
        if (auto ec = store::try_complete_bucket(store_, job, bucket, part, nodes, complete,
                                                 reason)) {
            why = fmt::format("versions {}-{} of node {}: the job-wide commit from the node's "
                              "journal failed: {}; the records stay in the journal",
                              part.first, part.last, opts_.node, reason);
            return ec;
        }
        const std::string upto =
            complete >= part.first
                ? fmt::format(": complete on all {} nodes up to version {}", nodes, complete)
                : std::string(", waiting for the job's other nodes");
        if (part.skip) {
            job_wide = job_wide || complete > part.first;
            log_warn("version {} of node {} skipped in bucket {}: a rank never handed its part "
                     "over before the daemon before stopped; {}",
                     part.first, opts_.node, bucket,
                     complete >= part.first
                         ? fmt::format("the bucket is complete on all {} nodes up to version {} "
                                       "without it",
                                       nodes, complete)
                         : std::string("the bucket waits for the job's other nodes"));
            return {};
        }
        completed += static_cast<unsigned>(part.last - part.first + 1);
        job_wide = job_wide || complete >= part.first;
        log_warn("versions {}-{} of node {} committed from the node's journal in bucket {}{}",
                 part.first, part.last, opts_.node, bucket, upto);
        return {};
    };
    // The node's packs the daemon before wrote: each must hold what the
    // journal says of the versions it covers (size and crc32c of every
    // part, through its checked index); then their versions arrive with
    // them again (an arrival made already is not made twice).
    std::vector<store::node_pack> packs;
    if (auto ec = store::node_packs(store_, job, bucket, opts_.node, versions.front(),
                                    versions.back(), packs, why);
        ec && ec != errc::not_found)
        return ec;
    std::set<std::uint64_t> covered;
    for (const auto& [name, first, last] : packs) {
        const auto in = std::lower_bound(versions.begin(), versions.end(), first);
        if (in == versions.end() || *in > last)
            continue;
        store::pack_index index;
        std::uint32_t crc = 0;
        std::string reason;
        if (auto ec = store::read_pack(store_, name, index, crc, reason)) {
            why = fmt::format("node {}'s pack {} does not read ({}); its versions' records stay "
                              "in the journal: move the pack aside for its versions to be "
                              "packed again",
                              opts_.node, name, reason);
            return ec;
        }
        for (auto v = in; v != versions.end() && *v <= last; ++v) {
            const auto& rv = recovered_.at(*v);
            for (const auto& [rank, e] : rv.entries) {
                const auto* p = store::find_part(index, *v, rank);
                if (index.job != job || index.node != opts_.node || !p || p->size != e.size ||
                    p->crc32c != e.crc32c || p->ranks != rv.ranks) {
                    why = fmt::format("node {}'s pack {} does not hold rank {}'s part of version "
                                      "{} as the node's journal has it ({}, crc32c {:08x}); the "
                                      "records stay in the journal",
                                      opts_.node, name, rank, *v, human_bytes(e.size), e.crc32c);
                    return make_error_code(errc::corrupt);
                }
            }
            covered.insert(*v);
        }
        if (auto ec = arrive({opts_.node, recovered_.at(*in).ranks, first, last, crc, false}))
            return ec;
    }
    // The rest: a pack per run of consecutive versions whose every rank is
    // in the journal.
    std::vector<std::uint64_t> run;
    const auto pack_run = [&]() -> std::error_code {
        if (run.empty())
            return {};
        std::vector<store::pack_input> inputs;
        for (const auto v : run) {
            const auto& rv = recovered_.at(v);
            for (const auto& [rank, bytes] : rv.bytes)
                inputs.push_back({v, rank, rv.ranks, bytes});
        }
        store::bucket_part part;
        if (auto ec = write_pack(store_, job, opts_.node, bucket, inputs, part, why))
            return ec;
        log_warn("wrote {} from the node's journal: the daemon before stopped after reporting "
                 "versions {}-{} durable and before committing them",
                 store::pack_object(job, bucket, opts_.node, part.first, part.last), part.first,
                 part.last);
        run.clear();
        return arrive(part);
    };
    for (const auto v : versions) {
        if (covered.count(v))
            continue;
        const auto& rv = recovered_.at(v);
        // A version the daemon before committed unpacked (an append whose
        // fdatasync failed may still have left every rank's record) stays
        // so: packing it too would give the node two parts of it.
        std::uint64_t manifest_size = 0;
        const bool unpacked_before =
            store_.size(store::manifest_object(job, v, opts_.node), manifest_size) !=
            errc::not_found;
        const bool whole = !unpacked_before && rv.ranks > 0 && rv.ranks <= proto::max_ranks &&
                           rv.bytes.size() == rv.ranks && rv.bytes.rbegin()->first < rv.ranks;
        if (whole && (run.empty() || run.back() + 1 == v)) {
            run.push_back(v);
            continue;
        }
        if (auto ec = pack_run())
            return ec;
        if (whole) {
            run.push_back(v);
            continue;
        }
        // A rank that never handed its part over: the version will never be
        // whole on the node. A skip lets the bucket's later versions
        // complete without it.
        bool missing = false;
        for (std::uint32_t r = 0; rv.consistent && rv.ranks <= proto::max_ranks && r < rv.ranks &&
                                  !unpacked_before && !missing;
             ++r) {
            std::uint64_t size = 0;
            missing = !rv.entries.count(r) &&
                      store_.size(store::data_object(job, v, opts_.node, r), size) ==
                          errc::not_found;
        }
        if (missing) {
            if (auto ec = arrive({opts_.node, rv.ranks, v, v, 0, false, true}))
                return ec;
            continue;
        }
        // Some rank's part went straight to its object: the journaled parts
        // get theirs, then the version is committed unpacked.
        for (const auto& [rank, bytes] : rv.bytes) {
            const auto name = store::data_object(job, v, opts_.node, rank);
            std::string ignored;
            if (!store::check_object(store_, name, bytes.size(), rv.entries.at(rank).crc32c,
                                     ignored))
                continue;  // committed before the daemon stopped
            if (auto ec = store_.put(name, bytes)) {
                why = fmt::format("cannot restore {} from node {}'s journal: {}", name,
                                  opts_.node, store::failure(store_, name, ec));
                return ec;
            }
        }
        bool complete = false;
        if (complete_from_journal(job, v, rv, named, budget, complete)) {
            ++completed;
            job_wide = job_wide || complete;
        }
    }
    return pack_run();
}

bool job::complete_from_journal(const std::string& job, std::uint64_t version,
                                const recovered_version& rv, bool named, std::uint64_t& budget,
                                bool& complete)
{
    // Every record of the version must say the same ranks and nodes; a
    // rank without a record must have its object committed (it went past
    // the journal: too large, the journal full or not yet filled). A rank
    // with neither never handed its part over: the version stays
    // incomplete, as it would have.
    const auto left = [&](const std::string& why) {
        log_info("version {} of node {}: not completed from the node's journal: {}", version,
                 opts_.node, why);
        return false;
    };
    if (!rv.consistent || rv.ranks == 0 || rv.nodes == 0 || rv.ranks > proto::max_ranks)
        return left(rv.ranks == 0 ? "its records do not say how many ranks the node has "
                                    "(written by an older iofwd)"
                                  : "its records disagree on the node's ranks or the job's nodes");
    if (rv.entries.rbegin()->first >= rv.ranks)
        return left("a record names a rank beyond the node's ranks");
    // Without a run's record, each node numbers its versions from what it
    // finds: another node may already have begun this number anew.
    if (rv.nodes > 1 && !named)
        return left("a job of several nodes without a run name (IOFWD_RUN) may have numbered "
                    "this version anew on another node");
    // The parts that went straight to their objects: all there, and few
    // enough bytes to read back now, before anything is read.
    std::uint64_t direct_bytes = 0;
    for (std::uint32_t rank = 0; rank < rv.ranks; ++rank) {
        if (rv.entries.count(rank))
            continue;
        const auto name = store::data_object(job, version, opts_.node, rank);
        std::uint64_t size = 0;
        if (auto ec = store_.size(name, size))
            return left(fmt::format("rank {}'s part is neither in it nor committed ({})", rank,
                                    store::failure(store_, name, ec)));
        direct_bytes += size;
    }
    if (direct_bytes > budget)
        return left(fmt::format("its parts committed straight to their objects hold {}, more "
                                "than is read back at a claim",
                                human_bytes(direct_bytes)));
    budget -= direct_bytes;
    store::manifest m{job, opts_.node, version, rv.ranks, {}, rv.bucket, rv.bucket ? rv.nodes : 0};
    for (std::uint32_t rank = 0; rank < rv.ranks; ++rank) {
        if (const auto it = rv.entries.find(rank); it != rv.entries.end()) {
            m.entries.push_back(it->second);
            continue;
        }
        store::manifest_entry e{rank, 0, 0};
        std::string why;
        if (store::object_crc(store_, store::data_object(job, version, opts_.node, rank), e.size,
                              e.crc32c, why))
            return left(fmt::format("rank {}'s part cannot be read back ({})", rank, why));
        m.entries.push_back(e);
    }
    std::string text = store::format_manifest(m);
    const std::string name = store::manifest_object(job, version, opts_.node);
    std::string existing;
    store::manifest there;
    std::string ignored;
    if (auto ec = store::read_all(store_, name, existing); ec == errc::not_found) {
        if (auto pec = store_.put(name, std::as_bytes(std::span(text)))) {
            log_error("version {} of node {}: cannot write {} from the node's journal: {}; the "
                      "version stays incomplete",
                      version, opts_.node, name, store::failure(store_, name, pec));
            return false;
        }
    } else if (ec) {
        log_error("version {} of node {}: cannot read {}: {}; the version stays incomplete",
                  version, opts_.node, name, store::failure(store_, name, ec));
        return false;
    } else if (existing != text) {
        // Written by an iofwd before "iofwd-manifest 2" too: the same parts
        // are the same manifest, and its arrival brings that text's crc32c.
        if (store::parse_manifest(existing, there, ignored) || there.job != m.job ||
            there.node != m.node || there.version != m.version || there.ranks != m.ranks ||
            there.entries != m.entries)
            return left(fmt::format("{} is there and lists other parts", name));
        text = std::move(existing);
    }
    const std::uint32_t crc = crc32c(std::as_bytes(std::span(text)));
    // The daemon before may have arrived at the version's tally already:
    // arriving again is harmless (try_complete). Best effort, like the
    // manifest: a failure here leaves the version incomplete and the job
    // goes on (a tally that refuses this node would refuse it at every
    // claim).
    complete = false;
    std::string why;
    std::error_code cec;
    if (rv.bucket) {
        // Packs are on: the bucket is the version's only job-wide commit.
        std::uint64_t last_complete = 0;
        cec = store::try_complete_bucket(store_, job, rv.bucket,
                                         {opts_.node, rv.ranks, version, version, crc, true},
                                         rv.nodes, last_complete, why);
        complete = last_complete >= version;
    } else {
        cec = store::try_complete(store_, m, crc, rv.nodes, complete, why);
    }
    if (auto ec = cec) {
        log_error("version {} of node {}: the job-wide commit from the node's journal failed: "
                  "{}; the version stays incomplete",
                  version, opts_.node, why);
        return false;
    }
    log_warn("version {} of node {} completed from the node's journal ({} rank{}){}", version,
             opts_.node, rv.ranks, rv.ranks == 1 ? "" : "s",
             complete ? fmt::format(": complete on all {} nodes", rv.nodes)
                      : std::string(", waiting for the job's other nodes"));
    return true;
}

std::error_code job::admit(const proto::connect_msg& m, bool others_active,
                           std::uint64_t& first_version, std::string& why)
{
    // A job whose ranks have all gone (or never came) is forgotten when a
    // rank that cannot belong to it connects.
    const bool joinable = !name_.empty() && m.job == name_ && m.run == run_ && m.ranks == ranks_ &&
                          m.nodes == nodes_ && m.rank < ranks_state_.size() &&
                          ranks_state_[m.rank] == rank_state::absent;
    const bool ranks_gone = std::none_of(ranks_state_.begin(), ranks_state_.end(),
                                         [](rank_state r) { return r == rank_state::connected; });
    const bool gone = ranks_gone && !others_active && !busy();
    if (!name_.empty() && ranks_gone && !gone && !joinable) {
        // The last job's ranks are gone but some of its data is still on its
        // way to the store: the next job comes right after (the rank retries).
        why = fmt::format("this daemon is finishing job '{}' (its ranks are gone, its last "
                          "writes are on their way to the store)",
                          name_);
        return errc::job_finishing;
    }
    if (name_.empty() || (gone && !joinable)) {
        // The last job is forgotten: its summary goes into the store while
        // its claim is still held.
        if (!name_.empty()) {
            abandon_partial_versions();
            // The skips that failed are sent once more: the next job waits
            // while they are under way.
            retry_skips_at_end();
            if (busy()) {
                // Its skips are on their way to the store, under its claim:
                // the next job comes right after (the rank retries).
                why = fmt::format("this daemon is finishing job '{}' (its last versions' skips "
                                  "are on their way to the store)",
                                  name_);
                return errc::job_finishing;
            }
            write_summary();
        }
        // First rank of a job: find where its versions continue in the store,
        // and claim the job there. A job that only writes files through the
        // shim keeps no versions in the store and claims nothing.
        std::uint64_t last = 0;
        journal_.reset();
        claim_.reset();
        std::unique_ptr<store::claim> claim;
        std::shared_ptr<store::journal> journal;
        const bool files_only = m.flags & proto::connect_flag_files;
        if (!files_only)
            if (auto ec = claim_store(m.job, last, claim, journal, why))
                return ec;
        std::uint64_t first = last + 1;
        // A store without journals (Ceph, for now) packs nothing anywhere.
        std::uint32_t pack_versions = store_journals_ && !files_only ? opts_.pack_versions : 0;
        if (!m.run.empty() && !files_only) {
            // Every node numbers this run's versions, and packs them, as one
            // record says.
            store::run_record rec;
            if (auto ec = store::join_run(store_, m.job, m.run, m.nodes, opts_.node, first,
                                          pack_versions, rec, why)) {
                name_.clear();
                return ec;
            }
            if (rec.first_version != first)
                log_info("run {} of job {}: versions from {}, as its record says", m.run, m.job,
                         rec.first_version);
            if (rec.pack_versions != pack_versions)
                log_warn("run {} of job {}: {}; this node's IOFWD_PACK_VERSIONS={} is not used",
                         m.run, m.job,
                         rec.pack_versions == 0
                             ? std::string("no versions packed, as its record says (it has no "
                                           "pack-versions: the node that created it packed "
                                           "nothing, or was an older iofwd)")
                             : fmt::format("versions packed in buckets of {}, as its record "
                                           "says (the node that created it had "
                                           "IOFWD_PACK_VERSIONS={})",
                                           rec.pack_versions, rec.pack_versions),
                         opts_.pack_versions);
            first = rec.first_version;
            pack_versions = rec.pack_versions;
        } else if (m.nodes > 1 && store_journals_ && !files_only &&
                   opts_.pack_versions != default_pack_versions()) {
            // Each node packs as its own setting says, which no record
            // makes alike: the default is the same everywhere, a value set
            // by hand may not be.
            log_warn("job {}: {} nodes and no run name, and this node's IOFWD_PACK_VERSIONS={} "
                     "is not the default {}: a version completes only if every node packs it "
                     "alike; set the same value on every node, or name the run (io_init_comm, "
                     "IOFWD_RUN) for its record to hold one",
                     m.job, m.nodes, opts_.pack_versions, default_pack_versions());
        }
        // The versions the journal held, then the journal started over: a
        // claim refused before this point (join_run) keeps the records for
        // the next one.
        bool complete_now = false;
        if (!files_only)
            if (auto ec = complete_recovered(m.job, first, !m.run.empty(), complete_now, why)) {
                name_.clear();
                return ec;
            }
        if (auto ec = start_journal(m.job, journal, why)) {
            name_.clear();
            return ec;
        }
        abandon_partial_versions();
        claim_ = std::move(claim);
        journal_ = std::move(journal);
        name_ = m.job;
        run_ = m.run;
        ranks_ = m.ranks;
        nodes_ = m.nodes;
        log_info("job {}{}: {} rank{} on this node, {} node{} in the job{}", name_,
                 run_.empty() ? std::string() : " run " + run_, ranks_, ranks_ == 1 ? "" : "s",
                 nodes_, nodes_ == 1 ? "" : "s", files_only ? " (files through the MPI shim)" : "");
        ranks_state_.assign(ranks_, rank_state::absent);
        versions_.clear();
        skipped_.clear();
        retried_at_end_ = false;
        batches_finishing_ = false;
        leaving_.clear();
        closed_up_to_ = 0;
        arrivals_.clear();
        first_version_ = first;
        pack_versions_ = pack_versions;
        files_only_ = files_only;
        summary_.start(name_, run_, opts_.node, ranks_, nodes_);
        ops_before_ = store_ops();
        pulled_before_ = puller_bytes_();
        summary_written_ = false;
        lost_before_ = lost_versions_;
        if (complete_now)
            prune(name_);  // as after any version completed: IOFWD_KEEP holds
    } else if (m.job != name_) {
        why = fmt::format("this daemon serves job '{}' on session {}; rank {} asked for job '{}' "
                          "(give each job its own IOFWD_SESSION)",
                          name_, session_, m.rank, m.job);
        return errc::invalid_argument;
    } else if (m.run != run_) {
        why = fmt::format("this daemon serves run '{}' of job {}; rank {} belongs to run '{}' "
                          "(give each run its own IOFWD_SESSION, or finish the first)",
                          run_, name_, m.rank, m.run);
        return errc::invalid_argument;
    } else if (m.nodes != nodes_) {
        why = fmt::format("rank {} says the job has {} nodes, earlier ranks said {} (IOFWD_NODES)",
                          m.rank, m.nodes, nodes_);
        return errc::rank_mismatch;
    } else if (m.ranks != ranks_) {
        why = fmt::format("rank {} says the node has {} ranks, earlier ranks said {}", m.rank,
                          m.ranks, ranks_);
        return errc::rank_mismatch;
    }
    if (ranks_state_[m.rank] != rank_state::absent) {
        why = fmt::format("node-local rank {} of job {} is already {}", m.rank, name_,
                          ranks_state_[m.rank] == rank_state::connected ? "connected"
                                                                        : "finished");
        return errc::rank_in_use;
    }
    ranks_state_[m.rank] = rank_state::connected;
    first_version = first_version_;
    return {};
}

void job::rank_ended(std::uint32_t rank, bool clean)
{
    if (rank < ranks_state_.size())
        ranks_state_[rank] = clean ? rank_state::ended : rank_state::died;
    if (!batch_.empty())
        rank_leaving(rank);  // the others may all be waiting for their BYE's answer
}

void job::settle_journaled(const std::shared_ptr<store::journal>& log, std::uint32_t n)
{
    for (; log && n > 0; --n)
        log->settled();
}

std::uint64_t job::bucket_of(std::uint64_t version) const noexcept
{
    // A node without its journal (IOFWD_JOURNAL_MAX=0, or one not filled
    // yet or full) packs nothing, but its versions still complete through
    // their buckets: the job's other nodes may pack theirs.
    if (pack_versions_ == 0 || version == 0)
        return 0;
    const std::uint64_t b = pack_versions_;
    return std::max((version - 1) / b * b + 1, first_version_);
}

void job::rank_durable(const std::string& job, std::uint32_t ranks, std::uint64_t version,
                       std::uint32_t rank, const store::manifest_entry& entry,
                       const job_summary::write_times& times, bool journaled,
                       packed_bytes packed)
{
    summary_.durable(rank, version, entry.size, times);
    if (const auto it = skipped_.find(version); it != skipped_.end()) {
        // The node skipped it already: another rank's part failed. Its
        // record goes once the skip has arrived.
        if (journaled && it->second.arrived)
            settle_journaled(journal_, 1);
        else if (journaled)
            ++it->second.journaled;
        return;
    }
    auto& pv = versions_[version];
    if (pv.entries.empty())
        pv.entries.resize(ranks);
    if (rank >= pv.entries.size() || pv.entries[rank]) {
        if (journaled)
            settle_journaled(journal_, 1);  // no manifest of ours will list it
        return;
    }
    pv.entries[rank] = entry;
    pv.journaled += journaled ? 1 : 0;
    if (packed) {
        pv.bytes.resize(ranks);
        pv.bytes[rank] = std::move(packed);
    }
    if (++pv.count < ranks)
        return;

    if (const std::uint64_t bucket = bucket_of(version)) {
        pending_version done = std::move(pv);
        versions_.erase(version);
        const bool whole = done.bytes.size() == ranks &&
                           std::all_of(done.bytes.begin(), done.bytes.end(),
                                       [](const packed_bytes& b) { return b != nullptr; });
        if (!whole) {
            // The versions batched before it are packed first: a pack holds
            // consecutive versions only.
            close_batch();
            commit_unpacked(job, version, std::move(done), ranks);
            return;
        }
        if (batch_.empty())
            batch_opened_ = std::chrono::steady_clock::now();
        auto& bv = batch_[version];
        bv.ranks = ranks;
        bv.journaled = done.journaled;
        bv.bytes = std::move(done.bytes);
        held_[version] = bv.bytes;
        committing_.insert(version);
        for (const auto& part : bv.bytes)
            batch_bytes_ += store::journal::footprint(part->size());
        // Closed when it holds the rest of its bucket (versions may become
        // whole out of order), when it takes half the journal (whose records
        // it settles), or when no new version comes for a while.
        const std::uint64_t low = batch_.begin()->first, high = batch_.rbegin()->first;
        const bool bucket_done = bucket_of(high + 1) != bucket_of(high) &&
                                 high - low + 1 == batch_.size() &&
                                 (low == bucket_of(low) || low - 1 <= closed_up_to_);
        if (batches_finishing_ || bucket_done || batch_bytes_ >= opts_.journal_bytes / 2) {
            close_batch();
            return;
        }
        // A pause of pack_wait closes it, and so does its age: versions that
        // keep coming just faster than the pause do not wait for the rest of
        // their bucket.
        const auto seconds = [](double s) {
            return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(s));
        };
        batch_timer_.expires_at(
            std::min(std::chrono::steady_clock::now() + seconds(opts_.pack_wait),
                     batch_opened_ + seconds(std::max(opts_.pack_age, opts_.pack_wait))));
        batch_timer_.async_wait([this](boost::system::error_code ec) {
            if (!ec)
                close_batch();
        });
        return;
    }

    store::manifest m{job, opts_.node, version, ranks, {}};
    for (const auto& e : pv.entries)
        m.entries.push_back(*e);
    const std::uint32_t journaled_parts = pv.journaled;
    versions_.erase(version);
    const std::string name = store::manifest_object(job, version, opts_.node);
    auto text = std::make_shared<std::string>(store::format_manifest(m));
    ++pending_;
    committing_.insert(version);
    store::backend* st = &store_;
    // Manifest, then (if every node's manifest is there) COMPLETE: one job on
    // the catalog thread. Retention follows as a job of its own.
    struct outcome {
        bool completed = false;
        std::string why;
        // Failed where another node's retention removed the version: this
        // many newer versions are complete, at least `keep`.
        std::uint64_t superseded_by = 0;
    };
    auto result = std::make_shared<outcome>();
    const std::uint32_t nodes = nodes_;
    const std::uint32_t crc = crc32c(std::as_bytes(std::span(*text)));
    const unsigned keep = opts_.keep;
    catalog_.submit(
        [st, name, text, m, crc, nodes, result, keep]() -> std::error_code {
            auto ec = st->put(name, std::as_bytes(std::span(*text)));
            if (ec)
                result->why = fmt::format("writing manifest {} failed: {}", name, ec.message());
            else
                ec = store::try_complete(*st, m, crc, nodes, result->completed, result->why);
            // Another node's retention may have removed the version under
            // it (its directory is gone): this node committed its parts
            // after the `keep` newer versions completed. Retention wants it
            // gone; nothing is lost.
            if (keep > 0 &&
                (ec == errc::not_found || ec == std::errc::no_such_file_or_directory)) {
                if (const auto newer = store::complete_after(*st, m.job, m.version); newer >= keep)
                    result->superseded_by = newer;
            }
            return ec;
        },
        [this, name, version, result, job, nodes, log = journal_,
         journaled_parts](std::error_code ec) {
            committing_.erase(committing_.find(version));
            // The manifest is durable and the node arrived at the version's
            // tally (or retention wants the version gone): the journal's
            // records of its parts are no longer needed. After a failure of
            // either they stay, for the next daemon to complete it from.
            if (!ec || result->superseded_by)
                settle_journaled(log, journaled_parts);
            if (ec && result->superseded_by) {
                log_info("version {} of node {}: not completed ({}), as retention (keep {}) "
                         "removes it: {} newer versions of job {} are complete",
                         version, opts_.node, result->why, opts_.keep, result->superseded_by,
                         job);
            } else if (ec) {
                log_error("version {} of node {}: {}", version, opts_.node, result->why);
                if (!manifest_error_)
                    manifest_error_ = ec;
                ++lost_versions_;
            } else {
                log_info("version {} of node {} complete ({} ranks): {}", version, opts_.node,
                         ranks_, name);
                if (result->completed) {
                    log_info("version {} of job {} complete on all {} nodes: {}", version, job,
                             nodes, store::complete_object(job, version));
                    prune(job);
                }
            }
            done_one();
        });
}

void job::rank_leaving(std::uint32_t rank)
{
    if (batches_finishing_ || !leaving_.insert(rank).second)
        return;
    for (std::uint32_t r = 0; r < ranks_state_.size(); ++r)
        if (!leaving_.count(r) && ranks_state_[r] != rank_state::ended &&
            ranks_state_[r] != rank_state::died)
            return;
    finish_batches();
}

job::packed_bytes job::held_part(std::uint64_t version, std::uint32_t rank) const
{
    // Whole versions, batched or being packed; or one whose other ranks
    // have not handed theirs over yet.
    if (const auto it = held_.find(version); it != held_.end())
        return rank < it->second.size() ? it->second[rank] : nullptr;
    if (const auto it = versions_.find(version); it != versions_.end())
        return rank < it->second.bytes.size() ? it->second.bytes[rank] : nullptr;
    return nullptr;
}

void job::finish_batches()
{
    batches_finishing_ = true;
    close_batch();
    // Retention waiting for its spacing runs now, and from now on without
    // one (the timer's handler, cancelled, does nothing).
    if (prune_timer_armed_)
        prune_timer_.cancel();
    start_prune();
}

void job::close_batch()
{
    batch_timer_.cancel();
    if (batch_.empty())
        return;
    closed_up_to_ = std::max(closed_up_to_, batch_.rbegin()->first);
    batch_bytes_ = 0;
    auto b = std::make_shared<const batch>(std::exchange(batch_, {}));
    // A pack per run of consecutive versions of one bucket (a version that
    // is not here yet, or was not packed, ends a run).
    std::vector<std::vector<std::uint64_t>> runs;
    for (const auto& [v, bv] : *b) {
        if (runs.empty() || runs.back().back() + 1 != v ||
            bucket_of(runs.back().back()) != bucket_of(v))
            runs.emplace_back();
        runs.back().push_back(v);
    }
    for (const auto& run : runs) {
        const std::uint64_t bucket = bucket_of(run.front());
        std::uint32_t journaled = 0;
        for (const auto v : run)
            journaled += b->at(v).journaled;
        auto result = std::make_shared<bucket_outcome>();
        ++pending_;
        catalog_.submit(
            [st = &store_, b, run, bucket, job = name_, node = opts_.node, nodes = nodes_,
             result]() -> std::error_code {
                std::vector<store::pack_input> inputs;
                for (const auto v : run) {
                    const auto& bv = b->at(v);
                    for (std::uint32_t r = 0; r < bv.ranks; ++r)
                        inputs.push_back({v, r, bv.ranks, *bv.bytes[r]});
                }
                store::bucket_part part;
                if (auto ec = write_pack(*st, job, node, bucket, inputs, part, result->why))
                    return ec;
                return store::try_complete_bucket(*st, job, bucket, part, nodes,
                                                  result->complete, result->why);
            },
            [this, run, bucket, journaled, result, log = journal_](std::error_code ec) {
                if (!ec)
                    settle_journaled(log, journaled);
                bucket_committed(ec, run, bucket, *result);
            });
    }
}

void job::commit_unpacked(const std::string& job, std::uint64_t version, pending_version pv,
                          std::uint32_t ranks)
{
    const std::uint64_t bucket = bucket_of(version);
    store::manifest m{job, opts_.node, version, ranks, {}, bucket, nodes_};
    std::vector<std::pair<std::uint32_t, packed_bytes>> parts;  // without an object yet
    for (std::uint32_t r = 0; r < ranks; ++r) {
        m.entries.push_back(*pv.entries[r]);
        if (r < pv.bytes.size() && pv.bytes[r])
            parts.emplace_back(r, pv.bytes[r]);
    }
    auto text = std::make_shared<const std::string>(store::format_manifest(m));
    const std::uint32_t crc = crc32c(std::as_bytes(std::span(*text)));
    auto result = std::make_shared<bucket_outcome>();
    ++pending_;
    committing_.insert(version);
    if (!parts.empty())
        held_[version] = pv.bytes;
    catalog_.submit(
        [st = &store_, job, version, bucket, node = opts_.node, nodes = nodes_, ranks,
         parts = std::move(parts), text, crc, result]() -> std::error_code {
            for (const auto& [rank, bytes] : parts) {
                const auto name = store::data_object(job, version, node, rank);
                if (auto ec = st->put(name, *bytes)) {
                    result->why = fmt::format("committing {} failed: {}", name,
                                              store::failure(*st, name, ec));
                    return ec;
                }
            }
            const auto name = store::manifest_object(job, version, node);
            if (auto ec = st->put(name, std::as_bytes(std::span(*text)))) {
                result->why = fmt::format("writing manifest {} failed: {}", name,
                                          store::failure(*st, name, ec));
                return ec;
            }
            result->arriving = true;
            return store::try_complete_bucket(*st, job, bucket,
                                              {node, ranks, version, version, crc, true}, nodes,
                                              result->complete, result->why);
        },
        [this, version, bucket, journaled = pv.journaled, result,
         log = journal_](std::error_code ec) {
            if (!ec)
                settle_journaled(log, journaled);
            // No manifest, and no part in the journal for the next daemon
            // to write one from: the node will never have the version, and
            // a gap would keep the bucket's later versions from completing.
            if (ec && !result->arriving && journaled == 0)
                skip_version(version, result->why);
            bucket_committed(ec, {version}, bucket, *result);
        });
}

void job::bucket_committed(std::error_code ec, const std::vector<std::uint64_t>& versions,
                           std::uint64_t bucket, const bucket_outcome& result)
{
    for (const auto v : versions) {
        committing_.erase(committing_.find(v));
        held_.erase(v);
    }
    const std::string which =
        versions.size() == 1 ? fmt::format("version {}", versions.front())
                             : fmt::format("versions {}-{}", versions.front(), versions.back());
    if (ec) {
        // Their records stay in the journal, for the next daemon to claim
        // the job on the node.
        log_error("{} of node {}: {}", which, opts_.node, result.why);
        if (!manifest_error_)
            manifest_error_ = ec;
        lost_versions_ += versions.size();
    } else {
        log_info("{} of node {} committed in bucket {} ({} ranks)", which, opts_.node, bucket,
                 ranks_);
        // Before retention may run (bucket_advanced): a skip under way
        // holds it below its version (committing_).
        retry_skips();
        if (result.complete >= versions.front())
            bucket_advanced(name_, bucket, result.complete);
    }
    done_one();
}

void job::bucket_advanced(const std::string& job, std::uint64_t bucket, std::uint64_t complete)
{
    log_info("versions up to {} of job {} complete on all {} nodes: {}", complete, job, nodes_,
             store::bucket_complete_object(job, bucket, complete));
    prune(job);
}

void job::version_failed(std::error_code ec, std::uint64_t version)
{
    if (ec != errc::peer_gone)
        ++lost_versions_;
    if (version)
        skip_version(version, fmt::format("a rank's part failed: {}", ec.message()));
}

void job::skip_version(std::uint64_t version, const std::string& why)
{
    const std::uint64_t bucket = bucket_of(version);
    if (bucket == 0 || name_.empty())
        return;
    const auto [at, fresh] = skipped_.try_emplace(version);
    if (!fresh)
        return;
    auto& skipped = at->second;
    skipped.why = why;
    if (const auto it = versions_.find(version); it != versions_.end()) {
        // No pack or manifest of ours will hold these parts: their records
        // go once the skip has arrived (a crash before lets the claim skip
        // the version again).
        skipped.journaled = it->second.journaled;
        versions_.erase(it);
    }
    send_skip(version);
}

void job::send_skip(std::uint64_t version)
{
    const std::uint64_t bucket = bucket_of(version);
    auto& skipped = skipped_[version];
    skipped.sending = true;
    const unsigned tries = ++skipped.tries;
    // Held from the first try until it arrives or no try is left, between
    // tries too: retention stays below the version (start_prune), so that
    // it never removes a bucket a try then arrives at and makes anew.
    if (!std::exchange(skipped.holds, true))
        committing_.insert(version);
    auto result = std::make_shared<bucket_outcome>();
    ++pending_;
    catalog_.submit(
        [st = &store_, job = name_, bucket, node = opts_.node, nodes = nodes_, ranks = ranks_,
         version, result]() -> std::error_code {
            store::bucket_part skip{node, ranks, version, version, 0, false, true};
            return store::try_complete_bucket(*st, job, bucket, skip, nodes, result->complete,
                                              result->why);
        },
        [this, version, bucket, tries, result, job = name_, log = journal_](std::error_code ec) {
            const auto it = skipped_.find(version);
            std::string why;
            // No further try: the job ended on the node, or none is left.
            const bool last = tries >= skip_tries || retried_at_end_;
            if (it != skipped_.end()) {
                it->second.sending = false;
                it->second.failed = ec;
                why = it->second.why;
                if (!ec) {
                    it->second.arrived = true;
                    settle_journaled(log, std::exchange(it->second.journaled, 0));
                }
                if ((!ec || last) && std::exchange(it->second.holds, false))
                    committing_.erase(committing_.find(version));
            }
            const std::string attempt =
                tries > 1 ? fmt::format(" (try {} of {})", tries, skip_tries) : std::string();
            if (ec) {
                log_error("version {} of node {}: its skip could not arrive at bucket {}{}: {}; {}",
                          version, opts_.node, bucket, attempt, result->why,
                          last ? "the bucket's later versions wait until the node's next "
                                 "daemon skips it, when the job runs there again"
                               : "the bucket's later versions wait for it: it is sent again "
                                 "after another part of the node's arrives, or when the job "
                                 "ends on the node");
            } else {
                log_warn("version {} of job {} skipped by node {} in bucket {}{} ({}): it will "
                         "never be complete, the bucket's later versions complete without it",
                         version, job, opts_.node, bucket, attempt, why);
                retry_skips();
                if (result->complete > version)
                    bucket_advanced(job, bucket, result->complete);
            }
            done_one();
        });
}

void job::retry_skips()
{
    // Once the job's end sent them, the log has said there is no next try.
    if (!retried_at_end_)
        send_failed_skips();
}

void job::retry_skips_at_end()
{
    if (!std::exchange(retried_at_end_, true))
        send_failed_skips();
}

void job::send_failed_skips()
{
    for (auto& [version, skipped] : skipped_)
        if (!skipped.arrived && !skipped.sending && skipped.tries < skip_tries)
            send_skip(version);
}

std::error_code job::manifest_error() const noexcept
{
    if (manifest_error_)
        return manifest_error_;
    for (const auto& [version, skipped] : skipped_)
        if (!skipped.arrived && skipped.failed)
            return skipped.failed;
    return {};
}

std::uint64_t job::version_arrived(std::uint64_t version, std::uint64_t now)
{
    // Bounded: a rank that lags further behind than the versions kept gets
    // the oldest kept one's place, never one after its own newer versions.
    static constexpr std::size_t kept = 256;
    if (arrivals_.size() >= kept && version < arrivals_.begin()->first)
        return arrivals_.begin()->second;
    const auto [at, fresh] = arrivals_.try_emplace(version, now);
    const std::uint64_t order = at->second;
    if (fresh && arrivals_.size() > kept)
        arrivals_.erase(arrivals_.begin());  // older than `version`: not `at`
    return order;
}

void job::abandon_partial_versions()
{
    std::uint64_t lost = 0;
    for (const auto& [version, pv] : versions_) {
        // No manifest will list these parts: their records are not needed.
        settle_journaled(journal_, pv.journaled);
        std::vector<std::uint32_t> missing, died;
        for (std::uint32_t r = 0; r < pv.entries.size(); ++r)
            if (!pv.entries[r])
                (r < ranks_state_.size() && ranks_state_[r] == rank_state::died ? died : missing)
                    .push_back(r);
        if (missing.empty()) {
            log_warn("version {} of job {} on node {}: discarded, rank{} {} died before writing "
                     "it",
                     version, name_, opts_.node, died.size() == 1 ? "" : "s", fmt::join(died, ", "));
            continue;
        }
        ++lost;
        log_error("version {} of job {} on node {}: rank{} {} never wrote it, so the node has no "
                  "manifest for it and it can never be complete; every rank must write every "
                  "version",
                  version, name_, opts_.node, missing.size() == 1 ? "" : "s",
                  fmt::join(missing, ", "));
    }
    lost_versions_ += lost;
    std::vector<std::uint64_t> partial;
    for (const auto& [version, pv] : versions_)
        partial.push_back(version);
    versions_.clear();
    // With packs on, the other nodes' later versions of those buckets
    // complete without them.
    for (const auto v : partial)
        skip_version(v, "the job ended with it partial on the node");
}

void job::close()
{
    abandon_partial_versions();
    retry_skips_at_end();
    finish_batches();
}

store::op_counts job::store_ops() const
{
    // The daemon's store counts; a store that does not (in a test) reports none.
    const auto* counted = dynamic_cast<const store::counting_backend*>(&store_);
    return counted ? counted->counts() : store::op_counts{};
}

void job::write_summary()
{
    if (summary_written_ || name_.empty() || files_only_)
        return;
    summary_written_ = true;
    auto report = summary_.report(lost_versions_ - lost_before_);
    report.store_ops = store_ops() - ops_before_;
    report.puller_bytes = puller_bytes_();
    for (std::size_t i = 0; i < report.puller_bytes.size() && i < pulled_before_.size(); ++i)
        report.puller_bytes[i] -= pulled_before_[i];
    const std::string name = store::report_object(name_, summary_.key(), opts_.node);
    const std::string text = store::format_report(report);
    if (auto ec = store_.put(name, std::as_bytes(std::span(text))))
        log_warn("job {}: its summary {} could not be written: {}", name_, name,
                 store::failure(store_, name, ec));
    else
        log_info("job {}: summary {} ({} rank versions, {})", name_, name, summary_.versions(),
                 human_bytes(summary_.bytes()));
    // Every record settled: the next daemon to claim the job on this node
    // finds nothing to replay. One not settled (its object, or its node's
    // manifest or arrival, not written) stays for it.
    if (!journal_)
        return;
    if (const auto why = journal_->fill_error(); !why.empty())
        log_warn("job {}: node {}'s journal was not used, its versions went straight to their "
                 "objects: {}",
                 name_, opts_.node, why);
    if (const auto left = journal_->unsettled(); left > 0)
        log_warn("job {}: {} record{} of node {}'s journal could not be settled (an object, or "
                 "the node's manifest or arrival, not written); the next daemon to claim the job "
                 "on the node completes {}",
                 name_, left, left == 1 ? "" : "s", opts_.node, left == 1 ? "it" : "them");
    else if (auto ec = journal_->reset())
        log_warn("job {}: node {}'s journal could not be started over: {}", name_, opts_.node,
                 ec.message());
}

std::uint32_t job::ranks_connected() const
{
    return static_cast<std::uint32_t>(
        std::count(ranks_state_.begin(), ranks_state_.end(), rank_state::connected));
}

std::uint32_t job::ranks_died() const
{
    return static_cast<std::uint32_t>(
        std::count(ranks_state_.begin(), ranks_state_.end(), rank_state::died));
}

bool job::over() const
{
    if (name_.empty())
        return false;
    return std::all_of(ranks_state_.begin(), ranks_state_.end(), [](rank_state s) {
        return s == rank_state::ended || s == rank_state::died;
    });
}

std::uint32_t job::ranks_ended() const
{
    return static_cast<std::uint32_t>(
        std::count(ranks_state_.begin(), ranks_state_.end(), rank_state::ended));
}

std::uint32_t job::unfinished_ranks(std::uint32_t rank) const
{
    std::uint32_t n = 0;
    for (std::uint32_t r = 0; r < ranks_state_.size(); ++r)
        n += r != rank && ranks_state_[r] == rank_state::connected;
    return n;
}

void job::prune(const std::string& job)
{
    if (opts_.keep == 0)
        return;
    if (!prune_job_)
        ++pending_;  // counted from now: the daemon does not exit before it ran
    prune_job_ = job;
    start_prune();
}

void job::start_prune()
{
    // Old versions go while no data is on its way to the store: their removal
    // would compete with a running checkpoint's flush for the store (on Ceph,
    // removal under a flush slowed it by 10-15 %). Checkpoints leave gaps.
    if (!prune_job_ || pruning_ || !data_.idle())
        return;
    // While versions keep completing, one retention a spacing: each run
    // lists the job and writes a durable mark, which for small versions
    // coming back to back cost the daemon more than a version's own commit.
    // Once the ranks are leaving (finish_batches), at once.
    const auto now = std::chrono::steady_clock::now();
    if (!batches_finishing_ && now < pruned_at_ + retention_spacing) {
        if (!prune_timer_armed_) {
            prune_timer_armed_ = true;
            prune_timer_.expires_at(pruned_at_ + retention_spacing);
            prune_timer_.async_wait([this](boost::system::error_code ec) {
                prune_timer_armed_ = false;
                if (!ec)
                    start_prune();
            });
        }
        return;
    }
    pruning_ = true;
    data_.clear_disturbed();
    const std::string job = *prune_job_;
    prune_job_.reset();
    struct outcome {
        std::vector<std::uint64_t> removed;
        store::prune_notes notes;
        std::error_code ec;
    };
    auto result = std::make_shared<outcome>();
    store::backend* st = &store_;
    const unsigned keep = opts_.keep;
    flush_policy* data = &data_;
    // With the data path idle, every version this node has written is
    // committed, or its manifest is on its way: the oldest such is the bound.
    // (Versions written from now on are newer than every complete one.)
    const std::uint64_t below = committing_.empty() ? UINT64_MAX : *committing_.begin();
    retention_.submit(
        [data, st, job, keep, result, below]() -> std::error_code {
            // A new write pauses it after the version being removed; it goes
            // on when the data is in the store.
            result->ec = store::prune(*st, job, keep, result->removed,
                                      [data] { return data->disturbed(); }, below,
                                      &result->notes);
            return {};
        },
        [this, job, result](std::error_code) {
            pruning_ = false;
            // A run paused by a write goes on at the next idle moment, not
            // a spacing later: it has not done what it was asked.
            if (result->ec != std::errc::operation_canceled)
                pruned_at_ = std::chrono::steady_clock::now();
            // Versions already removed are reported even when a later one
            // failed: one line a run, not one a version (a job of small
            // versions back to back removes dozens a second).
            for (const auto& [v, why] : result->notes.passed_over)
                if (passed_over_told_.insert(why).second)
                    log_error("retention (keep {}) of job {}: version {} is not counted among "
                              "the versions kept, and is left in the store: {}; check it with "
                              "`iofwd verify {}`, then restore its record or remove it with "
                              "`iofwd rm {} {}`",
                              opts_.keep, job, v, why, job, job, v);
            std::sort(result->removed.begin(), result->removed.end());
            if (!result->removed.empty())
                log_info("retention (keep {}): removed version{} {} of job {}", opts_.keep,
                         result->removed.size() == 1 ? "" : "s",
                         number_ranges(result->removed, 64), job);
            if (result->ec == std::errc::operation_canceled)
                prune(job);  // paused: wanted again, starts once the data is in
            else if (result->ec)
                log_error("retention (keep {}) of job {} stopped: {}; older versions stay in the "
                          "store",
                          opts_.keep, job,
                          result->notes.why.empty() ? result->ec.message() : result->notes.why);
            start_prune();  // a version completed while this ran
            done_one();
        });
}

void job::done_one()
{
    --pending_;
    if (on_change_)
        on_change_();
}

}  // namespace iofwd::iod

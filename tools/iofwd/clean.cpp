// iofwd rm JOB VERSION..., iofwd keep JOB K, iofwd gc [JOB]: removing
// versions and what crashes left. Before changing a job each takes every
// node's claim on it (store::hold_job), so that no daemon can start writing
// it meanwhile. When a live daemon holds a claim, only complete versions may
// be removed (nobody writes those again, as the daemon's own retention
// relies on); a version that is not complete may be the one it is writing,
// and is refused with exit status 3.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "rendezvous.hpp"
#include "runtime_gc.hpp"
#include "store/catalog.hpp"
#include "store/inventory.hpp"

namespace iofwd::tool {
namespace {

struct clean_args {
    store_options store;
    std::string job;
    std::vector<std::string> versions;
    std::string keep;
    bool discard_journals = false;
    bool journals = false;  // gc: also the journals that hold nothing to commit
};

// "node nodeA's journal holds", "the journals of nodes nodeA, nodeB hold".
std::string journals_hold(const std::vector<std::string>& nodes)
{
    return nodes.size() == 1
               ? fmt::format("node {}'s journal holds", nodes.front())
               : fmt::format("the journals of nodes {} hold", fmt::join(nodes, ", "));
}

// "version 4", "versions 3, 4".
std::string versions_words(const std::vector<std::uint64_t>& v)
{
    return fmt::format("version{} {}", v.size() == 1 ? "" : "s", fmt::join(v, ", "));
}

// What removing versions would change for node r.node's next daemon, in
// words: "node nodeA's journal holds parts of version 4, which ...".
std::string journal_change(const store::journal_revival& r)
{
    std::vector<std::string> parts;
    if (!r.revived.empty())
        parts.push_back(fmt::format("parts of {}, which the node's next daemon would put back",
                                    versions_words(r.revived)));
    if (!r.skipped.empty())
        parts.push_back(fmt::format("parts of {}, which the node's next daemon would no longer "
                                    "commit (it takes a packed version older than every complete "
                                    "one as removed by retention)",
                                    versions_words(r.skipped)));
    return fmt::format("{} {}", journals_hold({r.node}), fmt::join(parts, ", and "));
}

// The job's claims held (or, with a live daemon, nothing held and every
// version in `targets` checked to be complete, and not to be revived by a
// journal); throws `refused` otherwise.
void guard(store::backend& st, const std::string& job, const std::vector<std::uint64_t>& targets,
           store::job_hold& hold)
{
    std::vector<std::string> live;
    std::string why;
    const auto ec = store::hold_job(st, job, hold, live, why);
    if (!ec)
        return;
    if (ec != errc::rank_in_use)
        throw failure(damaged, why);
    for (const auto v : targets) {
        store::version_entry e;
        if (store::inspect_version(st, job, v, e) || e.state == store::version_state::incomplete)
            throw failure(refused, fmt::format("not touching version {} of job {}: it is not "
                                               "complete and {}; try again when the job has "
                                               "finished",
                                               v, job, why));
    }
    // The newest complete versions, whose parts a live daemon's journal
    // holds, would be complete again at the node's next claim if that
    // daemon died before a newer version completes (journals_reviving); a
    // live journal is not ours to start over.
    std::vector<std::string> nodes;
    std::vector<store::journal_revival> changes;
    std::string problem;
    if (auto ec = st.journal_nodes(job, nodes))
        throw failure(damaged, fmt::format("cannot list the journals of job {}: {}", job,
                                           store::failure(st, job, ec)));
    if (store::journals_reviving(st, job, nodes, targets, changes, problem))
        throw failure(damaged, problem);
    for (const auto& r : changes)
        throw failure(refused, fmt::format("not removing {} of job {}: {}, and {}; try again "
                                           "when the job has finished",
                                           versions_words(targets), job, why,
                                           journal_change(r)));
}

// What rm freed of the packs of the versions it took out of buckets: the
// packs removed (those that held only versions removed) and their bytes;
// the packs left that hold a removed version beside one that is not.
struct packs_report {
    std::vector<std::uint64_t> versions;  // taken out of buckets
    std::set<std::string> freed;
    std::uint64_t bytes = 0;
    std::set<std::string> kept;
    std::vector<std::string> failed;
};

// Removes `versions`; reports what it did to those buckets of packs
// completed.
packs_report remove_versions(store::backend& st, const std::string& job,
                             const std::vector<std::uint64_t>& versions)
{
    // Which are packed, all told before anything is removed.
    std::vector<std::uint64_t> packed;
    for (const auto v : versions) {
        bool in = false;
        if (auto ec = store::in_bucket(st, job, v, in))
            throw failure(damaged, fmt::format("cannot tell whether version {} of job {} is in a "
                                               "pack: {}",
                                               v, job, store::failure(st, job, ec)));
        if (in)
            packed.push_back(v);
    }
    packs_report out;
    for (const auto v : versions) {
        const bool in = std::find(packed.begin(), packed.end(), v) != packed.end();
        store::packs_freed freed;
        if (auto ec = in ? store::remove_packed_version(st, job, v, freed)
                         : store::remove_version(st, job, v)) {
            const auto where = in ? fmt::format("{}/{}", job, store::packs_dir)
                                  : store::version_dir(job, v);
            throw failure(damaged, fmt::format("removing version {} of job {} failed: {}", v, job,
                                               store::failure(st, where, ec)));
        }
        if (!in)
            continue;
        out.versions.push_back(v);
        out.freed.insert(freed.packs.begin(), freed.packs.end());
        out.bytes += freed.bytes;
        out.kept.insert(freed.kept.begin(), freed.kept.end());
        if (!freed.failed.empty())
            out.failed.push_back(fmt::format("version {}: {}", v, freed.failed));
    }
    // A pack kept at one version's removal may have gone at a later one's.
    for (const auto& p : out.freed)
        out.kept.erase(p);
    return out;
}

int rm(const clean_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    std::set<std::uint64_t> unique;
    for (const auto& t : a.versions)
        unique.insert(parse_version(*st, a.job, t));
    const std::vector<std::uint64_t> versions(unique.begin(), unique.end());
    store::job_hold hold;
    guard(*st, a.job, versions, hold);
    // An incomplete version a node's journal holds may yet complete: its
    // node's next daemon would commit its parts again (gc keeps it too).
    std::vector<store::journaled_version> journaled;
    std::string why;
    if (store::journaled_versions(*st, a.job, hold.nodes, journaled, why))
        throw failure(damaged, why);
    for (const auto& jv : journaled) {
        store::version_entry e;
        if (!unique.count(jv.version))
            continue;
        if (auto ec = store::inspect_version(*st, a.job, jv.version, e))
            throw failure(damaged, fmt::format("cannot read version {} of job {}: {}",
                                               jv.version, a.job, ec.message()));
        if (e.state != store::version_state::incomplete)
            continue;
        throw failure(refused, fmt::format("not removing version {} of job {}: {} its parts, "
                                           "which the node's next daemon commits (iofwd gc "
                                           "--discard-journals {} drops them and removes it)",
                                           jv.version, a.job, journals_hold(jv.nodes), a.job));
    }
    // A record of a version in its own directory is settled while no
    // newer version is complete: removing the newest would make a crashed
    // daemon's records of it (and of versions removed before it) pending
    // again, and the node's next daemon would put them back. Such a
    // journal is started over first, unless it also holds a version that
    // may yet complete (journaled_versions, above), or removing the oldest
    // complete versions would make its next daemon skip one: refused then.
    // What else the journal drops are parts of versions that cannot
    // complete (a rank of the node's missing).
    std::vector<store::journal_revival> changes;
    if (store::journals_reviving(*st, a.job, hold.nodes, versions, changes, why))
        throw failure(damaged, why);
    for (const auto& r : changes) {
        std::vector<std::uint64_t> completing;
        for (const auto& jv : journaled)
            if (!unique.count(jv.version) &&
                std::find(jv.nodes.begin(), jv.nodes.end(), r.node) != jv.nodes.end())
                completing.push_back(jv.version);
        if (completing.empty() && r.skipped.empty())
            continue;
        throw failure(refused,
                      fmt::format("not removing {} of job {}: {}{}; remove {} after the job's "
                                  "next run on node {} (its daemon commits what the journal "
                                  "holds and starts it over), or drop what the journal holds "
                                  "first (iofwd gc --discard-journals {}, for a node that will "
                                  "not run the job again)",
                                  versions_words(versions), a.job, journal_change(r),
                                  completing.empty() || !r.skipped.empty()
                                      ? ""
                                      : fmt::format(", beside parts of {}, which it commits so "
                                                    "that they can complete",
                                                    versions_words(completing)),
                                  versions.size() == 1 ? "it" : "them", r.node, a.job));
    }
    std::vector<std::string> restarted;
    for (const auto& r : changes) {
        if (store::discard_journal(*st, a.job, r.node, why))
            throw failure(damaged, why + "; nothing removed");
        restarted.push_back(r.node);
    }
    const auto packed = remove_versions(*st, a.job, versions);
    for (const auto& f : packed.failed)
        fmt::print(stderr, "iofwd rm: job {}: {}; the version is removed, and a later iofwd rm "
                           "in its bucket, or retention once it takes the bucket, tries again\n",
                   a.job, f);
    if (a.store.json) {
        print_json({{"store", st->location()},
                    {"job", a.job},
                    {"removed", versions},
                    {"removed_from_packs", packed.versions},
                    {"packs_freed", packed.freed.size()},
                    {"pack_bytes_freed", packed.bytes},
                    {"packs_kept", packed.kept.size()},
                    {"pack_failures", packed.failed},
                    {"journals_started_over", restarted}});
    } else {
        for (const auto& r : changes)
            fmt::print("started node {}'s journal over: it held parts of {}, which the node's "
                       "next daemon would have put back\n",
                       r.node, versions_words(r.revived));
        for (const auto v : versions)
            fmt::print("removed version {} of job {}{}\n", v, a.job,
                       std::find(packed.versions.begin(), packed.versions.end(), v) ==
                               packed.versions.end()
                           ? ""
                           : " (out of its bucket of packs)");
        if (!packed.freed.empty())
            fmt::print("freed {} in {} pack{} that held only versions removed\n",
                       human_bytes(packed.bytes), packed.freed.size(),
                       packed.freed.size() == 1 ? "" : "s");
        if (!packed.kept.empty())
            fmt::print("{} pack{} keep{} the bytes of versions removed beside versions that are "
                       "not, until those go too: {}\n",
                       packed.kept.size(), packed.kept.size() == 1 ? "" : "s",
                       packed.kept.size() == 1 ? "s" : "", fmt::join(packed.kept, ", "));
    }
    return ok;
}

int keep(const clean_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    const auto k = parse_number(a.keep, "K");
    if (k == 0 || k > 1000000000)
        throw failure(bad_argument, fmt::format("K {} is not from 1 to 1000000000 (iofwd rm "
                                                "removes versions by number)",
                                                k));
    std::vector<std::uint64_t> doomed, complete, removed;
    std::vector<store::bucket_span> buckets;
    store::retirement retire;
    store::prune_notes notes;
    if (auto ec = store::prune_plan(*st, a.job, static_cast<unsigned>(k), UINT64_MAX, doomed,
                                    buckets, retire, &notes))
        throw failure(damaged, fmt::format("cannot list job {}: {}", a.job,
                                           notes.why.empty() ? ec.message() : notes.why));
    std::vector<std::uint64_t> left;  // passed over: complete by name only
    for (const auto& [v, why] : notes.passed_over) {
        left.push_back(v);
        if (!a.store.json)
            fmt::print(stderr,
                       "iofwd keep: version {} is not counted among the {} kept, and is left as "
                       "it is: {}; check it with `iofwd verify {}`, then restore its record or "
                       "remove it with `iofwd rm {} {}`\n",
                       v, k, why, a.job, a.job, v);
    }
    std::sort(left.begin(), left.end());
    // The versions retired are settled by their bucket's record (complete
    // or skipped): no daemon writes them, whether or not one is live.
    std::vector<std::uint64_t> checked;
    for (const auto v : doomed)
        if (!retire.holds(v))
            checked.push_back(v);
    store::job_hold hold;
    guard(*st, a.job, checked, hold);
    // Exactly the plan checked (a bucket of small versions goes whole, or
    // its older versions are retired while it stays).
    if (auto ec = store::prune_exactly(*st, a.job, doomed, buckets, retire, removed))
        throw failure(damaged, fmt::format("removing old versions of job {} failed after "
                                           "removing {}: {}",
                                           a.job, number_ranges(removed),
                                           store::failure(*st, a.job, ec)));
    store::complete_versions(*st, a.job, complete);
    std::erase_if(complete,
                  [&](std::uint64_t v) { return std::binary_search(left.begin(), left.end(), v); });
    if (a.store.json) {
        nlohmann::json passed = nlohmann::json::array();
        for (const auto& [v, why] : notes.passed_over)
            passed.push_back({{"version", v}, {"why", why}});
        print_json({{"store", st->location()},
                    {"job", a.job},
                    {"keep", k},
                    {"kept", complete},
                    {"passed_over", passed},
                    {"removed", removed}});
    } else {
        fmt::print("job {}: kept complete version{} {}; removed {}{}\n", a.job,
                   complete.size() == 1 ? "" : "s", number_ranges(complete),
                   number_ranges(removed),
                   left.empty() ? ""
                                : fmt::format("; left version{} {}, whose record does not read",
                                              left.size() == 1 ? "" : "s", number_ranges(left)));
    }
    return ok;
}

// The runtime directory's leftovers of finished sessions (runtime_gc.hpp:
// their locks and sockets, and their logs once older than
// IOFWD_RUNTIME_LOG_AGE beyond the newest few): removed, named.
std::vector<std::string> clean_stale_runtime_files()
{
    runtime_paths dir;
    runtime_gc_policy policy;
    runtime_gc_report report;
    std::string why;
    if (auto ec = open_runtime(default_session(default_node_name()), dir, why))
        throw failure(bad_argument, fmt::format("the runtime directory: {}", why));
    if (auto ec = runtime_gc_policy_from_env(policy, why))
        throw failure(bad_argument, why);
    if (auto ec = runtime_gc(dir, policy, report, why))
        throw failure(damaged, fmt::format("cleaning the runtime directory: {}", why));
    std::vector<std::string> removed;
    for (const auto& e : report.entries)
        if (e.action == gc_action::removed)
            removed.push_back(dir.dir + "/" + e.name);
    return removed;
}

int gc(const clean_args& a)
{
    if (a.discard_journals && a.job.empty())
        throw failure(bad_argument, "--discard-journals needs JOB: it drops what the journals "
                                    "of that job's nodes hold");
    auto st = open_store(a.store);
    std::vector<std::string> jobs;
    if (!a.job.empty()) {
        require_job(*st, a.job);
        jobs.push_back(a.job);
    } else if (auto ec = store::list_jobs(*st, jobs)) {
        throw failure(damaged, fmt::format("cannot list {}: {}", st->describe(), ec.message()));
    }
    int status = ok;
    std::size_t versions_removed = 0, leftovers_removed = 0, buckets_removed = 0;
    std::size_t journals_removed = 0;
    std::uint64_t journal_bytes = 0;
    nlohmann::json out = {{"store", st->location()}, {"jobs", nlohmann::json::array()}};
    for (const auto& job : jobs) {
        std::vector<std::uint64_t> all;
        const auto listed = store::job_versions(*st, job, all);
        if (listed == errc::not_found || listed == std::errc::not_a_directory)
            continue;  // not a job
        // The listing read the job's FORMAT when there: its words, when it
        // is why (the job is refused, the others collected).
        std::string format_why;
        if (listed && !store::check_format(*st, job, format_why))
            throw failure(damaged, fmt::format("cannot list job {}: {}", job,
                                               store::failure(*st, job, listed)));
        nlohmann::json j = {{"job", job},
                            {"removed_versions", nlohmann::json::array()},
                            {"removed_leftovers", nlohmann::json::array()},
                            {"removed_buckets", nlohmann::json::array()},
                            {"unreadable_buckets", nlohmann::json::array()},
                            {"kept_versions", nlohmann::json::array()},
                            {"kept_buckets", nlohmann::json::array()},
                            {"discarded_versions", nlohmann::json::array()},
                            {"removed_journals", nlohmann::json::array()},
                            {"kept_journals", nlohmann::json::array()},
                            {"journal_failures", nlohmann::json::array()},
                            {"refused", nullptr}};
        // The job is not touched, and says why; the others are collected.
        const auto refuse = [&](int code, const std::string& why) {
            status = code;
            j["refused"] = why;
            if (!a.store.json)
                fmt::print(stderr, "iofwd gc: not touching job {}: {}\n", job, why);
            out["jobs"].push_back(std::move(j));
        };
        if (listed) {
            refuse(damaged, format_why);  // not this iofwd's to judge
            continue;
        }
        // Leftovers and incomplete versions are exactly what a live daemon
        // may be writing: with one, the job is not touched at all.
        store::job_hold hold;
        std::vector<std::string> live;
        std::string why;
        if (auto ec = store::hold_job(*st, job, hold, live, why)) {
            refuse(ec == errc::rank_in_use ? refused : damaged, why);
            continue;
        }
        // A version a node's journal holds may still complete: that
        // node's next daemon commits its parts beside those the other nodes
        // committed, which removing the version (or its bucket) would lose.
        std::vector<store::journaled_version> journaled, discarded;
        if (store::journaled_versions(*st, job, hold.nodes, journaled, why) ||
            (a.discard_journals && store::discard_journals(*st, job, hold, why))) {
            refuse(damaged, why);
            continue;
        }
        if (a.discard_journals)
            discarded = std::exchange(journaled, {});
        // The journaled versions of version `v` (bucket 0) or of bucket `b`.
        const auto journaled_in = [&](std::uint64_t v, std::uint64_t b) {
            std::vector<const store::journaled_version*> in;
            for (const auto& jv : journaled)
                if (b ? jv.bucket == b : jv.version == v)
                    in.push_back(&jv);
            return in;
        };
        // Leftovers first, so that each is reported even when the version
        // it is in goes too.
        std::vector<std::string> left;
        if (auto ec = st->leftovers(job, left); ec && ec != errc::not_found)
            throw failure(damaged, fmt::format("cannot look for leftovers of job {}: {}", job,
                                               ec.message()));
        for (const auto& l : left)
            if (auto ec = st->remove_leftover(l); ec && ec != errc::not_found)
                throw failure(damaged, fmt::format("cannot remove {}: {}", l,
                                                   store::failure(*st, l, ec)));
        std::vector<std::uint64_t> dead;
        std::vector<std::string> kept;
        std::vector<std::pair<std::uint64_t, std::string>> arriving_kept;  // version, nodes
        std::vector<std::string> waiting_kept;  // in words, from "version N:" or the bucket
        // Buckets of small versions with no record: none of their
        // versions completed, or a crash left them half removed. Judged
        // before the versions, and removed after them: whether a version
        // waits in its bucket depends on the buckets after it that stay (a
        // claim looks at the newest few), and whether its manifest arrived
        // on its bucket's tally, which goes with the bucket.
        std::vector<store::bucket_span> unfinished;
        std::vector<std::string> unreadable;
        if (auto ec = store::unfinished_buckets(*st, job, unfinished, unreadable))
            throw failure(damaged, fmt::format("cannot list the packs of job {}: {}", job,
                                               store::failure(*st, job, ec)));
        std::vector<store::bucket_span> doomed;
        std::set<std::uint64_t> going;  // their first versions
        std::vector<std::string> kept_buckets, waiting_buckets;  // said after the versions
        // Newest first, for the same reason.
        std::reverse(unfinished.begin(), unfinished.end());
        for (const auto& b : unfinished) {
            if (const auto in = journaled_in(0, b.first); !in.empty()) {
                std::vector<std::uint64_t> vs;
                std::set<std::string> nodes;
                for (const auto* jv : in) {
                    vs.push_back(jv->version);
                    nodes.insert(jv->nodes.begin(), jv->nodes.end());
                }
                const std::vector<std::string> holders(nodes.begin(), nodes.end());
                kept_buckets.push_back(fmt::format("{} (a bucket of packs with no record): {} "
                                                   "parts of its version{} {}",
                                           store::bucket_dir(job, b.first),
                                           journals_hold(holders), vs.size() == 1 ? "" : "s",
                                           fmt::join(vs, ", ")));
                j["kept_buckets"].push_back(
                    {{"bucket", b.first}, {"versions", vs}, {"nodes", holders}});
                continue;
            }
            // Versions every node brought, behind a first version some
            // node lacks, which its next daemon skips.
            store::bucket_wait w;
            if (auto ec = store::bucket_waiting(*st, job, b.first, w, why, &going)) {
                waiting_buckets.push_back(fmt::format("{} (a bucket of packs with no record): "
                                                      "cannot tell whether its versions wait "
                                                      "({})",
                                                      store::bucket_dir(job, b.first), why));
                j["kept_buckets"].push_back({{"bucket", b.first}, {"why", why}});
                status = damaged;
                continue;
            }
            if (!w.whole.empty()) {
                waiting_buckets.push_back(fmt::format(
                    "{} (a bucket of packs with no record), its version{} {}: {}",
                    store::bucket_dir(job, b.first), w.whole.size() == 1 ? "" : "s",
                    fmt::join(w.whole, ", "), store::describe_wait(w, w.whole.size() > 1)));
                j["kept_buckets"].push_back({{"bucket", b.first},
                                             {"versions", w.whole},
                                             {"waits_for", w.gaps},
                                             {"nodes", w.lacking}});
                continue;
            }
            doomed.push_back(b);
            going.insert(b.first);
        }
        for (const auto v : all) {
            store::version_entry e;
            if (store::inspect_version(*st, job, v, e) ||
                e.state != store::version_state::incomplete)
                continue;
            if (const auto in = journaled_in(v, 0); !in.empty()) {
                kept.push_back(fmt::format("version {}: {} its parts", v,
                                           journals_hold(in.front()->nodes)));
                j["kept_versions"].push_back({{"version", v}, {"nodes", in.front()->nodes}});
                continue;
            }
            // A daemon stopped between a manifest and its arrival at the
            // bucket: the node's next one arrives with it.
            if (const auto arriving = store::manifests_to_arrive(*st, job, v);
                !arriving.empty()) {
                arriving_kept.emplace_back(v, fmt::format("{}", fmt::join(arriving, ", ")));
                j["kept_versions"].push_back({{"version", v}, {"nodes", arriving}});
                continue;
            }
            // Every node's part arrived at its bucket, behind a gap a
            // node's next daemon skips (or a record a crash cut off).
            store::bucket_wait w;
            if (auto ec = store::version_waiting(*st, job, v, w, why, &going)) {
                waiting_kept.push_back(fmt::format("version {}: cannot tell whether it waits "
                                                   "in its bucket ({})",
                                                   v, why));
                j["kept_versions"].push_back({{"version", v}, {"why", why}});
                status = damaged;
                continue;
            }
            if (!w.whole.empty()) {
                waiting_kept.push_back(
                    fmt::format("version {}: {}", v, store::describe_wait(w)));
                j["kept_versions"].push_back({{"version", v},
                                              {"bucket", w.bucket},
                                              {"waits_for", w.gaps},
                                              {"nodes", w.lacking}});
                continue;
            }
            dead.push_back(v);
        }
        remove_versions(*st, job, dead);
        std::vector<std::uint64_t> buckets;
        for (const auto& b : doomed) {
            bool ignored = false;
            if (auto ec = store::remove_bucket(*st, job, b, ignored))
                throw failure(damaged, fmt::format("cannot remove {}: {}",
                                                   store::bucket_dir(job, b.first),
                                                   store::failure(*st, job, ec)));
            buckets.push_back(b.first);
        }
        std::sort(buckets.begin(), buckets.end());
        kept.insert(kept.end(), kept_buckets.begin(), kept_buckets.end());
        waiting_kept.insert(waiting_kept.end(), waiting_buckets.begin(), waiting_buckets.end());
        // Journals whose every record is settled: 16 MiB of zeros a node
        // by default, which the job's next run on the node writes again.
        std::vector<store::removed_journal> journals;
        std::vector<std::string> journals_kept, journal_failures;
        if (a.journals) {
            if (store::remove_idle_journals(*st, job, hold, journals, journals_kept,
                                            journal_failures, why))
                journal_failures.push_back(why);
            if (!journal_failures.empty())
                status = damaged;
        }
        for (const auto& r : journals) {
            j["removed_journals"].push_back({{"node", r.node}, {"bytes", r.bytes}});
            journal_bytes += r.bytes;
        }
        j["kept_journals"] = journals_kept;
        j["journal_failures"] = journal_failures;
        journals_removed += journals.size();
        for (const auto& f : journal_failures)
            fmt::print(stderr, "iofwd gc: job {}: left a journal: {}\n", job, f);
        for (const auto& why : unreadable)
            fmt::print(stderr, "iofwd gc: job {}: left a bucket whose record does not read "
                               "(it may hold complete versions): {}\n",
                       job, why);
        if (!unreadable.empty())
            status = damaged;
        versions_removed += dead.size();
        leftovers_removed += left.size();
        buckets_removed += buckets.size();
        j["removed_versions"] = dead;
        j["removed_leftovers"] = left;
        j["removed_buckets"] = buckets;
        j["unreadable_buckets"] = unreadable;
        for (const auto& d : discarded)
            j["discarded_versions"].push_back({{"version", d.version}, {"nodes", d.nodes}});
        if (!a.store.json) {
            for (const auto& d : discarded)
                fmt::print("job {}: dropped version {} from the journal of node {} "
                           "(--discard-journals)\n",
                           job, d.version, fmt::join(d.nodes, ", "));
            for (const auto& k : kept)
                fmt::print(stderr, "iofwd gc: job {}: kept {}, which the node's next daemon "
                                   "commits when the job runs there again, so that they can "
                                   "complete (iofwd gc --discard-journals {} drops them, for a "
                                   "node that will not run the job again)\n",
                           job, k, job);
            for (const auto& [v, nodes] : arriving_kept)
                fmt::print(stderr, "iofwd gc: job {}: kept version {}: node {}'s manifest of it "
                                   "has yet to arrive at its bucket, which the node's next "
                                   "daemon does when the job runs there again, so that it can "
                                   "complete (iofwd rm {} {} removes it, for a node that will "
                                   "not run the job again)\n",
                           job, v, nodes, job, v);
            for (const auto& w : waiting_kept)
                fmt::print(stderr, "iofwd gc: job {}: kept {}\n", job, w);
            for (const auto& l : left)
                fmt::print("job {}: removed leftover {}\n", job, l);
            for (const auto v : dead)
                fmt::print("job {}: removed version {} (incomplete, and no daemon is writing "
                           "the job)\n",
                           job, v);
            for (const auto b : buckets)
                fmt::print("job {}: removed {} (a bucket of packs with no record, and no "
                           "daemon is writing the job)\n",
                           job, store::bucket_dir(job, b));
            for (const auto& r : journals)
                fmt::print("job {}: removed node {}'s journal ({}; every record in it settled)\n",
                           job, r.node, human_bytes(r.bytes));
            for (const auto& k : journals_kept)
                fmt::print("job {}: kept {}\n", job, k);
        }
        out["jobs"].push_back(std::move(j));
    }
    const auto runtime = clean_stale_runtime_files();
    out["runtime_files"] = runtime;
    if (a.store.json) {
        print_json(out);
    } else {
        for (const auto& f : runtime)
            fmt::print("runtime: removed {}\n", f);
        fmt::print("gc: {} version{} and {} leftover{} removed{}{}\n", versions_removed,
                   versions_removed == 1 ? "" : "s", leftovers_removed,
                   leftovers_removed == 1 ? "" : "s",
                   buckets_removed == 0 ? std::string()
                                        : fmt::format(", and {} bucket{} of packs",
                                                      buckets_removed,
                                                      buckets_removed == 1 ? "" : "s"),
                   journals_removed == 0
                       ? std::string()
                       : fmt::format(", and {} journal{} ({})", journals_removed,
                                     journals_removed == 1 ? "" : "s", human_bytes(journal_bytes)));
    }
    return status;
}

}  // namespace

void add_rm(CLI::App& app, int& status)
{
    auto args = std::make_shared<clean_args>();
    auto* cmd = add_job_command(
        app, "rm", "remove versions of a job (refused for a version that is not complete while "
                   "a live daemon writes the job; a crashed daemon's journal that would put a "
                   "removed version back is started over first)",
        args->store, args->job);
    cmd->add_option("VERSION", args->versions, "the versions to remove")->required();
    cmd->callback([args, &status] { status = rm(*args); });
}

void add_keep(CLI::App& app, int& status)
{
    auto args = std::make_shared<clean_args>();
    auto* cmd = add_job_command(
        app, "keep", "keep the newest K complete versions of a job and remove every older "
                     "version (what iod --keep K does); small versions kept in packs leave "
                     "at once, their bytes with the last version of their pack",
        args->store, args->job);
    cmd->add_option("K", args->keep, "complete versions to keep (1 or more)")->required();
    cmd->callback([args, &status] { status = keep(*args); });
}

void add_gc(CLI::App& app, int& status)
{
    auto args = std::make_shared<clean_args>();
    auto* cmd = add_job_command(
        app, "gc", "remove crash leftovers: temporary objects of writes that never committed, "
                   "versions that can never complete (incomplete, no live daemon writing "
                   "the job), and buckets of packed small versions with no record; jobs a live "
                   "daemon writes are not touched, nor versions a node's journal still holds "
                   "(a daemon that stopped after reporting them durable: the node's next daemon "
                   "commits them)",
        args->store, args->job, false, "only this job (default: every job)");
    cmd->add_flag("--discard-journals", args->discard_journals,
                  "drop what the nodes' journals hold, and remove the versions they kept "
                  "(for nodes that will not run the job again; those versions are lost)");
    cmd->add_flag("--journals", args->journals,
                  "also remove each node's journal of a job whose every record is settled "
                  "(IOFWD_JOURNAL_SIZE each, 16 MiB by default, per node and job): the job's "
                  "next run on that node writes it again; one a daemon would still act on is "
                  "kept, and named");
    cmd->callback([args, &status] { status = gc(*args); });
}

}  // namespace iofwd::tool

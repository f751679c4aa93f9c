#include "store/inventory.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "errors.hpp"
#include "store/catalog.hpp"
#include "store/journal.hpp"
#include "store/layout.hpp"

namespace iofwd::store {
namespace {

// "nodeA.r0003" -> {"nodeA", 3}; false for anything else.
bool parse_rank_object(std::string_view name, std::string& node, std::uint32_t& rank)
{
    const auto dot = name.rfind(".r");
    if (dot == std::string_view::npos || dot == 0 || dot + 2 >= name.size())
        return false;
    const auto digits = name.substr(dot + 2);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (ec != std::errc() || end != digits.data() + digits.size())
        return false;
    node = std::string(name.substr(0, dot));
    return true;
}

std::int64_t newest(backend& st, const std::string& dir, const std::vector<std::string>& names)
{
    std::int64_t t = 0;
    for (const auto& n : names) {
        std::int64_t m = 0;
        if (!st.modified(dir + "/" + n, m))
            t = std::max(t, m);
    }
    if (t == 0)
        st.modified(dir, t);  // an empty version: when its directory was made
    return t;
}

}  // namespace

const char* state_name(version_state s)
{
    switch (s) {
    case version_state::complete: return "complete";
    case version_state::incomplete: return "incomplete";
    case version_state::damaged: return "damaged";
    }
    return "?";
}

std::error_code list_jobs(backend& st, std::vector<std::string>& out)
{
    std::vector<std::string> names;
    if (auto ec = st.list("", names); ec && ec != errc::not_found)
        return ec;
    out = std::move(names);
    return {};
}

std::error_code job_versions(backend& st, const std::string& job, std::vector<std::uint64_t>& out)
{
    std::vector<std::string> dirs;
    if (auto ec = st.list(job + "/", dirs))
        return ec;
    std::vector<std::uint64_t> versions;
    for (const auto& d : dirs)
        if (const auto v = parse_version_dir(d))
            versions.push_back(*v);
    if (auto ec = with_packed_versions(st, job, dirs, versions))
        return ec;
    out = std::move(versions);
    return {};
}

namespace {

// inspect_version's part for a version in a pack (complete: its bucket's
// record says so).
std::error_code inspect_packed(backend& st, const std::string& job, std::uint64_t version,
                               version_entry& e)
{
    version_info info;
    damage what;
    if (auto ec = load_version(st, job, version, info, e.why, &what)) {
        if (ec == errc::not_found)
            return ec;
        e.state = version_state::damaged;
        return {};
    }
    e.state = version_state::complete;
    e.nodes = static_cast<std::uint32_t>(info.record.nodes.size());
    for (const auto& m : info.manifests)
        for (const auto& r : m.entries) {
            ++e.ranks;
            e.bytes += r.size;
        }
    if (!info.places.empty() && !info.places.front().empty())
        st.modified(info.places.front().front().object, e.time);
    return {};
}

}  // namespace

std::error_code inspect_version(backend& st, const std::string& job, std::uint64_t version,
                                version_entry& out)
{
    version_entry e;
    e.version = version;
    const std::string dir = version_dir(job, version);
    std::vector<std::string> names;
    if (auto ec = st.list(dir + "/", names)) {
        if (ec == errc::not_found && !inspect_packed(st, job, version, e)) {
            out = std::move(e);
            return {};
        }
        return ec;
    }
    const std::set<std::string> present(names.begin(), names.end());
    if (present.contains(complete_name)) {
        version_info info;
        damage what;
        st.modified(complete_object(job, version), e.time);
        if (auto ec = load_version(st, job, version, info, e.why, &what)) {
            e.state = version_state::damaged;
            out = std::move(e);
            return {};
        }
        e.state = version_state::complete;
        e.nodes = static_cast<std::uint32_t>(info.record.nodes.size());
        std::vector<std::string> missing;
        for (const auto& m : info.manifests)
            for (const auto& r : m.entries) {
                ++e.ranks;
                e.bytes += r.size;
                const auto name = data_object(job, version, m.node, r.rank);
                if (!present.contains(name.substr(dir.size() + 1)))
                    missing.push_back(name);
            }
        if (!missing.empty()) {
            e.state = version_state::damaged;
            e.why = fmt::format("{} listed in the manifests {} missing", fmt::join(missing, ", "),
                                missing.size() == 1 ? "is" : "are");
        }
        out = std::move(e);
        return {};
    }
    // No record of its own: a node's part of a large version a bucket's
    // record completes (docs/small-versions.md), or what is there so far.
    if (!inspect_packed(st, job, version, e)) {
        out = std::move(e);
        return {};
    }
    std::set<std::string> manifests;
    const std::string suffix = manifest_suffix;
    for (const auto& n : names) {
        std::string node;
        std::uint32_t rank = 0;
        if (n.size() > suffix.size() && n.ends_with(suffix)) {
            manifests.insert(n.substr(0, n.size() - suffix.size()));
        } else if (parse_rank_object(n, node, rank)) {
            std::uint64_t size = 0;
            if (!st.size(dir + "/" + n, size)) {
                ++e.ranks;
                e.bytes += size;
            }
        }
    }
    e.nodes = static_cast<std::uint32_t>(manifests.size());
    e.why = manifests.empty()
                ? "no COMPLETE record, no node's manifest"
                : fmt::format("no COMPLETE record; the manifests of {} ({})",
                              manifests.size() == 1 ? "1 node" : fmt::format("{} nodes", manifests.size()),
                              fmt::join(manifests, ", "));
    e.time = newest(st, dir, names);
    out = std::move(e);
    return {};
}

namespace {

// The nodes that claimed `job` or keep a journal of it: a node whose claim
// file was removed (taken for a stale lock) may still have a journal whose
// versions its next daemon completes.
std::error_code nodes_of(backend& st, const std::string& job, std::vector<std::string>& out,
                         std::string& why)
{
    std::vector<std::string> claimed, journaled;
    auto ec = st.claimants(job, claimed);
    if (!ec || ec == errc::not_found)
        ec = st.journal_nodes(job, journaled);
    if (ec && ec != errc::not_found) {
        why = fmt::format("cannot find the nodes of job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    std::set<std::string> all(claimed.begin(), claimed.end());
    all.insert(journaled.begin(), journaled.end());
    out.assign(all.begin(), all.end());
    return {};
}

}  // namespace

std::error_code inspect_job(backend& st, const std::string& job, job_entry& out, std::string& why)
{
    job_entry j;
    j.job = job;
    std::vector<std::uint64_t> versions;
    if (auto ec = job_versions(st, job, versions)) {
        why = ec == errc::not_found
                  ? fmt::format("job '{}' is not in {}", job, st.describe())
                  : fmt::format("cannot list job {} in {}: {}", job, st.describe(),
                                failure(st, job, ec));
        return ec;
    }
    if (auto ec = probe_claims(st, job, j.live_nodes)) {
        why = fmt::format("cannot check the claims on job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    // With no live daemon, what the nodes' journals hold: a version in one
    // may yet complete. Only read, without the claims: a daemon may start
    // meanwhile (then this is a moment old, as every listing is).
    std::vector<journaled_version> journaled;
    if (j.live_nodes.empty()) {
        std::vector<std::string> nodes;
        std::string problem;
        if (nodes_of(st, job, nodes, problem) ||
            journaled_versions(st, job, nodes, journaled, problem))
            j.journal_problem = std::move(problem);
    }
    const bool journals_read = j.journal_problem.empty();
    for (const auto v : versions) {
        version_entry e;
        if (auto ec = inspect_version(st, job, v, e); ec && ec != errc::not_found) {
            why = fmt::format("cannot read version {} of job {}: {}", v, job,
                              failure(st, version_dir(job, v), ec));
            return ec;
        }
        if (e.state == version_state::incomplete && j.live_nodes.empty()) {
            const auto in = std::find_if(journaled.begin(), journaled.end(),
                                         [&](const journaled_version& jv) { return jv.version == v; });
            if (in != journaled.end())
                e.journaled_by = in->nodes;
            e.arriving = manifests_to_arrive(st, job, v);
            bucket_wait w;
            std::string problem;
            const bool told = !version_waiting(st, job, v, w, problem);
            if (!told)
                e.why += fmt::format("; cannot tell whether it waits in its bucket ({})",
                                     problem);
            else if (!w.whole.empty())
                e.waiting = describe_wait(w);
            e.waits_for = w.gaps;
            e.dead = journals_read && told && e.journaled_by.empty() && e.arriving.empty() &&
                     e.waiting.empty();
        }
        j.versions.push_back(std::move(e));
    }
    if (auto ec = skipped_versions(st, job, j.skipped)) {
        why = fmt::format("cannot read the bucket records of job {}: {}", job,
                          failure(st, job, ec));
        return ec;
    }
    if (auto ec = damaged_bucket_records(st, job, j.damaged_buckets)) {
        why = fmt::format("cannot read the bucket records of job {}: {}", job,
                          failure(st, job, ec));
        return ec;
    }
    if (auto ec = st.leftovers(job, j.leftovers); ec && ec != errc::not_found) {
        why = fmt::format("cannot look for leftovers of job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    out = std::move(j);
    return {};
}

std::error_code probe_claims(backend& st, const std::string& job, std::vector<std::string>& live)
{
    std::vector<std::string> nodes;
    if (auto ec = st.claimants(job, nodes); ec && ec != errc::not_found)
        return ec;
    std::vector<std::string> held;
    for (const auto& n : nodes) {
        std::unique_ptr<claim> c;
        if (auto ec = st.claim_job(job, n, c)) {
            if (ec != errc::rank_in_use)
                return ec;
            held.push_back(n);
        }
    }
    live = std::move(held);
    return {};
}

std::error_code hold_job(backend& st, const std::string& job, job_hold& out,
                         std::vector<std::string>& live, std::string& why)
{
    std::vector<std::string> nodes;
    if (auto ec = nodes_of(st, job, nodes, why))
        return ec;
    job_hold hold;
    live.clear();
    for (const auto& n : nodes) {
        std::unique_ptr<claim> c;
        if (auto ec = st.claim_job(job, n, c)) {
            if (ec != errc::rank_in_use) {
                why = fmt::format("cannot take the claim of node {} on job {}: {}", n, job,
                                  failure(st, job, ec));
                return ec;
            }
            live.push_back(n);
            continue;
        }
        hold.claims.push_back(std::move(c));
        hold.nodes.push_back(n);
    }
    if (!live.empty()) {
        why = describe_live(job, live);
        return make_error_code(errc::rank_in_use);
    }
    out = std::move(hold);
    return {};
}

namespace {

// The records node `node`'s journal of `job` holds, read as they are (no
// claim needed: only looked at); none when the node has no journal.
std::error_code read_node_journal(backend& st, const std::string& job, const std::string& node,
                                  std::vector<journal::record>& records, std::string& why)
{
    records.clear();
    unique_fd fd;
    if (auto ec = st.read_journal(job, node, fd)) {
        if (ec == errc::not_found || ec == std::errc::operation_not_supported)
            return {};
        why = fmt::format("cannot open node {}'s journal of job {}: {}", node, job,
                          failure(st, journal_object(job, node), ec));
        return ec;
    }
    journal j(std::move(fd), 0);
    if (auto ec = j.replay(records)) {
        why = fmt::format("cannot read node {}'s journal of job {}: {}", node, job,
                          ec.message());
        return ec;
    }
    return {};
}

// What store::standing asks of the job beside a record: its complete
// versions, and those its buckets' marks hide.
std::error_code standing_lists(backend& st, const std::string& job,
                               std::vector<std::uint64_t>& complete,
                               std::vector<std::uint64_t>& hidden, std::string& why)
{
    if (auto ec = complete_versions(st, job, complete); ec && ec != errc::not_found) {
        why = fmt::format("cannot list job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    if (auto ec = hidden_versions(st, job, hidden); ec && ec != errc::not_found) {
        why = fmt::format("cannot list the packs of job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    return {};
}

// The records of node `node`'s journal of `job` that the node's next
// daemon acts on at its claim (store::standing: pending), in journal order.
std::error_code pending_records(backend& st, const std::string& job, const std::string& node,
                                const std::vector<std::uint64_t>& complete,
                                const std::vector<std::uint64_t>& hidden,
                                std::vector<journal::record>& out, std::string& why)
{
    if (auto ec = read_node_journal(st, job, node, out, why))
        return ec;
    std::erase_if(out, [&](const journal::record& r) {
        return standing(r, job, node, complete, hidden) != record_standing::pending;
    });
    return {};
}

}  // namespace

std::error_code journaled_versions(backend& st, const std::string& job,
                                   const std::vector<std::string>& nodes,
                                   std::vector<journaled_version>& out, std::string& why)
{
    out.clear();
    std::vector<std::uint64_t> complete, hidden;
    if (auto ec = standing_lists(st, job, complete, hidden, why))
        return ec;
    std::map<std::uint64_t, journaled_version> found;
    for (const auto& node : nodes) {
        std::vector<journal::record> records;
        if (auto ec = pending_records(st, job, node, complete, hidden, records, why))
            return ec;
        // The versions the node's next daemon commits parts of at its
        // claim: every rank of the node's is in the journal or committed
        // (a part too large for the journal went to its object first).
        // Its records must agree on the node's ranks, the job's nodes and
        // the bucket, as the claim asks.
        struct held {
            std::set<std::uint32_t> ranks;
            std::uint32_t of = 0;
            std::uint32_t nodes = 0;
            std::uint64_t bucket = 0;
            bool consistent = true;
        };
        std::map<std::uint64_t, held> mine;
        for (const auto& r : records) {
            auto& h = mine[r.version];
            h.consistent = h.ranks.empty() || (h.consistent && h.of == r.ranks &&
                                               h.nodes == r.nodes && h.bucket == r.bucket);
            h.ranks.insert(r.rank);
            h.of = r.ranks;
            h.nodes = r.nodes;
            h.bucket = r.bucket;
        }
        for (const auto& [version, h] : mine) {
            bool whole = h.consistent && h.of > 0 && h.of <= journal_max_ranks && h.nodes > 0 &&
                         *h.ranks.rbegin() < h.of;
            for (std::uint32_t rank = 0; whole && rank < h.of; ++rank) {
                std::uint64_t size = 0;
                whole = h.ranks.count(rank) ||
                        !st.size(data_object(job, version, node, rank), size);
            }
            if (!whole)
                continue;  // the claim leaves it incomplete (or skips it)
            auto& v = found[version];
            v.version = version;
            v.bucket = h.bucket;
            v.nodes.push_back(node);
        }
    }
    for (auto& [version, v] : found)
        out.push_back(std::move(v));
    return {};
}

std::error_code discard_journal(backend& st, const std::string& job, const std::string& node,
                                std::string& why)
{
    // Only a journal that is there is started over (open_journal would
    // make one).
    unique_fd fd;
    std::error_code ec = st.read_journal(job, node, fd);
    if (ec == errc::not_found || ec == std::errc::operation_not_supported)
        return {};
    if (!ec)
        ec = st.open_journal(job, node, fd);
    if (!ec) {
        journal j(std::move(fd), 0);
        std::vector<journal::record> ignored;
        if (!(ec = j.replay(ignored)))
            ec = j.reset();
    }
    if (ec)
        why = fmt::format("cannot start node {}'s journal of job {} over: {}", node, job,
                          ec.message());
    return ec;
}

std::error_code discard_journals(backend& st, const std::string& job, const job_hold& hold,
                                 std::string& why)
{
    for (const auto& node : hold.nodes)
        if (auto ec = discard_journal(st, job, node, why))
            return ec;
    return {};
}

std::error_code journals_reviving(backend& st, const std::string& job,
                                  const std::vector<std::string>& nodes,
                                  const std::vector<std::uint64_t>& versions,
                                  std::vector<journal_revival>& out, std::string& why)
{
    out.clear();
    std::vector<std::uint64_t> complete, hidden;
    if (auto ec = standing_lists(st, job, complete, hidden, why))
        return ec;
    // The job as it will be: `versions` no longer complete, and those a
    // bucket's record completes hidden by their buckets' marks (rm marks
    // only those: a version no bucket completes goes as a directory).
    const std::set<std::uint64_t> going(versions.begin(), versions.end());
    auto complete_after = complete;
    std::erase_if(complete_after, [&](std::uint64_t v) { return going.count(v) > 0; });
    std::set<std::uint64_t> hides(hidden.begin(), hidden.end());
    for (const auto v : going) {
        bool marked = false;
        if (auto ec = in_bucket(st, job, v, marked)) {
            why = fmt::format("cannot tell whether version {} of job {} is in a pack: {}", v, job,
                              failure(st, job, ec));
            return ec;
        }
        if (marked)
            hides.insert(v);
    }
    const std::vector<std::uint64_t> hidden_after(hides.begin(), hides.end());
    for (const auto& node : nodes) {
        std::vector<journal::record> records;
        if (auto ec = read_node_journal(st, job, node, records, why))
            return ec;
        std::set<std::uint64_t> revived, skipped;
        for (const auto& r : records) {
            const bool now =
                standing(r, job, node, complete, hidden) == record_standing::pending;
            const bool after = standing(r, job, node, complete_after, hidden_after) ==
                               record_standing::pending;
            if (after && (!now || going.count(r.version)))
                revived.insert(r.version);
            else if (now && !after && !going.count(r.version))
                skipped.insert(r.version);
        }
        if (!revived.empty() || !skipped.empty())
            out.push_back({node, {revived.begin(), revived.end()}, {skipped.begin(), skipped.end()}});
    }
    return {};
}

std::error_code remove_idle_journals(backend& st, const std::string& job, const job_hold& hold,
                                     std::vector<removed_journal>& removed,
                                     std::vector<std::string>& kept,
                                     std::vector<std::string>& failed, std::string& why)
{
    removed.clear();
    kept.clear();
    failed.clear();
    std::vector<std::uint64_t> complete, hidden;
    if (auto ec = standing_lists(st, job, complete, hidden, why))
        return ec;
    for (const auto& node : hold.nodes) {
        std::vector<journal::record> records;
        std::string reason;
        if (pending_records(st, job, node, complete, hidden, records, reason)) {
            failed.push_back(reason);
            continue;
        }
        std::set<std::uint64_t> pending;
        for (const auto& r : records)
            pending.insert(r.version);
        if (!pending.empty()) {
            kept.push_back(fmt::format("node {}'s journal holds records of version{} {}, which "
                                       "the node's next daemon of the job acts on",
                                       node, pending.size() == 1 ? "" : "s",
                                       fmt::join(pending, ", ")));
            continue;
        }
        const auto name = journal_object(job, node);
        unique_fd fd;
        struct stat s {};
        auto ec = st.read_journal(job, node, fd);
        if (ec == errc::not_found || ec == std::errc::operation_not_supported)
            continue;  // none (a store without journals)
        if (!ec && ::fstat(fd.get(), &s) != 0)
            ec = last_system_error();
        if (!ec)
            ec = st.remove_lazily(name);
        if (ec == errc::not_found)
            continue;
        if (ec) {
            failed.push_back(fmt::format("cannot remove node {}'s journal of job {}: {}", node,
                                         job, failure(st, name, ec)));
            continue;
        }
        removed.push_back({node, static_cast<std::uint64_t>(s.st_blocks) * 512});
    }
    return {};
}

std::string describe_live(const std::string& job, const std::vector<std::string>& live)
{
    return fmt::format("a live daemon on node{} {} holds job {}'s claim (it is writing the job)",
                       live.size() == 1 ? "" : "s", fmt::join(live, ", "), job);
}

}  // namespace iofwd::store

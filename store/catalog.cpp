#include "store/catalog.hpp"

#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "crc32c.hpp"
#include "errors.hpp"

namespace iofwd::store {

std::error_code read_all(backend& st, const std::string& name, std::string& out)
{
    std::uint64_t size = 0;
    if (auto ec = st.size(name, size))
        return ec;
    if (size > (64u << 20))
        return make_error_code(errc::corrupt);  // records and manifests are small
    std::string text(size, '\0');
    if (auto ec = st.read(name, 0, std::as_writable_bytes(std::span(text))))
        return ec;
    out = std::move(text);
    return {};
}

std::error_code complete_versions(backend& st, const std::string& job,
                                  std::vector<std::uint64_t>& out)
{
    std::vector<std::string> dirs;
    if (auto ec = st.list(job + "/", dirs))
        return ec;
    std::vector<std::uint64_t> found;
    for (const auto& d : dirs) {
        const auto v = parse_version_dir(d);
        if (!v)
            continue;
        std::uint64_t size = 0;
        if (!st.size(complete_object(job, *v), size))
            found.push_back(*v);
    }
    std::sort(found.begin(), found.end());
    out = std::move(found);
    return {};
}

namespace {

// load_version, of every node or (`only` not empty) of one.
std::error_code load(backend& st, const std::string& job, std::uint64_t version,
                     const std::string& only, version_info& out, std::string& why, damage* what)
{
    damage scratch;
    damage& d = what ? *what : scratch;
    version_info info;
    std::string text;
    const auto rec_name = complete_object(job, version);
    if (auto ec = read_all(st, rec_name, text)) {
        why = fmt::format("version {} of job {} is not complete ({}: {})", version, job, rec_name,
                          failure(st, rec_name, ec));
        d = {rec_name, "a COMPLETE record", failure(st, rec_name, ec), problem::record};
        return ec;
    }
    if (auto ec = parse_complete(text, info.record, why)) {
        d = {rec_name, "a COMPLETE record", why, problem::record};
        why = fmt::format("{}: {}", rec_name, why);
        return ec;
    }
    // A record is only valid where it was written: a version directory
    // copied (or renamed) to another number is not that version.
    if (info.record.job != job || info.record.version != version) {
        why = fmt::format("{} is the record of job {} version {}, not of job {} version {}: the "
                          "directory was copied or moved, it is not that version",
                          rec_name, info.record.job, info.record.version, job, version);
        d = {rec_name, fmt::format("job {} version {}", job, version),
             fmt::format("job {} version {}", info.record.job, info.record.version), problem::record};
        return make_error_code(errc::corrupt);
    }
    for (const auto& n : info.record.nodes) {
        if (!only.empty() && n.node != only)
            continue;
        const auto mname = manifest_object(job, version, n.node);
        if (auto ec = read_all(st, mname, text)) {
            why = fmt::format("version {}: manifest {} listed as complete is unreadable: {}",
                              version, mname, failure(st, mname, ec));
            d = {mname, "a manifest", ec == errc::not_found ? "missing" : failure(st, mname, ec),
                 problem::record};
            return make_error_code(errc::corrupt);
        }
        if (const auto got = crc32c(std::as_bytes(std::span(text))); got != n.manifest_crc32c) {
            why = fmt::format("version {}: manifest {} does not match the checksum in {}", version,
                              mname, rec_name);
            d = {mname, fmt::format("crc32c {:08x} (in {})", n.manifest_crc32c, rec_name),
                 fmt::format("crc32c {:08x}", got), problem::record};
            return make_error_code(errc::corrupt);
        }
        manifest m;
        if (auto ec = parse_manifest(text, m, why)) {
            d = {mname, "a manifest", why, problem::record};
            why = fmt::format("{}: {}", mname, why);
            return ec;
        }
        if (m.job != job || m.version != version || m.node != n.node || m.ranks != n.ranks) {
            why = fmt::format("{} describes job {} version {} node {} ({} ranks), not what its "
                              "place and {} say (job {} version {} node {}, {} ranks)",
                              mname, m.job, m.version, m.node, m.ranks, rec_name, job, version,
                              n.node, n.ranks);
            d = {mname,
                 fmt::format("job {} version {} node {}, {} ranks", job, version, n.node, n.ranks),
                 fmt::format("job {} version {} node {}, {} ranks", m.job, m.version, m.node,
                             m.ranks),
                 problem::record};
            return make_error_code(errc::corrupt);
        }
        info.manifests.push_back(std::move(m));
    }
    out = std::move(info);
    return {};
}

}  // namespace

std::error_code load_version(backend& st, const std::string& job, std::uint64_t version,
                             version_info& out, std::string& why, damage* what)
{
    return load(st, job, version, {}, out, why, what);
}

std::error_code load_node(backend& st, const std::string& job, std::uint64_t version,
                          const std::string& node, version_info& out, std::string& why)
{
    if (node.empty())
        return make_error_code(errc::invalid_argument);
    return load(st, job, version, node, out, why, nullptr);
}

namespace {

// Reads [0, size) in pieces of at most 16 MiB into `dest` (or a scratch
// block when dest is empty), hands each to `each`, and returns the crc32c.
std::error_code read_crc(backend& st, const std::string& name, std::uint64_t size,
                         std::span<std::byte> dest, const block_check& each, std::uint32_t& crc,
                         std::string& why, damage& what)
{
    std::vector<std::byte> scratch;
    if (dest.empty())
        scratch.resize(static_cast<std::size_t>(std::min<std::uint64_t>(size, 16u << 20)));
    std::uint32_t c = 0;
    for (std::uint64_t off = 0; off < size;) {
        std::span<std::byte> piece;
        if (dest.empty()) {
            piece = std::span(scratch).first(
                static_cast<std::size_t>(std::min<std::uint64_t>(scratch.size(), size - off)));
        } else {
            piece = dest.subspan(static_cast<std::size_t>(off),
                                 static_cast<std::size_t>(std::min<std::uint64_t>(16u << 20, size - off)));
        }
        if (auto ec = st.read(name, off, piece)) {
            why = fmt::format("reading object {} failed: {}", name, failure(st, name, ec));
            what = {name, "readable", fmt::format("read at {}: {}", off, failure(st, name, ec)),
                    problem::unreadable};
            return ec;
        }
        c = crc32c(piece, c);
        if (each && !each(piece, off, why, what)) {
            what.object = name;
            what.kind = problem::content;
            return make_error_code(errc::corrupt);
        }
        off += piece.size();
    }
    crc = c;
    return {};
}

std::error_code checked(backend& st, const std::string& name, std::uint64_t size,
                        std::uint32_t crc, std::span<std::byte> dest, const block_check& each,
                        std::string& why, damage& what)
{
    std::uint64_t actual = 0;
    if (auto ec = st.size(name, actual)) {
        why = ec == errc::not_found ? fmt::format("object {} is missing", name)
                                    : fmt::format("object {}: {}", name, failure(st, name, ec));
        what = {name, fmt::format("{} bytes", size),
                ec == errc::not_found ? "missing" : failure(st, name, ec),
                ec == errc::not_found ? problem::missing : problem::unreadable};
        return ec == errc::not_found || ec == errc::unsafe_path ? make_error_code(errc::corrupt)
                                                                : ec;
    }
    if (actual != size) {
        why = fmt::format("object {} holds {} bytes, its manifest says {}", name, actual, size);
        what = {name, fmt::format("{} bytes", size), fmt::format("{} bytes", actual), problem::size};
        return make_error_code(errc::corrupt);
    }
    std::uint32_t got = 0;
    if (auto ec = read_crc(st, name, size, dest, each, got, why, what))
        return ec;
    if (got != crc) {
        why = fmt::format("object {} fails its checksum: crc32c {:08x}, the manifest says {:08x}",
                          name, got, crc);
        what = {name, fmt::format("crc32c {:08x}", crc), fmt::format("crc32c {:08x}", got),
                problem::checksum};
        return make_error_code(errc::corrupt);
    }
    return {};
}

}  // namespace

std::error_code object_crc(backend& st, const std::string& name, std::uint64_t& size,
                           std::uint32_t& crc, std::string& why)
{
    std::uint64_t n = 0;
    if (auto ec = st.size(name, n)) {
        why = fmt::format("object {}: {}", name, failure(st, name, ec));
        return ec;
    }
    damage what;
    std::uint32_t c = 0;
    if (auto ec = read_crc(st, name, n, {}, {}, c, why, what))
        return ec;
    size = n;
    crc = c;
    return {};
}

std::error_code read_checked(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why)
{
    if (out.size() < size) {
        why = fmt::format("object {} holds {} bytes, more than the {} byte buffer", name, size,
                          out.size());
        return make_error_code(errc::too_large);
    }
    if (size == 0)
        return {};
    damage what;
    return checked(st, name, size, crc, out.first(static_cast<std::size_t>(size)), {}, why, what);
}

std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::string& why)
{
    damage what;
    return checked(st, name, size, crc, {}, {}, why, what);
}

std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, const block_check& each, std::string& why,
                             damage& what)
{
    return checked(st, name, size, crc, {}, each, why, what);
}

std::error_code latest(backend& st, const std::string& job, bool verify, std::uint64_t& out,
                       std::string& skipped, std::string& why)
{
    std::vector<std::uint64_t> versions;
    if (auto ec = complete_versions(st, job, versions)) {
        why = fmt::format("job {} has no checkpoints in {} ({})", job, st.describe(), ec.message());
        return ec == errc::not_found ? make_error_code(errc::not_found) : ec;
    }
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        version_info info;
        std::string reason;
        auto ec = load_version(st, job, *it, info, reason);
        if (!ec && verify) {
            for (const auto& m : info.manifests) {
                for (const auto& e : m.entries) {
                    ec = check_object(st, data_object(job, *it, m.node, e.rank), e.size,
                                      e.crc32c, reason);
                    if (ec)
                        break;
                }
                if (ec)
                    break;
            }
        }
        if (!ec) {
            out = *it;
            return {};
        }
        if (!verify)
            continue;  // a damaged record: fall back without reading objects
        skipped += fmt::format("{}version {}: {}", skipped.empty() ? "" : "; ", *it, reason);
    }
    why = versions.empty() ? fmt::format("job {} has no complete version in {}", job, st.describe())
                           : fmt::format("no complete version of job {} in {} verifies: {}", job,
                                         st.describe(), skipped);
    return make_error_code(errc::not_found);
}

std::error_code try_complete(backend& st, const manifest& m, std::uint32_t manifest_crc,
                             std::uint32_t nodes, bool& completed, std::string& why)
{
    completed = false;
    const auto tally = arrivals_object(m.job, m.version);
    // What the COMPLETE record says of the node, brought along: the last
    // node to arrive writes the record without reading any manifest.
    const std::string note = fmt::format("{}+{:08x}", m.ranks, manifest_crc);
    std::uint64_t count = 0;
    if (auto ec = st.arrive(tally, m.node, note, count)) {
        why = fmt::format("counting node {} in at {}: {}", m.node, tally, failure(st, tally, ec));
        return ec;
    }
    if (count < nodes)
        return {};  // a node still to come completes the version
    // Perhaps the last (a count includes retried arrivals): who arrived.
    std::vector<backend::arrival> arrived;
    if (auto ec = st.arrivals(tally, arrived)) {
        why = fmt::format("reading {}: {}", tally,
                          ec == errc::corrupt ? "a record that is not a node's arrival, or a node "
                                                "that arrived twice with different manifests"
                                              : failure(st, tally, ec));
        return ec;
    }
    if (arrived.size() < nodes)
        return {};
    if (arrived.size() > nodes) {
        std::vector<std::string> names;
        for (const auto& a : arrived)
            names.push_back(a.member);
        why = fmt::format("version {} of job {} has {} nodes' manifests ({}) but the job has {} "
                          "nodes: two jobs under one name, or nodes that disagree on IOFWD_NODES",
                          m.version, m.job, arrived.size(), fmt::join(names, ", "), nodes);
        return make_error_code(errc::rank_mismatch);
    }
    complete_record rec{m.job, m.version, {}};
    for (const auto& a : arrived) {
        unsigned long ranks = 0;
        unsigned crc = 0;
        char end = 0;
        if (std::sscanf(a.note.c_str(), "%lu+%8x%c", &ranks, &crc, &end) != 2 ||
            a.note != fmt::format("{}+{:08x}", ranks, crc) || ranks > UINT32_MAX) {
            why = fmt::format("{}: node {} arrived with '{}', not its ranks and manifest "
                              "checksum; leaving the version incomplete",
                              tally, a.member, a.note);
            return make_error_code(errc::corrupt);
        }
        rec.nodes.push_back({a.member, static_cast<std::uint32_t>(ranks), crc});
    }
    const auto text = format_complete(rec);
    const auto name = complete_object(m.job, m.version);
    if (auto ec = st.put(name, std::as_bytes(std::span(text)))) {
        why = fmt::format("writing {}: {}", name, ec.message());
        return ec;
    }
    completed = true;
    return {};
}

std::error_code prune(backend& st, const std::string& job, unsigned keep,
                      std::vector<std::uint64_t>& removed, const std::function<bool()>& pause,
                      std::uint64_t below)
{
    std::vector<std::uint64_t> doomed;
    if (auto ec = prune_plan(st, job, keep, doomed, below))
        return ec;
    for (const auto v : doomed) {
        if (!removed.empty() && pause && pause())
            return std::make_error_code(std::errc::operation_canceled);
        if (auto ec = remove_version(st, job, v))
            return ec;
        removed.push_back(v);
    }
    return {};
}

std::uint64_t complete_after(backend& st, const std::string& job, std::uint64_t version)
{
    std::vector<std::uint64_t> complete;
    if (complete_versions(st, job, complete))
        return 0;
    return static_cast<std::uint64_t>(
        complete.end() - std::upper_bound(complete.begin(), complete.end(), version));
}

std::error_code prune_plan(backend& st, const std::string& job, unsigned keep,
                           std::vector<std::uint64_t>& out, std::uint64_t below)
{
    out.clear();
    if (keep == 0)
        return {};
    std::vector<std::uint64_t> complete;
    if (auto ec = complete_versions(st, job, complete))
        return ec;
    if (complete.size() <= keep)
        return {};
    const std::uint64_t oldest_kept = std::min(complete[complete.size() - keep], below);
    std::vector<std::string> dirs;
    if (auto ec = st.list(job + "/", dirs))
        return ec;
    for (const auto& d : dirs)
        if (const auto v = parse_version_dir(d); v && *v < oldest_kept)
            out.push_back(*v);
    std::sort(out.begin(), out.end());
    return {};
}

std::error_code remove_version(backend& st, const std::string& job, std::uint64_t version)
{
    // COMPLETE goes first: a version half deleted is never taken as complete.
    const auto dir = version_dir(job, version);
    if (auto ec = st.remove(complete_object(job, version)); ec && ec != errc::not_found)
        return ec;
    if (auto ec = st.remove_arrivals(arrivals_object(job, version)))
        return ec;
    std::vector<std::string> names;
    if (auto ec = st.list(dir + "/", names); ec && ec != errc::not_found)
        return ec;
    // The objects need not be durable one by one: without its COMPLETE
    // record the version is incomplete, and what a crash brings back of it
    // goes when it is removed again. The directory's removal is durable:
    // two fsyncs per version, however many objects it holds.
    for (const auto& n : names)
        if (auto ec = st.remove_lazily(dir + "/" + n); ec && ec != errc::not_found)
            return ec;
    auto ec = st.remove(dir);
    if (ec == std::errc::directory_not_empty) {
        // A flush that died before its commit left a temporary in the
        // version. Looked for only then: on RADOS finding leftovers scans the
        // pool, and its "directories" are never in the way.
        std::vector<std::string> left;
        if (auto lec = st.leftovers(dir, left))
            return lec;
        for (const auto& n : left)
            if (auto rec = st.remove_leftover(n); rec && rec != errc::not_found)
                return rec;
        ec = st.remove(dir);
    }
    if (ec && ec != errc::not_found)
        return ec;
    return {};
}

namespace {

// The nodes whose manifest `version` holds, sorted.
std::vector<std::string> manifest_nodes(backend& st, const std::string& job, std::uint64_t version)
{
    std::vector<std::string> names, nodes;
    if (st.list(version_dir(job, version) + "/", names))
        return nodes;
    const std::string suffix = manifest_suffix;
    for (const auto& n : names)
        if (n.size() > suffix.size() && n.ends_with(suffix))
            nodes.push_back(n.substr(0, n.size() - suffix.size()));
    return nodes;
}

}  // namespace

std::error_code join_run(backend& st, const std::string& job, const std::string& run,
                         std::uint32_t nodes, const std::string& node, std::uint64_t next,
                         run_record& out, std::string& why)
{
    const std::string name = run_object(job, run);
    run_record rec{job, run, next, nodes};
    const std::string text = format_run(rec);
    bool created = false;
    if (auto ec = st.put_new(name, std::as_bytes(std::span(text))); !ec) {
        created = true;
    } else if (ec != errc::exists) {
        why = fmt::format("cannot create the record of run {} ({}): {}", run, name,
                          failure(st, name, ec));
        return ec;
    } else {
        std::string found;
        if (auto rec_ec = read_all(st, name, found)) {
            why = fmt::format("cannot read the record of run {} ({}): {}", run, name,
                              rec_ec.message());
            return rec_ec;
        }
        std::string bad;
        if (auto p = parse_run(found, rec, bad)) {
            why = fmt::format("{}: {}", name, bad);
            return p;
        }
    }
    if (rec.job != job || rec.run != run) {
        why = fmt::format("{} is the record of job {} run {}, not of job {} run {}", name, rec.job,
                          rec.run, job, run);
        return make_error_code(errc::corrupt);
    }
    if (rec.nodes != nodes) {
        why = fmt::format("run {} of job {} was started with {} nodes, this node says {} "
                          "(IOFWD_NODES, or the communicator given to io_init_comm)",
                          run, job, rec.nodes, nodes);
        return make_error_code(errc::rank_mismatch);
    }
    if (!created) {
        // A run name used by an earlier run: this node's objects are there
        // already. Two looks, not a listing of the version (which holds
        // every node's objects by the time late nodes start).
        for (const auto& name : {manifest_object(job, rec.first_version, node),
                                 data_object(job, rec.first_version, node, 0)}) {
            std::uint64_t size = 0;
            if (!st.size(name, size)) {
                why = fmt::format("run {} of job {} was already written by node {} ({}); each "
                                  "run needs a name of its own (IOFWD_RUN)",
                                  run, job, node, name);
                return make_error_code(errc::exists);
            }
        }
    }
    out = std::move(rec);
    return {};
}

std::error_code committed(backend& st, const std::string& job, std::uint64_t version, bool& yes)
{
    std::uint64_t size = 0;
    const auto ec = st.size(complete_object(job, version), size);
    if (ec && ec != errc::not_found)
        return ec;
    yes = !ec;
    return {};
}

std::error_code commit_state(backend& st, const std::string& job, std::uint64_t version,
                             bool& yes, std::string& why)
{
    if (auto ec = committed(st, job, version, yes); ec || yes)
        return ec;
    std::vector<std::uint64_t> complete;
    if (auto ec = complete_versions(st, job, complete); ec && ec != errc::not_found)
        return ec;
    if (!complete.empty() && complete.back() > version) {
        yes = true;
        return {};
    }
    yes = false;
    const auto nodes = manifest_nodes(st, job, version);
    why = nodes.empty() ? fmt::format("version {} has no node's manifest", version)
                        : fmt::format("version {} has the manifests of {} node{} ({})", version,
                                      nodes.size(), nodes.size() == 1 ? "" : "s",
                                      fmt::join(nodes, ", "));
    return {};
}

}  // namespace iofwd::store

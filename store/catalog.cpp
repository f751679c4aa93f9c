#include "store/catalog.hpp"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "store/pack.hpp"
#include "store/record_text.hpp"

namespace iofwd::store {

namespace {

// What a store that holds more nodes' parts than the job has most likely
// means, for every message that finds it.
constexpr std::string_view nodes_disagree =
    "two jobs under one name, or nodes that disagree on IOFWD_NODES";

}  // namespace

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

std::error_code check_format(backend& st, const std::string& job, std::string& why,
                             std::uint32_t* found)
{
    const auto name = format_object(job);
    std::uint64_t size = 0;
    std::string text;
    auto ec = st.size(name, size);
    if (ec == errc::not_found) {
        if (found)
            *found = 1;  // version directories only
        return {};
    }
    if (!ec && size > format_max_bytes) {
        why = fmt::format("{} is {} bytes, not the line \"{}N\" of a job's format; cannot "
                          "tell where job {} keeps its versions (an iofwd writes that one "
                          "line: restore it, or move the job aside)",
                          name, size, format_head, job);
        return make_error_code(errc::corrupt);
    }
    if (!ec) {
        text.resize(size);
        ec = st.read(name, 0, std::as_writable_bytes(std::span(text)));
    }
    if (ec) {
        why = fmt::format("cannot read {}: {}", name, failure(st, name, ec));
        return ec;
    }
    const auto n = parse_job_format(text);
    if (!n) {
        why = fmt::format("{} does not read as \"{}N\"; cannot tell where job {} keeps its "
                          "versions (an iofwd writes that one line: restore it, or move the job "
                          "aside)",
                          name, format_head, job);
        return make_error_code(errc::corrupt);
    }
    if (*n > job_format) {
        why = fmt::format("job {} is kept in store format {} ({}), newer than format {}, the "
                          "newest this iofwd reads: use the iofwd that wrote it, or a newer one",
                          job, *n, name, job_format);
        return make_error_code(errc::newer_format);
    }
    if (found)
        *found = *n;
    return {};
}

std::error_code mark_format(backend& st, const std::string& job, std::string& why)
{
    const auto name = format_object(job);
    const auto text = format_job_format(job_format);
    // Looked at first: a claim of a job marked already writes nothing.
    std::uint64_t size = 0;
    if (auto ec = st.size(name, size); ec == errc::not_found) {
        ec = st.put_new(name, std::as_bytes(std::span(text)));
        if (ec != errc::exists) {
            if (ec)
                why = fmt::format("cannot write {}: {}", name, failure(st, name, ec));
            return ec;
        }
    } else if (ec) {
        why = fmt::format("cannot look at {}: {}", name, failure(st, name, ec));
        return ec;
    }
    // Another node's, or an earlier run's: checked, and raised if it says
    // less. (A newer iofwd's raise between the look and the write would be
    // lowered: two iofwd versions in one job at once are not supported.)
    std::uint32_t there = 0;
    if (auto ec = check_format(st, job, why, &there))
        return ec;
    if (there >= job_format)
        return {};
    if (auto ec = st.put(name, std::as_bytes(std::span(text)))) {
        why = fmt::format("cannot write {}: {}", name, failure(st, name, ec));
        return ec;
    }
    return {};
}

namespace {

// The record of bucket `bucket` of `job` (its newest), read and checked;
// not_found when it has none.
// One of a bucket's records, the one up to version `last`, checked to be
// that record.
std::error_code read_bucket_record(backend& st, const std::string& job, std::uint64_t bucket,
                                   std::uint64_t last, bucket_record& out, std::string& why)
{
    const auto name = bucket_complete_object(job, bucket, last);
    std::string text, reason;
    bucket_record rec;
    if (auto ec = read_all(st, name, text)) {
        why = fmt::format("{}: {}", name, failure(st, name, ec));
        return ec;
    }
    if (auto ec = parse_bucket(text, rec, reason)) {
        why = fmt::format("{}: {}", name, reason);
        return ec;
    }
    if (rec.job != job || rec.bucket != bucket || rec.last != last) {
        why = fmt::format("{} is the record of job {} bucket {} up to version {}: it was "
                          "copied or moved, it is not that record",
                          name, rec.job, rec.bucket, rec.last);
        return make_error_code(errc::corrupt);
    }
    out = std::move(rec);
    return {};
}

// A bucket's marks among its names: the highest retirement mark (0: none)
// and the versions removed, each counted only as what retention or
// `iofwd rm` writes: an empty object the store takes as the user's own (a
// size() that succeeds). Another thing under such a name hides nothing.
bucket_marks read_marks(backend& st, const std::string& job, std::uint64_t bucket,
                        const std::vector<std::string>& names)
{
    bucket_marks marks;
    const auto empty = [&](const std::string& object) {
        std::uint64_t size = 1;
        return !st.size(object, size) && size == 0;
    };
    for (const auto& n : names) {
        if (const auto upto = parse_bucket_retired(n);
            upto && *upto > marks.retired && empty(bucket_retired_object(job, bucket, *upto)))
            marks.retired = *upto;
        if (const auto v = parse_bucket_removed(n);
            v && empty(bucket_removed_object(job, bucket, *v)))
            marks.removed.push_back(*v);
    }
    std::sort(marks.removed.begin(), marks.removed.end());
    return marks;
}

// Removes the packs among bucket `bucket`'s `names` whose every version
// `marks` hides (removed by `iofwd rm` or retired by retention): no reader
// takes any of their versions again, so their bytes need not wait for the
// whole bucket. After the marks are durable; `durably` as remove() (else
// remove_lazily(): a pack a crash brings back hides nothing). A pack that
// will not go is said in `freed.failed` and left: a later rm in the
// bucket, retention once it reaches the bucket, or the bucket's own
// removal tries again. `freed.kept` names the packs left that hold
// version `holding` (0: none) beside a version not hidden.
void drop_hidden_packs(backend& st, const std::string& job, std::uint64_t bucket,
                       const std::vector<std::string>& names, const bucket_marks& marks,
                       bool durably, packs_freed& freed, std::uint64_t holding = 0)
{
    const auto dir = bucket_dir(job, bucket) + "/";
    for (const auto& n : names) {
        const auto p = parse_pack_name(n);
        // A pack of this bucket, as a daemon names it (a name spanning more
        // would not be one, and its versions are not walked).
        if (!p || p->first < bucket || p->last - p->first >= bucket_max_versions)
            continue;
        bool hidden = true;
        for (std::uint64_t i = 0; hidden && i <= p->last - p->first; ++i)
            hidden = marks.hides(p->first + i);
        if (!hidden) {
            if (p->first <= holding && holding <= p->last)
                freed.kept.push_back(dir + n);
            continue;
        }
        std::uint64_t size = 0;
        if (st.size(dir + n, size))
            size = 0;
        const auto ec = durably ? st.remove(dir + n) : st.remove_lazily(dir + n);
        if (ec == errc::not_found)
            continue;
        if (ec) {
            if (freed.failed.empty())
                freed.failed =
                    fmt::format("pack {}, which held only versions removed, did not go: {}",
                                dir + n, failure(st, dir + n, ec));
            continue;
        }
        freed.packs.push_back(dir + n);
        freed.bytes += size;
    }
    std::sort(freed.packs.begin(), freed.packs.end());
    std::sort(freed.kept.begin(), freed.kept.end());
}

// Writes mark `name` (an empty object) durably. One there already (another
// writer's, or one a crash cut short before its directory was synced) is
// written again: what the mark allows goes only once it is durable.
std::error_code put_mark(backend& st, const std::string& name)
{
    auto ec = st.put_new(name, {});
    if (ec == errc::exists)
        ec = st.put(name, {});
    return ec;
}

// The last versions a bucket's records are named by, newest first; and
// its marks.
std::error_code bucket_records(backend& st, const std::string& job, std::uint64_t bucket,
                               std::vector<std::uint64_t>& out, bucket_marks& marks,
                               std::string& why)
{
    std::vector<std::string> names;
    if (auto ec = st.list(bucket_dir(job, bucket) + "/", names)) {
        why = fmt::format("listing {}: {}", bucket_dir(job, bucket), ec.message());
        return ec;
    }
    out.clear();
    for (const auto& n : names)
        if (const auto last = parse_bucket_complete(n))
            out.push_back(*last);
    std::sort(out.rbegin(), out.rend());
    marks = read_marks(st, job, bucket, names);
    return {};
}

std::error_code read_bucket(backend& st, const std::string& job, std::uint64_t bucket,
                            bucket_record& out, std::string& why)
{
    std::vector<std::uint64_t> records;
    bucket_marks marks;
    if (auto ec = bucket_records(st, job, bucket, records, marks, why))
        return ec;
    if (records.empty())
        return make_error_code(errc::not_found);
    // The newest record that reads whole. Each says less than the one after
    // it, and all of it true: a damaged newer one takes back only what it
    // added (and the newest one's damage is what `why` says;
    // damaged_bucket_records names every one).
    std::error_code first_ec;
    for (const auto last : records) {
        std::string reason;
        auto ec = read_bucket_record(st, job, bucket, last, out, reason);
        if (!ec) {
            out.retired = marks.retired;
            out.removed = std::move(marks.removed);
            return {};
        }
        if (!first_ec) {
            first_ec = ec == errc::not_found ? make_error_code(errc::corrupt) : ec;
            why = std::move(reason);
        }
    }
    return first_ec;
}

// The bucket whose record says `version` is complete: not_found when none
// does (the version is in no pack, or not complete yet).
std::error_code find_bucket(backend& st, const std::string& job, std::uint64_t version,
                            bucket_record& out, std::string& why)
{
    // A version found nowhere this iofwd looks may be where a newer format
    // keeps it.
    if (auto ec = check_format(st, job, why))
        return ec;
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all)) {
        why = fmt::format("listing the packs of job {}: {}", job, ec.message());
        return ec;
    }
    // Buckets are named by their first version and hold the versions below
    // the next one's (packed_versions clips a record that says more): the
    // last bucket at or below the version.
    const auto it = std::upper_bound(all.begin(), all.end(), version);
    if (it == all.begin())
        return make_error_code(errc::not_found);
    if (auto ec = read_bucket(st, job, *std::prev(it), out, why))
        return ec;
    if (!completes(out, version))
        return make_error_code(errc::not_found);
    return {};
}

}  // namespace

std::error_code buckets(backend& st, const std::string& job, std::vector<std::uint64_t>& out)
{
    std::vector<std::string> names;
    out.clear();
    if (auto ec = st.list(fmt::format("{}/{}/", job, packs_dir), names))
        return ec == errc::not_found ? std::error_code{} : ec;
    for (const auto& n : names)
        if (const auto b = parse_bucket_dir(n))
            out.push_back(*b);
    std::sort(out.begin(), out.end());
    return {};
}

std::error_code in_bucket(backend& st, const std::string& job, std::uint64_t version, bool& yes)
{
    bucket_record b;
    std::string why;
    const auto ec = find_bucket(st, job, version, b, why);
    yes = !ec;
    return ec == errc::not_found ? std::error_code{} : ec;
}

std::error_code highest_packed(backend& st, const std::string& job, std::uint64_t& out)
{
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all))
        return ec;
    std::uint64_t high = 0;
    for (const auto b : all) {
        std::vector<std::string> names;
        if (auto ec = st.list(bucket_dir(job, b) + "/", names); ec && ec != errc::not_found)
            return ec;
        high = std::max(high, b);
        for (const auto& n : names) {
            if (const auto last = parse_pack_last(n))
                high = std::max(high, *last);
            if (const auto last = parse_bucket_complete(n))
                high = std::max(high, *last);
        }
    }
    out = high;
    return {};
}

std::error_code packed_versions(backend& st, const std::string& job,
                                std::vector<std::uint64_t>& out)
{
    std::vector<std::uint64_t> all, found;
    if (auto ec = buckets(st, job, all))
        return ec;
    for (std::size_t i = 0; i < all.size(); ++i) {
        bucket_record rec;
        std::string why;
        if (auto ec = read_bucket(st, job, all[i], rec, why)) {
            if (ec == errc::not_found || ec == errc::corrupt)
                continue;  // not complete yet, or damaged: none of its versions
            return ec;     // cannot tell
        }
        // A bucket holds the versions below the next one's first, and no
        // more (find_bucket looks for a version there).
        const auto end = i + 1 < all.size() ? std::min(rec.last, all[i + 1] - 1) : rec.last;
        for (auto v = std::max(rec.first, rec.retired + 1); v <= end; ++v)
            if (completes(rec, v))
                found.push_back(v);
    }
    out = std::move(found);
    return {};
}

std::error_code with_packed_versions(backend& st, const std::string& job,
                                     const std::vector<std::string>& listing,
                                     std::vector<std::uint64_t>& versions)
{
    if (std::find(listing.begin(), listing.end(), format_name) != listing.end()) {
        std::string why;
        if (auto ec = check_format(st, job, why))
            return ec;
    }
    if (std::find(listing.begin(), listing.end(), packs_dir) != listing.end()) {
        std::vector<std::uint64_t> packed;
        if (auto ec = packed_versions(st, job, packed))
            return ec;
        versions.insert(versions.end(), packed.begin(), packed.end());
    }
    std::sort(versions.begin(), versions.end());
    versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
    return {};
}

namespace {

// complete_versions' two kinds apart, each ascending: versions with a
// COMPLETE record of their own (by its name), and those a bucket's record
// completes.
std::error_code complete_by_kind(backend& st, const std::string& job,
                                 std::vector<std::uint64_t>& own,
                                 std::vector<std::uint64_t>& packed)
{
    std::vector<std::string> dirs;
    if (auto ec = st.list(job + "/", dirs))
        return ec;
    std::vector<std::uint64_t> found, in_buckets;
    for (const auto& d : dirs) {
        const auto v = parse_version_dir(d);
        if (!v)
            continue;
        std::uint64_t size = 0;
        if (!st.size(complete_object(job, *v), size))
            found.push_back(*v);
    }
    std::sort(found.begin(), found.end());
    if (auto ec = with_packed_versions(st, job, dirs, in_buckets))
        return ec;
    own = std::move(found);
    packed = std::move(in_buckets);
    return {};
}

std::vector<std::uint64_t> merged(const std::vector<std::uint64_t>& a,
                                  const std::vector<std::uint64_t>& b)
{
    std::vector<std::uint64_t> out;
    std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
    return out;
}

}  // namespace

std::error_code complete_versions(backend& st, const std::string& job,
                                  std::vector<std::uint64_t>& out)
{
    std::vector<std::uint64_t> own, packed;
    if (auto ec = complete_by_kind(st, job, own, packed))
        return ec;
    out = merged(own, packed);
    return {};
}

std::error_code read_pack(backend& st, const std::string& name, pack_index& out,
                          std::uint32_t& index_crc, std::string& why)
{
    std::uint64_t size = 0, offset = 0, length = 0;
    if (auto ec = st.size(name, size)) {
        why = ec == errc::not_found ? std::string("missing") : failure(st, name, ec);
        return ec;
    }
    if (size < pack_trailer_size) {
        why = fmt::format("{} bytes, too short for a pack", size);
        return make_error_code(errc::corrupt);
    }
    std::byte trailer[pack_trailer_size] = {};
    if (auto ec = st.read(name, size - pack_trailer_size, trailer)) {
        why = fmt::format("reading its trailer: {}", failure(st, name, ec));
        return ec;
    }
    if (auto ec = parse_pack_trailer(trailer, size, offset, length, index_crc, why))
        return ec;
    std::string text(static_cast<std::size_t>(length), '\0');
    if (auto ec = st.read(name, offset, std::as_writable_bytes(std::span(text)))) {
        why = fmt::format("reading its index: {}", failure(st, name, ec));
        return ec;
    }
    return parse_pack_index(text, index_crc, offset, out, why);
}

std::error_code node_packs(backend& st, const std::string& job, std::uint64_t bucket,
                           const std::string& node, std::uint64_t first, std::uint64_t last,
                           std::vector<node_pack>& out, std::string& why, bucket_marks* marks)
{
    out.clear();
    std::vector<std::string> names;
    const auto dir = bucket_dir(job, bucket) + "/";
    if (auto ec = st.list(dir, names)) {
        why = fmt::format("listing {}: {}", dir, failure(st, dir, ec));
        return ec;
    }
    if (marks)
        *marks = read_marks(st, job, bucket, names);
    for (const auto& n : names)
        if (const auto p = parse_pack_name(n);
            p && p->node == node && p->first <= last && first <= p->last)
            out.push_back({dir + n, p->first, p->last});
    std::sort(out.begin(), out.end(),
              [](const node_pack& a, const node_pack& b) { return a.first < b.first; });
    return {};
}

std::error_code find_own_packed(backend& st, const std::string& job, std::uint64_t version,
                                const std::string& node, std::uint32_t rank, bytes_place& at,
                                std::uint64_t& size, std::uint32_t& crc, std::string& why)
{
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all)) {
        why = fmt::format("listing the packs of job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    const auto bucket = std::upper_bound(all.begin(), all.end(), version);
    if (bucket == all.begin())
        return make_error_code(errc::not_found);
    std::vector<node_pack> packs;
    bucket_marks marks;
    if (auto ec =
            node_packs(st, job, *std::prev(bucket), node, version, version, packs, why, &marks))
        return ec == errc::not_found ? make_error_code(errc::not_found) : ec;
    if (marks.hides(version))
        return make_error_code(errc::not_found);  // removed by retention or rm
    for (const auto& pack : packs) {
        pack_index index;
        std::uint32_t index_crc = 0;
        std::string found;
        if (auto ec = read_pack(st, pack.name, index, index_crc, found)) {
            why = fmt::format("pack {}: {}", pack.name, found);
            return ec;  // not_found: removed since the listing (retention)
        }
        if (index.job != job || index.node != node) {
            why = fmt::format("pack {} is of job {} node {}", pack.name, index.job, index.node);
            return make_error_code(errc::corrupt);
        }
        if (const auto* part = find_part(index, version, rank)) {
            at = {pack.name, part->offset + pack_part_header_size, true};
            size = part->size;
            crc = part->crc32c;
            return {};
        }
    }
    return make_error_code(errc::not_found);
}

namespace {

// The index of pack `name`, read_pack's, checked against the crc32c its
// bucket's record holds for it.
std::error_code read_pack_index(backend& st, const std::string& name, std::uint32_t expected_crc,
                                pack_index& out, std::string& why, damage& d)
{
    std::uint32_t crc = 0;
    std::string found;
    if (auto ec = read_pack(st, name, out, crc, found)) {
        why = fmt::format("pack {} listed as complete is unreadable: {}", name, found);
        d = {name, "a pack", std::move(found), problem::record};
        return make_error_code(errc::corrupt);
    }
    if (crc == expected_crc)
        return {};
    found = fmt::format("its index has crc32c {:08x}, its bucket's record says {:08x} (a pack "
                        "written again after the record?)",
                        crc, expected_crc);
    why = fmt::format("pack {}: {}", name, found);
    d = {name, "a pack", std::move(found), problem::record};
    return make_error_code(errc::corrupt);
}

// Node `n`'s part of `version` in the version's directory, added to `info`:
// its manifest, checked against the checksum and ranks that `rec_name` (a
// COMPLETE record, or a bucket's) holds for it, and its objects.
std::error_code add_own_part(backend& st, const std::string& job, std::uint64_t version,
                             const complete_node& n, const std::string& rec_name,
                             version_info& info, std::string& why, damage& d)
{
    std::string text;
    manifest m;
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
    std::vector<bytes_place> at;
    for (const auto& e : m.entries)
        at.push_back({data_object(job, version, m.node, e.rank)});
    info.manifests.push_back(std::move(m));
    info.places.push_back(std::move(at));
    return {};
}

// load()'s part for a version in a pack.
std::error_code load_packed(backend& st, const std::string& job, std::uint64_t version,
                            const std::string& only, version_info& out, std::string& why,
                            damage& d)
{
    bucket_record b;
    if (auto ec = find_bucket(st, job, version, b, why)) {
        if (ec != errc::not_found)
            d = {fmt::format("{}/{}", job, packs_dir), "a bucket's record", why, problem::record};
        return ec;
    }
    version_info info;
    info.record = {job, version, {}};
    for (const auto& p : b.parts)
        if (p.first <= version && version <= p.last)
            info.record.nodes.push_back({p.node, p.ranks, p.crc32c});
    for (const auto& n : info.record.nodes) {
        if (!only.empty() && n.node != only)
            continue;
        const auto* p = part_holding(b, n.node, version);
        if (p->manifest) {
            // The node's part of a large version, in the version's directory.
            const auto rec_name = bucket_complete_object(job, b.bucket, b.last);
            if (auto ec = add_own_part(st, job, version, n, rec_name, info, why, d))
                return ec;
            continue;
        }
        const auto name = pack_object(job, b.bucket, n.node, p->first, p->last);
        pack_index index;
        if (auto ec = read_pack_index(st, name, n.manifest_crc32c, index, why, d))
            return ec;
        manifest m{job, n.node, version, n.ranks, {}};
        std::vector<bytes_place> at;
        for (const auto& part : index.parts) {
            if (part.version != version)
                continue;
            m.entries.push_back({part.rank, part.size, part.crc32c});
            at.push_back({name, part.offset + pack_part_header_size, true});
        }
        // The index's order rule gives a version present all its ranks.
        if (index.job != job || index.node != n.node || m.entries.empty() ||
            m.entries.front().rank != 0 || m.entries.size() != n.ranks) {
            why = fmt::format("pack {} is of job {} node {} and holds {} ranks of version {}; "
                              "its bucket's record says job {} node {}, {} ranks",
                              name, index.job, index.node, m.entries.size(), version, job, n.node,
                              n.ranks);
            d = {name, fmt::format("job {} node {}, {} ranks of version {}", job, n.node, n.ranks,
                                   version),
                 fmt::format("job {} node {}, {} ranks", index.job, index.node, m.entries.size()),
                 problem::record};
            return make_error_code(errc::corrupt);
        }
        info.manifests.push_back(std::move(m));
        info.places.push_back(std::move(at));
    }
    out = std::move(info);
    return {};
}

// The version's own COMPLETE record, read and checked to be this job's and
// version's (errc::not_found: it has none).
std::error_code read_complete(backend& st, const std::string& job, std::uint64_t version,
                              complete_record& out, std::string& why, damage& d)
{
    std::string text;
    const auto rec_name = complete_object(job, version);
    if (auto ec = read_all(st, rec_name, text)) {
        why = fmt::format("version {} of job {} is not complete ({}: {})", version, job, rec_name,
                          failure(st, rec_name, ec));
        d = {rec_name, "a COMPLETE record", failure(st, rec_name, ec), problem::record};
        return ec;
    }
    complete_record rec;
    if (auto ec = parse_complete(text, rec, why)) {
        d = {rec_name, "a COMPLETE record", why, problem::record};
        why = fmt::format("{}: {}", rec_name, why);
        return ec;
    }
    // A record is only valid where it was written: a version directory
    // copied (or renamed) to another number is not that version.
    if (rec.job != job || rec.version != version) {
        why = fmt::format("{} is the record of job {} version {}, not of job {} version {}: the "
                          "directory was copied or moved, it is not that version",
                          rec_name, rec.job, rec.version, job, version);
        d = {rec_name, fmt::format("job {} version {}", job, version),
             fmt::format("job {} version {}", rec.job, rec.version), problem::record};
        return make_error_code(errc::corrupt);
    }
    out = std::move(rec);
    return {};
}

// load_version, of every node or (`only` not empty) of one.
std::error_code load(backend& st, const std::string& job, std::uint64_t version,
                     const std::string& only, version_info& out, std::string& why, damage* what)
{
    damage scratch;
    damage& d = what ? *what : scratch;
    version_info info;
    const auto rec_name = complete_object(job, version);
    if (auto ec = read_complete(st, job, version, info.record, why, d)) {
        if (ec == errc::not_found) {
            std::string packed_why;
            damage packed_d;
            const auto pec = load_packed(st, job, version, only, out, packed_why, packed_d);
            if (pec != errc::not_found) {
                why = std::move(packed_why);
                d = std::move(packed_d);
                return pec;
            }
        }
        return ec;
    }
    for (const auto& n : info.record.nodes) {
        if (!only.empty() && n.node != only)
            continue;
        if (auto ec = add_own_part(st, job, version, n, rec_name, info, why, d))
            return ec;
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

// How a message names the bytes at `at`.
std::string label(const bytes_place& at)
{
    return at.in_pack ? fmt::format("{} (the part at {})", at.object, at.offset) : at.object;
}

// Reads [0, size) of the bytes at `at` in pieces of at most 16 MiB into
// `dest` (or a scratch block when dest is empty), hands each to `each`, and
// returns the crc32c.
std::error_code read_crc(backend& st, const bytes_place& at, std::uint64_t size,
                         std::span<std::byte> dest, const block_check& each, std::uint32_t& crc,
                         std::string& why, damage& what)
{
    const std::string& name = at.object;
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
        if (auto ec = st.read(name, at.offset + off, piece)) {
            why = fmt::format("reading object {} failed: {}", label(at), failure(st, name, ec));
            what = {label(at), "readable", fmt::format("read at {}: {}", off, failure(st, name, ec)),
                    problem::unreadable};
            return ec;
        }
        c = crc32c(piece, c);
        if (each && !each(piece, off, why, what)) {
            what.object = label(at);
            what.kind = problem::content;
            return make_error_code(errc::corrupt);
        }
        off += piece.size();
    }
    crc = c;
    return {};
}

std::error_code checked(backend& st, const bytes_place& at, std::uint64_t size,
                        std::uint32_t crc, std::span<std::byte> dest, const block_check& each,
                        std::string& why, damage& what)
{
    const std::string name = label(at);
    std::uint64_t actual = 0;
    if (auto ec = st.size(at.object, actual)) {
        why = ec == errc::not_found ? fmt::format("object {} is missing", name)
                                    : fmt::format("object {}: {}", name, failure(st, at.object, ec));
        what = {name, fmt::format("{} bytes", size),
                ec == errc::not_found ? "missing" : failure(st, at.object, ec),
                ec == errc::not_found ? problem::missing : problem::unreadable};
        return ec == errc::not_found || ec == errc::unsafe_path ? make_error_code(errc::corrupt)
                                                                : ec;
    }
    if (at.in_pack ? at.offset > actual || size > actual - at.offset : actual != size) {
        why = at.in_pack ? fmt::format("pack {} holds {} bytes, its part of {} bytes at {} ends "
                                    "beyond",
                                    at.object, actual, size, at.offset)
                      : fmt::format("object {} holds {} bytes, its manifest says {}", name,
                                    actual, size);
        what = {name, fmt::format("{} bytes", at.in_pack ? at.offset + size : size),
                fmt::format("{} bytes", actual), problem::size};
        return make_error_code(errc::corrupt);
    }
    std::uint32_t got = 0;
    if (auto ec = read_crc(st, at, size, dest, each, got, why, what))
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
    if (auto ec = read_crc(st, bytes_place{name}, n, {}, {}, c, why, what))
        return ec;
    size = n;
    crc = c;
    return {};
}

std::error_code read_checked(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why,
                             damage& what)
{
    if (out.size() < size) {
        why = fmt::format("object {} holds {} bytes, more than the {} byte buffer", label(at),
                          size, out.size());
        return make_error_code(errc::too_large);
    }
    if (size == 0)
        return {};
    return checked(st, at, size, crc, out.first(static_cast<std::size_t>(size)), {}, why, what);
}

std::error_code read_checked(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why)
{
    damage what;
    return read_checked(st, at, size, crc, out, why, what);
}

std::error_code read_checked(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why)
{
    return read_checked(st, bytes_place{name}, size, crc, out, why);
}

std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::string& why)
{
    damage what;
    return checked(st, bytes_place{name}, size, crc, {}, {}, why, what);
}

std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, const block_check& each, std::string& why,
                             damage& what)
{
    return checked(st, bytes_place{name}, size, crc, {}, each, why, what);
}

std::error_code check_object(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, const block_check& each, std::string& why,
                             damage& what)
{
    return checked(st, at, size, crc, {}, each, why, what);
}

std::error_code latest(backend& st, const std::string& job, bool verify, std::uint64_t& out,
                       std::string& skipped, std::string& why)
{
    std::vector<std::uint64_t> versions;
    if (auto ec = complete_versions(st, job, versions)) {
        // The listing read the FORMAT when there; its words, when it is why.
        if (ec != errc::not_found)
            if (auto fec = check_format(st, job, why))
                return fec;
        why = ec == errc::not_found
                  ? fmt::format("job {} has no checkpoints in {} ({})", job, st.describe(),
                                ec.message())
                  : fmt::format("cannot list job {} in {}: {}", job, st.describe(),
                                failure(st, job, ec));
        return ec;
    }
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
        version_info info;
        std::string reason;
        auto ec = load_version(st, job, *it, info, reason);
        if (!ec && verify) {
            damage ignored;
            for (std::size_t i = 0; i < info.manifests.size() && !ec; ++i)
                for (std::size_t j = 0; j < info.manifests[i].entries.size() && !ec; ++j) {
                    const auto& e = info.manifests[i].entries[j];
                    ec = check_object(st, info.places[i][j], e.size, e.crc32c, {}, reason,
                                      ignored);
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

namespace {

// The versions an arrival holds, counted as the tally's keys.
struct key_range {
    std::uint64_t first = 0, last = 0;
};

// Counts `member` in at `tally` with `note` (and under `keys` when given);
// when the count (a key's: backend::arrive_keyed) reaches `nodes` (perhaps
// the last of them: a count includes retried arrivals), reads who arrived
// into `arrived`, else leaves it empty. `parts` names what a node that
// arrives twice brought, for the message.
std::error_code arrive_and_look(backend& st, const std::string& tally, const std::string& member,
                                const std::string& note, std::uint32_t nodes, const char* parts,
                                std::vector<backend::arrival>& arrived, std::string& why,
                                const key_range* keys = nullptr)
{
    arrived.clear();
    std::uint64_t count = 0;
    if (auto ec = keys ? st.arrive_keyed(tally, member, note, keys->first, keys->last, count)
                       : st.arrive(tally, member, note, count)) {
        why = fmt::format("counting {} in at {}: {}{}", member, tally, failure(st, tally, ec),
                          ec == std::errc::too_many_links
                              ? " (its files take no more links: the file system refuses hard "
                                "links, or the tally holds more arrivals than 1,024 files of "
                                "its limit)"
                              : "");
        return ec;
    }
    if (count < nodes)
        return {};  // a node still to come
    if (auto ec = st.arrivals(tally, arrived)) {
        why = fmt::format("reading {}: {}", tally,
                          ec == errc::corrupt
                              ? fmt::format("a record that is not a node's arrival, or a node "
                                            "that arrived twice with different {}",
                                            parts)
                              : failure(st, tally, ec));
        return ec;
    }
    return {};
}

}  // namespace

std::error_code try_complete(backend& st, const manifest& m, std::uint32_t manifest_crc,
                             std::uint32_t nodes, bool& completed, std::string& why)
{
    completed = false;
    const auto tally = arrivals_object(m.job, m.version);
    // What the COMPLETE record says of the node, brought along: the last
    // node to arrive writes the record without reading any manifest.
    const std::string note = fmt::format("{}+{:08x}", m.ranks, manifest_crc);
    std::vector<backend::arrival> arrived;
    if (auto ec = arrive_and_look(st, tally, m.node, note, nodes, "manifests", arrived, why))
        return ec;
    if (arrived.size() < nodes)
        return {};
    if (arrived.size() > nodes) {
        std::vector<std::string> names;
        for (const auto& a : arrived)
            names.push_back(a.member);
        why = fmt::format("version {} of job {} has {} nodes' manifests ({}) but the job has {} "
                          "nodes: {}",
                          m.version, m.job, arrived.size(), fmt::join(names, ", "), nodes,
                          nodes_disagree);
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

std::string bucket_member(const std::string& node, std::uint64_t first)
{
    return fmt::format("{}.{}", node, first);
}

namespace {

// What a node's arrival at a bucket's tally brings: its line of the
// record. Member bucket_member(); note "<ranks>+<first>+<count>+<index
// crc32c>" for a pack, "<ranks>+m<version>+<manifest crc32c>" for a
// manifest, "<ranks>+s<version>" for a skip (backend::max_note letters,
// digits and '+').
std::string bucket_member(const bucket_part& p)
{
    return store::bucket_member(p.node, p.first);
}

}  // namespace

std::string bucket_note(const bucket_part& p)
{
    return p.skip       ? fmt::format("{}+s{}", p.ranks, p.first)
           : p.manifest ? fmt::format("{}+m{}+{:08x}", p.ranks, p.first, p.crc32c)
                        : fmt::format("{}+{}+{}+{:08x}", p.ranks, p.first, p.last - p.first + 1,
                                      p.crc32c);
}

namespace {

// The line an arrival brought; false for one that bucket_member and
// bucket_note did not write.
bool parse_bucket_arrival(const backend::arrival& a, bucket_part& out)
{
    const auto dot = a.member.rfind('.');
    if (dot == std::string::npos || dot == 0)
        return false;
    bucket_part p;
    p.node = a.member.substr(0, dot);
    std::vector<std::string_view> f;
    for (std::string_view rest = a.note;;) {
        const auto plus = rest.find('+');
        f.push_back(rest.substr(0, plus));
        if (plus == std::string_view::npos)
            break;
        rest.remove_prefix(plus + 1);
    }
    std::uint64_t count = 1;
    p.manifest = f.size() == 3 && !f[1].empty() && f[1][0] == 'm';
    p.skip = f.size() == 2 && !f[1].empty() && f[1][0] == 's';
    if (!(p.manifest || p.skip || f.size() == 4) || !text::number(f[0], p.ranks) ||
        !text::number(p.manifest || p.skip ? f[1].substr(1) : f[1], p.first) ||
        (f.size() == 4 && !text::number(f[2], count)) ||
        (!p.skip && !text::number(f.back(), p.crc32c, 16)) || count == 0 ||
        count > bucket_max_versions)
        return false;
    p.last = p.first + count - 1;
    if (bucket_member(p) != a.member || bucket_note(p) != a.note)
        return false;
    out = std::move(p);
    return true;
}

// Every node's parts among `arrived` (the tally `tally`'s arrivals).
std::error_code parse_arrivals(const std::string& tally,
                               const std::vector<backend::arrival>& arrived,
                               std::map<std::string, std::vector<bucket_part>>& parts,
                               std::string& why)
{
    for (const auto& a : arrived) {
        bucket_part p;
        if (!parse_bucket_arrival(a, p)) {
            why = fmt::format("{}: '{}' arrived with '{}', not a node's pack or manifest; "
                              "leaving the bucket incomplete",
                              tally, a.member, a.note);
            return make_error_code(errc::corrupt);
        }
        parts[p.node].push_back(std::move(p));
    }
    return {};
}

}  // namespace

namespace {

// The bucket's newest record, the one a node alone writes its next from
// (`found` false: the bucket has none yet); with `pack_nodes`, the nodes
// whose packs the bucket's listing shows. A record that does not read is an
// error, never passed over for an older one: the parts only it lists would
// look missing, and the bucket's later versions would complete without
// them, or never.
std::error_code newest_bucket_record(backend& st, const std::string& job, std::uint64_t bucket,
                                     bucket_record& out, bool& found, std::string& why,
                                     std::set<std::string>* pack_nodes = nullptr)
{
    found = false;
    std::vector<std::string> names;
    const auto dir = bucket_dir(job, bucket);
    if (auto ec = st.list(dir + "/", names)) {
        if (ec == errc::not_found)
            return {};
        why = fmt::format("cannot list {} to find bucket {}'s newest record: {}", dir, bucket,
                          failure(st, dir, ec));
        return ec;
    }
    std::uint64_t newest = 0;
    for (const auto& n : names) {
        if (const auto last = parse_bucket_complete(n))
            newest = std::max(newest, *last);
        else if (const auto p = parse_pack_name(n); p && pack_nodes)
            pack_nodes->insert(p->node);
    }
    if (newest == 0)
        return {};
    std::string reason;
    if (auto ec = read_bucket_record(st, job, bucket, newest, out, reason)) {
        // Not to be moved aside: the parts it lists are in the bucket's
        // packs, but only it says so (their journal records are settled).
        why = fmt::format("the newest record of bucket {} of job {} does not read ({}); the "
                          "bucket's later versions wait, kept in the node's journal, until it "
                          "is restored",
                          bucket, job, reason);
        return ec == errc::not_found ? make_error_code(errc::corrupt) : ec;
    }
    found = true;
    return {};
}

// Why `brought` cannot join bucket record `rec`, which holds `held` for the
// same node and first version: the same versions with other bytes.
std::error_code part_conflict(const bucket_record& rec, const bucket_part& brought,
                              const bucket_part& held, std::string& why)
{
    why = fmt::format("node {} brings '{}' for versions from {} to bucket {} of job {}, whose "
                      "record up to version {} says '{}': the same versions with other bytes; "
                      "the part stays in the node's journal (`iofwd ls {}` shows the bucket)",
                      brought.node, bucket_note(brought), brought.first, rec.bucket, rec.job,
                      rec.last, bucket_note(held), rec.job);
    return make_error_code(errc::corrupt);
}

// Adds to `parts` (a tally's, by node) each part of `rec` (the bucket's
// newest record) it lacks: what a node alone brought without arriving
// (try_complete_bucket). A part of the same node and first version that
// differs is an error.
std::error_code add_record_parts(const bucket_record& rec,
                                 std::map<std::string, std::vector<bucket_part>>& parts,
                                 std::string& why)
{
    for (const auto& p : rec.parts) {
        auto& list = parts[p.node];
        const auto same = std::find_if(list.begin(), list.end(),
                                       [&](const bucket_part& q) { return q.first == p.first; });
        if (same == list.end())
            list.push_back(p);
        else if (*same != p)
            return part_conflict(rec, *same, p, why);
    }
    return {};
}

}  // namespace

std::error_code bucket_arrivals(backend& st, const std::string& job, std::uint64_t bucket,
                                std::map<std::string, std::vector<bucket_part>>& out,
                                std::string& why)
{
    out.clear();
    const auto tally = bucket_arrivals_object(job, bucket);
    std::vector<backend::arrival> arrived;
    if (auto ec = st.arrivals(tally, arrived); ec && ec != errc::not_found) {
        why = fmt::format("cannot read {}: {}", tally, failure(st, tally, ec));
        return ec;
    }
    std::map<std::string, std::vector<bucket_part>> parts;
    if (auto ec = parse_arrivals(tally, arrived, parts, why))
        return ec;
    // A node alone arrives only after a gap: what came before is in the
    // newest record. (Several nodes' tallies hold every part, and one of
    // their buckets has a record only once every node has arrived: a tally
    // of one node's parts or none beside a record is a job of one node.)
    if (parts.size() <= 1) {
        bucket_record newest;
        bool found = false;
        if (auto ec = newest_bucket_record(st, job, bucket, newest, found, why))
            return ec;
        if (found && newest.nodes == 1)
            if (auto ec = add_record_parts(newest, parts, why))
                return ec;
    }
    for (auto& [node, list] : parts)
        std::sort(list.begin(), list.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
    out = std::move(parts);
    return {};
}

namespace {

// Writes `rec`, the bucket's record up to rec.last (one there already of
// that name is the same record), and gives its last as `complete`. Held to
// the rules a reader applies before it is written: a record no reader takes
// would hide every version the bucket's records had. `tally` names where
// the parts came from, for the message.
// With `same`, one there already must hold exactly this record (a node
// alone writes it from what it read, and another writer of the name would
// be another node that takes the job for its own).
std::error_code write_bucket_record(backend& st, const std::string& tally,
                                    const bucket_record& rec, std::uint64_t& complete,
                                    std::string& why, bool same = false)
{
    const auto text = format_bucket(rec);
    if (bucket_record check; auto ec = parse_bucket(text, check, why)) {
        why = fmt::format("{}: the arrivals make a record that would not be read ({}); leaving "
                          "the bucket as it is",
                          tally, why);
        return ec;
    }
    const auto name = bucket_complete_object(rec.job, rec.bucket, rec.last);
    if (auto ec = st.put_new(name, std::as_bytes(std::span(text))); ec == errc::exists && same) {
        std::string there;
        if (auto rec_ec = read_all(st, name, there)) {
            why = fmt::format("reading {}: {}", name, failure(st, name, rec_ec));
            return rec_ec;
        }
        if (there != text) {
            why = fmt::format("{} is there already and is not the record node {} made of the "
                              "same versions: {}",
                              name, rec.parts.back().node, nodes_disagree);
            return make_error_code(errc::rank_mismatch);
        }
    } else if (ec && ec != errc::exists) {
        why = fmt::format("writing {}: {}", name, failure(st, name, ec));
        return ec;
    }
    complete = rec.last;
    return {};
}

}  // namespace

std::error_code try_complete_bucket(backend& st, const std::string& job, std::uint64_t bucket,
                                    const bucket_part& part, std::uint32_t nodes,
                                    std::uint64_t& complete, std::string& why)
{
    complete = 0;
    const auto tally = bucket_arrivals_object(job, bucket);
    const auto member = bucket_member(part);
    if (bucket == 0 || part.first < bucket || part.last < part.first ||
        part.last - bucket >= bucket_max_versions ||
        ((part.manifest || part.skip) && part.last != part.first) ||
        (part.manifest && part.skip) ||
        part.ranks == 0 || nodes == 0 || member.size() > backend::max_member) {
        why = fmt::format("node {}'s part of versions {} to {} ({} ranks) cannot arrive at "
                          "bucket {} of {} nodes (a node name of at most {} bytes)",
                          part.node, part.first, part.last, part.ranks, bucket, nodes,
                          backend::max_member - 16);
        return make_error_code(errc::invalid_argument);
    }
    // A node alone has nobody to wait for: a part that follows its bucket's
    // newest record (or starts the bucket) is recorded at once with what
    // that record holds, without the tally (its arrival, the arrival's
    // fsync, a listing). Only a part after a gap arrives there, to wait for
    // the part that fills it; from then on the bucket goes through its tally,
    // and the newest record's parts count as arrived.
    bucket_record newest;
    bool have_newest = false;
    if (nodes == 1) {
        // Another node's pack there, or a record of others: a second node
        // that takes the job for its own (its pack is durable before it
        // looks, so of two such nodes the later to look sees the other's).
        std::set<std::string> others;
        if (auto ec = newest_bucket_record(st, job, bucket, newest, have_newest, why, &others))
            return ec;
        if (have_newest)
            for (const auto& p : newest.parts)
                others.insert(p.node);
        others.erase(part.node);
        if (!others.empty() || (have_newest && newest.nodes != 1)) {
            why = fmt::format("bucket {} of job {} holds the packs or parts of node{} {} besides "
                              "node {}, which takes the job for one of 1 node: {}",
                              bucket, job, others.size() == 1 ? "" : "s",
                              fmt::join(others, ", "), part.node, nodes_disagree);
            return make_error_code(errc::rank_mismatch);
        }
        if (have_newest) {
            const auto same =
                std::find_if(newest.parts.begin(), newest.parts.end(),
                             [&](const bucket_part& p) { return p.first == part.first; });
            if (same != newest.parts.end()) {
                if (*same != part)
                    return part_conflict(newest, part, *same, why);
                complete = newest.last;  // recorded before (a daemon that stopped since)
                return {};
            }
        }
        // Packs only: a manifest or a skip leaves nothing in the bucket's
        // directory by which another node would see this one. The tally is
        // looked at only for a part that could skip it (the arrival below
        // reads it anyway).
        if (!part.manifest && !part.skip &&
            part.first == (have_newest ? newest.last + 1 : bucket)) {
            std::vector<backend::arrival> waiting;
            if (auto ec = st.arrivals(tally, waiting); ec && ec != errc::not_found) {
                why = fmt::format("cannot read {}: {}", tally, failure(st, tally, ec));
                return ec;
            }
            if (waiting.empty()) {
                bucket_record rec{job, bucket, bucket, part.last, 1,
                                  have_newest ? newest.parts : std::vector<bucket_part>{}};
                rec.parts.push_back(part);
                return write_bucket_record(st, tally, rec, complete, why, true);
            }
        }
    }
    // Keyed by the versions it holds: whoever makes the count of one reach
    // `nodes` reads the tally, once per version or so, not every arrival
    // once `nodes` have come (with P parts a node, (nodes x P)^2 arrivals
    // read per bucket). A node alone reads it at every arrival: no key
    // would spare it a read.
    std::vector<backend::arrival> arrived;
    const key_range keys{part.first, part.last};
    if (auto ec = arrive_and_look(st, tally, member, bucket_note(part), nodes, "parts", arrived,
                                  why, nodes > 1 ? &keys : nullptr))
        return ec;
    std::map<std::string, std::vector<bucket_part>> parts;
    if (auto ec = parse_arrivals(tally, arrived, parts, why))
        return ec;
    if (have_newest)
        if (auto ec = add_record_parts(newest, parts, why))
            return ec;
    if (parts.size() < nodes)
        return {};
    if (parts.size() > nodes) {
        std::vector<std::string> names;
        for (const auto& [node, ignored] : parts)
            names.push_back(node);
        why = fmt::format("bucket {} of job {} has the parts of {} nodes ({}) but the job has {} "
                          "nodes: {}",
                          bucket, job, parts.size(), fmt::join(names, ", "), nodes,
                          nodes_disagree);
        return make_error_code(errc::rank_mismatch);
    }
    // How far every node's parts hold the versions from the bucket's first
    // on (arrivals come sorted by member, not by version).
    std::uint64_t last = UINT64_MAX;
    for (auto& [node, list] : parts) {
        std::sort(list.begin(), list.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        std::uint64_t covered = bucket - 1;
        for (const auto& p : list) {
            if (p.first < bucket || p.first <= covered || p.ranks != list.front().ranks) {
                why = fmt::format("{}: node {} brought versions {} to {} ({} ranks) over its "
                                  "other parts, or outside the bucket; leaving it incomplete",
                                  tally, node, p.first, p.last, p.ranks);
                return make_error_code(errc::corrupt);
            }
            if (p.first != covered + 1)
                break;  // a gap: a part still to come
            covered = p.last;
        }
        last = std::min(last, covered);
    }
    if (last < bucket)
        return {};
    // A record of this name is the same record (the tally only grows, so
    // whoever saw as far saw the same parts up to it): one look at its
    // size, not a listing of the bucket, which would cost every arrival
    // that looks the bucket's every pack (O(nodes x packs) names). One
    // that says less than a newer record is passed over by readers.
    if (std::uint64_t size = 0; !st.size(bucket_complete_object(job, bucket, last), size)) {
        complete = last;
        return {};
    }
    bucket_record rec{job, bucket, bucket, last, nodes, {}};
    for (const auto& [node, list] : parts)
        for (const auto& p : list)
            if (p.first <= last)
                rec.parts.push_back(p);
    return write_bucket_record(st, tally, rec, complete, why);
}

namespace {

// Removes an emptied directory of a version or bucket, with what crashed
// writers left in it when that is what keeps it (backend::leftovers).
std::error_code remove_dir(backend& st, const std::string& dir)
{
    auto ec = st.remove(dir);
    if (ec == std::errc::directory_not_empty) {
        // A flush that died before its commit left a temporary in it.
        // Looked for only then: on RADOS finding leftovers scans the pool,
        // and its "directories" are never in the way.
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

}  // namespace

std::error_code prune(backend& st, const std::string& job, unsigned keep,
                      std::vector<std::uint64_t>& removed, const std::function<bool()>& pause,
                      std::uint64_t below, prune_notes* notes)
{
    std::vector<std::uint64_t> doomed;
    std::vector<bucket_span> doomed_buckets;
    retirement retire;
    if (auto ec = prune_plan(st, job, keep, below, doomed, doomed_buckets, retire, notes))
        return ec;
    return prune_exactly(st, job, doomed, doomed_buckets, retire, removed, pause);
}

std::error_code prune_exactly(backend& st, const std::string& job,
                              const std::vector<std::uint64_t>& doomed,
                              const std::vector<bucket_span>& doomed_buckets,
                              const retirement& retire, std::vector<std::uint64_t>& removed,
                              const std::function<bool()>& pause)
{
    // Buckets first: the directories of the large versions they hold go
    // with them, and remove_version refuses those while a record holds
    // them. A bucket's versions in the plan are reported once its records
    // are gone (they are no longer complete), also when what follows fails.
    bool any = false;
    for (const auto& b : doomed_buckets) {
        if (any && pause && pause())
            return std::make_error_code(std::errc::operation_canceled);
        bool records_gone = false;
        auto ec = remove_bucket(st, job, b, records_gone);
        // Then every directory left in its span (a version of a run with
        // packs off, one never completed): nothing of the bucket holds them
        // now. Looked for with one listing, not a removal per version.
        std::vector<std::string> dirs;
        if (!ec)
            if (auto lec = st.list(job + "/", dirs); lec && lec != errc::not_found)
                ec = lec;
        for (const auto& d : dirs)
            if (const auto v = parse_version_dir(d);
                !ec && v && b.first <= *v && *v < b.end &&
                std::binary_search(doomed.begin(), doomed.end(), *v))
                ec = remove_version(st, job, *v);
        const auto first = std::lower_bound(doomed.begin(), doomed.end(), b.first);
        if (records_gone)
            for (auto it = first; it != doomed.end() && *it < b.end; ++it)
                removed.push_back(*it);
        if (ec)
            return ec;
        any = true;
    }
    // Then the versions of the bucket kept that are older than those kept:
    // its mark, durable, hides them at once; the bucket's older marks go
    // after it, not durably (one a crash brings back says less than this
    // one, and readers take the highest), and so does each pack that holds
    // only versions hidden now; a pack that also holds a version kept
    // stays until the bucket goes whole.
    // Retired versions without a directory: gone with the mark alone.
    const auto by_mark = [&](std::uint64_t v) {
        return retire.holds(v) && !std::binary_search(retire.dirs.begin(), retire.dirs.end(), v);
    };
    if (retire.bucket) {
        if (any && pause && pause())
            return std::make_error_code(std::errc::operation_canceled);
        // The directories below go only once the mark is durable.
        if (auto ec = put_mark(st, bucket_retired_object(job, retire.bucket, retire.upto)))
            return ec;
        // Gone from every listing now, also if what follows stops.
        for (const auto v : doomed)
            if (by_mark(v))
                removed.push_back(v);
        std::vector<std::string> names;
        if (auto ec = st.list(bucket_dir(job, retire.bucket) + "/", names))
            return ec;
        auto marks = read_marks(st, job, retire.bucket, names);
        marks.retired = std::max(marks.retired, retire.upto);
        for (const auto& n : names)
            if (const auto upto = parse_bucket_retired(n); upto && *upto < retire.upto)
                if (auto ec = st.remove_lazily(bucket_dir(job, retire.bucket) + "/" + n);
                    ec && ec != errc::not_found)
                    return ec;
        packs_freed freed;  // one that stays goes with the bucket
        drop_hidden_packs(st, job, retire.bucket, names, marks, false, freed);
        any = true;
    }
    for (const auto v : doomed) {
        if (std::any_of(doomed_buckets.begin(), doomed_buckets.end(),
                        [v](const auto& b) { return b.first <= v && v < b.end; }))
            continue;
        if (by_mark(v))
            continue;  // reported with the mark
        if (any && pause && pause())
            return std::make_error_code(std::errc::operation_canceled);
        if (auto ec = remove_version(st, job, v))
            return ec;
        any = true;
        removed.push_back(v);
    }
    std::sort(removed.begin(), removed.end());
    return {};
}

namespace {

// The newest `want` complete versions (complete_by_kind's `own` and
// `packed`) that a restart can take by their records, newest first: a
// version a bucket's record completes (read by complete_by_kind), or one
// whose own COMPLETE record reads as this job's and version's. One whose
// record is damaged or another version's is passed over, with why, into
// `notes` when given: it must not stand in for a version that could be
// taken. One whose record went since the listing (iofwd rm) is no longer
// complete. A read that fails otherwise is an error, its words in `notes`.
std::error_code newest_readable(backend& st, const std::string& job,
                                const std::vector<std::uint64_t>& own,
                                const std::vector<std::uint64_t>& packed, std::size_t want,
                                std::vector<std::uint64_t>& out, prune_notes* notes)
{
    const auto all = merged(own, packed);
    std::vector<std::uint64_t> found;
    for (auto it = all.rbegin(); it != all.rend() && found.size() < want; ++it) {
        if (!std::binary_search(own.begin(), own.end(), *it)) {
            found.push_back(*it);
            continue;
        }
        complete_record rec;
        std::string why;
        damage ignored;
        const auto ec = read_complete(st, job, *it, rec, why, ignored);
        if (ec == errc::corrupt) {
            if (notes)
                notes->passed_over.emplace_back(*it, std::move(why));
            continue;
        }
        if (ec == errc::not_found && !std::binary_search(packed.begin(), packed.end(), *it))
            continue;
        if (ec && ec != errc::not_found) {
            if (notes) {
                const auto name = complete_object(job, *it);
                notes->why = fmt::format("cannot read {} to count version {} among those kept: {}",
                                         name, *it, failure(st, name, ec));
            }
            return ec;
        }
        found.push_back(*it);
    }
    out = std::move(found);
    return {};
}

}  // namespace

std::uint64_t complete_after(backend& st, const std::string& job, std::uint64_t version)
{
    std::vector<std::uint64_t> own, packed, newer;
    if (complete_by_kind(st, job, own, packed))
        return 0;
    const auto after = [&](std::vector<std::uint64_t>& v) {
        v.erase(v.begin(), std::upper_bound(v.begin(), v.end(), version));
    };
    after(own);
    after(packed);
    if (newest_readable(st, job, own, packed, SIZE_MAX, newer, nullptr))
        return 0;
    return newer.size();
}

std::error_code prune_plan(backend& st, const std::string& job, unsigned keep,
                           std::uint64_t below, std::vector<std::uint64_t>& out,
                           std::vector<bucket_span>& doomed_buckets, retirement& retire,
                           prune_notes* notes)
{
    out.clear();
    doomed_buckets.clear();
    retire = {};
    if (keep == 0)
        return {};
    std::vector<std::uint64_t> own, packed;
    if (auto ec = complete_by_kind(st, job, own, packed))
        return ec;
    const auto complete = merged(own, packed);
    if (complete.size() <= keep)
        return {};
    // The newest `keep` versions a restart can take are kept. A version
    // passed over (its record damaged) is not removed either while it is
    // newer than the oldest kept.
    std::vector<std::uint64_t> kept;
    if (auto ec = newest_readable(st, job, own, packed, keep, kept, notes))
        return ec;
    // (A version 0 is none iofwd writes: nothing below it to remove.)
    if (kept.size() < keep || kept.back() == 0)
        return {};
    const std::uint64_t oldest_kept = std::min(kept.back(), below);
    std::vector<std::string> dirs;
    if (auto ec = st.list(job + "/", dirs))
        return ec;
    std::vector<std::uint64_t> all;
    if (std::find(dirs.begin(), dirs.end(), packs_dir) != dirs.end())
        if (auto ec = buckets(st, job, all))
            return ec;
    // A bucket goes whole, once every version it can hold (those below the
    // next bucket's first) is older than the oldest kept; the newest bucket
    // never, for more of its versions may come. Its versions go with it:
    // what its records say is complete, and the directories of its large
    // versions.
    std::uint64_t kept_from = UINT64_MAX;  // the first version of the first bucket kept
    for (std::size_t i = 0; i < all.size(); ++i) {
        if (i + 1 < all.size() && all[i + 1] - 1 < oldest_kept) {
            doomed_buckets.push_back({all[i], all[i + 1]});
            for (auto it = std::lower_bound(complete.begin(), complete.end(), all[i]);
                 it != complete.end() && *it < all[i + 1]; ++it)
                out.push_back(*it);
            continue;
        }
        kept_from = all[i];
        break;
    }
    // The first bucket kept: its versions older than the oldest kept are
    // retired by a mark (prune_exactly), so that no more than `keep` stay
    // listed; their packs go with the bucket. Only those its record has
    // settled (complete or skipped): one after the record's last may still
    // be written by a node.
    if (kept_from != UINT64_MAX) {
        bucket_record rec;
        std::string why;
        if (auto ec = read_bucket(st, job, kept_from, rec, why);
            ec && ec != errc::not_found && ec != errc::corrupt)
            return ec;
        else if (!ec) {
            const auto upto = std::min(oldest_kept - 1, rec.last);
            for (auto it = std::lower_bound(complete.begin(), complete.end(), kept_from);
                 it != complete.end() && *it <= upto; ++it)
                if (completes(rec, *it)) {
                    out.push_back(*it);
                    retire = {kept_from, upto, {}};
                }
        }
    }
    // From the first bucket kept on, a directory without a COMPLETE record
    // of its own may be a node's part of a large version the bucket holds:
    // it stays (gc removes it once nothing can complete it), unless
    // retired now.
    std::uint64_t size = 0;
    for (const auto& d : dirs)
        if (const auto v = parse_version_dir(d);
            v && *v < oldest_kept &&
            (*v < kept_from || retire.holds(*v) || !st.size(complete_object(job, *v), size))) {
            out.push_back(*v);
            if (retire.holds(*v))
                retire.dirs.push_back(*v);
        }
    std::sort(retire.dirs.begin(), retire.dirs.end());
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return {};
}

std::error_code unfinished_buckets(backend& st, const std::string& job,
                                   std::vector<bucket_span>& out,
                                   std::vector<std::string>& unreadable)
{
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all))
        return ec;
    out.clear();
    unreadable.clear();
    for (std::size_t i = 0; i < all.size(); ++i) {
        bucket_record rec;
        std::string why;
        const auto ec = read_bucket(st, job, all[i], rec, why);
        if (ec == errc::not_found)
            out.push_back({all[i], i + 1 < all.size() ? all[i + 1] : UINT64_MAX});
        else if (ec)
            unreadable.push_back(why);
    }
    return {};
}

std::error_code damaged_bucket_records(backend& st, const std::string& job,
                                       std::vector<std::string>& out)
{
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all))
        return ec;
    out.clear();
    for (const auto bucket : all) {
        std::vector<std::uint64_t> records;
        bucket_marks marks;
        std::string why;
        if (auto ec = bucket_records(st, job, bucket, records, marks, why)) {
            if (ec == errc::not_found)
                continue;  // removed meanwhile
            return ec;
        }
        for (const auto last : records) {
            bucket_record rec;
            if (auto ec = read_bucket_record(st, job, bucket, last, rec, why);
                ec && ec != errc::not_found)
                out.push_back(std::move(why));
        }
    }
    return {};
}

std::error_code skipped_versions(backend& st, const std::string& job,
                                 std::vector<skipped_entry>& out)
{
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all))
        return ec;
    out.clear();
    for (const auto bucket : all) {
        bucket_record rec;
        std::string why;
        if (auto ec = read_bucket(st, job, bucket, rec, why)) {
            if (ec == errc::not_found || ec == errc::corrupt)
                continue;  // none complete yet, or damaged (damaged_bucket_records)
            return ec;
        }
        for (const auto& p : rec.parts)
            if (p.skip && p.first > rec.retired)
                out.push_back({p.first, p.node, bucket});
    }
    return {};
}

std::error_code remove_bucket(backend& st, const std::string& job, const bucket_span& bucket,
                              bool& records_gone)
{
    records_gone = false;
    const auto dir = bucket_dir(job, bucket.first);
    std::vector<std::string> names;
    if (auto ec = st.list(dir + "/", names))
        return ec == errc::not_found ? std::error_code{} : ec;
    // What its records say, read before they go: which versions have a
    // node's part in their own directory. A record that does not read
    // leaves those directories to a later prune or gc, as incomplete
    // versions.
    bucket_record rec;
    std::string ignored;
    const bool known = !read_bucket(st, job, bucket.first, rec, ignored);
    // The records first, each durably; then the tally at once, so that a
    // node arriving late finds no count to complete and writes no record
    // while the packs go.
    auto remove_records = [&](const std::vector<std::string>& in) -> std::error_code {
        for (const auto& n : in)
            if (parse_bucket_complete(n))
                if (auto ec = st.remove(dir + "/" + n); ec && ec != errc::not_found)
                    return ec;
        records_gone = true;
        return {};
    };
    if (auto ec = remove_records(names))
        return ec;
    if (auto ec = st.remove_arrivals(bucket_arrivals_object(job, bucket.first)))
        return ec;
    if (known) {
        std::vector<std::uint64_t> own;
        for (const auto& p : rec.parts)
            if (p.manifest && p.first < bucket.end)
                own.push_back(p.first);
        std::sort(own.begin(), own.end());
        own.erase(std::unique(own.begin(), own.end()), own.end());
        for (const auto v : own)
            if (auto ec = remove_version(st, job, v))
                return ec;
    }
    // Then the packs, which nothing takes as complete now, and the
    // directory; a record a node wrote meanwhile from its last count goes
    // too (its versions are older than every one kept).
    for (const auto& n : names)
        if (!parse_bucket_complete(n))
            if (auto ec = st.remove_lazily(dir + "/" + n); ec && ec != errc::not_found)
                return ec;
    if (auto ec = st.list(dir + "/", names); ec && ec != errc::not_found)
        return ec;
    if (auto ec = remove_records(names))
        return ec;
    return remove_dir(st, dir);
}

namespace {

// A version's COMPLETE record, arrivals, objects and directory.
std::error_code remove_version_dir(backend& st, const std::string& job, std::uint64_t version)
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
    return remove_dir(st, dir);
}

}  // namespace

std::error_code remove_version(backend& st, const std::string& job, std::uint64_t version)
{
    // A version a bucket holds goes by its mark (remove_packed_version) or
    // with its whole bucket (remove_bucket).
    bool packed = false;
    if (auto ec = in_bucket(st, job, version, packed))
        return ec;  // cannot tell: a version in a pack may have a directory too
    if (packed)
        return std::make_error_code(std::errc::operation_not_supported);
    return remove_version_dir(st, job, version);
}

std::error_code hidden_versions(backend& st, const std::string& job,
                                std::vector<std::uint64_t>& out)
{
    out.clear();
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all))
        return ec;
    for (const auto bucket : all) {
        std::vector<std::uint64_t> records;
        bucket_marks marks;
        std::string ignored;
        if (auto ec = bucket_records(st, job, bucket, records, marks, ignored)) {
            if (ec == errc::not_found)
                continue;  // removed meanwhile
            return ec;
        }
        out.insert(out.end(), marks.removed.begin(), marks.removed.end());
        // Retired: from the bucket's first version, within the span a
        // bucket can have (a mark beyond it is not one retention wrote).
        if (marks.retired >= bucket) {
            const auto last = std::min(marks.retired - bucket, bucket_max_versions - 1) + bucket;
            for (auto v = bucket;; ++v) {
                out.push_back(v);
                if (v == last)
                    break;
            }
        }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return {};
}

std::error_code remove_packed_version(backend& st, const std::string& job, std::uint64_t version,
                                      packs_freed& freed)
{
    bucket_record rec;
    std::string ignored;
    if (auto ec = find_bucket(st, job, version, rec, ignored))
        return ec;
    // The mark first, durable: from then on no reader takes the version,
    // so what follows may stop anywhere.
    if (auto ec = put_mark(st, bucket_removed_object(job, rec.bucket, version)))
        return ec;
    // A node's part too large for a pack has its own directory (the record
    // names its manifest): it goes now.
    const bool own_dir = std::any_of(rec.parts.begin(), rec.parts.end(), [&](const auto& p) {
        return p.manifest && p.first == version;
    });
    if (own_dir)
        if (auto ec = remove_version_dir(st, job, version))
            return ec;
    // Then each pack that now holds only versions removed or retired; one
    // that holds another version too keeps the version's bytes until that
    // one goes.
    std::vector<std::string> names;
    if (auto ec = st.list(bucket_dir(job, rec.bucket) + "/", names)) {
        freed.failed = fmt::format("its bucket's packs were not looked at: listing {}: {}",
                                   bucket_dir(job, rec.bucket),
                                   failure(st, bucket_dir(job, rec.bucket), ec));
        return {};
    }
    const auto marks = read_marks(st, job, rec.bucket, names);
    drop_hidden_packs(st, job, rec.bucket, names, marks, true, freed, version);
    return {};
}

namespace {

// The manifest of `version` that `node` wrote: `found` when it is there,
// reads and says so. A read that fails is an error; one that is not there,
// or does not parse, is not found.
std::error_code node_manifest(backend& st, const std::string& job, std::uint64_t version,
                              const std::string& node, manifest& m, bool& found)
{
    found = false;
    std::string text, reason;
    if (auto ec = read_all(st, manifest_object(job, version, node), text))
        return ec == errc::not_found ? std::error_code{} : ec;
    found = !parse_manifest(text, m, reason) && m.node == node && m.version == version;
    return {};
}

// The nodes whose manifest `version` holds, sorted (none when its directory
// is not there); the listing's error otherwise, with `nodes` empty.
std::error_code manifest_nodes(backend& st, const std::string& job, std::uint64_t version,
                               std::vector<std::string>& nodes)
{
    nodes.clear();
    std::vector<std::string> names;
    if (auto ec = st.list(version_dir(job, version) + "/", names))
        return ec == errc::not_found ? std::error_code{} : ec;
    const std::string suffix = manifest_suffix;
    for (const auto& n : names)
        if (n.size() > suffix.size() && n.ends_with(suffix))
            nodes.push_back(n.substr(0, n.size() - suffix.size()));
    return {};
}

// manifest_nodes, for what only words a diagnosis or may pass a version
// over: a listing that fails gives none.
std::vector<std::string> manifest_nodes(backend& st, const std::string& job, std::uint64_t version)
{
    std::vector<std::string> nodes;
    manifest_nodes(st, job, version, nodes);
    return nodes;
}

// "<node> in bucket <b>" for each node's pack that holds `version`; a
// bucket that does not list is left out (this only words a diagnosis).
std::vector<std::string> pack_holders(backend& st, const std::string& job, std::uint64_t version,
                                      std::set<std::uint64_t>& buckets_seen)
{
    std::vector<std::uint64_t> all;
    std::vector<std::string> out;
    if (buckets(st, job, all))
        return out;
    for (const auto b : all) {
        if (b > version)
            break;
        std::vector<std::string> names;
        if (st.list(bucket_dir(job, b) + "/", names))
            continue;
        for (const auto& n : names)
            if (const auto p = parse_pack_name(n); p && p->first <= version && version <= p->last) {
                out.push_back(fmt::format("{} in bucket {}", p->node, b));
                buckets_seen.insert(b);
            }
    }
    return out;
}

}  // namespace

std::vector<std::string> manifests_to_arrive(backend& st, const std::string& job,
                                             std::uint64_t version)
{
    std::vector<std::string> out;
    for (const auto& node : manifest_nodes(st, job, version)) {
        std::string reason;
        manifest m;
        bool found = false;
        if (node_manifest(st, job, version, node, m, found) || !found || m.bucket == 0)
            continue;
        std::map<std::string, std::vector<bucket_part>> parts;
        bucket_arrivals(st, job, m.bucket, parts, reason);  // unreadable: none arrived
        const auto own = parts.find(node);
        if (own == parts.end() ||
            std::none_of(own->second.begin(), own->second.end(),
                         [&](const bucket_part& p) { return p.first == version; }))
            out.push_back(node);
    }
    return out;
}

namespace {

// bucket_nodes once the bucket's newest record is read (`newest`, or null
// when it has none).
std::error_code bucket_nodes_after(backend& st, const std::string& job, std::uint64_t bucket,
                                   const bucket_record* newest,
                                   const std::map<std::string, std::vector<bucket_part>>& parts,
                                   std::uint32_t& nodes, std::string& why)
{
    nodes = 0;
    if (newest) {
        nodes = newest->nodes;
        return {};
    }
    bool found = false;
    for (const auto& [node, list] : parts)
        for (const auto& p : list) {
            if (!p.manifest)
                continue;
            manifest m;
            if (auto ec = node_manifest(st, job, p.first, node, m, found)) {
                const auto name = manifest_object(job, p.first, node);
                why = fmt::format("cannot read {}: {}", name, failure(st, name, ec));
                return ec;
            }
            if (found && m.bucket == bucket && m.nodes > 0) {
                nodes = m.nodes;
                return {};
            }
        }
    // Not a run's record: the newest named run at or before the bucket need
    // not be the one that numbered it (an unnamed run after it leaves none),
    // and a count too low would let a claim write a record of too few nodes.
    return {};
}

}  // namespace

std::error_code bucket_nodes(backend& st, const std::string& job, std::uint64_t bucket,
                             const std::map<std::string, std::vector<bucket_part>>& parts,
                             std::uint32_t& nodes, std::string& why)
{
    bucket_record newest;
    bool found = false;
    if (auto ec = newest_bucket_record(st, job, bucket, newest, found, why))
        return ec;
    return bucket_nodes_after(st, job, bucket, found ? &newest : nullptr, parts, nodes, why);
}

std::error_code bucket_waiting(backend& st, const std::string& job, std::uint64_t bucket,
                               bucket_wait& out, std::string& why,
                               const std::set<std::uint64_t>* going)
{
    out = {};
    out.bucket = bucket;
    std::vector<std::uint64_t> all;
    if (auto ec = buckets(st, job, all); ec && ec != errc::not_found) {
        why = fmt::format("cannot list the buckets of job {}: {}", job, failure(st, job, ec));
        return ec;
    }
    if (going)
        std::erase_if(all, [&](std::uint64_t b) { return b != bucket && going->count(b); });
    const auto at = std::find(all.end() - std::min(all.size(), gap_buckets_looked_at), all.end(),
                              bucket);
    if (at == all.end())
        return {};  // no claim looks at it for gaps
    // Its versions end where the next bucket begins, and at the most a
    // bucket holds (an arrival's numbers are the store's, not trusted).
    const std::uint64_t limit =
        std::min(at + 1 != all.end() ? *(at + 1) - 1 : UINT64_MAX,
                 bucket + bucket_max_versions - 1);
    std::map<std::string, std::vector<bucket_part>> parts;
    if (auto ec = bucket_arrivals(st, job, bucket, parts, why))
        return ec;
    if (parts.empty())
        return {};
    bucket_record newest;
    bool found = false;
    if (auto ec = newest_bucket_record(st, job, bucket, newest, found, why))
        return ec;
    const std::uint64_t done = found ? newest.last : bucket - 1;
    std::uint64_t top = 0;
    for (const auto& [node, list] : parts)
        for (const auto& p : list)
            top = std::max(top, std::min(p.last, limit));
    if (top <= done)
        return {};
    if (auto ec = bucket_nodes_after(st, job, bucket, found ? &newest : nullptr, parts,
                                     out.nodes, why))
        return ec;
    if (out.nodes == 0)
        return {};  // nothing says who else must bring them: no claim skips for them
    std::map<std::uint64_t, std::vector<std::string>> without;  // a gap, the nodes that lack it
    for (std::uint64_t v = done + 1; v <= top; ++v) {
        std::vector<std::string> lack;
        bool skipped = false;
        for (const auto& [node, list] : parts) {
            const auto p = std::find_if(list.begin(), list.end(), [&](const bucket_part& q) {
                return q.first <= v && v <= q.last;
            });
            if (p == list.end())
                lack.push_back(node);
            else
                skipped = skipped || p->skip;
        }
        if (parts.size() - lack.size() < out.nodes)
            without[v] = std::move(lack);
        else if (!skipped)
            out.whole.push_back(v);
    }
    // Only a gap below a whole version holds one up; a whole version has
    // every node's part, so every node is seen, and those that lack a gap
    // below it are named.
    std::set<std::string> lacking;
    for (const auto& [gap, nodes] : without)
        if (!out.whole.empty() && gap < out.whole.back()) {
            out.gaps.push_back(gap);
            lacking.insert(nodes.begin(), nodes.end());
        }
    out.lacking.assign(lacking.begin(), lacking.end());
    return {};
}

std::error_code version_waiting(backend& st, const std::string& job, std::uint64_t version,
                                bucket_wait& out, std::string& why,
                                const std::set<std::uint64_t>* going)
{
    out = {};
    std::vector<std::string> nodes;
    if (auto ec = manifest_nodes(st, job, version, nodes)) {
        const auto dir = version_dir(job, version);
        why = fmt::format("cannot list {}: {}", dir, failure(st, dir, ec));
        return ec;
    }
    for (const auto& node : nodes) {
        manifest m;
        bool found = false;
        if (auto ec = node_manifest(st, job, version, node, m, found)) {
            const auto name = manifest_object(job, version, node);
            why = fmt::format("cannot read {}: {}", name, failure(st, name, ec));
            return ec;
        }
        if (!found || m.bucket == 0)
            continue;
        if (auto ec = bucket_waiting(st, job, m.bucket, out, why, going))
            return ec;
        if (!std::binary_search(out.whole.begin(), out.whole.end(), version))
            out = {};
        return {};
    }
    return {};
}

std::string describe_wait(const bucket_wait& w, bool several)
{
    const std::string_view subject = several ? "they" : "it", verb_s = several ? "" : "s";
    if (w.gaps.empty())
        return fmt::format("{} arrived at bucket {} from every node, whose record the next "
                           "daemon of a node writes when the job runs there again",
                           subject, w.bucket);
    const auto gaps = fmt::format("version{} {}", w.gaps.size() == 1 ? "" : "s",
                                  fmt::join(w.gaps, ", "));
    const auto them = w.gaps.size() == 1 ? "it" : "them";
    const auto who = w.lacking.size() == 1
                         ? fmt::format("node {} lacks: the node's next daemon skips {}",
                                       w.lacking.front(), them)
                         : fmt::format("nodes {} lack: the nodes' next daemons skip {}",
                                       fmt::join(w.lacking, ", "), them);
    return fmt::format("{} wait{} in bucket {} for {}, which {} when the job runs there "
                       "again{}, and then {} complete{}",
                       subject, verb_s, w.bucket, gaps, who,
                       w.nodes > 1 ? " (in a run with a name, IOFWD_RUN)" : "", subject,
                       verb_s);
}

std::error_code join_run(backend& st, const std::string& job, const std::string& run,
                         std::uint32_t nodes, const std::string& node, std::uint64_t next,
                         std::uint32_t pack_versions, run_record& out, std::string& why)
{
    const std::string name = run_object(job, run);
    run_record rec{job, run, next, nodes, pack_versions};
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
        // every node's objects by the time late nodes start); or, in the
        // bucket that begins at the run's first version, its pack, a
        // record or a mark: its numbers used again would meet the old
        // run's packs, and any mark iofwd rm or retention left of them (a
        // record and a mark come only after every node of the run,
        // this one too, committed its part; rm and retention may have
        // removed the pack since).
        std::string found;
        for (const auto& name : {manifest_object(job, rec.first_version, node),
                                 data_object(job, rec.first_version, node, 0)})
            if (std::uint64_t size = 0; found.empty() && !st.size(name, size))
                found = name;
        std::vector<std::string> names;
        if (found.empty() && !st.list(bucket_dir(job, rec.first_version) + "/", names)) {
            const auto seen = std::find_if(names.begin(), names.end(), [&](const auto& n) {
                const auto p = parse_pack_name(n);
                return (p && p->node == node && p->first <= rec.first_version &&
                        rec.first_version <= p->last) ||
                       parse_bucket_complete(n) || parse_bucket_removed(n) ||
                       parse_bucket_retired(n);
            });
            if (seen != names.end())
                found = bucket_dir(job, rec.first_version) + "/" + *seen;
        }
        if (!found.empty()) {
            why = fmt::format("run {} of job {} was already written by node {} ({}); each "
                              "run needs a name of its own (IOFWD_RUN)",
                              run, job, node, found);
            return make_error_code(errc::exists);
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
    if (!yes) {
        bucket_record b;
        std::string why;
        const auto bec = find_bucket(st, job, version, b, why);
        yes = !bec;
        // A damaged bucket's record completes nothing, as complete_versions
        // says; a FORMAT that does not read is not a version not yet there.
        if (bec == errc::corrupt)
            if (auto fec = check_format(st, job, why))
                return fec;
        if (bec && bec != errc::not_found && bec != errc::corrupt)
            return bec;
    }
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
    std::set<std::uint64_t> in_buckets;
    const auto packs = pack_holders(st, job, version, in_buckets);
    // The nodes whose manifest names no bucket: they committed the version
    // without packs, which the nodes that pack never complete with.
    std::vector<std::string> unpacked;
    bool bucketed = !packs.empty();
    for (const auto& n : nodes) {
        std::string text, ignored;
        manifest m;
        if (read_all(st, manifest_object(job, version, n), text) ||
            parse_manifest(text, m, ignored))
            continue;  // this only words a diagnosis
        if (m.bucket)
            bucketed = true;
        else
            unpacked.push_back(n);
    }
    if (!packs.empty()) {
        why = fmt::format("version {} is in the packs of {} node{} ({})", version, packs.size(),
                          packs.size() == 1 ? "" : "s", fmt::join(packs, ", "));
        if (in_buckets.size() > 1)
            why += " and so in buckets that begin at different versions: the nodes' "
                   "IOFWD_PACK_VERSIONS differ, or they started the job at different versions, "
                   "and such a version never completes";
        if (!nodes.empty())
            why += fmt::format(", and in the manifests of {}", fmt::join(nodes, ", "));
    } else {
        why = nodes.empty() ? fmt::format("version {} has no node's manifest", version)
                            : fmt::format("version {} has the manifests of {} node{} ({})",
                                          version, nodes.size(), nodes.size() == 1 ? "" : "s",
                                          fmt::join(nodes, ", "));
    }
    if (bucketed && !unpacked.empty())
        why += fmt::format("; {} committed it without packs (IOFWD_PACK_VERSIONS=0 there) and "
                           "the other nodes in packs, so it never completes: set "
                           "IOFWD_PACK_VERSIONS alike on every node",
                           fmt::join(unpacked, ", "));
    return {};
}

}  // namespace iofwd::store

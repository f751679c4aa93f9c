#include "store/pack.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "rendezvous.hpp"
#include "store/byte_fields.hpp"
#include "store/journal.hpp"
#include "store/record_text.hpp"

namespace iofwd::store {
namespace {

using fields::get;
using fields::put;

constexpr std::uint32_t part_magic = 0x4b504f49;  // "IOPK"
constexpr char trailer_magic[8] = {'I', 'O', 'F', 'W', 'D', 'P', 'A', 'K'};
// The journal's bounds (store/journal.hpp): a pack holds what it held.
constexpr std::uint32_t max_ranks = journal_max_ranks;
constexpr std::uint64_t max_version = journal_max_version;

std::uint64_t align8(std::uint64_t n)
{
    return (n + 7) / 8 * 8;
}

// Header layout: magic, crc32c of [8, 40), version, size, rank, ranks, the
// bytes' crc32c, 4 zero bytes.
void encode_header(const pack_part& p, std::byte* h)
{
    std::memset(h, 0, pack_part_header_size);
    put(h, part_magic);
    put(h + 8, p.version);
    put(h + 16, p.size);
    put(h + 24, p.rank);
    put(h + 28, p.ranks);
    put(h + 32, p.crc32c);
    put(h + 4, crc32c(std::span(h + 8, pack_part_header_size - 8)));
}

std::error_code corrupt(std::string& why, std::string what)
{
    why = std::move(what);
    return make_error_code(errc::corrupt);
}

// The rule for the order of parts, the builder's and the parser's: each
// version's ranks 0 .. ranks-1 once, in order; versions ascending, each
// whole before the next. Says what is wrong with `p` after `prev` (none for
// the first part), or nothing.
std::string out_of_order(const pack_part* prev, const pack_part& p)
{
    if (p.version == 0 || p.version >= max_version)
        return fmt::format("version {}: versions are 1 to 2^48", p.version);
    if (p.ranks == 0 || p.ranks > max_ranks)
        return fmt::format("version {}: {} ranks (1 to {})", p.version, p.ranks, max_ranks);
    if (!prev || p.version != prev->version) {
        if (prev && p.version < prev->version)
            return fmt::format("version {} after version {}", p.version, prev->version);
        if (prev && prev->rank + 1 != prev->ranks)
            return fmt::format("version {} lacks ranks {} and up", prev->version, prev->rank + 1);
        if (p.rank != 0)
            return fmt::format("version {} starts with rank {}", p.version, p.rank);
        return {};
    }
    if (p.ranks != prev->ranks)
        return fmt::format("version {}: rank {} says {} ranks, rank {} said {}", p.version, p.rank,
                           p.ranks, prev->rank, prev->ranks);
    if (p.rank != prev->rank + 1)
        return fmt::format("version {}: rank {} after rank {}", p.version, p.rank, prev->rank);
    return {};
}

std::string unfinished(const pack_part& last)
{
    return last.rank + 1 == last.ranks
               ? std::string{}
               : fmt::format("version {} lacks ranks {} and up", last.version, last.rank + 1);
}

using text::canonical;

// A crc32c as format writes it: 8 lowercase hex digits.
bool canonical_crc(std::string_view s, std::uint32_t& out)
{
    for (const char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    return s.size() == 8 && text::number(s, out, 16);
}

}  // namespace

const pack_part* find_part(const pack_index& index, std::uint64_t version, std::uint32_t rank)
{
    const auto at = std::lower_bound(index.parts.begin(), index.parts.end(),
                                     std::pair{version, rank}, [](const pack_part& p, const auto& k) {
                                         return std::pair{p.version, p.rank} < k;
                                     });
    return at != index.parts.end() && at->version == version && at->rank == rank ? &*at
                                                                                  : nullptr;
}

std::string format_pack_index(const pack_index& index)
{
    std::string out = fmt::format("iofwd-pack 1\njob {}\nnode {}\nparts {}\n", index.job,
                                  index.node, index.parts.size());
    for (const auto& p : index.parts)
        out += fmt::format("part {} {} {} {} {} {:08x}\n", p.version, p.rank, p.ranks, p.offset,
                           p.size, p.crc32c);
    out += "end\n";
    return out;
}

std::error_code build_pack(const std::string& job, const std::string& node,
                           std::span<const pack_input> inputs, std::vector<std::byte>& out,
                           std::string& why)
{
    auto refuse = [&](std::string what) {
        why = std::move(what);
        return make_error_code(errc::invalid_argument);
    };
    if (!valid_name(job) || !valid_name(node))
        return refuse(fmt::format("job '{}' or node '{}' is not a valid name", job, node));
    if (inputs.empty() || inputs.size() > pack_max_parts)
        return refuse(fmt::format("{} parts: a pack holds 1 to {}", inputs.size(), pack_max_parts));
    pack_index index{job, node, {}};
    index.parts.reserve(inputs.size());
    std::uint64_t at = 0;
    for (const auto& in : inputs) {
        const pack_part p{in.version, in.rank, in.ranks, at, in.bytes.size(), crc32c(in.bytes)};
        if (auto wrong = out_of_order(index.parts.empty() ? nullptr : &index.parts.back(), p);
            !wrong.empty())
            return refuse(std::move(wrong));
        at = align8(at + pack_part_header_size + p.size);
        index.parts.push_back(p);
    }
    if (auto wrong = unfinished(index.parts.back()); !wrong.empty())
        return refuse(std::move(wrong));
    const std::string text = format_pack_index(index);
    out.assign(at + text.size() + pack_trailer_size, std::byte{0});
    for (std::size_t i = 0; i < index.parts.size(); ++i) {
        const auto& p = index.parts[i];
        encode_header(p, out.data() + p.offset);
        if (!inputs[i].bytes.empty())
            std::memcpy(out.data() + p.offset + pack_part_header_size, inputs[i].bytes.data(),
                        inputs[i].bytes.size());
    }
    std::memcpy(out.data() + at, text.data(), text.size());
    std::byte* t = out.data() + at + text.size();
    std::memcpy(t, trailer_magic, sizeof trailer_magic);
    put(t + 8, at);
    put(t + 16, static_cast<std::uint64_t>(text.size()));
    put(t + 24, crc32c(std::as_bytes(std::span(text.data(), text.size()))));
    put(t + 28, crc32c(std::span(t, 28)));
    return {};
}

std::error_code parse_pack_trailer(std::span<const std::byte> trailer, std::uint64_t object_size,
                                   std::uint64_t& index_offset, std::uint64_t& index_length,
                                   std::uint32_t& index_crc, std::string& why)
{
    if (trailer.size() != pack_trailer_size || object_size < pack_trailer_size)
        return corrupt(why, fmt::format("a pack of {} bytes has no trailer", object_size));
    const std::byte* t = trailer.data();
    if (std::memcmp(t, trailer_magic, sizeof trailer_magic) != 0)
        return corrupt(why, "no pack trailer at its end (torn, or not a pack)");
    if (crc32c(std::span(t, 28)) != get<std::uint32_t>(t + 28))
        return corrupt(why, "the pack's trailer does not match its crc32c");
    const auto offset = get<std::uint64_t>(t + 8), length = get<std::uint64_t>(t + 16);
    const std::uint64_t room = object_size - pack_trailer_size;
    if (offset > room || length != room - offset || offset % 8 != 0)
        return corrupt(why, fmt::format("the pack's index [{}, +{}) is not what lies between its "
                                        "parts and its trailer in {} bytes",
                                        offset, length, object_size));
    if (length > pack_max_index)
        return corrupt(why, fmt::format("the pack's index of {} bytes is longer than any pack's "
                                        "({} bytes)",
                                        length, pack_max_index));
    index_offset = offset;
    index_length = length;
    index_crc = get<std::uint32_t>(t + 24);
    return {};
}

std::error_code parse_pack_index(std::string_view index, std::uint32_t crc,
                                 std::uint64_t index_offset, pack_index& out, std::string& why)
{
    using text::field;
    using text::next_line;
    if (index.size() > pack_max_index || index_offset % 8 != 0)
        return corrupt(why, fmt::format("an index of {} bytes at {}: at most {} bytes, at an "
                                        "8-aligned offset",
                                        index.size(), index_offset, pack_max_index));
    if (crc32c(std::as_bytes(std::span(index.data(), index.size()))) != crc)
        return corrupt(why, "the pack's index does not match its crc32c");
    if (index.empty() || index.back() != '\n')
        return corrupt(why, "the pack's index does not end with a line break");
    pack_index x;
    std::string_view line, v;
    if (!next_line(index, line) || line != "iofwd-pack 1")
        return corrupt(why, "not an iofwd pack index (first line)");
    if (!next_line(index, line) || !field(line, "job", v) || !valid_name(std::string(v)))
        return corrupt(why, "missing or bad job line");
    x.job = v;
    if (!next_line(index, line) || !field(line, "node", v) || !valid_name(std::string(v)))
        return corrupt(why, "missing or bad node line");
    x.node = v;
    std::uint64_t count = 0;
    if (!next_line(index, line) || !field(line, "parts", v) || !canonical(v, count) ||
        count == 0 || count > pack_max_parts)
        return corrupt(why, fmt::format("missing or bad parts line (1 to {})", pack_max_parts));
    // Each line is at least "part 1 0 1 0 0 00000000\n": a count the text
    // cannot hold is refused before anything is sized by it.
    if (count > index.size() / 24)
        return corrupt(why, fmt::format("{} parts claimed in an index of {} bytes", count,
                                        index.size()));
    x.parts.reserve(count);
    std::uint64_t next_offset = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
        pack_part p;
        if (!next_line(index, line) || !field(line, "part", v))
            return corrupt(why, fmt::format("part line {} of {} missing", i + 1, count));
        std::string_view f[6];
        if (!text::words(v, f) || !canonical(f[0], p.version) || !canonical(f[1], p.rank) ||
            !canonical(f[2], p.ranks) || !canonical(f[3], p.offset) || !canonical(f[4], p.size) ||
            !canonical_crc(f[5], p.crc32c))
            return corrupt(why, fmt::format("part line {}: '{}'", i + 1, line));
        if (auto wrong = out_of_order(x.parts.empty() ? nullptr : &x.parts.back(), p);
            !wrong.empty())
            return corrupt(why, fmt::format("part line {}: {}", i + 1, wrong));
        // In the parts' region, in order, none over another: no length the
        // index claims reaches past where the index itself begins. (No sum
        // below wraps: each is bounded by index_offset first.)
        if (p.offset != next_offset || index_offset - p.offset < pack_part_header_size ||
            p.size > index_offset - p.offset - pack_part_header_size)
            return corrupt(why, fmt::format("part line {}: bytes [{}, +{}) are not where the "
                                            "parts before end, within the {} bytes of parts",
                                            i + 1, p.offset, p.size, index_offset));
        next_offset = align8(p.offset + pack_part_header_size + p.size);
        x.parts.push_back(p);
    }
    if (auto wrong = unfinished(x.parts.back()); !wrong.empty())
        return corrupt(why, std::move(wrong));
    if (next_offset != index_offset)
        return corrupt(why, fmt::format("the parts end at {}, the index begins at {}", next_offset,
                                        index_offset));
    if (!next_line(index, line) || line != "end" || !index.empty())
        return corrupt(why, "missing end line, or text after it");
    out = std::move(x);
    return {};
}

std::error_code check_pack_part(std::span<const std::byte> header, const pack_part& expected,
                                std::string& why)
{
    if (header.size() != pack_part_header_size)
        return corrupt(why, fmt::format("a part's header of {} bytes", header.size()));
    const std::byte* h = header.data();
    if (get<std::uint32_t>(h) != part_magic || get<std::uint32_t>(h + 36) != 0 ||
        crc32c(std::span(h + 8, pack_part_header_size - 8)) != get<std::uint32_t>(h + 4))
        return corrupt(why, fmt::format("no valid part header at {}", expected.offset));
    const pack_part found{get<std::uint64_t>(h + 8),  get<std::uint32_t>(h + 24),
                          get<std::uint32_t>(h + 28), expected.offset,
                          get<std::uint64_t>(h + 16), get<std::uint32_t>(h + 32)};
    if (found != expected)
        return corrupt(why, fmt::format("the part at {} is version {} rank {} of {}, {} bytes, "
                                        "crc32c {:08x}; the index says version {} rank {} of {}, "
                                        "{} bytes, crc32c {:08x}",
                                        expected.offset, found.version, found.rank, found.ranks,
                                        found.size, found.crc32c, expected.version, expected.rank,
                                        expected.ranks, expected.size, expected.crc32c));
    return {};
}

std::vector<manifest> pack_manifests(const pack_index& index)
{
    std::vector<manifest> out;
    for (const auto& p : index.parts) {
        if (out.empty() || out.back().version != p.version)
            out.push_back(manifest{index.job, index.node, p.version, p.ranks, {}});
        out.back().entries.push_back(manifest_entry{p.rank, p.size, p.crc32c});
    }
    return out;
}

std::string format_bucket(const bucket_record& b)
{
    const bool skips =
        std::any_of(b.parts.begin(), b.parts.end(), [](const auto& p) { return p.skip; });
    std::string out = fmt::format("iofwd-bucket {}\njob {}\nbucket {}\nversions {} {}\nnodes {}\n",
                                  skips ? 2 : 1, b.job, b.bucket, b.first, b.last, b.nodes);
    for (const auto& p : b.parts)
        out += p.skip       ? fmt::format("skip {} {} {}\n", p.node, p.ranks, p.first)
               : p.manifest ? fmt::format("manifest {} {} {} {:08x}\n", p.node, p.ranks, p.first,
                                          p.crc32c)
                            : fmt::format("pack {} {} {} {} {:08x}\n", p.node, p.ranks, p.first,
                                          p.last, p.crc32c);
    out += "end\n";
    return out;
}

std::error_code parse_bucket(std::string_view text, bucket_record& out, std::string& why)
{
    using text::field;
    using text::next_line;
    bucket_record b;
    std::string_view line, v;
    if (text.size() > bucket_max_record)
        return corrupt(why, fmt::format("a bucket record of {} bytes (at most {})", text.size(),
                                        bucket_max_record));
    if (text.empty() || text.back() != '\n')
        return corrupt(why, "the bucket record does not end with a line break (torn?)");
    if (!next_line(text, line) || (line != "iofwd-bucket 1" && line != "iofwd-bucket 2"))
        return corrupt(why, "not an iofwd bucket record (first line)");
    const bool skips = line == "iofwd-bucket 2";
    bool skip_seen = false;
    if (!next_line(text, line) || !field(line, "job", v) || !valid_name(std::string(v)))
        return corrupt(why, "missing or bad job line");
    b.job = v;
    if (!next_line(text, line) || !field(line, "bucket", v) || !canonical(v, b.bucket) ||
        b.bucket == 0 || b.bucket >= max_version)
        return corrupt(why, "missing or bad bucket line");
    std::string_view f[5];
    if (!next_line(text, line) || !field(line, "versions", v) || !text::words(v, std::span(f, 2)) ||
        !canonical(f[0], b.first) || !canonical(f[1], b.last) || b.first < b.bucket ||
        b.first > b.last || b.last >= max_version || b.last - b.bucket >= bucket_max_versions)
        return corrupt(why, fmt::format("missing or bad versions line (bucket {}: versions from "
                                        "it on, first to last, at most {})",
                                        b.bucket, bucket_max_versions));
    if (!next_line(text, line) || !field(line, "nodes", v) || !canonical(v, b.nodes) ||
        b.nodes == 0)
        return corrupt(why, "missing or bad nodes line");
    std::uint32_t nodes_seen = 0;
    std::uint64_t covered = 0;  // of the current node: first .. covered hold in its packs
    while (next_line(text, line) && line != "end") {
        bucket_part p;
        p.manifest = field(line, "manifest", v);
        p.skip = skips && !p.manifest && field(line, "skip", v);
        const int n = p.skip ? 3 : p.manifest ? 4 : 5;
        if (!(p.manifest || p.skip || field(line, "pack", v)) ||
            !text::words(v, std::span(f, n)) || !valid_name(std::string(f[0])) ||
            !canonical(f[1], p.ranks) || p.ranks == 0 || p.ranks > max_ranks ||
            !canonical(f[2], p.first) ||
            !canonical(f[p.skip ? 2 : n - 2], p.last) ||
            (!p.skip && !canonical_crc(f[n - 1], p.crc32c)) || p.first < b.bucket ||
            p.first > p.last || p.last >= max_version || p.last - b.bucket >= bucket_max_versions)
            return corrupt(why, fmt::format("bad pack, manifest or skip line '{}'", line));
        skip_seen = skip_seen || p.skip;
        p.node = f[0];
        const bucket_part* prev = b.parts.empty() ? nullptr : &b.parts.back();
        if (!prev || prev->node != p.node) {
            if (prev && (prev->node > p.node || covered < b.last))
                return corrupt(why, fmt::format("line '{}': after node {}, {}", line,
                                                prev->node,
                                                prev->node > p.node
                                                    ? "nodes are sorted"
                                                    : "whose packs and manifests do not "
                                                      "hold every version"));
            ++nodes_seen;
            covered = b.first - 1;
        } else if (p.first <= prev->last || p.ranks != prev->ranks) {
            return corrupt(why, fmt::format("line '{}': over node {}'s part of versions "
                                            "{} to {}, or another number of ranks",
                                            line, p.node, prev->first, prev->last));
        }
        // Versions first .. last are held when each node's packs, in order,
        // leave no gap among them.
        if (p.first <= covered + 1 && p.last > covered)
            covered = p.last;
        b.parts.push_back(std::move(p));
    }
    if (line != "end" || !text.empty())
        return corrupt(why, "missing end line, or text after it");
    if (skips && !skip_seen)
        return corrupt(why, "an iofwd-bucket 2 record without a skip line");
    if (!b.parts.empty() && covered < b.last)
        return corrupt(why, fmt::format("node {}'s packs and manifests do not hold every "
                                        "version {} to {}",
                                        b.parts.back().node, b.first, b.last));
    if (nodes_seen != b.nodes)
        return corrupt(why, fmt::format("the bucket's lines are of {} nodes, the record says {}",
                                        nodes_seen, b.nodes));
    out = std::move(b);
    return {};
}

const bucket_part* part_holding(const bucket_record& b, const std::string& node,
                                std::uint64_t version)
{
    for (const auto& p : b.parts)
        if (p.node == node && p.first <= version && version <= p.last)
            return p.skip ? nullptr : &p;
    return nullptr;
}

bool skipped(const bucket_record& b, std::uint64_t version)
{
    return std::any_of(b.parts.begin(), b.parts.end(),
                       [&](const auto& p) { return p.skip && p.first == version; });
}

bool completes(const bucket_record& b, std::uint64_t version)
{
    return b.first <= version && version <= b.last && version > b.retired &&
           !std::binary_search(b.removed.begin(), b.removed.end(), version) &&
           !skipped(b, version);
}

}  // namespace iofwd::store

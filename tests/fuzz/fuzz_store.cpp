// libFuzzer harness: the store's text records (layout.hpp) as a damaged or
// hostile store holds them. The input is an object's text; it goes through
// parse_manifest, parse_complete and parse_run (each recognises its own first
// line), parse_version_dir, and a pack's (pack.hpp) trailer and index: the
// input read as a whole pack, and as the index's offset (8 bytes, little
// endian) and an index whose crc32c matches (so that the fuzzer gets past the
// checksum to the parser), and a bucket's record (parse_bucket). For each
// it checks:
//  - a refusal is errc::corrupt, says why, and leaves the output alone;
//  - what parses is well-formed as the format describes it (a manifest has
//    one entry per rank, in rank order; a COMPLETE record at least one node;
//    a run a first version and nodes; no field holds a line break);
//  - format_* of the parsed value parses back to an equal value, so what a
//    daemon rewrites from a record it read means the same;
//  - a bucket's record that parses has each of its nodes' packs hold every
//    version it says is complete, once, within the bucket's span;
//  - a pack index that parses lays its parts out one after another inside
//    the parts' region, each version with all of its ranks once, so that no
//    read a reader makes from it passes the index.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "check.hpp"
#include "crc32c.hpp"
#include "errors.hpp"
#include "store/layout.hpp"
#include "store/pack.hpp"

using namespace iofwd;
using namespace iofwd::store;

namespace {

bool one_line(std::string_view s) { return s.find('\n') == std::string_view::npos; }

template <typename T>
using parser = std::error_code (*)(std::string_view, T&, std::string&);

// Parses `text` into a value that starts as `sentinel`; on success returns
// true and the value in `out`.
template <typename T>
bool parse_checked(parser<T> parse, const char* what, std::string_view text, const T& sentinel,
                   T& out)
{
    out = sentinel;
    std::string why;
    if (auto ec = parse(text, out, why)) {
        FUZZ_CHECK(ec == errc::corrupt, "{} refused with '{}'", what, ec.message());
        FUZZ_CHECK(!why.empty(), "{} refused without a reason", what);
        FUZZ_CHECK(out == sentinel, "a refused {} changed the output", what);
        return false;
    }
    return true;
}

template <typename T>
void round_trip(parser<T> parse, const char* what, const T& parsed, const std::string& text,
                const T& sentinel)
{
    T again;
    const bool ok = parse_checked(parse, what, text, sentinel, again);
    FUZZ_CHECK(ok, "{} as formatted does not parse:\n{}", what, text);
    FUZZ_CHECK(again == parsed, "{} parses to another value after formatting:\n{}", what, text);
}

void check_manifest(std::string_view text)
{
    const manifest sentinel{"sentinel-job", "sentinel-node", 7, 1, {{0, 1, 2}}};
    manifest m;
    if (!parse_checked<manifest>(parse_manifest, "manifest", text, sentinel, m))
        return;
    FUZZ_CHECK(one_line(m.job) && one_line(m.node), "a manifest field holds a line break");
    FUZZ_CHECK(m.ranks >= 1 && m.entries.size() == m.ranks, "a manifest of {} ranks, {} entries",
               m.ranks, m.entries.size());
    for (std::uint32_t i = 0; i < m.ranks; ++i)
        FUZZ_CHECK(m.entries[i].rank == i, "entry {} is rank {}", i, m.entries[i].rank);
    round_trip<manifest>(parse_manifest, "manifest", m, format_manifest(m), sentinel);
}

void check_complete(std::string_view text)
{
    const complete_record sentinel{"sentinel-job", 7, {{"sentinel-node", 1, 2}}};
    complete_record c;
    if (!parse_checked<complete_record>(parse_complete, "COMPLETE record", text, sentinel, c))
        return;
    FUZZ_CHECK(one_line(c.job) && !c.nodes.empty(), "a COMPLETE record with {} nodes",
               c.nodes.size());
    for (const auto& n : c.nodes)
        FUZZ_CHECK(!n.node.empty() && one_line(n.node), "a COMPLETE record's node '{}'", n.node);
    round_trip<complete_record>(parse_complete, "COMPLETE record", c, format_complete(c),
                                sentinel);
}

void check_run(std::string_view text)
{
    const run_record sentinel{"sentinel-job", "sentinel-run", 7, 3};
    run_record r;
    if (!parse_checked<run_record>(parse_run, "run record", text, sentinel, r))
        return;
    FUZZ_CHECK(one_line(r.job) && one_line(r.run) && r.first_version >= 1 && r.nodes >= 1,
               "a run record: first version {}, {} nodes", r.first_version, r.nodes);
    round_trip<run_record>(parse_run, "run record", r, format_run(r), sentinel);
}

void check_version_dir(std::string_view text)
{
    const auto v = parse_version_dir(text);
    if (!v)
        return;
    const std::string dir = version_dir("job", *v);
    const std::string_view name = std::string_view(dir).substr(4);  // past "job/"
    const auto again = parse_version_dir(name);
    FUZZ_CHECK(again && *again == *v, "version directory '{}' ({}) formats as '{}'", text, *v,
               name);
}

void check_bucket(std::string_view text)
{
    const bucket_record sentinel{"sentinel-job", 9, 9, 9, 1, {{"sentinel-node", 1, 9, 9, 0}}};
    bucket_record b;
    if (!parse_checked<bucket_record>(parse_bucket, "bucket record", text, sentinel, b))
        return;
    FUZZ_CHECK(b.bucket >= 1 && b.bucket <= b.first && b.first <= b.last &&
                   b.last - b.bucket < bucket_max_versions,
               "a bucket record of bucket {}, versions {} to {}", b.bucket, b.first, b.last);
    // An oracle of its own, not the parser's rule: every node named holds
    // every version first .. last in exactly one pack.
    std::vector<std::string> nodes;
    for (const auto& p : b.parts)
        if (std::find(nodes.begin(), nodes.end(), p.node) == nodes.end())
            nodes.push_back(p.node);
    FUZZ_CHECK(nodes.size() == b.nodes, "a bucket record of {} nodes names {}", b.nodes,
               nodes.size());
    for (const auto& n : nodes)
        for (auto v = b.first; v <= b.last; ++v) {
            unsigned holding = 0;
            bool skip = false;
            for (const auto& p : b.parts)
                if (p.node == n && p.first <= v && v <= p.last) {
                    ++holding;
                    skip = p.skip;
                }
            FUZZ_CHECK(holding == 1, "node {} holds version {} in {} packs", n, v, holding);
            // A skip holds nothing: the version is not complete.
            FUZZ_CHECK((part_holding(b, n, v) != nullptr) == !skip, "part_holding of {} {}", n,
                       v);
            FUZZ_CHECK(!skip || skipped(b, v), "skipped misses {}", v);
        }
    round_trip<bucket_record>(parse_bucket, "bucket record", b, format_bucket(b), sentinel);
}

void check_pack_index(std::string_view text, std::uint64_t index_offset)
{
    const pack_index sentinel{"sentinel-job", "sentinel-node", {{1, 0, 1, 0, 0, 0}}};
    pack_index x = sentinel;
    std::string why;
    const auto crc = crc32c(std::as_bytes(std::span(text.data(), text.size())));
    if (auto ec = parse_pack_index(text, crc, index_offset, x, why)) {
        FUZZ_CHECK(ec == errc::corrupt, "a pack index refused with '{}'", ec.message());
        FUZZ_CHECK(!why.empty() && x == sentinel, "a pack index refused without a reason, or "
                                                  "with its output changed");
        return;
    }
    FUZZ_CHECK(!x.parts.empty() && one_line(x.job) && one_line(x.node), "a pack of {} parts",
               x.parts.size());
    std::uint64_t next = 0;
    for (std::size_t i = 0; i < x.parts.size(); ++i) {
        const auto& p = x.parts[i];
        FUZZ_CHECK(p.offset == next && index_offset - p.offset >= pack_part_header_size &&
                       p.size <= index_offset - p.offset - pack_part_header_size,
                   "part {} at [{}, +{}) in {} bytes of parts after {}", i, p.offset, p.size,
                   index_offset, next);
        FUZZ_CHECK(p.version >= 1 && p.rank < p.ranks && p.ranks <= 65536 &&
                       (i == 0 || x.parts[i - 1].version < p.version
                            ? p.rank == 0
                            : x.parts[i - 1].version == p.version &&
                                  p.rank == x.parts[i - 1].rank + 1),
                   "part {}: version {} rank {} of {}", i, p.version, p.rank, p.ranks);
        next = (p.offset + pack_part_header_size + p.size + 7) / 8 * 8;
    }
    FUZZ_CHECK(next == index_offset, "the parts end at {}, the index begins at {}", next,
               index_offset);
    FUZZ_CHECK(x.parts.back().rank + 1 == x.parts.back().ranks, "a pack ends mid-version");
    // Written one way only: what parses formats back to the same text.
    FUZZ_CHECK(format_pack_index(x) == text, "a pack index that formats otherwise:\n{}", text);
}

void check_pack(std::span<const std::byte> object)
{
    std::uint64_t offset = 0, length = 0;
    std::uint32_t crc = 0;
    std::string why;
    const auto trailer = object.size() < pack_trailer_size ? std::span<const std::byte>{}
                                                           : object.last(pack_trailer_size);
    if (parse_pack_trailer(trailer, object.size(), offset, length, crc, why))
        return;
    FUZZ_CHECK(offset + length + pack_trailer_size == object.size(),
               "a pack trailer's index [{}, +{}) in {} bytes", offset, length, object.size());
    pack_index x;
    const std::string_view text(reinterpret_cast<const char*>(object.data() + offset), length);
    if (parse_pack_index(text, crc, offset, x, why))
        return;
    for (const auto& p : x.parts)
        (void)check_pack_part(object.subspan(p.offset, pack_part_header_size), p, why);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_manifest(text);
    check_complete(text);
    check_run(text);
    check_version_dir(text);
    check_bucket(text);
    if (size >= 8) {
        std::uint64_t index_offset = 0;
        std::memcpy(&index_offset, data, 8);
        check_pack_index(text.substr(8), index_offset);
    }
    check_pack(std::as_bytes(std::span(data, size)));
    return 0;
}

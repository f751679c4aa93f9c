#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "crc32c.hpp"
#include "errors.hpp"
#include "store/pack.hpp"

using namespace iofwd;
using namespace iofwd::store;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, unsigned seed)
{
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i)
        b[i] = static_cast<std::byte>((i * 131 + seed * 7) & 0xff);
    return b;
}

// Two versions of a node of 2 ranks (5001, 0, 4096 and 7 bytes: the second
// header 8-aligned after padding, the third after an empty part).
struct sample {
    std::vector<std::vector<std::byte>> data{bytes_of(5001, 1), {}, bytes_of(4096, 3),
                                             bytes_of(7, 4)};
    std::vector<pack_input> inputs{{11, 0, 2, data[0]}, {11, 1, 2, data[1]},
                                   {12, 0, 2, data[2]}, {12, 1, 2, data[3]}};
};

// Reads a pack back as a reader would: trailer, index, each part's header
// and bytes checked. Returns the error and `why`.
std::error_code read_back(const std::vector<std::byte>& pack, pack_index& index, std::string& why,
                          std::vector<std::vector<std::byte>>* parts = nullptr)
{
    std::uint64_t offset = 0, length = 0;
    std::uint32_t crc = 0;
    const auto trailer = pack.size() < pack_trailer_size
                             ? std::span<const std::byte>{}
                             : std::span<const std::byte>(pack).last(pack_trailer_size);
    if (auto ec = parse_pack_trailer(trailer, pack.size(), offset, length, crc, why))
        return ec;
    const std::string_view text(reinterpret_cast<const char*>(pack.data() + offset), length);
    if (auto ec = parse_pack_index(text, crc, offset, index, why))
        return ec;
    for (const auto& p : index.parts) {
        if (auto ec = check_pack_part(
                std::span(pack).subspan(p.offset, pack_part_header_size), p, why))
            return ec;
        const auto b = std::span(pack).subspan(p.offset + pack_part_header_size, p.size);
        if (crc32c(b) != p.crc32c) {
            why = "bytes";
            return make_error_code(errc::corrupt);
        }
        if (parts)
            parts->emplace_back(b.begin(), b.end());
    }
    return {};
}

}  // namespace

TEST_CASE("a pack holds each rank's bytes of each version, found through its index", "[pack]")
{
    sample s;
    std::vector<std::byte> pack;
    std::string why;
    REQUIRE_FALSE(build_pack("job", "node-1", s.inputs, pack, why));
    pack_index index;
    std::vector<std::vector<std::byte>> parts;
    REQUIRE_FALSE(read_back(pack, index, why, &parts));
    CHECK(index.job == "job");
    CHECK(index.node == "node-1");
    REQUIRE(index.parts.size() == 4);
    CHECK(parts == s.data);
    CHECK(index.parts[0] == pack_part{11, 0, 2, 0, 5001, crc32c(s.data[0])});
    CHECK(index.parts[1] == pack_part{11, 1, 2, 5048, 0, 0});  // 5041 rounded up
    CHECK(index.parts[2].offset == 5088);
    CHECK(index.parts[3].offset == 9224);
    CHECK(format_pack_index(index) ==
          std::string(reinterpret_cast<const char*>(pack.data()) + 9272,
                      pack.size() - 9272 - pack_trailer_size));
    // The manifests are those the one-object-per-rank layout writes.
    const auto ms = pack_manifests(index);
    REQUIRE(ms.size() == 2);
    CHECK(ms[0] == manifest{"job", "node-1", 11, 2,
                            {{0, 5001, crc32c(s.data[0])}, {1, 0, crc32c(s.data[1])}}});
    CHECK(ms[1].version == 12);
    CHECK(ms[1].entries.size() == 2);
    // A human can read the index with tail.
    const std::string text(reinterpret_cast<const char*>(pack.data()), pack.size());
    CHECK(text.find("iofwd-pack 1\njob job\nnode node-1\nparts 4\npart 11 0 2 0 5001 ") !=
          std::string::npos);
}

TEST_CASE("a pack is built only of whole versions, in order", "[pack]")
{
    sample s;
    std::vector<std::byte> pack;
    std::string why;
    auto refused = [&](std::vector<pack_input> in) {
        return build_pack("job", "node", in, pack, why) == errc::invalid_argument && !why.empty();
    };
    CHECK(refused({}));
    CHECK(refused({s.inputs[0]}));                                            // rank 1 missing
    CHECK(refused({s.inputs[1], s.inputs[0]}));                               // ranks out of order
    CHECK(refused({s.inputs[2], s.inputs[3], s.inputs[0], s.inputs[1]}));     // versions descend
    CHECK(refused({s.inputs[0], s.inputs[1], s.inputs[2]}));                  // version 12 half
    CHECK(refused({{11, 0, 1, s.data[0]}, {11, 0, 1, s.data[0]}}));           // a version twice
    CHECK(refused({{11, 0, 0, s.data[0]}}));                                  // no ranks
    CHECK(refused({{0, 0, 1, s.data[0]}}));                                   // version 0
    CHECK(refused({{1ull << 48, 0, 1, s.data[0]}}));                          // past the journal's
    for (const char* bad : {"", "no\nde", "a/b", "..", ".hidden", "sp ace"}) {
        CHECK(build_pack(bad, "node", s.inputs, pack, why) == errc::invalid_argument);
        CHECK(build_pack("job", bad, s.inputs, pack, why) == errc::invalid_argument);
    }
}

TEST_CASE("a torn or altered pack is refused in words, whatever it claims", "[pack]")
{
    sample s;
    std::vector<std::byte> good;
    std::string why;
    REQUIRE_FALSE(build_pack("job", "node", s.inputs, good, why));
    pack_index index;
    // Torn anywhere: no trailer at the end, or one whose index or parts do
    // not match.
    for (std::size_t cut = 0; cut < good.size(); ++cut) {
        INFO("cut to " << cut);
        const std::vector<std::byte> torn(good.begin(), good.begin() + static_cast<long>(cut));
        CHECK(read_back(torn, index, why) == errc::corrupt);
        CHECK_FALSE(why.empty());
    }
    // Any single byte flipped is found: by the trailer's, the index's or a
    // header's crc32c, or by the bytes' against the index. (Not the zeros
    // that align a header to 8 bytes: no reader reads them.)
    REQUIRE_FALSE(read_back(good, index, why));
    const auto padding = [&](std::size_t at) {
        for (const auto& p : index.parts) {
            const std::uint64_t end = p.offset + pack_part_header_size + p.size;
            if (at >= end && at < (end + 7) / 8 * 8)
                return true;
        }
        return false;
    };
    for (std::size_t at = 0; at < good.size(); ++at) {
        if (padding(at))
            continue;
        INFO("byte " << at);
        auto bad = good;
        bad[at] ^= std::byte{0x20};
        why.clear();
        CHECK(read_back(bad, index, why) == errc::corrupt);
        CHECK_FALSE(why.empty());
    }
    // Indexes with a matching crc32c that break one rule each, every other
    // rule kept (the parts end where the index begins): each refused by
    // its own rule, not by another.
    auto forged = [&](const std::string& parts_lines, std::uint64_t offset,
                      const std::string& count = "") {
        const auto n = std::count(parts_lines.begin(), parts_lines.end(), '\n');
        const std::string text = "iofwd-pack 1\njob j\nnode n\nparts " +
                                 (count.empty() ? std::to_string(n) : count) + "\n" +
                                 parts_lines + "end\n";
        why.clear();
        const auto crc = crc32c(std::as_bytes(std::span(text.data(), text.size())));
        return parse_pack_index(text, crc, offset, index, why) == errc::corrupt;
    };
    const std::string one = "part 1 0 1 0 1 00000000\n";  // its parts end at 48
    REQUIRE_FALSE(forged(one, 48));
    CHECK(index.parts == std::vector<pack_part>{{1, 0, 1, 0, 1, 0}});
    const struct {
        std::string lines;
        std::uint64_t offset;
        std::string count;
        std::string words;
    } cases[] = {
        {"part 1 0 1 0 18446744073709551615 00000000\n", 48, "", "not where the parts before end"},
        {"part 1 0 1 8 1 00000000\n", 56, "", "not where the parts before end"},
        {one, 48, "4194304", "missing or bad parts line"},
        {one, 48, "2", "2 parts claimed in an index of"},
        {one, 48, "01", "missing or bad parts line"},
        {"part 1 0 1 0 1 0000000\n", 48, "", "part line 1: 'part 1 0 1 0 1 0000000'"},
        {"part 1 0 1 0 1 0000000A\n", 48, "", "part line 1:"},
        {"part 1 0 1 0 01 00000000\n", 48, "", "part line 1:"},
        {"part 1 0 1 0 1 00000000 \n", 48, "", "part line 1:"},
        {"part 1 0 1 0 10000000000\n", 48, "", "part line 1:"},  // five fields
        {"part 0 0 1 0 1 00000000\n", 48, "", "versions are 1 to 2^48"},
        {"part 1 0 0 0 1 00000000\n", 48, "", "0 ranks"},
        {"part 1 0 65537 0 1 00000000\n", 48, "", "65537 ranks"},
        {"part 1 1 2 0 1 00000000\n", 48, "", "version 1 starts with rank 1"},
        {"part 1 0 2 0 1 00000000\npart 1 0 2 48 1 00000000\n", 96, "", "rank 0 after rank 0"},
        {"part 1 0 2 0 1 00000000\npart 1 1 3 48 1 00000000\n", 96, "", "says 3 ranks"},
        {"part 2 0 1 0 1 00000000\npart 1 0 1 48 1 00000000\n", 96, "", "version 1 after version 2"},
        {"part 1 0 2 0 1 00000000\npart 2 0 1 48 1 00000000\n", 96, "", "version 1 lacks ranks 1"},
        {"part 1 0 2 0 1 00000000\n", 48, "", "version 1 lacks ranks 1 and up"},
        {one, 56, "", "the parts end at 48, the index begins at 56"},
        {one, 52, "", "8-aligned"},
    };
    for (const auto& c : cases) {
        INFO(c.lines << " at " << c.offset << " count '" << c.count << "'");
        CHECK(forged(c.lines, c.offset, c.count));
        INFO(why);
        CHECK(why.find(c.words) != std::string::npos);
    }
    // Text the format never writes: after end, a missing last line break,
    // names that are not names.
    auto raw = [&](const std::string& text) {
        why.clear();
        const auto crc = crc32c(std::as_bytes(std::span(text.data(), text.size())));
        return parse_pack_index(text, crc, 48, index, why) == errc::corrupt;
    };
    const std::string head = "iofwd-pack 1\njob j\nnode n\nparts 1\n" + one;
    CHECK(raw(head + "end\nmore\n"));
    CHECK(raw(head + "end"));
    CHECK(raw("iofwd-pack 1\njob a/b\nnode n\nparts 1\n" + one + "end\n"));
    CHECK(raw("iofwd-pack 1\njob j\nnode ..\nparts 1\n" + one + "end\n"));
    CHECK_FALSE(raw(head + "end\n"));
    // The crc32c is checked first: the right text with another one.
    CHECK(parse_pack_index(head + "end\n", 1, 48, index, why) == errc::corrupt);
    CHECK(why == "the pack's index does not match its crc32c");
    // A trailer that claims a longer index than any pack has.
    std::vector<std::byte> huge(pack_trailer_size);
    std::memcpy(huge.data(), "IOFWDPAK", 8);
    const std::uint64_t big = pack_max_index + 8, zero = 0;
    std::memcpy(huge.data() + 8, &zero, 8);
    std::memcpy(huge.data() + 16, &big, 8);
    const std::uint32_t tcrc = crc32c(std::span(huge).first(28));
    std::memcpy(huge.data() + 28, &tcrc, 4);
    std::uint64_t o = 0, l = 0;
    std::uint32_t ic = 0;
    CHECK(parse_pack_trailer(huge, big + pack_trailer_size, o, l, ic, why) == errc::corrupt);
    CHECK(why.find("longer than any pack's") != std::string::npos);
    // A header that disagrees with its index line, field by field.
    REQUIRE_FALSE(read_back(good, index, why));
    const auto header = std::span<const std::byte>(good).first(pack_part_header_size);
    CHECK_FALSE(check_pack_part(header, index.parts[0], why));
    for (int field = 0; field < 5; ++field) {
        pack_part lie = index.parts[0];
        if (field == 0) lie.version = 12;
        if (field == 1) lie.rank = 1;
        if (field == 2) lie.ranks = 3;
        if (field == 3) lie.size = 5000;
        if (field == 4) lie.crc32c ^= 1;
        INFO("field " << field);
        CHECK(check_pack_part(header, lie, why) == errc::corrupt);
        CHECK(why.find("the part at 0 is version 11 rank 0 of 2, 5001 bytes") != std::string::npos);
    }
}

TEST_CASE("a bucket's record reads back as written and refuses any broken rule", "[pack]")
{
    const bucket_record rec{"job", 65, 65, 70, 2,
                            {{"na", 2, 65, 66, 0x0000abcd}, {"na", 2, 67, 71, 0xffffffff},
                             {"nb", 1, 65, 70, 1}}};
    const std::string text = format_bucket(rec);
    CHECK(text == "iofwd-bucket 1\njob job\nbucket 65\nversions 65 70\nnodes 2\n"
                  "pack na 2 65 66 0000abcd\npack na 2 67 71 ffffffff\npack nb 1 65 70 00000001\n"
                  "end\n");
    bucket_record back;
    std::string why;
    REQUIRE_FALSE(parse_bucket(text, back, why));
    CHECK(back == rec);
    CHECK(part_holding(back, "na", 66) == &back.parts[0]);
    CHECK(part_holding(back, "na", 67) == &back.parts[1]);
    CHECK(part_holding(back, "nb", 70) == &back.parts[2]);
    CHECK(part_holding(back, "nb", 71) == nullptr);
    CHECK(part_holding(back, "nc", 66) == nullptr);

    // A record with a skip: the second layout; the skipped version is not
    // held by the node that skipped it, and is not complete.
    const bucket_record skips{"job", 65, 65, 67, 2,
                              {{"na", 2, 65, 67, 7}, {"nb", 1, 65, 65, 8},
                               {"nb", 1, 66, 66, 0, false, true}, {"nb", 1, 67, 67, 9, true}}};
    const std::string stext = format_bucket(skips);
    CHECK(stext == "iofwd-bucket 2\njob job\nbucket 65\nversions 65 67\nnodes 2\n"
                   "pack na 2 65 67 00000007\npack nb 1 65 65 00000008\nskip nb 1 66\n"
                   "manifest nb 1 67 00000009\nend\n");
    REQUIRE_FALSE(parse_bucket(stext, back, why));
    CHECK(back == skips);
    CHECK(part_holding(back, "nb", 66) == nullptr);
    CHECK(part_holding(back, "na", 66) == &back.parts[0]);
    CHECK(skipped(back, 66));
    CHECK_FALSE(skipped(back, 65));
    // A skip line in the first layout, or the second without one.
    auto v1 = stext;
    v1.replace(0, 14, "iofwd-bucket 1");
    CHECK(parse_bucket(v1, back, why) == errc::corrupt);
    auto v2 = text;
    v2.replace(0, 14, "iofwd-bucket 2");
    CHECK(parse_bucket(v2, back, why) == errc::corrupt);
    CHECK_THAT(why, Catch::Contains("without a skip line"));
    auto wide = stext;
    wide.replace(wide.find("skip nb 1 66"), 12, "skip nb 1 66 67");
    CHECK(parse_bucket(wide, back, why) == errc::corrupt);

    // Each case breaks one rule of a record that is otherwise the one
    // above, and is refused by that rule's words.
    const std::string head = "iofwd-bucket 1\njob job\nbucket 65\n";
    const std::string nodes = "versions 65 70\nnodes 2\n";
    const std::string na = "pack na 2 65 66 0000abcd\npack na 2 67 71 ffffffff\n";
    const std::string nb = "pack nb 1 65 70 00000001\n";
    struct bad_case {
        std::string text;
        const char* words;
    };
    const std::vector<bad_case> cases{
        {"iofwd-bucket 3\n" + text.substr(15), "first line"},
        {"iofwd-bucket 1\njob a/b\nbucket 65\n" + nodes + na + nb + "end\n", "job line"},
        {"iofwd-bucket 1\njob job\nbucket 0\n" + nodes + na + nb + "end\n", "bucket line"},
        {"iofwd-bucket 1\njob job\nbucket 065\n" + nodes + na + nb + "end\n", "bucket line"},
        {head + "versions 64 70\nnodes 2\n" + na + nb + "end\n", "versions line"},
        {head + "versions 70 65\nnodes 2\n" + na + nb + "end\n", "versions line"},
        {head + "versions 65 65601\nnodes 2\n" + na + nb + "end\n", "at most 65536"},
        {head + "versions 65 70\nnodes 0\n" + na + nb + "end\n", "nodes line"},
        {head + nodes + "pack na 2 64 66 0000abcd\npack na 2 67 71 ffffffff\n" + nb + "end\n",
         "bad pack, manifest or skip line"},
        {head + nodes + "pack na 2 65 66 0000ABCD\npack na 2 67 71 ffffffff\n" + nb + "end\n",
         "bad pack, manifest or skip line"},
        {head + nodes + "pack na 0 65 66 0000abcd\npack na 0 67 71 ffffffff\n" + nb + "end\n",
         "bad pack, manifest or skip line"},
        {head + nodes + "pack n/a 2 65 66 0000abcd\n" + nb + "end\n", "bad pack, manifest or skip line"},
        {head + nodes + "pack na 2 65 66 0000abcd\npack na 2 66 71 ffffffff\n" + nb + "end\n",
         "over node na's part of versions 65 to 66"},
        {head + nodes + "pack na 2 65 66 0000abcd\npack na 3 67 71 ffffffff\n" + nb + "end\n",
         "another number of ranks"},
        {head + nodes + "pack na 2 65 66 0000abcd\npack na 2 68 71 ffffffff\n" + nb + "end\n",
         "do not hold every version"},
        {head + nodes + "pack na 2 65 66 0000abcd\n" + nb + "end\n", "do not hold every version"},
        {head + nodes + nb + na + "end\n", "nodes are sorted"},
        {head + nodes + na + "pack nb 1 65 69 00000001\nend\n",
         "node nb's packs and manifests do not hold every version 65 to 70"},
        {head + nodes + na + "end\n", "lines are of 1 nodes, the record says 2"},
        {head + nodes + "end\n", "lines are of 0 nodes, the record says 2"},
        {head + nodes + na + "pack nb 1 65 69 00000001\nmanifest nb 1 69 00000002\nend\n",
         "over node nb's part of versions 65 to 69"},
        {head + nodes + na + "pack nb 1 65 68 00000001\nmanifest nb 1 69 70 00000002\nend\n",
         "bad pack, manifest or skip line"},
        {head + nodes + na + "pack nb 1 65 68 00000001\nmanifest nb 2 69 00000002\n" +
             "pack nb 1 70 70 00000003\nend\n",
         "another number of ranks"},
        {head + "versions 65 70\nnodes 3\n" + na + nb + "end\n", "the record says 3"},
        {head + nodes + na + nb, "end line"},
        {head + nodes + na + nb + "end\nmore\n", "end line"},
        {head + nodes + na + nb + "end", "line break"},
    };
    for (const auto& c : cases) {
        INFO(c.text);
        why.clear();
        CHECK(parse_bucket(c.text, back, why) == errc::corrupt);
        INFO(why);
        CHECK(why.find(c.words) != std::string::npos);
    }
    CHECK_FALSE(parse_bucket(head + nodes + na + nb + "end\n", back, why));

    // A node's part of a large version, in its own directory, between packs.
    const bucket_record mixed{"job", 65, 65, 70, 2,
                              {{"na", 2, 65, 71, 3},
                               {"nb", 1, 65, 68, 1},
                               {"nb", 1, 69, 69, 0xfeedf00d, true},
                               {"nb", 1, 70, 70, 2}}};
    const std::string mixed_text = format_bucket(mixed);
    CHECK(mixed_text.find("pack nb 1 65 68 00000001\nmanifest nb 1 69 feedf00d\n"
                          "pack nb 1 70 70 00000002\nend\n") != std::string::npos);
    REQUIRE_FALSE(parse_bucket(mixed_text, back, why));
    CHECK(back == mixed);
    CHECK(part_holding(back, "nb", 69) == &back.parts[2]);
    CHECK(back.parts[2].manifest);
}

#include <catch2/catch.hpp>

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

// Two versions of a node of 2 ranks (5000, 0, 4096 and 7 bytes).
struct sample {
    std::vector<std::vector<std::byte>> data{bytes_of(5000, 1), {}, bytes_of(4096, 3),
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
    CHECK(index.parts[1] == pack_part{11, 1, 2, 5040, 0, 0});
    CHECK(index.parts[2].offset == 5080);  // 8-aligned after an empty part
    // The manifests are those the one-object-per-rank layout writes.
    const auto ms = pack_manifests(index);
    REQUIRE(ms.size() == 2);
    CHECK(ms[0] == manifest{"job", "node-1", 11, 2,
                            {{0, 5000, crc32c(s.data[0])}, {1, 0, crc32c(s.data[1])}}});
    CHECK(ms[1].version == 12);
    CHECK(ms[1].entries.size() == 2);
    // A human can read the index with tail.
    const std::string text(reinterpret_cast<const char*>(pack.data()), pack.size());
    CHECK(text.find("iofwd-pack 1\njob job\nnode node-1\nparts 4\npart 11 0 2 0 5000 ") !=
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
    CHECK(build_pack("", "node", s.inputs, pack, why) == errc::invalid_argument);
    CHECK(build_pack("job", "no\nde", s.inputs, pack, why) == errc::invalid_argument);
}

TEST_CASE("a torn or altered pack is refused in words, whatever it claims", "[pack]")
{
    sample s;
    std::vector<std::byte> good;
    std::string why;
    REQUIRE_FALSE(build_pack("job", "node", s.inputs, good, why));
    pack_index index;
    // Torn anywhere: no trailer at the end.
    for (std::size_t cut : {std::size_t{0}, std::size_t{10}, good.size() / 2, good.size() - 1}) {
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
    for (std::size_t at = 0; at < good.size(); at += 13) {
        if (padding(at))
            continue;
        INFO("byte " << at);
        auto bad = good;
        bad[at] ^= std::byte{0x20};
        why.clear();
        CHECK(read_back(bad, index, why) == errc::corrupt);
        CHECK_FALSE(why.empty());
    }
    // An index whose lengths reach past its region, with a matching crc32c:
    // refused by the bounds, not by a read past the object.
    constexpr std::uint64_t offset = 4096;  // where a forged index begins
    auto forged = [&](const std::string& text) {
        const auto crc = crc32c(std::as_bytes(std::span(text.data(), text.size())));
        why.clear();
        return parse_pack_index(text, crc, offset, index, why);
    };
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 1\npart 1 0 1 0 18446744073709551615 "
                 "00000000\nend\n") == errc::corrupt);
    CHECK(why.find("not where the parts before end") != std::string::npos);
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 4194304\npart 1 0 1 0 1 00000000\nend\n") ==
          errc::corrupt);
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 99999999999\nend\n") == errc::corrupt);
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 1\npart 1 0 1 0 1 0000000\nend\n") ==
          errc::corrupt);
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 1\npart 1 0 1 8 1 00000000\nend\n") ==
          errc::corrupt);
    CHECK(forged("iofwd-pack 1\njob j\nnode n\nparts 2\npart 1 0 2 0 1 00000000\npart 1 0 2 48 "
                 "1 00000000\nend\n") == errc::corrupt);
    // A header that disagrees with its index line.
    auto moved = good;
    REQUIRE_FALSE(read_back(good, index, why));
    pack_part lie = index.parts[0];
    lie.size = 4999;
    CHECK(check_pack_part(std::span(moved).first(pack_part_header_size), lie, why) ==
          errc::corrupt);
    CHECK(why.find("the index says version 11 rank 0 of 2, 4999 bytes") != std::string::npos);
}

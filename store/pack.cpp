#include "store/pack.hpp"

#include <cstring>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "store/byte_fields.hpp"
#include "store/record_text.hpp"

namespace iofwd::store {
namespace {

constexpr std::uint32_t part_magic = 0x4b504f49;  // "IOPK"
constexpr char trailer_magic[8] = {'I', 'O', 'F', 'W', 'D', 'P', 'A', 'K'};
// Ranks of one node, as the protocol bounds them (proto::max_ranks).
constexpr std::uint32_t max_ranks = 65536;
constexpr std::size_t max_name = 255;

using fields::get;
using fields::put;

std::uint64_t align8(std::uint64_t n)
{
    return (n + 7) / 8 * 8;
}

// Header layout: magic, crc32c of [8, 40), version, size, rank, ranks, the
// bytes' crc32c, 4 bytes of zeros.
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

bool plain_name(std::string_view s)
{
    return !s.empty() && s.size() <= max_name && s.find('\n') == std::string_view::npos;
}

}  // namespace

std::error_code build_pack(const std::string& job, const std::string& node,
                           std::span<const pack_input> inputs, std::vector<std::byte>& out,
                           std::string& why)
{
    auto refuse = [&](std::string what) {
        why = std::move(what);
        return make_error_code(errc::invalid_argument);
    };
    if (!plain_name(job) || !plain_name(node))
        return refuse("a job or node name that is empty, too long or holds a line break");
    if (inputs.empty() || inputs.size() > pack_max_parts)
        return refuse(fmt::format("{} parts: a pack holds 1 to {}", inputs.size(), pack_max_parts));
    std::vector<pack_part> parts;
    parts.reserve(inputs.size());
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& in = inputs[i];
        // Each version's ranks 0 .. ranks-1 in order, versions ascending.
        const bool first_of_version = i == 0 || in.version != inputs[i - 1].version;
        const std::uint32_t want = first_of_version ? 0 : inputs[i - 1].rank + 1;
        if ((!first_of_version && in.ranks != inputs[i - 1].ranks) ||
            (first_of_version && i > 0 &&
             (in.version < inputs[i - 1].version || inputs[i - 1].rank + 1 != inputs[i - 1].ranks)))
            return refuse(fmt::format("part {} (version {} rank {}): versions must ascend, each "
                                      "with all of its ranks",
                                      i, in.version, in.rank));
        if (in.ranks == 0 || in.ranks > max_ranks || in.rank != want)
            return refuse(fmt::format("part {} (version {}): rank {} of {}, expected rank {}", i,
                                      in.version, in.rank, in.ranks, want));
        pack_part p{in.version, in.rank, in.ranks, at, in.bytes.size(), crc32c(in.bytes)};
        at = align8(at + pack_part_header_size + p.size);
        parts.push_back(p);
    }
    if (inputs.back().rank + 1 != inputs.back().ranks)
        return refuse(fmt::format("version {} lacks ranks {} and up", inputs.back().version,
                                  inputs.back().rank + 1));
    std::string index = fmt::format("iofwd-pack 1\njob {}\nnode {}\nparts {}\n", job, node,
                                    parts.size());
    for (const auto& p : parts)
        index += fmt::format("part {} {} {} {} {} {:08x}\n", p.version, p.rank, p.ranks, p.offset,
                             p.size, p.crc32c);
    index += "end\n";
    out.assign(at + index.size() + pack_trailer_size, std::byte{0});
    for (std::size_t i = 0; i < parts.size(); ++i) {
        encode_header(parts[i], out.data() + parts[i].offset);
        if (!inputs[i].bytes.empty())
            std::memcpy(out.data() + parts[i].offset + pack_part_header_size,
                        inputs[i].bytes.data(), inputs[i].bytes.size());
    }
    std::memcpy(out.data() + at, index.data(), index.size());
    std::byte* t = out.data() + at + index.size();
    std::memcpy(t, trailer_magic, sizeof trailer_magic);
    put(t + 8, at);
    put(t + 16, static_cast<std::uint64_t>(index.size()));
    put(t + 24, crc32c(std::as_bytes(std::span(index.data(), index.size()))));
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
    if (offset > room || length != room - offset)
        return corrupt(why, fmt::format("the pack's index [{}, +{}) is not what lies between its "
                                        "parts and its trailer in {} bytes",
                                        offset, length, object_size));
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
    using text::number;
    if (crc32c(std::as_bytes(std::span(index.data(), index.size()))) != crc)
        return corrupt(why, "the pack's index does not match its crc32c");
    pack_index x;
    std::string_view line, v;
    if (!next_line(index, line) || line != "iofwd-pack 1")
        return corrupt(why, "not an iofwd pack index (first line)");
    if (!next_line(index, line) || !field(line, "job", v) || !plain_name(v))
        return corrupt(why, "missing or bad job line");
    x.job = v;
    if (!next_line(index, line) || !field(line, "node", v) || !plain_name(v))
        return corrupt(why, "missing or bad node line");
    x.node = v;
    std::uint64_t count = 0;
    if (!next_line(index, line) || !field(line, "parts", v) || !number(v, count) || count == 0 ||
        count > pack_max_parts)
        return corrupt(why, fmt::format("missing or bad parts line (1 to {})", pack_max_parts));
    // Each line is at least "part 0 0 1 0 0 00000000": a count the text
    // cannot hold is refused before anything is sized by it.
    if (count > index.size() / 24 + 1)
        return corrupt(why, fmt::format("{} parts claimed in an index of {} bytes", count,
                                        index.size()));
    x.parts.reserve(count);
    std::uint64_t next_offset = 0;
    for (std::uint64_t i = 0; i < count; ++i) {
        pack_part p;
        if (!next_line(index, line) || !field(line, "part", v))
            return corrupt(why, fmt::format("part line {} of {} missing", i + 1, count));
        std::string_view f[6];
        for (int k = 0; k < 6; ++k) {
            const auto sp = v.find(' ');
            f[k] = v.substr(0, sp);
            v = sp == std::string_view::npos ? std::string_view{} : v.substr(sp + 1);
        }
        if (!v.empty() || !number(f[0], p.version) || !number(f[1], p.rank) ||
            !number(f[2], p.ranks) || !number(f[3], p.offset) || !number(f[4], p.size) ||
            f[5].size() != 8 || !number(f[5], p.crc32c, 16))
            return corrupt(why, fmt::format("part line {}: '{}'", i + 1, line));
        const pack_part* prev = x.parts.empty() ? nullptr : &x.parts.back();
        const bool first_of_version = !prev || p.version != prev->version;
        const std::uint32_t want = first_of_version ? 0 : prev->rank + 1;
        if (p.ranks == 0 || p.ranks > max_ranks || p.rank != want ||
            (!first_of_version && p.ranks != prev->ranks) ||
            (first_of_version && prev && (p.version < prev->version || prev->rank + 1 != prev->ranks)))
            return corrupt(why, fmt::format("part line {} (version {} rank {} of {}): versions "
                                            "must ascend, each with all of its ranks once",
                                            i + 1, p.version, p.rank, p.ranks));
        // In the parts' region, in order, none over another: no length the
        // index claims reaches past where the index itself begins.
        if (p.offset != next_offset || p.offset > index_offset ||
            index_offset - p.offset < pack_part_header_size ||
            p.size > index_offset - p.offset - pack_part_header_size)
            return corrupt(why, fmt::format("part line {}: bytes [{}, +{}) are not where the "
                                            "parts before end, within the {} bytes of parts",
                                            i + 1, p.offset, p.size, index_offset));
        next_offset = align8(p.offset + pack_part_header_size + p.size);
        x.parts.push_back(p);
    }
    if (x.parts.back().rank + 1 != x.parts.back().ranks)
        return corrupt(why, fmt::format("version {} lacks ranks {} and up",
                                        x.parts.back().version, x.parts.back().rank + 1));
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
    if (get<std::uint32_t>(h) != part_magic ||
        crc32c(std::span(h + 8, pack_part_header_size - 8)) != get<std::uint32_t>(h + 4))
        return corrupt(why, fmt::format("no valid part header at {}", expected.offset));
    pack_part found{get<std::uint64_t>(h + 8), get<std::uint32_t>(h + 24),
                    get<std::uint32_t>(h + 28), expected.offset, get<std::uint64_t>(h + 16),
                    get<std::uint32_t>(h + 32)};
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

}  // namespace iofwd::store

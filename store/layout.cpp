#include "store/layout.hpp"

#include <charconv>

#include <fmt/format.h>

#include "errors.hpp"
#include "store/pack.hpp"
#include "store/record_text.hpp"

namespace iofwd::store {

std::string version_dir(const std::string& job, std::uint64_t version)
{
    return fmt::format("{}/v{:08}", job, version);
}

std::string data_object(const std::string& job, std::uint64_t version, const std::string& node,
                        std::uint32_t rank)
{
    return fmt::format("{}/{}.r{:04}", version_dir(job, version), node, rank);
}

std::string manifest_object(const std::string& job, std::uint64_t version,
                            const std::string& node)
{
    return fmt::format("{}/{}.manifest", version_dir(job, version), node);
}

std::string complete_object(const std::string& job, std::uint64_t version)
{
    return fmt::format("{}/{}", version_dir(job, version), complete_name);
}

std::string arrivals_object(const std::string& job, std::uint64_t version)
{
    return fmt::format("{}/{}", version_dir(job, version), arrivals_name);
}

std::string run_object(const std::string& job, const std::string& run)
{
    return fmt::format("{}/{}/{}", job, runs_dir, run);
}

std::string format_object(const std::string& job)
{
    return fmt::format("{}/{}", job, format_name);
}

std::string format_job_format(std::uint32_t format)
{
    return fmt::format("{}{}\n", format_head, format);
}

std::optional<std::uint32_t> parse_job_format(std::string_view text)
{
    if (!text.starts_with(format_head) || !text.ends_with('\n'))
        return std::nullopt;
    text.remove_prefix(format_head.size());
    text.remove_suffix(1);
    std::uint32_t n = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (err != std::errc{} || end != text.data() + text.size() || text.empty() ||
        text.front() == '0' || n < 2)
        return std::nullopt;
    return n;
}

std::string report_object(const std::string& job, const std::string& key, const std::string& node)
{
    return fmt::format("{}/{}/{}/{}{}", job, reports_dir, key, node, report_suffix);
}

std::string journal_object(const std::string& job, const std::string& node)
{
    return fmt::format("{}/.{}{}", job, node, journal_suffix);
}

std::string bucket_dir(const std::string& job, std::uint64_t bucket)
{
    return fmt::format("{}/{}/b{:08}", job, packs_dir, bucket);
}

std::string pack_object(const std::string& job, std::uint64_t bucket, const std::string& node,
                        std::uint64_t first, std::uint64_t last)
{
    return fmt::format("{}/{}.v{:08}-{:08}", bucket_dir(job, bucket), node, first, last);
}

std::string bucket_complete_object(const std::string& job, std::uint64_t bucket,
                                   std::uint64_t last)
{
    return fmt::format("{}/{}.v{:08}", bucket_dir(job, bucket), complete_name, last);
}

std::string bucket_retired_object(const std::string& job, std::uint64_t bucket,
                                  std::uint64_t upto)
{
    return fmt::format("{}/{}.v{:08}", bucket_dir(job, bucket), retired_name, upto);
}

std::string bucket_removed_object(const std::string& job, std::uint64_t bucket,
                                  std::uint64_t version)
{
    return fmt::format("{}/{}.v{:08}", bucket_dir(job, bucket), removed_name, version);
}

std::string bucket_arrivals_object(const std::string& job, std::uint64_t bucket)
{
    return fmt::format("{}/{}", bucket_dir(job, bucket), arrivals_name);
}

namespace {

// "<letter><digits>" -> the number.
std::optional<std::uint64_t> numbered(std::string_view name, char letter)
{
    if (name.size() < 2 || name[0] != letter)
        return std::nullopt;
    std::uint64_t v = 0;
    const auto* first = name.data() + 1;
    const auto* last = name.data() + name.size();
    auto [p, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || p != last)
        return std::nullopt;
    return v;
}

}  // namespace

std::optional<std::uint64_t> parse_version_dir(std::string_view name)
{
    return numbered(name, 'v');
}

namespace {

// numbered(), and only as "<letter><8 or more digits>" is written.
std::optional<std::uint64_t> numbered8(std::string_view name, char letter)
{
    const auto v = numbered(name, letter);
    if (!v || fmt::format("{}{:08}", letter, *v) != name)
        return std::nullopt;
    return v;
}

// "<head>.v<8 digits or more>"
std::optional<std::uint64_t> headed_version(std::string_view name, std::string_view head)
{
    if (!name.starts_with(head) || name.size() <= head.size() || name[head.size()] != '.')
        return std::nullopt;
    return numbered8(name.substr(head.size() + 1), 'v');
}

}  // namespace

std::optional<std::uint64_t> parse_bucket_dir(std::string_view name)
{
    return numbered8(name, 'b');
}

std::optional<std::uint64_t> parse_bucket_complete(std::string_view name)
{
    return headed_version(name, complete_name);
}

std::optional<std::uint64_t> parse_bucket_retired(std::string_view name)
{
    return headed_version(name, retired_name);
}

std::optional<std::uint64_t> parse_bucket_removed(std::string_view name)
{
    return headed_version(name, removed_name);
}

std::optional<pack_name> parse_pack_name(std::string_view name)
{
    const auto v = name.rfind(".v");
    const auto dash = name.rfind('-');
    if (v == std::string_view::npos || v == 0 || dash == std::string_view::npos || dash < v)
        return std::nullopt;
    const auto first = numbered8(name.substr(v + 1, dash - v - 1), 'v');
    const auto last = numbered8(std::string("v").append(name.substr(dash + 1)), 'v');
    if (!first || !last || *first == 0 || *first > *last)
        return std::nullopt;
    return pack_name{std::string(name.substr(0, v)), *first, *last};
}

std::optional<std::uint64_t> parse_pack_last(std::string_view name)
{
    const auto p = parse_pack_name(name);
    return p ? std::optional<std::uint64_t>(p->last) : std::nullopt;
}

std::string format_manifest(const manifest& m)
{
    std::string out = fmt::format("iofwd-manifest {}\njob {}\nnode {}\nversion {}\nranks {}\n",
                                  m.bucket ? 2 : 1, m.job, m.node, m.version, m.ranks);
    if (m.bucket)
        out += fmt::format("bucket {} nodes {}\n", m.bucket, m.nodes);
    for (const auto& e : m.entries)
        out += fmt::format("rank {} size {} crc32c {:08x}\n", e.rank, e.size, e.crc32c);
    out += "end\n";
    return out;
}

using text::field;
using text::next_line;
using text::number;

std::error_code parse_manifest(std::string_view text, manifest& out, std::string& why)
{
    manifest m;
    std::string_view line, v;
    auto bad = [&](std::string msg) {
        why = std::move(msg);
        return make_error_code(errc::corrupt);
    };
    if (!next_line(text, line) || (line != "iofwd-manifest 1" && line != "iofwd-manifest 2"))
        return bad("not an iofwd manifest (first line)");
    const bool in_bucket = line == "iofwd-manifest 2";
    if (!next_line(text, line) || !field(line, "job", v))
        return bad("missing job line");
    m.job = v;
    if (!next_line(text, line) || !field(line, "node", v))
        return bad("missing node line");
    m.node = v;
    if (!next_line(text, line) || !field(line, "version", v) || !number(v, m.version))
        return bad("missing or bad version line");
    if (!next_line(text, line) || !field(line, "ranks", v) || !number(v, m.ranks) || m.ranks == 0)
        return bad("missing or bad ranks line");
    if (in_bucket) {
        // bucket B nodes N, as format_manifest writes it.
        std::string_view w[4];
        if (!next_line(text, line) || !text::words(line, w) || w[0] != "bucket" ||
            w[2] != "nodes" || !text::canonical(w[1], m.bucket) ||
            !text::canonical(w[3], m.nodes) || m.bucket == 0 || m.bucket > m.version ||
            m.version - m.bucket >= bucket_max_versions || m.nodes == 0 ||
            m.nodes > manifest_max_nodes)
            return bad(fmt::format("missing or bad bucket line '{}'", line));
    }
    for (std::uint32_t i = 0; i < m.ranks; ++i) {
        manifest_entry e;
        // rank R size S crc32c C
        if (!next_line(text, line))
            return bad(fmt::format("manifest ends after {} of {} ranks", i, m.ranks));
        const auto s1 = line.find(" size ");
        const auto s2 = line.find(" crc32c ");
        if (!field(line.substr(0, s1), "rank", v) || s1 == std::string_view::npos ||
            s2 == std::string_view::npos || !number(v, e.rank) ||
            !number(line.substr(s1 + 6, s2 - s1 - 6), e.size) ||
            !number(line.substr(s2 + 8), e.crc32c, 16) || e.rank != i)
            return bad(fmt::format("bad entry line '{}'", line));
        m.entries.push_back(e);
    }
    if (!next_line(text, line) || line != "end")
        return bad("missing end line (truncated manifest?)");
    out = std::move(m);
    return {};
}

std::string format_complete(const complete_record& c)
{
    std::string out = fmt::format("iofwd-complete 1\njob {}\nversion {}\nnodes {}\n", c.job,
                                  c.version, c.nodes.size());
    for (const auto& n : c.nodes)
        out += fmt::format("node {} ranks {} manifest-crc32c {:08x}\n", n.node, n.ranks,
                           n.manifest_crc32c);
    out += "end\n";
    return out;
}

std::error_code parse_complete(std::string_view text, complete_record& out, std::string& why)
{
    complete_record c;
    std::string_view line, v;
    std::size_t nodes = 0;
    auto bad = [&](std::string msg) {
        why = std::move(msg);
        return make_error_code(errc::corrupt);
    };
    if (!next_line(text, line) || line != "iofwd-complete 1")
        return bad("not an iofwd COMPLETE record (first line)");
    if (!next_line(text, line) || !field(line, "job", v))
        return bad("missing job line");
    c.job = v;
    if (!next_line(text, line) || !field(line, "version", v) || !number(v, c.version))
        return bad("missing or bad version line");
    if (!next_line(text, line) || !field(line, "nodes", v) || !number(v, nodes) || nodes == 0)
        return bad("missing or bad nodes line");
    for (std::size_t i = 0; i < nodes; ++i) {
        complete_node n;
        if (!next_line(text, line) || !field(line, "node", v))
            return bad(fmt::format("record ends after {} of {} nodes", i, nodes));
        const auto s1 = v.find(" ranks ");
        const auto s2 = v.find(" manifest-crc32c ");
        if (s1 == std::string_view::npos || s2 == std::string_view::npos || s1 == 0 ||
            !number(v.substr(s1 + 7, s2 - s1 - 7), n.ranks) ||
            !number(v.substr(s2 + 17), n.manifest_crc32c, 16))
            return bad(fmt::format("bad node line '{}'", line));
        n.node = v.substr(0, s1);
        c.nodes.push_back(std::move(n));
    }
    if (!next_line(text, line) || line != "end")
        return bad("missing end line (truncated record?)");
    out = std::move(c);
    return {};
}

std::string format_run(const run_record& r)
{
    // A run that packs nothing keeps the first layout, which an older iofwd
    // reads.
    if (r.pack_versions == 0)
        return fmt::format("iofwd-run 1\njob {}\nrun {}\nfirst-version {}\nnodes {}\nend\n",
                           r.job, r.run, r.first_version, r.nodes);
    return fmt::format(
        "iofwd-run 2\njob {}\nrun {}\nfirst-version {}\nnodes {}\npack-versions {}\nend\n",
        r.job, r.run, r.first_version, r.nodes, r.pack_versions);
}

std::error_code parse_run(std::string_view text, run_record& out, std::string& why)
{
    run_record r;
    std::string_view line, v;
    auto bad = [&](std::string msg) {
        why = std::move(msg);
        return make_error_code(errc::corrupt);
    };
    if (!next_line(text, line) || (line != "iofwd-run 1" && line != "iofwd-run 2"))
        return bad("not an iofwd run record (first line)");
    const bool packs = line == "iofwd-run 2";
    if (!next_line(text, line) || !field(line, "job", v))
        return bad("missing job line");
    r.job = v;
    if (!next_line(text, line) || !field(line, "run", v))
        return bad("missing run line");
    r.run = v;
    if (!next_line(text, line) || !field(line, "first-version", v) ||
        !number(v, r.first_version) || r.first_version == 0)
        return bad("missing or bad first-version line");
    if (!next_line(text, line) || !field(line, "nodes", v) || !number(v, r.nodes) || r.nodes == 0)
        return bad("missing or bad nodes line");
    if (packs && (!next_line(text, line) || !field(line, "pack-versions", v) ||
                  !number(v, r.pack_versions) || r.pack_versions == 0 ||
                  r.pack_versions > bucket_max_versions))
        return bad(fmt::format("missing or bad pack-versions line (1 to {})", bucket_max_versions));
    if (!next_line(text, line) || line != "end")
        return bad("missing end line (truncated record?)");
    out = std::move(r);
    return {};
}

}  // namespace iofwd::store

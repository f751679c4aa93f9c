// libFuzzer harness: the store's text records (layout.hpp) as a damaged or
// hostile store holds them. The input is an object's text; it goes through
// parse_manifest, parse_complete and parse_run (each recognises its own first
// line) and parse_version_dir. For each it checks:
//  - a refusal is errc::corrupt, says why, and leaves the output alone;
//  - what parses is well-formed as the format describes it (a manifest has
//    one entry per rank, in rank order; a COMPLETE record at least one node;
//    a run a first version and nodes; no field holds a line break);
//  - format_* of the parsed value parses back to an equal value, so what a
//    daemon rewrites from a record it read means the same.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "check.hpp"
#include "errors.hpp"
#include "store/layout.hpp"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_manifest(text);
    check_complete(text);
    check_run(text);
    check_version_dir(text);
    return 0;
}
